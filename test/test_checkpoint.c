/*
 * test_checkpoint.c: model and training-state files (llmc/checkpoint.h).
 * - model file: version 3 round trip (header as llm.c writes it), bf16 version 5 and unpadded version 1 read,
 *   a file with more positions than --seq-len; wrong shape, truncation, bad magic and unknown versions fail
 *   with one line naming the file;
 * - state file: round trip of progress, params and AdamW moments; a setting or a shape that differs is
 *   refused naming the file, the setting and both values; a constant schedule may change --steps; a checkpoint
 *   is never written over;
 * - integrity: a flipped byte anywhere (the header and the settings block included) is reported as corruption,
 *   never as other settings; a version 1 file (no checksums) reads, unverified, but one with checksums is corrupt;
 * - fp8: the amax history round trip; an fp8 checkpoint continues in bf16 and a bf16 one in fp8 (with an empty
 *   history); the FP8 settings must match between fp8 runs; a truncated history, or an amax no run records
 *   (negative, NaN, infinite), is refused;
 * - atomic writes leave no temporary file; the latest complete checkpoint ignores a model file without its
 *   state file and temporary files; a latest state file without its model file is refused, naming the missing
 *   file (an earlier one is passed by); a FIFO as its state file is refused, not opened (which would block);
 * - a model header past the format's limits (one whose size arithmetic would wrap, too many layers, heads not
 *   dividing the channels) is refused as corrupt.
 * - Llama (an architecture other than GPT-2): its model file's header (magic 20261201, llm.c's six values, then the
 *   description) and tensors round trip; a file of another description (key/value heads, architecture) or with a
 *   corrupt description is refused naming the field; a checkpoint refuses a run of another rope theta, and GPT-2
 *   and Llama checkpoints refuse each other's runs.
 */
#include "../llmc/checkpoint.h"
#include "../llmc/rng.h"
#include "test_util.h"

#define CHILD_TIMEOUT_S 10.0
#define TEST_SEED 7u

static char g_dir[] = "/tmp/test_checkpoint_XXXXXX";

static GPTConfig tiny_config(int layers, int max_seq_len) {
    GPTConfig c = config_gpt2(max_seq_len, 300, layers, 2, 8);
    return c;
}

static float *random_floats(size_t n, uint32_t stream) {
    float *x = (float *)malloc_check(n * sizeof(float), "test floats");
    for (size_t i = 0; i < n; i++) { x[i] = rng_normal(TEST_SEED, stream, i); }
    return x;
}

// The padded rows of wte (and lmhead) read back as zero whatever a file holds there; zero them to compare exactly.
static void zero_padded_rows(const GPTConfig *c, float *params) {
    ParamLayout p;
    param_layout(c, &p);
    size_t real = (size_t)c->vocab_size * c->channels;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_vocab(t) && p.size[t] > 0) {
            memset(params + p.offset[t] + real, 0, (p.size[t] - real) * sizeof(float));
        }
    }
}

// A Llama with 2 key/value heads of 4 query heads, its own LM head, llama3 rope scaling and another norm epsilon:
// every field of the description away from a default.
static GPTConfig tiny_llama(int kv_heads) {
    GPTConfig c = config_default(ARCH_LLAMA, 16, 2, 4, 16);
    c.vocab_size = 300;
    c.padded_vocab_size = padded_vocab(300);
    c.num_kv_heads = kv_heads;
    c.ffn_hidden = 20;
    c.norm_eps = 1e-6;
    c.rope_scaling = llama3_rope_scaling(LLAMA31_ROPE_FACTOR);
    config_validate(&c);
    return c;
}

static void path_in_dir(char *out, const char *name) { snprintf(out, CKPT_PATH_LEN, "%s/%s", g_dir, name); }

static int dir_has_tmp_file(void) {
    DIR *d = opendir(g_dir);
    int found = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) { found |= strstr(e->d_name, ".tmp.") != NULL; }
    closedir(d);
    return found;
}

static void clear_dir(void) {
    DIR *d = opendir(g_dir);
    char p[CKPT_PATH_LEN];
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (e->d_name[0] == '.') { continue; }
        path_in_dir(p, e->d_name);
        unlink(p);
    }
    closedir(d);
}

// Writes an llm.c model file by hand: header, then n values as fp32 or (version 5) bf16.
static void write_raw_model(const char *path, int version, const GPTConfig *file_c, const float *vals, size_t n,
                            int magic) {
    int hd[MODEL_HEADER_INTS];
    model_header_fill(hd, file_c, version);
    hd[0] = magic;
    FILE *f = fopen_check(path, "wb");
    fwrite_check(hd, sizeof(int), MODEL_HEADER_INTS, f, path);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &vals[i], sizeof(bits));
        if (version == MODEL_VERSION_BF16) {
            uint16_t half = (uint16_t)(bits >> 16);
            fwrite_check(&half, sizeof(half), 1, f, path);
        } else {
            fwrite_check(&vals[i], sizeof(float), 1, f, path);
        }
    }
    fclose(f);
}

// ----------------------------------------------------------------------------------------------------------
// model files

static void test_model_round_trip(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 1);
    char path[CKPT_PATH_LEN];
    path_in_dir(path, "model.bin");
    model_file_write(path, &c, params);
    check(!dir_has_tmp_file(), "model_write_atomic_no_tmp", "a temporary file was left beside '%s'", path);
    int hd[MODEL_HEADER_INTS];
    FILE *f = fopen_check(path, "rb");
    fread_check(hd, sizeof(int), MODEL_HEADER_INTS, f, path);
    fclose(f);
    check(hd[0] == 20240326 && hd[1] == 3 && hd[2] == 16 && hd[3] == 300 && hd[4] == 2 && hd[5] == 2 && hd[6] == 8 &&
              hd[7] == 384 && hd[8] == 0 &&
              file_size_or_neg(path) == (long long)(MODEL_HEADER_INTS * sizeof(int) + p.total * sizeof(float)),
          "model_header_llmc_layout", "header %d %d %d %d %d %d %d %d", hd[0], hd[1], hd[2], hd[3], hd[4], hd[5],
          hd[6], hd[7]);
    zero_padded_rows(&c, params);
    model_file_write(path, &c, params);
    float *back = (float *)calloc_check(p.total, sizeof(float), "read back");
    model_file_read(path, &c, back);
    check(memcmp(params, back, p.total * sizeof(float)) == 0, "model_v3_round_trip", "parameters differ");
    free(back);
    free(params);
}

