/*
 * test_gradcheck.c: the CPU reference model's backward against central finite differences.
 *
 * llmc/cpu_model.h is compiled here twice: in double (CPU_REAL double), where a central difference
 * (f(x+h) - f(x-h)) / 2h has truncation error O(h^2 f''') ~ 1e-11 and rounding error ~ 1e-16 |f| / h ~ 1e-11
 * at h = 1e-5, so every layer's analytic gradient must agree to 1e-6 relative; and in float, the build that
 * ships, whose full-model gradient must agree with the double one. Each layer is checked on the scalar
 * f = sum(w * out) for a fixed random w (its backward seeded with dout = w): GPT-2's (LayerNorm, GELU, learned
 * positions) and Llama's (RMSNorm, RoPE with and without llama3 scaling, SwiGLU), attention with as many key/value
 * heads as query heads and with a quarter of them. Then whole models end to end: GPT-2, and Llama with a tied head
 * and KV = NH, and with its own head, KV = NH/4 and llama3 rope scaling. Finite differences check a backward
 * against its forward, not the forward against Hugging Face's: that is checked on hand-computed values (RMSNorm,
 * SwiGLU's gate and up halves) and against multi-head attention over repeated key/value heads (HF's repeat_kv).
 * Also AdamW, clipping and weight decay against hand-computed values.
 */
#define CPU_REAL double
#include "../llmc/cpu_model.h"
#include "../llmc/rng.h"
#include "test_util.h"

#define FD_STEP 1e-5
#define FD_TOL 1e-6
#define TEST_SEED 1234
#define TEST_STREAM 99u // test data, apart from the parameter and data streams

static uint64_t g_draw = 0; // counter of the test's random draws

// The layer cases' arrays, each case holds several: all are freed together when the layer checks are done.
#define MAX_TEST_ARRAYS 96
static double *g_arrays[MAX_TEST_ARRAYS];
static int g_num_arrays = 0;

static double *zero_array(size_t n) {
    if (g_num_arrays == MAX_TEST_ARRAYS) { fail("more than %d test arrays: raise MAX_TEST_ARRAYS", MAX_TEST_ARRAYS); }
    return g_arrays[g_num_arrays++] = (double *)calloc_check(n, sizeof(double), "test array");
}

// n uniform draws from (-1, 1).
static double *rand_array(size_t n) {
    double *x = zero_array(n);
    for (size_t i = 0; i < n; i++) { x[i] = 2.0 * rng_uniform(TEST_SEED, TEST_STREAM, g_draw++) - 1.0; }
    return x;
}

static void free_test_arrays(void) {
    while (g_num_arrays > 0) { free(g_arrays[--g_num_arrays]); }
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) { s += a[i] * b[i]; }
    return s;
}

// A scalar function of some arrays that the check perturbs in place.
typedef double (*ScalarFn)(void *ctx);

// d f / d x[i] by central differences.
static double fd_derivative(ScalarFn f, void *ctx, double *x) {
    double saved = *x;
    *x = saved + FD_STEP;
    double fp = f(ctx);
    *x = saved - FD_STEP;
    double fm = f(ctx);
    *x = saved;
    return (fp - fm) / (2 * FD_STEP);
}

// max |numeric - analytic| / max |analytic| over all n elements of x.
static double fd_rel_err(ScalarFn f, void *ctx, double *x, size_t n, const double *analytic) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(fd_derivative(f, ctx, &x[i]) - analytic[i]);
        if (!(d <= maxdiff)) { maxdiff = d; }
        if (fabs(analytic[i]) > maxref) { maxref = fabs(analytic[i]); }
    }
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

static void check_fd(const char *name, ScalarFn f, void *ctx, double *x, size_t n, const double *analytic) {
    double err = fd_rel_err(f, ctx, x, n, analytic);
    check(err <= FD_TOL, name, "finite-difference relative error %.3g > %g", err, FD_TOL);
}

// Layer shapes: small, and not multiples of the GEMM tile, so the edge tiles are exercised too. Attention and RoPE
// take their head counts and size from the case.
enum { LB = 2, LT = 5, LC = 8, LOC = 37, LV = 10, LVP = 16, LF = 7 };
#define LN (LB * LT)

// ---------------------------------------------------------------------------------------------------------

typedef struct {
    int inp[LN];
    double *wte, *wpe, *out, *w;
} EncoderCase;

static double encoder_f(void *p) {
    EncoderCase *c = (EncoderCase *)p;
    encoder_forward(c->out, c->inp, c->wte, c->wpe, LB, LT, LC);
    return dot(c->out, c->w, LN * LC);
}

static void test_encoder(void) {
    // Repeated tokens: their wte row must collect every position's gradient.
    EncoderCase c = {{3, 1, 3, 0, 9, 9, 9, 2, 5, 3}, rand_array(LV * LC), rand_array(LT * LC),
                     zero_array(LN * LC), rand_array(LN * LC)};
    double *dwte = zero_array(LV * LC), *dwpe = zero_array(LT * LC);
    encoder_backward(dwte, dwpe, c.w, c.inp, LB, LT, LC);
    check_fd("encoder_backward dwte", encoder_f, &c, c.wte, LV * LC, dwte);
    check_fd("encoder_backward dwpe", encoder_f, &c, c.wpe, LT * LC, dwpe);
    // without learned positions (RoPE): the token embedding alone
    c.wpe = NULL;
    double *dwte_only = zero_array(LV * LC);
    encoder_backward(dwte_only, NULL, c.w, c.inp, LB, LT, LC);
    check_fd("encoder_backward dwte without wpe", encoder_f, &c, c.wte, LV * LC, dwte_only);
}

