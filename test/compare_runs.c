/*
 * compare_runs.c: one training run against another of the same settings, for the multi-GPU tests
 * (test/run_mgpu_tests.sh): a parallel layout against the one-GPU run of the same seed.
 *
 *   test/bin/compare_runs REF_DIR RUN_DIR STEPS LOSS_TOL NORM_TOL WEIGHT_TOL STRAY_FRACTION
 *
 * Both runs must have logged every step (--log-every 1) and written their checkpoint at STEPS (--save 1, or
 * --checkpoint-every dividing STEPS). Prints "PASS name" / "FAIL name: why" lines (test/test_util.h), one line of
 * figures per weight tensor, then a summary line
 *   parity RUN_DIR: loss L (step s) | norm N (step s) | weights W (tensor) | beyond tol K | PASS|FAIL
 * (with "| val V (step s)" before the verdict where the reference validated) and exits non-zero on any failure.
 *
 * What is compared, and why so:
 * - Settings: the state files' settings that define the training run (model shape, tokens per step, seed,
 *   precision, schedule, AdamW) must be equal; the micro-batch may differ (layouts split the batch differently).
 * - Loss: the "s:N trl:X" line of every step, |run - ref| / |ref| <= LOSS_TOL. Validation loss, where the
 *   reference validated ("s:N tel:X"): the run must have validated at the same steps, each within LOSS_TOL too.
 * - Gradient norm: the "norm X" of every step's console line, |run - ref| <= NORM_TOL |ref| + NORM_PRINT_UNIT.
 *   AdamW's step does not depend on the gradient's scale, so a reduction that sums twice (or over the wrong
 *   group of ranks, or with a wrong 1/N) leaves the weights nearly as they should be: the norm shows it.
 * - Final weights (the model file at STEPS), per tensor, with test_util.h's judge_updated. Only the summation
 *   order differs between the runs, and AdamW turns a gradient that is zero up to rounding into a step of up to
 *   lr of the rounding's sign, so elementwise equality cannot be asked everywhere:
 *   (a) the key-bias slice of qkvb (per layer, elements [C, 2C) of the 3C biases) has an exactly-zero gradient
 *       in exact arithmetic (softmax ignores the constant q.b_k added to a row of scores): its values are noise
 *       in any implementation, held only to the sign-flip bound, sum over steps t of 2 lr_t adam_step_bound(t)
 *       (test_util.h; lr_t from the schedule in the reference's state file, exactly as the trainer computes it);
 *   (b) every other element must be within WEIGHT_TOL * max|ref| of the tensor, except at most
 *       ceil(STRAY_FRACTION * n) of them (elements whose gradient passed near zero at some step, where the two
 *       runs' rounding noise picked different signs), and those too within the sign-flip bound + tolerance.
 *   A broken reduction (gradients not summed, one group skipped, wrong data on a rank) changes the direction of
 *   the update of most elements of the tensors concerned, far beyond any stray fraction, and fails.
 *   Per tensor it prints: "strict", the largest error of the held elements within tolerance; how many held
 *   elements went beyond tolerance (and how many may); "worst", the largest error of all held elements.
 */
#include "../llmc/checkpoint.h"
#include "../llmc/logger.h"
#include "../llmc/schedule.h"
#include "test_util.h"

#define MAX_STEPS 100000
// The console line prints the norm as "%.4f": two printed norms of the same value differ by up to one unit.
#define NORM_PRINT_UNIT 1e-4
// A tolerance or fraction argument above this is a typo, not a tolerance.
#define MAX_TOL 1.0

// The state-file settings that make two runs the same training run (checkpoint.h's resume keys, less
// --batch-size and --keep-gelu-layers, which a layout may change without changing the computed values).
static const char *const SAME_RUN_KEYS[] = {
    "layers", "heads", "channels", "vocabulary size", "padded vocabulary size", "max sequence length",
    "tokens per step", "--seed", "--seq-len", "--precision", "--lr-schedule", "--lr", "--final-lr-frac",
    "--warmup-steps", "--steps", "--weight-decay", "--beta1", "--beta2", "--eps", "--grad-clip"};
#define NUM_SAME_RUN_KEYS ((int)(sizeof(SAME_RUN_KEYS) / sizeof(SAME_RUN_KEYS[0])))

// The options the learning rate of a step and the AdamW bound depend on.
static const char *const SCHEDULE_KEYS[] = {"lr", "lr-schedule", "warmup-steps", "final-lr-frac", "steps", "beta1",
                                            "beta2"};
#define NUM_SCHEDULE_KEYS ((int)(sizeof(SCHEDULE_KEYS) / sizeof(SCHEDULE_KEYS[0])))

