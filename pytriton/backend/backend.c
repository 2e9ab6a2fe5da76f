/* pytriton's Triton backend: each batch goes from Triton's memory to the worker in the user's
 * process over the data channel, and the worker's answer becomes Triton's responses.
 *
 * One Triton model instance is one connection to one worker handler (one callable). Triton
 * calls TRITONBACKEND_ModelInstanceExecute for an instance from one thread at a time; the
 * instance's state is touched by that thread, and by its idle watcher under `lock`.
 *
 * Per batch: read each request's inputs (Triton's CPU buffers, gathered by sendmsg without a
 * copy; tensors over 64 KiB copied once into the instance's arena), its parameters, requested
 * outputs and sequence flags; send one InferBatch; wait for the BatchResult while telling the
 * worker of cancelled requests and watching that it lives; copy each response's outputs into
 * the buffers Triton gives; report statistics; release the requests. A worker that dies
 * answers its batch with an error at once, naming why when the worker's owner wrote it down. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "json.h"
#include "triton_api.h"
#include "wire.h"

#define CANCEL_CHECK_S 0.1     /* receive timeout: how often a wait looks at cancellations */
#define LIVENESS_CHECK_S 1.0   /* how often a wait looks whether the worker lives */
#define RECONNECT_S 5.0        /* how long a batch waits for a replaced worker to answer */
#define CONNECT_RETRY_S 0.02
#define DEATH_NOTE_WAIT_S 0.5  /* how long a batch whose worker died waits for the cause */
#define IDLE_CHECK_S 1.0
#define MAX_ERROR 1024

/* ---- small helpers ---- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void log_message(TRITONSERVER_LogLevel level, int line, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

static void log_message(TRITONSERVER_LogLevel level, int line, const char* format, ...) {
  if (!TRITONSERVER_LogIsEnabled(level)) return;
  char text[MAX_ERROR + 256];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  TRITONSERVER_Error* error = TRITONSERVER_LogMessage(level, "pytriton_backend.c", line, text);
  if (error != NULL) TRITONSERVER_ErrorDelete(error);
}

#define LOG_INFO(...) log_message(TRITONSERVER_LOG_INFO, __LINE__, __VA_ARGS__)
#define LOG_WARN(...) log_message(TRITONSERVER_LOG_WARN, __LINE__, __VA_ARGS__)
#define LOG_ERROR(...) log_message(TRITONSERVER_LOG_ERROR, __LINE__, __VA_ARGS__)

static TRITONSERVER_Error* error_new(TRITONSERVER_Error_Code code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

static TRITONSERVER_Error* error_new(TRITONSERVER_Error_Code code, const char* format, ...) {
  char text[MAX_ERROR];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return TRITONSERVER_ErrorNew(code, text);
}

/* Runs `call`; on a Triton error, keeps its message in `why` (when given) and answers -1. */
static int checked(TRITONSERVER_Error* error, char* why, size_t why_size) {
  if (error == NULL) return 0;
  if (why != NULL) snprintf(why, why_size, "%s", TRITONSERVER_ErrorMessage(error));
  TRITONSERVER_ErrorDelete(error);
  return -1;
}

static int pid_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

static void set_timeouts(int fd, double seconds) {
  struct timeval value = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof(value));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, sizeof(value));
}

/* numpy dtype strings (dtype.str) of Triton's data types; "bytes" for BYTES as the codec has it. */
static const struct {
  TRITONSERVER_DataType type;
  const char* numpy;
} DTYPES[] = {
    {TRITONSERVER_TYPE_BOOL, "|b1"},  {TRITONSERVER_TYPE_UINT8, "|u1"},  {TRITONSERVER_TYPE_UINT16, "<u2"},
    {TRITONSERVER_TYPE_UINT32, "<u4"}, {TRITONSERVER_TYPE_UINT64, "<u8"}, {TRITONSERVER_TYPE_INT8, "|i1"},
    {TRITONSERVER_TYPE_INT16, "<i2"},  {TRITONSERVER_TYPE_INT32, "<i4"},  {TRITONSERVER_TYPE_INT64, "<i8"},
    {TRITONSERVER_TYPE_FP16, "<f2"},   {TRITONSERVER_TYPE_FP32, "<f4"},   {TRITONSERVER_TYPE_FP64, "<f8"},
    {TRITONSERVER_TYPE_BYTES, "bytes"},
};

static const char* numpy_dtype(TRITONSERVER_DataType type) {
  for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
    if (DTYPES[i].type == type) return DTYPES[i].numpy;
  return NULL;
}

static TRITONSERVER_DataType triton_dtype(const pyt_mv* numpy) {
  for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
    if (pyt_mv_str_equals(numpy, DTYPES[i].numpy)) return DTYPES[i].type;
  return TRITONSERVER_TYPE_INVALID;
}

/* ---- the model ---- */

typedef struct {
  char name[256];
  uint64_t version;
  uint32_t output_count;
  int batching;
  int sequences;
  int stamps;
  int tracing;
  int worker_pid;
  double handshake_timeout_s;
  char** data_sockets;
  uint32_t socket_count;
} model_state;

static void model_free(model_state* model) {
  if (model == NULL) return;
  for (uint32_t i = 0; i < model->socket_count; i++) free(model->data_sockets[i]);
  free(model->data_sockets);
  free(model);
}

static TRITONSERVER_Error* model_read_config(model_state* model, TRITONBACKEND_Model* triton) {
  TRITONSERVER_Message* message;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelConfig(triton, 1, &message);
  if (error != NULL) return error;
  const char* text;
  size_t size;
  error = TRITONSERVER_MessageSerializeToJson(message, &text, &size);
  if (error != NULL) {
    TRITONSERVER_MessageDelete(message);
    return error;
  }
  char why[256];
  pyt_json* config = pyt_json_parse(text, size, why, sizeof(why));
  TRITONSERVER_MessageDelete(message);
  if (config == NULL)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': its configuration is not JSON (%s)", model->name, why);
  const pyt_json* outputs = pyt_json_get(config, "output");
  model->output_count = outputs != NULL ? (uint32_t)outputs->count : 0;
  const pyt_json* batch = pyt_json_get(config, "max_batch_size");
  model->batching = batch != NULL && batch->number > 0;
  model->sequences = pyt_json_get(config, "sequence_batching") != NULL;
  const pyt_json* policy = pyt_json_get(pyt_json_get(config, "model_transaction_policy"), "decoupled");
  int decoupled = policy != NULL && policy->number != 0;
  const char* value = pyt_json_parameter(config, "pytriton.stamps");
  model->stamps = value != NULL && strcmp(value, "1") == 0;
  value = pyt_json_parameter(config, "pytriton.tracing");
  model->tracing = value != NULL && strcmp(value, "1") == 0;
  value = pyt_json_parameter(config, "pytriton.worker_pid");
  model->worker_pid = value != NULL ? atoi(value) : 0;
  value = pyt_json_parameter(config, "pytriton.handshake_timeout_s");
  model->handshake_timeout_s = value != NULL ? atof(value) : 60.0;
  value = pyt_json_parameter(config, "pytriton.data_sockets");
  pyt_json* sockets = value != NULL ? pyt_json_parse(value, strlen(value), why, sizeof(why)) : NULL;
  pyt_json_free(config);
  if (decoupled) {
    pyt_json_free(sockets);
    return error_new(TRITONSERVER_ERROR_UNSUPPORTED,
                     "model '%s': the pytriton backend of this server does not serve decoupled models yet; "
                     "bind it with PYTRITON_BACKEND=python",
                     model->name);
  }
  if (sockets == NULL || sockets->kind != PYT_JSON_ARRAY || sockets->count == 0) {
    pyt_json_free(sockets);
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "model '%s': its configuration lacks the parameter pytriton.data_sockets (a JSON list of the "
                     "worker's socket paths); the model was not written by pytriton's bind",
                     model->name);
  }
  model->data_sockets = calloc(sockets->count, sizeof(char*));
  if (model->data_sockets == NULL) {
    pyt_json_free(sockets);
    return error_new(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  }
  for (size_t i = 0; i < sockets->count; i++) {
    const pyt_json* item = sockets->items[i];
    model->data_sockets[i] = strdup(item->kind == PYT_JSON_STRING ? item->text : "");
    model->socket_count++;
  }
  pyt_json_free(sockets);
  return NULL;
}

