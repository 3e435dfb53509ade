/*
 * test_attention.cu: llmc/attention.cuh against a naive fp64 reference on the GPU, then its speed.
 *
 * For each shape and precision: random qkv and dout (fixed seed, never zeros); outputs poisoned with NaN before
 * every call and checked fully written; out, lse, dq, dk, dv compared by max|a - b| / max|ref| per tensor; the
 * backward's fused bias gradient against the column sums of the dqkv it stored (fp64 on the host), and with
 * accumulate against twice itself; the backward run twice must be bitwise identical (no float atomics). Shapes are
 * multi-head (KV = NH) and grouped-query (KV < NH: ratios 2 to 8, a ratio of 3, T up to 8192 and T not a multiple of
 * any block). Grouped-query shapes are also run as multi-head attention on the same inputs with each KV head copied
 * to the query heads that read it: out, lse and dq must be the same bits (only the columns read change), and dK, dV
 * the sums over each group of the copies' (within rounding: the grouped kernel sums a group in one chain). With RoPE
 * tables (Llama 3's theta, more positions than T so that a wrong position reads valid, wrong entries) the backward
 * rotates dQ and dK back as it stores them: against the reference's dq and dk rotated back in fp64 by the same fp32
 * table entries (the same tolerances: the rotation adds a product and a sum in fp32 before the one rounding), dV the
 * same bits as without the tables, and the bias sums those of what it stored. Then the median time of the forward
 * and the backward at the GPT-2 benchmark shapes and at Llama 3's grouped-query shapes (the backward with RoPE).
 * Prints PASS/FAIL lines; exits non-zero on any failure.
 *   test/gpubin/test_attention [small | --bench]   (small: the small shapes only, for compute-sanitizer)
 */
#include <algorithm>
#include <vector>

#include "llmc/attention.cuh"
#include "test/cuda_timing.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

// fp32 parity target of the GPU build against the CPU reference.
#define TOL_F32 1e-4
// bf16 has 8 significant bits (relative rounding 2^-9 ~ 2e-3): the inputs are exact in bf16 here, but P and dS are
// rounded to bf16 before their products, and out/dqkv are stored in bf16; summed over rows of up to 1024 terms
// these roundings average out to a few 1e-3 of the largest element, so 1e-2 leaves margin without hiding a bug
// (a wrong mask or a missed tile shows up as O(1)). Longer sums (T 8192, dK and dV over a group of 8 heads) add
// independent roundings, which grow as the square root of the terms as the sum itself does: the same relative size.
#define TOL_BF16 1e-2
// The bias gradient sums the stored dqkv in fp32: against an fp64 sum of the same values only the fp32 rounding of
// the sum differs, in either precision.
#define TOL_BIAS 1e-4
#define ROPE_THETA 500000.0 // Llama 3's rope_theta

// ----------------------------------------------------------------------------------------------------------------
// the reference: fp64, straight from the definitions, one warp per row: lane c holds columns c, c + 32, ... of the
// row's vectors, and each dot product is summed over the warp (every lane gets the same sum), so a row of T keys
// costs T warp steps rather than T HS steps of one thread (T = 8192 would take seconds)

#define REF_COLS (128 / WARP_SIZE) // columns a lane holds, at most (HS <= 128)
#define REF_THREADS 64

