/* Multiplexed models (@multiplexed, pytriton/decorating/multiplexing.py): which instance serves
 * a batch.
 *
 * Each worker instance of a multiplexed model holds at most max_loaded variants, the least
 * recently used evicted first (pytriton/worker/variants.py). Given the batches sent to it, that
 * cache is a plain LRU: the worker takes a batch's variants in the order they first appear,
 * loading each one it does not hold after evicting the least recently used. So the router keeps,
 * for each instance, a mirror of its worker's cache, updated the same way as a batch is sent.
 *
 * A batch that reaches execute, on whichever of the model's Triton instances Triton chose, goes
 * to a free instance (no batch running on it): the one that holds the most of its requests'
 * variants; among equals, one with room (no eviction), then the home (by a hash of the name) of
 * most of its variants that no instance holds, so that those are shared out between the
 * instances rather than loaded everywhere, then the thread's own, then the one used least
 * recently. An instance that becomes free takes, among the batches waiting, the one whose
 * variants it holds most (the oldest among equals; one that waited STARVING_S goes first): no
 * instance idles while a batch waits. Only a batch that waits alone, when a busy instance holds
 * more of its variants than any free one, waits for that one, at most about one of its batches'
 * time (its running average, at most MAX_PATIENCE_S): with no other work for the free instance,
 * a short wait costs less than a load. The batch that claims an instance takes along the waiting
 * batches whose variants that instance then holds, oldest first, while their rows fit
 * max_batch_size: their threads return at once (Triton's instances free for the next batches) and
 * the one call serves them all. Without that, Triton's batcher, which finds some dispatcher free
 * nearly always, hands on each request almost alone, and every request costs Triton a call, the
 * worker a batch and a pass over its variant's weights. The thread runs the batch on the chosen
 * instance's connection, buffers and arena (execute.c) and frees it.
 *
 * Under load every instance is busy, so that a batch finds at most the one just freed: the choice
 * is made by batches waiting. So a routed model has more Triton instances than workers
 * (DISPATCHERS_PER_WORKER more per worker, pytriton/facade/binding.py): the extra ones
 * (dispatchers, index >= the workers') hold no connection and only wait here with their batches,
 * and an instance that frees chooses among them. Every batch in execute runs on one instance in turn, and an instance that frees wakes the
 * waiters: none waits for ever.
 *
 * The mirror can drift from the worker's cache only where the worker did what the batches do
 * not say: a load that failed (the mirror holds the variant until it ages out), a request the
 * worker left out (cancelled, or past its deadline), a worker forked anew (forgotten here once a
 * batch met it). A drifted mirror routes worse, never wrongly: every instance can load
 * every variant. Models that relay (async callables, streams: their batches overlap), keep
 * sequences (a sequence stays on its instance) or have one instance are not routed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "instance.h"
#include "json.h"
#include "route.h"
#include "triton_api.h"
#include "util.h"

#define MAX_PATIENCE_S 0.02 /* the longest a batch waits for a busy instance that holds its variants */
#define MIN_PATIENCE_S 0.0005
#define IDLE_WAIT_S 1.0 /* a wait with nothing to time it still looks again after this */
/* A batch that waited this long goes first, whatever fits others better. It bounds what a batch that
 * loads waits behind batches that hit: 50 ms gave the bench's case (docs/performance.md) a p99 of
 * 63-68 ms, 20 ms 44-58 ms, at the same throughput. */
#define STARVING_S 0.02

typedef struct {
  pyt_instance* instance; /* NULL until its instance starts (and after it ends) */
  int worker_pid;         /* the worker the mirror is of: another (forked anew after a crash) holds none */
  int busy;
  char** held; /* the variants its worker holds, the least recently used first */
  TRITONBACKEND_Request** batch; /* room for max_batch_size requests: the batch running on it, when it took others along */
  uint32_t held_count;
  uint64_t last_used;
} member;

/* A batch waiting for an instance (on its thread's stack while it waits). */
typedef struct waiter {
  const struct wanted* variants;
  uint32_t distinct;
  const pyt_instance* own;
  double since;
  uint64_t ticket;
  TRITONBACKEND_Request** requests; /* Triton's array: read only under the lock, while the batch waits */
  uint32_t count;
  uint64_t rows;
  int taken; /* another batch took these requests along to its instance: this thread has nothing to run */
  struct waiter* next;
} waiter;

