/* The way in (requests.c): Triton's requests -> one InferBatch header and its payload, laid out
 * in a pyt_outgoing that an instance reuses batch after batch. */
#ifndef PYTRITON_REQUESTS_H
#define PYTRITON_REQUESTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "arena.h"
#include "model.h"
#include "triton_api.h"
#include "wire.h"

/* One input name (and data type) across the requests of a batch. */
typedef struct {
  const char* name;
  TRITONSERVER_DataType dtype;
  const char* numpy;
  const int64_t** shapes; /* per request; NULL where it lacks the tensor */
  uint32_t* dims;
  uint64_t* sizes;
  uint64_t* offsets;
  uint8_t* in_shm;
  uint32_t* first_piece; /* per request: its first buffer in `pieces` */
  uint32_t* piece_count;
} pyt_column;

typedef struct {
  const void* base;
  uint64_t size;
} pyt_piece;

/* The InferBatch being built from Triton's requests, reused batch after batch. */
typedef struct {
  pyt_column* columns;
  uint32_t column_count;
  uint32_t column_cap;
  uint32_t request_cap;
  pyt_piece* pieces;
  uint32_t piece_count;
  uint32_t piece_cap;
  struct iovec* iov; /* [0] prefix, [1] header, [2] its padding, then the payload */
  uint32_t iov_count;
  uint32_t iov_cap;
  uint8_t prefix[PYT_PREFIX_BYTES];
  pyt_buf header;
  pyt_buf scratch;
  size_t* ends;
  uint64_t payload;
  size_t total;
} pyt_outgoing;

/* Everything an InferBatch needs to know of the batch. */
typedef struct {
  TRITONBACKEND_Request** requests; /* the live ones, in batch order */
  uint32_t count;
  int64_t batch_id;
  uint64_t exec_start;
  pyt_arena* arena;                 /* NULL: every tensor inline (batches that overlap) */
  const int64_t* previous_stamps;   /* NULL, or the previous batch's PYT_STAMP_COUNT stamps */
} pyt_batch_spec;

/* Lay `spec`'s batch out in `out` (header in out->header, payload in out->iov). 0, or -1 with `why`. */
int pyt_build_batch(const pyt_model* model, pyt_outgoing* out, const pyt_batch_spec* spec, char* why,
                    size_t why_size);
/* The rows of the batch last built (Triton's batch statistics count rows). */
uint64_t pyt_batch_rows(const pyt_model* model, const pyt_outgoing* out, uint32_t count);
void pyt_outgoing_free(pyt_outgoing* out);
/* Send the batch last built. 0, or -1 with errno. */
int pyt_send_batch(int fd, pyt_outgoing* out);

#endif
