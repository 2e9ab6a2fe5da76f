/* The worker's metrics on Triton's /metrics: one thread per instance polls them and updates
 * Triton's custom metric families, as pytriton/proxy/metrics.py does for the proxy.
 *
 * The worker keeps its metrics as cumulative values in memory. About once a period this thread
 * asks for them (MetricsPoll, on a connection of its own to the handler's metrics socket that
 * the Welcome named) and turns the growth since the last report into Triton counter
 * increments and gauge sets. Histograms go out as counter families of their three kinds of
 * series (_bucket per `le`, _sum, _count), as Prometheus stores them anyway: Triton's histogram
 * kind takes one observation per call. It also sets pytriton_requests_in_flight from what the
 * backend has sent and not had answered: the count execute.c and relay.c keep in the instance.
 *
 * Triton's family and metric objects are shared by every instance of the server (one registry
 * for the library) and never deleted: Triton 2.51 gives two metric objects with the same
 * labels one shared series and frees it when either is deleted, so a reload, which starts the
 * new instance before the old one ends, must reuse the objects rather than make its own.
 * Counters continue from Triton's value the first time an instance sees a series; only the
 * instance that greeted the worker last exports (the worker answers an earlier one's poll with
 * `superseded`). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"

#include "instance.h"
#include "model.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

#define IN_FLIGHT "pytriton_requests_in_flight"
#define IN_FLIGHT_HELP "Requests sent to the inference callable and not answered yet"
#define REPOLL_S 10.0
#define MAX_LABELS 16
#define BUCKETS 64

/* ---- the library's registry of Triton objects ---- */

typedef struct entry {
  char* key;
  void* object;
  struct entry* next;
} entry;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static entry* families;
static entry* metrics;

static void* lookup(entry* list, const char* key) {
  for (; list != NULL; list = list->next)
    if (strcmp(list->key, key) == 0) return list->object;
  return NULL;
}

static int remember(entry** list, const char* key, void* object) {
  entry* added = malloc(sizeof(entry));
  if (added == NULL) return -1;
  added->key = strdup(key);
  if (added->key == NULL) {
    free(added);
    return -1;
  }
  added->object = object;
  added->next = *list;
  *list = added;
  return 0;
}

typedef struct {
  const char* names[MAX_LABELS];
  const char* values[MAX_LABELS];
  uint32_t count;
} labels;

/* The Triton metric of family `name` (of `kind`) with `labels`, made on first use. */
static TRITONSERVER_Metric* metric_for(const char* name, const char* help, TRITONSERVER_MetricKind kind,
                                       const labels* set, const char* key) {
  pthread_mutex_lock(&registry_lock);
  TRITONSERVER_Metric* metric = lookup(metrics, key);
  if (metric != NULL) goto done;
  char family_key[512];
  snprintf(family_key, sizeof(family_key), "%s\x1f%d", name, (int)kind);
  TRITONSERVER_MetricFamily* family = lookup(families, family_key);
  if (family == NULL) {
    if (pyt_checked(TRITONSERVER_MetricFamilyNew(&family, kind, name, help), NULL, 0) != 0) goto done;
    remember(&families, family_key, family);
  }
  const TRITONSERVER_Parameter* parameters[MAX_LABELS];
  for (uint32_t i = 0; i < set->count; i++)
    parameters[i] = TRITONSERVER_ParameterNew(set->names[i], TRITONSERVER_PARAMETER_STRING, set->values[i]);
  if (pyt_checked(TRITONSERVER_MetricNew(&metric, family, parameters, set->count), NULL, 0) != 0) metric = NULL;
  for (uint32_t i = 0; i < set->count; i++) TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)parameters[i]);
  if (metric != NULL) remember(&metrics, key, metric);
done:
  pthread_mutex_unlock(&registry_lock);
  return metric;
}

/* ---- one instance's exporter ---- */

typedef struct series {
  char* key;
  TRITONSERVER_Metric* metric;
  double last;
  int has_last; /* counters: the worker's value at the previous report; gauges: the value set */
  struct series* next;
} series;

