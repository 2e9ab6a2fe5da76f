/* What the parts of pytriton's backend share: the model and instance states, the batch being
 * built, and the helpers every part uses. The parts, in the order a request meets them:
 *
 *   backend.c    the entry points Triton calls; a model's configuration; the readiness gate
 *   instance.c   an instance's connection to its worker handler (greeting, reconnection, the
 *                cause of a worker's death) and its idle watcher
 *   requests.c   Triton's requests -> one InferBatch header and its payload (the way in)
 *   execute.c    a plain callable's batch: send, wait for the answer, respond (one thread)
 *   relay.c      streams and coroutines: send and return; a reader thread answers later
 *   route.c      a multiplexed model's batch: the free instance that holds its variants
 *   responses.c  the worker's answer -> Triton's responses (the way out)
 *   metrics.c    the worker's metric families -> Triton's /metrics
 *   util.c       clocks, logging, errors, data types
 *   wire.c, arena.c, json.c   the wire's encoding, shared memory, the config's JSON */
#ifndef PYTRITON_BACKEND_H
#define PYTRITON_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "arena.h"
#include "json.h"
#include "triton_api.h"
#include "wire.h"

#define PYT_MAX_ERROR 1024
#define PYT_CANCEL_CHECK_S 0.1   /* receive timeout: how often a wait looks at cancellations */
#define PYT_LIVENESS_CHECK_S 1.0 /* how often a wait looks whether the worker lives */
#define PYT_RECONNECT_S 5.0      /* how long a batch waits for a replaced worker to answer */

/* ---- util.c ---- */

double pyt_now_s(void);
uint64_t pyt_now_ns(void);
void pyt_log(TRITONSERVER_LogLevel level, int line, const char* format, ...) __attribute__((format(printf, 3, 4)));
#define PYT_INFO(...) pyt_log(TRITONSERVER_LOG_INFO, __LINE__, __VA_ARGS__)
#define PYT_WARN(...) pyt_log(TRITONSERVER_LOG_WARN, __LINE__, __VA_ARGS__)
#define PYT_ERROR(...) pyt_log(TRITONSERVER_LOG_ERROR, __LINE__, __VA_ARGS__)
TRITONSERVER_Error* pyt_error(TRITONSERVER_Error_Code code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));
/* 0 for no error; else -1, the error's message kept in `why` (when given) and the error freed. */
int pyt_checked(TRITONSERVER_Error* error, char* why, size_t why_size);
int pyt_pid_alive(int pid);
void pyt_set_timeouts(int fd, double seconds);
/* numpy's dtype.str of a Triton type ("bytes" for BYTES, as pytriton's codec names it); NULL if none. */
const char* pyt_numpy_dtype(TRITONSERVER_DataType type);
TRITONSERVER_DataType pyt_triton_dtype(const pyt_mv* numpy);

/* ---- a model (backend.c) ---- */

typedef struct {
  char name[256];
  uint64_t version;
  uint32_t output_count;
  int batching;
  int sequences;
  int decoupled;
  int relayed;       /* execute returns before the answers exist (streams, coroutines) */
  int one_at_a_time; /* a plain generator: the next batch waits until this one's stream ended */
  uint32_t continuous; /* continuous batching: the streams one instance runs at once (0: not such a model) */
  int stamps;
  int tracing;
  int metrics;
  double metrics_period_s;
  int worker_pid;
  double handshake_timeout_s;
  double spin_s; /* how long a wait for a one-request batch's answer polls before it sleeps */
  double hold_s; /* how long a busy instance waits before its next batch (0: never; see execute.c) */
  uint64_t max_batch_size;
  char** data_sockets;
  uint32_t socket_count;
  char* instance_names; /* pytriton.instance_names (JSON list, worker order) or NULL: names say <group>_<k> */
  int gate; /* pytriton's readiness gate: no worker, loads once a file exists */
  int refuse; /* what a stop reloads a model as (pytriton.refuse): no worker, every request refused */
  struct pyt_router* router; /* a multiplexed model's (route.c); NULL for every other, or where not routed */
  /* The server's stopping flag (pytriton/ipc/stopping.py), mapped from its file: REFUSING where
   * a stop could not reload the model as a refusing one (batches that reach execute are then
   * refused as retryable), ABANDONED after a second signal (NULL: never). */
  const volatile uint8_t* stopping;
} pyt_model;

/* Whether `model` refuses new batches now: the server stops, and the model keeps no sequences
 * (the later requests of a sequence already begun are answered until the server's exit). */
