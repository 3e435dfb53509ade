/*
 * trainer.h: the training loop both builds share, over a ModelOps table (model_ops.h).
 *
 * train_main() reads like the run it drives: parse and check every option, check the output folder, open the
 * data, read what the run starts from (the latest checkpoint with --resume 1, or --init-from's model file), build
 * the model, start it, then train: each step zeroes the gradients, runs the gradient-accumulation micro-steps,
 * updates with the scheduled learning rate, logs, and now and then validates, scores a multiple-choice set
 * (llmc/eval.h), samples text, and writes a checkpoint. Everything that can be wrong with the command line, the
 * output folder, the data or the file the run starts from is reported before anything in the output folder is made
 * or touched, and nothing a previous run wrote is overwritten: a folder that holds a run is only ever continued
 * (--resume 1).
 *
 * Several processes (a Launcher from the build: world, rank, collectives): every rank runs the same loop on its
 * stride of each global batch (data rank and size from the mesh, llmc/mesh.h) and checks everything before any
 * work; the communicators come up only after that, so no rank waits on a peer that refused its options. Only
 * rank 0 prints, writes log.txt, metrics.jsonl, loss.svg and checkpoints; the logged loss is the mean over all
 * ranks' tokens. Each rank reads the checkpoint it resumes from, so the output folder must be one that every rank
 * sees.
 */
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include <signal.h>
#include <sys/file.h>
#include <time.h>

#include "bootstrap.h"
#include "checkpoint.h"
#include "config.h"
#include "dataloader.h"
#include "eval.h"
#include "logger.h"
#include "model_ops.h"
#include "options.h"
#include "rng.h"
#include "schedule.h"
#include "tokenizer.h"

typedef ModelOps (*ModelFactory)(const GPTConfig *config, const Options *opts, const Mesh *mesh, int B, int T);
// A build's check of the model before any work: fails with one line where the build cannot run it (NULL where it
// runs every description).
typedef void (*ModelCheck)(const GPTConfig *config);

// What a run starts from, read in full and checked before anything in --out-dir is touched, then given to the model
// once it is built: a checkpoint (weights, AdamW moments, FP8 history, data position), or --init-from's weights.
typedef struct {
    float *params, *m, *v;  // NULL where the run starts fresh; m and v NULL for --init-from
    Fp8History fp8;         // a checkpoint's, for a run in fp8 (ring NULL otherwise)
    TrainProgress progress; // a checkpoint's
} StartState;

static inline void start_state_free(StartState *s) {
    free(s->params);
    free(s->m);
    free(s->v);
    fp8_history_free(&s->fp8);
    memset(s, 0, sizeof(*s));
}

#define SAMPLE_COUNTER_STRIDE 65536 // sample token i of step s draws counter s * stride + i (i < seq_len <= stride)

typedef struct {
    Options o;
    GPTConfig config;
    ParamLayout layout;
    ModelOps ops;
    Launcher launcher;
    Mesh mesh;
    int is_root;               // rank 0: the one that prints and writes files
    int data_ranks, accum;     // ranks that read different tokens (DP x GTP, the data group), micro-steps a step
    int lock_fd;               // rank 0: its lock on --out-dir (out_dir_lock), -1 elsewhere
    int last_checkpoint;       // the step of the run's latest complete checkpoint, -1 while it has none
    long long tokens_per_step; // over all ranks
    DataLoader train, val;
    int has_val;
    Eval eval; // --eval-data's plan
    int has_eval;
    Tokenizer tok;
    int has_tok;
    int sample_start; // the id a sample follows (tokenizer_document_start)
    Logger log;
    ResumeKeys keys;
    StartState start;
    int *inputs, *targets; // one micro-batch, B x T
} Trainer;

// ----------------------------------------------------------------------------------------------------------
// stopping on a signal

/*
 * SIGTERM, SIGINT and SIGUSR1 (Slurm's warning ahead of a time limit or a preemption: sbatch --signal) ask the run to
 * stop at the end of its current optimizer step (its validation included, where it has one): the ranks agree on that
 * step (one rank's request stops them all), write a checkpoint there and exit with EXIT_PREEMPTED, so that a requeued
 * job whose command line has --resume auto continues it exactly, log and metrics included. A second signal ends the
 * process at once, with the status a shell gives a death by it.
 */
#define EXIT_PREEMPTED 75 // sysexits.h's EX_TEMPFAIL: a temporary failure, try again (--resume auto does)
#define SIGNAL_NOTE_CHARS 256

static volatile sig_atomic_t g_stop_signal = 0;
// What the handler says, made before any signal arrives: rank 0 on the first signal, every rank on the second.
static char g_first_signal_note[SIGNAL_NOTE_CHARS], g_second_signal_note[SIGNAL_NOTE_CHARS];

