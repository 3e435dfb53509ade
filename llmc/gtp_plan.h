/*
 * gtp_plan.h: the arithmetic of GTP weight sharding (llmc/mesh.h's GTP group): which rows of which tensor each rank
 * keeps, the rank's flat buffer, the maps to and from the TP-local tensors, which ranks sum each gradient and which
 * one counts it in the norm, the prefetch chain that materializes each sharded weight just before a pass uses it,
 * and the counts behind the copy-engine gathers' flags (--gtp-transport ce). Plain C: the GPU build runs it, the CPU
 * tests check it.
 *
 * Shards. The block linear layers' weight matrices (qkv, attention projection, fc, fc projection; TP-local
 * (rows, cols) = (out, in) features of this TP rank) are split along their first dimension, output features, over
 * the G ranks of the GTP group: rank g keeps rows [g S, (g + 1) S) with S = ceil(rows / G). Where G does not divide
 * rows, the rows past the end are padding: zeros in the weights, their gradients and AdamW's moments, which stay
 * zero (AdamW moves an element by its gradient and by decay of its own value, both zero), so the all-gather of the
 * G shards is always G equal blocks and the materialized weight is its first rows x cols elements. The rows are the
 * TP-local ones whatever they hold (a Llama's grouped-query QKV parts, SwiGLU's gate and up: llmc/mesh.h). Every
 * other tensor (the norms, biases, wte, wpe, an untied lmhead) stays whole on every GTP rank, as in Megatron's GTP:
 * small, or read outside the blocks (wte by both the embedding and a tied LM head, so it would be gathered twice a
 * pass); a tensor the model lacks (a Llama's biases) has no rows on any rank.
 *
 * Layout. A GTP rank's flat buffer holds the tensors in config.h's order, each its TP-local one (llmc/tp_layout.h)
 * but for the sharded matrices, whose layer l is S x cols elements (its shard, padding included): layer-major as
 * before, so a layer's shard is one contiguous block and param_group() (llmc/dp_plan.h) sees the same structure.
 *
 * Chain. A pass (forward or backward) uses the sharded weights in a fixed order (gtp_chain_use); a pool of
 * depth + 1 buffers holds materialized weights, use i in buffer i % (depth + 1). A pass starts by gathering its first
 * depth + 1 weights; when use i is released (its last GEMM is queued: the GPU records an event there), the gather of
 * use i + depth + 1 is issued into the same buffer, behind that event. So up to depth gathers run ahead of the
 * weight in use, and a buffer is overwritten only after its last reader. Uses are released in order; the forward
 * interleaves two weights at a time (a half-block's two linear layers run chunk after chunk: llmc/forward_chunks.h),
 * so the depth must be at least 1 (gtp_chain_check says why the chain would stall otherwise).
 *
 * What a gather moves. A layer whose linear layers multiply in FP8 (llmc/fp8.h) gathers its weights' E4M3 codes, a
 * byte an element: each rank's update writes the codes of its shard with the weight's one scale, which the ranks
 * agree on (the history's under delayed scaling; under current scaling the shards' amaxes are maxed over the group
 * before the cast), so the gathered codes are the whole weight's. The backward's GEMM reads the weight transposed
 * (Hopper's FP8 GEMMs read K-major operands only), and a transposed row shard is not a contiguous block of the
 * transpose: the rank makes that copy from the gathered codes, in the same buffer after them. Other layers gather
 * their compute-precision copy. Padding rows are zeros in either form (a zero scales to the code of +0).
 */
#ifndef LLMC_GTP_PLAN_H
#define LLMC_GTP_PLAN_H

#include "fp8.h"
#include "tp_layout.h"

// Whether tensor t is sharded over the GTP group: the block linear layers' weight matrices.
static inline int gtp_sharded(int t) { return block_linear_of_weight(t) >= 0; }

// One layer of a tensor as GTP sees it: the TP-local (rows, cols), the rows a rank keeps, the gathered rows.
typedef struct {
    size_t rows, cols;
    size_t shard_rows;  // S = ceil(rows / G) for a sharded tensor; rows for a whole one
    size_t padded_rows; // G x S: the rows of the gathered buffer (rows for a whole tensor)
} GtpShape;

