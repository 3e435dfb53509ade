/*
 * bpe.h: a byte-level BPE encoder (GPT-2's, Llama 3's), token for token what tiktoken's encode_ordinary gives.
 *
 * The tokenizer is data: GPT-2's folder (encoder.json + vocab.bpe) or a Hugging Face tokenizer.json of model BPE,
 * whose vocabulary, merges, special tokens (added_tokens) and pre_tokenizer pattern are read (llmc/tokenizer.h).
 * Only the pretokenizers GPT-2 and Llama 3 ship are accepted: ByteLevel with its built-in (GPT-2) pattern, or a
 * Sequence of a Split on a regex (Isolated) and a ByteLevel without one. Special tokens are never produced by text
 * (encode_ordinary): "<|endoftext|>" in a document is its characters.
 *
 * Encoding has two stages, as in tiktoken:
 *  1. Pretokenize: split the text into pieces with the tokenizer's pattern, GPT-2's (tiktoken's pat_str for gpt2)
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     or Llama 3's (the same as tiktoken's cl100k_base)
 *       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *     matched leftmost-first by PCRE2 in UTF + UCP mode (JIT-compiled where PCRE2 has a JIT).
 *  2. Merge each piece independently: a piece that is a token as a whole is that token. Otherwise start from
 *     its single bytes and repeatedly join the adjacent pair whose concatenation is the token of lowest rank
 *     (leftmost on ties) until no adjacent pair concatenates to a token. A token's rank is its id: GPT-2 and Llama 3
 *     (a tiktoken BPE) number their tokens in merge order, which the merge list is checked to follow.
 * tiktoken ranks a pair by the token its concatenated bytes form, not by the merge list of vocab.bpe; the two
 * can disagree where a token is reachable from another split, so the pair table here is built from every
 * split of every token (a, b) -> id(a ++ b). The merges (vocab.bpe, or tokenizer.json's model.merges) are read only to
 * check that they and the vocabulary are one (each joins two tokens into a third, in increasing id order; for
 * vocab.bpe merge i forms token 256 + i), which a truncated or mismatched download would break.
 *
 * Letters and numbers come from PCRE2's Unicode tables (Unicode 14 in PCRE2 10.42), tiktoken's from Rust's regex
 * crate; the two agree on every character assigned up to Unicode 14. \s is not left to PCRE2: its UCP \s lacks
 * U+0085 and has U+180E, unlike Rust's, so \s and \S in a pattern are rewritten to Unicode's White_Space set.
 *
 * A piece's tokens depend on the piece alone, so a cache of recent pieces skips most merging on real text.
 */
#ifndef DATA_BPE_H
#define DATA_BPE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "llmc/config.h"
#include "llmc/tokenizer.h"
#include "llmc/utils.h"

// \s spelled out as Unicode's White_Space property, which is what Rust's \s matches (stable since Unicode 6.3).
#define BPE_WHITE_SPACE "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
// GPT-2's pattern, which a ByteLevel pretokenizer with use_regex applies
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
#define BPE_MAX_PATTERN 4096

#define BPE_NUM_MERGES 50000           // GPT-2's vocab.bpe
#define BPE_CACHE_MAX_PIECE 64         // longer pieces are rare; merging them each time costs little
#define BPE_CACHE_MAX_ENTRIES (1 << 18) // the cache is emptied when it grows past this
#define BPE_NO_RANK INT32_MAX

typedef struct {
    int *data;
    size_t n, cap;
} TokenVec;

static inline void tokenvec_push(TokenVec *v, int id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->data = (int *)realloc(v->data, v->cap * sizeof(int));
        if (!v->data) { fail("out of host memory growing a token buffer to %zu ids", v->cap); }
    }
    v->data[v->n++] = id;
}

static inline void tokenvec_free(TokenVec *v) {
    free(v->data);
    memset(v, 0, sizeof(*v));
}

/* ---------------------------------------------------------------------------------------------------------
 * A hash map from byte strings to 64-bit values (open addressing, linear probing, keys copied into a pool).
 */
typedef struct {
    uint64_t hash;
    size_t key;    // offset of the key in the pool
    uint32_t len;  // key length
    uint32_t used;
    uint64_t value;
} BytesSlot;

