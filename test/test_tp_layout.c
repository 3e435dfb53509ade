/*
 * test_tp_layout.c: a tensor-parallel rank's local parameter buffer (llmc/tp_layout.h) and the vocab-parallel
 * cross-entropy (llmc/vocab_parallel.h).
 * - for GPT-2 at tp in {1, 2, 3, 4, 6, 8} and grouped-query, untied Llamas at tp 1..4 (key/value heads split evenly
 *   and unevenly): the local layouts of the tp ranks tile every full tensor exactly once (replicated tensors: once
 *   per rank), each local layer slice inside its own global layer;
 * - scatter then gather gives back the full buffer bitwise, and the row copies agree with the element map;
 * - local initialization equals the slice of the single-GPU initialization bitwise;
 * - a rank's local QKV weight and bias are a fused QKV of its key/value heads and their groups' query heads, and a
 *   Llama's local fc weight is [gate; up] of its features (rows rebuilt from the head and feature counts);
 * - a block's attention (RoPE, grouped-query heads) and MLP (GELU, SwiGLU) computed by cpu_model.h's kernels on each
 *   rank's local tensors with its local head and feature counts, the row-parallel outputs summed over the ranks,
 *   equal the whole block (double): the local tensors are a model of their own that the unchanged kernels run;
 * - the vocab-parallel cross-entropy over tp in {1, 2, 4, 8} ranks equals cpu_model.h's unsplit one (double),
 *   with padded columns excluded (they hold huge logits here) and ranks that hold padding only.
 */
#define CPU_REAL double
#include "../llmc/cpu_model.h"
#include "../llmc/gtp_plan.h"
#include "../llmc/tp_layout.h"
#include "../llmc/vocab_parallel.h"
#include "test_util.h"

#define TEST_SEED 4321
#define TEST_STREAM 98u // test data, apart from the parameter and data streams

// The layouts every check below runs on: a description and the TP degrees it takes.
typedef struct {
    const char *name;
    GPTConfig c;
    int tps[6], num_tps;
} LayoutCase;

// GPT-2: L 2, C 48, 12 heads of 4, Vp 384 (V 300), T 16: every TP-split dimension but the heads divides by each tp
// (heads are split as evenly as they go: 8 is 2,2,2,2,1,1,1,1). Llama: L 2, C 64, untied, F 48, Vp 384: 8 query heads
// of 8 in 4 groups (tp 3: key/value heads 2, 1, 1), and 6 in 2 groups of 3 (tp 2: one key/value head each).
static LayoutCase layout_case(int i) {
    GPTConfig llama = config_default(ARCH_LLAMA, 16, 2, 8, 64);
    llama.num_kv_heads = 4;
    llama.ffn_hidden = 48;
    llama.vocab_size = 300;
    llama.padded_vocab_size = padded_vocab(llama.vocab_size);
    GPTConfig groups3 = llama;
    groups3.num_heads = 6;
    groups3.channels = 48;
    groups3.num_kv_heads = 2;
    LayoutCase cases[] = {{"gpt2", config_gpt2(16, 300, 2, 12, 48), {1, 2, 3, 4, 6, 8}, 6},
                          {"llama kv 4", llama, {1, 2, 3, 4}, 4},
                          {"llama kv 2 of 6", groups3, {1, 2}, 2}};
    return cases[i];
}
#define NUM_LAYOUT_CASES 3

static float *random_params(const ParamLayout *g) {
    float *x = (float *)malloc_check(g->total * sizeof(float), "full params");
    for (size_t i = 0; i < g->total; i++) { x[i] = (float)rng_uniform(TEST_SEED, TEST_STREAM, i); }
    return x;
}

// tp local buffers of rank r's local size each.
static float **alloc_locals(const GPTConfig *c, int tp) {
    float **local = (float **)malloc_check((size_t)tp * sizeof(float *), "local buffers");
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        local[r] = (float *)malloc_check(p.total * sizeof(float), "local params");
    }
    return local;
}

static void free_locals(float **local, int tp) {
    for (int r = 0; r < tp; r++) { free(local[r]); }
    free(local);
}

// ---------------------------------------------------------------------------------------------------------
// The local layout and its element map.

