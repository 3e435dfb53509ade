/*
 * attention.cuh: causal multi-head and grouped-query self-attention, forward and backward, with no T x T matrix in
 * memory.
 *
 * Per head, with scale = 1/sqrt(HS): S = scale Q K^T, causal mask (key j > query i gets -inf), P = softmax(S) by
 * rows, O = P V. The forward streams over key blocks with an online softmax: a running row max m and sum l, and O
 * rescaled by exp(m_old - m_new) whenever the max grows; it saves lse_i = m_i + log(l_i) for the backward.
 * Backward (FlashAttention-2): D_i = sum_d dO_id O_id; P_ij = exp(S_ij - lse_i) recomputed; dP = dO V^T;
 * dS = P * (dP - D); dV = P^T dO; dK = scale dS^T Q; dQ = scale dS K.
 * Deterministic (no float atomics): one kernel owns dQ of a query block and loops over the key blocks before it,
 * then another owns dK, dV of a key block and loops over the query blocks after it; S and dP are computed in both.
 * The dQ kernel first takes D of its own rows (kept in registers, and written for the dK/dV kernel), so D costs no
 * pass of its own over dO and O.
 * Optionally the backward also takes the QKV bias gradient, the column sums of dqkv over the B T rows, while the
 * rows are in registers: each block writes the sums of its rows (as stored) to one row of partials, and
 * add_partial_sums adds the rows in order. This saves a separate column_sum pass over dqkv (3C columns x N rows,
 * ~30 us a layer at 1558M).
 * Rotary embeddings (Llama): q and k arrive rotated (llmc/rope.cuh's forward pass on qkv), and the backward rotates
 * dQ and dK back as it stores them (RopeTables), so what it writes is the gradient of the QKV projection's output: a
 * column i and its pair i + HS/2 are in the same thread in both precisions' register layouts, so the rotation is a
 * few products on values already in registers, where a pass of its own read and wrote dQ and dK once more.
 * Grouped-query attention (GQA): NH query heads share KV key/value heads, query head h reading KV head h / (NH / KV);
 * KV = NH is multi-head attention (GPT-2). The forward and the dQ kernel only read their query head's K and V from
 * another column of qkv. dK and dV of a KV head sum over the NH / KV query heads of its group: the dK/dV kernel owns a
 * KV head's key block and walks the query blocks of each query head of the group in turn, in head order, summing in
 * registers (no atomics; with one head a group, the walk is the multi-head kernel's exactly).
 *
 * fp32: CUDA cores, one warp per row, lanes over the keys (or queries) of a shared-memory tile, accurate expf.
 * bf16: Hopper's warpgroup MMA (wgmma: operands read from shared memory by the tensor cores, products in flight
 * while the warps compute) with fp32 accumulation, tiles in swizzled shared memory, the next tile fetched by
 * cp.async while the current one is used, exp2 with log2(e) folded into the scale. Each warp owns a 16-row slab of
 * the block's 64 rows, so softmax statistics never leave a warp's quad. Both head sizes run the same kernels.
 *
 * Layouts: qkv and dqkv (B, T, NH + 2 KV, HS): a token's NH query heads, then its KV key heads, then its KV value
 * heads (GPT-2's (B, T, 3, NH, HS) when KV = NH); out and dout (B, T, NH, HS); lse (B, NH, T) fp32, natural log.
 * Grids are 1-D over (head, block along T), query heads for the forward and dQ (a forward block takes two query heads
 * of a group where the group is even: they share its K and V tiles), KV heads for dK/dV, scheduled by attn_block():
 * heaviest causal blocks first. Offsets into the buffers are size_t; any T whose grid fits (checked) runs, the
 * statistics (lse, D) of every row kept in fp32 whatever T is.
 */
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda_common.cuh"
#include "rope.cuh"
#include "wgmma.cuh"

#define ATTN_LN2 0.6931471805599453f

// Block schedule. Blocks start roughly in index order. Heads go in groups of ATTN_HEAD_GROUP; inside a group the
// heaviest block (rank 0: most causal work) of every head starts first, then the next heaviest, ... so light blocks
// fill the tail, while the rows the blocks of a group share (K/V or Q/dO: 2 MB for 8 heads at T = 1024, HS = 64)
// stay in L2. Measured on H100 (dev/bench_attention.cu): all heads in one group, the backward at B = 32, NH = 12
// takes 0.95 ms instead of 0.75 (the rows in flight overflow L2); groups of 1, 8 and 32 are within 3%, 8 best at
// HS = 64.
#define ATTN_HEAD_GROUP 8

struct AttnBlock {
    int bh, rank; // head b * heads + h; rank 0 = heaviest of the head's nblocks blocks along T
};
__device__ __forceinline__ AttnBlock attn_block(int nblocks) {
    const int per_group = ATTN_HEAD_GROUP * nblocks, group = blockIdx.x / per_group, r = blockIdx.x % per_group;
    const int heads = min(ATTN_HEAD_GROUP, (int)gridDim.x / nblocks - group * ATTN_HEAD_GROUP);
    return {group * ATTN_HEAD_GROUP + r % heads, r / heads};
}

// Where a block of `rows` rows works, with the heaviest causal blocks first (attn_block): query blocks (forward and
// dQ: a block per query head) from the end of T (late rows see the most keys), key blocks (dK/dV: a block per KV
// head) from the start (early keys see the most queries). A key block's query heads are its group's: the first one's
// Q columns, out / dout columns and lse / D rows are given, and head i of the group is i HS columns and i T rows on.
// A forward block may own the same rows of `pack` query heads of one group (pack divides the group): its grid runs
// over NH / pack head slots, and `member` (< pack) picks the head of the slot.
struct AttnHead {
    int row0;               // the block's first row
    int partial_row;        // the block's row of bias partials, b nblocks + (block along T)
    int qcol, kcol, vcol;   // the columns of the head's Q, K and V in a row of qkv ((NH + 2 KV) HS elements)
    size_t seq;             // the sequence's first element in qkv
    size_t out, stat;       // the query head's first element in out / dout and in lse / D
};
template <int HS>
__device__ __forceinline__ AttnHead attn_head(int Tlen, int NH, int KV, int rows, bool query_blocks, int pack = 1,
                                              int member = 0) {
    const int nblocks = (Tlen + rows - 1) / rows, heads = query_blocks ? NH / pack : KV, group = NH / KV;
    const AttnBlock blk = attn_block(nblocks);
    const int block = query_blocks ? nblocks - 1 - blk.rank : blk.rank, b = blk.bh / heads, h = blk.bh % heads;
    const int hq = query_blocks ? h * pack + member : h * group, hkv = hq / group;
    return {block * rows,
            b * nblocks + block,
            hq * HS,
            (NH + hkv) * HS,
            (NH + KV + hkv) * HS,
            (size_t)b * Tlen * (NH + 2 * KV) * HS,
            ((size_t)b * Tlen * NH + hq) * HS,
            ((size_t)b * NH + hq) * Tlen};
}

// ----------------------------------------------------------------------------------------------------------------
// fp32: CUDA-core kernels. A block owns ATTN_ROWS_PER_BLOCK rows, one per warp; the rows it pairs them with come
// through shared memory in tiles of WARP_SIZE rows, one per lane. Lane j computes its row's dot products alone
// (tile rows padded by one float so that the 32 lanes reading one column hit 32 banks); the products that
// accumulate into the warp's row (P V, dS K, ...) broadcast lane j's weight by shuffle, each lane owning the
// columns lane, lane + 32, ...

#define ATTN_ROWS_PER_BLOCK 8
#define ATTN_F32_TILE WARP_SIZE

// Rows [row0, row0 + rows) of one head, row stride `stride`, into dst (row pitch `pitch`); rows past Tlen are 0.
__device__ __forceinline__ void attn_load_rows_f32(float *dst, int pitch, const float *src, size_t stride, int row0,
                                                   int rows, int Tlen, int HS) {
    for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        dst[r * pitch + d] = row0 + r < Tlen ? src[(size_t)(row0 + r) * stride + d] : 0.0f;
    }
}

template <int HS> __device__ __forceinline__ float attn_dot_f32(const float *a, const float *b) {
    float acc = 0.0f;
#pragma unroll 16
    for (int d = 0; d < HS; d++) { acc = fmaf(a[d], b[d], acc); }
    return acc;
}

