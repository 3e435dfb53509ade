/*
 * schedule.h: the learning rate of every optimizer step, one host function both builds call.
 *
 * Step s (0-based) of --steps: linear warmup lr*(s+1)/warmup for s < warmup; after it, cosine or linear decay
 * from lr at the first step after warmup down to lr*final_lr_frac at the last step (steps-1); constant stays
 * at lr. Computed in double so the CPU and GPU builds (and a resumed run) see the same float.
 */
#ifndef LLMC_SCHEDULE_H
#define LLMC_SCHEDULE_H

#include <math.h>
#include <string.h>

#include "options.h"

#define SCHEDULE_PI 3.14159265358979323846

// Fraction of the decay done at step s: 0 at the first step after warmup, 1 at the last step. A run with no
// step after warmup has nothing to decay over.
static inline double lr_decay_progress(const Options *o, int step) {
    int span = o->steps - 1 - o->warmup_steps;
    if (span <= 0) { return 0.0; }
    return (double)(step - o->warmup_steps) / (double)span;
}

static inline float lr_at_step(const Options *o, int step) {
    double lr = o->lr;
    if (step < o->warmup_steps) { return (float)(lr * (double)(step + 1) / (double)o->warmup_steps); }
    if (strcmp(o->lr_schedule, "constant") == 0) { return (float)lr; }
    double min_lr = lr * (double)o->final_lr_frac;
    double p = lr_decay_progress(o, step);
    if (strcmp(o->lr_schedule, "linear") == 0) { return (float)(lr - p * (lr - min_lr)); }
    return (float)(min_lr + 0.5 * (1.0 + cos(SCHEDULE_PI * p)) * (lr - min_lr));
}

#endif // LLMC_SCHEDULE_H