typedef struct {
    double *inp, *weight, *bias, *out, *mean, *rstd, *w;
} LayerNormCase;

#define TEST_NORM_EPS 1e-5

static double layernorm_f(void *p) {
    LayerNormCase *c = (LayerNormCase *)p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->weight, c->bias, TEST_NORM_EPS, LN, LC);
    return dot(c->out, c->w, LN * LC);
}

static void test_layernorm(void) {
    LayerNormCase c = {rand_array(LN * LC), rand_array(LC), rand_array(LC), zero_array(LN * LC), zero_array(LN),
                       zero_array(LN), rand_array(LN * LC)};
    double *dinp = zero_array(LN * LC), *dw = zero_array(LC), *db = zero_array(LC);
    layernorm_f(&c);
    layernorm_backward(dinp, dw, db, c.w, c.inp, c.weight, c.mean, c.rstd, LN, LC);
    check_fd("layernorm_backward dinp", layernorm_f, &c, c.inp, LN * LC, dinp);
    check_fd("layernorm_backward dweight", layernorm_f, &c, c.weight, LC, dw);
    check_fd("layernorm_backward dbias", layernorm_f, &c, c.bias, LC, db);
}

static double rmsnorm_f(void *p) {
    LayerNormCase *c = (LayerNormCase *)p;
    rmsnorm_forward(c->out, c->rstd, c->inp, c->weight, TEST_NORM_EPS, LN, LC);
    return dot(c->out, c->w, LN * LC);
}

static void test_rmsnorm(void) {
    LayerNormCase c = {rand_array(LN * LC), rand_array(LC), NULL, zero_array(LN * LC), NULL, zero_array(LN),
                       rand_array(LN * LC)};
    double *dinp = zero_array(LN * LC), *dw = zero_array(LC);
    rmsnorm_f(&c);
    rmsnorm_backward(dinp, dw, c.w, c.inp, c.weight, c.rstd, LN, LC);
    check_fd("rmsnorm_backward dinp", rmsnorm_f, &c, c.inp, LN * LC, dinp);
    check_fd("rmsnorm_backward dweight", rmsnorm_f, &c, c.weight, LC, dw);
}

typedef struct {
    double *inp, *weight, *bias, *out, *wt, *w;
} MatmulCase;

static double matmul_f(void *p) {
    MatmulCase *c = (MatmulCase *)p;
    matmul_forward(c->out, c->inp, c->weight, c->bias, c->wt, LN, LC, LOC);
    return dot(c->out, c->w, LN * LOC);
}

static void test_matmul(void) {
    MatmulCase c = {rand_array(LN * LC), rand_array(LOC * LC), rand_array(LOC), zero_array(LN * LOC),
                    zero_array(LOC * LC), rand_array(LN * LOC)};
    double *dinp = zero_array(LN * LC), *dw = zero_array(LOC * LC), *db = zero_array(LOC);
    matmul_backward(dinp, dw, db, c.w, c.inp, c.weight, LN, LC, LOC);
    check_fd("matmul_backward dinp", matmul_f, &c, c.inp, LN * LC, dinp);
    check_fd("matmul_backward dweight", matmul_f, &c, c.weight, LOC * LC, dw);
    check_fd("matmul_backward dbias", matmul_f, &c, c.bias, LOC, db);
}

typedef struct {
    int NH, KV, HS;
    double *qkv, *att, *out, *w;
} AttentionCase;

static double attention_f(void *p) {
    AttentionCase *c = (AttentionCase *)p;
    attention_forward(c->out, c->att, c->qkv, LB, LT, c->NH, c->KV, c->HS);
    return dot(c->out, c->w, (size_t)LN * c->NH * c->HS);
}

// NH query heads of HS channels over KV key/value heads (qkv rows of (NH + 2 KV) HS).
static void test_attention(const char *name, int NH, int KV, int HS) {
    size_t rows = (size_t)LN * (NH + 2 * KV) * HS, out = (size_t)LN * NH * HS;
    AttentionCase c = {NH, KV, HS, rand_array(rows), zero_array((size_t)LB * NH * LT * LT), zero_array(out),
                       rand_array(out)};
    double *dqkv = zero_array(rows);
    attention_f(&c);
    attention_backward(dqkv, c.w, c.qkv, c.att, LB, LT, NH, KV, HS);
    check_fd(name, attention_f, &c, c.qkv, rows, dqkv);
}

// RoPE: q and k (of rows of (NH + 2 KV) HS; v is left alone) rotated by llmc/rope.h's tables of the description;
// the backward is the rotation by the opposite angles.
typedef struct {
    int NH, KV, HS;
    const float *cos_table, *sin_table;
    double *inp, *out, *w;
} RopeCase;

static double rope_f(void *p) {
    RopeCase *c = (RopeCase *)p;
    size_t n = (size_t)LN * (c->NH + 2 * c->KV) * c->HS;
    memcpy(c->out, c->inp, n * sizeof(double));
    rope_rotate(c->out, c->cos_table, c->sin_table, LB, LT, c->NH, c->KV, c->HS, 1);
    return dot(c->out, c->w, n);
}

