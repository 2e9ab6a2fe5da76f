/* The pytriton wire in C: buffers, the marshal subset, framing (see wire.h). */
#define _GNU_SOURCE
#include "wire.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---- buffers ---- */

void pyt_buf_reset(pyt_buf* buf) {
  buf->len = 0;
  buf->failed = 0;
}

void pyt_buf_free(pyt_buf* buf) {
  free(buf->data);
  buf->data = NULL;
  buf->len = buf->cap = 0;
  buf->failed = 0;
}

int pyt_buf_reserve(pyt_buf* buf, size_t extra) {
  if (buf->failed) return -1;
  if (buf->len + extra <= buf->cap) return 0;
  size_t cap = buf->cap ? buf->cap : 256;
  while (cap < buf->len + extra) cap *= 2;
  uint8_t* grown = realloc(buf->data, cap);
  if (grown == NULL) {
    buf->failed = 1;
    return -1;
  }
  buf->data = grown;
  buf->cap = cap;
  return 0;
}

void pyt_buf_put(pyt_buf* buf, const void* data, size_t size) {
  if (size == 0 || pyt_buf_reserve(buf, size) != 0) return;
  memcpy(buf->data + buf->len, data, size);
  buf->len += size;
}

static void put_byte(pyt_buf* buf, uint8_t byte) { pyt_buf_put(buf, &byte, 1); }

static void put_u32(pyt_buf* buf, uint32_t value) {
  uint8_t bytes[4] = {(uint8_t)value, (uint8_t)(value >> 8), (uint8_t)(value >> 16), (uint8_t)(value >> 24)};
  pyt_buf_put(buf, bytes, 4);
}

void pyt_buf_printf(pyt_buf* buf, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  int size = vsnprintf(NULL, 0, format, args);
  va_end(args);
  if (size > 0 && pyt_buf_reserve(buf, (size_t)size + 1) == 0) {
    vsnprintf((char*)buf->data + buf->len, (size_t)size + 1, format, again);
    buf->len += (size_t)size;
  }
  va_end(again);
}

void pyt_buf_json_string(pyt_buf* buf, const char* text, size_t size) {
  put_byte(buf, '"');
  for (size_t i = 0; i < size; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '"' || c == '\\') {
      put_byte(buf, '\\');
      put_byte(buf, c);
    } else if (c < 0x20) {
      pyt_buf_printf(buf, "\\u%04x", c);
    } else {
      put_byte(buf, c);
    }
  }
  put_byte(buf, '"');
}

/* ---- marshal writer ---- */

enum {
  M_NONE = 'N',
  M_FALSE = 'F',
  M_TRUE = 'T',
  M_INT = 'i',
  M_LONG = 'l',
  M_BINARY_FLOAT = 'g',
  M_BYTES = 's',
  M_INTERNED = 't',
  M_REF = 'r',
  M_TUPLE = '(',
  M_LIST = '[',
  M_UNICODE = 'u',
  M_ASCII = 'a',
  M_ASCII_INTERNED = 'A',
  M_SMALL_TUPLE = ')',
  M_SHORT_ASCII = 'z',
  M_SHORT_ASCII_INTERNED = 'Z',
  M_FLAG_REF = 0x80
};

void pyt_m_tuple(pyt_buf* buf, uint32_t count) {
  if (count < 256) {
    put_byte(buf, M_SMALL_TUPLE);
    put_byte(buf, (uint8_t)count);
  } else {
    put_byte(buf, M_TUPLE);
    put_u32(buf, count);
  }
}

void pyt_m_int(pyt_buf* buf, int64_t value) {
  if (value >= INT32_MIN && value <= INT32_MAX) {
    put_byte(buf, M_INT);
    put_u32(buf, (uint32_t)(int32_t)value);
    return;
  }
  /* CPython's long: a signed count of 15-bit digits, least significant first, none zero at the top. */
  uint64_t magnitude = value < 0 ? (uint64_t)(-(value + 1)) + 1 : (uint64_t)value;
  uint16_t digits[5];
  int count = 0;
  while (magnitude) {
    digits[count++] = (uint16_t)(magnitude & 0x7fff);
    magnitude >>= 15;
  }
  put_byte(buf, M_LONG);
  put_u32(buf, (uint32_t)(value < 0 ? -count : count));
  for (int i = 0; i < count; i++) {
    uint8_t bytes[2] = {(uint8_t)digits[i], (uint8_t)(digits[i] >> 8)};
    pyt_buf_put(buf, bytes, 2);
  }
}

