/* Shared-memory arenas (see arena.h). */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "wire.h"

#define SHM_DIR "/dev/shm/"

static uint64_t generation_counter;

uint64_t pyt_next_generation(void) { return __atomic_add_fetch(&generation_counter, 1, __ATOMIC_RELAXED); }

static size_t arena_size(size_t nbytes) {
  size_t steps = (nbytes + PYT_ARENA_STEP_BYTES - 1) / PYT_ARENA_STEP_BYTES;
  return (steps ? steps : 1) * (size_t)PYT_ARENA_STEP_BYTES;
}

static uint64_t shm_free(void) {
  struct statvfs info;
  if (statvfs(SHM_DIR, &info) != 0) return 0;
  return (uint64_t)info.f_bavail * info.f_frsize;
}

static void release(pyt_arena* arena) {
  if (arena->base != NULL) munmap(arena->base, arena->capacity);
  arena->base = NULL;
  if (arena->name[0]) {
    char path[256];
    snprintf(path, sizeof(path), SHM_DIR "%s", arena->name);
    unlink(path);
    arena->name[0] = '\0';
  }
  arena->capacity = 0;
}

static int create(pyt_arena* arena, size_t size) {
  char name[224];
  snprintf(name, sizeof(name), "%s%llu", arena->stem, (unsigned long long)pyt_next_generation());
  char path[256];
  snprintf(path, sizeof(path), SHM_DIR "%s", name);
  int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int failed = posix_fallocate(fd, 0, (off_t)size); /* pages taken now: a full /dev/shm shows here, not as SIGBUS */
  void* base = failed ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = failed ? failed : errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(path);
    errno = saved;
    return -1;
  }
  memcpy(arena->name, name, sizeof(name));
  arena->base = base;
  arena->capacity = size;
  return 0;
}

int pyt_arena_reserve(pyt_arena* arena, size_t nbytes, double now) {
  if (!arena->stem[0]) return nbytes == 0;
  size_t target = nbytes;
  int after_quiet = now - arena->last_use >= PYT_IDLE_RELEASE_S;
  arena->last_use = now;
  arena->window_count++;
  arena->window_peak = after_quiet ? nbytes : (nbytes > arena->window_peak ? nbytes : arena->window_peak);
  if (arena->window_count >= PYT_SHRINK_WINDOW || after_quiet) {
    size_t peak = arena->window_peak;
    arena->window_count = 0;
    arena->window_peak = 0;
    if (arena->capacity && (peak == 0 || arena_size(peak) * 2 <= arena->capacity)) {
      release(arena); /* steady traffic never gets here: its peak fills the arena */
      target = peak;
    }
  }
  if (nbytes <= arena->capacity) return 1;
  size_t size = arena_size(target);
  release(arena);
  /* Leave Triton's own needs room: at least the message again, plus one step. */
  uint64_t free_bytes = shm_free();
  if (free_bytes >= size && free_bytes - size >= nbytes + (size_t)PYT_ARENA_STEP_BYTES && create(arena, size) == 0)
    return 1;
  arena->refusals++;
  return 0;
}

int pyt_arena_release_if_idle(pyt_arena* arena, double now) {
  if (arena->capacity && now - arena->last_use >= PYT_IDLE_RELEASE_S) {
    release(arena);
    arena->window_count = 0;
    arena->window_peak = 0;
    return 1;
  }
  return 0;
}

void pyt_arena_close(pyt_arena* arena) { release(arena); }

const uint8_t* pyt_mapping_get(pyt_mapping* mapping, const char* name, size_t* size) {
  if (mapping->base != NULL && strcmp(mapping->name, name) == 0) {
    *size = mapping->size;
    return mapping->base;
  }
  pyt_mapping_close(mapping);
  char path[256];
  snprintf(path, sizeof(path), SHM_DIR "%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat info;
  void* base = MAP_FAILED;
  if (fstat(fd, &info) == 0 && info.st_size > 0) base = mmap(NULL, (size_t)info.st_size, PROT_READ, MAP_SHARED, fd, 0);
  int saved = errno;
  close(fd);
  if (base == MAP_FAILED) {
    errno = saved ? saved : EINVAL;
    return NULL;
  }
  snprintf(mapping->name, sizeof(mapping->name), "%s", name);
  mapping->base = base;
  mapping->size = (size_t)info.st_size;
  *size = mapping->size;
  return mapping->base;
}

void pyt_mapping_close(pyt_mapping* mapping) {
  if (mapping->base != NULL) munmap((void*)mapping->base, mapping->size);
  mapping->base = NULL;
  mapping->size = 0;
  mapping->name[0] = '\0';
}
