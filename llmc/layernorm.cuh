/*
 * layernorm.cuh: LayerNorm over the channels of each row, fused with the residual add that precedes it, and its
 * deterministic backward.
 *
 * Forward:  r = x + dx (the residual stream after a sublayer; skipped when dx is NULL), written out;
 *           mu = mean(r), rstd = 1 / sqrt(var(r) + eps), y = (r - mu) * rstd * w + b. mu and rstd are kept for
 *           backward.
 * Backward: xhat = (r - mu) * rstd, g = dy * w,
 *           dr += rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += sum_rows dy * xhat,  db += sum_rows dy,
 *           and optionally dsum += sum_rows dr: dr, the gradient of the residual stream, is the output gradient of
 *           the projection that wrote r, so this is that projection's bias gradient, taken while dr is in registers.
 * The parameter gradients are column sums: each block sums its rows in registers, writes one row of partials,
 * and add_partial_sums adds the blocks in order, all three sums in one launch (no atomics, so the result does not
 * depend on timing).
 *
 * Geometry: one thread block per row (grid-stride over rows); thread i holds packs i, i + blockDim.x, ... of the
 * row (PACKS of them, 16 bytes each; in registers, and backward stages them in shared memory first), so a row is read
 * once. Forward takes the fewest packs a thread that fit a block, backward LN_BWD_PACKS. Rows of up to LN_MAX_PACKS
 * packs.
 */
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LAYERNORM_EPS 1e-5f
#define LN_THREADS_MAX 256
#define LN_PACKS_MAX 4
#define LN_MAX_PACKS (LN_THREADS_MAX * LN_PACKS_MAX)
#define LN_PARTIALS 3 // rows of partial sums per backward block: dw, db, dsum

template <typename T, int PACKS>
__global__ void __launch_bounds__(LN_THREADS_MAX)
    layernorm_forward_kernel(T *out, float *mean, float *rstd, T *resid, const T *x, const T *dx, const T *w,
                               const T *b, int rows, int C) {
    constexpr int PN = Packed<T>::N;
    __shared__ float red[WARP_SIZE];
    int packs = C / PN;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        size_t base = (size_t)row * C;
        float v[PACKS][PN];
        float s = 0.0f;
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            for (int j = 0; j < PN; j++) { v[k][j] = 0.0f; }
            if (p >= packs) { continue; }
            Packed<T> xa = load_packed(x + base + p * PN);
            if (dx) {
                // Round the sum to T first: backward reads the stored residual, so both must see the same r.
                Packed<T> da = load_packed_cs(dx + base + p * PN), r;
                for (int j = 0; j < PN; j++) { r.set(j, xa[j] + da[j]); }
                store_packed(resid + base + p * PN, r);
                xa = r;
            }
            for (int j = 0; j < PN; j++) {
                v[k][j] = xa[j];
                s += v[k][j];
            }
        }
        float mu = block_sum(s, red) / C;
        float s2 = 0.0f;
        for (int k = 0; k < PACKS; k++) {
            if (threadIdx.x + k * blockDim.x >= packs) { continue; }
            for (int j = 0; j < PN; j++) { s2 += (v[k][j] - mu) * (v[k][j] - mu); }
        }
        float rs = 1.0f / sqrtf(block_sum(s2, red) / C + LAYERNORM_EPS);
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            if (p >= packs) { continue; }
            Packed<T> wa = load_packed(w + p * PN), ba = load_packed(b + p * PN), o;
            for (int j = 0; j < PN; j++) { o.set(j, (v[k][j] - mu) * rs * wa[j] + ba[j]); }
            store_packed(out + base + p * PN, o);
        }
        if (threadIdx.x == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
    }
}

