/*
 * cuda_common.cuh: what every CUDA header shares: error checks, the activation types, 16-byte packed vectors,
 * warp/block reductions, and the process-wide CUDA state (device properties, the cuBLASLt handle and workspace).
 *
 * Activations are templated on their type (float in fp32 mode, __nv_bfloat16 in bf16 mode); all reductions,
 * gradients and master weights are fp32. Memory-bound kernels move data as Packed<T>: 16 bytes per thread per
 * access (4 floats or 8 bf16), the widest single load a thread can issue.
 */
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "utils.h"

// ----------------------------------------------------------------------------------------------------------------
// error checks: one line naming the call site and CUDA's reason, through fail() so the rank is named

#define cudaCheck(call) cuda_check_((call), #call, __FILE__, __LINE__)
static inline void cuda_check_(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) {
        fail("CUDA error %s at %s:%d (%s); check the GPU is present and has enough free memory",
             cudaGetErrorString(err), file, line, what);
    }
}

#define cublasCheck(call) cublas_check_((call), #call, __FILE__, __LINE__)
static inline void cublas_check_(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fail("cuBLAS error %d at %s:%d (%s); the GEMM shape or the cuBLASLt version is not supported", (int)st, file,
             line, what);
    }
}

// Checks the last launch; cheap (no synchronization), so it follows every kernel launch.
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())

// ----------------------------------------------------------------------------------------------------------------
// activation types

typedef __nv_bfloat16 bf16;

template <typename T> struct TypeInfo;
template <> struct TypeInfo<float> {
    static constexpr cudaDataType_t cuda = CUDA_R_32F;
    static constexpr const char *name = "fp32";
};
template <> struct TypeInfo<bf16> {
    static constexpr cudaDataType_t cuda = CUDA_R_16BF;
    static constexpr const char *name = "bf16";
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

#define LOG2E_F 1.4426950408889634f

// 2^x by the hardware's approximation (MUFU.EX2; relative error ~2^-22, flushes subnormals): one instruction.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 16 bytes of T: one vectorized load or store. Pointers passed to load/store must be 16-byte aligned.
template <typename T> struct alignas(16) Packed {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
    __device__ __forceinline__ float operator[](int i) const { return to_float(v[i]); }
    __device__ __forceinline__ void set(int i, float x) { v[i] = from_float<T>(x); }
};
template <typename T> __device__ __forceinline__ Packed<T> load_packed(const T *p) {
    return *reinterpret_cast<const Packed<T> *>(p);
}
// Streaming load: data read once, kept out of L1 so it does not evict what is reused.
template <typename T> __device__ __forceinline__ Packed<T> load_packed_cs(const T *p) {
    int4 raw = __ldcs(reinterpret_cast<const int4 *>(p));
    return *reinterpret_cast<Packed<T> *>(&raw);
}
template <typename T> __device__ __forceinline__ void store_packed(T *p, const Packed<T> &x) {
    *reinterpret_cast<Packed<T> *>(p) = x;
}
// Four floats of v to p (16-byte aligned) in one store.
__device__ __forceinline__ void store_float4(float *p, const float *v) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
// s += v, component by component.
__device__ __forceinline__ void add_float4(float4 &s, const float4 &v) {
    s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
}
// Asynchronous copy of 16 bytes from global to shared memory (cp.async: through L2 only, and no registers held
// while in flight, so a thread can have several rows on the way). A thread's copies are grouped by cp_async_commit;
// cp_async_wait<N> returns once at most N of its groups are still in flight, and the thread may then read what the
// older ones copied. The "memory" clobbers keep the compiler from moving shared-memory accesses across copies and
// waits.
// The 32-bit shared-memory address of a generic pointer into shared memory, as cp.async and ldmatrix take it.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
template <typename T> __device__ __forceinline__ void cp_async_packed(Packed<T> *dst, const T *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// The same for one float (cached in L1 too: 4-byte copies cannot bypass it).
__device__ __forceinline__ void cp_async_float(float *dst, const float *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// 16 bytes to a shared-memory address (as smem_u32 gives it) of which only src_bytes are read: 0 zero-fills them
// (llmc/attention.cuh: rows past the end of the sequence).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ----------------------------------------------------------------------------------------------------------------
// GELU, the tanh approximation: gelu(a) = a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))), and its derivative

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)
#define GELU_CUBIC 0.044715f

__device__ __forceinline__ float gelu_of(float a) {
    return 0.5f * a * (1.0f + tanhf(GELU_SCALE * (a + GELU_CUBIC * a * a * a)));
}
__device__ __forceinline__ float gelu_grad_of(float a) {
    float th = tanhf(GELU_SCALE * (a + GELU_CUBIC * a * a * a));
    return 0.5f * (1.0f + th) + 0.5f * a * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * a * a);
}

// ----------------------------------------------------------------------------------------------------------------
// reductions (fixed order within a warp and a block: deterministic)

#define WARP_SIZE 32
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) { x += __shfl_xor_sync(0xffffffffu, x, o); }
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) { x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o)); }
    return x;
}