// Errors in rank layouts of one tp: offsets packed in order, sizes = layers x local shape, and over all ranks
// each full element hit once (replicated: tp times), by a local element of the same layer.
static int layout_errors(const GPTConfig *c, int tp) {
    ParamLayout g;
    param_layout(c, &g);
    int bad = 0;
    unsigned char *seen = (unsigned char *)calloc_check(g.total, 1, "tiling counts");
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        size_t off = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            size_t rows, cols, full_rows, full_cols;
            param_tp_shape(c, &m, t, &rows, &cols);
            param_layer_shape(c, t, &full_rows, &full_cols);
            bad += p.offset[t] != off || p.size[t] != param_num_layers(c, t) * rows * cols;
            off += p.size[t];
            for (size_t i = 0; i < p.size[t]; i++) {
                size_t e = tp_local_to_global(c, &m, t, i);
                if (e >= g.size[t] || e / (full_rows * full_cols) != i / (rows * cols)) {
                    bad++;
                    continue;
                }
                seen[g.offset[t] + e]++;
            }
        }
        bad += p.total != off;
    }
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        unsigned char want = param_tp_split(t) == TP_REPLICATED ? (unsigned char)tp : 1;
        for (size_t e = 0; e < g.size[t]; e++) { bad += seen[g.offset[t] + e] != want; }
    }
    free(seen);
    return bad;
}

static void test_layout_tiles(void) {
    int bad = 0;
    for (int i = 0; i < NUM_LAYOUT_CASES; i++) {
        LayoutCase lc = layout_case(i);
        for (int j = 0; j < lc.num_tps; j++) {
            int b = layout_errors(&lc.c, lc.tps[j]);
            if (b) { printf("  %s tp %d: %d errors\n", lc.name, lc.tps[j], b); }
            bad += b;
        }
        ParamLayout g, one;
        Mesh m1 = mesh_make(1, 0, 1, 1);
        param_layout(&lc.c, &g);
        param_layout_local(&lc.c, &m1, &one);
        bad += memcmp(&g, &one, sizeof(g)) != 0;
    }
    check(bad == 0, "tp local layouts tile every tensor exactly once, gpt2 and llama (tp 1: the full layout)",
          "%d errors", bad);
}

// One rank holds a grouped-query Llama whole: its QKV of unequal parts ([4 q | 1 k | 1 v] heads here) and the
// biases it lacks keep their full sizes, and every local element is itself (the GPU build's layout and initialization).
static void test_one_rank_llama(void) {
    GPTConfig c = config_default(ARCH_LLAMA, 16, 2, 4, 64);
    c.num_kv_heads = 1;
    c.vocab_size = 300;
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    c.tied = 0;
    Mesh m1 = mesh_make(1, 0, 1, 1);
    ParamLayout g, one, gtp;
    param_layout(&c, &g);
    param_layout_local(&c, &m1, &one);
    param_layout_gtp(&c, &m1, &gtp);
    int bad = (memcmp(&g, &one, sizeof(g)) != 0) + (memcmp(&g, &gtp, sizeof(g)) != 0);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        for (size_t i = 0; i < g.size[t]; i++) { bad += tp_local_to_global(&c, &m1, t, i) != i; }
    }
    check(bad == 0, "tp 1 holds a grouped-query Llama whole (layout and element map are the identity)", "%d errors",
          bad);
}

// ---------------------------------------------------------------------------------------------------------
// Scatter, gather, local initialization.

static int gather_scatter_errors(const GPTConfig *c, int tp) {
    ParamLayout g;
    param_layout(c, &g);
    float *full = random_params(&g);
    float *back = (float *)malloc_check(g.total * sizeof(float), "gathered params");
    int bad = 0;
    float **local = alloc_locals(c, tp);
    param_scatter_tp(c, tp, full, local);
    for (int r = 0; r < tp; r++) { // the row copies agree with the element map
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            for (size_t e = 0; e < p.size[t]; e++) {
                bad += local[r][p.offset[t] + e] != full[g.offset[t] + tp_local_to_global(c, &m, t, e)];
            }
        }
    }
    memset(back, 0xff, g.total * sizeof(float)); // NaN: an element gather misses shows
    param_gather_tp(c, tp, (const float *const *)local, back);
    bad += memcmp(back, full, g.total * sizeof(float)) != 0;
    free_locals(local, tp);
    free(full);
    free(back);
    return bad;
}

