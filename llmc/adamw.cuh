/*
 * adamw.cuh: the global gradient norm, clipping and AdamW, exactly as dev/NOTES.md defines them.
 *
 *   norm = sqrt(sum of g^2 over every gradient);  clip = grad_clip / norm if 0 < grad_clip < norm, else 1
 *   g' = clip g;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
 * The norm is a two-pass reduction (a partial sum per block, then the blocks in order, in double), so it is
 * deterministic; it stays on the GPU, where AdamW reads the clip factor, and the host copies it only to log it.
 * Master weights, gradients and moments are fp32; in bf16 mode AdamW also writes the bf16 copy the GEMMs read.
 */
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "cuda_common.cuh"

#define NORM_THREADS 512
#define NORM_BLOCKS_PER_SM 2
#define ADAMW_THREADS 256

// Grid-stride over float4s; one partial sum of squares per block. Assumes n % 4 == 0 and g 16-byte aligned.
__global__ void __launch_bounds__(NORM_THREADS) sum_squares_partial_kernel(float *partial, const float *g, size_t n) {
    __shared__ float red[WARP_SIZE];
    float s = 0.0f;
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (size_t)gridDim.x * blockDim.x) {
        float4 x = g4[i];
        s += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
    }
    s = block_sum(s, red);
    if (threadIdx.x == 0) { partial[blockIdx.x] = s; }
}

// norm_clip[0] = norm, norm_clip[1] = the clip factor AdamW multiplies the gradient by.
__global__ void grad_norm_finish_kernel(float *norm_clip, const float *partial, int parts, float grad_clip) {
    double s = 0.0;
    for (int p = 0; p < parts; p++) { s += partial[p]; }
    float norm = (float)sqrt(s);
    norm_clip[0] = norm;
    norm_clip[1] = (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
}

static inline int grad_norm_blocks(void) { return g_cuda.props.multiProcessorCount * NORM_BLOCKS_PER_SM; }

// scratch: grad_norm_blocks() floats; norm_clip: 2 floats on the device.
static void grad_norm(float *norm_clip, float *scratch, const float *grads, size_t n, float grad_clip,
                      cudaStream_t stream) {
    if (n % 4 != 0) { fail("gradient buffer of %zu floats is not a multiple of 4", n); }
    int blocks = grad_norm_blocks();
    sum_squares_partial_kernel<<<blocks, NORM_THREADS, 0, stream>>>(scratch, grads, n);
    cudaCheckLaunch();
    grad_norm_finish_kernel<<<1, 1, 0, stream>>>(norm_clip, scratch, blocks, grad_clip);
    cudaCheckLaunch();
}

typedef struct {
    float lr, beta1, beta2, bias_corr1, bias_corr2, eps, weight_decay;
} AdamWStep;

// One thread per 4 consecutive parameters. copy (the compute-precision weights) is NULL when the GEMMs read the
// master weights themselves (fp32 mode). Assumes n % 4 == 0.
template <typename T>
__global__ void __launch_bounds__(ADAMW_THREADS) adamw_kernel(float *p, T *copy, const float *g, float *m, float *v,
                                                              size_t n, AdamWStep a, const float *norm_clip) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= n) { return; }
    float clip = norm_clip[1];
    float4 p4 = *reinterpret_cast<float4 *>(p + i), g4 = *reinterpret_cast<const float4 *>(g + i);
    float4 m4 = *reinterpret_cast<float4 *>(m + i), v4 = *reinterpret_cast<float4 *>(v + i);
    float *pp = &p4.x, *gg = &g4.x, *mm = &m4.x, *vv = &v4.x;
    for (int j = 0; j < 4; j++) {
        float gi = gg[j] * clip;
        mm[j] = a.beta1 * mm[j] + (1.0f - a.beta1) * gi;
        vv[j] = a.beta2 * vv[j] + (1.0f - a.beta2) * gi * gi;
        float mhat = mm[j] / a.bias_corr1, vhat = vv[j] / a.bias_corr2;
        pp[j] -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * pp[j]);
        if (copy) { copy[i + j] = from_float<T>(pp[j]); }
    }
    *reinterpret_cast<float4 *>(p + i) = p4;
    *reinterpret_cast<float4 *>(m + i) = m4;
    *reinterpret_cast<float4 *>(v + i) = v4;
}

template <typename T>
static void adamw_update(float *p, T *copy, const float *g, float *m, float *v, size_t n, AdamWStep a,
                         const float *norm_clip, cudaStream_t stream) {
    if (n % 4 != 0) { fail("parameter tensor of %zu floats is not a multiple of 4", n); }
    adamw_kernel<<<grid_for(n / 4, ADAMW_THREADS), ADAMW_THREADS, 0, stream>>>(p, copy, g, m, v, n, a, norm_clip);
    cudaCheckLaunch();
}

#endif // LLMC_ADAMW_CUH
