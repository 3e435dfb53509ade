/*
 * layernorm.cuh: LayerNorm and RMSNorm over the channels of each row, fused with the residual add that precedes
 * them, and their deterministic backward. RMSNorm is LayerNorm without the mean and the bias: the same kernels with
 * a template flag (RMS), so the two cannot drift apart.
 *
 * Forward:  r = x + dx (the residual stream after a sublayer; skipped when dx is NULL), written out;
 *           LayerNorm: mu = mean(r), rstd = 1 / sqrt(var(r) + eps), y = (r - mu) * rstd * w + b;
 *           RMSNorm:   mu = 0,       rstd = 1 / sqrt(mean(r^2) + eps), y = r * rstd * w.
 *           mu (LayerNorm) and rstd are kept for backward.
 * Backward: xhat = (r - mu) * rstd, g = dy * w,
 *           LayerNorm: dr += rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += sum_rows dy * xhat,
 *                      db += sum_rows dy;
 *           RMSNorm:   dr += rstd * (g - xhat * mean(g * xhat)),            dw += sum_rows dy * xhat
 *           (mean(g) drops out with mu: r's mean is not subtracted, so no gradient flows through it),
 *           and optionally dsum += sum_rows dr: dr, the gradient of the residual stream, is the output gradient of
 *           the projection that wrote r, so this is that projection's bias gradient, taken while dr is in registers.
 * The parameter gradients are column sums: each row group sums its rows in registers, a block adds its groups in
 * order and writes one row of partials, and add_partial_sums adds the blocks in order, all the sums in one launch
 * (no atomics, so the result does not depend on timing).
 *
 * Geometry: a row is taken by one thread block in forward, by one row group of a block in backward (grid-stride
 * over rows); thread i holds packs i, i + blockDim.x, ... of the row (PACKS of them, 16 bytes each; in registers, and
 * backward stages them in shared memory first), so a row is read once. Forward takes the fewest packs a thread that
 * fit a block, backward up to LN_BWD_PACKS. Rows of up to LN_MAX_PACKS packs.
 */
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LAYERNORM_EPS 1e-5f
#define LN_THREADS_MAX 256
#define LN_PACKS_MAX 4
#define LN_MAX_PACKS (LN_THREADS_MAX * LN_PACKS_MAX)
#define LN_PARTIALS 3 // rows of partial sums per backward block: dw, db, dsum (RMSNorm: dw, dsum)

// Rows of partial sums a backward block writes: RMSNorm has no bias, so no db.
template <bool RMS> __host__ __device__ constexpr int norm_partials() { return RMS ? LN_PARTIALS - 1 : LN_PARTIALS; }

// mean is not written for RMSNorm (its mu is 0), nor is b read.
template <typename T, int PACKS, bool RMS>
__global__ void __launch_bounds__(LN_THREADS_MAX)
    layernorm_forward_kernel(T *out, float *mean, float *rstd, T *resid, const T *x, const T *dx, const T *w,
                               const T *b, int rows, int C, float eps) {
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
        float mu = 0.0f;
        if constexpr (!RMS) { mu = block_sum(s, red) / C; }
        float s2 = 0.0f;
        for (int k = 0; k < PACKS; k++) {
            if (threadIdx.x + k * blockDim.x >= packs) { continue; }
            for (int j = 0; j < PN; j++) { s2 += (v[k][j] - mu) * (v[k][j] - mu); }
        }
        float rs = 1.0f / sqrtf(block_sum(s2, red) / C + eps);
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            if (p >= packs) { continue; }
            Packed<T> wa = load_packed(w + p * PN), o;
            if constexpr (RMS) {
                for (int j = 0; j < PN; j++) { o.set(j, v[k][j] * rs * wa[j]); }
            } else {
                Packed<T> ba = load_packed(b + p * PN);
                for (int j = 0; j < PN; j++) { o.set(j, (v[k][j] - mu) * rs * wa[j] + ba[j]); }
            }
            store_packed(out + base + p * PN, o);
        }
        if (threadIdx.x == 0) {
            if constexpr (!RMS) { mean[row] = mu; }
            rstd[row] = rs;
        }
    }
}

