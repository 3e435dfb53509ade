/*
 * test_trainer.c: the shared training loop (llmc/trainer.h) over a toy model, on tiny shards written here.
 * The toy is deterministic and cheap (one weight per token predicts the next token; AdamW as dev/DESIGN.md
 * says), so these checks are about the loop, not a model:
 * - a run writes its checkpoints, log lines and samples; a run interrupted after checkpoint 3 and resumed
 *   logs the same losses and ends with byte-identical model and state files;
 * - metrics.jsonl holds one record a step and a validation, with log.txt's losses; a run interrupted after step
 *   5 (its records up to there, the last one cut short) and resumed from checkpoint 3 holds each step once, with
 *   the uninterrupted run's values (all but the timings), and draws the same loss.svg; a run started again over an
 *   attempt that never checkpointed starts its metrics anew; a diverged step's record holds null, not inf;
 * - a lock file that is a symbolic or hard link to a user's file is refused, and the file left as it was;
 * - a folder that holds a run is refused without --resume 1, and nothing in it changes; --resume 1 without
 *   a checkpoint, a checkpoint of other settings, and --init-from a model of another shape are refused with
 *   one line; resuming a finished run does nothing; --init-from loads the file's weights, and one with
 *   non-finite weights is refused before the out-dir is made.
 * - a damaged or corrupt checkpoint (a state file without its model file, a flipped byte in either file) is refused
 *   by --resume 1 and auto before anything in the folder is touched: log, metrics and state files stay as they
 *   were, and no lock file or picture appears; a version 1 state file resumes, saying it is unverified.
 * - a folder whose lock a live process holds is refused as in use, naming the process, in every --resume mode,
 *   even where its files look like a run that stopped.
 * - a folder with an attempt that stopped before its first checkpoint (its log only): refused without --resume,
 *   started again with --resume 1 (saying so) to the uninterrupted run's files; --resume auto starts a new run
 *   in an empty folder and continues one that has checkpoints.
 * - one rank of a two-rank job (a fake launcher whose sum over ranks doubles, as if the peer had the same
 *   values): rank 1 creates and prints nothing; both read their own stride of the batch, so the mean of their
 *   first losses is the one-process loss of the same global batch; --zero 1 is accepted.
 * - preemption: a signal at points inside a step (raised by the toy) and at random times (sent by this process)
 *   stops the run with a checkpoint and EXIT_PREEMPTED; runs continued with --resume auto until done end with the
 *   uninterrupted run's files, byte for byte, and its log, metrics and picture (a stopped step that validates
 *   records its validation); a second signal exits at once; a peer's signal stops this rank too.
 * Each run is a child process (train_main exits on errors), stdout kept in the scratch folder.
 */
#include "../llmc/init.h"
#include "../llmc/trainer.h"
#include "test_util.h"

#define RUN_TIMEOUT_S 60.0
#define TRAIN_WINDOWS 64
#define VAL_WINDOWS 8
#define SEQ_LEN 8
#define MAX_RUN_ARGS 64

static char g_dir[] = "/tmp/test_trainer_XXXXXX";

// ----------------------------------------------------------------------------------------------------------
// the toy model: loss of token i = 0.5 * (wte[input_i * C] - target_i / V)^2

typedef struct {
    GPTConfig c;
    size_t n;
    float *params, *grads, *m, *v;
    UpdateArgs last; // what the last micro-step said the update would get (ModelOps::forward_backward)
    int has_last;
} Toy;

static float toy_target(const Toy *t, int token) { return (float)token / (float)t->c.vocab_size; }

// The sum of the losses of tokens [0, n) (gradients of scale x that sum added with backward).
static double toy_loss_sum(Toy *t, const int *in, const int *tg, int n, float scale, int backward) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)in[i] * (size_t)t->c.channels;
        float d = t->params[k] - toy_target(t, tg[i]);
        sum += 0.5 * (double)d * d;
        if (backward) { t->grads[k] += scale * d; }
    }
    return sum;
}

static void toy_zero_grad(void *ctx) {
    Toy *t = (Toy *)ctx;
    memset(t->grads, 0, t->n * sizeof(float));
}

// Signals the toy raises at its calls, as if they arrived there (preemption tests): the n-th call of forward_backward
// (or update) raises g_raise_count signals, for n = g_raise_at_fb (g_raise_at_update); 0 never.
static int g_raise_at_fb = 0, g_raise_at_update = 0, g_raise_count = 1;
static int g_calls_fb = 0, g_calls_update = 0;

static void toy_maybe_raise(int *calls, int at) {
    if (++*calls != at) { return; }
    for (int i = 0; i < g_raise_count; i++) { raise(SIGTERM); }
}

// The trainer keeps ModelOps' promise about the last micro-step, or the toy ends the run as the GPU model would.
static float toy_forward_backward(void *ctx, const int *in, const int *tg, int B, int T, float scale,
                                  const UpdateArgs *last) {
    Toy *t = (Toy *)ctx;
    toy_maybe_raise(&g_calls_fb, g_raise_at_fb);
    if (last && t->has_last) { fail("toy: two last micro-steps without an update between them"); }
    if (last) { t->last = *last; }
    t->has_last = last != NULL;
    return (float)(toy_loss_sum(t, in, tg, B * T, scale, 1) / (B * T));
}

static int g_eval_calls = 0; // forwards of validation, counted by test_validation_over_ranks

static double toy_eval_loss(void *ctx, const int *in, const int *tg, int B, int T, int rows) {
    (void)B;
    g_eval_calls++;
    return toy_loss_sum((Toy *)ctx, in, tg, rows * T, 0.0f, 0);
}

static float toy_update(void *ctx, const UpdateArgs *a) {
    Toy *t = (Toy *)ctx;
    toy_maybe_raise(&g_calls_update, g_raise_at_update);
    if (!t->has_last || memcmp(&t->last, a, sizeof(*a)) != 0) {
        fail("toy: the update's arguments are not the ones the last micro-step was given");
    }
    t->has_last = 0;
    double sq = 0.0;
    for (size_t i = 0; i < t->n; i++) { sq += (double)t->grads[i] * t->grads[i]; }
    float norm = (float)sqrt(sq);
    float clip = (a->grad_clip > 0 && norm > a->grad_clip) ? a->grad_clip / norm : 1.0f;
    float bc1 = 1.0f - powf(a->beta1, (float)a->t), bc2 = 1.0f - powf(a->beta2, (float)a->t);
    for (size_t i = 0; i < t->n; i++) {
        float g = t->grads[i] * clip;
        t->m[i] = a->beta1 * t->m[i] + (1 - a->beta1) * g;
        t->v[i] = a->beta2 * t->v[i] + (1 - a->beta2) * g * g;
        t->params[i] -= a->lr * ((t->m[i] / bc1) / (sqrtf(t->v[i] / bc2) + a->eps) + a->weight_decay * t->params[i]);
    }
    return norm;
}

static void toy_logits_at(void *ctx, const int *tokens, int T, int pos, float *out) {
    Toy *t = (Toy *)ctx;
    (void)T;
    for (int v = 0; v < t->c.padded_vocab_size; v++) {
        out[v] = 100.0f * t->params[(size_t)v * t->c.channels + 1] + (v == tokens[pos] ? 1.0f : 0.0f);
    }
}

static void toy_get_params(void *ctx, float *out) { memcpy(out, ((Toy *)ctx)->params, ((Toy *)ctx)->n * 4); }
static void toy_set_params(void *ctx, const float *in) { memcpy(((Toy *)ctx)->params, in, ((Toy *)ctx)->n * 4); }

