/* Streams and coroutines: batches whose answers come after execute returns.
 *
 * A decoupled model sends any number of responses per request, and a model whose callable is
 * a coroutine may have several batches of one instance in flight. For both, execute sends the
 * batch (every tensor inline: batches overlap, so no arena is reused under a reader), keeps a
 * response factory per request, releases the requests and returns, so Triton can hand the
 * instance its next batch. The relay thread receives the worker's StreamPart, StreamEnd and
 * BatchResult messages and answers through the factories, the last response of each request
 * carrying the final flag.
 *
 * It also watches the requesters: a request whose client went away gets a final CANCELLED
 * response, and once every request of a batch is gone the worker is told (Cancel) so that it
 * stops generating. When the worker goes away, every batch in flight is answered at once with
 * the cause, and the next batch connects to whatever worker serves the socket next.
 *
 * A plain generator runs one batch at a time in the worker anyway: its next batch waits in
 * execute until the stream before it ended, so that Triton's batcher gathers the requests that
 * arrive meanwhile into it.
 *
 * A continuous-batching model (pytriton/worker/continuous.py) runs one step at a time over the
 * streams of many batches: a new batch goes to the worker at once, to join the running ones at
 * its next step. The worker runs at most pytriton.continuous streams at once and keeps as many
 * more waiting to join, so that one joins at the very step after another left (a request sent
 * only once a stream ended would join a step later); past that, execute waits for a stream to
 * end, so the rest wait in Triton's queue, under its queue policy and priorities. A step is one
 * StepPart, a piece for each stream whatever batch it came in; each stream ends on its own, a
 * batch is forgotten once all of its have, and the worker learns of each requester that went
 * away (a Cancel with its position), not only of the last. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "relay.h"

#include "batch.h"
#include "instance.h"
#include "model.h"
#include "requests.h"
#include "responses.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

typedef struct pending {
  int64_t batch_id;
  uint32_t count;
  TRITONBACKEND_ResponseFactory** factories;
  uint8_t* open;
  uint8_t* cancelled; /* per request: its client went away (told to a continuous model's worker) */
  uint32_t cancelled_told;
  int cancel_sent;
  uint32_t* in_flight; /* once listed: the instance's count of open streams, which metrics.c reports */
  struct pending* next;
} pending;

struct pyt_relay {
  pyt_instance* instance;
  pthread_t thread;
  int started;
  pthread_mutex_t lock; /* the list of batches in flight, `closing` */
  pthread_cond_t changed;
  pending* head;
  int closing;
  pyt_buf received;
  pyt_mv_pool pool;
};

static int open_count(const pending* batch) {
  int open = 0;
  for (uint32_t i = 0; i < batch->count; i++) open += batch->open[i];
  return open;
}

/* Request `i`'s stream is closed: it leaves the instance's requests in flight. */
static void closed(pending* batch, uint32_t i) {
  batch->open[i] = 0;
  if (batch->in_flight != NULL) __atomic_sub_fetch(batch->in_flight, 1, __ATOMIC_RELAXED);
}

static void pending_free(pending* batch) {
  if (batch == NULL) return;
  if (batch->in_flight != NULL) /* every stream is closed by now; should one not be, the count stays true */
    __atomic_sub_fetch(batch->in_flight, (uint32_t)open_count(batch), __ATOMIC_RELAXED);
  for (uint32_t i = 0; i < batch->count; i++)
    if (batch->factories[i] != NULL) pyt_checked(TRITONBACKEND_ResponseFactoryDelete(batch->factories[i]), NULL, 0);
  free(batch->factories);
  free(batch->open);
  free(batch->cancelled);
  free(batch);
}

/* Unlink batch `batch_id` from the list (NULL when another thread took it already). */
static pending* take(pyt_relay* relay, int64_t batch_id) {
  pthread_mutex_lock(&relay->lock);
  pending** link = &relay->head;
  while (*link != NULL && (*link)->batch_id != batch_id) link = &(*link)->next;
  pending* found = *link;
  if (found != NULL) *link = found->next;
  pthread_cond_broadcast(&relay->changed);
  pthread_mutex_unlock(&relay->lock);
  return found;
}

