/*
 * tensor_parallel.cuh: the collectives of a tensor-parallel (TP) group on activations (Megatron-style), and the
 * linear layers split over it.
 *
 * The TP ranks of a group hold slices of every block's weights (llmc/mesh.h) and see the same tokens. A
 * column-parallel Linear (qkv, fc, the LM head) needs its whole input on every rank and leaves each rank a slice of
 * the output features; a row-parallel one (attention projection, fc2) takes that slice and leaves a partial sum of
 * the whole output, summed over the group. In backward the roles swap: the column-parallel input gradient is the
 * partial sum. The collectives:
 *   no sequence parallelism: all-reduce after a row-parallel forward and a column-parallel dgrad.
 *   sequence parallelism (SP): between blocks each rank keeps 1/TP of the tokens (the residual stream, the
 *     LayerNorms): rank r owns tokens [r N/TP, (r+1) N/TP) of a micro-batch. All-gather them before a
 *     column-parallel forward (and the residual gradient before a row-parallel backward), reduce-scatter after a
 *     row-parallel forward and a column-parallel dgrad.
 * A linear layer's functions at the end of this file (linear_forward, linear_backward_*) run them all around
 * llmc/matmul.cuh's GEMMs, but the forward's gathers, which gpt_forward's LayerNorms do (tp_chunk_gather), so
 * callers see whole activations.
 * Collectives run on the TP stream (high priority), ordered after the compute stream's work by an event (tp_fork);
 * the compute stream waits for them through comm_compute_wait (tp_join, tp_chunk_wait), which times how long it
 * stood still: the exposed communication the log line reports. Overlap comes from the callers' order:
 *   forward: gpt_forward runs the micro-batch in chunks of whole sequences (llmc/forward_chunks.h), each
 *     half-block (attention, MLP) chunk after chunk. A chunk's collectives (the sum of its row-parallel output;
 *     under SP, one chunk, also the gather of its LayerNorm output) are marked with the chunk's event
 *     (tp_chunk_mark) and waited for only where that chunk reads them, so a sum runs beside the other chunks'
 *     GEMMs and attention.
 *   backward: each collective runs beside weight-gradient GEMMs that gpt_backward puts off until then (the sum of a
 *     column-parallel input gradient, and under SP the all-gather of the residual gradient for a row-parallel one).
 * TP = 1: no stream, no event, no collective: the collectives return at once, and a linear layer is its GEMMs.
 */
#ifndef LLMC_TENSOR_PARALLEL_CUH
#define LLMC_TENSOR_PARALLEL_CUH

#include "comm.cuh"
#include "forward_chunks.h"
#include "matmul.cuh"

typedef struct TensorParallel {
    int size, rank;     // the TP group
    int sp;             // sequence parallelism
    int gather_pending; // an output-gradient all-gather was started for the next row-parallel backward
    cudaStream_t stream;
    cudaEvent_t compute_mark, tp_mark;
    cudaEvent_t chunk_done[TP_SEQUENCE_CHUNKS]; // the last collective queued for each chunk of the forward
} TensorParallel;

static void tp_init(TensorParallel *tp, const Mesh *m, int sp) {
    memset(tp, 0, sizeof(*tp));
    tp->size = m->tp;
    tp->rank = m->tp_rank;
    tp->sp = sp && m->tp > 1;
    if (tp->size == 1) { return; }
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&tp->stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&tp->compute_mark, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&tp->tp_mark, cudaEventDisableTiming));
    for (int k = 0; k < TP_SEQUENCE_CHUNKS; k++) {
        cudaCheck(cudaEventCreateWithFlags(&tp->chunk_done[k], cudaEventDisableTiming));
    }
}

static inline int tp_active(const TensorParallel *tp) { return tp && tp->size > 1; }

// Tokens of an N-token micro-batch this rank keeps between blocks, and the first of them.
static inline int tp_local_tokens(const TensorParallel *tp, int N) {
    return tp_active(tp) && tp->sp ? N / tp->size : N;
}
static inline int tp_first_token(const TensorParallel *tp, int N) {
    return tp_active(tp) && tp->sp ? tp->rank * (N / tp->size) : 0;
}

// The TP stream starts after what the compute stream has queued so far.
static void tp_fork(TensorParallel *tp, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(tp->compute_mark, compute));
    cudaCheck(cudaStreamWaitEvent(tp->stream, tp->compute_mark, 0));
}

// The compute stream goes on once the TP stream's collectives so far are done (timed: exposed communication).
static void tp_join(TensorParallel *tp, cudaStream_t compute, const char *what) {
    cudaCheck(cudaEventRecord(tp->tp_mark, tp->stream));
    comm_track(tp->tp_mark, what);
    comm_compute_wait(compute, tp->tp_mark);
}