// dst[d] = sum over the block's rows (one per warp, lane owning columns lane + 32 i) of vals, rows in warp order;
// a row past the sequence (valid false) adds nothing. red: a shared tile of ATTN_ROWS_PER_BLOCK x HS floats that
// the caller may reuse (the barrier first lets every warp finish reading it).
template <int HS>
__device__ __forceinline__ void attn_colsum_f32(float *dst, float (*red)[HS], const float (&vals)[HS / WARP_SIZE],
                                                bool valid) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < HS / WARP_SIZE; i++) { red[warp][lane + i * WARP_SIZE] = valid ? vals[i] : 0.0f; }
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < ATTN_ROWS_PER_BLOCK; r++) { s += red[r][d]; }
        dst[d] = s;
    }
}

// A warp's row (lane owning columns lane + 32 i) of dQ or dK at position `row` rotated back by RoPE (rope.cos NULL:
// none): column c's pair c + HS/2 is the same lane's value DPL / 2 further on.
template <int DPL> __device__ __forceinline__ void attn_unrotate_row_f32(float (&x)[DPL], int row, RopeTables rope) {
    constexpr int HALF = DPL * WARP_SIZE / 2;
    if (!rope.cos) { return; }
    const int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int i = 0; i < DPL / 2; i++) {
        const size_t at = (size_t)row * HALF + lane + i * WARP_SIZE;
        rope_unrotate(x[i], x[i + DPL / 2], rope.cos[at], rope.sin[at]);
    }
}

template <int HS>
__global__ void __launch_bounds__(ATTN_ROWS_PER_BLOCK * WARP_SIZE)
    attention_forward_f32_kernel(float *out, float *lse, const float *qkv, int Tlen, int NH, int KV, float scale) {
    constexpr int DPL = HS / WARP_SIZE; // output columns per lane
    __shared__ float sQ[ATTN_ROWS_PER_BLOCK][HS];
    __shared__ float sK[ATTN_F32_TILE][HS + 1], sV[ATTN_F32_TILE][HS + 1];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ATTN_ROWS_PER_BLOCK, true);
    const int r0 = hd.row0, row = r0 + warp;
    const size_t stride = (size_t)(NH + 2 * KV) * HS;
    const float *seq = qkv + hd.seq, *q = seq + hd.qcol, *k = seq + hd.kcol, *v = seq + hd.vcol;
    attn_load_rows_f32(&sQ[0][0], HS, q, stride, r0, ATTN_ROWS_PER_BLOCK, Tlen, HS);

    float o[DPL] = {}, m = -INFINITY, l = 0.0f; // l: this lane's share of the row sum
    const int ntiles = (min(r0 + ATTN_ROWS_PER_BLOCK, Tlen) - 1) / ATTN_F32_TILE + 1;
    for (int kt = 0; kt < ntiles; kt++) {
        const int kv0 = kt * ATTN_F32_TILE;
        __syncthreads(); // the previous tile is no longer read
        attn_load_rows_f32(&sK[0][0], HS + 1, k, stride, kv0, ATTN_F32_TILE, Tlen, HS);
        attn_load_rows_f32(&sV[0][0], HS + 1, v, stride, kv0, ATTN_F32_TILE, Tlen, HS);
        __syncthreads();
        float s = kv0 + lane <= row ? scale * attn_dot_f32<HS>(sQ[warp], sK[lane]) : -INFINITY;
        // key 0 is visible to every row and tiles go in ascending order: m_new is finite from the first tile on
        float m_new = fmaxf(m, warp_max(s));
        float corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        m = m_new;
#pragma unroll
        for (int i = 0; i < DPL; i++) { o[i] *= corr; }
        for (int j = 0; j < ATTN_F32_TILE; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int i = 0; i < DPL; i++) { o[i] = fmaf(pj, sV[j][lane + i * WARP_SIZE], o[i]); }
        }
    }
    l = warp_sum(l);
    if (row < Tlen) {
        float *orow = out + hd.out + (size_t)row * NH * HS;
#pragma unroll
        for (int i = 0; i < DPL; i++) { orow[lane + i * WARP_SIZE] = o[i] / l; }
        if (lane == 0) { lse[hd.stat + row] = m + logf(l); }
    }
}

// D_i = sum_d dO_id O_id (also into dsum, for the dK/dV kernel), then dQ_i = scale sum_j dS_ij K_j over the keys
// j <= i; one warp per query row. partial (unless NULL): row b * nblocks + r0 / ATTN_ROWS_PER_BLOCK of the bias
// partials ((NH + 2 KV) HS floats each), the head's Q columns.
template <int HS>
__global__ void __launch_bounds__(ATTN_ROWS_PER_BLOCK * WARP_SIZE)
    attention_backward_dq_f32_kernel(float *dqkv, float *partial, float *dsum, const float *dout, const float *out,
                                     const float *qkv, const float *lse, RopeTables rope, int Tlen, int NH, int KV,
                                     float scale) {
    constexpr int DPL = HS / WARP_SIZE;
    __shared__ float sQ[ATTN_ROWS_PER_BLOCK][HS], sdO[ATTN_ROWS_PER_BLOCK][HS];
    __shared__ float sK[ATTN_F32_TILE][HS + 1], sV[ATTN_F32_TILE][HS + 1];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ATTN_ROWS_PER_BLOCK, true);
    const int r0 = hd.row0, row = r0 + warp;
    const size_t stride = (size_t)(NH + 2 * KV) * HS;
    const float *seq = qkv + hd.seq, *q = seq + hd.qcol, *k = seq + hd.kcol, *v = seq + hd.vcol;
    attn_load_rows_f32(&sQ[0][0], HS, q, stride, r0, ATTN_ROWS_PER_BLOCK, Tlen, HS);
    attn_load_rows_f32(&sdO[0][0], HS, dout + hd.out, (size_t)NH * HS, r0, ATTN_ROWS_PER_BLOCK, Tlen, HS);
    const float lse_i = row < Tlen ? lse[hd.stat + row] : 0.0f;
    float d_i = 0.0f;
    if (row < Tlen) { // from global memory: sdO is not complete before the loop's first barrier
        const size_t off = hd.out + (size_t)row * NH * HS;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const size_t at = off + lane + i * WARP_SIZE;
            d_i = fmaf(dout[at], out[at], d_i);
        }
    }
    d_i = warp_sum(d_i);
    if (row < Tlen && lane == 0) { dsum[hd.stat + row] = d_i; }

    float dq[DPL] = {};
    const int ntiles = (min(r0 + ATTN_ROWS_PER_BLOCK, Tlen) - 1) / ATTN_F32_TILE + 1;
    for (int kt = 0; kt < ntiles; kt++) {
        const int kv0 = kt * ATTN_F32_TILE;
        __syncthreads();
        attn_load_rows_f32(&sK[0][0], HS + 1, k, stride, kv0, ATTN_F32_TILE, Tlen, HS);
        attn_load_rows_f32(&sV[0][0], HS + 1, v, stride, kv0, ATTN_F32_TILE, Tlen, HS);
        __syncthreads();
        float ds = 0.0f;
        if (kv0 + lane <= row) {
            float p = expf(scale * attn_dot_f32<HS>(sQ[warp], sK[lane]) - lse_i);
            ds = p * (attn_dot_f32<HS>(sdO[warp], sV[lane]) - d_i);
        }
        for (int j = 0; j < ATTN_F32_TILE; j++) {
            float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
            for (int i = 0; i < DPL; i++) { dq[i] = fmaf(dsj, sK[j][lane + i * WARP_SIZE], dq[i]); }
        }
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) { dq[i] *= scale; }
    if (row < Tlen) {
        attn_unrotate_row_f32(dq, row, rope);
        float *dqrow = dqkv + hd.seq + hd.qcol + (size_t)row * stride;
#pragma unroll
        for (int i = 0; i < DPL; i++) { dqrow[lane + i * WARP_SIZE] = dq[i]; }
    }
    if (partial) {
        attn_colsum_f32<HS>(partial + (size_t)hd.partial_row * stride + hd.qcol, sQ, dq, row < Tlen);
    }
}

