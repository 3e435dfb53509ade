/*
 * bench_attention.cu: tile-shape sweep of the bf16 attention kernels of llmc/attention.cuh, each kernel timed
 * alone (median of CUDA-event timings after warm-up) and its output checked against the shipped configuration.
 * The numbers that chose AttnBf16Tiles; dev/bench_attention.py times PyTorch's flash attention beside it.
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. dev/bench_attention.cu -o /tmp/bench_attention
 *   /tmp/bench_attention [B T NH HS [quick]]      (default 32 1024 12 64; quick: the shipped tiles only)
 */
#include <algorithm>
#include <vector>

#include "llmc/attention.cuh"
#include "test/test_util.h"

#define WARMUP 5
#define REPS 30

template <typename F> static float median_ms(F fn) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    for (int i = 0; i < WARMUP; i++) { fn(); }
    std::vector<float> ms(REPS);
    for (int i = 0; i < REPS; i++) {
        cudaCheck(cudaEventRecord(e0));
        fn();
        cudaCheck(cudaEventRecord(e1));
        cudaCheck(cudaEventSynchronize(e1));
        cudaCheck(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    std::sort(ms.begin(), ms.end());
    return ms[REPS / 2];
}

struct Bufs {
    int B, T, NH, HS;
    bf16 *qkv, *dout, *out, *dqkv;
    float *lse, *dsum;
    std::vector<float> ref_out, ref_dqkv; // from the shipped configuration
};

static std::vector<float> fetch(const bf16 *d, size_t n) {
    std::vector<bf16> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) { f[i] = __bfloat162float(h[i]); }
    return f;
}

// max rel err of the q (which = 0), k (1) or v (2) part of dqkv against the reference; which < 0: all of out.
static double err_vs_ref(Bufs &b, int which) {
    size_t n_out = (size_t)b.B * b.T * b.NH * b.HS;
    if (which < 0) { return max_rel_err(fetch(b.out, n_out).data(), b.ref_out.data(), n_out); }
    std::vector<float> got = fetch(b.dqkv, 3 * n_out), g, r;
    size_t w = (size_t)b.NH * b.HS;
    for (size_t row = 0; row < (size_t)b.B * b.T; row++) {
        g.insert(g.end(), got.begin() + (row * 3 + which) * w, got.begin() + (row * 3 + which + 1) * w);
        r.insert(r.end(), b.ref_dqkv.begin() + (row * 3 + which) * w, b.ref_dqkv.begin() + (row * 3 + which + 1) * w);
    }
    return max_rel_err(g.data(), r.data(), g.size());
}

static double g_flops; // causal forward FLOPs of the shape
static bool g_quick;   // time the shipped configuration only

// One kernel of each role timed alone, with the role's arguments, then its output checked against the shipped
// configuration's; `rows` per block (grid: B NH ceil(T / rows)), `threads` per block, `smem` dynamic shared bytes.
// TFLOP/s counts the forward's products, and the backward as 7 products split 4 (dK/dV) to 3 (dQ, which also takes D).
using FwdKernel = void (*)(bf16 *, float *, const bf16 *, int, int, float);
using DkdvKernel = void (*)(bf16 *, float *, const bf16 *, const bf16 *, const float *, const float *, int, int, float,
                            float);
using DqKernel = void (*)(bf16 *, float *, float *, const bf16 *, const bf16 *, const bf16 *, const float *, int, int,
                          float, float);

static int grid_of(const Bufs &b, int rows) { return b.B * b.NH * ((b.T + rows - 1) / rows); }

static void time_fwd(Bufs &b, const char *label, FwdKernel k, int rows, int threads, int smem) {
    attn_set_smem(k, smem);
    cudaCheck(cudaMemset(b.out, 0xff, (size_t)b.B * b.T * b.NH * b.HS * sizeof(bf16)));
    const float scale_log2 = ATTN_LOG2E / sqrtf((float)b.HS);
    float ms = median_ms([&] { k<<<grid_of(b, rows), threads, smem>>>(b.out, b.lse, b.qkv, b.T, b.NH, scale_log2); });
    cudaCheckLaunch();
    printf("fwd  %-32s %8.3f ms %6.1f TFLOP/s  err %.1e\n", label, ms, g_flops / ms * 1e-9, err_vs_ref(b, -1));
    // the shipped forward's out and lse back: the backward kernels read them, and their errors are against its
    attention_forward<bf16>(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.HS, 0);
}

static void time_dkdv(Bufs &b, const char *label, DkdvKernel k, int rows, int threads, int smem) {
    attn_set_smem(k, smem);
    const float scale = 1.0f / sqrtf((float)b.HS);
    float ms = median_ms([&] {
        k<<<grid_of(b, rows), threads, smem>>>(b.dqkv, nullptr, b.dout, b.qkv, b.lse, b.dsum, b.T, b.NH,
                                               scale * ATTN_LOG2E, scale);
    });
    cudaCheckLaunch();
    printf("dkdv %-32s %8.3f ms %6.1f TFLOP/s  err dk %.1e dv %.1e\n", label, ms, 2.0 * g_flops / ms * 1e-9,
           err_vs_ref(b, 1), err_vs_ref(b, 2));
}

static void time_dq(Bufs &b, const char *label, DqKernel k, int rows, int threads, int smem) {
    attn_set_smem(k, smem);
    const float scale = 1.0f / sqrtf((float)b.HS);
    float ms = median_ms([&] {
        k<<<grid_of(b, rows), threads, smem>>>(b.dqkv, nullptr, b.dsum, b.dout, b.out, b.qkv, b.lse, b.T, b.NH,
                                               scale * ATTN_LOG2E, scale);
    });
    cudaCheckLaunch();
    printf("dq   %-32s %8.3f ms %6.1f TFLOP/s  err dq %.1e\n", label, ms, 1.5 * g_flops / ms * 1e-9,
           err_vs_ref(b, 0));
}

