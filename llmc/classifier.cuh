/*
 * classifier.cuh: softmax, cross-entropy and its gradient fused into one kernel over the logits, in place.
 *
 * Row n of the logits z (Vp wide; only the first V columns are real tokens):
 *   lse = log sum_{v<V} exp(z_v),  loss_n = lse - z_{target},  dz_v = dloss * (exp(z_v - lse) - [v == target])
 * for v < V, and dz_v = 0 for the padded columns, which the softmax never sees. The gradient overwrites the logits,
 * so no fp32 copy of a (N, Vp) tensor ever exists. Per-token losses are written in fp32; mean_loss sums them in a
 * fixed order (deterministic) for the host.
 *
 * One block per row, the row staged in shared memory (Vp * sizeof(T): 100 KB in bf16), so the logits are read from
 * memory once and written once. Pass 1 keeps a running (max, sum of exp) per thread over its 16-byte packs, combined
 * across the block; pass 2 reads the row back from shared memory and writes the gradient.
 */
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include <type_traits>

#include "cuda_common.cuh"

#define CLASSIFIER_THREADS 1024
#define MEAN_LOSS_THREADS 1024

// exp of the logits: the hardware approximation (relative error ~2^-21) where the gradient is stored in bf16, whose
// rounding (2^-9) hides it, and libm's accurate expf in fp32 mode, which is compared with the CPU build.
// Two exps per logit are a good part of this kernel's instructions.
template <typename T> __device__ __forceinline__ float exp_for(float x) {
    return std::is_same<T, float>::value ? expf(x) : __expf(x);
}

// Assumes Vp % Packed<T>::N == 0. With write_grad 0 only the losses are written (evaluation).
template <typename T>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_kernel(T *logits, float *losses, const int *targets, float dloss, int V, int Vp, int write_grad) {
    constexpr int PN = Packed<T>::N;
    __shared__ float red[WARP_SIZE];
    extern __shared__ int4 smem_row[]; // the row, Vp / PN packs (one raw type for every T)
    Packed<T> *staged = reinterpret_cast<Packed<T> *>(smem_row);
    T *row = logits + (size_t)blockIdx.x * Vp;
    int packs = Vp / PN;
    float m = -INFINITY, s = 0.0f;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Packed<T> z = load_packed_cs(row + p * PN);
        staged[p] = z;
        float pm = m;
        for (int j = 0; j < PN; j++) {
            if (p * PN + j < V) { pm = fmaxf(pm, z[j]); }
        }
        if (pm == -INFINITY) { continue; } // a pack of padding only
        float ps = 0.0f;
        for (int j = 0; j < PN; j++) {
            if (p * PN + j < V) { ps += exp_for<T>(z[j] - pm); }
        }
        s = s * expf(m - pm) + ps; // on the first pack m = -inf: exp(-inf) = 0 and s is 0
        m = pm;
    }
    float bm = block_max(m, red);
    float bs = block_sum(m == -INFINITY ? 0.0f : s * expf(m - bm), red);
    float lse = bm + logf(bs);
    int target = targets[blockIdx.x];
    if (threadIdx.x == 0) { losses[blockIdx.x] = lse - staged[target / PN][target % PN]; }
    if (!write_grad) { return; }
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Packed<T> z = staged[p], g;
        for (int j = 0; j < PN; j++) {
            int v = p * PN + j;
            float prob = v < V ? exp_for<T>(z[j] - lse) : 0.0f;
            g.set(j, dloss * (prob - (v == target ? 1.0f : 0.0f)));
        }
        store_packed(row + p * PN, g);
    }
}

// One block: out[0] = mean of losses[0..n), summed per thread in a fixed stride then across the block.
__global__ void __launch_bounds__(MEAN_LOSS_THREADS) mean_loss_kernel(float *out, const float *losses, int n) {
    __shared__ float red[WARP_SIZE];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s += losses[i]; }
    s = block_sum(s, red);
    if (threadIdx.x == 0) { out[0] = s / n; }
}

// losses[n] and, with write_grad, the gradient of dloss * sum of losses in place of the logits; mean to *mean_out.
template <typename T>
static void fused_classifier(T *logits, float *losses, float *mean_out, const int *targets, float dloss, int N, int V,
                             int Vp, int write_grad, cudaStream_t stream) {
    if (Vp % Packed<T>::N != 0) { fail("padded vocabulary %d is not a multiple of %d", Vp, Packed<T>::N); }
    int smem = Vp * (int)sizeof(T);
    if (smem > (int)g_cuda.props.sharedMemPerBlockOptin) {
        fail("a row of %d %s logits (%d bytes) does not fit the GPU's %zu bytes of shared memory per block", Vp,
             TypeInfo<T>::name, smem, g_cuda.props.sharedMemPerBlockOptin);
    }
    cudaCheck(cudaFuncSetAttribute(fused_classifier_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS, smem, stream>>>(logits, losses, targets, dloss, V, Vp,
                                                                      write_grad);
    cudaCheckLaunch();
    mean_loss_kernel<<<1, MEAN_LOSS_THREADS, 0, stream>>>(mean_out, losses, N);
    cudaCheckLaunch();
}

#endif // LLMC_CLASSIFIER_CUH
