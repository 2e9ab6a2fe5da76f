/* Just enough JSON to read a model's configuration as Triton hands it to a backend. */
#ifndef PYTRITON_JSON_H
#define PYTRITON_JSON_H

#include <stddef.h>

typedef enum { PYT_JSON_NULL, PYT_JSON_BOOL, PYT_JSON_NUMBER, PYT_JSON_STRING, PYT_JSON_ARRAY, PYT_JSON_OBJECT }
    pyt_json_kind;

typedef struct pyt_json {
  pyt_json_kind kind;
  double number;         /* NUMBER, BOOL (1 or 0) */
  char* text;            /* STRING: decoded, NUL-terminated; a member's key in `key` */
  char* key;             /* the key of an object member */
  size_t count;          /* ARRAY, OBJECT: items */
  struct pyt_json** items;
} pyt_json;

/* The document, or NULL with `error` saying where it is not JSON. Free with pyt_json_free. */
pyt_json* pyt_json_parse(const char* text, size_t size, char* error, size_t error_size);
void pyt_json_free(pyt_json* value);
/* The member `key` of an object (NULL when absent or not an object). */
const pyt_json* pyt_json_get(const pyt_json* object, const char* key);
/* A model config parameter's string_value (NULL when absent). */
const char* pyt_json_parameter(const pyt_json* config, const char* key);

#endif
