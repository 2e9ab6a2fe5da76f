/* The way in: Triton's requests -> one InferBatch header and its payload.
 *
 * Inputs are read column by column (one column per input name and data type across the
 * requests, as pytriton/ipc/codec.py lays them out): tensors up to 64 KiB are sent straight
 * from Triton's own buffers (sendmsg gathers them, no copy here), larger ones are copied once
 * into the instance's arena when it has one. Each request's parameters become the JSON text
 * the worker parses; sequence ids and flags, the outputs a request asked for (when fewer than
 * all) and OpenTelemetry trace contexts go along when the model has them. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "requests.h"

#include "arena.h"
#include "json.h"
#include "model.h"
#include "triton_api.h"
#include "util.h"
#include "wire.h"

static const uint8_t ZEROS[PYT_INLINE_ALIGNMENT];

static uint64_t aligned(uint64_t size) {
  return (size + PYT_ARENA_ALIGNMENT - 1) / PYT_ARENA_ALIGNMENT * PYT_ARENA_ALIGNMENT;
}

void pyt_outgoing_free(pyt_outgoing* out) {
  for (uint32_t i = 0; i < out->column_cap; i++) {
    pyt_column* c = &out->columns[i];
    free(c->shapes);
    free(c->dims);
    free(c->sizes);
    free(c->offsets);
    free(c->in_shm);
    free(c->first_piece);
    free(c->piece_count);
  }
  free(out->columns);
  free(out->pieces);
  free(out->iov);
  free(out->ends);
  pyt_buf_free(&out->header);
  pyt_buf_free(&out->scratch);
  memset(out, 0, sizeof(*out));
}

/* Per-request arrays hold `count` entries (grown for larger batches, kept between batches). */
static int ensure_requests(pyt_outgoing* out, uint32_t count) {
  if (count <= out->request_cap) return 0;
  uint32_t cap = out->request_cap ? out->request_cap : 8;
  while (cap < count) cap *= 2;
  for (uint32_t i = 0; i < out->column_cap; i++) {
    pyt_column* c = &out->columns[i];
#define GROW(field)                                                 \
  do {                                                              \
    void* grown = realloc(c->field, cap * sizeof(*c->field));       \
    if (grown == NULL) return -1;                                   \
    c->field = grown;                                               \
  } while (0)
    GROW(shapes);
    GROW(dims);
    GROW(sizes);
    GROW(offsets);
    GROW(in_shm);
    GROW(first_piece);
    GROW(piece_count);
#undef GROW
  }
  size_t* ends = realloc(out->ends, cap * sizeof(size_t));
  if (ends == NULL) return -1;
  out->ends = ends;
  out->request_cap = cap;
  return 0;
}

static pyt_column* column_for(pyt_outgoing* out, const char* name, TRITONSERVER_DataType dtype, uint32_t count) {
  for (uint32_t i = 0; i < out->column_count; i++) {
    pyt_column* c = &out->columns[i];
    if (c->dtype == dtype && strcmp(c->name, name) == 0) return c;
  }
  if (out->column_count == out->column_cap) {
    uint32_t cap = out->column_cap ? out->column_cap * 2 : 4;
    pyt_column* grown = realloc(out->columns, cap * sizeof(pyt_column));
    if (grown == NULL) return NULL;
    memset(grown + out->column_cap, 0, (cap - out->column_cap) * sizeof(pyt_column));
    out->columns = grown;
    out->column_cap = cap;
    uint32_t requests = out->request_cap > count ? out->request_cap : count;
    out->request_cap = 0; /* the new columns' arrays are allocated here */
    if (ensure_requests(out, requests) != 0) return NULL;
  }
  pyt_column* c = &out->columns[out->column_count++];
  c->name = name;
  c->dtype = dtype;
  c->numpy = pyt_numpy_dtype(dtype);
  memset(c->shapes, 0, count * sizeof(*c->shapes));
  memset(c->piece_count, 0, count * sizeof(*c->piece_count));
  memset(c->in_shm, 0, count);
  for (uint32_t r = 0; r < count; r++) c->sizes[r] = c->offsets[r] = 0;
  return c;
}

