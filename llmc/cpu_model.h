/*
 * cpu_model.h: GPT-2 and Llama 3 on the CPU, the reference every other build is checked against (llm.c's
 * train_gpt2.c design: one forward and one backward function per layer, a flat parameter buffer, activations kept
 * for the backward pass). The description (llmc/config.h) picks each layer; the model is one for both.
 *
 * Per block l (pre-norm):  x1 = x0 + Wo attn(norm1(x0)) + bo;  x2 = x1 + Wdown act(Wfc norm2(x1) + bfc) + bdown
 * then logits = normf(x_L) head^T over the padded vocabulary (head = wte, or lmhead where untied); softmax and
 * cross-entropy use only the V real columns.
 *   GPT-2: LayerNorm, x0 = wte[token] + wpe[position], multi-head attention, act = GELU(tanh), biases.
 *   Llama (Hugging Face's LlamaForCausalLM, exactly, in fp32): RMSNorm, x0 = wte[token], q and k rotated by their
 *   position (RoPE, llmc/rope.h), grouped-query attention (query head h reads key/value head h / (NH / KV)),
 *   act = SwiGLU on fc's [gate | up] rows: silu(gate) * up, no biases.
 * Layer backward functions ADD into their input and weight gradients (llm.c's convention), so gradients sum
 * over micro-batches; the model backward seeds dloss = loss_scale per token (llmc/model_ops.h).
 *
 * All arithmetic is on the scalar type cpu_real: float for the trainer, double when the includer defines
 * CPU_REAL double first (the gradient check compiles this very code in double for finite differences). Long
 * reductions (LayerNorm statistics, softmax sums, the loss, the gradient norm) accumulate in double in both,
 * so the float build stays close to the exact answer the GPU build is compared with. Every output element is
 * computed by one thread in a fixed order, so results do not depend on the number of OpenMP threads.
 *
 * With FP8 on (cpu_model_enable_fp8, --precision fp8) the block linear layers multiply FP8-rounded operands exactly
 * as the GPU build's FP8 GEMMs do, with the same scales and recipe (llmc/fp8.h): the GPU run's reference.
 */
#ifndef LLMC_CPU_MODEL_H
#define LLMC_CPU_MODEL_H

#include <math.h>
#include <stddef.h>

#include "config.h"
#include "fp8.h"
#include "init.h"
#include "model_ops.h"
#include "rope.h"
#include "utils.h"

#ifndef CPU_REAL
#define CPU_REAL float
#endif
typedef CPU_REAL cpu_real;
typedef double cpu_acc; // accumulator of long reductions

#define GELU_CUBIC 0.044715
#define SQRT_2_OVER_PI 0.7978845608028654

// Scalar math in the precision of cpu_real (the branch is a compile-time constant).
#define CPU_IS_FLOAT (sizeof(cpu_real) == sizeof(float))
static inline cpu_real real_exp(cpu_real x) { return CPU_IS_FLOAT ? expf((float)x) : exp((double)x); }
static inline cpu_real real_tanh(cpu_real x) { return CPU_IS_FLOAT ? tanhf((float)x) : tanh((double)x); }
static inline cpu_real real_sigmoid(cpu_real x) { return 1 / (1 + real_exp(-x)); }

static inline int imin(int a, int b) { return a < b ? a : b; }

// ----------------------------------------------------------------------------------------------------------
// GEMM: the one kernel under every linear layer, forward and backward.

// Register tile: GEMM_MR rows x GEMM_NR columns of the output are accumulated in registers across all of K.
#define GEMM_MR 8
#define GEMM_NR 32
#define TRANSPOSE_TILE 32

// c[i, j] += scale * sum_k a[i, k] b[k, j] on one mr x nr tile, with a addressed through strides (so a transposed
// operand costs nothing) and b row-major. The sum over k runs in order from zero and is then added to c, so an
// element's value does not depend on the tile it falls in. scale is 1 but for FP8 operands (their scale_inv's).
static inline void gemm_tile(cpu_real *c, size_t ldc, const cpu_real *a, size_t a_rs, size_t a_cs,
                             const cpu_real *b, size_t ldb, int mr, int nr, int K, cpu_real scale) {
    cpu_real acc[GEMM_MR][GEMM_NR] = {{0}};
    for (int k = 0; k < K; k++) {
        const cpu_real *bk = b + (size_t)k * ldb;
        for (int i = 0; i < mr; i++) {
            cpu_real aik = a[(size_t)i * a_rs + (size_t)k * a_cs];
            for (int j = 0; j < nr; j++) { acc[i][j] += aik * bk[j]; }
        }
    }
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) { c[(size_t)i * ldc + j] += scale * acc[i][j]; }
    }
}

// C (M x N, row stride ldc) += scale A (M x K, element (i,k) at a[i*a_rs + k*a_cs]) times B (K x N, row-major).
static void gemm_acc(cpu_real *c, size_t ldc, const cpu_real *a, size_t a_rs, size_t a_cs, const cpu_real *b,
                     size_t ldb, int M, int N, int K, cpu_real scale) {
    int mtiles = ceil_div_int(M, GEMM_MR), ntiles = ceil_div_int(N, GEMM_NR);
    // Column tiles outermost: a thread's consecutive tiles share the same panel of B, which stays in cache.
#pragma omp parallel for collapse(2) schedule(static)
    for (int jt = 0; jt < ntiles; jt++) {
        for (int it = 0; it < mtiles; it++) {
            int i0 = it * GEMM_MR, j0 = jt * GEMM_NR;
            cpu_real *ct = c + (size_t)i0 * ldc + j0;
            const cpu_real *at = a + (size_t)i0 * a_rs, *bt = b + j0;
            int mr = imin(GEMM_MR, M - i0), nr = imin(GEMM_NR, N - j0);
            if (mr == GEMM_MR && nr == GEMM_NR) { // constant sizes: the compiler keeps the tile in registers
                gemm_tile(ct, ldc, at, a_rs, a_cs, bt, ldb, GEMM_MR, GEMM_NR, K, scale);
            } else {
                gemm_tile(ct, ldc, at, a_rs, a_cs, bt, ldb, mr, nr, K, scale);
            }
        }
    }
}