typedef struct {
    BytesSlot *slots;
    size_t cap, count; // cap is a power of two, kept at least twice count
    unsigned char *pool;
    size_t pool_len, pool_cap;
} BytesMap;

static inline uint64_t fnv1a(const unsigned char *s, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ULL; }
    return h;
}

static inline void bytesmap_init(BytesMap *m, size_t cap) {
    m->cap = 16;
    while (m->cap < 2 * cap) { m->cap *= 2; }
    m->slots = (BytesSlot *)calloc_check(m->cap, sizeof(BytesSlot), "hash map slots");
    m->count = 0;
    m->pool_cap = 1 << 16;
    m->pool = (unsigned char *)malloc_check(m->pool_cap, "hash map keys");
    m->pool_len = 0;
}

static inline BytesSlot *bytesmap_slot(const BytesMap *m, const unsigned char *key, size_t len, uint64_t h) {
    size_t i = (size_t)h & (m->cap - 1);
    while (m->slots[i].used) {
        BytesSlot *s = &m->slots[i];
        if (s->hash == h && s->len == len && memcmp(m->pool + s->key, key, len) == 0) { return s; }
        i = (i + 1) & (m->cap - 1);
    }
    return &m->slots[i];
}

static inline int bytesmap_get(const BytesMap *m, const unsigned char *key, size_t len, uint64_t *value) {
    BytesSlot *s = bytesmap_slot(m, key, len, fnv1a(key, len));
    if (!s->used) { return 0; }
    *value = s->value;
    return 1;
}

static inline void bytesmap_grow(BytesMap *m) {
    BytesSlot *old = m->slots;
    size_t old_cap = m->cap;
    m->cap *= 2;
    m->slots = (BytesSlot *)calloc_check(m->cap, sizeof(BytesSlot), "hash map slots");
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].used) { continue; }
        size_t j = (size_t)old[i].hash & (m->cap - 1);
        while (m->slots[j].used) { j = (j + 1) & (m->cap - 1); }
        m->slots[j] = old[i];
    }
    free(old);
}

// Inserts key -> value; returns 0 (and changes nothing) if the key is already there.
static inline int bytesmap_put(BytesMap *m, const unsigned char *key, size_t len, uint64_t value) {
    if (2 * (m->count + 1) > m->cap) { bytesmap_grow(m); }
    uint64_t h = fnv1a(key, len);
    BytesSlot *s = bytesmap_slot(m, key, len, h);
    if (s->used) { return 0; }
    while (m->pool_len + len > m->pool_cap) {
        m->pool_cap *= 2;
        m->pool = (unsigned char *)realloc(m->pool, m->pool_cap);
        if (!m->pool) { fail("out of host memory growing a hash map to %zu bytes of keys", m->pool_cap); }
    }
    memcpy(m->pool + m->pool_len, key, len);
    s->hash = h;
    s->key = m->pool_len;
    s->len = (uint32_t)len;
    s->used = 1;
    s->value = value;
    m->pool_len += len;
    m->count++;
    return 1;
}

static inline void bytesmap_clear(BytesMap *m) {
    memset(m->slots, 0, m->cap * sizeof(BytesSlot));
    m->count = 0;
    m->pool_len = 0;
}

static inline void bytesmap_free(BytesMap *m) {
    free(m->slots);
    free(m->pool);
    memset(m, 0, sizeof(*m));
}

/* ---------------------------------------------------------------------------------------------------------
 * Pair table: (left id, right id) -> id of the token their bytes form together, for every such pair.
 */
typedef struct {
    uint64_t *keys; // left << 32 | right; PAIR_EMPTY marks a free slot
    int32_t *values;
    size_t cap;
} PairMap;

#define PAIR_EMPTY UINT64_MAX

static inline size_t pairmap_index(const PairMap *m, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (m->cap - 1);
}

static inline int32_t pairmap_get(const PairMap *m, int left, int right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = pairmap_index(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) { return m->values[i]; }
        if (m->keys[i] == PAIR_EMPTY) { return BPE_NO_RANK; }
    }
}

static inline void pairmap_put(PairMap *m, int left, int right, int32_t value) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = pairmap_index(m, key);
    while (m->keys[i] != PAIR_EMPTY && m->keys[i] != key) { i = (i + 1) & (m->cap - 1); }
    m->keys[i] = key;
    m->values[i] = value;
}

