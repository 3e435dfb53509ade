/*
 * eval_data.h: multiple-choice evaluation files (llm.c's HellaSwag format) and their completion-style score.
 *
 * File: a header of 256 int32 (magic 20240522, version, number of examples E, the byte size of the longest example,
 * the rest 0), then E examples. Version 1 (llm.c's, any vocabulary up to 65,536) stores every field of an example as
 * uint16; version 2 (ours, for larger vocabularies such as Llama 3's) stores them as uint32. An example is the
 * stream: delimiter (all bits set), its own size in bytes (delimiter included), its index (0, 1, ... in file order),
 * the label (the correct completion), the number of completions C, the context's length and tokens, then for each
 * of the C completions its length and tokens. Every length is at least 1.
 *
 * Score (completion style, as llm.c): the model reads context + completion; the losses of a completion's tokens
 * (each the cross-entropy of predicting that token) sum to S_c, and their mean is S_c / len_c. The example counts
 * for acc when argmin_c S_c is the label and for acc_norm when argmin_c S_c / len_c is; ties go to the first.
 *
 * The reader streams (one example in memory, at most the longest example's size) and checks every field; a
 * malformed file stops with one line naming the file, the example and what is wrong.
 */
#ifndef LLMC_EVAL_DATA_H
#define LLMC_EVAL_DATA_H

#include <stdint.h>

#include "dataloader.h" // the header is as wide as a shard's, and the widths go by the same vocabulary bound
#include "utils.h"

#define EVAL_MAGIC 20240522
#define EVAL_VERSION_U16 1
#define EVAL_VERSION_U32 2
#define EVAL_MAX_COMPLETIONS 16 // HellaSwag has 4; a bound so an example's fields fit a fixed struct
#define EVAL_EXAMPLE_FIELDS 6 // delimiter, size, index, label, completions, context length

typedef struct {
    int index, label, num_completions;
    int context_len;
    int *context;
    int completion_len[EVAL_MAX_COMPLETIONS];
    int *completion[EVAL_MAX_COMPLETIONS];
} EvalExample;

// Token i of the example's context followed by its completion c.
static inline int eval_example_token(const EvalExample *ex, int c, int i) {
    return i < ex->context_len ? ex->context[i] : ex->completion[c][i - ex->context_len];
}

// The version (field width) an eval file of a vocabulary of this size is written in.
static inline int eval_version_for_vocab(int vocab_size) {
    return vocab_size > SHARD_U16_MAX_VOCAB ? EVAL_VERSION_U32 : EVAL_VERSION_U16;
}

static inline int eval_field_bytes(int version) {
    return version == EVAL_VERSION_U32 ? (int)sizeof(uint32_t) : (int)sizeof(uint16_t);
}

static inline uint32_t eval_field_max(int version) { return version == EVAL_VERSION_U32 ? UINT32_MAX : UINT16_MAX; }

// The fields of one example in order (delimiter and size included); returns their count. out: room for all of them.
static inline size_t eval_example_fields(const EvalExample *ex, int version, uint32_t *out) {
    size_t n = 0;
    out[n++] = eval_field_max(version);
    out[n++] = 0; // the size, set below
    out[n++] = (uint32_t)ex->index;
    out[n++] = (uint32_t)ex->label;
    out[n++] = (uint32_t)ex->num_completions;
    out[n++] = (uint32_t)ex->context_len;
    for (int i = 0; i < ex->context_len; i++) { out[n++] = (uint32_t)ex->context[i]; }
    for (int c = 0; c < ex->num_completions; c++) {
        out[n++] = (uint32_t)ex->completion_len[c];
        for (int i = 0; i < ex->completion_len[c]; i++) { out[n++] = (uint32_t)ex->completion[c][i]; }
    }
    out[1] = (uint32_t)(n * (size_t)eval_field_bytes(version));
    return n;
}

static inline size_t eval_example_num_fields(const EvalExample *ex) {
    size_t n = EVAL_EXAMPLE_FIELDS + (size_t)ex->context_len;
    for (int c = 0; c < ex->num_completions; c++) { n += 1 + (size_t)ex->completion_len[c]; }
    return n;
}