static inline int pyt_refusing(const pyt_model* model) {
  return model->stopping != NULL && model->stopping[0] != 0 && !model->sequences;
}

/* Whether a second signal gave up the requests in flight: a wait for the worker answers them
 * UNAVAILABLE (pyt_abandoned_text) instead, so that their clients hear before the server ends. */
static inline int pyt_abandoned(const pyt_model* model) {
  return model->stopping != NULL && model->stopping[0] == PYT_STOPPING_ABANDONED;
}

/* ---- a batch on its way in (requests.c) ---- */

/* One input name (and data type) across the requests of a batch. */
typedef struct {
  const char* name;
  TRITONSERVER_DataType dtype;
  const char* numpy;
  const int64_t** shapes; /* per request; NULL where it lacks the tensor */
  uint32_t* dims;
  uint64_t* sizes;
  uint64_t* offsets;
  uint8_t* in_shm;
  uint32_t* first_piece; /* per request: its first buffer in `pieces` */
  uint32_t* piece_count;
} pyt_column;

typedef struct {
  const void* base;
  uint64_t size;
} pyt_piece;

/* The InferBatch being built from Triton's requests, reused batch after batch. */
typedef struct {
  pyt_column* columns;
  uint32_t column_count;
  uint32_t column_cap;
  uint32_t request_cap;
  pyt_piece* pieces;
  uint32_t piece_count;
  uint32_t piece_cap;
  struct iovec* iov; /* [0] prefix, [1] header, [2] its padding, then the payload */
  uint32_t iov_count;
  uint32_t iov_cap;
  uint8_t prefix[PYT_PREFIX_BYTES];
  pyt_buf header;
  pyt_buf scratch;
  size_t* ends;
  uint64_t payload;
  size_t total;
} pyt_outgoing;

/* Everything an InferBatch needs to know of the batch. */
typedef struct {
  TRITONBACKEND_Request** requests; /* the live ones, in batch order */
  uint32_t count;
  int64_t batch_id;
  uint64_t exec_start;
  pyt_arena* arena;                 /* NULL: every tensor inline (batches that overlap) */
  const int64_t* previous_stamps;   /* NULL, or the previous batch's PYT_STAMP_COUNT stamps */
} pyt_batch_spec;

/* Lay `spec`'s batch out in `out` (header in out->header, payload in out->iov). 0, or -1 with `why`. */
int pyt_build_batch(const pyt_model* model, pyt_outgoing* out, const pyt_batch_spec* spec, char* why,
                    size_t why_size);
/* The rows of the batch last built (Triton's batch statistics count rows). */
uint64_t pyt_batch_rows(const pyt_model* model, const pyt_outgoing* out, uint32_t count);
void pyt_outgoing_free(pyt_outgoing* out);
/* Send the batch last built. 0, or -1 with errno. */
int pyt_send_batch(int fd, pyt_outgoing* out);
/* Send a header-only message. 0, or -1 with errno. */
int pyt_send_header(int fd, const pyt_buf* header);

/* ---- the way out (responses.c) ---- */

/* Fill `response` with request `slot`'s outputs from the worker's `columns`. With `request`
 * given and the model having several outputs, only those the request asked for go. 0, or -1
 * with `why` (the response is then left to the caller to delete). */
int pyt_fill_response(TRITONBACKEND_Response* response, const pyt_model* model, pyt_mv* columns, uint32_t slot,
                      const pyt_message* message, const uint8_t* shm, size_t shm_size,
                      TRITONBACKEND_Request* request, char* why, size_t why_size);
/* An error response for a request (or, with `factory` instead, for a stream), FINAL. */
void pyt_send_error(TRITONBACKEND_Request* request, TRITONBACKEND_ResponseFactory* factory,
                    TRITONSERVER_Error_Code code, const char* text);
/* The text of a worker's per-request error (a STR value), NUL-terminated, malloc'd; NULL if none. */
char* pyt_error_text(const pyt_mv* error);
/* Triton's code for request `slot`'s error from a BatchResult's codes (protocol.ErrorCode; an
 * empty tuple or none: INTERNAL). */
TRITONSERVER_Error_Code pyt_error_code(const pyt_mv* codes, uint32_t slot);

/* ---- an instance (instance.c) ---- */

struct pyt_relay;
struct pyt_metrics;