static void test_gather_scatter(void) {
    int bad = 0;
    for (int i = 0; i < NUM_LAYOUT_CASES; i++) {
        LayoutCase lc = layout_case(i);
        for (int j = 0; j < lc.num_tps; j++) {
            int b = gather_scatter_errors(&lc.c, lc.tps[j]);
            if (b) { printf("  %s tp %d: gather(scatter(x)) != x or rows off the map: %d\n", lc.name, lc.tps[j], b); }
            bad += b;
        }
    }
    check(bad == 0, "gather(scatter(x)) == x bitwise; row copies match the element map (gpt2, llama)", "%d errors",
          bad);
}

static int local_init_errors(const GPTConfig *c, int tp) {
    ParamLayout g;
    param_layout(c, &g);
    float *full = (float *)malloc_check(g.total * sizeof(float), "full init");
    float *back = (float *)malloc_check(g.total * sizeof(float), "gathered init");
    param_init_host(c, &g, TEST_SEED, full);
    int bad = 0;
    float **init = alloc_locals(c, tp), **slice = alloc_locals(c, tp);
    param_scatter_tp(c, tp, full, slice);
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        param_init_local(c, &m, TEST_SEED, init[r]);
        bad += memcmp(init[r], slice[r], p.total * sizeof(float)) != 0;
    }
    param_gather_tp(c, tp, (const float *const *)init, back);
    bad += memcmp(back, full, g.total * sizeof(float)) != 0;
    free_locals(init, tp);
    free_locals(slice, tp);
    free(full);
    free(back);
    return bad;
}

static void test_local_init(void) {
    int bad = 0;
    for (int i = 0; i < NUM_LAYOUT_CASES; i++) {
        LayoutCase lc = layout_case(i);
        for (int j = 0; j < lc.num_tps; j++) { bad += local_init_errors(&lc.c, lc.tps[j]); }
    }
    check(bad == 0, "local init == slice of the single-GPU init (bitwise), for every rank and tp (gpt2, llama)",
          "%d errors", bad);
}

/*
 * Rank r's local qkvw (L, (g kvl + 2 kvl) hs, C) and qkvb must be [q; k; v] of its kvl key/value heads kv0 ..
 * kv0 + kvl - 1 (KV / tp each, one more for the first KV % tp ranks) and their groups' g kvl query heads from g kv0
 * on: local row qoff(part) + h hs + j holds global row first(part) hs + (h0(part) + h) hs + j of the same layer, with
 * the q part's heads starting at g kv0 and the k and v parts' at kv0, after the NH query heads and the KV key heads.
 */
static int qkv_errors(const GPTConfig *c, int tp, const float *full, float *const *local) {
    ParamLayout g;
    param_layout(c, &g);
    size_t C = (size_t)c->channels, NH = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads, hs = C / NH;
    size_t grp = NH / KV, base = KV / (size_t)tp, extra = KV % (size_t)tp, global_rows = (NH + 2 * KV) * hs;
    int bad = 0;
    for (int r = 0; r < tp; r++) {
        size_t kvl = base + ((size_t)r < extra), kv0 = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra);
        size_t heads[QKV_PARTS] = {grp * kvl, kvl, kvl}, h0[QKV_PARTS] = {grp * kv0, kv0, kv0};
        size_t first[QKV_PARTS] = {0, NH, NH + KV}, local_rows = (grp + 2) * kvl * hs;
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        bad += p.size[P_QKVW] != (size_t)c->num_layers * local_rows * C;
        for (size_t l = 0; l < (size_t)c->num_layers; l++) {
            size_t lrow = l * local_rows;
            for (size_t part = 0; part < QKV_PARTS; part++) {
                for (size_t h = 0; h < heads[part]; h++) {
                    for (size_t j = 0; j < hs; j++, lrow++) {
                        size_t grow = l * global_rows + (first[part] + h0[part] + h) * hs + j;
                        const float *lw = local[r] + p.offset[P_QKVW] + lrow * C;
                        bad += memcmp(lw, full + g.offset[P_QKVW] + grow * C, C * sizeof(float)) != 0;
                        if (c->bias) { bad += local[r][p.offset[P_QKVB] + lrow] != full[g.offset[P_QKVB] + grow]; }
                    }
                }
            }
        }
    }
    return bad;
}

