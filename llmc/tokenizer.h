/*
 * tokenizer.h: GPT-2's vocabulary and decoding (token ids -> UTF-8 bytes). Plain C, no dependencies.
 *
 * GPT-2 stores its vocabulary in encoder.json, an object {token string: id} of 50257 entries. A token string
 * is not the token's bytes: GPT-2 maps every byte to a printable code point (bytes_to_unicode in GPT-2's
 * encoder.py) so that tokens are readable strings. Printable Latin-1 bytes stand for themselves
 * ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the other 68 bytes, in increasing order, become U+0100,
 * U+0101, ... So 'Ġ' (U+0120) is the space byte 0x20. Decoding parses the JSON, undoes that mapping, and
 * keeps each id's bytes; decode(ids) is the concatenation of the tokens' bytes.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "utils.h"

#define TOKENIZER_MAX_TOKEN_BYTES 256 // GPT-2's longest token is 128 bytes
#define TOKENIZER_NUM_BYTE_CODES 324  // code points used by the byte mapping: 0..U+0143

typedef struct {
    int vocab_size;        // number of ids (50257 for GPT-2)
    unsigned char *bytes;  // every token's bytes, back to back
    size_t *offset;        // token id's bytes start at bytes + offset[id] ...
    int *len;              // ... and are len[id] long
} Tokenizer;

// Bytes that GPT-2 shows as themselves: printable ASCII and printable Latin-1 (soft hyphen excluded).
static inline int gpt2_byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// GPT-2's bytes_to_unicode: the code point standing for byte b.
static inline int gpt2_byte_to_code(int b) {
    if (gpt2_byte_is_printable(b)) { return b; }
    int n = 0; // the non-printable bytes below b, in order, took U+0100, U+0101, ...
    for (int c = 0; c < b; c++) { n += !gpt2_byte_is_printable(c); }
    return 256 + n;
}

// The inverse table: code point -> byte, -1 where a code point stands for no byte.
static inline void gpt2_code_to_byte_table(int table[TOKENIZER_NUM_BYTE_CODES]) {
    for (int c = 0; c < TOKENIZER_NUM_BYTE_CODES; c++) { table[c] = -1; }
    for (int b = 0; b < 256; b++) { table[gpt2_byte_to_code(b)] = b; }
}

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
 * A minimal JSON reader for encoder.json: one object whose keys are strings and values are integers.
 * Strings may hold any escape JSON allows, \uXXXX included, with surrogate pairs for code points past U+FFFF.
 */
typedef struct {
    const char *s;    // the whole file
    size_t n, pos;
    const char *path; // for error messages
} JsonReader;

LLMC_NORETURN static void json_fail(const JsonReader *r, const char *what) {
    fail("'%s' is not a valid GPT-2 encoder.json (%s at byte %zu); run `make data` or pass --vocab-dir with "
         "GPT-2's encoder.json",
         r->path, what, r->pos);
}

static inline void json_skip_space(JsonReader *r) {
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' || r->s[r->pos] == '\n' ||
                             r->s[r->pos] == '\r')) {
        r->pos++;
    }
}

static inline void json_expect(JsonReader *r, char c) {
    json_skip_space(r);
    if (r->pos >= r->n || r->s[r->pos] != c) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", c);
        json_fail(r, what);
    }
    r->pos++;
}

static inline uint32_t json_hex4(JsonReader *r) {
    if (r->pos + 4 > r->n) { json_fail(r, "truncated \\u escape"); }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->s[r->pos++];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) { json_fail(r, "bad hex digit in \\u escape"); }
        v = v * 16 + (uint32_t)d;
    }
    return v;
}

// Reads one code point of a JSON string body (after any escape) and returns it.
static inline uint32_t json_string_char(JsonReader *r) {
    unsigned char c = (unsigned char)r->s[r->pos];
    if (c < 0x20) { json_fail(r, "control character inside a string"); }
    if (c != '\\') { // a raw UTF-8 sequence: decode it so the byte mapping sees code points
        int32_t cp = utf8_decode_one((const unsigned char *)r->s, r->n, &r->pos);
        if (cp < 0) { json_fail(r, "invalid UTF-8"); }
        return (uint32_t)cp;
    }
    r->pos++;
    if (r->pos >= r->n) { json_fail(r, "truncated escape"); }
    char e = r->s[r->pos++];
    switch (e) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'u': {
        uint32_t u = json_hex4(r);
        if (u >= 0xDC00 && u <= 0xDFFF) { json_fail(r, "unpaired low surrogate"); }
        if (u < 0xD800 || u > 0xDBFF) { return u; }
        if (r->pos + 2 > r->n || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') {
            json_fail(r, "high surrogate without its low half");
        }
        r->pos += 2;
        uint32_t lo = json_hex4(r);
        if (lo < 0xDC00 || lo > 0xDFFF) { json_fail(r, "high surrogate without its low half"); }
        return 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    }
    default: json_fail(r, "unknown escape");
    }
}