static void test_model_bf16_read(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *vals = random_floats(p.total, 2);
    char path[CKPT_PATH_LEN];
    path_in_dir(path, "model_bf16.bin");
    write_raw_model(path, MODEL_VERSION_BF16, &c, vals, p.total, MODEL_FILE_MAGIC);
    float *back = (float *)calloc_check(p.total, sizeof(float), "read back");
    model_file_read(path, &c, back);
    size_t bad = 0, real_wte = (size_t)c.vocab_size * c.channels;
    for (size_t i = 0; i < p.total; i++) {
        uint32_t bits;
        memcpy(&bits, &vals[i], sizeof(bits));
        bits &= 0xFFFF0000u; // the bf16 the file holds, as an fp32
        float want;
        memcpy(&want, &bits, sizeof(want));
        if (i >= real_wte && i < p.size[P_WTE]) { want = 0.0f; }
        bad += back[i] != want;
    }
    check(bad == 0, "model_v5_bf16_read", "%zu of %zu values differ", bad, p.total);
    free(back);
    free(vals);
}

// Version 1 files have V rows of wte; a file may also hold more positions than the run uses.
static void test_model_unpadded_and_longer(void) {
    GPTConfig file_c = tiny_config(1, 32);
    file_c.padded_vocab_size = file_c.vocab_size;
    ParamLayout fp;
    param_layout(&file_c, &fp);
    float *vals = random_floats(fp.total, 3);
    char path[CKPT_PATH_LEN];
    path_in_dir(path, "model_v1.bin");
    write_raw_model(path, MODEL_VERSION_FP32_UNPADDED, &file_c, vals, fp.total, MODEL_FILE_MAGIC);
    GPTConfig c = tiny_config(1, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *back = (float *)calloc_check(p.total, sizeof(float), "read back");
    model_file_read(path, &c, back);
    size_t wte_real = (size_t)c.vocab_size * c.channels, wpe_kept = (size_t)c.max_seq_len * c.channels;
    int ok = memcmp(back, vals, wte_real * sizeof(float)) == 0;
    for (size_t i = wte_real; i < p.size[P_WTE]; i++) { ok &= back[i] == 0.0f; }
    ok &= memcmp(back + p.offset[P_WPE], vals + fp.offset[P_WPE], wpe_kept * sizeof(float)) == 0;
    for (int t = P_LN1W; t < NUM_PARAM_TENSORS; t++) {
        ok &= memcmp(back + p.offset[t], vals + fp.offset[t], p.size[t] * sizeof(float)) == 0;
    }
    check(ok, "model_v1_unpadded_longer_read", "wte, wpe's first rows or another tensor differ");
    free(back);
    free(vals);
}

typedef struct {
    char path[CKPT_PATH_LEN];
    GPTConfig config;
} ModelReadArgs;

static void read_model_child(void *arg) {
    ModelReadArgs *a = (ModelReadArgs *)arg;
    ParamLayout p;
    param_layout(&a->config, &p);
    float *buf = (float *)malloc_check(p.total * sizeof(float), "read");
    model_file_read(a->path, &a->config, buf);
}

static void read_header_child(void *arg) { model_file_header(((ModelReadArgs *)arg)->path); }

static void expect_child_error(const char *name, void (*fn)(void *), void *arg, const char *expect1,
                               const char *expect2) {
    Child ch;
    child_start(&ch, fn, arg);
    child_wait(&ch, now_s() + CHILD_TIMEOUT_S);
    const char *nl = strchr(ch.err, '\n');
    check(ch.status > 0 && strstr(ch.err, expect1) && strstr(ch.err, expect2) && nl && nl[1] == '\0', name,
          "status %d, stderr '%s', expected one line with '%s' and '%s'", ch.status, ch.err, expect1, expect2);
}

static void test_model_errors(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *vals = random_floats(p.total, 4);
    ModelReadArgs a;
    a.config = c;

    path_in_dir(a.path, "model_l2.bin");
    model_file_write(a.path, &c, vals);
    a.config.num_layers = 3;
    expect_child_error("model_wrong_shape", read_model_child, &a, "model_l2.bin", "has layers 2 but this run's model has 3");
    a.config = c;
    a.config.max_seq_len = 32;
    expect_child_error("model_too_few_positions", read_model_child, &a, "has 16 positions but this run's model has 32",
                       "");
    a.config = c;

    path_in_dir(a.path, "model_trunc.bin");
    model_file_write(a.path, &c, vals);
    if (truncate(a.path, file_size_or_neg(a.path) - 4) != 0) { perror("truncate"); }
    expect_child_error("model_truncated", read_model_child, &a, "model_trunc.bin", "truncated or corrupt");

    path_in_dir(a.path, "model_magic.bin");
    write_raw_model(a.path, MODEL_VERSION_FP32, &c, vals, p.total, 20240520);
    expect_child_error("model_bad_magic", read_model_child, &a, "model_magic.bin", "is not an llm.c model file");

    path_in_dir(a.path, "model_v2.bin");
    write_raw_model(a.path, 2, &c, vals, p.total, MODEL_FILE_MAGIC);
    expect_child_error("model_unknown_version", read_model_child, &a, "model_v2.bin", "has version 2");

    path_in_dir(a.path, "model_missing.bin");
    expect_child_error("model_missing", read_model_child, &a, "model_missing.bin", "cannot open");

    // headers past the format's limits are refused before any size is computed from them: one whose size arithmetic
    // wraps to a header-only file (GPT-2's layout, C = 2^30 and Vp + maxT + 13 L + 2 = 2^32: 12 L C^2 + (Vp + maxT +
    // 13 L + 2) C elements of 4 bytes is 2^66 bytes, 0 mod 2^64), too many layers, heads not dividing C. The file's
    // header holds llm.c's six values only (GPT-2's description follows from them).
    static const struct {
        const char *name;
        int maxT, V, Vp, L, NH, C;
        int header_only; // the sizes wrap: the file holds no values
    } bad[] = {{"model_header_size_wraps", INT_MAX - 13, GPT2_VOCAB_SIZE, INT_MAX, 1, 1, 1 << 30, 1},
               {"model_header_too_many_layers", 16, 300, 384, MAX_LAYERS + 1, 2, 8, 0},
               {"model_header_heads_not_dividing", 16, 300, 384, 2, 3, 8, 0}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        GPTConfig c = config_gpt2(16, 300, 1, 1, 8);
        c.max_seq_len = bad[i].maxT;
        c.vocab_size = bad[i].V;
        c.padded_vocab_size = bad[i].Vp;
        c.num_layers = bad[i].L;
        c.num_heads = c.num_kv_heads = bad[i].NH;
        c.channels = bad[i].C;
        ParamLayout q; // each file holds the values its header implies, so only the limits can refuse it
        size_t n = bad[i].header_only || !param_layout(&c, &q) ? 0 : q.total;
        float *zeros = (float *)calloc_check(n, sizeof(float), "crafted model");
        path_in_dir(a.path, bad[i].name);
        write_raw_model(a.path, MODEL_VERSION_FP32, &c, zeros, n, MODEL_FILE_MAGIC);
        expect_child_error(bad[i].name, read_header_child, &a, bad[i].name, "has a corrupt header");
        free(zeros);
    }
    free(vals);
}

static void test_model_llama(void) {
    GPTConfig c = tiny_llama(2);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 8);
    zero_padded_rows(&c, params);
    char path[CKPT_PATH_LEN];
    path_in_dir(path, "llama.bin");
    model_file_write(path, &c, params);
    int hd[MODEL_HEADER_INTS];
    FILE *f = fopen_check(path, "rb");
    fread_check(hd, sizeof(int), MODEL_HEADER_INTS, f, path);
    fclose(f);
    int32_t packed[64];
    int n = config_pack(&c, NUM_CONFIG_FIELDS, packed), rest_zero = 1;
    for (int i = MODEL_HEADER_CONFIG + n; i < MODEL_HEADER_INTS; i++) { rest_zero &= hd[i] == 0; }
    check(hd[0] == 20261201 && hd[1] == 3 && hd[2] == 16 && hd[3] == 300 && hd[4] == 2 && hd[5] == 4 &&
              hd[6] == 16 && hd[7] == 384 && hd[8] == ARCH_LLAMA && hd[9] == 2 &&
              memcmp(hd + MODEL_HEADER_CONFIG, packed, (size_t)n * sizeof(int)) == 0 && rest_zero &&
              file_size_or_neg(path) == (long long)(MODEL_HEADER_INTS * sizeof(int) + p.total * sizeof(float)),
          "llama_model_header", "header %d %d %d %d %d %d %d %d %d %d", hd[0], hd[1], hd[2], hd[3], hd[4], hd[5], hd[6],
          hd[7], hd[8], hd[9]);
    ModelFileHeader h = model_file_header(path);
    float *back = (float *)calloc_check(p.total, sizeof(float), "read back");
    model_file_read(path, &c, back);
    check(config_equal(&h.config, &c) && memcmp(params, back, p.total * sizeof(float)) == 0, "llama_model_round_trip",
          "the description or the parameters differ");
    free(back);

    ModelReadArgs a;
    snprintf(a.path, sizeof(a.path), "%s", path);
    a.config = tiny_llama(4);
    expect_child_error("llama_model_other_kv_heads", read_model_child, &a, "llama.bin",
                       "has kv heads 2 but this run's model has 4; pass the matching --model or --kv-heads");
    a.config = config_gpt2(16, 300, 2, 4, 16);
    expect_child_error("llama_model_into_gpt2", read_model_child, &a, "llama.bin",
                       "has arch llama but this run's model has gpt2");
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) { // the norm (an int, before the one double): no known kind
        if (CONFIG_FIELDS[i].offset == offsetof(GPTConfig, norm)) { hd[MODEL_HEADER_CONFIG + i] = 9; }
    }
    path_in_dir(a.path, "llama_corrupt.bin");
    FILE *w = fopen_check(a.path, "wb");
    fwrite_check(hd, sizeof(int), MODEL_HEADER_INTS, w, a.path);
    fwrite_check(params, sizeof(float), p.total, w, a.path);
    fclose(w);
    a.config = c;
    expect_child_error("llama_model_corrupt_description", read_model_child, &a, "llama_corrupt.bin",
                       "has a corrupt header: norm 9 is not a known value");
    free(params);
}