// Backward: a block is blockDim.y row groups of blockDim.x threads, each group working through its own rows (group g of
// the grid takes rows g, g + groups, ...), so the groups of a block need no barrier between them in the row loop (a
// group of several warps is alone in its block: its barriers are the block's) and a block writes one row of column
// partials for all of them. Each group is a pipeline over its rows: each thread copies its packs of a row's dout, inp
// and dinp, and the row's mean and rstd, into shared memory with cp.async, LN_BWD_STAGES - 1 rows ahead of the row it
// works on. So the next rows' loads are in flight while the group reduces and updates this one, and a row does not wait
// a memory round trip before its reduction. Copies in flight hold no registers (the statistics too: a register loaded
// rows ahead would have to be moved along every row, which waits for the load). A thread reads back only what it copied
// itself, so waiting for its own copies suffices, and its refill of a slot comes after its own reads of it in program
// order: no barrier is needed for the slots. The update reads the row again from shared memory rather than keeping it
// in registers across the reduction (keeping g = dy w and xhat in registers instead, 236 registers at 4 packs, measured
// the same). Registers are capped so that LN_BWD_MIN_BLOCKS / PACKS blocks of LN_THREADS_MAX fit on an SM; w is read
// once.
// The row groups exist for the partials: with a block per group (1056 one-warp blocks at C 1024), the partials were
// 13 MB a call, a tenth of the kernel's traffic, written by every block at the end and read again by
// add_partial_sums (H200: 6.5 us of a 44 us call).
#define LN_BWD_MIN_BLOCKS 4
#define LN_BWD_STAGES 3 // slots of rows in shared memory: the one worked on and LN_BWD_STAGES - 1 in flight
#define LN_BWD_ARRAYS 3 // per slot: dout, inp, dinp
// Packs a thread takes of a row in backward, at most: more than one, so that a row's reduction, barriers and copies
// are paid once per several packs, but not so many that a row takes too few threads (H200, dev/bench_layernorm.cu, us
// a call at at most 1 / 2 / 3 / 4 packs: C 768 77.3 / 70.3 / 61.3 / 61.3, 1024 56.8 / 49.7 / 49.7 / 48.4, 1280
// 40.9 / 38.4 / 35.3 / 35.3, 1600 49.4 / 42.8 / 42.0 / 43.9; 188.3 us summed at 3, 188.9 at 4).
#define LN_BWD_PACKS 3

// Shared memory of one row group of the backward kernel: LN_BWD_STAGES slots of LN_BWD_ARRAYS rows of C, then per
// slot the mean and rstd each thread copied for itself (RMSNorm leaves the mean's unused). At the end the block's
// groups put their column sums (at most LN_PARTIALS * C floats each, less than a group's slots) in the same memory.
template <typename T> __host__ __device__ static size_t layernorm_backward_smem(int C, int threads) {
    return (size_t)LN_BWD_STAGES * (LN_BWD_ARRAYS * C * sizeof(T) + 2 * threads * sizeof(float));
}

// Copies this thread's part of row `row` into slot k: dout, inp and dinp packs, its mean (not RMSNorm's) and rstd.
template <typename T, int PACKS, bool RMS>
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
    if constexpr (!RMS) { cp_async_float(stats + (2 * k) * blockDim.x + threadIdx.x, mean + row); }
    cp_async_float(stats + (2 * k + 1) * blockDim.x + threadIdx.x, rstd + row);
}

// Two sums over a row group (the blockDim.x threads of this threadIdx.y), each warp's then the warps' in order. A
// one-warp group needs no shared memory or barrier; a group of several warps is its block's only one
// (layernorm_backward_launch), so its barrier is the block's. `shared` holds 32 float2.
__device__ __forceinline__ float2 group_sum2(float2 x, float2 *shared) {
    x = make_float2(warp_sum(x.x), warp_sum(x.y));
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    if (nwarps == 1) { return x; }
    if (lane == 0) { shared[warp] = x; }
    __syncthreads();
    x = lane < nwarps ? shared[lane] : make_float2(0.0f, 0.0f);
    x = make_float2(warp_sum(x.x), warp_sum(x.y));
    __syncthreads(); // the next row's writes wait for these reads
    return x;
}