// Sum over the block; every thread gets the result. Needs blockDim.x a multiple of 32 and <= 1024.
// `shared` holds 32 floats; the trailing barrier lets the caller reuse it at once.
__device__ __forceinline__ float block_sum(float x, float *shared) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    x = warp_sum(x);
    if (lane == 0) { shared[warp] = x; }
    __syncthreads();
    x = lane < nwarps ? shared[lane] : 0.0f;
    x = warp_sum(x);
    __syncthreads();
    return x;
}
__device__ __forceinline__ float block_max(float x, float *shared) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    x = warp_max(x);
    if (lane == 0) { shared[warp] = x; }
    __syncthreads();
    x = lane < nwarps ? shared[lane] : -INFINITY;
    x = warp_max(x);
    __syncthreads();
    return x;
}

// Second pass of the column reductions (bias and LayerNorm parameter gradients): the first pass wrote one row of
// partial sums per block (stride floats apart), holding up to PARTIAL_SUMS_MAX sums of cols columns side by side;
// sum k is dst[k][c] += sum over parts p of partial[p * stride + k * cols + c] (dst[k][c] = ... when not
// accumulate: the first micro-step writes the gradient). All sums go in one launch (grid.y = sums): a LayerNorm
// backward's three would otherwise be three tiny launches, ~150 per step at 48 layers.
// There can be a thousand parts, too long a chain for one thread: a block takes 32 columns, its row groups sum every
// PARTIAL_GROUPS-th part, and the groups are added in order (a fixed tree, so deterministic). A thread takes 4 adjacent
// columns in 16-byte loads, so a block is 256 threads: it finds room beside the update's blocks on the other streams,
// where 1024-thread blocks waited for a whole SM's threads (H200 timeline at 350M: 13 us a launch, ~5 alone).
// Assumes cols and stride are multiples of 4 and partial 16-byte aligned (add_partial_sums checks).
#define PARTIAL_COLS 32
#define PARTIAL_VEC 4 // columns a thread
#define PARTIAL_GROUPS 32
#define PARTIAL_SUMS_MAX 3
typedef struct {
    float *dst[PARTIAL_SUMS_MAX];
} PartialSumDsts;

__global__ void __launch_bounds__(PARTIAL_COLS / PARTIAL_VEC * PARTIAL_GROUPS)
    add_partial_sums_kernel(PartialSumDsts dsts, const float *partial, int parts, int cols, int stride,
                            int accumulate) {
    __shared__ float4 sums[PARTIAL_GROUPS][PARTIAL_COLS / PARTIAL_VEC];
    float *dst = dsts.dst[blockIdx.y];
    partial += (size_t)blockIdx.y * cols;
    int c = (blockIdx.x * (PARTIAL_COLS / PARTIAL_VEC) + threadIdx.x) * PARTIAL_VEC;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (c < cols) {
#pragma unroll 8
        for (int p = threadIdx.y; p < parts; p += PARTIAL_GROUPS) {
            float4 v = *reinterpret_cast<const float4 *>(partial + (size_t)p * stride + c);
            add_float4(s, v);
        }
    }
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) { return; }
    s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int g = 0; g < PARTIAL_GROUPS; g++) {
        float4 v = sums[g][threadIdx.x];
        add_float4(s, v);
    }
    const float add[PARTIAL_VEC] = {s.x, s.y, s.z, s.w};
    // dst, a parameter's gradient, may start at any float: 4-byte stores
    for (int j = 0; j < PARTIAL_VEC; j++) { dst[c + j] = accumulate ? dst[c + j] + add[j] : add[j]; }
}

// ----------------------------------------------------------------------------------------------------------------
// process-wide CUDA state

// cuBLASLt's recommended workspace on Hopper (32 MiB lets it pick split-K and stream-K kernels).
#define CUBLASLT_WORKSPACE_BYTES (32u << 20)

