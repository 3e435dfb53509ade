/*
 * fp8.cuh: the FP8 recipe on the GPU (llmc/fp8.h has the formats, the scaling and the history, which the CPU build's
 * emulation shares): the recipe's state on the device, the kernels that cast activations, output gradients and
 * weights to FP8, the amax pass of current scaling, and the update of the history at the end of a step.
 *
 * A cast writes, in one pass over a (rows, cols) tensor, its FP8 codes row-major and/or transposed: Hopper's FP8 GEMMs
 * read only K-major operands, so the weight gradient (whose k is the token) needs the input and the output gradient
 * transposed, and the input gradient needs the weight transposed (TransformerEngine's cast-transpose). Each value is
 * q = fp8(x * scale), rounded to nearest even and saturated by cvt.rn.satfinite: the bytes of llmc/fp8.h's
 * fp8_encode (test_fp8_kernels checks every kernel against it). The scale comes from an amax (fp8_scale_of): the
 * history's (delayed scaling) or the tensor's own, from a pass over it first (fp8_amax_pass: current scaling, and
 * delayed scaling until the history holds a step), or is the one an earlier cast of the same values took (a
 * recompute in backward). Block (0, 0) writes the tensor's scale and scale_inv (what the GEMMs read). A cast that
 * records takes max |x| into the tensor's step amax with an atomic max on the float's bits: exact and order-free, so
 * deterministic, and a NaN (whose bits exceed infinity's) wins, which the end of the step reports by name.
 */
#ifndef LLMC_FP8_CUH
#define LLMC_FP8_CUH

#include <cuda_fp8.h>

#include "cuda_common.cuh"
#include "fp8.h"
#include "swiglu.cuh"

// The first tensor (fp8_tensor) whose step amax was not finite, and that amax; tensor == tensors: none.
typedef struct {
    int tensor;
    float amax;
} Fp8Verdict;

// The recipe's state on the device: per tensor t (fp8_tensor(layer, linear, role)) the amax delayed scales come from,
// the step's recorded amax, the scale and scale_inv of its latest cast, and the history.
typedef struct {
    Fp8Recipe recipe;
    int tensors, length;
    long long steps;          // optimizer steps in the history (host side; the same on every rank)
    float *amax_scale;        // (tensors) the history's largest amax
    unsigned *amax_step;      // (tensors) this step's amax, as the bits of a non-negative float
    float *scale, *scale_inv; // (tensors, FP8_SCALE_STRIDE): fp8_scale / fp8_scale_inv
    float *ring;              // (tensors, length) Fp8History's ring
    Fp8Verdict *verdict, *host_verdict; // the end of the step's check (host_verdict pinned)
    int amax_blocks;          // blocks of an amax pass: partial maxima per pass
    int recording;            // a training pass: the casts of activations and output gradients record their amax
    int weights_stale;        // the weights changed since they were cast: cast them before the next forward
} Fp8Device;

// Tensor t's scale and scale_inv (what its GEMMs read), each in a 16-byte slot of its own: cuBLASLt refuses (not
// supported) an FP8 GEMM whose scale pointer is not 16-byte aligned.
#define FP8_SCALE_STRIDE 4
static float *fp8_scale(const Fp8Device *d, int t) { return d->scale + (size_t)t * FP8_SCALE_STRIDE; }
static float *fp8_scale_inv(const Fp8Device *d, int t) { return d->scale_inv + (size_t)t * FP8_SCALE_STRIDE; }