static int add_piece(pyt_outgoing* out, const void* base, uint64_t size) {
  if (out->piece_count == out->piece_cap) {
    uint32_t cap = out->piece_cap ? out->piece_cap * 2 : 16;
    pyt_piece* grown = realloc(out->pieces, cap * sizeof(pyt_piece));
    if (grown == NULL) return -1;
    out->pieces = grown;
    out->piece_cap = cap;
  }
  out->pieces[out->piece_count].base = base;
  out->pieces[out->piece_count].size = size;
  out->piece_count++;
  return 0;
}

static int reserve_iov(pyt_outgoing* out, uint32_t count) {
  if (count < out->iov_cap) return 0;
  uint32_t cap = out->iov_cap ? out->iov_cap * 2 : 32;
  while (cap <= count) cap *= 2;
  struct iovec* grown = realloc(out->iov, cap * sizeof(struct iovec));
  if (grown == NULL) return -1;
  out->iov = grown;
  out->iov_cap = cap;
  return 0;
}

static int add_iov(pyt_outgoing* out, const void* base, size_t size) {
  if (size == 0) return 0;
  if (reserve_iov(out, out->iov_count) != 0) return -1;
  out->iov[out->iov_count].iov_base = (void*)base;
  out->iov[out->iov_count].iov_len = size;
  out->iov_count++;
  return 0;
}

/* Every request's inputs, into columns. */
static int read_inputs(const pyt_model* model, pyt_outgoing* out, const pyt_batch_spec* spec, char* why,
                       size_t why_size) {
  out->column_count = 0;
  out->piece_count = 0;
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    TRITONBACKEND_Request* request = spec->requests[slot];
    uint32_t inputs;
    if (pyt_checked(TRITONBACKEND_RequestInputCount(request, &inputs), why, why_size) != 0) return -1;
    for (uint32_t i = 0; i < inputs; i++) {
      TRITONBACKEND_Input* input;
      const char* name;
      TRITONSERVER_DataType dtype;
      const int64_t* shape;
      uint32_t dims, buffers;
      uint64_t size;
      if (pyt_checked(TRITONBACKEND_RequestInputByIndex(request, i, &input), why, why_size) != 0 ||
          pyt_checked(TRITONBACKEND_InputProperties(input, &name, &dtype, &shape, &dims, &size, &buffers), why,
                      why_size) != 0)
        return -1;
      if (pyt_numpy_dtype(dtype) == NULL) {
        snprintf(why, why_size, "Model '%s': input '%s' has data type %d, which numpy has no type for", model->name,
                 name, (int)dtype);
        return -1;
      }
      pyt_column* c = column_for(out, name, dtype, spec->count);
      if (c == NULL) goto memory;
      c->shapes[slot] = shape;
      c->dims[slot] = dims;
      c->sizes[slot] = size;
      c->first_piece[slot] = out->piece_count;
      for (uint32_t k = 0; k < buffers; k++) {
        const void* base;
        uint64_t bytes;
        TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
        int64_t memory_id = 0;
        if (pyt_checked(TRITONBACKEND_InputBuffer(input, k, &base, &bytes, &memory, &memory_id), why, why_size) != 0)
          return -1;
        if (memory == TRITONSERVER_MEMORY_GPU) {
          snprintf(why, why_size,
                   "Model '%s': input '%s' arrived in GPU memory (CUDA shared memory), which pytriton does not read; "
                   "send it from host memory",
                   model->name, name);
          return -1;
        }
        if (add_piece(out, base, bytes) != 0) goto memory;
        c->piece_count[slot]++;
      }
    }
  }
  return 0;
memory:
  snprintf(why, why_size, "out of memory in the pytriton backend");
  return -1;
}

