/* A small recursive-descent JSON reader (see json.h). */
#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char* at;
  const char* end;
  char* error;
  size_t error_size;
  const char* start;
} parser;

static pyt_json* parse_value(parser* p, int depth);

static void skip_space(parser* p) {
  while (p->at < p->end && (*p->at == ' ' || *p->at == '\n' || *p->at == '\r' || *p->at == '\t')) p->at++;
}

static pyt_json* fail(parser* p, const char* why) {
  if (p->error[0] == '\0') snprintf(p->error, p->error_size, "%s at byte %zu", why, (size_t)(p->at - p->start));
  return NULL;
}

static pyt_json* node(pyt_json_kind kind) {
  pyt_json* value = calloc(1, sizeof(pyt_json));
  if (value != NULL) value->kind = kind;
  return value;
}

static void put_utf8(char* out, size_t* size, uint32_t code) {
  if (code < 0x80) {
    out[(*size)++] = (char)code;
  } else if (code < 0x800) {
    out[(*size)++] = (char)(0xc0 | code >> 6);
    out[(*size)++] = (char)(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out[(*size)++] = (char)(0xe0 | code >> 12);
    out[(*size)++] = (char)(0x80 | ((code >> 6) & 0x3f));
    out[(*size)++] = (char)(0x80 | (code & 0x3f));
  } else {
    out[(*size)++] = (char)(0xf0 | code >> 18);
    out[(*size)++] = (char)(0x80 | ((code >> 12) & 0x3f));
    out[(*size)++] = (char)(0x80 | ((code >> 6) & 0x3f));
    out[(*size)++] = (char)(0x80 | (code & 0x3f));
  }
}

static int hex4(const char* at, uint32_t* code) {
  *code = 0;
  for (int i = 0; i < 4; i++) {
    char c = at[i];
    *code <<= 4;
    if (c >= '0' && c <= '9') *code |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') *code |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') *code |= (uint32_t)(c - 'A' + 10);
    else return -1;
  }
  return 0;
}

static char* parse_string(parser* p) {
  p->at++; /* the opening quote */
  const char* begin = p->at;
  while (p->at < p->end && *p->at != '"') p->at += (*p->at == '\\') ? 2 : 1;
  if (p->at >= p->end) {
    fail(p, "an unterminated string");
    return NULL;
  }
  size_t raw = (size_t)(p->at - begin);
  char* out = malloc(raw + 1);
  if (out == NULL) return NULL;
  size_t size = 0;
  for (const char* c = begin; c < p->at; c++) {
    if (*c != '\\') {
      out[size++] = *c;
      continue;
    }
    c++;
    switch (*c) {
      case 'n': out[size++] = '\n'; break;
      case 't': out[size++] = '\t'; break;
      case 'r': out[size++] = '\r'; break;
      case 'b': out[size++] = '\b'; break;
      case 'f': out[size++] = '\f'; break;
      case 'u': {
        uint32_t code;
        if (p->at - c < 5 || hex4(c + 1, &code) != 0) {
          free(out);
          fail(p, "a bad \\u escape");
          return NULL;
        }
        c += 4;
        if (code >= 0xd800 && code < 0xdc00 && p->at - c >= 7 && c[1] == '\\' && c[2] == 'u') {
          uint32_t low;
          if (hex4(c + 3, &low) == 0 && low >= 0xdc00 && low < 0xe000) {
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            c += 6;
          }
        }
        /* An escape takes 6 bytes or more and yields 4 at most: `out` is large enough. */
        put_utf8(out, &size, code);
        break;
      }
      default: out[size++] = *c; break; /* " \ / */
    }
  }
  out[size] = '\0';
  p->at++; /* the closing quote */
  return out;
}

static int append(pyt_json* container, pyt_json* item) {
  pyt_json** grown = realloc(container->items, (container->count + 1) * sizeof(*grown));
  if (grown == NULL) return -1;
  container->items = grown;
  container->items[container->count++] = item;
  return 0;
}