void pyt_m_str(pyt_buf* buf, const char* text, size_t size) {
  put_byte(buf, M_UNICODE);
  put_u32(buf, (uint32_t)size);
  pyt_buf_put(buf, text, size);
}

void pyt_m_cstr(pyt_buf* buf, const char* text) { pyt_m_str(buf, text, strlen(text)); }

void pyt_m_none(pyt_buf* buf) { put_byte(buf, M_NONE); }

void pyt_m_bool(pyt_buf* buf, int value) { put_byte(buf, value ? M_TRUE : M_FALSE); }

/* ---- marshal reader ---- */

#define POOL_BLOCK_BYTES (64 * 1024)
#define MAX_DEPTH 16

void pyt_mv_pool_free(pyt_mv_pool* pool) {
  free(pool->block);
  free(pool->refs);
  memset(pool, 0, sizeof(*pool));
}

static void* pool_take(pyt_mv_pool* pool, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (pool->used + size > pool->cap) return NULL;
  void* at = pool->block + pool->used;
  pool->used += size;
  return at;
}

static int pool_ref(pyt_mv_pool* pool, pyt_mv* value) {
  if (pool->ref_count == pool->ref_cap) {
    size_t cap = pool->ref_cap ? pool->ref_cap * 2 : 64;
    pyt_mv** grown = realloc(pool->refs, cap * sizeof(*grown));
    if (grown == NULL) return -1;
    pool->refs = grown;
    pool->ref_cap = cap;
  }
  pool->refs[pool->ref_count++] = value;
  return 0;
}

typedef struct {
  const uint8_t* at;
  const uint8_t* end;
  pyt_mv_pool* pool;
  char* error;
  size_t error_size;
} reader;

static int fail(reader* r, const char* why) {
  snprintf(r->error, r->error_size, "%s", why);
  return -1;
}

static int read_u32(reader* r, uint32_t* value) {
  if (r->end - r->at < 4) return fail(r, "the header ends inside a number");
  *value = (uint32_t)r->at[0] | (uint32_t)r->at[1] << 8 | (uint32_t)r->at[2] << 16 | (uint32_t)r->at[3] << 24;
  r->at += 4;
  return 0;
}

static pyt_mv* read_value(reader* r, int depth);

static pyt_mv* read_text(reader* r, pyt_mv* node, uint32_t size) {
  if ((size_t)(r->end - r->at) < size) {
    fail(r, "the header ends inside a string");
    return NULL;
  }
  node->kind = PYT_MV_STR;
  node->text = (const char*)r->at;
  node->count = size;
  r->at += size;
  return node;
}