static inline GtpShape gtp_shape(const GPTConfig *c, const Mesh *m, int t) {
    GtpShape s;
    param_tp_shape(c, m, t, &s.rows, &s.cols);
    int G = gtp_sharded(t) ? m->gtp : 1;
    s.shard_rows = (s.rows + (size_t)G - 1) / (size_t)G;
    s.padded_rows = s.shard_rows * (size_t)G;
    return s;
}

// The real (not padding) TP-local rows that GTP rank g keeps of a tensor of this shape: [begin, begin + count).
static inline Span gtp_shard_real_rows(const GtpShape *s, int g) {
    size_t begin = (size_t)g * s->shard_rows, end = begin + s->shard_rows;
    end = end < s->rows ? end : s->rows;
    Span r = {begin, end > begin ? end - begin : 0};
    return r;
}

// Sizes and offsets of this rank's tensors in its flat buffer (gtp = 1: param_layout_local()).
static inline void param_layout_gtp(const GPTConfig *c, const Mesh *m, ParamLayout *local) {
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        GtpShape s = gtp_shape(c, m, t);
        local->size[t] = param_num_layers(c, t) * s.shard_rows * s.cols;
        local->offset[t] = off;
        off += local->size[t];
    }
    local->total = off;
}

#define GTP_PADDING ((size_t)-1)

// Element i of this rank's tensor t (counted from the tensor's offset) -> its element of the TP-local tensor t
// (param_layout_local()'s, counted the same way), in a form a GPU kernel can evaluate (the initialization draws
// each element at its global index): layer l's shard row r is TP-local row row0 + r, padding from `rows` on.
typedef struct {
    size_t shard_rows, rows, cols, row0;
} GtpMap;

static inline GtpMap gtp_map(const GPTConfig *c, const Mesh *m, int t) {
    GtpShape s = gtp_shape(c, m, t);
    GtpMap mp = {s.shard_rows, s.rows, s.cols, gtp_sharded(t) ? (size_t)m->gtp_rank * s.shard_rows : 0};
    return mp;
}

// The TP-local element of local element i, or GTP_PADDING.
HOST_DEVICE static inline size_t gtp_map_element(const GtpMap *mp, size_t i) {
    size_t per_layer = mp->shard_rows * mp->cols, l = i / per_layer, r = (i % per_layer) / mp->cols;
    size_t row = mp->row0 + r;
    if (row >= mp->rows) { return GTP_PADDING; }
    return (l * mp->rows + row) * mp->cols + i % mp->cols;
}

static inline size_t gtp_local_to_tp(const GPTConfig *c, const Mesh *m, int t, size_t i) {
    GtpMap mp = gtp_map(c, m, t);
    return gtp_map_element(&mp, i);
}

// Copies between this rank's flat buffer (gtp) and a buffer of its TP-local tensors (tp, param_layout_local()), one
// shard row at a time: tp -> gtp when to_gtp (padding rows set to zero), else gtp -> tp. Whole tensors are copied
// only when with_whole (a gather takes them from one rank: GTP keeps them identical on every rank).
static inline void param_copy_gtp(const GPTConfig *c, const Mesh *m, float *gtp, float *tp, int to_gtp,
                                  int with_whole) {
    ParamLayout pg, pt;
    param_layout_gtp(c, m, &pg);
    param_layout_local(c, m, &pt);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (!gtp_sharded(t) && !with_whole) { continue; }
        GtpShape s = gtp_shape(c, m, t);
        long long n = (long long)(param_num_layers(c, t) * s.shard_rows);
#pragma omp parallel for
        for (long long j = 0; j < n; j++) {
            float *g = gtp + pg.offset[t] + (size_t)j * s.cols;
            size_t e = gtp_local_to_tp(c, m, t, (size_t)j * s.cols);
            if (e == GTP_PADDING) {
                if (to_gtp) { memset(g, 0, s.cols * sizeof(float)); }
                continue;
            }
            float *x = tp + pt.offset[t] + e;
            memcpy(to_gtp ? g : x, to_gtp ? x : g, s.cols * sizeof(float));
        }
    }
}