// Backward is a pipeline over a block's rows (blockIdx.x, + gridDim.x, ...): each thread copies its packs of a row's
// dout, inp and dinp, and the row's mean and rstd, into shared memory with cp.async, LN_BWD_STAGES - 1 rows ahead of
// the row it works on. So the next rows' loads are in flight while the block reduces and updates this one, and a row
// does not wait a memory round trip before its reduction (before, nothing was in flight during the reduction and the
// update, and the 28 warps per SM at 1558M did not cover that). Copies in flight hold no registers (the statistics
// too: a register loaded rows ahead would have to be moved along every row, which waits for the load). A thread reads
// back only what it copied itself, so waiting for its own copies suffices; a slot is refilled only after the next
// row's block_sum2 barriers, which order the refill after every read of it. The update reads the row again from
// shared memory rather than keeping it in registers across the reduction (keeping g = dy w and xhat in registers
// instead, 236 registers at 4 packs, measured the same). Registers are capped so that LN_BWD_MIN_BLOCKS / PACKS
// blocks fit on an SM; w is read once.
#define LN_BWD_MIN_BLOCKS 4
#define LN_BWD_STAGES 3 // slots of rows in shared memory: the one worked on and LN_BWD_STAGES - 1 in flight
#define LN_BWD_ARRAYS 3 // per slot: dout, inp, dinp
// Packs a thread takes of a row in backward: 4 rather than the fewest that fit, so that a row's reduction, barriers
// and copies are paid once per 32 bf16 values rather than 8. H100, dev/bench_layernorm.cu, us a call with 1 -> 4
// packs: 124M (C 768, 32768 rows) 108.8 -> 94.4, 350M 90.5 -> 84.2, 774M 71.9 -> 57.1, 1558M 72.9 -> 70.9.
#define LN_BWD_PACKS 4

// Shared memory of the backward kernel: LN_BWD_STAGES slots of LN_BWD_ARRAYS rows of C, then per slot the mean and
// rstd each thread copied for itself.
template <typename T> static size_t layernorm_backward_smem(int C, int threads) {
    return (size_t)LN_BWD_STAGES * (LN_BWD_ARRAYS * C * sizeof(T) + 2 * threads * sizeof(float));
}

// Copies this thread's part of row `row` into slot k: dout, inp and dinp packs, its mean and rstd.
template <typename T, int PACKS>
__device__ __forceinline__ void layernorm_backward_fetch(Packed<T> *slots, float *stats, int k, const T *dout,
                                                         const T *inp, const T *dinp, const float *mean,
                                                         const float *rstd, int row, int C) {
    constexpr int PN = Packed<T>::N;
    int packs = C / PN;
    Packed<T> *slot = slots + k * LN_BWD_ARRAYS * packs;
    size_t base = (size_t)row * C;
    for (int i = 0; i < PACKS; i++) {
        int p = threadIdx.x + i * blockDim.x;
        if (p >= packs) { continue; }
        cp_async_packed(slot + p, dout + base + p * PN);
        cp_async_packed(slot + packs + p, inp + base + p * PN);
        cp_async_packed(slot + 2 * packs + p, dinp + base + p * PN);
    }
    cp_async_float(stats + (2 * k) * blockDim.x + threadIdx.x, mean + row);
    cp_async_float(stats + (2 * k + 1) * blockDim.x + threadIdx.x, rstd + row);
}