// the mma.sync kernels at a tile shape
template <int HS, int W, int MT, int BKV> static void fwd_variant(Bufs &b) {
    char label[64];
    snprintf(label, sizeof(label), "warps=%d mt=%d bkv=%d", W, MT, BKV);
    time_fwd(b, label, attention_forward_bf16_kernel<HS, W, MT, BKV>, 16 * W * MT, W * WARP_SIZE,
             attn_fwd_smem_bytes<HS, W, MT, BKV>());
}
template <int HS, int W, int BQ> static void dkdv_variant(Bufs &b) {
    char label[64];
    snprintf(label, sizeof(label), "warps=%d bq=%d", W, BQ);
    time_dkdv(b, label, attention_backward_dkdv_bf16_kernel<HS, W, BQ>, 16 * W, W * WARP_SIZE,
              attn_dkdv_smem_bytes<HS, W, BQ>());
}
template <int HS, int W, int BKV> static void dq_variant(Bufs &b) {
    char label[64];
    snprintf(label, sizeof(label), "warps=%d bkv=%d", W, BKV);
    time_dq(b, label, attention_backward_dq_bf16_kernel<HS, W, BKV>, 16 * W, W * WARP_SIZE,
            attn_dq_smem_bytes<HS, W, BKV>());
}

// the wgmma kernels (HS = 64), one warpgroup a block
static void wgmma_kernels(Bufs &b) {
    time_fwd(b, "wgmma", attention_forward_wgmma_kernel, ATTN_WG_ROWS, 4 * WARP_SIZE, attn_fwd_wgmma_smem_bytes());
    time_dkdv(b, "wgmma 64 keys x 64 queries", attention_backward_dkdv_wgmma_kernel, ATTN_WG_ROWS, 4 * WARP_SIZE,
              attn_dkdv_wgmma_smem_bytes());
    time_dq(b, "wgmma 64 queries x 64 keys", attention_backward_dq_wgmma_kernel, ATTN_WG_ROWS, 4 * WARP_SIZE,
            attn_dq_wgmma_smem_bytes());
}

template <int HS> static void sweep(Bufs &b) {
    const size_t n_out = (size_t)b.B * b.T * b.NH * HS;
    auto full_fwd = [&] { attention_forward<bf16>(b.out, b.lse, b.qkv, b.B, b.T, b.NH, HS, 0); };
    auto full_bwd = [&] {
        attention_backward<bf16>(b.dqkv, nullptr, b.dout, b.out, b.qkv, b.lse, b.dsum, b.B, b.T, b.NH, HS, 0, 0);
    };
    float fwd = median_ms(full_fwd), bwd = median_ms(full_bwd);
    b.ref_out = fetch(b.out, n_out);
    b.ref_dqkv = fetch(b.dqkv, 3 * n_out);
    printf("shipped: fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s\n", fwd, g_flops / fwd * 1e-9, bwd,
           2.5 * g_flops / bwd * 1e-9);
    if (g_quick) { return; }
    if constexpr (HS == 64) {
        wgmma_kernels(b);
        fwd_variant<64, 4, 2, 64>(b); // mma.sync, as HS = 128 runs it
        dkdv_variant<64, 4, 64>(b);
        dq_variant<64, 4, 32>(b);
    } else {
        fwd_variant<128, 4, 1, 64>(b);
        fwd_variant<128, 8, 1, 64>(b);
        fwd_variant<128, 4, 1, 32>(b);
        dkdv_variant<128, 4, 32>(b);
        dkdv_variant<128, 8, 32>(b);
        dkdv_variant<128, 4, 16>(b);
        dq_variant<128, 4, 32>(b);
        dq_variant<128, 8, 32>(b);
        dq_variant<128, 4, 64>(b);
    }
}

int main(int argc, char **argv) {
    Bufs b = {32, 1024, 12, 64};
    if (argc >= 5) { b = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4])}; }
    g_quick = argc >= 6 && strcmp(argv[5], "quick") == 0;
    if (b.HS != 64 && b.HS != 128) { fail("head size must be 64 or 128"); }
    const size_t n_qkv = (size_t)b.B * b.T * 3 * b.NH * b.HS, n_out = n_qkv / 3, n_lse = (size_t)b.B * b.NH * b.T;
    g_flops = 4.0 * b.B * b.NH * (double)b.T * b.T * b.HS / 2;
    std::vector<bf16> h(n_qkv);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n_qkv; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = __float2bfloat16_rn((float)((x >> 11) * (1.0 / 9007199254740992.0)) * 4.0f - 2.0f);
    }
    cudaCheck(cudaMalloc(&b.qkv, n_qkv * sizeof(bf16)));
    cudaCheck(cudaMalloc(&b.dqkv, n_qkv * sizeof(bf16)));
    cudaCheck(cudaMalloc(&b.dout, n_out * sizeof(bf16)));
    cudaCheck(cudaMalloc(&b.out, n_out * sizeof(bf16)));
    cudaCheck(cudaMalloc(&b.lse, n_lse * sizeof(float)));
    cudaCheck(cudaMalloc(&b.dsum, n_lse * sizeof(float)));
    cudaCheck(cudaMemcpy(b.qkv, h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(b.dout, h.data() + n_out, n_out * sizeof(bf16), cudaMemcpyHostToDevice));
    printf("B=%d T=%d NH=%d HS=%d\n", b.B, b.T, b.NH, b.HS);
    if (b.HS == 64) { sweep<64>(b); } else { sweep<128>(b); }
    return 0;
}