static pyt_json* parse_container(parser* p, int depth, int is_object) {
  pyt_json* value = node(is_object ? PYT_JSON_OBJECT : PYT_JSON_ARRAY);
  if (value == NULL) return fail(p, "out of memory");
  char close = is_object ? '}' : ']';
  p->at++;
  skip_space(p);
  if (p->at < p->end && *p->at == close) {
    p->at++;
    return value;
  }
  for (;;) {
    char* key = NULL;
    skip_space(p);
    if (is_object) {
      if (p->at >= p->end || *p->at != '"' || (key = parse_string(p)) == NULL) break;
      skip_space(p);
      if (p->at >= p->end || *p->at != ':') {
        free(key);
        fail(p, "a member without ':'");
        break;
      }
      p->at++;
    }
    pyt_json* item = parse_value(p, depth + 1);
    if (item == NULL) {
      free(key);
      break;
    }
    item->key = key;
    if (append(value, item) != 0) {
      pyt_json_free(item);
      break;
    }
    skip_space(p);
    if (p->at < p->end && *p->at == ',') {
      p->at++;
      continue;
    }
    if (p->at < p->end && *p->at == close) {
      p->at++;
      return value;
    }
    fail(p, is_object ? "an object without '}'" : "an array without ']'");
    break;
  }
  fail(p, "a bad object or array");
  pyt_json_free(value);
  return NULL;
}

static pyt_json* parse_value(parser* p, int depth) {
  skip_space(p);
  if (depth > 64) return fail(p, "nesting too deep");
  if (p->at >= p->end) return fail(p, "the text ends early");
  char c = *p->at;
  if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
  if (c == '"') {
    pyt_json* value = node(PYT_JSON_STRING);
    if (value == NULL || (value->text = parse_string(p)) == NULL) {
      free(value);
      return fail(p, "a bad string");
    }
    return value;
  }
  static const struct { const char* word; pyt_json_kind kind; double number; } words[] = {
      {"true", PYT_JSON_BOOL, 1}, {"false", PYT_JSON_BOOL, 0}, {"null", PYT_JSON_NULL, 0}};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
    size_t size = strlen(words[i].word);
    if ((size_t)(p->end - p->at) >= size && memcmp(p->at, words[i].word, size) == 0) {
      p->at += size;
      pyt_json* value = node(words[i].kind);
      if (value != NULL) value->number = words[i].number;
      return value;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    char digits[64];
    size_t size = 0;
    while (p->at < p->end && size < sizeof(digits) - 1 && strchr("+-0123456789.eE", *p->at)) digits[size++] = *p->at++;
    digits[size] = '\0';
    pyt_json* value = node(PYT_JSON_NUMBER);
    if (value != NULL) value->number = strtod(digits, NULL);
    return value;
  }
  return fail(p, "an unexpected character");
}

pyt_json* pyt_json_parse(const char* text, size_t size, char* error, size_t error_size) {
  error[0] = '\0';
  parser p = {text, text + size, error, error_size, text};
  pyt_json* value = parse_value(&p, 0);
  if (value == NULL && error[0] == '\0') snprintf(error, error_size, "out of memory");
  return value;
}

void pyt_json_free(pyt_json* value) {
  if (value == NULL) return;
  for (size_t i = 0; i < value->count; i++) pyt_json_free(value->items[i]);
  free(value->items);
  free(value->text);
  free(value->key);
  free(value);
}

const pyt_json* pyt_json_get(const pyt_json* object, const char* key) {
  if (object == NULL || object->kind != PYT_JSON_OBJECT) return NULL;
  for (size_t i = 0; i < object->count; i++)
    if (object->items[i]->key != NULL && strcmp(object->items[i]->key, key) == 0) return object->items[i];
  return NULL;
}

const char* pyt_json_parameter(const pyt_json* config, const char* key) {
  const pyt_json* value = pyt_json_get(pyt_json_get(pyt_json_get(config, "parameters"), key), "string_value");
  return value != NULL && value->kind == PYT_JSON_STRING ? value->text : NULL;
}
