/*
 * test_swiglu.cu: llmc/swiglu.cuh against an fp64 reference on the host, in fp32 and bf16, at MLP widths F = 8192
 * (Llama 3.2 1B and 3B), 14336 (Llama 3.1 8B) and 1000 (an odd multiple of 8: an odd number of packs a half, which
 * no thread count divides), over 257 rows. Gates span [-10, 10], so the sigmoid saturates both ways. Checks:
 * - forward: out against silu(gate) * up; every element written (outputs poisoned with NaN first);
 * - backward: dgate and dup against dout * up * s (1 + g (1 - s)) and dout * silu(g), s = sigmoid(g); written; and
 *   the forward's output, which it writes again (the down projection's weight gradient reads it), the same bits as
 *   the forward's;
 * - the backward in place (dinp = inp) gives the same bits as into another buffer.
 * Tolerances (max |gpu - ref| / max |ref| per tensor): fp32 1e-5, the fp32 parity target (most elements are within a
 * few 2^-24, but near g = 10 s rounds to within 1.2e-7 of 1, and 1 - s carries that absolute error, times |g|, into
 * silu': up to ~1e-6 of the largest dgate); bf16 4e-3 (the result rounded once to bf16: 2^-9 = 2e-3 relative). A
 * wrong half, pack or formula shows as O(1). Then the time of the forward and the backward at Llama 3.2 1B's MLP
 * (8192 tokens, F 8192, bf16), and of the FP8 blocks' casts that fuse them (llmc/fp8.cuh: swiglu(fch) to E4M3 and
 * [dgate | dup] to E5M2, row-major and transposed) beside the passes they replace (the kernel, then a plain cast).
 */
#include <string.h>

#include <vector>

#include "llmc/fp8.cuh"
#include "llmc/swiglu.cuh"
#include "test/cuda_timing.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define TOL_F32 1e-5
#define TOL_BF16 4e-3
#define GATE_RANGE 10.0f

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rand_uniform(void) { // (-1, 1)
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static size_t count_nonfinite(const std::vector<double> &a) {
    size_t n = 0;
    for (double x : a) { n += !isfinite(x); }
    return n;
}

template <typename T> static void test_width(int rows, int F, double tol) {
    const size_t n_in = (size_t)rows * 2 * F, n_out = (size_t)rows * F;
    std::vector<T> inp(n_in), dout(n_out);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < 2 * F; c++) {
            const float scale = c < F ? GATE_RANGE : 2.0f; // gate, then up
            inp[(size_t)r * 2 * F + c] = to_type<T>(scale * rand_uniform());
        }
    }
    for (auto &e : dout) { e = to_type<T>(rand_uniform()); }
    char label[64];
    snprintf(label, sizeof(label), "swiglu %s rows %d F %d", TypeInfo<T>::name, rows, F);

    std::vector<double> x = to_f64(inp), dy = to_f64(dout);
    std::vector<double> ref_out(n_out), ref_din(n_in);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < F; c++) {
            const size_t gi = (size_t)r * 2 * F + c, ui = gi + F, oi = (size_t)r * F + c;
            const double g = x[gi], u = x[ui], s = 1.0 / (1.0 + exp(-g));
            ref_out[oi] = g * s * u;
            ref_din[gi] = dy[oi] * u * s * (1.0 + g * (1.0 - s));
            ref_din[ui] = dy[oi] * g * s;
        }
    }

    T *d_inp = to_device(inp), *d_dout = to_device(dout);
    T *d_out = (T *)cuda_alloc(n_out * sizeof(T), "out"), *d_din = (T *)cuda_alloc(n_in * sizeof(T), "dinp");
    T *d_out2 = (T *)cuda_alloc(n_out * sizeof(T), "out again");
    // 0xff bytes are NaN in fp32 and in bf16
    cudaCheck(cudaMemsetAsync(d_out, 0xff, n_out * sizeof(T), g_cuda.stream));
    cudaCheck(cudaMemsetAsync(d_out2, 0xff, n_out * sizeof(T), g_cuda.stream));
    cudaCheck(cudaMemsetAsync(d_din, 0xff, n_in * sizeof(T), g_cuda.stream));
    swiglu_forward(d_out, d_inp, rows, F, g_cuda.stream);
    swiglu_backward(d_din, d_out2, d_dout, d_inp, rows, F, g_cuda.stream);
    std::vector<T> din_raw = to_host(d_din, n_in), out_raw = to_host(d_out, n_out), out2_raw = to_host(d_out2, n_out);
    std::vector<double> out = to_f64(out_raw), din = to_f64(din_raw);
    char name[200];
    snprintf(name, sizeof(name), "%s written", label);
    check(count_nonfinite(out) + count_nonfinite(din) == 0, name, "%zu output elements not written (still NaN)",
          count_nonfinite(out) + count_nonfinite(din));
    expect_close(label, "forward out", out, ref_out, tol);
    snprintf(name, sizeof(name), "%s backward out is the forward's", label);
    check(memcmp(out2_raw.data(), out_raw.data(), n_out * sizeof(T)) == 0, name,
          "the backward's silu(gate) * up differs from the forward's bits");
    std::vector<double> dgate, dup, ref_dgate, ref_dup;
    for (int r = 0; r < rows; r++) { // the halves of each row apart: their scales differ
        const size_t row = (size_t)r * 2 * F;
        dgate.insert(dgate.end(), din.begin() + row, din.begin() + row + F);
        dup.insert(dup.end(), din.begin() + row + F, din.begin() + row + 2 * F);
        ref_dgate.insert(ref_dgate.end(), ref_din.begin() + row, ref_din.begin() + row + F);
        ref_dup.insert(ref_dup.end(), ref_din.begin() + row + F, ref_din.begin() + row + 2 * F);
    }
    expect_close(label, "backward dgate", dgate, ref_dgate, tol);
    expect_close(label, "backward dup", dup, ref_dup, tol);

    // in place: the gradient over the forward's input
    cudaCheck(cudaMemsetAsync(d_out2, 0xff, n_out * sizeof(T), g_cuda.stream));
    swiglu_backward(d_inp, d_out2, d_dout, d_inp, rows, F, g_cuda.stream);
    std::vector<T> in_place = to_host(d_inp, n_in), out2_in_place = to_host(d_out2, n_out);
    snprintf(name, sizeof(name), "%s backward in place", label);
    check(memcmp(in_place.data(), din_raw.data(), n_in * sizeof(T)) == 0 &&
              memcmp(out2_in_place.data(), out_raw.data(), n_out * sizeof(T)) == 0,
          name, "dinp = inp gives other bits than a separate dinp");
    for (void *p : {(void *)d_inp, (void *)d_dout, (void *)d_out, (void *)d_out2, (void *)d_din}) {
        cudaCheck(cudaFree(p));
    }
}

