/*
 * encoder.cuh: the input embedding x[b,t,:] = wte[tok[b,t],:] + wpe[t,:] (wte's row alone for rotary models, which
 * have no wpe: EmbeddingShard::add_wpe 0) and its deterministic backward.
 *
 * Backward: dwte[v,:] += sum of dx[b,t,:] over the positions whose token is v; dwpe[t,:] += sum over b of dx[b,t,:].
 * Vocabulary-parallel (tensor parallelism): a rank holds wte rows [vocab_begin, vocab_begin + vocab_rows) only; it
 * embeds the tokens in that range, zeros for the others, and only TP rank 0 adds wpe, so the sum over the TP group
 * (an all-reduce) is the full embedding, with each element rounded once as on one GPU. Its wte gradient covers the
 * tokens of its range only.
 * Float atomics would make dwte depend on thread timing, so the host groups the positions of a micro-batch by token
 * (a counting sort; the tokens live on the host anyway) and each token's row is summed by one thread block in the
 * sorted order, which is fixed.
 */
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "cuda_common.cuh"

// The rows of wte this rank holds, and whether it adds the position embedding (see above).
typedef struct {
    int vocab_begin, vocab_rows, add_wpe;
} EmbeddingShard;

// One thread per 16-byte pack of one position's channels. Assumes C % Packed<T>::N == 0.
template <typename T>
__global__ void __launch_bounds__(256) encoder_forward_kernel(T *out, const int *tokens, const T *wte, const T *wpe,
                                                              int N, int Tlen, int C, EmbeddingShard sh) {
    constexpr int PN = Packed<T>::N;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t packs_per_row = C / PN;
    if (idx >= (size_t)N * packs_per_row) { return; }
    size_t row = idx / packs_per_row, c = (idx % packs_per_row) * PN;
    int t = (int)(row % Tlen);
    int v = tokens[row] - sh.vocab_begin;
    bool mine = v >= 0 && v < sh.vocab_rows;
    Packed<T> a, b, o;
    if (mine) { a = load_packed(wte + (size_t)v * C + c); }
    if (sh.add_wpe) { b = load_packed(wpe + (size_t)t * C + c); }
    for (int k = 0; k < PN; k++) { o.set(k, (mine ? a[k] : 0.0f) + (sh.add_wpe ? b[k] : 0.0f)); }
    store_packed(out + row * C + c, o);
}

template <typename T>
static void encoder_forward(T *out, const int *tokens, const T *wte, const T *wpe, int B, int Tlen, int C,
                            EmbeddingShard sh, cudaStream_t stream) {
    const int threads = 256;
    size_t packs = (size_t)B * Tlen * C / Packed<T>::N;
    encoder_forward_kernel<<<grid_for(packs, threads), threads, 0, stream>>>(out, tokens, wte, wpe, B * Tlen, Tlen,
                                                                             C, sh);
    cudaCheckLaunch();
}

/*
 * The positions of one micro-batch grouped by token, built on the host: unique[k] is the k-th distinct token of this
 * rank's vocabulary rows (as a row of its wte), its positions (b*T + t, ascending) are positions[start[k] ..
 * start[k+1]); positions of other tokens are left out. One int array, so one copy to the GPU:
 * [start (U+1) | unique (U) | positions (N)].
 */
typedef struct {
    int num_unique;  // U
    int *start;      // U + 1
    int *unique;     // U
    int *positions;  // N
    size_t ints;     // used length of the packed array
} TokenBuckets;

// Fills b (whose arrays point into `packed`, room for 3N + 1 ints) from tokens[0..N); `count` has room for V ints.
static inline void token_buckets_build(TokenBuckets *b, int *packed, int *count, const int *tokens, int N, int V,
                                       EmbeddingShard sh) {
    memset(count, 0, (size_t)V * sizeof(int));
    for (int i = 0; i < N; i++) { count[tokens[i]]++; }
    int end = sh.vocab_begin + sh.vocab_rows < V ? sh.vocab_begin + sh.vocab_rows : V;
    for (int v = 0; v < V; v++) {
        if (v < sh.vocab_begin || v >= end) { count[v] = 0; }
    }
    int U = 0;
    for (int v = 0; v < V; v++) { U += count[v] > 0; }
    b->num_unique = U;
    b->start = packed;
    b->unique = packed + U + 1;
    b->positions = packed + 2 * U + 1;
    b->ints = (size_t)2 * U + 1 + N;
    // count[v] becomes the next free slot of token v; start/unique list the tokens in id order.
    int k = 0, off = 0;
    for (int v = 0; v < V; v++) {
        if (count[v] == 0) { continue; }
        b->start[k] = off;
        b->unique[k] = v - sh.vocab_begin;
        int c = count[v];
        count[v] = off;
        off += c;
        k++;
    }
    b->start[U] = off;
    for (int i = 0; i < N; i++) {
        if (tokens[i] >= sh.vocab_begin && tokens[i] < end) { b->positions[count[tokens[i]]++] = i; }
    }
}

