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
 * Sharding, per layer (a linear weight is (out, in) row-major and computes y = x W^T + b), Megatron's, for GPT-2 and
 * Llama alike (GPT-2 is the case KV = NH of the grouped-query arithmetic, with one fc part):
 *   heads: the KV key/value heads split as evenly as they go (balanced_split: KV/TP each, the first KV % TP ranks one
 *     more, since GPT-2 1558M's 25 heads do not divide by 2); rank tp holds KV heads [kv0, kv0 + kvl) and the query
 *     heads of their groups, [g kv0, g (kv0 + kvl)), g = NH / KV (query head h reads KV head h / g).
 *   QKV: the fused ((NH + 2 KV) hs, C) weight is [Q; K; V] of NH, KV, KV heads, head h owning rows [h hs, (h+1) hs)
 *     of its part. Rank tp's weight is [Q_l; K_l; V_l] of g kvl, kvl, kvl heads, itself a fused grouped-query QKV,
 *     so the attention and RoPE kernels run unchanged on the local head counts.
 *   fc: rows [F] (GELU) or [gate F; up F] (SwiGLU); rank tp holds the rows of its even span of F in each part,
 *     [gate span; up span], so SwiGLU runs locally on F/TP features.
 *   wte and an untied LM head (lmhead): rows [tp * Vp/TP, (tp+1) * Vp/TP) of the padded vocabulary.
 *   row-parallel: fc2 the columns of its span of F; attn proj the channels of its query heads, [g kv0 hs,
 *     g (kv0 + kvl) hs). Their biases are replicated (added once, after the all-reduce).
 *   replicated: wpe, the norms, the row-parallel biases.
 * So a TP-local tensor of a row split is up to TP_MAX_ROW_PARTS runs of consecutive global rows (tp_rows: QKV's
 * three, SwiGLU fc's two, one for the others), which is the one map every layout, checkpoint and initialization goes
 * through. GTP then splits the block linear layers' TP-local weight matrices along their first dimension, padded
 * where it does not divide (llmc/gtp_plan.h).
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

// Key/value heads of this rank, and the query heads of their groups.
static inline Span tp_kv_heads(const Mesh *m, const GPTConfig *c) {
    return balanced_split((size_t)c->num_kv_heads, m->tp, m->tp_rank);
}
static inline Span tp_heads(const Mesh *m, const GPTConfig *c) {
    Span kv = tp_kv_heads(m, c);
    size_t g = (size_t)(c->num_heads / c->num_kv_heads);
    Span s = {g * kv.begin, g * kv.count};
    return s;
}

// Channels of this rank's query heads: its part of the attention output (attn proj's input columns).
static inline Span tp_attention_channels(const Mesh *m, const GPTConfig *c) {
    Span h = tp_heads(m, c);
    size_t hs = (size_t)config_head_size(c);
    Span s = {h.begin * hs, h.count * hs};
    return s;
}

// This rank's MLP hidden features: rows of each fc part, columns of fc2.
static inline Span tp_mlp_features(const Mesh *m, const GPTConfig *c) {
    return even_split((size_t)c->ffn_hidden, m->tp, m->tp_rank);
}

// Rows of the padded vocabulary (of wte, lmhead and the logits) this rank holds; rows >= vocab_size are padding.
static inline Span tp_vocab_rows(const Mesh *m, const GPTConfig *c) {
    return even_split((size_t)c->padded_vocab_size, m->tp, m->tp_rank);
}

#define QKV_PARTS 3 // q, k, v
#define TP_MAX_ROW_PARTS QKV_PARTS

// Global rows of part (0 = q, 1 = k, 2 = v) of the fused QKV weight this rank holds: its heads' rows.
static inline Span tp_qkv_rows(const Mesh *m, const GPTConfig *c, int part) {
    size_t hs = (size_t)config_head_size(c), NH = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads;
    Span h = part == 0 ? tp_heads(m, c) : tp_kv_heads(m, c);
    size_t first_head = part == 0 ? 0 : part == 1 ? NH : NH + KV; // of the part, in the fused weight
    Span s = {(first_head + h.begin) * hs, h.count * hs};
    return s;
}

typedef enum { TP_REPLICATED, TP_ROWS, TP_COLS } TPSplit;

static inline TPSplit param_tp_split(int t) {
    switch (t) {
    case P_WTE: case P_LMHEAD: case P_QKVW: case P_QKVB: case P_FCW: case P_FCB: return TP_ROWS;
    case P_ATTPROJW: case P_FCPROJW: return TP_COLS;
    default: return TP_REPLICATED;
    }
}

// The global rows (of one layer) that this rank's rows of a tensor are, in local order: parts of consecutive rows.
typedef struct {
    int count;
    Span part[TP_MAX_ROW_PARTS];
} TpRows;

static inline TpRows tp_rows(const Mesh *m, const GPTConfig *c, int t) {
    size_t rows, cols;
    param_layer_shape(c, t, &rows, &cols);
    TpRows r;
    memset(&r, 0, sizeof(r));
    r.count = 1;
    r.part[0].count = rows; // whole: a tensor TP does not split by rows, and one the model lacks (no rows)
    if (rows == 0 || param_tp_split(t) != TP_ROWS) { return r; }
    if (param_is_vocab(t)) {
        r.part[0] = tp_vocab_rows(m, c);
    } else if (t == P_QKVW || t == P_QKVB) {
        r.count = QKV_PARTS;
        for (int p = 0; p < QKV_PARTS; p++) { r.part[p] = tp_qkv_rows(m, c, p); }
    } else { // fc: F rows, or SwiGLU's gate then up, F each
        Span f = tp_mlp_features(m, c);
        r.count = config_fc_rows(c) / c->ffn_hidden;
        for (int p = 0; p < r.count; p++) {
            r.part[p].begin = (size_t)p * (size_t)c->ffn_hidden + f.begin;
            r.part[p].count = f.count;
        }
    }
    return r;
}

static inline size_t tp_rows_count(const TpRows *r) {
    size_t n = 0;
    for (int p = 0; p < r->count; p++) { n += r->part[p].count; }
    return n;
}

// Global row of local row j (the parts' rows one after the other).
HOST_DEVICE static inline size_t tp_rows_global(const TpRows *r, size_t j) {
    int p = 0;
    while (p + 1 < r->count && j >= r->part[p].count) { j -= r->part[p++].count; }
    return r->part[p].begin + j;
}

// The input columns of a row-parallel tensor this rank holds (attn proj: its query heads' channels; fc2: its MLP
// features); every column of any other tensor.
static inline Span tp_cols(const Mesh *m, const GPTConfig *c, int t) {
    size_t rows, cols;
    param_layer_shape(c, t, &rows, &cols);
    Span all = {0, cols};
    if (param_tp_split(t) != TP_COLS) { return all; }
    return t == P_ATTPROJW ? tp_attention_channels(m, c) : tp_mlp_features(m, c);
}

// Shape of this rank's TP-local slice of one layer of tensor t.
static inline void param_tp_shape(const GPTConfig *c, const Mesh *m, int t, size_t *rows, size_t *cols) {
    TpRows r = tp_rows(m, c, t);
    *rows = tp_rows_count(&r);
    *cols = tp_cols(m, c, t).count;
}

// Global (per-layer) row of TP-local row r of tensor t.
static inline size_t tp_global_row(const Mesh *m, const GPTConfig *c, int t, size_t r) {
    TpRows rows = tp_rows(m, c, t);
    return tp_rows_global(&rows, r);
}

// Global (per-layer) column of TP-local column k of tensor t.
static inline size_t tp_global_col(const Mesh *m, const GPTConfig *c, int t, size_t k) {
    return tp_cols(m, c, t).begin + k;
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
    // Heads (QKV, attention, attn proj columns) split by their key/value heads, as evenly as they go; every rank
    // needs one. GPT-2's heads are each a key/value head.
    if (c->num_kv_heads < m->tp) {
        fail("--tp %d exceeds the model's %d key/value heads (each TP rank needs one): use --tp <= %d, and --gtp or "
             "data parallelism for more GPUs", m->tp, c->num_kv_heads, c->num_kv_heads);
    }
    // Every other dimension that TP splits must divide: the MLP width (each fc part's rows, fc2's columns), the
    // padded vocabulary (wte / LM head rows).
    struct { const char *what; int n; } tp_dims[] = {{"MLP width", c->ffn_hidden},
                                                    {"padded vocabulary", c->padded_vocab_size}};
    for (size_t i = 0; i < sizeof(tp_dims) / sizeof(tp_dims[0]); i++) {
        if (tp_dims[i].n % m->tp != 0) {
            fail("%s = %d is not divisible by --tp %d: choose a --tp that divides it or change the model size",
                 tp_dims[i].what, tp_dims[i].n, m->tp);
        }
    }
    // fp8: every rank's parts of the block linear layers are FP8 GEMM operands, which are read in 16-byte rows
    // (options_validate_fp8 checks the whole model's).
    for (int r = 0; r < m->tp && options_fp8(o); r++) {
        Mesh peer = mesh_make(m->world, mesh_rank_of(m, m->dp_rank, m->gtp_rank, r), m->tp, m->gtp);
        for (int k = 0; k < BLOCK_LINEARS; k++) {
            size_t rows, cols;
            param_tp_shape(c, &peer, BLOCK_LINEAR_WEIGHT[k], &rows, &cols);
            if (rows % FP8_ALIGN != 0 || cols % FP8_ALIGN != 0) {
                fail("--precision fp8 needs each TP rank's part of a block linear weight in multiples of %d rows and "
                     "columns (the FP8 GEMMs read 16-byte rows), but --tp %d leaves rank %d %zu x %zu of %s: choose "
                     "another --tp, --ffn or --heads, or --precision bf16", FP8_ALIGN, m->tp, r, rows, cols,
                     PARAM_NAMES[BLOCK_LINEAR_WEIGHT[k]]);
            }
        }
    }
    if (o->sequence_parallel && o->seq_len % m->tp != 0) {
        fail("--seq-len %d is not divisible by --tp %d, which sequence parallelism needs: change --seq-len or --tp, "
             "or set --sequence-parallel 0", o->seq_len, m->tp);
    }
    options_grad_accum(o, m->data_size);
}

#endif // LLMC_MESH_H