static inline const char *signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
    }
}

// Async-signal-safe: a flag, write(2) and _exit only.
static void trainer_on_signal(int sig) {
    if (g_stop_signal) {
        ssize_t w = write(STDERR_FILENO, g_second_signal_note, strlen(g_second_signal_note));
        (void)w;
        _exit(128 + sig);
    }
    g_stop_signal = sig;
    ssize_t w = write(STDOUT_FILENO, g_first_signal_note, strlen(g_first_signal_note));
    (void)w;
}

static inline void trainer_catch_signals(int rank) {
    if (rank == 0) {
        snprintf(g_first_signal_note, sizeof(g_first_signal_note), "stopping at the end of this step, with a "
                 "checkpoint (a second signal exits at once, without one)\n");
    }
    snprintf(g_second_signal_note, sizeof(g_second_signal_note), "[train_gpt rank %d] a second signal: exiting at "
             "once, without a checkpoint; the run resumes from its last complete one\n", rank);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = trainer_on_signal;
    sa.sa_flags = SA_RESTART; // reads, writes and waits in progress carry on: the step ends normally
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) { sigaction(sigs[i], &sa, NULL); }
}

static inline double wall_seconds(void) { // monotonic: a clock adjustment mid-step must not skew the timing
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ----------------------------------------------------------------------------------------------------------
// the output folder

// --out-dir and the folders above it (rank 0 here; the GPU build's ranks too, for their GEMM choices).
static inline void make_dirs(const char *path) { make_dirs_named(path, "--out-dir"); }

// The name of a file in out_dir that a run writes (log, metrics, plot, model, state), or NULL if there is none.
static inline const char *out_dir_run_file(const char *out_dir, char *name, size_t cap) {
    DIR *d = opendir(out_dir);
    if (!d) { return NULL; }
    const char *found = NULL;
    for (struct dirent *e = readdir(d); e && !found; e = readdir(d)) {
        if (strcmp(e->d_name, LOG_FILE_NAME) == 0 || strcmp(e->d_name, METRICS_FILE_NAME) == 0 ||
            strcmp(e->d_name, PLOT_FILE_NAME) == 0 || strncmp(e->d_name, "model_", 6) == 0 ||
            strncmp(e->d_name, "state_", 6) == 0) {
            snprintf(name, cap, "%s", e->d_name);
            found = name;
        }
    }
    closedir(d);
    return found;
}

/*
 * Rank 0's exclusive lock on out_dir (made if needed), held until the process ends, so that a second run into the
 * same folder is refused instead of interleaving its checkpoints with the first's. Returns the lock's descriptor.
 * The lock file is emptied and given this process's id, so it must be the run's own: a symbolic link is not followed
 * (O_NOFOLLOW), and anything but a regular file of one name (a FIFO, a hard link to another file) is refused.
 */
#define OUT_DIR_LOCK_NAME ".train_gpt.lock"
#define LOCK_PID_CHARS 32

// Fails naming the process that holds out_dir's lock file `path` (open as fd): the PID the file holds.
LLMC_NORETURN static inline void out_dir_in_use(int fd, const char *out_dir, const char *path) {
    char holder[LOCK_PID_CHARS] = "";
    ssize_t got = pread(fd, holder, sizeof(holder) - 1, 0);
    holder[got > 0 ? got : 0] = '\0';
    fail("--out-dir '%s' is in use by another run (process %s holds '%s'); wait for it to end or choose another "
         "--out-dir", out_dir, holder[0] ? holder : "?", path);
}

static inline int out_dir_lock(const char *out_dir) {
    make_dirs(out_dir);
    char path[CKPT_PATH_LEN + 32];
    snprintf(path, sizeof(path), "%s/%s", out_dir, OUT_DIR_LOCK_NAME);
    struct stat st;
    int fd = open_regular(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644, &st);
    if (fd == -1 && errno == ELOOP) {
        fail("the lock file '%s' is a symbolic link, which a run never makes; remove the link (the file it points to "
             "is left as it is)", path);
    }
    if (fd == OPEN_NOT_REGULAR) {
        fail("the lock file '%s' is %s, not a regular file; remove it", path, file_kind(st.st_mode));
    }
    if (fd >= 0 && st.st_nlink != 1) {
        fail("the lock file '%s' has %lu names (hard links), so it is another file too; remove this name (the file "
             "keeps its others)", path, (unsigned long)st.st_nlink);
    }
    if (fd < 0) { fail("cannot create the lock file '%s': %s; check that --out-dir is writable", path, strerror(errno)); }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { out_dir_in_use(fd, out_dir, path); }
    char pid[LOCK_PID_CHARS];
    int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        fail("cannot write the lock file '%s': %s", path, strerror(errno));
    }
    return fd;
}

