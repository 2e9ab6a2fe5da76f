/* pytriton's Triton backend: the entry points Triton calls, and what a model's configuration
 * tells the backend.
 *
 * Each batch goes from Triton's memory to the worker in the user's process over the data
 * channel, and the worker's answer becomes Triton's responses: a request crosses as many
 * processes as it does with Triton's own Python backend, with no stub in between. One Triton
 * model instance is one connection to one worker handler (one callable).
 *
 * The readiness gate is a model of this backend too: it has no worker, and its initialize
 * returns once a file exists (or the process that owns the server is gone), so that the
 * server reports not ready until the script's models are bound (pytriton/server/readiness.py).
 * So is what a stop reloads each model as (pytriton.refuse, pytriton/ipc/stopping.py): no
 * worker either, every request refused at once as retryable.
 *
 * The backend's units stand in layers, top to bottom; each uses only the units on the lines below
 * its own, never a neighbour nor one above (tests/unit/backend/test_layers.py):
 *
 *   backend.c       the entry points; a model's configuration; the readiness gate; it starts and
 *                   stops each instance's connection, relay and metrics thread
 *   execute.c       a plain callable's batch: send, wait for the answer, respond (Triton's thread)
 *   relay.c         streams and coroutines: send and return; the relay's thread answers later
 *   metrics.c       the worker's metric families -> Triton's /metrics
 *   route.c         a multiplexed model's batch: the free instance that holds its variants
 *   batch.c         around every batch: the requests answered before it goes (cancelled, null,
 *                   refused), Triton's statistics and the requests' release after
 *   instance.c      an instance's connection to its worker handler (greeting, reconnection, the
 *                   cause of a worker's death), its idle watcher, what each batch reuses
 *   requests.c      Triton's requests -> one InferBatch header and its payload (the way in)
 *   responses.c     the worker's answer -> Triton's responses (the way out)
 *   model.h         a model, as its configuration tells the backend
 *   util.c          clocks, logging, errors, data types
 *   arena.c         shared memory for large tensors
 *   wire.c          the wire's encoding and framing
 *   json.c          just enough JSON for a model's configuration
 *   contract.h      the wire's kinds, fields and parameters, generated from pytriton/ipc/protocol.py
 *   triton_api.h    Triton's C API, the part the backend calls
 *
 * (execute.c, relay.c, metrics.c and route.c share a layer, as requests.c and responses.c do, util.c and
 * arena.c, wire.c and json.c, contract.h and triton_api.h.) Each unit's header declares its own
 * functions and types only. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "execute.h"
#include "instance.h"
#include "json.h"
#include "metrics.h"
#include "model.h"
#include "relay.h"
#include "route.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

#define DEFAULT_SPIN_US 200.0 /* as pytriton/proxy/waiting.py: see execute.c */
#define DEFAULT_HOLD_US 100.0 /* see execute.c */
#define GATE_POLL_US 5000

/* What Triton keeps for one of its model instances: the connection to the worker handler, and
 * the threads beside it that use it, which these entry points start and stop. */
typedef struct {
  pyt_instance instance; /* the connection, and what each batch reuses (instance.c) */
  pyt_relay* relay;      /* relayed models: answers their batches after execute returned (relay.c) */
  pyt_metrics* metrics;  /* the worker's metrics on Triton's /metrics (metrics.c); NULL when off */
  pyt_router* router;    /* a routed multiplexed model's (route.c): its batches go where their variants are */
} served;

/* What Triton keeps for a model: what its configuration says (the pyt_model every unit reads, first,
 * so that the state is one too), and a multiplexed model's router. */
typedef struct {
  pyt_model model;
  pyt_router* router; /* NULL: Triton's choice of instance stands */
} model_state;

static void served_free(served* state) {
  pyt_router_leave(state->router, &state->instance);
  pyt_metrics_stop(state->metrics);
  pyt_relay_stop(state->relay);
  pyt_instance_close(&state->instance);
  free(state);
}

