/* One model instance's connection to its worker handler (instance.c): the greeting, a reconnection
 * after the worker was replaced, the cause of a worker's death, and the idle watcher that gives
 * shared memory back after a quiet spell; with what every batch of the instance reuses (the
 * batch being laid out, the buffers of the answer, the marks of each request). */
#ifndef PYTRITON_INSTANCE_H
#define PYTRITON_INSTANCE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "arena.h"
#include "model.h"
#include "requests.h"
#include "triton_api.h"
#include "wire.h"

#define PYT_CANCEL_CHECK_S 0.1   /* receive timeout: how often a wait looks at cancellations */
#define PYT_LIVENESS_CHECK_S 1.0 /* how often a wait looks whether the worker lives */
#define PYT_RECONNECT_S 5.0      /* how long a batch waits for a replaced worker to answer */

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
  uint8_t* answered;       /* per request of the batch: PYT_ANSWERED_* (batch.h) */
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
  uint32_t in_flight;      /* requests sent and not answered: execute.c's batch, relay.c's open streams */
  char metrics_path[sizeof(((struct sockaddr_un*)0)->sun_path)]; /* the Welcome's */
  int greeting;            /* the Welcome's: which greeting of the handler this instance's is */
} pyt_instance;

/* A fresh instance of `model` in `instance`: not connected yet; its idle watcher started (plain callables). */
void pyt_instance_init(pyt_instance* instance, pyt_model* model, TRITONBACKEND_ModelInstance* triton, uint32_t index);
/* Stop the idle watcher, disconnect, and free what `instance` holds (stop what uses it first: the
 * relay, the metrics thread). */
void pyt_instance_close(pyt_instance* instance);
/* Connect to the worker's data socket and greet it, trying for `timeout_s` (less when the
 * worker process is gone). Sets instance->fd. 0, or -1 with `why`. */
int pyt_instance_connect(pyt_instance* instance, double timeout_s, char* why, size_t why_size);
void pyt_instance_disconnect(pyt_instance* instance);
/* Why the worker process `pid` ended, as its owner wrote it (waiting briefly for the note), or
 * a plain statement. */
void pyt_death_cause(const pyt_instance* instance, int pid, char* out, size_t out_size);

#endif