static void bench(int rows, int F) {
    const size_t n_in = (size_t)rows * 2 * F, n_out = (size_t)rows * F;
    bf16 *inp = (bf16 *)cuda_alloc(n_in * sizeof(bf16), "inp"), *out = (bf16 *)cuda_alloc(n_out * sizeof(bf16), "out");
    bf16 *dout = (bf16 *)cuda_alloc(n_out * sizeof(bf16), "dout");
    bf16 *din = (bf16 *)cuda_alloc(n_in * sizeof(bf16), "din");
    fill_random<<<grid_for(n_in, 256), 256, 0, g_cuda.stream>>>(inp, n_in, 1);
    fill_random<<<grid_for(n_out, 256), 256, 0, g_cuda.stream>>>(dout, n_out, 2);
    cudaCheckLaunch();
    float fwd = median_ms([&] { swiglu_forward(out, inp, rows, F, g_cuda.stream); }, g_cuda.stream);
    float bwd = median_ms([&] { swiglu_backward(din, out, dout, inp, rows, F, g_cuda.stream); }, g_cuda.stream);
    const double fwd_bytes = 3.0 * n_out * sizeof(bf16), bwd_bytes = 6.0 * n_out * sizeof(bf16);
    printf("bench swiglu bf16 rows=%d F=%d: forward %.1f us %.0f GB/s, backward (h written again) %.1f us %.0f GB/s\n",
           rows, F, fwd * 1e3, fwd_bytes / (fwd * 1e-3) / 1e9, bwd * 1e3, bwd_bytes / (bwd * 1e-3) / 1e9);

    // the FP8 blocks' casts (delayed scaling, recording, row-major and transposed), fused and as the passes before
    Fp8Recipe r = {FP8_DELAYED, 16, 0, 1.0f, 0, 0};
    Fp8Device d;
    fp8_device_init(&d, &r, 1);
    d.steps = 1;
    uint8_t *q = (uint8_t *)cuda_alloc(n_in, "codes"), *q_t = (uint8_t *)cuda_alloc(n_in, "transposed codes");
    int th = fp8_tensor(0, LIN_FCPROJ, FP8_INPUT), tg = fp8_tensor(0, LIN_FC, FP8_GRAD);
    auto cast = [&](int t, auto src, int cols) {
        Fp8CastOut o = {q, q_t, rows, 0, NULL};
        fp8_cast(&d, t, src, rows, cols, o, true, FP8_SCALE_RECIPE, (float *)NULL, g_cuda.stream);
    };
    float fused_fwd = median_ms([&] { cast(th, Fp8SwigluOf<bf16>{inp, F}, F); }, g_cuda.stream);
    float fused_bwd = median_ms([&] { cast(tg, Fp8DswigluOf<bf16>{dout, inp, F}, 2 * F); }, g_cuda.stream);
    float cast_fwd = median_ms([&] { cast(th, Fp8Plain<bf16>{out}, F); }, g_cuda.stream);
    float cast_bwd = median_ms([&] { cast(tg, Fp8Plain<bf16>{din}, 2 * F); }, g_cuda.stream);
    // bytes at least: bf16 in, two FP8 copies out
    const double ffwd_bytes = n_out * (2.0 * sizeof(bf16) + 2.0), fbwd_bytes = n_out * (3.0 * sizeof(bf16) + 4.0);
    printf("bench swiglu fp8 casts rows=%d F=%d: forward fused %.1f us %.0f GB/s (kernel + cast %.1f us), backward "
           "fused %.1f us %.0f GB/s (kernel + cast %.1f us)\n",
           rows, F, fused_fwd * 1e3, ffwd_bytes / (fused_fwd * 1e-3) / 1e9, (fwd + cast_fwd) * 1e3, fused_bwd * 1e3,
           fbwd_bytes / (fused_bwd * 1e-3) / 1e9, (bwd + cast_bwd) * 1e3);
    for (void *p : {(void *)inp, (void *)out, (void *)dout, (void *)din, (void *)q, (void *)q_t}) {
        cudaCheck(cudaFree(p));
    }
}

// bad arguments fail with one line, before any CUDA call (in a child, before this process touches CUDA)
static void width_1004_bf16(void *) { swiglu_forward<bf16>(nullptr, nullptr, 4, 1004, 0); }

int main(void) {
    expect_child_fails(width_1004_bf16, nullptr, "swiglu rejects F 1004 in bf16", "multiple of 8");
    cuda_context_init();
    for (int F : {8192, 14336, 1000}) {
        test_width<float>(257, F, TOL_F32);
        test_width<bf16>(257, F, TOL_BF16);
    }
    bench(8192, 8192);
    return test_exit();
}