/* ---- one instance ---- */

/* One input (or output) name across the requests of a batch. */
typedef struct {
  const char* name;
  TRITONSERVER_DataType dtype;
  const char* numpy;
  const int64_t** shapes; /* per request; NULL where it lacks the tensor */
  uint32_t* dims;
  uint64_t* sizes;
  uint64_t* offsets;
  uint8_t* in_shm;
  uint32_t* first_piece; /* per request: its first entry in `pieces` */
  uint32_t* piece_count;
} column;

typedef struct {
  const void* base;
  uint64_t size;
} piece;

typedef struct {
  model_state* model;
  TRITONBACKEND_ModelInstance* triton;
  uint32_t index;
  char instance_name[256];
  int fd;
  int worker_pid;
  char data_socket[sizeof(((struct sockaddr_un*)0)->sun_path)];
  pyt_arena arena;
  pyt_mapping mapping;
  pyt_buf header;
  pyt_buf received;
  pyt_buf scratch; /* parameters' JSON texts, back to back */
  pyt_mv_pool pool;
  int64_t batch_id;
  int64_t last_stamps[PYT_STAMP_COUNT];
  int has_last_stamps;
  /* per batch, reused */
  column* columns;
  uint32_t column_count;
  uint32_t column_cap;
  uint32_t request_cap;
  piece* pieces;
  uint32_t piece_count;
  uint32_t piece_cap;
  struct iovec* iov;
  uint32_t iov_cap;
  uint8_t* cancelled;
  uint8_t* answered;
  /* the idle watcher */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t watcher;
  int watcher_started;
  int closing;
  double last_batch;
  int idle_released;
} instance_state;

static void columns_free(instance_state* state) {
  for (uint32_t i = 0; i < state->column_cap; i++) {
    column* c = &state->columns[i];
    free(c->shapes);
    free(c->dims);
    free(c->sizes);
    free(c->offsets);
    free(c->in_shm);
    free(c->first_piece);
    free(c->piece_count);
  }
  free(state->columns);
  state->columns = NULL;
  state->column_cap = state->column_count = 0;
}

/* Per-request arrays hold `count` entries (grown for larger batches; kept between batches). */
static int ensure_capacity(instance_state* state, uint32_t count) {
  if (count <= state->request_cap) return 0;
  uint32_t cap = state->request_cap ? state->request_cap : 8;
  while (cap < count) cap *= 2;
  for (uint32_t i = 0; i < state->column_cap; i++) {
    column* c = &state->columns[i];
#define GROW(field) \
  do { \
    void* grown = realloc(c->field, cap * sizeof(*c->field)); \
    if (grown == NULL) return -1; \
    c->field = grown; \
  } while (0)
    GROW(shapes);
    GROW(dims);
    GROW(sizes);
    GROW(offsets);
    GROW(in_shm);
    GROW(first_piece);
    GROW(piece_count);
#undef GROW
  }
  uint8_t* cancelled = realloc(state->cancelled, cap);
  if (cancelled == NULL) return -1;
  state->cancelled = cancelled;
  uint8_t* answered = realloc(state->answered, cap);
  if (answered == NULL) return -1;
  state->answered = answered;
  state->request_cap = cap;
  return 0;
}

static column* column_for(instance_state* state, const char* name, TRITONSERVER_DataType dtype, uint32_t count) {
  for (uint32_t i = 0; i < state->column_count; i++) {
    column* c = &state->columns[i];
    if (c->dtype == dtype && strcmp(c->name, name) == 0) return c;
  }
  if (state->column_count == state->column_cap) {
    uint32_t cap = state->column_cap ? state->column_cap * 2 : 4;
    column* grown = realloc(state->columns, cap * sizeof(column));
    if (grown == NULL) return NULL;
    memset(grown + state->column_cap, 0, (cap - state->column_cap) * sizeof(column));
    state->columns = grown;
    state->column_cap = cap;
    uint32_t requests = state->request_cap;
    state->request_cap = 0; /* the new columns' arrays are allocated by ensure_capacity */
    if (ensure_capacity(state, requests > count ? requests : count) != 0) return NULL;
  }
  column* c = &state->columns[state->column_count++];
  c->name = name;
  c->dtype = dtype;
  c->numpy = numpy_dtype(dtype);
  for (uint32_t r = 0; r < count; r++) {
    c->shapes[r] = NULL;
    c->dims[r] = 0;
    c->sizes[r] = 0;
    c->offsets[r] = 0;
    c->in_shm[r] = 0;
    c->piece_count[r] = 0;
    c->first_piece[r] = 0;
  }
  return c;
}

static int add_piece(instance_state* state, const void* base, uint64_t size) {
  if (state->piece_count == state->piece_cap) {
    uint32_t cap = state->piece_cap ? state->piece_cap * 2 : 16;
    piece* grown = realloc(state->pieces, cap * sizeof(piece));
    if (grown == NULL) return -1;
    state->pieces = grown;
    state->piece_cap = cap;
  }
  state->pieces[state->piece_count].base = base;
  state->pieces[state->piece_count].size = size;
  state->piece_count++;
  return 0;
}

static int reserve_iov(instance_state* state, uint32_t count) {
  if (count < state->iov_cap) return 0;
  uint32_t cap = state->iov_cap ? state->iov_cap : 32;
  while (cap <= count) cap *= 2;
  struct iovec* grown = realloc(state->iov, cap * sizeof(struct iovec));
  if (grown == NULL) return -1;
  state->iov = grown;
  state->iov_cap = cap;
  return 0;
}