typedef struct {
  pyt_model* model;
  TRITONBACKEND_ModelInstance* triton;
  uint32_t index;
  char data_socket[sizeof(((struct sockaddr_un*)0)->sun_path)];
  int fd;
  int worker_pid;
  pthread_mutex_t send_lock; /* a message's datagrams go together (execute and the relay both send) */
  pyt_arena arena;           /* inputs over 64 KiB (plain callables only) */
  pyt_mapping mapping;       /* the worker's outputs over 64 KiB (plain callables only) */
  pyt_outgoing out;
  pyt_buf received;
  pyt_mv_pool pool;
  int64_t batch_id;
  double typical_answer_s; /* running average of the waits for an answer */
  double last_done_s;      /* when the last execute ended (0: none yet) */
  int64_t last_stamps[PYT_STAMP_COUNT];
  int has_last_stamps;
  uint8_t* answered;       /* per request of the batch: ANSWERED_* */
  uint8_t* cancelled;
  uint32_t flags_cap;
  /* the idle watcher: gives the arena and mappings back after a quiet spell */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t watcher;
  int watcher_started;
  int closing;
  double last_batch;
  int idle_released;
  struct pyt_relay* relay;     /* relayed models */
  struct pyt_metrics* metrics; /* when the worker's metrics go to Triton's /metrics */
  uint32_t in_flight;          /* requests sent and not answered (plain callables) */
  char metrics_path[sizeof(((struct sockaddr_un*)0)->sun_path)]; /* the Welcome's */
  int greeting;                /* the Welcome's: which greeting of the handler this instance's is */
} pyt_instance;

enum { PYT_ANSWERED_OK = 1, PYT_ANSWERED_ERROR = 2 };

pyt_instance* pyt_instance_new(pyt_model* model, TRITONBACKEND_ModelInstance* triton, uint32_t index);
void pyt_instance_free(pyt_instance* instance);
/* Connect to the worker's data socket and greet it, trying for `timeout_s` (less when the
 * worker process is gone). Sets instance->fd. 0, or -1 with `why`. */
int pyt_instance_connect(pyt_instance* instance, double timeout_s, char* why, size_t why_size);
void pyt_instance_disconnect(pyt_instance* instance);
/* Why the worker process `pid` ended, as its owner wrote it (waiting briefly for the note), or
 * a plain statement. */
void pyt_death_cause(const pyt_instance* instance, int pid, char* out, size_t out_size);
int pyt_ensure_flags(pyt_instance* instance, uint32_t count);

/* ---- the two ways to run a batch ---- */

void pyt_execute(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count);          /* execute.c */
void pyt_execute_relayed(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count);  /* relay.c */
int pyt_relay_start(pyt_instance* instance);
void pyt_relay_stop(pyt_instance* instance);
uint32_t pyt_relay_open_requests(pyt_instance* instance);

/* Requests answered before the batch goes: cancelled in the queue, or the sequence batcher's
 * null requests. Returns how many live requests were kept: in `live`, their positions in `live_index`. */
uint32_t pyt_answer_early(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count,
                          TRITONBACKEND_Request** live, uint32_t* live_index);
/* The refusing model's execute (model->refuse): every request refused as retryable, released. */
void pyt_refuse_all(const pyt_model* model, TRITONBACKEND_Request** requests, uint32_t count);
/* The error of a request given up by a second signal (pytriton.ipc.stopping.abandoned). */
void pyt_abandoned_text(const pyt_model* model, char* out, size_t out_size);
/* Report Triton's statistics of a batch and release its requests. */
void pyt_finish_batch(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count, uint64_t rows,
                      uint32_t live_count, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end);

/* ---- route.c: multiplexed models ---- */

typedef struct pyt_router pyt_router;

/* The router of a model with `instances` instances, from its pytriton.multiplex parameter (JSON);
 * NULL with `why` when it cannot be read. */
pyt_router* pyt_router_new(const char* config, uint32_t instances, char* why, size_t why_size);
void pyt_router_free(pyt_router* router);
/* An instance starts (it may be sent batches) or ends. */
void pyt_router_join(pyt_router* router, pyt_instance* instance);
void pyt_router_leave(pyt_router* router, pyt_instance* instance);
/* The instance's worker starts afresh (it connected again): it holds no variant. */
void pyt_router_forget(pyt_router* router, const pyt_instance* instance);
/* The free instance that is to serve the batch `requests` that reached `own`'s thread, marked
 * busy and its mirror updated; give it back with pyt_route_done once the batch is answered. */
pyt_instance* pyt_route(pyt_router* router, pyt_instance* own, TRITONBACKEND_Request** requests, uint32_t count);
void pyt_route_done(pyt_router* router, pyt_instance* chosen);

/* ---- metrics.c ---- */

int pyt_metrics_start(pyt_instance* instance);
void pyt_metrics_stop(pyt_instance* instance);

#endif
