/*
 * json.h: a small strict JSON parser (RFC 8259) and the writing helpers this project needs, for the JSON that comes
 * from outside: GPT-2's encoder.json, safetensors headers, Hugging Face's config.json and index files. Plain C11,
 * also compiled by nvcc as C++ (tokenizer.h includes it).
 *
 * json_parse() reads a whole document into a tree of JsonValue. Strings are decoded to UTF-8 (every escape, \uXXXX
 * with surrogate pairs; raw bytes must be valid UTF-8); numbers are kept as double and, when written as an integer
 * that fits, also as an exact int64 (safetensors offsets pass 2^53). It never exits: malformed input returns 0 with
 * what is wrong and at which byte, so each caller names its own file and what to do. Nesting is limited to
 * JSON_MAX_DEPTH, so a hostile file cannot exhaust the stack; callers bound the input's size. Objects keep their
 * members in file order. A key given twice in one object is refused (at the second one): RFC 8259 leaves its meaning
 * open, and readers differ (Python's json and transformers keep the last value, a first-match lookup the first), so
 * such a file would be one model to us and another to them. Every value keeps where its text is in the document
 * (start, end), so that a message can quote a value as it was written (json_source), not as it was read.
 */
#ifndef LLMC_JSON_H
#define LLMC_JSON_H

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils.h"

#define JSON_MAX_DEPTH 64
#define JSON_MAX_NUMBER_CHARS 64 // a longer number is refused: no file we read has one, and strtod needs a copy
#define JSON_ERROR_LEN 96
#define JSON_STR_(x) #x
#define JSON_STR(x) JSON_STR_(x) // a limit's value inside an error message

// Decodes the UTF-8 sequence at s[*pos] (of n bytes in all) and advances *pos past it. Returns the code point,
// or -1 for an invalid sequence (truncated, overlong, a surrogate, past U+10FFFF), leaving *pos unchanged.
static inline int32_t utf8_decode_one(const unsigned char *s, size_t n, size_t *pos) {
    size_t i = *pos;
    unsigned char c = s[i];
    if (c < 0x80) { *pos = i + 1; return c; }
    int extra = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + 1 + (size_t)extra > n) { return -1; }
    int32_t cp = c & (0x3F >> extra);
    for (int k = 1; k <= extra; k++) {
        if ((s[i + k] & 0xC0) != 0x80) { return -1; }
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static const int32_t min_cp[4] = {0, 0x80, 0x800, 0x10000}; // smaller ones are overlong encodings
    if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { return -1; }
    *pos = i + 1 + (size_t)extra;
    return cp;
}

/* ---------------------------------------------------------------------------------------------------------
 * A growing text buffer, NUL-terminated: string bodies while parsing, and JSON being written.
 */
typedef struct {
    char *s;
    size_t len, cap;
} JsonText;

static inline void json_text_reserve(JsonText *t, size_t more) {
    if (t->len + more + 1 <= t->cap) { return; }
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->len + more + 1) { cap *= 2; }
    char *s = (char *)realloc(t->s, cap);
    if (!s) { fail("out of host memory growing a JSON text to %zu bytes", cap); }
    t->s = s;
    t->cap = cap;
}

