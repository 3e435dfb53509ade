/*
 * test_rope.cu: llmc/rope.cuh against an fp64 reference on the host, in fp32 and bf16, at head sizes 64 and 128, with
 * as many KV heads as query heads and fewer (4 and 8 query heads a KV head), sequences of T = 2048 (two of them where
 * the second's positions must start again at 0). The tables
 * are made here as Llama's are (inv_freq[i] = theta^(-2i/HS), angle = (float)t * inv_freq[i] in fp32, theta 500000)
 * and hold more positions than T, so that a row taking its position from the wrong sequence reads valid, wrong
 * entries. The reference rotates with the same fp32 table entries. Checks (in place: every element of the buffer is
 * an input):
 * - forward: the query and key heads against the reference, all rows and separately the last 64 positions of each
 *   sequence (the largest angles); the value heads untouched, bit for bit;
 * - backward: the same for a random gradient (the transposed rotation);
 * - round trip: the backward of the forward's output gives the input back, up to the two roundings.
 * Tolerances (max |gpu - ref| / max |ref| per tensor): fp32 1e-6 (two products and a sum in fp32: a few units of
 * 2^-24 = 6e-8 of the largest element); bf16 4e-3 (the result rounded once to bf16: 2^-9 = 2e-3 relative) and 1e-2
 * for the round trip (two roundings, each spread over a pair by the rotation). A wrong pair, sign or position shows as
 * O(1). Then the forward's time at Llama 3.2 1B's shape (B 4, T 2048, NH 32, KV 8, HS 64, bf16).
 */
#include <string.h>

#include <vector>

