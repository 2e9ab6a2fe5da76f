/* Clocks, logging, errors and data types for every unit of the backend above the wire (util.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "util.h"

#include "triton_api.h"
#include "wire.h"

double pyt_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* CLOCK_MONOTONIC, as Python's time.monotonic_ns and Triton's own timestamps read it. */
uint64_t pyt_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void pyt_log(TRITONSERVER_LogLevel level, int line, const char* format, ...) {
  if (!TRITONSERVER_LogIsEnabled(level)) return;
  char text[PYT_MAX_ERROR + 512];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  TRITONSERVER_Error* error = TRITONSERVER_LogMessage(level, "pytriton_backend", line, text);
  if (error != NULL) TRITONSERVER_ErrorDelete(error);
}

TRITONSERVER_Error* pyt_error(TRITONSERVER_Error_Code code, const char* format, ...) {
  char text[PYT_MAX_ERROR + 512];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return TRITONSERVER_ErrorNew(code, text);
}

int pyt_checked(TRITONSERVER_Error* error, char* why, size_t why_size) {
  if (error == NULL) return 0;
  if (why != NULL) snprintf(why, why_size, "%s", TRITONSERVER_ErrorMessage(error));
  TRITONSERVER_ErrorDelete(error);
  return -1;
}

int pyt_pid_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

void pyt_set_timeouts(int fd, double seconds) {
  struct timeval value = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof(value));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, sizeof(value));
}

static const struct {
  TRITONSERVER_DataType type;
  const char* numpy;
} DTYPES[] = {
    {TRITONSERVER_TYPE_BOOL, "|b1"},  {TRITONSERVER_TYPE_UINT8, "|u1"},  {TRITONSERVER_TYPE_UINT16, "<u2"},
    {TRITONSERVER_TYPE_UINT32, "<u4"}, {TRITONSERVER_TYPE_UINT64, "<u8"}, {TRITONSERVER_TYPE_INT8, "|i1"},
    {TRITONSERVER_TYPE_INT16, "<i2"},  {TRITONSERVER_TYPE_INT32, "<i4"},  {TRITONSERVER_TYPE_INT64, "<i8"},
    {TRITONSERVER_TYPE_FP16, "<f2"},   {TRITONSERVER_TYPE_FP32, "<f4"},   {TRITONSERVER_TYPE_FP64, "<f8"},
    {TRITONSERVER_TYPE_BYTES, "bytes"},
};

const char* pyt_numpy_dtype(TRITONSERVER_DataType type) {
  for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
    if (DTYPES[i].type == type) return DTYPES[i].numpy;
  return NULL;
}

TRITONSERVER_DataType pyt_triton_dtype(const pyt_mv* numpy) {
  for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
    if (pyt_mv_str_equals(numpy, DTYPES[i].numpy)) return DTYPES[i].type;
  return TRITONSERVER_TYPE_INVALID;
}