/*
 * Fails where a live run holds out_dir's lock, before the folder's contents are judged (a run in progress looks like
 * one that stopped), making nothing: the lock file is only opened where one exists, and locked shared for an instant
 * (a live run holds it exclusively; the lock of this run is out_dir_lock's, once every check has passed).
 */
static inline void out_dir_check_not_in_use(const char *out_dir) {
    char path[CKPT_PATH_LEN + 32];
    snprintf(path, sizeof(path), "%s/%s", out_dir, OUT_DIR_LOCK_NAME);
    struct stat st;
    int fd = open_regular(path, O_RDONLY | O_NOFOLLOW, 0, &st);
    if (fd < 0) { return; } // none, or none a run made (out_dir_lock says what is wrong with it)
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) { out_dir_in_use(fd, out_dir, path); }
    close(fd);
}

// Removes the temporary files that interrupted atomic writes left in out_dir (AtomicFile's "<name>.tmp.<pid>"):
// under the lock no other run writes there. Returns how many.
static inline int out_dir_remove_stale(const char *out_dir) {
    DIR *d = opendir(out_dir);
    if (!d) { return 0; }
    int removed = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (!strstr(e->d_name, ATOMIC_TMP_MARK)) { continue; }
        char path[CKPT_PATH_LEN + 256];
        snprintf(path, sizeof(path), "%s/%s", out_dir, e->d_name);
        if (unlink(path) == 0) { removed++; }
    }
    closedir(d);
    return removed;
}

/*
 * Returns the checkpoint step to resume from, or -1 for a new run; fails where the folder and --resume disagree.
 * *restart: the run starts again over an earlier attempt that stopped before its first complete checkpoint (its
 * files are the run's own: its log is continued, an incomplete checkpoint file written again), which --resume 1 and
 * auto do and --resume 0 refuses (it never writes into a folder that holds a run).
 */
static inline int out_dir_check(const Options *o, int *restart) {
    int latest = checkpoint_find_latest(o->out_dir);
    ResumeMode mode = options_resume_mode(o);
    char name[256];
    int attempt = out_dir_run_file(o->out_dir, name, sizeof(name)) != NULL;
    *restart = 0;
    if (mode == RESUME_NO) {
        if (latest >= 0) {
            fail("--out-dir '%s' holds checkpoints of an earlier run; pass --resume 1 to continue it or choose "
                 "another --out-dir", o->out_dir);
        }
        if (attempt) {
            fail("--out-dir '%s' holds '%s' of an earlier run that stopped before its first complete checkpoint; pass "
                 "--resume 1 to start it again there, or choose another --out-dir", o->out_dir, name);
        }
        return -1;
    }
    if (latest < 0) {
        if (mode == RESUME_YES && !attempt) {
            fail("--resume 1 but --out-dir '%s' holds no run to continue; run without --resume 1 (or with --resume "
                 "auto) to start a new one", o->out_dir);
        }
        *restart = attempt;
        return -1;
    }
    if (latest > o->steps) {
        fail("the latest checkpoint in '%s' is at step %d, past --steps %d; pass --steps %d or more", o->out_dir,
             latest, o->steps, latest);
    }
    return latest;
}

// ----------------------------------------------------------------------------------------------------------
// setting up

static inline void trainer_open_data(Trainer *tr) {
    const Options *o = &tr->o;
    long long windows_per_step = tr->tokens_per_step / o->seq_len;
    int data_rank = tr->mesh.data_rank;
    dataloader_init(&tr->train, o->train_data, o->batch_size, o->seq_len, data_rank, tr->data_ranks,
                    windows_per_step, (uint64_t)o->seed, 1, tr->config.vocab_size);
    tr->has_val = o->val_every > 0 && o->val_data[0] != '\0';
    if (tr->has_val) {
        dataloader_open(&tr->val, o->val_data, o->batch_size, o->seq_len, data_rank, tr->data_ranks,
                        tr->config.vocab_size);
    }
    tr->has_eval = o->eval_data[0] != '\0';
    if (tr->has_eval) {
        eval_open(&tr->eval, o->eval_data, o->eval_dump, tr->config.vocab_size, o->batch_size, o->seq_len,
                  tr->mesh.tp, data_rank, tr->data_ranks);
    }
    tr->has_tok = o->sample_every > 0;
    if (tr->has_tok) {
        JsonValue doc;
        tokenizer_open(&tr->tok, o->tokenizer, &doc);
        json_free(&doc); // the vocabulary is all a sample needs
        if (tr->tok.vocab_size != tr->config.vocab_size) { // a sample would decode another vocabulary's text
            fail("--tokenizer '%s' holds a vocabulary of %d tokens, but the model's is %d: pass the tokenizer the data "
                 "was made with (data/gpt2 for GPT-2's, data/llama3/tokenizer.json for Llama 3's) or --sample-every 0",
                 o->tokenizer, tr->tok.vocab_size, tr->config.vocab_size);
        }
        tr->sample_start = tokenizer_document_start(&tr->tok);
        if (tr->sample_start < 0) {
            fail("--tokenizer '%s' has no special token for a sample to start after (GPT-2's <|endoftext|>, Llama 3's "
                 "<|begin_of_text|>): give its tokenizer.json with added_tokens, or pass --sample-every 0",
                 o->tokenizer);
        }
    }
    size_t bt = (size_t)o->batch_size * (size_t)o->seq_len;
    tr->inputs = (int *)malloc_check(bt * sizeof(int), "input tokens");
    tr->targets = (int *)malloc_check(bt * sizeof(int), "target tokens");
}