// dV_j = sum_i P_ij dO_i and dK_j = scale sum_i dS_ij Q_i over the queries i >= j of every query head of the KV
// head's group (in head order); one warp per key row. partial: as in the dQ kernel, the KV head's K and V columns.
// Blocks an SM must hold (0: no bound): at HS = 128 ptxas would otherwise take 64 registers (4 blocks an SM) where 48
// suffice without spilling (5, as many as the shared memory holds); at HS = 64 it takes 40 unbounded (6 blocks), and
// spills when held to 6 (1 would let it take 78).
#define ATTN_F32_DKDV_MIN_BLOCKS(HS) ((HS) == 128 ? 5 : 0)
template <int HS>
__global__ void __launch_bounds__(ATTN_ROWS_PER_BLOCK * WARP_SIZE, ATTN_F32_DKDV_MIN_BLOCKS(HS))
    attention_backward_dkdv_f32_kernel(float *dqkv, float *partial, const float *dout, const float *qkv,
                                       const float *lse, const float *dsum, RopeTables rope, int Tlen, int NH, int KV,
                                       float scale) {
    constexpr int DPL = HS / WARP_SIZE;
    __shared__ float sK[ATTN_ROWS_PER_BLOCK][HS], sV[ATTN_ROWS_PER_BLOCK][HS];
    __shared__ float sQ[ATTN_F32_TILE][HS + 1], sdO[ATTN_F32_TILE][HS + 1];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ATTN_ROWS_PER_BLOCK, false);
    const int k0 = hd.row0, key = k0 + warp, group = NH / KV;
    const size_t stride = (size_t)(NH + 2 * KV) * HS;
    const float *seq = qkv + hd.seq, *k = seq + hd.kcol, *v = seq + hd.vcol;
    attn_load_rows_f32(&sK[0][0], HS, k, stride, k0, ATTN_ROWS_PER_BLOCK, Tlen, HS);
    attn_load_rows_f32(&sV[0][0], HS, v, stride, k0, ATTN_ROWS_PER_BLOCK, Tlen, HS);

    float dk[DPL] = {}, dv[DPL] = {};
    for (int i = 0; i < group; i++) {
        const float *q = seq + hd.qcol + i * HS, *dO = dout + hd.out + i * HS;
        const float *lse_bh = lse + hd.stat + (size_t)i * Tlen, *dsum_bh = dsum + hd.stat + (size_t)i * Tlen;
        for (int qt = k0 / ATTN_F32_TILE; qt * ATTN_F32_TILE < Tlen; qt++) {
            const int qi = qt * ATTN_F32_TILE + lane;
            __syncthreads();
            attn_load_rows_f32(&sQ[0][0], HS + 1, q, stride, qt * ATTN_F32_TILE, ATTN_F32_TILE, Tlen, HS);
            attn_load_rows_f32(&sdO[0][0], HS + 1, dO, (size_t)NH * HS, qt * ATTN_F32_TILE, ATTN_F32_TILE, Tlen, HS);
            __syncthreads();
            float p = 0.0f, ds = 0.0f;
            if (qi >= key && qi < Tlen) {
                p = expf(scale * attn_dot_f32<HS>(sQ[lane], sK[warp]) - lse_bh[qi]);
                ds = p * (attn_dot_f32<HS>(sdO[lane], sV[warp]) - dsum_bh[qi]);
            }
            for (int j = 0; j < ATTN_F32_TILE; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                for (int c = 0; c < DPL; c++) {
                    dv[c] = fmaf(pj, sdO[j][lane + c * WARP_SIZE], dv[c]);
                    dk[c] = fmaf(dsj, sQ[j][lane + c * WARP_SIZE], dk[c]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) { dk[i] *= scale; }
    if (key < Tlen) {
        attn_unrotate_row_f32(dk, key, rope);
        float *dkrow = dqkv + hd.seq + hd.kcol + (size_t)key * stride;
        float *dvrow = dqkv + hd.seq + hd.vcol + (size_t)key * stride;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            dkrow[lane + i * WARP_SIZE] = dk[i];
            dvrow[lane + i * WARP_SIZE] = dv[i];
        }
    }
    if (partial) {
        float *prow = partial + (size_t)hd.partial_row * stride;
        attn_colsum_f32<HS>(prow + hd.kcol, sK, dk, key < Tlen);
        attn_colsum_f32<HS>(prow + hd.vcol, sV, dv, key < Tlen);
    }
}

// ----------------------------------------------------------------------------------------------------------------
// bf16: Hopper's warpgroup MMA (wgmma, sm_90a). A block is one warpgroup (4 warps) and owns ATTN_WG_ROWS = 64 rows
// of the sequence, warp w the 16 from 16 w. A wgmma computes a 64 x 64 product of a 16-deep slice, reading its B
// operand (and A, unless A comes from registers) straight from shared memory through a descriptor while the warps
// go on: several products in flight, no fragment registers for the shared operands. An accumulator 64 x N holds,
// per thread, [N / 8][4] floats in the mma.m16n8 C-fragment layout: with g = lane / 4 and c = lane % 4, element
// [n][e] is row 16 w + g + 8 (e / 2), column 8 n + 2 c + e % 2; so a row's softmax statistics never leave a quad.
// An A operand from registers is in the mma.m16n8k16 A layout, which is what two column tiles of an accumulator
// become in bf16 (acc_to_a): P and dS feed the next product without leaving registers.
//
// Shared-memory tiles are ATTN_WG_ROWS x HS bf16 in HS / 64 panels of 64 columns, panel after panel. A panel row is
// 128 bytes, its 16-byte chunk c stored at chunk c ^ (row % 8): wgmma's 128-byte-swizzle layout (8-row atoms of
// 1024 bytes) once the panel starts 1024-byte aligned, and the 8 rows a copy or a product touches at one column fall
// in 8 different bank groups. Read with HS as the reduction ("K-major": S = Q K^T from Q and K tiles), the 16
// columns from 16 kc start 32 (kc % 4) bytes into panel kc / 4; read with the rows as the reduction ("MN-major",
// transposed: O += P V from a V tile), the 16 rows from 16 kk of panel p start 16 x 128 kk bytes into it.

#define ATTN_WG_ROWS 64                 // rows a block owns (every product's M) and rows of every tile (N)
#define ATTN_WG_WARPS 4                 // a warpgroup
#define ATTN_WG_THREADS (ATTN_WG_WARPS * WARP_SIZE)
#define ATTN_PANEL_COLS 64              // columns of a tile panel: one 128-byte swizzle row of bf16
#define ATTN_PANEL_ROW_BYTES 128        // ATTN_PANEL_COLS bf16
#define ATTN_PANEL_BYTES (ATTN_WG_ROWS * ATTN_PANEL_ROW_BYTES)

template <int HS> __host__ __device__ constexpr int attn_tile_bytes() { return ATTN_WG_ROWS * HS * (int)sizeof(bf16); }
// Dynamic shared memory of a kernel with `tiles` tiles and `extra` bytes after them, plus the slack that aligns them.
template <int HS> constexpr int attn_smem_bytes(int tiles, int extra) {
    return tiles * attn_tile_bytes<HS>() + extra + WGMMA_ATOM_BYTES;
}

// Byte offset of the 16-byte chunk c (columns 8 c .. 8 c + 7) of row r in a tile.
__device__ __forceinline__ uint32_t attn_tile_offset(int r, int c) {
    constexpr int CHUNKS = ATTN_PANEL_ROW_BYTES / 16;
    return (uint32_t)((c / CHUNKS) * ATTN_PANEL_BYTES + r * ATTN_PANEL_ROW_BYTES + (((c % CHUNKS) ^ (r & 7)) << 4));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// Rows [row0, row0 + ATTN_WG_ROWS) of one head (row stride `stride` elements) into a tile, asynchronously, by the
// threads of one warpgroup (tid: the thread's index in it); rows past Tlen are zero-filled.
template <int HS>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const bf16 *src, size_t stride, int row0, int Tlen,
                                                unsigned tid = threadIdx.x) {
    constexpr int CHUNKS = HS / 8;
    static_assert(ATTN_WG_ROWS * CHUNKS % ATTN_WG_THREADS == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
    for (int it = 0; it < ATTN_WG_ROWS * CHUNKS / ATTN_WG_THREADS; it++) {
        int i = it * ATTN_WG_THREADS + tid, r = i / CHUNKS, c = i % CHUNKS;
        bool valid = row0 + r < Tlen;
        cp_async_16(tile + attn_tile_offset(r, c), src + (size_t)(valid ? row0 + r : 0) * stride + c * 8,
                    valid ? 16 : 0);
    }
}

// Accumulator of 8 NT columns (fp32) -> A operand of 16 NT / 2 columns (bf16): column tiles 2k and 2k+1 are k-slice k.
template <int NT> __device__ __forceinline__ void acc_to_a(uint32_t (&a)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
    for (int k = 0; k < NT / 2; k++) {
        a[k][0] = pack_bf16(c[2 * k][0], c[2 * k][1]);
        a[k][1] = pack_bf16(c[2 * k][2], c[2 * k][3]);
        a[k][2] = pack_bf16(c[2 * k + 1][0], c[2 * k + 1][1]);
        a[k][3] = pack_bf16(c[2 * k + 1][2], c[2 * k + 1][3]);
    }
}

template <int NT> __device__ __forceinline__ void zero_acc(float (&c)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) { c[n][e] = 0.0f; }
    }
}

// Stores a warp's 16 rows (from r0) x 8 NT columns of an accumulator times `mul` as bf16 into rows of pitch `pitch`.
template <int NT>
__device__ __forceinline__ void store_acc_rows(bf16 *dst, size_t pitch, const float (&c)[NT][4], int r0, int Tlen,
                                               float mul) {
    int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int row = r0 + g + 8 * hf;
        if (row >= Tlen) { continue; }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)row * pitch + n * 8 + 2 * cq) =
                __floats2bfloat162_rn(c[n][2 * hf] * mul, c[n][2 * hf + 1] * mul);
        }
    }
}