// dst (cols x rows) = src (rows x cols)^T, in cache-sized tiles.
static void transpose(cpu_real *dst, const cpu_real *src, int rows, int cols) {
#pragma omp parallel for collapse(2)
    for (int r0 = 0; r0 < rows; r0 += TRANSPOSE_TILE) {
        for (int c0 = 0; c0 < cols; c0 += TRANSPOSE_TILE) {
            for (int r = r0; r < imin(r0 + TRANSPOSE_TILE, rows); r++) {
                for (int cc = c0; cc < imin(c0 + TRANSPOSE_TILE, cols); cc++) {
                    dst[(size_t)cc * rows + r] = src[(size_t)r * cols + cc];
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------------------
// Layers. N = B*T rows (tokens), C channels, OC output channels, Vp padded vocabulary.

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; wpe is NULL where positions are not learned (RoPE).
static void encoder_forward(cpu_real *out, const int *inp, const cpu_real *wte, const cpu_real *wpe, int B, int T,
                            int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            cpu_real *o = out + ((size_t)b * T + t) * C;
            const cpu_real *e = wte + (size_t)inp[b * T + t] * C;
            for (int i = 0; i < C; i++) { o[i] = e[i]; }
            if (!wpe) { continue; }
            const cpu_real *p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) { o[i] += p[i]; }
        }
    }
}

// Serial: the same token can occur at several positions, and its wte row must sum in a fixed order. dwpe may be
// NULL (no learned positions).
static void encoder_backward(cpu_real *dwte, cpu_real *dwpe, const cpu_real *dout, const int *inp, int B, int T,
                             int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const cpu_real *d = dout + ((size_t)b * T + t) * C;
            cpu_real *dw = dwte + (size_t)inp[b * T + t] * C, *dp = dwpe ? dwpe + (size_t)t * C : NULL;
            for (int i = 0; i < C; i++) { dw[i] += d[i]; }
            if (!dp) { continue; }
            for (int i = 0; i < C; i++) { dp[i] += d[i]; }
        }
    }
}

// out = (x - mean) * rstd * w + b per row, rstd = 1/sqrt(var + eps) with the biased variance. The variance is
// taken about the mean (two passes), never as E[x^2] - mean^2, which cancels catastrophically.
static void layernorm_forward(cpu_real *out, cpu_real *mean, cpu_real *rstd, const cpu_real *inp,
                              const cpu_real *w, const cpu_real *bias, double eps, int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *x = inp + (size_t)n * C;
        cpu_acc m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) { m += x[i]; }
        m /= C;
        for (int i = 0; i < C; i++) { v += (x[i] - m) * (x[i] - m); }
        cpu_real s = (cpu_real)(1.0 / sqrt(v / C + eps));
        cpu_real *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) { o[i] = ((x[i] - (cpu_real)m) * s) * w[i] + bias[i]; }
        mean[n] = (cpu_real)m;
        rstd[n] = s;
    }
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = w * dout. Serial over rows because
// every row adds into dw and db.
static void layernorm_backward(cpu_real *dinp, cpu_real *dw, cpu_real *db, const cpu_real *dout,
                               const cpu_real *inp, const cpu_real *w, const cpu_real *mean, const cpu_real *rstd,
                               int N, int C) {
    for (int n = 0; n < N; n++) {
        const cpu_real *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        cpu_real *dx = dinp + (size_t)n * C;
        cpu_acc dsum = 0.0, dxsum = 0.0;
        for (int i = 0; i < C; i++) {
            cpu_real xhat = (x[i] - mean[n]) * rstd[n];
            dsum += w[i] * d[i];
            dxsum += w[i] * d[i] * xhat;
        }
        cpu_real dmean = (cpu_real)(dsum / C), dxmean = (cpu_real)(dxsum / C);
        for (int i = 0; i < C; i++) {
            cpu_real xhat = (x[i] - mean[n]) * rstd[n];
            db[i] += d[i];
            dw[i] += xhat * d[i];
            dx[i] += rstd[n] * (w[i] * d[i] - dmean - xhat * dxmean);
        }
    }
}

// out = w * (x * rstd) per row, rstd = 1/sqrt(mean(x^2) + eps): HF's LlamaRMSNorm, the mean of squares in double.
static void rmsnorm_forward(cpu_real *out, cpu_real *rstd, const cpu_real *inp, const cpu_real *w, double eps, int N,
                            int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *x = inp + (size_t)n * C;
        cpu_acc ss = 0.0;
        for (int i = 0; i < C; i++) { ss += (cpu_acc)x[i] * x[i]; }
        cpu_real s = (cpu_real)(1.0 / sqrt(ss / C + eps));
        cpu_real *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) { o[i] = w[i] * (x[i] * s); }
        rstd[n] = s;
    }
}

// dx = rstd * (w dout - xhat * mean(w dout xhat)), xhat = x rstd; dw += dout xhat. Serial over rows because every
// row adds into dw.
static void rmsnorm_backward(cpu_real *dinp, cpu_real *dw, const cpu_real *dout, const cpu_real *inp,
                             const cpu_real *w, const cpu_real *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const cpu_real *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        cpu_real *dx = dinp + (size_t)n * C;
        cpu_acc dxsum = 0.0;
        for (int i = 0; i < C; i++) { dxsum += w[i] * d[i] * (x[i] * rstd[n]); }
        cpu_real dxmean = (cpu_real)(dxsum / C);
        for (int i = 0; i < C; i++) {
            cpu_real xhat = x[i] * rstd[n];
            dw[i] += xhat * d[i];
            dx[i] += rstd[n] * (w[i] * d[i] - xhat * dxmean);
        }
    }
}

// The norm the description names (LayerNorm with its bias b, or RMSNorm: mean and b unused), and its backward.
static void norm_forward(const GPTConfig *c, cpu_real *out, cpu_real *mean, cpu_real *rstd, const cpu_real *inp,
                         const cpu_real *w, const cpu_real *b, int N) {
    if (c->norm == NORM_RMSNORM) {
        rmsnorm_forward(out, rstd, inp, w, c->norm_eps, N, c->channels);
    } else {
        layernorm_forward(out, mean, rstd, inp, w, b, c->norm_eps, N, c->channels);
    }
}

static void norm_backward(const GPTConfig *c, cpu_real *dinp, cpu_real *dw, cpu_real *db, const cpu_real *dout,
                          const cpu_real *inp, const cpu_real *w, const cpu_real *mean, const cpu_real *rstd, int N) {
    if (c->norm == NORM_RMSNORM) {
        rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->channels);
    } else {
        layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->channels);
    }
}

// out (N, OC) = inp (N, C) weight^T + bias; weight is (OC, C). wt is scratch for weight^T (C x OC), which
// turns the product into one that the GEMM tile vectorizes along OC.
static void matmul_forward(cpu_real *out, const cpu_real *inp, const cpu_real *weight, const cpu_real *bias,
                           cpu_real *wt, int N, int C, int OC) {
    transpose(wt, weight, OC, C);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) { out[(size_t)n * OC + o] = bias ? bias[o] : 0; }
    }
    gemm_acc(out, OC, inp, C, 1, wt, OC, N, OC, C, 1);
}

// dbias += column sums of dout (N, OC); nothing where dbias is NULL.
static void bias_backward(cpu_real *dbias, const cpu_real *dout, int N, int OC) {
    if (!dbias) { return; }
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) { dbias[o] += dout[(size_t)n * OC + o]; }
    }
}