// Writes examples[0..n) at path in the given version, atomically. Each example's index is its position; a field too
// large for the version (a size over 65,535 bytes in version 1, say) is an error naming the example.
static inline void eval_data_write(const char *path, int version, const EvalExample *examples, int n) {
    if (n <= 0) { fail("cannot write eval file '%s' with %d examples: it needs at least 1", path, n); }
    int fb = eval_field_bytes(version);
    size_t longest = 0, cap = 0;
    for (int e = 0; e < n; e++) {
        size_t f = eval_example_num_fields(&examples[e]);
        if (f > cap) { cap = f; }
    }
    longest = cap * (size_t)fb;
    uint32_t *fields = (uint32_t *)malloc_check(cap * sizeof(uint32_t), "an eval example");
    void *packed = malloc_check(longest, "an eval example");
    if (longest > INT32_MAX) { fail("eval file '%s': an example of %zu bytes is too large", path, longest); }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = EVAL_MAGIC;
    header[1] = version;
    header[2] = n;
    header[3] = (int32_t)longest;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), SHARD_HEADER_INTS);
    for (int e = 0; e < n; e++) {
        const EvalExample *ex = &examples[e];
        if (ex->index != e) { fail("eval file '%s': example %d has index %d; indices run 0, 1, ...", path, e, ex->index); }
        if (ex->num_completions < 1 || ex->num_completions > EVAL_MAX_COMPLETIONS || ex->label < 0 ||
            ex->label >= ex->num_completions) {
            fail("eval file '%s': example %d has label %d of %d completions (1 to %d)", path, e, ex->label,
                 ex->num_completions, EVAL_MAX_COMPLETIONS);
        }
        size_t nf = eval_example_fields(ex, version, fields);
        for (size_t i = 0; i < nf; i++) {
            if (i > 0 && (fields[i] > eval_field_max(version) || fields[i] > (uint32_t)INT32_MAX)) { // 0: delimiter
                fail("eval file '%s': example %d field %zu (%u) does not fit version %d's %d-byte fields", path, e, i,
                     fields[i], version, fb);
            }
            if (fb == (int)sizeof(uint16_t)) {
                ((uint16_t *)packed)[i] = (uint16_t)fields[i];
            } else {
                ((uint32_t *)packed)[i] = fields[i];
            }
        }
        atomic_write(&af, packed, (size_t)fb, nf);
    }
    atomic_commit(&af);
    free(fields);
    free(packed);
}

typedef struct {
    const char *path;
    FILE *f;
    int version, field_bytes;
    int num_examples, next;  // examples in the file; the one eval_data_next reads next
    size_t longest_bytes;
    unsigned char *raw;      // one example as stored
    int *fields;             // the same, widened
    int vocab_size;
} EvalData;

// Opens path and checks its header; tokens are checked below vocab_size as examples are read.
static inline void eval_data_open(EvalData *d, const char *path, int vocab_size) {
    memset(d, 0, sizeof(*d));
    d->path = path;
    d->vocab_size = vocab_size;
    d->f = fopen_check(path, "rb");
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, d->f) != SHARD_HEADER_INTS) {
        fail("eval file '%s' is shorter than its %lld-byte header; regenerate it with ./tokenize hellaswag", path,
             SHARD_HEADER_BYTES);
    }
    if (header[0] != EVAL_MAGIC || (header[1] != EVAL_VERSION_U16 && header[1] != EVAL_VERSION_U32)) {
        fail("eval file '%s' has magic %d version %d, not an eval file (magic %d, version %d or %d); regenerate it "
             "with ./tokenize hellaswag",
             path, header[0], header[1], EVAL_MAGIC, EVAL_VERSION_U16, EVAL_VERSION_U32);
    }
    d->version = header[1];
    d->field_bytes = eval_field_bytes(d->version);
    if (d->version == EVAL_VERSION_U16 && vocab_size > SHARD_U16_MAX_VOCAB) {
        fail("eval file '%s' has 16-bit tokens but the model's vocabulary is %d: it was made with another tokenizer; "
             "regenerate it with ./tokenize hellaswag and the model's tokenizer",
             path, vocab_size);
    }
    int min_bytes = (EVAL_EXAMPLE_FIELDS + 2) * d->field_bytes; // a context token, a completion's length and token
    if (header[2] < 1 || header[3] < min_bytes) {
        fail("eval file '%s' header says %d examples, the longest %d bytes (need >= 1 example of >= %d bytes); "
             "regenerate it with ./tokenize hellaswag",
             path, header[2], header[3], min_bytes);
    }
    d->num_examples = header[2];
    d->longest_bytes = (size_t)header[3];
    d->raw = (unsigned char *)malloc_check(d->longest_bytes, "an eval example");
    d->fields = (int *)malloc_check(d->longest_bytes / (size_t)d->field_bytes * sizeof(int), "an eval example");
}

#define EVAL_BAD(d, what, ...)                                                                                       \
    fail("eval file '%s' example %d: " what "; regenerate it with ./tokenize hellaswag", (d)->path, (d)->next,        \
         __VA_ARGS__)

