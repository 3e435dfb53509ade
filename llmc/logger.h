/*
 * logger.h: the per-step console line and the run's files: out_dir/log.txt, out_dir/metrics.jsonl and the
 * loss curve out_dir/loss.svg (llmc/plot.h).
 *
 * log.txt holds llm.c's machine lines, "s:%d trl:%f" (train loss), "s:%d tel:%f" (validation loss) and
 * "s:%d eval:%f" (multiple-choice acc_norm), s being the number of optimizer steps done, plus the human lines the
 * console shows; `grep '^s:'` gives llm.c's format. A resumed run appends, so a run interrupted after its last
 * checkpoint repeats the steps since then.
 *
 * metrics.jsonl holds one JSON object a line, for programs: every step's
 *   {"step":S,"train_loss":..,"lr":..,"norm":..,"ms":..,"tokens_per_s":..[,"mfu_percent":..][,"comm_ms":..]}
 * every validation's {"step":S,"val_loss":..} and every multiple-choice evaluation's
 *   {"step":S,"eval_acc":..,"eval_acc_norm":..,"eval_examples":N,"eval_ms":..}.
 * JSON lines rather than CSV: the kinds of record have different fields, a field this device does not measure (MFU
 * on the CPU, communication on one GPU) is left out instead of being a placeholder column, and a field added later
 * breaks no reader. A value that is not finite (the diverged step, written before the run stops) is null. Unlike log.txt it holds each step once: opening it
 * for a resumed run drops the records after the checkpoint resumed from (a new run starts it empty), and the
 * records kept are what the picture starts from, so loss.svg covers the whole run. loss.svg is written again at
 * every validation and at the end.
 *
 * Every line is flushed as it is written, so a crash loses nothing that was printed. A logger that was never
 * opened (every rank but 0 of a multi-process job) is silent.
 */
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <limits.h>
#include <math.h>

#include "plot.h"
#include "utils.h"

#define LOG_FILE_NAME "log.txt"
#define METRICS_FILE_NAME "metrics.jsonl"
#define PLOT_FILE_NAME "loss.svg"
#define LOGGER_PATH_LEN 4096
#define LOGGER_DESCRIPTION_LEN 256

// Significant digits of the metrics' numbers: 9 round-trip a float, so losses, learning rates and norms read back
// exactly as the run computed them (a resumed run's picture is the uninterrupted run's); timings need fewer.
#define METRICS_FLOAT_DIGITS 9
#define METRICS_TIMING_DIGITS 7

typedef struct {
    FILE *f;       // log.txt
    FILE *metrics; // metrics.jsonl
    char plot_path[LOGGER_PATH_LEN], title[LOGGER_PATH_LEN];
    char description[LOGGER_DESCRIPTION_LEN]; // the picture's subtitle: the model
    PlotSeries train, val, lr; // the run so far, for the picture
    int plotted;               // the training and validation points the picture shows
} Logger;

typedef struct {
    int step, steps; // optimizer steps done, of steps
    float loss, lr, norm;
    double ms, tokens_per_s;
    double mfu_percent; // < 0: no MFU (no peak FLOP/s for this device)
    double comm_ms;     // exposed communication (rank 0's compute stream waiting for collectives); < 0: none
} StepStats;

// ----------------------------------------------------------------------------------------------------------
// metrics.jsonl

// One ,"key":value of a record: null where the value is not finite, so that every line is valid JSON.
static inline void metrics_field(FILE *f, const char *key, double v, int digits) {
    if (isfinite(v)) {
        fprintf(f, ",\"%s\":%.*g", key, digits, v);
    } else {
        fprintf(f, ",\"%s\":null", key);
    }
}

// The number after "key": in a record this logger wrote (NaN for null); 0 where the key is missing.
static inline int metrics_number(const char *line, const char *key, double *v) {
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"%s\":", key);
    const char *p = strstr(line, pattern);
    if (!p) { return 0; }
    p += strlen(pattern);
    if (strncmp(p, "null", 4) == 0) {
        *v = NAN;
        return 1;
    }
    char *end;
    *v = strtod(p, &end);
    return end != p;
}

