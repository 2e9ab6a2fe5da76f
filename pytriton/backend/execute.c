/* A plain callable's batch, on the thread Triton runs the instance on: build and send the
 * InferBatch, wait for the BatchResult, turn it into responses, release the requests.
 *
 * The thread that sends the batch is the one the kernel wakes with the answer; while it
 * waits it tells the worker which requests their clients cancelled, and looks whether the
 * worker lives. When the worker dies, the batch is answered at once with the cause. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "execute.h"

#include "arena.h"
#include "batch.h"
#include "instance.h"
#include "model.h"
#include "requests.h"
#include "responses.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

#define AVERAGE_WEIGHT 0.125
/* The spin below pays only where the instance waits for work between batches (a client at a
 * time): batches that follow each other within this gap mean requests queue, the cores are busy
 * and a spin would take the CPU the front end and the worker need (measured: 10-20 % more CPU per
 * request at concurrency 16, where most batches hold one request). */
#define SPIN_IDLE_GAP_S 100e-6
/* A batch that reached the instance within this gap of the last one's end was waiting for it:
 * requests queue, and the instance is what the cores are busy serving. A client at a time
 * leaves gaps of over 100 us (its answer's way back and its next request's way in, see
 * SPIN_IDLE_GAP_S); Triton's own hand-off of a queued batch took over 20 us on a loaded
 * machine. */
#define BUSY_GAP_S 50e-6
/* The hold costs at most this share of the time a batch's answer takes. */
#define HOLD_SHARE 0.1

typedef struct {
  pyt_instance* instance;
  TRITONBACKEND_Request** live;
  uint32_t* index; /* each live request's position in the batch */
  uint32_t count;
  double idle_before_s; /* how long the instance waited for this batch */
} live_batch;

static void answer_error(live_batch* b, uint32_t slot, TRITONSERVER_Error_Code code, const char* text) {
  uint8_t* answered = &b->instance->answered[b->index[slot]];
  if (*answered) return;
  *answered = PYT_ANSWERED_ERROR;
  pyt_send_error(b->live[slot], NULL, code, text);
}

/* Send the laid-out batch to the worker; 0, or -1 with errno (a full socket is waited out while
 * the worker lives). */
static int send_batch(pyt_instance* instance) {
  for (;;) {
    pthread_mutex_lock(&instance->send_lock);
    int sent = pyt_send_batch(instance->fd, &instance->out);
    pthread_mutex_unlock(&instance->send_lock);
    if (sent == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || !pyt_pid_alive(instance->worker_pid)) return sent;
  }
}

static void fail_live(live_batch* b, TRITONSERVER_Error_Code code, const char* text) {
  for (uint32_t slot = 0; slot < b->count; slot++) answer_error(b, slot, code, text);
}

/* Send the worker the positions of the batch's requests cancelled since the last look. */
static void tell_cancelled(live_batch* b, int64_t batch_id) {
  pyt_instance* instance = b->instance;
  uint32_t count = 0;
  int newly = 0;
  for (uint32_t slot = 0; slot < b->count; slot++) {
    bool cancelled = instance->cancelled[slot];
    if (!cancelled && pyt_checked(TRITONBACKEND_RequestIsCancelled(b->live[slot], &cancelled), NULL, 0) == 0 &&
        cancelled) {
      instance->cancelled[slot] = 1;
      newly = 1;
    }
    count += instance->cancelled[slot];
  }
  if (!newly) return;
  pyt_buf message = {0};
  pyt_m_tuple(&message, PYT_CANCEL_FIELDS);
  pyt_m_int(&message, PYT_KIND_CANCEL);
  pyt_m_int(&message, batch_id);
  pyt_m_tuple(&message, count);
  for (uint32_t slot = 0; slot < b->count; slot++)
    if (instance->cancelled[slot]) pyt_m_int(&message, slot);
  pthread_mutex_lock(&instance->send_lock);
  int failed = message.failed || pyt_send_header(instance->fd, &message) != 0;
  pthread_mutex_unlock(&instance->send_lock);
  if (failed)
    for (uint32_t slot = 0; slot < b->count; slot++) instance->cancelled[slot] = 0; /* told at the next look */
  pyt_buf_free(&message);
}

