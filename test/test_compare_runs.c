/*
 * test_compare_runs.c: test/bin/compare_runs (the multi-GPU tests' judge) on synthetic runs. Writes a reference
 * run (log.txt, model and state files as the trainer writes them) and variants of it, runs compare_runs on each
 * and checks its verdict: it must PASS on rounding-level differences, on noise in the key biases up to the
 * sign-flip bound and on as many stray elements as it allows, and FAIL, naming the right check and no other, on a
 * tensor that is off everywhere (a doubled update), one stray too many, an element beyond the bound, a q-bias
 * treated like a key bias, a loss or norm mismatch, a missing step, a validation loss mismatch, a missing validation,
 * different settings, and a NaN.
 * Needs test/bin/compare_runs (make test builds it); run from the repository root (test/run_tests.sh does).
 */
#include <sys/stat.h>

#include "../llmc/checkpoint.h"
#include "../llmc/logger.h"
#include "../llmc/rng.h"
#include "../llmc/schedule.h"
#include "test_util.h"

#define COMPARE_RUNS "test/bin/compare_runs"
#define STEPS 20
// The fp32 tolerances and stray fraction of test/run_mgpu_tests.sh.
#define LOSS_TOL "1e-5"
#define NORM_TOL "1e-5"
#define WEIGHT_TOL 1e-5
#define STRAY_FRACTION 1e-2
#define ROUNDING_NOISE 1e-7 // relative size of the "summation order" differences: well inside WEIGHT_TOL
#define LOSS_START 10.0     // the synthetic loss curve: LOSS_START - LOSS_SLOPE * step
#define LOSS_SLOPE 0.1
#define NORM_START 2.0
#define VAL_EVERY 5 // the synthetic runs validate at steps 5, 10, 15, 20
#define VAL_START 10.5
#define SEED 1234
enum { STREAM_INIT, STREAM_UPDATE, STREAM_NOISE }; // rng streams of the synthetic weights

static GPTConfig CFG; // GPT-2: maxT 32, V 200 (Vp 256), 2 layers, 4 heads, 64 channels (main sets it)
static ParamLayout g_layout;
static char g_tmp[64];
static float g_flip_bound;

typedef struct {
    float *params;
    double loss[STEPS + 1], norm[STEPS + 1], val[STEPS + 1];
    int logged_steps; // steps 1..logged_steps appear in the log
    int val_skipped;  // a step whose validation the log lacks (0: none)
    float lr;         // --lr of the settings
} Run;

static Run run_copy(const Run *r) {
    Run c = *r;
    c.params = (float *)malloc_check(g_layout.total * sizeof(float), "run params");
    memcpy(c.params, r->params, g_layout.total * sizeof(float));
    return c;
}

static Options run_options(const Run *r) {
    Options o;
    options_defaults(&o);
    o.steps = STEPS;
    o.lr = r->lr;
    o.warmup_steps = 2;
    return o;
}

// Writes r into g_tmp/name as the trainer would: log.txt, then the checkpoint at STEPS.
static void write_run(const char *name, const Run *r) {
    char dir[256], path[512];
    snprintf(dir, sizeof(dir), "%s/%s", g_tmp, name);
    if (mkdir(dir, 0755) != 0) { fail("cannot create '%s'", dir); }
    snprintf(path, sizeof(path), "%s/%s", dir, LOG_FILE_NAME);
    FILE *f = fopen_check(path, "w");
    Options o = run_options(r);
    for (int s = 1; s <= r->logged_steps; s++) {
        fprintf(f, "s:%d trl:%f\n", s, r->loss[s]);
        fprintf(f, "step %d/%d | loss %.6f | lr %.3e | norm %.4f | 1.0 ms | 1 tok/s\n", s, STEPS, r->loss[s],
                lr_at_step(&o, s - 1), r->norm[s]);
        if (s % VAL_EVERY == 0 && s != r->val_skipped) {
            fprintf(f, "s:%d tel:%f\n", s, r->val[s]);
            fprintf(f, "step %d/%d | val loss %.6f\n", s, STEPS, r->val[s]);
        }
    }
    fclose(f);
    ResumeKeys keys = resume_keys_make(&o, &CFG, (long long)o.batch_size * o.seq_len);
    TrainProgress pr = {STEPS, 0, 0, "", 0};
    checkpoint_write(dir, &CFG, &keys, &pr, r->params, r->params, r->params, NULL);
}

