/*
 * tensor_parallel.cuh: the collectives of a tensor-parallel (TP) group on activations (Megatron-style).
 *
 * The TP ranks of a group hold slices of every block's weights (llmc/mesh.h) and see the same tokens. A
 * column-parallel Linear (qkv, fc, the LM head) needs its whole input on every rank and leaves each rank a slice of
 * the output features; a row-parallel one (attention projection, fc2) takes that slice and leaves a partial sum of
 * the whole output, summed over the group. In backward the roles swap: the column-parallel input gradient is the
 * partial sum. llmc/matmul.cuh's Linear does these collectives itself, so callers see whole activations:
 *   no sequence parallelism: all-reduce after a row-parallel forward and a column-parallel dgrad.
 *   sequence parallelism (SP): between blocks each rank keeps 1/TP of the tokens (the residual stream, the
 *     LayerNorms); all-gather the tokens before a column-parallel forward (and the residual gradient before a
 *     row-parallel backward), reduce-scatter after a row-parallel forward and a column-parallel dgrad. Rank r owns
 *     tokens [r N/TP, (r+1) N/TP) of a micro-batch.
 * Collectives run on the TP stream (high priority), ordered after the compute stream's work by an event (tp_fork);
 * the compute stream waits for them through comm_compute_wait (tp_join), which times how long it stood still:
 * the exposed communication the log line reports. Overlap comes from the callers' order: a row-parallel forward
 * is split into chunks of tokens, each chunk's sum launched as soon as its GEMM is done, beside the next chunk's;
 * a column-parallel dgrad's sum runs beside the weight-gradient GEMM; an all-gather runs beside the GEMM of the
 * tokens this rank already holds.
 * TP = 1: no stream, no event, no collective; every function here returns at once.
 */
#ifndef LLMC_TENSOR_PARALLEL_CUH
#define LLMC_TENSOR_PARALLEL_CUH

#include "comm.cuh"

// Token chunks of a row-parallel forward (per owner under SP). More chunks hide more of the sum behind GEMMs, but
// each chunk's GEMM is smaller (less efficient) and each collective has a fixed latency (~10-20 us). Measured at
// GPT-2 1558M, TP=2 on 2 x H200: 4 chunks 119 ms a step (13 ms exposed), 8 chunks 128 ms (19 ms exposed).
#define TP_FORWARD_CHUNKS 4

typedef struct {
    int size, rank; // the TP group
    int sp;         // sequence parallelism
    cudaStream_t stream;
    cudaEvent_t compute_mark, tp_mark;
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
}

static inline int tp_active(const TensorParallel *tp) { return tp && tp->size > 1; }

// Tokens of an N-token micro-batch this rank keeps between blocks, and the first of them.
static inline int tp_local_tokens(const TensorParallel *tp, int N) { return tp_active(tp) && tp->sp ? N / tp->size : N; }
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

// The collectives, on the TP stream, in place but for reduce-scatter. n counts elements of the whole buffer for
// all-reduce and reduce, and of one rank's part for all-gather and reduce-scatter (rank r's part at buf + r n).
template <typename T> static void tp_all_reduce(TensorParallel *tp, T *buf, size_t n, const char *what) {
    ncclCheck(ncclAllReduce(buf, buf, n, NcclType<T>::id, ncclSum, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}
template <typename T> static void tp_reduce(TensorParallel *tp, T *buf, size_t n, int root, const char *what) {
    ncclCheck(ncclReduce(buf, buf, n, NcclType<T>::id, ncclSum, root, comm_get(COMM_TP), tp->stream));
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

// An all-gather the compute stream needs at once: forked from it and joined (its whole time counts as exposed).
template <typename T>
static void tp_all_gather_joined(TensorParallel *tp, T *buf, size_t n, cudaStream_t compute, const char *what) {
    tp_fork(tp, compute);
    tp_all_gather(tp, buf, n, what);
    tp_join(tp, compute, what);
}

// In place on the device: x[0..n) summed over the TP group (the squared norm of this rank's parameter slices).
static void tp_sum_on_device(TensorParallel *tp, double *x, int n, cudaStream_t compute) {
    const char *what = "the all-reduce of the squared gradient norm over the tensor-parallel ranks";
    tp_fork(tp, compute);
    tp_all_reduce(tp, x, (size_t)n, what);
    tp_join(tp, compute, what);
}

#endif // LLMC_TENSOR_PARALLEL_CUH