static void toy_get_opt_state(void *ctx, float *m, float *v) {
    Toy *t = (Toy *)ctx;
    memcpy(m, t->m, t->n * sizeof(float));
    memcpy(v, t->v, t->n * sizeof(float));
}

static void toy_set_opt_state(void *ctx, const float *m, const float *v) {
    Toy *t = (Toy *)ctx;
    memcpy(t->m, m, t->n * sizeof(float));
    memcpy(t->v, v, t->n * sizeof(float));
}

static void toy_destroy(void *ctx) {
    Toy *t = (Toy *)ctx;
    free(t->params);
    free(t->grads);
    free(t->m);
    free(t->v);
    free(t);
}

static ModelOps toy_factory(const GPTConfig *c, const Options *o, const Mesh *mesh, int B, int T) {
    (void)mesh;
    (void)B;
    (void)T;
    Toy *t = (Toy *)calloc_check(1, sizeof(Toy), "toy");
    t->c = *c;
    ParamLayout p;
    param_layout(c, &p);
    t->n = p.total;
    t->params = (float *)malloc_check(t->n * sizeof(float), "toy params");
    t->grads = (float *)calloc_check(t->n, sizeof(float), "toy grads");
    t->m = (float *)calloc_check(t->n, sizeof(float), "toy m");
    t->v = (float *)calloc_check(t->n, sizeof(float), "toy v");
    param_init_host(c, &p, (uint64_t)o->seed, t->params);
    ModelOps ops;
    memset(&ops, 0, sizeof(ops));
    ops.ctx = t;
    ops.device_name = "toy";
    ops.zero_grad = toy_zero_grad;
    ops.forward_backward = toy_forward_backward;
    ops.update = toy_update;
    ops.eval_loss = toy_eval_loss;
    ops.logits_at = toy_logits_at;
    ops.get_params = toy_get_params;
    ops.set_params = toy_set_params;
    ops.get_opt_state = toy_get_opt_state;
    ops.set_opt_state = toy_set_opt_state;
    ops.destroy = toy_destroy;
    return ops;
}

// ----------------------------------------------------------------------------------------------------------
// runs

typedef struct {
    int argc;
    LaunchFn launch;
    char *argv[MAX_RUN_ARGS];
    char storage[MAX_RUN_ARGS][CKPT_PATH_LEN];
    char stdout_path[CKPT_PATH_LEN];
} Run;

static void run_add(Run *r, const char *arg) {
    if (r->argc >= MAX_RUN_ARGS) { fprintf(stderr, "too many arguments for one test run\n"); exit(1); }
    snprintf(r->storage[r->argc], CKPT_PATH_LEN, "%s", arg);
    r->argv[r->argc] = r->storage[r->argc];
    r->argc++;
}

// The common options of these runs, for out_dir `name` in the scratch folder, then `extra` (NULL-terminated).
static Run make_run(const char *name, const char *const *extra) {
    static Run r;
    memset(&r, 0, sizeof(r));
    char buf[CKPT_PATH_LEN];
    const char *base[] = {"test_trainer", "--depth", "1", "--width", "4", "--heads", "1", "--seq-len", "8",
                          "--batch-size", "2", "--total-batch-tokens", "32", "--steps", "6", "--warmup-steps", "2",
                          "--lr", "0.05", "--checkpoint-every", "3", "--val-every", "2", "--val-batches", "3",
                          "--sample-every", "3", "--sample-tokens", "5", "--precision", "fp32", "--tokenizer",
                          "data/gpt2"};
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) { run_add(&r, base[i]); }
    snprintf(buf, sizeof(buf), "--train-data=%s/train_*.bin", g_dir);
    run_add(&r, buf);
    snprintf(buf, sizeof(buf), "--val-data=%s/val_*.bin", g_dir);
    run_add(&r, buf);
    snprintf(buf, sizeof(buf), "--out-dir=%s/%s", g_dir, name);
    run_add(&r, buf);
    for (; extra && *extra; extra++) { run_add(&r, *extra); }
    r.launch = single_process_launch;
    snprintf(r.stdout_path, sizeof(r.stdout_path), "%s/%s.stdout", g_dir, name);
    return r;
}

static void run_child(void *arg) {
    Run *r = (Run *)arg;
    if (!freopen(r->stdout_path, "a", stdout)) { exit(2); }
    exit(train_main(r->argc, r->argv, r->launch, toy_factory, NULL));
}

static Child run_train(Run *r) {
    Child c;
    child_start(&c, run_child, r);
    child_wait(&c, now_s() + RUN_TIMEOUT_S);
    return c;
}

// ----------------------------------------------------------------------------------------------------------
// files

static void scratch_path(char *out, const char *name) {
    if (!format_into(out, CKPT_PATH_LEN, "%s/%s", g_dir, name)) {
        fprintf(stderr, "test_trainer: the scratch path %s/%s is longer than %d bytes; give the file a shorter name\n",
                g_dir, name, CKPT_PATH_LEN - 1);
        exit(1);
    }
}

// The whole file, or NULL (and *n = 0) where it does not exist.
static char *read_file(const char *path, size_t *n) {
    *n = 0;
    return file_exists(path) ? read_whole_file(path, n, "the test expected the trainer to write it") : NULL;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *buf = read_file(from, &n);
    FILE *f = fopen_check(to, "wb");
    fwrite_check(buf, 1, n, f, to);
    fclose(f);
    free(buf);
}

// Copies files `names` (NULL-terminated) of scratch folder `from` into scratch folder `to` (made here).
static void copy_files(const char *from, const char *to, const char *const *names) {
    char dir[CKPT_PATH_LEN], a[CKPT_PATH_LEN], b[CKPT_PATH_LEN], rel[CKPT_PATH_LEN];
    scratch_path(dir, to);
    mkdir(dir, 0755);
    for (; *names; names++) {
        snprintf(rel, sizeof(rel), "%s/%s", from, *names);
        scratch_path(a, rel);
        snprintf(rel, sizeof(rel), "%s/%s", to, *names);
        scratch_path(b, rel);
        copy_file(a, b);
    }
}

// The lines of a file that start with a step, read by step_format (LOG_STEP: llm.c's lines of a log; METRICS_STEP:
// a metrics file's records), up to and including step max_step; each cut short at `cut` where it holds it (a
// metrics record's timings, METRICS_TIMINGS to its end: the fields that differ between two runs of the same steps).
#define LOG_STEP "s:%d"
#define METRICS_STEP "{\"step\":%d"
#define METRICS_TIMINGS ",\"ms\":"

static void step_lines(const char *path, const char *step_format, const char *cut, int max_step, char *out,
                       size_t cap) {
    size_t n;
    char *text = read_file(path, &n);
    out[0] = '\0';
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int step;
        if (sscanf(line, step_format, &step) != 1 || step > max_step) { continue; }
        char *at = cut ? strstr(line, cut) : NULL;
        if (at) { strcpy(at, "}"); }
        strncat(out, line, cap - strlen(out) - 2);
        strcat(out, "\n");
    }
    free(text);
}