typedef struct {
    double *loss, *norm, *val; // [1..steps]; NaN where the log has no such line
    unsigned char *validated;  // [1..steps]: the log has a validation of that step
    int have_loss, have_norm, have_val;
} RunLog;

// The train loss and the gradient norm of steps 1..steps from dir's log; a resumed log repeats steps, and the
// last line of a step wins (it is the one the final weights descend from).
static RunLog read_log(const char *dir, int steps) {
    RunLog r;
    r.loss = (double *)malloc_check((size_t)(steps + 1) * sizeof(double), "losses");
    r.norm = (double *)malloc_check((size_t)(steps + 1) * sizeof(double), "norms");
    r.val = (double *)malloc_check((size_t)(steps + 1) * sizeof(double), "validation losses");
    r.validated = (unsigned char *)calloc_check((size_t)steps + 1, 1, "validated steps");
    for (int s = 0; s <= steps; s++) { r.loss[s] = r.norm[s] = r.val[s] = NAN; }
    r.have_loss = r.have_norm = r.have_val = 0;
    char path[CKPT_PATH_LEN];
    snprintf(path, sizeof(path), "%s/%s", dir, LOG_FILE_NAME);
    FILE *f = fopen(path, "r");
    if (!f) { return r; }
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        int s;
        double loss, lr, norm;
        if (sscanf(line, "s:%d trl:%lf", &s, &loss) == 2 && s >= 1 && s <= steps) {
            r.have_loss += isnan(r.loss[s]);
            r.loss[s] = loss;
        } else if (sscanf(line, "s:%d tel:%lf", &s, &loss) == 2 && s >= 1 && s <= steps) {
            r.have_val += !r.validated[s];
            r.validated[s] = 1;
            r.val[s] = loss;
        } else if (sscanf(line, "step %d/%*d | loss %lf | lr %lf | norm %lf", &s, &loss, &lr, &norm) == 4 && s >= 1 &&
                   s <= steps) {
            r.have_norm += isnan(r.norm[s]);
            r.norm[s] = norm;
        }
    }
    fclose(f);
    return r;
}

// The settings block of dir's state file at `step` into *keys; 0 (with a FAIL line) if there is none.
static int read_settings(const char *dir, int step, ResumeKeys *keys) {
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(dir, step, model_path, state_path);
    FILE *f = fopen(state_path, "rb");
    int64_t hd[STATE_HEADER_INTS];
    int ok = f && fread(hd, sizeof(int64_t), STATE_HEADER_INTS, f) == STATE_HEADER_INTS &&
             hd[SH_MAGIC] == STATE_FILE_MAGIC && hd[SH_VERSION] == STATE_FILE_VERSION &&
             hd[SH_KEYS_BYTES] == STATE_KEYS_BYTES && fread(keys->text, 1, STATE_KEYS_BYTES, f) == STATE_KEYS_BYTES;
    if (f) { fclose(f); }
    char name[CKPT_PATH_LEN + 32];
    snprintf(name, sizeof(name), "state file %s", state_path);
    check(ok, name, "missing or not a state file of this version; run with --save 1 (a checkpoint at the last step)");
    keys->text[STATE_KEYS_BYTES - 1] = '\0';
    return ok;
}

// The learning rate of steps 0..steps-1 and beta1, beta2, from the reference's settings (schedule.h's lr_at_step,
// as the trainer computes it). A constant schedule records no --steps (a run may be extended): steps is used.
static float *schedule_of(const ResumeKeys *keys, int steps, double *beta1, double *beta2) {
    Options o;
    options_defaults(&o);
    o.steps = steps;
    for (int i = 0; i < NUM_SCHEDULE_KEYS; i++) {
        char name[64], value[OPT_STR_LEN];
        snprintf(name, sizeof(name), "--%s", SCHEDULE_KEYS[i]);
        if (resume_keys_get(keys, name, value, sizeof(value))) {
            option_set(&o, option_find(SCHEDULE_KEYS[i], strlen(SCHEDULE_KEYS[i])), value);
        }
    }
    float *lr = (float *)malloc_check((size_t)steps * sizeof(float), "learning rates");
    for (int s = 0; s < steps; s++) { lr[s] = lr_at_step(&o, s); }
    *beta1 = o.beta1;
    *beta2 = o.beta2;
    return lr;
}

// The model file of dir at step, or NULL (with a FAIL line) if there is none.
static float *read_model(const char *dir, int step, GPTConfig *c) {
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(dir, step, model_path, state_path);
    char name[CKPT_PATH_LEN + 32];
    snprintf(name, sizeof(name), "model file %s", model_path);
    int ok = file_exists(model_path);
    check(ok, name, "missing; run with --save 1 (a checkpoint at the last step)");
    if (!ok) { return NULL; }
    *c = model_file_header(model_path).config;
    ParamLayout p;
    param_layout(c, &p);
    float *params = (float *)malloc_check(p.total * sizeof(float), "model parameters");
    model_file_read(model_path, c, params);
    return params;
}