// The TP-local buffer from the flat buffers of GTP ranks 0..G-1 of one TP rank (local[g] is rank g's; m is any rank
// of that TP rank's GTP group): what the TP gather then assembles into the whole model. Whole tensors from rank 0.
static inline void param_gather_gtp(const GPTConfig *c, const Mesh *m, const float *const *local, float *tp) {
    for (int g = 0; g < m->gtp; g++) {
        Mesh r = mesh_make(m->world, mesh_rank_of(m, m->dp_rank, g, m->tp_rank), m->tp, m->gtp);
        param_copy_gtp(c, &r, (float *)local[g], tp, 0, g == 0);
    }
}

// This rank's flat buffer cut from its TP-local tensors (--init-from, a resumed checkpoint).
static inline void param_slice_gtp(const GPTConfig *c, const Mesh *m, const float *tp, float *local) {
    param_copy_gtp(c, m, local, (float *)tp, 1, 1);
}

// ---------------------------------------------------------------------------------------------------------
// Gradient sums and the norm over the data group

/*
 * The data group (DP x GTP ranks, llmc/mesh.h) reads different tokens, so every gradient is summed over all of it
 * once. A shard's gradient was summed over its GTP group by the reduce-scatter that made it, which leaves its DP
 * replicas to sum (the DP group); a tensor GTP leaves whole is on every data rank, and is summed over the data group.
 * ZeRO-1 (llmc/dp_plan.h) slices a rank's flat buffer over its DP group, whose ranks share the GTP and TP rank and so
 * the layout: a slice is the same part of the same tensors on each. The shards' DP sum then lands on each part's owner
 * only; the whole tensors are still all-reduced over the data group (a DP sum on top would count the DP ranks twice)
 * and each owner reads its part of that. The ranks of a GTP group share the DP rank, so they own the same parts of
 * their whole tensors, update them from the same sums and keep them identical.
 */
static inline int gtp_grad_sums_over_data(const Mesh *m, int t) { return m->gtp > 1 && !gtp_sharded(t); }

// Whether this rank counts tensor t's gradient in the squared norm, which is summed over the TP and GTP groups (and
// under ZeRO-1 over DP, each rank counting its slice): TP keeps its replicated tensors, GTP its whole ones, identical
// on every rank of the group, so only the group's rank 0 counts them and every element of the model counts once.
static inline int norm_counts_tensor(const Mesh *m, int t) {
    if (m->tp_rank != 0 && param_tp_split(t) == TP_REPLICATED) { return 0; }
    return m->gtp_rank == 0 || gtp_sharded(t);
}

// ---------------------------------------------------------------------------------------------------------
// The prefetch chain

typedef enum { GTP_FORWARD, GTP_BACKWARD } GtpPass;

// The sharded weights a pass of an L-layer model uses, in the order it first uses each.
static inline int gtp_chain_uses(int L) { return L * BLOCK_LINEARS; }

// Use i of a pass: its layer and linear layer (config.h's LIN_*). The forward runs layers up, each qkv, attention
// projection, fc, fc projection; the backward runs layers down, each's input gradients from the fc projection down
// to qkv (weight gradients read no weight).
typedef struct {
    int layer, linear;
} GtpUse;

static inline GtpUse gtp_chain_use(int L, GtpPass pass, int i) {
    GtpUse u;
    int block = i / BLOCK_LINEARS, k = i % BLOCK_LINEARS;
    u.layer = pass == GTP_FORWARD ? block : L - 1 - block;
    u.linear = pass == GTP_FORWARD ? k : BLOCK_LINEARS - 1 - k;
    return u;
}

// The position of (layer, linear) in a pass's chain: gtp_chain_use's inverse.
static inline int gtp_chain_index(int L, GtpPass pass, int layer, int linear) {
    return pass == GTP_FORWARD ? layer * BLOCK_LINEARS + linear
                               : (L - 1 - layer) * BLOCK_LINEARS + (BLOCK_LINEARS - 1 - linear);
}