static pending* find(pyt_relay* relay, int64_t batch_id) {
  pthread_mutex_lock(&relay->lock);
  pending* found = relay->head;
  while (found != NULL && found->batch_id != batch_id) found = found->next;
  pthread_mutex_unlock(&relay->lock);
  return found;
}

/* Close request `i`'s stream: with an error response, or with the final flag alone. */
static void finish(pending* batch, uint32_t i, TRITONSERVER_Error_Code code, const char* error) {
  if (!batch->open[i]) return;
  closed(batch, i);
  if (error != NULL)
    pyt_send_error(NULL, batch->factories[i], code, error);
  else
    pyt_checked(TRITONBACKEND_ResponseFactorySendFlags(batch->factories[i], TRITONSERVER_RESPONSE_COMPLETE_FINAL),
                NULL, 0);
}

static void fail_batch_with(pending* batch, TRITONSERVER_Error_Code code, const char* text) {
  for (uint32_t i = 0; i < batch->count; i++) finish(batch, i, code, text);
  pending_free(batch);
}

static void fail_batch(pending* batch, const char* text) { fail_batch_with(batch, TRITONSERVER_ERROR_INTERNAL, text); }

/* A second signal gave up the requests in flight: each batch answered UNAVAILABLE, retryable. */
static void abandon_all(pyt_instance* instance, pyt_relay* relay) {
  pthread_mutex_lock(&relay->lock);
  pending* batches = relay->head;
  relay->head = NULL;
  pthread_cond_broadcast(&relay->changed);
  pthread_mutex_unlock(&relay->lock);
  char text[512];
  pyt_abandoned_text(instance->model, text, sizeof(text));
  while (batches != NULL) {
    pending* next = batches->next;
    fail_batch_with(batches, TRITONSERVER_ERROR_UNAVAILABLE, text);
    batches = next;
  }
}

/* One response to request `index` of `batch` with the outputs at `slot` of `columns`; `final`
 * with the final flag. */
static void respond(pyt_instance* instance, pending* batch, uint32_t index, uint32_t slot, pyt_mv* columns,
                    const pyt_message* message, int final) {
  char why[PYT_MAX_ERROR];
  TRITONBACKEND_Response* response;
  if (pyt_checked(TRITONBACKEND_ResponseNewFromFactory(&response, batch->factories[index]), why, sizeof(why)) == 0) {
    if (pyt_fill_response(response, instance->model, columns, slot, message, NULL, 0, NULL, why, sizeof(why)) == 0 &&
        pyt_checked(TRITONBACKEND_ResponseSend(response, final ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0, NULL), why,
                    sizeof(why)) == 0) {
      if (final) closed(batch, index);
      return;
    }
    pyt_checked(TRITONBACKEND_ResponseDelete(response), NULL, 0);
  }
  PYT_ERROR("%s", why);
  finish(batch, index, TRITONSERVER_ERROR_INTERNAL, why);
}

/* A continuous model's step (StepPart): a piece for each of its streams, which came in many
 * batches. A batch whose streams have all ended is forgotten here (the worker sends it no
 * StreamEnd), and an execute waiting for room is told. */