/* ---------------------------------------------------------------------------------------------------------
 * The encoder.
 */
typedef struct {
    Tokenizer vocab;   // id -> bytes
    BytesMap token_of; // bytes -> id, ordinary tokens only (<|endoftext|> is special, never produced by text)
    PairMap pairs;
    pcre2_code *re;
    pcre2_match_data *match;
    int jit;            // 1 when the pattern was JIT-compiled
    BytesMap cache;     // piece -> (start << 16 | count) into cache_ids
    TokenVec cache_ids;
    // scratch of the merge loop, grown to the longest piece seen
    int *part_id, *part_next, *part_prev, *part_rank;
    uint64_t *heap;     // rank << 32 | start, a min-heap: lowest rank first, leftmost among equals
    size_t scratch_cap;
} BpeEncoder;

static inline int bpe_token_id(const BpeEncoder *e, const unsigned char *s, size_t len) {
    uint64_t v;
    return bytesmap_get(&e->token_of, s, len, &v) ? (int)v : -1;
}

// Checks one merge, the token strings a and b (GPT-2's byte alphabet, code_to_byte its inverse) of `what`: both are
// tokens and so is a ++ b, whose id is returned.
static inline int bpe_check_merge(const BpeEncoder *e, const int *code_to_byte, const unsigned char *a, size_t a_len,
                                  const unsigned char *b, size_t b_len, const char *what, const char *hint) {
    unsigned char bytes[2 * TOKENIZER_MAX_TOKEN_BYTES];
    size_t len = 0, split = 0;
    for (int half = 0; half < 2; half++) {
        const unsigned char *u = half ? b : a;
        size_t n = half ? b_len : a_len;
        for (size_t pos = 0; pos < n;) {
            int32_t cp = utf8_decode_one(u, n, &pos);
            if (cp < 0 || cp >= TOKENIZER_NUM_BYTE_CODES || code_to_byte[cp] < 0 || len >= sizeof(bytes)) {
                fail("%s is not a merge of two byte-level tokens; %s", what, hint);
            }
            bytes[len++] = (unsigned char)code_to_byte[cp];
        }
        if (!half) { split = len; }
    }
    int id = split > 0 && split < len && bpe_token_id(e, bytes, split) >= 0 && bpe_token_id(e, bytes + split, len - split) >= 0
                 ? bpe_token_id(e, bytes, len) : -1;
    if (id < 0) { fail("%s does not join two tokens of the vocabulary into a third: the merges and the vocabulary are not one tokenizer; %s", what, hint); }
    return id;
}

// Checks that vocab.bpe lists the merges that built encoder.json: merge i joins two tokens into token 256 + i.
static inline void bpe_check_vocab_bpe(const BpeEncoder *e, const char *path) {
    const char *hint = "run `make data` to restore GPT-2's vocab.bpe";
    size_t n;
    char *s = read_whole_file(path, &n, "run `make data` or pass --tokenizer with GPT-2's folder");
    const unsigned char *u = (const unsigned char *)s;
    int code_to_byte[TOKENIZER_NUM_BYTE_CODES];
    gpt2_code_to_byte_table(code_to_byte);
    size_t pos = 0;
    while (pos < n && u[pos] != '\n') { pos++; } // "#version: 0.2"
    int merges = 0;
    while (++pos < n) {
        size_t end = pos;
        while (end < n && u[end] != '\n') { end++; }
        if (end == pos) { continue; } // a trailing newline
        const unsigned char *space = (const unsigned char *)memchr(u + pos, ' ', end - pos);
        char what[4096 + 64];
        snprintf(what, sizeof(what), "'%s' line %d", path, merges + 2);
        if (!space) { fail("%s is not a GPT-2 merge; %s", what, hint); }
        int id = bpe_check_merge(e, code_to_byte, u + pos, (size_t)(space - (u + pos)), space + 1, end - (size_t)(space + 1 - u), what, hint);
        if (id != 256 + merges) {
            fail("%s forms token %d, not %d of encoder.json: the two files are not one GPT-2 vocabulary; %s", what, id,
                 256 + merges, hint);
        }
        merges++;
        pos = end;
    }
    free(s);
    if (merges != BPE_NUM_MERGES) { fail("'%s' has %d merges, GPT-2's has %d; %s", path, merges, BPE_NUM_MERGES, hint); }
}

