/*
 * attention_bits.cu: a 64-bit checksum (llmc/utils.h) of everything llmc/attention.cuh's interface writes (out, lse,
 * dqkv, the QKV bias gradient) for fixed inputs, one line per shape and precision, at multi-head shapes (KV = NH:
 * GPT-2's) and grouped-query ones (Llama's). dev/attention_bits.sh builds it against this tree's llmc/ and against an
 * earlier revision's and compares the lines, so that a change to the kernels can be held to the bits they gave before.
 *   built with -DATTENTION_BEFORE_GQA against headers from before grouped-query attention, whose interface takes no
 *   KV argument (the grouped-query shapes are left out), and with -DATTENTION_BEFORE_ROPE against headers whose
 *   backward takes no RoPE tables
 */
#include <stdio.h>

#include <vector>

#include "llmc/attention.cuh"

#ifdef ATTENTION_BEFORE_ROPE
#define ROPE_ARG
#else
#define ROPE_ARG RopeTables{},
#endif
#ifdef ATTENTION_BEFORE_GQA
#define KV_ARG(KV)
#define WORKSPACE_BYTES(T, B, Tlen, NH, KV, HS) attention_backward_workspace_bytes<T>(B, Tlen, NH, HS)
#else
#define KV_ARG(KV) KV,
#define WORKSPACE_BYTES(T, B, Tlen, NH, KV, HS) attention_backward_workspace_bytes<T>(B, Tlen, NH, KV, HS)
#endif

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rand_uniform(float lo, float hi) {
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return lo + (float)((double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 * (hi - lo));
}

template <typename T> static T from_float_host(float x);
template <> float from_float_host<float>(float x) { return x; }
template <> bf16 from_float_host<bf16>(float x) { return __float2bfloat16_rn(x); }

// The checksum of n elements at device address d.
template <typename E> static unsigned long long device_checksum(const E *d, size_t n) {
    std::vector<E> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(E), cudaMemcpyDeviceToHost));
    Checksum c;
    checksum_init(&c);
    checksum_update(&c, h.data(), n * sizeof(E));
    return (unsigned long long)checksum_final(&c);
}

template <typename T> static void digest(int B, int Tlen, int NH, int KV, int HS) {
    const size_t n_out = (size_t)B * Tlen * NH * HS, n_qkv = n_out / NH * (NH + 2 * KV), n_lse = (size_t)B * NH * Tlen;
    const size_t n_bias = (size_t)(NH + 2 * KV) * HS;
    std::vector<T> h_qkv(n_qkv), h_dout(n_out);
    for (auto &e : h_qkv) { e = from_float_host<T>(rand_uniform(-2.0f, 2.0f)); }
    for (auto &e : h_dout) { e = from_float_host<T>(rand_uniform(-1.0f, 1.0f)); }
    T *qkv, *dout, *out, *dqkv;
    float *lse, *dbias;
    void *ws;
    cudaCheck(cudaMalloc(&qkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(T)));
    cudaCheck(cudaMalloc(&dout, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&out, n_out * sizeof(T)));
    cudaCheck(cudaMalloc(&lse, n_lse * sizeof(float)));
    cudaCheck(cudaMalloc(&dbias, n_bias * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, WORKSPACE_BYTES(T, B, Tlen, NH, KV, HS)));
    cudaCheck(cudaMemcpy(qkv, h_qkv.data(), n_qkv * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h_dout.data(), n_out * sizeof(T), cudaMemcpyHostToDevice));
    attention_forward<T>(out, lse, qkv, B, Tlen, NH, KV_ARG(KV) HS, 0);
    attention_backward<T>(dqkv, dbias, dout, out, qkv, lse, ROPE_ARG ws, B, Tlen, NH, KV_ARG(KV) HS, 0, 0);
    cudaCheck(cudaDeviceSynchronize());
    printf("%s B=%d T=%d NH=%d KV=%d HS=%d out %016llx lse %016llx dqkv %016llx dbias %016llx\n", TypeInfo<T>::name, B,
           Tlen, NH, KV, HS, device_checksum(out, n_out), device_checksum(lse, n_lse), device_checksum(dqkv, n_qkv),
           device_checksum(dbias, n_bias));
    for (void *p : {(void *)qkv, (void *)dqkv, (void *)dout, (void *)out, (void *)lse, (void *)dbias, ws}) {
        cudaCheck(cudaFree(p));
    }
}

int main(void) {
    // B, T, NH, KV, HS: GPT-2's benchmark shapes (124M, 1558M, head size 128), T not a multiple of any block, and
    // grouped-query ones: Llama-3.2-1B's and 3B's heads at T = 2048, groups of 2 and 3, a partial last block
    const int shapes[][5] = {{4, 1024, 12, 12, 64}, {2, 1024, 25, 25, 64}, {2, 1024, 12, 12, 128}, {3, 100, 7, 7, 64},
                             {1, 257, 3, 3, 128},   {1, 2048, 32, 8, 64},  {1, 2048, 24, 8, 128},  {2, 300, 8, 4, 64},
                             {1, 200, 6, 2, 128}};
    for (auto &s : shapes) {
#ifdef ATTENTION_BEFORE_GQA
        if (s[3] != s[2]) { continue; }
#endif
        digest<float>(s[0], s[1], s[2], s[3], s[4]);
        digest<bf16>(s[0], s[1], s[2], s[3], s[4]);
    }
    return 0;
}