static int add_iov(instance_state* state, uint32_t* count, const void* base, size_t size) {
  if (size == 0) return 0;
  if (*count >= state->iov_cap) {
    uint32_t cap = state->iov_cap ? state->iov_cap * 2 : 32;
    struct iovec* grown = realloc(state->iov, cap * sizeof(struct iovec));
    if (grown == NULL) return -1;
    state->iov = grown;
    state->iov_cap = cap;
  }
  state->iov[*count].iov_base = (void*)base;
  state->iov[*count].iov_len = size;
  (*count)++;
  return 0;
}

static void instance_disconnect(instance_state* state) {
  if (state->fd >= 0) close(state->fd);
  state->fd = -1;
}

/* Read the worker's Welcome after our Hello; 0, or -1 with `why`. */
static int greet(instance_state* state, double deadline, char* why, size_t why_size) {
  pyt_buf_reset(&state->header);
  pyt_m_tuple(&state->header, 4);
  pyt_m_int(&state->header, PYT_KIND_HELLO);
  pyt_m_int(&state->header, PYT_PROTOCOL_VERSION);
  pyt_m_int(&state->header, state->index);
  pyt_m_int(&state->header, getpid());
  uint8_t prefix[PYT_PREFIX_BYTES];
  size_t pad;
  static const uint8_t zeros[8];
  pyt_frame_prefix(prefix, (uint32_t)state->header.len, 0, &pad);
  struct iovec iov[3] = {{prefix, PYT_PREFIX_BYTES}, {state->header.data, state->header.len}, {(void*)zeros, pad}};
  if (pyt_send_message(state->fd, iov, pad ? 3 : 2, PYT_PREFIX_BYTES + state->header.len + pad) != 0) {
    snprintf(why, why_size, "sending the greeting failed: %s", strerror(errno));
    return -1;
  }
  for (;;) {
    pyt_message message;
    int got = pyt_receive_message(state->fd, &state->received, &message, why, why_size);
    if (got < 0) return -1;
    if (got == 0) {
      if (now_s() > deadline) {
        snprintf(why, why_size, "the worker did not answer the greeting in time");
        return -1;
      }
      continue;
    }
    pyt_mv* welcome = pyt_marshal_read(&state->pool, message.header, message.header_size, why, why_size);
    if (welcome == NULL) return -1;
    if (pyt_mv_int(pyt_mv_item(welcome, 0), -1) != PYT_KIND_WELCOME) continue;
    pyt_mv* error = pyt_mv_item(welcome, 3);
    if (pyt_mv_is_str(error)) {
      pyt_mv_copy(error, why, why_size);
      return -1;
    }
    state->worker_pid = (int)pyt_mv_int(pyt_mv_item(welcome, 2), 0);
    pyt_mv_copy(pyt_mv_item(welcome, 5), state->arena.stem, sizeof(state->arena.stem));
    return 0;
  }
}

/* Connect to the worker's data socket and greet it, trying until `timeout_s` passes (or the
 * worker process is gone before it ever answered). 0, or -1 with `why`. */
static int instance_connect(instance_state* state, double timeout_s, char* why, size_t why_size) {
  instance_disconnect(state);
  double deadline = now_s() + timeout_s;
  struct sockaddr_un address;
  memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  snprintf(address.sun_path, sizeof(address.sun_path), "%s", state->data_socket);
  char last[MAX_ERROR] = "nobody listens";
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      snprintf(why, why_size, "cannot open a socket: %s", strerror(errno));
      return -1;
    }
    int size = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    if (connect(fd, (struct sockaddr*)&address, sizeof(address)) == 0) {
      state->fd = fd;
      set_timeouts(fd, CANCEL_CHECK_S);
      if (greet(state, deadline, last, sizeof(last)) == 0) return 0;
      instance_disconnect(state);
      if (strstr(last, "protocol") != NULL || strstr(last, "instance") != NULL) {
        snprintf(why, why_size, "%s", last); /* a refusal: trying again changes nothing */
        return -1;
      }
    } else {
      snprintf(last, sizeof(last), "%s", strerror(errno));
      close(fd);
    }
    int pid = state->worker_pid > 0 ? state->worker_pid : state->model->worker_pid;
    if (now_s() >= deadline || !pid_alive(pid)) {
      snprintf(why, why_size,
               "no pytriton worker answered at %s within %.0f s (worker pid %d, alive: %s; last: %s)",
               state->data_socket, timeout_s, pid, pid_alive(pid) ? "yes" : "no", last);
      return -1;
    }
    usleep((useconds_t)(CONNECT_RETRY_S * 1e6));
  }
}

/* What the owner of a worker process wrote when it ended (see protocol.death_note_path), or
 * a plain statement; waits up to DEATH_NOTE_WAIT_S for the note to appear. */
static void death_cause(instance_state* state, int pid, char* out, size_t out_size) {
  char path[sizeof(state->data_socket) + 32];
  snprintf(path, sizeof(path), "%s.ended-%d", state->data_socket, pid);
  double deadline = now_s() + DEATH_NOTE_WAIT_S;
  for (;;) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t got = read(fd, out, out_size - 1);
      close(fd);
      if (got > 0) {
        out[got] = '\0';
        while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == ' ')) out[--got] = '\0';
        return;
      }
    }
    if (now_s() >= deadline || !pid_alive(state->model->worker_pid)) break;
    usleep(10000);
  }
  snprintf(out, out_size, "the pytriton worker process (pid %d) is gone", pid);
}

static void* idle_watch(void* argument) {
  instance_state* state = argument;
  pthread_mutex_lock(&state->lock);
  while (!state->closing) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)IDLE_CHECK_S;
    pthread_cond_timedwait(&state->wake, &state->lock, &until);
    if (state->closing || state->idle_released) continue;
    double now = now_s();
    if (now - state->last_batch >= PYT_IDLE_RELEASE_S) {
      pyt_arena_release_if_idle(&state->arena, now);
      pyt_mapping_close(&state->mapping);
      state->idle_released = 1;
    }
  }
  pthread_mutex_unlock(&state->lock);
  return NULL;
}

/* ---- one batch ---- */

typedef struct {
  instance_state* state;
  TRITONBACKEND_Request** requests;
  uint32_t count;
  uint64_t exec_start;
  uint64_t compute_start;
  uint64_t compute_end;
} batch;

/* answered[r]: 0 not yet, ANSWERED_OK with outputs, ANSWERED_ERROR with an error. */
enum { ANSWERED_OK = 1, ANSWERED_ERROR = 2 };

static void respond_error(batch* b, uint32_t r, TRITONSERVER_Error_Code code, const char* text) {
  if (b->state->answered[r]) return;
  b->state->answered[r] = ANSWERED_ERROR;
  TRITONBACKEND_Response* response;
  if (checked(TRITONBACKEND_ResponseNew(&response, b->requests[r]), NULL, 0) != 0) return;
  TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(code, text);
  checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error), NULL, 0);
  TRITONSERVER_ErrorDelete(error);
}