// Row t of head h of Q (which 0: query head h), K (1) or V (2) in qkv (B, T, NH + 2 KV, HS).
__device__ const double *ref_row(const double *qkv, int b, int t, int which, int h, int Tlen, int NH, int KV,
                                 int HS) {
    const int head = which == 0 ? h : which == 1 ? NH + h : NH + KV + h;
    return qkv + ((size_t)b * Tlen + t) * (NH + 2 * KV) * HS + (size_t)head * HS;
}
__device__ double ref_warp_sum(double s) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) { s += __shfl_xor_sync(0xffffffffu, s, o); }
    return s;
}
__device__ double ref_dot(const double *a, const double *b, int HS) {
    double s = 0.0;
    for (int d = threadIdx.x % WARP_SIZE; d < HS; d += WARP_SIZE) { s += a[d] * b[d]; }
    return ref_warp_sum(s);
}
// The row (b, h, t) of a (B, NH, T) index this warp takes; -1 past the last.
__device__ int ref_warp_row(int rows) {
    const int w = (blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE;
    return w < rows ? w : -1;
}

// A warp per query row; query head h reads KV head h / (NH / KV).
// out (B, T, NH, HS), lse (B, NH, T), D (B, NH, T) = rowsum(dout * out)
__global__ void ref_forward(double *out, double *lse, double *dsum, const double *qkv, const double *dout, int B,
                            int Tlen, int NH, int KV, int HS) {
    const int idx = ref_warp_row(B * NH * Tlen), lane = threadIdx.x % WARP_SIZE;
    if (idx < 0) { return; }
    int i = idx % Tlen, h = (idx / Tlen) % NH, b = idx / (Tlen * NH), kvh = h / (NH / KV);
    double scale = 1.0 / sqrt((double)HS), m = -INFINITY, l = 0.0, o[REF_COLS] = {};
    const double *q = ref_row(qkv, b, i, 0, h, Tlen, NH, KV, HS);
    for (int j = 0; j <= i; j++) {
        m = fmax(m, scale * ref_dot(q, ref_row(qkv, b, j, 1, kvh, Tlen, NH, KV, HS), HS));
    }
    for (int j = 0; j <= i; j++) {
        double p = exp(scale * ref_dot(q, ref_row(qkv, b, j, 1, kvh, Tlen, NH, KV, HS), HS) - m);
        const double *v = ref_row(qkv, b, j, 2, kvh, Tlen, NH, KV, HS);
        l += p;
        for (int c = 0; lane + c * WARP_SIZE < HS; c++) { o[c] += p * v[lane + c * WARP_SIZE]; }
    }
    double *orow = out + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
    const double *dorow = dout + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
    double D = 0.0;
    for (int c = 0; lane + c * WARP_SIZE < HS; c++) {
        orow[lane + c * WARP_SIZE] = o[c] / l;
        D += orow[lane + c * WARP_SIZE] * dorow[lane + c * WARP_SIZE];
    }
    D = ref_warp_sum(D);
    if (lane == 0) {
        lse[idx] = m + log(l);
        dsum[idx] = D;
    }
}

// mode 0: dq of query row idx; mode 1: query head h's part of dk and dv of key row idx (the host sums a group's).
// Outputs (B, T, NH, HS), per query head.
__global__ void ref_backward(double *dq, double *dk, double *dv, const double *qkv, const double *dout,
                             const double *lse, const double *dsum, int B, int Tlen, int NH, int KV, int HS,
                             int mode) {
    const int idx = ref_warp_row(B * NH * Tlen), lane = threadIdx.x % WARP_SIZE;
    if (idx < 0) { return; }
    int r = idx % Tlen, h = (idx / Tlen) % NH, b = idx / (Tlen * NH), kvh = h / (NH / KV);
    size_t bh = (size_t)b * NH + h;
    double scale = 1.0 / sqrt((double)HS), a1[REF_COLS] = {}, a2[REF_COLS] = {};
    int lo = mode == 0 ? 0 : r, hi = mode == 0 ? r : Tlen - 1; // the other index ranges over [lo, hi]
    for (int x = lo; x <= hi; x++) {
        int i = mode == 0 ? r : x, j = mode == 0 ? x : r;
        const double *q = ref_row(qkv, b, i, 0, h, Tlen, NH, KV, HS), *k = ref_row(qkv, b, j, 1, kvh, Tlen, NH, KV, HS);
        const double *v = ref_row(qkv, b, j, 2, kvh, Tlen, NH, KV, HS);
        const double *d_o = dout + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
        double p = exp(scale * ref_dot(q, k, HS) - lse[bh * Tlen + i]);
        double ds = p * (ref_dot(d_o, v, HS) - dsum[bh * Tlen + i]);
        for (int c = 0; lane + c * WARP_SIZE < HS; c++) {
            const int d = lane + c * WARP_SIZE;
            if (mode == 0) {
                a1[c] += ds * k[d];
            } else {
                a1[c] += ds * q[d];
                a2[c] += p * d_o[d];
            }
        }
    }
    size_t o = ((size_t)b * Tlen + r) * NH * HS + (size_t)h * HS;
    for (int c = 0; lane + c * WARP_SIZE < HS; c++) {
        const int d = lane + c * WARP_SIZE;
        if (mode == 0) {
            dq[o + d] = scale * a1[c];
        } else {
            dk[o + d] = scale * a1[c];
            dv[o + d] = a2[c];
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// host helpers

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rand_uniform(float lo, float hi) { // xorshift64*: fixed sequence, never exactly 0 in practice
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    double u = (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
    return lo + (float)(u * (hi - lo));
}

template <typename T> static std::vector<float> download(const T *d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) { f[i] = host_float(h[i]); }
    return f;
}
static std::vector<float> download_double(const double *d, size_t n) {
    std::vector<double> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost));
    return std::vector<float>(h.begin(), h.end());
}
static size_t count_nonfinite(const std::vector<float> &a) {
    size_t n = 0;
    for (float x : a) { n += !isfinite(x); }
    return n;
}

static std::vector<double> download_f64(const double *d, size_t n) {
    std::vector<double> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost));
    return h;
}