static void on_step(pyt_instance* instance, pyt_relay* relay, pyt_mv* value, const pyt_message* message) {
  pyt_mv* ids = pyt_mv_item(value, PYT_STEP_PART_BATCH_IDS);
  pyt_mv* positions = pyt_mv_item(value, PYT_STEP_PART_POSITIONS);
  pyt_mv* present = pyt_mv_item(value, PYT_STEP_PART_PRESENT);
  pyt_mv* errors = pyt_mv_item(value, PYT_STEP_PART_ERRORS);
  pyt_mv* final = pyt_mv_item(value, PYT_STEP_PART_FINAL);
  pyt_mv* columns = pyt_mv_item(value, PYT_STEP_PART_COLUMNS);
  if (ids == NULL || ids->kind != PYT_MV_TUPLE) return;
  int ended = 0;
  pending* batch = NULL;
  for (uint32_t k = 0; k < ids->count; k++) {
    int64_t batch_id = pyt_mv_int(ids->items[k], -1);
    if (batch == NULL || batch->batch_id != batch_id) batch = find(relay, batch_id); /* pieces come grouped */
    int64_t index = pyt_mv_int(pyt_mv_item(positions, k), -1);
    if (batch == NULL || index < 0 || (uint64_t)index >= batch->count || !batch->open[index]) continue;
    int last = (int)pyt_mv_int(pyt_mv_item(final, k), 0);
    char* error = pyt_error_text(pyt_mv_item(errors, k));
    if (error != NULL) finish(batch, (uint32_t)index, TRITONSERVER_ERROR_INTERNAL, error);
    else if (pyt_mv_int(pyt_mv_item(present, k), 0)) respond(instance, batch, (uint32_t)index, k, columns, message, last);
    else if (last) finish(batch, (uint32_t)index, TRITONSERVER_ERROR_INTERNAL, NULL);
    ended |= error != NULL || last;
    free(error);
  }
  if (!ended) return;
  pthread_mutex_lock(&relay->lock);
  for (pending** link = &relay->head; *link != NULL;) {
    pending* done = *link;
    if (open_count(done) == 0) {
      *link = done->next;
      pending_free(done);
    } else {
      link = &done->next;
    }
  }
  pthread_cond_broadcast(&relay->changed);
  pthread_mutex_unlock(&relay->lock);
}

static void on_message(pyt_instance* instance, pyt_relay* relay, pyt_mv* value, const pyt_message* message) {
  int64_t kind = pyt_mv_int(pyt_mv_item(value, PYT_AT_KIND), -1);
  if (kind == PYT_KIND_STEP_PART) {
    on_step(instance, relay, value, message);
    return;
  }
  int64_t batch_id = pyt_mv_int(pyt_mv_item(value, PYT_STREAM_PART_BATCH_ID), -1); /* every answer's second field */
  if (kind == PYT_KIND_STREAM_PART) {
    pending* batch = find(relay, batch_id); /* only this thread frees a batch the worker answers */
    if (batch == NULL) return;
    pyt_mv* present = pyt_mv_item(value, PYT_STREAM_PART_PRESENT);
    pyt_mv* errors = pyt_mv_item(value, PYT_STREAM_PART_ERRORS);
    pyt_mv* columns = pyt_mv_item(value, PYT_STREAM_PART_COLUMNS);
    for (uint32_t i = 0; i < batch->count; i++) {
      if (!batch->open[i] || !pyt_mv_int(pyt_mv_item(present, i), 0)) continue;
      char* error = pyt_error_text(pyt_mv_item(errors, i));
      if (error != NULL) finish(batch, i, TRITONSERVER_ERROR_INTERNAL, error);
      else respond(instance, batch, i, i, columns, message, 0);
      free(error);
    }
  } else if (kind == PYT_KIND_STREAM_END || kind == PYT_KIND_BATCH_RESULT) {
    pending* batch = take(relay, batch_id);
    if (batch == NULL) return;
    pyt_mv* errors = pyt_mv_item(value, PYT_STREAM_END_ERRORS); /* where BatchResult has its errors too */
    pyt_mv* columns = kind == PYT_KIND_BATCH_RESULT ? pyt_mv_item(value, PYT_BATCH_RESULT_COLUMNS) : NULL;
    pyt_mv* codes = kind == PYT_KIND_BATCH_RESULT ? pyt_mv_item(value, PYT_BATCH_RESULT_CODES) : NULL;
    for (uint32_t i = 0; i < batch->count; i++) {
      char* error = pyt_error_text(pyt_mv_item(errors, i));
      if (error != NULL || kind == PYT_KIND_STREAM_END) finish(batch, i, pyt_error_code(codes, i), error);
      else if (batch->open[i]) respond(instance, batch, i, i, columns, message, 1);
      free(error);
    }
    pending_free(batch);
  }
}

/* Tell the worker that requesters of `batch` went away: every one (`all`), or those marked in
 * batch->cancelled (a continuous model's worker drops just those streams at its next step). */