struct pyt_metrics {
  const pyt_instance* instance; /* read only: its model, index, and requests in flight */
  pthread_t thread;
  int started;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int closing;
  series* known;
  int64_t worker_pid;
  char path[sizeof(((struct sockaddr_un*)0)->sun_path)];
  int greeting;
};

static series* series_for(pyt_metrics* exporter, const char* key) {
  for (series* known = exporter->known; known != NULL; known = known->next)
    if (strcmp(known->key, key) == 0) return known;
  return NULL;
}

static void key_of(char* key, size_t size, const char* name, const labels* set) {
  int used = snprintf(key, size, "%s", name);
  for (uint32_t i = 0; i < set->count && used > 0 && (size_t)used < size; i++)
    used += snprintf(key + used, size - (size_t)used, "\x1f%s=%s", set->names[i], set->values[i]);
}

static void counter(pyt_metrics* exporter, const char* name, const char* help, const labels* set, double current) {
  char key[2048];
  key_of(key, sizeof(key), name, set);
  series* known = series_for(exporter, key);
  double increment;
  if (known == NULL) {
    TRITONSERVER_Metric* metric = metric_for(name, help, TRITONSERVER_METRIC_KIND_COUNTER, set, key);
    if (metric == NULL || (known = calloc(1, sizeof(series))) == NULL) return;
    known->key = strdup(key);
    known->metric = metric;
    known->next = exporter->known;
    exporter->known = known;
    double start = 0;
    pyt_checked(TRITONSERVER_MetricValue(metric, &start), NULL, 0); /* what an earlier instance pushed */
    increment = current - start;
  } else {
    increment = current < known->last ? current : current - known->last; /* below: the worker restarted */
  }
  known->last = current;
  known->has_last = 1;
  if (increment > 0) pyt_checked(TRITONSERVER_MetricIncrement(known->metric, increment), NULL, 0);
}

static void gauge(pyt_metrics* exporter, const char* name, const char* help, const labels* set, double current) {
  char key[2048];
  key_of(key, sizeof(key), name, set);
  series* known = series_for(exporter, key);
  if (known == NULL) {
    TRITONSERVER_Metric* metric = metric_for(name, help, TRITONSERVER_METRIC_KIND_GAUGE, set, key);
    if (metric == NULL || (known = calloc(1, sizeof(series))) == NULL) return;
    known->key = strdup(key);
    known->metric = metric;
    known->next = exporter->known;
    exporter->known = known;
  }
  if (!known->has_last || known->last != current) {
    pyt_checked(TRITONSERVER_MetricSet(known->metric, current), NULL, 0);
    known->last = current;
    known->has_last = 1;
  }
}

/* A bucket bound as Prometheus writes `le` (and pytriton/proxy/metrics.py): "0.005", "1", "+Inf". */
static void bound_label(double bound, char* out, size_t size) {
  if (isinf(bound)) {
    snprintf(out, size, "+Inf");
    return;
  }
  if (bound == floor(bound) && fabs(bound) < 1e16) {
    snprintf(out, size, "%.0f", bound);
    return;
  }
  for (int precision = 1; precision <= 17; precision++) { /* the shortest text that reads back exactly */
    snprintf(out, size, "%.*g", precision, bound);
    if (strtod(out, NULL) == bound) return;
  }
}

/* Copy a STR value into `out` as a C string. */
static const char* text_of(const pyt_mv* value, char* out, size_t size) {
  pyt_mv_copy(value, out, size);
  return out;
}