// Checks a tokenizer.json's model.merges ("a b" strings, or [a, b] pairs, highest priority first): each joins two
// tokens into a third, and in increasing id order, so that ranking a pair by the id it forms is ranking it by merge.
static inline void bpe_check_json_merges(const BpeEncoder *e, const char *path, const JsonValue *merges) {
    if (!merges || merges->type != JSON_ARRAY) { fail("'%s' has no model.merges array; %s", path, TOKENIZER_JSON_HINT); }
    int code_to_byte[TOKENIZER_NUM_BYTE_CODES];
    gpt2_code_to_byte_table(code_to_byte);
    int last = -1;
    for (size_t i = 0; i < merges->count; i++) {
        const JsonValue *m = &merges->items[i];
        char what[4096 + 64];
        snprintf(what, sizeof(what), "'%s' merge %zu", path, i);
        const char *a, *b;
        size_t a_len, b_len;
        if (m->type == JSON_STRING && memchr(m->str, ' ', m->len)) {
            a = m->str;
            b = (const char *)memchr(m->str, ' ', m->len) + 1;
            a_len = (size_t)(b - 1 - a);
            b_len = m->len - a_len - 1;
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            a = m->items[0].str, a_len = m->items[0].len, b = m->items[1].str, b_len = m->items[1].len;
        } else {
            fail("%s is neither \"a b\" nor [\"a\", \"b\"]; %s", what, TOKENIZER_JSON_HINT);
        }
        int id = bpe_check_merge(e, code_to_byte, (const unsigned char *)a, a_len, (const unsigned char *)b, b_len, what, TOKENIZER_JSON_HINT);
        if (id < last) {
            fail("%s forms token %d after a merge formed token %d: its ranks are not its token ids, which this encoder "
                 "needs (GPT-2's and Llama 3's are); %s", what, id, last, TOKENIZER_JSON_HINT);
        }
        last = id;
    }
}

static inline void bpe_build_pairs(BpeEncoder *e) {
    // at most one entry per split point of every token; size the table for all of them
    size_t splits = 0;
    for (int id = 0; id < e->vocab.vocab_size; id++) { splits += (size_t)e->vocab.len[id]; }
    e->pairs.cap = 16;
    while (e->pairs.cap < 2 * splits) { e->pairs.cap *= 2; }
    e->pairs.keys = (uint64_t *)malloc_check(e->pairs.cap * sizeof(uint64_t), "BPE pair table");
    e->pairs.values = (int32_t *)malloc_check(e->pairs.cap * sizeof(int32_t), "BPE pair table");
    memset(e->pairs.keys, 0xFF, e->pairs.cap * sizeof(uint64_t));
    for (int id = 0; id < e->vocab.vocab_size; id++) {
        if (id >= e->vocab.num_ordinary) { continue; }
        int len;
        const unsigned char *b = tokenizer_token_bytes(&e->vocab, id, &len);
        for (int k = 1; k < len; k++) {
            int left = bpe_token_id(e, b, (size_t)k), right = bpe_token_id(e, b + k, (size_t)(len - k));
            if (left >= 0 && right >= 0) { pairmap_put(&e->pairs, left, right, id); }
        }
    }
}

// Rewrites \s and \S of pattern (a tokenizer's regex, `what` in errors) as Unicode's White_Space set, into out.
static inline void bpe_rewrite_space(const char *pattern, const char *what, char *out, size_t cap) {
    size_t o = 0;
    int in_class = 0;
    for (const char *p = pattern; *p; p++) {
        const char *put = NULL;
        char two[3] = {p[0], 0, 0};
        if (p[0] == '\\' && p[1]) {
            p++;
            two[1] = p[0];
            if (p[0] == 's') { put = in_class ? BPE_WHITE_SPACE : "[" BPE_WHITE_SPACE "]"; }
            else if (p[0] == 'S' && !in_class) { put = "[^" BPE_WHITE_SPACE "]"; }
            else if (p[0] == 'S') { fail("%s has \\S inside a character class, which this encoder cannot rewrite; %s", what, TOKENIZER_JSON_HINT); }
        } else if (p[0] == '[' && !in_class) {
            in_class = 1;
        } else if (p[0] == ']' && in_class && !(p[-1] == '[' || (p[-1] == '^' && p[-2] == '['))) {
            in_class = 0;
        }
        if (!put) { put = two; }
        size_t n = strlen(put);
        if (o + n + 1 > cap) { fail("%s is longer than %d bytes once \\s is spelled out; %s", what, BPE_MAX_PATTERN, TOKENIZER_JSON_HINT); }
        memcpy(out + o, put, n);
        o += n;
    }
    out[o] = '\0';
}