/* Wait for the BatchResult of batch `batch_id`. 1: `result` holds it; 0: the worker is gone;
 * -1: the worker answered something unreadable (`why`); -2: a second signal gave the batch up. */
static int wait_result(live_batch* b, int64_t batch_id, pyt_message* message, pyt_mv** result, char* why,
                       size_t why_size) {
  pyt_instance* instance = b->instance;
  double sent = pyt_now_s();
  double next_liveness = sent + PYT_LIVENESS_CHECK_S;
  /* A thread woken by the worker's answer starts on a cold core tens of microseconds later: an
   * answer due within the spin window is cheaper to catch awake, polling and yielding the core
   * between looks. Only for a batch of one that the instance waited for (several, or batches
   * back to back, mean requests queue: the cores are busy) and whose answers usually come within
   * the window (pytriton/proxy/waiting.py measured both). */
  int spin = b->count == 1 && b->idle_before_s >= SPIN_IDLE_GAP_S && instance->model->spin_s > 0 &&
             instance->typical_answer_s < instance->model->spin_s;
  for (;;) {
    int got = 0;
    if (spin) {
      double until = sent + instance->model->spin_s;
      do {
        got = pyt_receive_message_nowait(instance->fd, &instance->received, message, why, why_size);
        if (got != 0) break;
        sched_yield();
      } while (pyt_now_s() < until);
      spin = 0;
    }
    if (got == 0) got = pyt_receive_message(instance->fd, &instance->received, message, why, why_size);
    if (got < 0) return 0;
    if (got == 0) {
      if (pyt_abandoned(instance->model)) return -2;
      tell_cancelled(b, batch_id);
      if (pyt_now_s() >= next_liveness) {
        if (!pyt_pid_alive(instance->worker_pid)) return 0;
        next_liveness = pyt_now_s() + PYT_LIVENESS_CHECK_S;
      }
      continue;
    }
    instance->typical_answer_s += (pyt_now_s() - sent - instance->typical_answer_s) * AVERAGE_WEIGHT;
    pyt_mv* value = pyt_marshal_read(&instance->pool, message->header, message->header_size, why, why_size);
    if (value == NULL) return -1;
    if (pyt_mv_int(pyt_mv_item(value, PYT_AT_KIND), -1) == PYT_KIND_BATCH_RESULT &&
        pyt_mv_int(pyt_mv_item(value, PYT_BATCH_RESULT_BATCH_ID), -1) == batch_id) {
      *result = value;
      return 1;
    }
    /* otherwise a late answer to a batch given up on: keep waiting */
  }
}

/* Each live request's response from the BatchResult. */
static void respond_all(live_batch* b, pyt_mv* result, const pyt_message* message) {
  pyt_instance* instance = b->instance;
  const pyt_model* model = instance->model;
  char why[PYT_MAX_ERROR];
  pyt_mv* errors = pyt_mv_item(result, PYT_BATCH_RESULT_ERRORS);
  pyt_mv* columns = pyt_mv_item(result, PYT_BATCH_RESULT_COLUMNS);
  pyt_mv* segment = pyt_mv_item(result, PYT_BATCH_RESULT_SEGMENT);
  pyt_mv* codes = pyt_mv_item(result, PYT_BATCH_RESULT_CODES); /* absent or empty: every error INTERNAL */
  if (errors == NULL || errors->kind != PYT_MV_TUPLE || errors->count != b->count || columns == NULL ||
      columns->kind != PYT_MV_TUPLE) {
    snprintf(why, sizeof(why), "Model '%s': the worker answered %u responses for %u requests", model->name,
             errors != NULL ? errors->count : 0, b->count);
    fail_live(b, TRITONSERVER_ERROR_INTERNAL, why);
    return;
  }
  const uint8_t* shm = NULL;
  size_t shm_size = 0;
  if (pyt_mv_is_str(segment) && segment->count > 0) {
    char name[224];
    pyt_mv_copy(segment, name, sizeof(name));
    shm = pyt_mapping_get(&instance->mapping, name, &shm_size);
  }
  for (uint32_t slot = 0; slot < b->count; slot++) {
    char* error = pyt_error_text(errors->items[slot]);
    if (error != NULL) {
      answer_error(b, slot, pyt_error_code(codes, slot), error);
      free(error);
      continue;
    }
    TRITONBACKEND_Response* response;
    if (pyt_checked(TRITONBACKEND_ResponseNew(&response, b->live[slot]), why, sizeof(why)) == 0) {
      if (pyt_fill_response(response, model, columns, slot, message, shm, shm_size, b->live[slot], why,
                            sizeof(why)) == 0 &&
          pyt_checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL), why,
                      sizeof(why)) == 0) {
        instance->answered[b->index[slot]] = PYT_ANSWERED_OK;
        continue;
      }
      pyt_checked(TRITONBACKEND_ResponseDelete(response), NULL, 0);
    }
    PYT_ERROR("%s", why);
    answer_error(b, slot, TRITONSERVER_ERROR_INTERNAL, why);
  }
}