// dinp += dout weight; dweight += dout^T inp; dbias += column sums of dout (dbias may be NULL).
static void matmul_backward(cpu_real *dinp, cpu_real *dweight, cpu_real *dbias, const cpu_real *dout,
                            const cpu_real *inp, const cpu_real *weight, int N, int C, int OC) {
    gemm_acc(dinp, C, dout, OC, 1, weight, C, N, C, OC, 1);
    gemm_acc(dweight, C, dout, 1, OC, inp, C, OC, C, N, 1);
    bias_backward(dbias, dout, N, OC);
}

// Rotates the q and k heads of qkv (B, T, (NH + 2 KV) HS rows as attention_forward reads them) in place by their
// position t's angles (llmc/rope.h's tables, T rows of HS/2): HF's apply_rotary_pos_emb. Its backward is the same
// call on the gradient with sign -1, the rotation by the opposite angle (the transpose).
static void rope_rotate(cpu_real *qkv, const float *cos_table, const float *sin_table, int B, int T, int NH, int KV,
                        int HS, int sign) {
    int half = HS / 2, heads = NH + KV; // the q heads and the k heads, back to back at the start of a row
    size_t row = (size_t)(NH + 2 * KV) * HS;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *cs = cos_table + (size_t)t * half, *sn = sin_table + (size_t)t * half;
            for (int h = 0; h < heads; h++) {
                cpu_real *x = qkv + ((size_t)b * T + t) * row + (size_t)h * HS;
                for (int i = 0; i < half; i++) {
                    cpu_real c = cs[i], s = sign * (cpu_real)sn[i], x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c - x2 * s;
                    x[i + half] = x2 * c + x1 * s;
                }
            }
        }
    }
}

// Causal attention with grouped-query heads: query head h attends with key/value head h / (NH / KV) (HF's repeat_kv;
// KV = NH is multi-head attention). qkv is (B, T, (NH + 2 KV) HS): row (b,t) holds the NH q heads, then the KV k
// heads, then the KV v heads, HS each. att (B, NH, T, T) keeps the softmax for backward (zero above the diagonal);
// out is (B, T, NH HS). Scores are scaled by 1/sqrt(HS).
static void attention_forward(cpu_real *out, cpu_real *att, const cpu_real *qkv, int B, int T, int NH, int KV,
                              int HS) {
    size_t row = (size_t)(NH + 2 * KV) * HS, A = (size_t)NH * HS, K = (size_t)KV * HS;
    int group = NH / KV;
    cpu_real scale = (cpu_real)(1.0 / sqrt((double)HS));
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const cpu_real *base = qkv + (size_t)b * T * row;
                const cpu_real *q = base + t * row + (size_t)h * HS;
                const cpu_real *kbase = base + A + (size_t)(h / group) * HS, *vbase = kbase + K;
                cpu_real *a = att + (((size_t)b * NH + h) * T + t) * T;
                cpu_real maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const cpu_real *k = kbase + t2 * row;
                    cpu_real s = 0;
                    for (int i = 0; i < HS; i++) { s += q[i] * k[i]; }
                    a[t2] = s * scale;
                    if (a[t2] > maxv) { maxv = a[t2]; }
                }
                cpu_acc sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = real_exp(a[t2] - maxv);
                    sum += a[t2];
                }
                cpu_real inv = (cpu_real)(1.0 / sum);
                for (int t2 = 0; t2 < T; t2++) { a[t2] = t2 <= t ? a[t2] * inv : 0; }
                cpu_real *o = out + ((size_t)b * T + t) * A + (size_t)h * HS;
                for (int i = 0; i < HS; i++) { o[i] = 0; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const cpu_real *v = vbase + t2 * row;
                    for (int i = 0; i < HS; i++) { o[i] += a[t2] * v[i]; }
                }
            }
        }
    }
}

// Backward of attention_forward, adding into dqkv. One thread owns a (b, key/value head) pair: the q heads of its
// group, one after another in order, are the only writers of its k and v slices, so the gradients of K and V sum
// over the group in a fixed order. The softmax backward is dpre = att * (datt - sum(att * datt)).
static void attention_backward(cpu_real *dqkv, const cpu_real *dout, const cpu_real *qkv, const cpu_real *att,
                               int B, int T, int NH, int KV, int HS) {
    size_t row = (size_t)(NH + 2 * KV) * HS, A = (size_t)NH * HS, K = (size_t)KV * HS;
    int group = NH / KV;
    cpu_real scale = (cpu_real)(1.0 / sqrt((double)HS));
#pragma omp parallel
    {
        cpu_real *dpre = (cpu_real *)malloc_check((size_t)T * sizeof(cpu_real), "attention backward scratch");
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int kvh = 0; kvh < KV; kvh++) {
                const cpu_real *base = qkv + (size_t)b * T * row;
                cpu_real *dbase = dqkv + (size_t)b * T * row;
                const cpu_real *kbase = base + A + (size_t)kvh * HS, *vbase = kbase + K;
                cpu_real *dkbase = dbase + A + (size_t)kvh * HS, *dvbase = dkbase + K;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    for (int t = 0; t < T; t++) {
                        const cpu_real *a = att + (((size_t)b * NH + h) * T + t) * T;
                        const cpu_real *d = dout + ((size_t)b * T + t) * A + (size_t)h * HS;
                        cpu_acc dot = 0.0;
                        for (int t2 = 0; t2 <= t; t2++) {
                            const cpu_real *v = vbase + t2 * row;
                            cpu_real *dv = dvbase + t2 * row;
                            cpu_real datt = 0;
                            for (int i = 0; i < HS; i++) {
                                datt += v[i] * d[i];
                                dv[i] += a[t2] * d[i];
                            }
                            dpre[t2] = datt;
                            dot += a[t2] * datt;
                        }
                        const cpu_real *q = base + t * row + (size_t)h * HS;
                        cpu_real *dq = dbase + t * row + (size_t)h * HS;
                        for (int t2 = 0; t2 <= t; t2++) {
                            cpu_real g = a[t2] * (dpre[t2] - (cpu_real)dot) * scale;
                            const cpu_real *k = kbase + t2 * row;
                            cpu_real *dk = dkbase + t2 * row;
                            for (int i = 0; i < HS; i++) {
                                dq[i] += g * k[i];
                                dk[i] += g * q[i];
                            }
                        }
                    }
                }
            }
        }
        free(dpre);
    }
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
static void gelu_forward(cpu_real *out, const cpu_real *inp, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        cpu_real x = inp[i];
        cpu_real u = (cpu_real)SQRT_2_OVER_PI * (x + (cpu_real)GELU_CUBIC * x * x * x);
        out[i] = (cpu_real)0.5 * x * (1 + real_tanh(u));
    }
}

// d gelu/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx; 1 - tanh^2 never overflows, unlike 1/cosh^2.
static void gelu_backward(cpu_real *dinp, const cpu_real *inp, const cpu_real *dout, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        cpu_real x = inp[i];
        cpu_real u = (cpu_real)SQRT_2_OVER_PI * (x + (cpu_real)GELU_CUBIC * x * x * x);
        cpu_real th = real_tanh(u);
        cpu_real du = (cpu_real)SQRT_2_OVER_PI * (1 + 3 * (cpu_real)GELU_CUBIC * x * x);
        dinp[i] += ((cpu_real)0.5 * (1 + th) + (cpu_real)0.5 * x * (1 - th * th) * du) * dout[i];
    }
}