// Every training record's loss is log.txt's ("s:%d trl:%f") and the steps are 1..steps, then validations as logged.
static int metrics_match_log(const char *metrics_path, const char *log_path, int steps, char *why, size_t cap) {
    char log[8192], want[8192] = "", line[64];
    step_lines(log_path, LOG_STEP, NULL, 1000, log, sizeof(log));
    size_t n;
    char *text = read_file(metrics_path, &n);
    int step = 0;
    for (char *rec = text ? strtok(text, "\n") : NULL; rec; rec = strtok(NULL, "\n")) {
        MetricsRecord r;
        if (!metrics_parse(rec, &r)) { break; }
        snprintf(line, sizeof(line), r.is_train ? "s:%d trl:%f\n" : "s:%d tel:%f\n", r.step,
                 r.is_train ? r.train_loss : r.val_loss);
        strncat(want, line, sizeof(want) - strlen(want) - 1);
        step += r.is_train;
    }
    free(text);
    format_into(why, cap, "%d training records; log.txt:\n%smetrics as log lines:\n%s", step, log, want);
    return step == steps && strcmp(log, want) == 0;
}

static void write_shards(void) {
    const int counts[2] = {TRAIN_WINDOWS * SEQ_LEN + 1, VAL_WINDOWS * SEQ_LEN + 1};
    const char *names[2] = {"train_000.bin", "val_000.bin"};
    for (int s = 0; s < 2; s++) {
        uint16_t *tok = (uint16_t *)malloc_check((size_t)counts[s] * sizeof(uint16_t), "shard");
        for (int i = 0; i < counts[s]; i++) { tok[i] = (uint16_t)rng_below(99, (uint32_t)s, (uint64_t)i, 1000); }
        char p[CKPT_PATH_LEN];
        scratch_path(p, names[s]);
        shard_write(p, tok, (size_t)counts[s]);
        free(tok);
    }
}

// ----------------------------------------------------------------------------------------------------------

static void test_run_and_resume(void) {
    Run full = make_run("full", NULL);
    Child c = run_train(&full);
    char a[CKPT_PATH_LEN], b[CKPT_PATH_LEN], text[8192], text2[8192];
    check(c.status == 0, "run_completes", "status %d: %s", c.status, c.err);
    scratch_path(a, "full/model_00000003.bin");
    scratch_path(b, "full/state_00000006.bin");
    check(file_exists(a) && file_exists(b), "run_writes_checkpoints", "checkpoint 3 or 6 is missing");
    scratch_path(a, "full/log.txt");
    step_lines(a, LOG_STEP, NULL, 1000, text, sizeof(text));
    check(strstr(text, "s:1 trl:") && strstr(text, "s:6 trl:") && strstr(text, "s:2 tel:") && strstr(text, "s:6 tel:"),
          "run_log_lines", "log lines: %s", text);
    size_t n;
    char *out = read_file(full.stdout_path, &n);
    check(out && strstr(out, "step 1/6 | loss ") && strstr(out, "tok/s\n") && !strstr(out, "MFU") &&
              strstr(out, "step 3/6 | sample:") && strstr(out, "device toy"),
          "run_console_lines", "stdout: %s", out ? out : "(none)");
    free(out);
    char why[16384];
    scratch_path(b, "full/metrics.jsonl");
    check(metrics_match_log(b, a, 6, why, sizeof(why)), "metrics_records_match_log", "%s", why);
    scratch_path(b, "full/loss.svg");
    out = read_file(b, &n);
    check(out && strstr(out, "step 6: train loss") && strstr(out, "</svg>\n"), "loss_svg_written",
          "'%s' is missing or does not show step 6", b);
    free(out);

    // an interrupted copy: checkpoint 3 and the log up to it
    scratch_path(a, "part");
    mkdir(a, 0755);
    const char *files[] = {"model_00000003.bin", "state_00000003.bin"};
    for (int i = 0; i < 2; i++) {
        char from[CKPT_PATH_LEN + 64], to[CKPT_PATH_LEN + 64];
        snprintf(from, sizeof(from), "%s/full/%s", g_dir, files[i]);
        snprintf(to, sizeof(to), "%s/part/%s", g_dir, files[i]);
        copy_file(from, to);
    }
    scratch_path(a, "full/log.txt");
    step_lines(a, LOG_STEP, NULL, 3, text, sizeof(text));
    scratch_path(b, "part/log.txt");
    FILE *f = fopen_check(b, "w");
    fputs(text, f);
    fclose(f);
    // its metrics went on to step 5 before it stopped, the last record cut short
    scratch_path(a, "full/metrics.jsonl");
    step_lines(a, METRICS_STEP, METRICS_TIMINGS, 5, text, sizeof(text));
    scratch_path(b, "part/metrics.jsonl");
    f = fopen_check(b, "w");
    fprintf(f, "%s{\"step\":6,\"train_lo", text);
    fclose(f);
    const char *resume[] = {"--resume", "1", NULL};
    Run part = make_run("part", resume);
    c = run_train(&part);
    check(c.status == 0, "resume_completes", "status %d: %s", c.status, c.err);
    step_lines(a, METRICS_STEP, METRICS_TIMINGS, 1000, text, sizeof(text));
    step_lines(b, METRICS_STEP, METRICS_TIMINGS, 1000, text2, sizeof(text2));
    check(strcmp(text, text2) == 0, "resume_metrics_each_step_once", "uninterrupted:\n%sresumed:\n%s", text, text2);
    scratch_path(a, "full/loss.svg");
    scratch_path(b, "part/loss.svg");
    char *svg_full = read_file(a, &n), *svg_part = read_file(b, &n);
    char *dir_name = svg_part ? strstr(svg_part, "/part</text>") : NULL;
    if (dir_name) { memcpy(dir_name, "/full", 5); } // the title: the out-dir
    check(svg_full && svg_part && strcmp(svg_full, svg_part) == 0, "resume_same_loss_svg",
          "the resumed run's picture differs from the uninterrupted run's");
    free(svg_full);
    free(svg_part);
    scratch_path(a, "full/log.txt");
    scratch_path(b, "part/log.txt");
    step_lines(a, LOG_STEP, NULL, 1000, text, sizeof(text));
    step_lines(b, LOG_STEP, NULL, 1000, text2, sizeof(text2));
    check(strcmp(text, text2) == 0, "resume_same_losses", "uninterrupted:\n%sresumed:\n%s", text, text2);
    scratch_path(a, "full/model_00000006.bin");
    scratch_path(b, "part/model_00000006.bin");
    int same_model = same_file(a, b);
    scratch_path(a, "full/state_00000006.bin");
    scratch_path(b, "part/state_00000006.bin");
    check(same_model && same_file(a, b), "resume_identical_files", "model or state of step 6 differs");
}

static void expect_refused(const char *name, Run *r, const char *expect) {
    Child c = run_train(r);
    const char *nl = strchr(c.err, '\n');
    check(c.status > 0 && strstr(c.err, expect) && nl && nl[1] == '\0', name,
          "status %d, stderr '%s', expected one line containing '%s'", c.status, c.err, expect);
}

