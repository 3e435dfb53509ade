/*
 * test_dp_plan.c: the data-parallel arithmetic of llmc/dp_plan.h, for several model shapes and rank counts.
 * - parameter groups: every parameter in exactly one group; spans ascending and inside their tensor; a block's
 *   group holds its slices of the per-layer tensors the model has, the last group the rest (GPT-2: wte, wpe and
 *   lnf; a Llama with an untied head: wte, lnfw and lmhead), no empty span; a rank's owned parts stay in its slice
 *   and, over all ranks, cover every parameter once;
 * - ZeRO-1 slices: equal, aligned, padded length ranks x slice >= P with less than one slice of padding per rank
 *   beyond alignment, owned spans tile [0, P) exactly, and the per-tensor parts of all ranks tile every tensor.
 */
#include "../llmc/dp_plan.h"
#include "test_util.h"

typedef struct {
    const char *name;
    int arch, L, C, NH, V, T;
} Shape;

static const Shape SHAPES[] = {
    {"d12", ARCH_GPT2, 12, 768, 12, 50257, 1024}, {"d48", ARCH_GPT2, 48, 1600, 25, 50257, 1024},
    {"tiny", ARCH_GPT2, 2, 64, 4, 50257, 64},     {"one layer", ARCH_GPT2, 1, 8, 1, 100, 8},
    {"llama tiny", ARCH_LLAMA, 2, 64, 4, 300, 64},
};
static const int RANKS[] = {1, 2, 3, 5, 8, 64};

// GPT-2, or a Llama of 2 key/value heads with its own LM head (tensors of size 0: wpe, the norms' and linear
// layers' biases).
static GPTConfig shape_config(const Shape *s) {
    GPTConfig c = config_default((ModelArch)s->arch, s->T, s->L, s->NH, s->C);
    c.vocab_size = s->V;
    c.padded_vocab_size = padded_vocab(s->V);
    if (s->arch == ARCH_LLAMA) { c.num_kv_heads = 2; }
    return c;
}

// The tensors of group kind `per_layer` (a block's, or the rest) that the model has.
static int group_tensors(const ParamLayout *p, int per_layer) {
    int n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) { n += param_is_per_layer(t) == per_layer && p->size[t] > 0; }
    return n;
}

// The tensor holding flat element e, or -1.
static int tensor_of(const ParamLayout *p, size_t e) {
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (e >= p->offset[t] && e < p->offset[t] + p->size[t]) { return t; }
    }
    return -1;
}

// The L + 1 groups tile the parameters; spans ascend, each inside its tensor and none empty; block groups hold that
// block's slice of each per-layer tensor the model has, the last group the rest it has; and the parts a ZeRO-1 rank
// owns, over all groups, tile its slice.
static void check_groups(const Shape *s, int ranks) {
    GPTConfig c = shape_config(s);
    ParamLayout p;
    param_layout(&c, &p);
    int L = c.num_layers;
    ZeroShards z = zero_shards_make(p.total, ranks);
    unsigned char *seen = (unsigned char *)calloc_check(p.total, 1, "coverage");
    int overlaps = 0, bad_spans = 0, bad_shape = 0;
    size_t owned_total = 0;
    for (int k = 0; k <= L; k++) {
        ParamGroup g = param_group(&p, L, k);
        bad_shape += g.count != group_tensors(&p, k < L);
        for (int i = 0; i < g.count; i++) {
            Span r = g.span[i];
            int t = g.tensor[i];
            bad_spans += r.count == 0 || tensor_of(&p, r.begin) != t || r.begin + r.count > p.offset[t] + p.size[t] ||
                         (i > 0 && r.begin < g.span[i - 1].begin + g.span[i - 1].count) ||
                         param_is_per_layer(t) != (k < L);
            for (size_t e = r.begin; e < r.begin + r.count && e < p.total; e++) { overlaps += seen[e]++ > 0; }
        }
        for (int r = 0; r < ranks; r++) {
            Span o = zero_owned(&z, r);
            ParamGroup own = param_group_owned(&g, o);
            for (int i = 0; i < own.count; i++) {
                bad_spans += own.span[i].begin < o.begin || own.span[i].begin + own.span[i].count > o.begin + o.count;
                owned_total += own.span[i].count;
            }
        }
    }
    size_t uncovered = 0;
    for (size_t e = 0; e < p.total; e++) { uncovered += seen[e] == 0; }
    char name[160];
    snprintf(name, sizeof(name), "groups %s x %d ranks: %d groups tile the parameters, owned parts tile them too",
             s->name, ranks, L + 1);
    check(uncovered == 0 && overlaps == 0 && bad_spans == 0 && bad_shape == 0 && owned_total == p.total, name,
          "%zu uncovered, %d overlapping, %d bad spans, %d bad groups, owned parts cover %zu of %zu", uncovered,
          overlaps, bad_spans, bad_shape, owned_total, p.total);
    free(seen);
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
        for (size_t r = 0; r < sizeof(RANKS) / sizeof(RANKS[0]); r++) {
            check_groups(&SHAPES[i], RANKS[r]);
            check_zero(&SHAPES[i], RANKS[r]);
        }
    }
    return test_exit();
}
