/*
 * tokenizer.h: GPT-2's vocabulary and decoding (token ids -> UTF-8 bytes). Plain C, no dependencies but json.h.
 *
 * GPT-2 stores its vocabulary in encoder.json, an object {token string: id} of 50257 entries. A token string
 * is not the token's bytes: GPT-2 maps every byte to a printable code point (bytes_to_unicode in GPT-2's
 * encoder.py) so that tokens are readable strings. Printable Latin-1 bytes stand for themselves
 * ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the other 68 bytes, in increasing order, become U+0100,
 * U+0101, ... So 'Ġ' (U+0120) is the space byte 0x20. Decoding parses the JSON (json.h), undoes that mapping,
 * and keeps each id's bytes; decode(ids) is the concatenation of the tokens' bytes.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "json.h"
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

#define TOKENIZER_MISSING_HINT "run `make data` or pass --vocab-dir with a folder holding GPT-2's encoder.json"

// Fails naming encoder.json and what is wrong with it.
LLMC_NORETURN LLMC_PRINTF(2, 3) static void tokenizer_bad_file(const char *path, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fail("'%s' is not a valid GPT-2 encoder.json (%s); %s", path, what, TOKENIZER_MISSING_HINT);
}

// The bytes of token `id`, whose key in encoder.json is the member m: each code point of the key stands for a byte.
static inline int tokenizer_key_bytes(const char *path, const JsonValue *m, long long id,
                                      const int code_to_byte[TOKENIZER_NUM_BYTE_CODES], unsigned char *out) {
    int len = 0;
    for (size_t pos = 0; pos < m->key_len;) {
        int32_t cp = utf8_decode_one((const unsigned char *)m->key, m->key_len, &pos); // valid: json_parse checked
        if (cp < 0 || cp >= TOKENIZER_NUM_BYTE_CODES || code_to_byte[cp] < 0) {
            tokenizer_bad_file(path, "the key of id %lld holds a character outside GPT-2's byte alphabet", id);
        }
        if (len >= TOKENIZER_MAX_TOKEN_BYTES) { tokenizer_bad_file(path, "token %lld is longer than 256 bytes", id); }
        out[len++] = (unsigned char)code_to_byte[cp];
    }
    return len;
}

// Loads <vocab_dir>/encoder.json, an object {token string: id}. Every id from 0 to (entries - 1) must appear exactly
// once.
static inline void tokenizer_init(Tokenizer *t, const char *vocab_dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", vocab_dir);
    size_t n;
    char *s = read_whole_file(path, &n, TOKENIZER_MISSING_HINT);
    JsonValue doc;
    JsonError err;
    if (!json_parse(s, n, &doc, &err)) { tokenizer_bad_file(path, "%s at byte %zu", err.what, err.pos); }
    free(s);
    if (doc.type != JSON_OBJECT) { tokenizer_bad_file(path, "it holds %s, not an object", json_type_name(doc.type)); }
    if (doc.count == 0) { fail("'%s' holds no tokens; %s", path, TOKENIZER_MISSING_HINT); }
    if (doc.count > INT_MAX) { tokenizer_bad_file(path, "%zu entries", doc.count); }
    int count = (int)doc.count;
    size_t key_bytes = 0; // a token has at most as many bytes as its key (one per code point)
    for (int i = 0; i < count; i++) { key_bytes += doc.items[i].key_len; }

    t->vocab_size = count;
    t->bytes = (unsigned char *)malloc_check(key_bytes, "token bytes");
    t->offset = (size_t *)malloc_check((size_t)count * sizeof(size_t), "token offsets");
    t->len = (int *)malloc_check((size_t)count * sizeof(int), "token lengths");
    for (int i = 0; i < count; i++) { t->len[i] = -1; }
    int code_to_byte[TOKENIZER_NUM_BYTE_CODES];
    gpt2_code_to_byte_table(code_to_byte);
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        const JsonValue *m = &doc.items[i];
        if (m->type != JSON_NUMBER || !m->is_int || m->integer < 0 || m->integer >= count) {
            fail("'%s': entry %d is not a token id in [0, %d), the number of entries; %s", path, i, count,
                 TOKENIZER_MISSING_HINT);
        }
        long long id = m->integer;
        if (t->len[id] >= 0) { fail("'%s': token id %lld appears twice; %s", path, id, TOKENIZER_MISSING_HINT); }
        int len = tokenizer_key_bytes(path, m, id, code_to_byte, t->bytes + used);
        t->offset[id] = used;
        t->len[id] = len;
        used += (size_t)len;
    }
    json_free(&doc);
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