static void model_free(model_state* state) {
  if (state == NULL) return;
  pyt_model* model = &state->model;
  if (model->stopping != NULL) munmap((void*)model->stopping, PYT_STOPPING_BYTES);
  for (uint32_t i = 0; i < model->socket_count; i++) free(model->data_sockets[i]);
  free(model->data_sockets);
  free(model->instance_names);
  pyt_router_free(state->router);
  free(state);
}

static int flag(const pyt_json* config, const char* key) {
  const char* value = pyt_json_parameter(config, key);
  return value != NULL && strcmp(value, "1") == 0;
}

/* A number Triton's JSON gives as a number or, for 64-bit fields, as a string. */
static double json_number(const pyt_json* value) {
  if (value == NULL) return 0;
  return value->kind == PYT_JSON_STRING ? atof(value->text) : value->number;
}

/* Whether the instances of a model may hold between busy batches (execute.c): a plain callable
 * behind Triton's dynamic batcher with no queue delay of the user's (a delay set means the
 * batches are tuned already; a sequence's requests are not to wait). */
static int holds(const pyt_model* model, const pyt_json* config) {
  const pyt_json* dynamic = pyt_json_get(config, "dynamic_batching");
  return model->batching && !model->relayed && !model->sequences && dynamic != NULL &&
         json_number(pyt_json_get(dynamic, "max_queue_delay_microseconds")) == 0;
}

/* `pattern` with each "{version}" replaced by `version` (malloc'd; NULL when out of memory).
 * Every version of a name shares one configuration, so it names each instance's data socket
 * with the version left open: an instance connects to the workers of the version it serves,
 * also when it reconnects while another version of the name is bound. */
static char* with_version(const char* pattern, uint64_t version) {
  static const char token[] = PYT_VERSION_TOKEN;
  char number[24];
  int digits = snprintf(number, sizeof(number), "%llu", (unsigned long long)version);
  size_t count = 0;
  for (const char* at = strstr(pattern, token); at != NULL; at = strstr(at + sizeof(token) - 1, token)) count++;
  char* out = malloc(strlen(pattern) + count * (size_t)digits + 1);
  if (out == NULL) return NULL;
  char* end = out;
  for (const char* at = pattern;;) {
    const char* next = strstr(at, token);
    size_t plain = next != NULL ? (size_t)(next - at) : strlen(at);
    memcpy(end, at, plain);
    end += plain;
    if (next == NULL) break;
    memcpy(end, number, (size_t)digits);
    end += digits;
    at = next + sizeof(token) - 1;
  }
  *end = '\0';
  return out;
}

