/*
 * test_attention.cu: llmc/attention.cuh against a naive fp64 reference on the GPU, then its speed.
 *
 * For each shape and precision: random qkv and dout (fixed seed, never zeros); outputs poisoned with NaN before
 * every call and checked fully written; out, lse, dq, dk, dv compared by max|a - b| / max|ref| per tensor; the
 * backward's fused bias gradient against the column sums of the dqkv it stored (fp64 on the host), and with
 * accumulate against twice itself; the backward run twice must be bitwise identical (no float atomics). Then the
 * median time of the forward and the backward at the GPT-2 benchmark shapes. Prints PASS/FAIL lines; exits
 * non-zero on any failure.
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
// (a wrong mask or a missed tile shows up as O(1)).
#define TOL_BF16 1e-2
// The bias gradient sums the stored dqkv in fp32: against an fp64 sum of the same values only the fp32 rounding of
// the sum differs, in either precision.
#define TOL_BIAS 1e-4

// ----------------------------------------------------------------------------------------------------------------
// the reference: one thread per row, fp64, straight from the definitions

__device__ const double *ref_row(const double *qkv, int b, int t, int which, int h, int Tlen, int NH, int HS) {
    return qkv + (((size_t)b * Tlen + t) * 3 + which) * NH * HS + (size_t)h * HS;
}
__device__ double ref_dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) { s += a[i] * b[i]; }
    return s;
}

// out (B, T, NH, HS), lse (B, NH, T), D (B, NH, T) = rowsum(dout * out)
__global__ void ref_forward(double *out, double *lse, double *dsum, const double *qkv, const double *dout, int B,
                            int Tlen, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * Tlen) { return; }
    int i = idx % Tlen, h = (idx / Tlen) % NH, b = idx / (Tlen * NH);
    double scale = 1.0 / sqrt((double)HS), m = -INFINITY, l = 0.0, o[128] = {};
    const double *q = ref_row(qkv, b, i, 0, h, Tlen, NH, HS);
    for (int j = 0; j <= i; j++) { m = fmax(m, scale * ref_dot(q, ref_row(qkv, b, j, 1, h, Tlen, NH, HS), HS)); }
    for (int j = 0; j <= i; j++) {
        double p = exp(scale * ref_dot(q, ref_row(qkv, b, j, 1, h, Tlen, NH, HS), HS) - m);
        const double *v = ref_row(qkv, b, j, 2, h, Tlen, NH, HS);
        l += p;
        for (int d = 0; d < HS; d++) { o[d] += p * v[d]; }
    }
    double *orow = out + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
    const double *dorow = dout + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
    double D = 0.0;
    for (int d = 0; d < HS; d++) {
        orow[d] = o[d] / l;
        D += orow[d] * dorow[d];
    }
    lse[idx] = m + log(l);
    dsum[idx] = D;
}

// mode 0: dq of query row idx; mode 1: dk and dv of key row idx. Outputs (B, T, NH, HS).
__global__ void ref_backward(double *dq, double *dk, double *dv, const double *qkv, const double *dout,
                             const double *lse, const double *dsum, int B, int Tlen, int NH, int HS, int mode) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * Tlen) { return; }
    int r = idx % Tlen, h = (idx / Tlen) % NH, b = idx / (Tlen * NH);
    size_t bh = (size_t)b * NH + h;
    double scale = 1.0 / sqrt((double)HS), a1[128] = {}, a2[128] = {};
    int lo = mode == 0 ? 0 : r, hi = mode == 0 ? r : Tlen - 1; // the other index ranges over [lo, hi]
    for (int x = lo; x <= hi; x++) {
        int i = mode == 0 ? r : x, j = mode == 0 ? x : r;
        const double *q = ref_row(qkv, b, i, 0, h, Tlen, NH, HS), *k = ref_row(qkv, b, j, 1, h, Tlen, NH, HS);
        const double *v = ref_row(qkv, b, j, 2, h, Tlen, NH, HS);
        const double *d_o = dout + ((size_t)b * Tlen + i) * NH * HS + (size_t)h * HS;
        double p = exp(scale * ref_dot(q, k, HS) - lse[bh * Tlen + i]);
        double ds = p * (ref_dot(d_o, v, HS) - dsum[bh * Tlen + i]);
        for (int d = 0; d < HS; d++) {
            if (mode == 0) {
                a1[d] += ds * k[d];
            } else {
                a1[d] += ds * q[d];
                a2[d] += p * d_o[d];
            }
        }
    }
    size_t o = ((size_t)b * Tlen + r) * NH * HS + (size_t)h * HS;
    for (int d = 0; d < HS; d++) {
        if (mode == 0) {
            dq[o + d] = scale * a1[d];
        } else {
            dk[o + d] = scale * a1[d];
            dv[o + d] = a2[d];
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

// Slice `which` (0 q, 1 k, 2 v) of a (B, T, 3, NH, HS) tensor as (B, T, NH, HS).
static std::vector<float> slice_qkv(const std::vector<float> &a, int which, size_t rows, int NHHS) {
    std::vector<float> s(rows * NHHS);
    for (size_t r = 0; r < rows; r++) {
        std::copy(a.begin() + (r * 3 + which) * NHHS, a.begin() + (r * 3 + which + 1) * NHHS, s.begin() + r * NHHS);
    }
    return s;
}

static void check_close(const char *prec, const char *what, int B, int Tlen, int NH, int HS,
                        const std::vector<float> &got, const std::vector<float> &ref, double tol) {
    char name[160];
    snprintf(name, sizeof(name), "attention_%s_%s_B%d_T%d_NH%d_HS%d", prec, what, B, Tlen, NH, HS);
    double err = max_rel_err(got.data(), ref.data(), got.size());
    check(err <= tol, name, "max rel err %.3e > %.1e", err, tol);
    printf("  %-48s rel err %.3e\n", name, err);
}

template <typename T> static void test_shape(int B, int Tlen, int NH, int HS) {
    const char *prec = TypeInfo<T>::name;
    const double tol = sizeof(T) == 4 ? TOL_F32 : TOL_BF16;
    const size_t n_qkv = (size_t)B * Tlen * 3 * NH * HS, n_out = (size_t)B * Tlen * NH * HS;
    const size_t n_lse = (size_t)B * NH * Tlen, rows = (size_t)B * Tlen;

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
    T *qkv, *dout, *out, *dqkv;
    float *lse, *dbias;
    void *ws;
    double *rqkv, *rdout, *rout, *rlse, *rdsum, *rdq, *rdk, *rdv;
    cudaCheck(cudaMalloc(&qkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dout, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, n_lse * sizeof(float)));
    cudaCheck(cudaMalloc(&dbias, 3 * NH * HS * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, attention_backward_workspace_bytes<T>(B, Tlen, NH, HS)));
    cudaCheck(cudaMalloc(&rqkv, n_qkv * sizeof(double)));
    cudaCheck(cudaMalloc(&rdout, n_out * sizeof(double)));
    for (double **p : {&rout, &rdq, &rdk, &rdv}) { cudaCheck(cudaMalloc(p, n_out * sizeof(double))); }
    for (double **p : {&rlse, &rdsum}) { cudaCheck(cudaMalloc(p, n_lse * sizeof(double))); }
    cudaCheck(cudaMemcpy(qkv, h_qkv.data(), n_qkv * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h_dout.data(), n_out * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(rqkv, r_qkv.data(), n_qkv * sizeof(double), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(rdout, r_dout.data(), n_out * sizeof(double), cudaMemcpyHostToDevice));

    int rthreads = 64, rblocks = (int)((n_lse + rthreads - 1) / rthreads);
    ref_forward<<<rblocks, rthreads>>>(rout, rlse, rdsum, rqkv, rdout, B, Tlen, NH, HS);
    cudaCheckLaunch();
    for (int mode = 0; mode < 2; mode++) {
        ref_backward<<<rblocks, rthreads>>>(rdq, rdk, rdv, rqkv, rdout, rlse, rdsum, B, Tlen, NH, HS, mode);
        cudaCheckLaunch();
    }

    // 0xff bytes are NaN in fp32 and in bf16
    cudaCheck(cudaMemset(out, 0xff, n_out * sizeof(T)));
    cudaCheck(cudaMemset(lse, 0xff, n_lse * sizeof(float)));
    attention_forward<T>(out, lse, qkv, B, Tlen, NH, HS, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> g_out = download(out, n_out), g_lse = download(lse, n_lse);
    check_close(prec, "out", B, Tlen, NH, HS, g_out, download_double(rout, n_out), tol);
    check_close(prec, "lse", B, Tlen, NH, HS, g_lse, download_double(rlse, n_lse), tol);

    const size_t n_bias = (size_t)3 * NH * HS;
    std::vector<float> g_dqkv[2], g_bias[2];
    for (int rep = 0; rep < 2; rep++) {
        cudaCheck(cudaMemset(dqkv, 0xff, n_qkv * sizeof(T)));
        cudaCheck(cudaMemset(dbias, 0xff, n_bias * sizeof(float)));
        attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, ws, B, Tlen, NH, HS, 0, 0);
        cudaCheck(cudaDeviceSynchronize());
        g_dqkv[rep] = download(dqkv, n_qkv);
        g_bias[rep] = download(dbias, n_bias);
    }
    attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, ws, B, Tlen, NH, HS, 1, 0); // adds the same sums again
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> g_bias_acc = download(dbias, n_bias);
    const char *names[3] = {"dq", "dk", "dv"};
    double *refs[3] = {rdq, rdk, rdv};
    for (int w = 0; w < 3; w++) {
        check_close(prec, names[w], B, Tlen, NH, HS, slice_qkv(g_dqkv[0], w, rows, NH * HS),
                    download_double(refs[w], n_out), tol);
    }
    std::vector<double> sums(n_bias, 0.0);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < n_bias; c++) { sums[c] += g_dqkv[0][r * n_bias + c]; }
    }
    check_close(prec, "dbias", B, Tlen, NH, HS, g_bias[0], std::vector<float>(sums.begin(), sums.end()), TOL_BIAS);
    char name[160];
    size_t doubled = 0;
    for (size_t c = 0; c < n_bias; c++) { doubled += g_bias_acc[c] == 2.0f * g_bias[0][c]; }
    snprintf(name, sizeof(name), "attention_%s_dbias_accumulate_B%d_T%d_NH%d_HS%d", prec, B, Tlen, NH, HS);
    check(doubled == n_bias, name, "%zu of %zu bias sums are not twice the written ones", n_bias - doubled, n_bias);
    size_t unwritten = count_nonfinite(g_out) + count_nonfinite(g_lse) + count_nonfinite(g_dqkv[0]) +
                       count_nonfinite(g_bias[0]);
    snprintf(name, sizeof(name), "attention_%s_written_B%d_T%d_NH%d_HS%d", prec, B, Tlen, NH, HS);
    check(unwritten == 0, name, "%zu output elements not written (still NaN) or not finite", unwritten);
    snprintf(name, sizeof(name), "attention_%s_bwd_deterministic_B%d_T%d_NH%d_HS%d", prec, B, Tlen, NH, HS);
    check(memcmp(g_dqkv[0].data(), g_dqkv[1].data(), n_qkv * sizeof(float)) == 0 &&
              memcmp(g_bias[0].data(), g_bias[1].data(), n_bias * sizeof(float)) == 0,
          name, "two backward passes on the same inputs differ");

    for (void *p : {(void *)qkv, (void *)dqkv, (void *)dout, (void *)out, (void *)lse, (void *)dbias, ws, (void *)rqkv,
                    (void *)rdout, (void *)rout, (void *)rlse, (void *)rdsum, (void *)rdq, (void *)rdk, (void *)rdv}) {
        cudaCheck(cudaFree(p));
    }
}

template <typename T> static void bench_shape(int B, int Tlen, int NH, int HS) {
    const size_t n_qkv = (size_t)B * Tlen * 3 * NH * HS, n_out = (size_t)B * Tlen * NH * HS;
    std::vector<T> h(n_qkv);
    for (size_t i = 0; i < n_qkv; i++) { h[i] = to_type<T>(rand_uniform(-2.0f, 2.0f)); }
    T *qkv, *dout, *out, *dqkv;
    float *lse, *dbias;
    void *ws;
    cudaCheck(cudaMalloc(&qkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dout, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, (size_t)B * NH * Tlen * sizeof(float)));
    cudaCheck(cudaMalloc(&dbias, (size_t)3 * NH * HS * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, attention_backward_workspace_bytes<T>(B, Tlen, NH, HS)));
    cudaCheck(cudaMemcpy(qkv, h.data(), n_qkv * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h.data(), n_out * sizeof(T), cudaMemcpyHostToDevice)); // any non-zero values do
    float fwd = median_ms([&] { attention_forward<T>(out, lse, qkv, B, Tlen, NH, HS, 0); });
    // as training calls it: with the fused bias gradient
    float bwd = median_ms([&] { attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, ws, B, Tlen, NH, HS, 1, 0); });
    double flops = 4.0 * B * NH * (double)Tlen * Tlen * HS / 2; // causal forward; backward counts 2.5x
    printf("bench %-5s B=%-3d T=%-5d NH=%-3d HS=%-4d fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s\n",
           TypeInfo<T>::name, B, Tlen, NH, HS, fwd, flops / fwd * 1e-9, bwd, 2.5 * flops / bwd * 1e-9);
    for (void *p : {(void *)qkv, (void *)dqkv, (void *)dout, (void *)out, (void *)lse, (void *)dbias, ws}) {
        cudaCheck(cudaFree(p));
    }
}

// ----------------------------------------------------------------------------------------------------------------
// bad arguments fail loudly. Run in a child before this process touches CUDA (a forked CUDA context is unusable);
// the argument checks come before any CUDA call, so the child never makes one.

static void forward_head_size_96(void *) { attention_forward<bf16>(nullptr, nullptr, nullptr, 1, 8, 1, 96, 0); }
static void forward_misaligned(void *) {
    attention_forward<bf16>((bf16 *)nullptr + 1, nullptr, nullptr, 1, 8, 1, 64, 0);
}

static void check_fails(void (*fn)(void *), const char *name, const char *expect) {
    Child c;
    child_start(&c, fn, nullptr);
    child_wait(&c, now_s() + 30.0);
    check(c.status == 1 && strstr(c.err, expect) != nullptr, name, "exit %d, stderr: %s", c.status, c.err);
}

int main(int argc, char **argv) {
    bool bench_only = argc > 1 && strcmp(argv[1], "--bench") == 0;
    check_fails(forward_head_size_96, "attention_rejects_head_size_96", "head sizes 64 and 128");
    check_fails(forward_misaligned, "attention_rejects_misaligned_buffer", "16-byte aligned");
    // B, T, NH; 5 x 7 heads: more than one head group of the block schedule, the last one partial
    const int shapes[][3] = {{3, 1, 2}, {2, 7, 3}, {2, 64, 2}, {3, 100, 1}, {5, 130, 7}, {1, 257, 3}, {1, 1024, 2}};
    if (!bench_only) {
        for (int HS : {64, 128}) {
            for (auto &s : shapes) {
                test_shape<float>(s[0], s[1], s[2], HS);
                test_shape<bf16>(s[0], s[1], s[2], HS);
            }
        }
    }
    bench_shape<bf16>(32, 1024, 12, 64);
    bench_shape<bf16>(8, 1024, 25, 64);
    bench_shape<bf16>(16, 1024, 12, 128);
    bench_shape<float>(4, 1024, 12, 64);
    printf("%s: %d failed checks\n", g_test_failures ? "FAIL" : "PASS", g_test_failures);
    return test_exit();
}
