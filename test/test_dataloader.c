/*
 * test_dataloader.c: the shard format and the data loader's contract (dev/DESIGN.md, "Semantics").
 *
 * Both formats: the same tokens as GPT-2's uint16 shards and as Llama 3's uint32 ones must read the same. The
 * validation pass: for D = 1..4 data ranks, the windows the ranks evaluate (and count) are exactly one rank's.
 *
 * Shards are written to a temporary folder with tokens that name their own position (the token at global
 * position p is p), so every window the loader returns can be traced back to the window it should be.
 * Corrupt shards are fed to dataloader_init in a child process whose stderr is captured: the child must exit
 * non-zero with one line naming the file, and the file must be left as it was. A FIFO or a folder the glob matches
 * is refused the same way, without being opened.
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp under -std=c11

#include "llmc/config.h"
#include "llmc/dataloader.h"
#include "test/test_util.h"

#define T_LEN 16
#define SEED 1234
#define NUM_SHARDS 3
static const int SHARD_LEN[NUM_SHARDS] = {1000, 1537, 784}; // (len-1)/T windows: 62 + 96 + 48 = 206
// (784 = 49*T tokens hold only 48 windows: the last needs a target past the end)
#define NUM_WINDOWS 206
#define GLOBAL_WINDOWS 64 // S: 3 steps per epoch, a tail of 14 windows dropped
#define STEPS 8           // covers epochs 0, 1 and part of 2

static char g_dir[] = "/tmp/test_dataloader_XXXXXX";
static char g_glob[256];
#define PATH_CAP 1024

/* ---------------------------------------------------------------------------------------------------------
 * Helpers
 */
static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

// The good shards in `folder`, of GPT-2's format or Llama 3's: the same tokens either way.
static void write_good_shards(const char *folder, ShardFormatId format) {
    int pos = 0;
    for (int k = 0; k < NUM_SHARDS; k++) {
        uint16_t *t = (uint16_t *)malloc_check((size_t)SHARD_LEN[k] * sizeof(uint16_t), "test tokens");
        uint32_t *wide = (uint32_t *)malloc_check((size_t)SHARD_LEN[k] * sizeof(uint32_t), "test tokens");
        for (int i = 0; i < SHARD_LEN[k]; i++) { wide[i] = t[i] = (uint16_t)(pos++); }
        char path[512], name[64];
        snprintf(name, sizeof(name), "%s/d_%06d.bin", folder, k);
        path_in(path, sizeof(path), name);
        if (format == SHARD_GPT2) {
            shard_write(path, t, (size_t)SHARD_LEN[k]);
        } else {
            shard_write_llama3(path, wide, (size_t)SHARD_LEN[k]);
        }
        free(t);
        free(wide);
    }
}

