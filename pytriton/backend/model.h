/* A model, as its configuration tells the backend: backend.c reads it when Triton loads the model,
 * and every unit below the entry points reads it, none writes it. Also whether a stop refuses
 * the model's new batches now, or gave up those in flight (pytriton/ipc/stopping.py). */
#ifndef PYTRITON_MODEL_H
#define PYTRITON_MODEL_H

#include <stdint.h>

#include "wire.h"

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

#endif