#include "llmc/rope.cuh"
#include "test/cuda_timing.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define TOL_F32 1e-6
#define TOL_BF16 4e-3
#define TOL_BF16_ROUND_TRIP 1e-2
#define ROPE_THETA 500000.0 // Llama 3's rope_theta
#define END_ROWS 64         // the last positions of a sequence, checked apart

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rand_uniform(void) { // (-1, 1)
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// The tables of `positions` rows of HS / 2: cos and sin of (float)t * inv_freq[i], each computed in fp32 as Llama's
// are, then its cosine and sine exactly (in double) rounded to fp32.
static void make_tables(std::vector<float> &cos_t, std::vector<float> &sin_t, int positions, int HS) {
    const int half = HS / 2;
    cos_t.resize((size_t)positions * half), sin_t.resize((size_t)positions * half);
    for (int i = 0; i < half; i++) {
        const float inv_freq = (float)pow(ROPE_THETA, -2.0 * i / HS);
        for (int t = 0; t < positions; t++) {
            const float angle = (float)t * inv_freq;
            cos_t[(size_t)t * half + i] = (float)cos((double)angle);
            sin_t[(size_t)t * half + i] = (float)sin((double)angle);
        }
    }
}

// x (B T rows of H heads) rotated as the kernel does (inverse: by -angle), the first `rotated` heads of each row.
static std::vector<double> reference(const std::vector<double> &x, const std::vector<float> &cos_t,
                                     const std::vector<float> &sin_t, int rows, int Tlen, int H, int rotated, int HS,
                                     bool inverse) {
    std::vector<double> y = x;
    const int half = HS / 2;
    for (int r = 0; r < rows; r++) {
        const size_t t = r % Tlen;
        for (int h = 0; h < rotated; h++) {
            const size_t at = ((size_t)r * H + h) * HS;
            for (int i = 0; i < half; i++) {
                const double c = cos_t[t * half + i], s = inverse ? -sin_t[t * half + i] : sin_t[t * half + i];
                const double x1 = x[at + i], x2 = x[at + half + i];
                y[at + i] = x1 * c - x2 * s;
                y[at + half + i] = x2 * c + x1 * s;
            }
        }
    }
    return y;
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

// Forward or backward (inverse) on x: the rotated heads against the reference, the value heads unchanged. Returns
// what the kernel wrote.
template <typename T>
static std::vector<double> check_rotation(const char *label, bool inverse, const std::vector<T> &x, const float *d_cos,
                                          const float *d_sin, const std::vector<float> &cos_t,
                                          const std::vector<float> &sin_t, int positions, int B, int Tlen, int NH,
                                          int KV, int HS, double tol) {
    const int rows = B * Tlen, H = NH + 2 * KV;
    T *d_x = to_device(x);
    if (inverse) {
        rope_backward(d_x, d_cos, d_sin, positions, B, Tlen, NH, KV, HS, g_cuda.stream);
    } else {
        rope_forward(d_x, d_cos, d_sin, positions, B, Tlen, NH, KV, HS, g_cuda.stream);
    }
    std::vector<double> got = to_f64(to_host(d_x, x.size())), in = to_f64(x);
    std::vector<double> ref = reference(in, cos_t, sin_t, rows, Tlen, H, NH + KV, HS, inverse);
    const char *dir = inverse ? "backward" : "forward";
    char what[64];
    snprintf(what, sizeof(what), "%s q and k heads", dir);
    expect_close(label, what, part(got, rows, Tlen, H, 0, NH + KV, HS, false),
                 part(ref, rows, Tlen, H, 0, NH + KV, HS, false), tol);
    snprintf(what, sizeof(what), "%s q and k heads, last %d positions", dir, END_ROWS);
    expect_close(label, what, part(got, rows, Tlen, H, 0, NH + KV, HS, true),
                 part(ref, rows, Tlen, H, 0, NH + KV, HS, true), tol);
    std::vector<double> v_got = part(got, rows, Tlen, H, NH + KV, H, HS, false);
    std::vector<double> v_in = part(in, rows, Tlen, H, NH + KV, H, HS, false);
    char name[200];
    snprintf(name, sizeof(name), "%s %s v heads untouched", label, dir);
    check(v_got == v_in, name, "the value heads changed");
    cudaCheck(cudaFree(d_x));
    return got;
}

template <typename T> static void test_shape(int B, int Tlen, int NH, int KV, int HS, double tol, double tol_trip) {
    const int positions = 2 * Tlen + 1, H = NH + 2 * KV; // more positions than a sequence: see the header
    std::vector<float> cos_t, sin_t;
    make_tables(cos_t, sin_t, positions, HS);
    float *d_cos = to_device(cos_t), *d_sin = to_device(sin_t);
    const size_t n = (size_t)B * Tlen * H * HS;
    std::vector<T> x(n), dy(n);
    for (auto &e : x) { e = to_type<T>(2.0f * rand_uniform()); }
    for (auto &e : dy) { e = to_type<T>(rand_uniform()); }
    char label[96];
    snprintf(label, sizeof(label), "rope %s B %d T %d NH %d KV %d HS %d", TypeInfo<T>::name, B, Tlen, NH, KV, HS);

    std::vector<double> y = check_rotation(label, false, x, d_cos, d_sin, cos_t, sin_t, positions, B, Tlen, NH, KV,
                                           HS, tol);
    check_rotation(label, true, dy, d_cos, d_sin, cos_t, sin_t, positions, B, Tlen, NH, KV, HS, tol);
    // round trip: the backward of y (as stored) is x again
    std::vector<T> y_stored(n);
    for (size_t i = 0; i < n; i++) { y_stored[i] = to_type<T>((float)y[i]); } // exact: y holds values of T
    T *d_y = to_device(y_stored);
    rope_backward(d_y, d_cos, d_sin, positions, B, Tlen, NH, KV, HS, g_cuda.stream);
    expect_close(label, "round trip", to_f64(to_host(d_y, n)), to_f64(x), tol_trip);
    for (void *p : {(void *)d_cos, (void *)d_sin, (void *)d_y}) { cudaCheck(cudaFree(p)); }
}

static void bench(int B, int Tlen, int NH, int KV, int HS) {
    std::vector<float> cos_t, sin_t;
    make_tables(cos_t, sin_t, Tlen, HS);
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
            test_shape<float>(s[0], s[1], s[2], s[3], HS, TOL_F32, TOL_F32);
            test_shape<bf16>(s[0], s[1], s[2], s[3], HS, TOL_BF16, TOL_BF16_ROUND_TRIP);
        }
    }
    bench(4, 2048, 32, 8, 64);
    return test_exit();
}