// The run's FP8 amax history in *h (allocated here: fp8_history_free), or NULL where it runs no FP8 (its model has
// no history: ModelOps).
static inline Fp8History *trainer_fp8_history(Trainer *tr, Fp8History *h) {
    if (!options_fp8(&tr->o)) { return NULL; }
    fp8_history_init(h, tr->config.num_layers, tr->o.fp8_amax_history);
    return h;
}

// Reads checkpoint `step` into tr->start and verifies it: both files' checksums, its step, its FP8 history.
static inline void trainer_read_checkpoint(Trainer *tr, int step) {
    StartState *st = &tr->start;
    size_t n = tr->layout.total;
    st->params = (float *)malloc_check(n * sizeof(float), "checkpoint parameters");
    st->m = (float *)malloc_check(n * sizeof(float), "checkpoint AdamW m");
    st->v = (float *)malloc_check(n * sizeof(float), "checkpoint AdamW v");
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(tr->o.out_dir, step, model_path, state_path);
    st->progress = state_file_read(state_path, &tr->keys, st->params, st->m, st->v, n,
                                   trainer_fp8_history(tr, &st->fp8));
    checkpoint_verify(model_path, state_path, step, &st->progress);
}

// Reads --init-from's weights into tr->start: a file of this run's shape, every weight finite.
static inline void trainer_read_init_from(Trainer *tr) {
    float *params = tr->start.params = (float *)malloc_check(tr->layout.total * sizeof(float), "model file parameters");
    model_file_read(tr->o.init_from, &tr->config, params);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) { // a NaN would train NaN to the end
        for (size_t i = 0; i < tr->layout.size[t]; i++) {
            float x = params[tr->layout.offset[t] + i];
            if (!isfinite(x)) {
                fail("--init-from '%s': %s[%zu] is %g; the model file holds non-finite weights, use another one",
                     tr->o.init_from, PARAM_NAMES[t], i, x);
            }
        }
    }
}

// Loads checkpoint `step` (trainer_read_checkpoint's) into the model and the training loader.
static inline void trainer_resume(Trainer *tr, int step) {
    StartState *st = &tr->start;
    const TrainProgress *pr = &st->progress;
    tr->ops.set_params(tr->ops.ctx, st->params);
    tr->ops.set_opt_state(tr->ops.ctx, st->m, st->v);
    if (st->fp8.ring) { tr->ops.set_fp8_history(tr->ops.ctx, &st->fp8); }
    DataLoaderState ds = {pr->data_epoch, pr->data_next};
    dataloader_set_state(&tr->train, ds);
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(tr->o.out_dir, step, model_path, state_path);
    logger_line(&tr->log, "resumed from '%s' at step %d\n", state_path, step);
    if (pr->model_checksum == 0) {
        logger_line(&tr->log, "'%s' is a version %d state file, written before checksums: this resume is unverified\n",
                    state_path, STATE_FILE_VERSION_UNCHECKED);
    }
    if (strcmp(pr->precision, tr->o.precision) != 0) {
        logger_line(&tr->log, "the checkpoint was written in %s and continues in %s: weights and optimizer state carry "
                    "over%s\n", pr->precision, tr->o.precision,
                    st->fp8.ring ? ", the FP8 amax history starts empty" : "");
    }
    start_state_free(st);
}

// Loads --init-from's weights (trainer_read_init_from's) into the model.
static inline void trainer_init_from(Trainer *tr) {
    tr->ops.set_params(tr->ops.ctx, tr->start.params);
    start_state_free(&tr->start);
    if (tr->is_root) { printf("initialized from model file '%s'\n", tr->o.init_from); }
}