template <typename T, int PACKS, bool RMS>
__global__ void __launch_bounds__(LN_THREADS_MAX, LN_BWD_MIN_BLOCKS / PACKS)
    layernorm_backward_kernel(T *dinp, float *partial, const T *dout, const T *inp, const T *w, const float *mean,
                              const float *rstd, int rows, int C) {
    constexpr int PN = Packed<T>::N, S = LN_BWD_STAGES, PARTIALS = norm_partials<RMS>();
    extern __shared__ int4 ln_bwd_smem[]; // blockDim.y x layernorm_backward_smem
    __shared__ float2 red[WARP_SIZE];
    int packs = C / PN, group = threadIdx.y, groups = gridDim.x * blockDim.y;
    Packed<T> *slots = reinterpret_cast<Packed<T> *>(reinterpret_cast<char *>(ln_bwd_smem) +
                                                     group * layernorm_backward_smem<T>(C, blockDim.x));
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
    int first = blockIdx.x * blockDim.y + group;
    // The first S - 1 rows in flight: one group of copies per row (empty past the last row), so row i is group i.
    for (int i = 0; i < S - 1; i++) {
        int row = first + i * groups;
        if (row < rows) {
            layernorm_backward_fetch<T, PACKS, RMS>(slots, stats, i, dout, inp, dinp, mean, rstd, row, C);
        }
        cp_async_commit();
    }
    for (int i = 0, row = first; row < rows; i++, row += groups) {
        int slot = i % S;
        const Packed<T> *da = slots + slot * LN_BWD_ARRAYS * packs, *xa = da + packs, *acc = xa + packs;
        cp_async_wait<S - 2>(); // this row's group has landed; the S - 2 after it may still be in flight
        float mu = RMS ? 0.0f : stats[(2 * slot) * blockDim.x + threadIdx.x];
        float rs = stats[(2 * slot + 1) * blockDim.x + threadIdx.x];
        float2 s = make_float2(0.0f, 0.0f);
        for (int k = 0; k < PACKS; k++) {
            int p = threadIdx.x + k * blockDim.x;
            if (p >= packs) { continue; }
            Packed<T> dy = da[p], x = xa[p];
            for (int j = 0; j < PN; j++) {
                float g = dy[j] * wv[k][j];
                if constexpr (!RMS) { s.x += g; }
                s.y += g * ((x[j] - mu) * rs);
            }
        }
        s = group_sum2(s, red);
        float mean_g = RMS ? 0.0f : s.x / C, mean_gx = s.y / C;
        // Refill the slot the previous row used (this thread's reads of it are done: their values were stored).
        int ahead = row + (S - 1) * groups;
        if (ahead < rows) {
            layernorm_backward_fetch<T, PACKS, RMS>(slots, stats, (i + S - 1) % S, dout, inp, dinp, mean, rstd, ahead,
                                                    C);
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
                if constexpr (!RMS) { db[k][j] += dy[j]; }
                ds[k][j] += out[j]; // as stored (rounded to T), which is what the projection's GEMMs read
            }
            store_packed(dinp + base + p * PN, out);
        }
    }
    // The groups' column sums, added in group order through shared memory (free once the last, empty, copy groups
    // are done and every group has left its rows), then one row of partials a block in 16-byte stores.
    cp_async_wait<0>();
    __syncthreads();
    float *sums = reinterpret_cast<float *>(ln_bwd_smem), *mine = sums + (size_t)group * PARTIALS * C;
    for (int k = 0; k < PACKS; k++) {
        int p = threadIdx.x + k * blockDim.x;
        if (p >= packs) { continue; }
        for (int j = 0; j < PN; j += 4) {
            store_float4(mine + p * PN + j, dw[k] + j);
            if constexpr (!RMS) { store_float4(mine + C + p * PN + j, db[k] + j); }
            store_float4(mine + (PARTIALS - 1) * C + p * PN + j, ds[k] + j);
        }
    }
    __syncthreads();
    float *prow = partial + (size_t)blockIdx.x * PARTIALS * C;
    for (int c = 4 * (threadIdx.y * blockDim.x + threadIdx.x); c < PARTIALS * C; c += 4 * blockDim.x * blockDim.y) {
        float4 t = *reinterpret_cast<const float4 *>(sums + c);
        for (int g = 1; g < blockDim.y; g++) {
            add_float4(t, *reinterpret_cast<const float4 *>(sums + (size_t)g * PARTIALS * C + c));
        }
        *reinterpret_cast<float4 *>(prow + c) = t;
    }
}

// Launch shape for rows of C channels: packs per thread (1 to 4) and threads (a multiple of 32).
typedef struct {
    int packs_per_thread, threads;
} LnShape;

// The shape with at most packs_per_thread packs a thread (0: the fewest of 1, 2 or 4 that fit LN_THREADS_MAX
// threads): the fewest warps that hold the row at that many packs, the row then spread over all their threads (C 768
// at 4: one warp of 3 packs a thread, not 24 threads of 4 and 8 idle).
template <typename T> static LnShape layernorm_shape(int C, int packs_per_thread = 0) {
    int packs = C / Packed<T>::N;
    if (C % Packed<T>::N != 0 || packs > LN_MAX_PACKS) {
        fail("LayerNorm and RMSNorm on the GPU need the width to be a multiple of %d and at most %d in %s (got %d); "
             "change --width",
             Packed<T>::N, LN_MAX_PACKS * Packed<T>::N, TypeInfo<T>::name, C);
    }
    int most = packs_per_thread > 0 ? packs_per_thread : 1;
    while (ceil_div_int(packs, most) > LN_THREADS_MAX) { most *= 2; }
    if (most > LN_PACKS_MAX) { most = LN_PACKS_MAX; } // a row of up to LN_MAX_PACKS packs always fits at this many
    LnShape s;
    s.threads = ceil_div_int(ceil_div_int(packs, most), WARP_SIZE) * WARP_SIZE;
    s.packs_per_thread = ceil_div_int(packs, s.threads);
    return s;
}