// Reads the next example into ex (its arrays point into d, valid until the next call); returns 0 after the last, when
// the file must end too.
static inline int eval_data_next(EvalData *d, EvalExample *ex) {
    if (d->next == d->num_examples) {
        if (fgetc(d->f) != EOF) {
            fail("eval file '%s' has bytes after its %d examples; regenerate it with ./tokenize hellaswag", d->path,
                 d->num_examples);
        }
        return 0;
    }
    int fb = d->field_bytes;
    size_t head = 2 * (size_t)fb;
    if (fread(d->raw, 1, head, d->f) != head) { EVAL_BAD(d, "the file ends before it (of %d)", d->num_examples); }
    uint32_t delim = fb == 2 ? ((uint16_t *)d->raw)[0] : ((uint32_t *)d->raw)[0];
    uint32_t size = fb == 2 ? ((uint16_t *)d->raw)[1] : ((uint32_t *)d->raw)[1];
    if (delim != eval_field_max(d->version)) { EVAL_BAD(d, "starts with %u, not the delimiter %u", delim, eval_field_max(d->version)); }
    if (size % (uint32_t)fb != 0 || size < (uint32_t)(EVAL_EXAMPLE_FIELDS + 2) * (uint32_t)fb ||
        size > d->longest_bytes) {
        EVAL_BAD(d, "size %u bytes is not a multiple of %d in [%d, %zu] (the header's longest)", size, fb,
                 (EVAL_EXAMPLE_FIELDS + 2) * fb, d->longest_bytes);
    }
    if (fread(d->raw + head, 1, size - head, d->f) != size - head) {
        EVAL_BAD(d, "the file ends inside it (size %u bytes)", size);
    }
    size_t n = size / (size_t)fb;
    for (size_t i = 1; i < n; i++) { // 0: the delimiter, checked above
        uint32_t v = fb == 2 ? ((uint16_t *)d->raw)[i] : ((uint32_t *)d->raw)[i];
        if (v > (uint32_t)INT32_MAX) { EVAL_BAD(d, "field %zu is %u, larger than any length or token", i, v); }
        d->fields[i] = (int)v;
    }
    const int *f = d->fields;
    ex->index = f[2];
    ex->label = f[3];
    ex->num_completions = f[4];
    if (ex->index != d->next) { EVAL_BAD(d, "has index %d (indices run 0, 1, ... in file order)", ex->index); }
    if (ex->num_completions < 1 || ex->num_completions > EVAL_MAX_COMPLETIONS) {
        EVAL_BAD(d, "has %d completions (1 to %d)", ex->num_completions, EVAL_MAX_COMPLETIONS);
    }
    if (ex->label >= ex->num_completions) {
        EVAL_BAD(d, "has label %d of %d completions", ex->label, ex->num_completions);
    }
    size_t pos = EVAL_EXAMPLE_FIELDS - 1; // the context's length
    for (int part = -1; part < ex->num_completions; part++) { // -1: the context
        char part_name[32];
        snprintf(part_name, sizeof(part_name), part < 0 ? "the context" : "completion %d", part);
        if (pos >= n) { EVAL_BAD(d, "ends before the length of %s", part_name); }
        int len = f[pos++];
        if (len < 1 || (size_t)len > n - pos) {
            EVAL_BAD(d, "%s has length %d; 1 to the %zu fields left in the example", part_name, len, n - pos);
        }
        for (int i = 0; i < len; i++) {
            if (f[pos + (size_t)i] >= d->vocab_size) {
                EVAL_BAD(d, "token %d of %s is %d, not below the vocabulary size %d", i, part_name, f[pos + (size_t)i],
                         d->vocab_size);
            }
        }
        if (part < 0) {
            ex->context_len = len;
            ex->context = d->fields + pos;
        } else {
            ex->completion_len[part] = len;
            ex->completion[part] = d->fields + pos;
        }
        pos += (size_t)len;
    }
    if (pos != n) { EVAL_BAD(d, "size %u bytes holds %zu fields after its last completion", size, n - pos); }
    d->next++;
    return 1;
}

static inline void eval_data_close(EvalData *d) {
    if (d->f) { fclose(d->f); }
    free(d->raw);
    free(d->fields);
    memset(d, 0, sizeof(*d));
}

// The completion-style verdict of one example from the sums of its completions' token losses (sums[c]: completion
// c's, of completion_len[c] tokens): sets *correct (lowest sum is the label) and *correct_norm (lowest mean is the
// label). Sums rather than per-token losses: a model returns one number per completion (llmc/eval.h).
static inline void eval_score(const EvalExample *ex, const double *sums, int *correct, int *correct_norm) {
    int best = -1, best_norm = -1;
    double best_sum = 0.0, best_mean = 0.0;
    for (int c = 0; c < ex->num_completions; c++) {
        double mean = sums[c] / ex->completion_len[c];
        if (best < 0 || sums[c] < best_sum) {
            best = c;
            best_sum = sums[c];
        }
        if (best_norm < 0 || mean < best_mean) {
            best_norm = c;
            best_mean = mean;
        }
    }
    *correct = best == ex->label;
    *correct_norm = best_norm == ex->label;
}

#endif // LLMC_EVAL_DATA_H