// The run's model, under the loss plot's title.
static inline void trainer_plot_description(const Trainer *tr, char *out, size_t cap) {
    const GPTConfig *c = &tr->config;
    snprintf(out, cap, "%d layers, %d channels, %d heads (%.2fM parameters), %.16s, %lld tokens a step",
             c->num_layers, c->channels, c->num_heads, (double)tr->layout.total / 1e6, tr->o.precision,
             tr->tokens_per_step);
}

static inline void trainer_print_config(const Trainer *tr) {
    if (!tr->is_root) { return; }
    const GPTConfig *c = &tr->config;
    const Options *o = &tr->o;
    const Mesh *m = &tr->mesh;
    printf("train_gpt | device %s | precision %s\n", tr->ops.device_name, o->precision);
    printf("mesh: world %d = dp %d x gtp %d x tp %d | ZeRO-1 %s\n", m->world, m->dp, m->gtp, m->tp,
           o->zero ? "on" : "off");
    char arch[512];
    config_describe(c, arch, sizeof(arch));
    printf("model: %d layers, %d channels, %d heads, %d positions, vocabulary %d (padded %d) | %.2fM parameters\n",
           c->num_layers, c->channels, c->num_heads, c->max_seq_len, c->vocab_size, c->padded_vocab_size,
           (double)tr->layout.total / 1e6);
    printf("architecture %s\n", arch);
    printf("batch: B %d x T %d x %d micro-steps x %d data-parallel ranks = %lld tokens per step | %d steps\n",
           o->batch_size, o->seq_len, tr->accum, tr->data_ranks, tr->tokens_per_step, o->steps);
    printf("options:\n");
    options_print(stdout, o);
    fflush(stdout);
}

// ----------------------------------------------------------------------------------------------------------
// one optimizer step, validation, samples

// *x summed over the data group (DP x GTP ranks; itself on one process).
static inline void trainer_sum_over_data_ranks(const Trainer *tr, double *x) {
    if (tr->launcher.sum_over_data_ranks) { tr->launcher.sum_over_data_ranks(x, 1); }
}

// The signal that asks every rank to stop after this step (the largest any rank received), or 0: the same on all.
static inline int trainer_stop_signal(const Trainer *tr) {
    double sig = (double)g_stop_signal;
    if (tr->launcher.max_over_world) { tr->launcher.max_over_world(&sig, 1); }
    return (int)sig;
}

// The update of step `step` (0-based) as the options define it: what the step's last micro-step and its update get.
static inline UpdateArgs update_args_at(const Options *o, int step) {
    UpdateArgs u = {lr_at_step(o, step), o->weight_decay, o->beta1, o->beta2, o->eps, o->grad_clip, step + 1};
    return u;
}

// Runs step `step` (0-based) and returns its statistics (step = steps done after it).
static inline StepStats trainer_step(Trainer *tr, int step) {
    const Options *o = &tr->o;
    double t0 = wall_seconds();
    float loss_scale = 1.0f / (float)((double)o->batch_size * o->seq_len * tr->accum * tr->data_ranks);
    UpdateArgs args = update_args_at(o, step);
    tr->ops.zero_grad(tr->ops.ctx);
    double loss = 0.0;
    for (int micro = 0; micro < tr->accum; micro++) {
        dataloader_next(&tr->train, tr->inputs, tr->targets);
        loss += tr->ops.forward_backward(tr->ops.ctx, tr->inputs, tr->targets, o->batch_size, o->seq_len, loss_scale,
                                         micro == tr->accum - 1 ? &args : NULL);
    }
    float norm = tr->ops.update(tr->ops.ctx, &args); // returns a host value, so the device work is done
    trainer_sum_over_data_ranks(tr, &loss);          // after the update: the host queued it without waiting
    double seconds = wall_seconds() - t0;

    StepStats s;
    s.step = step + 1;
    s.steps = o->steps;
    s.loss = (float)(loss / ((double)tr->accum * tr->data_ranks));
    s.lr = args.lr;
    s.norm = norm;
    s.ms = seconds * 1e3;
    s.tokens_per_s = (double)tr->tokens_per_step / seconds;
    s.mfu_percent = -1.0;
    s.comm_ms = tr->ops.exposed_comm_ms ? tr->ops.exposed_comm_ms(tr->ops.ctx) : -1.0;
    if (tr->ops.peak_flops > 0) {
        // per GPU: the step's FLOPs are spread over every rank (data- and tensor-parallel)
        double flops = flops_per_token(&tr->config, tr->layout.total, o->seq_len) * s.tokens_per_s / tr->mesh.world;
        s.mfu_percent = 100.0 * flops / tr->ops.peak_flops;
    }
    return s;
}

