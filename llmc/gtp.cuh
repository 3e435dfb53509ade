/*
 * gtp.cuh: GTP weight sharding on the GPU (llmc/gtp_plan.h has the arithmetic and the chain): the all-gathers that
 * materialize a sharded weight into a pool buffer before its layer runs, and the reduce-scatters that leave each rank
 * its shard of a weight gradient.
 *
 * Two streams of their own, so neither kind of collective queues behind the other or behind TP's: AG (gathers, on
 * COMM_GTP) and RS (reduce-scatters, on COMM_GTP_RS: a communicator serves one stream). Every dependency is an event:
 *   gather into buffer b: AG waits released[b] (the compute stream recorded it after the last GEMM that read the
 *     buffer's previous weight) and, for the first forward after an update, the weight's AdamW group; then the
 *     all-gather of the G shards (and for an FP8 weight in the backward the transposed copy of the gathered codes);
 *     gathered[b] after it. The compute stream waits for gathered[b] before the weight's first GEMM (timed: a gather
 *     the compute stream waits for is exposed communication).
 *   weight gradient: the GEMM writes the whole (padded) gradient into an RS buffer on the compute stream (on the
 *     micro-steps after the first it adds to what gtp_rs_buffer put there: this rank's shard gradient so far at its
 *     rows), RS waits for it, reduce-scatters it over the GTP group into this rank's fp32 shard gradient, and records
 *     rs_done[b], which the compute stream waits for before the buffer takes another gradient. gtp_rs_mark lets a
 *     reader of the shard gradients (grads_final) wait for all reduce-scatters queued so far.
 *   all-reduce over the group (the squared norm of the shards' gradients, the shards' amaxes of an FP8 weight under
 *     current scaling): on the RS stream, which is idle from the end of a backward to the next one's first
 *     reduce-scatter, behind what the calling stream queued; the caller's stream waits for its event.
 * The pool's buffers are bytes: a weight is gathered in its compute precision, or as FP8 codes (llmc/gtp_plan.h).
 * With one rank (--gtp-materialize under --gtp 1) the same calls run through a communicator of one rank: a gather and
 * a reduce-scatter are copies, and the run gives the plain path's bits (test/run_gpu_tests.sh checks it).
 */
#ifndef LLMC_GTP_CUH
#define LLMC_GTP_CUH

#include "comm.cuh"
#include "fp8.cuh"
#include "gtp_plan.h"

#define GTP_RS_BUFFERS 2 // one gradient reduce-scattered while the next GEMM writes the other

typedef struct {
    int active;             // the GTP path runs: --gtp > 1, or --gtp-materialize
    int size, rank;         // the GTP group
    cudaStream_t ag, rs;
    GtpChain chain;
    GtpPass pass;
    int depth;
    uint8_t *slot[GTP_PREFETCH_MAX + 1]; // the pool: materialized weights, gtp_buffer_bytes each
    cudaEvent_t gathered[GTP_PREFETCH_MAX + 1], released[GTP_PREFETCH_MAX + 1];
    float *rs_buf[GTP_RS_BUFFERS];    // whole weight gradients, the largest padded one each
    cudaEvent_t rs_ready[GTP_RS_BUFFERS], rs_done[GTP_RS_BUFFERS];
    int rs_next;
    cudaEvent_t rs_mark, compute_mark, reduce_from, reduced;
} Gtp;

// slot_bytes: a pool buffer (gtp_buffer_bytes); gathered_elems: the largest padded weight (G x shard rows x cols).
static void gtp_init(Gtp *g, const Mesh *m, int materialize, int depth, size_t slot_bytes, size_t gathered_elems) {
    memset(g, 0, sizeof(*g));
    g->active = m->gtp > 1 || materialize;
    g->size = m->gtp;
    g->rank = m->gtp_rank;
    if (!g->active) { return; }
    g->depth = depth;
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g->ag, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g->rs, cudaStreamNonBlocking, greatest));
    for (int b = 0; b <= depth; b++) {
        g->slot[b] = (uint8_t *)cuda_alloc(slot_bytes, "GTP materialized weights");
        cudaCheck(cudaEventCreateWithFlags(&g->gathered[b], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&g->released[b], cudaEventDisableTiming));
    }
    for (int b = 0; b < GTP_RS_BUFFERS; b++) {
        g->rs_buf[b] = (float *)cuda_alloc(gathered_elems * sizeof(float), "GTP weight gradients");
        cudaCheck(cudaEventCreateWithFlags(&g->rs_ready[b], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&g->rs_done[b], cudaEventDisableTiming));
    }
    for (cudaEvent_t *e : {&g->rs_mark, &g->compute_mark, &g->reduce_from, &g->reduced}) {
        cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
}

// The AG stream starts after what the compute stream has queued so far.
static void gtp_after_compute(Gtp *g, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(g->compute_mark, compute));
    cudaCheck(cudaStreamWaitEvent(g->ag, g->compute_mark, 0));
}

// An FP8 weight the backward reads: the transpose of its gathered rows x cols codes, at byte `at` of the buffer.
typedef struct {
    int rows, cols;
    size_t at;
} GtpTransposed;

