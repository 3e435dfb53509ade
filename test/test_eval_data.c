/*
 * test_eval_data: the multiple-choice eval file (llmc/eval_data.h) written and read back in both versions, every kind
 * of malformed file refused with one line naming the file and example, and the completion-style score against a hand
 * computation.
 */
#include "llmc/eval_data.h"
#include "test/test_util.h"

#define TEST_DIR "/tmp/test_eval_data"
#define TEST_VOCAB 50257
#define TEST_BIG_VOCAB 128256

static int ctx0[] = {10, 11, 12}, c00[] = {20}, c01[] = {21, 22}, c02[] = {23, 24, 25};
static int ctx1[] = {100000 % TEST_VOCAB}, c10[] = {30, 31}, c11[] = {32};

static void make_examples(EvalExample ex[2]) {
    memset(ex, 0, 2 * sizeof(EvalExample));
    ex[0] = (EvalExample){.index = 0, .label = 2, .num_completions = 3, .context_len = 3, .context = ctx0};
    ex[0].completion_len[0] = 1, ex[0].completion[0] = c00;
    ex[0].completion_len[1] = 2, ex[0].completion[1] = c01;
    ex[0].completion_len[2] = 3, ex[0].completion[2] = c02;
    ex[1] = (EvalExample){.index = 1, .label = 0, .num_completions = 2, .context_len = 1, .context = ctx1};
    ex[1].completion_len[0] = 2, ex[1].completion[0] = c10;
    ex[1].completion_len[1] = 1, ex[1].completion[1] = c11;
}

static int same_example(const EvalExample *a, const EvalExample *b) {
    if (a->index != b->index || a->label != b->label || a->num_completions != b->num_completions ||
        a->context_len != b->context_len || memcmp(a->context, b->context, (size_t)a->context_len * sizeof(int))) {
        return 0;
    }
    for (int c = 0; c < a->num_completions; c++) {
        if (a->completion_len[c] != b->completion_len[c] ||
            memcmp(a->completion[c], b->completion[c], (size_t)a->completion_len[c] * sizeof(int))) {
            return 0;
        }
    }
    return 1;
}

static void test_round_trip(int version, const char *name) {
    EvalExample ex[2], got;
    make_examples(ex);
    char path[256];
    snprintf(path, sizeof(path), TEST_DIR "/v%d.bin", version);
    eval_data_write(path, version, ex, 2);
    // llm.c's layout, field by field: the first example starts right after the header
    FILE *f = fopen(path, "rb");
    fseek(f, (long)SHARD_HEADER_BYTES, SEEK_SET);
    uint32_t first[8] = {0};
    for (int i = 0; i < 8; i++) {
        uint16_t v16 = 0;
        uint32_t v32 = 0;
        if (version == EVAL_VERSION_U16) {
            if (fread(&v16, 2, 1, f) != 1) { break; }
            first[i] = v16;
        } else {
            if (fread(&v32, 4, 1, f) != 1) { break; }
            first[i] = v32;
        }
    }
    fclose(f);
    int fb = eval_field_bytes(version);
    uint32_t want[8] = {eval_field_max(version), (uint32_t)(18 * fb), 0, 2, 3, 3, 10, 11};
    char n1[96];
    snprintf(n1, sizeof(n1), "%s_layout", name);
    check(memcmp(first, want, sizeof(want)) == 0, n1, "first fields %u %u %u %u %u %u", first[0], first[1], first[2],
          first[3], first[4], first[5]);
    EvalData d;
    eval_data_open(&d, path, version == EVAL_VERSION_U16 ? TEST_VOCAB : TEST_BIG_VOCAB);
    int ok = d.num_examples == 2 && d.longest_bytes == (size_t)(18 * fb);
    for (int e = 0; e < 2; e++) { ok = ok && eval_data_next(&d, &got) && same_example(&got, &ex[e]); }
    ok = ok && !eval_data_next(&d, &got);
    eval_data_close(&d);
    char n2[96];
    snprintf(n2, sizeof(n2), "%s_round_trip", name);
    check(ok, n2, "examples read back differ from those written");
}

/* Malformed files: each case rewrites one uint16 field of a good version-1 file (by field offset from the first
 * example's start, or in the header) and expects the reader's one line. */
typedef struct {
    const char *name;
    long long at;     // byte offset in the file
    uint32_t value;   // written as uint16 (int32 in the header)
    int header;       // 1: an int32 of the header
    const char *expect;
} Corruption;

#define EX0 SHARD_HEADER_BYTES // the first example
#define FIELD(i) (EX0 + 2 * (i))
#define EX0_BYTES 36 // 18 fields: 6 + 3 context tokens + (1 + 1) + (1 + 2) + (1 + 3)
#define EX1_FIELD(i) (EX0 + EX0_BYTES + 2 * (i))

static const Corruption CORRUPTIONS[] = {
    {"bad_magic", 0, 20240520, 1, "not an eval file"},
    {"bad_version", 4, 7, 1, "not an eval file"},
    {"no_examples", 8, 0, 1, "need >= 1 example"},
    {"more_examples_than_file", 8, 3, 1, "example 2: the file ends before it"},
    {"fewer_examples_than_file", 8, 1, 1, "bytes after its 1 examples"},
    {"bad_delimiter", FIELD(0), 7, 0, "example 0: starts with 7, not the delimiter 65535"},
    {"odd_size", FIELD(1), 35, 0, "example 0: size 35 bytes is not a multiple of 2"},
    {"size_over_longest", FIELD(1), 38, 0, "example 0: size 38 bytes"},
    {"size_short_of_fields", FIELD(1), 34, 0, "example 0: completion 2 has length 3"},
    {"bad_index", FIELD(2), 5, 0, "example 0: has index 5"},
    {"label_out_of_range", FIELD(3), 3, 0, "example 0: has label 3 of 3 completions"},
    {"no_completions", FIELD(4), 0, 0, "example 0: has 0 completions"},
    {"zero_context", FIELD(5), 0, 0, "example 0: the context has length 0"},
    {"long_context", FIELD(5), 14, 0, "example 0: the context has length 14"},
    {"token_over_vocab", FIELD(7), 60000, 0, "example 0: token 1 of the context is 60000, not below the vocabulary"},
    {"completion_len_zero", FIELD(9), 0, 0, "example 0: completion 0 has length 0"},
    {"fields_left_over", EX1_FIELD(4), 1, 0, "example 1: size 24 bytes holds 2 fields after its last completion"},
};