static void send_cancel(pyt_instance* instance, const pending* batch, int all, int fd) {
  pyt_buf message = {0};
  pyt_m_tuple(&message, PYT_CANCEL_FIELDS);
  pyt_m_int(&message, PYT_KIND_CANCEL);
  pyt_m_int(&message, batch->batch_id);
  pyt_m_tuple(&message, all ? 0 : batch->cancelled_told);
  for (uint32_t i = 0; !all && i < batch->count; i++)
    if (batch->cancelled[i]) pyt_m_int(&message, i);
  pthread_mutex_lock(&instance->send_lock);
  if (!message.failed && instance->fd == fd) pyt_send_header(fd, &message);
  pthread_mutex_unlock(&instance->send_lock);
  pyt_buf_free(&message);
}

/* Answer the requests whose clients went away; tell the worker of batches nobody waits for (of a
 * continuous model, of every requester that went). */
static void check_cancellations(pyt_instance* instance, pyt_relay* relay, int fd) {
  char text[512];
  snprintf(text, sizeof(text), "Model '%s': the request was cancelled", instance->model->name);
  int continuous = instance->model->continuous > 0;
  pthread_mutex_lock(&relay->lock);
  for (pending* batch = relay->head; batch != NULL; batch = batch->next) {
    int open = 0;
    uint32_t gone = 0;
    for (uint32_t i = 0; i < batch->count; i++) {
      bool cancelled = false;
      if (batch->open[i] &&
          pyt_checked(TRITONBACKEND_ResponseFactoryIsCancelled(batch->factories[i], &cancelled), NULL, 0) == 0 &&
          cancelled) {
        finish(batch, i, TRITONSERVER_ERROR_CANCELLED, text);
        if (batch->cancelled != NULL) batch->cancelled[i] = 1;
      }
      open += batch->open[i];
      gone += batch->cancelled != NULL && batch->cancelled[i];
    }
    if (!open && !batch->cancel_sent) {
      batch->cancel_sent = 1;
      send_cancel(instance, batch, 1, fd);
    } else if (continuous && gone > batch->cancelled_told) {
      batch->cancelled_told = gone;
      send_cancel(instance, batch, 0, fd);
    }
    if (continuous && gone) pthread_cond_broadcast(&relay->changed); /* room for an execute that waits */
  }
  pthread_mutex_unlock(&relay->lock);
}

/* The worker is gone: every batch in flight is answered with why. */
static void worker_gone(pyt_instance* instance, pyt_relay* relay, int fd) {
  int pid = instance->worker_pid;
  pthread_mutex_lock(&instance->send_lock);
  if (instance->fd == fd) {
    close(fd);
    instance->fd = -1;
  }
  pthread_mutex_unlock(&instance->send_lock);
  pthread_mutex_lock(&relay->lock);
  pending* batches = relay->head;
  relay->head = NULL;
  pthread_cond_broadcast(&relay->changed);
  pthread_mutex_unlock(&relay->lock);
  if (batches == NULL) return;
  char cause[PYT_MAX_ERROR];
  char text[PYT_MAX_ERROR + 512];
  pyt_death_cause(instance, pid, cause, sizeof(cause));
  snprintf(text, sizeof(text), "Model '%s': %s", instance->model->name, cause);
  PYT_ERROR("%s", text);
  while (batches != NULL) {
    pending* next = batches->next;
    fail_batch(batches, text);
    batches = next;
  }
}