static inline void bpe_compile_pattern(BpeEncoder *e, const char *pattern, const char *what) {
    char rewritten[BPE_MAX_PATTERN];
    bpe_rewrite_space(pattern, what, rewritten, sizeof(rewritten));
    int err;
    PCRE2_SIZE at;
    e->re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!e->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        fail("PCRE2 cannot compile %s at offset %zu: %s; install PCRE2 10.34 or newer built with Unicode support",
             what, (size_t)at, (const char *)msg);
    }
    e->jit = pcre2_jit_compile(e->re, PCRE2_JIT_COMPLETE) == 0;
    e->match = pcre2_match_data_create_from_pattern(e->re, NULL);
    if (!e->match) { fail("out of host memory creating PCRE2 match data"); }
}

static inline int bpe_json_flag(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type == JSON_BOOL && v->boolean;
}

// The pattern of a tokenizer.json's pre_tokenizer, of the two shapes GPT-2's and Llama 3's have; others are refused.
static inline const char *bpe_json_pattern(const JsonValue *doc, const char *path) {
    const JsonValue *pre = json_get(doc, "pre_tokenizer"), *norm = json_get(doc, "normalizer");
    if (norm && norm->type != JSON_NULL) {
        fail("'%s' has a normalizer: only byte-level BPE without one (GPT-2, Llama 3) is supported; %s", path, TOKENIZER_JSON_HINT);
    }
    const JsonValue *type = pre ? json_get(pre, "type") : NULL;
    if (type && json_is_string(type, "ByteLevel") && bpe_json_flag(pre, "use_regex") && !bpe_json_flag(pre, "add_prefix_space")) {
        return GPT2_PATTERN;
    }
    const JsonValue *seq = type && json_is_string(type, "Sequence") ? json_get(pre, "pretokenizers") : NULL;
    if (seq && seq->type == JSON_ARRAY && seq->count == 2) {
        const JsonValue *split = &seq->items[0], *byte_level = &seq->items[1];
        const JsonValue *pat = json_get(split, "pattern"), *regex = pat ? json_get(pat, "Regex") : NULL;
        const JsonValue *st = json_get(split, "type"), *bt = json_get(byte_level, "type"), *beh = json_get(split, "behavior");
        if (st && json_is_string(st, "Split") && beh && json_is_string(beh, "Isolated") && !bpe_json_flag(split, "invert") &&
            regex && regex->type == JSON_STRING && strlen(regex->str) == regex->len && bt &&
            json_is_string(bt, "ByteLevel") && !bpe_json_flag(byte_level, "use_regex") && !bpe_json_flag(byte_level, "add_prefix_space")) {
            return regex->str;
        }
    }
    fail("'%s': its pre_tokenizer is not ByteLevel (GPT-2) or a Sequence of an Isolated regex Split and a ByteLevel "
         "(Llama 3), the byte-level BPE forms supported; %s", path, TOKENIZER_JSON_HINT);
}

