/*
 * compare_runs.c: one training run against another of the same model, for the multi-GPU tests
 * (test/run_mgpu_tests.sh): the train loss of every step (the "s:N trl:X" lines of log.txt) and the final
 * weights (the model file of the last step, which a run writes with --save 1).
 *
 *   test/bin/compare_runs REF_DIR RUN_DIR STEPS LOSS_TOL WEIGHT_TOL
 *
 * Prints "PASS name" / "FAIL name: why" lines (test/test_util.h), the worst errors on a "parity" line, and exits
 * non-zero on any failure. Loss: |run - ref| / |ref| per step. Weights: test_util.h's max_rel_err per tensor
 * (max |run - ref| / max |ref|), so a tensor crossing zero is judged against its own scale.
 */
#include "../llmc/checkpoint.h"
#include "../llmc/logger.h"
#include "test_util.h"

#define MAX_STEPS 100000

// losses[s] = the train loss logged after s steps (1..steps); returns how many of those steps were found.
static int read_losses(const char *dir, double *losses, int steps) {
    char path[CKPT_PATH_LEN];
    snprintf(path, sizeof(path), "%s/%s", dir, LOG_FILE_NAME);
    FILE *f = fopen(path, "r");
    if (!f) { return 0; }
    char line[512];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        int s;
        double loss;
        if (sscanf(line, "s:%d trl:%lf", &s, &loss) == 2 && s >= 1 && s <= steps) {
            found += losses[s] != losses[s]; // NaN marks a step not seen yet (a resumed log repeats steps)
            losses[s] = loss;
        }
    }
    fclose(f);
    return found;
}

static float *read_model(const char *dir, int step, GPTConfig *c, size_t *n) {
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(dir, step, model_path, state_path);
    ModelFileHeader h = model_file_header(model_path);
    *c = h.config;
    ParamLayout p;
    param_layout(c, &p);
    *n = p.total;
    float *params = (float *)malloc_check(p.total * sizeof(float), "model parameters");
    model_file_read(model_path, c, params);
    return params;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s REF_DIR RUN_DIR STEPS LOSS_TOL WEIGHT_TOL\n", argv[0]);
        return 2;
    }
    const char *ref_dir = argv[1], *run_dir = argv[2];
    int steps = atoi(argv[3]);
    double loss_tol = atof(argv[4]), weight_tol = atof(argv[5]);
    if (steps < 1 || steps > MAX_STEPS) { fail("STEPS %d is outside [1, %d]", steps, MAX_STEPS); }

    static double ref[MAX_STEPS + 1], run[MAX_STEPS + 1];
    for (int s = 0; s <= steps; s++) { ref[s] = run[s] = NAN; }
    int have_ref = read_losses(ref_dir, ref, steps), have_run = read_losses(run_dir, run, steps);
    check(have_ref == steps && have_run == steps, "losses logged", "%s has %d of %d steps, %s has %d", ref_dir,
          have_ref, steps, run_dir, have_run);
    double worst_loss = 0;
    int worst_step = 0;
    for (int s = 1; s <= steps; s++) {
        double e = fabs(run[s] - ref[s]) / (fabs(ref[s]) > 0 ? fabs(ref[s]) : 1.0);
        if (!(e <= worst_loss)) {
            worst_loss = e;
            worst_step = s;
        }
    }
    check(worst_loss <= loss_tol, "loss at every step", "step %d: %.6f vs %.6f, rel %.3e > %.1e", worst_step,
          run[worst_step], ref[worst_step], worst_loss, loss_tol);

    GPTConfig ca, cb;
    size_t na, nb;
    float *a = read_model(ref_dir, steps, &ca, &na), *b = read_model(run_dir, steps, &cb, &nb);
    check(config_equal(&ca, &cb) && na == nb, "same model shape", "the two model files differ in shape");
    double worst_weight = 0;
    int worst_tensor = 0;
    if (na == nb) {
        ParamLayout p;
        param_layout(&ca, &p);
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            double e = max_rel_err(b + p.offset[t], a + p.offset[t], p.size[t]);
            char name[96];
            snprintf(name, sizeof(name), "final weights %s", PARAM_NAMES[t]);
            check(e <= weight_tol, name, "max rel err %.3e > %.1e", e, weight_tol);
            if (!(e <= worst_weight)) {
                worst_weight = e;
                worst_tensor = t;
            }
        }
    }
    printf("parity %s: worst loss rel %.2e (step %d), worst weights rel %.2e (%s)\n", run_dir, worst_loss, worst_step,
           worst_weight, PARAM_NAMES[worst_tensor]);
    free(a);
    free(b);
    return test_exit();
}