template <typename T, int PACKS>
__global__ void __launch_bounds__(LN_THREADS_MAX, LN_BWD_MIN_BLOCKS / PACKS)
    layernorm_backward_kernel(T *dinp, float *partial, const T *dout, const T *inp, const T *w, const float *mean,
                              const float *rstd, int rows, int C) {
    constexpr int PN = Packed<T>::N, S = LN_BWD_STAGES;
    extern __shared__ int4 ln_bwd_smem[]; // layernorm_backward_smem
    __shared__ float2 red[WARP_SIZE];
    int packs = C / PN;
    Packed<T> *slots = reinterpret_cast<Packed<T> *>(ln_bwd_smem);
    float *stats = reinterpret_cast<float *>(slots + S * LN_BWD_ARRAYS * packs);
    float wv[PACKS][PN], dw[PACKS][PN], db[PACKS][PN], ds[PACKS][PN];
    for (int k = 0; k < PACKS; k++) {
        int p = threadIdx.x + k * blockDim.x;
        Packed<T> wa;
        if (p < packs) { wa = load_packed(w + p * PN); }
        for (int j = 0; j < PN; j++) {
            wv[k][j] = p < packs ? wa[j] : 0.0f;
            dw[k][j] = db[k][j] = ds[k][j] = 0.0f;
        }
    }
    // The first S - 1 rows in flight: one group of copies per row (empty past the last row), so row i is group i.
    for (int i = 0; i < S - 1; i++) {
        int row = blockIdx.x + i * gridDim.x;
        if (row < rows) { layernorm_backward_fetch<T, PACKS>(slots, stats, i, dout, inp, dinp, mean, rstd, row, C); }
        cp_async_commit();
    }
    for (int i = 0, row = blockIdx.x; row < rows; i++, row += gridDim.x) {
        int slot = i % S;
        const Packed<T> *da = slots + slot * LN_BWD_ARRAYS * packs, *xa = da + packs, *acc = xa + packs;
        cp_async_wait<S - 2>(); // this row's group has landed; the S - 2 after it may still be in flight
        float mu = stats[(2 * slot) * blockDim.x + threadIdx.x], rs = stats[(2 * slot + 1) * blockDim.x + threadIdx.x];
        float2 s = make_float2(0.0f, 0.0f);
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            if (p >= packs) { continue; }
            Packed<T> dy = da[p], x = xa[p];
            for (int j = 0; j < PN; j++) {
                float g = dy[j] * wv[k][j];
                s.x += g;
                s.y += g * ((x[j] - mu) * rs);
            }
        }
        s = block_sum2(s, red);
        float mean_g = s.x / C, mean_gx = s.y / C;
        // Refill the slot the previous row used (every thread has read it: the barriers above are after).
        int ahead = row + (S - 1) * gridDim.x;
        if (ahead < rows) {
            layernorm_backward_fetch<T, PACKS>(slots, stats, (i + S - 1) % S, dout, inp, dinp, mean, rstd, ahead, C);
        }
        cp_async_commit();
        size_t base = (size_t)row * C;
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            if (p >= packs) { continue; }
            Packed<T> dy = da[p], x = xa[p], out = acc[p];
            for (int j = 0; j < PN; j++) {
                float xhat = (x[j] - mu) * rs;
                out.set(j, out[j] + rs * (dy[j] * wv[k][j] - mean_g - xhat * mean_gx));
                dw[k][j] += dy[j] * xhat;
                db[k][j] += dy[j];
                ds[k][j] += out[j]; // as stored (rounded to T), which is what the projection's GEMMs read
            }
            store_packed(dinp + base + p * PN, out);
        }
    }
    float *pw = partial + (size_t)blockIdx.x * LN_PARTIALS * C, *pb = pw + C, *ps = pb + C;
    for (int k = 0; k < PACKS; k++) {
        int p = threadIdx.x + k * blockDim.x;
        if (p >= packs) { continue; }
        for (int j = 0; j < PN; j++) {
            pw[p * PN + j] = dw[k][j];
            pb[p * PN + j] = db[k][j];
            ps[p * PN + j] = ds[k][j];
        }
    }
}

// Launch shape for rows of C channels: packs per thread (1, 2 or 4) and threads (a multiple of 32).
typedef struct {
    int packs_per_thread, threads;
} LnShape;

// The shape with packs_per_thread packs a thread (0: the fewest, 1, 2 or 4, that fit LN_THREADS_MAX threads).
template <typename T> static LnShape layernorm_shape(int C, int packs_per_thread = 0) {
    int packs = C / Packed<T>::N;
    if (C % Packed<T>::N != 0 || packs > LN_MAX_PACKS) {
        fail("LayerNorm on the GPU needs the width to be a multiple of %d and at most %d in %s (got %d); "
             "change --width",
             Packed<T>::N, LN_MAX_PACKS * Packed<T>::N, TypeInfo<T>::name, C);
    }
    LnShape s;
    s.packs_per_thread = packs_per_thread > 0 ? packs_per_thread : 1;
    while (ceil_div_int(packs, s.packs_per_thread) > LN_THREADS_MAX) { s.packs_per_thread *= 2; }
    s.threads = ceil_div_int(ceil_div_int(packs, s.packs_per_thread), WARP_SIZE) * WARP_SIZE;
    return s;
}

template <typename T>
using LnBackwardKernel = void (*)(T *, float *, const T *, const T *, const T *, const float *, const float *, int,
                                  int);