/* Each request's parameters as JSON text, back to back in `scratch`; out->ends[slot] marks each end. */
static int read_parameters(pyt_outgoing* out, const pyt_batch_spec* spec, char* why, size_t why_size) {
  pyt_buf* text = &out->scratch;
  pyt_buf_reset(text);
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    TRITONBACKEND_Request* request = spec->requests[slot];
    uint32_t count;
    if (pyt_checked(TRITONBACKEND_RequestParameterCount(request, &count), why, why_size) != 0) return -1;
    for (uint32_t p = 0; p < count; p++) {
      const char* key;
      TRITONSERVER_ParameterType type;
      const void* value;
      if (pyt_checked(TRITONBACKEND_RequestParameter(request, p, &key, &type, &value), why, why_size) != 0)
        return -1;
      pyt_buf_put(text, p ? ", " : "{", p ? 2 : 1);
      pyt_buf_json_string(text, key, strlen(key));
      pyt_buf_put(text, ": ", 2);
      switch (type) {
        case TRITONSERVER_PARAMETER_STRING:
          pyt_buf_json_string(text, (const char*)value, strlen((const char*)value));
          break;
        case TRITONSERVER_PARAMETER_INT:
          pyt_buf_printf(text, "%lld", (long long)*(const int64_t*)value);
          break;
        case TRITONSERVER_PARAMETER_BOOL:
          pyt_buf_printf(text, "%s", *(const bool*)value ? "true" : "false");
          break;
        case TRITONSERVER_PARAMETER_DOUBLE: {
          double number = *(const double*)value;
          if (isnan(number)) pyt_buf_printf(text, "NaN");
          else if (isinf(number)) pyt_buf_printf(text, "%sInfinity", number < 0 ? "-" : "");
          else pyt_buf_printf(text, "%.17g", number);
          break;
        }
        default:
          pyt_buf_printf(text, "null");
          break;
      }
      if (p + 1 == count) pyt_buf_put(text, "}", 1);
    }
    out->ends[slot] = text->len;
  }
  if (text->failed) {
    snprintf(why, why_size, "out of memory in the pytriton backend");
    return -1;
  }
  return 0;
}

/* Where each tensor goes: inline up to 64 KiB, larger ones into the arena when it has room.
 * Builds the payload's parts in out->iov (after the three of the prefix and header). */
static int lay_out(pyt_outgoing* out, const pyt_batch_spec* spec) {
  uint64_t shm_total = 0;
  for (uint32_t i = 0; i < out->column_count; i++) {
    pyt_column* c = &out->columns[i];
    for (uint32_t r = 0; r < spec->count; r++) {
      c->in_shm[r] = spec->arena != NULL && c->shapes[r] != NULL && c->sizes[r] > PYT_INLINE_MAX_BYTES;
      if (c->in_shm[r]) shm_total += aligned(c->sizes[r]);
    }
  }
  int use_arena = spec->arena != NULL && pyt_arena_reserve(spec->arena, shm_total, pyt_now_s()) && shm_total > 0;
  uint64_t inline_offset = 0, shm_offset = 0;
  out->iov_count = 3; /* the prefix, the header and its padding come first */
  if (reserve_iov(out, out->iov_count) != 0) return -1;
  for (uint32_t i = 0; i < out->column_count; i++) {
    pyt_column* c = &out->columns[i];
    for (uint32_t r = 0; r < spec->count; r++) {
      if (c->shapes[r] == NULL) continue;
      if (c->in_shm[r] && !use_arena) c->in_shm[r] = 0;
      const pyt_piece* pieces = &out->pieces[c->first_piece[r]];
      if (c->in_shm[r]) {
        c->offsets[r] = shm_offset;
        uint64_t at = shm_offset;
        for (uint32_t k = 0; k < c->piece_count[r]; k++) {
          memcpy(spec->arena->base + at, pieces[k].base, pieces[k].size);
          at += pieces[k].size;
        }
        shm_offset += aligned(c->sizes[r]);
      } else {
        c->offsets[r] = inline_offset;
        for (uint32_t k = 0; k < c->piece_count[r]; k++)
          if (add_iov(out, pieces[k].base, pieces[k].size) != 0) return -1;
        inline_offset += c->sizes[r];
      }
    }
    size_t pad = (PYT_INLINE_ALIGNMENT - inline_offset % PYT_INLINE_ALIGNMENT) % PYT_INLINE_ALIGNMENT;
    if (pad) {
      if (add_iov(out, ZEROS, pad) != 0) return -1;
      inline_offset += pad;
    }
  }
  out->payload = inline_offset;
  return use_arena;
}

