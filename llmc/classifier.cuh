/*
 * classifier.cuh: softmax, cross-entropy and its gradient fused into one kernel over the logits, in place.
 *
 * Row n of the logits z (Vp wide; only the first V columns are real tokens):
 *   lse = log sum_{v<V} exp(z_v),  loss_n = lse - z_{target},  dz_v = dloss * (exp(z_v - lse) - [v == target])
 * for v < V, and dz_v = 0 for the padded columns, which the softmax never sees. The gradient overwrites the logits,
 * so no fp32 copy of a (N, Vp) tensor ever exists; the trainer runs it on a chunk of rows at a time (train_gpt.cu's
 * gpt_head, llmc/head_chunks.h), so not even the logits of all N rows exist at once. Per-token losses are written in
 * fp32; loss_sum_kernel sums a prefix of them (a training micro-batch's all, a validation micro-batch's rows that are
 * not padding) in a fixed order (deterministic) for the host, row_loss_sums_kernel a span of each row (an evaluation's
 * completions).
 *
 * One block per row, the row staged in shared memory (Vp * sizeof(T): 100 KB in bf16), so the logits are read from
 * memory once and written once. Every thread first puts all its 16-byte packs of the row in flight at once
 * (cp.async; ~6 a thread at Vp = 50304), where a loop of loads waited for each before the next; then pass 1 keeps a
 * running (max, sum of exp) per thread over its packs, combined across the block, and pass 2 reads the row again
 * from shared memory and writes the gradient. A thread reads back only the packs it copied itself, so its own
 * cp.async wait is all pass 1 needs. Under tensor parallelism the row is split over the ranks and the two passes
 * become two kernels around an exchange of row statistics (below); a row wider than shared memory (a 128k
 * vocabulary) takes those two kernels on one rank, without the exchange.
 */
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include <type_traits>

#include "cuda_common.cuh"
#include "tensor_parallel.cuh"

#define CLASSIFIER_THREADS 1024
#define LOSS_SUM_THREADS 1024

// exp(z - c) of a logit: libm's accurate expf in fp32 mode, which is compared with the CPU build; where the gradient
// is stored in bf16, the hardware exp2 of z log2(e) - c log2(e) (c_log2 = c log2(e), taken once): one FMA and one MUFU
// op, with errors (~2^-22 relative, and the rounding of c_log2: ~2^-24 |c| log2(e) absolute in the exponent) far
// below bf16's 2^-9. The two exps per logit are most of this kernel's instructions.
template <typename T> __device__ __forceinline__ float exp_shifted(float z, float c, float c_log2) {
    if constexpr (std::is_same<T, float>::value) {
        return expf(z - c);
    } else {
        return fast_exp2(fmaf(z, LOG2E_F, -c_log2));
    }
}

// The pack of logits at column `first` in fp32, the padding columns (>= real) as -inf, so that they add exp(-inf) = 0
// to every sum and get probability 0 without a test of their own; a pack wholly of real columns skips the tests.
template <typename T>
__device__ __forceinline__ void logits_of(float (&z)[Packed<T>::N], const Packed<T> &x, int first, int real) {
    if (first + Packed<T>::N <= real) {
        for (int j = 0; j < Packed<T>::N; j++) { z[j] = x[j]; }
    } else {
        for (int j = 0; j < Packed<T>::N; j++) { z[j] = first + j < real ? x[j] : -INFINITY; }
    }
}

// This block's (max, sum of exp(z - max)) over the row's first `real` columns (the real tokens), each thread taking
// every blockDim.x-th of the packs; load(p) gives pack p.
template <typename T, typename Load>
__device__ void block_softmax_stats(int packs, int real, float *red, float *bm, float *bs, Load load) {
    constexpr int PN = Packed<T>::N;
    float m = -INFINITY, s = 0.0f;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        float z[PN];
        logits_of<T>(z, load(p), p * PN, real);
        float pm = m;
        for (int j = 0; j < PN; j++) { pm = fmaxf(pm, z[j]); }
        if (pm == -INFINITY) { continue; } // a pack of padding only
        float ps = 0.0f, pm_log2 = pm * LOG2E_F;
        for (int j = 0; j < PN; j++) { ps += exp_shifted<T>(z[j], pm, pm_log2); }
        s = s * expf(m - pm) + ps; // on the first pack m = -inf: exp(-inf) = 0 and s is 0
        m = pm;
    }
    *bm = block_max(m, red);
    *bs = block_sum(m == -INFINITY ? 0.0f : s * expf(m - *bm), red);
}

