/*
 * vocab_parallel.h: the vocab-parallel softmax cross-entropy, as a plain-C reference of how the TP ranks'
 * partial results combine. The GPU build implements the same steps; the CPU tests check them against the
 * unsplit softmax_crossentropy_forward/backward of cpu_model.h.
 *
 * TP rank r holds the logits of its columns [v0, v1) of the padded vocabulary (mesh.h's tp_vocab_rows: the LM
 * head is wte split by rows). Columns >= V are padding and take no part. Per token, over its real columns:
 *   m_r = max_j x_j        S_r = sum_j exp(x_j - m_r)        t_r = x_target if v0 <= target < v1, else 0
 * (m_r = -inf and S_r = 0 for a rank that holds padding only). The combine:
 *   M = max_r m_r    S = sum_r S_r exp(m_r - M)    x_target = sum_r t_r    lse = M + log S
 *   loss = lse - x_target           dlogits_j = (exp(x_j - lse) - [j == target]) * dloss   (j < V; 0 else)
 * so each rank's gradient needs only lse, one number per token, and never the other ranks' logits.
 *
 * On the GPU that is two all-reduces over the TP group, of N tokens each, and no gather of the (N, Vp) logits:
 *   1. kernel: (m_r, S_r, t_r) per token;  ncclAllReduce(m, N floats, ncclMax)  -> M
 *   2. kernel: S_r exp(m_r - M) next to t_r;  ncclAllReduce([rescaled S_r | t_r], 2N floats, ncclSum) -> S, x_target
 *   3. kernel: loss and lse per token; the backward kernel writes dlogits of the local columns from lse.
 * The rescale in step 2 happens before the sum so that every term is <= its own S_r (no overflow: x_j - M <= 0).
 */
#ifndef LLMC_VOCAB_PARALLEL_H
#define LLMC_VOCAB_PARALLEL_H

#include <math.h>

#include "mesh.h"

// How many of the columns cols (of the padded vocabulary) are real tokens: they come first.
static inline size_t vocab_real_columns(Span cols, int V) {
    if (cols.begin >= (size_t)V) { return 0; }
    size_t real = (size_t)V - cols.begin;
    return real < cols.count ? real : cols.count;
}

// Per token n of logits (N, cols.count) holding columns cols of the padded vocabulary: the rank's partials.
static inline void vocab_ce_local_stats(const float *logits, const int *targets, size_t N, Span cols, int V,
                                        float *local_max, double *local_sum, float *target_logit) {
    size_t real = vocab_real_columns(cols, V);
#pragma omp parallel for
    for (long long n = 0; n < (long long)N; n++) {
        const float *x = logits + (size_t)n * cols.count;
        float m = -INFINITY;
        for (size_t j = 0; j < real; j++) { m = fmaxf(m, x[j]); }
        double s = 0.0;
        for (size_t j = 0; j < real; j++) { s += exp((double)x[j] - (double)m); }
        size_t target = (size_t)targets[n];
        local_max[n] = m;
        local_sum[n] = s;
        target_logit[n] = target >= cols.begin && target < cols.begin + real ? x[target - cols.begin] : 0.0f;
    }
}

// A rank's sum rescaled to the global max M: S_r exp(m_r - M); 0 for a padding-only rank (exp(-inf) = 0).
static inline double vocab_ce_rescaled_sum(double local_sum, float local_max, float global_max) {
    return local_sum * exp((double)local_max - (double)global_max);
}

// The two all-reduces over tp ranks' partials (rank r's token n at index r * N + n): loss and lse per token.
static inline void vocab_ce_combine(int tp, size_t N, const float *local_max, const double *local_sum,
                                    const float *target_logit, double *loss, double *lse) {
    for (size_t n = 0; n < N; n++) {
        float M = -INFINITY; // all-reduce 1: max
        for (int r = 0; r < tp; r++) { M = fmaxf(M, local_max[(size_t)r * N + n]); }
        double S = 0.0, x_target = 0.0; // all-reduce 2: sum of the rescaled sums and of the target logit
        for (int r = 0; r < tp; r++) {
            S += vocab_ce_rescaled_sum(local_sum[(size_t)r * N + n], local_max[(size_t)r * N + n], M);
            x_target += (double)target_logit[(size_t)r * N + n];
        }
        lse[n] = (double)M + log(S);
        loss[n] = lse[n] - x_target;
    }
}

// dlogits of the rank's columns: (softmax - onehot(target)) * dloss on real columns, 0 on padding.
static inline void vocab_ce_backward(float *dlogits, const float *logits, const double *lse, const int *targets,
                                     size_t N, Span cols, int V, float dloss) {
    size_t real = vocab_real_columns(cols, V);
#pragma omp parallel for
    for (long long n = 0; n < (long long)N; n++) {
        const float *x = logits + (size_t)n * cols.count;
        float *d = dlogits + (size_t)n * cols.count;
        for (size_t j = 0; j < cols.count; j++) {
            double onehot = cols.begin + j == (size_t)targets[n];
            d[j] = j < real ? (float)((exp((double)x[j] - lse[n]) - onehot) * (double)dloss) : 0.0f;
        }
    }
}

#endif // LLMC_VOCAB_PARALLEL_H