// SwiGLU over rows of fc's output (N, 2F) = [gate | up]: out (N, F) = silu(gate) * up, silu(g) = g / (1 + e^-g)
// (torch's silu).
static void swiglu_forward(cpu_real *out, const cpu_real *inp, int N, int F) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        cpu_real *o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) { o[i] = gate[i] / (1 + real_exp(-gate[i])) * up[i]; }
    }
}

// dgate += dout up silu'(gate), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g); dup += dout silu(gate).
static void swiglu_backward(cpu_real *dinp, const cpu_real *inp, const cpu_real *dout, int N, int F) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *gate = inp + (size_t)n * 2 * F, *up = gate + F, *d = dout + (size_t)n * F;
        cpu_real *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            cpu_real g = gate[i], s = real_sigmoid(g);
            dgate[i] += d[i] * up[i] * s * (1 + g * (1 - s));
            dup[i] += d[i] * g * s;
        }
    }
}

// The MLP's activation the description names: out (N, F) from fc's output (N, FC), and its backward.
static void mlp_act_forward(const GPTConfig *c, cpu_real *out, const cpu_real *inp, int N) {
    if (c->mlp == MLP_SWIGLU) {
        swiglu_forward(out, inp, N, c->ffn_hidden);
    } else {
        gelu_forward(out, inp, (size_t)N * c->ffn_hidden);
    }
}

static void mlp_act_backward(const GPTConfig *c, cpu_real *dinp, const cpu_real *inp, const cpu_real *dout, int N) {
    if (c->mlp == MLP_SWIGLU) {
        swiglu_backward(dinp, inp, dout, N, c->ffn_hidden);
    } else {
        gelu_backward(dinp, inp, dout, (size_t)N * c->ffn_hidden);
    }
}

// The residual connection; its backward hands dout unchanged to both inputs, which the model backward does by
// accumulating every branch's input gradient into one buffer.
static void residual_forward(cpu_real *out, const cpu_real *a, const cpu_real *b, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) { out[i] = a[i] + b[i]; }
}

// Softmax over the V real columns of each row of logits (N, Vp) and the cross-entropy of the target:
// loss = logsumexp(logits[:V]) - logits[target]. probs (N, Vp) is zero in the padded columns.
static void softmax_crossentropy_forward(cpu_real *losses, cpu_real *probs, const cpu_real *logits,
                                         const int *targets, int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *z = logits + (size_t)n * Vp;
        cpu_real *p = probs + (size_t)n * Vp;
        cpu_real maxv = -INFINITY;
        for (int v = 0; v < V; v++) {
            if (z[v] > maxv) { maxv = z[v]; }
        }
        cpu_acc sum = 0.0;
        for (int v = 0; v < V; v++) {
            p[v] = real_exp(z[v] - maxv);
            sum += p[v];
        }
        cpu_real inv = (cpu_real)(1.0 / sum);
        for (int v = 0; v < Vp; v++) { p[v] = v < V ? p[v] * inv : 0; }
        losses[n] = (cpu_real)(log(sum) + (double)maxv - (double)z[targets[n]]);
    }
}

// dlogits = dloss * (probs - onehot(target)) in the real columns, 0 in the padded ones. Written, not added,
// so dlogits may alias probs.
static void softmax_crossentropy_backward(cpu_real *dlogits, const cpu_real *probs, const int *targets,
                                          cpu_real dloss, int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const cpu_real *p = probs + (size_t)n * Vp;
        cpu_real *d = dlogits + (size_t)n * Vp;
        for (int v = 0; v < Vp; v++) { d[v] = v < V ? (p[v] - (v == targets[n])) * dloss : 0; }
    }
}

// ----------------------------------------------------------------------------------------------------------
// The model.

// Activations for up to maxB x maxT tokens, per layer where backward needs them, and backward scratch. QKV, FC and
// F are config.h's: the fused q/k/v rows, fc's rows, the MLP's hidden features (GPT-2: 3C, 4C, 4C).
typedef struct {
    cpu_real *encoded;                          // (B,T,C)
    cpu_real *ln1, *ln1_mean, *ln1_rstd;        // (L,B,T,C), (L,B,T) x 2 (RMSNorm leaves the mean unused)
    cpu_real *qkv;                              // (L,B,T,QKV), q and k rotated where positions are RoPE's
    cpu_real *atty;                             // (L,B,T,C)
    cpu_real *att;                              // (L,B,NH,T,T)
    cpu_real *res2;                             // (L,B,T,C) residual stream after attention
    cpu_real *ln2, *ln2_mean, *ln2_rstd;        // (L,B,T,C), (L,B,T) x 2
    cpu_real *fch, *fch_act;                    // (L,B,T,FC), (L,B,T,F): fc's output and the activation's
    cpu_real *res3;                             // (L,B,T,C) residual stream after the MLP (block output)
    cpu_real *lnf, *lnf_mean, *lnf_rstd;        // (B,T,C), (B,T) x 2
    cpu_real *logits, *probs, *losses;          // (B,T,Vp) x 2, (B,T); backward turns probs into dlogits
    cpu_real *proj;                             // (B,T,C) output of a projection before its residual add
    cpu_real *dres, *dln, *datty;               // (B,T,C) gradient scratch; dres is the residual stream's
    cpu_real *dqkv;                             // (B,T,QKV)
    cpu_real *dfch, *dfch_act;                  // (B,T,FC), (B,T,F)
    cpu_real *wt;                               // transposed weight, the largest (Vp, QKV or FC) x C
} CpuActs;

// One layer's slices of the parameter (or gradient) tensors; NULL for a tensor the description does not have.
typedef struct {
    cpu_real *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} CpuLayer;

// One layer's slices of the activations for the current B x T.
typedef struct {
    cpu_real *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_act;
    cpu_real *res3;
} CpuLayerActs;

/*
 * FP8 emulation: the block linear layers' GEMMs on FP8 values, as the GPU build runs them. Each operand is cast with
 * its tensor's scale (q = fp8(x * scale), kept as the float value of the code); the GEMM sums products of those,
 * exact in fp32 as on the tensor cores, in order, and multiplies the sum by the two operands' scale_inv. Biases, and
 * the bias gradients (column sums of the unrounded output gradient, as the GPU takes them), stay in fp32.
 */
typedef struct {
    Fp8Recipe recipe;
    Fp8History history;
    float *amax_step;  // (tensors) the largest |x| of each tensor in this optimizer step (fp8_amax_merge)
    float *amax_scale; // (tensors) delayed scaling: the largest amax in the history, which the scales come from
    float *scale;      // (tensors) the scale of each tensor's latest cast
    cpu_real *weights; // the FP8 values of the block linear weights, at their offsets in the parameter layout
    cpu_real *qa, *qb; // a GEMM's two FP8 operands (up to N x the widest linear layer each)
    int weights_stale; // the weights changed since they were cast (cast at the next forward)
} CpuFp8;

