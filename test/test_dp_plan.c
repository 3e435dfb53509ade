/*
 * test_dp_plan.c: the data-parallel arithmetic of llmc/dp_plan.h, for several model shapes and rank counts.
 * - buckets: every parameter in exactly one bucket; ranges ascending and inside one tensor; blocks taken from the
 *   last down, contiguous, each bucket within the byte limit unless it is a single block; lnf in the first bucket,
 *   wte and wpe alone in the last; bucket_of_layer names the bucket each block finishes;
 * - ZeRO-1 slices: equal, aligned, padded length ranks x slice >= P with less than one slice of padding per rank
 *   beyond alignment, owned spans tile [0, P) exactly, and the per-tensor parts of all ranks tile every tensor.
 */
#include "../llmc/dp_plan.h"
#include "test_util.h"

typedef struct {
    const char *name;
    int L, C, NH, V, T;
} Shape;

static const Shape SHAPES[] = {
    {"d12", 12, 768, 12, 50257, 1024}, {"d48", 48, 1600, 25, 50257, 1024}, {"tiny", 2, 64, 4, 50257, 64},
    {"one layer", 1, 8, 1, 100, 8},
};
static const int RANKS[] = {1, 2, 3, 5, 8, 64};
static const size_t BUCKET_LIMITS[] = {DP_BUCKET_BYTES, 1, (size_t)1 << 40};

static GPTConfig shape_config(const Shape *s) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.num_layers = s->L;
    c.channels = s->C;
    c.num_heads = s->NH;
    c.vocab_size = s->V;
    c.padded_vocab_size = padded_vocab(s->V);
    c.max_seq_len = s->T;
    return c;
}

// The tensor holding flat element e, or -1.
static int tensor_of(const ParamLayout *p, size_t e) {
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (e >= p->offset[t] && e < p->offset[t] + p->size[t]) { return t; }
    }
    return -1;
}

static void check_buckets(const Shape *s, size_t limit) {
    GPTConfig c = shape_config(s);
    ParamLayout p;
    param_layout(&c, &p);
    BucketPlan plan = bucket_plan_make(&c, &p, limit);
    unsigned char *seen = (unsigned char *)calloc_check(p.total, 1, "coverage");
    int overlaps = 0, bad_ranges = 0, oversize = 0, bad_order = 0, bad_map = 0, lnf_misplaced = 0;
    int expect_top = c.num_layers;
    size_t layer_bytes = layer_param_count(&p, c.num_layers) * sizeof(float);
    for (int b = 0; b < plan.num_buckets; b++) {
        const GradBucket *k = &plan.buckets[b];
        size_t count = 0;
        for (int i = 0; i < k->num_ranges; i++) {
            Span r = k->ranges[i];
            int t = tensor_of(&p, r.begin);
            if (r.count == 0 || t < 0 || r.begin + r.count > p.offset[t] + p.size[t] ||
                (i > 0 && r.begin < k->ranges[i - 1].begin + k->ranges[i - 1].count)) {
                bad_ranges++;
            }
            if ((t == P_LNFW || t == P_LNFB) && b != 0) { lnf_misplaced++; }
            for (size_t e = r.begin; e < r.begin + r.count && e < p.total; e++) { overlaps += seen[e]++ > 0; }
            count += r.count;
        }
        bad_ranges += count != k->count;
        int last = b == plan.num_buckets - 1;
        if (last) {
            bad_order += k->num_layers != 0 || k->num_ranges != 2 || k->ranges[0].begin != p.offset[P_WTE] ||
                         k->ranges[1].begin != p.offset[P_WPE];
        } else {
            bad_order += k->num_layers < 1 || k->first_layer + k->num_layers != expect_top;
            expect_top = k->first_layer;
            bad_map += plan.bucket_of_layer[k->first_layer] != b;
            size_t extra = b == 0 ? (p.size[P_LNFW] + p.size[P_LNFB]) * sizeof(float) : 0;
            oversize += k->num_layers > 1 && extra + (size_t)k->num_layers * layer_bytes > limit;
        }
    }
    bad_order += expect_top != 0;
    int mapped = 0;
    for (int l = 0; l < c.num_layers; l++) { mapped += plan.bucket_of_layer[l] >= 0; }
    bad_map += mapped != plan.num_buckets - 1;
    size_t uncovered = 0;
    for (size_t e = 0; e < p.total; e++) { uncovered += seen[e] == 0; }
    char name[160];
    snprintf(name, sizeof(name), "buckets %s limit %zu: %d buckets tile the parameters", s->name, limit,
             plan.num_buckets);
    check(uncovered == 0 && overlaps == 0 && bad_ranges == 0, name, "%zu uncovered, %d overlapping, %d bad ranges",
          uncovered, overlaps, bad_ranges);
    snprintf(name, sizeof(name), "buckets %s limit %zu: block order, size limit, lnf first, embeddings last", s->name,
             limit);
    check(bad_order == 0 && oversize == 0 && bad_map == 0 && lnf_misplaced == 0, name,
          "%d order errors, %d oversize, %d map errors, %d lnf misplaced", bad_order, oversize, bad_map,
          lnf_misplaced);
    free(seen);
    bucket_plan_free(&plan);
}