// Heads [h0, h0 + nh) of a (rows, H, HS) tensor as (rows, nh, HS).
static std::vector<float> slice_heads(const std::vector<float> &a, size_t rows, int H, int h0, int nh, int HS) {
    std::vector<float> s(rows * nh * HS);
    for (size_t r = 0; r < rows; r++) {
        const size_t from = (r * H + h0) * HS;
        std::copy(a.begin() + from, a.begin() + from + (size_t)nh * HS, s.begin() + r * nh * HS);
    }
    return s;
}

// The sums of each group of G consecutive heads of a (rows, NH, HS) tensor, as (rows, NH / G, HS): dK and dV of a KV
// head from its query heads' parts.
template <typename V>
static std::vector<float> sum_groups(const std::vector<V> &a, size_t rows, int NH, int G, int HS) {
    std::vector<float> s(rows * (NH / G) * HS);
    for (size_t r = 0; r < rows; r++) {
        for (int g = 0; g < NH / G; g++) {
            for (int d = 0; d < HS; d++) {
                double sum = 0.0;
                for (int i = 0; i < G; i++) { sum += a[(r * NH + g * G + i) * HS + d]; }
                s[(r * (NH / G) + g) * HS + d] = (float)sum;
            }
        }
    }
    return s;
}

static void shape_name(char *name, size_t cap, const char *prec, const char *what, int B, int Tlen, int NH, int KV,
                       int HS) {
    snprintf(name, cap, "attention_%s_%s_B%d_T%d_NH%d_KV%d_HS%d", prec, what, B, Tlen, NH, KV, HS);
}

static void check_close(const char *prec, const char *what, int B, int Tlen, int NH, int KV, int HS,
                        const std::vector<float> &got, const std::vector<float> &ref, double tol) {
    char name[160];
    shape_name(name, sizeof(name), prec, what, B, Tlen, NH, KV, HS);
    double err = max_rel_err(got.data(), ref.data(), got.size());
    check(err <= tol, name, "max rel err %.3e > %.1e", err, tol);
    printf("  %-56s rel err %.3e\n", name, err);
}

static void check_same_bits(const char *prec, const char *what, int B, int Tlen, int NH, int KV, int HS,
                            const std::vector<float> &got, const std::vector<float> &want) {
    char name[160];
    shape_name(name, sizeof(name), prec, what, B, Tlen, NH, KV, HS);
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); i++) { differ += memcmp(&got[i], &want[i], sizeof(float)) != 0; }
    check(differ == 0, name, "%zu of %zu elements differ", differ, got.size());
}