static void fail_all(batch* b, TRITONSERVER_Error_Code code, const char* text) {
  for (uint32_t r = 0; r < b->count; r++) respond_error(b, r, code, text);
}

/* Read every request's inputs into columns; -1 with `why` when a request cannot travel. */
static int read_inputs(batch* b, uint32_t* live, uint32_t live_count, char* why, size_t why_size) {
  instance_state* state = b->state;
  state->column_count = 0;
  state->piece_count = 0;
  for (uint32_t slot = 0; slot < live_count; slot++) {
    TRITONBACKEND_Request* request = b->requests[live[slot]];
    uint32_t inputs;
    if (checked(TRITONBACKEND_RequestInputCount(request, &inputs), why, why_size) != 0) return -1;
    for (uint32_t i = 0; i < inputs; i++) {
      TRITONBACKEND_Input* input;
      const char* name;
      TRITONSERVER_DataType dtype;
      const int64_t* shape;
      uint32_t dims, buffers;
      uint64_t size;
      if (checked(TRITONBACKEND_RequestInputByIndex(request, i, &input), why, why_size) != 0 ||
          checked(TRITONBACKEND_InputProperties(input, &name, &dtype, &shape, &dims, &size, &buffers), why,
                  why_size) != 0)
        return -1;
      if (numpy_dtype(dtype) == NULL) {
        snprintf(why, why_size, "Model '%s': input '%s' has a data type pytriton cannot hand to Python (%d)",
                 state->model->name, name, (int)dtype);
        return -1;
      }
      column* c = column_for(state, name, dtype, live_count);
      if (c == NULL) {
        snprintf(why, why_size, "out of memory");
        return -1;
      }
      c->shapes[slot] = shape;
      c->dims[slot] = dims;
      c->sizes[slot] = size;
      c->first_piece[slot] = state->piece_count;
      c->piece_count[slot] = 0;
      for (uint32_t k = 0; k < buffers; k++) {
        const void* base;
        uint64_t bytes;
        TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
        int64_t memory_id = 0;
        if (checked(TRITONBACKEND_InputBuffer(input, k, &base, &bytes, &memory, &memory_id), why, why_size) != 0)
          return -1;
        if (memory == TRITONSERVER_MEMORY_GPU) {
          snprintf(why, why_size,
                   "Model '%s': input '%s' arrived in GPU memory (CUDA shared memory), which the pytriton backend "
                   "does not read; send it from host memory",
                   state->model->name, name);
          return -1;
        }
        if (add_piece(state, base, bytes) != 0) {
          snprintf(why, why_size, "out of memory");
          return -1;
        }
        c->piece_count[slot]++;
      }
    }
  }
  return 0;
}

/* Each request's parameters as JSON text ("" for none), into `scratch`; `ends[r]` marks where each ends. */
static int read_parameters(batch* b, const uint32_t* live, uint32_t live_count, size_t* ends, char* why,
                           size_t why_size) {
  pyt_buf* out = &b->state->scratch;
  pyt_buf_reset(out);
  for (uint32_t slot = 0; slot < live_count; slot++) {
    TRITONBACKEND_Request* request = b->requests[live[slot]];
    uint32_t count;
    if (checked(TRITONBACKEND_RequestParameterCount(request, &count), why, why_size) != 0) return -1;
    for (uint32_t p = 0; p < count; p++) {
      const char* key;
      TRITONSERVER_ParameterType type;
      const void* value;
      if (checked(TRITONBACKEND_RequestParameter(request, p, &key, &type, &value), why, why_size) != 0) return -1;
      pyt_buf_put(out, p ? ", " : "{", p ? 2 : 1);
      pyt_buf_json_string(out, key, strlen(key));
      pyt_buf_put(out, ": ", 2);
      switch (type) {
        case TRITONSERVER_PARAMETER_STRING:
          pyt_buf_json_string(out, (const char*)value, strlen((const char*)value));
          break;
        case TRITONSERVER_PARAMETER_INT:
          pyt_buf_printf(out, "%lld", (long long)*(const int64_t*)value);
          break;
        case TRITONSERVER_PARAMETER_BOOL:
          pyt_buf_printf(out, "%s", *(const bool*)value ? "true" : "false");
          break;
        case TRITONSERVER_PARAMETER_DOUBLE: {
          double number = *(const double*)value;
          if (isnan(number)) pyt_buf_printf(out, "NaN");
          else if (isinf(number)) pyt_buf_printf(out, "%sInfinity", number < 0 ? "-" : "");
          else pyt_buf_printf(out, "%.17g", number);
          break;
        }
        default:
          pyt_buf_printf(out, "null");
          break;
      }
      if (p + 1 == count) pyt_buf_put(out, "}", 1);
    }
    ends[slot] = out->len;
  }
  if (out->failed) {
    snprintf(why, why_size, "out of memory");
    return -1;
  }
  return 0;
}

/* Write the InferBatch header into state->header and lay the payload out in state->iov
 * (from index 3: the prefix, header and padding come first). Returns the payload size. */