// ----------------------------------------------------------------------------------------------------------
// state files and checkpoints

static Options run_options(long long seed, const char *schedule, int steps) {
    Options o;
    options_defaults(&o);
    o.seed = seed;
    o.steps = steps;
    snprintf(o.lr_schedule, sizeof(o.lr_schedule), "%s", schedule);
    return o;
}

// Leaves a page of the stack dirty, where the next call's locals will lie.
static __attribute__((noinline)) void dirty_stack(void) {
    volatile unsigned char junk[2 * STATE_KEYS_BYTES];
    for (size_t i = 0; i < sizeof(junk); i++) { junk[i] = 0xAB; }
}

// The settings block is written whole: past its text every byte must be zero, whatever was on the stack (a state
// file's bytes must not depend on the compiler or on what ran before).
static void test_keys_block_defined(void) {
    GPTConfig c = tiny_config(2, 16);
    Options o = run_options(1337, "cosine", 100);
    dirty_stack();
    ResumeKeys k = resume_keys_make(&o, &c, 4096);
    size_t used = strlen(k.text), stray = 0;
    for (size_t i = used; i < sizeof(k.text); i++) { stray += k.text[i] != 0; }
    check(used > 0 && stray == 0, "resume_keys_block_defined", "%zu bytes past the text are not zero", stray);
}