template <typename T> static T *device_copy(const std::vector<T> &h) {
    T *d;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// Grouped-query attention on qkv (rows, NH + 2 KV, HS) against multi-head attention on the same inputs with each KV
// head copied to the query heads that read it: forward outputs and dq bitwise, dK and dV as the group sums of the
// copies' (one rounding chain against G sums of their own: tol). gqa_*: what the grouped call gave.
template <typename T>
static void check_as_multi_head(const std::vector<T> &h_qkv, T *dout, int B, int Tlen, int NH, int KV, int HS,
                                const std::vector<float> &gqa_out, const std::vector<float> &gqa_lse,
                                const std::vector<float> &gqa_dqkv, double tol) {
    const char *prec = TypeInfo<T>::name;
    const int G = NH / KV, H = NH + 2 * KV;
    const size_t rows = (size_t)B * Tlen, n_out = rows * NH * HS, n_lse = (size_t)B * NH * Tlen;
    std::vector<T> rep(rows * 3 * NH * HS);
    for (size_t r = 0; r < rows; r++) {
        for (int which = 0; which < 3; which++) {
            for (int h = 0; h < NH; h++) {
                const int from = which == 0 ? h : which == 1 ? NH + h / G : NH + KV + h / G;
                std::copy(h_qkv.begin() + (r * H + from) * HS, h_qkv.begin() + (r * H + from + 1) * HS,
                          rep.begin() + ((r * 3 + which) * NH + h) * HS);
            }
        }
    }
    T *qkv = device_copy(rep), *out, *dqkv;
    float *lse;
    void *ws;
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&dqkv, rep.size() * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, n_lse * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, attention_backward_workspace_bytes<T>(B, Tlen, NH, NH, HS)));
    attention_forward<T>(out, lse, qkv, B, Tlen, NH, NH, HS, 0);
    attention_backward<T>(dqkv, nullptr, dout, out, qkv, lse, RopeTables{}, ws, B, Tlen, NH, NH, HS, 0, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> dqkv_mha = download(dqkv, rep.size());
    check_same_bits(prec, "gqa_as_mha_out", B, Tlen, NH, KV, HS, gqa_out, download(out, n_out));
    check_same_bits(prec, "gqa_as_mha_lse", B, Tlen, NH, KV, HS, gqa_lse, download(lse, n_lse));
    check_same_bits(prec, "gqa_as_mha_dq", B, Tlen, NH, KV, HS, slice_heads(gqa_dqkv, rows, H, 0, NH, HS),
                    slice_heads(dqkv_mha, rows, 3 * NH, 0, NH, HS));
    check_close(prec, "gqa_as_mha_dk", B, Tlen, NH, KV, HS, slice_heads(gqa_dqkv, rows, H, NH, KV, HS),
                sum_groups(slice_heads(dqkv_mha, rows, 3 * NH, NH, NH, HS), rows, NH, G, HS), tol);
    check_close(prec, "gqa_as_mha_dv", B, Tlen, NH, KV, HS, slice_heads(gqa_dqkv, rows, H, NH + KV, KV, HS),
                sum_groups(slice_heads(dqkv_mha, rows, 3 * NH, 2 * NH, NH, HS), rows, NH, G, HS), tol);
    for (void *p : {(void *)qkv, (void *)out, (void *)dqkv, (void *)lse, ws}) { cudaCheck(cudaFree(p)); }
}