template <typename T> static LnBackwardKernel<T> layernorm_backward_kernel_for(int packs_per_thread) {
    switch (packs_per_thread) {
    case 1: return layernorm_backward_kernel<T, 1>;
    case 2: return layernorm_backward_kernel<T, 2>;
    default: return layernorm_backward_kernel<T, 4>;
    }
}

// Blocks of the backward kernel: as many as are resident at once (the rows are grid-strided, so one more would wait
// for a whole block to finish), no more, since each block writes rows of partials (LN_PARTIALS * C floats). Also
// lets the kernel have its shared memory: over the default 48 KB from 2520 bf16 / 1260 fp32 channels, 154 KB at the
// widest rows (8192 bf16), within the 227 KB of sm_90. The attribute and the occupancy query are host calls of
// microseconds, and a model asks ~2 L times a step for one width: made once per width and shape (and element type).
template <typename T> static int layernorm_backward_blocks(int rows, int C, LnShape s) {
    static int known_C = 0, known_ppt = 0, known_blocks = 0;
    if (C != known_C || s.packs_per_thread != known_ppt) {
        LnBackwardKernel<T> kernel = layernorm_backward_kernel_for<T>(s.packs_per_thread);
        size_t smem = layernorm_backward_smem<T>(C, s.threads);
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int per_sm = 0;
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, s.threads, smem));
        known_blocks = g_cuda.props.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
        known_C = C;
        known_ppt = s.packs_per_thread;
    }
    return rows < known_blocks ? rows : known_blocks;
}

// Floats of scratch layernorm_backward needs for `rows` rows.
template <typename T> static size_t layernorm_backward_scratch_floats(int rows, int C) {
    return (size_t)layernorm_backward_blocks<T>(rows, C, layernorm_shape<T>(C, LN_BWD_PACKS)) * LN_PARTIALS * C;
}

// out = LayerNorm(x + dx) (or of x when dx is NULL, then resid is unused); resid = x + dx.
template <typename T>
static void layernorm_forward(T *out, float *mean, float *rstd, T *resid, const T *x, const T *dx, const T *w,
                              const T *b, int rows, int C, cudaStream_t stream) {
    LnShape s = layernorm_shape<T>(C);
    int per_sm = 2048 / s.threads;
    int blocks = g_cuda.props.multiProcessorCount * per_sm;
    if (blocks > rows) { blocks = rows; }
#define LN_FWD(P)                                                                                                      \
    layernorm_forward_kernel<T, P><<<blocks, s.threads, 0, stream>>>(out, mean, rstd, resid, x, dx, w, b, rows, C)
    switch (s.packs_per_thread) {
    case 1: LN_FWD(1); break;
    case 2: LN_FWD(2); break;
    default: LN_FWD(4); break;
    }
#undef LN_FWD
    cudaCheckLaunch();
}

// dinp += dLayerNorm/dinp (dout); dw += ..., db += ... (written when not accumulate); dsum (unless NULL) likewise
// gets the column sums of the resulting dinp. scratch: layernorm_backward_scratch_floats(rows, C). packs_per_thread:
// LN_BWD_PACKS (dev/bench_layernorm.cu times the others, with scratch for them).
template <typename T>
static void layernorm_backward(T *dinp, float *dw, float *db, float *dsum, float *scratch, const T *dout,
                               const T *inp, const T *w, const float *mean, const float *rstd, int rows, int C,
                               int accumulate, cudaStream_t stream, int packs_per_thread = LN_BWD_PACKS) {
    LnShape s = layernorm_shape<T>(C, packs_per_thread);
    int blocks = layernorm_backward_blocks<T>(rows, C, s);
    layernorm_backward_kernel_for<T>(s.packs_per_thread)<<<blocks, s.threads, layernorm_backward_smem<T>(C, s.threads),
                                                           stream>>>(dinp, scratch, dout, inp, w, mean, rstd, rows, C);
    cudaCheckLaunch();
    PartialSumDsts dsts = {{dw, db, dsum}};
    add_partial_sums(dsts, dsum ? LN_PARTIALS : LN_PARTIALS - 1, scratch, blocks, C, LN_PARTIALS * C, accumulate,
                     stream);
}

#endif // LLMC_LAYERNORM_CUH