// Runs compare_runs of g_tmp/ref_name against g_tmp/name; checks its exit status and that its FAIL lines are
// exactly the one starting with `want_fail` (NULL: none). Shows its output, indented, when the verdict is wrong.
static void expect_against(const char *ref_name, const char *name, const char *want_fail) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s %s/%s %s/%s %d %s %s %g %g 2>&1", COMPARE_RUNS, g_tmp, ref_name, g_tmp, name, STEPS,
             LOSS_TOL, NORM_TOL, WEIGHT_TOL, STRAY_FRACTION);
    FILE *p = popen(cmd, "r");
    if (!p) { fail("cannot run '%s'", cmd); }
    static char out[1 << 16];
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    int st = pclose(p), rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    int fails = 0, wanted = 0;
    for (const char *line = out; *line;) {
        if (strncmp(line, "FAIL ", 5) == 0) {
            fails++;
            wanted += want_fail && strncmp(line + 5, want_fail, strlen(want_fail)) == 0;
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    int ok = want_fail ? rc == 1 && fails == 1 && wanted == 1 : rc == 0 && fails == 0;
    char check_name[128];
    snprintf(check_name, sizeof(check_name), "compare_runs %s: %s", name, want_fail ? want_fail : "passes");
    check(ok, check_name, "exit status %d, %d FAIL lines (%s); its output follows", rc, fails,
          want_fail ? "expected exactly one, naming that check" : "expected none");
    if (!ok) {
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) { printf("    | %s\n", line); }
    }
}

static void expect(const char *name, const char *want_fail) { expect_against("ref", name, want_fail); }

static float *tensor(Run *r, int t) { return r->params + g_layout.offset[t]; }

// The reference run of CFG's shape: initial weights plus an update of up to lr_sum per element; the synthetic loss,
// norm and validation curves.
static Run reference_run(double lr_sum) {
    Run r = {0};
    r.lr = 1e-3f;
    r.logged_steps = STEPS;
    r.params = (float *)malloc_check(g_layout.total * sizeof(float), "ref params");
    for (size_t i = 0; i < g_layout.total; i++) {
        double update = lr_sum * (2.0 * rng_uniform(SEED, STREAM_UPDATE, i) - 1.0);
        r.params[i] = (float)(INIT_STD * rng_normal(SEED, STREAM_INIT, i) + update);
    }
    for (int s = 1; s <= STEPS; s++) {
        r.loss[s] = LOSS_START - LOSS_SLOPE * s;
        r.norm[s] = NORM_START / s;
        r.val[s] = VAL_START - LOSS_SLOPE * s;
    }
    return r;
}

// r's weights with "summation order" noise: each times 1 + ROUNDING_NOISE u, u uniform in [-1, 1).
static Run with_rounding_noise(const Run *r) {
    Run c = run_copy(r);
    for (size_t i = 0; i < g_layout.total; i++) {
        c.params[i] *= (float)(1.0 + ROUNDING_NOISE * (2.0 * rng_uniform(SEED, STREAM_NOISE, i) - 1.0));
    }
    return c;
}
static size_t stray_allowed(int t) { return (size_t)ceil(STRAY_FRACTION * (double)g_layout.size[t]); }