// The backward with RoPE tables against the reference's dq and dk (rdq, rdk: per query head) rotated back in fp64;
// dV the same bits as the call without tables gave (plain_dqkv), the bias sums those of the stored dqkv.
template <typename T>
static void check_rope_backward(T *dqkv, float *dbias, const T *dout, const T *out, const T *qkv, const float *lse,
                                void *ws, int B, int Tlen, int NH, int KV, int HS,
                                const std::vector<float> &plain_dqkv, const double *rdq, const double *rdk,
                                double tol) {
    const char *prec = TypeInfo<T>::name;
    const int H = NH + 2 * KV, positions = 2 * Tlen + 1;
    const size_t rows = (size_t)B * Tlen, n_qkv = rows * H * HS, n_out = rows * NH * HS, n_bias = (size_t)H * HS;
    std::vector<float> cos_t, sin_t;
    rope_test_tables(cos_t, sin_t, positions, HS, ROPE_THETA);
    float *d_cos = device_copy(cos_t), *d_sin = device_copy(sin_t);
    cudaCheck(cudaMemset(dqkv, 0xff, n_qkv * sizeof(T)));
    attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, RopeTables{d_cos, d_sin, positions}, ws, B, Tlen, NH, KV,
                          HS, 0, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> got = download(dqkv, n_qkv), bias = download(dbias, n_bias);
    auto unrotated = [&](const std::vector<double> &ref, int heads) {
        std::vector<double> r = rope_reference(ref, cos_t, sin_t, rows, Tlen, heads, heads, HS, true);
        return std::vector<float>(r.begin(), r.end());
    };
    check_close(prec, "dq_rope", B, Tlen, NH, KV, HS, slice_heads(got, rows, H, 0, NH, HS),
                unrotated(download_f64(rdq, n_out), NH), tol);
    check_close(prec, "dk_rope", B, Tlen, NH, KV, HS, slice_heads(got, rows, H, NH, KV, HS),
                unrotated(to_f64(sum_groups(download_f64(rdk, n_out), rows, NH, NH / KV, HS)), KV), tol);
    check_same_bits(prec, "dv_rope", B, Tlen, NH, KV, HS, slice_heads(got, rows, H, NH + KV, KV, HS),
                    slice_heads(plain_dqkv, rows, H, NH + KV, KV, HS));
    std::vector<double> sums(n_bias, 0.0);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < n_bias; c++) { sums[c] += got[r * n_bias + c]; }
    }
    check_close(prec, "dbias_rope", B, Tlen, NH, KV, HS, bias, std::vector<float>(sums.begin(), sums.end()), TOL_BIAS);
    char name[160];
    shape_name(name, sizeof(name), prec, "written_rope", B, Tlen, NH, KV, HS);
    check(count_nonfinite(got) == 0, name, "%zu dqkv elements not written (still NaN) or not finite",
          count_nonfinite(got));
    for (void *p : {(void *)d_cos, (void *)d_sin}) { cudaCheck(cudaFree(p)); }
}