static TRITONSERVER_Error* read_config(model_state* state, TRITONBACKEND_Model* triton, char* gate_path,
                                       size_t gate_size) {
  pyt_model* model = &state->model;
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
    return pyt_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': its configuration is not JSON (%s)", model->name,
                     why);
  const pyt_json* outputs = pyt_json_get(config, "output");
  model->output_count = outputs != NULL ? (uint32_t)outputs->count : 0;
  const pyt_json* batch = pyt_json_get(config, "max_batch_size");
  model->batching = batch != NULL && batch->number > 0;
  model->max_batch_size = model->batching ? (uint64_t)batch->number : 0;
  model->sequences = pyt_json_get(config, "sequence_batching") != NULL;
  const pyt_json* decoupled = pyt_json_get(pyt_json_get(config, "model_transaction_policy"), "decoupled");
  model->decoupled = decoupled != NULL && decoupled->number != 0;
  int coroutines = flag(config, PYT_PARAM_RELAYED);
  model->relayed = model->decoupled || coroutines;
  const char* streams = pyt_json_parameter(config, PYT_PARAM_CONTINUOUS);
  model->continuous = model->decoupled && streams != NULL && atoi(streams) > 0 ? (uint32_t)atoi(streams) : 0;
  model->one_at_a_time = model->decoupled && !coroutines && !model->continuous;
  model->stamps = flag(config, PYT_PARAM_STAMPS) && !model->relayed;
  model->tracing = flag(config, PYT_PARAM_TRACING);
  const char* value = pyt_json_parameter(config, PYT_PARAM_METRICS);
  model->metrics = value == NULL || strcmp(value, "0") != 0;
  value = pyt_json_parameter(config, PYT_PARAM_METRICS_PERIOD_S);
  model->metrics_period_s = value != NULL && atof(value) > 0 ? atof(value) : 1.0;
  value = pyt_json_parameter(config, PYT_PARAM_WORKER_PID);
  model->worker_pid = value != NULL ? atoi(value) : 0;
  value = pyt_json_parameter(config, PYT_PARAM_HANDSHAKE_TIMEOUT_S);
  model->handshake_timeout_s = value != NULL ? atof(value) : 60.0;
  value = pyt_json_parameter(config, PYT_PARAM_SPIN_US);
  model->spin_s = (value != NULL ? atof(value) : DEFAULT_SPIN_US) / 1e6;
  if (model->spin_s < 0) model->spin_s = 0;
  value = pyt_json_parameter(config, PYT_PARAM_HOLD_US);
  model->hold_s = holds(model, config) ? (value != NULL ? atof(value) : DEFAULT_HOLD_US) / 1e6 : 0;
  if (model->hold_s < 0) model->hold_s = 0;
  value = pyt_json_parameter(config, PYT_PARAM_GATE_RELEASE);
  if (value != NULL) {
    model->gate = 1;
    snprintf(gate_path, gate_size, "%s", value);
    pyt_json_free(config);
    return NULL;
  }
  if (flag(config, PYT_PARAM_REFUSE)) { /* a stop's refusing model: no worker to find */
    model->refuse = 1;
    pyt_json_free(config);
    return NULL;
  }
  value = pyt_json_parameter(config, PYT_PARAM_STOPPING);
  if (value != NULL) {
    int fd = open(value, O_RDONLY | O_CLOEXEC);
    void* flag = fd >= 0 ? mmap(NULL, PYT_STOPPING_BYTES, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) close(fd);
    if (flag != MAP_FAILED)
      model->stopping = flag;
    else
      PYT_WARN("model '%s': cannot map the stopping flag %s: a stop will not refuse its new requests", model->name,
               value);
  }
  value = pyt_json_parameter(config, PYT_PARAM_INSTANCE_NAMES);
  model->instance_names = value != NULL ? strdup(value) : NULL;
  const char* multiplex = pyt_json_parameter(config, PYT_PARAM_MULTIPLEX);
  value = pyt_json_parameter(config, PYT_PARAM_DATA_SOCKETS);
  pyt_json* sockets = value != NULL ? pyt_json_parse(value, strlen(value), why, sizeof(why)) : NULL;
  /* A multiplexed model's batches go to the instance that holds their variants (route.c): where
   * batches do not overlap on an instance and a sequence need not stay on one. */
  if (multiplex != NULL && sockets != NULL && sockets->kind == PYT_JSON_ARRAY && sockets->count > 1 &&
      !model->relayed && !model->sequences) {
    state->router = pyt_router_new(multiplex, (uint32_t)sockets->count, model->max_batch_size, why,
                                   sizeof(why));
    if (state->router == NULL)
      PYT_WARN("model '%s': its %s parameter is unreadable (%s): its batches go where Triton sends them", model->name,
               PYT_PARAM_MULTIPLEX, why);
  }
  pyt_json_free(config);
  if (sockets == NULL || sockets->kind != PYT_JSON_ARRAY || sockets->count == 0) {
    pyt_json_free(sockets);
    return pyt_error(TRITONSERVER_ERROR_INVALID_ARG,
                     "model '%s': its configuration lacks the parameter pytriton.data_sockets (a JSON list of the "
                     "worker's socket paths); only models bound with pytriton run on the pytriton backend",
                     model->name);
  }
  model->data_sockets = calloc(sockets->count, sizeof(char*));
  for (size_t i = 0; model->data_sockets != NULL && i < sockets->count; i++) {
    const pyt_json* item = sockets->items[i];
    model->data_sockets[i] = with_version(item->kind == PYT_JSON_STRING ? item->text : "", model->version);
    if (model->data_sockets[i] != NULL) model->socket_count++;
  }
  int complete = model->data_sockets != NULL && model->socket_count == sockets->count;
  pyt_json_free(sockets);
  return complete ? NULL : pyt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
}