static void fp8_device_init(Fp8Device *d, const Fp8Recipe *r, int L) {
    memset(d, 0, sizeof(*d));
    d->recipe = *r;
    d->tensors = fp8_num_tensors(L);
    d->length = r->history;
    size_t T = (size_t)d->tensors;
    d->amax_scale = (float *)cuda_alloc(T * sizeof(float), "FP8 amaxes");
    d->amax_step = (unsigned *)cuda_alloc(T * sizeof(unsigned), "FP8 amaxes");
    d->scale = (float *)cuda_alloc(T * FP8_SCALE_STRIDE * sizeof(float), "FP8 scales");
    d->scale_inv = (float *)cuda_alloc(T * FP8_SCALE_STRIDE * sizeof(float), "FP8 scales");
    d->ring = (float *)cuda_alloc(T * d->length * sizeof(float), "FP8 amax history");
    d->verdict = (Fp8Verdict *)cuda_alloc(sizeof(Fp8Verdict), "FP8 check");
    cudaCheck(cudaMallocHost(&d->host_verdict, sizeof(Fp8Verdict)));
    d->amax_blocks = 2 * g_cuda.props.multiProcessorCount;
    // on the compute stream, which every later reader follows (a plain cudaMemset would go through the legacy default
    // stream, which the non-blocking streams do not wait for)
    cudaCheck(cudaMemsetAsync(d->amax_step, 0, T * sizeof(unsigned), g_cuda.stream));
    cudaCheck(cudaMemsetAsync(d->amax_scale, 0, T * sizeof(float), g_cuda.stream));
    cudaCheck(cudaMemsetAsync(d->ring, 0, T * d->length * sizeof(float), g_cuda.stream));
    d->weights_stale = 1;
}

// Whether the next casts take their scales from the tensors themselves.
static bool fp8_scales_current(const Fp8Device *d) { return d->recipe.scaling == FP8_CURRENT || d->steps == 0; }

// ----------------------------------------------------------------------------------------------------------------
// kernels

#define FP8_CAST_THREADS 256
#define FP8_TILE_ROWS 64   // a cast block's tile: 64 rows (64 bytes of each transposed row)
#define FP8_TILE_COLS 128  // by 128 columns
#define FP8_VEC 8          // values a thread converts at once (one 16-byte load of bf16, two of fp32)
#define FP8_TRANSPOSED_SEGMENT 16 // bytes of a transposed row a thread stores at once

// Where a cast's scale comes from: count amaxes at amax (their largest), or (count 0) the tensor's scale as an
// earlier cast of the same values left it.
typedef struct {
    const float *amax;
    int count;
} Fp8ScaleFrom;

typedef struct {
    uint8_t *rows;            // (rows, cols) row-major, or NULL
    uint8_t *cols_t;          // (cols, ld_t): source row r lands in column col0 + r; or NULL
    int ld_t, col0;
    float *col_sums;          // (row tiles, cols): each tile's column sums of the values (a bias gradient), or NULL
    float *scale, *scale_inv; // the tensor's
    unsigned *amax_step;      // the tensor's step amax, where the cast records; else NULL
    Fp8ScaleFrom from;
    float margin_scale;
    Fp8Format format;
} Fp8CastArgs;

/*
 * GELU and its derivative with the hardware's tanh (tanh.approx.f32, relative error ~2^-11): what a cast computes from
 * the fc output, whose result it then rounds to FP8 (steps of 2^-4 and more), where libm's tanhf would make the cast
 * compute-bound (3x slower at GPT-2 1558M's shapes).
 */
__device__ __forceinline__ float tanh_fast(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float gelu_fast(float a) {
    return 0.5f * a * (1.0f + tanh_fast(GELU_SCALE * (a + GELU_CUBIC * a * a * a)));
}
__device__ __forceinline__ float gelu_grad_fast(float a) {
    float th = tanh_fast(GELU_SCALE * (a + GELU_CUBIC * a * a * a));
    return 0.5f * (1.0f + th) + 0.5f * a * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * a * a);
}

// FP8_VEC consecutive values of p at element i (16-byte aligned), as floats.
template <typename T> __device__ __forceinline__ void fp8_load(float *v, const T *p) {
    constexpr int PN = Packed<T>::N;
#pragma unroll
    for (int h = 0; h < FP8_VEC / PN; h++) {
        Packed<T> x = load_packed(p + h * PN);
#pragma unroll
        for (int j = 0; j < PN; j++) { v[h * PN + j] = x[j]; }
    }
}

