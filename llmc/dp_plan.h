/*
 * dp_plan.h: the arithmetic of data parallelism: which gradients travel together (parameter groups), and which
 * slice of the flat parameter buffer each rank's optimizer owns under ZeRO-1. Plain C: the GPU build runs it, the
 * CPU tests check it.
 *
 * Parameter groups. Backward makes gradients final group by group: block l's once its first LayerNorm's backward
 * has run (from the last block down), then the rest (wte, wpe, lnf) after the encoder backward. A group is the
 * unit of everything that waits for final gradients (train_gpt.cu's grads_final): the gradient norm's partial
 * sums, the data-parallel sum over ranks (one grouped collective per span: a block of GPT-2 124M is 28 MB, of
 * 1558M 123 MB, sizes at which NCCL runs near bus bandwidth, so no coarser buckets are needed), and the AdamW
 * update and ZeRO-1 gather that the next forward waits for. In memory (config.h's tensor-major layout) a group
 * is one span per tensor, ascending.
 *
 * ZeRO-1. The P parameters are padded to dp x S, S = ceil(P / dp) rounded up to ZERO_ALIGN_ELEMS; rank r owns
 * [r S, (r + 1) S) (clipped to P): the AdamW moments of that slice (S floats each), the reduced gradients there
 * (each span of a group is reduced onto the ranks owning its parts), and the updated weights it broadcasts to the
 * others. Slices do not follow group boundaries, so a group's reduction is a reduce per (span, owner) part.
 */
#ifndef LLMC_DP_PLAN_H
#define LLMC_DP_PLAN_H

#include "config.h"
#include "mesh.h"

// Slice alignment in elements: 512 bytes of fp32, 256 of bf16 (vector loads, NCCL's preferred alignment).
#define ZERO_ALIGN_ELEMS ((size_t)128)
#define GROUP_SPANS_MAX NUM_PARAM_TENSORS

typedef struct {
    int count;
    int tensor[GROUP_SPANS_MAX]; // the tensor each span lies in (its weight decay)
    Span span[GROUP_SPANS_MAX];  // element ranges of the flat buffer, ascending
} ParamGroup;

static inline void param_group_add(ParamGroup *g, int t, Span s) {
    if (g->count == GROUP_SPANS_MAX) { fail("a parameter group has more than %d spans", GROUP_SPANS_MAX); }
    g->tensor[g->count] = t;
    g->span[g->count] = s;
    g->count++;
}

// Group k of the L + 1: block k's slices of the per-layer tensors for k < L, the rest (wte, wpe, lnf, lmhead) for
// k = L; a tensor the model does not have (size 0) is in none.
static inline ParamGroup param_group(const ParamLayout *p, int L, int k) {
    ParamGroup g;
    memset(&g, 0, sizeof(g));
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_per_layer(t) != (k < L) || p->size[t] == 0) { continue; }
        size_t n = param_is_per_layer(t) ? p->size[t] / (size_t)L : p->size[t];
        Span s = {p->offset[t] + (k < L ? (size_t)k * n : 0), n};
        param_group_add(&g, t, s);
    }
    return g;
}

// ---------------------------------------------------------------------------------------------------------
// ZeRO-1 slices

typedef struct {
    int ranks;
    size_t total;  // P, the parameters
    size_t slice;  // S, elements per rank
    size_t padded; // ranks x S >= P: the length of the flat parameter, weight and gradient buffers
} ZeroShards;

static inline ZeroShards zero_shards_make(size_t total, int ranks) {
    ZeroShards z;
    z.ranks = ranks;
    z.total = total;
    z.slice = round_up_size((total + (size_t)ranks - 1) / (size_t)ranks, ZERO_ALIGN_ELEMS);
    z.padded = z.slice * (size_t)ranks;
    return z;
}

static inline Span span_intersect(Span a, Span b) {
    size_t begin = a.begin > b.begin ? a.begin : b.begin;
    size_t end_a = a.begin + a.count, end_b = b.begin + b.count;
    size_t end = end_a < end_b ? end_a : end_b;
    Span s = {begin, end > begin ? end - begin : 0};
    return s;
}

// The padded slice of rank r: [r S, (r + 1) S), including any padding past P.
static inline Span zero_padded_slice(const ZeroShards *z, int r) {
    Span s = {(size_t)r * z->slice, z->slice};
    return s;
}

// The parameters rank r owns: its slice clipped to [0, P) (empty for a rank past the end of a tiny model).
static inline Span zero_owned(const ZeroShards *z, int r) {
    Span all = {0, z->total};
    return span_intersect(zero_padded_slice(z, r), all);
}

// The part of tensor t that rank r owns, as a span of the flat buffer (count 0 when none).
static inline Span zero_owned_part_of_tensor(const ZeroShards *z, const ParamLayout *p, int r, int t) {
    Span tensor = {p->offset[t], p->size[t]};
    return span_intersect(tensor, zero_owned(z, r));
}

// The part of group g inside `owned` (empty spans dropped): what a rank's norm and AdamW cover.
static inline ParamGroup param_group_owned(const ParamGroup *g, Span owned) {
    ParamGroup o;
    memset(&o, 0, sizeof(o));
    for (int i = 0; i < g->count; i++) {
        Span part = span_intersect(g->span[i], owned);
        if (part.count > 0) { param_group_add(&o, g->tensor[i], part); }
    }
    return o;
}

#endif // LLMC_DP_PLAN_H
