/* Triton's floor for the benchmark's identity model: a backend that copies INPUT_1 to OUTPUT_1
 * inside tritonserver, with no Python and no other process. A server with this model shows what
 * Triton's front ends, its scheduler and the load generator cost by themselves on the machine:
 * the ceiling any backend can reach there (bench/floor.py). It checks nothing it does not need
 * to: the harness sends it the identity model's own requests, and checks one answer first.
 * Built by bench/floor.py with the system C compiler; declarations from the library's own
 * pytriton/backend/triton_api.h. */
#include <string.h>
#include <time.h>

#include "triton_api.h"

#define RELEASE_ALL 1u
#define SEND_FINAL 1u

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend* backend,
                                                      TRITONBACKEND_BackendAttribute* attributes) {
  (void)backend;
  (void)attributes;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  (void)model;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  (void)model;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  (void)instance;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  (void)instance;
  return NULL;
}

/* One request's response: OUTPUT_1 of INPUT_1's type and shape, its bytes copied. */
static TRITONSERVER_Error* answer(TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* input = NULL;
  const char* name = NULL;
  TRITONSERVER_DataType datatype;
  const int64_t* shape = NULL;
  uint32_t dims = 0, buffers = 0;
  uint64_t size = 0;
  TRITONSERVER_Error* error = TRITONBACKEND_RequestInputByIndex(request, 0, &input);
  if (error == NULL) error = TRITONBACKEND_InputProperties(input, &name, &datatype, &shape, &dims, &size, &buffers);
  if (error != NULL) return error;
  TRITONBACKEND_Response* response = NULL;
  error = TRITONBACKEND_ResponseNew(&response, request);
  if (error != NULL) return error;
  TRITONBACKEND_Output* output = NULL;
  void* out = NULL;
  TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
  int64_t memory_id = 0;
  error = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT_1", datatype, shape, dims);
  if (error == NULL) error = TRITONBACKEND_OutputBuffer(output, &out, size, &memory, &memory_id);
  for (uint32_t k = 0, offset = 0; error == NULL && k < buffers; k++) {
    const void* in = NULL;
    uint64_t piece = 0;
    TRITONSERVER_MemoryType in_memory = TRITONSERVER_MEMORY_CPU;
    int64_t in_memory_id = 0;
    error = TRITONBACKEND_InputBuffer(input, k, &in, &piece, &in_memory, &in_memory_id);
    if (error == NULL) {
      memcpy((char*)out + offset, in, piece);
      offset += (uint32_t)piece;
    }
  }
  TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, SEND_FINAL, error); /* error stays ours */
  if (error != NULL) TRITONSERVER_ErrorDelete(error);
  return sent;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests, uint32_t count) {
  uint64_t start = now_ns();
  for (uint32_t r = 0; r < count; r++) {
    TRITONSERVER_Error* error = answer(requests[r]);
    if (error != NULL) TRITONSERVER_ErrorDelete(error);
  }
  uint64_t end = now_ns();
  for (uint32_t r = 0; r < count; r++) {
    TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], true, start,
                                                                           start, end, end);
    if (error != NULL) TRITONSERVER_ErrorDelete(error);
    error = TRITONBACKEND_RequestRelease(requests[r], RELEASE_ALL);
    if (error != NULL) TRITONSERVER_ErrorDelete(error);
  }
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, count, start, start, end, end);
  if (error != NULL) TRITONSERVER_ErrorDelete(error);
  return NULL;
}