// Position groups per token block: each group sums every ENC_GROUPS-th position of the token, then the groups are
// added in group order. Spreads a frequent token (thousands of positions) over more threads, still deterministic.
#define ENC_GROUPS 8
#define ENC_PACKS_PER_BLOCK 32

// grid (U, channel strips of 32 packs); block (32 packs, ENC_GROUPS). Assumes C % Packed<T>::N == 0.
template <typename T>
__global__ void __launch_bounds__(ENC_PACKS_PER_BLOCK *ENC_GROUPS)
    wte_backward_kernel(float *dwte, const T *dx, const int *start, const int *unique, const int *positions, int C) {
    constexpr int PN = Packed<T>::N;
    __shared__ float partial[ENC_GROUPS][ENC_PACKS_PER_BLOCK * PN];
    int k = blockIdx.x, g = threadIdx.y;
    int c = (blockIdx.y * ENC_PACKS_PER_BLOCK + threadIdx.x) * PN;
    bool active = c < C;
    float acc[PN] = {0.0f};
    if (active) {
        for (int i = start[k] + g; i < start[k + 1]; i += ENC_GROUPS) {
            Packed<T> d = load_packed(dx + (size_t)positions[i] * C + c);
            for (int j = 0; j < PN; j++) { acc[j] += d[j]; }
        }
    }
    for (int j = 0; j < PN; j++) { partial[g][threadIdx.x * PN + j] = acc[j]; }
    __syncthreads();
    if (g != 0 || !active) { return; }
    float *row = dwte + (size_t)unique[k] * C + c;
    for (int j = 0; j < PN; j++) {
        float s = 0.0f;
        for (int q = 0; q < ENC_GROUPS; q++) { s += partial[q][threadIdx.x * PN + j]; }
        row[j] += s;
    }
}

// One thread per (t, pack) of all wpe_rows rows of wpe: dwpe[t,:] += sum over b in order (nothing for t >= Tlen;
// written rather than added to when not accumulate).
template <typename T>
__global__ void __launch_bounds__(256)
    wpe_backward_kernel(float *dwpe, const T *dx, int B, int Tlen, int wpe_rows, int C, int accumulate) {
    constexpr int PN = Packed<T>::N;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int packs_per_row = C / PN;
    if (idx >= wpe_rows * packs_per_row) { return; }
    int t = idx / packs_per_row, c = (idx % packs_per_row) * PN;
    float acc[PN] = {0.0f};
    for (int b = 0; b < B && t < Tlen; b++) {
        Packed<T> d = load_packed(dx + ((size_t)b * Tlen + t) * C + c);
        for (int j = 0; j < PN; j++) { acc[j] += d[j]; }
    }
    float *row = dwpe + (size_t)t * C + c;
    for (int j = 0; j < PN; j++) { row[j] = accumulate ? row[j] + acc[j] : acc[j]; }
}

// buckets_dev: the device copy of the packed bucket array whose host layout `b` describes. dwte is always added to
// (the LM head's weight gradient has just written it, or the caller zeroed it); dwpe (wpe_rows rows, 0 for a model
// without wpe) is written when not accumulate.
template <typename T>
static void encoder_backward(float *dwte, float *dwpe, const T *dx, const TokenBuckets *b, const int *buckets_dev,
                             int B, int Tlen, int wpe_rows, int C, int accumulate, cudaStream_t stream) {
    const int *start = buckets_dev, *unique = buckets_dev + b->num_unique + 1;
    const int *positions = buckets_dev + 2 * b->num_unique + 1;
    dim3 grid(b->num_unique, ceil_div_int(C, ENC_PACKS_PER_BLOCK * Packed<T>::N));
    if (b->num_unique > 0) { // none of the micro-batch's tokens may fall in a vocabulary-parallel rank's rows
        wte_backward_kernel<<<grid, dim3(ENC_PACKS_PER_BLOCK, ENC_GROUPS), 0, stream>>>(dwte, dx, start, unique,
                                                                                        positions, C);
        cudaCheckLaunch();
    }
    if (wpe_rows == 0) { return; } // rotary positions: no wpe
    const int threads = 256;
    wpe_backward_kernel<<<grid_for((size_t)wpe_rows * C / Packed<T>::N, threads), threads, 0, stream>>>(
        dwpe, dx, B, Tlen, wpe_rows, C, accumulate);
    cudaCheckLaunch();
}

#endif // LLMC_ENCODER_CUH
