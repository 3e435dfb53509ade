/*
 * test_refstate.c: the reference state that `train_gpt_cpu --ref-out` writes, read back with refstate_read().
 *
 * On a tiny shard written here, the binary records a few steps of a tiny model; this test then checks that
 * the file holds what the options say (initial weights from --seed, the data loader's tokens in order, the
 * schedule's learning rates) and replays every step with the same CPU model code from the recorded weights
 * and tokens. The CPU build is deterministic (no reassociation, each element summed by one thread in one
 * order), so the replay must reproduce logits, loss, norm, gradients and weights bit for bit: exactly what the
 * GPU parity test then compares against with tolerances. Both architectures: GPT-2, and a Llama with grouped-query
 * attention, its own LM head and llama3 rope scaling. Last, a truncated or foreign file must be refused.
 */
#define _POSIX_C_SOURCE 200809L // mkdtemp

#include <sys/wait.h>

#include "../llmc/cpu_model.h"
#include "../llmc/dataloader.h"
#include "../llmc/options.h"
#include "../llmc/refstate.h"
#include "../llmc/schedule.h"
#include "test_util.h"

#define BINARY "./train_gpt_cpu"
#define SHARD_WINDOWS 40
#define TEST_SEED 7
#define TEST_STREAM 98u // the shard's tokens
#define SHARD_VOCAB 256 // the shard's tokens are below it: the Llama's small vocabulary keeps its files small

static char g_dir[] = "/tmp/test_refstate_XXXXXX";
static char g_shard[256], g_ref[256], g_log[256], g_out[256];

static void write_shard(void) {
    int T = 8;
    size_t n = (size_t)SHARD_WINDOWS * T + 1;
    uint16_t *tokens = (uint16_t *)malloc_check(n * sizeof(uint16_t), "shard tokens");
    for (size_t i = 0; i < n; i++) { tokens[i] = (uint16_t)rng_below(TEST_SEED, TEST_STREAM, i, SHARD_VOCAB); }
    shard_write(g_shard, tokens, n);
    free(tokens);
}

// The options of the reference run of a model (its own options in `model`, NULL-terminated), as argv; *o parsed
// from the same strings.
static int reference_args(const char *const *model, char **argv, Options *o) {
    static const char *fixed[] = {
        BINARY, "--depth", "2", "--width", "32", "--heads", "4", "--seq-len", "8", "--batch-size", "2",
        "--total-batch-tokens", "32", "--ref-steps", "4", "--steps", "10", "--warmup-steps", "2",
        "--sample-every", "0", "--val-every", "0", "--seed", "4242"};
    int argc = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) { argv[argc++] = (char *)fixed[i]; }
    for (const char *const *a = model; *a; a++) { argv[argc++] = (char *)*a; }
    argv[argc++] = "--train-data";
    argv[argc++] = g_shard;
    argv[argc++] = "--out-dir";
    argv[argc++] = g_out;
    argv[argc++] = "--ref-out";
    argv[argc++] = g_ref;
    if (options_parse(o, argc, argv)) { fail("reference options printed help"); }
    return argc;
}