static int build_batch(batch* b, const uint32_t* live, uint32_t live_count, uint32_t* iov_count, uint64_t* payload,
                       char* why, size_t why_size) {
  instance_state* state = b->state;
  model_state* model = state->model;
  size_t* ends = malloc((live_count ? live_count : 1) * sizeof(size_t));
  if (ends == NULL) {
    snprintf(why, why_size, "out of memory");
    return -1;
  }
  if (read_parameters(b, live, live_count, ends, why, why_size) != 0) {
    free(ends);
    return -1;
  }
  /* Where each tensor goes: inline up to 64 KiB, else into the arena when it has room. */
  uint64_t shm_total = 0;
  for (uint32_t i = 0; i < state->column_count; i++) {
    column* c = &state->columns[i];
    for (uint32_t r = 0; r < live_count; r++) {
      c->in_shm[r] = c->shapes[r] != NULL && c->sizes[r] > PYT_INLINE_MAX_BYTES;
      if (c->in_shm[r]) shm_total += (c->sizes[r] + PYT_ARENA_ALIGNMENT - 1) / PYT_ARENA_ALIGNMENT * PYT_ARENA_ALIGNMENT;
    }
  }
  int use_arena = pyt_arena_reserve(&state->arena, shm_total, now_s()) && shm_total > 0;
  static const uint8_t zeros[PYT_INLINE_ALIGNMENT];
  uint64_t inline_offset = 0, shm_offset = 0;
  *iov_count = 3; /* the prefix, the header and its padding come first */
  if (reserve_iov(state, *iov_count) != 0) goto memory;
  for (uint32_t i = 0; i < state->column_count; i++) {
    column* c = &state->columns[i];
    for (uint32_t r = 0; r < live_count; r++) {
      if (c->shapes[r] == NULL) continue;
      if (c->in_shm[r] && !use_arena) c->in_shm[r] = 0;
      const piece* pieces = &state->pieces[c->first_piece[r]];
      if (c->in_shm[r]) {
        c->offsets[r] = shm_offset;
        uint64_t at = shm_offset;
        for (uint32_t k = 0; k < c->piece_count[r]; k++) {
          memcpy(state->arena.base + at, pieces[k].base, pieces[k].size);
          at += pieces[k].size;
        }
        shm_offset += (c->sizes[r] + PYT_ARENA_ALIGNMENT - 1) / PYT_ARENA_ALIGNMENT * PYT_ARENA_ALIGNMENT;
      } else {
        c->offsets[r] = inline_offset;
        for (uint32_t k = 0; k < c->piece_count[r]; k++)
          if (add_iov(state, iov_count, pieces[k].base, pieces[k].size) != 0) goto memory;
        inline_offset += c->sizes[r];
      }
    }
    size_t pad = (PYT_INLINE_ALIGNMENT - inline_offset % PYT_INLINE_ALIGNMENT) % PYT_INLINE_ALIGNMENT;
    if (pad) {
      if (add_iov(state, iov_count, zeros, pad) != 0) goto memory;
      inline_offset += pad;
    }
  }
  *payload = inline_offset;

  pyt_buf* h = &state->header;
  pyt_buf_reset(h);
  pyt_m_tuple(h, 10);
  pyt_m_int(h, PYT_KIND_INFER_BATCH);
  pyt_m_int(h, state->batch_id);
  pyt_m_tuple(h, live_count); /* parameters */
  for (uint32_t slot = 0; slot < live_count; slot++) {
    size_t start = slot ? ends[slot - 1] : 0;
    pyt_m_str(h, (const char*)state->scratch.data + start, ends[slot] - start);
  }
  pyt_m_tuple(h, state->column_count);
  for (uint32_t i = 0; i < state->column_count; i++) {
    column* c = &state->columns[i];
    pyt_m_tuple(h, 6);
    pyt_m_cstr(h, c->name);
    pyt_m_cstr(h, c->numpy);
    pyt_m_tuple(h, live_count);
    for (uint32_t r = 0; r < live_count; r++) {
      if (c->shapes[r] == NULL) {
        pyt_m_none(h);
        continue;
      }
      pyt_m_tuple(h, c->dims[r]);
      for (uint32_t d = 0; d < c->dims[r]; d++) pyt_m_int(h, c->shapes[r][d]);
    }
    pyt_m_tuple(h, live_count);
    for (uint32_t r = 0; r < live_count; r++) pyt_m_int(h, (int64_t)c->offsets[r]);
    pyt_m_tuple(h, live_count);
    for (uint32_t r = 0; r < live_count; r++) pyt_m_int(h, (int64_t)c->sizes[r]);
    pyt_m_tuple(h, live_count);
    for (uint32_t r = 0; r < live_count; r++) pyt_m_bool(h, c->in_shm[r]);
  }
  if (use_arena) pyt_m_cstr(h, state->arena.name);
  else pyt_m_str(h, "", 0);
  /* stamps: the previous batch's record, then this one's first two */
  if (model->stamps) {
    pyt_m_tuple(h, (state->has_last_stamps ? PYT_STAMP_COUNT : 0) + 2);
    if (state->has_last_stamps)
      for (int s = 0; s < PYT_STAMP_COUNT; s++) pyt_m_int(h, state->last_stamps[s]);
    pyt_m_int(h, (int64_t)b->exec_start);
    pyt_m_int(h, (int64_t)now_ns());
  } else {
    pyt_m_tuple(h, 0);
  }
  /* sequences: (correlation id, flags) per request */
  if (model->sequences) {
    pyt_m_tuple(h, live_count);
    for (uint32_t slot = 0; slot < live_count; slot++) {
      TRITONBACKEND_Request* request = b->requests[live[slot]];
      uint64_t id = 0;
      uint32_t flags = 0;
      const char* text = NULL;
      pyt_m_tuple(h, 2);
      if (TRITONBACKEND_RequestCorrelationId(request, &id) == NULL) {
        pyt_m_int(h, (int64_t)id);
      } else if (checked(TRITONBACKEND_RequestCorrelationIdString(request, &text), NULL, 0) == 0 && text) {
        pyt_m_cstr(h, text);
      } else {
        pyt_m_int(h, 0);
      }
      checked(TRITONBACKEND_RequestFlags(request, &flags), NULL, 0);
      pyt_m_int(h, flags);
    }
  } else {
    pyt_m_tuple(h, 0);
  }
  /* requested: only when some request asked for fewer outputs than the model has */
  int fewer = 0;
  if (model->output_count >= 2) {
    for (uint32_t slot = 0; slot < live_count && !fewer; slot++) {
      uint32_t asked = model->output_count;
      checked(TRITONBACKEND_RequestOutputCount(b->requests[live[slot]], &asked), NULL, 0);
      fewer = asked < model->output_count;
    }
  }
  if (fewer) {
    pyt_m_tuple(h, live_count);
    for (uint32_t slot = 0; slot < live_count; slot++) {
      TRITONBACKEND_Request* request = b->requests[live[slot]];
      uint32_t asked = model->output_count;
      checked(TRITONBACKEND_RequestOutputCount(request, &asked), NULL, 0);
      if (asked >= model->output_count) {
        pyt_m_tuple(h, 0);
        continue;
      }
      pyt_m_tuple(h, asked);
      for (uint32_t o = 0; o < asked; o++) {
        const char* name = "";
        checked(TRITONBACKEND_RequestOutputName(request, o, &name), NULL, 0);
        pyt_m_cstr(h, name);
      }
    }
  } else {
    pyt_m_tuple(h, 0);
  }
  pyt_m_int(h, (int64_t)now_ns()); /* sent_ns */
  /* traces: each request's W3C traceparent when Triton traces with OpenTelemetry */
  int traced = 0;
  if (model->tracing) {
    pyt_buf* parents = &state->scratch;
    size_t mark = parents->len;
    size_t* starts = ends; /* reused: the parameters are written already */
    for (uint32_t slot = 0; slot < live_count; slot++) {
      starts[slot] = parents->len;
      TRITONSERVER_InferenceTrace* trace = NULL;
      const char* context = NULL;
      if (TRITONBACKEND_RequestTrace(b->requests[live[slot]], &trace) == NULL && trace != NULL &&
          checked(TRITONSERVER_InferenceTraceContext(trace, &context), NULL, 0) == 0 && context != NULL) {
        char problem[64];
        pyt_json* parsed = pyt_json_parse(context, strlen(context), problem, sizeof(problem));
        const pyt_json* parent = pyt_json_get(parsed, "traceparent");
        if (parent != NULL && parent->kind == PYT_JSON_STRING) {
          pyt_buf_put(parents, parent->text, strlen(parent->text));
          traced = 1;
        }
        pyt_json_free(parsed);
      }
      pyt_buf_put(parents, "", 0);
    }
    if (traced) {
      pyt_m_tuple(h, live_count);
      for (uint32_t slot = 0; slot < live_count; slot++) {
        size_t end = slot + 1 < live_count ? starts[slot + 1] : parents->len;
        pyt_m_str(h, (const char*)parents->data + starts[slot], end - starts[slot]);
      }
    }
    parents->len = mark;
  }
  if (!traced) pyt_m_tuple(h, 0);
  free(ends);
  if (h->failed) {
    snprintf(why, why_size, "out of memory");
    return -1;
  }
  return 0;
memory:
  free(ends);
  snprintf(why, why_size, "out of memory");
  return -1;
}