/* The W3C traceparent of each request that Triton traces with OpenTelemetry, as marshal strings. */
static int write_traces(pyt_buf* h, pyt_outgoing* out, const pyt_batch_spec* spec) {
  pyt_buf* parents = &out->scratch;
  size_t mark = parents->len;
  int traced = 0;
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    out->ends[slot] = parents->len; /* reused as the starts: the parameters are written already */
    TRITONSERVER_InferenceTrace* trace = NULL;
    const char* context = NULL;
    if (pyt_checked(TRITONBACKEND_RequestTrace(spec->requests[slot], &trace), NULL, 0) == 0 && trace != NULL &&
        pyt_checked(TRITONSERVER_InferenceTraceContext(trace, &context), NULL, 0) == 0 && context != NULL) {
      char problem[64];
      pyt_json* parsed = pyt_json_parse(context, strlen(context), problem, sizeof(problem));
      const pyt_json* parent = pyt_json_get(parsed, "traceparent");
      if (parent != NULL && parent->kind == PYT_JSON_STRING) {
        pyt_buf_put(parents, parent->text, strlen(parent->text));
        traced = 1;
      }
      pyt_json_free(parsed);
    }
  }
  if (traced) {
    pyt_m_tuple(h, spec->count);
    for (uint32_t slot = 0; slot < spec->count; slot++) {
      size_t end = slot + 1 < spec->count ? out->ends[slot + 1] : parents->len;
      pyt_m_str(h, (const char*)parents->data + out->ends[slot], end - out->ends[slot]);
    }
  } else {
    pyt_m_tuple(h, 0);
  }
  parents->len = mark;
  return traced;
}

static void write_sequences(pyt_buf* h, const pyt_batch_spec* spec) {
  pyt_m_tuple(h, spec->count);
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    TRITONBACKEND_Request* request = spec->requests[slot];
    uint64_t id = 0;
    uint32_t flags = 0;
    const char* text = NULL;
    pyt_m_tuple(h, 2);
    if (pyt_checked(TRITONBACKEND_RequestCorrelationId(request, &id), NULL, 0) == 0)
      pyt_m_int(h, (int64_t)id);
    else if (pyt_checked(TRITONBACKEND_RequestCorrelationIdString(request, &text), NULL, 0) == 0 && text)
      pyt_m_cstr(h, text);
    else
      pyt_m_int(h, 0);
    pyt_checked(TRITONBACKEND_RequestFlags(request, &flags), NULL, 0);
    pyt_m_int(h, flags);
  }
}

/* Per request, the outputs it asked for, when some request asked for fewer than all. */
static void write_requested(pyt_buf* h, const pyt_model* model, const pyt_batch_spec* spec) {
  int fewer = 0;
  if (model->output_count >= 2) {
    for (uint32_t slot = 0; slot < spec->count && !fewer; slot++) {
      uint32_t asked = model->output_count;
      pyt_checked(TRITONBACKEND_RequestOutputCount(spec->requests[slot], &asked), NULL, 0);
      fewer = asked < model->output_count;
    }
  }
  if (!fewer) {
    pyt_m_tuple(h, 0);
    return;
  }
  pyt_m_tuple(h, spec->count);
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    TRITONBACKEND_Request* request = spec->requests[slot];
    uint32_t asked = model->output_count;
    pyt_checked(TRITONBACKEND_RequestOutputCount(request, &asked), NULL, 0);
    if (asked >= model->output_count) {
      pyt_m_tuple(h, 0);
      continue;
    }
    pyt_m_tuple(h, asked);
    for (uint32_t o = 0; o < asked; o++) {
      const char* name = "";
      pyt_checked(TRITONBACKEND_RequestOutputName(request, o, &name), NULL, 0);
      pyt_m_cstr(h, name);
    }
  }
}