typedef struct {
    GPTConfig config;
    ParamLayout layout;
    int maxB, maxT;                 // activation capacity
    cpu_real *params, *grads, *adam_m, *adam_v; // flat, in param_layout() order
    CpuActs acts;
    cpu_real *acts_memory;
    float *rope_cos, *rope_sin;     // (maxT, HS/2) each where positions are RoPE's (llmc/rope.h), else NULL
    int B, T;                       // of the last forward
    int *inputs, *targets;          // of the last forward
    int has_probs;                  // the last forward had targets and its probabilities are still intact
    CpuFp8 *fp8;                    // NULL: every GEMM in fp32
    int training;                   // the forward and backward of a training micro-step: FP8 casts record their amax
} CpuModel;

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// The widest input or output of a block's linear layers: what an FP8 operand holds a row of.
static size_t cpu_widest_linear(const GPTConfig *c) {
    return max_size(max_size((size_t)config_qkv_rows(c), (size_t)config_fc_rows(c)),
                    max_size((size_t)c->channels, (size_t)c->ffn_hidden));
}

static void cpu_acts_alloc(CpuModel *m) {
    const GPTConfig *c = &m->config;
    size_t N = (size_t)m->maxB * m->maxT, C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size;
    size_t QKV = (size_t)config_qkv_rows(c), FC = (size_t)config_fc_rows(c), F = (size_t)c->ffn_hidden;
    size_t att = L * m->maxB * c->num_heads * (size_t)m->maxT * m->maxT;
    size_t wt = max_size(Vp, max_size(QKV, FC)) * C; // fcproj's C x F is no larger than fc's FC x C
    CpuActs *a = &m->acts;
    struct {
        cpu_real **ptr;
        size_t n;
    } spec[] = {
        {&a->encoded, N * C},
        {&a->ln1, L * N * C}, {&a->ln1_mean, L * N}, {&a->ln1_rstd, L * N},
        {&a->qkv, L * N * QKV}, {&a->atty, L * N * C}, {&a->att, att}, {&a->res2, L * N * C},
        {&a->ln2, L * N * C}, {&a->ln2_mean, L * N}, {&a->ln2_rstd, L * N},
        {&a->fch, L * N * FC}, {&a->fch_act, L * N * F}, {&a->res3, L * N * C},
        {&a->lnf, N * C}, {&a->lnf_mean, N}, {&a->lnf_rstd, N},
        {&a->logits, N * Vp}, {&a->probs, N * Vp}, {&a->losses, N},
        {&a->proj, N * C}, {&a->dres, N * C}, {&a->dln, N * C}, {&a->datty, N * C}, {&a->dqkv, N * QKV},
        {&a->dfch, N * FC}, {&a->dfch_act, N * F}, {&a->wt, wt},
    };
    size_t total = 0, nspec = sizeof(spec) / sizeof(spec[0]);
    for (size_t i = 0; i < nspec; i++) { total += spec[i].n; }
    m->acts_memory = (cpu_real *)calloc_check(total, sizeof(cpu_real), "CPU model activations");
    cpu_real *p = m->acts_memory;
    for (size_t i = 0; i < nspec; i++) {
        *spec[i].ptr = p;
        p += spec[i].n;
    }
}

// A model with zero parameters and room for micro-batches of up to maxB x maxT tokens.
static CpuModel *cpu_model_create(const GPTConfig *config, int maxB, int maxT) {
    config_validate(config);
    if (maxB < 1 || maxT < 1) { fail("micro-batch %d x %d: both sizes must be >= 1", maxB, maxT); }
    if (maxT > config->max_seq_len) {
        fail("sequence length %d exceeds the model's maximum %d", maxT, config->max_seq_len);
    }
    CpuModel *m = (CpuModel *)calloc_check(1, sizeof(CpuModel), "CPU model");
    m->config = *config;
    param_layout(config, &m->layout);
    m->maxB = maxB;
    m->maxT = maxT;
    size_t P = m->layout.total;
    m->params = (cpu_real *)calloc_check(P, sizeof(cpu_real), "parameters");
    m->grads = (cpu_real *)calloc_check(P, sizeof(cpu_real), "gradients");
    m->adam_m = (cpu_real *)calloc_check(P, sizeof(cpu_real), "AdamW first moments");
    m->adam_v = (cpu_real *)calloc_check(P, sizeof(cpu_real), "AdamW second moments");
    m->inputs = (int *)calloc_check((size_t)maxB * maxT, sizeof(int), "input tokens");
    m->targets = (int *)calloc_check((size_t)maxB * maxT, sizeof(int), "target tokens");
    cpu_acts_alloc(m);
    if (config->pos == POS_ROPE) {
        size_t n = (size_t)maxT * (size_t)(config_head_size(config) / 2);
        m->rope_cos = (float *)malloc_check(n * sizeof(float), "rope cos table");
        m->rope_sin = (float *)malloc_check(n * sizeof(float), "rope sin table");
        rope_tables(config, maxT, m->rope_cos, m->rope_sin);
    }
    return m;
}

static void cpu_model_free(CpuModel *m) {
    if (m->fp8) {
        fp8_history_free(&m->fp8->history);
        free(m->fp8->amax_step);
        free(m->fp8->amax_scale);
        free(m->fp8->scale);
        free(m->fp8->weights);
        free(m->fp8->qa);
        free(m->fp8->qb);
        free(m->fp8);
    }
    free(m->params);
    free(m->grads);
    free(m->adam_m);
    free(m->adam_v);
    free(m->inputs);
    free(m->targets);
    free(m->acts_memory);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m);
}

// Conversions between the fp32 host arrays of ModelOps and cpu_real.
static void real_from_float(cpu_real *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) { dst[i] = (cpu_real)src[i]; }
}
static void float_from_real(float *dst, const cpu_real *src, size_t n) {
    for (size_t i = 0; i < n; i++) { dst[i] = (float)src[i]; }
}

// Parameters from --seed, as every build initializes them (llmc/init.h).
static void cpu_model_init_params(CpuModel *m, uint64_t seed) {
    float *init = (float *)malloc_check(m->layout.total * sizeof(float), "initial parameters");
    param_init_host(&m->config, &m->layout, seed, init);
    real_from_float(m->params, init, m->layout.total);
    free(init);
}

// Tensor t of the flat buffer base (parameters or gradients), NULL where the description has none.
static cpu_real *cpu_tensor(const CpuModel *m, cpu_real *base, int t) {
    return m->layout.size[t] ? base + m->layout.offset[t] : NULL;
}

// The LM head's weight: wte where tied, else lmhead.
static cpu_real *cpu_lm_head(const CpuModel *m, cpu_real *base) {
    return cpu_tensor(m, base, m->config.tied ? P_WTE : P_LMHEAD);
}