/* The readiness gate's load: until `path` exists, or the process that owns the server is gone
 * (then the load fails, and the server, whose owner died, has nothing to wait for). */
static TRITONSERVER_Error* hold_gate(const pyt_model* model, const char* path) {
  struct stat info;
  while (stat(path, &info) != 0) {
    if (!pyt_pid_alive(model->worker_pid))
      return pyt_error(TRITONSERVER_ERROR_UNAVAILABLE,
                       "pytriton's readiness gate gave up: the process that owns this server (pid %d) is gone",
                       model->worker_pid);
    usleep(GATE_POLL_US);
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major, minor;
  TRITONSERVER_Error* error = TRITONBACKEND_ApiVersion(&major, &minor);
  if (error != NULL) return error;
  if (major != PYT_BACKEND_API_MAJOR || minor < PYT_BACKEND_API_MINOR)
    return pyt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                     "the pytriton backend needs Triton's backend API %d.%d or a later 1.x; this server has %u.%u",
                     PYT_BACKEND_API_MAJOR, PYT_BACKEND_API_MINOR, major, minor);
  PYT_INFO("pytriton backend: backend API %u.%u, wire protocol %d", major, minor, PYT_PROTOCOL_VERSION);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend* backend,
                                                      TRITONBACKEND_BackendAttribute* attributes) {
  (void)backend;
  /* Instances share nothing while they start: Triton may start a model's instances at once. */
  return TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(attributes, true);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* triton) {
  model_state* state = calloc(1, sizeof(model_state));
  if (state == NULL) return pyt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  pyt_model* model = &state->model;
  const char* name = "";
  char gate_path[4096] = "";
  TRITONSERVER_Error* error = TRITONBACKEND_ModelName(triton, &name);
  if (error == NULL) error = TRITONBACKEND_ModelVersion(triton, &model->version);
  if (error == NULL) {
    snprintf(model->name, sizeof(model->name), "%s", name);
    error = read_config(state, triton, gate_path, sizeof(gate_path));
  }
  if (error == NULL && model->gate) error = hold_gate(model, gate_path);
  if (error == NULL) error = TRITONBACKEND_ModelSetState(triton, state);
  if (error != NULL) model_free(state);
  return error;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* triton) {
  void* model = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelState(triton, &model);
  if (error != NULL) return error;
  model_free(model);
  return NULL;
}

/* The worker handler's number of Triton instance `name`: its place in the model's
 * pytriton.instance_names where bind wrote one (instances grouped by device, named after it),
 * else the k of Triton's <group>_<k>. -1 when neither tells. */
