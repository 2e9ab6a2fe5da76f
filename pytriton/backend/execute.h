/* A plain callable's batch (execute.c): sent, its answer waited for on Triton's thread, answered. */
#ifndef PYTRITON_EXECUTE_H
#define PYTRITON_EXECUTE_H

#include <stdint.h>

#include "instance.h"
#include "triton_api.h"

/* Run one batch on `instance` and release its requests; each request gets its response or an error. */
void pyt_execute(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count);

#endif