// Loads the tokenizer at path: GPT-2's folder (encoder.json and vocab.bpe) or a Hugging Face tokenizer.json.
static inline void bpe_init(BpeEncoder *e, const char *path) {
    memset(e, 0, sizeof(*e));
    JsonValue doc;
    tokenizer_open(&e->vocab, path, &doc);
    int folder = doc.type == JSON_NULL;
    if (folder && e->vocab.vocab_size != GPT2_VOCAB_SIZE) {
        fail("'%s/encoder.json' has %d tokens, GPT-2's has %d; run `make data` or pass --tokenizer with GPT-2's "
             "files",
             path, e->vocab.vocab_size, GPT2_VOCAB_SIZE);
    }
    bytesmap_init(&e->token_of, (size_t)e->vocab.num_ordinary);
    for (int id = 0; id < e->vocab.num_ordinary; id++) {
        int len;
        const unsigned char *b = tokenizer_token_bytes(&e->vocab, id, &len);
        if (!bytesmap_put(&e->token_of, b, (size_t)len, (uint64_t)id)) {
            fail("'%s': token %d has the same bytes as an earlier token; %s", path, id,
                 folder ? "run `make data` to restore GPT-2's files" : TOKENIZER_JSON_HINT);
        }
    }
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        if (bpe_token_id(e, &byte, 1) < 0) {
            fail("'%s' has no token for byte %d, which byte-level BPE needs; %s", path, b,
                 folder ? "run `make data` to restore GPT-2's files" : TOKENIZER_JSON_HINT);
        }
    }
    if (folder) {
        char merges[4096];
        snprintf(merges, sizeof(merges), "%s/vocab.bpe", path);
        bpe_check_vocab_bpe(e, merges);
        bpe_compile_pattern(e, GPT2_PATTERN, "GPT-2's pattern");
    } else {
        bpe_check_json_merges(e, path, json_get(json_get(&doc, "model"), "merges"));
        char what[4096 + 32];
        snprintf(what, sizeof(what), "the pattern of '%s'", path);
        bpe_compile_pattern(e, bpe_json_pattern(&doc, path), what);
        json_free(&doc);
    }
    bpe_build_pairs(e);
    bytesmap_init(&e->cache, 1 << 16);
}

static inline void bpe_reserve_scratch(BpeEncoder *e, size_t n) {
    if (n <= e->scratch_cap) { return; }
    size_t cap = e->scratch_cap ? e->scratch_cap : 256;
    while (cap < n) { cap *= 2; }
    free(e->part_id); free(e->part_next); free(e->part_prev); free(e->part_rank); free(e->heap);
    e->part_id = (int *)malloc_check(cap * sizeof(int), "BPE scratch");
    e->part_next = (int *)malloc_check(cap * sizeof(int), "BPE scratch");
    e->part_prev = (int *)malloc_check(cap * sizeof(int), "BPE scratch");
    e->part_rank = (int *)malloc_check(cap * sizeof(int), "BPE scratch");
    e->heap = (uint64_t *)malloc_check(3 * cap * sizeof(uint64_t), "BPE scratch"); // n pushes, then 2 per merge
    e->scratch_cap = cap;
}

