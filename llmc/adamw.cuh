/*
 * adamw.cuh: the global gradient norm, clipping and AdamW, exactly as dev/DESIGN.md ("Semantics") defines them.
 *
 *   norm = sqrt(sum of g^2 over every gradient);  clip = grad_clip / norm if 0 < grad_clip < norm, else 1
 *   g' = clip g;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
 * The norm is a reduction in fixed pieces (a partial sum per fixed chunk, taken by a pass of its own or, where the
 * update needs no norm first, by AdamW as it reads the gradient; then the chunks in order, in double), so it is
 * deterministic; it stays on the GPU, where AdamW reads the clip factor, and the host copies it only to log it.
 * Master weights, gradients and moments are fp32; in bf16 mode AdamW also writes the bf16 copy the GEMMs read, and
 * in fp8 under delayed scaling the FP8 codes of the weights whose GEMMs run in FP8 (AdamWFp8).
 */
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "cuda_common.cuh"
#include "fp8.cuh"

#define ADAMW_THREADS 256

/*
 * Both the norm's sums of squares and AdamW work on a group of spans (a layer's tensors) in one launch, each span cut
 * into fixed chunks: span k's chunks are [chunk_end[k-1], chunk_end[k]).
 */
static inline int span_chunks(size_t n, size_t chunk) { return (int)((n + chunk - 1) / chunk); }
static inline void chunk_end_append(int *chunk_end, int k, size_t n, size_t chunk) {
    chunk_end[k] = (k ? chunk_end[k - 1] : 0) + span_chunks(n, chunk);
}

// Which span chunk c of a group with chunk_end (NormGroup, AdamWGroup) lies in, and which of its chunks it is.
template <typename G> __device__ __forceinline__ int2 span_chunk(const G &g, int c) {
    int k = 0;
    while (c >= g.chunk_end[k]) { k++; }
    return make_int2(k, c - (k ? g.chunk_end[k - 1] : 0));
}

/*
 * The norm in pieces. Gradients come in groups (a layer's tensors, then the rest), each of up to NORM_SLICES_MAX
 * slices of the gradient buffer. A group's sums of squares can be taken as soon as its gradients are final (during
 * backward, beside the next layer's GEMMs), into its own range of partial sums: one per chunk of NORM_CHUNK floats
 * of each slice, a fixed partition, so the partial sums do not depend on when they ran. grad_sum_partials then adds
 * all groups' partial sums in order, in double.
 * The chunk is AdamW's (ADAMW_CHUNK: one float4 a thread of a block of ADAMW_THREADS), and a chunk's partial sum is
 * the same arithmetic in sum_squares_kernel and adamw_kernel: each thread's sum_squares4 of its float4, then
 * block_sum's tree over the block. So AdamW, which reads every gradient anyway, can write the partial sums itself
 * when it needs no norm first (no clipping), bit for bit those of the pass it saves. sum_squares_kernel takes
 * NORM_CHUNKS_PER_BLOCK chunks a block (a thread's loads in flight) and reduces them as block_sum would each one.
 */
#define ADAMW_CHUNK (ADAMW_THREADS * 4)
#define NORM_CHUNK ADAMW_CHUNK
#define NORM_CHUNKS_PER_BLOCK 16
#define NORM_SLICES_MAX 12     // a layer's gradient tensors
#define NORM_FINISH_THREADS 1024
#define NORM_FOLD (NORM_FINISH_THREADS * 4) // partial sums one block of the finish adds (grad_sum_partials)

typedef struct {
    const float *p[NORM_SLICES_MAX];
    size_t n[NORM_SLICES_MAX];
    int chunk_end[NORM_SLICES_MAX]; // chunk_end_append
    int count;
} NormGroup;

// Appends a slice of n floats (n % 4 == 0, p 16-byte aligned) to the group.
static void norm_group_add(NormGroup *g, const float *p, size_t n) {
    if (g->count == NORM_SLICES_MAX) { fail("a gradient-norm group holds at most %d slices", NORM_SLICES_MAX); }
    if (n % 4 != 0) { fail("gradient slice of %zu floats is not a multiple of 4", n); }
    int k = g->count++;
    g->p[k] = p;
    g->n[k] = n;
    chunk_end_append(g->chunk_end, k, n, NORM_CHUNK);
}

static inline int norm_group_chunks(const NormGroup *g) { return g->count ? g->chunk_end[g->count - 1] : 0; }

