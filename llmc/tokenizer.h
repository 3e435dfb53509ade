/*
 * tokenizer.h: GPT-2's vocabulary and decoding (token ids -> UTF-8 bytes). Plain C, no dependencies but json.h.
 *
 * GPT-2 stores its vocabulary in encoder.json, an object {token string: id} of 50257 entries. A token string
 * is not the token's bytes: GPT-2 maps every byte to a printable code point (bytes_to_unicode in GPT-2's
 * encoder.py) so that tokens are readable strings. Printable Latin-1 bytes stand for themselves
 * ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the other 68 bytes, in increasing order, become U+0100,
 * U+0101, ... So 'Ġ' (U+0120) is the space byte 0x20. Decoding parses the JSON (json.h), undoes that mapping,
 * and keeps each id's bytes; decode(ids) is the concatenation of the tokens' bytes.
 *
 * A Hugging Face tokenizer.json of byte-level BPE (Llama 3's, or GPT-2's in that form) holds the same kind of object
 * as model.vocab, and its special tokens in added_tokens, whose text is their bytes; tokenizer_open reads either
 * form (data/bpe.h reads the rest of a tokenizer.json to encode).
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
    int vocab_size;        // number of ids (50257 for GPT-2, 128256 for Llama 3)
    int num_ordinary;      // ids [0, num_ordinary) are ordinary tokens, the rest special ones (<|endoftext|>)
    size_t bytes_len;
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

#define TOKENIZER_MISSING_HINT "run `make data`, or give the tokenizer option a folder holding GPT-2's encoder.json"

// Fails naming encoder.json and what is wrong with it.
LLMC_NORETURN LLMC_PRINTF(2, 3) static void tokenizer_bad_file(const char *path, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fail("'%s' is not a valid vocabulary (%s); %s", path, what, TOKENIZER_MISSING_HINT);
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

// Reads a vocabulary object {token string: id} (encoder.json, or a tokenizer.json's model.vocab) of the file at path.
// Every id from 0 to (entries - 1) must appear exactly once; all of them are ordinary tokens.
static inline void tokenizer_from_vocab(Tokenizer *t, const char *path, const JsonValue *vocab) {
    if (vocab->type != JSON_OBJECT) { tokenizer_bad_file(path, "the vocabulary is %s, not an object", json_type_name(vocab->type)); }
    if (vocab->count == 0) { fail("'%s' holds no tokens; %s", path, TOKENIZER_MISSING_HINT); }
    if (vocab->count > INT_MAX) { tokenizer_bad_file(path, "%zu entries", vocab->count); }
    int count = (int)vocab->count;
    size_t key_bytes = 0; // a token has at most as many bytes as its key (one per code point)
    for (int i = 0; i < count; i++) { key_bytes += vocab->items[i].key_len; }

    t->vocab_size = t->num_ordinary = count;
    t->bytes = (unsigned char *)malloc_check(key_bytes, "token bytes");
    t->bytes_len = key_bytes;
    t->offset = (size_t *)malloc_check((size_t)count * sizeof(size_t), "token offsets");
    t->len = (int *)malloc_check((size_t)count * sizeof(int), "token lengths");
    for (int i = 0; i < count; i++) { t->len[i] = -1; }
    int code_to_byte[TOKENIZER_NUM_BYTE_CODES];
    gpt2_code_to_byte_table(code_to_byte);
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        const JsonValue *m = &vocab->items[i];
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
}

// Appends a tokenizer.json's added_tokens (special tokens, their text as it is) after the ordinary ones: ids
// vocab_size, vocab_size + 1, ... in that order, which is how GPT-2's and Llama 3's files number them.
static inline void tokenizer_add_special(Tokenizer *t, const char *path, const JsonValue *added) {
    if (added->type != JSON_ARRAY) { tokenizer_bad_file(path, "added_tokens is %s, not an array", json_type_name(added->type)); }
    int count = t->vocab_size + (int)added->count;
    size_t extra = 0;
    for (size_t i = 0; i < added->count; i++) {
        const JsonValue *c = json_get(&added->items[i], "content"), *id = json_get(&added->items[i], "id");
        if (!c || c->type != JSON_STRING || !id || id->type != JSON_NUMBER || !id->is_int ||
            id->integer != t->vocab_size + (long long)i || c->len == 0 || c->len > TOKENIZER_MAX_TOKEN_BYTES) {
            tokenizer_bad_file(path, "added token %zu is not {\"id\": %lld, \"content\": a string of 1 to %d bytes}: "
                               "special tokens must follow the vocabulary's ids in order", i,
                               t->vocab_size + (long long)i, TOKENIZER_MAX_TOKEN_BYTES);
        }
        extra += c->len;
    }
    t->bytes = (unsigned char *)realloc_check(t->bytes, t->bytes_len + extra, "token bytes");
    t->offset = (size_t *)realloc_check(t->offset, (size_t)count * sizeof(size_t), "token offsets");
    t->len = (int *)realloc_check(t->len, (size_t)count * sizeof(int), "token lengths");
    for (size_t i = 0; i < added->count; i++) {
        const JsonValue *c = json_get(&added->items[i], "content");
        memcpy(t->bytes + t->bytes_len, c->str, c->len);
        t->offset[t->vocab_size] = t->bytes_len;
        t->len[t->vocab_size++] = (int)c->len;
        t->bytes_len += c->len;
    }
}

// Parses the JSON file at path into doc, failing with what is wrong and hint.
static inline void tokenizer_parse_file(const char *path, JsonValue *doc, const char *hint) {
    size_t n;
    char *s = read_whole_file(path, &n, hint);
    JsonError err;
    if (!json_parse(s, n, doc, &err)) { fail("'%s' is not valid JSON (%s at byte %zu); %s", path, err.what, err.pos, hint); }
    free(s);
    if (doc->type != JSON_OBJECT) { fail("'%s' holds %s, not an object; %s", path, json_type_name(doc->type), hint); }
}

// Loads <vocab_dir>/encoder.json, GPT-2's vocabulary: its last id is <|endoftext|>, its one special token.
static inline void tokenizer_init(Tokenizer *t, const char *vocab_dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", vocab_dir);
    JsonValue doc;
    tokenizer_parse_file(path, &doc, TOKENIZER_MISSING_HINT);
    tokenizer_from_vocab(t, path, &doc);
    t->num_ordinary = t->vocab_size - 1;
    json_free(&doc);
}

#define TOKENIZER_JSON_HINT "pass --tokenizer with a Hugging Face tokenizer.json of byte-level BPE (e.g. `make data-llama3` writes Llama 3's)"

// Loads a tokenizer: a folder is GPT-2's (encoder.json), a file a Hugging Face tokenizer.json, whose document is
// left in *doc for the encoder (JSON_NULL for a folder). Only byte-level BPE is read; another model is refused.
static inline void tokenizer_open(Tokenizer *t, const char *path, JsonValue *doc) {
    memset(doc, 0, sizeof(*doc));
    struct stat st;
    if (stat(path, &st) != 0) {
        fail("tokenizer '%s' does not exist: give a tokenizer.json or GPT-2's folder; `make data` writes GPT-2's "
             "(data/gpt2), `make data-llama3` Llama 3's (data/llama3/tokenizer.json)", path);
    }
    if (S_ISDIR(st.st_mode)) { tokenizer_init(t, path); return; }
    tokenizer_parse_file(path, doc, TOKENIZER_JSON_HINT);
    const JsonValue *model = json_get(doc, "model"), *type = model ? json_get(model, "type") : NULL;
    if (!type || !json_is_string(type, "BPE")) {
        fail("'%s' is a tokenizer of another kind (model type %s): only byte-level BPE (GPT-2, Llama 3) is "
             "supported; %s", path, type && type->type == JSON_STRING ? type->str : "missing", TOKENIZER_JSON_HINT);
    }
    const JsonValue *vocab = json_get(model, "vocab"), *added = json_get(doc, "added_tokens");
    if (!vocab) { fail("'%s' has no model.vocab; %s", path, TOKENIZER_JSON_HINT); }
    tokenizer_from_vocab(t, path, vocab);
    if (added) { tokenizer_add_special(t, path, added); }
}

// The id that starts a document, as llm.c's data scripts put it before each: the first special token, the first id
// after the ordinary ones (GPT-2's <|endoftext|> 50256, Llama 3's <|begin_of_text|> 128000); -1 where there is none.
static inline int tokenizer_document_start(const Tokenizer *t) {
    return t->num_ordinary < t->vocab_size ? t->num_ordinary : -1;
}

static inline const unsigned char *tokenizer_token_bytes(const Tokenizer *t, int id, int *len) {
    if (id < 0 || id >= t->vocab_size) {
        fail("token id %d is outside the vocabulary [0, %d); the model or the data does not match the tokenizer", id,
             t->vocab_size);
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