typedef struct {
    GPTConfig c;
    ResumeKeys keys;
    TrainProgress pr;
    const float *params, *m, *v;
} WriteArgs;

static void write_checkpoint_child(void *arg) {
    WriteArgs *a = (WriteArgs *)arg;
    checkpoint_write(g_dir, &a->c, &a->keys, &a->pr, a->params, a->m, a->v, NULL);
}

static void test_state_round_trip(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    Options o = run_options(1337, "cosine", 100);
    ResumeKeys keys = resume_keys_make(&o, &c, 4096);
    float *params = random_floats(p.total, 5), *m = random_floats(p.total, 6), *v = random_floats(p.total, 7);
    zero_padded_rows(&c, params);
    TrainProgress pr = {42, 3, 123456789012LL, "", 0};
    checkpoint_write(g_dir, &c, &keys, &pr, params, m, v, NULL);
    check(!dir_has_tmp_file(), "checkpoint_write_atomic_no_tmp", "a temporary file was left in '%s'", g_dir);
    float *p2 = (float *)calloc_check(p.total, 4, "p"), *m2 = (float *)calloc_check(p.total, 4, "m"),
          *v2 = (float *)calloc_check(p.total, 4, "v");
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(g_dir, 42, model_path, state_path);
    TrainProgress back = state_file_read(state_path, &keys, p2, m2, v2, p.total, NULL);
    size_t bytes = p.total * sizeof(float);
    check(back.step == 42 && back.data_epoch == 3 && back.data_next == 123456789012LL && !memcmp(params, p2, bytes) &&
              !memcmp(m, m2, bytes) && !memcmp(v, v2, bytes),
          "state_round_trip", "step %d epoch %lld next %lld, or arrays differ", back.step, back.data_epoch,
          back.data_next);
    model_file_read(model_path, &c, p2);
    check(memcmp(params, p2, bytes) == 0, "checkpoint_model_file_matches",
          "the checkpoint's model file differs from its parameters");

    // a second checkpoint of step 42 (other weights) is refused, and both files stay as they were
    uint64_t model_sum = file_checksum(model_path), state_sum = file_checksum(state_path);
    WriteArgs w = {c, keys, pr, m, m, v};
    expect_child_error("checkpoint_never_written_over", write_checkpoint_child, &w, "state_00000042.bin",
                       "exists already");
    check(file_checksum(model_path) == model_sum && file_checksum(state_path) == state_sum,
          "checkpoint_written_over_unchanged", "a refused write changed '%s' or '%s'", model_path, state_path);
    free(p2);
    free(m2);
    free(v2);
    free(params);
    free(m);
    free(v);
}

typedef struct {
    char path[CKPT_PATH_LEN];
    ResumeKeys keys;
    size_t n;
} StateCheckArgs;

static void check_state_child(void *arg) {
    StateCheckArgs *a = (StateCheckArgs *)arg;
    state_file_check(a->path, &a->keys, a->n);
}

static void test_state_mismatch(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *zeros = (float *)calloc_check(p.total, sizeof(float), "zeros");
    Options o = run_options(1337, "cosine", 100);
    ResumeKeys keys = resume_keys_make(&o, &c, 4096);
    TrainProgress pr = {5, 0, 0, "", 0};
    checkpoint_write(g_dir, &c, &keys, &pr, zeros, zeros, zeros, NULL);

    StateCheckArgs a;
    char model_path[CKPT_PATH_LEN];
    checkpoint_paths(g_dir, 5, model_path, a.path);
    a.n = p.total;
    Options o2 = run_options(42, "cosine", 100);
    a.keys = resume_keys_make(&o2, &c, 4096);
    expect_child_error("state_option_mismatch", check_state_child, &a, "state_00000005.bin",
                       "was written with --seed 1337 but this run has --seed 42");
    GPTConfig c3 = tiny_config(3, 16);
    a.keys = resume_keys_make(&o, &c3, 4096);
    expect_child_error("state_config_mismatch", check_state_child, &a, "state_00000005.bin",
                       "was written with layers 2 but this run has layers 3");
    a.keys = resume_keys_make(&o, &c, 8192);
    expect_child_error("state_batch_mismatch", check_state_child, &a, "state_00000005.bin",
                       "tokens per step 4096 but this run has tokens per step 8192");
    Options o4 = run_options(1337, "cosine", 200);
    a.keys = resume_keys_make(&o4, &c, 4096);
    expect_child_error("state_steps_mismatch", check_state_child, &a, "state_00000005.bin",
                       "--steps 100 but this run has --steps 200");
    a.keys = keys;
    a.n = p.total + 1;
    expect_child_error("state_count_mismatch", check_state_child, &a, "state_00000005.bin", "parameters");

    // The training data: a checkpoint written before it was recorded resumes; one of other data is refused.
    a.keys = keys;
    a.n = p.total;
    resume_keys_add(&a.keys, RESUME_DATA_KEY, "2 shard(s), 4096 bytes, names and sizes 0123456789abcdef");
    Child old;
    child_start(&old, check_state_child, &a);
    child_wait(&old, now_s() + CHILD_TIMEOUT_S);
    check(old.status == 0, "state_without_data_identity_resumes", "status %d: %s", old.status, old.err);
    ResumeKeys with_data = keys;
    resume_keys_add(&with_data, RESUME_DATA_KEY, "1 shard(s), 2048 bytes, names and sizes 00000000000000aa");
    pr.step = 17;
    checkpoint_write(g_dir, &c, &with_data, &pr, zeros, zeros, zeros, NULL);
    checkpoint_paths(g_dir, 17, model_path, a.path);
    expect_child_error("state_other_data_refused", check_state_child, &a, "state_00000017.bin",
                       "was written with --train-data shards 1 shard(s), 2048 bytes, names and sizes 00000000000000aa "
                       "but this run has --train-data shards 2 shard(s)");
    checkpoint_paths(g_dir, 5, model_path, a.path);

    // A constant learning rate does not depend on --steps: such a run may be extended.
    Options oc = run_options(1337, "constant", 100), oc2 = run_options(1337, "constant", 300);
    ResumeKeys kc = resume_keys_make(&oc, &c, 4096);
    pr.step = 6;
    checkpoint_write(g_dir, &c, &kc, &pr, zeros, zeros, zeros, NULL);
    checkpoint_paths(g_dir, 6, model_path, a.path);
    a.keys = resume_keys_make(&oc2, &c, 4096);
    a.n = p.total;
    Child ch;
    child_start(&ch, check_state_child, &a);
    child_wait(&ch, now_s() + CHILD_TIMEOUT_S);
    check(ch.status == 0, "state_constant_schedule_extends", "status %d: %s", ch.status, ch.err);
    if (truncate(a.path, file_size_or_neg(a.path) - 1) != 0) { perror("truncate"); }
    expect_child_error("state_truncated", check_state_child, &a, "state_00000006.bin", "is corrupt");
    free(zeros);
}