// x.x^2 + x.y^2 + x.z^2 + x.w^2 as one fixed sequence of rounded operations (no contraction left to the compiler,
// which could choose differently in two kernels), so that every kernel that sums squares gets the same bits.
__device__ __forceinline__ float sum_squares4(float4 x) {
    return __fmaf_rn(x.w, x.w, __fmaf_rn(x.z, x.z, __fmaf_rn(x.y, x.y, __fmul_rn(x.x, x.x))));
}

// partial[c] = the sum of squares of chunk c of the group, NORM_CHUNKS_PER_BLOCK chunks a block of ADAMW_THREADS:
// thread t holds float4 t of each, and each chunk's sums are added as block_sum adds them (a warp's butterfly, then
// the warps' sums, zero-padded to a warp, by the same butterfly).
__global__ void __launch_bounds__(ADAMW_THREADS) sum_squares_kernel(float *partial, NormGroup g) {
    __shared__ float red[NORM_CHUNKS_PER_BLOCK][WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = ADAMW_THREADS / WARP_SIZE;
    const int first = blockIdx.x * NORM_CHUNKS_PER_BLOCK, chunks = g.chunk_end[g.count - 1];
    float sq[NORM_CHUNKS_PER_BLOCK];
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS_PER_BLOCK; j++) {
        sq[j] = 0.0f;
        if (first + j < chunks) {
            int2 sc = span_chunk(g, first + j);
            size_t i = (size_t)sc.y * ADAMW_THREADS + threadIdx.x;
            if (i < g.n[sc.x] / 4) { sq[j] = sum_squares4(reinterpret_cast<const float4 *>(g.p[sc.x])[i]); }
        }
    }
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS_PER_BLOCK; j++) {
        float x = warp_sum(sq[j]);
        if (lane == 0) { red[j][warp] = x; }
    }
    __syncthreads();
    for (int j = warp; j < NORM_CHUNKS_PER_BLOCK; j += nwarps) {
        float x = warp_sum(lane < nwarps ? red[j][lane] : 0.0f);
        if (lane == 0 && first + j < chunks) { partial[first + j] = x; }
    }
}

// partial[0 .. norm_group_chunks(g)) for the group.
// A group can be empty: a ZeRO-1 rank that owns none of it.
static void grad_norm_partials(float *partial, const NormGroup *g, cudaStream_t stream) {
    int chunks = norm_group_chunks(g);
    if (chunks == 0) { return; }
    int blocks = (chunks + NORM_CHUNKS_PER_BLOCK - 1) / NORM_CHUNKS_PER_BLOCK;
    sum_squares_kernel<<<blocks, ADAMW_THREADS, 0, stream>>>(partial, *g);
    cudaCheckLaunch();
}

// The sum of parts values (float partial sums, or double folds of them), on thread 0 (the others get 0): each thread
// adds a fixed stride of them in double, then a fixed tree over the block.
template <typename T> __device__ __forceinline__ double partials_sum(const T *partial, int parts) {
    __shared__ double red[WARP_SIZE];
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    double s = 0.0;
    for (int p = threadIdx.x; p < parts; p += blockDim.x) { s += partial[p]; }
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) { s += __shfl_xor_sync(0xffffffffu, s, o); }
    if (lane == 0) { red[warp] = s; }
    __syncthreads();
    if (threadIdx.x != 0) { return 0.0; }
    s = 0.0;
    for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); w++) { s += red[w]; }
    return s;
}

// One block per NORM_FOLD partial sums: fold[b] = their sum.
__global__ void __launch_bounds__(NORM_FINISH_THREADS)
    fold_partials_kernel(double *fold, const float *partial, int parts) {
    int first = blockIdx.x * NORM_FOLD;
    double s = partials_sum(partial + first, min(NORM_FOLD, parts - first));
    if (threadIdx.x == 0) { fold[blockIdx.x] = s; }
}

// One block: the sum of the folds.
__global__ void __launch_bounds__(NORM_FINISH_THREADS) sum_folds_kernel(double *sum_squares, const double *fold,
                                                                       int folds) {
    double s = partials_sum(fold, folds);
    if (threadIdx.x == 0) { *sum_squares = s; }
}

// The doubles of scratch grad_sum_partials needs for parts partial sums (one fold of none for an empty part).
static inline int norm_folds(int parts) { return parts == 0 ? 1 : (parts + NORM_FOLD - 1) / NORM_FOLD; }

// *sum_squares = the sum of partial[0 .. parts) in double, in a fixed order (folds of NORM_FOLD in parallel, then
// those): the squared norm of the gradients the partial sums cover. fold: norm_folds(parts) doubles of scratch.
static void grad_sum_partials(double *sum_squares, const float *partial, int parts, double *fold,
                              cudaStream_t stream) {
    int folds = norm_folds(parts);
    fold_partials_kernel<<<folds, NORM_FINISH_THREADS, 0, stream>>>(fold, partial, parts);
    cudaCheckLaunch();
    sum_folds_kernel<<<1, NORM_FINISH_THREADS, 0, stream>>>(sum_squares, fold, folds);
    cudaCheckLaunch();
}