// Mean loss per token over the validation pass: the first --val-batches x --batch-size windows of the validation
// set (or all it holds), split over the data ranks (dataloader.h: the same tokens for every layout).
static inline float trainer_validate(Trainer *tr) {
    const Options *o = &tr->o;
    int B = o->batch_size, T = o->seq_len;
    long long windows = val_pass_windows(dataloader_num_windows(&tr->val), o->val_batches, B);
    long long batches = val_micro_batches(windows, B, tr->data_ranks);
    double sum = 0.0;
    for (long long i = 0; i < batches; i++) {
        int rows = dataloader_val_batch(&tr->val, windows, i, tr->inputs, tr->targets);
        sum += tr->ops.eval_loss(tr->ops.ctx, tr->inputs, tr->targets, B, T, rows);
    }
    trainer_sum_over_data_ranks(tr, &sum);
    return (float)(sum / ((double)windows * T));
}

// Scores --eval-data (llmc/eval.h) on every rank and logs it (rank 0).
static inline void trainer_evaluate(Trainer *tr, int step) {
    double t0 = wall_seconds();
    EvalCounts c = eval_run(&tr->eval, &tr->ops, &tr->launcher, tr->is_root, tr->inputs, tr->targets);
    logger_eval(&tr->log, step, c.correct, c.correct_norm, c.examples, (wall_seconds() - t0) * 1e3);
}

// Draws from softmax(logits[0..V)) with the uniform number u, by inverting the cumulative distribution.
static inline int sample_token(const float *logits, int V, double u) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) { maxv = logits[i] > maxv ? logits[i] : maxv; }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += exp((double)(logits[i] - maxv)); }
    double target = u * sum, cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)(logits[i] - maxv));
        if (cdf > target) { return i; }
    }
    return V - 1; // u * sum rounded past the last partial sum
}

// Prints text with its control bytes (other than newline and tab) left out, as llm.c's safe_printf does: an
// untrained model samples byte tokens such as NUL or escape that would garble a terminal or a log.
static inline void print_text_safely(const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c >= 0x20 && c != 0x7f) || c == '\n' || c == '\t') { putchar(c); }
    }
}

// Generates --sample-tokens tokens at temperature 1 after the tokenizer's document start (GPT-2's <|endoftext|>,
// Llama 3's <|begin_of_text|>: what the data put before each document) and prints them (rank 0). The random
// numbers come from (seed, RNG_STREAM_SAMPLE, step, i), so a sample needs no generator state and a resumed run
// prints the same text. Every rank computes the sample: a model split over ranks needs them all for a forward.
static inline void trainer_sample(Trainer *tr, int step) {
    const Options *o = &tr->o;
    int T = o->seq_len, n = o->sample_tokens;
    int *tokens = (int *)malloc_check((size_t)T * sizeof(int), "sample tokens");
    float *logits = (float *)malloc_check((size_t)tr->config.padded_vocab_size * sizeof(float), "sample logits");
    for (int i = 0; i < T; i++) { tokens[i] = tr->sample_start; } // positions past the sample do not matter (causal)
    for (int i = 0; i < n; i++) {
        tr->ops.logits_at(tr->ops.ctx, tokens, T, i, logits);
        double u = rng_uniform((uint64_t)o->seed, RNG_STREAM_SAMPLE, (uint64_t)step * SAMPLE_COUNTER_STRIDE + i);
        tokens[i + 1] = sample_token(logits, tr->config.vocab_size, u);
    }
    if (!tr->is_root) {
        free(logits);
        free(tokens);
        return;
    }
    size_t cap = (size_t)n * TOKENIZER_MAX_TOKEN_BYTES + 1;
    char *text = (char *)malloc_check(cap, "sample text");
    size_t len = tokenizer_decode(&tr->tok, tokens + 1, n, text, cap);
    printf("step %d/%d | sample:\n", step, o->steps);
    print_text_safely(text, len);
    printf("\n---\n");
    fflush(stdout);
    free(text);
    free(logits);
    free(tokens);
}

static inline void trainer_checkpoint(Trainer *tr, int step) {
    size_t n = tr->layout.total;
    float *params = (float *)malloc_check(n * sizeof(float), "checkpoint parameters");
    float *m = (float *)malloc_check(n * sizeof(float), "checkpoint AdamW m");
    float *v = (float *)malloc_check(n * sizeof(float), "checkpoint AdamW v");
    tr->ops.get_params(tr->ops.ctx, params); // every rank: a sharded optimizer gathers its state here
    tr->ops.get_opt_state(tr->ops.ctx, m, v);
    // The loader's position is the same on every rank (each is at the same step of its stride), so rank 0's
    // state file resumes them all.
    DataLoaderState ds = dataloader_get_state(&tr->train);
    TrainProgress pr = {step, ds.epoch, ds.next, "", 0};
    Fp8History hist;
    Fp8History *fp8 = trainer_fp8_history(tr, &hist);
    if (fp8) { tr->ops.get_fp8_history(tr->ops.ctx, fp8); }
    if (tr->is_root) { checkpoint_write(tr->o.out_dir, &tr->config, &tr->keys, &pr, params, m, v, fp8); }
    if (fp8) { fp8_history_free(fp8); }
    free(params);
    free(m);
    free(v);
    logger_line(&tr->log, "step %d/%d | checkpoint %s/model_%08d.bin\n", step, tr->o.steps, tr->o.out_dir, step);
    if (tr->launcher.barrier) { tr->launcher.barrier("the checkpoint rank 0 writes", 1); }
    tr->last_checkpoint = step;
}