// dst[0 .. 8 NT) = the column sums of what store_acc_rows(.., c, r0, Tlen, mul) stores (the bf16 values; rows past
// Tlen add nothing) over the block's 4 warps, added in warp order. red: 4 x 8 NT floats of shared memory no longer
// read by anyone; the trailing barrier lets the caller reuse it at once.
template <int NT>
__device__ __forceinline__ void colsum_acc_rows(float *dst, float *red, const float (&c)[NT][4], int r0, int Tlen,
                                                float mul) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float s = 0.0f;
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                if (r0 + g + 8 * hf < Tlen) { s += __bfloat162float(__float2bfloat16_rn(c[n][2 * hf + e] * mul)); }
            }
            // column n * 8 + 2 cq + e of the slab lives in lanes cq, cq + 4, ..., cq + 28 (g = 0 .. 7)
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            if (g == 0) { red[warp * 8 * NT + n * 8 + 2 * cq + e] = s; }
        }
    }
    __syncthreads();
    for (int col = threadIdx.x; col < 8 * NT; col += ATTN_WG_THREADS) {
        float s = 0.0f;
        for (int w = 0; w < ATTN_WG_WARPS; w++) { s += red[w * 8 * NT + col]; }
        dst[col] = s;
    }
    __syncthreads();
}

// ----------------------------------------------------------------------------------------------------------------
// wgmma: the two product shapes (the descriptors and their ordering: llmc/wgmma.cuh).

// The accumulator operands of an m64n64 wgmma: column tiles n0 .. n0 + 7 of d, in order, as %0 .. %31.
#define WGMMA_ACC64_REGS                                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "      \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_ACC_TILE(d, n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
#define WGMMA_ACC64(d, n0)                                                                                             \
    WGMMA_ACC_TILE(d, n0), WGMMA_ACC_TILE(d, n0 + 1), WGMMA_ACC_TILE(d, n0 + 2), WGMMA_ACC_TILE(d, n0 + 3),           \
        WGMMA_ACC_TILE(d, n0 + 4), WGMMA_ACC_TILE(d, n0 + 5), WGMMA_ACC_TILE(d, n0 + 6), WGMMA_ACC_TILE(d, n0 + 7)

// d (64 x 64) (+)= A (64 x 16, K-major) * B (16 x 64, K-major); accumulate 0 overwrites d.
__device__ __forceinline__ void wgmma_64x64_ss(float (&d)[8][4], uint64_t a, uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_ACC64_REGS
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC64(d, 0)
                 : "l"(a), "l"(b), "r"(accumulate));
}
// Column tiles n0 .. n0 + 7 of d (64 x 64 of them) += A (64 x 16, registers) * B (16 x 64, MN-major).
template <int N0, int NT>
__device__ __forceinline__ void wgmma_64x64_rs_t(float (&d)[NT][4], const uint32_t (&a)[4], uint64_t b) {
    static_assert(N0 + 8 <= NT, "the product's 64 columns lie inside the accumulator");
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_ACC64_REGS
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : WGMMA_ACC64(d, N0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// s (64 x 64) = A B^T, reduced over HS: A and B are tiles read K-major (a, b: their descriptors). S = Q K^T, and
// the backward's dP = dO V^T, S^T = K Q^T, dP^T = V dO^T.
template <int HS> __device__ __forceinline__ void wgmma_scores(float (&s)[8][4], uint64_t a, uint64_t b) {
    constexpr int SLICES_PER_PANEL = ATTN_PANEL_COLS / WGMMA_K;
#pragma unroll
    for (int kc = 0; kc < HS / WGMMA_K; kc++) {
        const uint32_t off = (kc / SLICES_PER_PANEL) * ATTN_PANEL_BYTES + (kc % SLICES_PER_PANEL) * WGMMA_K * 2;
        wgmma_64x64_ss(s, wgmma_desc_at(a, off), wgmma_desc_at(b, off), kc);
    }
}

// acc (64 x HS) += A (64 x 64 rows of the tile, bf16 in registers) * tile, the tile read MN-major (b: its
// descriptor): O += P V, and the backward's dQ += dS K, dV += P^T dO, dK += dS^T Q.
template <int P, int HS>
__device__ __forceinline__ void wgmma_accumulate_panel(float (&acc)[HS / 8][4], const uint32_t (&a)[4][4], uint64_t b) {
#pragma unroll
    for (int kk = 0; kk < ATTN_WG_ROWS / WGMMA_K; kk++) {
        const uint32_t off = P * ATTN_PANEL_BYTES + kk * WGMMA_K * ATTN_PANEL_ROW_BYTES;
        wgmma_64x64_rs_t<8 * P>(acc, a[kk], wgmma_desc_at(b, off));
    }
}
template <int HS>
__device__ __forceinline__ void wgmma_accumulate(float (&acc)[HS / 8][4], const uint32_t (&a)[4][4], uint64_t b) {
    static_assert(HS == ATTN_PANEL_COLS || HS == 2 * ATTN_PANEL_COLS, "a tile has one or two panels");
    wgmma_accumulate_panel<0, HS>(acc, a, b);
    if constexpr (HS > ATTN_PANEL_COLS) { wgmma_accumulate_panel<1, HS>(acc, a, b); }
}
// ----------------------------------------------------------------------------------------------------------------
// bf16: the steps between the products. Each works on one warp's 16-row slab of a score tile in the accumulator
// layout: a thread holds rows g and g + 8, columns 8 n + 2 cq (+1) of each 8-column tile n.

// Forward, scores of queries row0 + ... against keys kv0 + ...: -inf where the key comes after the query.
template <int ST> __device__ __forceinline__ void attn_mask_future(float (&s)[ST][4], int row0, int kv0) {
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int n = 0; n < ST; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (kv0 + n * 8 + 2 * cq + (e & 1) > row0 + g + 8 * (e >> 1)) { s[n][e] = -INFINITY; }
        }
    }
}

// One key tile of the forward's online softmax: s becomes P = exp2(s scale_log2 - m) with m the running row max (log2
// units of the scaled scores), and l (this thread's share of the row sums) and o are rescaled to the new max. Key 0
// is visible to every row and tiles go in ascending order, so the running max is finite from the first tile on.
template <int ST, int DT>
__device__ __forceinline__ void attn_softmax_tile(float (&s)[ST][4], float (&o)[DT][4], float (&m)[2], float (&l)[2],
                                                  float scale_log2) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < ST; n++) { mx = fmaxf(mx, fmaxf(s[n][2 * hf], s[n][2 * hf + 1])); }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(m[hf], mx * scale_log2), corr = fast_exp2(m[hf] - m_new), sum = 0.0f;
        m[hf] = m_new;
#pragma unroll
        for (int n = 0; n < ST; n++) {
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -m_new));
                sum += s[n][e];
            }
        }
        l[hf] = l[hf] * corr + sum;
#pragma unroll
        for (int n = 0; n < DT; n++) { o[n][2 * hf] *= corr, o[n][2 * hf + 1] *= corr; }
    }
}

// The forward's result for rows row0 + ...: O = o / l into out (rows pitch elements apart), lse = m + log2(l) in
// natural-log units into lse_bh.
template <int DT>
__device__ __forceinline__ void attn_forward_store(bf16 *out, size_t pitch, float *lse_bh, float (&o)[DT][4],
                                                   const float (&m)[2], const float (&l)[2], int row0, int Tlen) {
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
    float inv[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float sum = l[hf];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[hf] = 1.0f / sum;
        int row = row0 + g + 8 * hf;
        if (cq == 0 && row < Tlen) { lse_bh[row] = (m[hf] + log2f(sum)) * ATTN_LN2; }
    }
#pragma unroll
    for (int n = 0; n < DT; n++) { o[n][0] *= inv[0], o[n][1] *= inv[0], o[n][2] *= inv[1], o[n][3] *= inv[1]; }
    store_acc_rows(out, pitch, o, row0, Tlen, 1.0f);
}