// norm_clip[0] = norm, norm_clip[1] = the clip factor AdamW multiplies the gradient by.
__global__ void grad_norm_from_sum_kernel(float *norm_clip, const double *sum_squares, float grad_clip) {
    float norm = (float)sqrt(*sum_squares);
    norm_clip[0] = norm;
    norm_clip[1] = (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
}

// The norm and clip factor from the squared norm (grad_sum_partials'; a rank that holds a part of the gradients, as
// under ZeRO-1, sums its part over the ranks in between).
static void grad_norm_from_sum(float *norm_clip, const double *sum_squares, float grad_clip, cudaStream_t stream) {
    grad_norm_from_sum_kernel<<<1, 1, 0, stream>>>(norm_clip, sum_squares, grad_clip);
    cudaCheckLaunch();
}

typedef struct {
    float lr, beta1, beta2, bias_corr1, bias_corr2, eps; // weight decay is per tensor (AdamWGroup)
} AdamWStep;

/*
 * AdamW of one parameter group (a layer's tensors, or the rest) in one launch: a layer has a dozen tensors, half of
 * them vectors of a few thousand floats, and a launch each cost more than their update. The group's spans are cut
 * into chunks of ADAMW_CHUNK parameters (4 consecutive ones per thread), one block each: short blocks, which the
 * backward's GEMMs, on streams of higher priority, never wait long behind. Where the update needs no norm first
 * (no clipping), a block can also write its chunk's partial sum of squares of the gradient, the norm's
 * (sum_squares_kernel's bits: see "The norm in pieces").
 */
typedef struct {
    size_t begin[NORM_SLICES_MAX];   // the span's first parameter (in p, g and copy)
    size_t moments[NORM_SLICES_MAX]; // and its first moment (in m and v: the owned slice under ZeRO-1)
    size_t n[NORM_SLICES_MAX];
    float weight_decay[NORM_SLICES_MAX];
    int copy[NORM_SLICES_MAX];       // write the span's compute-precision copy (not an FP8 weight: its copy is cast)
    uint8_t *fp8[NORM_SLICES_MAX];   // an FP8 weight under delayed scaling: its E4M3 codes (adamw_group_fp8), or NULL
    int fp8_tensor[NORM_SLICES_MAX]; // and its tensor (fp8_tensor)
    int norm_part[NORM_SLICES_MAX];  // where the span's first chunk's partial sum of squares goes in the norm's
                                     // partial sums (its other chunks' follow), or -1: the norm does not count it
                                     // (adamw_group_norm)
    int chunk_end[NORM_SLICES_MAX];  // chunk_end_append
    int count;
} AdamWGroup;

/*
 * The FP8 side of an update under delayed scaling (llmc/fp8.cuh), where it runs after the history took the step's
 * amaxes (the caller decides: train_gpt.cu's fp8_codes_by_adamw): a weight's scale is then known before the update, so
 * AdamW writes the E4M3 codes of the updated weights as it goes (the bytes fp8_cast would write from the masters: the
 * same product and conversion), records their amax, and sets the tensor's scale; the transposed copy is made later
 * (fp8_transpose), where the backward needs it.
 */
typedef struct {
    const float *amax_scale;
    unsigned *amax_step;
    float *scale, *scale_inv;
    float margin_scale;
} AdamWFp8;

static AdamWFp8 adamw_fp8_of(const Fp8Device *d) {
    AdamWFp8 f = {d->amax_scale, d->amax_step, d->scale, d->scale_inv, d->recipe.margin_scale};
    return f;
}

// Appends a span of n parameters (n % 4 == 0) whose moments start at `moments`.
static void adamw_group_add(AdamWGroup *g, size_t begin, size_t moments, size_t n, float weight_decay, int copy) {
    if (g->count == NORM_SLICES_MAX) { fail("an AdamW group holds at most %d spans", NORM_SLICES_MAX); }
    if (n % 4 != 0) { fail("parameter tensor of %zu floats is not a multiple of 4", n); }
    int k = g->count++;
    g->begin[k] = begin;
    g->moments[k] = moments;
    g->n[k] = n;
    g->weight_decay[k] = weight_decay;
    g->copy[k] = copy;
    g->norm_part[k] = -1;
    chunk_end_append(g->chunk_end, k, n, ADAMW_CHUNK);
}

static inline int adamw_group_chunks(const AdamWGroup *g) { return g->count ? g->chunk_end[g->count - 1] : 0; }

// The chunks of a span of n parameters (adamw_group_add's).
static inline int adamw_span_chunks(size_t n) { return span_chunks(n, ADAMW_CHUNK); }

// The last span added writes the E4M3 codes of tensor t (fp8_tensor) to codes (its first element's byte; 4-aligned).
static void adamw_group_fp8(AdamWGroup *g, uint8_t *codes, int t) {
    g->fp8[g->count - 1] = codes;
    g->fp8_tensor[g->count - 1] = t;
}

// The last span added writes the partial sums of squares of its gradient from index `part` of the norm's partial
// sums on (adamw_update's norm_partials), where grad_norm_partials would write them.
static void adamw_group_norm(AdamWGroup *g, int part) { g->norm_part[g->count - 1] = part; }

/*
 * A group's AdamW in two launches (AdamWPart), for a group some of whose gradients are final before the others: the
 * rest group, whose embedding rows only the micro-batch's tokens touch in the embedding's backward, the last kernel of
 * the backward, while the rest of it (the LM head's weight, every other row of a tied wte, the final norm) is final
 * once the head's backward is done. AdamWLate flags, per chunk of the group, the chunks the late launch takes: the
 * early launch (grid: all of the group's chunks) skips those, the late one's grid is their list. A chunk is one block
 * either way, the same arithmetic, so the same bits as one launch, the norm's partial sum of each chunk included.
 */
typedef struct {
    uint8_t *flag;   // (device) per chunk of the group: 1 = the late launch's
    int *list;       // (device) the late launch's chunks, ascending: `count` of them
    int *staging;    // (pinned host) the list as the host builds it (adamw_late_rows, adamw_late_span)
    int count, chunks; // chunks: the group's (what the list can hold)
} AdamWLate;

typedef struct {
    const uint8_t *skip; // the early launch: chunks it leaves to the late one
    const int *list;     // the late launch: the chunks it takes (its grid), `count` of them
    int count;
} AdamWPart;

static const AdamWPart ADAMW_WHOLE = {NULL, NULL, 0};

static AdamWPart adamw_early_part(const AdamWLate *l) { return AdamWPart{l->flag, NULL, 0}; }
static AdamWPart adamw_late_part(const AdamWLate *l) { return AdamWPart{NULL, l->list, l->count}; }

static void adamw_late_push(AdamWLate *l, int chunk) {
    if (l->count > 0 && l->staging[l->count - 1] >= chunk) { return; } // a chunk two rows meet, listed once
    if (l->count == l->chunks) { fail("internal error: more than the group's %d chunks are late", l->chunks); }
    l->staging[l->count++] = chunk;
}

// Appends the chunks that rows[0 .. n) (ascending) of a span of rows of `width` parameters meet, the span's first
// chunk being `first` of the group.
static void adamw_late_rows(AdamWLate *l, int first, const int *rows, int n, size_t width) {
    for (int i = 0; i < n; i++) {
        size_t begin = (size_t)rows[i] * width, end = begin + width;
        for (size_t c = begin / ADAMW_CHUNK; c * ADAMW_CHUNK < end; c++) { adamw_late_push(l, first + (int)c); }
    }
}

// Appends a whole span: chunks [first, end) of the group.
static void adamw_late_span(AdamWLate *l, int first, int end) {
    for (int c = first; c < end; c++) { adamw_late_push(l, c); }
}

__global__ void adamw_late_flag_kernel(uint8_t *flag, const int *list, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) { flag[list[i]] = 1; }
}

