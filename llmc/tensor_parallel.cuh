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
 *
 * SP over the ring (--sp-overlap 1; llmc/peer_ring.cuh's transports, --sp-transport: ce where the group's GPUs map
 * each other's memory, copy-engine copies; nccl, NCCL send/recv): the all-gathers and reduce-scatters run as rings of
 * exchanges with the ring neighbours on the ring's stream (llmc/ring_schedule.h says which chunk moves when), and
 * those next to a GEMM run chunk by chunk beside it, as TransformerEngine's comm-GEMM overlap does:
 *   all-gather + GEMM (a column-parallel forward, which gathers its own input: linear_forward; a row-parallel input
 *     gradient, whose output gradient's gather linear_backward_gather started): the GEMM runs on one chunk of N/TP
 *     tokens at a time, this rank's own first, each next one as it arrives (arrived[k]), writing its output rows in
 *     place: the same GEMM, row block by row block.
 *   GEMM + reduce-scatter (a row-parallel forward, a column-parallel input gradient): the GEMM runs chunk by chunk
 *     in the ring's order; the ring stream adds each chunk's product to the partial sum its predecessor sent (in
 *     fp32, rounded to the activation type at each hop, as NCCL's ring sums bf16) and passes it on; after TP - 1
 *     hops each rank holds its own chunk's sum.
 * Every other all-gather and reduce-scatter of the group (the embeddings' sum, the final norm's gather, FP8 layers
 * whose casts need a whole tensor, checkpoint gathers) runs over the same ring as one collective on the TP stream's
 * order (the ring stream waits for the TP stream and the TP stream for it), so callers see no difference; all-reduces
 * stay NCCL's. An FP8 layer is cut by rows unless its casts need the whole tensor's amax (current scaling, and
 * delayed scaling's first step); cut by rows, a column-parallel FP8 layer gathers its input as E4M3 codes, half the
 * bytes of bf16 (linear_gathers_codes).
 */
#ifndef LLMC_TENSOR_PARALLEL_CUH
#define LLMC_TENSOR_PARALLEL_CUH

#include "comm.cuh"
#include "forward_chunks.h"
#include "matmul.cuh"
#include "peer_ring.cuh"
#include "ring_schedule.h"

typedef struct TensorParallel {
    int size, rank;     // the TP group
    int sp;             // sequence parallelism
    int gather_pending; // an output-gradient all-gather was started for the next row-parallel backward
    cudaStream_t stream;
    cudaEvent_t compute_mark;
    CommSignal tp_mark;                         // the TP stream's collectives so far (tp_join)
    CommSignal chunk_done[TP_SEQUENCE_CHUNKS];  // the last collective queued for each chunk of the forward
    const char *chunk_what[TP_SEQUENCE_CHUNKS]; // and what it is
    // SP over the ring (tp_ring_connect)
    int ring_up;
    int fp8_codes;                 // FP8 layers whose forward runs by rows gather their input as E4M3 codes
    int rs_pieces;                 // a reduce-scatter's products move in this many pieces (tp_ring_reduce_scatter)
    PeerRing ring;
    cudaEvent_t ring_in, ring_out; // the TP stream's order into the ring's stream, and back
    CommSignal *arrived;           // (size) all-gather: step k's chunk in place
    cudaEvent_t *made;             // (size) reduce-scatter: step k's product made, for the ring's stream
    CommSignal sent;               // a reduce-scatter's sends done (they read the parts the producer may write next)
} TensorParallel;

static void tp_init(TensorParallel *tp, const Mesh *m, int sp) {
    memset(tp, 0, sizeof(*tp));
    tp->size = m->tp;
    tp->rank = m->tp_rank;
    tp->sp = sp && m->tp > 1;
    tp->rs_pieces = 1;
    if (tp->size == 1) { return; }
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&tp->stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&tp->compute_mark, cudaEventDisableTiming));
    comm_signal_create(&tp->tp_mark);
    for (int k = 0; k < TP_SEQUENCE_CHUNKS; k++) { comm_signal_create(&tp->chunk_done[k]); }
}

static inline int tp_active(const TensorParallel *tp) { return tp && tp->size > 1; }

// SP's collectives run over the ring.
static inline int tp_ring(const TensorParallel *tp) { return tp_active(tp) && tp->ring_up; }

static void tp_ring_events(TensorParallel *tp) {
    cudaCheck(cudaEventCreateWithFlags(&tp->ring_in, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&tp->ring_out, cudaEventDisableTiming));
    comm_signal_create(&tp->sent);
    tp->arrived = (CommSignal *)calloc_check((size_t)tp->size, sizeof(CommSignal), "ring chunk signals");
    tp->made = (cudaEvent_t *)calloc_check((size_t)tp->size, sizeof(cudaEvent_t), "ring product events");
    for (int k = 0; k < tp->size; k++) {
        comm_signal_create(&tp->arrived[k]);
        cudaCheck(cudaEventCreateWithFlags(&tp->made[k], cudaEventDisableTiming));
    }
}

/*
 * Under SP, with overlap asked for: SP's collectives over the ring, in slots of part_bytes (the largest part one
 * moves: N/TP tokens of the residual stream), by the transport asked for: ce where every rank of the group can map
 * its neighbours' memory (else NCCL's collectives), nccl wherever NCCL runs; with fp8_codes (an FP8 model with
 * delayed scaling, --sp-fp8-codes 1) FP8 layers gather their inputs as E4M3 codes once the history gives their scales
 * (linear_gathers_codes); a reduce-scatter's products move in rs_pieces pieces of rows, each sent as soon as its
 * part of the GEMM is made (tp_ring_reduce_scatter); rank 0 says which. Every rank calls it (ce's set-up ends with
 * a barrier of every rank; nccl's splits the TP group's communicator).
 */
static void tp_ring_connect(TensorParallel *tp, int overlap, RingTransport transport, size_t part_bytes, int fp8_codes,
                            int rs_pieces, int log) {
    if (!tp_active(tp) || !tp->sp) { return; }
    const char *why = "--sp-overlap 0";
    if (overlap && transport == RING_NCCL) {
        peer_ring_connect_nccl(&tp->ring, tp->size, tp->rank, part_bytes);
        tp->ring_up = 1;
    } else if (overlap) {
        tp->ring_up = peer_ring_connect(&tp->ring, tp->size, tp->rank, part_bytes, COMM_TP);
        why = "peers cannot map each other's memory; --sp-transport nccl runs the ring over NCCL send/recv there";
    }
    if (tp->ring_up) {
        tp_ring_events(tp);
        tp->fp8_codes = fp8_codes;
        tp->rs_pieces = rs_pieces;
    }
    if (!log) { return; }
    if (!tp->ring_up) {
        printf("SP collectives: NCCL (%s)\n", why);
        return;
    }
    printf("SP collectives: ring exchange over %s, %.1f MB slots, reduce-scatters in %d pieces%s\n",
           transport == RING_NCCL ? "NCCL send/recv (wherever NCCL connects the ranks)" : "peer memory (copy engines)",
           tp->ring.slot_bytes / 1e6, rs_pieces,
           fp8_codes ? "; FP8 layers gather their inputs as E4M3 codes (scales from the history)" : "");
}

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
    comm_signal(&tp->tp_mark, tp->stream);
    comm_track(tp->tp_mark.event, what);
    comm_compute_wait(compute, &tp->tp_mark, what);
}

// Chunk k's collective, just queued on the TP stream, is the one tp_chunk_wait(k) waits for. The caller waits for
// each before it queues the chunk's next (the forward reads each result before it writes the chunk's rows again).
static void tp_chunk_mark(TensorParallel *tp, int k, const char *what) {
    comm_signal(&tp->chunk_done[k], tp->stream);
    comm_track(tp->chunk_done[k].event, what);
    tp->chunk_what[k] = what;
}
static void tp_chunk_wait(TensorParallel *tp, cudaStream_t compute, int k) {
    if (tp_active(tp)) { comm_compute_wait(compute, &tp->chunk_done[k], tp->chunk_what[k]); }
}

// The collectives, on the TP stream, in place but for reduce-scatter. n counts elements of the whole buffer for
// all-reduce, and of one rank's part for all-gather and reduce-scatter (rank r's part at buf + r n).
template <typename T> static void tp_all_reduce(TensorParallel *tp, T *buf, size_t n, const char *what) {
    ncclCheck(ncclAllReduce(buf, buf, n, NcclType<T>::id, ncclSum, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}
// ----------------------------------------------------------------------------------------------------------------
// the ring's collectives (llmc/ring_schedule.h over llmc/peer_ring.cuh), on the ring's stream behind its work so far

// dst = a + b, n elements (n % Packed<T>::N == 0, 16-byte aligned): a hop of the ring's reduce-scatter, summed in fp32
// and rounded to T.
template <typename T>
__global__ void __launch_bounds__(256) ring_add_kernel(T *dst, const T *a, const T *b, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x * Packed<T>::N;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * Packed<T>::N; i < n; i += stride) {
        Packed<T> x = load_packed(a + i), y = load_packed(b + i), z;
        for (int j = 0; j < Packed<T>::N; j++) { z.set(j, x[j] + y[j]); }
        store_packed(dst + i, z);
    }
}

#define RING_PIECE_ROWS FP8_TILE_ROWS // a product's pieces are cut at whole FP8 cast tiles (its codes are cast by tile)
#define RING_ADD_THREADS 256
#define RING_ADD_MAX_BLOCKS 132 // a wave of an H100: the add is short, it need not take the GEMM's SMs for long

template <typename T> static void ring_add(T *dst, const T *a, const T *b, size_t n, cudaStream_t s) {
    if (n % Packed<T>::N) { fail("ring_add: %zu elements, not a multiple of %d", n, Packed<T>::N); }
    int blocks = grid_for(n / Packed<T>::N, RING_ADD_THREADS);
    blocks = blocks < RING_ADD_MAX_BLOCKS ? blocks : RING_ADD_MAX_BLOCKS;
    ring_add_kernel<<<blocks > 0 ? blocks : 1, RING_ADD_THREADS, 0, s>>>(dst, a, b, n);
    cudaCheckLaunch();
}

/*
 * In place: every rank's part of buf (part_bytes each, rank r's at buf + r part_bytes) to every rank, around the ring:
 * at step j each rank exchanges the part it got at step j - 1 (its own at step 0) for the one that comes, which lands
 * in place (nccl) or is copied there from the slot (ce); arrived[k] fires once the part the rank takes at step k
 * (ring_ag_chunk) is in place, k = 1 .. TP-1. A part larger than a slot moves in pieces, an exchange each. With a
 * consumer stream, consume(k, part) queues there the work that reads step k's part at `part` (a GEMM's block of rows),
 * behind a wait this queues first, called in order as the ring's work for that part is queued (so on a hardware queue
 * the ring's stream shares, the ring's waits queue behind the work that needs no data of theirs). A part that ce
 * lands whole in a slot is read there: the consumer waits for its flag alone, not for its copy into place beside it
 * (which later steps forward and later passes read), and frees the slot once both are done.
 */
template <typename Consume>
static void tp_ring_all_gather(TensorParallel *tp, char *buf, size_t part_bytes, cudaStream_t consumer,
                               Consume consume, const char *what) {
    PeerRing *r = &tp->ring;
    int P = tp->size, me = tp->rank;
    bool in_slot = consumer && r->transport == RING_CE && part_bytes <= r->slot_bytes;
    if (consumer) { consume(0, buf + (size_t)me * part_bytes); }
    for (int j = 0; j < P - 1; j++) {
        char *place = buf + (size_t)ring_ag_chunk(me, j + 1, P) * part_bytes;
        const void *in = NULL;
        for (size_t off = 0; off < part_bytes; off += r->slot_bytes) {
            size_t bytes = part_bytes - off < r->slot_bytes ? part_bytes - off : r->slot_bytes;
            peer_ring_exchange(r, buf + (size_t)ring_ag_chunk(me, j, P) * part_bytes + off, bytes, place + off, what);
            in = peer_ring_received(r, r->stream, what);
            if (in != place + off) {
                cudaCheck(cudaMemcpyAsync(place + off, in, bytes, cudaMemcpyDeviceToDevice, r->stream));
            }
            if (!in_slot) { peer_ring_release(r, r->stream); }
        }
        comm_signal(&tp->arrived[j + 1], r->stream);
        if (!consumer) { continue; }
        if (in_slot) {
            peer_ring_received(r, consumer, what);
            consume(j + 1, (const char *)in);
            comm_compute_wait(consumer, &tp->arrived[j + 1], what); // the copy into place has read the slot too
            peer_ring_release(r, consumer);
        } else {
            comm_compute_wait(consumer, &tp->arrived[j + 1], what);
            consume(j + 1, place);
        }
    }
    if (P > 1) { comm_track(tp->arrived[P - 1].event, what); }
}

/*
 * The parts of buf (P of n elements: rows rows of n / rows) summed over the group into this rank's part, or into mine
 * where given (n elements), around the ring: produce(c, r0, r1) makes rows [r0, r1) of part c on the producer's
 * stream (a GEMM's rows; nothing where buf is whole already), called in the ring's order (ring_rs_chunk), and the
 * ring's stream, as each is made, adds it to the partial sum its predecessor sent and sends the sum on. A part the
 * ring sends on is made and sent in tp->rs_pieces pieces of rows, each sent as soon as it is made and added as soon
 * as its piece of the partial sum has landed, so a transfer starts after a piece of its GEMM, not all of it. The last
 * step's sum, this rank's own part, is made on the producer's stream, which made its product (whole) and whose next
 * work reads the sum: there it queues beside() (the caller's work that needs no sum: a backward's deferred weight
 * gradients), then waits for the predecessor's partial sum itself, piece by piece, and its adds do not run beside
 * (starved by) the GEMMs that follow. Part c is summed in one order (rank c + 1 first, c last), in fp32
 * rounded to T at each hop. The other parts of buf are left holding partial sums. A part larger than a slot is made
 * whole first and moves in slot-sized transfers, one whole ring each (a step's sends of several transfers before their
 * receives would wait for slots the successor frees only in its next step). ring_out is recorded on the producer's
 * stream once the sum is whole and every send that read buf is done.
 */
// Work a caller queues beside a collective (none).
struct NoWork {
    void operator()() const {}
};

template <typename T, typename Produce, typename Beside = NoWork>
static void tp_ring_reduce_scatter(TensorParallel *tp, T *buf, T *mine, size_t n, size_t rows, cudaStream_t producer,
                                   Produce produce, const char *what, Beside beside = Beside()) {
    PeerRing *r = &tp->ring;
    int P = tp->size, me = tp->rank;
    size_t cols = rows ? n / rows : 0, per_transfer = cols ? r->slot_bytes / sizeof(T) / cols * cols : 0;
    if (!rows || n % rows || per_transfer == 0) {
        fail("tp_ring_reduce_scatter: parts of %zu elements in %zu rows do not fit slots of %zu bytes", n, rows,
             r->slot_bytes);
    }
    bool one_transfer = n <= per_transfer;
    int pieces = one_transfer ? tp->rs_pieces : 1;
    if (!one_transfer) {
        for (int k = 0; k < P; k++) { produce(ring_rs_chunk(me, k, P), (size_t)0, rows); }
        cudaCheck(cudaEventRecord(tp->made[0], producer));
        cudaCheck(cudaStreamWaitEvent(r->stream, tp->made[0], 0));
    }
    for (size_t off = 0; off < n; off += per_transfer) {
        size_t m = n - off < per_transfer ? n - off : per_transfer;
        for (int k = 0; k < P; k++) {
            int c = ring_rs_chunk(me, k, P);
            bool last = k == P - 1;
            T *part = buf + (size_t)c * n + off;
            T *dst = last && mine ? mine + off : part; // the last step's part is this rank's own
            cudaStream_t s = last ? producer : r->stream;
            if (one_transfer && last) { produce(c, (size_t)0, rows); }
            if (last && off == 0) { beside(); } // while the last partial sums travel
            for (int p = 0; p < pieces; p++) {
                size_t r0 = ring_piece_first(m / cols, RING_PIECE_ROWS, pieces, p);
                size_t r1 = r0 + ring_piece_rows(m / cols, RING_PIECE_ROWS, pieces, p), e0 = r0 * cols;
                size_t e = (r1 - r0) * cols;
                if (one_transfer && !last) { // this piece of the product, then the ring's work on it
                    if (r1 > r0) { produce(c, r0, r1); }
                    cudaCheck(cudaEventRecord(tp->made[k], producer));
                    cudaCheck(cudaStreamWaitEvent(r->stream, tp->made[k], 0));
                }
                if (k > 0) { // piece p of the partial sum of exchange k - 1
                    const T *in = NULL;
                    in = (const T *)peer_ring_received_piece(r, s, p, what);
                    if (e) { ring_add(dst + e0, in + e0, part + e0, e, s); }
                } else if (dst != part && e) { // a ring of one
                    cudaCheck(cudaMemcpyAsync(dst + e0, part + e0, e * sizeof(T), cudaMemcpyDeviceToDevice, s));
                }
                if (!last) { // transfer k: the one after k - 1, which this step receives and releases after it
                    peer_ring_send_piece(r, k > 0, p, pieces, dst, e0 * sizeof(T), e * sizeof(T), NULL, what);
                }
            }
            if (k > 0) { peer_ring_release(r, s); }
        }
    }
    // the ring's sends read parts of buf that the producer's next work may write
    comm_signal(&tp->sent, r->stream);
    comm_compute_wait(producer, &tp->sent, what);
    cudaCheck(cudaEventRecord(tp->ring_out, producer));
    comm_track(tp->ring_out, what);
}

// A ring collective in the TP stream's order: the ring's stream starts after the TP stream's work so far, and the TP
// stream goes on after the ring's.
static void tp_ring_enter(TensorParallel *tp) {
    cudaCheck(cudaEventRecord(tp->ring_in, tp->stream));
    cudaCheck(cudaStreamWaitEvent(tp->ring.stream, tp->ring_in, 0));
}
static void tp_ring_leave(TensorParallel *tp, const char *what) {
    cudaCheck(cudaEventRecord(tp->ring_out, tp->ring.stream));
    comm_track(tp->ring_out, what);
    cudaCheck(cudaStreamWaitEvent(tp->stream, tp->ring_out, 0));
}

// ----------------------------------------------------------------------------------------------------------------
// the group's collectives on the TP stream (over the ring where it is up, but all-reduces)

template <typename T> static void tp_all_gather(TensorParallel *tp, T *buf, size_t n, const char *what) {
    if (tp_ring(tp)) {
        tp_ring_enter(tp);
        tp_ring_all_gather(tp, (char *)buf, n * sizeof(T), (cudaStream_t)NULL, [](int, const char *) {}, what);
        tp_ring_leave(tp, what);
        return;
    }
    ncclCheck(ncclAllGather(buf + (size_t)tp->rank * n, buf, n, NcclType<T>::id, comm_get(COMM_TP), tp->stream));
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
}
// recv may be send + rank n (in place) or another buffer of n elements. Over the ring the other parts of send are
// left holding partial sums.
template <typename T> static void tp_reduce_scatter(TensorParallel *tp, T *send, T *recv, size_t n, const char *what) {
    if (tp_ring(tp)) {
        tp_ring_enter(tp);
        T *mine = recv == send + (size_t)tp->rank * n ? (T *)NULL : recv;
        tp_ring_reduce_scatter(tp, send, mine, n, n / Packed<T>::N, tp->ring.stream, [](int, size_t, size_t) {}, what);
        cudaCheck(cudaStreamWaitEvent(tp->stream, tp->ring_out, 0));
        return;
    }
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

// A collective of the layer, as timeouts and the exposed-communication report name it: what (its name).
template <typename T> static const char *linear_what(const Linear<T> &lin, const char *what) {
    return lin.name ? comm_site(what, lin.name) : what;
}
static const char *const OUTPUT_GRAD_GATHER =
    "the tensor-parallel all-gather of a row-parallel layer's output gradient";
static const char *const INPUT_GRAD_SUM = "the tensor-parallel sum of a column-parallel layer's input gradient";

template <typename T> static bool linear_is(const Linear<T> &lin, LinearSplit split) {
    return lin.split == split && tp_active(lin.tp);
}

// Whether the layer's forward GEMM may run a block of rows at a time beside the ring: not an FP8 layer whose input
// cast needs the whole tensor's amax first (current scaling, and delayed scaling's first step, which has no history
// yet: a cast of each block by its own amax would leave the kept input codes in several scales under one scale_inv).
// Its input gradient, in blocks of block_rows: the same for the output gradient's cast (fp8_dgrad_by_rows).
template <typename T> static bool linear_forward_by_rows(const Linear<T> &lin) {
    return !lin.fp8 || !fp8_scales_current(lin.fp8->dev);
}
template <typename T> static bool linear_dgrad_by_rows(const Linear<T> &lin, int block_rows) {
    return !lin.fp8 || fp8_dgrad_by_rows(lin.fp8->dev, block_rows);
}

/*
 * Whether a column-parallel FP8 layer's forward over the ring gathers its input as E4M3 codes (1 byte an element)
 * instead of the LayerNorm's activations (2 bytes in bf16), as TransformerEngine's userbuffers do: each rank casts
 * its own rows once (fp8_linear_cast_input, codes only: the ring's first transfer waits for nothing else), the ring
 * gathers the codes into the layer's codes (Fp8Linear::x), and each chunk's GEMM reads them as they arrive; the
 * transposed copy's columns of every chunk's rows, this rank's too, are made from its codes after its GEMM
 * (fp8_linear_keep_input), beside the next chunk's transfer. Only where the forward runs by rows
 * (linear_forward_by_rows: scales from the history) and the layer casts and keeps its own input (fp8_input_as_codes:
 * qkv and fc, Llama's [gate | up] too).
 * The same bits as gathering the activations and casting every row on every rank (--sp-fp8-codes 0): a cast is
 * elementwise, q = fp8(x scale), and the scale is the history's, the same on every rank (the step's amaxes are maxed
 * over the world before they enter the history), so the owner's codes of its rows are the bytes every rank's cast of
 * them would write, and the transpose of those codes the bytes the cast writes transposed; the GEMMs read the same
 * codes in the same blocks. The amax a rank records covers its own rows only, where the bf16 gather's covered all N;
 * its one reader, the end of the step, takes the max over the world first, which is the same.
 */
template <typename T> static bool linear_gathers_codes(const Linear<T> &lin) {
    return lin.fp8 && tp_ring(lin.tp) && lin.tp->fp8_codes && linear_forward_by_rows(lin) &&
           fp8_input_as_codes(lin.fp8);
}

/*
 * Rows [f.row, f.row + f.rows) of forward chunk f (llmc/forward_chunks.h): out = inp W^T + b; with gelu_aux:
 * gelu_aux = that, and out = gelu(that). Column-parallel under SP, inp holds this rank's tokens only (its LayerNorm's
 * rows): the layer all-gathers them in place first, over the ring chunk by chunk beside the GEMM (an FP8 layer's
 * codes instead where linear_gathers_codes: then the other ranks' rows of inp stay as they were), else with NCCL and
 * waited for. Row-parallel: TP rank 0 adds the bias, and the sum over the TP group is started on the TP stream (over
 * the ring: the GEMM chunk by chunk in the ring's order beside the pipelined reduce-scatter) and marked as the chunk's
 * collective (tp_chunk_sum); the caller waits for it (tp_chunk_wait) before it reads out. Under SP it goes onto the
 * rows' owners: then only this rank's tokens of out are valid. make_input(r0, r1), where given, queues the work that
 * writes inp's rows [r0, r1) right before the GEMM that reads them (a row-parallel layer over the ring: the attention
 * output of the chunk the ring sends first is made first, and the rest beside its transfer).
 */
// Whether the layer's forward GEMM runs chunk by chunk beside the ring's pipelined reduce-scatter (row-parallel under
// SP over the ring, the GEMM cut by rows): then make_input is called for each chunk's rows, in the ring's order.
template <typename T> static bool linear_reduce_scatters_by_rows(const Linear<T> &lin) {
    return linear_is(lin, LINEAR_ROW) && lin.tp->sp && tp_ring(lin.tp) && linear_forward_by_rows(lin);
}

// Work that makes a layer's input rows [r0, r1) where the GEMM needs them (none: the input is made already).
struct NoRows {
    void operator()(int, int) const {}
};

template <typename T, typename MakeInput = NoRows>
static void linear_forward(const Linear<T> &lin, T *out, T *inp, T *gelu_aux, const ForwardChunk &f,
                           cudaStream_t stream, MakeInput make_input = MakeInput()) {
    TensorParallel *tp = lin.tp;
    bool row_parallel = linear_is(lin, LINEAR_ROW), column_sp = linear_is(lin, LINEAR_COLUMN) && tp->sp;
    const T *bias = row_parallel && tp->rank != 0 ? NULL : lin.b;
    auto gemm_rows = [&](int r0, int r1, const T *rows_in) { // rows_in: row r0's input
        linear_rows_forward(lin, bias, out, rows_in, r0, r1, f.tokens, gelu_aux, stream);
    };
    auto gemm_all = [&](int r0, int r1) {
        make_input(r0, r1);
        gemm_rows(r0, r1, inp + (size_t)r0 * lin.in);
    };
    int P = tp_active(tp) ? tp->size : 1, n = f.ln_rows; // under SP: rows a rank owns
    if (column_sp && tp_ring(tp)) {
        const char *what = linear_what(lin, "the tensor-parallel ring all-gather of a column-parallel layer's input");
        bool by_rows = linear_forward_by_rows(lin), codes = linear_gathers_codes(lin);
        char *gathered = (char *)(inp + (size_t)f.row * lin.in);
        size_t part = (size_t)n * lin.in * sizeof(T);
        if (codes) { // this rank's rows cast once; their codes travel
            int mine = f.row + tp->rank * n;
            fp8_linear_cast_input(lin, inp + (size_t)mine * lin.in, mine, n, f.tokens, false, stream);
            gathered = (char *)(lin.fp8->x + (size_t)f.row * lin.in);
            part = (size_t)n * lin.in;
        }
        cudaCheck(cudaEventRecord(tp->compute_mark, stream)); // this rank's rows (or codes) are written
        cudaCheck(cudaStreamWaitEvent(tp->ring.stream, tp->compute_mark, 0));
        tp_ring_all_gather(tp, gathered, part, by_rows ? stream : (cudaStream_t)NULL, [&](int k, const char *rows) {
            int r0 = f.row + ring_ag_chunk(tp->rank, k, P) * n;
            if (!codes) {
                gemm_rows(r0, r0 + n, (const T *)rows);
                return;
            }
            const uint8_t *x = (const uint8_t *)rows;
            fp8_linear_rows_gemm(lin, bias, out, x, gelu_aux, r0, n, f.tokens, stream);
            fp8_linear_keep_input(lin, x, r0, n, f.tokens, stream);
        }, what);
        if (!by_rows) { // the whole GEMM once every part is in
            comm_compute_wait(stream, &tp->arrived[P - 1], what);
            gemm_all(f.row, f.row + f.rows);
        }
        return;
    }
    if (column_sp) {
        tp_chunk_gather(tp, inp, lin.in, f, stream,
                        linear_what(lin, "the tensor-parallel gather of a column-parallel layer's input"));
        tp_chunk_wait(tp, stream, f.k);
    }
    if (linear_reduce_scatters_by_rows(lin)) {
        const char *what = linear_what(lin, "the tensor-parallel ring reduce-scatter of a row-parallel layer's output");
        T *rows = out + (size_t)f.row * lin.out;
        tp_ring_reduce_scatter(tp, rows, (T *)NULL, (size_t)n * lin.out, (size_t)n, stream,
                               [&](int c, size_t r0, size_t r1) { gemm_all(f.row + c * n + r0, f.row + c * n + r1); },
                               what);
        comm_signal(&tp->chunk_done[f.k], stream); // the sum is whole there (tp_ring_reduce_scatter)
        tp->chunk_what[f.k] = what;
        return;
    }
    gemm_all(f.row, f.row + f.rows);
    if (row_parallel) {
        const char *what = linear_what(lin, "the tensor-parallel sum of a row-parallel layer's output");
        tp_chunk_sum(tp, out, (T *)NULL, lin.out, f, stream, what);
    }
}

/*
 * Backward, given dout (N, lin.out), in parts, so that a caller can run weight gradients beside a collective:
 *   linear_backward_gather: row-parallel under SP, dout holds this rank's tokens only: starts their all-gather (in
 *     place) on the TP stream; dout must stay unchanged until linear_backward_weight. Nothing otherwise.
 *   linear_backward_input:  dinp = dout W (times gelu'(gelu_aux) when given: inp was gelu(gelu_aux); in an FP8
 *     fc projection gelu_aux is fc's output, whose activation's backward fp8_linear_dgrad casts), once the
 *     gather is in (over the ring: chunk by chunk as it comes in). Column-parallel under TP, dinp is then summed over
 *     the TP group (reduce-scattered under SP: only this rank's tokens of dinp are valid) on the TP stream, started
 *     and not waited for (linear_backward_input_sum; over the ring the GEMM runs chunk by chunk in the ring's order
 *     beside the reduce-scatter; the LM head, which writes dinp a chunk of rows at a time with linear_dgrad, starts it
 *     after the last). beside() is the caller's work to run beside that sum, queued once every GEMM of the layer's
 *     input gradient is (over the ring before the last hop's waits for the partial sums, which it then fills),
 *     else at the end.
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
    tp_gather_start(tp, dout, (size_t)(N / tp->size) * lin.out, stream, linear_what(lin, OUTPUT_GRAD_GATHER));
    tp->gather_pending = 1;
}

// The input gradient dinp (N, lin.in) summed over the TP group where the layer is column-parallel (reduce-scattered
// under SP), started on the TP stream once every row of it is written; linear_backward_join waits for it.
template <typename T> static void linear_backward_input_sum(const Linear<T> &lin, T *dinp, int N, cudaStream_t stream) {
    if (!linear_is(lin, LINEAR_COLUMN)) { return; }
    TensorParallel *tp = lin.tp;
    const char *what = linear_what(lin, INPUT_GRAD_SUM);
    tp_fork(tp, stream);
    if (tp->sp) {
        size_t mine = (size_t)(N / tp->size) * lin.in;
        tp_reduce_scatter(tp, dinp, dinp + tp->rank * mine, mine, what);
    } else {
        tp_all_reduce(tp, dinp, (size_t)N * lin.in, what);
    }
}

template <typename T, typename Beside = NoWork>
static void linear_backward_input(const Linear<T> &lin, T *dinp, const T *dout, const T *inp, const T *gelu_aux, int N,
                                  cudaStream_t stream, Beside beside = Beside()) {
    if (dinp == inp) { fail("linear_backward_input: dinp must not alias inp (the weight gradient reads it later)"); }
    TensorParallel *tp = lin.tp;
    int P = tp_active(tp) ? tp->size : 1, n = N / P;
    // rows [r0, r1) of dinp (gelu_aux's rows are linear_act_aux_cols wide: fc's [gate | up] under SwiGLU)
    auto dgrad_rows = [&](int r0, int r1) {
        const T *aux = gelu_aux ? gelu_aux + (size_t)r0 * linear_act_aux_cols(lin) : (const T *)NULL;
        linear_dgrad(lin, dinp + (size_t)r0 * lin.in, dout + (size_t)r0 * lin.out, aux, r1 - r0, stream, r0, N);
    };
    if (linear_gathers_output_grad(lin)) {
        if (!tp->gather_pending) { fail("linear_backward_input: the output gradient was not gathered first"); }
        tp->gather_pending = 0;
        if (tp_ring(tp) && linear_dgrad_by_rows(lin, n)) { // each chunk of dout as it arrives (tp_ring_all_gather)
            for (int k = 0; k < P; k++) {
                int c = ring_ag_chunk(tp->rank, k, P);
                if (k > 0) { comm_compute_wait(stream, &tp->arrived[k], linear_what(lin, OUTPUT_GRAD_GATHER)); }
                dgrad_rows(c * n, (c + 1) * n);
            }
            beside();
            return;
        }
        tp_join(tp, stream, linear_what(lin, OUTPUT_GRAD_GATHER));
    }
    if (linear_is(lin, LINEAR_COLUMN) && tp->sp && tp_ring(tp) && linear_dgrad_by_rows(lin, n)) {
        const char *what = linear_what(lin, "the tensor-parallel ring reduce-scatter of a column-parallel layer's "
                                            "input gradient");
        // the sum is made whole on the compute stream (tp_ring_reduce_scatter): linear_backward_join finds it done
        tp_ring_reduce_scatter(tp, dinp, (T *)NULL, (size_t)n * lin.in, (size_t)n, stream,
                               [&](int c, size_t r0, size_t r1) { dgrad_rows(c * n + r0, c * n + r1); }, what,
                               beside);
        return;
    }
    linear_dgrad(lin, dinp, dout, gelu_aux, N, stream);
    linear_backward_input_sum(lin, dinp, N, stream);
    beside();
}

template <typename T> static void linear_backward_join(const Linear<T> &lin, cudaStream_t stream) {
    if (linear_is(lin, LINEAR_COLUMN)) {
        tp_join(lin.tp, stream, linear_what(lin, INPUT_GRAD_SUM));
    }
}

#endif // LLMC_TENSOR_PARALLEL_CUH
