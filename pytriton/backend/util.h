/* Clocks, logging, errors and data types, for every unit of the backend above the wire (util.c). */
#ifndef PYTRITON_UTIL_H
#define PYTRITON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "triton_api.h"
#include "wire.h"

#define PYT_MAX_ERROR 1024

double pyt_now_s(void);
uint64_t pyt_now_ns(void);
void pyt_log(TRITONSERVER_LogLevel level, int line, const char* format, ...) __attribute__((format(printf, 3, 4)));
#define PYT_INFO(...) pyt_log(TRITONSERVER_LOG_INFO, __LINE__, __VA_ARGS__)
#define PYT_WARN(...) pyt_log(TRITONSERVER_LOG_WARN, __LINE__, __VA_ARGS__)
#define PYT_ERROR(...) pyt_log(TRITONSERVER_LOG_ERROR, __LINE__, __VA_ARGS__)
TRITONSERVER_Error* pyt_error(TRITONSERVER_Error_Code code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));
/* 0 for no error; else -1, the error's message kept in `why` (when given) and the error freed. */
int pyt_checked(TRITONSERVER_Error* error, char* why, size_t why_size);
int pyt_pid_alive(int pid);
void pyt_set_timeouts(int fd, double seconds);
/* numpy's dtype.str of a Triton type ("bytes" for BYTES, as pytriton's codec names it); NULL if none. */
const char* pyt_numpy_dtype(TRITONSERVER_DataType type);
TRITONSERVER_DataType pyt_triton_dtype(const pyt_mv* numpy);

#endif