// Gathers the G shards of a weight (shard_bytes each; this rank's at `shard`) into buffer b, after `after` (an
// update's event, or NULL) and after the buffer's previous weight was released; with t, the transposed copy of the
// gathered FP8 codes is made too before the buffer counts as gathered. An all-gather moves bits, not values, so bytes
// carry any element type (NCCL itself runs every all-gather as one of bytes).
static void gtp_gather(Gtp *g, int b, const void *shard, size_t shard_bytes, const GtpTransposed *t, cudaEvent_t after,
                       const char *what) {
    cudaCheck(cudaStreamWaitEvent(g->ag, g->released[b], 0));
    if (after) { cudaCheck(cudaStreamWaitEvent(g->ag, after, 0)); }
    ncclCheck(ncclAllGather(shard, g->slot[b], shard_bytes, ncclUint8, comm_get(COMM_GTP), g->ag));
    comm_settle(comm_get(COMM_GTP), what, g_comm.timeout_s);
    if (t) { fp8_transpose(g->slot[b], g->slot[b] + t->at, t->rows, t->cols, g->ag); }
    cudaCheck(cudaEventRecord(g->gathered[b], g->ag));
    comm_track(g->gathered[b], what);
}

// The compute stream waits until buffer b holds its weight.
static void gtp_wait_gathered(Gtp *g, int b, cudaStream_t compute) { comm_compute_wait(compute, g->gathered[b]); }

// Buffer b's weight is read by nothing queued after this on the compute stream.
static void gtp_release(Gtp *g, int b, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(g->released[b], compute));
}

// Zeroes n floats at p on the stream (none when n is 0).
static void gtp_zero(float *p, size_t n, cudaStream_t stream) {
    if (n > 0) { cudaCheck(cudaMemsetAsync(p, 0, n * sizeof(float), stream)); }
}

/*
 * The next RS buffer, once its previous gradient was reduce-scattered, made ready for the GEMM that writes this
 * rank's whole gradient of a weight of shape s into it (its rows x cols; another weight's gradient may have left
 * values anywhere). On the first micro-step of a step (!accumulate) the GEMM writes (beta 0) and only the padding
 * rows are zeroed. On the others it adds (beta 1) to what is here: this rank's shard gradient so far (shard_grad) at
 * the shard's rows, zeros at the other ranks', so the reduce-scatter that follows leaves the shard so far plus every
 * rank's new gradient in shard_grad. With one rank that is the plain path's own GEMM, beta and C: its bits whatever
 * the GEMM's epilogue rounds (an FP8 GEMM scales its sum before adding C, where a separate add after a GEMM with
 * beta 0 could round differently from one fused multiply-add).
 */
static float *gtp_rs_buffer(Gtp *g, const GtpShape *s, const float *shard_grad, int accumulate, cudaStream_t compute) {
    int b = g->rs_next;
    float *buf = g->rs_buf[b];
    size_t real = s->rows * s->cols, padded = s->padded_rows * s->cols, shard = s->shard_rows * s->cols;
    comm_compute_wait(compute, g->rs_done[b]);
    if (!accumulate) {
        gtp_zero(buf + real, padded - real, compute);
        return buf;
    }
    size_t mine = (size_t)g->rank * shard; // the shard's first element: the reduce-scatter's block of this rank
    gtp_zero(buf, mine, compute);
    cudaCheck(cudaMemcpyAsync(buf + mine, shard_grad, shard * sizeof(float), cudaMemcpyDeviceToDevice, compute));
    gtp_zero(buf + mine + shard, padded - mine - shard, compute);
    return buf;
}

// The gradient the compute stream just wrote into the current RS buffer (gtp_rs_buffer), summed over the GTP group
// into this rank's shard gradient (shard_elems long).
static void gtp_reduce_scatter(Gtp *g, float *shard_grad, size_t shard_elems, cudaStream_t compute, const char *what) {
    int b = g->rs_next;
    g->rs_next = (b + 1) % GTP_RS_BUFFERS;
    cudaCheck(cudaEventRecord(g->rs_ready[b], compute));
    cudaCheck(cudaStreamWaitEvent(g->rs, g->rs_ready[b], 0));
    ncclCheck(ncclReduceScatter(g->rs_buf[b], shard_grad, shard_elems, ncclFloat32, ncclSum, comm_get(COMM_GTP_RS),
                                g->rs));
    comm_settle(comm_get(COMM_GTP_RS), what, g_comm.timeout_s);
    cudaCheck(cudaEventRecord(g->rs_done[b], g->rs));
    comm_track(g->rs_done[b], what);
}

// An event behind every reduce-scatter queued so far (NULL when the path is off).
static cudaEvent_t gtp_rs_mark(Gtp *g) {
    if (!g->active) { return NULL; }
    cudaCheck(cudaEventRecord(g->rs_mark, g->rs));
    return g->rs_mark;
}

// In place on the device: x[0..n) (of `type`) reduced with op over the GTP group, on the RS stream behind what
// `stream` queued so far. Returns the event behind it, which the reader's stream waits for.
static cudaEvent_t gtp_all_reduce(Gtp *g, void *x, size_t n, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream,
                                  const char *what) {
    cudaCheck(cudaEventRecord(g->reduce_from, stream));
    cudaCheck(cudaStreamWaitEvent(g->rs, g->reduce_from, 0));
    ncclCheck(ncclAllReduce(x, x, n, type, op, comm_get(COMM_GTP_RS), g->rs));
    comm_settle(comm_get(COMM_GTP_RS), what, g_comm.timeout_s);
    cudaCheck(cudaEventRecord(g->reduced, g->rs));
    comm_track(g->reduced, what);
    return g->reduced;
}

#endif // LLMC_GTP_CUH
