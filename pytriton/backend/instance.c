/* One model instance: its connection to its worker handler, and what every batch shares.
 *
 * The instance connects to the data socket its handler listens on (the model parameter
 * pytriton.data_sockets, one per instance) and greets there: Hello -> Welcome, which tells the
 * worker's pid and the names to give the input arena. When the worker goes away (its process
 * died: a process instance is forked anew and binds the same socket), the next batch connects
 * again. The owner of a worker process writes why it ended beside the socket, so that the
 * requests it held can be answered with the cause.
 *
 * An idle watcher thread gives the arena and the mapping of the worker's arena back after a
 * quiet spell, as the worker does on its side. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

#define CONNECT_RETRY_S 0.02
#define DEATH_NOTE_WAIT_S 0.5 /* how long a batch whose worker died waits for its owner's note */
#define IDLE_CHECK_S 1.0

static void* idle_watch(void* argument) {
  pyt_instance* instance = argument;
  pthread_mutex_lock(&instance->lock);
  while (!instance->closing) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)IDLE_CHECK_S;
    pthread_cond_timedwait(&instance->wake, &instance->lock, &until);
    if (instance->closing || instance->idle_released) continue;
    double now = pyt_now_s();
    if (now - instance->last_batch >= PYT_IDLE_RELEASE_S) {
      pyt_arena_release_if_idle(&instance->arena, now);
      pyt_mapping_close(&instance->mapping);
      instance->idle_released = 1;
    }
  }
  pthread_mutex_unlock(&instance->lock);
  return NULL;
}

pyt_instance* pyt_instance_new(pyt_model* model, TRITONBACKEND_ModelInstance* triton, uint32_t index) {
  pyt_instance* instance = calloc(1, sizeof(pyt_instance));
  if (instance == NULL) return NULL;
  instance->model = model;
  instance->triton = triton;
  instance->index = index;
  instance->fd = -1;
  instance->idle_released = 1;
  instance->last_batch = pyt_now_s();
  if (index < model->socket_count)
    snprintf(instance->data_socket, sizeof(instance->data_socket), "%s", model->data_sockets[index]);
  pthread_mutex_init(&instance->lock, NULL);
  pthread_mutex_init(&instance->send_lock, NULL);
  pthread_cond_init(&instance->wake, NULL);
  if (!model->relayed && index < model->socket_count && /* a dispatcher (route.c) holds no arena */
      pthread_create(&instance->watcher, NULL, idle_watch, instance) == 0)
    instance->watcher_started = 1;
  return instance;
}

void pyt_instance_free(pyt_instance* instance) {
  if (instance == NULL) return;
  pyt_metrics_stop(instance);
  pyt_relay_stop(instance);
  if (instance->watcher_started) {
    pthread_mutex_lock(&instance->lock);
    instance->closing = 1;
    pthread_cond_signal(&instance->wake);
    pthread_mutex_unlock(&instance->lock);
    pthread_join(instance->watcher, NULL);
  }
  pyt_instance_disconnect(instance);
  pthread_mutex_destroy(&instance->lock);
  pthread_mutex_destroy(&instance->send_lock);
  pthread_cond_destroy(&instance->wake);
  pyt_arena_close(&instance->arena);
  pyt_mapping_close(&instance->mapping);
  pyt_outgoing_free(&instance->out);
  pyt_buf_free(&instance->received);
  pyt_mv_pool_free(&instance->pool);
  free(instance->answered);
  free(instance->cancelled);
  free(instance);
}

int pyt_ensure_flags(pyt_instance* instance, uint32_t count) {
  if (count <= instance->flags_cap) return 0;
  uint8_t* answered = realloc(instance->answered, count);
  if (answered == NULL) return -1;
  instance->answered = answered;
  uint8_t* cancelled = realloc(instance->cancelled, count);
  if (cancelled == NULL) return -1;
  instance->cancelled = cancelled;
  instance->flags_cap = count;
  return 0;
}

void pyt_instance_disconnect(pyt_instance* instance) {
  pthread_mutex_lock(&instance->send_lock);
  if (instance->fd >= 0) close(instance->fd);
  instance->fd = -1;
  pthread_mutex_unlock(&instance->send_lock);
}