/* Send the worker the positions of the batch's requests cancelled since the last look. */
static void tell_cancelled(batch* b, const uint32_t* live, uint32_t live_count) {
  instance_state* state = b->state;
  int newly = 0;
  for (uint32_t slot = 0; slot < live_count; slot++) {
    if (state->cancelled[slot]) continue;
    bool cancelled = false;
    if (checked(TRITONBACKEND_RequestIsCancelled(b->requests[live[slot]], &cancelled), NULL, 0) == 0 && cancelled) {
      state->cancelled[slot] = 1;
      newly = 1;
    }
  }
  if (!newly) return;
  pyt_buf message;
  memset(&message, 0, sizeof(message));
  uint32_t count = 0;
  for (uint32_t slot = 0; slot < live_count; slot++) count += state->cancelled[slot];
  pyt_m_tuple(&message, 3);
  pyt_m_int(&message, PYT_KIND_CANCEL);
  pyt_m_int(&message, state->batch_id);
  pyt_m_tuple(&message, count);
  for (uint32_t slot = 0; slot < live_count; slot++)
    if (state->cancelled[slot]) pyt_m_int(&message, slot);
  if (!message.failed) {
    uint8_t prefix[PYT_PREFIX_BYTES];
    size_t pad;
    static const uint8_t zeros[8];
    pyt_frame_prefix(prefix, (uint32_t)message.len, 0, &pad);
    struct iovec iov[3] = {{prefix, PYT_PREFIX_BYTES}, {message.data, message.len}, {(void*)zeros, pad}};
    if (pyt_send_message(state->fd, iov, pad ? 3 : 2, PYT_PREFIX_BYTES + message.len + pad) != 0)
      for (uint32_t slot = 0; slot < live_count; slot++) state->cancelled[slot] = 0; /* told at the next look */
  }
  pyt_buf_free(&message);
}

/* Wait for the BatchResult of the batch sent. 1: `result` holds it; 0: the worker is gone
 * (`why` says so); -1: the worker answered something unreadable (`why`). */
static int wait_result(batch* b, const uint32_t* live, uint32_t live_count, pyt_message* message, pyt_mv** result,
                       char* why, size_t why_size) {
  instance_state* state = b->state;
  double next_liveness = now_s() + LIVENESS_CHECK_S;
  for (;;) {
    int got = pyt_receive_message(state->fd, &state->received, message, why, why_size);
    if (got < 0) return 0;
    if (got == 0) {
      tell_cancelled(b, live, live_count);
      if (now_s() >= next_liveness) {
        if (!pid_alive(state->worker_pid)) {
          snprintf(why, why_size, "the worker process (pid %d) is gone", state->worker_pid);
          return 0;
        }
        next_liveness = now_s() + LIVENESS_CHECK_S;
      }
      continue;
    }
    pyt_mv* value = pyt_marshal_read(&state->pool, message->header, message->header_size, why, why_size);
    if (value == NULL) return -1;
    if (pyt_mv_int(pyt_mv_item(value, 0), -1) == PYT_KIND_BATCH_RESULT &&
        pyt_mv_int(pyt_mv_item(value, 1), -1) == state->batch_id) {
      *result = value;
      return 1;
    }
    /* otherwise a late answer to a batch given up on: keep waiting */
  }
}

/* The response of live request `slot` from the worker's columns; 0, or -1 with `why`. */
static int respond(batch* b, uint32_t request_index, uint32_t slot, pyt_mv* columns, const uint8_t* payload,
                   size_t payload_size, const uint8_t* shm, size_t shm_size, char* why, size_t why_size) {
  instance_state* state = b->state;
  TRITONBACKEND_Request* request = b->requests[request_index];
  uint32_t asked = state->model->output_count;
  if (state->model->output_count >= 2) checked(TRITONBACKEND_RequestOutputCount(request, &asked), NULL, 0);
  TRITONBACKEND_Response* response;
  if (checked(TRITONBACKEND_ResponseNew(&response, request), why, why_size) != 0) return -1;
  for (uint32_t i = 0; i < columns->count; i++) {
    pyt_mv* c = columns->items[i];
    pyt_mv* shape = pyt_mv_item(pyt_mv_item(c, 2), slot);
    if (shape == NULL || shape->kind != PYT_MV_TUPLE) continue;
    char name[256];
    pyt_mv_copy(pyt_mv_item(c, 0), name, sizeof(name));
    if (asked < state->model->output_count) { /* send only what the request asked for */
      int wanted = 0;
      for (uint32_t o = 0; o < asked && !wanted; o++) {
        const char* asked_name = "";
        checked(TRITONBACKEND_RequestOutputName(request, o, &asked_name), NULL, 0);
        wanted = strcmp(asked_name, name) == 0;
      }
      if (!wanted) continue;
    }
    TRITONSERVER_DataType dtype = triton_dtype(pyt_mv_item(c, 1));
    int64_t offset = pyt_mv_int(pyt_mv_item(pyt_mv_item(c, 3), slot), -1);
    int64_t size = pyt_mv_int(pyt_mv_item(pyt_mv_item(c, 4), slot), -1);
    int in_shm = (int)pyt_mv_int(pyt_mv_item(pyt_mv_item(c, 5), slot), 0);
    const uint8_t* source = in_shm ? shm : payload;
    size_t limit = in_shm ? shm_size : payload_size;
    int64_t dims[32];
    if (dtype == TRITONSERVER_TYPE_INVALID || shape->count > 32 || offset < 0 || size < 0 || source == NULL ||
        (uint64_t)offset + (uint64_t)size > limit) {
      snprintf(why, why_size, "Model '%s': the worker's answer to output '%s' is malformed", state->model->name, name);
      TRITONBACKEND_ResponseDelete(response);
      return -1;
    }
    for (uint32_t d = 0; d < shape->count; d++) dims[d] = pyt_mv_int(shape->items[d], 0);
    TRITONBACKEND_Output* output;
    void* buffer = NULL;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    if (checked(TRITONBACKEND_ResponseOutput(response, &output, name, dtype, dims, shape->count), why, why_size) != 0 ||
        checked(TRITONBACKEND_OutputBuffer(output, &buffer, (uint64_t)size, &memory, &memory_id), why, why_size) != 0) {
      TRITONBACKEND_ResponseDelete(response);
      return -1;
    }
    if (memory == TRITONSERVER_MEMORY_GPU) {
      snprintf(why, why_size, "Model '%s': Triton asked for output '%s' in GPU memory, which the pytriton backend "
               "does not write", state->model->name, name);
      TRITONBACKEND_ResponseDelete(response);
      return -1;
    }
    if (size) memcpy(buffer, source + offset, (size_t)size);
  }
  if (checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL), why, why_size) != 0)
    return -1;
  state->answered[request_index] = ANSWERED_OK;
  return 0;
}