template <typename T> static void test_shape(int B, int Tlen, int NH, int KV, int HS) {
    const char *prec = TypeInfo<T>::name;
    const double tol = sizeof(T) == 4 ? TOL_F32 : TOL_BF16;
    const int H = NH + 2 * KV, G = NH / KV;
    const size_t rows = (size_t)B * Tlen, n_qkv = rows * H * HS, n_out = rows * NH * HS;
    const size_t n_lse = (size_t)B * NH * Tlen;

    // inputs rounded to T on the host, so the reference sees exactly what the kernels see
    std::vector<T> h_qkv(n_qkv), h_dout(n_out);
    std::vector<double> r_qkv(n_qkv), r_dout(n_out);
    for (size_t i = 0; i < n_qkv; i++) {
        h_qkv[i] = to_type<T>(rand_uniform(-2.0f, 2.0f));
        r_qkv[i] = host_float(h_qkv[i]);
    }
    for (size_t i = 0; i < n_out; i++) {
        h_dout[i] = to_type<T>(rand_uniform(-1.0f, 1.0f));
        r_dout[i] = host_float(h_dout[i]);
    }
    T *qkv = device_copy(h_qkv), *dout = device_copy(h_dout), *out, *dqkv;
    float *lse, *dbias;
    void *ws;
    double *rqkv = device_copy(r_qkv), *rdout = device_copy(r_dout), *rout, *rlse, *rdsum, *rdq, *rdk, *rdv;
    cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, n_lse * sizeof(float)));
    cudaCheck(cudaMalloc(&dbias, (size_t)H * HS * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, attention_backward_workspace_bytes<T>(B, Tlen, NH, KV, HS)));
    for (double **p : {&rout, &rdq, &rdk, &rdv}) { cudaCheck(cudaMalloc(p, n_out * sizeof(double))); }
    for (double **p : {&rlse, &rdsum}) { cudaCheck(cudaMalloc(p, n_lse * sizeof(double))); }

    const int rblocks = grid_for(n_lse * WARP_SIZE, REF_THREADS);
    ref_forward<<<rblocks, REF_THREADS>>>(rout, rlse, rdsum, rqkv, rdout, B, Tlen, NH, KV, HS);
    cudaCheckLaunch();
    for (int mode = 0; mode < 2; mode++) {
        ref_backward<<<rblocks, REF_THREADS>>>(rdq, rdk, rdv, rqkv, rdout, rlse, rdsum, B, Tlen, NH, KV, HS, mode);
        cudaCheckLaunch();
    }

    // 0xff bytes are NaN in fp32 and in bf16
    cudaCheck(cudaMemset(out, 0xff, n_out * sizeof(T)));
    cudaCheck(cudaMemset(lse, 0xff, n_lse * sizeof(float)));
    attention_forward<T>(out, lse, qkv, B, Tlen, NH, KV, HS, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> g_out = download(out, n_out), g_lse = download(lse, n_lse);
    check_close(prec, "out", B, Tlen, NH, KV, HS, g_out, download_double(rout, n_out), tol);
    check_close(prec, "lse", B, Tlen, NH, KV, HS, g_lse, download_double(rlse, n_lse), tol);
    if (B > 1) { // the first B/2 sequences launched alone, then the rest (as SP's ring takes them): the same bits
        int first = B / 2;
        size_t out_first = (size_t)first * Tlen * NH * HS, lse_first = (size_t)first * NH * Tlen;
        cudaCheck(cudaMemset(out, 0xff, n_out * sizeof(T)));
        cudaCheck(cudaMemset(lse, 0xff, n_lse * sizeof(float)));
        attention_forward<T>(out, lse, qkv, first, Tlen, NH, KV, HS, 0);
        attention_forward<T>(out + out_first, lse + lse_first, qkv + (size_t)first * Tlen * H * HS, B - first, Tlen,
                             NH, KV, HS, 0);
        cudaCheck(cudaDeviceSynchronize());
        check_same_bits(prec, "out_in_two_launches", B, Tlen, NH, KV, HS, download(out, n_out), g_out);
        check_same_bits(prec, "lse_in_two_launches", B, Tlen, NH, KV, HS, download(lse, n_lse), g_lse);
    }

    const size_t n_bias = (size_t)H * HS;
    std::vector<float> g_dqkv[2], g_bias[2];
    for (int rep = 0; rep < 2; rep++) {
        cudaCheck(cudaMemset(dqkv, 0xff, n_qkv * sizeof(T)));
        cudaCheck(cudaMemset(dbias, 0xff, n_bias * sizeof(float)));
        attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, RopeTables{}, ws, B, Tlen, NH, KV, HS, 0, 0);
        cudaCheck(cudaDeviceSynchronize());
        g_dqkv[rep] = download(dqkv, n_qkv);
        g_bias[rep] = download(dbias, n_bias);
    }
    // adds the sums again
    attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, RopeTables{}, ws, B, Tlen, NH, KV, HS, 1, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> g_bias_acc = download(dbias, n_bias);
    check_close(prec, "dq", B, Tlen, NH, KV, HS, slice_heads(g_dqkv[0], rows, H, 0, NH, HS),
                download_double(rdq, n_out), tol);
    check_close(prec, "dk", B, Tlen, NH, KV, HS, slice_heads(g_dqkv[0], rows, H, NH, KV, HS),
                sum_groups(download_f64(rdk, n_out), rows, NH, G, HS), tol);
    check_close(prec, "dv", B, Tlen, NH, KV, HS, slice_heads(g_dqkv[0], rows, H, NH + KV, KV, HS),
                sum_groups(download_f64(rdv, n_out), rows, NH, G, HS), tol);
    std::vector<double> sums(n_bias, 0.0);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < n_bias; c++) { sums[c] += g_dqkv[0][r * n_bias + c]; }
    }
    check_close(prec, "dbias", B, Tlen, NH, KV, HS, g_bias[0], std::vector<float>(sums.begin(), sums.end()),
                TOL_BIAS);
    char name[160];
    size_t doubled = 0;
    for (size_t c = 0; c < n_bias; c++) { doubled += g_bias_acc[c] == 2.0f * g_bias[0][c]; }
    shape_name(name, sizeof(name), prec, "dbias_accumulate", B, Tlen, NH, KV, HS);
    check(doubled == n_bias, name, "%zu of %zu bias sums are not twice the written ones", n_bias - doubled, n_bias);
    size_t unwritten = count_nonfinite(g_out) + count_nonfinite(g_lse) + count_nonfinite(g_dqkv[0]) +
                       count_nonfinite(g_bias[0]);
    shape_name(name, sizeof(name), prec, "written", B, Tlen, NH, KV, HS);
    check(unwritten == 0, name, "%zu output elements not written (still NaN) or not finite", unwritten);
    shape_name(name, sizeof(name), prec, "bwd_deterministic", B, Tlen, NH, KV, HS);
    check(memcmp(g_dqkv[0].data(), g_dqkv[1].data(), n_qkv * sizeof(float)) == 0 &&
              memcmp(g_bias[0].data(), g_bias[1].data(), n_bias * sizeof(float)) == 0,
          name, "two backward passes on the same inputs differ");
    if (KV < NH) { check_as_multi_head(h_qkv, dout, B, Tlen, NH, KV, HS, g_out, g_lse, g_dqkv[0], tol); }
    check_rope_backward<T>(dqkv, dbias, dout, out, qkv, lse, ws, B, Tlen, NH, KV, HS, g_dqkv[0], rdq, rdk, tol);

    for (void *p : {(void *)qkv, (void *)dqkv, (void *)dout, (void *)out, (void *)lse, (void *)dbias, ws, (void *)rqkv,
                    (void *)rdout, (void *)rout, (void *)rlse, (void *)rdsum, (void *)rdq, (void *)rdk, (void *)rdv}) {
        cudaCheck(cudaFree(p));
    }
}

