/* A multiplexed model's batches (route.c): the free instance that holds their variants, a mirror of
 * each worker's least-recently-used list, and the dispatcher instances whose batches wait for one. */
#ifndef PYTRITON_ROUTE_H
#define PYTRITON_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "instance.h"
#include "triton_api.h"

typedef struct pyt_router pyt_router;

/* The router of a model with `instances` workers and batches of at most `max_batch_size` rows (0:
 * it does not batch), from its pytriton.multiplex parameter (JSON); NULL with `why` when it cannot
 * be read. */
pyt_router* pyt_router_new(const char* config, uint32_t instances, uint64_t max_batch_size, char* why,
                           size_t why_size);
void pyt_router_free(pyt_router* router);
/* A worker's instance starts (it may be sent batches) or ends. */
void pyt_router_join(pyt_router* router, pyt_instance* instance);
void pyt_router_leave(pyt_router* router, pyt_instance* instance);
/* Where a batch runs, and what: `instance` serves `requests` (this batch's, then those of waiting
 * batches it took along; valid until pyt_route_done). `instance` NULL: another batch took this
 * one's requests along, and this thread runs nothing. */
typedef struct {
  pyt_instance* instance;
  TRITONBACKEND_Request** requests;
  uint32_t count;
} pyt_routed;

/* The free instance that is to serve the batch `requests` that reached `own`'s thread (`own` may
 * be a dispatcher, which holds no worker), marked busy and its mirror updated, with the waiting
 * batches it takes along; give the instance back with pyt_route_done once the batch is answered. */
pyt_routed pyt_route(pyt_router* router, pyt_instance* own, TRITONBACKEND_Request** requests, uint32_t count);
void pyt_route_done(pyt_router* router, pyt_instance* chosen);

#endif