// What a cast reads, FP8_VEC consecutive values at element i of a row-major tensor at a time: a tensor itself, the MLP
// activation of fc's output (cast as the fc projection's input): gelu of it, or SwiGLU of its [gate | up] halves; or
// the activation's backward from the fc projection's input gradient (cast as fc's output gradient): dy gelu'(pre),
// or SwiGLU's [dgate | dup].
template <typename T> struct Fp8Plain {
    const T *x;
    __device__ __forceinline__ void operator()(float *v, size_t i) const { fp8_load(v, x + i); }
};
template <typename T> struct Fp8GeluOf {
    const T *x;
    __device__ __forceinline__ void operator()(float *v, size_t i) const {
        fp8_load(v, x + i);
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) { v[j] = gelu_fast(v[j]); }
    }
};
template <typename T> struct Fp8DgeluOf {
    const T *dy, *pre;
    __device__ __forceinline__ void operator()(float *v, size_t i) const {
        float p[FP8_VEC];
        fp8_load(v, dy + i);
        fp8_load(p, pre + i);
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) { v[j] *= gelu_grad_fast(p[j]); }
    }
};

// Row i / cols of a row-major tensor cols wide (32-bit division where i allows: a 64-bit one costs several times more).
__device__ __forceinline__ size_t row_of(size_t i, int cols) {
    return i <= UINT_MAX ? (size_t)((unsigned)i / (unsigned)cols) : i / (size_t)cols;
}

// h (rows, F) = silu(gate) * up of fch (rows, 2F) = [gate | up] (swiglu.cuh's arithmetic); i is h's element, F a
// multiple of FP8_VEC, so a thread's values lie in one half.
template <typename T> struct Fp8SwigluOf {
    const T *fch;
    int F;
    __device__ __forceinline__ void operator()(float *v, size_t i) const {
        const T *gate = fch + i + row_of(i, F) * F; // row r of h starts at 2F r in fch
        float u[FP8_VEC];
        fp8_load(v, gate);
        fp8_load(u, gate + F);
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) { v[j] = swiglu_of(v[j], u[j]); }
    }
};

// d fch (rows, 2F) = [dgate | dup] from dh (rows, F), the gradient of h = swiglu(fch), and fch (swiglu.cuh's
// arithmetic); i is d fch's element.
template <typename T> struct Fp8DswigluOf {
    const T *dh, *fch;
    int F;
    __device__ __forceinline__ void operator()(float *v, size_t i) const {
        size_t r = row_of(i, 2 * F);
        int c = (int)(i - r * 2 * F);
        bool up = c >= F; // this thread's values are dup's
        c -= up ? F : 0;
        const T *gate = fch + r * 2 * F + c;
        float g[FP8_VEC], u[FP8_VEC] = {0.0f};
        fp8_load(v, dh + r * F + c);
        fp8_load(g, gate);
        if (!up) { fp8_load(u, gate + F); }
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) {
            float dgate, dup;
            swiglu_grads(v[j], g[j], u[j], &dgate, &dup);
            v[j] = up ? dup : dgate;
        }
    }
};

// Two FP8 codes (a in the low byte), rounded to nearest even and saturated.
__device__ __forceinline__ uint16_t fp8_pair(float a, float b, Fp8Format f) {
    return f == FP8_E4M3 ? __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3)
                         : __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E5M2);
}

__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(fabsf(x)); }

// The largest of x over the block (blockDim.x a multiple of 32), on thread 0; shared holds 32 values.
__device__ __forceinline__ unsigned block_max_bits(unsigned x, unsigned *shared) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    x = __reduce_max_sync(0xffffffffu, x);
    if (lane == 0) { shared[warp] = x; }
    __syncthreads();
    x = lane < (int)(blockDim.x / WARP_SIZE) ? shared[lane] : 0u;
    return __reduce_max_sync(0xffffffffu, x);
}

// The scale of a cast, computed by warp 0 (every lane returns it).
__device__ __forceinline__ float fp8_cast_scale(const Fp8CastArgs &a) {
    if (a.from.count == 0) { return *a.scale; }
    unsigned m = 0;
    for (int i = threadIdx.x; i < a.from.count; i += WARP_SIZE) { m = max(m, __float_as_uint(a.from.amax[i])); }
    m = __reduce_max_sync(0xffffffffu, m);
    return fp8_scale_of(__uint_as_float(m), a.format, a.margin_scale);
}

/*
 * The cast (see the top of the file) of src's (rows, cols) values, cols % FP8_VEC == 0, rows 16-byte aligned. Grid
 * (column tiles, row tiles), FP8_CAST_THREADS threads: a thread converts FP8_VEC values of a row at a time (16 of a
 * tile's rows at once), stores them row-major and into the tile in shared memory, then stores FP8_TRANSPOSED_SEGMENT
 * bytes of a transposed row (16-byte stores where the destination is aligned, else byte by byte). With col_sums, the
 * tile's column sums of the values (before rounding), in a fixed order.
 */