template <typename T> static void bench_shape(int B, int Tlen, int NH, int KV, int HS) {
    const size_t n_out = (size_t)B * Tlen * NH * HS, n_qkv = (size_t)B * Tlen * (NH + 2 * KV) * HS;
    std::vector<T> h(n_qkv);
    for (size_t i = 0; i < n_qkv; i++) { h[i] = to_type<T>(rand_uniform(-2.0f, 2.0f)); }
    T *qkv = device_copy(h), *dout, *out, *dqkv;
    float *lse, *dbias;
    void *ws;
    cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dout, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, (size_t)B * NH * Tlen * sizeof(float)));
    cudaCheck(cudaMalloc(&dbias, (size_t)(NH + 2 * KV) * HS * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, attention_backward_workspace_bytes<T>(B, Tlen, NH, KV, HS)));
    cudaCheck(cudaMemcpy(dout, h.data(), n_out * sizeof(T), cudaMemcpyHostToDevice)); // any non-zero values do
    float fwd = median_ms([&] { attention_forward<T>(out, lse, qkv, B, Tlen, NH, KV, HS, 0); });
    // as training calls it: GPT-2 (KV = NH here) with the fused bias gradient, Llama with RoPE and no bias
    const bool llama = KV < NH;
    std::vector<float> cos_t, sin_t;
    rope_test_tables(cos_t, sin_t, Tlen, HS, ROPE_THETA);
    float *d_cos = device_copy(cos_t), *d_sin = device_copy(sin_t), *bias = llama ? nullptr : dbias;
    const RopeTables rope = llama ? RopeTables{d_cos, d_sin, Tlen} : RopeTables{};
    float bwd = median_ms(
        [&] { attention_backward<T>(dqkv, bias, dout, out, qkv, lse, rope, ws, B, Tlen, NH, KV, HS, 1, 0); });
    double flops = 4.0 * B * NH * (double)Tlen * Tlen * HS / 2; // causal forward; backward counts 2.5x
    printf("bench %-5s B=%-3d T=%-5d NH=%-3d KV=%-3d HS=%-4d fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s\n",
           TypeInfo<T>::name, B, Tlen, NH, KV, HS, fwd, flops / fwd * 1e-9, bwd, 2.5 * flops / bwd * 1e-9);
    for (void *p : {(void *)qkv, (void *)dqkv, (void *)dout, (void *)out, (void *)lse, (void *)dbias, ws,
                    (void *)d_cos, (void *)d_sin}) {
        cudaCheck(cudaFree(p));
    }
}