// ----------------------------------------------------------------------------------------------------------
// integrity

// A Llama checkpoint resumes a Llama run of the same description only; GPT-2's and Llama's refuse each other's runs,
// whichever holds the architecture key (GPT-2's keys are those of checkpoints from before the description).
static void test_state_llama(void) {
    clear_dir();
    GPTConfig c = tiny_llama(2), gpt2 = tiny_config(2, 16);
    ParamLayout p, pg;
    param_layout(&c, &p);
    param_layout(&gpt2, &pg);
    float *zeros = (float *)calloc_check(p.total > pg.total ? p.total : pg.total, sizeof(float), "zeros");
    Options o = run_options(1337, "cosine", 100);
    ResumeKeys keys = resume_keys_make(&o, &c, 4096), gpt2_keys = resume_keys_make(&o, &gpt2, 4096);
    TrainProgress pr = {6, 0, 0, "", 0}, pg_pr = {7, 0, 0, "", 0};
    checkpoint_write(g_dir, &c, &keys, &pr, zeros, zeros, zeros, NULL);
    checkpoint_write(g_dir, &gpt2, &gpt2_keys, &pg_pr, zeros, zeros, zeros, NULL);
    float *back = (float *)calloc_check(p.total, sizeof(float), "back");
    char model_path[CKPT_PATH_LEN];
    StateCheckArgs a;
    checkpoint_paths(g_dir, 6, model_path, a.path);
    TrainProgress read = state_file_read(a.path, &keys, back, back, back, p.total, NULL);
    check(read.step == 6 && strstr(keys.text, "arch=llama\n") && strstr(keys.text, "kv heads=2\n") &&
              strstr(keys.text, "norm eps=1e-06\n") && !strstr(gpt2_keys.text, "arch="),
          "llama_state_resumes_with_its_description", "step %d; keys:\n%s", read.step, keys.text);
    a.n = p.total;
    GPTConfig theta = c;
    theta.rope_theta = 10000.0f;
    a.keys = resume_keys_make(&o, &theta, 4096);
    expect_child_error("llama_state_other_rope_theta", check_state_child, &a, "state_00000006.bin",
                       "was written with rope theta 500000 but this run has rope theta 10000");
    a.keys = gpt2_keys;
    a.n = pg.total;
    expect_child_error("llama_state_refuses_gpt2_run", check_state_child, &a, "state_00000006.bin",
                       "was written with --arch llama but this run has --arch gpt2");
    checkpoint_paths(g_dir, 7, model_path, a.path);
    a.keys = keys;
    a.n = p.total;
    expect_child_error("gpt2_state_refuses_llama_run", check_state_child, &a, "state_00000007.bin",
                       "was written with --arch gpt2 but this run has --arch llama");
    free(back);
    free(zeros);
    clear_dir(); // the tests after this one write their checkpoints afresh, and a checkpoint is never written over
}

static void test_checksum(void) {
    size_t n = 1000;
    unsigned char *bytes = (unsigned char *)malloc_check(n, "bytes");
    for (size_t i = 0; i < n; i++) { bytes[i] = (unsigned char)(i * 131 + 7); }
    Checksum whole, parts;
    checksum_init(&whole);
    checksum_update(&whole, bytes, n);
    uint64_t sum = checksum_final(&whole);
    int bad = 0;
    for (size_t cut = 1; cut < 80; cut += 3) { // the same bytes in pieces of every size give the same sum
        checksum_init(&parts);
        for (size_t i = 0; i < n; i += cut) { checksum_update(&parts, bytes + i, n - i < cut ? n - i : cut); }
        bad += checksum_final(&parts) != sum;
    }
    int flips = 0;
    for (size_t i = 0; i < n; i += 37) { // any one bit changed, or one byte fewer, changes the sum
        for (int b = 0; b < 8; b += 3) {
            bytes[i] ^= (unsigned char)(1u << b);
            checksum_init(&parts);
            checksum_update(&parts, bytes, n);
            flips += checksum_final(&parts) == sum;
            bytes[i] ^= (unsigned char)(1u << b);
        }
    }
    checksum_init(&parts);
    checksum_update(&parts, bytes, n - 1);
    flips += checksum_final(&parts) == sum;
    check(bad == 0 && flips == 0, "checksum_pieces_and_flips", "%d piecewise sums differ, %d changes unseen", bad,
          flips);
    free(bytes);
}