static void execute_batch(instance_state* state, TRITONBACKEND_Request** requests, uint32_t count) {
  model_state* model = state->model;
  batch b = {state, requests, count, now_ns(), 0, 0};
  char why[MAX_ERROR];
  state->column_count = 0; /* the last batch's columns point into requests released since */
  if (ensure_capacity(state, count) != 0) {
    b.compute_start = b.compute_end = now_ns();
    for (uint32_t r = 0; r < count; r++) state->answered[r] = 0;
    fail_all(&b, TRITONSERVER_ERROR_INTERNAL, "out of memory in the pytriton backend");
    return;
  }
  uint32_t* live = malloc(count * sizeof(uint32_t));
  uint32_t live_count = 0;
  for (uint32_t r = 0; r < count; r++) {
    state->answered[r] = 0;
    state->cancelled[r] = 0;
  }
  if (live == NULL) {
    fail_all(&b, TRITONSERVER_ERROR_INTERNAL, "out of memory in the pytriton backend");
    return;
  }
  /* Requests whose clients already gave up never reach the callable (a C call: cheap). */
  for (uint32_t r = 0; r < count; r++) {
    bool cancelled = false;
    if (checked(TRITONBACKEND_RequestIsCancelled(requests[r], &cancelled), NULL, 0) == 0 && cancelled) {
      char text[512];
      snprintf(text, sizeof(text), "Model '%s': the request was cancelled while it waited", model->name);
      respond_error(&b, r, TRITONSERVER_ERROR_CANCELLED, text);
      continue;
    }
    if (model->sequences) { /* the direct batcher's null requests fill idle slots: an empty answer */
      uint64_t id = 1;
      const char* text = NULL;
      if (TRITONBACKEND_RequestCorrelationId(requests[r], &id) != NULL) {
        id = checked(TRITONBACKEND_RequestCorrelationIdString(requests[r], &text), NULL, 0) == 0 && text && *text;
      }
      if (id == 0) {
        TRITONBACKEND_Response* response;
        if (checked(TRITONBACKEND_ResponseNew(&response, requests[r]), NULL, 0) == 0)
          checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL), NULL, 0);
        state->answered[r] = ANSWERED_OK;
        continue;
      }
    }
    live[live_count++] = r;
  }
  b.compute_start = now_ns();
  if (live_count == 0) goto done;
  if (state->fd < 0 && instance_connect(state, RECONNECT_S, why, sizeof(why)) != 0) {
    char text[MAX_ERROR + 512];
    snprintf(text, sizeof(text), "Model '%s': %s", model->name, why);
    fail_all(&b, TRITONSERVER_ERROR_UNAVAILABLE, text);
    goto done;
  }
  state->batch_id++;
  uint32_t iov_count = 0;
  uint64_t payload = 0;
  if (read_inputs(&b, live, live_count, why, sizeof(why)) != 0 ||
      build_batch(&b, live, live_count, &iov_count, &payload, why, sizeof(why)) != 0) {
    fail_all(&b, TRITONSERVER_ERROR_INTERNAL, why);
    goto done;
  }
  uint8_t prefix[PYT_PREFIX_BYTES];
  size_t pad;
  static const uint8_t zeros[8];
  pyt_frame_prefix(prefix, (uint32_t)state->header.len, payload, &pad);
  state->iov[0].iov_base = prefix;
  state->iov[0].iov_len = PYT_PREFIX_BYTES;
  state->iov[1].iov_base = state->header.data;
  state->iov[1].iov_len = state->header.len;
  state->iov[2].iov_base = (void*)zeros;
  state->iov[2].iov_len = pad;
  size_t total = PYT_PREFIX_BYTES + state->header.len + pad + payload;
  int sent;
  for (;;) {
    sent = pyt_send_message(state->fd, state->iov, (int)iov_count, total);
    if (sent == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || !pid_alive(state->worker_pid)) break;
  }
  pyt_message message;
  pyt_mv* result = NULL;
  int outcome = sent == 0 ? wait_result(&b, live, live_count, &message, &result, why, sizeof(why)) : 0;
  b.compute_end = now_ns();
  if (outcome <= 0) {
    char text[MAX_ERROR + 512];
    if (outcome == 0) {
      int pid = state->worker_pid;
      instance_disconnect(state);
      char cause[MAX_ERROR];
      death_cause(state, pid, cause, sizeof(cause));
      snprintf(text, sizeof(text), "Model '%s': %s", model->name, cause);
    } else {
      snprintf(text, sizeof(text), "Model '%s': the worker's answer is unreadable (%s)", model->name, why);
    }
    LOG_ERROR("%s", text);
    fail_all(&b, TRITONSERVER_ERROR_INTERNAL, text);
    goto done;
  }
  uint64_t received_ns = model->stamps ? now_ns() : 0;
  pyt_mv* errors = pyt_mv_item(result, 2);
  pyt_mv* columns = pyt_mv_item(result, 3);
  pyt_mv* segment = pyt_mv_item(result, 4);
  if (errors == NULL || errors->kind != PYT_MV_TUPLE || errors->count != live_count || columns == NULL ||
      columns->kind != PYT_MV_TUPLE) {
    snprintf(why, sizeof(why), "Model '%s': the worker answered %u responses for %u requests", model->name,
             errors != NULL ? errors->count : 0, live_count);
    fail_all(&b, TRITONSERVER_ERROR_INTERNAL, why);
    goto done;
  }
  const uint8_t* shm = NULL;
  size_t shm_size = 0;
  if (pyt_mv_is_str(segment) && segment->count > 0) {
    char name[224];
    pyt_mv_copy(segment, name, sizeof(name));
    shm = pyt_mapping_get(&state->mapping, name, &shm_size);
  }
  for (uint32_t slot = 0; slot < live_count; slot++) {
    pyt_mv* error = errors->items[slot];
    if (pyt_mv_is_str(error)) {
      char* text = malloc(error->count + 1);
      if (text != NULL) {
        pyt_mv_copy(error, text, error->count + 1);
        respond_error(&b, live[slot], TRITONSERVER_ERROR_INTERNAL, text);
        free(text);
      } else {
        respond_error(&b, live[slot], TRITONSERVER_ERROR_INTERNAL, "out of memory in the pytriton backend");
      }
      continue;
    }
    if (respond(&b, live[slot], slot, columns, message.payload, message.payload_size, shm, shm_size, why,
                sizeof(why)) != 0) {
      LOG_ERROR("%s", why);
      respond_error(&b, live[slot], TRITONSERVER_ERROR_INTERNAL, why);
    }
  }
  if (model->stamps) {
    pyt_mv* stamps = pyt_mv_item(result, 6);
    if (stamps != NULL && stamps->kind == PYT_MV_TUPLE && stamps->count == PYT_STAMP_RESULT) {
      for (uint32_t s = 0; s < PYT_STAMP_RESULT; s++) state->last_stamps[s] = pyt_mv_int(stamps->items[s], 0);
      state->last_stamps[PYT_STAMP_RESULT] = (int64_t)received_ns;
      state->last_stamps[PYT_STAMP_RESPONDED] = (int64_t)now_ns();
      state->has_last_stamps = 1;
    } else {
      state->has_last_stamps = 0;
    }
  }
