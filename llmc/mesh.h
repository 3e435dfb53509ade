/*
 * mesh.h: the process mesh (world = DP x GTP x TP) and the arithmetic of which rank holds what.
 *
 * Ranks are laid out TP innermost, then GTP, then DP, so a TP group's ranks are neighbours (fastest links):
 *   rank = (dp * GTP + gtp) * TP + tp
 * Each group is a ncclCommSplit of the world communicator by (color = which group, key = rank inside it):
 *   TP  group: same (dp, gtp), tp varies    color = dp * GTP + gtp   key = tp
 *   GTP group: same (dp, tp),  gtp varies   color = dp * TP + tp     key = gtp
 *   DP  group: same (gtp, tp), dp varies    color = gtp * TP + tp    key = dp
 *   data group: same tp, dp and gtp vary    color = tp               key = dp * GTP + gtp (the data rank)
 * The data loader sees DP x GTP data-parallel ranks, data rank = dp * GTP + gtp (the TP color): the ranks of
 * a TP group read the same tokens, any two ranks of different TP groups read different ones. Whatever sums over
 * the tokens of a global batch (the loss, validation, the gradients of the tensors GTP leaves whole) sums over the
 * data group; the DP group only replicates GTP's shards.
 *
 * Sharding, per layer (a linear weight is (out, in) row-major and computes y = x W^T + b), for GPT-2 (mesh_validate
 * refuses TP and GTP for other architectures):
 *   column-parallel (fc; wte / LM head over the padded vocabulary): rank tp holds rows
 *     [tp * out/TP, (tp+1) * out/TP) of W and the same entries of b.
 *   QKV: the fused (3C, C) weight is [Q; K; V], C rows each, head h owning rows [h*hs, (h+1)*hs) of each part.
 *     Rank tp holds heads [h0, h0 + nh) (balanced_split: NH/TP each, the first NH % TP ranks one more, since
 *     GPT-2 1558M's 25 heads do not divide by 2); its (3 nh hs, C) weight is [Q_l; K_l; V_l]:
 *       local row part * nh hs + j  <->  global row part * C + h0 hs + j   (part 0,1,2 = q,k,v; j < nh hs)
 *     so the local tensor is itself a fused QKV of nh heads and the attention kernel runs unchanged.
 *   row-parallel (fc2): rank tp holds columns [tp * in/TP, (tp+1) * in/TP); attn proj: the columns of its heads,
 *     [h0 hs, (h0 + nh) hs). The bias is replicated (added once, after the all-reduce).
 *   replicated: wpe, the LayerNorms, the row-parallel biases.
 * GTP then splits the block linear layers' TP-local weight matrices along their first dimension, padded where it
 * does not divide (llmc/gtp_plan.h).
 * mesh_validate() checks that every TP split is exact before any work starts.
 */
#ifndef LLMC_MESH_H
#define LLMC_MESH_H

#include "config.h"
#include "options.h"

typedef struct {
    int world, rank, tp, gtp, dp;
    int tp_rank, gtp_rank, dp_rank;
    int data_rank, data_size; // the data loader's view: DP x GTP ranks
} Mesh;

// Coordinates of rank in a world of tp x gtp x (world / (tp x gtp)); mesh_validate() checks that it divides.
static inline Mesh mesh_make(int world, int rank, int tp, int gtp) {
    Mesh m;
    m.world = world;
    m.rank = rank;
    m.tp = tp;
    m.gtp = gtp;
    m.dp = world / (tp * gtp);
    m.tp_rank = rank % tp;
    m.gtp_rank = (rank / tp) % gtp;
    m.dp_rank = rank / (tp * gtp);
    m.data_rank = m.dp_rank * gtp + m.gtp_rank;
    m.data_size = m.dp * gtp;
    return m;
}

static inline int mesh_rank_of(const Mesh *m, int dp_rank, int gtp_rank, int tp_rank) {
    return (dp_rank * m->gtp + gtp_rank) * m->tp + tp_rank;
}

// ---------------------------------------------------------------------------------------------------------
// Communicator groups: arguments of ncclCommSplit(world, color, key, ...).

typedef enum { GROUP_TP, GROUP_GTP, GROUP_DP, GROUP_DATA, NUM_GROUPS } MeshGroup;

static const char *const GROUP_NAMES[NUM_GROUPS] = {"tp", "gtp", "dp", "data"};