static void check_zero(const Shape *s, int ranks) {
    GPTConfig c = shape_config(s);
    ParamLayout p;
    param_layout(&c, &p);
    ZeroShards z = zero_shards_make(p.total, ranks);
    char name[160];
    snprintf(name, sizeof(name), "zero %s x %d: slices equal, aligned, padding small", s->name, ranks);
    check(z.slice % ZERO_ALIGN_ELEMS == 0 && z.padded == z.slice * (size_t)ranks && z.padded >= p.total &&
              z.slice < (p.total + (size_t)ranks - 1) / (size_t)ranks + ZERO_ALIGN_ELEMS,
          name, "P %zu, slice %zu, padded %zu", p.total, z.slice, z.padded);
    size_t next = 0;
    int gaps = 0;
    for (int r = 0; r < ranks; r++) {
        Span o = zero_owned(&z, r);
        if (o.count == 0) { continue; }
        gaps += o.begin != next || o.begin != zero_padded_slice(&z, r).begin || o.count > z.slice;
        next = o.begin + o.count;
    }
    snprintf(name, sizeof(name), "zero %s x %d: owned spans tile [0, P)", s->name, ranks);
    check(gaps == 0 && next == p.total, name, "%d gaps, coverage ends at %zu of %zu", gaps, next, p.total);
    int bad_parts = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t covered = 0;
        for (int r = 0; r < ranks; r++) {
            Span part = zero_owned_part_of_tensor(&z, &p, r, t);
            if (part.count == 0) { continue; }
            Span o = zero_owned(&z, r);
            bad_parts += part.begin < p.offset[t] || part.begin + part.count > p.offset[t] + p.size[t] ||
                         part.begin < o.begin || part.begin + part.count > o.begin + o.count;
            covered += part.count;
        }
        bad_parts += covered != p.size[t];
    }
    snprintf(name, sizeof(name), "zero %s x %d: per-tensor parts tile every tensor", s->name, ranks);
    check(bad_parts == 0, name, "%d bad parts", bad_parts);
}

static void check_intersect(void) {
    Span a = {10, 10}, b = {15, 20}, c = {30, 5};
    Span ab = span_intersect(a, b), ac = span_intersect(a, c);
    check(ab.begin == 15 && ab.count == 5 && ac.count == 0, "span_intersect: overlap and disjoint",
          "got [%zu, +%zu) and +%zu", ab.begin, ab.count, ac.count);
}

int main(void) {
    check_intersect();
    for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++) {
        for (size_t k = 0; k < sizeof(BUCKET_LIMITS) / sizeof(BUCKET_LIMITS[0]); k++) {
            check_buckets(&SHAPES[i], BUCKET_LIMITS[k]);
        }
        for (size_t r = 0; r < sizeof(RANKS) / sizeof(RANKS[0]); r++) { check_zero(&SHAPES[i], RANKS[r]); }
    }
    // d12 at the default limit: one block per bucket (28 MB each), so backward can start reducing after block 11.
    GPTConfig c = shape_config(&SHAPES[0]);
    ParamLayout p;
    param_layout(&c, &p);
    BucketPlan plan = bucket_plan_make(&c, &p, DP_BUCKET_BYTES);
    check(plan.num_buckets == 13 && plan.buckets[0].first_layer == 11, "d12 at 32 MiB: 12 block buckets + embeddings",
          "%d buckets, first starts at block %d", plan.num_buckets, plan.buckets[0].first_layer);
    bucket_plan_free(&plan);
    return test_exit();
}
