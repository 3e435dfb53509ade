/*
 * tp_layout.h: the parameters one tensor-parallel rank holds, as one flat buffer, and the maps between that
 * buffer and the full (single-GPU, llm.c) parameter buffer.
 *
 * A rank's local buffer holds the same tensors in the same order as config.h's ParamLayout, each reduced
 * to the rank's TP-local slice (mesh.h: the row parts of a column-parallel tensor, such as QKV's rows of its heads
 * or SwiGLU fc's gate and up rows of its features, the columns of a row-parallel one, or the whole tensor where
 * replicated). Per-layer tensors stay layer-major: layer l's slice of tensor t is the contiguous block
 * [l n, (l+1) n), n = rows x cols of param_tp_shape(), exactly as in the full layout, so a layer's weight is one
 * pointer and GTP's row shards of it are contiguous too.
 *
 * Local element i of tensor t is (l, r, k) = (i / n, (i % n) / cols, i % cols) of the local (L, rows, cols)
 * array; its global element is mesh.h's tp_global_element(l, r, k), the index that param_init_value() and the
 * model file use. Each local row is a contiguous run of cols global elements (TP splits rows, or columns in
 * blocks), which is what the copies below move at a time.
 */
#ifndef LLMC_TP_LAYOUT_H
#define LLMC_TP_LAYOUT_H

#include <string.h>

#include "config.h"
#include "dp_plan.h"
#include "init.h"
#include "mesh.h"

// Sizes and offsets of this rank's TP-local tensors in its flat local buffer (tp = 1: param_layout()).
static inline void param_layout_local(const GPTConfig *c, const Mesh *m, ParamLayout *local) {
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t rows, cols;
        param_tp_shape(c, m, t, &rows, &cols);
        local->size[t] = param_num_layers(c, t) * rows * cols;
        local->offset[t] = off;
        off += local->size[t];
    }
    local->total = off;
}

// Local element i of tensor t -> its element in the full tensor, in a form a GPU kernel can evaluate (the
// initialization draws each local element at its global index). With (l, r, k) the local (layer, row, column):
//   global = (l * grows + tp_rows_global(r)) * gcols + coff + k
// where local row r is in one of mesh.h's parts of consecutive global rows (tp_rows: QKV's q, k, v; SwiGLU fc's gate
// and up; one part for the others, all the rows of a tensor that TP does not split by rows).
typedef struct {
    TpRows row_parts;
    size_t rows, cols;   // one layer's local slice
    size_t grows, gcols; // one layer of the full tensor
    size_t coff;
} TpMap;

static inline TpMap tp_map(const GPTConfig *c, const Mesh *m, int t) {
    TpMap mp;
    mp.row_parts = tp_rows(m, c, t);
    param_tp_shape(c, m, t, &mp.rows, &mp.cols);
    param_layer_shape(c, t, &mp.grows, &mp.gcols);
    mp.coff = tp_global_col(m, c, t, 0);
    return mp;
}

HOST_DEVICE static inline size_t tp_map_element(const TpMap *mp, size_t i) {
    size_t per_layer = mp->rows * mp->cols, rest = i % per_layer, r = rest / mp->cols, k = rest % mp->cols;
    return ((i / per_layer) * mp->grows + tp_rows_global(&mp->row_parts, r)) * mp->gcols + mp->coff + k;
}

// Index in the full tensor t of local element i of tensor t (i counts from the tensor's local offset).
static inline size_t tp_local_to_global(const GPTConfig *c, const Mesh *m, int t, size_t i) {
    TpMap mp = tp_map(c, m, t);
    return tp_map_element(&mp, i);
}

// Index in the full tensor t of the first element of local row j (rows of all layers counted together).
static inline size_t tp_local_row_to_global(const GPTConfig *c, const Mesh *m, int t, size_t j) {
    TpMap mp = tp_map(c, m, t);
    return tp_map_element(&mp, j * mp.cols);
}

// Copies between this rank's local buffer and a full parameter buffer (param_layout() order), one local row (a
// contiguous run of global elements) at a time: full -> local when to_local, else local -> full. Replicated tensors
// are copied only when with_replicated (a gather takes them from one rank: TP keeps them identical on every rank).
static inline void param_copy_tp(const GPTConfig *c, const Mesh *m, float *local, float *full, int to_local,
                                 int with_replicated) {
    ParamLayout g, p;
    param_layout(c, &g);
    param_layout_local(c, m, &p);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_tp_split(t) == TP_REPLICATED && !with_replicated) { continue; }
        size_t rows, cols;
        param_tp_shape(c, m, t, &rows, &cols);
        long long n = (long long)(param_num_layers(c, t) * rows);
#pragma omp parallel for
        for (long long j = 0; j < n; j++) {
            float *f = full + g.offset[t] + tp_local_row_to_global(c, m, t, (size_t)j);
            float *l = local + p.offset[t] + (size_t)j * cols;
            memcpy(to_local ? l : f, to_local ? f : l, cols * sizeof(float));
        }
    }
}

// This rank's local buffer cut from a full parameter buffer: --init-from on every rank.
static inline void param_slice_tp(const GPTConfig *c, const Mesh *m, const float *full, float *local) {
    param_copy_tp(c, m, local, (float *)full, 1, 1);
}

// Writes this rank's local buffer into its place in a full parameter buffer.
static inline void param_place_tp(const GPTConfig *c, const Mesh *m, const float *local, float *full,
                                  int with_replicated) {
    param_copy_tp(c, m, (float *)local, full, 0, with_replicated);
}

// The full parameter buffer from the local buffers of TP ranks 0..tp-1 (local[r] is rank r's): what rank 0
// writes as the llm.c model file. Replicated tensors come from rank 0.
static inline void param_gather_tp(const GPTConfig *c, int tp, const float *const *local, float *full) {
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        param_place_tp(c, &m, local[r], full, r == 0);
    }
}

// The local buffers of TP ranks 0..tp-1 cut from one full parameter buffer.
static inline void param_scatter_tp(const GPTConfig *c, int tp, const float *full, float *const *local) {
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        param_slice_tp(c, &m, full, local[r]);
    }
}

// This rank's local buffer initialized as the single-GPU run initializes the full one: each element gets
// param_init_value() at its GLOBAL index, so every layout starts from the same weights.
static inline void param_init_local(const GPTConfig *c, const Mesh *m, uint64_t seed, float *local) {
    ParamLayout g, p;
    param_layout(c, &g);
    param_layout_local(c, m, &p);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        InitSpec s = param_init_spec(c, &g, t); // specs refer to the full tensor (wte's zero padding rows)
        float *dst = local + p.offset[t];
        long long n = (long long)p.size[t];
#pragma omp parallel for
        for (long long i = 0; i < n; i++) {
            dst[i] = param_init_value(s, seed, t, (uint64_t)tp_local_to_global(c, m, t, (size_t)i));
        }
    }
}

#endif // LLMC_TP_LAYOUT_H