static inline void json_text_append(JsonText *t, const char *s, size_t n) {
    json_text_reserve(t, n);
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

LLMC_PRINTF(2, 3) static inline void json_text_printf(JsonText *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) { fail("formatting JSON text failed"); }
    json_text_reserve(t, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static inline void json_text_utf8(JsonText *t, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    json_text_append(t, b, n);
}

// s (UTF-8) as a quoted JSON string: quote, backslash and control characters escaped, the rest as is.
static inline void json_text_string(JsonText *t, const char *s) {
    json_text_append(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            json_text_append(t, esc, 2);
        } else if (*p == '\n') {
            json_text_append(t, "\\n", 2);
        } else if (*p < 0x20) {
            json_text_printf(t, "\\u%04x", *p);
        } else {
            json_text_append(t, (const char *)p, 1);
        }
    }
    json_text_append(t, "\"", 1);
}

static inline void json_text_free(JsonText *t) {
    free(t->s);
    memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------------------------------------------------
 * The tree and the parser.
 */
typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    int boolean;             // JSON_BOOL
    double number;           // JSON_NUMBER
    int is_int;              // JSON_NUMBER written as an integer (no fraction, no exponent) that fits in int64 ...
    long long integer;       // ... and its exact value
    char *str;               // JSON_STRING: UTF-8, NUL-terminated; \u0000 may put NULs inside, hence len
    size_t len;
    struct JsonValue *items; // JSON_ARRAY's elements; JSON_OBJECT's members, each with its key
    size_t count;
    char *key;               // a member of an object: its key (UTF-8, NUL-terminated); NULL otherwise
    size_t key_len;
    size_t key_pos;          // a member of an object: the byte offset of its key's opening quote
    size_t start, end;       // the value's text in the document: bytes [start, end)
} JsonValue;

typedef struct {
    char what[JSON_ERROR_LEN];
    size_t pos; // byte offset in the document
} JsonError;

typedef struct {
    const char *s;
    size_t n, pos;
    int depth;
    JsonError *err;
} JsonParser;

static inline int json_error(JsonParser *p, const char *what) {
    snprintf(p->err->what, sizeof(p->err->what), "%s", what);
    p->err->pos = p->pos;
    return 0;
}

static inline void json_free(JsonValue *v) {
    for (size_t i = 0; i < v->count; i++) { json_free(&v->items[i]); }
    free(v->items);
    free(v->str);
    free(v->key);
    memset(v, 0, sizeof(*v));
}

static inline void json_skip_space(JsonParser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                             p->s[p->pos] == '\r')) {
        p->pos++;
    }
}