#define FP8_ROWS_AT_ONCE (FP8_CAST_THREADS / (FP8_TILE_COLS / FP8_VEC))
template <typename Src>
__global__ void __launch_bounds__(FP8_CAST_THREADS) fp8_cast_kernel(Src src, int rows, int cols, Fp8CastArgs a) {
    constexpr int THREADS_PER_ROW = FP8_TILE_COLS / FP8_VEC, ROWS_AT_ONCE = FP8_ROWS_AT_ONCE;
    // +16 bytes a row: a warp's transposed reads (32 columns of one row) then fall into distinct 4-byte words
    __shared__ alignas(16) uint8_t tile[FP8_TILE_ROWS][FP8_TILE_COLS + 16];
    __shared__ float s_scale;
    __shared__ unsigned s_max[WARP_SIZE];
    __shared__ float s_sums[FP8_ROWS_AT_ONCE][FP8_TILE_COLS];
    const int r0 = blockIdx.y * FP8_TILE_ROWS, c0 = blockIdx.x * FP8_TILE_COLS;
    if (threadIdx.x < WARP_SIZE) {
        float sc = fp8_cast_scale(a);
        if (threadIdx.x == 0) {
            s_scale = sc;
            if (a.from.count > 0 && blockIdx.x == 0 && blockIdx.y == 0) {
                *a.scale = sc;
                *a.scale_inv = 1.0f / sc;
            }
        }
    }
    __syncthreads();
    const float scale = s_scale;
    const int tc = (threadIdx.x % THREADS_PER_ROW) * FP8_VEC, c = c0 + tc, tr0 = threadIdx.x / THREADS_PER_ROW;
    unsigned amax = 0;
    float sums[FP8_VEC] = {0.0f};
    for (int tr = tr0; tr < FP8_TILE_ROWS; tr += ROWS_AT_ONCE) {
        int r = r0 + tr;
        uint2 q = make_uint2(0u, 0u);
        if (r < rows && c < cols) {
            float v[FP8_VEC];
            src(v, (size_t)r * cols + c);
            uint16_t p[FP8_VEC / 2];
#pragma unroll
            for (int j = 0; j < FP8_VEC; j += 2) {
                amax = max(amax, max(abs_bits(v[j]), abs_bits(v[j + 1])));
                p[j / 2] = fp8_pair(v[j] * scale, v[j + 1] * scale, a.format);
                sums[j] += v[j];
                sums[j + 1] += v[j + 1];
            }
            q = make_uint2((unsigned)p[0] | (unsigned)p[1] << 16, (unsigned)p[2] | (unsigned)p[3] << 16);
            if (a.rows) { *reinterpret_cast<uint2 *>(a.rows + (size_t)r * cols + c) = q; }
        }
        *reinterpret_cast<uint2 *>(&tile[tr][tc]) = q;
    }
    if (a.col_sums) {
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) { s_sums[tr0][tc + j] = sums[j]; }
    }
    amax = block_max_bits(amax, s_max); // its barrier also makes the tile and the sums whole for what follows
    if (threadIdx.x == 0 && a.amax_step) { atomicMax(a.amax_step, amax); }
    if (a.col_sums && threadIdx.x < FP8_TILE_COLS && c0 + threadIdx.x < cols) {
        float t = 0.0f;
        for (int k = 0; k < ROWS_AT_ONCE; k++) { t += s_sums[k][threadIdx.x]; }
        a.col_sums[(size_t)blockIdx.y * cols + c0 + threadIdx.x] = t;
    }
    if (!a.cols_t) { return; }
    constexpr int SEGMENTS = FP8_TILE_ROWS / FP8_TRANSPOSED_SEGMENT;
    for (int i = threadIdx.x; i < FP8_TILE_COLS * SEGMENTS; i += FP8_CAST_THREADS) {
        int j = i % FP8_TILE_COLS, seg = (i / FP8_TILE_COLS) * FP8_TRANSPOSED_SEGMENT;
        int oc = c0 + j, n = min(FP8_TRANSPOSED_SEGMENT, rows - (r0 + seg));
        if (oc >= cols || n <= 0) { continue; }
        uint8_t *dst = a.cols_t + (size_t)oc * a.ld_t + a.col0 + r0 + seg;
        if (n == FP8_TRANSPOSED_SEGMENT && (reinterpret_cast<uintptr_t>(dst) % 16) == 0) {
            unsigned w[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                w[k] = (unsigned)tile[seg + 4 * k][j] | (unsigned)tile[seg + 4 * k + 1][j] << 8 |
                       (unsigned)tile[seg + 4 * k + 2][j] << 16 | (unsigned)tile[seg + 4 * k + 3][j] << 24;
            }
            *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            for (int k = 0; k < n; k++) { dst[k] = tile[seg + k][j]; }
        }
    }
}