/* How long the instance waits, once a batch is answered, before it takes the next one.
 *
 * Triton's dynamic batcher (with no queue delay) hands a free instance whatever has queued,
 * and this backend frees its instance quickly: under load most batches hold one or two
 * requests, and each batch costs its fixed share (a hand-off to the worker and back, the
 * callable's call, Triton's scheduling) again. When batches follow each other back to back
 * (the requests queue and the cores are busy), a short pause lets the front end queue more
 * requests for the next batch: fewer, larger batches, for less CPU per request. Measured on 2
 * cores over HTTP with a 100 us hold, medians of three paired runs: batches of 4-5 instead of
 * 1.8-2.2, 1.34x the throughput at concurrency 16 and 1.13x at 64 (docs/design/hop.md).
 * An instance that waited for its batch never holds (a client at a time pays nothing), nor
 * one whose batch is already full, nor one whose callable takes over ten times the hold (its
 * batches fill while it runs). */
static double hold_after(const pyt_instance* instance, double idle_before_s, uint64_t rows) {
  const pyt_model* model = instance->model;
  if (model->hold_s <= 0 || idle_before_s >= BUSY_GAP_S || rows >= model->max_batch_size) return 0;
  return instance->typical_answer_s * HOLD_SHARE <= model->hold_s ? model->hold_s : 0;
}