static inline int every(int n, int step) { return n > 0 && step % n == 0; }

// Stops a run whose loss or gradient norm is no longer finite, before it writes anything of that step: every rank
// sees the same values (both are reduced over the ranks), so all stop alike.
static inline void trainer_check_finite(const Trainer *tr, int step, const char *what, float value, float norm) {
    if (isfinite(value) && isfinite(norm)) { return; }
    char next[96] = "there is no checkpoint yet: start again";
    if (tr->last_checkpoint >= 0) {
        snprintf(next, sizeof(next), "the last checkpoint is step %d: resume from it", tr->last_checkpoint);
    }
    fail("step %d: the %s is %g and the gradient norm %g: the run diverged; nothing of this step was written, %s with "
         "a lower --lr or more --warmup-steps", step, what, value, norm, next);
}

// Ends a run stopped by signal `sig` after `step`: its checkpoint (unless the step wrote one, or --save 0), a line,
// and the picture.
static inline void trainer_stop(Trainer *tr, int step, int sig) {
    const Options *o = &tr->o;
    if (!o->save) {
        logger_line(&tr->log, "step %d/%d | stopped by %s without a checkpoint (--save 0)\n", step, o->steps,
                    signal_name(sig));
    } else {
        if (tr->last_checkpoint != step) { trainer_checkpoint(tr, step); }
        logger_line(&tr->log, "step %d/%d | stopped by %s with a checkpoint: run the same command with --resume auto "
                    "(or 1) to continue\n", step, o->steps, signal_name(sig));
    }
    logger_plot(&tr->log);
}

// Trains from start_step; returns 0 when the run is complete, EXIT_PREEMPTED when a signal stopped it.
static inline int trainer_loop(Trainer *tr, int start_step) {
    const Options *o = &tr->o;
    if (tr->has_eval && start_step == 0) { trainer_evaluate(tr, 0); } // the model before training, the baseline
    for (int step = start_step; step < o->steps; step++) {
        StepStats s = trainer_step(tr, step);
        int done = s.step, last = done == o->steps;
        logger_train(&tr->log, &s, every(o->log_every, done) || last);
        trainer_check_finite(tr, done, "training loss", s.loss, s.norm);
        // A step's validation is part of it, stopped or not: the run resumed after it does not validate it again.
        if (tr->has_val && (every(o->val_every, done) || last)) {
            float val = trainer_validate(tr);
            logger_val(&tr->log, done, o->steps, val);
            trainer_check_finite(tr, done, "validation loss", val, s.norm);
        }
        if (tr->has_eval && (every(o->eval_every, done) || last)) { trainer_evaluate(tr, done); }
        int sig = trainer_stop_signal(tr);
        if (sig && !last) { // the sample of a stopped step is skipped: it changes no state and records nothing
            trainer_stop(tr, done, sig);
            return EXIT_PREEMPTED;
        }
        if (tr->has_tok && every(o->sample_every, done)) { trainer_sample(tr, done); }
        if (o->save && (every(o->checkpoint_every, done) || last)) { trainer_checkpoint(tr, done); }
    }
    logger_plot(&tr->log); // a run without validation is drawn once, at its end
    return 0;
}

// The one-process launcher (the CPU build, tests): refuses a multi-process launch rather than running world
// copies of the same job side by side, each believing it is alone.
static inline Launcher single_process_launch(void) {
    const LaunchVars *v = launch_vars_from_env();
    if (v && getenv(v->world) && env_int(v->world) > 1) {
        fail("this build runs as one process, but %s=%d says this is one of %d: launch one process, or use the GPU "
             "build (train_gpt) for several", v->world, env_int(v->world), env_int(v->world));
    }
    Launcher l;
    memset(&l, 0, sizeof(l));
    l.world = 1;
    return l;
}

static inline void trainer_free(Trainer *tr) {
    if (tr->lock_fd >= 0) { close(tr->lock_fd); } // releases the lock
    if (tr->ops.destroy) { tr->ops.destroy(tr->ops.ctx); }
    dataloader_free(&tr->train);
    if (tr->has_val) { dataloader_free(&tr->val); }
    if (tr->has_eval) { eval_free(&tr->eval); }
    if (tr->has_tok) { tokenizer_free(&tr->tok); }
    logger_close(&tr->log);
    free(tr->inputs);
    free(tr->targets);
}