// cols_t (cols, ld_t) at columns [col0, col0 + rows) = the transpose of the FP8 codes in (rows, cols): source row r
// lands in column col0 + r (in 16-byte aligned, cols % 16 == 0). 64 x 64 byte tiles through shared memory, 16-byte
// loads; a thread stores FP8_TRANSPOSED_SEGMENT bytes of a transposed row, at once where they are whole and aligned,
// else byte by byte (a block of rows at any column of a wider matrix: SP's ring, one owner's rows at a time). Grid
// (column tiles, row tiles), FP8_TRANSPOSE_THREADS.
#define FP8_TRANSPOSE_TILE 64
#define FP8_TRANSPOSE_THREADS 256
__global__ void __launch_bounds__(FP8_TRANSPOSE_THREADS)
    fp8_transpose_kernel(const uint8_t *in, uint8_t *cols_t, int rows, int cols, int ld_t, int col0) {
    constexpr int SEG = FP8_TRANSPOSED_SEGMENT, SEGS = FP8_TRANSPOSE_TILE / SEG; // a thread's 16 bytes; 4 a tile row
    __shared__ uint8_t tile[FP8_TRANSPOSE_TILE][FP8_TRANSPOSE_TILE + 4];
    const int r0 = blockIdx.y * FP8_TRANSPOSE_TILE, c0 = blockIdx.x * FP8_TRANSPOSE_TILE;
    int tr = threadIdx.x / SEGS, tc = (threadIdx.x % SEGS) * SEG;
    if (r0 + tr < rows && c0 + tc < cols) {
        uint4 v = *reinterpret_cast<const uint4 *>(in + (size_t)(r0 + tr) * cols + c0 + tc);
        const uint8_t *b = reinterpret_cast<const uint8_t *>(&v);
        for (int k = 0; k < SEG; k++) { tile[tr][tc + k] = b[k]; }
    }
    __syncthreads();
    // output row c0 + tr: its bytes tc .. tc + 15 are input rows r0 + tc .. r0 + tc + 15
    int n = min(SEG, rows - (r0 + tc));
    if (c0 + tr >= cols || n <= 0) { return; }
    uint8_t *dst = cols_t + (size_t)(c0 + tr) * ld_t + col0 + r0 + tc;
    if (n == SEG && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        uint4 v;
        uint8_t *b = reinterpret_cast<uint8_t *>(&v);
        for (int k = 0; k < SEG; k++) { b[k] = tile[tc + k][tr]; }
        *reinterpret_cast<uint4 *>(dst) = v;
    } else {
        for (int k = 0; k < n; k++) { dst[k] = tile[tc + k][tr]; }
    }
}

// The codes in (rows, cols) transposed into columns [col0, col0 + rows) of cols_t, whose rows are ld_t bytes (the
// whole transpose: ld_t = rows, col0 = 0).
static void fp8_transpose(const uint8_t *in, uint8_t *cols_t, int rows, int cols, int ld_t, int col0,
                          cudaStream_t stream) {
    if (cols % FP8_TRANSPOSED_SEGMENT != 0 || reinterpret_cast<uintptr_t>(in) % 16 != 0) {
        fail("fp8_transpose: the codes' rows must be 16-byte aligned (%d columns)", cols);
    }
    dim3 grid(ceil_div_int(cols, FP8_TRANSPOSE_TILE), ceil_div_int(rows, FP8_TRANSPOSE_TILE));
    fp8_transpose_kernel<<<grid, FP8_TRANSPOSE_THREADS, 0, stream>>>(in, cols_t, rows, cols, ld_t, col0);
    cudaCheckLaunch();
}

