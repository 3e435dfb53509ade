/*
 * dp_plan.h: the arithmetic of data parallelism: which gradients travel together (buckets), and which slice of
 * the flat parameter buffer each rank's optimizer owns under ZeRO-1. Plain C: the GPU build runs it, the CPU
 * tests check it.
 *
 * Buckets. Backward makes gradients final in this order: lnf (the first LayerNorm backward), the blocks from the
 * last to the first, then wte and wpe (the encoder backward adds the embedding's share to wte, which the LM head
 * wrote first). A bucket is a run of consecutive blocks [first_layer, first_layer + num_layers), added from the
 * last block down while the bucket stays within DP_BUCKET_BYTES (at least one block each); the first bucket also
 * holds lnf, and one last bucket holds wte and wpe. A block bucket is final once block first_layer's backward is
 * done. In memory (config.h's tensor-major layout) it is one contiguous range per per-layer tensor, so it is
 * reduced as a group of at most NUM_PARAM_TENSORS collectives.
 *
 * ZeRO-1. The P parameters are padded to dp x S, S = ceil(P / dp) rounded up to ZERO_ALIGN_ELEMS; rank r owns
 * [r S, (r + 1) S) (clipped to P): the AdamW moments of that slice (S floats each), the reduced gradients there
 * (each bucket range is reduced onto the ranks owning its parts), and the updated weights it contributes to the
 * all-gather of the padded buffer. Equal slices make the all-gather one in-place collective.
 */
#ifndef LLMC_DP_PLAN_H
#define LLMC_DP_PLAN_H

#include "config.h"
#include "mesh.h"

// Target size of a gradient bucket: large enough that a collective runs near bus bandwidth, small enough that the
// first bucket starts early in backward (PyTorch DDP uses 25 MB; one GPT-2 124M block is 28 MB).
#define DP_BUCKET_BYTES ((size_t)32 << 20)
// Slice alignment in elements: 512 bytes of fp32, 256 of bf16 (vector loads, NCCL's preferred alignment).
#define ZERO_ALIGN_ELEMS ((size_t)128)
#define MAX_BUCKET_RANGES NUM_PARAM_TENSORS

typedef struct {
    int first_layer, num_layers; // blocks [first_layer, first_layer + num_layers); num_layers = 0 for embeddings
    int num_ranges;
    Span ranges[MAX_BUCKET_RANGES]; // element ranges of the flat buffer, ascending
    size_t count;                   // elements in all ranges
} GradBucket;

typedef struct {
    int num_buckets;
    GradBucket *buckets;  // in the order backward finishes them; the last holds wte and wpe
    int *bucket_of_layer; // [L]: the bucket that block l finishes (its first_layer == l), else -1
} BucketPlan;

static inline int param_is_per_layer(int t) { return t != P_WTE && t != P_WPE && t != P_LNFW && t != P_LNFB; }

static inline void bucket_add_range(GradBucket *b, size_t begin, size_t count) {
    if (b->num_ranges == MAX_BUCKET_RANGES) { fail("a gradient bucket has more than %d ranges", MAX_BUCKET_RANGES); }
    b->ranges[b->num_ranges].begin = begin;
    b->ranges[b->num_ranges].count = count;
    b->num_ranges++;
    b->count += count;
}

// The ranges of blocks [first, first + n) (and of lnf when with_lnf), ascending in memory.
static inline void bucket_fill_layers(GradBucket *b, const ParamLayout *p, int L, int first, int n, int with_lnf) {
    b->first_layer = first;
    b->num_layers = n;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_per_layer(t)) {
            size_t per_layer = p->size[t] / (size_t)L;
            bucket_add_range(b, p->offset[t] + (size_t)first * per_layer, (size_t)n * per_layer);
        } else if (with_lnf && (t == P_LNFW || t == P_LNFB)) {
            bucket_add_range(b, p->offset[t], p->size[t]);
        }
    }
}

static inline size_t layer_param_count(const ParamLayout *p, int L) {
    size_t n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_per_layer(t)) { n += p->size[t] / (size_t)L; }
    }
    return n;
}

// Buckets of at most bucket_bytes (but at least one block) of fp32 gradients; free with bucket_plan_free.
static inline BucketPlan bucket_plan_make(const GPTConfig *c, const ParamLayout *p, size_t bucket_bytes) {
    int L = c->num_layers;
    BucketPlan plan;
    plan.buckets = (GradBucket *)calloc_check((size_t)L + 1, sizeof(GradBucket), "gradient buckets");
    plan.bucket_of_layer = (int *)malloc_check((size_t)L * sizeof(int), "gradient bucket map");
    for (int l = 0; l < L; l++) { plan.bucket_of_layer[l] = -1; }
    size_t layer_bytes = layer_param_count(p, L) * sizeof(float);
    size_t lnf_bytes = (p->size[P_LNFW] + p->size[P_LNFB]) * sizeof(float);
    int n = 0;
    for (int top = L; top > 0;) { // blocks [first, top) go into bucket n
        size_t bytes = (n == 0 ? lnf_bytes : 0) + layer_bytes;
        int first = top - 1;
        while (first > 0 && bytes + layer_bytes <= bucket_bytes) {
            first--;
            bytes += layer_bytes;
        }
        bucket_fill_layers(&plan.buckets[n], p, L, first, top - first, n == 0);
        plan.bucket_of_layer[first] = n;
        n++;
        top = first;
    }
    GradBucket *emb = &plan.buckets[n++];
    emb->first_layer = 0;
    emb->num_layers = 0;
    bucket_add_range(emb, p->offset[P_WTE], p->size[P_WTE]);
    bucket_add_range(emb, p->offset[P_WPE], p->size[P_WPE]);
    plan.num_buckets = n;
    return plan;
}

static inline void bucket_plan_free(BucketPlan *plan) {
    free(plan->buckets);
    free(plan->bucket_of_layer);
    plan->buckets = NULL;
    plan->bucket_of_layer = NULL;
    plan->num_buckets = 0;
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

#endif // LLMC_DP_PLAN_H
