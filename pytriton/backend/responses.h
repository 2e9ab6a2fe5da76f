/* The way out (responses.c): the worker's answer -> Triton's responses, and the error responses. */
#ifndef PYTRITON_RESPONSES_H
#define PYTRITON_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "triton_api.h"
#include "wire.h"

/* Fill `response` with request `slot`'s outputs from the worker's `columns`. With `request`
 * given and the model having several outputs, only those the request asked for go. 0, or -1
 * with `why` (the response is then left to the caller to delete). */
int pyt_fill_response(TRITONBACKEND_Response* response, const pyt_model* model, pyt_mv* columns, uint32_t slot,
                      const pyt_message* message, const uint8_t* shm, size_t shm_size,
                      TRITONBACKEND_Request* request, char* why, size_t why_size);
/* An error response for a request (or, with `factory` instead, for a stream), FINAL. */
void pyt_send_error(TRITONBACKEND_Request* request, TRITONBACKEND_ResponseFactory* factory,
                    TRITONSERVER_Error_Code code, const char* text);
/* The text of a worker's per-request error (a STR value), NUL-terminated, malloc'd; NULL if none. */
char* pyt_error_text(const pyt_mv* error);
/* Triton's code for request `slot`'s error from a BatchResult's codes (protocol.ErrorCode; an
 * empty tuple or none: INTERNAL). */
TRITONSERVER_Error_Code pyt_error_code(const pyt_mv* codes, uint32_t slot);

#endif