static inline int json_is_digit(JsonParser *p) { return p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9'; }

static inline int json_hex4(JsonParser *p, uint32_t *out) {
    uint32_t v = 0;
    *out = 0; // defined on the error paths too: callers stop there, but the compiler cannot always tell
    for (int i = 0; i < 4; i++, p->pos++) {
        if (p->pos >= p->n) { return json_error(p, "truncated \\u escape"); }
        char c = p->s[p->pos];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) { return json_error(p, "bad hex digit in a \\u escape"); }
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

#define JSON_HIGH_SURROGATE_FIRST 0xD800
#define JSON_LOW_SURROGATE_FIRST 0xDC00
#define JSON_LOW_SURROGATE_LAST 0xDFFF
#define JSON_SUPPLEMENTARY_FIRST 0x10000

// The escape at the backslash under p->pos: its code point in *cp. A \uXXXX high surrogate must be followed by
// its low half (a lone surrogate has no UTF-8 form).
static inline int json_escape(JsonParser *p, uint32_t *cp) {
    *cp = 0; // as json_hex4's out
    p->pos++;
    if (p->pos >= p->n) { return json_error(p, "truncated escape"); }
    char e = p->s[p->pos++];
    switch (e) {
    case '"': *cp = '"'; return 1;
    case '\\': *cp = '\\'; return 1;
    case '/': *cp = '/'; return 1;
    case 'b': *cp = '\b'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'u': break;
    default: p->pos--; return json_error(p, "unknown escape");
    }
    uint32_t hi, lo;
    if (!json_hex4(p, &hi)) { return 0; }
    if (hi >= JSON_LOW_SURROGATE_FIRST && hi <= JSON_LOW_SURROGATE_LAST) {
        return json_error(p, "unpaired low surrogate");
    }
    if (hi < JSON_HIGH_SURROGATE_FIRST || hi > JSON_LOW_SURROGATE_LAST) { *cp = hi; return 1; }
    if (p->pos + 2 > p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
        return json_error(p, "high surrogate without its low half");
    }
    p->pos += 2;
    if (!json_hex4(p, &lo)) { return 0; }
    if (lo < JSON_LOW_SURROGATE_FIRST || lo > JSON_LOW_SURROGATE_LAST) {
        return json_error(p, "high surrogate without its low half");
    }
    *cp = JSON_SUPPLEMENTARY_FIRST + ((hi - JSON_HIGH_SURROGATE_FIRST) << 10) + (lo - JSON_LOW_SURROGATE_FIRST);
    return 1;
}

// The string whose opening quote is under p->pos, decoded into a new NUL-terminated buffer.
static inline int json_parse_string(JsonParser *p, char **out, size_t *out_len) {
    JsonText t = {NULL, 0, 0};
    json_text_reserve(&t, 0); // "" too gets a buffer
    t.s[0] = '\0';
    p->pos++;
    while (1) {
        if (p->pos >= p->n) { free(t.s); return json_error(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) { free(t.s); return json_error(p, "control character inside a string"); }
        if (c == '\\') {
            uint32_t cp;
            if (!json_escape(p, &cp)) { free(t.s); return 0; }
            json_text_utf8(&t, cp);
            continue;
        }
        size_t at = p->pos;
        if (utf8_decode_one((const unsigned char *)p->s, p->n, &p->pos) < 0) {
            free(t.s);
            return json_error(p, "invalid UTF-8 inside a string");
        }
        json_text_append(&t, p->s + at, p->pos - at);
    }
    *out = t.s;
    *out_len = t.len;
    return 1;
}

// RFC 8259's number grammar exactly: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
static inline int json_parse_number(JsonParser *p, JsonValue *v) {
    size_t start = p->pos;
    int negative = p->s[p->pos] == '-', integral = 1;
    if (negative) { p->pos++; }
    if (!json_is_digit(p)) { return json_error(p, "a number needs a digit here"); }
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (json_is_digit(p)) { return json_error(p, "a number may not start with 0"); }
    }
    while (json_is_digit(p)) { p->pos++; }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (!json_is_digit(p)) { return json_error(p, "a digit must follow the decimal point"); }
        while (json_is_digit(p)) { p->pos++; }
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) { p->pos++; }
        if (!json_is_digit(p)) { return json_error(p, "an exponent needs a digit"); }
        while (json_is_digit(p)) { p->pos++; }
    }
    size_t len = p->pos - start;
    if (len > JSON_MAX_NUMBER_CHARS) {
        p->pos = start;
        return json_error(p, "number longer than " JSON_STR(JSON_MAX_NUMBER_CHARS) " characters");
    }
    char buf[JSON_MAX_NUMBER_CHARS + 1];
    memcpy(buf, p->s + start, len);
    buf[len] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    if (integral) {
        unsigned long long mag = 0, limit = (unsigned long long)LLONG_MAX + (negative ? 1ULL : 0ULL);
        int fits = 1;
        for (const char *d = buf + negative; *d && fits; d++) {
            unsigned digit = (unsigned)(*d - '0');
            if (mag > (limit - digit) / 10) { fits = 0; }
            else { mag = mag * 10 + digit; }
        }
        v->is_int = fits;
        if (fits) { v->integer = negative ? (mag == limit ? LLONG_MIN : -(long long)mag) : (long long)mag; }
    }
    return 1;
}

static inline int json_parse_literal(JsonParser *p, const char *word) {
    size_t n = strlen(word);
    if (p->pos + n > p->n || memcmp(p->s + p->pos, word, n) != 0) { return json_error(p, "unexpected character"); }
    p->pos += n;
    return 1;
}

static inline int json_parse_value(JsonParser *p, JsonValue *v);

// Appends *item to the container v (whose capacity is *cap), taking over its allocations.
static inline void json_push(JsonValue *v, size_t *cap, const JsonValue *item) {
    if (v->count == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        JsonValue *items = (JsonValue *)realloc(v->items, *cap * sizeof(JsonValue));
        if (!items) { fail("out of host memory parsing JSON (%zu values)", *cap); }
        v->items = items;
    }
    v->items[v->count++] = *item;
}