// A SwiGLU fc's local weight (L, 2 F/tp, C) must be [gate; up] of its features f0 .. f0 + F/tp - 1: local row
// part * F/tp + j holds global row part * F + f0 + j; and its fc projection (L, C, F/tp) the columns of those features.
static int fc_errors(const GPTConfig *c, int tp, const float *full, float *const *local) {
    ParamLayout g;
    param_layout(c, &g);
    size_t C = (size_t)c->channels, F = (size_t)c->ffn_hidden, Fl = F / (size_t)tp;
    int bad = 0;
    for (int r = 0; r < tp; r++) {
        size_t f0 = (size_t)r * Fl;
        Mesh m = mesh_make(tp, r, tp, 1);
        ParamLayout p;
        param_layout_local(c, &m, &p);
        for (size_t l = 0; l < (size_t)c->num_layers; l++) {
            for (size_t part = 0; part < 2; part++) {
                for (size_t j = 0; j < Fl; j++) {
                    size_t lrow = l * 2 * Fl + part * Fl + j, grow = l * 2 * F + part * F + f0 + j;
                    bad += memcmp(local[r] + p.offset[P_FCW] + lrow * C, full + g.offset[P_FCW] + grow * C,
                                  C * sizeof(float)) != 0;
                }
            }
            for (size_t row = 0; row < C; row++) {
                bad += memcmp(local[r] + p.offset[P_FCPROJW] + (l * C + row) * Fl,
                              full + g.offset[P_FCPROJW] + (l * C + row) * F + f0, Fl * sizeof(float)) != 0;
            }
        }
    }
    return bad;
}

static void test_qkv_and_fc(void) {
    int bad_qkv = 0, bad_fc = 0;
    for (int i = 0; i < NUM_LAYOUT_CASES; i++) {
        LayoutCase lc = layout_case(i);
        ParamLayout g;
        param_layout(&lc.c, &g);
        float *full = random_params(&g);
        for (int j = 0; j < lc.num_tps; j++) {
            float **local = alloc_locals(&lc.c, lc.tps[j]);
            param_scatter_tp(&lc.c, lc.tps[j], full, local);
            bad_qkv += qkv_errors(&lc.c, lc.tps[j], full, local);
            if (lc.c.mlp == MLP_SWIGLU) { bad_fc += fc_errors(&lc.c, lc.tps[j], full, local); }
            free_locals(local, lc.tps[j]);
        }
        free(full);
    }
    check(bad_qkv == 0, "local qkv weight and bias are a fused qkv of the rank's key/value heads and their query heads",
          "%d errors", bad_qkv);
    check(bad_fc == 0, "local swiglu fc weight is [gate; up] of the rank's features, fc projection their columns",
          "%d errors", bad_fc);
}

// ---------------------------------------------------------------------------------------------------------
// A block on the ranks' local tensors against the whole block.

#define BLOCK_B 2
#define BLOCK_T 8
#define BLOCK_TOL 1e-12 // double; only the order of the row-parallel sums differs

// Layer 0's tensor t of a flat buffer of layout p.
static double *layer0(double *base, const ParamLayout *p, int t) { return base + p->offset[t]; }

/*
 * The attention half-block (qkv, RoPE where the model has it, causal grouped-query attention, the projection) and the
 * MLP half-block (fc, GELU or SwiGLU, the fc projection) of layer 0 on input x, computed whole, and on each TP rank
 * with its local tensors and its local counts (heads, key/value heads, MLP features: the description as the rank's
 * kernels see it), the row-parallel outputs summed over the ranks. Returns the worse relative error of the two sums.
 */