// Copies the list the host built (whose staging the caller keeps until the copy has run) and flags its chunks.
static void adamw_late_upload(AdamWLate *l, cudaStream_t stream) {
    cudaCheck(cudaMemcpyAsync(l->list, l->staging, l->count * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemsetAsync(l->flag, 0, l->chunks, stream));
    if (l->count == 0) { return; }
    adamw_late_flag_kernel<<<grid_for(l->count, ADAMW_THREADS), ADAMW_THREADS, 0, stream>>>(l->flag, l->list,
                                                                                           l->count);
    cudaCheckLaunch();
}

// copy (the compute-precision weights) is NULL when the GEMMs read the master weights themselves (fp32 mode); a span
// without its copy flag leaves it alone. clip_factor: the clip factor on the device (grad_norm_from_sum's), or NULL
// for an update that does not clip (a factor of 1, the same bits, known before the norm). norm_partials: the norm's
// partial sums, which the spans with a norm_part write, or NULL. part: which of the group's chunks this launch takes.
template <typename T>
__global__ void __launch_bounds__(ADAMW_THREADS) adamw_kernel(float *p, T *copy, const float *g, float *m, float *v,
                                                              AdamWGroup grp, AdamWStep a, const float *clip_factor,
                                                              AdamWFp8 f8, float *norm_partials, AdamWPart part) {
    __shared__ unsigned s_max[WARP_SIZE];
    __shared__ float s_sum[WARP_SIZE];
    const int chunk = part.list ? part.list[blockIdx.x] : blockIdx.x;
    if (part.skip && part.skip[chunk]) { return; } // the whole block: before any barrier
    const float clip = clip_factor ? *clip_factor : 1.0f;
    const int2 sc = span_chunk(grp, chunk);
    const int k = sc.x;
    size_t j = (size_t)sc.y * ADAMW_CHUNK + threadIdx.x * 4;
    unsigned amax = 0;
    float squares = 0.0f;
    if (j < grp.n[k]) {
        size_t i = grp.begin[k] + j, mi = grp.moments[k] + j;
        float4 p4 = *reinterpret_cast<float4 *>(p + i), g4 = *reinterpret_cast<const float4 *>(g + i);
        float4 m4 = *reinterpret_cast<float4 *>(m + mi), v4 = *reinterpret_cast<float4 *>(v + mi);
        squares = sum_squares4(g4);
        float *pp = &p4.x, *gg = &g4.x, *mm = &m4.x, *vv = &v4.x;
        for (int e = 0; e < 4; e++) {
            float gi = gg[e] * clip;
            mm[e] = a.beta1 * mm[e] + (1.0f - a.beta1) * gi;
            vv[e] = a.beta2 * vv[e] + (1.0f - a.beta2) * gi * gi;
            float mhat = mm[e] / a.bias_corr1, vhat = vv[e] / a.bias_corr2;
            pp[e] -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + grp.weight_decay[k] * pp[e]);
            if (copy && grp.copy[k]) { copy[i + e] = from_float<T>(pp[e]); }
        }
        *reinterpret_cast<float4 *>(p + i) = p4;
        *reinterpret_cast<float4 *>(m + mi) = m4;
        *reinterpret_cast<float4 *>(v + mi) = v4;
        if (grp.fp8[k]) {
            int t = grp.fp8_tensor[k];
            float scale = fp8_scale_of(f8.amax_scale[t], FP8_E4M3, f8.margin_scale);
            unsigned lo = fp8_pair(pp[0] * scale, pp[1] * scale, FP8_E4M3);
            unsigned hi = fp8_pair(pp[2] * scale, pp[3] * scale, FP8_E4M3);
            *reinterpret_cast<unsigned *>(grp.fp8[k] + j) = lo | hi << 16;
            amax = max(max(abs_bits(pp[0]), abs_bits(pp[1])), max(abs_bits(pp[2]), abs_bits(pp[3])));
            if (j == 0) {
                f8.scale[(size_t)t * FP8_SCALE_STRIDE] = scale;
                f8.scale_inv[(size_t)t * FP8_SCALE_STRIDE] = 1.0f / scale;
            }
        }
    }
    if (grp.fp8[k]) { // a block works in one span only
        amax = block_max_bits(amax, s_max);
        if (threadIdx.x == 0) { atomicMax(f8.amax_step + grp.fp8_tensor[k], amax); }
    }
    if (norm_partials && grp.norm_part[k] >= 0) {
        squares = block_sum(squares, s_sum);
        if (threadIdx.x == 0) { norm_partials[grp.norm_part[k] + sc.y] = squares; }
    }
}

// An empty group (a ZeRO-1 rank that owns none of it) launches nothing. f8: where the spans with FP8 codes
// (adamw_group_fp8) get their scales. norm_partials: where the spans with a norm part (adamw_group_norm) write their
// partial sums of squares, or NULL (none written). part: ADAMW_WHOLE, or one of the two launches of an AdamWLate.
template <typename T>
static void adamw_update(float *p, T *copy, const float *g, float *m, float *v, const AdamWGroup *grp,
                         AdamWStep a, const float *clip_factor, AdamWFp8 f8, float *norm_partials,
                         cudaStream_t stream, AdamWPart part = ADAMW_WHOLE) {
    int blocks = part.list ? part.count : adamw_group_chunks(grp);
    if (blocks == 0) { return; }
    adamw_kernel<<<blocks, ADAMW_THREADS, 0, stream>>>(p, copy, g, m, v, *grp, a, clip_factor, f8, norm_partials,
                                                       part);
    cudaCheckLaunch();
}

#endif // LLMC_ADAMW_CUH