typedef struct {
    char model[CKPT_PATH_LEN], state[CKPT_PATH_LEN];
    ResumeKeys keys;
    size_t n;
    int step;
} ReadArgs;

static void read_checkpoint_child(void *arg) {
    ReadArgs *a = (ReadArgs *)arg;
    float *buf = (float *)malloc_check(3 * a->n * sizeof(float), "state");
    TrainProgress pr = state_file_read(a->state, &a->keys, buf, buf + a->n, buf + 2 * a->n, a->n, NULL);
    checkpoint_verify(a->model, a->state, a->step, &pr);
    free(buf);
}

// A byte flipped anywhere in either file of a checkpoint, or a state file renamed to another step, is refused.
static void test_corruption(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 21);
    Options o = run_options(1337, "cosine", 100);
    ReadArgs a;
    a.keys = resume_keys_make(&o, &c, 4096);
    a.n = p.total;
    a.step = 7;
    TrainProgress pr = {7, 1, 64, "", 0};
    checkpoint_write(g_dir, &c, &a.keys, &pr, params, params, params, NULL);
    checkpoint_paths(g_dir, 7, a.model, a.state);
    Child ch;
    child_start(&ch, read_checkpoint_child, &a);
    child_wait(&ch, now_s() + CHILD_TIMEOUT_S);
    check(ch.status == 0, "checkpoint_reads_clean", "status %d: %s", ch.status, ch.err);
    long long state_bytes = file_size_or_neg(a.state), model_bytes = file_size_or_neg(a.model);
    long long header = STATE_HEADER_INTS * (long long)sizeof(int64_t);
    flip_byte(a.state, header + STATE_KEYS_BYTES + 40); // a weight
    expect_child_error("state_flipped_weight", read_checkpoint_child, &a, "state_00000007.bin", "is corrupt");
    flip_byte(a.state, header + STATE_KEYS_BYTES + 40);
    flip_byte(a.state, state_bytes - 3); // a second moment
    expect_child_error("state_flipped_moment", read_checkpoint_child, &a, "state_00000007.bin", "is corrupt");
    flip_byte(a.state, state_bytes - 3);
    flip_byte(a.state, SH_DATA_NEXT * (long long)sizeof(int64_t)); // the data position
    expect_child_error("state_flipped_position", read_checkpoint_child, &a, "state_00000007.bin", "is corrupt");
    flip_byte(a.state, SH_DATA_NEXT * (long long)sizeof(int64_t));
    flip_byte(a.model, model_bytes / 2);
    expect_child_error("model_flipped_weight", read_checkpoint_child, &a, "model_00000007.bin", "is corrupt");
    flip_byte(a.model, model_bytes / 2);
    a.step = 9; // as if state_00000007.bin had been renamed state_00000009.bin
    expect_child_error("state_renamed", read_checkpoint_child, &a, "records step 7 but its name says 9", "move it");
    free(params);
}

// Writes `value` into int64 slot `slot` of a state file's header.
static void set_header_slot(const char *path, int slot, int64_t value) {
    FILE *f = fopen_check(path, "r+b");
    fseek(f, slot * (long)sizeof(int64_t), SEEK_SET);
    fwrite_check(&value, sizeof(value), 1, f, path);
    fclose(f);
}

// A byte flipped in the header or the settings block is corruption, whatever field it lands in: the checksum is
// heard before the field is (a flipped setting must not read as a checkpoint of other settings, a flipped count as
// another model). Both the full read and the check of the header alone (which a finished run gets) say so.
static void test_header_corruption(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 22);
    Options o = run_options(1337, "cosine", 100);
    ReadArgs a;
    a.keys = resume_keys_make(&o, &c, 4096);
    a.n = p.total;
    a.step = 14;
    TrainProgress pr = {14, 0, 0, "", 0};
    checkpoint_write(g_dir, &c, &a.keys, &pr, params, params, params, NULL);
    checkpoint_paths(g_dir, 14, a.model, a.state);
    StateCheckArgs h;
    snprintf(h.path, sizeof(h.path), "%s", a.state);
    h.keys = a.keys;
    h.n = a.n;
    long long header = STATE_HEADER_INTS * (long long)sizeof(int64_t), slot = (long long)sizeof(int64_t);
    long long setting = header + (long long)(strstr(a.keys.text, "layers=") - a.keys.text) + 7; // its digit
    const struct {
        const char *name;
        long long at;
        int header_check; // the header alone shows it (the others read as a plausible header)
    } flips[] = {{"magic", SH_MAGIC * slot, 1},
                 {"version", SH_VERSION * slot, 1},
                 {"parameter_count", SH_NUM_PARAMS * slot, 1},
                 {"settings_bytes", SH_KEYS_BYTES * slot, 1},
                 {"setting", setting, 1},
                 {"step", SH_STEP * slot, 0},
                 {"fp8_tensors", SH_FP8_TENSORS * slot, 0},
                 {"own_checksum", SH_STATE_CHECKSUM * slot, 0}};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        char name[96];
        flip_byte(a.state, flips[i].at);
        snprintf(name, sizeof(name), "state_flipped_%s_is_corrupt", flips[i].name);
        expect_child_error(name, read_checkpoint_child, &a, "state_00000014.bin", "is corrupt");
        if (flips[i].header_check) {
            snprintf(name, sizeof(name), "state_flipped_%s_header_check_is_corrupt", flips[i].name);
            expect_child_error(name, check_state_child, &h, "state_00000014.bin", "is corrupt");
        }
        flip_byte(a.state, flips[i].at);
    }
    free(params);
}