// ----------------------------------------------------------------------------------------------------------------
// bad arguments fail loudly. Run in a child before this process touches CUDA (a forked CUDA context is unusable);
// the argument checks come before any CUDA call, so the child never makes one.

static void forward_head_size_96(void *) { attention_forward<bf16>(nullptr, nullptr, nullptr, 1, 8, 1, 1, 96, 0); }
static void forward_misaligned(void *) {
    attention_forward<bf16>((bf16 *)nullptr + 1, nullptr, nullptr, 1, 8, 1, 1, 64, 0);
}
static void backward_rope_tables_short(void *) {
    const float *table = (const float *)nullptr + 64; // 16-byte aligned: only the length is wrong
    attention_backward<bf16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, RopeTables{table, table, 7}, nullptr,
                             1, 8, 2, 2, 64, 0, 0);
}
static void backward_kv_not_dividing(void *) {
    attention_backward<bf16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, RopeTables{}, nullptr, 1, 8, 4, 3, 64,
                             0, 0);
}

int main(int argc, char **argv) {
    const bool bench_only = argc > 1 && strcmp(argv[1], "--bench") == 0;
    const bool small = argc > 1 && strcmp(argv[1], "small") == 0;
    if (!small) { // (the children would only add noise to a compute-sanitizer run)
        expect_child_fails(forward_head_size_96, nullptr, "attention_rejects_head_size_96", "head sizes 64 and 128");
        expect_child_fails(forward_misaligned, nullptr, "attention_rejects_misaligned_buffer", "16-byte aligned");
        expect_child_fails(backward_rope_tables_short, nullptr, "attention_rejects_rope_tables_shorter_than_T",
                           "tables of 7 positions cannot rotate sequences of 8 tokens");
        expect_child_fails(backward_kv_not_dividing, nullptr, "attention_rejects_kv_heads_not_dividing",
                           "multiple of the key/value heads");
    }
    // B, T, NH, KV. Multi-head: 5 x 7 heads is more than one head group of the block schedule, the last one partial.
    // Grouped-query: ratios 4 (Llama 3's 32 / 8), 8, 2 (even ratios: the forward's blocks of two query heads, one
    // such block a group at 2) and 3 (not a power of two: one head a block), T = 2048 as Llama 3 trains, T = 1000
    // and 4097 (not multiples of any block: 4097 leaves a last block of one row), T = 8192 (the longest Llama 3
    // context); KV = NH at T = 1000 too. `small`: the shapes of up to 130 rows (compute-sanitizer).
    const int shapes[][4] = {{3, 1, 2, 2},     {2, 7, 3, 3},      {2, 64, 2, 2},   {3, 100, 1, 1},
                             {5, 130, 7, 7},   {1, 257, 3, 3},    {1, 1024, 2, 2}, {2, 130, 4, 1},
                             {3, 64, 6, 2},    {2, 100, 6, 3},    {2, 1000, 4, 4}, {2, 1000, 8, 2},
                             {1, 2048, 32, 8}, {1, 2048, 8, 1},   {1, 4097, 8, 1}, {1, 8192, 4, 1}};
    if (!bench_only) {
        for (int HS : {64, 128}) {
            for (auto &s : shapes) {
                if (small && s[1] > 130) { continue; }
                test_shape<float>(s[0], s[1], s[2], s[3], HS);
                test_shape<bf16>(s[0], s[1], s[2], s[3], HS);
            }
        }
    }
    if (!small) {
        bench_shape<bf16>(32, 1024, 12, 12, 64);
        bench_shape<bf16>(8, 1024, 25, 25, 64);
        bench_shape<bf16>(16, 1024, 12, 12, 128);
        bench_shape<float>(4, 1024, 12, 12, 64);
        bench_shape<bf16>(4, 2048, 32, 8, 64);   // Llama 3.2 1B
        bench_shape<bf16>(1, 8192, 32, 8, 128);  // Llama 3.1 8B at its full context
    }
    printf("%s: %d failed checks\n", g_test_failures ? "FAIL" : "PASS", g_test_failures);
    return test_exit();
}