// A tolerance argument: a number in [0, MAX_TOL]; exits with a usage line otherwise.
static double tol_arg(const char *what, const char *text) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v >= 0 && v <= MAX_TOL)) {
        fprintf(stderr, "compare_runs: %s '%s' is not a number in [0, %g]\n", what, text, MAX_TOL);
        exit(2);
    }
    return v;
}

// Step-by-step comparison of one logged series, at the steps `at` marks (NULL: every step; at least one); returns the
// worst relative error and its step.
static double compare_series(const char *what, const double *ref, const double *run, const unsigned char *at,
                             int steps, double tol, double abs_allow, int *worst_step) {
    double worst = 0, worst_excess = 0;
    *worst_step = 0;
    int excess_step = 0;
    for (int s = 1; s <= steps; s++) {
        if (at && !at[s]) { continue; }
        if (*worst_step == 0) { *worst_step = s; }
        double scale = fabs(ref[s]) > 0 ? fabs(ref[s]) : 1.0, d = fabs(run[s] - ref[s]);
        if (!(d / scale <= worst)) {
            worst = d / scale;
            *worst_step = s;
        }
        double excess = (d - abs_allow) / scale - tol; // > 0: beyond tolerance
        if (!(excess <= worst_excess)) {
            worst_excess = excess;
            excess_step = s;
        }
    }
    int s = excess_step ? excess_step : *worst_step;
    check(excess_step == 0, what, "step %d: %.6f vs %.6f, rel %.3e > %.1e", s, run[s], ref[s],
          fabs(run[s] - ref[s]) / (fabs(ref[s]) > 0 ? fabs(ref[s]) : 1.0), tol);
    return worst;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s REF_DIR RUN_DIR STEPS LOSS_TOL NORM_TOL WEIGHT_TOL STRAY_FRACTION\n", argv[0]);
        return 2;
    }
    const char *ref_dir = argv[1], *run_dir = argv[2];
    char *end = NULL;
    long steps_arg = strtol(argv[3], &end, 10);
    if (end == argv[3] || *end != '\0' || steps_arg < 1 || steps_arg > MAX_STEPS) {
        fprintf(stderr, "compare_runs: STEPS '%s' is not an integer in [1, %d]\n", argv[3], MAX_STEPS);
        return 2;
    }
    int steps = (int)steps_arg;
    double loss_tol = tol_arg("LOSS_TOL", argv[4]), norm_tol = tol_arg("NORM_TOL", argv[5]);
    double weight_tol = tol_arg("WEIGHT_TOL", argv[6]), fraction = tol_arg("STRAY_FRACTION", argv[7]);

    // 1. settings
    ResumeKeys ref_keys, run_keys;
    int have_keys = read_settings(ref_dir, steps, &ref_keys);
    have_keys = read_settings(run_dir, steps, &run_keys) && have_keys;
    if (have_keys) {
        char diff[1024] = "";
        for (int i = 0; i < NUM_SAME_RUN_KEYS; i++) {
            char a[OPT_STR_LEN] = "(not recorded)", b[OPT_STR_LEN] = "(not recorded)";
            resume_keys_get(&ref_keys, SAME_RUN_KEYS[i], a, sizeof(a));
            resume_keys_get(&run_keys, SAME_RUN_KEYS[i], b, sizeof(b));
            if (strcmp(a, b) != 0) {
                size_t used = strlen(diff);
                format_into(diff + used, sizeof(diff) - used, " %s %s vs %s;", SAME_RUN_KEYS[i], b, a);
            }
        }
        check(diff[0] == '\0', "same training settings",
              "the runs differ in%s compare runs of the same model, batch, seed and schedule", diff);
    }

    // 2. the logged loss and gradient norm of every step
    RunLog ref = read_log(ref_dir, steps), run = read_log(run_dir, steps);
    int logged = ref.have_loss == steps && run.have_loss == steps && ref.have_norm == steps && run.have_norm == steps;
    check(logged, "every step logged",
          "%s has the loss of %d and the norm of %d of %d steps, %s has %d and %d; run both with --log-every 1 for "
          "at least %d steps",
          ref_dir, ref.have_loss, ref.have_norm, steps, run_dir, run.have_loss, run.have_norm, steps);
    double worst_loss = NAN, worst_norm = NAN;
    int loss_step = 0, norm_step = 0;
    if (logged) {
        worst_loss = compare_series("loss at every step", ref.loss, run.loss, NULL, steps, loss_tol, 0.0, &loss_step);
        worst_norm = compare_series("gradient norm at every step", ref.norm, run.norm, NULL, steps, norm_tol,
                                    NORM_PRINT_UNIT, &norm_step);
    }
    double worst_val = NAN;
    int val_step = 0;
    if (logged && ref.have_val > 0) { // runs of the same settings that validated: the same steps, the same tokens
        int first_other = 0;
        for (int s = steps; s >= 1; s--) { first_other = ref.validated[s] != run.validated[s] ? s : first_other; }
        check(first_other == 0, "the same validations", "at step %d, %s %s and %s %s; validate both with the same "
              "--val-every", first_other, ref_dir, first_other && ref.validated[first_other] ? "validated" : "did not",
              run_dir, first_other && run.validated[first_other] ? "validated" : "did not");
        if (first_other == 0) {
            worst_val = compare_series("validation loss", ref.val, run.val, ref.validated, steps, loss_tol, 0.0,
                                       &val_step);
        }
    }

    // 3. the final weights
    GPTConfig ca, cb;
    float *a = read_model(ref_dir, steps, &ca), *b = read_model(run_dir, steps, &cb);
    double worst_weight = NAN;
    int worst_tensor = 0;
    size_t total_beyond = 0;
    if (a && b) {
        check(config_equal(&ca, &cb), "same model shape", "the two model files differ in shape");
    }
    if (a && b && config_equal(&ca, &cb) && have_keys) {
        double beta1, beta2;
        float *lr = schedule_of(&ref_keys, steps, &beta1, &beta2);
        double flip_bound = adam_flip_bound(lr, steps, beta1, beta2);
        free(lr);
        printf("sign-flip bound after %d steps: %.4e (beta1 %g, beta2 %g)\n", steps, flip_bound, beta1, beta2);
        ParamLayout p;
        param_layout(&ca, &p);
        size_t C = (size_t)ca.channels;
        worst_weight = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            const float *x = b + p.offset[t], *y = a + p.offset[t];
            size_t n = p.size[t];
            if (n == 0) { continue; } // a tensor the model does not have (Llama's biases, a tied lmhead)
            unsigned char *key_bias = NULL;
            double key_diff = 0;
            if (t == P_QKVB) { // per layer: 3C biases, q then k then v
                key_bias = (unsigned char *)calloc(n, 1);
                if (!key_bias) { fail("out of memory for %zu key-bias flags", n); }
                for (size_t l = 0; l < (size_t)ca.num_layers; l++) {
                    for (size_t i = l * 3 * C + C; i < l * 3 * C + 2 * C; i++) {
                        key_bias[i] = 1;
                        double d = fabs((double)x[i] - (double)y[i]);
                        if (!(d <= key_diff)) { key_diff = d; }
                    }
                }
            }
            UpdateVerdict v = judge_updated(x, y, n, key_bias, weight_tol, fraction, flip_bound);
            free(key_bias);
            char name[96];
            snprintf(name, sizeof(name), "final weights %s", PARAM_NAMES[t]);
            check(v.ok, name,
                  "%zu of %zu elements beyond tol %.1e (%zu allowed), %zu beyond the sign-flip bound %.3e; strict %.3e, "
                  "worst %.3e, max diff %.3e",
                  v.held_beyond, n, weight_tol, v.allowed, v.beyond_bound, flip_bound, v.strict, v.held, v.max_diff);
            printf("  %-8s strict %.2e | beyond tol %zu of %zu (%zu allowed) | worst %.2e", PARAM_NAMES[t], v.strict,
                   v.held_beyond, n, v.allowed, v.held);
            if (t == P_QKVB) {
                printf(" | key bias max diff %.2e (%.0f%% of the bound)", key_diff,
                       flip_bound > 0 ? 100.0 * key_diff / flip_bound : 0.0);
            }
            printf("\n");
            total_beyond += v.held_beyond;
            if (!(v.strict <= worst_weight)) {
                worst_weight = v.strict;
                worst_tensor = t;
            }
        }
    }
    char val[64] = "";
    if (ref.have_val > 0) { snprintf(val, sizeof(val), " | val %.2e (step %d)", worst_val, val_step); }
    printf("parity %s: loss %.2e (step %d) | norm %.2e (step %d) | weights %.2e (%s) | beyond tol %zu%s | %s\n",
           run_dir, worst_loss, loss_step, worst_norm, norm_step, worst_weight, PARAM_NAMES[worst_tensor], total_beyond,
           val, g_test_failures ? "FAIL" : "PASS");
    free(a);
    free(b);
    RunLog *logs[] = {&ref, &run};
    for (int i = 0; i < 2; i++) {
        free(logs[i]->loss);
        free(logs[i]->norm);
        free(logs[i]->val);
        free(logs[i]->validated);
    }
    return test_exit();
}