/* Send our Hello on `fd` and read the Welcome; 0, or -1 with `why`. */
static int greet(pyt_instance* instance, int fd, double deadline, char* why, size_t why_size) {
  pyt_buf header = {0};
  pyt_buf received = {0};
  pyt_mv_pool pool = {0};
  int outcome = -1;
  pyt_m_tuple(&header, PYT_HELLO_FIELDS);
  pyt_m_int(&header, PYT_KIND_HELLO);
  pyt_m_int(&header, PYT_PROTOCOL_VERSION);
  pyt_m_int(&header, instance->index);
  pyt_m_int(&header, getpid());
  if (header.failed || pyt_send_header(fd, &header) != 0) {
    snprintf(why, why_size, "sending the greeting failed: %s", strerror(errno));
    goto done;
  }
  for (;;) {
    pyt_message message;
    int got = pyt_receive_message(fd, &received, &message, why, why_size);
    if (got < 0) goto done;
    if (got == 0) {
      if (pyt_now_s() > deadline) {
        snprintf(why, why_size, "the worker did not answer the greeting in time");
        goto done;
      }
      continue;
    }
    pyt_mv* welcome = pyt_marshal_read(&pool, message.header, message.header_size, why, why_size);
    if (welcome == NULL) goto done;
    if (pyt_mv_int(pyt_mv_item(welcome, PYT_AT_KIND), -1) != PYT_KIND_WELCOME) continue;
    pyt_mv* error = pyt_mv_item(welcome, PYT_WELCOME_ERROR);
    if (pyt_mv_is_str(error)) {
      pyt_mv_copy(error, why, why_size);
      goto done;
    }
    instance->worker_pid = (int)pyt_mv_int(pyt_mv_item(welcome, PYT_WELCOME_WORKER_PID), 0);
    pyt_mv_copy(pyt_mv_item(welcome, PYT_WELCOME_ARENA_STEM), instance->arena.stem, sizeof(instance->arena.stem));
    pyt_mv_copy(pyt_mv_item(welcome, PYT_WELCOME_METRICS_PATH), instance->metrics_path, sizeof(instance->metrics_path));
    instance->greeting = (int)pyt_mv_int(pyt_mv_item(welcome, PYT_WELCOME_GREETING), 0);
    outcome = 0;
    goto done;
  }
done:
  pyt_buf_free(&header);
  pyt_buf_free(&received);
  pyt_mv_pool_free(&pool);
  return outcome;
}

int pyt_instance_connect(pyt_instance* instance, double timeout_s, char* why, size_t why_size) {
  pyt_instance_disconnect(instance);
  double deadline = pyt_now_s() + timeout_s;
  struct sockaddr_un address;
  memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  snprintf(address.sun_path, sizeof(address.sun_path), "%s", instance->data_socket);
  char last[PYT_MAX_ERROR] = "nobody listens";
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      snprintf(why, why_size, "cannot open a socket: %s", strerror(errno));
      return -1;
    }
    int size = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    if (connect(fd, (struct sockaddr*)&address, sizeof(address)) == 0) {
      pyt_set_timeouts(fd, PYT_CANCEL_CHECK_S);
      if (greet(instance, fd, deadline, last, sizeof(last)) == 0) {
        pthread_mutex_lock(&instance->send_lock);
        instance->fd = fd;
        pthread_mutex_unlock(&instance->send_lock);
        pyt_router_forget(instance->model->router, instance); /* a worker forked anew holds no variant */
        return 0;
      }
      close(fd);
      if (strstr(last, "protocol") != NULL || strstr(last, "instance") != NULL) {
        snprintf(why, why_size, "%s", last); /* refused: trying again changes nothing */
        return -1;
      }
    } else {
      snprintf(last, sizeof(last), "%s", strerror(errno));
      close(fd);
    }
    int pid = instance->worker_pid > 0 ? instance->worker_pid : instance->model->worker_pid;
    int owner_alive = pyt_pid_alive(instance->model->worker_pid);
    if (pyt_now_s() >= deadline || !owner_alive) {
      snprintf(why, why_size,
               "no pytriton worker answered at %s within %.0f s (worker pid %d, alive: %s; the process that bound "
               "the model, pid %d, alive: %s; last: %s)",
               instance->data_socket, timeout_s, pid, pyt_pid_alive(pid) ? "yes" : "no", instance->model->worker_pid,
               owner_alive ? "yes" : "no", last);
      return -1;
    }
    usleep((useconds_t)(CONNECT_RETRY_S * 1e6));
  }
}

void pyt_death_cause(const pyt_instance* instance, int pid, char* out, size_t out_size) {
  char path[sizeof(instance->data_socket) + 32];
  snprintf(path, sizeof(path), "%s.ended-%d", instance->data_socket, pid);
  double deadline = pyt_now_s() + DEATH_NOTE_WAIT_S;
  for (;;) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t got = read(fd, out, out_size - 1);
      close(fd);
      if (got > 0) {
        out[got] = '\0';
        return;
      }
    }
    /* A worker in the process that bound the model has no note: that process is gone or the
     * handler stopped. Only a process instance's owner writes one, within milliseconds. */
    if (pyt_now_s() >= deadline || pid == instance->model->worker_pid || !pyt_pid_alive(instance->model->worker_pid))
      break;
    usleep(5000);
  }
  if (pid == instance->model->worker_pid && !pyt_pid_alive(pid))
    snprintf(out, out_size, "the process that serves it (pid %d) is gone", pid);
  else
    snprintf(out, out_size, "the pytriton worker (pid %d) closed its connection while serving this request", pid);
}

