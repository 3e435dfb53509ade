/*
 * logger.h: the per-step console line and the run's log file, out_dir/log.txt.
 *
 * log.txt holds llm.c's machine lines, "s:%d trl:%f" (train loss) and "s:%d tel:%f" (validation loss), s being
 * the number of optimizer steps done, plus the human lines the console shows; `grep '^s:'` gives llm.c's
 * format. A resumed run appends, so a run interrupted after its last checkpoint repeats the steps since then.
 * Every line is flushed as it is written, so a crash loses nothing that was printed. A logger that was never
 * opened (every rank but 0 of a multi-process job) is silent.
 */
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include "utils.h"

#define LOG_FILE_NAME "log.txt"

typedef struct {
    FILE *f;
} Logger;

typedef struct {
    int step, steps; // optimizer steps done, of steps
    float loss, lr, norm;
    double ms, tokens_per_s;
    double mfu_percent; // < 0: no MFU (no peak FLOP/s for this device)
    double comm_ms;     // exposed communication (rank 0's compute stream waiting for collectives); < 0: none
} StepStats;

static inline void logger_open(Logger *lg, const char *out_dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, LOG_FILE_NAME);
    lg->f = fopen_check(path, "a");
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

static inline void logger_train(Logger *lg, const StepStats *s, int print_line) {
    if (!lg->f) { return; }
    fprintf(lg->f, "s:%d trl:%f\n", s->step, s->loss);
    fflush(lg->f);
    if (!print_line) { return; }
    char mfu[32] = "";
    if (s->mfu_percent >= 0) { snprintf(mfu, sizeof(mfu), " | MFU %.1f%%", s->mfu_percent); }
    char comm[32] = "";
    if (s->comm_ms >= 0) { snprintf(comm, sizeof(comm), " | comm %.2f ms", s->comm_ms); }
    logger_line(lg, "step %d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s%s%s\n", s->step, s->steps,
                s->loss, s->lr, s->norm, s->ms, s->tokens_per_s, mfu, comm);
}

static inline void logger_val(Logger *lg, int step, int steps, float loss) {
    if (!lg->f) { return; }
    fprintf(lg->f, "s:%d tel:%f\n", step, loss);
    logger_line(lg, "step %d/%d | val loss %.6f\n", step, steps, loss);
}

static inline void logger_close(Logger *lg) {
    if (lg->f) { fclose(lg->f); }
    lg->f = NULL;
}

#endif // LLMC_LOGGER_H