// A version 1 state file (from before the checksums) reads, unverified (no model checksum to check). A file that says
// version 1 but has a checksum slot set is a later one whose version changed: corrupt, not unverifiable.
static void test_version1(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 23);
    Options o = run_options(1337, "cosine", 100);
    ReadArgs a;
    a.keys = resume_keys_make(&o, &c, 4096);
    a.n = p.total;
    a.step = 15;
    TrainProgress pr = {15, 0, 0, "", 0};
    checkpoint_write(g_dir, &c, &a.keys, &pr, params, params, params, NULL);
    checkpoint_paths(g_dir, 15, a.model, a.state);
    set_header_slot(a.state, SH_VERSION, STATE_FILE_VERSION_UNCHECKED);
    expect_child_error("state_version1_with_checksums_is_corrupt", read_checkpoint_child, &a, "state_00000015.bin",
                       "is corrupt");
    set_header_slot(a.state, SH_STATE_CHECKSUM, 0);
    expect_child_error("state_version1_with_model_checksum_is_corrupt", read_checkpoint_child, &a,
                       "state_00000015.bin", "is corrupt");
    set_header_slot(a.state, SH_MODEL_CHECKSUM, 0);
    float *buf = (float *)malloc_check(3 * p.total * sizeof(float), "state");
    TrainProgress r = state_file_read(a.state, &a.keys, buf, buf + p.total, buf + 2 * p.total, p.total, NULL);
    check(r.step == 15 && r.model_checksum == 0 && memcmp(buf, params, p.total * sizeof(float)) == 0,
          "state_version1_reads_unverified", "step %d, model checksum %016llx (want 0: none recorded)", r.step,
          (unsigned long long)r.model_checksum);
    free(buf);
    free(params);
}

static Options fp8_options(int history) {
    Options o = run_options(1337, "cosine", 100);
    snprintf(o.precision, sizeof(o.precision), "fp8");
    o.fp8_amax_history = history;
    return o;
}

typedef struct {
    char path[CKPT_PATH_LEN];
    ResumeKeys keys;
    size_t n;
    int layers, history; // of the reading run's FP8 history
} Fp8ReadArgs;

static void read_fp8_child(void *arg) {
    Fp8ReadArgs *a = (Fp8ReadArgs *)arg;
    float *buf = (float *)malloc_check(a->n * sizeof(float), "state");
    Fp8History h;
    fp8_history_init(&h, a->layers, a->history);
    state_file_read(a->path, &a->keys, buf, buf, buf, a->n, &h);
    fp8_history_free(&h);
    free(buf);
}

static void test_state_fp8(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 8);
    Options o8 = fp8_options(4), o16 = run_options(1337, "cosine", 100);
    ResumeKeys k8 = resume_keys_make(&o8, &c, 4096), k16 = resume_keys_make(&o16, &c, 4096);
    Fp8History h, back;
    fp8_history_init(&h, c.num_layers, 4);
    for (int i = 0; i < h.tensors * h.length; i++) { h.ring[i] = fabsf(rng_normal(TEST_SEED, 9, (uint64_t)i)); }
    h.steps = 7;
    TrainProgress pr = {8, 0, 0, "", 0};
    checkpoint_write(g_dir, &c, &k8, &pr, params, params, params, &h);
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(g_dir, 8, model_path, state_path);
    float *buf = (float *)malloc_check(p.total * sizeof(float), "state");

    fp8_history_init(&back, c.num_layers, 4);
    TrainProgress r = state_file_read(state_path, &k8, buf, buf, buf, p.total, &back);
    check(back.steps == 7 && !memcmp(back.ring, h.ring, (size_t)h.tensors * h.length * sizeof(float)) &&
              strcmp(r.precision, "fp8") == 0,
          "state_fp8_history_round_trip", "steps %lld, precision '%s', or the ring differs", back.steps, r.precision);
    r = state_file_read(state_path, &k16, buf, buf, buf, p.total, NULL);
    check(r.step == 8 && strcmp(r.precision, "fp8") == 0, "state_fp8_continues_in_bf16", "step %d precision '%s'",
          r.step, r.precision);

    pr.step = 9;
    checkpoint_write(g_dir, &c, &k16, &pr, params, params, params, NULL);
    checkpoint_paths(g_dir, 9, model_path, state_path);
    back.steps = 5;
    r = state_file_read(state_path, &k8, buf, buf, buf, p.total, &back);
    check(back.steps == 0 && strcmp(r.precision, "bf16") == 0, "state_bf16_continues_in_fp8",
          "history steps %lld (want 0: empty), precision '%s'", back.steps, r.precision);

    Fp8ReadArgs a;
    checkpoint_paths(g_dir, 8, model_path, a.path);
    a.n = p.total;
    a.layers = c.num_layers;
    a.history = 8;
    Options o8b = fp8_options(8);
    a.keys = resume_keys_make(&o8b, &c, 4096);
    expect_child_error("state_fp8_settings_must_match", read_fp8_child, &a, "state_00000008.bin",
                       "was written with --fp8-amax-history 4 but this run has --fp8-amax-history 8");
    a.history = 4;
    a.keys = k8;
    if (truncate(a.path, file_size_or_neg(a.path) - 4) != 0) { perror("truncate"); }
    expect_child_error("state_fp8_truncated", read_fp8_child, &a, "state_00000008.bin", "is corrupt");
    fp8_history_free(&h);
    fp8_history_free(&back);
    free(buf);
    free(params);
}

