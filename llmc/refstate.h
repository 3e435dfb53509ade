/*
 * refstate.h: the reference-state file. The CPU build (train_gpt_cpu --ref-out FILE) writes it; the GPU parity
 * test reads it, replays the same steps from the same weights on the same tokens, and compares.
 *
 * Layout (little-endian, fp32 and int32, P parameters in param_layout() order, N = B*T):
 *   RefHeader
 *   params0                                  P floats, the initial weights
 *   for each optimizer step s = 0 .. steps-1:
 *     for each micro-step m = 0 .. accum-1:  inputs N int32, targets N int32
 *     loss, grad norm, lr                    3 floats: mean loss of the step, norm before clipping, lr used
 *     s == 0 only: logits0                   N*Vp floats, forward only on micro-batch 0, before any backward
 *                  grads0                    P floats, after all micro-steps of step 0, before the update
 *     s < REFSTATE_PARAM_STEPS only: params  P floats, the weights after the update of step s
 *   params_final                             P floats, the weights after all steps
 * Gradients are those of the mean loss over the step's tokens (each micro-batch seeded with 1/(N*accum)).
 */
#ifndef LLMC_REFSTATE_H
#define LLMC_REFSTATE_H

#include <stdint.h>

#include "config.h"
#include "utils.h"

#define REFSTATE_MAGIC 20251122
#define REFSTATE_VERSION 3 // 3: the whole model description (llmc/config.h) in the header
#define REFSTATE_PARAM_STEPS 3 // the first steps whose updated weights are recorded

typedef struct {
    int32_t magic, version;
    GPTConfig config;
    int32_t B, T, accum, steps;
    int64_t seed;
    float weight_decay, beta1, beta2, eps, grad_clip; // AdamW and clipping, as in UpdateArgs
    int32_t fp8;                                      // 1: the reference ran --precision fp8 with this recipe
    int32_t fp8_scaling, fp8_history, fp8_margin, fp8_bf16_blocks; // llmc/fp8.h's Fp8Recipe
    int64_t num_params;
} RefHeader;
typedef char gptconfig_has_no_padding[sizeof(GPTConfig) == 20 * 4 + 8 ? 1 : -1];
typedef char refheader_has_no_padding[sizeof(RefHeader) == 168 ? 1 : -1];

typedef struct {
    RefHeader h;
    float *params0;      // (P)
    int *inputs;         // (steps, accum, B*T)
    int *targets;        // (steps, accum, B*T)
    float *loss, *norm, *lr; // (steps)
    float *logits0;      // (B*T, Vp)
    float *grads0;       // (P)
    float *params_after; // (refstate_param_steps(h), P): after the updates of steps 0, 1, ...
    float *params_final; // (P)
} RefState;

static inline int refstate_param_steps(const RefHeader *h) {
    return h->steps < REFSTATE_PARAM_STEPS ? h->steps : REFSTATE_PARAM_STEPS;
}

static inline size_t refstate_tokens(const RefHeader *h) { return (size_t)h->B * (size_t)h->T; }

// ----------------------------------------------------------------------------------------------------------
// writing, one optimizer step at a time

typedef struct {
    AtomicFile af;
    RefHeader h;
    int step; // steps written so far
} RefWriter;

static inline void refstate_write_begin(RefWriter *w, const char *path, const RefHeader *h, const float *params0) {
    w->h = *h;
    w->h.magic = REFSTATE_MAGIC;
    w->h.version = REFSTATE_VERSION;
    w->step = 0;
    atomic_open(&w->af, path);
    atomic_write(&w->af, &w->h, sizeof(RefHeader), 1);
    atomic_write(&w->af, params0, sizeof(float), (size_t)h->num_params);
}

// One optimizer step: its accum micro-batches of tokens (inputs/targets: accum x B*T each), its statistics,
// for step 0 the logits and gradients (NULL for the others), and the updated weights where they are recorded
// (NULL past REFSTATE_PARAM_STEPS).
static inline void refstate_write_step(RefWriter *w, const int *inputs, const int *targets, float loss, float norm,
                                       float lr, const float *logits0, const float *grads0,
                                       const float *params_after) {
    const RefHeader *h = &w->h;
    int first = w->step == 0, records_params = w->step < refstate_param_steps(h);
    if (w->step >= h->steps || first != (logits0 != NULL) || first != (grads0 != NULL) ||
        records_params != (params_after != NULL)) {
        fail("refstate_write_step: step %d of %d was given the wrong set of arrays", w->step, h->steps);
    }
    size_t n = refstate_tokens(h);
    for (int m = 0; m < h->accum; m++) {
        atomic_write(&w->af, inputs + (size_t)m * n, sizeof(int32_t), n);
        atomic_write(&w->af, targets + (size_t)m * n, sizeof(int32_t), n);
    }
    float stats[3] = {loss, norm, lr};
    atomic_write(&w->af, stats, sizeof(float), 3);
    if (first) {
        atomic_write(&w->af, logits0, sizeof(float), n * (size_t)h->config.padded_vocab_size);
        atomic_write(&w->af, grads0, sizeof(float), (size_t)h->num_params);
    }
    if (records_params) { atomic_write(&w->af, params_after, sizeof(float), (size_t)h->num_params); }
    w->step++;
}