// partials[block] = the largest |value| of the block's grid-strided share of src's n values (n % FP8_VEC == 0).
template <typename Src>
__global__ void __launch_bounds__(FP8_CAST_THREADS) fp8_amax_kernel(Src src, size_t n, float *partials) {
    __shared__ unsigned s_max[WARP_SIZE];
    unsigned m = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x * FP8_VEC;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * FP8_VEC; i < n; i += stride) {
        float v[FP8_VEC];
        src(v, i);
#pragma unroll
        for (int j = 0; j < FP8_VEC; j++) { m = max(m, abs_bits(v[j])); }
    }
    m = block_max_bits(m, s_max);
    if (threadIdx.x == 0) { partials[blockIdx.x] = __uint_as_float(m); }
}

// One block: every tensor's step amax enters its history (fp8_history_push) and is reset; the first non-finite one
// goes to the verdict.
#define FP8_HISTORY_THREADS 1024
__global__ void __launch_bounds__(FP8_HISTORY_THREADS)
    fp8_history_kernel(float *amax_scale, unsigned *amax_step, float *ring, int tensors, int length, long long step,
                       Fp8Verdict *verdict) {
    __shared__ unsigned s_min[WARP_SIZE];
    unsigned bad = (unsigned)tensors;
    for (int t = threadIdx.x; t < tensors; t += blockDim.x) {
        float a = __uint_as_float(amax_step[t]);
        if (!isfinite(a)) { bad = min(bad, (unsigned)t); }
        amax_scale[t] = fp8_history_push(ring + (size_t)t * length, length, step, a);
        amax_step[t] = 0u;
    }
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    bad = __reduce_min_sync(0xffffffffu, bad);
    if (lane == 0) { s_min[warp] = bad; }
    __syncthreads();
    if (warp != 0) { return; }
    bad = __reduce_min_sync(0xffffffffu, lane < (int)(blockDim.x / WARP_SIZE) ? s_min[lane] : (unsigned)tensors);
    if (lane == 0) {
        verdict->tensor = (int)bad;
        verdict->amax = bad < (unsigned)tensors ? ring[(size_t)bad * length + step % length] : 0.0f;
    }
}

// ----------------------------------------------------------------------------------------------------------------
// host side

// Where a cast puts its FP8 codes: row-major (rows), transposed (cols_t: source row r at column col0 + r of rows ld_t
// long), either NULL; and col_sums, for the column sums of the values (fp8_col_sums_floats).
typedef struct {
    uint8_t *rows, *cols_t;
    int ld_t, col0;
    float *col_sums;
} Fp8CastOut;

// Floats of a cast's col_sums: a row of column sums per tile of rows.
static size_t fp8_col_sums_floats(int rows, int cols) { return (size_t)ceil_div_int(rows, FP8_TILE_ROWS) * cols; }
static int fp8_col_sums_parts(int rows) { return ceil_div_int(rows, FP8_TILE_ROWS); }

// partials[0 .. d->amax_blocks) = the largest |value| of parts of src's n values (n % FP8_VEC == 0): their largest is
// the tensor's amax, which a cast then takes from them (FP8_SCALE_PARTIALS).
template <typename Src>
static void fp8_amax_pass(const Fp8Device *d, Src src, size_t n, float *partials, cudaStream_t stream) {
    fp8_amax_kernel<<<d->amax_blocks, FP8_CAST_THREADS, 0, stream>>>(src, n, partials);
    cudaCheckLaunch();
}

// Where a cast's scale comes from.
typedef enum {
    FP8_SCALE_RECIPE,   // the recipe's: the tensor's own amax (an amax pass into partials first) or its history's
    FP8_SCALE_AGAIN,    // the scale an earlier cast of the same values took (a recompute)
    FP8_SCALE_PARTIALS, // the amax in partials, which the caller took (fp8_amax_pass) and perhaps maxed over ranks
} Fp8ScaleSource;

/*
 * Casts tensor t's (rows, cols) values, as src reads them, to FP8 (see the top of the file), into out, scaled as
 * `from` says; partials: d->amax_blocks floats, a scratch of the stream's own (its amax pass, or the caller's maxima).
 * record: the tensor's amax enters the step.
 */
