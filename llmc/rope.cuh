/*
 * rope.cuh: rotary position embedding (RoPE) of the query and key heads of a qkv buffer, in place, in Hugging Face's
 * rotate-half pairing (Llama); and the rotation back that the attention backward applies to dQ and dK as it stores
 * them (llmc/attention.cuh), where the gradient of the rotated q and k becomes that of the QKV projection's output.
 *
 * A row of qkv is one token: NH query heads, then KV key heads, then KV value heads, HS columns each
 * (llmc/attention.cuh); row b T + t holds position t of sequence b. Columns i and i + HS/2 (i < HS/2) of every query
 * and key head are a pair, rotated by the angle t inv_freq[i]:
 *   forward:  y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin;
 *   backward: the transposed rotation (by -angle), dx1 = dy1 cos + dy2 sin,  dx2 = dy2 cos - dy1 sin.
 * The value heads are not touched. cos and sin come from fp32 tables (T rows of HS/2) made once on the host by
 * llmc/rope.h, which the CPU build uses too, so both builds rotate by the same fp32 numbers; the rotation is computed
 * in fp32 and rounded once to the activation type.
 *
 * Geometry of the forward: a block takes rows (grid-stride), its threads the (head, pack) items of a row: a thread
 * reads a pack (16 bytes: 8 bf16 or 4 fp32 columns) of x1 and the matching pack of x2, and its pairs' cos and sin (the
 * row's table entries, shared by all heads of the row, stay in L1). The backward has no pass of its own: a separate
 * one read and wrote dQ and dK once more (84 MB a layer at Llama-3.2-1B, B 4, T 2048).
 */
#ifndef LLMC_ROPE_CUH
#define LLMC_ROPE_CUH

#include "cuda_common.cuh"

#define ROPE_THREADS 128

// N floats (a multiple of 4) from 16-byte-aligned src into registers, in 16-byte loads.
template <int N> __device__ __forceinline__ void load_floats(float (&dst)[N], const float *src) {
    for (int j = 0; j < N; j += 4) {
        const float4 v = *reinterpret_cast<const float4 *>(src + j);
        dst[j] = v.x, dst[j + 1] = v.y, dst[j + 2] = v.z, dst[j + 3] = v.w;
    }
}

// One pair rotated by its angle (forward), and the gradient of a rotated pair rotated back (backward).
__device__ __forceinline__ void rope_rotate(float &x1, float &x2, float c, float s) {
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    x1 = y1, x2 = y2;
}
__device__ __forceinline__ void rope_unrotate(float &dy1, float &dy2, float c, float s) {
    const float dx1 = dy1 * c + dy2 * s, dx2 = dy2 * c - dy1 * s;
    dy1 = dx1, dy2 = dx2;
}

// The tables the attention backward rotates dQ and dK back with (llmc/attention.cuh): `rows` positions of HS / 2
// floats each; cos NULL where the model has no rotary embedding.
struct RopeTables {
    const float *cos, *sin;
    int rows;
};

// qkv rows of `heads` heads; the first `rotated` of them (the query and key heads) are rotated. Assumes HS / 2 a
// multiple of Packed<T>::N (rope_check).
template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T *qkv, const float *cos_table, const float *sin_table, int rows, int Tlen, int heads, int rotated,
                int HS) {
    constexpr int PN = Packed<T>::N;
    const int half = HS / 2, packs = half / PN;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t t = row % Tlen;
        const float *cos_row = cos_table + t * half, *sin_row = sin_table + t * half;
        for (int item = threadIdx.x; item < rotated * packs; item += blockDim.x) {
            const int h = item / packs, col = item % packs * PN;
            T *x = qkv + ((size_t)row * heads + h) * HS + col;
            Packed<T> x1 = load_packed(x), x2 = load_packed(x + half), y1, y2;
            float c[PN], s[PN];
            load_floats(c, cos_row + col);
            load_floats(s, sin_row + col);
            for (int j = 0; j < PN; j++) {
                float a = x1[j], b = x2[j];
                rope_rotate(a, b, c[j], s[j]);
                y1.set(j, a);
                y2.set(j, b);
            }
            store_packed(x, y1);
            store_packed(x + half, y2);
        }
    }
}

// Refuses what the kernel cannot take, and tables that would be read past their end, before any work. `addresses`:
// the buffer and the tables or'ed together.
template <typename T> static void rope_check(int Tlen, int table_rows, int HS, uintptr_t addresses) {
    if (HS % (2 * Packed<T>::N) != 0) {
        fail("RoPE on the GPU needs the head size to be a multiple of %d in %s (16-byte loads of each half), got %d; "
             "choose --width / --heads accordingly",
             2 * Packed<T>::N, TypeInfo<T>::name, HS);
    }
    if (Tlen > table_rows) {
        fail("RoPE tables of %d positions cannot rotate sequences of %d tokens; make the tables for --seq-len",
             table_rows, Tlen);
    }
    if (addresses % 16 != 0) {
        fail("RoPE buffers and tables must be 16-byte aligned; allocate them at 16-byte offsets");
    }
}

// qkv (B, T, NH + 2 KV, HS): its query and key heads rotated in place. cos_table, sin_table: device tables of
// table_rows >= T positions, HS / 2 floats each.
template <typename T>
static void rope_forward(T *qkv, const float *cos_table, const float *sin_table, int table_rows, int B, int Tlen,
                         int NH, int KV, int HS, cudaStream_t stream) {
    rope_check<T>(Tlen, table_rows, HS, (uintptr_t)qkv | (uintptr_t)cos_table | (uintptr_t)sin_table);
    const int rows = B * Tlen, per_sm = 2048 / ROPE_THREADS;
    int blocks = g_cuda.props.multiProcessorCount * per_sm;
    if (blocks > rows) { blocks = rows; }
    rope_kernel<T><<<blocks, ROPE_THREADS, 0, stream>>>(qkv, cos_table, sin_table, rows, Tlen, NH + 2 * KV, NH + KV,
                                                        HS);
    cudaCheckLaunch();
}

#endif // LLMC_ROPE_CUH