static inline void refstate_write_end(RefWriter *w, const float *params_final) {
    if (w->step != w->h.steps) { fail("refstate_write_end: %d of %d steps were written", w->step, w->h.steps); }
    atomic_write(&w->af, params_final, sizeof(float), (size_t)w->h.num_params);
    atomic_commit(&w->af);
}

// ----------------------------------------------------------------------------------------------------------
// reading the whole file into memory

// Bytes of a file with header h, from the layout above.
static inline long long refstate_file_bytes(const RefHeader *h) {
    long long P = h->num_params, n = (long long)refstate_tokens(h), K = h->steps;
    long long floats = P * (1 + 1 + refstate_param_steps(h) + 1) + 3 * K + n * h->config.padded_vocab_size;
    long long ints = 2 * n * h->accum * K;
    return (long long)sizeof(RefHeader) + 4 * (floats + ints);
}

static inline RefState *refstate_read(const char *path) {
    RefState *r = (RefState *)calloc_check(1, sizeof(RefState), "reference state");
    FILE *f = fopen_check(path, "rb");
    RefHeader *h = &r->h;
    fread_check(h, sizeof(RefHeader), 1, f, path);
    if (h->magic != REFSTATE_MAGIC) {
        fail("'%s' is not a reference-state file (magic %d, expected %d); write one with train_gpt_cpu --ref-out",
             path, h->magic, REFSTATE_MAGIC);
    }
    if (h->version != REFSTATE_VERSION) {
        fail("'%s' is reference-state version %d, this build reads version %d; regenerate it with train_gpt_cpu "
             "--ref-out", path, h->version, REFSTATE_VERSION);
    }
    config_validate(&h->config);
    ParamLayout layout;
    param_layout(&h->config, &layout);
    if (h->B < 1 || h->T < 1 || h->T > h->config.max_seq_len || h->accum < 1 || h->steps < 1 ||
        h->num_params != (int64_t)layout.total) {
        fail("'%s' has an inconsistent header (B %d, T %d, accum %d, steps %d, %lld parameters for a model of %zu)",
             path, h->B, h->T, h->accum, h->steps, (long long)h->num_params, layout.total);
    }
    long long expected = refstate_file_bytes(h), actual = file_size_or_neg(path);
    if (actual != expected) {
        fail("'%s' is %lld bytes, its header says %lld; the file is truncated or corrupt, regenerate it", path, actual,
             expected);
    }
    size_t P = (size_t)h->num_params, n = refstate_tokens(h), K = (size_t)h->steps, A = (size_t)h->accum;
    size_t nlogits = n * (size_t)h->config.padded_vocab_size, KP = (size_t)refstate_param_steps(h);
    r->params0 = (float *)malloc_check(P * sizeof(float), "reference params0");
    r->inputs = (int *)malloc_check(K * A * n * sizeof(int), "reference inputs");
    r->targets = (int *)malloc_check(K * A * n * sizeof(int), "reference targets");
    r->loss = (float *)malloc_check(K * sizeof(float), "reference losses");
    r->norm = (float *)malloc_check(K * sizeof(float), "reference norms");
    r->lr = (float *)malloc_check(K * sizeof(float), "reference learning rates");
    r->logits0 = (float *)malloc_check(nlogits * sizeof(float), "reference logits");
    r->grads0 = (float *)malloc_check(P * sizeof(float), "reference gradients");
    r->params_after = (float *)malloc_check(KP * P * sizeof(float), "reference updated params");
    r->params_final = (float *)malloc_check(P * sizeof(float), "reference final params");

    fread_check(r->params0, sizeof(float), P, f, path);
    for (size_t s = 0; s < K; s++) {
        for (size_t m = 0; m < A; m++) {
            fread_check(r->inputs + (s * A + m) * n, sizeof(int32_t), n, f, path);
            fread_check(r->targets + (s * A + m) * n, sizeof(int32_t), n, f, path);
        }
        float stats[3];
        fread_check(stats, sizeof(float), 3, f, path);
        r->loss[s] = stats[0];
        r->norm[s] = stats[1];
        r->lr[s] = stats[2];
        if (s == 0) {
            fread_check(r->logits0, sizeof(float), nlogits, f, path);
            fread_check(r->grads0, sizeof(float), P, f, path);
        }
        if (s < KP) { fread_check(r->params_after + s * P, sizeof(float), P, f, path); }
    }
    fread_check(r->params_final, sizeof(float), P, f, path);
    fclose(f);
    return r;
}

static inline void refstate_free(RefState *r) {
    free(r->params0);
    free(r->inputs);
    free(r->targets);
    free(r->loss);
    free(r->norm);
    free(r->lr);
    free(r->logits0);
    free(r->grads0);
    free(r->params_after);
    free(r->params_final);
    free(r);
}

#endif // LLMC_REFSTATE_H