static inline int mesh_group_color(const Mesh *m, MeshGroup g) {
    switch (g) {
    case GROUP_TP: return m->dp_rank * m->gtp + m->gtp_rank;
    case GROUP_GTP: return m->dp_rank * m->tp + m->tp_rank;
    case GROUP_DP: return m->gtp_rank * m->tp + m->tp_rank;
    case GROUP_DATA: default: return m->tp_rank;
    }
}

static inline int mesh_group_key(const Mesh *m, MeshGroup g) {
    switch (g) {
    case GROUP_TP: return m->tp_rank;
    case GROUP_GTP: return m->gtp_rank;
    case GROUP_DP: return m->dp_rank;
    case GROUP_DATA: default: return m->data_rank;
    }
}

static inline int mesh_group_size(const Mesh *m, MeshGroup g) {
    switch (g) {
    case GROUP_TP: return m->tp;
    case GROUP_GTP: return m->gtp;
    case GROUP_DP: return m->dp;
    case GROUP_DATA: default: return m->data_size;
    }
}

// ---------------------------------------------------------------------------------------------------------
// Sharding arithmetic.

typedef struct {
    size_t begin, count; // [begin, begin + count)
} Span;

// Part index of n items split evenly into parts (n divisible by parts, as mesh_validate() ensures).
static inline Span even_split(size_t n, int parts, int index) {
    Span s;
    s.count = n / (size_t)parts;
    s.begin = (size_t)index * s.count;
    return s;
}

// Part index of n items split over parts as evenly as they go: the first n % parts parts get one more.
static inline Span balanced_split(size_t n, int parts, int index) {
    size_t base = n / (size_t)parts, extra = n % (size_t)parts, i = (size_t)index;
    Span s;
    s.count = base + (i < extra);
    s.begin = i * base + (i < extra ? i : extra);
    return s;
}

static inline Span tp_column_parallel_rows(const Mesh *m, size_t out) { return even_split(out, m->tp, m->tp_rank); }
static inline Span tp_row_parallel_cols(const Mesh *m, size_t in) { return even_split(in, m->tp, m->tp_rank); }
static inline Span tp_heads(const Mesh *m, const GPTConfig *c) {
    return balanced_split((size_t)c->num_heads, m->tp, m->tp_rank);
}

// Channels of this rank's heads: its part of q, k, v and of the attention output (attn proj's input columns).
static inline Span tp_attention_channels(const Mesh *m, const GPTConfig *c) {
    Span h = tp_heads(m, c);
    size_t hs = (size_t)(c->channels / c->num_heads);
    Span s = {h.begin * hs, h.count * hs};
    return s;
}

// Rows of the padded vocabulary (of wte and of the logits) this rank holds; rows >= vocab_size are padding.
static inline Span tp_vocab_rows(const Mesh *m, const GPTConfig *c) {
    return even_split((size_t)c->padded_vocab_size, m->tp, m->tp_rank);
}

#define QKV_PARTS 3 // q, k, v

// Global rows of part (0 = q, 1 = k, 2 = v) of the fused QKV weight this rank holds: its heads' rows.
static inline Span tp_qkv_rows(const Mesh *m, const GPTConfig *c, int part) {
    Span s = tp_attention_channels(m, c);
    s.begin += (size_t)part * (size_t)c->channels;
    return s;
}

// The input columns of a row-parallel tensor this rank holds (attn proj: its heads' channels; fc2: an even split).
static inline Span tp_cols(const Mesh *m, const GPTConfig *c, int t, size_t cols) {
    return t == P_ATTPROJW ? tp_attention_channels(m, c) : tp_row_parallel_cols(m, cols);
}

typedef enum { TP_REPLICATED, TP_ROWS, TP_QKV_ROWS, TP_COLS } TPSplit;

static inline TPSplit param_tp_split(int t) {
    switch (t) {
    case P_WTE: case P_LMHEAD: case P_FCW: case P_FCB: return TP_ROWS;
    case P_QKVW: case P_QKVB: return TP_QKV_ROWS;
    case P_ATTPROJW: case P_FCPROJW: return TP_COLS;
    default: return TP_REPLICATED;
    }
}