/* The refusal of pytriton.ipc.stopping.refusal: retryable, the client sends it again, to a server that stays. */
static void refusal_text(const pyt_model* model, char* out, size_t out_size) {
  snprintf(out, out_size, "Model '%s': the server is stopping and takes no new requests; send the request again (to "
           "another replica)", model->name);
}

void pyt_abandoned_text(const pyt_model* model, char* out, size_t out_size) {
  snprintf(out, out_size, "Model '%s': the server stopped at once, before this request was answered; send the "
           "request again (to another replica)", model->name);
}

void pyt_refuse_all(const pyt_model* model, TRITONBACKEND_Request** requests, uint32_t count) {
  char text[512];
  refusal_text(model, text, sizeof(text));
  for (uint32_t r = 0; r < count; r++) {
    pyt_send_error(requests[r], NULL, TRITONSERVER_ERROR_UNAVAILABLE, text);
    pyt_checked(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL), NULL, 0);
  }
}

uint32_t pyt_answer_early(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count,
                          TRITONBACKEND_Request** live, uint32_t* live_index) {
  const pyt_model* model = instance->model;
  uint32_t kept = 0;
  if (pyt_refusing(model)) { /* the fallback where the stop could not reload it as a refusing model */
    char text[512];
    refusal_text(model, text, sizeof(text));
    for (uint32_t r = 0; r < count; r++) {
      pyt_send_error(requests[r], NULL, TRITONSERVER_ERROR_UNAVAILABLE, text);
      instance->answered[r] = PYT_ANSWERED_ERROR;
    }
    return 0;
  }
  for (uint32_t r = 0; r < count; r++) {
    instance->answered[r] = 0;
    bool cancelled = false;
    if (pyt_checked(TRITONBACKEND_RequestIsCancelled(requests[r], &cancelled), NULL, 0) == 0 && cancelled) {
      char text[512];
      snprintf(text, sizeof(text), "Model '%s': the request was cancelled while it waited", model->name);
      pyt_send_error(requests[r], NULL, TRITONSERVER_ERROR_CANCELLED, text);
      instance->answered[r] = PYT_ANSWERED_ERROR;
      continue;
    }
    if (model->sequences) { /* the direct batcher's null requests fill idle slots: an empty answer */
      uint64_t id = 1;
      const char* text = NULL;
      if (pyt_checked(TRITONBACKEND_RequestCorrelationId(requests[r], &id), NULL, 0) != 0)
        id = pyt_checked(TRITONBACKEND_RequestCorrelationIdString(requests[r], &text), NULL, 0) == 0 && text && *text;
      if (id == 0) {
        if (model->decoupled) { /* a stream with no response: the final flag alone */
          TRITONBACKEND_ResponseFactory* factory;
          if (pyt_checked(TRITONBACKEND_ResponseFactoryNew(&factory, requests[r]), NULL, 0) == 0) {
            pyt_checked(TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL), NULL, 0);
            pyt_checked(TRITONBACKEND_ResponseFactoryDelete(factory), NULL, 0);
          }
        } else {
          TRITONBACKEND_Response* response;
          if (pyt_checked(TRITONBACKEND_ResponseNew(&response, requests[r]), NULL, 0) == 0)
            pyt_checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL), NULL, 0);
        }
        instance->answered[r] = PYT_ANSWERED_OK;
        continue;
      }
    }
    live_index[kept] = r;
    live[kept++] = requests[r];
  }
  return kept;
}

void pyt_finish_batch(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count, uint64_t rows,
                      uint32_t live_count, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end) {
  uint64_t exec_end = pyt_now_ns();
  for (uint32_t r = 0; r < count; r++)
    pyt_checked(TRITONBACKEND_ModelInstanceReportStatistics(instance->triton, requests[r],
                                                            r < instance->flags_cap &&
                                                                instance->answered[r] != PYT_ANSWERED_ERROR,
                                                            exec_start,
                                                            compute_start, compute_end, exec_end),
                NULL, 0);
  if (live_count)
    pyt_checked(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance->triton, rows, exec_start, compute_start,
                                                                 compute_end, exec_end),
                NULL, 0);
  for (uint32_t r = 0; r < count; r++)
    pyt_checked(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL), NULL, 0);
}