typedef struct {
    int uses;     // the pass's weights
    int slots;    // buffers in the pool: depth + 1
    int issued;   // gathers issued: uses [0, issued)
    int acquired; // uses [0, acquired) acquired (a use is acquired before its first GEMM)
    int released; // uses [0, released) released (after its last GEMM), in order
} GtpChain;

// A pass of `uses` weights with `depth` gathers ahead; returns how many gathers to issue now: uses 0 .. n-1.
static inline int gtp_chain_start(GtpChain *ch, int uses, int depth) {
    ch->uses = uses;
    ch->slots = depth + 1;
    ch->issued = uses < ch->slots ? uses : ch->slots;
    ch->acquired = 0;
    ch->released = 0;
    return ch->issued;
}

static inline int gtp_chain_slot(const GtpChain *ch, int i) { return i % ch->slots; }

/*
 * Whether use i may be acquired now: its gather was issued (else the pool is too small for the uses live at once:
 * the gather of i waits for the release of i - slots, which the caller has not reached), and it was not released.
 * Acquiring twice (a weight used by several chunks) is fine.
 */
static inline int gtp_chain_check(const GtpChain *ch, int i) { return i >= 0 && i < ch->issued && i >= ch->released; }

// Use i's buffer, for its GEMMs; fails where gtp_chain_check does.
static inline int gtp_chain_acquire(GtpChain *ch, int i) {
    if (!gtp_chain_check(ch, i)) {
        fail("GTP chain: weight %d of %d is used before its gather was issued (gathered up to %d, released up to %d): "
             "raise --gtp-prefetch", i, ch->uses, ch->issued, ch->released);
    }
    if (i >= ch->acquired) { ch->acquired = i + 1; }
    return gtp_chain_slot(ch, i);
}

// Use i's last GEMM is queued: its buffer may be overwritten after that. Returns the use whose gather goes into the
// buffer now (behind the release), or -1 when the pass has none left.
static inline int gtp_chain_release(GtpChain *ch, int i) {
    if (i != ch->released || i >= ch->acquired) {
        fail("GTP chain: weight %d released out of order (next to release: %d, acquired up to %d)", i, ch->released,
             ch->acquired);
    }
    ch->released++;
    if (ch->issued == ch->uses) { return -1; }
    return ch->issued++;
}

// ---------------------------------------------------------------------------------------------------------
// Bytes

// Whether layer l gathers its weights as FP8 codes: it multiplies in FP8 (fp8: the recipe; NULL in other precisions).
static inline int gtp_gathers_fp8(const GPTConfig *c, const Fp8Recipe *fp8, int l) {
    return fp8 && fp8_block(fp8, l, c->num_layers);
}

// The bytes of one shard of layer l's weight of shape s, as a gather moves it: E4M3 codes, a byte an element, in a
// layer that gathers FP8, else elem_bytes (the compute precision's) an element.
static inline size_t gtp_shard_bytes(const GPTConfig *c, const Fp8Recipe *fp8, int l, const GtpShape *s,
                                     size_t elem_bytes) {
    return s->shard_rows * s->cols * (gtp_gathers_fp8(c, fp8, l) ? sizeof(uint8_t) : elem_bytes);
}

// Alignment of what a pool buffer holds: cudaMalloc's, so a GEMM reads the transposed copy at the same pointer
// alignment as a weight of its own allocation (cuBLASLt chooses its algorithm by the operands' alignment).
#define GTP_BUFFER_ALIGN 256

// Where an FP8 weight's transposed copy (rows x cols codes transposed) begins in its buffer: after the gathered codes.
static inline size_t gtp_transposed_at(const GtpShape *s) {
    size_t codes = s->padded_rows * s->cols;
    return (codes + GTP_BUFFER_ALIGN - 1) / GTP_BUFFER_ALIGN * GTP_BUFFER_ALIGN;
}