struct pyt_router {
  pthread_mutex_t lock;
  pthread_cond_t changed; /* an instance became free or was taken: the waiters look again */
  char parameter[128];
  uint32_t max_loaded;
  uint64_t max_batch_size; /* the most rows a batch taken along may bring the batch to (0: none is) */
  char** known; /* the variants @multiplexed was told exist (a request naming another is refused); NULL: any */
  uint32_t known_count;
  member* members; /* by instance index */
  uint32_t member_count;
  uint64_t clock;
  uint64_t tickets;
  waiter* waiting; /* oldest first */
};

/* One variant of a batch: its name (Triton's request parameter, alive while the request is) and
 * how many of the batch's requests name it. */
typedef struct wanted {
  const char* name;
  uint32_t requests;
} wanted;

static void forget_held(member* m) {
  for (uint32_t i = 0; i < m->held_count; i++) free(m->held[i]);
  m->held_count = 0;
}

pyt_router* pyt_router_new(const char* config, uint32_t instances, uint64_t max_batch_size, char* why,
                           size_t why_size) {
  pyt_json* json = pyt_json_parse(config, strlen(config), why, why_size);
  const pyt_json* parameter = pyt_json_get(json, "parameter");
  const pyt_json* max_loaded = pyt_json_get(json, "max_loaded");
  const pyt_json* variants = pyt_json_get(json, "variants");
  if (json == NULL || parameter == NULL || parameter->kind != PYT_JSON_STRING || max_loaded == NULL ||
      max_loaded->kind != PYT_JSON_NUMBER || max_loaded->number < 1) {
    if (json != NULL) snprintf(why, why_size, "it lacks a parameter name or a max_loaded >= 1");
    pyt_json_free(json);
    return NULL;
  }
  pyt_router* router = calloc(1, sizeof(pyt_router));
  if (router == NULL) goto memory;
  pthread_mutex_init(&router->lock, NULL);
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC); /* timed waits on pyt_now_s's clock */
  pthread_cond_init(&router->changed, &attributes);
  pthread_condattr_destroy(&attributes);
  snprintf(router->parameter, sizeof(router->parameter), "%s", parameter->text);
  router->max_loaded = (uint32_t)max_loaded->number;
  router->max_batch_size = max_batch_size;
  router->member_count = instances;
  router->members = calloc(instances ? instances : 1, sizeof(member));
  if (router->members == NULL) goto memory;
  for (uint32_t i = 0; i < instances; i++) {
    router->members[i].held = calloc(router->max_loaded, sizeof(char*));
    if (router->members[i].held == NULL) goto memory;
    if (max_batch_size > 0 && (router->members[i].batch = calloc(max_batch_size, sizeof(TRITONBACKEND_Request*))) == NULL)
      goto memory;
  }
  if (variants != NULL && variants->kind == PYT_JSON_ARRAY) {
    router->known = calloc(variants->count ? variants->count : 1, sizeof(char*));
    if (router->known == NULL) goto memory;
    for (size_t i = 0; i < variants->count; i++) {
      if (variants->items[i]->kind != PYT_JSON_STRING) continue;
      router->known[router->known_count] = strdup(variants->items[i]->text);
      if (router->known[router->known_count++] == NULL) goto memory;
    }
  }
  pyt_json_free(json);
  return router;
memory:
  pyt_json_free(json);
  pyt_router_free(router);
  snprintf(why, why_size, "out of memory");
  return NULL;
}

void pyt_router_free(pyt_router* router) {
  if (router == NULL) return;
  for (uint32_t i = 0; router->members != NULL && i < router->member_count; i++) {
    forget_held(&router->members[i]);
    free(router->members[i].held);
    free(router->members[i].batch);
  }
  free(router->members);
  for (uint32_t i = 0; i < router->known_count; i++) free(router->known[i]);
  free(router->known);
  pthread_mutex_destroy(&router->lock);
  pthread_cond_destroy(&router->changed);
  free(router);
}

void pyt_router_join(pyt_router* router, pyt_instance* instance) {
  if (router == NULL || instance->index >= router->member_count) return;
  pthread_mutex_lock(&router->lock);
  member* m = &router->members[instance->index];
  m->instance = instance;
  m->worker_pid = instance->worker_pid;
  m->busy = 0;
  forget_held(m);
  pthread_mutex_unlock(&router->lock);
}