template <typename T>
using LnBackwardKernel = void (*)(T *, float *, const T *, const T *, const T *, const float *, const float *, int,
                                  int);
template <typename T, bool RMS = false> static LnBackwardKernel<T> layernorm_backward_kernel_for(int packs_per_thread) {
    switch (packs_per_thread) {
    case 1: return layernorm_backward_kernel<T, 1, RMS>;
    case 2: return layernorm_backward_kernel<T, 2, RMS>;
    case 3: return layernorm_backward_kernel<T, 3, RMS>;
    default: return layernorm_backward_kernel<T, 4, RMS>;
    }
}

// Launch of the backward kernel for a width and shape: row groups a block and blocks.
typedef struct {
    int groups, blocks;
} LnBackwardLaunch;

// As many blocks as are resident at once (the rows are grid-strided, so one more would wait for a whole block to
// finish), no more, since each block writes a row of partials (norm_partials * C floats); and as many row groups a
// block as keep the groups resident on an SM what they would be as blocks of their own (bf16, H200: C 768, 6
// one-warp groups, two blocks an SM; C 1024, one two-warp group, eight). Also lets the kernel have its shared memory:
// over the default 48 KB from 2520 bf16 / 1260 fp32 channels for one group. The attribute and the occupancy queries
// are host calls of microseconds, and a model asks ~2 L times a step for one width: made once per width and shape
// (and element type and norm: each instantiation keeps its own).
template <typename T, bool RMS = false> static LnBackwardLaunch layernorm_backward_launch(int rows, int C, LnShape s) {
    static int known_C = 0, known_ppt = 0, known_threads = 0, known_groups = 0, known_per_sm = 0;
    if (C != known_C || s.packs_per_thread != known_ppt || s.threads != known_threads) {
        LnBackwardKernel<T> kernel = layernorm_backward_kernel_for<T, RMS>(s.packs_per_thread);
        size_t group_smem = layernorm_backward_smem<T>(C, s.threads);
        cudaFuncAttributes attr;
        cudaCheck(cudaFuncGetAttributes(&attr, kernel));
        size_t most = g_cuda.props.sharedMemPerBlockOptin - attr.sharedSizeBytes;
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most));
        int alone = 0; // resident groups an SM as blocks of one group
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&alone, kernel, s.threads, group_smem));
        known_groups = 1, known_per_sm = alone > 0 ? alone : 1;
        // groups of one warp only: those of several need a barrier of their own, and named barriers (one per group)
        // made compute-sanitizer racecheck report hazards between the groups' column sums and their sum across
        // groups (test_layernorm; whether racecheck's or real was not settled). A block's one barrier is clean and
        // as fast (dev/log/2026-11-26.md, "The LayerNorm racecheck row").
        for (int g = s.threads == WARP_SIZE ? LN_THREADS_MAX / WARP_SIZE : 1; g > 1; g--) {
            int per_sm = 0;
            if (g * group_smem > most) { continue; }
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, g * s.threads, g * group_smem));
            if (per_sm * g >= alone) {
                known_groups = g, known_per_sm = per_sm;
                break;
            }
        }
        known_C = C;
        known_ppt = s.packs_per_thread;
        known_threads = s.threads;
    }
    LnBackwardLaunch l = {known_groups, g_cuda.props.multiProcessorCount * known_per_sm};
    int need = ceil_div_int(rows, l.groups);
    if (l.blocks > need) { l.blocks = need; }
    return l;
}

// Floats of scratch layernorm_backward (RMS: rmsnorm_backward) needs for `rows` rows.
template <typename T, bool RMS = false> static size_t layernorm_backward_scratch_floats(int rows, int C) {
    LnBackwardLaunch l = layernorm_backward_launch<T, RMS>(rows, C, layernorm_shape<T>(C, LN_BWD_PACKS));
    return (size_t)l.blocks * norm_partials<RMS>() * C;
}