static void test_rope(const char *name, const GPTConfig *config) {
    int NH = config->num_heads, KV = config->num_kv_heads, HS = config_head_size(config);
    size_t n = (size_t)LN * (NH + 2 * KV) * HS, table = (size_t)LT * (HS / 2);
    float *cos_table = (float *)malloc_check(table * sizeof(float), "rope cos table");
    float *sin_table = (float *)malloc_check(table * sizeof(float), "rope sin table");
    rope_tables(config, LT, cos_table, sin_table);
    RopeCase c = {NH, KV, HS, cos_table, sin_table, rand_array(n), zero_array(n), rand_array(n)};
    double *dinp = zero_array(n);
    memcpy(dinp, c.w, n * sizeof(double));
    rope_rotate(dinp, cos_table, sin_table, LB, LT, NH, KV, HS, -1);
    check_fd(name, rope_f, &c, c.inp, n, dinp);
    free(cos_table);
    free(sin_table);
}

typedef struct {
    double *inp, *out, *w;
} GeluCase;

static double gelu_f(void *p) {
    GeluCase *c = (GeluCase *)p;
    gelu_forward(c->out, c->inp, LN * LC);
    return dot(c->out, c->w, LN * LC);
}

static void test_gelu(void) {
    GeluCase c = {rand_array(LN * LC), zero_array(LN * LC), rand_array(LN * LC)};
    for (int i = 0; i < LN * LC; i++) { c.inp[i] *= 4.0; } // cover both tails
    double *dinp = zero_array(LN * LC);
    gelu_backward(dinp, c.inp, c.w, LN * LC);
    check_fd("gelu_backward", gelu_f, &c, c.inp, LN * LC, dinp);
}

typedef struct {
    double *inp, *out, *w;
} SwigluCase;

static double swiglu_f(void *p) {
    SwigluCase *c = (SwigluCase *)p;
    swiglu_forward(c->out, c->inp, LN, LF);
    return dot(c->out, c->w, LN * LF);
}

static void test_swiglu(void) {
    SwigluCase c = {rand_array(LN * 2 * LF), zero_array(LN * LF), rand_array(LN * LF)};
    for (int i = 0; i < LN * 2 * LF; i++) { c.inp[i] *= 4.0; } // both tails of the gate's sigmoid
    double *dinp = zero_array(LN * 2 * LF);
    swiglu_backward(dinp, c.inp, c.w, LN, LF);
    check_fd("swiglu_backward (gate and up)", swiglu_f, &c, c.inp, LN * 2 * LF, dinp);
}

typedef struct {
    double *a, *b, *out, *w;
} ResidualCase;

static double residual_f(void *p) {
    ResidualCase *c = (ResidualCase *)p;
    residual_forward(c->out, c->a, c->b, LN * LC);
    return dot(c->out, c->w, LN * LC);
}

// The model backward passes dout unchanged to both inputs of a residual add; check that this is its gradient.
static void test_residual(void) {
    ResidualCase c = {rand_array(LN * LC), rand_array(LN * LC), zero_array(LN * LC), rand_array(LN * LC)};
    check_fd("residual backward (identity) da", residual_f, &c, c.a, LN * LC, c.w);
    check_fd("residual backward (identity) db", residual_f, &c, c.b, LN * LC, c.w);
}

#define CE_SCALE 0.37

typedef struct {
    int targets[LN];
    double *logits, *probs, *losses;
} CrossEntropyCase;

static double crossentropy_f(void *p) {
    CrossEntropyCase *c = (CrossEntropyCase *)p;
    softmax_crossentropy_forward(c->losses, c->probs, c->logits, c->targets, LN, LV, LVP);
    double s = 0.0;
    for (int n = 0; n < LN; n++) { s += CE_SCALE * c->losses[n]; }
    return s;
}

static void test_crossentropy(void) {
    CrossEntropyCase c = {{0, 9, 4, 4, 1, 7, 2, 9, 3, 5}, rand_array(LN * LVP), zero_array(LN * LVP),
                          zero_array(LN)};
    for (int i = 0; i < LN * LVP; i++) { c.logits[i] *= 3.0; }
    double loss = crossentropy_f(&c);
    double *dlogits = zero_array(LN * LVP);
    softmax_crossentropy_backward(dlogits, c.probs, c.targets, CE_SCALE, LN, LV, LVP);
    check_fd("softmax_crossentropy_backward dlogits", crossentropy_f, &c, c.logits, LN * LVP, dlogits);
    // Padded columns take no part: huge logits there change nothing, and they get exactly zero gradient.
    int padded_ok = 1;
    for (int n = 0; n < LN; n++) {
        for (int v = LV; v < LVP; v++) {
            padded_ok &= dlogits[n * LVP + v] == 0.0;
            c.logits[n * LVP + v] = 1e3;
        }
    }
    double loss_padded = crossentropy_f(&c);
    for (int n = 0; n < LN; n++) {
        for (int v = LV; v < LVP; v++) { padded_ok &= c.probs[n * LVP + v] == 0.0; }
    }
    check(padded_ok && loss_padded == loss, "softmax_crossentropy ignores padded vocabulary",
          "padded columns leak: loss %.17g vs %.17g with huge padded logits", loss_padded, loss);
}

// ---------------------------------------------------------------------------------------------------------
// Llama's forward semantics, as transformers' modeling_llama.py defines them.

#define FORWARD_TOL 1e-12