// A run that stopped before its first checkpoint left only its log; --resume auto in a new folder; a finished run.
static void test_restart_and_auto(void) {
    char dir[CKPT_PATH_LEN], log[CKPT_PATH_LEN + 16], a[CKPT_PATH_LEN], b[CKPT_PATH_LEN];
    scratch_path(dir, "attempt");
    mkdir(dir, 0755);
    snprintf(log, sizeof(log), "%s/log.txt", dir);
    FILE *f = fopen_check(log, "w");
    fputs("s:1 trl:5.5\n", f);
    fclose(f);
    char metrics[CKPT_PATH_LEN + 16], text[8192], text2[8192];
    snprintf(metrics, sizeof(metrics), "%s/metrics.jsonl", dir);
    f = fopen_check(metrics, "w");
    fputs("{\"step\":1,\"train_loss\":5.5,\"lr\":0.01,\"norm\":1,\"ms\":1,\"tokens_per_s\":1}\n", f);
    fclose(f);
    Run fresh = make_run("attempt", NULL);
    expect_refused("attempt_refused_without_resume", &fresh,
                   "stopped before its first complete checkpoint; pass --resume 1 to start it again there");
    const char *resume[] = {"--resume", "1", NULL}, *autom[] = {"--resume", "auto", NULL};
    Run again = make_run("attempt", resume);
    Child c = run_train(&again);
    size_t n;
    char *out = read_file(again.stdout_path, &n);
    scratch_path(a, "full/model_00000006.bin");
    scratch_path(b, "attempt/state_00000006.bin");
    char full_state[CKPT_PATH_LEN];
    scratch_path(full_state, "full/state_00000006.bin");
    char attempt_model[CKPT_PATH_LEN];
    scratch_path(attempt_model, "attempt/model_00000006.bin");
    check(c.status == 0 && out && strstr(out, "starting again from step 0") && same_file(a, attempt_model) &&
              same_file(full_state, b),
          "attempt_restarted_with_resume", "status %d: %s", c.status, c.err);
    free(out);
    char full_metrics[CKPT_PATH_LEN];
    scratch_path(full_metrics, "full/metrics.jsonl");
    step_lines(full_metrics, METRICS_STEP, METRICS_TIMINGS, 1000, text, sizeof(text));
    step_lines(metrics, METRICS_STEP, METRICS_TIMINGS, 1000, text2, sizeof(text2));
    check(strcmp(text, text2) == 0, "attempt_restart_starts_metrics_anew", "uninterrupted:\n%srestarted:\n%s", text,
          text2);
    Run new_auto = make_run("auto_new", autom);
    c = run_train(&new_auto);
    scratch_path(b, "auto_new/model_00000006.bin");
    check(c.status == 0 && same_file(a, b), "resume_auto_starts_new_run", "status %d: %s", c.status, c.err);
    Run done_auto = make_run("full", autom);
    c = run_train(&done_auto);
    out = read_file(done_auto.stdout_path, &n);
    check(c.status == 0 && out && strstr(out, "nothing to do"), "resume_auto_continues_run", "status %d: %s",
          c.status, c.err);
    free(out);
}

// Whether scratch file `rel` is full's file `full_rel`, byte for byte.
static int same_as_full(const char *rel, const char *full_rel) {
    char a[CKPT_PATH_LEN], b[CKPT_PATH_LEN];
    scratch_path(a, rel);
    scratch_path(b, full_rel);
    return same_file(a, b);
}

// A checkpoint whose model file was removed is damaged, not an attempt to start again: --resume 1 and auto refuse it
// naming the missing file, and its state file (the only copy of the weights and the optimizer state) stays as it was.
static void test_state_without_model(void) {
    const char *only_state[] = {"state_00000003.bin", "log.txt", NULL};
    copy_files("full", "lost_model", only_state);
    const char *modes[] = {"1", "auto"};
    for (int i = 0; i < 2; i++) {
        const char *resume[] = {"--resume", modes[i], NULL};
        Run r = make_run("lost_model", resume);
        char name[64];
        snprintf(name, sizeof(name), "state_without_model_refused_resume_%s", modes[i]);
        expect_refused(name, &r, "model_00000003.bin' is missing");
    }
    check(same_as_full("lost_model/state_00000003.bin", "full/state_00000003.bin"),
          "state_without_model_kept", "the state file changed");
    // an earlier complete checkpoint does not make the later one's state file fair game
    const char *later[] = {"model_00000003.bin", "state_00000003.bin", "state_00000006.bin", NULL};
    copy_files("full", "lost_later_model", later);
    const char *resume[] = {"--resume", "1", NULL};
    Run r = make_run("lost_later_model", resume);
    expect_refused("later_state_without_model_refused", &r, "model_00000006.bin' is missing");
    check(same_as_full("lost_later_model/state_00000006.bin", "full/state_00000006.bin"),
          "later_state_without_model_kept", "the state file changed");
}

// A corrupt checkpoint is refused before anything in the folder is touched: the log and the metrics (which a resume
// cuts after its checkpoint) stay as they were, and no lock file or picture appears.
static void test_corrupt_checkpoint_touches_nothing(void) {
    const char *files[] = {"model_00000003.bin", "state_00000003.bin", "log.txt", "metrics.jsonl", NULL};
    const char *kinds[] = {"state", "model"};
    for (int k = 0; k < 2; k++) {
        char dir[64], rel[CKPT_PATH_LEN], path[CKPT_PATH_LEN], name[96];
        snprintf(dir, sizeof(dir), "corrupt_%s", kinds[k]);
        copy_files("full", dir, files);
        snprintf(rel, sizeof(rel), "%s/%s_00000003.bin", dir, kinds[k]);
        scratch_path(path, rel);
        flip_byte(path, file_size_or_neg(path) / 2);
        const char *resume[] = {"--resume", "1", NULL};
        Run r = make_run(dir, resume);
        snprintf(name, sizeof(name), "corrupt_%s_refused", kinds[k]);
        expect_refused(name, &r, "is corrupt");
        char log_rel[CKPT_PATH_LEN], metrics_rel[CKPT_PATH_LEN], lock[CKPT_PATH_LEN], svg[CKPT_PATH_LEN];
        snprintf(log_rel, sizeof(log_rel), "%s/log.txt", dir);
        snprintf(metrics_rel, sizeof(metrics_rel), "%s/metrics.jsonl", dir);
        snprintf(rel, sizeof(rel), "%s/%s", dir, OUT_DIR_LOCK_NAME);
        scratch_path(lock, rel);
        snprintf(rel, sizeof(rel), "%s/loss.svg", dir);
        scratch_path(svg, rel);
        snprintf(name, sizeof(name), "corrupt_%s_touches_nothing", kinds[k]);
        check(same_as_full(log_rel, "full/log.txt") && same_as_full(metrics_rel, "full/metrics.jsonl") &&
                  !file_exists(lock) && !file_exists(svg),
              name, "the log or the metrics changed, or a lock file or loss.svg appeared in '%s'", dir);
    }
}

// Writes `value` into int64 slot `slot` of a state file's header.
static void set_state_slot(const char *path, int slot, int64_t value) {
    FILE *f = fopen_check(path, "r+b");
    fseek(f, slot * (long)sizeof(int64_t), SEEK_SET);
    fwrite_check(&value, sizeof(value), 1, f, path);
    fclose(f);
}

// A version 1 state file (from before the checksums) resumes to the uninterrupted run's files, and says it could not
// be verified; one that says version 1 but records checksums is a later file with a changed version: corrupt.
static void test_version1_resume(void) {
    const char *files[] = {"model_00000003.bin", "state_00000003.bin", NULL};
    copy_files("full", "version1", files);
    char state[CKPT_PATH_LEN];
    scratch_path(state, "version1/state_00000003.bin");
    set_state_slot(state, SH_VERSION, STATE_FILE_VERSION_UNCHECKED);
    const char *resume[] = {"--resume", "1", NULL};
    Run r = make_run("version1", resume);
    expect_refused("version1_with_checksums_refused", &r, "is corrupt");
    set_state_slot(state, SH_STATE_CHECKSUM, 0);
    set_state_slot(state, SH_MODEL_CHECKSUM, 0);
    r = make_run("version1", resume);
    Child c = run_train(&r);
    size_t n;
    char *out = read_file(r.stdout_path, &n);
    check(c.status == 0 && out && strstr(out, "unverified") &&
              same_as_full("version1/state_00000006.bin", "full/state_00000006.bin"),
          "version1_resumes_unverified_and_says_so", "status %d, stdout '%s', stderr '%s'", c.status, out ? out : "",
          c.err);
    free(out);
}