typedef struct {
    cudaDeviceProp props;
    cublasLtHandle_t lt;
    void *lt_workspace;
    cudaStream_t stream; // the compute stream (high priority)
    cudaStream_t side;   // lower priority: memory-bound work that may run beside the compute stream's GEMMs, fed
                         // by events (train_gpt.cu: the gradient norm per layer); its blocks fill the SMs the
                         // compute stream leaves idle rather than delaying its kernels
    cudaStream_t update; // lowest priority: AdamW per layer, apart from the norm's partial sums so that the norm is
                         // never queued behind an update that started during the backward, and below side and sums,
                         // whose work the compute stream waits for within the step (the next forward's for the update)
    cudaStream_t sums;   // lower priority, like side, for work the compute stream waits for within backward (the fc
                         // bias sums): it never waits for another rank, as side does, so neither does the compute
                         // stream when it waits for it
} CudaContext;

static CudaContext g_cuda;
static int g_cuda_ready = 0;
static int g_cuda_device = 0; // the GPU of this process: the launcher sets it (local rank) before the context
// Bytes taken through cuda_alloc (nothing is freed while training), comparable to PyTorch's max_memory_allocated.
static size_t g_cuda_allocated_bytes = 0;

// Device memory for `what`; running out is a configuration problem, so say which knob to turn.
static inline void *cuda_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fail("cannot allocate %.2f GiB of GPU memory for %s (%.2f GiB free of %.2f): %s; lower --batch-size or use "
             "a smaller model",
             bytes / 1073741824.0, what, free_b / 1073741824.0, total_b / 1073741824.0, cudaGetErrorString(err));
    }
    g_cuda_allocated_bytes += bytes;
    return p;
}

// The build targets sm_90a (Makefile CUDA_ARCH: the attention kernels use Hopper's warpgroup MMA), code that runs
// on compute capability 9.0 only; on any other GPU the first launch would fail with "no kernel image".
#define REQUIRED_CC_MAJOR 9
#define REQUIRED_CC_MINOR 0

static inline void cuda_context_init(void) {
    if (g_cuda_ready) { return; }
    int dev = g_cuda_device;
    cudaCheck(cudaSetDevice(dev));
    cudaCheck(cudaGetDeviceProperties(&g_cuda.props, dev));
    if (g_cuda.props.major != REQUIRED_CC_MAJOR || g_cuda.props.minor != REQUIRED_CC_MINOR) {
        fail("GPU %d (%s) has compute capability %d.%d, but this build runs on Hopper GPUs only (compute capability "
             "%d.%d: H100, H200; it targets sm_90a); run on an H100 or H200",
             dev, g_cuda.props.name, g_cuda.props.major, g_cuda.props.minor, REQUIRED_CC_MAJOR, REQUIRED_CC_MINOR);
    }
    cublasCheck(cublasLtCreate(&g_cuda.lt));
    g_cuda.lt_workspace = cuda_alloc(CUBLASLT_WORKSPACE_BYTES, "the cuBLASLt workspace");
    int least, greatest; // numerically greatest < least; a device with two levels puts side and sums at least too
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    int lower = greatest < least ? greatest + 1 : least;
    cudaCheck(cudaStreamCreateWithPriority(&g_cuda.stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g_cuda.side, cudaStreamNonBlocking, lower));
    cudaCheck(cudaStreamCreateWithPriority(&g_cuda.sums, cudaStreamNonBlocking, lower));
    cudaCheck(cudaStreamCreateWithPriority(&g_cuda.update, cudaStreamNonBlocking, least));
    g_cuda_ready = 1;
}

static inline int grid_for(size_t n, int per_block) { return (int)((n + per_block - 1) / per_block); }

// dsts.dst[0 .. sums) as add_partial_sums_kernel says.
static inline void add_partial_sums(PartialSumDsts dsts, int sums, const float *partial, int parts, int cols,
                                    int stride, int accumulate, cudaStream_t stream) {
    if (sums < 1 || sums > PARTIAL_SUMS_MAX) { fail("add_partial_sums: %d sums (at most %d)", sums, PARTIAL_SUMS_MAX); }
    if (cols % PARTIAL_VEC != 0 || stride % PARTIAL_VEC != 0 || (uintptr_t)partial % 16 != 0) {
        fail("add_partial_sums: %d columns with stride %d at %p: needs multiples of %d and 16-byte alignment", cols,
             stride, (const void *)partial, PARTIAL_VEC);
    }
    add_partial_sums_kernel<<<dim3(grid_for(cols, PARTIAL_COLS), sums),
                              dim3(PARTIAL_COLS / PARTIAL_VEC, PARTIAL_GROUPS), 0,
                              stream>>>(dsts, partial, parts, cols, stride, accumulate);
    cudaCheckLaunch();
}

#endif // LLMC_CUDA_COMMON_CUH