template <typename Src>
static void fp8_cast(const Fp8Device *d, int t, Src src, int rows, int cols, Fp8CastOut out, bool record,
                     Fp8ScaleSource from, float *partials, cudaStream_t stream) {
    if (rows <= 0) { return; }
    Fp8CastArgs a;
    a.rows = out.rows;
    a.cols_t = out.cols_t;
    a.ld_t = out.ld_t;
    a.col0 = out.col0;
    a.col_sums = out.col_sums;
    a.scale = fp8_scale(d, t);
    a.scale_inv = fp8_scale_inv(d, t);
    a.amax_step = record ? d->amax_step + t : NULL;
    a.margin_scale = d->recipe.margin_scale;
    a.format = fp8_role_format(t % FP8_ROLES);
    if (from == FP8_SCALE_RECIPE && fp8_scales_current(d)) {
        fp8_amax_pass(d, src, (size_t)rows * cols, partials, stream);
        from = FP8_SCALE_PARTIALS;
    }
    if (from == FP8_SCALE_AGAIN) {
        a.from = {NULL, 0};
    } else if (from == FP8_SCALE_PARTIALS) {
        a.from = {partials, d->amax_blocks};
    } else {
        a.from = {d->amax_scale + t, 1};
    }
    dim3 grid(ceil_div_int(cols, FP8_TILE_COLS), ceil_div_int(rows, FP8_TILE_ROWS));
    fp8_cast_kernel<<<grid, FP8_CAST_THREADS, 0, stream>>>(src, rows, cols, a);
    cudaCheckLaunch();
}

// The end of an optimizer step (its 1-based number `step`): the step's amaxes, already reduced over the ranks, enter
// the history; the next casts scale by it. The verdict is copied to the host behind it on `stream`; the caller checks
// it (fp8_check_step) once the stream has passed there.
static void fp8_end_step(Fp8Device *d, cudaStream_t stream) {
    fp8_history_kernel<<<1, FP8_HISTORY_THREADS, 0, stream>>>(d->amax_scale, d->amax_step, d->ring, d->tensors,
                                                              d->length, d->steps, d->verdict);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(d->host_verdict, d->verdict, sizeof(Fp8Verdict), cudaMemcpyDeviceToHost, stream));
    d->steps++;
}

static void fp8_check_step(const Fp8Device *d, int step) {
    if (d->host_verdict->tensor < d->tensors) {
        fp8_fail_nonfinite(d->host_verdict->tensor, d->host_verdict->amax, step);
    }
}

// The history to the host (h of fp8_history_init's shape for this model), queued on `stream`: the caller waits for
// it before reading h.
static void fp8_history_get(const Fp8Device *d, Fp8History *h, cudaStream_t stream) {
    cudaCheck(cudaMemcpyAsync(h->ring, d->ring, (size_t)d->tensors * d->length * sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
    h->steps = d->steps;
}

// h becomes the history, and each tensor's delayed amax its largest; queued on `stream` (the copies from pageable host
// memory are staged before cudaMemcpyAsync returns, so h and the scratch may go at once).
static void fp8_history_set(Fp8Device *d, const Fp8History *h, cudaStream_t stream) {
    size_t n = (size_t)d->tensors * d->length;
    float *amax = (float *)malloc_check(d->tensors * sizeof(float), "FP8 amaxes");
    for (int t = 0; t < d->tensors; t++) {
        amax[t] = fp8_history_max(h->ring + (size_t)t * d->length, d->length, h->steps);
    }
    cudaCheck(cudaMemcpyAsync(d->ring, h->ring, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(d->amax_scale, amax, d->tensors * sizeof(float), cudaMemcpyHostToDevice, stream));
    free(amax);
    d->steps = h->steps;
    d->weights_stale = 1;
}

// Forget what the casts since the last step recorded (a pass whose results are discarded: the GEMM tuning pass); the
// weights are cast again, recording their amax, before the next forward.
static void fp8_discard_step(Fp8Device *d, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(d->amax_step, 0, d->tensors * sizeof(unsigned), stream));
    d->weights_stale = 1;
}

#endif // LLMC_FP8_CUH