static inline void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    while (2 * i + 1 < *n) {
        size_t c = 2 * i + 1;
        if (c + 1 < *n && h[c + 1] < h[c]) { c++; }
        if (h[c] >= last) { break; }
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

// Rank of joining part i with the part after it (BPE_NO_RANK at the end or when no token joins them).
static inline int bpe_pair_rank(const BpeEncoder *e, int i) {
    int j = e->part_next[i];
    return j < 0 ? BPE_NO_RANK : pairmap_get(&e->pairs, e->part_id[i], e->part_id[j]);
}

static inline void bpe_push_pair(BpeEncoder *e, size_t *heap_n, int i) {
    e->part_rank[i] = bpe_pair_rank(e, i);
    if (e->part_rank[i] != BPE_NO_RANK) { heap_push(e->heap, heap_n, (uint64_t)e->part_rank[i] << 32 | (uint32_t)i); }
}

// Merges one piece (not a whole token, at least 2 bytes) and appends its ids. Parts are a linked list indexed
// by their first byte; a heap entry is stale once its part is gone or ranks differently, and is skipped.
static inline void bpe_merge_piece(BpeEncoder *e, const unsigned char *p, size_t n, TokenVec *out) {
    bpe_reserve_scratch(e, n);
    for (size_t i = 0; i < n; i++) {
        e->part_id[i] = bpe_token_id(e, p + i, 1);
        e->part_next[i] = i + 1 < n ? (int)i + 1 : -1;
        e->part_prev[i] = (int)i - 1;
    }
    size_t heap_n = 0;
    for (size_t i = 0; i < n; i++) { bpe_push_pair(e, &heap_n, (int)i); }
    while (heap_n > 0) {
        uint64_t top = heap_pop(e->heap, &heap_n);
        int rank = (int)(top >> 32), i = (int)(uint32_t)top;
        if (e->part_id[i] < 0 || e->part_rank[i] != rank) { continue; } // stale
        int j = e->part_next[i];
        e->part_id[i] = rank; // a token's rank is its id
        e->part_id[j] = -1;
        e->part_next[i] = e->part_next[j];
        if (e->part_next[j] >= 0) { e->part_prev[e->part_next[j]] = i; }
        bpe_push_pair(e, &heap_n, i);
        if (e->part_prev[i] >= 0) { bpe_push_pair(e, &heap_n, e->part_prev[i]); }
    }
    for (int i = 0; i >= 0; i = e->part_next[i]) { tokenvec_push(out, e->part_id[i]); }
}

static inline void bpe_encode_piece(BpeEncoder *e, const unsigned char *p, size_t n, TokenVec *out) {
    int whole = bpe_token_id(e, p, n);
    if (whole >= 0) { tokenvec_push(out, whole); return; }
    if (n > BPE_CACHE_MAX_PIECE) { bpe_merge_piece(e, p, n, out); return; }
    uint64_t v;
    if (!bytesmap_get(&e->cache, p, n, &v)) {
        if (e->cache.count >= BPE_CACHE_MAX_ENTRIES) {
            bytesmap_clear(&e->cache);
            e->cache_ids.n = 0;
        }
        size_t start = e->cache_ids.n;
        bpe_merge_piece(e, p, n, &e->cache_ids);
        v = (uint64_t)start << 16 | (uint64_t)(e->cache_ids.n - start);
        bytesmap_put(&e->cache, p, n, v);
    }
    size_t start = (size_t)(v >> 16), count = (size_t)(v & 0xFFFF);
    for (size_t k = 0; k < count; k++) { tokenvec_push(out, e->cache_ids.data[start + k]); }
}

// Byte offset of the first invalid UTF-8 sequence in s, or n when s is valid UTF-8.
static inline size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t pos = 0;
    while (pos < n) {
        if (utf8_decode_one(s, n, &pos) < 0) { return pos; }
    }
    return n;
}

// Appends the ids of text (len bytes of UTF-8; source names it in errors) to out, as tiktoken's
// encode_ordinary would: <|endoftext|> in the text is plain text, not the special token.
static inline void bpe_encode(BpeEncoder *e, const unsigned char *text, size_t len, const char *source,
                              TokenVec *out) {
    size_t bad = utf8_invalid_at(text, len);
    if (bad < len) {
        fail("%s is not valid UTF-8 (byte %zu is 0x%02X); convert it to UTF-8 first (e.g. iconv -f latin1 -t utf-8)",
             source, bad, text[bad]);
    }
    size_t pos = 0;
    while (pos < len) {
        // the text was checked above, so PCRE2 need not check it again at every match
        int rc = e->jit ? pcre2_jit_match(e->re, text, len, pos, PCRE2_NO_UTF_CHECK, e->match, NULL)
                        : pcre2_match(e->re, text, len, pos, PCRE2_NO_UTF_CHECK, e->match, NULL);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            fail("pretokenizing %s failed at byte %zu: %s", source, pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        if (ov[0] != pos || ov[1] <= ov[0]) {
            fail("pretokenizing %s: the pattern skipped text at byte %zu; this PCRE2 build lacks Unicode "
                 "property support",
                 source, pos);
        }
        bpe_encode_piece(e, text + ov[0], ov[1] - ov[0], out);
        pos = ov[1];
    }
}

static inline void bpe_free(BpeEncoder *e) {
    tokenizer_free(&e->vocab);
    bytesmap_free(&e->token_of);
    bytesmap_free(&e->cache);
    free(e->pairs.keys);
    free(e->pairs.values);
    pcre2_match_data_free(e->match);
    pcre2_code_free(e->re);
    tokenvec_free(&e->cache_ids);
    free(e->part_id); free(e->part_next); free(e->part_prev); free(e->part_rank); free(e->heap);
    memset(e, 0, sizeof(*e));
}

#endif // DATA_BPE_H