// RMSNorm: w * (x / sqrt(mean(x^2) + eps)) on x = (3, 4), w = (2, -1): mean square 12.5.
static void test_rmsnorm_values(void) {
    double x[2] = {3, 4}, w[2] = {2, -1}, out[2], rstd[1];
    rmsnorm_forward(out, rstd, x, w, TEST_NORM_EPS, 1, 2);
    double r = 1.0 / sqrt(12.5 + TEST_NORM_EPS);
    check(fabs(out[0] - 6 * r) < FORWARD_TOL && fabs(out[1] + 4 * r) < FORWARD_TOL, "rmsnorm: hand-computed values",
          "out (%.17g, %.17g), want (%.17g, %.17g)", out[0], out[1], 6 * r, -4 * r);
}

// SwiGLU: fc's row is [gate (F) | up (F)] and out = silu(gate) * up, silu(g) = g / (1 + e^-g).
static void test_swiglu_values(void) {
    double inp[4] = {1, -2, 3, 5}, out[2]; // F = 2: gates 1, -2; ups 3, 5
    swiglu_forward(out, inp, 1, 2);
    double want0 = 1 / (1 + exp(-1.0)) * 3, want1 = -2 / (1 + exp(2.0)) * 5;
    check(fabs(out[0] - want0) < FORWARD_TOL && fabs(out[1] - want1) < FORWARD_TOL,
          "swiglu: silu(gate) * up, the gate's rows first", "out (%.17g, %.17g), want (%.17g, %.17g)", out[0], out[1],
          want0, want1);
}

// Grouped-query attention is multi-head attention whose key/value heads are repeated group by group (HF's
// repeat_kv: query head h reads key/value head h / (NH / KV)): the same outputs, bit for bit.
static void test_gqa_is_repeated_kv(void) {
    enum { NH = 4, KV = 2, HS = 3 };
    size_t grow = (NH + 2 * KV) * HS, mrow = 3 * NH * HS;
    double *gqa = rand_array(LN * grow), *mha = zero_array(LN * mrow), *att = zero_array(LB * NH * LT * LT);
    double *out_gqa = zero_array(LN * NH * HS), *out_mha = zero_array(LN * NH * HS);
    for (size_t n = 0; n < LN; n++) {
        const double *g = gqa + n * grow;
        double *m = mha + n * mrow;
        memcpy(m, g, NH * HS * sizeof(double)); // q
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / KV);
            memcpy(m + (NH + h) * HS, g + (NH + kvh) * HS, HS * sizeof(double));          // k
            memcpy(m + (2 * NH + h) * HS, g + (NH + KV + kvh) * HS, HS * sizeof(double)); // v
        }
    }
    attention_forward(out_gqa, att, gqa, LB, LT, NH, KV, HS);
    attention_forward(out_mha, att, mha, LB, LT, NH, NH, HS);
    check(memcmp(out_gqa, out_mha, LN * NH * HS * sizeof(double)) == 0,
          "attention: grouped-query is multi-head over repeated key/value heads", "the outputs differ");
}

// ---------------------------------------------------------------------------------------------------------
// The whole model: tiny, with a padded vocabulary (50 real tokens of 128).

#define MB 2
#define MT 8
#define FD_SAMPLES_PER_TENSOR 12
#define TINY_V 50
#define TINY_HEADS 4
#define TINY_WIDTH 32 // head size 8: four RoPE frequencies
#define TINY_FFN 24
#define TINY_THETA 10000.0f
// Original context of the tiny Llama's llama3 scaling: its four wavelengths (6.3, 63, 628, 6283 at theta 10000)
// fall in all three bands (kept below 128 / 4, divided above 128, interpolated between).
#define TINY_ROPE_ORIGINAL 128

static GPTConfig tiny_gpt2(void) { return config_gpt2(MT, TINY_V, 2, TINY_HEADS, TINY_WIDTH); }

// A tiny Llama: kv key/value heads, tied or its own LM head, llama3 rope scaling or none.
static GPTConfig tiny_llama(int kv, int tied, int scaled) {
    GPTConfig c = config_default(ARCH_LLAMA, MT, 2, TINY_HEADS, TINY_WIDTH);
    c.vocab_size = TINY_V;
    c.padded_vocab_size = padded_vocab(TINY_V);
    c.num_kv_heads = kv;
    c.ffn_hidden = TINY_FFN;
    c.tied = tied;
    c.rope_theta = TINY_THETA;
    if (scaled) {
        c.rope_scaling = llama3_rope_scaling(LLAMA31_ROPE_FACTOR);
        c.rope_scaling.original_max_pos = TINY_ROPE_ORIGINAL;
    }
    config_validate(&c);
    return c;
}

static void tiny_tokens(const GPTConfig *c, int *inputs, int *targets) {
    for (int i = 0; i < MB * MT; i++) {
        inputs[i] = (int)rng_below(TEST_SEED, TEST_STREAM + 1, (uint64_t)i, (uint32_t)c->vocab_size);
        targets[i] = (int)rng_below(TEST_SEED, TEST_STREAM + 2, (uint64_t)i, (uint32_t)c->vocab_size);
    }
}

// Whether flat element i is in a padded vocabulary row (of wte or lmhead).
static int in_padded_row(const GPTConfig *c, const ParamLayout *p, size_t i) {
    size_t real = (size_t)c->vocab_size * c->channels;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_vocab(t) && i >= p->offset[t] + real && i < p->offset[t] + p->size[t]) { return 1; }
    }
    return 0;
}