// After an element or member: ',' continues (returns 1), the closing bracket ends (returns 2), else an error (0).
static inline int json_next_or_close(JsonParser *p, char close, const char *what) {
    json_skip_space(p);
    if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; return 1; }
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return 2; }
    return json_error(p, what);
}

static inline int json_parse_array(JsonParser *p, JsonValue *v) {
    v->type = JSON_ARRAY;
    size_t cap = 0;
    p->pos++;
    json_skip_space(p);
    if (p->pos < p->n && p->s[p->pos] == ']') { p->pos++; return 1; }
    while (1) {
        JsonValue item;
        memset(&item, 0, sizeof(item));
        if (!json_parse_value(p, &item)) { json_free(&item); return 0; }
        json_push(v, &cap, &item);
        int next = json_next_or_close(p, ']', "expected ',' or ']' in an array");
        if (next != 1) { return next; }
    }
}

// Orders an object's members by key, then by position (pointers into one array), so that a repeated key's first
// repeat follows its first occurrence.
static inline int json_cmp_members(const void *a, const void *b) {
    const JsonValue *x = *(const JsonValue *const *)a, *y = *(const JsonValue *const *)b;
    int c = memcmp(x->key, y->key, x->key_len < y->key_len ? x->key_len : y->key_len);
    if (c != 0) { return c; }
    if (x->key_len != y->key_len) { return x->key_len < y->key_len ? -1 : 1; }
    return x < y ? -1 : x > y;
}

#define JSON_KEY_SHOWN 48 // a repeated key's first bytes that its error shows

// Refuses the object v (just parsed) where a key repeats, at the first repeat in the document; sorting makes this
// n log n, as encoder.json's 50257 keys need.
static inline int json_check_unique_keys(JsonParser *p, const JsonValue *v) {
    if (v->count < 2) { return 1; }
    const JsonValue **m = (const JsonValue **)malloc_check(v->count * sizeof(*m), "JSON keys");
    for (size_t i = 0; i < v->count; i++) { m[i] = &v->items[i]; }
    qsort(m, v->count, sizeof(*m), json_cmp_members);
    const JsonValue *repeat = NULL;
    for (size_t i = 1; i < v->count; i++) {
        int same = m[i]->key_len == m[i - 1]->key_len && memcmp(m[i]->key, m[i - 1]->key, m[i]->key_len) == 0;
        if (same && (!repeat || m[i] < repeat)) { repeat = m[i]; }
    }
    free(m);
    if (!repeat) { return 1; }
    JsonText key = {NULL, 0, 0};
    json_text_string(&key, repeat->key); // quoted and escaped: a key holding a newline stays on the error's line
    char what[JSON_ERROR_LEN];
    snprintf(what, sizeof(what), "duplicate key %.*s%s", JSON_KEY_SHOWN, key.s,
             key.len > JSON_KEY_SHOWN ? "..." : "");
    json_text_free(&key);
    p->pos = repeat->key_pos;
    return json_error(p, what);
}

static inline int json_parse_object(JsonParser *p, JsonValue *v) {
    v->type = JSON_OBJECT;
    size_t cap = 0;
    p->pos++;
    json_skip_space(p);
    if (p->pos < p->n && p->s[p->pos] == '}') { p->pos++; return 1; }
    while (1) {
        json_skip_space(p);
        if (p->pos >= p->n || p->s[p->pos] != '"') { return json_error(p, "expected a string key"); }
        JsonValue m;
        memset(&m, 0, sizeof(m));
        m.key_pos = p->pos;
        if (!json_parse_string(p, &m.key, &m.key_len)) { return 0; }
        json_skip_space(p);
        if (p->pos >= p->n || p->s[p->pos] != ':') { json_free(&m); return json_error(p, "expected ':' after a key"); }
        p->pos++;
        if (!json_parse_value(p, &m)) { json_free(&m); return 0; }
        json_push(v, &cap, &m);
        int next = json_next_or_close(p, '}', "expected ',' or '}' in an object");
        if (next == 2) { return json_check_unique_keys(p, v); }
        if (next != 1) { return next; }
    }
}