// The forward of either norm (RMS: mean and b unused).
template <typename T, bool RMS>
static void norm_forward(T *out, float *mean, float *rstd, T *resid, const T *x, const T *dx, const T *w, const T *b,
                         int rows, int C, float eps, cudaStream_t stream) {
    LnShape s = layernorm_shape<T>(C);
    int per_sm = 2048 / s.threads;
    int blocks = g_cuda.props.multiProcessorCount * per_sm;
    if (blocks > rows) { blocks = rows; }
#define LN_FWD(P)                                                                                                      \
    layernorm_forward_kernel<T, P, RMS>                                                                                \
        <<<blocks, s.threads, 0, stream>>>(out, mean, rstd, resid, x, dx, w, b, rows, C, eps)
    switch (s.packs_per_thread) {
    case 1: LN_FWD(1); break;
    case 2: LN_FWD(2); break;
    default: LN_FWD(4); break;
    }
#undef LN_FWD
    cudaCheckLaunch();
}

// The backward of either norm (RMS: db and mean unused): the kernel, then the column sums of its partials, which
// are dw, db (not RMSNorm's) and dsum (when wanted) in this order.
template <typename T, bool RMS>
static void norm_backward(T *dinp, float *dw, float *db, float *dsum, float *scratch, const T *dout, const T *inp,
                          const T *w, const float *mean, const float *rstd, int rows, int C, int accumulate,
                          cudaStream_t stream, int packs_per_thread) {
    constexpr int PARTIALS = norm_partials<RMS>();
    LnShape s = layernorm_shape<T>(C, packs_per_thread);
    LnBackwardLaunch l = layernorm_backward_launch<T, RMS>(rows, C, s);
    size_t smem = l.groups * layernorm_backward_smem<T>(C, s.threads);
    layernorm_backward_kernel_for<T, RMS>(s.packs_per_thread)<<<l.blocks, dim3(s.threads, l.groups), smem, stream>>>(
        dinp, scratch, dout, inp, w, mean, rstd, rows, C);
    cudaCheckLaunch();
    PartialSumDsts dsts = RMS ? PartialSumDsts{{dw, dsum}} : PartialSumDsts{{dw, db, dsum}};
    add_partial_sums(dsts, dsum ? PARTIALS : PARTIALS - 1, scratch, l.blocks, C, PARTIALS * C, accumulate, stream);
}

// out = LayerNorm(x + dx) (or of x when dx is NULL, then resid is unused); resid = x + dx.
template <typename T>
static void layernorm_forward(T *out, float *mean, float *rstd, T *resid, const T *x, const T *dx, const T *w,
                              const T *b, int rows, int C, cudaStream_t stream) {
    norm_forward<T, false>(out, mean, rstd, resid, x, dx, w, b, rows, C, LAYERNORM_EPS, stream);
}

// out = RMSNorm(x + dx) with weight w and epsilon eps (or of x when dx is NULL, then resid is unused); resid = x + dx.
template <typename T>
static void rmsnorm_forward(T *out, float *rstd, T *resid, const T *x, const T *dx, const T *w, int rows, int C,
                            float eps, cudaStream_t stream) {
    norm_forward<T, true>(out, NULL, rstd, resid, x, dx, w, NULL, rows, C, eps, stream);
}

// dinp += dLayerNorm/dinp (dout); dw += ..., db += ... (written when not accumulate); dsum (unless NULL) likewise
// gets the column sums of the resulting dinp. scratch: layernorm_backward_scratch_floats(rows, C). packs_per_thread:
// LN_BWD_PACKS (dev/bench_layernorm.cu times the others, with scratch for them).
template <typename T>
static void layernorm_backward(T *dinp, float *dw, float *db, float *dsum, float *scratch, const T *dout,
                               const T *inp, const T *w, const float *mean, const float *rstd, int rows, int C,
                               int accumulate, cudaStream_t stream, int packs_per_thread = LN_BWD_PACKS) {
    norm_backward<T, false>(dinp, dw, db, dsum, scratch, dout, inp, w, mean, rstd, rows, C, accumulate, stream,
                            packs_per_thread);
}

// dinp += dRMSNorm/dinp (dout); dw += ... (written when not accumulate); dsum as layernorm_backward's. scratch:
// layernorm_backward_scratch_floats<T, true>(rows, C).
template <typename T>
static void rmsnorm_backward(T *dinp, float *dw, float *dsum, float *scratch, const T *dout, const T *inp, const T *w,
                             const float *rstd, int rows, int C, int accumulate, cudaStream_t stream,
                             int packs_per_thread = LN_BWD_PACKS) {
    norm_backward<T, true>(dinp, dw, NULL, dsum, scratch, dout, inp, w, NULL, rstd, rows, C, accumulate, stream,
                           packs_per_thread);
}

#endif // LLMC_LAYERNORM_CUH