void pyt_router_leave(pyt_router* router, pyt_instance* instance) {
  if (router == NULL || instance->index >= router->member_count) return;
  pthread_mutex_lock(&router->lock);
  member* m = &router->members[instance->index];
  if (m->instance == instance) {
    m->instance = NULL;
    forget_held(m);
  }
  pthread_mutex_unlock(&router->lock);
}

/* The variant request `request` names, or NULL (no such parameter, or not a non-empty string:
 * the worker refuses it and loads nothing). */
static const char* variant_of(const pyt_router* router, TRITONBACKEND_Request* request) {
  uint32_t count = 0;
  if (pyt_checked(TRITONBACKEND_RequestParameterCount(request, &count), NULL, 0) != 0) return NULL;
  for (uint32_t p = 0; p < count; p++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* value;
    if (pyt_checked(TRITONBACKEND_RequestParameter(request, p, &key, &type, &value), NULL, 0) != 0) return NULL;
    if (strcmp(key, router->parameter) == 0)
      return type == TRITONSERVER_PARAMETER_STRING && *(const char*)value ? (const char*)value : NULL;
  }
  return NULL;
}

static int is_known(const pyt_router* router, const char* name) {
  if (router->known == NULL) return 1;
  for (uint32_t i = 0; i < router->known_count; i++)
    if (strcmp(router->known[i], name) == 0) return 1;
  return 0;
}

static int held_at(const member* m, const char* name) {
  for (uint32_t i = 0; i < m->held_count; i++)
    if (strcmp(m->held[i], name) == 0) return (int)i;
  return -1;
}

/* The mirror of `m`'s worker after it serves a batch that names `variants` (in order of first
 * appearance): each is made the most recently used, loaded (after the least recently used goes,
 * when the cache is full) where it was not held. */
static void touch(pyt_router* router, member* m, const wanted* variants, uint32_t count) {
  for (uint32_t v = 0; v < count; v++) {
    int at = held_at(m, variants[v].name);
    char* name;
    if (at >= 0) {
      name = m->held[at];
      memmove(&m->held[at], &m->held[at + 1], (m->held_count - (uint32_t)at - 1) * sizeof(char*));
      m->held_count--;
    } else {
      name = strdup(variants[v].name);
      if (name == NULL) continue; /* out of memory: the mirror misses it, which only routes worse */
      if (m->held_count == router->max_loaded) {
        free(m->held[0]);
        memmove(&m->held[0], &m->held[1], (m->held_count - 1) * sizeof(char*));
        m->held_count--;
      }
    }
    m->held[m->held_count++] = name;
  }
}

/* Which instance a variant that no instance holds is best loaded on: its home, by a hash of its
 * name, so that the variants nobody holds are shared out between the instances (each loads half
 * of them, and their next requests find them there) rather than each instance loading any. */
static uint32_t home_of(const char* name, uint32_t members) {
  uint32_t hash = 2166136261u; /* FNV-1a */
  for (const unsigned char* at = (const unsigned char*)name; *at; at++) hash = (hash ^ *at) * 16777619u;
  return members ? hash % members : 0;
}

/* How well a batch fits instance `m`: the requests whose variant it holds; and in `homed`, the
 * requests whose variant nobody holds and whose home it is. */
static uint32_t score(const pyt_router* router, const member* m, const wanted* variants, uint32_t distinct,
                      uint32_t* homed) {
  uint32_t index = (uint32_t)(m - router->members), found = 0;
  *homed = 0;
  for (uint32_t v = 0; v < distinct; v++) {
    if (held_at(m, variants[v].name) >= 0) {
      found += variants[v].requests;
      continue;
    }
    if (home_of(variants[v].name, router->member_count) != index) continue;
    int elsewhere = 0;
    for (uint32_t i = 0; i < router->member_count && !elsewhere; i++)
      elsewhere = router->members[i].instance != NULL && held_at(&router->members[i], variants[v].name) >= 0;
    if (!elsewhere) *homed += variants[v].requests;
  }
  return found;
}

/* Under the lock: the free instance `w`'s batch would go to now (NULL: none is free): the most of
 * its requests' variants held, then room, then the home of most of the variants none holds
 * (`homed`), then the thread's own, then the least recently used. */