static pyt_mv* read_value(reader* r, int depth) {
  if (depth > MAX_DEPTH) {
    fail(r, "the header nests too deep");
    return NULL;
  }
  if (r->at >= r->end) {
    fail(r, "the header ends early");
    return NULL;
  }
  uint8_t code = *r->at++;
  int flagged = code & M_FLAG_REF;
  code &= (uint8_t)~M_FLAG_REF;
  if (code == M_REF) {
    uint32_t index;
    if (read_u32(r, &index) != 0) return NULL;
    if (index >= r->pool->ref_count || r->pool->refs[index] == NULL) {
      fail(r, "the header refers to an object it has not defined");
      return NULL;
    }
    return r->pool->refs[index];
  }
  pyt_mv* node = pool_take(r->pool, sizeof(pyt_mv));
  if (node == NULL) {
    fail(r, "the header is too large");
    return NULL;
  }
  memset(node, 0, sizeof(*node));
  size_t slot = r->pool->ref_count;
  if (flagged && pool_ref(r->pool, NULL) != 0) {  /* reserved now: the index counts in pre-order */
    fail(r, "out of memory");
    return NULL;
  }
  uint32_t size;
  switch (code) {
    case M_NONE:
      node->kind = PYT_MV_NONE;
      break;
    case M_FALSE:
    case M_TRUE:
      node->kind = PYT_MV_BOOL;
      node->integer = code == M_TRUE;
      break;
    case M_INT:
      if (read_u32(r, &size) != 0) return NULL;
      node->kind = PYT_MV_INT;
      node->integer = (int32_t)size;
      break;
    case M_BINARY_FLOAT: {
      if (r->end - r->at < 8) {
        fail(r, "the header ends inside a number");
        return NULL;
      }
      uint64_t bits = 0;
      for (int i = 7; i >= 0; i--) bits = bits << 8 | r->at[i];
      r->at += 8;
      node->kind = PYT_MV_FLOAT;
      memcpy(&node->number, &bits, sizeof(bits));
      break;
    }
    case M_LONG: {
      if (read_u32(r, &size) != 0) return NULL;
      int32_t count = (int32_t)size;
      uint32_t digits = (uint32_t)(count < 0 ? -count : count);
      if (digits > 4 || (size_t)(r->end - r->at) < digits * 2u) {
        fail(r, "a number in the header is out of range");
        return NULL;
      }
      uint64_t magnitude = 0;
      for (uint32_t i = digits; i-- > 0;) magnitude = magnitude << 15 | ((uint64_t)r->at[2 * i] | (uint64_t)r->at[2 * i + 1] << 8);
      r->at += digits * 2u;
      if (magnitude > (uint64_t)INT64_MAX) {
        fail(r, "a number in the header is out of range");
        return NULL;
      }
      node->kind = PYT_MV_INT;
      node->integer = count < 0 ? -(int64_t)magnitude : (int64_t)magnitude;
      break;
    }
    case M_BYTES:
    case M_INTERNED:
    case M_UNICODE:
    case M_ASCII:
    case M_ASCII_INTERNED:
      if (read_u32(r, &size) != 0 || read_text(r, node, size) == NULL) return NULL;
      break;
    case M_SHORT_ASCII:
    case M_SHORT_ASCII_INTERNED:
      if (r->at >= r->end) {
        fail(r, "the header ends inside a string");
        return NULL;
      }
      size = *r->at++;
      if (read_text(r, node, size) == NULL) return NULL;
      break;
    case M_SMALL_TUPLE:
    case M_TUPLE:
    case M_LIST:
      if (code == M_SMALL_TUPLE) {
        if (r->at >= r->end) {
          fail(r, "the header ends inside a tuple");
          return NULL;
        }
        size = *r->at++;
      } else if (read_u32(r, &size) != 0) {
        return NULL;
      }
      if (size > (uint32_t)(r->end - r->at)) {  /* every item takes at least one byte */
        fail(r, "a tuple in the header is longer than the header");
        return NULL;
      }
      node->kind = PYT_MV_TUPLE;
      node->count = size;
      node->items = pool_take(r->pool, (size ? size : 1) * sizeof(pyt_mv*));
      if (node->items == NULL) {
        fail(r, "the header is too large");
        return NULL;
      }
      if (flagged) r->pool->refs[slot] = node;  /* children may refer to their tuple */
      for (uint32_t i = 0; i < size; i++) {
        node->items[i] = read_value(r, depth + 1);
        if (node->items[i] == NULL) return NULL;
      }
      break;
    default: {
      char why[64];
      snprintf(why, sizeof(why), "the header holds a value of marshal type %#x", code);
      fail(r, why);
      return NULL;
    }
  }
  if (flagged) r->pool->refs[slot] = node;
  return node;
}

pyt_mv* pyt_marshal_read(pyt_mv_pool* pool, const uint8_t* data, size_t size, char* error, size_t error_size) {
  /* A header holds one node per byte at most, and a tuple's item list costs a pointer per item. */
  size_t need = (size + 1) * (sizeof(pyt_mv) + 16) + 4096;
  if (need > pool->cap) {
    size_t cap = need > POOL_BLOCK_BYTES ? need : POOL_BLOCK_BYTES;
    uint8_t* block = realloc(pool->block, cap);
    if (block == NULL) {
      snprintf(error, error_size, "out of memory reading a header of %zu bytes", size);
      return NULL;
    }
    pool->block = block;
    pool->cap = cap;
  }
  pool->used = 0;
  pool->ref_count = 0;
  reader r = {data, data + size, pool, error, error_size};
  pyt_mv* value = read_value(&r, 0);
  if (value != NULL && r.at != r.end) {
    snprintf(error, error_size, "the header has %zu bytes after its value", (size_t)(r.end - r.at));
    return NULL;
  }
  return value;
}