// dK/dV backward, scores S^T of keys key0 + ... against the queries qs + ... of a tile: P^T = exp2(S^T scale_log2 -
// lse_q log2(e)), 0 where the query comes before the key. lq: the tile's lse * log2(e).
template <int ST>
__device__ __forceinline__ void attn_probs_t(float (&s)[ST][4], const float *lq, int key0, int qs, float scale_log2) {
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
    const bool diag = qs < key0 + 15; // some query of the tile comes before some key of the slab
#pragma unroll
    for (int n = 0; n < ST; n++) {
        const int qi = n * 8 + 2 * cq;
        const float2 l2 = *reinterpret_cast<const float2 *>(lq + qi);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(fmaf(s[n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
            if (diag && qs + qi + (e & 1) < key0 + g + 8 * (e >> 1)) { p = 0.0f; }
            s[n][e] = p;
        }
    }
}

// dS^T = P^T (dP^T - D_q) in place of dp; dq: the query tile's D.
template <int ST>
__device__ __forceinline__ void attn_dscores_t(float (&dp)[ST][4], const float (&p)[ST][4], const float *dq) {
    const int cq = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < ST; n++) {
        const float2 d2 = *reinterpret_cast<const float2 *>(dq + n * 8 + 2 * cq);
#pragma unroll
        for (int e = 0; e < 4; e++) { dp[n][e] = p[n][e] * (dp[n][e] - ((e & 1) ? d2.y : d2.x)); }
    }
}

// dQ backward, scores S of queries row0 + ... against keys kv0 + ...: P = exp2(S scale_log2 - lrow), 0 where the key
// comes after the query; then dS = P (dP - D) in place of dp.
template <int ST>
__device__ __forceinline__ void attn_probs(float (&s)[ST][4], const float (&lrow)[2], int row0, int kv0,
                                           float scale_log2) {
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
    const bool diag = kv0 + 8 * ST - 1 > row0; // some key of the tile comes after some query of the slab
#pragma unroll
    for (int n = 0; n < ST; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(fmaf(s[n][e], scale_log2, -lrow[e >> 1]));
            if (diag && kv0 + n * 8 + 2 * cq + (e & 1) > row0 + g + 8 * (e >> 1)) { p = 0.0f; }
            s[n][e] = p;
        }
    }
}
template <int ST>
__device__ __forceinline__ void attn_dscores(float (&dp)[ST][4], const float (&p)[ST][4], const float (&drow)[2]) {
#pragma unroll
    for (int n = 0; n < ST; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) { dp[n][e] = p[n][e] * (dp[n][e] - drow[e >> 1]); }
    }
}

// lse * log2(e) and D = sum_d dO O of rows row0 + g and row0 + g + 8 (0 past Tlen), D also into dsum_bh for the
// dK/dV kernel. Each lane of a quad takes a quarter of the columns, from global memory (the rows are in L2: they are
// being copied to shared memory as well). dO and O: the head's first row; rows ostride elements apart.
template <int HS>
__device__ __forceinline__ void attn_row_stats(float (&lrow)[2], float (&drow)[2], const bf16 *dO, const bf16 *O,
                                               size_t ostride, const float *lse_bh, float *dsum_bh, int row0,
                                               int Tlen) {
    constexpr int DCOLS = HS / 4;
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int row = row0 + g + 8 * hf;
        float d = 0.0f;
        if (row < Tlen) {
            const size_t off = (size_t)row * ostride + cq * DCOLS;
#pragma unroll
            for (int c = 0; c < DCOLS; c += Packed<bf16>::N) {
                Packed<bf16> x = load_packed(dO + off + c), o = load_packed(O + off + c);
#pragma unroll
                for (int e = 0; e < Packed<bf16>::N; e++) { d = fmaf(x[e], o[e], d); }
            }
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        drow[hf] = d;
        lrow[hf] = row < Tlen ? lse_bh[row] * LOG2E_F : 0.0f;
        if (cq == 0 && row < Tlen) { dsum_bh[row] = d; }
    }
}

// The dK/dV kernel's query tile from row q0: Q and dO (into tiles sQ and sdO), lse and D (sL, sD), all copied
// asynchronously, so that no thread stalls on a load of the next tile's statistics before it issues the current
// tile's products (they were plain loads: 2-3% of the kernel's time at 32 x 1024 x 12 heads and at HS 128, within
// noise at 1558M's 8 x 1024 x 25; dev/log/2026-11-25.md, "The attention overlap and the LayerNorm packs"). Rows
// past Tlen get lse = +inf, so P = 0 there whatever the causal mask says. Once the copies have landed,
// attn_query_tile_landed turns lse into lse * log2(e).
template <int HS>
__device__ __forceinline__ void attn_load_query_tile(uint32_t sQ, uint32_t sdO, float *sL, float *sD, const bf16 *q,
                                                     size_t stride, const bf16 *dO, size_t ostride,
                                                     const float *lse_bh, const float *dsum_bh, int q0, int Tlen) {
    load_tile_async<HS>(sQ, q, stride, q0, Tlen);
    load_tile_async<HS>(sdO, dO, ostride, q0, Tlen);
    for (int i = threadIdx.x; i < ATTN_WG_ROWS; i += ATTN_WG_THREADS) {
        if (q0 + i < Tlen) {
            cp_async_float(sL + i, lse_bh + q0 + i);
            cp_async_float(sD + i, dsum_bh + q0 + i);
        } else {
            sL[i] = INFINITY;
            sD[i] = 0.0f;
        }
    }
}
// After this thread's copies of attn_load_query_tile have landed (each thread converts the lse values it copied),
// before the barrier that shows them to the other warps.
__device__ __forceinline__ void attn_query_tile_landed(float *sL) {
    for (int i = threadIdx.x; i < ATTN_WG_ROWS; i += ATTN_WG_THREADS) { sL[i] *= LOG2E_F; }
}

// A warp's 16 rows (from r0) of a dQ or dK accumulator rotated back by RoPE's angles of their positions (rope.cos
// NULL: none). Column i < HS/2 of a row is element [n][e] with i = 8 n + 2 c + e % 2, and its pair i + HS/2 is
// element [n + DT/2][e] of the same thread.
template <int DT>
__device__ __forceinline__ void attn_unrotate_acc(float (&acc)[DT][4], int r0, int Tlen, RopeTables rope) {
    constexpr int HALF = DT * 4; // HS / 2
    if (!rope.cos) { return; }
    const int lane = threadIdx.x % WARP_SIZE, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int row = r0 + g + 8 * hf;
        if (row >= Tlen) { continue; }
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            const size_t at = (size_t)row * HALF + n * 8 + 2 * cq;
            const float2 c = *reinterpret_cast<const float2 *>(rope.cos + at);
            const float2 s = *reinterpret_cast<const float2 *>(rope.sin + at);
            rope_unrotate(acc[n][2 * hf], acc[n + DT / 2][2 * hf], c.x, s.x);
            rope_unrotate(acc[n][2 * hf + 1], acc[n + DT / 2][2 * hf + 1], c.y, s.y);
        }
    }
}

// A backward kernel's result for rows row0 + ... of the slab: acc (rotated back by RoPE where rope.cos is given: dQ,
// dK) times `mul` into dst (rows stride elements apart), and when prow is not NULL, its column sums (colsum_acc_rows)
// into that row of bias partials. red: shared memory no longer read by anyone.
template <int DT>
__device__ __forceinline__ void attn_grad_store(bf16 *dst, size_t stride, float *prow, float *red,
                                                float (&acc)[DT][4], int row0, int Tlen, float mul, RopeTables rope) {
    attn_unrotate_acc(acc, row0, Tlen, rope);
    store_acc_rows(dst, stride, acc, row0, Tlen, mul);
    if (prow) { colsum_acc_rows(prow, red, acc, row0, Tlen, mul); }
}


// ----------------------------------------------------------------------------------------------------------------
// bf16 forward. A warpgroup owns 64 queries of one head; Q stays in shared memory as the A operand of S = Q K^T, and
// O += P V takes P from registers against the V tile read transposed. Key/value tiles of 64 rows go through two
// shared-memory stages: tile j+1 loads while tile j is used. Under grouped-query attention a block holds PACK
// warpgroups, the same 64 rows of PACK query heads of one group, which read the same K and V tiles: each tile comes
// from L2 into shared memory once for PACK heads (the forward's products are only ~64 FLOPs a byte of K and V
// copied, the least of the three kernels), the warpgroups take turns at the copies, and their work, rows and masks
// are the same, so the block's barriers wait for no one. (One warpgroup taking two query slabs of one head, sharing
// each K tile, needs 188 registers at HS = 64 and 2 blocks an SM: 10-12% slower than one slab at 125 registers and 4
// blocks.)