// Global position of the first token of window w, computed independently of the loader.
static int window_start(int w) {
    int pos = 0;
    for (int k = 0; k < NUM_SHARDS; k++) {
        int nw = (SHARD_LEN[k] - 1) / T_LEN;
        if (w < nw) { return pos + w * T_LEN; }
        w -= nw;
        pos += SHARD_LEN[k];
    }
    return -1;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    unsigned char *buf = (unsigned char *)malloc_check(1 << 20, "file copy");
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

#define CHILD_DEADLINE_S 30.0

// Runs fn(arg) in a child (test_util.h) and returns its exit status; what it wrote to stderr is in c->err.
static int run_child(Child *c, void (*fn)(void *), void *arg) {
    child_start(c, fn, arg);
    return child_wait(c, now_s() + CHILD_DEADLINE_S);
}

typedef struct {
    const char *glob;
    int B, D;
    long long S;
} InitArgs;

static void child_init(void *p) {
    InitArgs *a = (InitArgs *)p;
    DataLoader dl;
    dataloader_init(&dl, a->glob, a->B, T_LEN, 0, a->D, a->S, SEED, 1, GPT2_VOCAB_SIZE);
}

// dataloader_init on glob must fail with a line containing `names` (the file) and `what`, leaving `file` as it was.
static void expect_rejected(const char *name, const char *glob, const char *file, const char *what, int B, int D,
                            long long S) {
    size_t before_n = 0, after_n = 0;
    unsigned char *before = file ? read_file(file, &before_n) : NULL;
    InitArgs a = {glob, B, D, S};
    Child c;
    int status = run_child(&c, child_init, &a);
    const char *err = c.err;
    unsigned char *after = file ? read_file(file, &after_n) : NULL;
    int untouched = !file || (before_n == after_n && (before_n == 0 || memcmp(before, after, before_n) == 0));
    const char *named = file ? file : glob;
    int one_line = strchr(err, '\n') == err + strlen(err) - 1;
    check(status > 0 && strstr(err, named) && strstr(err, what) && one_line && untouched, name,
          "status %d, untouched %d, stderr '%s' (wanted '%s' and '%s' on one line)", status, untouched, err, named,
          what);
    free(before);
    free(after);
}

// A file bad/name of header_ints ints of header, then n ids of id_bytes each.
static void write_raw(const char *name, const int32_t *header, int header_ints, const void *ids, size_t id_bytes,
                      int n, char *path, size_t cap) {
    char rel[128];
    snprintf(rel, sizeof(rel), "bad/%s", name);
    path_in(path, cap, rel);
    FILE *f = fopen_check(path, "wb");
    if (header_ints) { fwrite_check(header, sizeof(int32_t), (size_t)header_ints, f, path); }
    if (n) { fwrite_check(ids, id_bytes, (size_t)n, f, path); }
    fclose(f);
}

/* ---------------------------------------------------------------------------------------------------------
 * Tests
 */
// Writes ids[0..100) (id_bytes each) in `format` and checks the file byte for byte against llm.c's layout: header
// [magic, version, 100, 0...], then the ids.
static void check_round_trip(const char *name, ShardFormatId format, const void *ids, size_t id_bytes,
                             int32_t magic, int32_t version) {
    char path[512];
    path_in(path, sizeof(path), name);
    shard_write_format(path, format, ids, 100);
    size_t n;
    unsigned char *b = read_file(path, &n);
    int32_t h[3];
    memcpy(h, b, sizeof(h));
    int zeros = 1;
    for (size_t i = 12; i < (size_t)SHARD_HEADER_BYTES; i++) { zeros &= b[i] == 0; }
    ShardFormatId read_as = SHARD_NUM_FORMATS;
    check(n == 1024 + 100 * id_bytes && h[0] == magic && h[1] == version && h[2] == 100 && zeros &&
              memcmp(b + 1024, ids, 100 * id_bytes) == 0 &&
              shard_check_header(path, b, (long long)n, &read_as) == 100 && read_as == format,
          name, "size %zu, header %d %d %d, read as format %d", n, h[0], h[1], h[2], (int)read_as);
    char tmp[600], what[128];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    snprintf(what, sizeof(what), "%s_leaves_no_temp_file", name);
    check(!file_exists(tmp), what, "'%s' exists", tmp);
    free(b);
}

static void test_shard_round_trip(void) {
    uint16_t t[100];
    uint32_t w[100];
    for (int i = 0; i < 100; i++) {
        t[i] = (uint16_t)(50256 - i);
        w[i] = 128255u - (uint32_t)i * 70000u % 128256u; // ids past uint16 (Llama 3's vocabulary: 128256)
    }
    check_round_trip("shard_round_trip_gpt2", SHARD_GPT2, t, sizeof(uint16_t), 20240520, 1);
    check_round_trip("shard_round_trip_llama3", SHARD_LLAMA3, w, sizeof(uint32_t), 20240801, 7);
    // the width tokenize writes: uint16 while every id fits (GPT-2's 50257, 65536), uint32 above (Llama 3's 128256)
    check(shard_format_for_vocab(50257) == SHARD_GPT2 && shard_format_for_vocab(65536) == SHARD_GPT2 &&
              shard_format_for_vocab(65537) == SHARD_LLAMA3 && shard_format_for_vocab(128256) == SHARD_LLAMA3,
          "shard_format_for_vocab", "a vocabulary above 65536 ids must get uint32 (Llama 3) shards, others uint16");
}

static void test_rejects_corrupt_shards(void) {
    char path[PATH_CAP], glob[PATH_CAP];
    int32_t h[SHARD_HEADER_INTS] = {SHARD_GPT2_MAGIC, SHARD_GPT2_VERSION, 40};
    uint16_t tok[40];
    for (int i = 0; i < 40; i++) { tok[i] = (uint16_t)i; }
    char dir[512];
    path_in(dir, sizeof(dir), "bad");
    mkdir(dir, 0755);

    snprintf(glob, sizeof(glob), "%s/nothing_*.bin", dir);
    expect_rejected("reject_glob_matches_nothing", glob, NULL, "no shard matches", 1, 1, 1);

    write_raw("empty.bin", h, 0, tok, sizeof(uint16_t), 0, path, sizeof(path));
    expect_rejected("reject_empty_file", path, path, "is empty", 1, 1, 1);
    remove(path);

    write_raw("short.bin", h, 10, tok, sizeof(uint16_t), 0, path, sizeof(path));
    expect_rejected("reject_shorter_than_header", path, path, "shorter than the 1024-byte header", 1, 1, 1);
    remove(path);

    int32_t bad[SHARD_HEADER_INTS];
    memcpy(bad, h, sizeof(bad));
    bad[0] = 20240802;
    write_raw("magic.bin", bad, SHARD_HEADER_INTS, tok, sizeof(uint16_t), 40, path, sizeof(path));
    expect_rejected("reject_wrong_magic", path, path, "not a token shard (magic 20240802", 1, 1, 1);
    remove(path);

    memcpy(bad, h, sizeof(bad));
    bad[1] = 2;
    write_raw("version.bin", bad, SHARD_HEADER_INTS, tok, sizeof(uint16_t), 40, path, sizeof(path));
    expect_rejected("reject_wrong_version", path, path, "version 2", 1, 1, 1);
    remove(path);

    write_raw("truncated.bin", h, SHARD_HEADER_INTS, tok, sizeof(uint16_t), 39, path, sizeof(path));
    expect_rejected("reject_size_mismatch", path, path, "header says 40 tokens", 1, 1, 1);
    remove(path);

    memcpy(bad, h, sizeof(bad));
    bad[2] = 0;
    write_raw("zero.bin", bad, SHARD_HEADER_INTS, tok, sizeof(uint16_t), 0, path, sizeof(path));
    expect_rejected("reject_zero_tokens", path, path, "holds no tokens", 1, 1, 1);
    remove(path);

    tok[37] = GPT2_VOCAB_SIZE;
    write_raw("vocab.bin", h, SHARD_HEADER_INTS, tok, sizeof(uint16_t), 40, path, sizeof(path));
    expect_rejected("reject_token_outside_vocab", path, path, "token 37 is 50257", 1, 1, 1);
    // the bad shard is named even when good shards sort before it
    char good[PATH_CAP];
    snprintf(good, sizeof(good), "%s/a_good.bin", dir);
    tok[37] = 37;
    shard_write(good, tok, 40);
    snprintf(glob, sizeof(glob), "%s/*.bin", dir);
    expect_rejected("reject_names_the_bad_shard_of_many", glob, path, "token 37 is 50257", 1, 1, 1);
    remove(path);

    // a FIFO the glob matches is refused, not opened (the open would wait for a writer, forever); so is a folder
    snprintf(path, sizeof(path), "%s/fifo.bin", dir);
    if (mkfifo(path, 0644) != 0) { perror("mkfifo"); }
    expect_rejected("reject_fifo_shard", path, NULL, "is a FIFO (named pipe), not a regular file", 1, 1, 1);
    remove(path);
    snprintf(path, sizeof(path), "%s/folder.bin", dir);
    mkdir(path, 0755);
    expect_rejected("reject_folder_shard", path, NULL, "is a folder, not a regular file", 1, 1, 1);
    rmdir(path);

    // 40 tokens hold (40-1)/16 = 2 windows
    expect_rejected("reject_fewer_windows_than_a_global_batch", good, good, "fewer than one global batch", 1, 1, 3);
    expect_rejected("reject_batch_not_multiple_of_micro_batch", good, good, "not a multiple", 2, 1, 3);
    remove(good);
}

// One optimizer step of a layout: the S windows in global slot order, as the starts of their first tokens.
typedef struct {
    DataLoader dl[4];
    int D, B, A;
} Layout;

static void layout_init(Layout *l, int D, int B, int shuffle) {
    l->D = D;
    l->B = B;
    l->A = GLOBAL_WINDOWS / (B * D);
    for (int r = 0; r < D; r++) {
        dataloader_init(&l->dl[r], g_glob, B, T_LEN, r, D, GLOBAL_WINDOWS, SEED, shuffle, GPT2_VOCAB_SIZE);
    }
}

static void layout_free(Layout *l) {
    for (int r = 0; r < l->D; r++) { dataloader_free(&l->dl[r]); }
}

// Fills starts[0..S) with the first token of each window of the next step; returns 0 if any window's tokens
// are not the contiguous T+1 tokens of one shard.
static int layout_step(Layout *l, int *starts) {
    int ok = 1;
    int in[64 * T_LEN], tg[64 * T_LEN];
    for (int m = 0; m < l->A; m++) {
        for (int r = 0; r < l->D; r++) {
            dataloader_next(&l->dl[r], in, tg);
            for (int b = 0; b < l->B; b++) {
                int *x = in + b * T_LEN, *y = tg + b * T_LEN;
                for (int i = 0; i < T_LEN; i++) { ok &= x[i] == x[0] + i && y[i] == x[0] + i + 1; }
                starts[(m * l->D + r) * l->B + b] = x[0];
            }
        }
    }
    return ok;
}

static void test_layout_independence(void) {
    static const int layouts[3][2] = {{1, 8}, {2, 8}, {4, 4}}; // (D, B): A = 8, 4, 4
    static int starts[3][STEPS][GLOBAL_WINDOWS];
    int contiguous = 1;
    for (int k = 0; k < 3; k++) {
        Layout l;
        layout_init(&l, layouts[k][0], layouts[k][1], 1);
        for (int s = 0; s < STEPS; s++) { contiguous &= layout_step(&l, starts[k][s]); }
        layout_free(&l);
    }
    check(contiguous, "windows_are_contiguous_inside_a_shard", "a window's inputs/targets are not consecutive tokens");
    check(memcmp(starts[0], starts[1], sizeof(starts[0])) == 0 && memcmp(starts[0], starts[2], sizeof(starts[0])) == 0,
          "layout_independence", "(D=1,B=8,A=8), (D=2,B=8,A=4), (D=4,B=4,A=4) see different windows per step");

    // The contract itself: step s of epoch e takes windows perm_e[s*S .. (s+1)*S), 3 steps per epoch here.
    uint32_t perm[3][NUM_WINDOWS];
    for (int e = 0; e < 3; e++) { dataloader_epoch_permutation(SEED, e, NUM_WINDOWS, perm[e]); }
    int follows = 1;
    for (int s = 0; s < STEPS; s++) {
        for (int j = 0; j < GLOBAL_WINDOWS; j++) {
            follows &= starts[0][s][j] == window_start((int)perm[s / 3][(s % 3) * GLOBAL_WINDOWS + j]);
        }
    }
    check(follows, "order_follows_the_epoch_permutation", "a window differs from perm_epoch[s*S + (m*D + r)*B + b]");

    // Epoch 0 sees each window at most once and never its tail; epochs are shuffled differently.
    int seen[NUM_WINDOWS * T_LEN + 4000] = {0}, repeats = 0;
    for (int s = 0; s < 3; s++) {
        for (int j = 0; j < GLOBAL_WINDOWS; j++) { repeats += seen[starts[0][s][j]]++ > 0; }
    }
    int tail_seen = 0;
    for (int j = 3 * GLOBAL_WINDOWS; j < NUM_WINDOWS; j++) { tail_seen += seen[window_start((int)perm[0][j])] > 0; }
    check(repeats == 0 && tail_seen == 0, "epoch_drops_its_tail", "%d repeated windows, %d tail windows served",
          repeats, tail_seen);
    int is_perm = 1;
    int hits[NUM_WINDOWS] = {0};
    for (int j = 0; j < NUM_WINDOWS; j++) { is_perm &= perm[1][j] < NUM_WINDOWS && hits[perm[1][j]]++ == 0; }
    check(is_perm && memcmp(perm[0], perm[1], sizeof(perm[0])) != 0 && memcmp(starts[0][0], starts[0][3], sizeof(starts[0][0])) != 0,
          "epochs_reshuffle", "epoch 1 is not a fresh permutation of epoch 0's windows");
    uint32_t again[NUM_WINDOWS], other[NUM_WINDOWS];
    dataloader_epoch_permutation(SEED, 1, NUM_WINDOWS, again);
    dataloader_epoch_permutation(SEED + 1, 1, NUM_WINDOWS, other);
    check(memcmp(again, perm[1], sizeof(again)) == 0 && memcmp(other, perm[1], sizeof(other)) != 0,
          "shuffle_is_deterministic_per_seed", "same seed differs or another seed gives the same order");
}

static void test_state_resume(void) {
    static int want[4][GLOBAL_WINDOWS], got[4][GLOBAL_WINDOWS];
    Layout a;
    layout_init(&a, 1, 8, 1);
    int tmp[GLOBAL_WINDOWS];
    for (int s = 0; s < 3; s++) { layout_step(&a, tmp); } // exactly one epoch
    DataLoaderState st = dataloader_get_state(&a.dl[0]);
    check(st.epoch == 1 && st.next == 0, "state_after_epoch_is_next_epoch_start", "state (%lld, %lld)", st.epoch,
          st.next);
    layout_step(&a, tmp);
    st = dataloader_get_state(&a.dl[0]);
    for (int s = 0; s < 4; s++) { layout_step(&a, want[s]); }
    layout_free(&a);

    Layout b; // resumed under another layout: the data order must not care
    layout_init(&b, 2, 8, 1);
    for (int r = 0; r < 2; r++) { dataloader_set_state(&b.dl[r], st); }
    for (int s = 0; s < 4; s++) { layout_step(&b, got[s]); }
    check(st.epoch == 1 && st.next == GLOBAL_WINDOWS && memcmp(want, got, sizeof(want)) == 0, "state_resumes_identically",
          "state (%lld, %lld); resumed batches differ", st.epoch, st.next);

    dataloader_reset(&b.dl[0]);
    dataloader_reset(&b.dl[1]);
    Layout fresh;
    layout_init(&fresh, 1, 8, 1);
    int x[GLOBAL_WINDOWS], y[GLOBAL_WINDOWS];
    layout_step(&b, x);
    layout_step(&fresh, y);
    check(memcmp(x, y, sizeof(x)) == 0, "reset_returns_to_the_start", "first step after reset differs");
    layout_free(&fresh);
    layout_free(&b);
}

static void child_bad_state(void *p) {
    (void)p;
    DataLoader dl;
    dataloader_init(&dl, g_glob, 8, T_LEN, 0, 1, GLOBAL_WINDOWS, SEED, 1, GPT2_VOCAB_SIZE);
    DataLoaderState s = {0, 3 * GLOBAL_WINDOWS}; // past the last full step of this data set
    dataloader_set_state(&dl, s);
}

static void child_state_mid_step(void *p) {
    (void)p;
    DataLoader dl;
    int in[8 * T_LEN], tg[8 * T_LEN];
    dataloader_init(&dl, g_glob, 8, T_LEN, 0, 1, GLOBAL_WINDOWS, SEED, 1, GPT2_VOCAB_SIZE);
    dataloader_next(&dl, in, tg);
    dataloader_get_state(&dl);
}

static void test_state_errors(void) {
    Child c;
    int status = run_child(&c, child_bad_state, NULL);
    check(status > 0 && strstr(c.err, "cannot resume the data at epoch 0, window 192"), "reject_resume_past_the_data",
          "status %d, stderr '%s'", status, c.err);
    status = run_child(&c, child_state_mid_step, NULL);
    check(status > 0 && strstr(c.err, "middle of an optimizer step"), "reject_state_mid_step",
          "status %d, stderr '%s'", status, c.err);
}

// A shard cut short (or replaced by a shorter file) after init, while the run reads it: the read that reaches past
// its new end stops the run with a line naming it. (A mapped shard dies of SIGBUS there, silently, once the read
// is a page past the new end: hence a shard of many pages.)
#define CUT_SHARD_TOKENS 16384
#define CUT_KEEP_TOKENS 100

typedef struct {
    char glob[PATH_CAP], victim[PATH_CAP];
} TruncateArgs;

static void child_read_truncated(void *p) {
    TruncateArgs *a = (TruncateArgs *)p;
    DataLoader dl;
    int in[8 * T_LEN], tg[8 * T_LEN];
    dataloader_init(&dl, a->glob, 8, T_LEN, 0, 1, 8, SEED, 0, GPT2_VOCAB_SIZE); // in order, from the start
    off_t keep = (off_t)(SHARD_HEADER_BYTES + CUT_KEEP_TOKENS * (long long)sizeof(uint16_t));
    if (truncate(a->victim, keep) != 0) { fail("cannot truncate '%s'", a->victim); }
    for (long long w = 0; w < dataloader_num_windows(&dl); w += 8) { dataloader_next(&dl, in, tg); }
    dataloader_free(&dl);
}

static void test_truncated_while_read(void) {
    TruncateArgs a;
    char dir[PATH_CAP / 2];
    path_in(dir, sizeof(dir), "cut");
    mkdir(dir, 0755);
    snprintf(a.glob, sizeof(a.glob), "%s/c_*.bin", dir);
    snprintf(a.victim, sizeof(a.victim), "%s/c_000000.bin", dir);
    uint16_t *t = (uint16_t *)malloc_check(CUT_SHARD_TOKENS * sizeof(uint16_t), "test tokens");
    for (int i = 0; i < CUT_SHARD_TOKENS; i++) { t[i] = (uint16_t)i; }
    shard_write(a.victim, t, CUT_SHARD_TOKENS);
    free(t);
    Child c;
    int status = run_child(&c, child_read_truncated, &a);
    int one_line = c.err[0] && strchr(c.err, '\n') == c.err + strlen(c.err) - 1;
    check(status == 1 && strstr(c.err, a.victim) && strstr(c.err, "truncated or replaced while the run read it") &&
              one_line,
          "shard_truncated_while_read_fails_naming_it", "status %d (1 wanted, not a signal), stderr '%s'", status,
          c.err);
}

// Llama 3's shards: the good shards' tokens as uint32 read exactly as GPT-2's; a glob of both formats, an id outside
// the vocabulary (past uint16, past int32) and a file of the wrong length for its uint32 ids are refused.
static void test_llama3_shards(void) {
    char glob[PATH_CAP];
    snprintf(glob, sizeof(glob), "%s/llama/d_*.bin", g_dir);
    static int gpt2[STEPS][GLOBAL_WINDOWS], llama[STEPS][GLOBAL_WINDOWS];
    int ok = 1;
    Layout a, b;
    layout_init(&a, 1, 8, 1);
    for (int s = 0; s < STEPS; s++) { ok &= layout_step(&a, gpt2[s]); }
    layout_free(&a);
    b.D = 1;
    b.B = 8;
    b.A = GLOBAL_WINDOWS / 8;
    dataloader_init(&b.dl[0], glob, 8, T_LEN, 0, 1, GLOBAL_WINDOWS, SEED, 1, GPT2_VOCAB_SIZE);
    ok &= b.dl[0].format == SHARD_LLAMA3 && dataloader_num_windows(&b.dl[0]) == NUM_WINDOWS;
    for (int s = 0; s < STEPS; s++) { ok &= layout_step(&b, llama[s]); }
    layout_free(&b);
    check(ok && memcmp(gpt2, llama, sizeof(gpt2)) == 0, "llama3_shards_read_as_gpt2_shards",
          "the same tokens as uint32 give other windows (or not contiguous ones)");

    char path[PATH_CAP], other[PATH_CAP], dir[512];
    int32_t h[SHARD_HEADER_INTS] = {SHARD_LLAMA3_MAGIC, SHARD_LLAMA3_VERSION, 40};
    uint32_t ids[40];
    for (int i = 0; i < 40; i++) { ids[i] = (uint32_t)i; }
    path_in(dir, sizeof(dir), "mixed");
    mkdir(dir, 0755);
    snprintf(other, sizeof(other), "%s/a_gpt2.bin", dir);
    uint16_t narrow[40];
    for (int i = 0; i < 40; i++) { narrow[i] = (uint16_t)i; }
    shard_write(other, narrow, 40);
    snprintf(path, sizeof(path), "%s/b_llama3.bin", dir);
    shard_write_llama3(path, ids, 40);
    snprintf(glob, sizeof(glob), "%s/*.bin", dir);
    expect_rejected("reject_mixed_formats", glob, path, "every shard of a glob must be of one format", 1, 1, 1);

    ids[37] = 128000; // a Llama 3 id: outside GPT-2's vocabulary
    write_raw("llama_vocab.bin", h, SHARD_HEADER_INTS, ids, sizeof(uint32_t), 40, path, sizeof(path));
    expect_rejected("reject_llama3_token_outside_vocab", path, path, "token 37 is 128000", 1, 1, 1);
    ids[37] = 37;
    ids[5] = 3000000000u; // negative as an int32: compared unsigned
    write_raw("llama_huge.bin", h, SHARD_HEADER_INTS, ids, sizeof(uint32_t), 40, path, sizeof(path));
    expect_rejected("reject_llama3_token_past_int32", path, path, "token 5 is 3000000000", 1, 1, 1);
    ids[5] = 5;
    write_raw("llama_cut.bin", h, SHARD_HEADER_INTS, ids, sizeof(uint32_t), 39, path, sizeof(path));
    expect_rejected("reject_truncated_llama3_shard", path, path, "header says 40 tokens of 4 bytes", 1, 1, 1);
    // 40 uint16 ids under a Llama 3 header: a file of GPT-2's length for its count
    write_raw("llama_narrow.bin", h, SHARD_HEADER_INTS, narrow, sizeof(uint16_t), 40, path, sizeof(path));
    expect_rejected("reject_llama3_header_on_uint16_ids", path, path, "header says 40 tokens of 4 bytes", 1, 1, 1);
    h[1] = SHARD_GPT2_VERSION;
    write_raw("llama_version.bin", h, SHARD_HEADER_INTS, ids, sizeof(uint32_t), 40, path, sizeof(path));
    expect_rejected("reject_llama3_wrong_version", path, path, "Llama 3 (uint32 tokens) shards of version 7", 1, 1, 1);
}

// The data identity: a glob of GPT-2's shards has the identity it had before Llama 3's were read (names and sizes
// only, so their checkpoints still resume), and a Llama 3 shard of the same name and size as a GPT-2 one (n uint32 ids
// against 2n uint16 ones) is other data.
static void test_identity(void) {
    char dir[512], path[PATH_CAP], id_gpt2[DATA_IDENTITY_CHARS], id_llama[DATA_IDENTITY_CHARS];
    Checksum c;
    checksum_init(&c);
    long long total = 0;
    for (int k = 0; k < NUM_SHARDS; k++) { // the identity as it was: name with its NUL, size, per shard
        char name[64];
        snprintf(name, sizeof(name), "d_%06d.bin", k);
        long long size = SHARD_HEADER_BYTES + 2LL * SHARD_LEN[k];
        checksum_update(&c, name, strlen(name) + 1);
        checksum_update(&c, &size, sizeof(size));
        total += size;
    }
    char want[DATA_IDENTITY_CHARS];
    snprintf(want, sizeof(want), "%d shard(s), %lld bytes, names and sizes %016llx", NUM_SHARDS, total,
             (unsigned long long)checksum_final(&c));
    dataloader_identity(g_glob, id_gpt2, sizeof(id_gpt2));
    check(strcmp(id_gpt2, want) == 0, "identity_of_gpt2_shards_unchanged", "'%s', was '%s'", id_gpt2, want);

    path_in(dir, sizeof(dir), "same_size");
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/s.bin", dir);
    uint16_t narrow[80] = {0};
    uint32_t wide[40] = {0};
    shard_write(path, narrow, 80);
    dataloader_identity(path, id_gpt2, sizeof(id_gpt2));
    shard_write_llama3(path, wide, 40);
    dataloader_identity(path, id_llama, sizeof(id_llama));
    check(strcmp(id_gpt2, id_llama) != 0, "identity_tells_formats_apart", "both '%s'", id_gpt2);
}

// The split of a validation pass over D data ranks (val_rows): for every D, B and W, the ranks' counted rows hold the
// windows [0, W) once each and nothing else, every rank runs val_micro_batches of them and the last one counts a row.
static void test_val_split(void) {
    int ok = 1, cases = 0;
    static int seen[64];
    for (int D = 1; D <= 4; D++) {
        for (int B = 1; B <= 5; B++) {
            for (long long W = 1; W <= 40; W++) {
                long long passes = val_micro_batches(W, B, D);
                int counted = 0, last_counts = 0;
                memset(seen, 0, sizeof(seen));
                for (int r = 0; r < D; r++) {
                    for (long long i = 0; i < passes; i++) {
                        int rows = val_rows(W, B, D, r, i);
                        ok &= rows >= 0 && rows <= B;
                        for (int b = 0; b < rows; b++) {
                            long long w = (i * D + r) * B + b;
                            ok &= w < W;
                            if (w >= 0 && w < 64) { seen[w]++; }
                        }
                        counted += rows;
                        if (i == passes - 1) { last_counts += rows; }
                    }
                }
                for (long long w = 0; w < W; w++) { ok &= seen[w] == 1; }
                ok &= counted == W && last_counts > 0;
                cases++;
            }
        }
    }
    check(ok, "val_split_covers_each_window_once", "over %d cases (D 1..4, B 1..5, W 1..40)", cases);
}

// Validation reads through loaders of D = 1..4 ranks (B = 4): the counted rows are windows [0, W) in order, read
// whole from the shards, the padding rows zeros; W = --val-batches x B, or all windows where the data holds fewer.
static void test_validation_reads(void) {
    static const int val_batches[] = {3, 5, 1000}; // W = 12, 20, 206 (all): with D = 3, 12 leaves ranks idle
    int ok = 1;
    static int in[4 * T_LEN], tg[4 * T_LEN];
    for (int v = 0; v < 3; v++) {
        for (int D = 1; D <= 4; D++) {
            static int seen[NUM_WINDOWS];
            memset(seen, 0, sizeof(seen));
            long long W = 0, passes = 0;
            for (int r = 0; r < D; r++) {
                DataLoader dl;
                dataloader_open(&dl, g_glob, 4, T_LEN, r, D, GPT2_VOCAB_SIZE);
                W = val_pass_windows(dataloader_num_windows(&dl), val_batches[v], 4);
                passes = val_micro_batches(W, 4, D);
                for (long long i = 0; i < passes; i++) {
                    int rows = dataloader_val_batch(&dl, W, i, in, tg);
                    for (int b = 0; b < 4; b++) {
                        const int *x = in + b * T_LEN, *y = tg + b * T_LEN;
                        long long w = (i * D + r) * 4 + b;
                        for (int t = 0; t < T_LEN; t++) {
                            int want = b < rows ? window_start((int)w) + t : 0; // padding: token 0
                            ok &= x[t] == want && y[t] == (b < rows ? want + 1 : 0);
                        }
                        if (b < rows) { seen[w]++; }
                    }
                }
                dataloader_free(&dl);
            }
            ok &= W == (val_batches[v] * 4 < NUM_WINDOWS ? val_batches[v] * 4 : NUM_WINDOWS);
            for (int w = 0; w < NUM_WINDOWS; w++) { ok &= seen[w] == (w < W); }
        }
    }
    check(ok, "validation_reads_the_same_windows_on_1_to_4_ranks",
          "a rank read another window, padding that is not zeros, or the ranks' windows are not [0, W) once each");

    // a validation set smaller than one micro-batch of every rank is no error: the ranks without a window pad
    DataLoader dl;
    char path[PATH_CAP];
    path_in(path, sizeof(path), "small_val.bin");
    uint16_t t[2 * T_LEN + 1];
    for (int i = 0; i < 2 * T_LEN + 1; i++) { t[i] = (uint16_t)i; }
    shard_write(path, t, 2 * T_LEN + 1);
    dataloader_open(&dl, path, 4, T_LEN, 3, 4, GPT2_VOCAB_SIZE);
    long long W = val_pass_windows(dataloader_num_windows(&dl), 20, 4);
    int rows = dataloader_val_batch(&dl, W, 0, in, tg);
    check(W == 2 && val_micro_batches(W, 4, 4) == 1 && rows == 0, "validation_smaller_than_a_micro_batch",
          "W %lld, rank 3 counted %d rows", W, rows);
    dataloader_free(&dl);
}

int main(void) {
    if (!mkdtemp(g_dir)) { fail("cannot create a temporary folder: %s", strerror(errno)); }
    char good[512];
    path_in(good, sizeof(good), "good");
    mkdir(good, 0755);
    snprintf(g_glob, sizeof(g_glob), "%s/good/d_*.bin", g_dir);
    write_good_shards("good", SHARD_GPT2);
    path_in(good, sizeof(good), "llama");
    mkdir(good, 0755);
    write_good_shards("llama", SHARD_LLAMA3);

    test_shard_round_trip();
    test_rejects_corrupt_shards();
    test_layout_independence();
    test_state_resume();
    test_state_errors();
    test_truncated_while_read();
    test_llama3_shards();
    test_identity();
    test_val_split();
    test_validation_reads();

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { printf("note: could not remove %s\n", g_dir); }
    return test_exit();
}