// A copy of full's step-6 model whose first `count` weights (wte's first rows) are `value`.
static void model_with(const char *name, float value, int count, char *path) {
    char from[CKPT_PATH_LEN];
    scratch_path(from, "full/model_00000006.bin");
    scratch_path(path, name);
    copy_file(from, path);
    FILE *f = fopen_check(path, "r+b");
    fseek(f, MODEL_HEADER_INTS * (long)sizeof(int), SEEK_SET);
    for (int i = 0; i < count; i++) { fwrite(&value, sizeof(float), 1, f); }
    fclose(f);
}

// Non-finite weights in --init-from are refused; a run whose loss stops being finite stops, writing nothing.
static void test_non_finite(void) {
    char path[CKPT_PATH_LEN], arg[CKPT_PATH_LEN + 16], ckpt[CKPT_PATH_LEN];
    model_with("nan.bin", NAN, 1, path);
    snprintf(arg, sizeof(arg), "--init-from=%s", path);
    const char *nan_init[] = {arg, NULL};
    Run nan_run = make_run("nan_init", nan_init);
    expect_refused("init_from_nan_refused", &nan_run, "wte[0] is nan; the model file holds non-finite weights");
    scratch_path(ckpt, "nan_init");
    check(!file_exists(ckpt), "init_from_nan_makes_no_out_dir", "'%s' was made: the corrected command would find an "
          "earlier run there", ckpt);
    model_with("huge.bin", 1e30f, 256, path); // every token's weight: the toy's squared error overflows
    snprintf(arg, sizeof(arg), "--init-from=%s", path);
    const char *huge_init[] = {arg, NULL};
    Run huge = make_run("diverges", huge_init);
    Child c = run_train(&huge);
    const char *nl = strchr(c.err, '\n');
    check(c.status > 0 && strstr(c.err, "step 1: the training loss is inf and the gradient norm") && nl && !nl[1] &&
              strstr(c.err, "the run diverged; nothing of this step was written, there is no checkpoint yet"),
          "divergence_stops_run", "status %d: %s", c.status, c.err);
    scratch_path(ckpt, "diverges/model_00000001.bin");
    check(!file_exists(ckpt), "divergence_writes_nothing", "'%s' was written", ckpt);
    // its step's record (written before the check stops the run) is still JSON: the loss is null, not inf
    scratch_path(ckpt, "diverges/metrics.jsonl");
    size_t n;
    char *metrics = read_file(ckpt, &n);
    check(metrics && strstr(metrics, "{\"step\":1,\"train_loss\":null,") && !strstr(metrics, "inf") &&
              !strstr(metrics, "nan"),
          "divergence_metrics_null", "metrics.jsonl: %s", metrics ? metrics : "(none)");
    free(metrics);
}

// A folder another process holds the lock of is refused; temporary files of interrupted writes are removed.
static void test_lock_and_stale_files(void) {
    char dir[CKPT_PATH_LEN], lock[CKPT_PATH_LEN + 32], tmp[CKPT_PATH_LEN + 32], want[64];
    scratch_path(dir, "locked");
    mkdir(dir, 0755);
    snprintf(lock, sizeof(lock), "%s/%s", dir, OUT_DIR_LOCK_NAME);
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    int held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && write(fd, "4242", 4) == 4;
    Run locked = make_run("locked", NULL);
    snprintf(want, sizeof(want), "is in use by another run (process 4242 holds");
    if (held) { expect_refused("locked_out_dir_refused", &locked, want); }
    check(held, "locked_out_dir_test_holds_lock", "the test could not take the lock");
    if (fd >= 0) { close(fd); }
    Run now_free = make_run("locked", NULL);
    Child c = run_train(&now_free);
    check(c.status == 0, "released_lock_lets_run", "status %d: %s", c.status, c.err);

    // a live run before its first checkpoint: its folder holds a log, which must not read as a stopped attempt
    const char *log_only[] = {"log.txt", NULL};
    copy_files("full", "live", log_only);
    scratch_path(dir, "live");
    snprintf(lock, sizeof(lock), "%s/%s", dir, OUT_DIR_LOCK_NAME);
    fd = open(lock, O_RDWR | O_CREAT, 0644);
    held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && write(fd, "4242", 4) == 4;
    check(held, "live_out_dir_test_holds_lock", "the test could not take the lock");
    const char *modes[] = {NULL, "1", "auto"};
    for (int i = 0; held && i < 3; i++) {
        const char *resume[] = {"--resume", modes[i], NULL};
        Run live = make_run("live", modes[i] ? resume : NULL);
        char name[64];
        snprintf(name, sizeof(name), "live_out_dir_in_use_resume_%s", modes[i] ? modes[i] : "0");
        expect_refused(name, &live, want);
    }
    if (fd >= 0) { close(fd); }

    // a lock file that is a symbolic link or a hard link to a user's file: refused, and the file left as it was (a
    // followed link would have been emptied and given the run's process id)
    static const char *const MINE = "a user's notes";
    char mine[CKPT_PATH_LEN];
    scratch_path(mine, "mine.txt");
    for (int hard = 0; hard <= 1; hard++) {
        const char *name = hard ? "hard_linked_lock" : "linked_lock";
        FILE *f = fopen_check(mine, "wb");
        fwrite_check(MINE, 1, strlen(MINE), f, mine);
        fclose(f);
        scratch_path(dir, name);
        mkdir(dir, 0755);
        snprintf(lock, sizeof(lock), "%s/%s", dir, OUT_DIR_LOCK_NAME);
        if ((hard ? link(mine, lock) : symlink(mine, lock)) != 0) { perror("link"); }
        Run linked = make_run(name, NULL);
        expect_refused(hard ? "lock_hard_link_refused" : "lock_symlink_refused", &linked,
                       hard ? "has 2 names (hard links)" : "is a symbolic link, which a run never makes");
        size_t n;
        char *kept = read_file(mine, &n);
        check(kept && n == strlen(MINE) && memcmp(kept, MINE, n) == 0,
              hard ? "lock_hard_link_target_untouched" : "lock_symlink_target_untouched", "'%s' now holds '%.*s'",
              mine, (int)n, kept ? kept : "");
        free(kept);
        unlink(mine);
    }

    scratch_path(dir, "stale");
    mkdir(dir, 0755);
    snprintf(tmp, sizeof(tmp), "%s/model_00000003.bin.tmp.424242", dir);
    fclose(fopen_check(tmp, "wb"));
    const char *resume[] = {"--resume", "1", NULL};
    Run stale = make_run("stale", resume);
    c = run_train(&stale);
    size_t n;
    char *out = read_file(stale.stdout_path, &n);
    check(c.status == 0 && !file_exists(tmp) && out && strstr(out, "removed 1 temporary file(s)"),
          "stale_temporary_files_removed", "status %d: %s", c.status, c.err);
    free(out);
}