// Shape of this rank's TP-local slice of one layer of tensor t.
static inline void param_tp_shape(const GPTConfig *c, const Mesh *m, int t, size_t *rows, size_t *cols) {
    param_layer_shape(c, t, rows, cols);
    if (m->tp == 1) { return; } // whole: also a QKV of unequal parts (grouped-query) and a tensor the model lacks
    switch (param_tp_split(t)) {
    case TP_ROWS: *rows /= (size_t)m->tp; break;
    case TP_QKV_ROWS: *rows = QKV_PARTS * tp_attention_channels(m, c).count; break;
    case TP_COLS: *cols = tp_cols(m, c, t, *cols).count; break;
    default: break;
    }
}

// Global (per-layer) row of TP-local row r of tensor t.
static inline size_t tp_global_row(const Mesh *m, const GPTConfig *c, int t, size_t r) {
    size_t rows, cols;
    param_layer_shape(c, t, &rows, &cols);
    if (m->tp == 1) { return r; } // as param_tp_shape
    switch (param_tp_split(t)) {
    case TP_ROWS: return tp_column_parallel_rows(m, rows).begin + r;
    case TP_QKV_ROWS: {
        size_t per_part = tp_attention_channels(m, c).count;
        return tp_qkv_rows(m, c, (int)(r / per_part)).begin + r % per_part;
    }
    default: return r;
    }
}

// Global (per-layer) column of TP-local column k of tensor t.
static inline size_t tp_global_col(const Mesh *m, const GPTConfig *c, int t, size_t k) {
    size_t rows, cols;
    param_layer_shape(c, t, &rows, &cols);
    return param_tp_split(t) == TP_COLS ? tp_cols(m, c, t, cols).begin + k : k;
}

// Index in the full (all-layer, unsplit) tensor t of TP-local element (r, k) of layer l: the element index
// that param_init_value() and the model file use.
static inline size_t tp_global_element(const Mesh *m, const GPTConfig *c, int t, int l, size_t r, size_t k) {
    size_t rows, cols;
    param_layer_shape(c, t, &rows, &cols);
    return ((size_t)l * rows + tp_global_row(m, c, t, r)) * cols + tp_global_col(m, c, t, k);
}

// ---------------------------------------------------------------------------------------------------------
// Validation: every split above is exact, and the global batch divides over the data ranks.

// The first check, before anything divides by the data-parallel degree.
static inline void mesh_check_world(const Mesh *m) {
    int wp = m->tp * m->gtp;
    if (m->world % wp != 0) {
        fail("world size %d is not divisible by tp x gtp = %d: launch a multiple of %d ranks or change --tp/--gtp",
             m->world, wp, wp);
    }
}

static inline void mesh_validate(const Mesh *m, const GPTConfig *c, const Options *o) {
    mesh_check_world(m);
    // The splits below are GPT-2's: a fused QKV of three equal parts, fc rows of one GELU MLP, the LM head in wte.
    if (c->arch != ARCH_GPT2 && (m->tp > 1 || options_gtp_path(o))) {
        fail("--arch %s does not run under --tp or --gtp yet (their splits are GPT-2's); pass --tp 1 --gtp 1",
             ARCH_NAMES[c->arch]);
    }
    // Heads (QKV, attention, attn proj columns) split as evenly as they go; every rank needs one.
    if (c->num_heads < m->tp) {
        fail("attention heads = %d cannot be split over --tp %d ranks (each needs at least one head): lower --tp or "
             "change the model size", c->num_heads, m->tp);
    }
    // Every other dimension that TP splits must divide: the MLP width (fc rows, fc2 columns), the padded
    // vocabulary (wte / LM head rows).
    struct { const char *what; int n; } tp_dims[] = {{"MLP width (4 x channels)", 4 * c->channels},
                                                    {"padded vocabulary", c->padded_vocab_size}};
    for (size_t i = 0; i < sizeof(tp_dims) / sizeof(tp_dims[0]); i++) {
        if (tp_dims[i].n % m->tp != 0) {
            fail("%s = %d is not divisible by --tp %d: choose a --tp that divides it or change the model size",
                 tp_dims[i].what, tp_dims[i].n, m->tp);
        }
    }
    if (o->sequence_parallel && o->seq_len % m->tp != 0) {
        fail("--seq-len %d is not divisible by --tp %d, which sequence parallelism needs: change --seq-len or --tp, "
             "or set --sequence-parallel 0", o->seq_len, m->tp);
    }
    options_grad_accum(o, m->data_size);
}

#endif // LLMC_MESH_H
