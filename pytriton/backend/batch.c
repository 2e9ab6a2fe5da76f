/* What every batch does around the worker's answer, on either path (execute.c, relay.c): the
 * requests answered before the batch goes (cancelled while they queued, the sequence batcher's
 * null requests, all of them while a stop refuses new batches), and, once it is answered, Triton's
 * statistics of each request and of the batch, and the requests' release. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

#include "instance.h"
#include "model.h"
#include "responses.h"
#include "triton_api.h"
#include "util.h"

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