pyt_mv* pyt_mv_item(const pyt_mv* tuple, uint32_t index) {
  if (tuple == NULL || tuple->kind != PYT_MV_TUPLE || index >= tuple->count) return NULL;
  return tuple->items[index];
}

int64_t pyt_mv_int(const pyt_mv* value, int64_t fallback) {
  if (value == NULL || (value->kind != PYT_MV_INT && value->kind != PYT_MV_BOOL)) return fallback;
  return value->integer;
}

double pyt_mv_number(const pyt_mv* value, double fallback) {
  if (value == NULL) return fallback;
  if (value->kind == PYT_MV_FLOAT) return value->number;
  if (value->kind == PYT_MV_INT || value->kind == PYT_MV_BOOL) return (double)value->integer;
  return fallback;
}

int pyt_mv_is_str(const pyt_mv* value) { return value != NULL && value->kind == PYT_MV_STR; }

void pyt_mv_copy(const pyt_mv* value, char* out, size_t out_size) {
  if (out_size == 0) return;
  size_t size = pyt_mv_is_str(value) ? value->count : 0;
  if (size >= out_size) size = out_size - 1;
  if (size) memcpy(out, value->text, size);
  out[size] = '\0';
}

int pyt_mv_str_equals(const pyt_mv* value, const char* text) {
  size_t size = strlen(text);
  return pyt_mv_is_str(value) && value->count == size && memcmp(value->text, text, size) == 0;
}

/* ---- framing ---- */

static const uint8_t HEADER_PAD[PYT_INLINE_ALIGNMENT]; /* the zeros after a header */

void pyt_frame_prefix(uint8_t prefix[PYT_PREFIX_BYTES], uint32_t header_size, uint64_t payload_size, size_t* pad) {
  uint32_t fields[3] = {PYT_MAGIC, header_size, (uint32_t)payload_size};
  for (int i = 0; i < 3; i++) {
    prefix[4 * i] = (uint8_t)fields[i];
    prefix[4 * i + 1] = (uint8_t)(fields[i] >> 8);
    prefix[4 * i + 2] = (uint8_t)(fields[i] >> 16);
    prefix[4 * i + 3] = (uint8_t)(fields[i] >> 24);
  }
  size_t used = PYT_PREFIX_BYTES + header_size;
  *pad = (PYT_INLINE_ALIGNMENT - used % PYT_INLINE_ALIGNMENT) % PYT_INLINE_ALIGNMENT;
}