typedef struct {
    int step;
    int is_train, is_val;            // which kind of record (it has train_loss, or val_loss)
    double train_loss, lr, val_loss; // NaN where the record has none, or null
} MetricsRecord;

// Reads a line (without its newline) this logger wrote; 0 where it is none (a line a crash cut short).
static inline int metrics_parse(const char *line, MetricsRecord *r) {
    size_t n = strlen(line);
    double step;
    if (n < 2 || line[0] != '{' || line[n - 1] != '}' || !metrics_number(line, "step", &step) || !(step >= 0) ||
        step > INT_MAX) {
        return 0;
    }
    r->step = (int)step;
    r->train_loss = r->lr = r->val_loss = NAN;
    r->is_train = metrics_number(line, "train_loss", &r->train_loss);
    metrics_number(line, "lr", &r->lr);
    r->is_val = metrics_number(line, "val_loss", &r->val_loss);
    return 1;
}

// The record in the series the picture is drawn from.
static inline void logger_add_record(Logger *lg, const MetricsRecord *r) {
    if (r->is_train) {
        plot_series_push(&lg->train, r->step, (float)r->train_loss);
        plot_series_push(&lg->lr, r->step, (float)r->lr);
    }
    if (r->is_val) { plot_series_push(&lg->val, r->step, (float)r->val_loss); }
}