// Reads a JSON string that names a GPT-2 token and writes the token's bytes; returns their number.
static inline int json_token_bytes(JsonReader *r, const int code_to_byte[TOKENIZER_NUM_BYTE_CODES],
                                   unsigned char *out) {
    json_expect(r, '"');
    int len = 0;
    while (1) {
        if (r->pos >= r->n) { json_fail(r, "unterminated string"); }
        if (r->s[r->pos] == '"') { r->pos++; return len; }
        uint32_t cp = json_string_char(r);
        if (cp >= TOKENIZER_NUM_BYTE_CODES || code_to_byte[cp] < 0) {
            json_fail(r, "a key holds a character outside GPT-2's byte alphabet");
        }
        if (len >= TOKENIZER_MAX_TOKEN_BYTES) { json_fail(r, "a token longer than 256 bytes"); }
        out[len++] = (unsigned char)code_to_byte[cp];
    }
}

static inline long json_int(JsonReader *r) {
    json_skip_space(r);
    size_t start = r->pos;
    long v = 0;
    while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9' && v < 100000000L) {
        v = v * 10 + (r->s[r->pos++] - '0');
    }
    if (r->pos == start) { json_fail(r, "expected a token id"); }
    return v;
}

#define TOKENIZER_MISSING_HINT "run `make data` or pass --vocab-dir with a folder holding GPT-2's encoder.json"

// Loads <vocab_dir>/encoder.json. Every id from 0 to (entries - 1) must appear exactly once.
static inline void tokenizer_init(Tokenizer *t, const char *vocab_dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", vocab_dir);
    size_t n;
    char *s = read_whole_file(path, &n, TOKENIZER_MISSING_HINT);
    int code_to_byte[TOKENIZER_NUM_BYTE_CODES];
    gpt2_code_to_byte_table(code_to_byte);

    // First pass counts the entries, so the tables can be sized exactly.
    JsonReader r = {s, n, 0, path};
    unsigned char tok[TOKENIZER_MAX_TOKEN_BYTES];
    int count = 0;
    size_t total_bytes = 0;
    json_expect(&r, '{');
    json_skip_space(&r);
    int empty = r.pos < n && s[r.pos] == '}';
    while (!empty) {
        total_bytes += (size_t)json_token_bytes(&r, code_to_byte, tok);
        json_expect(&r, ':');
        json_int(&r);
        count++;
        json_skip_space(&r);
        if (r.pos < n && s[r.pos] == ',') { r.pos++; continue; }
        json_expect(&r, '}');
        break;
    }
    if (count == 0) { fail("'%s' holds no tokens; %s", path, TOKENIZER_MISSING_HINT); }

    t->vocab_size = count;
    t->bytes = (unsigned char *)malloc_check(total_bytes, "token bytes");
    t->offset = (size_t *)malloc_check((size_t)count * sizeof(size_t), "token offsets");
    t->len = (int *)malloc_check((size_t)count * sizeof(int), "token lengths");
    for (int i = 0; i < count; i++) { t->len[i] = -1; }

    r.pos = 0;
    size_t used = 0;
    json_expect(&r, '{');
    for (int i = 0; i < count; i++) {
        if (i > 0) { json_expect(&r, ','); }
        int len = json_token_bytes(&r, code_to_byte, tok);
        json_expect(&r, ':');
        long id = json_int(&r);
        if (id >= count) {
            fail("'%s': token id %ld is out of range for %d entries; %s", path, id, count, TOKENIZER_MISSING_HINT);
        }
        if (t->len[id] >= 0) { fail("'%s': token id %ld appears twice; %s", path, id, TOKENIZER_MISSING_HINT); }
        memcpy(t->bytes + used, tok, (size_t)len);
        t->offset[id] = used;
        t->len[id] = len;
        used += (size_t)len;
    }
    free(s);
}

static inline const unsigned char *tokenizer_token_bytes(const Tokenizer *t, int id, int *len) {
    if (id < 0 || id >= t->vocab_size) {
        fail("token id %d is outside the vocabulary [0, %d); the model or the data does not match GPT-2's "
             "tokenizer",
             id, t->vocab_size);
    }
    *len = t->len[id];
    return t->bytes + t->offset[id];
}

// Writes the bytes of ids[0..n) into out (at most cap bytes, then a NUL if room remains) and returns the
// number of bytes the whole text has, so a caller can tell it was cut short. Tokens may end mid-character:
// the bytes are GPT-2's, not necessarily valid UTF-8 on their own.
static inline size_t tokenizer_decode(const Tokenizer *t, const int *ids, int n, char *out, size_t cap) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int len;
        const unsigned char *b = tokenizer_token_bytes(t, ids[i], &len);
        if (total < cap) {
            size_t room = cap - total;
            memcpy(out + total, b, (size_t)len < room ? (size_t)len : room);
        }
        total += (size_t)len;
    }
    if (total < cap) { out[total] = '\0'; }
    return total;
}

static inline void tokenizer_free(Tokenizer *t) {
    free(t->bytes);
    free(t->offset);
    free(t->len);
    memset(t, 0, sizeof(*t));
}

#endif // LLMC_TOKENIZER_H