// An amax history value no run records (negative, NaN, infinite) is refused when read: in a file whose checksum holds
// (what a run wrote, right or wrong), and in a version 1 file, which has no checksum to catch it.
static void test_fp8_amax_refused(void) {
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_floats(p.total, 24);
    Options o8 = fp8_options(4);
    Fp8ReadArgs a;
    a.keys = resume_keys_make(&o8, &c, 4096);
    a.n = p.total;
    a.layers = c.num_layers;
    a.history = 4;
    Fp8History h;
    fp8_history_init(&h, c.num_layers, 4);
    h.steps = 4;
    const float bad[] = {-1.0f, NAN, INFINITY};
    const char *names[] = {"state_fp8_negative_amax_refused", "state_fp8_nan_amax_refused",
                           "state_fp8_infinite_amax_refused"};
    char model_path[CKPT_PATH_LEN];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < h.tensors * h.length; k++) { h.ring[k] = 1.0f; }
        h.ring[5] = bad[i];
        TrainProgress pr = {30 + i, 0, 0, "", 0};
        checkpoint_write(g_dir, &c, &a.keys, &pr, params, params, params, &h);
        checkpoint_paths(g_dir, 30 + i, model_path, a.path);
        expect_child_error(names[i], read_fp8_child, &a, strrchr(a.path, '/') + 1, "amax history holds");
    }
    set_header_slot(a.path, SH_VERSION, STATE_FILE_VERSION_UNCHECKED);
    set_header_slot(a.path, SH_STATE_CHECKSUM, 0);
    set_header_slot(a.path, SH_MODEL_CHECKSUM, 0);
    expect_child_error("state_version1_bad_amax_refused", read_fp8_child, &a, strrchr(a.path, '/') + 1,
                       "amax history holds");
    fp8_history_free(&h);
    free(params);
}

static void touch(const char *name) {
    char p[CKPT_PATH_LEN];
    path_in_dir(p, name);
    fclose(fopen_check(p, "wb"));
}

static void find_latest_child(void *arg) {
    (void)arg;
    checkpoint_find_latest(g_dir);
}

static void test_find_latest(void) {
    clear_dir();
    check(checkpoint_find_latest(g_dir) == -1, "latest_empty_dir", "found a checkpoint in an empty folder");
    check(checkpoint_find_latest("/nonexistent/run") == -1, "latest_missing_dir", "found a checkpoint in no folder");
    touch("model_00000003.bin");
    touch("state_00000003.bin");
    touch("model_00000006.bin"); // interrupted between the model and the state file
    touch("state_00000009.bin.tmp.1234");
    touch("model_00000009.bin");
    touch("state_0000012.bin"); // not 8 digits
    int latest = checkpoint_find_latest(g_dir);
    check(latest == 3, "latest_ignores_incomplete", "latest %d, expected 3", latest);
    touch("state_00000006.bin");
    latest = checkpoint_find_latest(g_dir);
    check(latest == 6, "latest_highest_complete", "latest %d, expected 6", latest);
    // the latest state file without its model file (removed by hand): a damaged checkpoint, which resuming before it
    // would write over; an earlier one is passed by
    touch("state_00000004.bin");
    latest = checkpoint_find_latest(g_dir);
    check(latest == 6, "latest_passes_earlier_state_without_model", "latest %d, expected 6", latest);
    touch("state_00000010.bin");
    expect_child_error("latest_state_without_model_refused", find_latest_child, NULL, "model_00000010.bin",
                       "is missing");
}

typedef struct {
    ResumeKeys keys;
    size_t n;
} LatestArgs;

// What the trainer does with --resume 1: find the latest checkpoint, then check its state file.
static void check_latest_child(void *arg) {
    LatestArgs *a = (LatestArgs *)arg;
    char model[CKPT_PATH_LEN], state[CKPT_PATH_LEN];
    checkpoint_paths(g_dir, checkpoint_find_latest(g_dir), model, state);
    state_file_check(state, &a->keys, a->n);
}

// A FIFO as the latest state file is refused, not opened: the open would wait for a writer, forever.
static void test_latest_state_fifo(void) {
    clear_dir();
    GPTConfig c = tiny_config(2, 16);
    ParamLayout p;
    param_layout(&c, &p);
    Options o = run_options(1337, "cosine", 100);
    LatestArgs a = {resume_keys_make(&o, &c, 4096), p.total};
    char state[CKPT_PATH_LEN];
    touch("model_00000009.bin");
    path_in_dir(state, "state_00000009.bin");
    if (mkfifo(state, 0644) != 0) { perror("mkfifo"); }
    expect_child_error("latest_state_fifo_refused", check_latest_child, &a, "state_00000009.bin",
                       "is a FIFO (named pipe), not a regular file");
}

// Steps past 99,999,999 get nine digits (%08d) and are found like the others.
static void test_nine_digit_steps(void) {
    clear_dir();
    char model[CKPT_PATH_LEN], state[CKPT_PATH_LEN];
    checkpoint_paths(g_dir, 123456789, model, state);
    const char *name = strrchr(state, '/') + 1;
    touch("model_99999999.bin");
    touch("state_99999999.bin");
    touch(name);
    touch(strrchr(model, '/') + 1);
    touch("state_012345678.bin"); // not what %08d writes
    touch("model_012345678.bin");
    int latest = checkpoint_find_latest(g_dir);
    check(latest == 123456789 && checkpoint_step_of(name, "state_") == 123456789 &&
              checkpoint_step_of("state_9999999999.bin", "state_") == -1,
          "checkpoint_nine_digit_steps", "latest %d from '%s'", latest, name);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_model_round_trip();
    test_model_bf16_read();
    test_model_unpadded_and_longer();
    test_model_errors();
    test_model_llama();
    test_keys_block_defined();
    test_state_round_trip();
    test_state_mismatch();
    test_state_fp8();
    test_state_llama();
    test_checksum();
    test_corruption();
    test_header_corruption();
    test_version1();
    test_fp8_amax_refused();
    test_find_latest();
    test_nine_digit_steps();
    test_latest_state_fifo();
    clear_dir();
    rmdir(g_dir);
    return test_exit();
}