static void* relay_main(void* argument) {
  pyt_relay* relay = argument;
  pyt_instance* instance = relay->instance;
  double last_heard = pyt_now_s();
  double next_cancel_check = last_heard + PYT_CANCEL_CHECK_S;
  char why[PYT_MAX_ERROR];
  pthread_mutex_lock(&relay->lock);
  while (!relay->closing) {
    pthread_mutex_lock(&instance->send_lock);
    int fd = instance->fd;
    pthread_mutex_unlock(&instance->send_lock);
    if (fd < 0) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += (long)(PYT_CANCEL_CHECK_S * 1e9);
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&relay->changed, &relay->lock, &until);
      continue;
    }
    pthread_mutex_unlock(&relay->lock);
    pyt_message message;
    int got = pyt_receive_message(fd, &relay->received, &message, why, sizeof(why));
    double now = pyt_now_s();
    if (got < 0) {
      worker_gone(instance, relay, fd);
    } else if (got > 0) {
      last_heard = now;
      pyt_mv* value = pyt_marshal_read(&relay->pool, message.header, message.header_size, why, sizeof(why));
      if (value != NULL) on_message(instance, relay, value, &message);
      else PYT_ERROR("Model '%s': dropped an unreadable message of the worker (%s)", instance->model->name, why);
    }
    if (now >= next_cancel_check) {
      next_cancel_check = now + PYT_CANCEL_CHECK_S;
      check_cancellations(instance, relay, fd);
    }
    if (relay->head != NULL && pyt_abandoned(instance->model)) abandon_all(instance, relay);
    if (got >= 0 && relay->head != NULL && now - last_heard > PYT_LIVENESS_CHECK_S) {
      last_heard = now;
      if (!pyt_pid_alive(instance->worker_pid)) worker_gone(instance, relay, fd);
    }
    pthread_mutex_lock(&relay->lock);
  }
  pending* batches = relay->head;
  relay->head = NULL;
  pthread_mutex_unlock(&relay->lock);
  char text[512];
  snprintf(text, sizeof(text), "Model '%s': the model was unloaded before its responses were complete",
           instance->model->name);
  while (batches != NULL) {
    pending* next = batches->next;
    fail_batch(batches, text);
    batches = next;
  }
  return NULL;
}

pyt_relay* pyt_relay_start(pyt_instance* instance) {
  pyt_relay* relay = calloc(1, sizeof(pyt_relay));
  if (relay == NULL) return NULL;
  relay->instance = instance;
  pthread_mutex_init(&relay->lock, NULL);
  pthread_cond_init(&relay->changed, NULL);
  if (pthread_create(&relay->thread, NULL, relay_main, relay) != 0) {
    pthread_mutex_destroy(&relay->lock);
    pthread_cond_destroy(&relay->changed);
    free(relay);
    return NULL;
  }
  relay->started = 1;
  return relay;
}

void pyt_relay_stop(pyt_relay* relay) {
  if (relay == NULL) return;
  pthread_mutex_lock(&relay->lock);
  relay->closing = 1;
  pthread_cond_broadcast(&relay->changed);
  pthread_mutex_unlock(&relay->lock);
  if (relay->started) pthread_join(relay->thread, NULL);
  pthread_mutex_destroy(&relay->lock);
  pthread_cond_destroy(&relay->changed);
  pyt_buf_free(&relay->received);
  pyt_mv_pool_free(&relay->pool);
  free(relay);
}

/* The requests whose streams are open, with relay->lock held. */
static uint32_t open_requests(const pyt_relay* relay) {
  uint32_t open = 0;
  for (const pending* batch = relay->head; batch != NULL; batch = batch->next)
    for (uint32_t i = 0; i < batch->count; i++) open += batch->open[i];
  return open;
}

/* A continuous model's execute: wait while the instance runs as many streams as it may. The relay
 * thread signals each stream's end; the timed wait also covers a stream closed on a thread that
 * does not signal (an error response sent from execute). */
static void wait_for_room(pyt_relay* relay, uint32_t capacity) {
  pthread_mutex_lock(&relay->lock);
  while (!relay->closing && open_requests(relay) >= capacity) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(PYT_CANCEL_CHECK_S * 1e9);
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&relay->changed, &relay->lock, &until);
  }
  pthread_mutex_unlock(&relay->lock);
}