// The gradient dloss * (softmax - onehot(target)) of one pack of the row, over its first `real` columns (0 beyond).
template <typename T>
__device__ __forceinline__ Packed<T> softmax_xent_grad(const Packed<T> &x, int first, int real, int target, float lse,
                                                       float dloss) {
    constexpr int PN = Packed<T>::N;
    float z[PN], lse_log2 = lse * LOG2E_F;
    logits_of<T>(z, x, first, real);
    Packed<T> g;
    for (int j = 0; j < PN; j++) {
        float prob = exp_shifted<T>(z[j], lse, lse_log2);
        g.set(j, dloss * (prob - (first + j == target ? 1.0f : 0.0f)));
    }
    return g;
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
    for (int p = threadIdx.x; p < packs; p += blockDim.x) { cp_async_packed(staged + p, row + p * PN); }
    cp_async_commit();
    cp_async_wait<0>();
    float bm, bs;
    block_softmax_stats<T>(packs, V, red, &bm, &bs, [&](int p) { return staged[p]; });
    float lse = bm + logf(bs);
    int target = targets[blockIdx.x];
    if (threadIdx.x == 0) { losses[blockIdx.x] = lse - staged[target / PN][target % PN]; }
    if (!write_grad) { return; }
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        store_packed(row + p * PN, softmax_xent_grad(staged[p], p * PN, V, target, lse, dloss));
    }
}

/*
 * Vocabulary-parallel (tensor parallelism): a rank holds columns [col0, col0 + Vl) of every row (its rows of the
 * padded vocabulary; those >= V are padding), never the whole row. Pass 1 writes per row (max, sum of exp(z - max),
 * the target's logit or 0 where the target is another rank's) to stats[tp_rank][row]; an all-gather over the TP
 * group gives every rank all of them (3 floats per row and rank, not the logits); pass 2 combines them in rank order
 * (so every rank gets the same bits): lse = M + log sum_r s_r exp(m_r - M), M = max_r m_r, loss = lse - sum_r z_r,
 * and writes the gradient of its columns in place.
 */
#define VOCAB_STATS 3 // max, sum of exp, target logit

template <typename T>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    classifier_stats_kernel(float *stats, const T *logits, const int *targets, int col0, int Vl, int V) {
    __shared__ float red[WARP_SIZE];
    const T *row = logits + (size_t)blockIdx.x * Vl;
    int real = min(max(V - col0, 0), Vl), target = targets[blockIdx.x] - col0;
    float bm, bs;
    block_softmax_stats<T>(Vl / Packed<T>::N, real, red, &bm, &bs,
                           [&](int p) { return load_packed_cs(row + p * Packed<T>::N); });
    if (threadIdx.x == 0) {
        float *st = stats + (size_t)blockIdx.x * VOCAB_STATS;
        st[0] = bm;
        st[1] = bs;
        st[2] = target >= 0 && target < Vl ? to_float(row[target]) : 0.0f;
    }
}

template <typename T>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    classifier_finish_kernel(T *logits, float *losses, const float *stats, const int *targets, float dloss, int col0,
                             int Vl, int V, int N, int tp, int write_grad) {
    constexpr int PN = Packed<T>::N;
    int n = blockIdx.x;
    float M = -INFINITY, S = 0.0f, zt = 0.0f;
    for (int r = 0; r < tp; r++) { M = fmaxf(M, stats[((size_t)r * N + n) * VOCAB_STATS]); }
    for (int r = 0; r < tp; r++) {
        const float *st = stats + ((size_t)r * N + n) * VOCAB_STATS;
        S += st[0] == -INFINITY ? 0.0f : st[1] * expf(st[0] - M);
        zt += st[2];
    }
    float lse = M + logf(S);
    if (threadIdx.x == 0) { losses[n] = lse - zt; }
    if (!write_grad) { return; }
    T *row = logits + (size_t)n * Vl;
    int real = min(max(V - col0, 0), Vl), target = targets[n] - col0;
    for (int p = threadIdx.x; p < Vl / PN; p += blockDim.x) {
        store_packed(row + p * PN, softmax_xent_grad(load_packed_cs(row + p * PN), p * PN, real, target, lse, dloss));
    }
}