static void test_refusals(void) {
    char model[CKPT_PATH_LEN], copy[CKPT_PATH_LEN + 16];
    scratch_path(model, "full/model_00000006.bin");
    snprintf(copy, sizeof(copy), "%s.before", model);
    copy_file(model, copy);
    Run again = make_run("full", NULL);
    expect_refused("refuse_run_folder_without_resume", &again, "holds checkpoints of an earlier run; pass --resume 1");
    check(same_file(model, copy), "refused_run_changes_nothing", "'%s' changed", model);
    unlink(copy);

    const char *resume[] = {"--resume", "1", NULL};
    Run empty = make_run("empty", resume);
    expect_refused("refuse_resume_without_checkpoint", &empty, "holds no run to continue");

    const char *other_seed[] = {"--resume", "1", "--steps", "6", "--seed", "5", NULL};
    Run other = make_run("full", other_seed);
    char want[CKPT_PATH_LEN + 128];
    snprintf(want, sizeof(want), "state_00000006.bin' was written with --seed 1337 but this run has --seed 5");
    expect_refused("refuse_resume_other_settings", &other, want);

    char init[CKPT_PATH_LEN + 16];
    snprintf(init, sizeof(init), "--init-from=%s", model);
    const char *deeper[] = {init, "--depth", "2", NULL};
    Run shape = make_run("shape", deeper);
    expect_refused("refuse_init_from_other_shape", &shape, "has layers 1 but this run's model has 2");

    Run done = make_run("full", resume);
    Child c = run_train(&done);
    size_t n;
    char *out = read_file(done.stdout_path, &n);
    check(c.status == 0 && out && strstr(out, "nothing to do"), "resume_finished_run_is_noop", "status %d: %s",
          c.status, c.err);
    free(out);
}

static void test_init_from(void) {
    char model[CKPT_PATH_LEN], init[CKPT_PATH_LEN + 16];
    scratch_path(model, "full/model_00000006.bin");
    snprintf(init, sizeof(init), "--init-from=%s", model);
    const char *extra[] = {init, "--steps", "1", "--warmup-steps", "0", "--lr", "0", "--weight-decay", "0",
                           "--val-every", "0", "--sample-every", "0", NULL};
    Run r = make_run("init", extra);
    Child c = run_train(&r);
    char out[CKPT_PATH_LEN];
    scratch_path(out, "init/model_00000001.bin");
    // with lr 0 the single step leaves the weights as loaded
    check(c.status == 0 && same_file(model, out), "init_from_loads_weights", "status %d: %s", c.status, c.err);
}

// ----------------------------------------------------------------------------------------------------------
// one rank of a two-rank job

#define FAKE_WORLD 2

static void print_sum(double *x, int n) {
    (void)n;
    fprintf(stderr, "local sum %.17g\n", x[0]);
}

// Prints this rank's value (the first call is the first step's loss sum), then stands in for the peer.
static void fake_sum_over_data_ranks(double *x, int n) {
    print_sum(x, n);
    for (int i = 0; i < n; i++) { x[i] *= FAKE_WORLD; }
}

static Launcher fake_launch(int rank) {
    Launcher l;
    memset(&l, 0, sizeof(l));
    l.world = FAKE_WORLD;
    l.rank = rank;
    l.sum_over_data_ranks = fake_sum_over_data_ranks;
    return l;
}
static Launcher fake_rank0(void) { return fake_launch(0); }
static Launcher fake_rank1(void) { return fake_launch(1); }
static Launcher fake_alone(void) { // one rank that prints its sums like the others
    Launcher l = fake_launch(0);
    l.world = 1;
    l.sum_over_data_ranks = print_sum;
    return l;
}

static double first_local_sum(const Child *c) {
    const char *p = strstr(c->err, "local sum ");
    return p ? atof(p + strlen("local sum ")) : NAN;
}

static void test_data_parallel_ranks(void) {
    const char *two_steps[] = {"--steps", "2", "--warmup-steps", "0", "--sample-every", "0", "--zero", "1", NULL};
    Run r0 = make_run("dp_rank0", two_steps);
    r0.launch = fake_rank0;
    Child c0 = run_train(&r0);
    Run r1 = make_run("dp_rank1", two_steps);
    r1.launch = fake_rank1;
    Child c1 = run_train(&r1);
    Run one = make_run("dp_single", two_steps);
    one.launch = fake_alone;
    Child c = run_train(&one);
    check(c0.status == 0 && c1.status == 0 && c.status == 0, "dp_runs_complete", "status %d / %d / %d: %s%s%s",
          c0.status, c1.status, c.status, c0.err, c1.err, c.err);

    char dir[CKPT_PATH_LEN];
    scratch_path(dir, "dp_rank1");
    size_t n;
    char *out1 = read_file(r1.stdout_path, &n);
    check(!file_exists(dir) && (!out1 || n == 0), "dp_rank1_silent", "rank 1 created '%s' or printed: %s", dir,
          out1 ? out1 : "");
    free(out1);
    char *out0 = read_file(r0.stdout_path, &n);
    check(out0 && strstr(out0, "mesh: world 2 = dp 2 x gtp 1 x tp 1 | ZeRO-1 on") &&
              strstr(out0, "x 1 micro-steps x 2 data-parallel ranks = 32 tokens per step") &&
              strstr(out0, "step 2/2 | loss"),
          "dp_rank0_logs", "stdout: %s", out0 ? out0 : "(none)");
    free(out0);

    // Step 1 of the one-process run: two micro-steps over windows 0-1 and 2-3 of the epoch; ranks 0 and 1 each
    // take one of those halves (one micro-step each), so the loss sums agree up to the order of two additions.
    double single = first_local_sum(&c), ranks = first_local_sum(&c0) + first_local_sum(&c1);
    double rank_gap = fabs(first_local_sum(&c0) - first_local_sum(&c1));
    check(fabs(single - ranks) <= 1e-12 * fabs(single) && rank_gap > 1e-6 * fabs(single),
          "dp_strides_make_the_global_batch", "one process: %.17g, sum of the ranks: %.17g (rank gap %.3g)", single,
          ranks, rank_gap);
}

// ----------------------------------------------------------------------------------------------------------
// validation over data ranks

static double g_val_local_sum; // what trainer_validate summed on its rank, before the sum over the data ranks
static double g_val_group_sum; // what that sum gives back: every rank's local sum added

static void sum_over_simulated_ranks(double *x, int n) {
    (void)n;
    g_val_local_sum = x[0];
    x[0] = g_val_group_sum;
}

// trainer_validate of the toy on data rank r of D, micro-batches of B, its peers' sums added as group_sum says: the
// validation loss; its local sum in *local and its forwards in *calls.
static float validate_on_rank(int D, int r, int B, int val_batches, double group_sum, double *local, int *calls) {
    Trainer tr;
    memset(&tr, 0, sizeof(tr));
    options_defaults(&tr.o);
    tr.o.depth = 1;
    tr.o.width = 4;
    tr.o.heads = 1;
    tr.o.seq_len = SEQ_LEN;
    tr.o.batch_size = B;
    tr.o.val_batches = val_batches;
    tr.config = options_model_config(&tr.o);
    tr.ops = toy_factory(&tr.config, &tr.o, NULL, B, SEQ_LEN);
    tr.data_ranks = D;
    tr.launcher.sum_over_data_ranks = sum_over_simulated_ranks;
    char glob[CKPT_PATH_LEN];
    scratch_path(glob, "val_*.bin");
    dataloader_open(&tr.val, glob, B, SEQ_LEN, r, D, tr.config.vocab_size);
    tr.inputs = (int *)malloc_check((size_t)B * SEQ_LEN * sizeof(int), "inputs");
    tr.targets = (int *)malloc_check((size_t)B * SEQ_LEN * sizeof(int), "targets");
    g_eval_calls = 0;
    g_val_group_sum = group_sum;
    float loss = trainer_validate(&tr);
    *local = g_val_local_sum;
    *calls = g_eval_calls;
    tr.ops.destroy(tr.ops.ctx);
    dataloader_free(&tr.val);
    free(tr.inputs);
    free(tr.targets);
    return loss;
}

