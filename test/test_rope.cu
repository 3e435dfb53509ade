/*
 * test_rope.cu: llmc/rope.cuh's forward against an fp64 reference on the host, in fp32 and bf16, at head sizes 64 and
 * 128, with as many KV heads as query heads and fewer (4 and 8 query heads a KV head), sequences of T = 2048 (two of
 * them where the second's positions must start again at 0). The tables are made here as Llama's are (theta 500000;
 * gpu_test_util.cuh's rope_test_tables) and hold more positions than T, so that a row taking its position from the
 * wrong sequence reads valid, wrong entries. The reference rotates with the same fp32 table entries. Checks (in place:
 * every element of the buffer is an input): the query and key heads against the reference, all rows and separately
 * the last 64 positions of each sequence (the largest angles); the value heads untouched, bit for bit. The backward's
 * rotation, which the attention backward applies as it stores dQ and dK, is checked there (test_attention.cu).
 * Tolerances (max |gpu - ref| / max |ref| per tensor): fp32 1e-6 (two products and a sum in fp32: a few units of
 * 2^-24 = 6e-8 of the largest element); bf16 4e-3 (the result rounded once to bf16: 2^-9 = 2e-3 relative). A wrong
 * pair, sign or position shows as O(1). Then the forward's time at Llama 3.2 1B's shape (B 4, T 2048, NH 32, KV 8,
 * HS 64, bf16).
 */
#include <string.h>

#include <vector>

#include "llmc/rope.cuh"
#include "test/cuda_timing.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define TOL_F32 1e-6
#define TOL_BF16 4e-3
#define ROPE_THETA 500000.0 // Llama 3's rope_theta
#define END_ROWS 64         // the last positions of a sequence, checked apart

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rand_uniform(void) { // (-1, 1)
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// The elements of the query and key heads (all rows, or only the last END_ROWS positions of each sequence), and of
// the value heads, of a (rows, H, HS) tensor.
static std::vector<double> part(const std::vector<double> &a, int rows, int Tlen, int H, int h0, int h1, int HS,
                                bool end_only) {
    std::vector<double> out;
    for (int r = 0; r < rows; r++) {
        if (end_only && r % Tlen < Tlen - END_ROWS) { continue; }
        out.insert(out.end(), a.begin() + ((size_t)r * H + h0) * HS, a.begin() + ((size_t)r * H + h1) * HS);
    }
    return out;
}

// The forward on x: the rotated heads against the reference, the value heads unchanged.
template <typename T> static void test_shape(int B, int Tlen, int NH, int KV, int HS, double tol) {
    const int positions = 2 * Tlen + 1, H = NH + 2 * KV, rows = B * Tlen; // more positions than a sequence
    std::vector<float> cos_t, sin_t;
    rope_test_tables(cos_t, sin_t, positions, HS, ROPE_THETA);
    float *d_cos = to_device(cos_t), *d_sin = to_device(sin_t);
    const size_t n = (size_t)rows * H * HS;
    std::vector<T> x(n);
    for (auto &e : x) { e = to_type<T>(2.0f * rand_uniform()); }
    char label[96];
    snprintf(label, sizeof(label), "rope %s B %d T %d NH %d KV %d HS %d", TypeInfo<T>::name, B, Tlen, NH, KV, HS);
    T *d_x = to_device(x);
    rope_forward(d_x, d_cos, d_sin, positions, B, Tlen, NH, KV, HS, g_cuda.stream);
    std::vector<double> got = to_f64(to_host(d_x, n)), in = to_f64(x);
    std::vector<double> ref = rope_reference(in, cos_t, sin_t, rows, Tlen, H, NH + KV, HS, false);
    expect_close(label, "forward q and k heads", part(got, rows, Tlen, H, 0, NH + KV, HS, false),
                 part(ref, rows, Tlen, H, 0, NH + KV, HS, false), tol);
    char what[64];
    snprintf(what, sizeof(what), "forward q and k heads, last %d positions", END_ROWS);
    expect_close(label, what, part(got, rows, Tlen, H, 0, NH + KV, HS, true),
                 part(ref, rows, Tlen, H, 0, NH + KV, HS, true), tol);
    char name[200];
    snprintf(name, sizeof(name), "%s forward v heads untouched", label);
    check(part(got, rows, Tlen, H, NH + KV, H, HS, false) == part(in, rows, Tlen, H, NH + KV, H, HS, false), name,
          "the value heads changed");
    for (void *p : {(void *)d_cos, (void *)d_sin, (void *)d_x}) { cudaCheck(cudaFree(p)); }
}

static void bench(int B, int Tlen, int NH, int KV, int HS) {
    std::vector<float> cos_t, sin_t;
    rope_test_tables(cos_t, sin_t, Tlen, HS, ROPE_THETA);
    float *d_cos = to_device(cos_t), *d_sin = to_device(sin_t);
    const size_t n = (size_t)B * Tlen * (NH + 2 * KV) * HS;
    bf16 *d_x = (bf16 *)cuda_alloc(n * sizeof(bf16), "qkv");
    fill_random<<<grid_for(n, 256), 256, 0, g_cuda.stream>>>(d_x, n, 1);
    cudaCheckLaunch();
    float ms = median_ms([&] { rope_forward(d_x, d_cos, d_sin, Tlen, B, Tlen, NH, KV, HS, g_cuda.stream); },
                         g_cuda.stream);
    double bytes = 2.0 * B * Tlen * (NH + KV) * HS * sizeof(bf16); // the rotated heads read and written
    printf("bench rope bf16 B=%d T=%d NH=%d KV=%d HS=%d: %.1f us, %.0f GB/s\n", B, Tlen, NH, KV, HS, ms * 1e3,
           bytes / (ms * 1e-3) / 1e9);
    for (void *p : {(void *)d_cos, (void *)d_sin, (void *)d_x}) { cudaCheck(cudaFree(p)); }
}

// bad arguments fail with one line, before any CUDA call (in a child, before this process touches CUDA)
static void head_size_72_bf16(void *) { rope_forward<bf16>(nullptr, nullptr, nullptr, 8, 1, 8, 2, 2, 72, 0); }
static void table_too_short(void *) { rope_forward<float>(nullptr, nullptr, nullptr, 7, 1, 8, 2, 2, 64, 0); }

int main(void) {
    expect_child_fails(head_size_72_bf16, nullptr, "rope rejects head size 72 in bf16", "multiple of 16");
    expect_child_fails(table_too_short, nullptr, "rope rejects tables shorter than the sequence",
                       "cannot rotate sequences");
    cuda_context_init();
    // B, T, NH, KV: multi-head (GPT-2's layout), 4 query heads a KV head (Llama 3's ratio), 8 a KV head
    const int shapes[][4] = {{2, 2048, 4, 4}, {2, 2048, 8, 2}, {1, 2048, 8, 1}};
    for (int HS : {64, 128}) {
        for (auto &s : shapes) {
            test_shape<float>(s[0], s[1], s[2], s[3], HS, TOL_F32);
            test_shape<bf16>(s[0], s[1], s[2], s[3], HS, TOL_BF16);
        }
    }
    bench(4, 2048, 32, 8, 64);
    return test_exit();
}
