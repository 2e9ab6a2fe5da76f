/* What every batch does around the worker's answer, on either path (batch.c): the requests answered
 * before it goes, and Triton's statistics and the requests' release once it is answered. */
#ifndef PYTRITON_BATCH_H
#define PYTRITON_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "instance.h"
#include "model.h"
#include "triton_api.h"

enum { PYT_ANSWERED_OK = 1, PYT_ANSWERED_ERROR = 2 }; /* instance->answered[r] */

/* Room for the marks of a batch of `count` requests (instance->answered, instance->cancelled). 0, or -1. */
int pyt_ensure_flags(pyt_instance* instance, uint32_t count);
/* Requests answered before the batch goes: cancelled in the queue, the sequence batcher's null
 * requests, or all of them while a stop refuses new batches. Returns how many live requests were kept: in `live`, their positions in `live_index`. */
uint32_t pyt_answer_early(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count,
                          TRITONBACKEND_Request** live, uint32_t* live_index);
/* The refusing model's execute (model->refuse): every request refused as retryable, released. */
void pyt_refuse_all(const pyt_model* model, TRITONBACKEND_Request** requests, uint32_t count);
/* The error of a request given up by a second signal (pytriton.ipc.stopping.abandoned). */
void pyt_abandoned_text(const pyt_model* model, char* out, size_t out_size);
/* Report Triton's statistics of a batch and release its requests. */
void pyt_finish_batch(pyt_instance* instance, TRITONBACKEND_Request** requests, uint32_t count, uint64_t rows,
                      uint32_t live_count, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end);

#endif