static int run_binary(int argc, char **argv) {
    char cmd[4096];
    size_t len = 0;
    for (int i = 0; i < argc; i++) { len += (size_t)snprintf(cmd + len, sizeof(cmd) - len, "%s ", argv[i]); }
    snprintf(cmd + len, sizeof(cmd) - len, "> %s 2>&1", g_log);
    return system(cmd);
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void check_recorded_inputs(const char *name, const RefState *r, const Options *o) {
    const RefHeader *h = &r->h;
    GPTConfig c = options_model_config(o);
    ParamLayout layout;
    param_layout(&c, &layout);
    int header_ok = config_equal(&h->config, &c) && h->B == o->batch_size && h->T == o->seq_len && h->accum == 2 &&
                    h->steps == o->ref_steps && h->seed == o->seed && h->weight_decay == o->weight_decay &&
                    h->beta1 == o->beta1 && h->beta2 == o->beta2 && h->eps == o->eps && h->grad_clip == o->grad_clip;
    char n1[160];
    snprintf(n1, sizeof(n1), "%s: refstate header records the run's configuration", name);
    check(header_ok, n1, "header disagrees with the options");

    float *init = (float *)malloc_check(layout.total * sizeof(float), "initial params");
    param_init_host(&c, &layout, (uint64_t)o->seed, init);
    snprintf(n1, sizeof(n1), "%s: refstate params0 is the --seed initialization", name);
    check(same_bits(init, r->params0, layout.total * sizeof(float)), n1, "initial weights differ");
    free(init);

    DataLoader dl;
    dataloader_init(&dl, o->train_data, h->B, h->T, 0, 1, (long long)h->B * h->accum, (uint64_t)o->seed, 1,
                    c.vocab_size);
    size_t n = refstate_tokens(h);
    int *in = (int *)malloc_check(n * sizeof(int), "inputs"), *tg = (int *)malloc_check(n * sizeof(int), "targets");
    int tokens_ok = 1, lr_ok = 1;
    for (int s = 0; s < h->steps; s++) {
        for (int m = 0; m < h->accum; m++) {
            dataloader_next(&dl, in, tg);
            size_t at = ((size_t)s * h->accum + m) * n;
            tokens_ok &= same_bits(in, r->inputs + at, n * sizeof(int)) && same_bits(tg, r->targets + at, n * sizeof(int));
        }
        lr_ok &= r->lr[s] == lr_at_step(o, s);
    }
    snprintf(n1, sizeof(n1), "%s: refstate tokens are the data loader's, in order", name);
    check(tokens_ok, n1, "recorded tokens differ");
    snprintf(n1, sizeof(n1), "%s: refstate learning rates are the schedule's", name);
    check(lr_ok, n1, "recorded lr differs from lr_at_step");
    dataloader_free(&dl);
    free(in);
    free(tg);
}

// Replays every recorded step with the CPU model from params0 and compares bit for bit.
static void check_replay(const char *name, const RefState *r) {
    const RefHeader *h = &r->h;
    size_t n = refstate_tokens(h), P = (size_t)h->num_params, Vp = (size_t)h->config.padded_vocab_size;
    CpuModel *m = cpu_model_create(&h->config, h->B, h->T);
    memcpy(m->params, r->params0, P * sizeof(float));
    float loss_scale = 1.0f / (float)((double)n * h->accum);
    int logits_ok = 0, grads_ok = 0, stats_ok = 1, params_ok = 1;
    for (int s = 0; s < h->steps; s++) {
        cpu_model_zero_grad(m);
        double loss = 0.0;
        for (int a = 0; a < h->accum; a++) {
            size_t at = ((size_t)s * h->accum + a) * n;
            loss += (float)cpu_model_forward(m, r->inputs + at, r->targets + at, h->B, h->T);
            if (s == 0 && a == 0) { logits_ok = same_bits(m->acts.logits, r->logits0, n * Vp * sizeof(float)); }
            cpu_model_backward(m, loss_scale);
        }
        if (s == 0) { grads_ok = same_bits(m->grads, r->grads0, P * sizeof(float)); }
        UpdateArgs u = {r->lr[s], h->weight_decay, h->beta1, h->beta2, h->eps, h->grad_clip, s + 1};
        float norm = cpu_model_update(m, &u);
        stats_ok &= (float)(loss / h->accum) == r->loss[s] && norm == r->norm[s];
        if (s < refstate_param_steps(h)) { params_ok &= same_bits(m->params, r->params_after + (size_t)s * P, P * sizeof(float)); }
    }
    params_ok &= same_bits(m->params, r->params_final, P * sizeof(float));
    char n1[160];
    snprintf(n1, sizeof(n1), "%s: replay reproduces the recorded step-0 logits exactly", name);
    check(logits_ok, n1, "logits differ");
    snprintf(n1, sizeof(n1), "%s: replay reproduces the recorded step-0 gradients exactly", name);
    check(grads_ok, n1, "gradients differ");
    snprintf(n1, sizeof(n1), "%s: replay reproduces every step's loss and gradient norm exactly", name);
    check(stats_ok, n1, "loss or norm differs");
    snprintf(n1, sizeof(n1), "%s: replay reproduces the recorded weights after each step and at the end exactly",
             name);
    check(params_ok, n1, "weights differ");
    cpu_model_free(m);
}

// Runs refstate_read on path in a child (it exits on a bad file); returns 1 if the child failed.
static int read_is_refused(const char *path) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) { _exit(0); }
        refstate_free(refstate_read(path));
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) != 0;
}

static void copy_prefix(const char *from, const char *to, long long bytes) {
    FILE *in = fopen_check(from, "rb"), *out = fopen_check(to, "wb");
    char buf[65536];
    while (bytes > 0) {
        size_t want = bytes < (long long)sizeof(buf) ? (size_t)bytes : sizeof(buf);
        fread_check(buf, 1, want, in, from);
        fwrite_check(buf, 1, want, out, to);
        bytes -= (long long)want;
    }
    fclose(in);
    fclose(out);
}

static void check_refuses_bad_files(void) {
    char bad[300];
    snprintf(bad, sizeof(bad), "%s/bad.bin", g_dir);
    copy_prefix(g_ref, bad, file_size_or_neg(g_ref) - 4);
    check(read_is_refused(bad), "refstate_read refuses a truncated file", "a truncated file was read");
    check(read_is_refused(g_shard), "refstate_read refuses a file of another kind", "a data shard was read");
}

// Writes the reference state of one model with the binary, reads it back and checks it; returns whether it was
// written (g_ref holds it).
static int test_reference(const char *name, const char *const *model) {
    snprintf(g_ref, sizeof(g_ref), "%s/ref_%s.bin", g_dir, name);
    snprintf(g_log, sizeof(g_log), "%s/log_%s.txt", g_dir, name);
    snprintf(g_out, sizeof(g_out), "%s/run_%s", g_dir, name);
    char *argv[64];
    Options o;
    int argc = reference_args(model, argv, &o);
    int rc = run_binary(argc, argv);
    char n1[160];
    snprintf(n1, sizeof(n1), "%s: " BINARY " --ref-out writes the reference state", name);
    check(rc == 0 && file_exists(g_ref), n1, "exit status %d (build it with `make train_gpt_cpu`; its output is in %s)",
          rc, g_log);
    if (rc != 0 || !file_exists(g_ref)) { return 0; }
    RefState *r = refstate_read(g_ref);
    check_recorded_inputs(name, r, &o);
    check_replay(name, r);
    refstate_free(r);
    return 1;
}

int main(void) {
    if (!mkdtemp(g_dir)) { fail("cannot create a scratch folder"); }
    snprintf(g_shard, sizeof(g_shard), "%s/shard_000000.bin", g_dir);
    write_shard();
    static const char *const llama[] = {"--arch", "llama", "--kv-heads", "2", "--vocab-size", "256",
                                        "--rope-scaling", "llama3", "--rope-original-max-pos", "16", NULL};
    static const char *const gpt2[] = {NULL};
    if (test_reference("llama", llama) && test_reference("gpt2", gpt2)) { check_refuses_bad_files(); }
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (system(cmd) != 0) { printf("could not remove %s\n", g_dir); }
    return test_exit();
}