// Layer l's slice of every per-layer tensor of the flat buffer base (parameters or gradients).
static CpuLayer cpu_layer(const CpuModel *m, cpu_real *base, int l) {
    const ParamLayout *p = &m->layout;
    size_t L = (size_t)m->config.num_layers;
#define LAYER_SLICE(t) (p->size[t] ? base + p->offset[t] + (size_t)l * (p->size[t] / L) : NULL)
    CpuLayer w = {LAYER_SLICE(P_LN1W),     LAYER_SLICE(P_LN1B), LAYER_SLICE(P_QKVW), LAYER_SLICE(P_QKVB),
                  LAYER_SLICE(P_ATTPROJW), LAYER_SLICE(P_ATTPROJB), LAYER_SLICE(P_LN2W), LAYER_SLICE(P_LN2B),
                  LAYER_SLICE(P_FCW),      LAYER_SLICE(P_FCB),  LAYER_SLICE(P_FCPROJW), LAYER_SLICE(P_FCPROJB)};
#undef LAYER_SLICE
    return w;
}

static CpuLayerActs cpu_layer_acts(const CpuModel *m, int l) {
    const CpuActs *a = &m->acts;
    const GPTConfig *c = &m->config;
    size_t N = (size_t)m->B * m->T, C = (size_t)c->channels, NH = (size_t)c->num_heads, T = (size_t)m->T;
    size_t QKV = (size_t)config_qkv_rows(c), FC = (size_t)config_fc_rows(c), F = (size_t)c->ffn_hidden;
    CpuLayerActs x = {a->ln1 + l * N * C,     a->ln1_mean + l * N,    a->ln1_rstd + l * N,
                      a->qkv + l * N * QKV,   a->atty + l * N * C,    a->att + l * N * NH * T,
                      a->res2 + l * N * C,    a->ln2 + l * N * C,     a->ln2_mean + l * N,
                      a->ln2_rstd + l * N,    a->fch + l * N * FC,    a->fch_act + l * N * F,
                      a->res3 + l * N * C};
    return x;
}

// The residual stream entering layer l.
static cpu_real *cpu_layer_input(const CpuModel *m, int l) {
    return l == 0 ? m->acts.encoded : cpu_layer_acts(m, l - 1).res3;
}

static void zero_real(cpu_real *x, size_t n) { memset(x, 0, n * sizeof(cpu_real)); }

// ----------------------------------------------------------------------------------------------------------
// FP8 emulation

// Turns the FP8 recipe on: the block linear layers of the blocks fp8_block names multiply in FP8 from now on.
static void cpu_model_enable_fp8(CpuModel *m, const Fp8Recipe *recipe) {
    size_t N = (size_t)m->maxB * m->maxT, W = cpu_widest_linear(&m->config);
    CpuFp8 *f = (CpuFp8 *)calloc_check(1, sizeof(CpuFp8), "FP8 state");
    f->recipe = *recipe;
    fp8_history_init(&f->history, m->config.num_layers, recipe->history);
    size_t T = (size_t)f->history.tensors;
    f->amax_step = (float *)calloc_check(T, sizeof(float), "FP8 amaxes");
    f->amax_scale = (float *)calloc_check(T, sizeof(float), "FP8 amaxes");
    f->scale = (float *)calloc_check(T, sizeof(float), "FP8 scales");
    f->weights = (cpu_real *)calloc_check(m->layout.total, sizeof(cpu_real), "FP8 weights");
    f->qa = (cpu_real *)calloc_check(N * W, sizeof(cpu_real), "FP8 operands");
    f->qb = (cpu_real *)calloc_check(N * W, sizeof(cpu_real), "FP8 operands");
    f->weights_stale = 1;
    m->fp8 = f;
}

static int cpu_fp8_block(const CpuModel *m, int l) {
    return m->fp8 && fp8_block(&m->fp8->recipe, l, m->config.num_layers);
}

static void cpu_fp8_quantize(cpu_real *q, const cpu_real *x, size_t n, float scale, Fp8Format f) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) { q[i] = (cpu_real)fp8_round((float)x[i], scale, f); }
}

// Casts x (n values) to tensor t's FP8 values in q, as the GPU's cast kernels do: the scale from the tensor's own
// amax (current scaling, or delayed scaling before any step is recorded) or from its history; the amax recorded
// for the step where `record`.
static void cpu_fp8_cast(CpuFp8 *f, int t, cpu_real *q, const cpu_real *x, size_t n, int record) {
    Fp8Format fmt = fp8_role_format(t % FP8_ROLES);
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) { amax = fp8_amax_merge(amax, fabsf((float)x[i])); }
    int current = f->recipe.scaling == FP8_CURRENT || f->history.steps == 0;
    f->scale[t] = fp8_scale_of(current ? amax : f->amax_scale[t], fmt, f->recipe.margin_scale);
    cpu_fp8_quantize(q, x, n, f->scale[t], fmt);
    if (record) { f->amax_step[t] = fp8_amax_merge(f->amax_step[t], amax); }
}

// The weights of the FP8 blocks, once per update (and after set_params): a weight's amax always enters the step.
static void cpu_fp8_cast_weights(CpuModel *m) {
    CpuFp8 *f = m->fp8;
    const ParamLayout *p = &m->layout;
    size_t L = (size_t)m->config.num_layers;
    for (int l = 0; l < (int)L; l++) {
        if (!cpu_fp8_block(m, l)) { continue; }
        for (int lin = 0; lin < BLOCK_LINEARS; lin++) {
            int pt = BLOCK_LINEAR_WEIGHT[lin];
            size_t n = p->size[pt] / L, off = p->offset[pt] + (size_t)l * n;
            cpu_fp8_cast(f, fp8_tensor(l, lin, FP8_WEIGHT), f->weights + off, m->params + off, n, 1);
        }
    }
    f->weights_stale = 0;
}

// The product of two FP8 operands' scale_inv (1 / scale), as the GEMM applies it.
static cpu_real cpu_fp8_unscale(const CpuFp8 *f, int ta, int tb) {
    return (cpu_real)((1.0f / f->scale[ta]) * (1.0f / f->scale[tb]));
}

// Layer l's linear `lin`: out (N, OC) = inp (N, C) W^T + bias, in FP8 when its block is an FP8 one.
static void cpu_linear_forward(CpuModel *m, int l, int lin, cpu_real *out, const cpu_real *inp, const cpu_real *weight,
                               const cpu_real *bias, int N, int C, int OC) {
    if (!cpu_fp8_block(m, l)) {
        matmul_forward(out, inp, weight, bias, m->acts.wt, N, C, OC);
        return;
    }
    CpuFp8 *f = m->fp8;
    int tx = fp8_tensor(l, lin, FP8_INPUT), tw = fp8_tensor(l, lin, FP8_WEIGHT);
    cpu_fp8_cast(f, tx, f->qa, inp, (size_t)N * C, m->training);
    transpose(m->acts.wt, f->weights + (weight - m->params), OC, C);
    zero_real(out, (size_t)N * OC);
    gemm_acc(out, OC, f->qa, C, 1, m->acts.wt, OC, N, OC, C, cpu_fp8_unscale(f, tx, tw));
    if (!bias) { return; }
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) { out[(size_t)n * OC + o] += bias[o]; }
    }
}