void pyt_execute(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count) {
  const pyt_model* model = instance->model;
  uint64_t exec_start = pyt_now_ns();
  char why[PYT_MAX_ERROR];
  char text[PYT_MAX_ERROR + 512];
  TRITONBACKEND_Request** live = malloc((count ? count : 1) * sizeof(*live));
  uint32_t* index = malloc((count ? count : 1) * sizeof(*index));
  if (live == NULL || index == NULL || pyt_ensure_flags(instance, count) != 0) {
    for (uint32_t r = 0; r < count; r++) pyt_send_error(requests[r], NULL, TRITONSERVER_ERROR_INTERNAL, "out of memory");
    memset(instance->answered, PYT_ANSWERED_ERROR, instance->flags_cap < count ? instance->flags_cap : count);
    pyt_finish_batch(instance, requests, count, 0, 0, exec_start, exec_start, exec_start);
    free(live);
    free(index);
    return;
  }
  double idle_before_s = instance->last_done_s > 0 ? (double)exec_start / 1e9 - instance->last_done_s : 1.0;
  live_batch b = {instance, live, index, pyt_answer_early(instance, requests, count, live, index), idle_before_s};
  memset(instance->cancelled, 0, b.count);
  uint64_t compute_start = pyt_now_ns(), compute_end = compute_start, rows = 0;
  instance->out.column_count = 0;
  if (b.count == 0) goto done;
  if (instance->fd < 0 && pyt_instance_connect(instance, PYT_RECONNECT_S, why, sizeof(why)) != 0) {
    snprintf(text, sizeof(text), "Model '%s': %s", model->name, why);
    fail_live(&b, TRITONSERVER_ERROR_UNAVAILABLE, text);
    goto done;
  }
  int64_t batch_id = ++instance->batch_id;
  pyt_batch_spec spec = {live, b.count, batch_id, exec_start, &instance->arena,
                         instance->has_last_stamps ? instance->last_stamps : NULL};
  if (pyt_build_batch(model, &instance->out, &spec, why, sizeof(why)) != 0) {
    fail_live(&b, TRITONSERVER_ERROR_INTERNAL, why);
    goto done;
  }
  rows = pyt_batch_rows(model, &instance->out, b.count);
  compute_start = pyt_now_ns(); /* Triton's "compute input" ends: the inputs are laid out */
  int sent = send_batch(instance);
  if (sent != 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)) {
    /* The connection had ended before this batch went out: a process instance's worker died
     * while the instance was idle. The batch reached no worker, so it goes to the fresh worker
     * that takes its place, once; a worker that dies holding it fails it below. */
    if (pyt_instance_connect(instance, PYT_RECONNECT_S, why, sizeof(why)) != 0) {
      snprintf(text, sizeof(text), "Model '%s': its worker ended, and %s", model->name, why);
      fail_live(&b, TRITONSERVER_ERROR_UNAVAILABLE, text);
      goto done;
    }
    sent = send_batch(instance);
  }
  pyt_message message;
  pyt_mv* result = NULL;
  __atomic_store_n(&instance->in_flight, b.count, __ATOMIC_RELAXED);
  int outcome = sent == 0 ? wait_result(&b, batch_id, &message, &result, why, sizeof(why)) : 0;
  __atomic_store_n(&instance->in_flight, 0, __ATOMIC_RELAXED);
  compute_end = pyt_now_ns();
  if (outcome == -2) { /* the server ends now: the clients hear it from the server, not a closed connection */
    pyt_abandoned_text(model, text, sizeof(text));
    fail_live(&b, TRITONSERVER_ERROR_UNAVAILABLE, text);
    goto done;
  }
  if (outcome <= 0) {
    if (outcome == 0) {
      int pid = instance->worker_pid;
      pyt_instance_disconnect(instance);
      char cause[PYT_MAX_ERROR];
      pyt_death_cause(instance, pid, cause, sizeof(cause));
      snprintf(text, sizeof(text), "Model '%s': %s", model->name, cause);
    } else {
      snprintf(text, sizeof(text), "Model '%s': the worker's answer is unreadable (%s)", model->name, why);
    }
    PYT_ERROR("%s", text);
    fail_live(&b, TRITONSERVER_ERROR_INTERNAL, text);
    goto done;
  }
  uint64_t received_ns = model->stamps ? pyt_now_ns() : 0;
  respond_all(&b, result, &message);
  /* BatchResult.inputs_kept: the callable kept arrays viewing this batch's input arena. They
   * hold the worker's mapping of it; the next batch must not overwrite them, so it gets a new
   * segment (this one is unlinked now and freed when the worker lets go). */
  if (pyt_mv_int(pyt_mv_item(result, PYT_BATCH_RESULT_INPUTS_KEPT), 0)) pyt_arena_close(&instance->arena);
  if (model->stamps) {
    pyt_mv* stamps = pyt_mv_item(result, PYT_BATCH_RESULT_STAMPS);
    instance->has_last_stamps = stamps != NULL && stamps->kind == PYT_MV_TUPLE && stamps->count == PYT_STAMP_RESULT;
    if (instance->has_last_stamps) {
      for (uint32_t s = 0; s < PYT_STAMP_RESULT; s++) instance->last_stamps[s] = pyt_mv_int(stamps->items[s], 0);
      instance->last_stamps[PYT_STAMP_RESULT] = (int64_t)received_ns;
      instance->last_stamps[PYT_STAMP_RESPONDED] = (int64_t)pyt_now_ns();
    }
  }
done:
  pyt_finish_batch(instance, requests, count, rows, b.count, exec_start, compute_start, compute_end);
  free(live);
  free(index);
  double hold = hold_after(instance, idle_before_s, rows);
  if (hold > 0) usleep((useconds_t)(hold * 1e6));
  instance->last_done_s = (double)pyt_now_ns() / 1e9;
}