// The value whose first character is under p->pos (see json_parse_value).
static inline int json_parse_token(JsonParser *p, JsonValue *v) {
    if (p->pos >= p->n) { return json_error(p, "unexpected end of the document"); }
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        if (p->depth >= JSON_MAX_DEPTH) {
            return json_error(p, "nesting deeper than " JSON_STR(JSON_MAX_DEPTH) " levels");
        }
        p->depth++;
        int ok = c == '{' ? json_parse_object(p, v) : json_parse_array(p, v);
        p->depth--;
        return ok;
    }
    if (c == '"') { v->type = JSON_STRING; return json_parse_string(p, &v->str, &v->len); }
    if (c == '-' || (c >= '0' && c <= '9')) { return json_parse_number(p, v); }
    if (c == 't' || c == 'f') {
        v->type = JSON_BOOL;
        v->boolean = c == 't';
        return json_parse_literal(p, c == 't' ? "true" : "false");
    }
    if (c == 'n') { v->type = JSON_NULL; return json_parse_literal(p, "null"); }
    return json_error(p, "unexpected character");
}

// Parses the value at p->pos (after any white space) into v, whose value fields are zero (an object member's key is
// already set), and records where its text is.
static inline int json_parse_value(JsonParser *p, JsonValue *v) {
    json_skip_space(p);
    v->start = p->pos;
    int ok = json_parse_token(p, v);
    v->end = p->pos;
    return ok;
}

// Parses the document s[0..n) into *out (free it with json_free). Returns 1, or 0 with *err saying what and where
// (and *out empty).
static inline int json_parse(const char *s, size_t n, JsonValue *out, JsonError *err) {
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    JsonParser p = {s, n, 0, 0, err};
    json_skip_space(&p);
    if (p.pos >= n) { return json_error(&p, "empty document"); }
    if (!json_parse_value(&p, out)) { json_free(out); return 0; }
    json_skip_space(&p);
    if (p.pos < n) { json_free(out); return json_error(&p, "trailing characters after the value"); }
    return 1;
}

/* ---------------------------------------------------------------------------------------------------------
 * Reading the tree.
 */
static inline const char *json_type_name(JsonType t) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[t];
}

// The first member of obj named key, or NULL (also when obj is NULL or not an object).
static inline const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) { return NULL; }
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->count; i++) {
        if (obj->items[i].key_len == n && memcmp(obj->items[i].key, key, n) == 0) { return &obj->items[i]; }
    }
    return NULL;
}

static inline int json_is_string(const JsonValue *v, const char *s) {
    return v && v->type == JSON_STRING && v->len == strlen(s) && memcmp(v->str, s, v->len) == 0;
}

/*
 * Value v as written in doc (the text json_parse read), for messages that must show what a file says: 2.0 where the
 * tree holds 2, "1e-5" (a string) where a number was wanted. Into out (cap bytes), cut to end in "..." where longer;
 * white space between tokens (newlines of a pretty-printed object) becomes spaces, so a message stays one line.
 */
static inline const char *json_source(const JsonValue *v, const char *doc, char *out, size_t cap) {
    static const char CUT_MARK[] = "...";
    size_t n = v->end - v->start, keep = n < cap ? n : cap - 1;
    memcpy(out, doc + v->start, keep);
    out[keep] = '\0';
    if (keep < n && cap >= sizeof(CUT_MARK)) { memcpy(out + cap - sizeof(CUT_MARK), CUT_MARK, sizeof(CUT_MARK)); }
    for (size_t i = 0; i < keep; i++) {
        if (out[i] == '\n' || out[i] == '\r' || out[i] == '\t') { out[i] = ' '; }
    }
    return out;
}

#endif // LLMC_JSON_H