done:;
  uint64_t exec_end = now_ns();
  /* Triton's batch statistics count rows: a batching model's requests bring their first dimension. */
  uint64_t batch_size = live_count;
  if (model->batching && state->column_count > 0) {
    batch_size = 0;
    column* first = &state->columns[0];
    for (uint32_t slot = 0; slot < live_count; slot++)
      batch_size += first->shapes[slot] != NULL && first->dims[slot] ? (uint64_t)first->shapes[slot][0] : 1;
  }
  for (uint32_t r = 0; r < count; r++) {
    checked(TRITONBACKEND_ModelInstanceReportStatistics(state->triton, requests[r], state->answered[r] == ANSWERED_OK,
                                                        b.exec_start, b.compute_start, b.compute_end, exec_end),
            NULL, 0);
  }
  if (live_count)
    checked(TRITONBACKEND_ModelInstanceReportBatchStatistics(state->triton, batch_size, b.exec_start, b.compute_start,
                                                             b.compute_end, exec_end),
            NULL, 0);
  for (uint32_t r = 0; r < count; r++) checked(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL), NULL, 0);
  free(live);
}

/* ---- the entry points ---- */

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major, minor;
  TRITONSERVER_Error* error = TRITONBACKEND_ApiVersion(&major, &minor);
  if (error != NULL) return error;
  if (major != PYT_BACKEND_API_MAJOR || minor < PYT_BACKEND_API_MINOR)
    return error_new(TRITONSERVER_ERROR_UNSUPPORTED,
                     "the pytriton backend needs Triton's backend API %d.%d or a later 1.x; this server has %u.%u",
                     PYT_BACKEND_API_MAJOR, PYT_BACKEND_API_MINOR, major, minor);
  LOG_INFO("pytriton backend: backend API %u.%u, wire protocol %d", major, minor, PYT_PROTOCOL_VERSION);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend* backend,
                                                      TRITONBACKEND_BackendAttribute* attributes) {
  (void)backend;
  /* Instances share nothing at initialization: Triton may start them at once. */
  return TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(attributes, true);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* triton) {
  model_state* model = calloc(1, sizeof(model_state));
  if (model == NULL) return error_new(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  const char* name = "";
  TRITONSERVER_Error* error = TRITONBACKEND_ModelName(triton, &name);
  if (error == NULL) error = TRITONBACKEND_ModelVersion(triton, &model->version);
  if (error == NULL) {
    snprintf(model->name, sizeof(model->name), "%s", name);
    error = model_read_config(model, triton);
  }
  if (error == NULL) error = TRITONBACKEND_ModelSetState(triton, model);
  if (error != NULL) model_free(model);
  return error;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* triton) {
  void* model = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelState(triton, &model);
  if (error != NULL) return error;
  model_free(model);
  return NULL;
}

static void instance_free(instance_state* state) {
  if (state->watcher_started) {
    pthread_mutex_lock(&state->lock);
    state->closing = 1;
    pthread_cond_signal(&state->wake);
    pthread_mutex_unlock(&state->lock);
    pthread_join(state->watcher, NULL);
  }
  pthread_mutex_destroy(&state->lock);
  pthread_cond_destroy(&state->wake);
  instance_disconnect(state);
  pyt_arena_close(&state->arena);
  pyt_mapping_close(&state->mapping);
  pyt_buf_free(&state->header);
  pyt_buf_free(&state->received);
  pyt_buf_free(&state->scratch);
  pyt_mv_pool_free(&state->pool);
  columns_free(state);
  free(state->pieces);
  free(state->iov);
  free(state->cancelled);
  free(state->answered);
  free(state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* triton_model;
  void* model_pointer = NULL;
  const char* instance_name = "";
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceModel(instance, &triton_model);
  if (error == NULL) error = TRITONBACKEND_ModelState(triton_model, &model_pointer);
  if (error == NULL) error = TRITONBACKEND_ModelInstanceName(instance, &instance_name);
  if (error != NULL) return error;
  model_state* model = model_pointer;
  /* Triton names instances <group>_<k>; k is the worker handler's number. */
  const char* suffix = strrchr(instance_name, '_');
  char* end = NULL;
  long index = suffix != NULL ? strtol(suffix + 1, &end, 10) : -1;
  if (suffix == NULL || end == suffix + 1 || *end != '\0' || index < 0 || (uint32_t)index >= model->socket_count)
    return error_new(TRITONSERVER_ERROR_INVALID_ARG,
                     "model '%s': instance '%s' has no worker handler (the model has %u); keep the instance_group "
                     "pytriton's bind wrote",
                     model->name, instance_name, model->socket_count);
  instance_state* state = calloc(1, sizeof(instance_state));
  if (state == NULL) return error_new(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  state->model = model;
  state->triton = instance;
  state->index = (uint32_t)index;
  state->fd = -1;
  state->idle_released = 1;
  state->last_batch = now_s();
  snprintf(state->instance_name, sizeof(state->instance_name), "%s", instance_name);
  snprintf(state->data_socket, sizeof(state->data_socket), "%s", model->data_sockets[index]);
  pthread_mutex_init(&state->lock, NULL);
  pthread_cond_init(&state->wake, NULL);
  char why[MAX_ERROR];
  if (instance_connect(state, model->handshake_timeout_s, why, sizeof(why)) != 0) {
    instance_free(state);
    return error_new(TRITONSERVER_ERROR_UNAVAILABLE, "Model '%s': %s", model->name, why);
  }
  if (pthread_create(&state->watcher, NULL, idle_watch, state) == 0) state->watcher_started = 1;
  error = TRITONBACKEND_ModelInstanceSetState(instance, state);
  if (error != NULL) {
    instance_free(state);
    return error;
  }
  LOG_INFO("pytriton backend: model '%s' instance %u serves through worker pid %d", model->name, state->index,
           state->worker_pid);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* state = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(instance, &state);
  if (error != NULL) return error;
  if (state != NULL) instance_free(state);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, uint32_t request_count) {
  void* pointer = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(instance, &pointer);
  if (error != NULL) return error;
  instance_state* state = pointer;
  pthread_mutex_lock(&state->lock);
  state->last_batch = now_s();
  state->idle_released = 0;
  execute_batch(state, requests, request_count);
  state->last_batch = now_s();
  pthread_mutex_unlock(&state->lock);
  return NULL;
}
