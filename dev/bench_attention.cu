/*
 * bench_attention.cu: the bf16 attention of llmc/attention.cuh timed through its interface and kernel by kernel
 * (median of CUDA-event timings after warm-up, on random inputs); dev/bench_attention.py times PyTorch's flash
 * attention beside it.
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. dev/bench_attention.cu -o /tmp/bench_attention
 *   /tmp/bench_attention [B T NH HS [KV]]      (default 32 1024 12 64, KV = NH: GPT-2's multi-head attention; e.g.
 *                                              4 2048 32 64 8 is Llama 3.2 1B's grouped-query attention)
 *   /tmp/bench_attention --energy [B T NH HS [KV]]   a layer's forward and backward back to back at the power cap: joules
 *                                  a layer and per TFLOP (dev/cuda_energy.cuh; dev/bench_attention.py --energy for
 *                                  PyTorch's)
 */
#include <vector>

#include "dev/cuda_energy.cuh"
#include "llmc/attention.cuh"
#include "test/cuda_timing.cuh"
#include "test/test_util.h"

struct Bufs {
    int B, T, NH, HS, KV;
    bf16 *qkv, *dout, *out, *dqkv;
    float *lse, *dsum;
};

static double g_flops; // causal forward FLOPs of the shape

// Each kernel timed alone with the arguments training gives it (attention.cuh's launchers: B NH ceil(T / 64)
// warpgroups, two query heads of a group a block where the group is even, and B KV blocks for dK/dV). TFLOP/s counts
// the forward's products, and the backward as 7 products split 3 (dQ, which also takes D) to 4 (dK/dV): the same
// whatever KV is (a query head's products are the same; dK/dV's blocks take NH / KV heads each).
template <int HS> static void time_kernels(Bufs &b) {
    float fwd = median_ms([&] { attention_forward_bf16<HS>(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KV, 0); });
    float dq = median_ms([&] {
        attention_backward_dq_bf16<HS>(b.dqkv, nullptr, b.dsum, b.dout, b.out, b.qkv, b.lse, RopeTables{}, b.B, b.T,
                                       b.NH, b.KV, 0);
    });
    float dkdv = median_ms([&] {
        attention_backward_dkdv_bf16<HS>(b.dqkv, nullptr, b.dsum, b.dout, b.qkv, b.lse, RopeTables{}, b.B, b.T, b.NH,
                                         b.KV, 0);
    });
    cudaCheckLaunch();
    printf("forward %8.3f ms %6.1f TFLOP/s\n", fwd, g_flops / fwd * 1e-9);
    printf("dq      %8.3f ms %6.1f TFLOP/s\n", dq, 1.5 * g_flops / dq * 1e-9);
    printf("dkdv    %8.3f ms %6.1f TFLOP/s\n", dkdv, 2.0 * g_flops / dkdv * 1e-9);
}

template <int HS> static void bench(Bufs &b) {
    float fwd = median_ms([&] { attention_forward<bf16>(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KV, HS, 0); });
    float bwd = median_ms([&] {
        attention_backward<bf16>(b.dqkv, nullptr, b.dout, b.out, b.qkv, b.lse, RopeTables{}, b.dsum, b.B, b.T, b.NH,
                                 b.KV, HS, 0, 0);
    });
    printf("interface: fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s\n", fwd, g_flops / fwd * 1e-9, bwd,
           2.5 * g_flops / bwd * 1e-9);
    time_kernels<HS>(b); // after the interface's calls set the kernels' shared-memory limits and wrote D
}

// A layer's attention as training calls it, the forward (a forward's products) and the backward (2.5 forwards')
// alone, then both back to back.
template <int HS> static void energy_layer(Bufs &b) {
    Nvml n = nvml_open();
    energy_idle(n);
    auto fwd = [&] { attention_forward<bf16>(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KV, HS, 0); };
    auto bwd = [&] {
        attention_backward<bf16>(b.dqkv, nullptr, b.dout, b.out, b.qkv, b.lse, RopeTables{}, b.dsum, b.B, b.T, b.NH,
                                 b.KV, HS, 0, 0);
    };
    energy(n, "attention forward", fwd, (cudaStream_t)0, g_flops * 1e-12, "TFLOP");
    energy(n, "attention backward", bwd, (cudaStream_t)0, 2.5 * g_flops * 1e-12, "TFLOP");
    energy(n, "attention layer", [&] { fwd(), bwd(); }, (cudaStream_t)0, 3.5 * g_flops * 1e-12, "TFLOP");
}

int main(int argc, char **argv) {
    const bool energy_mode = argc > 1 && strcmp(argv[1], "--energy") == 0;
    if (energy_mode) { argc--, argv++; }
    Bufs b = {32, 1024, 12, 64, 12};
    if (argc >= 5) { b = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[3])}; }
    if (argc >= 6) { b.KV = atoi(argv[5]); }
    attention_check_args(b.B, b.T, b.NH, b.KV, b.HS, 0); // one line saying what is wrong, before any work
    const size_t n_out = (size_t)b.B * b.T * b.NH * b.HS, n_qkv = n_out / b.NH * (b.NH + 2 * b.KV);
    const size_t n_lse = (size_t)b.B * b.NH * b.T;
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
    cudaCheck(cudaMemcpy(b.dout, h.data() + n_qkv - n_out, n_out * sizeof(bf16), cudaMemcpyHostToDevice));
    printf("B=%d T=%d NH=%d HS=%d KV=%d\n", b.B, b.T, b.NH, b.HS, b.KV);
    if (energy_mode) {
        if (b.HS == 64) { energy_layer<64>(b); } else { energy_layer<128>(b); }
    } else if (b.HS == 64) {
        bench<64>(b);
    } else {
        bench<128>(b);
    }
    return 0;
}