void pyt_execute_relayed(pyt_relay* relay, TRITONBACKEND_Request** requests, uint32_t count) {
  pyt_instance* instance = relay->instance;
  const pyt_model* model = instance->model;
  uint64_t exec_start = pyt_now_ns();
  char why[PYT_MAX_ERROR];
  char text[PYT_MAX_ERROR + 512];
  TRITONBACKEND_Request** live = malloc((count ? count : 1) * sizeof(*live));
  uint32_t* index = malloc((count ? count : 1) * sizeof(*index));
  pending* batch = calloc(1, sizeof(pending));
  uint32_t live_count = 0;
  uint64_t compute_start = exec_start, rows = 0;
  if (live == NULL || index == NULL || batch == NULL || pyt_ensure_flags(instance, count) != 0) {
    for (uint32_t r = 0; r < count; r++) pyt_send_error(requests[r], NULL, TRITONSERVER_ERROR_INTERNAL, "out of memory");
    pending_free(batch);
    batch = NULL;
    goto done;
  }
  live_count = pyt_answer_early(instance, requests, count, live, index);
  instance->out.column_count = 0;
  if (live_count == 0) goto done;
  if (model->one_at_a_time) { /* the stream before this batch must end first */
    pthread_mutex_lock(&relay->lock);
    while (relay->head != NULL && !relay->closing) pthread_cond_wait(&relay->changed, &relay->lock);
    pthread_mutex_unlock(&relay->lock);
  } else if (model->continuous) {
    wait_for_room(relay, 2 * model->continuous); /* those it runs, and as many waiting to join */
  }
  if (instance->fd < 0) {
    if (pyt_instance_connect(instance, PYT_RECONNECT_S, why, sizeof(why)) != 0) {
      snprintf(text, sizeof(text), "Model '%s': %s", model->name, why);
      for (uint32_t slot = 0; slot < live_count; slot++) {
        pyt_send_error(live[slot], NULL, TRITONSERVER_ERROR_UNAVAILABLE, text);
        instance->answered[index[slot]] = PYT_ANSWERED_ERROR;
      }
      goto done;
    }
    pthread_mutex_lock(&relay->lock);
    pthread_cond_broadcast(&relay->changed); /* the relay thread waits for a connection */
    pthread_mutex_unlock(&relay->lock);
  }
  batch->batch_id = ++instance->batch_id;
  batch->count = live_count;
  batch->factories = calloc(live_count, sizeof(*batch->factories));
  batch->open = malloc(live_count);
  if (model->continuous) batch->cancelled = calloc(live_count, 1);
  pyt_batch_spec spec = {live, live_count, batch->batch_id, exec_start, NULL, NULL};
  int failed = batch->factories == NULL || batch->open == NULL || (model->continuous && batch->cancelled == NULL);
  if (failed) snprintf(why, sizeof(why), "out of memory in the pytriton backend");
  for (uint32_t slot = 0; !failed && slot < live_count; slot++) {
    failed = pyt_checked(TRITONBACKEND_ResponseFactoryNew(&batch->factories[slot], live[slot]), why, sizeof(why));
    batch->open[slot] = 1;
  }
  if (failed || pyt_build_batch(model, &instance->out, &spec, why, sizeof(why)) != 0) {
    for (uint32_t slot = 0; slot < live_count; slot++) {
      pyt_send_error(live[slot], NULL, TRITONSERVER_ERROR_INTERNAL, why);
      instance->answered[index[slot]] = PYT_ANSWERED_ERROR;
    }
    pending_free(batch);
    batch = NULL;
    goto done;
  }
  rows = pyt_batch_rows(model, &instance->out, live_count);
  batch->in_flight = &instance->in_flight;
  __atomic_add_fetch(&instance->in_flight, live_count, __ATOMIC_RELAXED);
  pthread_mutex_lock(&relay->lock); /* listed before it goes: its answer may come at once */
  batch->next = relay->head;
  relay->head = batch;
  pthread_mutex_unlock(&relay->lock);
  compute_start = pyt_now_ns();
  int sent;
  for (;;) {
    pthread_mutex_lock(&instance->send_lock);
    sent = instance->fd >= 0 ? pyt_send_batch(instance->fd, &instance->out) : -1;
    pthread_mutex_unlock(&instance->send_lock);
    if (sent == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || !pyt_pid_alive(instance->worker_pid)) break;
  }
  if (sent != 0) {
    pending* mine = take(relay, batch->batch_id); /* NULL: the relay thread answered it already */
    if (mine != NULL) {
      char cause[PYT_MAX_ERROR];
      pyt_death_cause(instance, instance->worker_pid, cause, sizeof(cause));
      snprintf(text, sizeof(text), "Model '%s': %s", model->name, cause);
      fail_batch(mine, text);
    }
  }
  batch = NULL;
done:
  pending_free(batch); /* a batch never listed (one listed is the relay's, and `batch` NULL) */
  pyt_finish_batch(instance, requests, count, rows, live_count, exec_start, compute_start, pyt_now_ns());
  free(live);
  free(index);
}