static double block_error(const GPTConfig *c, int tp) {
    int N = BLOCK_B * BLOCK_T, C = c->channels, HS = C / c->num_heads;
    ParamLayout g;
    param_layout(c, &g);
    float *full = random_params(&g);
    for (size_t i = 0; i < g.total; i++) { full[i] -= 0.5f; } // centred, so sums cancel as in a model
    double *w = (double *)malloc_check(g.total * sizeof(double), "weights");
    for (size_t i = 0; i < g.total; i++) { w[i] = full[i]; }
    size_t widest = (size_t)config_qkv_rows(c) > (size_t)config_fc_rows(c) ? (size_t)config_qkv_rows(c)
                                                                            : (size_t)config_fc_rows(c);
    double *x = (double *)malloc_check((size_t)N * C * sizeof(double), "input");
    for (size_t i = 0; i < (size_t)N * C; i++) { x[i] = 2.0 * rng_uniform(TEST_SEED, TEST_STREAM + 2, i) - 1.0; }
    double *qkv = (double *)malloc_check((size_t)N * widest * sizeof(double), "qkv or fc outputs");
    double *att = (double *)malloc_check((size_t)BLOCK_B * c->num_heads * BLOCK_T * BLOCK_T * sizeof(double), "att");
    double *mid = (double *)malloc_check((size_t)N * (C > c->ffn_hidden ? C : c->ffn_hidden) * sizeof(double), "mid");
    double *wt = (double *)malloc_check(widest * (C > c->ffn_hidden ? C : c->ffn_hidden) * sizeof(double), "wt");
    double *want[2], *sum[2], *part = (double *)malloc_check((size_t)N * C * sizeof(double), "a rank's part");
    float *cos_table = (float *)malloc_check((size_t)BLOCK_T * HS * sizeof(float), "rope tables");
    float *sin_table = cos_table + (size_t)BLOCK_T * HS / 2;
    if (c->pos == POS_ROPE) { rope_tables(c, BLOCK_T, cos_table, sin_table); }
    for (int half = 0; half < 2; half++) {
        want[half] = (double *)calloc_check((size_t)N * C, sizeof(double), "whole output");
        sum[half] = (double *)calloc_check((size_t)N * C, sizeof(double), "summed output");
    }
    float **local = alloc_locals(c, tp);
    param_scatter_tp(c, tp, full, local);
    for (int r = -1; r < tp; r++) { // -1: the whole block
        GPTConfig lc = *c; // the description as this rank's kernels see it
        const double *wq, *bq, *wo, *wfc, *bfc, *wproj;
        double *lw = NULL;
        ParamLayout p = g;
        if (r >= 0) {
            Mesh m = mesh_make(tp, r, tp, 1);
            lc.num_heads = (int)tp_heads(&m, c).count;
            lc.num_kv_heads = (int)tp_kv_heads(&m, c).count;
            lc.channels = lc.num_heads * HS; // the attention's width (head size as the model's)
            lc.ffn_hidden = (int)tp_mlp_features(&m, c).count;
            param_layout_local(c, &m, &p);
            lw = (double *)malloc_check(p.total * sizeof(double), "local weights");
            for (size_t i = 0; i < p.total; i++) { lw[i] = local[r][i]; }
        }
        double *base = r >= 0 ? lw : w;
        wq = layer0(base, &p, P_QKVW);
        bq = p.size[P_QKVB] ? layer0(base, &p, P_QKVB) : NULL;
        wo = layer0(base, &p, P_ATTPROJW);
        wfc = layer0(base, &p, P_FCW);
        bfc = p.size[P_FCB] ? layer0(base, &p, P_FCB) : NULL;
        wproj = layer0(base, &p, P_FCPROJW);
        int qkv_rows = config_qkv_rows(&lc), A = lc.num_heads * HS, fc_rows = config_fc_rows(&lc);
        matmul_forward(qkv, x, wq, bq, wt, N, C, qkv_rows);
        if (c->pos == POS_ROPE) {
            rope_rotate(qkv, cos_table, sin_table, BLOCK_B, BLOCK_T, lc.num_heads, lc.num_kv_heads, HS, 1);
        }
        attention_forward(mid, att, qkv, BLOCK_B, BLOCK_T, lc.num_heads, lc.num_kv_heads, HS);
        matmul_forward(r >= 0 ? part : want[0], mid, wo, NULL, wt, N, A, C);
        if (r >= 0) { for (size_t i = 0; i < (size_t)N * C; i++) { sum[0][i] += part[i]; } }
        matmul_forward(qkv, x, wfc, bfc, wt, N, C, fc_rows);
        mlp_act_forward(&lc, mid, qkv, N);
        matmul_forward(r >= 0 ? part : want[1], mid, wproj, NULL, wt, N, lc.ffn_hidden, C);
        if (r >= 0) { for (size_t i = 0; i < (size_t)N * C; i++) { sum[1][i] += part[i]; } }
        free(lw);
    }
    double err = 0.0;
    for (int half = 0; half < 2; half++) {
        double e = max_rel_err_f64(sum[half], want[half], (size_t)N * C);
        if (!(e <= err)) { err = e; }
        free(want[half]);
        free(sum[half]);
    }
    free_locals(local, tp);
    free(full); free(w); free(x); free(qkv); free(att); free(mid); free(wt); free(part); free(cos_table);
    return err;
}

