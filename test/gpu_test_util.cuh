/*
 * gpu_test_util.cuh: what the GPU tests (and the dev benchmarks) share: values of an activation type to and from fp32
 * on the host, copies ordered with the trainer's compute stream, random inputs made on the device, and rotary
 * embeddings' tables and fp64 rotations (test_rope, test_attention).
 */
#ifndef TEST_GPU_TEST_UTIL_CUH
#define TEST_GPU_TEST_UTIL_CUH

#include <math.h>

#include <vector>

#include "llmc/cuda_common.cuh"
#include "test/test_util.h"

template <typename T> static T to_type(float x);
template <> float to_type<float>(float x) { return x; }
template <> bf16 to_type<bf16>(float x) { return __float2bfloat16_rn(x); }
static float host_float(float x) { return x; }
static float host_float(bf16 x) { return __bfloat162float(x); }

// A float's bits and back (amaxes are recorded as the bits of a non-negative float, so they compare as unsigned).
static unsigned host_bits(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof(u));
    return u;
}
static float bits_float(unsigned u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

#define POISON_BYTE 0xA5 // what an output buffer holds before the bytes under test are written

// A copy through the stream the kernels under test run on (g_cuda.stream, non-blocking), finished on return:
// cudaMemcpy would go through the legacy default stream, which is not ordered with it, so a read-back could happen
// before a kernel finished (seen on a busy GPU: a transpose's bytes "misplaced").
static void copy_now(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
}

// A device copy of h (freed with cudaFree).
template <typename T> static T *to_device(const std::vector<T> &h) {
    T *d = (T *)cuda_alloc(h.size() * sizeof(T), "test tensor");
    copy_now(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

// A host copy of n elements at d.
template <typename T> static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    copy_now(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

// h's values as doubles, for comparison with an fp64 reference.
template <typename T> static std::vector<double> to_f64(const std::vector<T> &h) {
    std::vector<double> out(h.size());
    for (size_t i = 0; i < h.size(); i++) { out[i] = host_float(h[i]); }
    return out;
}

// One check line, "label what", passing where got is within tol of ref (largest error relative to ref's largest).
static void expect_close(const char *label, const char *what, const std::vector<double> &got,
                         const std::vector<double> &ref, double tol) {
    char name[200];
    snprintf(name, sizeof(name), "%s %s", label, what);
    double err = max_rel_err_f64(got.data(), ref.data(), got.size());
    check(err <= tol, name, "max error %.3e relative, tolerance %.1e", err, tol);
}

// x[i] = a hash of (i, seed) as a value in [-0.5, 0.5): inputs too large to make on the host (the dev benchmarks'
// activations and weights; never zeros, see METHOD.md). Launch with n threads or more.
__global__ void fill_random(bf16 *x, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = __float2bfloat16((h & 0xffff) / 65536.0f - 0.5f);
}

// RoPE tables of `positions` rows of HS / 2, made as Llama's are (inv_freq[i] = theta^(-2i/HS), angle = (float)t *
// inv_freq[i] in fp32), then each angle's cosine and sine exactly (in double) rounded to fp32.
static void rope_test_tables(std::vector<float> &cos_t, std::vector<float> &sin_t, int positions, int HS,
                             double theta) {
    const int half = HS / 2;
    cos_t.resize((size_t)positions * half), sin_t.resize((size_t)positions * half);
    for (int i = 0; i < half; i++) {
        const float inv_freq = (float)pow(theta, -2.0 * i / HS);
        for (int t = 0; t < positions; t++) {
            const float angle = (float)t * inv_freq;
            cos_t[(size_t)t * half + i] = (float)cos((double)angle);
            sin_t[(size_t)t * half + i] = (float)sin((double)angle);
        }
    }
}

// x (rows of H heads, row r at position r % Tlen) with the first `rotated` heads of each row rotated in fp64 by the
// tables' fp32 entries (inverse: by -angle, the backward's transposed rotation).
static std::vector<double> rope_reference(const std::vector<double> &x, const std::vector<float> &cos_t,
                                          const std::vector<float> &sin_t, size_t rows, int Tlen, int H, int rotated,
                                          int HS, bool inverse) {
    std::vector<double> y = x;
    const int half = HS / 2;
    for (size_t r = 0; r < rows; r++) {
        const size_t t = r % Tlen;
        for (int h = 0; h < rotated; h++) {
            const size_t at = (r * H + h) * HS;
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

#endif // TEST_GPU_TEST_UTIL_CUH