// The validation loss of D = 1..4 data ranks simulated here (a first pass over the ranks gives their local sums, a
// second each rank's loss from their total): every rank's equals the one-rank loss, with passes whose windows do not
// fill the ranks' micro-batches (padding rows counted out), and every rank runs as many forwards (a GTP group gathers
// weights inside each). In a child, which says why on stderr and exits 1 where it differs: the toy's initialization
// starts OpenMP's threads, which the runs this process forks later would wait for.
#define VAL_LOSS_RTOL 1e-6 // the ranks' sums in another order, then rounded to float

static void validation_over_ranks(void *arg) {
    (void)arg;
    static const int cases[][2] = {{3, 2}, {3, 5}, {2, 3}}; // (B, --val-batches): of the 8 windows, W = 6, 8, 6
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int B = cases[k][0], vb = cases[k][1], calls[4];
        double local[4], one_local;
        float one = validate_on_rank(1, 0, B, vb, 0.0, &one_local, calls);
        one = validate_on_rank(1, 0, B, vb, one_local, &one_local, calls);
        for (int D = 1; D <= 4; D++) {
            double total = 0.0;
            for (int r = 0; r < D; r++) {
                validate_on_rank(D, r, B, vb, 0.0, &local[r], &calls[r]);
                total += local[r];
            }
            for (int r = 0; r < D; r++) {
                float loss = validate_on_rank(D, r, B, vb, total, &local[r], &calls[r]);
                if (!(fabs(loss - one) <= VAL_LOSS_RTOL * fabs(one)) || calls[r] != calls[0]) {
                    fprintf(stderr, "B %d, --val-batches %d, rank %d of %d: loss %.9g (one rank: %.9g), %d forwards "
                            "(rank 0: %d)", B, vb, r, D, loss, one, calls[r], calls[0]);
                    exit(1);
                }
            }
        }
    }
}

static void test_validation_over_ranks(void) {
    Child c;
    child_start(&c, validation_over_ranks, NULL);
    child_wait(&c, now_s() + RUN_TIMEOUT_S);
    check(c.status == 0, "validation_loss_independent_of_data_ranks", "status %d: %s", c.status, c.err);
}

// ----------------------------------------------------------------------------------------------------------
// preemption

#define PREEMPT_STEPS "24"
#define PREEMPT_LAST_STEP 24
#define PREEMPT_MAX_ATTEMPTS 30 // stops and restarts one interrupted run may take before it must be done
#define PREEMPT_ASYNC_TRIALS 6
#define PREEMPT_RNG_SEED 20261124
static const char *const PREEMPT_OPTIONS[] = {"--steps", PREEMPT_STEPS, "--checkpoint-every", "5", "--val-every", "4",
                                              "--resume", "auto", NULL};

// The uninterrupted run's final model and state files equal to out-dir `name`'s.
static int same_as_uninterrupted(const char *name) {
    const char *const kinds[] = {"model", "state"};
    for (int k = 0; k < 2; k++) {
        char a[CKPT_PATH_LEN], b[CKPT_PATH_LEN], rel_a[CKPT_PATH_LEN + 64], rel_b[CKPT_PATH_LEN + 64];
        snprintf(rel_a, sizeof(rel_a), "preempt_full/%s_%08d.bin", kinds[k], PREEMPT_LAST_STEP);
        snprintf(rel_b, sizeof(rel_b), "%s/%s_%08d.bin", name, kinds[k], PREEMPT_LAST_STEP);
        scratch_path(a, rel_a);
        scratch_path(b, rel_b);
        if (!same_file(a, b)) { return 0; }
    }
    return 1;
}

// loss.svg of out-dir `name`, its title (the out-dir) cut to the folder's parent, or NULL.
static char *picture_untitled(const char *name) {
    char path[CKPT_PATH_LEN], rel[CKPT_PATH_LEN], title[CKPT_PATH_LEN];
    snprintf(rel, sizeof(rel), "%s/%s", name, PLOT_FILE_NAME);
    scratch_path(path, rel);
    size_t n;
    char *svg = read_file(path, &n);
    snprintf(title, sizeof(title), "/%s</text>", name);
    char *at = svg ? strstr(svg, title) : NULL;
    if (at) { memmove(at + 1, at + 1 + strlen(name), strlen(at + 1 + strlen(name)) + 1); }
    return svg;
}

// Whether out-dir `name` recorded what the uninterrupted run did: log.txt's step lines, metrics.jsonl (but for the
// timings) and loss.svg; *what names the first that differs.
static int same_records_as_uninterrupted(const char *name, const char **what) {
    static char a[8192], b[8192];
    const char *files[] = {LOG_FILE_NAME, METRICS_FILE_NAME}, *formats[] = {LOG_STEP, METRICS_STEP};
    const char *cuts[] = {NULL, METRICS_TIMINGS};
    for (int k = 0; k < 2; k++) {
        char pa[CKPT_PATH_LEN], pb[CKPT_PATH_LEN], rel[CKPT_PATH_LEN];
        snprintf(rel, sizeof(rel), "preempt_full/%s", files[k]);
        scratch_path(pa, rel);
        snprintf(rel, sizeof(rel), "%s/%s", name, files[k]);
        scratch_path(pb, rel);
        step_lines(pa, formats[k], cuts[k], PREEMPT_LAST_STEP, a, sizeof(a));
        step_lines(pb, formats[k], cuts[k], PREEMPT_LAST_STEP, b, sizeof(b));
        *what = files[k];
        if (strcmp(a, b) != 0) { return 0; }
    }
    char *full = picture_untitled("preempt_full"), *run = picture_untitled(name);
    int same = full && run && strcmp(full, run) == 0;
    free(full);
    free(run);
    *what = PLOT_FILE_NAME;
    return same;
}

// Runs `name` with --resume auto until it completes: the first run meets the toy's raised signal (g_raise_at_*) or
// the signal this process sends after signal_after_s (>= 0), the later ones run undisturbed. Returns the number of runs, or -1 when one failed or the attempts ran out. *stops:
// runs that ended with EXIT_PREEMPTED, each with its stop line and a checkpoint of the step it names.
static int run_until_done(const char *name, double signal_after_s, int *stops, char *why, size_t cap) {
    *stops = 0;
    for (int attempt = 1; attempt <= PREEMPT_MAX_ATTEMPTS; attempt++) {
        Run r = make_run(name, PREEMPT_OPTIONS);
        Child c;
        child_start(&c, run_child, &r);
        if (attempt == 1 && signal_after_s >= 0) {
            poll(NULL, 0, (int)(signal_after_s * 1e3));
            kill(c.pid, SIGTERM);
        }
        child_wait(&c, now_s() + RUN_TIMEOUT_S);
        g_raise_at_fb = g_raise_at_update = 0;
        if (c.status == 0) { return attempt; }
        if (c.status == 128 + SIGTERM && attempt == 1 && signal_after_s >= 0) { continue; } // before the handler
        if (c.status != EXIT_PREEMPTED) {
            format_into(why, cap, "run %d of '%s' exited %d: %s", attempt, name, c.status, c.err);
            return -1;
        }
        size_t n;
        char *out = read_file(r.stdout_path, &n);
        const char *line = out ? strstr(out, "stopped by SIGTERM with a checkpoint") : NULL;
        int step = 0;
        while (line && line > out && line[-1] != '\n') { line--; } // to the start of the line: "step N/24 | ..."
        if (line) { sscanf(line, "step %d/", &step); }
        char ckpt[CKPT_PATH_LEN], rel[CKPT_PATH_LEN];
        snprintf(rel, sizeof(rel), "%s/state_%08d.bin", name, step);
        scratch_path(ckpt, rel);
        free(out);
        if (step < 1 || !file_exists(ckpt)) {
            snprintf(why, cap, "run %d of '%s' exited %d without a stop line naming a step with a checkpoint (%s)",
                     attempt, name, c.status, ckpt);
            return -1;
        }
        // the stdout file is appended to by every run of the folder: only the newest stop line is this run's
        if (truncate(r.stdout_path, 0) != 0) { snprintf(why, cap, "cannot empty '%s'", r.stdout_path); return -1; }
        (*stops)++;
    }
    snprintf(why, cap, "'%s' was not done after %d runs", name, PREEMPT_MAX_ATTEMPTS);
    return -1;
}

