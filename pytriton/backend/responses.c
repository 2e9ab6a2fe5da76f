/* The way out: the worker's answer -> Triton's responses.
 *
 * A BatchResult or StreamPart describes its tensors column by column (pytriton/ipc/codec.py):
 * per request a shape (None: no tensor), an offset and a size, in the message's payload or in
 * the worker's arena. Each response's outputs are copied once, straight into the buffers
 * Triton gives for them. BYTES tensors travel in Triton's own serialization (a 4-byte length
 * before each element), so they are copied as they are. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "responses.h"

#include "model.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

#define MAX_DIMS 32

/* Whether `request` asked for output `name` (it asked for every output when it named none). */
static int asked_for(TRITONBACKEND_Request* request, uint32_t asked, const char* name) {
  for (uint32_t o = 0; o < asked; o++) {
    const char* asked_name = "";
    pyt_checked(TRITONBACKEND_RequestOutputName(request, o, &asked_name), NULL, 0);
    if (strcmp(asked_name, name) == 0) return 1;
  }
  return 0;
}

int pyt_fill_response(TRITONBACKEND_Response* response, const pyt_model* model, pyt_mv* columns, uint32_t slot,
                      const pyt_message* message, const uint8_t* shm, size_t shm_size,
                      TRITONBACKEND_Request* request, char* why, size_t why_size) {
  uint32_t asked = model->output_count;
  if (request != NULL && model->output_count >= 2)
    pyt_checked(TRITONBACKEND_RequestOutputCount(request, &asked), NULL, 0);
  for (uint32_t i = 0; columns != NULL && i < columns->count; i++) {
    pyt_mv* c = columns->items[i];
    pyt_mv* shape = pyt_mv_item(pyt_mv_item(c, PYT_COLUMN_SHAPES), slot);
    if (shape == NULL || shape->kind != PYT_MV_TUPLE) continue; /* this request has no such tensor */
    char name[256];
    pyt_mv_copy(pyt_mv_item(c, PYT_COLUMN_NAME), name, sizeof(name));
    if (request != NULL && asked < model->output_count && !asked_for(request, asked, name)) continue;
    TRITONSERVER_DataType dtype = pyt_triton_dtype(pyt_mv_item(c, PYT_COLUMN_DTYPE));
    int64_t offset = pyt_mv_int(pyt_mv_item(pyt_mv_item(c, PYT_COLUMN_OFFSETS), slot), -1);
    int64_t size = pyt_mv_int(pyt_mv_item(pyt_mv_item(c, PYT_COLUMN_SIZES), slot), -1);
    int in_shm = (int)pyt_mv_int(pyt_mv_item(pyt_mv_item(c, PYT_COLUMN_IN_SHM), slot), 0);
    const uint8_t* source = in_shm ? shm : message->payload;
    size_t limit = in_shm ? shm_size : message->payload_size;
    if (dtype == TRITONSERVER_TYPE_INVALID || shape->count > MAX_DIMS || offset < 0 || size < 0 || source == NULL ||
        (uint64_t)offset + (uint64_t)size > limit) {
      snprintf(why, why_size, "Model '%s': the worker's answer for output '%s' does not fit its message", model->name,
               name);
      return -1;
    }
    int64_t dims[MAX_DIMS];
    for (uint32_t d = 0; d < shape->count; d++) dims[d] = pyt_mv_int(shape->items[d], 0);
    TRITONBACKEND_Output* output;
    void* buffer = NULL;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    if (pyt_checked(TRITONBACKEND_ResponseOutput(response, &output, name, dtype, dims, shape->count), why,
                    why_size) != 0 ||
        pyt_checked(TRITONBACKEND_OutputBuffer(output, &buffer, (uint64_t)size, &memory, &memory_id), why,
                    why_size) != 0)
      return -1;
    if (memory == TRITONSERVER_MEMORY_GPU) {
      snprintf(why, why_size, "Model '%s': output '%s' was asked for in GPU memory, which pytriton does not write",
               model->name, name);
      return -1;
    }
    if (size) memcpy(buffer, source + offset, (size_t)size);
  }
  return 0;
}

void pyt_send_error(TRITONBACKEND_Request* request, TRITONBACKEND_ResponseFactory* factory,
                    TRITONSERVER_Error_Code code, const char* text) {
  TRITONBACKEND_Response* response;
  TRITONSERVER_Error* created = factory != NULL ? TRITONBACKEND_ResponseNewFromFactory(&response, factory)
                                                : TRITONBACKEND_ResponseNew(&response, request);
  if (pyt_checked(created, NULL, 0) != 0) return;
  TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(code, text);
  pyt_checked(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error), NULL, 0);
  TRITONSERVER_ErrorDelete(error);
}

char* pyt_error_text(const pyt_mv* error) {
  if (!pyt_mv_is_str(error)) return NULL;
  char* text = malloc(error->count + 1);
  if (text != NULL) pyt_mv_copy(error, text, error->count + 1);
  return text;
}

TRITONSERVER_Error_Code pyt_error_code(const pyt_mv* codes, uint32_t slot) {
  if (codes == NULL || codes->kind != PYT_MV_TUPLE || slot >= codes->count) return TRITONSERVER_ERROR_INTERNAL;
  return pyt_mv_int(codes->items[slot], PYT_ERROR_CODE_INTERNAL) == PYT_ERROR_CODE_INVALID_ARG
             ? TRITONSERVER_ERROR_INVALID_ARG
             : TRITONSERVER_ERROR_INTERNAL;
}
