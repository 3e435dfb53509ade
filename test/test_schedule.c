/*
 * test_schedule.c: the learning-rate schedule (llmc/schedule.h) against its definition in dev/DESIGN.md:
 * warmup lr*(s+1)/warmup; cosine and linear from lr (first step after warmup) to lr*final_lr_frac (last step),
 * exact midpoints; constant; no warmup; a run with no step after warmup.
 */
#include "../llmc/schedule.h"
#include "test_util.h"

#define LR 1e-3f
#define FINAL_FRAC 0.1f
#define WARMUP 10
#define STEPS 111 // 100 decay steps after warmup: step 60 is the exact midpoint
#define TOL 1e-6

static Options schedule(const char *kind, int warmup, int steps) {
    Options o;
    options_defaults(&o);
    o.lr = LR;
    o.final_lr_frac = FINAL_FRAC;
    o.warmup_steps = warmup;
    o.steps = steps;
    snprintf(o.lr_schedule, sizeof(o.lr_schedule), "%s", kind);
    return o;
}

static void expect_lr(const Options *o, int step, double want, const char *name) {
    double got = lr_at_step(o, step);
    check(fabs(got - want) <= TOL * LR, name, "%s step %d: lr %.9g, expected %.9g", o->lr_schedule, step, got, want);
}

int main(void) {
    const double min_lr = (double)LR * FINAL_FRAC;
    Options cos_o = schedule("cosine", WARMUP, STEPS);
    expect_lr(&cos_o, 0, LR / WARMUP, "warmup_first");
    expect_lr(&cos_o, 4, LR * 5.0 / WARMUP, "warmup_middle");
    expect_lr(&cos_o, WARMUP - 1, LR, "warmup_last");
    expect_lr(&cos_o, WARMUP, LR, "cosine_start");
    expect_lr(&cos_o, WARMUP + 50, (LR + min_lr) / 2, "cosine_midpoint");
    expect_lr(&cos_o, WARMUP + 25, min_lr + 0.5 * (1 + cos(SCHEDULE_PI / 4)) * (LR - min_lr), "cosine_quarter");
    expect_lr(&cos_o, STEPS - 1, min_lr, "cosine_end");
    int monotone = 1;
    for (int s = WARMUP + 1; s < STEPS; s++) { monotone &= lr_at_step(&cos_o, s) <= lr_at_step(&cos_o, s - 1); }
    check(monotone, "cosine_monotone", "the learning rate rose after warmup");

    Options lin = schedule("linear", WARMUP, STEPS);
    expect_lr(&lin, 0, LR / WARMUP, "linear_warmup");
    expect_lr(&lin, WARMUP, LR, "linear_start");
    expect_lr(&lin, WARMUP + 25, LR - 0.25 * (LR - min_lr), "linear_quarter");
    expect_lr(&lin, WARMUP + 50, (LR + min_lr) / 2, "linear_midpoint");
    expect_lr(&lin, STEPS - 1, min_lr, "linear_end");

    Options con = schedule("constant", WARMUP, STEPS);
    expect_lr(&con, 1, LR * 2.0 / WARMUP, "constant_warmup");
    expect_lr(&con, WARMUP, LR, "constant_after_warmup");
    expect_lr(&con, STEPS - 1, LR, "constant_end");

    Options nowarm = schedule("cosine", 0, 11);
    expect_lr(&nowarm, 0, LR, "no_warmup_start");
    expect_lr(&nowarm, 5, (LR + min_lr) / 2, "no_warmup_midpoint");
    expect_lr(&nowarm, 10, min_lr, "no_warmup_end");

    Options one = schedule("cosine", 0, 1);
    expect_lr(&one, 0, LR, "single_step");
    Options all_warm = schedule("linear", 4, 4);
    expect_lr(&all_warm, 3, LR, "all_warmup");
    return test_exit();
}