static member* best_free(pyt_router* router, const waiter* w, uint32_t* best_score, uint32_t* best_homed) {
  member* best = NULL;
  int best_room = 0, best_own = 0;
  *best_score = *best_homed = 0;
  for (uint32_t i = 0; i < router->member_count; i++) {
    member* m = &router->members[i];
    if (m->instance == NULL || m->busy) continue;
    uint32_t homed;
    uint32_t found = score(router, m, w->variants, w->distinct, &homed);
    int room = m->held_count < router->max_loaded;
    int mine = m->instance == w->own;
    int better;
    if (best == NULL || found != *best_score) better = best == NULL || found > *best_score;
    else if (room != best_room) better = room > best_room;
    else if (homed != *best_homed) better = homed > *best_homed;
    else if (mine != best_own) better = mine > best_own;
    else better = m->last_used < best->last_used;
    if (better) {
      best = m;
      *best_score = found;
      *best_homed = homed;
      best_room = room;
      best_own = mine;
    }
  }
  return best;
}

/* Under the lock: how long `w`'s batch may still wait for a busy instance that holds more of its
 * variants than `free_score` (0: none does, it goes now). About one of that instance's batches. */
static double patience_left(const pyt_router* router, const waiter* w, uint32_t free_score, double now) {
  double patience = 0;
  for (uint32_t i = 0; i < router->member_count; i++) {
    const member* m = &router->members[i];
    uint32_t homed;
    if (m->instance == NULL || !m->busy || score(router, m, w->variants, w->distinct, &homed) <= free_score) continue;
    double typical = m->instance->typical_answer_s;
    typical = typical < MIN_PATIENCE_S ? MIN_PATIENCE_S : typical > MAX_PATIENCE_S ? MAX_PATIENCE_S : typical;
    if (typical > patience) patience = typical;
  }
  double left = w->since + patience - now;
  return left > 0 ? left : 0;
}

/* Under the lock: the free instance `w` takes now, or NULL: none is free; or `w` is the only
 * batch waiting and a busy instance holds more of its variants (it waits for it a little); or
 * another waiting batch fits that instance better. With other batches waiting no instance stays
 * idle for a holder: each freed instance takes the waiting batch that fits it best. */
static member* claim(pyt_router* router, const waiter* w, double now) {
  uint32_t mine, mine_homed;
  member* best = best_free(router, w, &mine, &mine_homed);
  if (best == NULL) return NULL;
  int alone = router->waiting == w && w->next == NULL;
  if (alone) return patience_left(router, w, mine, now) > 0 ? NULL : best;
  int starving = now - w->since >= STARVING_S;
  for (const waiter* other = router->waiting; other != NULL; other = other->next) {
    if (other == w) continue;
    uint32_t theirs, theirs_homed;
    if (best_free(router, other, &theirs, &theirs_homed) != best) continue;
    int also = now - other->since >= STARVING_S;
    int first = also != starving ? also > starving
                : theirs != mine ? theirs > mine
                : theirs_homed != mine_homed ? theirs_homed > mine_homed
                : other->ticket < w->ticket;
    if (first) return NULL; /* it goes first */
  }
  return best;
}

/* The rows of `request`: its first input's first dimension in a model that batches (1 where that
 * cannot be read; the worker refuses such a request and it costs no room). */
static uint64_t rows_of(const pyt_router* router, TRITONBACKEND_Request* request) {
  if (router->max_batch_size == 0) return 1;
  TRITONBACKEND_Input* input;
  const char* name;
  TRITONSERVER_DataType dtype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t size;
  if (pyt_checked(TRITONBACKEND_RequestInputByIndex(request, 0, &input), NULL, 0) != 0 ||
      pyt_checked(TRITONBACKEND_InputProperties(input, &name, &dtype, &shape, &dims, &size, &buffers), NULL, 0) != 0 ||
      dims == 0 || shape[0] < 1)
    return 1;
  return (uint64_t)shape[0];
}

/* Under the lock, once `self` (no longer waiting) has claimed `chosen` and touched its mirror: the
 * waiting batches whose variants `chosen` now all holds, oldest first, taken along while their rows
 * fit max_batch_size. Each is unlinked and marked taken (its thread returns with nothing to run),
 * its requests appended to `self`'s in `chosen->batch` and the mirror touched in the batch's order.
 * The requests that batch runs: `self`'s alone, or `chosen->batch`. */