#define ATTN_PACK_MAX 2 // query heads a forward block (attn_with_pack); 2 blocks of 2 an SM at HS = 64 (4: not tried)
#define ATTN_FWD_TILES(PACK) ((PACK) + 4) // PACK x Q, 2 x (K, V)

template <int HS, int PACK>
__global__ void __launch_bounds__(PACK * ATTN_WG_THREADS)
    attention_forward_bf16_kernel(bf16 *out, float *lse, const bf16 *qkv, int Tlen, int NH, int KV,
                                  float scale_log2) {
    constexpr int ROWS = ATTN_WG_ROWS, DT = HS / 8, ST = ROWS / 8, TILE = attn_tile_bytes<HS>();
    extern __shared__ __align__(128) unsigned char smem[];
    // the thread's warpgroup and its index in it: threadIdx.x itself where the block is one warpgroup
    const int wg = PACK == 1 ? 0 : threadIdx.x / ATTN_WG_THREADS;
    const unsigned tid = PACK == 1 ? threadIdx.x : threadIdx.x % ATTN_WG_THREADS;
    const int warp = tid / WARP_SIZE;
    const uint32_t sQ = smem_u32(wgmma_smem_aligned(smem)) + wg * TILE, sKV = sQ + (PACK - wg) * TILE;
    auto sK = [&](int st) { return sKV + (2 * st) * TILE; };
    auto sV = [&](int st) { return sKV + (2 * st + 1) * TILE; };
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ROWS, true, PACK, wg);
    const int q0 = hd.row0;
    const size_t stride = (size_t)(NH + 2 * KV) * HS;
    const bf16 *seq = qkv + hd.seq, *q = seq + hd.qcol, *k = seq + hd.kcol, *v = seq + hd.vcol;
    const int nkv = (min(q0 + ROWS, Tlen) + ROWS - 1) / ROWS, row_base = q0 + warp * 16;
    // tile j's K and V (the group's, the same for every warpgroup): K by warpgroup 0, V by the last
    auto load_kv = [&](int st, int kv0) {
        if (wg == 0) { load_tile_async<HS>(sK(st), k, stride, kv0, Tlen, tid); }
        if (wg == PACK - 1) { load_tile_async<HS>(sV(st), v, stride, kv0, Tlen, tid); }
    };

    load_tile_async<HS>(sQ, q, stride, q0, Tlen, tid);
    load_kv(0, 0);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    const uint64_t qdesc = wgmma_desc(sQ);

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // m in log2 units; l: this thread's share
    zero_acc(o);
    for (int j = 0; j < nkv; j++) {
        const int st = j & 1, kv0 = j * ROWS;
        if (j + 1 < nkv) { load_kv(st ^ 1, kv0 + ROWS); }
        cp_async_commit();

        float s[ST][4];
        wgmma_fence();
        wgmma_scores<HS>(s, qdesc, wgmma_desc(sK(st)));
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(s);
        if (kv0 + ROWS - 1 > row_base) { attn_mask_future(s, row_base, kv0); }
        attn_softmax_tile(s, o, m, l, scale_log2);
        uint32_t pf[ST / 2][4];
        acc_to_a(pf, s);
        wgmma_fence();
        wgmma_accumulate<HS>(o, pf, wgmma_desc(sV(st)));
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(o);
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); // tile j+1 has landed and nobody reads stage st any more
    }
    attn_forward_store(out + hd.out, (size_t)NH * HS, lse + hd.stat, o, m, l, row_base, Tlen);
}

// ----------------------------------------------------------------------------------------------------------------
// bf16 backward, dQ and D. A block owns 64 queries. It first takes lse and D of its rows (attn_row_stats, which also
// writes D for the dK/dV kernel); then it walks the key tiles (64 rows, two stages) up to its diagonal: S = Q K^T
// and dP = dO V^T with Q and dO in shared memory as the A operands (dP in flight while P is computed), dS = P (dP -
// D), dQ += dS K from registers and the K tile read transposed.

#define ATTN_DQ_TILES 6 // Q, dO, 2 x (K, V)

template <int HS>
__global__ void __launch_bounds__(ATTN_WG_THREADS)
    attention_backward_dq_bf16_kernel(bf16 *dqkv, float *partial, float *dsum, const bf16 *dout, const bf16 *out,
                                      const bf16 *qkv, const float *lse, RopeTables rope, int Tlen, int NH, int KV,
                                      float scale_log2, float scale) {
    constexpr int ROWS = ATTN_WG_ROWS, DT = HS / 8, ST = ROWS / 8, TILE = attn_tile_bytes<HS>();
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *aligned = wgmma_smem_aligned(smem);
    const uint32_t sQ = smem_u32(aligned), sdO = sQ + TILE, sKV = sdO + TILE;
    auto sK = [&](int st) { return sKV + (2 * st) * TILE; };
    auto sV = [&](int st) { return sKV + (2 * st + 1) * TILE; };
    const int warp = threadIdx.x / WARP_SIZE;
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ROWS, true);
    const int q0 = hd.row0;
    const size_t stride = (size_t)(NH + 2 * KV) * HS, ostride = (size_t)NH * HS;
    const bf16 *seq = qkv + hd.seq, *q = seq + hd.qcol, *k = seq + hd.kcol, *v = seq + hd.vcol, *dO = dout + hd.out;
    const int nkv = (min(q0 + ROWS, Tlen) + ROWS - 1) / ROWS, row_base = q0 + warp * 16;

    load_tile_async<HS>(sQ, q, stride, q0, Tlen);
    load_tile_async<HS>(sdO, dO, ostride, q0, Tlen);
    load_tile_async<HS>(sK(0), k, stride, 0, Tlen);
    load_tile_async<HS>(sV(0), v, stride, 0, Tlen);
    cp_async_commit();
    float lrow[2], drow[2];
    attn_row_stats<HS>(lrow, drow, dO, out + hd.out, ostride, lse + hd.stat, dsum + hd.stat, row_base, Tlen);
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    const uint64_t qdesc = wgmma_desc(sQ), dodesc = wgmma_desc(sdO);

    float dq[DT][4];
    zero_acc(dq);
    for (int j = 0; j < nkv; j++) {
        const int st = j & 1, kv0 = j * ROWS;
        if (j + 1 < nkv) {
            load_tile_async<HS>(sK(st ^ 1), k, stride, kv0 + ROWS, Tlen);
            load_tile_async<HS>(sV(st ^ 1), v, stride, kv0 + ROWS, Tlen);
        }
        cp_async_commit();
        const uint64_t kdesc = wgmma_desc(sK(st));

        float s[ST][4], dp[ST][4];
        wgmma_fence();
        wgmma_scores<HS>(s, qdesc, kdesc);
        wgmma_commit();
        wgmma_scores<HS>(dp, dodesc, wgmma_desc(sV(st)));
        wgmma_commit();
        wgmma_wait<1>(); // S is in; dP may still be running
        wgmma_hold(s);
        attn_probs(s, lrow, row_base, kv0, scale_log2);
        wgmma_wait<0>();
        wgmma_hold(dp);
        attn_dscores(dp, s, drow);
        uint32_t dsf[ST / 2][4];
        acc_to_a(dsf, dp);
        wgmma_fence();
        wgmma_accumulate<HS>(dq, dsf, kdesc);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(dq);
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
    }
    // the shared tiles are free for the bias sums: the loop ended with a barrier and no copy or MMA in flight
    float *head_partial = partial ? partial + (size_t)hd.partial_row * stride + hd.qcol : NULL;
    attn_grad_store(dqkv + hd.seq + hd.qcol, stride, head_partial, reinterpret_cast<float *>(aligned), dq, row_base,
                    Tlen, scale, rope);
}

// ----------------------------------------------------------------------------------------------------------------
// bf16 backward, dK and dV. A block owns 64 keys, K and V staying in shared memory as the A operands of the
// transposed products S^T = K Q^T and dP^T = V dO^T, whose accumulators are already the A operands of dV += P^T dO
// and dK += dS^T Q (from registers, against the Q and dO tiles read transposed): nothing crosses warps. It walks the
// query tiles (64 rows, two stages) from its diagonal on, of each query head of its KV head's group in turn (one walk:
// the first tile of the next head loads while the last of this one is used); dP^T is in flight while P^T is computed
// from S^T. partial (unless NULL): row b * nblocks + (block along T) of the bias partials ((NH + 2 KV) HS floats
// each), the KV head's K and V columns; the dQ kernel writes the Q columns of the same rows.

