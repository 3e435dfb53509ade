/*
 * init.h: parameter initialization as a pure function of (seed, tensor, element).
 *
 * value(t, e) = 0, 1, or std_t * N(0,1) drawn from Philox at (seed, stream RNG_STREAM_PARAMS + t, counter e),
 * with e the element's index in the full (all-layer, unsplit) tensor. Any process that owns element e of tensor
 * t, whatever its parallel layout, computes the same value as the CPU build. Padded vocabulary rows of wte and
 * lmhead (row >= V) are zero, so padded logits start at zero and their rows never move. Which tensors are 0, 1 or
 * normal, and the std, are config.h's (param_init_kind, param_init_std): GPT-2's and Llama's recipes.
 */
#ifndef LLMC_INIT_H
#define LLMC_INIT_H

#include "config.h"
#include "rng.h"

typedef struct {
    int kind;          // InitKind
    float std;         // for INIT_NORMAL
    uint64_t zero_from; // elements at or past this index are zero (vocabulary padding); total size otherwise
} InitSpec;

static inline InitSpec param_init_spec(const GPTConfig *c, const ParamLayout *p, int t) {
    InitSpec s;
    s.kind = (int)param_init_kind(t);
    s.std = param_init_std(c, t);
    s.zero_from = param_is_vocab(t) ? (uint64_t)c->vocab_size * (uint64_t)c->channels : (uint64_t)p->size[t];
    return s;
}

HOST_DEVICE static inline float param_init_value(InitSpec s, uint64_t seed, int t, uint64_t e) {
    if (s.kind == INIT_ZERO || e >= s.zero_from) { return 0.0f; }
    if (s.kind == INIT_ONE) { return 1.0f; }
    return s.std * rng_normal(seed, RNG_STREAM_PARAMS + (uint32_t)t, e);
}

// Host initialization of all parameters into one flat fp32 buffer laid out by param_layout().
static inline void param_init_host(const GPTConfig *c, const ParamLayout *p, uint64_t seed, float *params) {
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        InitSpec s = param_init_spec(c, p, t);
        float *dst = params + p->offset[t];
        long long n = (long long)p->size[t];
#pragma omp parallel for
        for (long long e = 0; e < n; e++) { dst[e] = param_init_value(s, seed, t, (uint64_t)e); }
    }
}

#endif // LLMC_INIT_H
