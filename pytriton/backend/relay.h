/* Streams and coroutines (relay.c): execute sends the batch and returns; the relay's thread
 * answers it as the worker's messages come. */
#ifndef PYTRITON_RELAY_H
#define PYTRITON_RELAY_H

#include <stdint.h>

#include "instance.h"
#include "triton_api.h"

typedef struct pyt_relay pyt_relay;

/* The relay of `instance`, its thread started; NULL when it cannot start. */
pyt_relay* pyt_relay_start(pyt_instance* instance);
/* Stop the thread (the batches still in flight are answered with an error) and free the relay; NULL: none. */
void pyt_relay_stop(pyt_relay* relay);
/* Send one batch and return; its requests are released, their responses go through response factories. */
void pyt_execute_relayed(pyt_relay* relay, TRITONBACKEND_Request** requests, uint32_t count);

#endif