// The bytes of a pool buffer: the largest weight a pass gathers, with an FP8 weight's transposed copy after its codes.
static inline size_t gtp_buffer_bytes(const GPTConfig *c, const Mesh *m, const Fp8Recipe *fp8, size_t elem_bytes) {
    size_t most = 0;
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < BLOCK_LINEARS; k++) {
            GtpShape s = gtp_shape(c, m, BLOCK_LINEAR_WEIGHT[k]);
            size_t b = gtp_gathers_fp8(c, fp8, l) ? gtp_transposed_at(&s) + s.rows * s.cols
                                                  : s.padded_rows * s.cols * elem_bytes;
            most = b > most ? b : most;
        }
    }
    return most;
}

// Bytes a rank receives in one pass's gathers: (G - 1) shards of every sharded weight (gtp_shard_bytes).
static inline size_t gtp_pass_gather_bytes(const GPTConfig *c, const Mesh *m, const Fp8Recipe *fp8,
                                           size_t elem_bytes) {
    size_t bytes = 0;
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < BLOCK_LINEARS; k++) {
            GtpShape s = gtp_shape(c, m, BLOCK_LINEAR_WEIGHT[k]);
            bytes += (size_t)(m->gtp - 1) * gtp_shard_bytes(c, fp8, l, &s, elem_bytes);
        }
    }
    return bytes;
}

// Whether this rank's GTP group starts on an earlier node than this rank. Launchers number a node's ranks
// consecutively (local rank = rank - the node's first rank), and the group's first rank is gtp_rank x TP ranks
// before this one, so a smaller local rank means the group's first ranks run on another node. A group that spans
// nodes always has such a rank: the first one on the later node (local rank 0).
static inline int gtp_group_spans_nodes(const Mesh *m, int local_rank) {
    return m->gtp > 1 && local_rank < m->gtp_rank * m->tp;
}

// ---------------------------------------------------------------------------------------------------------
// The copy-engine gathers' flags (--gtp-transport ce; llmc/gtp.cuh has the protocol and why no cycle forms)

/*
 * Each rank holds 2 x G x L 32-bit flags: ready[p][l], the count of owner p's publications of its layer-l shards
 * (written by p behind each write of them), and read[p][l], the count of rank p's gathers of layer l whose pulls
 * are done (written by reader p after each). A rank counts alike (GtpFlagCounts): version[l], its own
 * publications of layer l, and issued[l], its own gathers of layer l, which equal every peer's at the same point of
 * the program. A pull of layer l waits for ready[p][l] >= version[l] and then writes read[me][l] = issued[l] (this
 * gather's); a write of this rank's layer-l shards waits for read[p][l] >= issued[l] of every p. Flags compare
 * modulo 2^32 (gtp_flag_reached), as cuStreamWaitValue32's GEQ does.
 */
enum { GTP_READY = 0, GTP_READ = 1 }; // the two kinds of flag

static inline size_t gtp_flag_count(int ranks, int layers) { return 2 * (size_t)ranks * (size_t)layers; }

// Where rank p's flag of `kind` for layer l lies in a rank's flags.
static inline size_t gtp_flag_index(int ranks, int layers, int kind, int p, int l) {
    return ((size_t)kind * (size_t)ranks + (size_t)p) * (size_t)layers + (size_t)l;
}

// Whether a flag holding `flag` has reached `want`, modulo 2^32.
static inline int gtp_flag_reached(uint32_t flag, uint32_t want) { return (int32_t)(flag - want) >= 0; }

typedef struct {
    uint32_t *version; // layers: publications of each layer's shards so far
    uint32_t *issued;  // layers: gathers of each layer issued so far
} GtpFlagCounts;

// A gather of layer l: the ready count it waits for from every owner, and the read count it writes after its pulls.
typedef struct {
    uint32_t ready, read;
} GtpPull;

static inline GtpPull gtp_flags_pull(GtpFlagCounts *f, int l) {
    GtpPull p = {f->version[l], ++f->issued[l]};
    return p;
}

// A write of this rank's layer-l shards: the read count every rank's flag must reach before it.
static inline uint32_t gtp_flags_before_write(const GtpFlagCounts *f, int l) { return f->issued[l]; }

// The write is published: the ready count written behind it.
static inline uint32_t gtp_flags_published(GtpFlagCounts *f, int l) { return ++f->version[l]; }

#endif // LLMC_GTP_PLAN_H