#define ATTN_DKDV_TILES 6 // K, V, 2 x (Q, dO); then 2 x (lse, D) of the query tiles
// Blocks an SM must hold: at HS = 64 ptxas would otherwise take up to 219 registers (2 blocks) where 168 suffice
// without spilling; HS = 128 needs 255.
#define ATTN_DKDV_MIN_BLOCKS(HS) ((HS) == 64 ? 3 : 2)

template <int HS>
__global__ void __launch_bounds__(ATTN_WG_THREADS, ATTN_DKDV_MIN_BLOCKS(HS))
    attention_backward_dkdv_bf16_kernel(bf16 *dqkv, float *partial, const bf16 *dout, const bf16 *qkv,
                                        const float *lse, const float *dsum, RopeTables rope, int Tlen, int NH, int KV,
                                        float scale_log2, float scale) {
    constexpr int ROWS = ATTN_WG_ROWS, DT = HS / 8, ST = ROWS / 8, TILE = attn_tile_bytes<HS>();
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *aligned = wgmma_smem_aligned(smem);
    const uint32_t sK = smem_u32(aligned), sV = sK + TILE, sQdO = sV + TILE;
    auto sQ = [&](int st) { return sQdO + (2 * st) * TILE; };
    auto sdO = [&](int st) { return sQdO + (2 * st + 1) * TILE; };
    float *sL = reinterpret_cast<float *>(aligned + ATTN_DKDV_TILES * TILE); // [2][ROWS]: lse * log2(e)
    float *sD = sL + 2 * ROWS;                                               // [2][ROWS]: D
    const int warp = threadIdx.x / WARP_SIZE;
    const AttnHead hd = attn_head<HS>(Tlen, NH, KV, ROWS, false);
    const int k0 = hd.row0;
    const size_t stride = (size_t)(NH + 2 * KV) * HS, ostride = (size_t)NH * HS;
    const bf16 *seq = qkv + hd.seq, *q = seq + hd.qcol, *k = seq + hd.kcol, *v = seq + hd.vcol, *dO = dout + hd.out;
    const float *lse_bh = lse + hd.stat, *dsum_bh = dsum + hd.stat;
    bf16 *dk_dst = dqkv + hd.seq + hd.kcol; // dV's columns are KV HS on
    float *prow = partial ? partial + (size_t)hd.partial_row * stride + hd.kcol : NULL;
    // The walk: the query tiles from row k0 (the diagonal) to the end, of each query head i of the group in turn.
    // Tile n = i per_head + (qs - k0) / ROWS of it uses stage n % 2; n itself is not carried (HS = 128 would spill).
    const int group = NH / KV, per_head = (Tlen - k0 + ROWS - 1) / ROWS, key_base = k0 + warp * 16;
    auto load_q_tile = [&](int st, int i, int qs) {
        attn_load_query_tile<HS>(sQ(st), sdO(st), sL + st * ROWS, sD + st * ROWS, q + i * HS, stride, dO + i * HS,
                                 ostride, lse_bh + (size_t)i * Tlen, dsum_bh + (size_t)i * Tlen, qs, Tlen);
    };

    load_tile_async<HS>(sK, k, stride, k0, Tlen);
    load_tile_async<HS>(sV, v, stride, k0, Tlen);
    load_q_tile(0, 0, k0);
    cp_async_commit();
    cp_async_wait<0>();
    attn_query_tile_landed(sL);
    fence_proxy_async();
    __syncthreads();
    const uint64_t kdesc = wgmma_desc(sK), vdesc = wgmma_desc(sV);

    float dk[DT][4], dv[DT][4];
    zero_acc(dk);
    zero_acc(dv);
    for (int i = 0, qs = k0; i < group;) {
        const int st = (i * per_head + (qs - k0) / ROWS) & 1;
        const bool last_of_head = qs + ROWS >= Tlen; // then the next tile is the next head's first
        const int next_i = last_of_head ? i + 1 : i, next_qs = last_of_head ? k0 : qs + ROWS;
        if (next_i < group) { load_q_tile(st ^ 1, next_i, next_qs); }
        cp_async_commit();
        const uint64_t qdesc = wgmma_desc(sQ(st)), dodesc = wgmma_desc(sdO(st));

        float s[ST][4], dp[ST][4];
        wgmma_fence();
        wgmma_scores<HS>(s, kdesc, qdesc);
        wgmma_commit();
        wgmma_scores<HS>(dp, vdesc, dodesc);
        wgmma_commit();
        wgmma_wait<1>(); // S^T is in; dP^T may still be running
        wgmma_hold(s);
        attn_probs_t(s, sL + st * ROWS, key_base, qs, scale_log2);
        wgmma_wait<0>();
        wgmma_hold(dp);
        attn_dscores_t(dp, s, sD + st * ROWS);
        uint32_t pf[ST / 2][4], dsf[ST / 2][4];
        acc_to_a(pf, s);
        acc_to_a(dsf, dp);
        wgmma_fence();
        wgmma_accumulate<HS>(dv, pf, dodesc);
        wgmma_accumulate<HS>(dk, dsf, qdesc);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(dk);
        wgmma_hold(dv);
        cp_async_wait<0>();
        if (next_i < group) { attn_query_tile_landed(sL + (st ^ 1) * ROWS); }
        fence_proxy_async();
        __syncthreads();
        i = next_i, qs = next_qs;
    }
    // the shared tiles are free for the bias sums: the loop ended with a barrier and no copy or MMA in flight
    float *red = reinterpret_cast<float *>(aligned);
    attn_grad_store(dk_dst, stride, prow, red, dk, key_base, Tlen, scale, rope);
    attn_grad_store(dk_dst + (size_t)KV * HS, stride, prow ? prow + (size_t)KV * HS : NULL, red, dv, key_base, Tlen,
                    1.0f, RopeTables{});
}

// ----------------------------------------------------------------------------------------------------------------
// launchers

template <typename Kernel> static void attn_set_smem(Kernel kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Blocks of `rows` rows along T, for `heads` heads of B sequences (attention_check_args: it fits an int).
static int attn_grid(int B, int Tlen, int heads, int rows) { return B * heads * ceil_div_int(Tlen, rows); }
// Dynamic shared memory of the three bf16 kernels.
template <int HS, int PACK> constexpr int attn_forward_smem() { return attn_smem_bytes<HS>(ATTN_FWD_TILES(PACK), 0); }
template <int HS> constexpr int attn_dq_smem() { return attn_smem_bytes<HS>(ATTN_DQ_TILES, 0); }
template <int HS> constexpr int attn_dkdv_smem() {
    return attn_smem_bytes<HS>(ATTN_DKDV_TILES, 4 * ATTN_WG_ROWS * (int)sizeof(float));
}

// Calls f with the query heads a forward block takes (a std::integral_constant): ATTN_PACK_MAX where it divides the
// group (NH / KV), else 1.
template <typename F> static void attn_with_pack(int NH, int KV, F f) {
    if ((NH / KV) % ATTN_PACK_MAX == 0) {
        f(std::integral_constant<int, ATTN_PACK_MAX>{});
    } else {
        f(std::integral_constant<int, 1>{});
    }
}

template <int HS>
static void attention_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, int B, int Tlen, int NH, int KV,
                                   cudaStream_t stream) {
    attn_with_pack(NH, KV, [&](auto pack) {
        constexpr int PACK = decltype(pack)::value, smem = attn_forward_smem<HS, PACK>();
        attn_set_smem(attention_forward_bf16_kernel<HS, PACK>, smem);
        attention_forward_bf16_kernel<HS, PACK>
            <<<attn_grid(B, Tlen, NH / PACK, ATTN_WG_ROWS), PACK * ATTN_WG_THREADS, smem, stream>>>(
                out, lse, qkv, Tlen, NH, KV, LOG2E_F / sqrtf((float)HS));
    });
    cudaCheckLaunch();
}