int main(void) {
    CFG = config_gpt2(32, 200, 2, 4, 64);
    if (!file_exists(COMPARE_RUNS)) {
        check(0, "compare_runs built", "%s is missing: build it with `make test` and run from the repository root",
              COMPARE_RUNS);
        return test_exit();
    }
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/test_compare_runs.XXXXXX");
    if (!mkdtemp(g_tmp)) { fail("cannot create a temporary folder from '%s'", g_tmp); }
    param_layout(&CFG, &g_layout);
    size_t C = (size_t)CFG.channels;

    // The reference: initial weights plus an update of up to the summed learning rate per element.
    Run proto = {0};
    proto.lr = 1e-3f;
    Options o = run_options(&proto);
    float lr[STEPS];
    double lr_sum = 0;
    for (int s = 0; s < STEPS; s++) {
        lr[s] = lr_at_step(&o, s);
        lr_sum += lr[s];
    }
    g_flip_bound = (float)adam_flip_bound(lr, STEPS, o.beta1, o.beta2);
    Run ref = reference_run(lr_sum);
    write_run("ref", &ref);
    float *key0 = tensor(&ref, P_QKVB) + C; // layer 0's key biases in the reference

    // 1. rounding noise everywhere, noise up to 90% of the bound in every key bias, and as many strays (half the
    //    bound) in fcw as are allowed: PASS
    Run noisy = with_rounding_noise(&ref);
    for (int l = 0; l < CFG.num_layers; l++) {
        float *k = tensor(&noisy, P_QKVB) + (size_t)l * 3 * C + C;
        for (size_t i = 0; i < C; i++) { k[i] += 0.9f * g_flip_bound * (i % 2 ? 1.0f : -1.0f); }
    }
    for (size_t i = 0; i < stray_allowed(P_FCW); i++) { tensor(&noisy, P_FCW)[i * 7] += 0.5f * g_flip_bound; }
    write_run("noisy", &noisy);
    expect("noisy", NULL);

    // 2. fcw updated twice as far as the reference (a doubled gradient step): every element off, within the bound
    Run twice = run_copy(&noisy);
    float *w = tensor(&twice, P_FCW);
    for (size_t i = 0; i < g_layout.size[P_FCW]; i++) {
        w[i] += (float)(lr_sum * (2.0 * rng_uniform(SEED, STREAM_UPDATE, g_layout.offset[P_FCW] + i) - 1.0));
    }
    write_run("doubled_step", &twice);
    expect("doubled_step", "final weights fcw");

    // 3. one stray more than allowed
    Run strays = run_copy(&noisy);
    tensor(&strays, P_FCW)[1] += 0.5f * g_flip_bound;
    write_run("one_stray_too_many", &strays);
    expect("one_stray_too_many", "final weights fcw");

    // 4. one element beyond the sign-flip bound (a single stray is allowed, its size is not)
    Run far = run_copy(&noisy);
    tensor(&far, P_LN1W)[3] += 2.0f * g_flip_bound;
    write_run("beyond_bound", &far);
    expect("beyond_bound", "final weights ln1w");

    // 5. a key bias beyond the bound
    Run key = run_copy(&noisy);
    tensor(&key, P_QKVB)[C + 5] = key0[5] + 1.1f * g_flip_bound;
    write_run("key_bias_beyond_bound", &key);
    expect("key_bias_beyond_bound", "final weights qkvb");

    // 6. the query biases are not exempt: key-bias-sized noise there fails
    Run query = run_copy(&noisy);
    for (size_t i = 0; i < C; i++) { tensor(&query, P_QKVB)[i] += 0.9f * g_flip_bound; }
    write_run("query_bias_noise", &query);
    expect("query_bias_noise", "final weights qkvb");

    // 7. the loss of one step off by 1e-4 relative
    Run loss = run_copy(&noisy);
    loss.loss[STEPS / 2] *= 1.0 + 1e-4;
    write_run("loss_mismatch", &loss);
    expect("loss_mismatch", "loss at every step");

    // 8. gradients summed twice: AdamW hides it from the weights, the norm shows it
    Run norm = run_copy(&noisy);
    for (int s = 1; s <= STEPS; s++) { norm.norm[s] *= 2.0; }
    write_run("norm_doubled", &norm);
    expect("norm_doubled", "gradient norm at every step");

    // 9. a step missing from the log
    Run missing = run_copy(&noisy);
    missing.logged_steps = STEPS - 1;
    write_run("missing_step", &missing);
    expect("missing_step", "every step logged");

    // 10. the validation loss of one validation off by 1e-4 relative (another set of tokens)
    Run val = run_copy(&noisy);
    val.val[2 * VAL_EVERY] *= 1.0 + 1e-4;
    write_run("val_mismatch", &val);
    expect("val_mismatch", "validation loss");

    // 11. a validation missing from the log
    Run no_val = run_copy(&noisy);
    no_val.val_skipped = 3 * VAL_EVERY;
    write_run("val_missing", &no_val);
    expect("val_missing", "the same validations");

    // 12. another learning rate: not the same training run
    Run other = run_copy(&noisy);
    other.lr = 2e-3f;
    write_run("other_lr", &other);
    expect("other_lr", "same training settings");

    // 13. a NaN weight
    Run nan = run_copy(&noisy);
    tensor(&nan, P_WPE)[0] = NAN;
    write_run("nan_weight", &nan);
    expect("nan_weight", "final weights wpe");

    // 14. a Llama (no biases, no wpe, an untied lmhead): the tensors it lacks are skipped, the others judged alike
    CFG = config_default(ARCH_LLAMA, 32, 2, 4, 64);
    CFG.num_kv_heads = 1;
    CFG.vocab_size = 200;
    CFG.padded_vocab_size = padded_vocab(CFG.vocab_size);
    CFG.tied = 0;
    param_layout(&CFG, &g_layout);
    Run llama = reference_run(lr_sum), llama_noisy = with_rounding_noise(&llama);
    write_run("llama_ref", &llama);
    write_run("llama_noisy", &llama_noisy);
    expect_against("llama_ref", "llama_noisy", NULL);
    Run llama_head = run_copy(&llama_noisy);
    tensor(&llama_head, P_LMHEAD)[3] += 2.0f * g_flip_bound;
    write_run("llama_lmhead_beyond_bound", &llama_head);
    expect_against("llama_ref", "llama_lmhead_beyond_bound", "final weights lmhead");

    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) { printf("note: could not remove %s\n", g_tmp); }
    Run *runs[] = {&ref, &noisy, &twice, &strays, &far, &key, &query, &loss, &norm, &missing,
                   &val, &no_val, &other, &nan, &llama, &llama_noisy, &llama_head};
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) { free(runs[i]->params); }
    return test_exit();
}