static void test_preemption(void) {
    char why[8192] = "";
    Run full = make_run("preempt_full", PREEMPT_OPTIONS);
    double t0 = now_s();
    Child c = run_train(&full);
    double run_s = now_s() - t0;
    check(c.status == 0, "preempt_uninterrupted_run", "status %d: %s", c.status, c.err);

    // Signals at fixed points inside steps: every micro-step of a step and its update, early and late in the run,
    // and during a validation step (4, 8, ...) and a checkpoint step (5, 10, ...). Each run raises one signal once.
    const int fb_points[] = {1, 2, 9, 10, 16, 45}, update_points[] = {1, 4, 5, 12, 23};
    int n_fb = (int)(sizeof(fb_points) / sizeof(fb_points[0]));
    int n_up = (int)(sizeof(update_points) / sizeof(update_points[0]));
    int all_same = 1, all_stopped = 1, all_recorded = 1;
    char differs[256] = "";
    for (int i = 0; i < n_fb + n_up; i++) {
        char name[64];
        snprintf(name, sizeof(name), "preempt_at_%d", i);
        g_raise_at_fb = i < n_fb ? fb_points[i] : 0;
        g_raise_at_update = i < n_fb ? 0 : update_points[i - n_fb];
        g_calls_fb = g_calls_update = 0; // each child counts from here (fork copies them)
        int stops, runs = run_until_done(name, -1.0, &stops, why, sizeof(why));
        all_stopped &= runs == 2 && stops == 1;
        all_same &= runs > 0 && same_as_uninterrupted(name);
        const char *what;
        if (runs > 0 && !same_records_as_uninterrupted(name, &what) && all_recorded) {
            all_recorded = 0;
            snprintf(differs, sizeof(differs), "'%s' (signal at call %d of %s)", what,
                     i < n_fb ? fb_points[i] : update_points[i - n_fb], i < n_fb ? "forward_backward" : "update");
        }
        if (runs < 0 || !(runs == 2 && stops == 1)) { break; }
    }
    check(all_stopped, "preempt_signal_in_step_stops_with_checkpoint",
          "a run signalled once did not stop once with EXIT_PREEMPTED and finish on its next run: %s", why);
    check(all_same, "preempt_resumed_runs_identical", "a stopped and resumed run's final files differ from the "
          "uninterrupted run's: %s", why);
    check(all_recorded, "preempt_resumed_runs_record_the_same", "a stopped and resumed run's %s differs from the "
          "uninterrupted run's", differs);

    // Signals at random times (seeded: a failure names its trial): anywhere in the run, start-up and checkpoint
    // writes included; a signal before the handler is installed kills the run, which then starts afresh.
    uint64_t rng = PREEMPT_RNG_SEED;
    int async_same = 1, async_stops = 0;
    char where[256] = "";
    const char *what = "";
    for (int i = 0; i < PREEMPT_ASYNC_TRIALS && async_same; i++) {
        char name[64];
        snprintf(name, sizeof(name), "preempt_async_%d", i);
        double after = run_s * rng_uniform(rng, 0, (uint64_t)i);
        int stops, runs = run_until_done(name, after, &stops, why, sizeof(why));
        async_stops += stops;
        async_same &= runs > 0 && same_as_uninterrupted(name) && same_records_as_uninterrupted(name, &what);
        snprintf(where, sizeof(where), "trial %d (seed %d, signal after %.4f s of a %.4f s run)", i, PREEMPT_RNG_SEED,
                 after, run_s);
    }
    check(async_same, "preempt_random_signals_identical", "%s: the final files or '%s' differ: %s", where, what, why);
    printf("note: %d of %d runs signalled at random times stopped with a checkpoint (the rest ended first)\n",
           async_stops, PREEMPT_ASYNC_TRIALS);

    // A second signal: out at once, 128 + SIGTERM, nothing written by that step.
    g_raise_at_update = 3;
    g_raise_count = 2;
    g_calls_update = 0;
    Run twice = make_run("preempt_twice", PREEMPT_OPTIONS);
    c = run_train(&twice);
    g_raise_at_update = 0;
    g_raise_count = 1;
    char ckpt[CKPT_PATH_LEN];
    scratch_path(ckpt, "preempt_twice/model_00000003.bin");
    check(c.status == 128 + SIGTERM && strstr(c.err, "a second signal: exiting at once, without a checkpoint") &&
              !file_exists(ckpt),
          "preempt_second_signal_exits_at_once", "status %d (wanted %d), stderr '%s'", c.status, 128 + SIGTERM,
          c.err);
}

// One rank of two whose peer received SIGUSR1 (the fake world's maximum says so): it stops after its first step too.
static void fake_peer_signalled(double *x, int n) {
    for (int i = 0; i < n; i++) { x[i] = x[i] > SIGUSR1 ? x[i] : SIGUSR1; }
}
static Launcher fake_rank0_peer_signalled(void) {
    Launcher l = fake_launch(0);
    l.max_over_world = fake_peer_signalled;
    return l;
}

static void test_preemption_agreed(void) {
    Run r = make_run("preempt_peer", PREEMPT_OPTIONS);
    r.launch = fake_rank0_peer_signalled;
    Child c = run_train(&r);
    size_t n;
    char *out = read_file(r.stdout_path, &n);
    char ckpt[CKPT_PATH_LEN];
    scratch_path(ckpt, "preempt_peer/state_00000001.bin");
    check(c.status == EXIT_PREEMPTED && out && strstr(out, "step 1/24 | stopped by SIGUSR1 with a checkpoint") &&
              file_exists(ckpt),
          "preempt_peer_signal_stops_every_rank", "status %d, stdout '%s', stderr '%s'", c.status, out ? out : "",
          c.err);
    free(out);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    write_shards();
    test_run_and_resume();
    test_restart_and_auto();
    test_non_finite();
    test_lock_and_stale_files();
    test_state_without_model();
    test_corrupt_checkpoint_touches_nothing();
    test_version1_resume();
    test_refusals();
    test_init_from();
    test_data_parallel_ranks();
    test_validation_over_ranks();
    test_preemption();
    test_preemption_agreed();
    if (g_test_failures == 0) {
        char cmd[CKPT_PATH_LEN + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) { printf("could not remove %s\n", g_dir); }
    } else {
        printf("scratch folder kept: %s\n", g_dir);
    }
    return test_exit();
}