// Its backward (matmul_backward's contract). In FP8: the output gradient cast in E5M2, the input cast again as the
// forward cast it (its scale kept from then: the same values).
static void cpu_linear_backward(CpuModel *m, int l, int lin, cpu_real *dinp, cpu_real *dweight, cpu_real *dbias,
                                const cpu_real *dout, const cpu_real *inp, const cpu_real *weight, int N, int C,
                                int OC) {
    if (!cpu_fp8_block(m, l)) {
        matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    CpuFp8 *f = m->fp8;
    int tx = fp8_tensor(l, lin, FP8_INPUT), tw = fp8_tensor(l, lin, FP8_WEIGHT), tg = fp8_tensor(l, lin, FP8_GRAD);
    cpu_fp8_cast(f, tg, f->qb, dout, (size_t)N * OC, m->training);
    gemm_acc(dinp, C, f->qb, OC, 1, f->weights + (weight - m->params), C, N, C, OC, cpu_fp8_unscale(f, tg, tw));
    cpu_fp8_quantize(f->qa, inp, (size_t)N * C, f->scale[tx], FP8_E4M3);
    gemm_acc(dweight, C, f->qb, 1, OC, f->qa, C, OC, C, N, cpu_fp8_unscale(f, tg, tx));
    bias_backward(dbias, dout, N, OC);
}

// The end of an optimizer step (before its AdamW update, the 1-based `step`): the step's amaxes enter the history (a
// non-finite one stops the run, naming the tensor) and the next step's delayed scales follow from it.
static void cpu_fp8_end_step(CpuFp8 *f, int step) {
    Fp8History *h = &f->history;
    int bad = fp8_first_nonfinite(f->amax_step, h->tensors);
    if (bad >= 0) { fp8_fail_nonfinite(bad, f->amax_step[bad], step); }
    for (int t = 0; t < h->tensors; t++) {
        f->amax_scale[t] = fp8_history_push(h->ring + (size_t)t * h->length, h->length, h->steps, f->amax_step[t]);
        f->amax_step[t] = 0.0f;
    }
    h->steps++;
    f->weights_stale = 1;
}

static void cpu_model_get_fp8_history(const CpuModel *m, Fp8History *out) {
    const Fp8History *h = &m->fp8->history;
    memcpy(out->ring, h->ring, (size_t)h->tensors * h->length * sizeof(float));
    out->steps = h->steps;
}

static void cpu_model_set_fp8_history(CpuModel *m, const Fp8History *in) {
    CpuFp8 *f = m->fp8;
    Fp8History *h = &f->history;
    memcpy(h->ring, in->ring, (size_t)h->tensors * h->length * sizeof(float));
    h->steps = in->steps;
    for (int t = 0; t < h->tensors; t++) {
        f->amax_scale[t] = fp8_history_max(h->ring + (size_t)t * h->length, h->length, h->steps);
    }
    f->weights_stale = 1;
}

static void check_tokens(const int *tokens, int n, int V, const char *what) {
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            fail("%s token %d at position %d is outside the vocabulary [0, %d)", what, tokens[i], i, V);
        }
    }
}

// The sum of the first n per-token losses of the last forward (which had targets).
static double cpu_model_loss_sum(const CpuModel *m, int n) {
    if (!m->has_probs || n < 0 || n > m->B * m->T) {
        fail("internal error: the loss of %d tokens asked of a forward of %d x %d%s", n, m->B, m->T,
             m->has_probs ? "" : " without targets");
    }
    cpu_acc sum = 0.0;
    for (int i = 0; i < n; i++) { sum += m->acts.losses[i]; }
    return sum;
}

// Forward over B x T tokens. With targets, returns the mean loss and keeps the probabilities for backward;
// without (targets NULL), computes the logits only and returns 0.
static double cpu_model_forward(CpuModel *m, const int *inputs, const int *targets, int B, int T) {
    const GPTConfig *c = &m->config;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, KV = c->num_kv_heads, HS = config_head_size(c);
    int V = c->vocab_size, Vp = c->padded_vocab_size, QKV = config_qkv_rows(c), FC = config_fc_rows(c);
    int F = c->ffn_hidden;
    // Every activation holds B x T rows, attention's B T^2 at most maxB maxT^2: so more, shorter rows fit too.
    if (B < 1 || T < 1 || T > m->maxT || (long long)B * T > (long long)m->maxB * m->maxT) {
        fail("micro-batch %d x %d does not fit the CPU model's capacity of %d x %d tokens", B, T, m->maxB, m->maxT);
    }
    int N = B * T;
    check_tokens(inputs, N, V, "input");
    memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
    m->B = B;
    m->T = T;
    m->has_probs = 0;
    CpuActs *a = &m->acts;

    if (m->fp8 && m->fp8->weights_stale) { cpu_fp8_cast_weights(m); }
    encoder_forward(a->encoded, inputs, m->params + m->layout.offset[P_WTE], cpu_tensor(m, m->params, P_WPE), B, T,
                    C);
    for (int l = 0; l < L; l++) {
        CpuLayer w = cpu_layer(m, m->params, l);
        CpuLayerActs x = cpu_layer_acts(m, l);
        cpu_real *res = cpu_layer_input(m, l);
        norm_forward(c, x.ln1, x.ln1_mean, x.ln1_rstd, res, w.ln1w, w.ln1b, N);
        cpu_linear_forward(m, l, LIN_QKV, x.qkv, x.ln1, w.qkvw, w.qkvb, N, C, QKV);
        if (m->rope_cos) { rope_rotate(x.qkv, m->rope_cos, m->rope_sin, B, T, NH, KV, HS, 1); }
        attention_forward(x.atty, x.att, x.qkv, B, T, NH, KV, HS);
        cpu_linear_forward(m, l, LIN_ATTPROJ, a->proj, x.atty, w.attprojw, w.attprojb, N, C, C);
        residual_forward(x.res2, res, a->proj, (size_t)N * C);
        norm_forward(c, x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, w.ln2w, w.ln2b, N);
        cpu_linear_forward(m, l, LIN_FC, x.fch, x.ln2, w.fcw, w.fcb, N, C, FC);
        mlp_act_forward(c, x.fch_act, x.fch, N);
        cpu_linear_forward(m, l, LIN_FCPROJ, a->proj, x.fch_act, w.fcprojw, w.fcprojb, N, F, C);
        residual_forward(x.res3, x.res2, a->proj, (size_t)N * C);
    }
    norm_forward(c, a->lnf, a->lnf_mean, a->lnf_rstd, cpu_layer_input(m, L), cpu_tensor(m, m->params, P_LNFW),
                 cpu_tensor(m, m->params, P_LNFB), N);
    matmul_forward(a->logits, a->lnf, cpu_lm_head(m, m->params), NULL, a->wt, N, C, Vp);
    if (!targets) { return 0.0; }

    check_tokens(targets, N, V, "target");
    memcpy(m->targets, targets, (size_t)N * sizeof(int));
    softmax_crossentropy_forward(a->losses, a->probs, a->logits, targets, N, V, Vp);
    m->has_probs = 1;
    return cpu_model_loss_sum(m, N) / N;
}

