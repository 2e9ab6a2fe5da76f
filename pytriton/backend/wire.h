/* The pytriton wire, as the backend speaks it: the C side of pytriton/ipc/protocol.py and
 * pytriton/ipc/channel.py, which stay the one definition of the contract: the framing constants
 * here are checked against them by tests/unit/backend/test_wire_mirror.py, and the message
 * kinds, field positions and parameter names come from contract.h, generated from protocol.py.
 *
 * A message is a 12-byte prefix (magic, header length, payload length, little endian), the
 * header, zeros up to the next multiple of 8 bytes, and the payload. The header is a tuple in
 * CPython's marshal format: the message kind, then the fields of the NamedTuple of
 * protocol.py. The backend writes the few marshal types it needs and reads every type the
 * worker's marshal.dumps emits for those messages, references included. */
#ifndef PYTRITON_WIRE_H
#define PYTRITON_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "contract.h" /* the kinds, fields, parameters and stamps: generated from protocol.py */

#define PYT_MAGIC 0x70797432u
#define PYT_PREFIX_BYTES 12
#define PYT_DATAGRAM_BYTES (128 * 1024)
#define PYT_INLINE_MAX_BYTES (64 * 1024)
#define PYT_INLINE_ALIGNMENT 8
#define PYT_ARENA_ALIGNMENT 64
#define PYT_ARENA_STEP_BYTES (1024 * 1024)
#define PYT_STOPPING_BYTES 8 /* the stopping flag's file (pytriton/ipc/stopping.py) */
#define PYT_STOPPING_REFUSING 1  /* its first byte: new batches refused where they start */
#define PYT_STOPPING_ABANDONED 2 /* its first byte: a second signal gives up the requests in flight */

/* A growable byte buffer; `failed` is set once an allocation failed (then nothing more is added). */
typedef struct {
  uint8_t* data;
  size_t len;
  size_t cap;
  int failed;
} pyt_buf;

void pyt_buf_reset(pyt_buf* buf);
void pyt_buf_free(pyt_buf* buf);
int pyt_buf_reserve(pyt_buf* buf, size_t extra);
void pyt_buf_put(pyt_buf* buf, const void* data, size_t size);
void pyt_buf_printf(pyt_buf* buf, const char* format, ...) __attribute__((format(printf, 2, 3)));
/* `text` (of `size` bytes) as a JSON string literal, quotes included. */
void pyt_buf_json_string(pyt_buf* buf, const char* text, size_t size);

/* Marshal writers. */
void pyt_m_tuple(pyt_buf* buf, uint32_t count);
void pyt_m_int(pyt_buf* buf, int64_t value);
void pyt_m_str(pyt_buf* buf, const char* text, size_t size);
void pyt_m_cstr(pyt_buf* buf, const char* text);
void pyt_m_none(pyt_buf* buf);
void pyt_m_bool(pyt_buf* buf, int value);

/* A value read from a marshal header. Strings and bytes point into the header (not
 * NUL-terminated). A reference shares the node it refers to. */
typedef enum { PYT_MV_NONE, PYT_MV_BOOL, PYT_MV_INT, PYT_MV_FLOAT, PYT_MV_STR, PYT_MV_TUPLE } pyt_mv_kind;

typedef struct pyt_mv {
  pyt_mv_kind kind;
  int64_t integer;     /* BOOL and INT */
  double number;       /* FLOAT, and BOOL and INT as numbers */
  const char* text;    /* STR (text and bytes alike) */
  uint32_t count;      /* STR: bytes; TUPLE: items */
  struct pyt_mv** items;
} pyt_mv;

/* Nodes of one decoded header, reused message after message. */
typedef struct {
  uint8_t* block;
  size_t used;
  size_t cap;
  pyt_mv** refs;
  size_t ref_count;
  size_t ref_cap;
} pyt_mv_pool;

void pyt_mv_pool_free(pyt_mv_pool* pool);
/* The header's value, or NULL with `error` (of `error_size` bytes) saying why. */
pyt_mv* pyt_marshal_read(pyt_mv_pool* pool, const uint8_t* data, size_t size, char* error, size_t error_size);

/* Accessors that tolerate a wrong shape: they answer the fallback. */
pyt_mv* pyt_mv_item(const pyt_mv* tuple, uint32_t index);
int64_t pyt_mv_int(const pyt_mv* value, int64_t fallback);
double pyt_mv_number(const pyt_mv* value, double fallback);
int pyt_mv_is_str(const pyt_mv* value);
/* A copy of a STR value into `out` (NUL-terminated, cut at `out_size` - 1). */
void pyt_mv_copy(const pyt_mv* value, char* out, size_t out_size);
int pyt_mv_str_equals(const pyt_mv* value, const char* text);

/* Framing. The prefix of a message whose header has `header_size` bytes and whose payload
 * `payload_size`; `pad` receives the zeros to put after the header. */
void pyt_frame_prefix(uint8_t prefix[PYT_PREFIX_BYTES], uint32_t header_size, uint64_t payload_size, size_t* pad);

/* Send one message of `iov` parts (the prefix, header and padding included) totalling
 * `total` bytes over a SEQPACKET socket, as one datagram or as consecutive datagrams of
 * PYT_DATAGRAM_BYTES. Returns 0, or -1 with errno set (EAGAIN: the send timeout passed before
 * the first datagram went; once one went, the rest is retried until it goes or fails). */
int pyt_send_message(int fd, struct iovec* iov, int iov_count, size_t total);
/* Send a header-only message. 0, or -1 with errno. */
int pyt_send_header(int fd, const pyt_buf* header);

/* A received message: header and payload point into `buf`. */
typedef struct {
  const uint8_t* header;
  size_t header_size;
  const uint8_t* payload;
  size_t payload_size;
} pyt_message;

/* Receive one message into `buf`. Returns 1 (a message), 0 (the receive timeout passed first),
 * -1 (the peer closed the connection or sent something that is not of this wire; `error`
 * says which). */
int pyt_receive_message(int fd, pyt_buf* buf, pyt_message* message, char* error, size_t error_size);
/* The same without waiting: 0 at once when no message is there. */
int pyt_receive_message_nowait(int fd, pyt_buf* buf, pyt_message* message, char* error, size_t error_size);

#endif
