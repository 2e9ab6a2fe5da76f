/* One model instance: its connection to its worker handler, and what each of its batches reuses.
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

#include "instance.h"

#include "arena.h"
#include "model.h"
#include "requests.h"
#include "util.h"
#include "wire.h"

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

void pyt_instance_init(pyt_instance* instance, pyt_model* model, TRITONBACKEND_ModelInstance* triton, uint32_t index) {
  memset(instance, 0, sizeof(*instance));
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
}

void pyt_instance_close(pyt_instance* instance) {
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