static void test_block_on_ranks(void) {
    double worst = 0.0;
    for (int i = 0; i < NUM_LAYOUT_CASES; i++) {
        LayoutCase lc = layout_case(i);
        for (int j = 0; j < lc.num_tps; j++) {
            double e = block_error(&lc.c, lc.tps[j]);
            if (!(e <= BLOCK_TOL)) { printf("  %s tp %d: relative error %.3g\n", lc.name, lc.tps[j], e); }
            if (!(e <= worst)) { worst = e; }
        }
    }
    check(worst <= BLOCK_TOL, "a block on the ranks' local tensors and counts, row-parallel outputs summed, equals "
          "the whole block (attention with rope and grouped-query heads, gelu and swiglu MLPs)",
          "relative error %.3g (tol %.0e)", worst, BLOCK_TOL);
}

// ---------------------------------------------------------------------------------------------------------
// Vocab-parallel cross-entropy against the unsplit one.

#define CE_TOKENS 64
#define CE_LOGIT_SCALE 8.0   // logits uniform in (-8, 8): the per-rank maxima differ a lot
#define CE_PAD_LOGIT 1.0e4f  // padded columns: would dominate the softmax if they were not excluded
#define CE_LOSS_TOL 1e-12    // loss: double throughout
#define CE_GRAD_TOL 1e-6     // gradient: written as float (relative rounding 6e-8)
#define NUM_CE_TPS 4
static const int CE_TPS[NUM_CE_TPS] = {1, 2, 4, 8};

static double max_rel_err_double(const double *a, const double *b, size_t n) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= maxdiff)) { maxdiff = d; }
        if (fabs(b[i]) > maxref) { maxref = fabs(b[i]); }
    }
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

// Token n's target lies in rank (n % tp)'s real columns when that rank has any, so every rank sees targets.
static void ce_targets(int *targets, int tp, int V, int Vp) {
    GPTConfig c = {.vocab_size = V, .padded_vocab_size = Vp};
    for (int n = 0; n < CE_TOKENS; n++) {
        Mesh m = mesh_make(tp, n % tp, tp, 1);
        Span cols = tp_vocab_rows(&m, &c);
        size_t real = vocab_real_columns(cols, V);
        uint32_t pick = rng_below(TEST_SEED, TEST_STREAM, (uint64_t)n, (uint32_t)(real ? real : (size_t)V));
        targets[n] = real ? (int)(cols.begin + pick) : (int)pick;
    }
}