// Initial parameters, jittered so that no norm weight is exactly 1 and no bias exactly 0 (a backward that forgot
// one of them would otherwise pass). Padded vocabulary rows stay zero. fp32, as every build stores them.
static float *tiny_params(const GPTConfig *c, const ParamLayout *p) {
    float *params = (float *)malloc_check(p->total * sizeof(float), "tiny params");
    param_init_host(c, p, TEST_SEED, params);
    for (size_t i = 0; i < p->total; i++) {
        if (!in_padded_row(c, p, i)) { params[i] += 0.05f * rng_normal(TEST_SEED, TEST_STREAM + 3, i); }
    }
    return params;
}

// Gradient of the mean loss (loss_scale 1/(B*T)) into m->grads; returns the loss.
static double model_grad(CpuModel *m, const int *inputs, const int *targets) {
    cpu_model_zero_grad(m);
    double loss = cpu_model_forward(m, inputs, targets, MB, MT);
    cpu_model_backward(m, 1.0 / (MB * MT));
    return loss;
}

typedef struct {
    CpuModel *m;
    const int *inputs, *targets;
} ModelCase;

static double model_f(void *p) {
    ModelCase *c = (ModelCase *)p;
    return cpu_model_forward(c->m, c->inputs, c->targets, MB, MT);
}

// Finite differences at FD_SAMPLES_PER_TENSOR random elements of every tensor the model has.
static void test_model_fd(const char *model, CpuModel *m, const int *inputs, const int *targets) {
    ModelCase c = {m, inputs, targets};
    const ParamLayout *p = &m->layout;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (p->size[t] == 0) { continue; } // a tensor this model does not have
        double maxdiff = 0.0, maxref = 0.0;
        // wte, lmhead: real rows only; the padded ones are checked to stay exactly zero
        size_t range = param_is_vocab(t) ? (size_t)m->config.vocab_size * m->config.channels : p->size[t];
        for (uint64_t s = 0; s < FD_SAMPLES_PER_TENSOR; s++) {
            size_t e = p->offset[t] + rng_below(TEST_SEED, TEST_STREAM + 4 + (uint32_t)t, s, (uint32_t)range);
            double d = fabs(fd_derivative(model_f, &c, &m->params[e]) - m->grads[e]);
            if (!(d <= maxdiff)) { maxdiff = d; }
            if (fabs(m->grads[e]) > maxref) { maxref = fabs(m->grads[e]); }
        }
        double err = maxref > 0 ? maxdiff / maxref : maxdiff;
        char name[160];
        snprintf(name, sizeof(name), "%s: model gradient vs finite differences: %s", model, PARAM_NAMES[t]);
        check(err <= FD_TOL && maxref > 0, name, "relative error %.3g > %g (max |grad| %.3g)", err, FD_TOL, maxref);
    }
}

static void test_model_padded_rows(const char *model, const CpuModel *m) {
    int zero = 1;
    for (size_t i = 0; i < m->layout.total; i++) {
        if (in_padded_row(&m->config, &m->layout, i)) { zero &= m->grads[i] == 0.0; }
    }
    char name[160];
    snprintf(name, sizeof(name), "%s: model gradient of padded vocabulary rows is exactly zero", model);
    check(zero, name, "a padded row got a gradient");
}

// A second backward without zero_grad adds the same gradient again (micro-batches accumulate); equal up to the
// rounding of adding a tensor's contributions one at a time onto a non-zero start.
#define ACCUMULATE_TOL 1e-12
static void test_model_accumulates(const char *model, CpuModel *m, const int *inputs, const int *targets) {
    size_t P = m->layout.total;
    double *once = (double *)malloc_check(P * sizeof(double), "gradient copy");
    model_grad(m, inputs, targets);
    memcpy(once, m->grads, P * sizeof(double));
    cpu_model_forward(m, inputs, targets, MB, MT);
    cpu_model_backward(m, 1.0 / (MB * MT));
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < P; i++) {
        double d = fabs(m->grads[i] - 2.0 * once[i]);
        if (!(d <= maxdiff)) { maxdiff = d; }
        if (fabs(once[i]) > maxref) { maxref = fabs(once[i]); }
    }
    char name[160];
    snprintf(name, sizeof(name), "%s: model backward adds into the gradients", model);
    check(maxdiff <= ACCUMULATE_TOL * maxref, name, "second backward's total differs from twice the first by %.3g "
          "relative", maxdiff / maxref);
    free(once);
}

// A call with B and T below the model's capacity computes exactly what a model of that size computes.
static void test_model_smaller_batch(const char *model, const GPTConfig *c, const float *params, const int *inputs,
                                     const int *targets) {
    int B = MB - 1, T = MT - 3;
    CpuModel *big = cpu_model_create(c, MB + 1, MT), *exact = cpu_model_create(c, B, T);
    real_from_float(big->params, params, big->layout.total);
    real_from_float(exact->params, params, exact->layout.total);
    double loss_big = cpu_model_forward(big, inputs, targets, B, T);
    double loss_exact = cpu_model_forward(exact, inputs, targets, B, T);
    cpu_model_backward(big, 1.0);
    cpu_model_backward(exact, 1.0);
    char name[160];
    snprintf(name, sizeof(name), "%s: model with spare capacity computes a smaller batch exactly", model);
    check(loss_big == loss_exact && memcmp(big->grads, exact->grads, big->layout.total * sizeof(double)) == 0, name,
          "loss %.17g vs %.17g, or gradients differ", loss_big, loss_exact);
    cpu_model_free(big);
    cpu_model_free(exact);
}

// ---------------------------------------------------------------------------------------------------------
// AdamW, clipping and weight decay on hand-computed cases (the formulas of dev/DESIGN.md, "Semantics").