static long instance_index(const pyt_model* model, const char* name) {
  if (model->instance_names != NULL) {
    char why[PYT_MAX_ERROR];
    pyt_json* names = pyt_json_parse(model->instance_names, strlen(model->instance_names), why, sizeof(why));
    long found = -1;
    for (size_t i = 0; names != NULL && names->kind == PYT_JSON_ARRAY && i < names->count && found < 0; i++)
      if (names->items[i]->kind == PYT_JSON_STRING && strcmp(names->items[i]->text, name) == 0) found = (long)i;
    pyt_json_free(names);
    return found;
  }
  const char* suffix = strrchr(name, '_');
  char* end = NULL;
  long index = suffix != NULL ? strtol(suffix + 1, &end, 10) : -1;
  return suffix == NULL || end == suffix + 1 || *end != '\0' ? -1 : index;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* triton) {
  TRITONBACKEND_Model* triton_model;
  void* pointer = NULL;
  const char* instance_name = "";
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceModel(triton, &triton_model);
  if (error == NULL) error = TRITONBACKEND_ModelState(triton_model, &pointer);
  if (error == NULL) error = TRITONBACKEND_ModelInstanceName(triton, &instance_name);
  if (error != NULL) return error;
  model_state* owner = pointer;
  pyt_model* model = &owner->model;
  if (model->gate || model->refuse) return NULL; /* no worker, no state */
  long index = instance_index(model, instance_name);
  if (index >= 0 && (uint32_t)index >= model->socket_count && owner->router != NULL) {
    /* a routed model's dispatcher (route.c): no worker of its own, its batches wait for one */
    served* dispatcher = calloc(1, sizeof(served));
    if (dispatcher == NULL) return pyt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
    pyt_instance_init(&dispatcher->instance, model, triton, (uint32_t)index);
    error = TRITONBACKEND_ModelInstanceSetState(triton, dispatcher);
    if (error != NULL) served_free(dispatcher);
    else dispatcher->router = owner->router;
    return error;
  }
  if (index < 0 || (uint32_t)index >= model->socket_count)
    return pyt_error(TRITONSERVER_ERROR_INVALID_ARG,
                     "model '%s': instance '%s' has no worker handler (the model has %u); keep the instance_group "
                     "pytriton's bind wrote",
                     model->name, instance_name, model->socket_count);
  served* state = calloc(1, sizeof(served));
  if (state == NULL) return pyt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  pyt_instance* instance = &state->instance;
  pyt_instance_init(instance, model, triton, (uint32_t)index);
  char why[PYT_MAX_ERROR];
  if (pyt_instance_connect(instance, model->handshake_timeout_s, why, sizeof(why)) != 0) {
    served_free(state);
    return pyt_error(TRITONSERVER_ERROR_UNAVAILABLE, "Model '%s': %s", model->name, why);
  }
  if (model->relayed) state->relay = pyt_relay_start(instance);
  if (model->metrics) state->metrics = pyt_metrics_start(instance);
  if ((model->relayed && state->relay == NULL) || (model->metrics && state->metrics == NULL)) {
    served_free(state);
    return pyt_error(TRITONSERVER_ERROR_INTERNAL, "Model '%s': cannot start the backend's threads", model->name);
  }
  error = TRITONBACKEND_ModelInstanceSetState(triton, state);
  if (error != NULL) {
    served_free(state);
    return error;
  }
  state->router = owner->router;
  pyt_router_join(state->router, instance);
  PYT_INFO("pytriton backend: model '%s' instance %u serves through worker pid %d", model->name, instance->index,
           instance->worker_pid);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* triton) {
  void* state = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(triton, &state);
  if (error != NULL) return error;
  if (state != NULL) served_free(state); /* NULL: a model without a worker */
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* triton,
                                                       TRITONBACKEND_Request** requests, uint32_t count) {
  void* pointer = NULL;
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(triton, &pointer);
  if (error != NULL) return error;
  if (pointer == NULL) { /* a model without a worker: a stop's refusing model, or the readiness gate */
    TRITONBACKEND_Model* triton_model;
    void* model = NULL;
    if (pyt_checked(TRITONBACKEND_ModelInstanceModel(triton, &triton_model), NULL, 0) == 0 &&
        pyt_checked(TRITONBACKEND_ModelState(triton_model, &model), NULL, 0) == 0 && model != NULL &&
        ((pyt_model*)model)->refuse) {
      pyt_refuse_all(model, requests, count);
      return NULL;
    }
    return pyt_error(TRITONSERVER_ERROR_UNSUPPORTED, "pytriton's readiness gate serves no requests");
  }
  served* state = pointer;
  /* A routed model's batch runs on the free instance that holds its variants (route.c), from this
   * thread, with the waiting batches it takes along; every other batch on the thread's own instance. */
  pyt_routed routed = {&state->instance, requests, count};
  if (state->router != NULL) routed = pyt_route(state->router, &state->instance, requests, count);
  pyt_instance* instance = routed.instance;
  if (instance == NULL) return NULL; /* taken along by another batch, which answers and releases them */
  pthread_mutex_lock(&instance->lock);
  instance->last_batch = pyt_now_s();
  instance->idle_released = 0;
  pthread_mutex_unlock(&instance->lock);
  if (state->relay != NULL) {
    pyt_execute_relayed(state->relay, routed.requests, routed.count);
  } else {
    pthread_mutex_lock(&instance->lock); /* the idle watcher takes the arena only between batches */
    pyt_execute(instance, routed.requests, routed.count);
    instance->last_batch = pyt_now_s();
    pthread_mutex_unlock(&instance->lock);
  }
  if (state->router != NULL) pyt_route_done(state->router, instance);
  return NULL;
}