// Loss and gradient relative errors of tp ranks against cpu_model.h, for vocabulary V padded to Vp.
static void ce_errors(int tp, int V, int Vp, double *loss_err, double *grad_err) {
    GPTConfig c = {.vocab_size = V, .padded_vocab_size = Vp};
    size_t N = CE_TOKENS, cols_per_rank = (size_t)Vp / (size_t)tp;
    const double dloss = 1.0 / (double)N;
    float *logits = (float *)malloc_check(N * (size_t)Vp * sizeof(float), "logits");
    double *ref_logits = (double *)malloc_check(N * (size_t)Vp * sizeof(double), "reference logits");
    for (size_t i = 0; i < N * (size_t)Vp; i++) {
        int padded = (int)(i % (size_t)Vp) >= V;
        double u = 2.0 * rng_uniform(TEST_SEED, TEST_STREAM + 1, i) - 1.0;
        logits[i] = padded ? CE_PAD_LOGIT : (float)(CE_LOGIT_SCALE * u);
        ref_logits[i] = logits[i];
    }
    int targets[CE_TOKENS];
    ce_targets(targets, tp, V, Vp);

    double *ref_loss = (double *)malloc_check(N * sizeof(double), "reference losses");
    double *ref_grad = (double *)malloc_check(N * (size_t)Vp * sizeof(double), "reference dlogits");
    softmax_crossentropy_forward(ref_loss, ref_grad, ref_logits, targets, (int)N, V, Vp);
    softmax_crossentropy_backward(ref_grad, ref_grad, targets, dloss, (int)N, V, Vp);

    // Each rank: its columns of the logits, its partials; then the combine; then each rank's gradient.
    float *local_max = (float *)malloc_check((size_t)tp * N * sizeof(float), "local max");
    double *local_sum = (double *)malloc_check((size_t)tp * N * sizeof(double), "local sum");
    float *target_logit = (float *)malloc_check((size_t)tp * N * sizeof(float), "target logit");
    float *local = (float *)malloc_check(N * cols_per_rank * sizeof(float), "local logits");
    float *dlocal = (float *)malloc_check(N * cols_per_rank * sizeof(float), "local dlogits");
    double *loss = (double *)malloc_check(N * sizeof(double), "losses");
    double *lse = (double *)malloc_check(N * sizeof(double), "lse");
    double *grad = (double *)malloc_check(N * (size_t)Vp * sizeof(double), "dlogits");
    for (int pass = 0; pass < 2; pass++) { // 0: partials, 1: gradients (after the combine)
        for (int r = 0; r < tp; r++) {
            Mesh m = mesh_make(tp, r, tp, 1);
            Span cols = tp_vocab_rows(&m, &c);
            for (size_t n = 0; n < N; n++) {
                memcpy(local + n * cols.count, logits + n * (size_t)Vp + cols.begin, cols.count * sizeof(float));
            }
            if (pass == 0) {
                vocab_ce_local_stats(local, targets, N, cols, V, local_max + (size_t)r * N, local_sum + (size_t)r * N,
                                     target_logit + (size_t)r * N);
                continue;
            }
            vocab_ce_backward(dlocal, local, lse, targets, N, cols, V, (float)dloss);
            for (size_t n = 0; n < N; n++) {
                for (size_t j = 0; j < cols.count; j++) {
                    grad[n * (size_t)Vp + cols.begin + j] = dlocal[n * cols.count + j];
                }
            }
        }
        if (pass == 0) { vocab_ce_combine(tp, N, local_max, local_sum, target_logit, loss, lse); }
    }
    *loss_err = max_rel_err_double(loss, ref_loss, N);
    *grad_err = max_rel_err_double(grad, ref_grad, N * (size_t)Vp);
    free(logits); free(ref_logits); free(ref_loss); free(ref_grad); free(local_max); free(local_sum);
    free(target_logit); free(local); free(dlocal); free(loss); free(lse); free(grad);
}

static void test_vocab_parallel_ce(void) {
    // V 1000 / Vp 1024: every rank holds real columns; V 130 / Vp 256: at tp 8 ranks 5..7 hold padding only.
    int vocabs[][2] = {{1000, 1024}, {130, 256}};
    for (size_t v = 0; v < sizeof(vocabs) / sizeof(vocabs[0]); v++) {
        double worst_loss = 0.0, worst_grad = 0.0;
        for (int i = 0; i < NUM_CE_TPS; i++) {
            double le, ge;
            ce_errors(CE_TPS[i], vocabs[v][0], vocabs[v][1], &le, &ge);
            if (!(le <= worst_loss)) { worst_loss = le; }
            if (!(ge <= worst_grad)) { worst_grad = ge; }
        }
        char name[128];
        snprintf(name, sizeof(name), "vocab-parallel CE == unsplit CE, tp 1/2/4/8, V %d Vp %d", vocabs[v][0],
                 vocabs[v][1]);
        check(worst_loss <= CE_LOSS_TOL && worst_grad <= CE_GRAD_TOL, name,
              "loss rel err %.3g (tol %.0e), grad rel err %.3g (tol %.0e)", worst_loss, CE_LOSS_TOL, worst_grad,
              CE_GRAD_TOL);
    }
}

int main(void) {
    test_layout_tiles();
    test_one_rank_llama();
    test_gather_scatter();
    test_local_init();
    test_qkv_and_fc();
    test_block_on_ranks();
    test_vocab_parallel_ce();
    return test_exit();
}