static ssize_t send_parts(int fd, struct iovec* iov, int iov_count) {
  struct msghdr header;
  memset(&header, 0, sizeof(header));
  header.msg_iov = iov;
  header.msg_iovlen = (size_t)iov_count;
  ssize_t sent;
  do {
    sent = sendmsg(fd, &header, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent;
}

int pyt_send_message(int fd, struct iovec* iov, int iov_count, size_t total) {
  if (total <= PYT_DATAGRAM_BYTES && iov_count <= IOV_MAX) return send_parts(fd, iov, iov_count) < 0 ? -1 : 0;
  /* Several datagrams of PYT_DATAGRAM_BYTES, cut across the parts without copying them. */
  struct iovec piece[64];
  int part = 0;
  size_t part_offset = 0;
  int first = 1;
  while (part < iov_count) {
    int count = 0;
    size_t size = 0;
    int at = part;
    size_t at_offset = part_offset;
    while (at < iov_count && size < PYT_DATAGRAM_BYTES && count < 64) {
      size_t left = iov[at].iov_len - at_offset;
      size_t take = left < PYT_DATAGRAM_BYTES - size ? left : PYT_DATAGRAM_BYTES - size;
      if (take) {
        piece[count].iov_base = (uint8_t*)iov[at].iov_base + at_offset;
        piece[count].iov_len = take;
        count++;
        size += take;
      }
      at_offset += take;
      if (at_offset == iov[at].iov_len) {
        at++;
        at_offset = 0;
      }
    }
    if (count == 64 && size < PYT_DATAGRAM_BYTES && at < iov_count) {
      /* Many small parts: a datagram shorter than PYT_DATAGRAM_BYTES would split the message
       * where the reader does not expect it, so gather them into one buffer. */
      static __thread uint8_t* gather;
      if (gather == NULL) gather = malloc(PYT_DATAGRAM_BYTES);
      if (gather == NULL) {
        errno = ENOMEM;
        return -1;
      }
      size = 0;
      at = part;
      at_offset = part_offset;
      while (at < iov_count && size < PYT_DATAGRAM_BYTES) {
        size_t left = iov[at].iov_len - at_offset;
        size_t take = left < PYT_DATAGRAM_BYTES - size ? left : PYT_DATAGRAM_BYTES - size;
        memcpy(gather + size, (uint8_t*)iov[at].iov_base + at_offset, take);
        size += take;
        at_offset += take;
        if (at_offset == iov[at].iov_len) {
          at++;
          at_offset = 0;
        }
      }
      piece[0].iov_base = gather;
      piece[0].iov_len = size;
      count = 1;
    }
    for (;;) {
      if (send_parts(fd, piece, count) >= 0) break;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && !first) continue; /* the rest must follow */
      return -1;
    }
    first = 0;
    part = at;
    part_offset = at_offset;
  }
  (void)total;
  return 0;
}

int pyt_send_header(int fd, const pyt_buf* header) {
  uint8_t prefix[PYT_PREFIX_BYTES];
  size_t pad;
  pyt_frame_prefix(prefix, (uint32_t)header->len, 0, &pad);
  struct iovec iov[3] = {{prefix, PYT_PREFIX_BYTES}, {header->data, header->len}, {(void*)HEADER_PAD, pad}};
  return pyt_send_message(fd, iov, pad ? 3 : 2, PYT_PREFIX_BYTES + header->len + pad);
}

static int receive(int fd, pyt_buf* buf, pyt_message* message, char* error, size_t error_size, int flags) {
  if (pyt_buf_reserve(buf, PYT_DATAGRAM_BYTES) != 0) {
    snprintf(error, error_size, "out of memory for a message");
    return -1;
  }
  buf->len = 0;
  ssize_t got;
  do {
    got = recv(fd, buf->data, PYT_DATAGRAM_BYTES, flags);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    snprintf(error, error_size, "the connection failed: %s", strerror(errno));
    return -1;
  }
  if (got == 0) {
    snprintf(error, error_size, "the peer closed the connection");
    return -1;
  }
  if (got < PYT_PREFIX_BYTES) {
    snprintf(error, error_size, "a message of %zd bytes is shorter than its prefix", got);
    return -1;
  }
  const uint8_t* p = buf->data;
  uint32_t magic = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  uint32_t header_size = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
  uint32_t payload_size = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
  if (magic != PYT_MAGIC) {
    snprintf(error, error_size, "a message with magic %#x is not of the pytriton wire", magic);
    return -1;
  }
  size_t end = PYT_PREFIX_BYTES + (size_t)header_size;
  size_t start = end + (PYT_INLINE_ALIGNMENT - end % PYT_INLINE_ALIGNMENT) % PYT_INLINE_ALIGNMENT;
  size_t total = start + payload_size;
  buf->len = (size_t)got;
  if (total > buf->len) {
    if (pyt_buf_reserve(buf, total - buf->len) != 0) {
      snprintf(error, error_size, "out of memory for a message of %zu bytes", total);
      return -1;
    }
    while (buf->len < total) {
      size_t want = total - buf->len;
      if (want > PYT_DATAGRAM_BYTES) want = PYT_DATAGRAM_BYTES;
      do {
        got = recv(fd, buf->data + buf->len, want, 0);
      } while (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK));
      if (got <= 0) {
        snprintf(error, error_size, "the peer closed the connection in the middle of a message");
        return -1;
      }
      buf->len += (size_t)got;
    }
  }
  message->header = buf->data + PYT_PREFIX_BYTES;
  message->header_size = header_size;
  message->payload = buf->data + start;
  message->payload_size = payload_size;
  return 1;
}

int pyt_receive_message(int fd, pyt_buf* buf, pyt_message* message, char* error, size_t error_size) {
  return receive(fd, buf, message, error, error_size, 0);
}

int pyt_receive_message_nowait(int fd, pyt_buf* buf, pyt_message* message, char* error, size_t error_size) {
  return receive(fd, buf, message, error, error_size, MSG_DONTWAIT);
}