// One block: out[0] = sum of losses[0..n) (0 for n = 0), summed per thread in a fixed stride then across the block.
__global__ void __launch_bounds__(LOSS_SUM_THREADS) loss_sum_kernel(float *out, const float *losses, int n) {
    __shared__ float red[WARP_SIZE];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s += losses[i]; }
    s = block_sum(s, red);
    if (threadIdx.x == 0) { out[0] = s; }
}

// One block a row: out[r] = sum of losses[r T + t] over t in [spans[2r], spans[2r + 1]) (0 for an empty span), in a
// fixed order (deterministic). The evaluation's per-completion sums (llmc/eval.h): a span is a completion's tokens,
// tens of them, so a block of a few warps.
#define ROW_LOSS_THREADS 128
__global__ void __launch_bounds__(ROW_LOSS_THREADS) row_loss_sums_kernel(float *out, const float *losses,
                                                                         const int *spans, int T) {
    __shared__ float red[WARP_SIZE];
    const float *row = losses + (size_t)blockIdx.x * T;
    float s = 0.0f;
    for (int t = spans[2 * blockIdx.x] + threadIdx.x; t < spans[2 * blockIdx.x + 1]; t += blockDim.x) { s += row[t]; }
    s = block_sum(s, red);
    if (threadIdx.x == 0) { out[blockIdx.x] = s; }
}

// Whether a row of Vp logits of type T fits one block's shared memory (the one-kernel path): GPT-2's 50304 do in
// bf16 and fp32, Llama 3's 128256 only in neither (256 KB in bf16, past the 227 KB a block may take).
template <typename T> static bool classifier_row_fits(int Vp) {
    return (size_t)Vp * sizeof(T) <= g_cuda.props.sharedMemPerBlockOptin;
}

// losses[N] and, with write_grad, the gradient of dloss * sum of losses in place of the logits (N, Vp / TP). Under
// TP (tp active) this rank's logits are the columns of its vocabulary rows, and stats holds (TP, N, VOCAB_STATS)
// floats; a row too wide for shared memory (classifier_row_fits) takes the same two passes as one rank's whole row,
// with no exchange between them (stats: N x VOCAB_STATS floats), reading the row from memory twice.
template <typename T>
static void fused_classifier(T *logits, float *losses, const int *targets, float dloss, int N, int V, int Vp,
                             int write_grad, TensorParallel *tp, float *stats, cudaStream_t stream) {
    if (Vp % Packed<T>::N != 0) { fail("padded vocabulary %d is not a multiple of %d", Vp, Packed<T>::N); }
    if (tp_active(tp) || !classifier_row_fits<T>(Vp)) {
        int ranks = tp_active(tp) ? tp->size : 1, rank = tp_active(tp) ? tp->rank : 0;
        int Vl = Vp / ranks, col0 = rank * Vl;
        if (Vl % Packed<T>::N != 0) {
            fail("a tensor-parallel rank's %d vocabulary rows are not a multiple of %d", Vl, Packed<T>::N);
        }
        classifier_stats_kernel<<<N, CLASSIFIER_THREADS, 0, stream>>>(stats + (size_t)rank * N * VOCAB_STATS, logits,
                                                                       targets, col0, Vl, V);
        cudaCheckLaunch();
        if (ranks > 1) {
            const char *what = "the all-gather of the classifier's row statistics over the tensor-parallel ranks";
            tp_all_gather_joined(tp, stats, (size_t)N * VOCAB_STATS, stream, what);
        }
        classifier_finish_kernel<<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, stats, targets, dloss, col0, Vl,
                                                                        V, N, ranks, write_grad);
        cudaCheckLaunch();
    } else {
        int smem = Vp * (int)sizeof(T);
        cudaCheck(cudaFuncSetAttribute(fused_classifier_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        fused_classifier_kernel<<<N, CLASSIFIER_THREADS, smem, stream>>>(logits, losses, targets, dloss, V, Vp,
                                                                          write_grad);
        cudaCheckLaunch();
    }
}

#endif // LLMC_CLASSIFIER_CUH
