/*
 * swiglu.cuh: SwiGLU, the activation of Llama's MLP, forward and backward, row by row.
 *
 * The fused gate/up GEMM writes rows [gate (F) | up (F)] of 2F; with s = sigmoid(g) = 1 / (1 + exp(-g)) and
 * silu(g) = g s:
 *   forward:  out = silu(gate) * up                                            (rows of F)
 *   backward: dgate = dout * up * silu'(gate), silu'(g) = s (1 + g (1 - s));  dup = dout * silu(gate)
 *             written as rows [dgate | dup] of 2F, the gate/up GEMM's output gradient; and out again, the down
 *             projection's input, which its weight gradient reads (the forward's is not kept: the backward reads
 *             gate and up anyway, and out costs one more write where keeping it costs 2 bytes an element a layer).
 * fp32 math with the accurate expf (the CPU build's), stored as T; swiglu_of and swiglu_grads are the arithmetic,
 * which the FP8 casts that fuse SwiGLU (fp8.cuh: Fp8SwigluOf, Fp8DswigluOf) share, so a value is the same bits in
 * either. A thread takes a pack (16 bytes: 8 bf16 or 4 fp32 columns) of the gate half, the matching pack of the up
 * half and of the output, so F must be a multiple of the pack. Geometry: blocks take rows (grid-stride), threads the
 * packs of a row. F is a parameter: under tensor parallelism a rank's F / TP local features.
 */
#ifndef LLMC_SWIGLU_CUH
#define LLMC_SWIGLU_CUH

#include "cuda_common.cuh"

#define SWIGLU_THREADS 256

__device__ __forceinline__ float sigmoid_of(float g) { return 1.0f / (1.0f + expf(-g)); }

// silu(g) u
__device__ __forceinline__ float swiglu_of(float g, float u) { return g * sigmoid_of(g) * u; }

// dgate and dup of dout dy at (g, u)
__device__ __forceinline__ void swiglu_grads(float dy, float g, float u, float *dgate, float *dup) {
    const float s = sigmoid_of(g);
    *dgate = dy * u * (s * (1.0f + g * (1.0f - s)));
    *dup = dy * (g * s);
}

// out (rows, F) = silu(gate) * up of inp (rows, 2F).
template <typename T>
__global__ void __launch_bounds__(SWIGLU_THREADS) swiglu_forward_kernel(T *out, const T *inp, int rows, int F) {
    constexpr int PN = Packed<T>::N;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *gate = inp + (size_t)row * 2 * F, *up = gate + F;
        for (int col = threadIdx.x * PN; col < F; col += blockDim.x * PN) {
            Packed<T> g = load_packed_cs(gate + col), u = load_packed_cs(up + col), o;
            for (int j = 0; j < PN; j++) { o.set(j, swiglu_of(g[j], u[j])); }
            store_packed(out + (size_t)row * F + col, o);
        }
    }
}

// dinp (rows, 2F) = [dgate | dup] from dout (rows, F) and the forward's input inp (rows, 2F), and out (rows, F) =
// silu(gate) * up again; dinp may be inp, out aliases neither.
template <typename T>
__global__ void __launch_bounds__(SWIGLU_THREADS)
    swiglu_backward_kernel(T *dinp, T *out, const T *dout, const T *inp, int rows, int F) {
    constexpr int PN = Packed<T>::N;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t base = (size_t)row * 2 * F;
        for (int col = threadIdx.x * PN; col < F; col += blockDim.x * PN) {
            Packed<T> g = load_packed_cs(inp + base + col), u = load_packed_cs(inp + base + F + col);
            Packed<T> dy = load_packed_cs(dout + (size_t)row * F + col), dg, du, o;
            for (int j = 0; j < PN; j++) {
                float dgate, dup;
                swiglu_grads(dy[j], g[j], u[j], &dgate, &dup);
                dg.set(j, dgate);
                du.set(j, dup);
                o.set(j, swiglu_of(g[j], u[j]));
            }
            store_packed(dinp + base + col, dg);
            store_packed(dinp + base + F + col, du);
            store_packed(out + (size_t)row * F + col, o);
        }
    }
}

// Refuses a width the kernels cannot take, before any work. `addresses`: the buffers or'ed together.
template <typename T> static void swiglu_check(int F, uintptr_t addresses) {
    if (F < 1 || F % Packed<T>::N != 0) {
        fail("SwiGLU on the GPU needs the MLP width to be a positive multiple of %d in %s (16-byte loads), got %d; "
             "change --ffn",
             Packed<T>::N, TypeInfo<T>::name, F);
    }
    if (addresses % 16 != 0) { fail("SwiGLU buffers must be 16-byte aligned; allocate them at 16-byte offsets"); }
}

// As many blocks as are resident at once (2048 threads an SM), no more than rows.
static inline int swiglu_blocks(int rows) {
    int blocks = g_cuda.props.multiProcessorCount * (2048 / SWIGLU_THREADS);
    return blocks < rows ? blocks : rows;
}

// out (rows, F) = silu(gate) * up, inp (rows, 2F) = [gate | up].
template <typename T> static void swiglu_forward(T *out, const T *inp, int rows, int F, cudaStream_t stream) {
    swiglu_check<T>(F, (uintptr_t)out | (uintptr_t)inp);
    swiglu_forward_kernel<T><<<swiglu_blocks(rows), SWIGLU_THREADS, 0, stream>>>(out, inp, rows, F);
    cudaCheckLaunch();
}

// dinp (rows, 2F) = [dgate | dup], written (not accumulated), and out (rows, F) = silu(gate) * up, the forward's
// output again (its bits: the same arithmetic on the same inputs); dinp may be inp (in place: each thread reads its
// packs of the row before it writes them), out must alias neither.
template <typename T>
static void swiglu_backward(T *dinp, T *out, const T *dout, const T *inp, int rows, int F, cudaStream_t stream) {
    swiglu_check<T>(F, (uintptr_t)dinp | (uintptr_t)out | (uintptr_t)dout | (uintptr_t)inp);
    swiglu_backward_kernel<T><<<swiglu_blocks(rows), SWIGLU_THREADS, 0, stream>>>(dinp, out, dout, inp, rows, F);
    cudaCheckLaunch();
}

#endif // LLMC_SWIGLU_CUH