static void apply(pyt_metrics* exporter, pyt_mv* report) {
  int64_t pid = pyt_mv_int(pyt_mv_item(report, PYT_METRICS_REPORT_WORKER_PID), 0);
  if (pid != exporter->worker_pid) {
    if (exporter->worker_pid != 0) /* a fresh worker process: its values count from zero */
      for (series* known = exporter->known; known != NULL; known = known->next) known->last = 0;
    exporter->worker_pid = pid;
  }
  pyt_mv* families_mv = pyt_mv_item(report, PYT_METRICS_REPORT_FAMILIES);
  for (uint32_t f = 0; families_mv != NULL && f < families_mv->count; f++) {
    pyt_mv* family = families_mv->items[f];
    char name[256], help[512], kind[32];
    text_of(pyt_mv_item(family, PYT_FAMILY_NAME), name, sizeof(name));
    text_of(pyt_mv_item(family, PYT_FAMILY_HELP), help, sizeof(help));
    text_of(pyt_mv_item(family, PYT_FAMILY_KIND), kind, sizeof(kind));
    pyt_mv* buckets = pyt_mv_item(family, PYT_FAMILY_BUCKETS);
    pyt_mv* all = pyt_mv_item(family, PYT_FAMILY_SERIES);
    for (uint32_t s = 0; all != NULL && s < all->count; s++) {
      pyt_mv* one = all->items[s];
      pyt_mv* pairs = pyt_mv_item(one, PYT_SERIES_LABELS);
      pyt_mv* value = pyt_mv_item(one, PYT_SERIES_VALUE);
      labels set = {{0}, {0}, 0};
      char texts[MAX_LABELS + 1][2][256];
      for (uint32_t l = 0; pairs != NULL && l < pairs->count && l < MAX_LABELS; l++) {
        set.names[l] = text_of(pyt_mv_item(pairs->items[l], PYT_LABEL_NAME), texts[l][0], sizeof(texts[l][0]));
        set.values[l] = text_of(pyt_mv_item(pairs->items[l], PYT_LABEL_VALUE), texts[l][1], sizeof(texts[l][1]));
        set.count++;
      }
      if (strcmp(kind, "histogram") == 0 && value != NULL && value->kind == PYT_MV_TUPLE && value->count >= 3 &&
          set.count < MAX_LABELS) {
        char part[300], bound[64];
        uint32_t counts = value->count - 2;
        double total = 0;
        set.names[set.count] = "le";
        set.values[set.count] = bound;
        set.count++;
        snprintf(part, sizeof(part), "%s_bucket", name);
        for (uint32_t b = 0; b < counts && b < BUCKETS; b++) {
          total += pyt_mv_number(value->items[b], 0);
          bound_label(b + 1 < counts ? pyt_mv_number(pyt_mv_item(buckets, b), INFINITY) : INFINITY, bound,
                      sizeof(bound));
          counter(exporter, part, help, &set, total);
        }
        set.count--;
        snprintf(part, sizeof(part), "%s_sum", name);
        counter(exporter, part, help, &set, pyt_mv_number(value->items[counts], 0));
        snprintf(part, sizeof(part), "%s_count", name);
        counter(exporter, part, help, &set, pyt_mv_number(value->items[counts + 1], 0));
      } else if (strcmp(kind, "counter") == 0) {
        counter(exporter, name, help, &set, pyt_mv_number(value, 0));
      } else {
        gauge(exporter, name, help, &set, pyt_mv_number(value, 0));
      }
    }
  }
}

static int connect_metrics(const char* path) {
  struct sockaddr_un address;
  memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  snprintf(address.sun_path, sizeof(address.sun_path), "%s", path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr*)&address, sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  pyt_set_timeouts(fd, PYT_CANCEL_CHECK_S);
  return fd;
}