int pyt_build_batch(const pyt_model* model, pyt_outgoing* out, const pyt_batch_spec* spec, char* why,
                    size_t why_size) {
  if (ensure_requests(out, spec->count) != 0) goto memory;
  if (read_inputs(model, out, spec, why, why_size) != 0 || read_parameters(out, spec, why, why_size) != 0) return -1;
  int use_arena = lay_out(out, spec);
  if (use_arena < 0) goto memory;

  /* The header: InferBatch's fields, in protocol.py's order. */
  pyt_buf* h = &out->header;
  pyt_buf_reset(h);
  pyt_m_tuple(h, PYT_INFER_BATCH_FIELDS);
  pyt_m_int(h, PYT_KIND_INFER_BATCH);
  pyt_m_int(h, spec->batch_id);
  pyt_m_tuple(h, spec->count); /* parameters */
  for (uint32_t slot = 0; slot < spec->count; slot++) {
    size_t start = slot ? out->ends[slot - 1] : 0;
    pyt_m_str(h, (const char*)out->scratch.data + start, out->ends[slot] - start);
  }
  pyt_m_tuple(h, out->column_count);
  for (uint32_t i = 0; i < out->column_count; i++) {
    pyt_column* c = &out->columns[i];
    pyt_m_tuple(h, PYT_COLUMN_IN_SHM + 1);
    pyt_m_cstr(h, c->name);
    pyt_m_cstr(h, c->numpy);
    pyt_m_tuple(h, spec->count);
    for (uint32_t r = 0; r < spec->count; r++) {
      if (c->shapes[r] == NULL) {
        pyt_m_none(h);
        continue;
      }
      pyt_m_tuple(h, c->dims[r]);
      for (uint32_t d = 0; d < c->dims[r]; d++) pyt_m_int(h, c->shapes[r][d]);
    }
    pyt_m_tuple(h, spec->count);
    for (uint32_t r = 0; r < spec->count; r++) pyt_m_int(h, (int64_t)c->offsets[r]);
    pyt_m_tuple(h, spec->count);
    for (uint32_t r = 0; r < spec->count; r++) pyt_m_int(h, (int64_t)c->sizes[r]);
    pyt_m_tuple(h, spec->count);
    for (uint32_t r = 0; r < spec->count; r++) pyt_m_bool(h, c->in_shm[r]);
  }
  if (use_arena) pyt_m_cstr(h, spec->arena->name);
  else pyt_m_str(h, "", 0);
  if (model->stamps) { /* the previous batch's record, then this one's first two stamps */
    pyt_m_tuple(h, (spec->previous_stamps != NULL ? PYT_STAMP_COUNT : 0) + 2);
    if (spec->previous_stamps != NULL)
      for (int s = 0; s < PYT_STAMP_COUNT; s++) pyt_m_int(h, spec->previous_stamps[s]);
    pyt_m_int(h, (int64_t)spec->exec_start);
    pyt_m_int(h, (int64_t)pyt_now_ns());
  } else {
    pyt_m_tuple(h, 0);
  }
  if (model->sequences) write_sequences(h, spec);
  else pyt_m_tuple(h, 0);
  write_requested(h, model, spec);
  pyt_m_int(h, (int64_t)pyt_now_ns()); /* sent_ns */
  if (model->tracing) write_traces(h, out, spec);
  else pyt_m_tuple(h, 0);
  if (h->failed || out->scratch.failed) goto memory;

  size_t pad;
  pyt_frame_prefix(out->prefix, (uint32_t)h->len, out->payload, &pad);
  out->iov[0].iov_base = out->prefix;
  out->iov[0].iov_len = PYT_PREFIX_BYTES;
  out->iov[1].iov_base = h->data;
  out->iov[1].iov_len = h->len;
  out->iov[2].iov_base = (void*)ZEROS;
  out->iov[2].iov_len = pad;
  out->total = PYT_PREFIX_BYTES + h->len + pad + out->payload;
  return 0;
memory:
  snprintf(why, why_size, "out of memory in the pytriton backend");
  return -1;
}

uint64_t pyt_batch_rows(const pyt_model* model, const pyt_outgoing* out, uint32_t count) {
  if (!model->batching || out->column_count == 0) return count;
  const pyt_column* first = &out->columns[0];
  uint64_t rows = 0;
  for (uint32_t slot = 0; slot < count; slot++)
    rows += first->shapes[slot] != NULL && first->dims[slot] ? (uint64_t)first->shapes[slot][0] : 1;
  return rows;
}

int pyt_send_batch(int fd, pyt_outgoing* out) { return pyt_send_message(fd, out->iov, (int)out->iov_count, out->total); }