#define ADAM_LR 0.01f
#define ADAM_WD 0.1f
#define ADAM_EPS 0.1f // large, so that the size of the (clipped) gradient shows in the update

static UpdateArgs adam_args(float grad_clip, int t) {
    UpdateArgs u = {ADAM_LR, ADAM_WD, 0.9f, 0.95f, ADAM_EPS, grad_clip, t};
    return u;
}

// Gradient 3 on one decayed weight (qkvw) and 4 on one bias (qkvb), zero elsewhere: norm 5 by hand. Clipped to
// 1, they become 0.6 and 0.8. At t = 1 (and at every t for a constant gradient) mhat = g and vhat = g^2, so
// p -= lr * (g / (|g| + eps) + wd * p) with wd only for the weight:
//   weight 0.5 - 0.01 * (0.6 / 0.7 + 0.1 * 0.5) = 0.49092857142857143
//   bias   0.5 - 0.01 * (0.8 / 0.9)             = 0.49111111111111111
//   an untouched weight 0.5 - 0.01 * 0.1 * 0.5   = 0.4995;  an untouched bias stays 0.5
// Step 2 with the same gradient: the weight 0.49092857142857143 - 0.01 * (0.6/0.7 + 0.1 * 0.49092857142857143)
//   = 0.48186621428571429.
static void test_adamw_clip(const GPTConfig *c) {
    CpuModel *m = cpu_model_create(c, 1, 1);
    const ParamLayout layout = m->layout; // a copy: the model is freed and made again below
    const ParamLayout *p = &layout;
    size_t w = p->offset[P_QKVW] + 5, b = p->offset[P_QKVB] + 7, w0 = p->offset[P_QKVW] + 6, b0 = p->offset[P_QKVB];
    for (size_t i = 0; i < p->total; i++) { m->params[i] = 0.5; }
    m->grads[w] = 3.0;
    m->grads[b] = 4.0;
    UpdateArgs u = adam_args(1.0f, 1);
    float norm = cpu_model_update(m, &u);
    const double tol = 1e-7; // float hyperparameters (0.01f, 0.9f, ...) are not the decimal values
    int ok = fabs(norm - 5.0) < tol && fabs(m->params[w] - 0.49092857142857143) < tol &&
             fabs(m->params[b] - 0.49111111111111111) < tol && fabs(m->params[w0] - 0.4995) < tol &&
             m->params[b0] == 0.5;
    check(ok, "AdamW step 1 with clipping matches the hand computation",
          "norm %.9g (5), weight %.12g (0.490928571429), bias %.12g (0.491111111111), idle weight %.12g (0.4995)",
          norm, m->params[w], m->params[b], m->params[w0]);
    u.t = 2;
    cpu_model_update(m, &u);
    check(fabs(m->params[w] - 0.48186621428571429) < tol, "AdamW step 2 bias correction matches the hand computation",
          "weight %.12g, expected 0.481866214286", m->params[w]);
    // Below the threshold nothing is scaled: from a fresh state g = 3 gives 0.5 - 0.01 * (3 / 3.1 + 0.1 * 0.5).
    cpu_model_free(m);
    m = cpu_model_create(c, 1, 1);
    for (size_t i = 0; i < p->total; i++) { m->params[i] = 0.5; }
    m->grads[w] = 3.0;
    m->grads[b] = 4.0;
    u = adam_args(10.0f, 1);
    cpu_model_update(m, &u);
    double expect = 0.5 - 0.01 * (3.0 / 3.1 + 0.05);
    check(fabs(m->params[w] - expect) < tol, "AdamW leaves a gradient under the clip threshold unscaled",
          "weight %.12g, expected %.12g", m->params[w], expect);
    cpu_model_free(m);
}

// With zero gradients only weight decay moves a parameter: 1 -> 1 - lr * wd on 2-D weights, 1 elsewhere.
static void test_weight_decay_2d_only(const char *model, const GPTConfig *c) {
    CpuModel *m = cpu_model_create(c, 1, 1);
    for (size_t i = 0; i < m->layout.total; i++) { m->params[i] = 1.0; }
    UpdateArgs u = adam_args(1.0f, 1);
    cpu_model_update(m, &u);
    int ok = 1;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        int is_2d = t == P_WTE || t == P_WPE || t == P_QKVW || t == P_ATTPROJW || t == P_FCW || t == P_FCPROJW ||
                    t == P_LMHEAD;
        double expect = is_2d ? 1.0 - (double)ADAM_LR * (double)ADAM_WD : 1.0;
        for (size_t i = 0; i < m->layout.size[t]; i++) {
            ok &= fabs(m->params[m->layout.offset[t] + i] - expect) < 1e-7;
        }
    }
    char name[160];
    snprintf(name, sizeof(name), "%s: weight decay applies to 2-D weights only", model);
    check(ok, name, "some tensor decayed wrongly");
    cpu_model_free(m);
}

static void test_tiny_model(const char *model, const GPTConfig *c, const float *params, const int *inputs,
                            const int *targets) {
    CpuModel *m = cpu_model_create(c, MB, MT);
    real_from_float(m->params, params, m->layout.total);
    model_grad(m, inputs, targets);
    test_model_fd(model, m, inputs, targets);
    test_model_padded_rows(model, m);
    test_model_accumulates(model, m, inputs, targets);
    cpu_model_free(m);
    test_model_smaller_batch(model, c, params, inputs, targets);
}