// Chunk k's collective, just queued on the TP stream, is the one tp_chunk_wait(k) waits for. The caller waits for
// each before it queues the chunk's next (the forward reads each result before it writes the chunk's rows again).
static void tp_chunk_mark(TensorParallel *tp, int k, const char *what) {
    cudaCheck(cudaEventRecord(tp->chunk_done[k], tp->stream));
    comm_track(tp->chunk_done[k], what);
}
static void tp_chunk_wait(TensorParallel *tp, cudaStream_t compute, int k) {
    if (tp_active(tp)) { comm_compute_wait(compute, tp->chunk_done[k]); }
}

// The collectives, on the TP stream, in place but for reduce-scatter. n counts elements of the whole buffer for
// all-reduce, and of one rank's part for all-gather and reduce-scatter (rank r's part at buf + r n).
template <typename T> static void tp_all_reduce(TensorParallel *tp, T *buf, size_t n, const char *what) {
    ncclCheck(ncclAllReduce(buf, buf, n, NcclType<T>::id, ncclSum, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}
template <typename T> static void tp_all_gather(TensorParallel *tp, T *buf, size_t n, const char *what) {
    ncclCheck(ncclAllGather(buf + (size_t)tp->rank * n, buf, n, NcclType<T>::id, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}
// recv may be send + rank n (in place) or another buffer of n elements.
template <typename T> static void tp_reduce_scatter(TensorParallel *tp, const T *send, T *recv, size_t n,
                                                    const char *what) {
    ncclCheck(ncclReduceScatter(send, recv, n, NcclType<T>::id, ncclSum, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}

/*
 * Forward chunk f's rows of buf (cols wide; llmc/forward_chunks.h), summed over the TP group behind the compute
 * stream's work so far and marked as the chunk's collective: all-reduced in place, or under SP (one chunk, the whole
 * micro-batch) reduce-scattered onto each rank's tokens, in place or at mine if given.
 */
template <typename T>
static void tp_chunk_sum(TensorParallel *tp, T *buf, T *mine, size_t cols, const ForwardChunk &f, cudaStream_t compute,
                         const char *what) {
    if (!tp_active(tp)) { return; }
    tp_fork(tp, compute);
    T *rows = buf + (size_t)f.row * cols;
    if (tp->sp) {
        size_t n = (size_t)f.ln_rows * cols;
        tp_reduce_scatter(tp, rows, mine ? mine : rows + tp->rank * n, n, what);
    } else {
        tp_all_reduce(tp, rows, (size_t)f.rows * cols, what);
    }
    tp_chunk_mark(tp, f.k, what);
}

// Under SP: forward chunk f's rows of buf (cols wide), each rank's tokens to every rank (all-gathered in place),
// behind the compute stream's work so far and marked as the chunk's collective. Nothing otherwise: every rank has
// every row.
template <typename T>
static void tp_chunk_gather(TensorParallel *tp, T *buf, size_t cols, const ForwardChunk &f, cudaStream_t compute,
                            const char *what) {
    if (!tp_active(tp) || !tp->sp) { return; }
    tp_fork(tp, compute);
    tp_all_gather(tp, buf + (size_t)f.row * cols, (size_t)f.ln_rows * cols, what);
    tp_chunk_mark(tp, f.k, what);
}

// An all-gather of what the compute stream has queued so far, started beside its next work; tp_join waits for it.
template <typename T>
static void tp_gather_start(TensorParallel *tp, T *buf, size_t n, cudaStream_t compute, const char *what) {
    tp_fork(tp, compute);
    tp_all_gather(tp, buf, n, what);
}

// An all-gather the compute stream needs at once: forked from it and joined (its whole time counts as exposed).
template <typename T>
static void tp_all_gather_joined(TensorParallel *tp, T *buf, size_t n, cudaStream_t compute, const char *what) {
    tp_gather_start(tp, buf, n, compute, what);
    tp_join(tp, compute, what);
}

// In place on the device: x[0..n) summed over the TP group (the squared norm of this rank's parameter slices).
static void tp_sum_on_device(TensorParallel *tp, double *x, int n, cudaStream_t compute) {
    const char *what = "the all-reduce of the squared gradient norm over the tensor-parallel ranks";
    tp_fork(tp, compute);
    tp_all_reduce(tp, x, (size_t)n, what);
    tp_join(tp, compute, what);
}

// ----------------------------------------------------------------------------------------------------------------
// a linear layer split over the TP group (llmc/matmul.cuh's Linear: split, tp): its GEMMs and their collectives

template <typename T> static bool linear_is(const Linear<T> &lin, LinearSplit split) {
    return lin.split == split && tp_active(lin.tp);
}

/*
 * Rows [f.row, f.row + f.rows) of forward chunk f (llmc/forward_chunks.h): out = inp W^T + b; with gelu_aux:
 * gelu_aux = that, and out = gelu(that). inp must hold those rows whole on every rank (under SP the caller gathered
 * them: tp_chunk_gather). Row-parallel: TP rank 0 adds the bias, and the sum over the TP group is started on the TP
 * stream and marked as the chunk's collective (tp_chunk_sum); the caller waits for it (tp_chunk_wait) before it reads
 * out. Under SP it goes onto the rows' owners: then only this rank's tokens of out are valid.
 */
template <typename T>
static void linear_forward(const Linear<T> &lin, T *out, const T *inp, T *gelu_aux, const ForwardChunk &f,
                           cudaStream_t stream) {
    bool row_parallel = linear_is(lin, LINEAR_ROW);
    const T *bias = row_parallel && lin.tp->rank != 0 ? NULL : lin.b;
    linear_rows_forward(lin, bias, out, inp, f.row, f.row + f.rows, f.tokens, gelu_aux, stream);
    if (row_parallel) {
        const char *what = "the tensor-parallel sum of a row-parallel layer's output";
        tp_chunk_sum(lin.tp, out, (T *)NULL, lin.out, f, stream, what);
    }
}

/*
 * Backward, given dout (N, lin.out), in parts, so that a caller can run weight gradients beside a collective:
 *   linear_backward_gather: row-parallel under SP, dout holds this rank's tokens only: starts their all-gather (in
 *     place) on the TP stream; dout must stay unchanged until linear_backward_weight. Nothing otherwise.
 *   linear_backward_input:  dinp = dout W (times gelu'(gelu_aux) when given: inp was gelu(gelu_aux); in an FP8
 *     fc projection gelu_aux is fc's output, whose activation's backward fp8_linear_dgrad casts), once the
 *     gather is in. Column-parallel under TP, dinp is then summed over the TP group (reduce-scattered under SP: only
 *     this rank's tokens of dinp are valid) on the TP stream, started and not waited for (linear_backward_input_sum;
 *     the LM head, which writes dinp a chunk of rows at a time with linear_dgrad, starts it after the last).
 *   linear_backward_weight: lin.dw += dout^T inp (written rather than added to when not accumulate; llmc/matmul.cuh).
 *   linear_backward_join:   the compute stream waits for the sum the input part started (column-parallel, TP).
 * dinp must not alias inp, which the weight gradient reads afterwards.
 */
template <typename T> static bool linear_gathers_output_grad(const Linear<T> &lin) {
    return linear_is(lin, LINEAR_ROW) && lin.tp->sp;
}

template <typename T> static void linear_backward_gather(const Linear<T> &lin, T *dout, int N, cudaStream_t stream) {
    if (!linear_gathers_output_grad(lin)) { return; }
    TensorParallel *tp = lin.tp;
    tp_gather_start(tp, dout, (size_t)(N / tp->size) * lin.out, stream,
                    "the tensor-parallel all-gather of a row-parallel layer's output gradient");
    tp->gather_pending = 1;
}

// The input gradient dinp (N, lin.in) summed over the TP group where the layer is column-parallel (reduce-scattered
// under SP), started on the TP stream once every row of it is written; linear_backward_join waits for it.
template <typename T> static void linear_backward_input_sum(const Linear<T> &lin, T *dinp, int N, cudaStream_t stream) {
    if (!linear_is(lin, LINEAR_COLUMN)) { return; }
    TensorParallel *tp = lin.tp;
    const char *what = "the tensor-parallel sum of a column-parallel layer's input gradient";
    tp_fork(tp, stream);
    if (tp->sp) {
        size_t mine = (size_t)(N / tp->size) * lin.in;
        tp_reduce_scatter(tp, dinp, dinp + tp->rank * mine, mine, what);
    } else {
        tp_all_reduce(tp, dinp, (size_t)N * lin.in, what);
    }
}

template <typename T>
static void linear_backward_input(const Linear<T> &lin, T *dinp, const T *dout, const T *inp, const T *gelu_aux, int N,
                                  cudaStream_t stream) {
    if (dinp == inp) { fail("linear_backward_input: dinp must not alias inp (the weight gradient reads it later)"); }
    TensorParallel *tp = lin.tp;
    if (linear_gathers_output_grad(lin)) {
        if (!tp->gather_pending) { fail("linear_backward_input: the output gradient was not gathered first"); }
        tp_join(tp, stream, "the tensor-parallel all-gather of a row-parallel layer's output gradient");
        tp->gather_pending = 0;
    }
    linear_dgrad(lin, dinp, dout, gelu_aux, N, stream);
    linear_backward_input_sum(lin, dinp, N, stream);
}

template <typename T> static void linear_backward_join(const Linear<T> &lin, cudaStream_t stream) {
    if (linear_is(lin, LINEAR_COLUMN)) {
        tp_join(lin.tp, stream, "the tensor-parallel sum of a column-parallel layer's input gradient");
    }
}

#endif // LLMC_TENSOR_PARALLEL_CUH