static TRITONBACKEND_Request** take_along(pyt_router* router, member* chosen, const waiter* self, uint32_t* count) {
  uint64_t rows = self->rows, room = router->max_batch_size;
  *count = self->count;
  if (chosen->batch == NULL || *count > room) return self->requests;
  uint32_t taken = 0;
  for (waiter** link = &router->waiting; *link != NULL;) {
    waiter* other = *link;
    int fits = other->distinct > 0 && rows + other->rows <= room && *count + taken + other->count <= room;
    for (uint32_t v = 0; fits && v < other->distinct; v++) fits = held_at(chosen, other->variants[v].name) >= 0;
    if (!fits) {
      link = &other->next;
      continue;
    }
    memcpy(chosen->batch + self->count + taken, other->requests, other->count * sizeof(TRITONBACKEND_Request*));
    taken += other->count;
    rows += other->rows;
    touch(router, chosen, other->variants, other->distinct);
    other->taken = 1;
    *link = other->next;
  }
  if (taken == 0) return self->requests;
  memcpy(chosen->batch, self->requests, self->count * sizeof(TRITONBACKEND_Request*));
  *count += taken;
  return chosen->batch;
}

pyt_routed pyt_route(pyt_router* router, pyt_instance* own, TRITONBACKEND_Request** requests, uint32_t count) {
  pyt_routed routed = {own, requests, count};
  wanted stack[64];
  wanted* variants = count <= 64 ? stack : malloc(count * sizeof(wanted));
  uint32_t considered = count;
  if (variants == NULL) { /* out of memory: routed by its first 64 requests */
    variants = stack;
    considered = 64;
  }
  uint32_t distinct = 0;
  uint64_t rows = 0;
  for (uint32_t r = 0; r < count; r++) rows += rows_of(router, requests[r]);
  for (uint32_t r = 0; r < considered; r++) {
    const char* name = variant_of(router, requests[r]);
    if (name == NULL || !is_known(router, name)) continue;
    uint32_t v = 0;
    while (v < distinct && strcmp(variants[v].name, name) != 0) v++;
    if (v == distinct) variants[distinct++] = (wanted){name, 0};
    variants[v].requests++;
  }
  pthread_mutex_lock(&router->lock);
  double now = pyt_now_s();
  waiter self = {variants, distinct, own, now, ++router->tickets, requests, count, rows, 0, NULL};
  waiter** last = &router->waiting;
  while (*last != NULL) last = &(*last)->next;
  *last = &self;
  member* chosen;
  while ((chosen = claim(router, &self, now)) == NULL) {
    int joined = 0;
    for (uint32_t i = 0; i < router->member_count; i++) joined |= router->members[i].instance != NULL;
    if (!joined) break; /* no instance has started: the thread's own serves, as unrouted */
    uint32_t free_score, free_homed;
    double wait = best_free(router, &self, &free_score, &free_homed) != NULL
                      ? patience_left(router, &self, free_score, now) : 0;
    if (wait <= 0) wait = IDLE_WAIT_S; /* none free, or another batch goes first: until something changes */
    double until = now + wait;
    struct timespec deadline = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
    pthread_cond_timedwait(&router->changed, &router->lock, &deadline);
    if (self.taken) break; /* another batch took this one's requests along (and unlinked it) */
    now = pyt_now_s();
  }
  if (self.taken) {
    pthread_mutex_unlock(&router->lock);
    if (variants != stack) free(variants);
    return (pyt_routed){NULL, NULL, 0};
  }
  for (waiter** link = &router->waiting; *link != NULL; link = &(*link)->next)
    if (*link == &self) {
      *link = self.next;
      break;
    }
  if (chosen != NULL) {
    chosen->busy = 1;
    chosen->last_used = ++router->clock;
    touch(router, chosen, variants, distinct);
    routed.instance = chosen->instance;
    routed.requests = take_along(router, chosen, &self, &routed.count);
    if (router->waiting != NULL || routed.count > count)
      pthread_cond_broadcast(&router->changed); /* the others look again; those taken return */
  }
  pthread_mutex_unlock(&router->lock);
  if (variants != stack) free(variants);
  return routed;
}

void pyt_route_done(pyt_router* router, pyt_instance* chosen) {
  if (chosen->index >= router->member_count) return;
  pthread_mutex_lock(&router->lock);
  member* m = &router->members[chosen->index];
  if (m->instance == chosen && m->busy) {
    m->busy = 0;
    if (chosen->worker_pid != m->worker_pid) { /* the batch met a worker forked anew: it holds only the batch's */
      forget_held(m);
      m->worker_pid = chosen->worker_pid;
    }
    pthread_cond_broadcast(&router->changed);
  }
  pthread_mutex_unlock(&router->lock);
}
