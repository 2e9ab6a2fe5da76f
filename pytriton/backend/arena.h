/* Shared memory for large tensors, as pytriton/ipc/shm.py lays it out: the backend owns one
 * arena for the inputs it sends (the worker maps it; a callable that keeps arrays viewing it
 * makes the backend give it up, see BatchResult.inputs_kept) and maps the worker's arena of
 * outputs read-only. An arena grows in 1 MiB steps under a new name each time, only while
 * /dev/shm keeps room for Triton's own needs, shrinks after a window of smaller messages and
 * is given back after a quiet spell. */
#ifndef PYTRITON_ARENA_H
#define PYTRITON_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char stem[200];      /* names are <stem><generation>; empty: no arena (everything inline) */
  char name[224];      /* the current segment ("" when none) */
  uint8_t* base;
  size_t capacity;
  uint32_t window_count;
  size_t window_peak;
  double last_use;     /* monotonic seconds */
  uint32_t refusals;
} pyt_arena;

/* Make room for `nbytes` (0 when the message needs none). 1: it fits in `arena->base`;
 * 0: /dev/shm cannot spare it (the arena then holds nothing: send inline). */
int pyt_arena_reserve(pyt_arena* arena, size_t nbytes, double now);
/* Give the segment back if unused for PYT_IDLE_RELEASE_S; 1 when it did. */
int pyt_arena_release_if_idle(pyt_arena* arena, double now);
void pyt_arena_close(pyt_arena* arena);

#define PYT_IDLE_RELEASE_S 5.0
#define PYT_SHRINK_WINDOW 64

/* A read-only mapping of the peer's current segment. */
typedef struct {
  char name[224];
  const uint8_t* base;
  size_t size;
} pyt_mapping;

/* The mapping of `name` (mapped on first use, replacing the previous one); NULL with errno set. */
const uint8_t* pyt_mapping_get(pyt_mapping* mapping, const char* name, size_t* size);
void pyt_mapping_close(pyt_mapping* mapping);

/* A process-wide counter for arena generations: a name is never used twice by one server. */
uint64_t pyt_next_generation(void);

#endif