// Backward of the last forward (which had targets): adds the gradients of loss_scale * (sum of the per-token
// losses) to m->grads.
static void cpu_model_backward(CpuModel *m, cpu_real loss_scale) {
    if (!m->has_probs) { fail("cpu_model_backward needs a forward pass with targets just before it"); }
    m->has_probs = 0;
    const GPTConfig *c = &m->config;
    int B = m->B, T = m->T, N = B * T;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, KV = c->num_kv_heads, HS = config_head_size(c);
    int V = c->vocab_size, Vp = c->padded_vocab_size, QKV = config_qkv_rows(c), FC = config_fc_rows(c);
    int F = c->ffn_hidden;
    size_t NC = (size_t)N * C;
    CpuActs *a = &m->acts;
    cpu_real *dlogits = a->probs;

    softmax_crossentropy_backward(dlogits, a->probs, m->targets, loss_scale, N, V, Vp);
    zero_real(a->dln, NC);
    matmul_backward(a->dln, cpu_lm_head(m, m->grads), NULL, dlogits, a->lnf, cpu_lm_head(m, m->params), N, C, Vp);
    zero_real(a->dres, NC);
    norm_backward(c, a->dres, cpu_tensor(m, m->grads, P_LNFW), cpu_tensor(m, m->grads, P_LNFB), a->dln,
                  cpu_layer_input(m, L), cpu_tensor(m, m->params, P_LNFW), a->lnf_mean, a->lnf_rstd, N);
    // dres holds the gradient of the residual stream; each branch adds its input gradient into it.
    for (int l = L - 1; l >= 0; l--) {
        CpuLayer w = cpu_layer(m, m->params, l), g = cpu_layer(m, m->grads, l);
        CpuLayerActs x = cpu_layer_acts(m, l);
        zero_real(a->dfch_act, (size_t)N * F);
        cpu_linear_backward(m, l, LIN_FCPROJ, a->dfch_act, g.fcprojw, g.fcprojb, a->dres, x.fch_act, w.fcprojw, N, F,
                            C);
        zero_real(a->dfch, (size_t)N * FC);
        mlp_act_backward(c, a->dfch, x.fch, a->dfch_act, N);
        zero_real(a->dln, NC);
        cpu_linear_backward(m, l, LIN_FC, a->dln, g.fcw, g.fcb, a->dfch, x.ln2, w.fcw, N, C, FC);
        norm_backward(c, a->dres, g.ln2w, g.ln2b, a->dln, x.res2, w.ln2w, x.ln2_mean, x.ln2_rstd, N);
        zero_real(a->datty, NC);
        cpu_linear_backward(m, l, LIN_ATTPROJ, a->datty, g.attprojw, g.attprojb, a->dres, x.atty, w.attprojw, N, C,
                            C);
        zero_real(a->dqkv, (size_t)N * QKV);
        attention_backward(a->dqkv, a->datty, x.qkv, x.att, B, T, NH, KV, HS);
        if (m->rope_cos) { rope_rotate(a->dqkv, m->rope_cos, m->rope_sin, B, T, NH, KV, HS, -1); }
        zero_real(a->dln, NC);
        cpu_linear_backward(m, l, LIN_QKV, a->dln, g.qkvw, g.qkvb, a->dqkv, x.ln1, w.qkvw, N, C, QKV);
        norm_backward(c, a->dres, g.ln1w, g.ln1b, a->dln, cpu_layer_input(m, l), w.ln1w, x.ln1_mean, x.ln1_rstd, N);
    }
    encoder_backward(m->grads + m->layout.offset[P_WTE], cpu_tensor(m, m->grads, P_WPE), a->dres, m->inputs, B, T, C);
}

static void cpu_model_zero_grad(CpuModel *m) { zero_real(m->grads, m->layout.total); }

// Sum of squares in fixed blocks summed in order, so the norm does not depend on the number of threads.
#define NORM_BLOCK 65536
static double sum_squares(const cpu_real *x, size_t n) {
    size_t nblocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double *partial = (double *)malloc_check(nblocks * sizeof(double), "norm partial sums");
#pragma omp parallel for
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t end = (blk + 1) * NORM_BLOCK < n ? (blk + 1) * NORM_BLOCK : n;
        double s = 0.0;
        for (size_t i = blk * NORM_BLOCK; i < end; i++) { s += (double)x[i] * (double)x[i]; }
        partial[blk] = s;
    }
    double total = 0.0;
    for (size_t blk = 0; blk < nblocks; blk++) { total += partial[blk]; }
    free(partial);
    return total;
}

// Global gradient norm, clipping and AdamW exactly as dev/DESIGN.md ("Semantics") defines them. Clipping scales
// the gradient as AdamW reads it; the gradient buffers keep the unclipped values. Returns the norm before clipping.
static float cpu_model_update(CpuModel *m, const UpdateArgs *u) {
    if (m->fp8) { cpu_fp8_end_step(m->fp8, u->t); }
    double norm = sqrt(sum_squares(m->grads, m->layout.total));
    cpu_real clip = (u->grad_clip > 0 && norm > u->grad_clip) ? (cpu_real)(u->grad_clip / norm) : 1;
    cpu_real b1 = u->beta1, b2 = u->beta2, lr = u->lr, eps = u->eps;
    cpu_real bc1 = (cpu_real)(1.0 - pow(u->beta1, u->t)), bc2 = (cpu_real)(1.0 - pow(u->beta2, u->t));
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        cpu_real wd = param_is_decayed(t) ? u->weight_decay : 0;
        size_t off = m->layout.offset[t];
        cpu_real *p = m->params + off, *g = m->grads + off, *mm = m->adam_m + off, *vv = m->adam_v + off;
        long long n = (long long)m->layout.size[t];
#pragma omp parallel for
        for (long long i = 0; i < n; i++) {
            cpu_real gi = g[i] * clip;
            mm[i] = b1 * mm[i] + (1 - b1) * gi;
            vv[i] = b2 * vv[i] + (1 - b2) * gi * gi;
            cpu_real mhat = mm[i] / bc1, vhat = vv[i] / bc2;
            p[i] -= lr * (mhat / ((cpu_real)sqrt((double)vhat) + eps) + wd * p[i]);
        }
    }
    return (float)norm;
}

#endif // LLMC_CPU_MODEL_H