// ----------------------------------------------------------------------------------------------------------

static inline void trainer_finish(Trainer *tr) {
    if (tr->launcher.finish) { tr->launcher.finish(); }
}

static inline int train_main(int argc, char **argv, LaunchFn launch, ModelFactory make_model,
                             ModelCheck check_model) {
    Trainer tr;
    memset(&tr, 0, sizeof(tr));
    tr.lock_fd = -1;
    Options *o = &tr.o;
    if (options_parse(o, argc, argv)) { return 0; } // --help

    // Where this process stands, then everything the command line and the output folder can get wrong, on
    // every rank, before any work.
    tr.launcher = launch();
    tr.is_root = tr.launcher.rank == 0;
    trainer_catch_signals(tr.launcher.rank);
    tr.mesh = mesh_make(tr.launcher.world, tr.launcher.rank, o->tp, o->gtp);
    mesh_check_world(&tr.mesh);
    tr.data_ranks = tr.mesh.data_size;
    options_validate(o, tr.data_ranks);
    tr.config = options_model_config(o);
    if (check_model) { check_model(&tr.config); }
    mesh_validate(&tr.mesh, &tr.config, o);
    param_layout(&tr.config, &tr.layout);
    tr.accum = options_grad_accum(o, tr.data_ranks);
    tr.tokens_per_step = (long long)o->batch_size * o->seq_len * tr.accum * tr.data_ranks;
    if (o->init_from[0] != '\0') {
        ModelFileHeader h = model_file_header(o->init_from);
        model_file_check_fits(o->init_from, &h, &tr.config);
    }
    tr.keys = resume_keys_make(o, &tr.config, tr.tokens_per_step);
    char data_identity[DATA_IDENTITY_CHARS];
    dataloader_identity(o->train_data, data_identity, sizeof(data_identity));
    resume_keys_add(&tr.keys, RESUME_DATA_KEY, data_identity);
    out_dir_check_not_in_use(o->out_dir);
    int restart;
    int resume_step = out_dir_check(o, &restart);
    tr.last_checkpoint = resume_step;
    if (resume_step >= 0) {
        char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
        checkpoint_paths(o->out_dir, resume_step, model_path, state_path);
        state_file_check(state_path, &tr.keys, tr.layout.total);
    }
    if (resume_step == o->steps) {
        if (tr.is_root) {
            printf("the run in '%s' is complete (checkpoint at step %d of --steps %d); nothing to do\n", o->out_dir,
                   resume_step, o->steps);
        }
        trainer_finish(&tr);
        return 0;
    }

    trainer_open_data(&tr);
    // What the run starts from, read in full and verified (the largest read, so the last check): then it can no
    // longer fail for its sake after the folder was touched.
    if (resume_step >= 0) {
        trainer_read_checkpoint(&tr, resume_step);
    } else if (o->init_from[0] != '\0') {
        trainer_read_init_from(&tr);
    }
    if (tr.launcher.connect) { tr.launcher.connect(&tr.mesh); } // every rank passed its checks
    if (tr.is_root) { // every check passed: now the folder may be made and written
        tr.lock_fd = out_dir_lock(o->out_dir); // (a run that started since out_dir_check_not_in_use is refused here)
        if (restart) {
            printf("'%s' holds an earlier attempt of this run that stopped before its first complete checkpoint; "
                   "starting again from step 0\n", o->out_dir);
        }
        int stale = out_dir_remove_stale(o->out_dir);
        if (stale > 0) {
            printf("removed %d temporary file(s) that an interrupted write left in '%s'\n", stale, o->out_dir);
        }
        char description[LOGGER_DESCRIPTION_LEN];
        trainer_plot_description(&tr, description, sizeof(description));
        logger_open(&tr.log, o->out_dir, resume_step, description); // metrics after the checkpoint: trained again
    }
    tr.ops = make_model(&tr.config, o, &tr.mesh, o->batch_size, o->seq_len);
    trainer_print_config(&tr);
    if (resume_step >= 0) {
        trainer_resume(&tr, resume_step);
    } else if (o->init_from[0] != '\0') {
        trainer_init_from(&tr);
    }
    int status = trainer_loop(&tr, resume_step >= 0 ? resume_step : 0);
    if (tr.is_root && tr.ops.comm_report) { tr.ops.comm_report(tr.ops.ctx); }
    trainer_free(&tr);
    trainer_finish(&tr);
    return status;
}

#endif // LLMC_TRAINER_H