static void read_all(void *arg) {
    EvalData d;
    EvalExample ex;
    eval_data_open(&d, (const char *)arg, TEST_VOCAB);
    while (eval_data_next(&d, &ex)) {}
    eval_data_close(&d);
}

static void test_malformed(void) {
    EvalExample ex[2];
    make_examples(ex);
    const char *path = TEST_DIR "/bad.bin";
    for (size_t k = 0; k < sizeof(CORRUPTIONS) / sizeof(CORRUPTIONS[0]); k++) {
        const Corruption *c = &CORRUPTIONS[k];
        eval_data_write(path, EVAL_VERSION_U16, ex, 2);
        FILE *f = fopen(path, "r+b");
        fseek(f, (long)c->at, SEEK_SET);
        if (c->header) {
            int32_t v = (int32_t)c->value;
            fwrite(&v, 4, 1, f);
        } else {
            uint16_t v = (uint16_t)c->value;
            fwrite(&v, 2, 1, f);
        }
        fclose(f);
        char name[96];
        snprintf(name, sizeof(name), "malformed_%s", c->name);
        expect_child_fails(read_all, (void *)path, name, c->expect);
    }
    // a file cut inside an example, and a 16-bit file for a vocabulary that needs 32 bits
    eval_data_write(path, EVAL_VERSION_U16, ex, 2);
    if (truncate(path, SHARD_HEADER_BYTES + EX0_BYTES + 10) != 0) { perror("truncate"); }
    expect_child_fails(read_all, (void *)path, "malformed_truncated", "example 1: the file ends inside it");
}

static void open_big_vocab(void *arg) {
    EvalData d;
    eval_data_open(&d, (const char *)arg, TEST_BIG_VOCAB);
}

static void write_too_wide(void *arg) {
    (void)arg;
    EvalExample ex[2];
    make_examples(ex);
    int big[] = {TEST_BIG_VOCAB - 1};
    ex[1].context = big;
    eval_data_write(TEST_DIR "/wide.bin", EVAL_VERSION_U16, ex, 2);
}

static void test_widths(void) {
    check(eval_version_for_vocab(TEST_VOCAB) == EVAL_VERSION_U16 && eval_version_for_vocab(65536) == EVAL_VERSION_U16 &&
              eval_version_for_vocab(65537) == EVAL_VERSION_U32 &&
              eval_version_for_vocab(TEST_BIG_VOCAB) == EVAL_VERSION_U32,
          "version_for_vocab", "GPT-2 must get version 1, Llama 3 version 2");
    EvalExample ex[2];
    make_examples(ex);
    eval_data_write(TEST_DIR "/v1.bin", EVAL_VERSION_U16, ex, 2);
    expect_child_fails(open_big_vocab, (void *)(TEST_DIR "/v1.bin"), "u16_file_for_big_vocab",
                       "has 16-bit tokens but the model's vocabulary is 128256");
    expect_child_fails(write_too_wide, NULL, "write_token_too_wide_for_u16", "does not fit version 1's 2-byte fields");
}

/* Hand computation: example 0 (label 2; completions of 1, 2, 3 tokens) with token losses
 *   c0: {3.0}             sum 3.0  mean 3.0
 *   c1: {1.0, 1.5}        sum 2.5  mean 1.25
 *   c2: {0.9, 0.9, 0.9}   sum 2.7  mean 0.9
 * lowest sum: c1 (wrong), lowest mean: c2 (right): acc 0, acc_norm 1. With c2's losses {0.5, 0.5, 0.5} (sum 1.5):
 * both right. A tie in sums (c0 {2.5}, c1 sum 2.5) goes to the first, c0. */
static void test_score(void) {
    EvalExample ex[2];
    make_examples(ex);
    double sums[] = {3.0, 2.5, 2.7};
    int acc = -1, acc_norm = -1;
    eval_score(&ex[0], sums, &acc, &acc_norm);
    check(acc == 0 && acc_norm == 1, "score_sum_wrong_mean_right", "acc %d acc_norm %d, want 0 1", acc, acc_norm);
    sums[2] = 1.5;
    eval_score(&ex[0], sums, &acc, &acc_norm);
    check(acc == 1 && acc_norm == 1, "score_both_right", "acc %d acc_norm %d, want 1 1", acc, acc_norm);
    ex[0].label = 0;
    sums[0] = 2.5;
    sums[2] = 2.7;
    eval_score(&ex[0], sums, &acc, &acc_norm); // sums 2.5 2.5 2.7: c0 first; means 2.5 1.25 0.9: c2
    check(acc == 1 && acc_norm == 0, "score_tie_goes_to_first", "acc %d acc_norm %d, want 1 0", acc, acc_norm);
}

int main(void) {
    if (system("rm -rf " TEST_DIR " && mkdir -p " TEST_DIR) != 0) { return 1; }
    test_round_trip(EVAL_VERSION_U16, "u16");
    test_round_trip(EVAL_VERSION_U32, "u32");
    test_malformed();
    test_widths();
    test_score();
    return test_exit();
}