// Rewrites the metrics file with its records up to step keep_through (none: -1) and adds those to the series:
// the steps after the checkpoint a run resumes from are about to be trained again. Atomic, so a crash here leaves
// the file as it was.
static inline void metrics_keep_through(Logger *lg, const char *path, int keep_through) {
    size_t n = 0;
    char *text = file_exists(path) ? read_whole_file(path, &n, "check that --out-dir is readable") : NULL;
    AtomicFile af;
    atomic_open(&af, path);
    for (char *line = text, *nl; line && (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        *nl = '\0'; // a last line without its newline (cut short by a crash) is never reached
        MetricsRecord r;
        if (!metrics_parse(line, &r) || r.step > keep_through) { continue; }
        *nl = '\n';
        atomic_write(&af, line, 1, (size_t)(nl - line) + 1);
        logger_add_record(lg, &r);
    }
    atomic_commit(&af);
    free(text);
}

// ----------------------------------------------------------------------------------------------------------

/*
 * Opens the run's files in out_dir: log.txt to append to, metrics.jsonl with its records up to step
 * keep_through (the checkpoint a run resumes from; -1 for a run that starts at step 0). The picture is titled
 * with out_dir and `description` (the model).
 */
static inline void logger_open(Logger *lg, const char *out_dir, int keep_through, const char *description) {
    char path[LOGGER_PATH_LEN];
    snprintf(path, sizeof(path), "%s/%s", out_dir, LOG_FILE_NAME);
    lg->f = fopen_check(path, "a");
    snprintf(path, sizeof(path), "%s/%s", out_dir, METRICS_FILE_NAME);
    metrics_keep_through(lg, path, keep_through);
    lg->metrics = fopen_check(path, "a");
    snprintf(lg->plot_path, sizeof(lg->plot_path), "%s/%s", out_dir, PLOT_FILE_NAME);
    snprintf(lg->title, sizeof(lg->title), "%s", out_dir);
    snprintf(lg->description, sizeof(lg->description), "%s", description);
    lg->plotted = 0;
}

// Writes loss.svg again where it does not show the latest points yet.
static inline void logger_plot(Logger *lg) {
    if (!lg->f || lg->train.n + lg->val.n == lg->plotted) { return; }
    LossPlot p = {lg->title, lg->description, &lg->train, &lg->val, &lg->lr};
    plot_svg_save(lg->plot_path, &p);
    lg->plotted = lg->train.n + lg->val.n;
}

// Writes the line to the console and the log file.
LLMC_PRINTF(2, 3) static void logger_line(Logger *lg, const char *fmt, ...) {
    if (!lg->f) { return; }
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    va_start(ap, fmt);
    vfprintf(lg->f, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fflush(lg->f);
}

static inline void metrics_train(Logger *lg, const StepStats *s) {
    FILE *f = lg->metrics;
    fprintf(f, "{\"step\":%d", s->step);
    metrics_field(f, "train_loss", s->loss, METRICS_FLOAT_DIGITS);
    metrics_field(f, "lr", s->lr, METRICS_FLOAT_DIGITS);
    metrics_field(f, "norm", s->norm, METRICS_FLOAT_DIGITS);
    metrics_field(f, "ms", s->ms, METRICS_TIMING_DIGITS);
    metrics_field(f, "tokens_per_s", s->tokens_per_s, METRICS_TIMING_DIGITS);
    if (s->mfu_percent >= 0) { metrics_field(f, "mfu_percent", s->mfu_percent, METRICS_TIMING_DIGITS); }
    if (s->comm_ms >= 0) { metrics_field(f, "comm_ms", s->comm_ms, METRICS_TIMING_DIGITS); }
    fprintf(f, "}\n");
    fflush(f);
    MetricsRecord r = {s->step, 1, 0, s->loss, s->lr, NAN};
    logger_add_record(lg, &r);
}

static inline void logger_train(Logger *lg, const StepStats *s, int print_line) {
    if (!lg->f) { return; }
    fprintf(lg->f, "s:%d trl:%f\n", s->step, s->loss);
    fflush(lg->f);
    metrics_train(lg, s);
    if (!print_line) { return; }
    char mfu[32] = "";
    if (s->mfu_percent >= 0) { snprintf(mfu, sizeof(mfu), " | MFU %.1f%%", s->mfu_percent); }
    char comm[32] = "";
    if (s->comm_ms >= 0) { snprintf(comm, sizeof(comm), " | comm %.2f ms", s->comm_ms); }
    logger_line(lg, "step %d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s%s%s\n", s->step, s->steps,
                s->loss, s->lr, s->norm, s->ms, s->tokens_per_s, mfu, comm);
}

// Logs a validation loss and draws the picture again with it.
static inline void logger_val(Logger *lg, int step, int steps, float loss) {
    if (!lg->f) { return; }
    fprintf(lg->f, "s:%d tel:%f\n", step, loss);
    logger_line(lg, "step %d/%d | val loss %.6f\n", step, steps, loss);
    fprintf(lg->metrics, "{\"step\":%d", step);
    metrics_field(lg->metrics, "val_loss", loss, METRICS_FLOAT_DIGITS);
    fprintf(lg->metrics, "}\n");
    fflush(lg->metrics);
    MetricsRecord r = {step, 0, 1, NAN, NAN, loss};
    logger_add_record(lg, &r);
    logger_plot(lg);
}

// Logs a multiple-choice evaluation (llmc/eval.h): `correct` and `correct_norm` of `examples`, in `ms`. log.txt gets
// llm.c's machine line of it too, "s:%d eval:%f" (acc_norm, the one llm.c reports).
static inline void logger_eval(Logger *lg, int step, int correct, int correct_norm, int examples, double ms) {
    if (!lg->f) { return; }
    double acc = (double)correct / examples, acc_norm = (double)correct_norm / examples;
    fprintf(lg->f, "s:%d eval:%f\n", step, acc_norm);
    logger_line(lg, "eval | step %d | acc %.4f | acc_norm %.4f | %d examples | %.0f ms\n", step, acc, acc_norm,
                examples, ms);
    fprintf(lg->metrics, "{\"step\":%d", step);
    metrics_field(lg->metrics, "eval_acc", acc, METRICS_FLOAT_DIGITS);
    metrics_field(lg->metrics, "eval_acc_norm", acc_norm, METRICS_FLOAT_DIGITS);
    fprintf(lg->metrics, ",\"eval_examples\":%d", examples);
    metrics_field(lg->metrics, "eval_ms", ms, METRICS_TIMING_DIGITS);
    fprintf(lg->metrics, "}\n");
    fflush(lg->metrics);
}

static inline void logger_close(Logger *lg) {
    if (lg->f) { fclose(lg->f); }
    if (lg->metrics) { fclose(lg->metrics); }
    plot_series_free(&lg->train);
    plot_series_free(&lg->val);
    plot_series_free(&lg->lr);
    lg->f = lg->metrics = NULL;
}

#endif // LLMC_LOGGER_H