static void* metrics_main(void* argument) {
  pyt_metrics* exporter = argument;
  const pyt_instance* instance = exporter->instance;
  const pyt_model* model = instance->model;
  char version[32], index[32], why[PYT_MAX_ERROR];
  snprintf(version, sizeof(version), "%llu", (unsigned long long)model->version);
  snprintf(index, sizeof(index), "%u", instance->index);
  labels own = {{"model", "version", "instance"}, {model->name, version, index}, 3};
  pyt_buf poll = {0};
  pyt_buf received = {0};
  pyt_mv_pool pool = {0};
  int fd = -1;
  double asked = -REPOLL_S;
  pthread_mutex_lock(&exporter->lock);
  while (!exporter->closing) {
    double period_end = pyt_now_s() + model->metrics_period_s;
    pthread_mutex_unlock(&exporter->lock);
    uint32_t open = __atomic_load_n(&instance->in_flight, __ATOMIC_RELAXED);
    gauge(exporter, IN_FLIGHT, IN_FLIGHT_HELP, &own, (double)open);
    if (fd < 0 && exporter->path[0]) fd = connect_metrics(exporter->path);
    if (fd >= 0 && pyt_now_s() - asked >= REPOLL_S) {
      pyt_buf_reset(&poll);
      pyt_m_tuple(&poll, PYT_METRICS_POLL_FIELDS);
      pyt_m_int(&poll, PYT_KIND_METRICS_POLL);
      pyt_m_int(&poll, instance->index);
      pyt_m_int(&poll, getpid());
      pyt_m_int(&poll, exporter->greeting);
      if (pyt_send_header(fd, &poll) == 0) {
        asked = pyt_now_s();
      } else {
        close(fd);
        fd = -1;
      }
    }
    /* (`closing` read unlocked: an unload waits at most one receive timeout for this thread) */
    while (fd >= 0 && pyt_now_s() < period_end && !__atomic_load_n(&exporter->closing, __ATOMIC_RELAXED)) {
      pyt_message message;
      int got = pyt_receive_message(fd, &received, &message, why, sizeof(why));
      if (got < 0) { /* the worker is gone: ask whatever serves next */
        close(fd);
        fd = -1;
        break;
      }
      if (got == 0) continue;
      pyt_mv* report = pyt_marshal_read(&pool, message.header, message.header_size, why, sizeof(why));
      if (report == NULL || pyt_mv_int(pyt_mv_item(report, PYT_AT_KIND), -1) != PYT_KIND_METRICS_REPORT) continue;
      if (pyt_mv_int(pyt_mv_item(report, PYT_METRICS_REPORT_SUPERSEDED), 0)) goto superseded; /* a newer instance exports */
      apply(exporter, report);
      asked = -REPOLL_S; /* answered: ask again at the next period */
    }
    pthread_mutex_lock(&exporter->lock);
    double left = period_end - pyt_now_s();
    if (left > 0 && !exporter->closing) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += (time_t)left;
      until.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&exporter->wake, &exporter->lock, &until);
    }
  }
  pthread_mutex_unlock(&exporter->lock);
superseded:
  if (fd >= 0) close(fd);
  pyt_buf_free(&poll);
  pyt_buf_free(&received);
  pyt_mv_pool_free(&pool);
  return NULL;
}

pyt_metrics* pyt_metrics_start(const pyt_instance* instance) {
  if (!instance->model->metrics) return NULL;
  pyt_metrics* exporter = calloc(1, sizeof(pyt_metrics));
  if (exporter == NULL) return NULL;
  exporter->instance = instance;
  pthread_mutex_init(&exporter->lock, NULL);
  pthread_cond_init(&exporter->wake, NULL);
  snprintf(exporter->path, sizeof(exporter->path), "%s", instance->metrics_path);
  exporter->greeting = instance->greeting;
  if (pthread_create(&exporter->thread, NULL, metrics_main, exporter) == 0) exporter->started = 1;
  return exporter;
}

void pyt_metrics_stop(pyt_metrics* exporter) {
  if (exporter == NULL) return;
  pthread_mutex_lock(&exporter->lock);
  exporter->closing = 1;
  pthread_cond_signal(&exporter->wake);
  pthread_mutex_unlock(&exporter->lock);
  if (exporter->started) pthread_join(exporter->thread, NULL);
  while (exporter->known != NULL) { /* our bookkeeping only: Triton's objects stay (see above) */
    series* next = exporter->known->next;
    free(exporter->known->key);
    free(exporter->known);
    exporter->known = next;
  }
  pthread_mutex_destroy(&exporter->lock);
  pthread_cond_destroy(&exporter->wake);
  free(exporter);
}