// The backward's two kernels (dev/bench_attention.cu times them one by one). The dQ kernel writes the D the dK/dV
// kernel reads.
template <int HS>
static void attention_backward_dq_bf16(bf16 *dqkv, float *partial, float *dsum, const bf16 *dout, const bf16 *out,
                                       const bf16 *qkv, const float *lse, RopeTables rope, int B, int Tlen, int NH,
                                       int KV, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS);
    constexpr int smem = attn_dq_smem<HS>();
    attn_set_smem(attention_backward_dq_bf16_kernel<HS>, smem);
    attention_backward_dq_bf16_kernel<HS><<<attn_grid(B, Tlen, NH, ATTN_WG_ROWS), ATTN_WG_THREADS, smem, stream>>>(
        dqkv, partial, dsum, dout, out, qkv, lse, rope, Tlen, NH, KV, scale * LOG2E_F, scale);
    cudaCheckLaunch();
}
template <int HS>
static void attention_backward_dkdv_bf16(bf16 *dqkv, float *partial, const float *dsum, const bf16 *dout,
                                         const bf16 *qkv, const float *lse, RopeTables rope, int B, int Tlen, int NH,
                                         int KV, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS);
    constexpr int smem = attn_dkdv_smem<HS>();
    attn_set_smem(attention_backward_dkdv_bf16_kernel<HS>, smem);
    attention_backward_dkdv_bf16_kernel<HS><<<attn_grid(B, Tlen, KV, ATTN_WG_ROWS), ATTN_WG_THREADS, smem, stream>>>(
        dqkv, partial, dout, qkv, lse, dsum, rope, Tlen, NH, KV, scale * LOG2E_F, scale);
    cudaCheckLaunch();
}
template <int HS>
static void attention_backward_bf16(bf16 *dqkv, float *partial, float *dsum, const bf16 *dout, const bf16 *out,
                                    const bf16 *qkv, const float *lse, RopeTables rope, int B, int Tlen, int NH,
                                    int KV, cudaStream_t stream) {
    attention_backward_dq_bf16<HS>(dqkv, partial, dsum, dout, out, qkv, lse, rope, B, Tlen, NH, KV, stream);
    attention_backward_dkdv_bf16<HS>(dqkv, partial, dsum, dout, qkv, lse, rope, B, Tlen, NH, KV, stream);
}

template <int HS>
static void attention_forward_f32(float *out, float *lse, const float *qkv, int B, int Tlen, int NH, int KV,
                                  cudaStream_t stream) {
    attention_forward_f32_kernel<HS>
        <<<attn_grid(B, Tlen, NH, ATTN_ROWS_PER_BLOCK), ATTN_ROWS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            out, lse, qkv, Tlen, NH, KV, 1.0f / sqrtf((float)HS));
    cudaCheckLaunch();
}

template <int HS>
static void attention_backward_f32(float *dqkv, float *partial, float *dsum, const float *dout, const float *out,
                                   const float *qkv, const float *lse, RopeTables rope, int B, int Tlen, int NH,
                                   int KV, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS);
    attention_backward_dq_f32_kernel<HS>
        <<<attn_grid(B, Tlen, NH, ATTN_ROWS_PER_BLOCK), ATTN_ROWS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            dqkv, partial, dsum, dout, out, qkv, lse, rope, Tlen, NH, KV, scale);
    cudaCheckLaunch();
    attention_backward_dkdv_f32_kernel<HS>
        <<<attn_grid(B, Tlen, KV, ATTN_ROWS_PER_BLOCK), ATTN_ROWS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            dqkv, partial, dout, qkv, lse, dsum, rope, Tlen, NH, KV, scale);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------------------------------------------
// the interface

// Refuses what the kernels do not take, before any work. `addresses`: the activation pointers or'ed together; rows
// are copied in 16-byte pieces. The largest grid is the fp32 kernels' over the query heads (8 rows a block).
static inline void attention_check_args(int B, int Tlen, int NH, int KV, int HS, uintptr_t addresses) {
    if (HS != 64 && HS != 128) {
        fail("attention supports head sizes 64 and 128, got %d; choose n_embd / n_head = 64 or 128", HS);
    }
    if (KV < 1 || NH % KV != 0) {
        fail("attention needs the %d query heads to be a multiple of the key/value heads (got %d); choose --kv-heads "
             "dividing --heads",
             NH, KV);
    }
    if (B < 1 || Tlen < 1 || (int64_t)B * NH * ceil_div_int(Tlen, ATTN_ROWS_PER_BLOCK) > INT_MAX) {
        fail("attention over %d sequences of %d tokens and %d heads: need at least one of each, and at most %d blocks "
             "of %d rows; lower --batch-size or --seq-len",
             B, Tlen, NH, INT_MAX, ATTN_ROWS_PER_BLOCK);
    }
    if (addresses % 16 != 0) {
        fail("attention buffers must be 16-byte aligned; allocate activations at 16-byte offsets");
    }
}

// Rows of the sequence per row of bias partials: one backward block's rows (the same in both kernels).
template <typename T> static int attention_bias_part_rows() {
    return std::is_same<T, float>::value ? ATTN_ROWS_PER_BLOCK : ATTN_WG_ROWS;
}

// The backward's workspace holds D, one float per (b, query head, t), then the bias partials: B ceil(T / rows) rows
// of (NH + 2 KV) HS floats (2.4 MB at 1558M, B = 8, in bf16).
// Floats of the workspace's D rows, rounded up so that the bias partials after them are 16-byte aligned
// (add_partial_sums reads them in 16-byte loads).
static inline size_t attention_dsum_floats(int B, int Tlen, int NH) {
    return ((size_t)B * NH * Tlen + PARTIAL_VEC - 1) / PARTIAL_VEC * PARTIAL_VEC;
}

template <typename T> static size_t attention_backward_workspace_bytes(int B, int Tlen, int NH, int KV, int HS) {
    size_t parts = (size_t)B * ceil_div_int(Tlen, attention_bias_part_rows<T>());
    return (attention_dsum_floats(B, Tlen, NH) + parts * (NH + 2 * KV) * HS) * sizeof(float);
}

// qkv: (B, T, NH + 2 KV, HS) as the QKV GEMM writes it (KV = NH: GPT-2's (B, T, 3, NH, HS)). out: (B, T, NH, HS).
// lse: (B, NH, T).
template <typename T>
static void attention_forward(T *out, float *lse, const T *qkv, int B, int Tlen, int NH, int KV, int HS,
                              cudaStream_t stream) {
    attention_check_args(B, Tlen, NH, KV, HS, (uintptr_t)out | (uintptr_t)qkv);
    if constexpr (std::is_same<T, float>::value) {
        if (HS == 64) { attention_forward_f32<64>(out, lse, qkv, B, Tlen, NH, KV, stream); }
        else { attention_forward_f32<128>(out, lse, qkv, B, Tlen, NH, KV, stream); }
    } else {
        if (HS == 64) { attention_forward_bf16<64>(out, lse, qkv, B, Tlen, NH, KV, stream); }
        else { attention_forward_bf16<128>(out, lse, qkv, B, Tlen, NH, KV, stream); }
    }
}

// dqkv (B, T, NH + 2 KV, HS) is written, not accumulated: dK and dV of a KV head are summed over the query heads of
// its group. Where q and k were rotated (rope.cos: rope.h's tables of rope.rows >= T positions; RopeTables{}: no
// rotary embedding), dQ and dK are rotated back: dqkv is then the gradient of the QKV projection's output. dbias
// ((NH + 2 KV) HS; NULL: not wanted) += the column sums of dqkv over the B T rows (= when not accumulate): the QKV
// bias gradient. workspace: attention_backward_workspace_bytes<T>() bytes.
template <typename T>
static void attention_backward(T *dqkv, float *dbias, const T *dout, const T *out, const T *qkv, const float *lse,
                               RopeTables rope, void *workspace, int B, int Tlen, int NH, int KV, int HS,
                               int accumulate, cudaStream_t stream) {
    attention_check_args(B, Tlen, NH, KV, HS, (uintptr_t)dqkv | (uintptr_t)dout | (uintptr_t)out | (uintptr_t)qkv);
    if (rope.cos) { rope_check<T>(Tlen, rope.rows, HS, (uintptr_t)rope.cos | (uintptr_t)rope.sin); }
    float *dsum = (float *)workspace;
    float *partial = dbias ? dsum + attention_dsum_floats(B, Tlen, NH) : NULL;
    if constexpr (std::is_same<T, float>::value) {
        if (HS == 64) {
            attention_backward_f32<64>(dqkv, partial, dsum, dout, out, qkv, lse, rope, B, Tlen, NH, KV, stream);
        } else {
            attention_backward_f32<128>(dqkv, partial, dsum, dout, out, qkv, lse, rope, B, Tlen, NH, KV, stream);
        }
    } else {
        if (HS == 64) {
            attention_backward_bf16<64>(dqkv, partial, dsum, dout, out, qkv, lse, rope, B, Tlen, NH, KV, stream);
        } else {
            attention_backward_bf16<128>(dqkv, partial, dsum, dout, out, qkv, lse, rope, B, Tlen, NH, KV, stream);
        }
    }
    if (dbias) {
        const int parts = B * ceil_div_int(Tlen, attention_bias_part_rows<T>()), cols = (NH + 2 * KV) * HS;
        PartialSumDsts dsts = {{dbias}};
        add_partial_sums(dsts, 1, partial, parts, cols, cols, accumulate, stream);
    }
}

#endif // LLMC_ATTENTION_CUH