// The double build's gradient of the tiny model, for the float build to be compared with.
static double double_model_grads(const GPTConfig *c, const float *params, const int *inputs, const int *targets,
                                 float *grads) {
    CpuModel *m = cpu_model_create(c, MB, MT);
    real_from_float(m->params, params, m->layout.total);
    double loss = model_grad(m, inputs, targets);
    float_from_real(grads, m->grads, m->layout.total);
    cpu_model_free(m);
    return loss;
}

// ---------------------------------------------------------------------------------------------------------
// The float build, the one train_gpt_cpu ships, compiled from the same header under names ending in _f.
#undef LLMC_CPU_MODEL_H
#undef CPU_REAL
#define cpu_real cpu_real_f
#define real_exp real_exp_f
#define real_tanh real_tanh_f
#define imin imin_f
#define gemm_tile gemm_tile_f
#define gemm_acc gemm_acc_f
#define transpose transpose_f
#define encoder_forward encoder_forward_f
#define encoder_backward encoder_backward_f
#define layernorm_forward layernorm_forward_f
#define layernorm_backward layernorm_backward_f
#define real_sigmoid real_sigmoid_f
#define rmsnorm_forward rmsnorm_forward_f
#define rmsnorm_backward rmsnorm_backward_f
#define norm_forward norm_forward_f
#define norm_backward norm_backward_f
#define rope_rotate rope_rotate_f
#define swiglu_forward swiglu_forward_f
#define swiglu_backward swiglu_backward_f
#define mlp_act_forward mlp_act_forward_f
#define mlp_act_backward mlp_act_backward_f
#define max_size max_size_f
#define cpu_widest_linear cpu_widest_linear_f
#define cpu_tensor cpu_tensor_f
#define cpu_lm_head cpu_lm_head_f
#define matmul_forward matmul_forward_f
#define matmul_backward matmul_backward_f
#define attention_forward attention_forward_f
#define attention_backward attention_backward_f
#define gelu_forward gelu_forward_f
#define gelu_backward gelu_backward_f
#define residual_forward residual_forward_f
#define softmax_crossentropy_forward softmax_crossentropy_forward_f
#define softmax_crossentropy_backward softmax_crossentropy_backward_f
#define CpuActs CpuActs_f
#define CpuLayer CpuLayer_f
#define CpuLayerActs CpuLayerActs_f
#define CpuModel CpuModel_f
#define cpu_acts_alloc cpu_acts_alloc_f
#define cpu_model_create cpu_model_create_f
#define cpu_model_free cpu_model_free_f
#define real_from_float real_from_float_f
#define float_from_real float_from_real_f
#define cpu_model_init_params cpu_model_init_params_f
#define cpu_layer cpu_layer_f
#define cpu_layer_acts cpu_layer_acts_f
#define cpu_layer_input cpu_layer_input_f
#define check_tokens check_tokens_f
#define cpu_model_loss_sum cpu_model_loss_sum_f
#define cpu_model_forward cpu_model_forward_f
#define zero_real zero_real_f
#define cpu_model_backward cpu_model_backward_f
#define cpu_model_zero_grad cpu_model_zero_grad_f
#define sum_squares sum_squares_f
#define cpu_model_update cpu_model_update_f
#define bias_backward bias_backward_f
#define CpuFp8 CpuFp8_f
#define cpu_model_enable_fp8 cpu_model_enable_fp8_f
#define cpu_fp8_block cpu_fp8_block_f
#define cpu_fp8_quantize cpu_fp8_quantize_f
#define cpu_fp8_cast cpu_fp8_cast_f
#define cpu_fp8_cast_weights cpu_fp8_cast_weights_f
#define cpu_fp8_unscale cpu_fp8_unscale_f
#define cpu_linear_forward cpu_linear_forward_f
#define cpu_linear_backward cpu_linear_backward_f
#define cpu_fp8_end_step cpu_fp8_end_step_f
#define cpu_model_get_fp8_history cpu_model_get_fp8_history_f
#define cpu_model_set_fp8_history cpu_model_set_fp8_history_f
#include "../llmc/cpu_model.h"
#include <omp.h>

// fp32 keeps 24 bits (unit roundoff 6e-8). The longest sums here run over K <= 128 terms (the LM head's padded
// vocabulary), whose rounding error grows like sqrt(K) u ~ 1e-6 typically and K u ~ 1e-5 at worst, compounded
// through a few layers. Relative to each tensor's largest gradient, 1e-4 is 10x above that worst case, while a
// precision defect (variance as E[x^2] - mean^2, a softmax without the max shift, float accumulation of a long
// reduction) shows at 1e-3 or more.
#define FLOAT_VS_DOUBLE_TOL 1e-4

static double float_model_grads(const GPTConfig *c, const float *params, const int *inputs, const int *targets,
                                float *grads) {
    CpuModel *m = cpu_model_create(c, MB, MT);
    memcpy(m->params, params, m->layout.total * sizeof(float));
    cpu_model_zero_grad(m);
    double loss = cpu_model_forward(m, inputs, targets, MB, MT);
    cpu_model_backward(m, 1.0f / (MB * MT));
    memcpy(grads, m->grads, m->layout.total * sizeof(float));
    cpu_model_free(m);
    return loss;
}

static void test_float_vs_double(const char *model, const GPTConfig *c, const float *params, const int *inputs,
                                 const int *targets) {
    ParamLayout p;
    param_layout(c, &p);
    float *gd = (float *)malloc_check(p.total * sizeof(float), "double gradients");
    float *gf = (float *)malloc_check(p.total * sizeof(float), "float gradients");
    double loss_d = double_model_grads(c, params, inputs, targets, gd);
    double loss_f = float_model_grads(c, params, inputs, targets, gf);
    double worst = fabs(loss_f - loss_d) / fabs(loss_d);
    int worst_t = -1;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        double e = max_rel_err(gf + p.offset[t], gd + p.offset[t], p.size[t]);
        if (!(e <= worst)) {
            worst = e;
            worst_t = t;
        }
    }
    char name[160];
    snprintf(name, sizeof(name), "%s: float build's loss and gradients match the double build", model);
    check(worst <= FLOAT_VS_DOUBLE_TOL, name, "relative error %.3g > %g in %s", worst, FLOAT_VS_DOUBLE_TOL,
          worst_t < 0 ? "the loss" : PARAM_NAMES[worst_t]);
    printf("     (float vs double: loss %.3g, worst gradient tensor %.3g relative)\n",
           fabs(loss_f - loss_d) / fabs(loss_d), worst);

    // The same bits from one thread as from all of them: every element is summed by one thread in one order.
    float *g1 = (float *)malloc_check(p.total * sizeof(float), "one-thread gradients");
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double loss_1 = float_model_grads(c, params, inputs, targets, g1);
    omp_set_num_threads(threads);
    snprintf(name, sizeof(name), "%s: float build is bitwise independent of the thread count", model);
    check(loss_1 == loss_f && memcmp(g1, gf, p.total * sizeof(float)) == 0, name, "1 thread vs %d differ", threads);
    free(gd);
    free(gf);
    free(g1);
}

// FP8 (--precision fp8) covers Llama's block linears as GPT-2's: the fused q/k/v, the output projection, the fused
// gate/up and the down projection each cast their input, weight and output gradient (L x 4 x 3 tensors, each with
// an amax after a training micro-step), the widest of them (fc's 2F rows, past GPT-2's 4C) within the FP8 operand
// buffers (the sanitized build checks); the loss moves by FP8's rounding only.
#define FP8_LOSS_RTOL 0.01
static void test_llama_fp8(void) {
    GPTConfig c = tiny_llama(1, 0, 1);
    c.ffn_hidden = 3 * TINY_WIDTH;
    ParamLayout p;
    param_layout(&c, &p);
    float *params = tiny_params(&c, &p);
    int inputs[MB * MT], targets[MB * MT];
    tiny_tokens(&c, inputs, targets);
    CpuModel *m = cpu_model_create(&c, MB, MT);
    real_from_float(m->params, params, p.total);
    double loss32 = cpu_model_forward(m, inputs, targets, MB, MT);
    Options o;
    options_defaults(&o);
    Fp8Recipe r = fp8_recipe_from_options(&o);
    cpu_model_enable_fp8(m, &r);
    m->training = 1;
    double loss8 = cpu_model_forward(m, inputs, targets, MB, MT);
    cpu_model_backward(m, 1.0 / (MB * MT));
    int tensors = m->fp8->history.tensors, recorded = 0;
    for (int t = 0; t < tensors; t++) { recorded += m->fp8->amax_step[t] > 0; }
    check(tensors == fp8_num_tensors(c.num_layers) && recorded == tensors && loss8 != loss32 &&
              fabs(loss8 - loss32) < FP8_LOSS_RTOL * loss32,
          "llama in fp8: every block linear's input, weight and gradient cast, the loss within FP8's rounding",
          "%d of %d tensors recorded an amax (want %d), loss %.9g vs fp32 %.9g", recorded, tensors,
          fp8_num_tensors(c.num_layers), loss8, loss32);
    cpu_model_free(m);
    free(params);
}

// The whole-model checks of one description.
static void test_whole_model(const char *model, const GPTConfig *c) {
    ParamLayout p;
    param_layout(c, &p);
    float *params = tiny_params(c, &p);
    int inputs[MB * MT], targets[MB * MT];
    tiny_tokens(c, inputs, targets);
    test_tiny_model(model, c, params, inputs, targets);
    test_float_vs_double(model, c, params, inputs, targets);
    free(params);
}

int main(void) {
    test_encoder();
    test_layernorm();
    test_rmsnorm();
    test_matmul();
    test_attention("attention_backward dqkv (multi-head: KV = NH)", 2, 2, 4);
    test_attention("attention_backward dqkv (grouped-query: KV = NH/4)", 4, 1, 3);
    GPTConfig rope = tiny_llama(1, 1, 0), rope_scaled = tiny_llama(1, 1, 1);
    test_rope("rope backward (theta only)", &rope);
    test_rope("rope backward (llama3 scaling)", &rope_scaled);
    test_gelu();
    test_swiglu();
    test_residual();
    test_crossentropy();
    test_rmsnorm_values();
    test_swiglu_values();
    test_gqa_is_repeated_kv();
    free_test_arrays();

    GPTConfig gpt2 = tiny_gpt2();
    test_whole_model("gpt2", &gpt2);
    test_adamw_clip(&gpt2);
    test_weight_decay_2d_only("gpt2", &gpt2);
    GPTConfig llama_mha = tiny_llama(TINY_HEADS, 1, 0), llama_gqa = tiny_llama(TINY_HEADS / 4, 0, 1);
    test_whole_model("llama (KV = NH, tied)", &llama_mha);
    test_whole_model("llama (KV = NH/4, untied, llama3 rope scaling)", &llama_gqa);
    test_weight_decay_2d_only("llama, untied", &llama_gqa);
    test_llama_fp8();
    return test_exit();
}
