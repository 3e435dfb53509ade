/*
 * peer_ring.cuh: the transports of sequence parallelism's ring collectives (llmc/tensor_parallel.cuh), which move a
 * chunk from each TP rank to its successor (llmc/ring_schedule.h). Two, behind one exchange (--sp-transport):
 *   ce (the default): between the TP ranks of one node, receive buffers every rank maps into its ring neighbours'
 *     address space, chunk copies into them on copy engines (no SMs taken from the GEMMs), readiness flags in GPU
 *     memory;
 *   nccl: ncclSend / ncclRecv on a communicator of the TP group that serves the ring's stream alone (COMM_TP_RING):
 *     NCCL's kernels (a few SMs), wherever NCCL connects the ranks, across nodes too; no mapping, no flags.
 * The measurement decides which is the default (dev/bench_mgpu.sh, group sp: "ring ce / nccl p2p tokens/s").
 *
 * Each rank allocates one buffer: RING_FLAG_BYTES of flags (llmc/ring_schedule.h: ready[RING_SLOTS], written by its
 * predecessor, free[RING_SLOTS], written by its successor; the nccl transport leaves them unused), then RING_SLOTS
 * receive slots of slot_bytes. ce, at start-up (peer_ring_connect, over the TP communicator: llmc/peer_memory.cuh),
 * where every rank can map its successor's and its predecessor's memory, every rank exports its buffer and opens its
 * neighbours'; otherwise nothing is allocated and the caller keeps NCCL's collectives. nccl (peer_ring_connect_nccl):
 * the buffer and the communicator, split from the TP group's.
 *
 * A hop is an exchange: transfer t (the t-th of the ring's life) sends to the successor and receives the
 * predecessor's transfer t. NCCL's point-to-point needs each rank's send and receive posted together (every rank of a
 * ring sends first: ungrouped, each send would wait for a receive its successor has not posted), so the exchange is
 * one group; the ce transport's receive is a wait for a flag, which the caller queues where it needs the bytes (so
 * that on a hardware queue the ring's stream shares, the wait sits behind the work that needs no data of its). All on
 * the ring's stream, in the order of ring_schedule.h:
 *   peer_ring_exchange: ce: wait until my free[slot] >= send_after (the successor consumed the slot's last use),
 *                       copy into the successor's slot (cudaMemcpyAsync: a copy engine), write the successor's
 *                       ready[slot]. nccl: ncclGroupStart, ncclSend to the successor, ncclRecv from the predecessor
 *                       into my slot (or straight where the caller wants the bytes), ncclGroupEnd. In pieces
 *                       (peer_ring_send_piece): the same piece by piece, ce writing ready[slot] after each copy
 *   peer_ring_received: where the bytes are, valid from here on the stream that reads them (the ring's, or the
 *                       compute stream, whose GEMM takes them: see below). ce: that stream waits until my ready[slot]
 *                       says the transfer's last piece, or (peer_ring_received_piece) a given one, landed (the
 *                       compute stream by a polling kernel that times its wait as exposed communication); nccl: it
 *                       waits for the ring's stream (the receives are earlier there)
 *   peer_ring_release:  the bytes consumed by the work queued so far on the reading stream: ce: that stream writes the
 *                       predecessor's free[slot] (the slot may be written again); nccl: the ring's stream waits for it
 *                       (a slot's next receive is queued there). The next transfer
 * Reading a transfer on the stream that needs it, not the ring's, spares a hop between streams (an event or a flag
 * that the consumer's stream waits for a few microseconds after the ring's) and keeps SM work that stands on the
 * critical path (a reduce-scatter's last sum) from running beside, and starved by, the GEMMs on the other stream.
 * ce's flags are written and waited for on the streams named (llmc/stream_flags.cuh).
 * A flag or a receive that never comes (a dead or hung peer) stalls the ring's stream: the caller records an event
 * behind each collective and tracks it (comm_track), so the host's bounded waits name it (llmc/comm.cuh's watchdog and
 * timeouts end the job, its abort of every communicator, the ring's included, ending NCCL's kernels). ce's IPC
 * mappings are closed at exit (llmc/peer_memory.cuh).
 */
#ifndef LLMC_PEER_RING_CUH
#define LLMC_PEER_RING_CUH

#include "comm.cuh"
#include "peer_memory.cuh"
#include "ring_schedule.h"

#define RING_FLAG_BYTES 256  // the flags, then the slots at an aligned offset

enum { RING_READY = 0, RING_FREE = RING_SLOTS };

typedef enum { RING_CE, RING_NCCL } RingTransport;

// Who loads the driver's flag functions, for the line that says what to do where it has none.
static const char *const RING_DRIVER_USER = "the SP ring; pass --sp-overlap 0";

typedef struct PeerRing {
    int size, rank;
    RingTransport transport;
    cudaStream_t stream;          // the transfers (ce: copies and the flags' writes and waits; nccl: send/recv)
    size_t slot_bytes;
    char *base;                   // mine: flags, then the slots
    uint64_t transfers;           // transfers so far, the same count on every rank
    int pieces[RING_SLOTS];       // the pieces the transfer in each slot moves in (its sends say)
    // ce
    char *next_base, *prev_base;  // the successor's and the predecessor's, mapped
    unsigned wait_flags;          // cuStreamWaitValue32's: GEQ, and a flush of remote writes where the GPU has one
    // nccl
    ncclComm_t comm;              // the TP group's communicator of the ring's stream (COMM_TP_RING)
    const void *landed[RING_SLOTS]; // where the sends put each slot's transfer's bytes
    CommSignal received;          // the receives so far, for a reader's stream
    cudaEvent_t consumed;         // a reader's consumption, for the ring's stream
} PeerRing;

static inline uint32_t *ring_flag(char *base, int i) { return (uint32_t *)base + i; }
static inline char *ring_slot_of(char *base, size_t slot_bytes, int slot) {
    return base + RING_FLAG_BYTES + (size_t)slot * slot_bytes;
}

// This rank's buffer (ce: flags zeroed, synchronously: peers may write them once the caller's exchange is done) and
// the ring's stream, at the greatest priority (a transfer is queued behind nothing of the GEMMs').
static void peer_ring_alloc(PeerRing *r, int size, int rank, size_t slot_bytes, RingTransport transport) {
    memset(r, 0, sizeof(*r));
    r->size = size;
    r->rank = rank;
    r->transport = transport;
    r->slot_bytes = (slot_bytes + 255) / 256 * 256;
    size_t bytes = RING_FLAG_BYTES + RING_SLOTS * r->slot_bytes;
    cudaCheck(cudaMalloc(&r->base, bytes)); // cudaMalloc itself: IPC exports only its allocations
    g_cuda_allocated_bytes += bytes;
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&r->stream, cudaStreamNonBlocking, greatest));
    if (transport == RING_NCCL) {
        comm_signal_create(&r->received);
        cudaCheck(cudaEventCreateWithFlags(&r->consumed, cudaEventDisableTiming));
        return;
    }
    flag_driver_load(RING_DRIVER_USER);
    cudaCheck(cudaMemsetAsync(r->base, 0, RING_FLAG_BYTES, r->stream));
    comm_wait_stream(r->stream, "zeroing the ring's flags");
    r->wait_flags = flag_wait_flags(g_cuda_device);
}

// The neighbours' buffers as this rank addresses them (mapped, or on one GPU the other rings' own).
static void peer_ring_link(PeerRing *r, char *next_base, char *prev_base) {
    r->next_base = next_base;
    r->prev_base = prev_base;
}

/*
 * Piece p of `pieces` of transfer t = r->transfers + ahead (ahead 1: the transfer after the one being received, whose
 * pieces a reduce-scatter sends on as they land), in the ring's stream's order: bytes [off, off + bytes) of the
 * transfer (at most slot_bytes in all) from src + off to the successor, and the same of the predecessor's transfer t
 * to this rank: ce into my slot (the predecessor's copy), nccl at land + off where land is given (the bytes' final
 * place, sparing a copy), else into my slot. A transfer's pieces are sent once each, in order, with the same bytes
 * on every rank (they run the same collective). what names the collective for a timeout.
 */
static void peer_ring_send_piece(PeerRing *r, int ahead, int p, int pieces, const void *src, size_t off, size_t bytes,
                                 void *land, const char *what) {
    if (off + bytes > r->slot_bytes) {
        fail("peer_ring_send_piece: bytes up to %zu exceed the slot's %zu", off + bytes, r->slot_bytes);
    }
    if (pieces < 1 || pieces > RING_MAX_PIECES || p < 0 || p >= pieces) {
        fail("peer_ring_send_piece: piece %d of %d (a transfer moves in 1 to %d)", p, pieces, RING_MAX_PIECES);
    }
    RingTransfer x = ring_transfer(r->transfers + (uint64_t)ahead);
    r->pieces[x.slot] = pieces;
    if (r->transport == RING_NCCL) {
        char *dst = land ? (char *)land : ring_slot_of(r->base, r->slot_bytes, x.slot);
        r->landed[x.slot] = dst;
        if (bytes == 0) { return; } // the predecessor's piece is empty too
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclSend((const char *)src + off, bytes, ncclUint8, ring_next(r->rank, r->size), r->comm,
                           r->stream));
        ncclCheck(ncclRecv(dst + off, bytes, ncclUint8, ring_prev(r->rank, r->size), r->comm, r->stream));
        ncclCheck(ncclGroupEnd());
        comm_settle(r->comm, what, g_comm.timeout_s);
        return;
    }
    if (p == 0) {
        flag_wait(r->stream, ring_flag(r->base, RING_FREE + x.slot), x.send_after, CU_STREAM_WAIT_VALUE_GEQ);
    }
    if (bytes) {
        cudaCheck(cudaMemcpyAsync(ring_slot_of(r->next_base, r->slot_bytes, x.slot) + off, (const char *)src + off,
                                  bytes, cudaMemcpyDeviceToDevice, r->stream));
    }
    flag_write(r->stream, ring_flag(r->next_base, RING_READY + x.slot), x.ready + (uint32_t)p);
}

// Transfer t whole, in one piece.
static void peer_ring_exchange(PeerRing *r, const void *src, size_t bytes, void *land, const char *what) {
    peer_ring_send_piece(r, 0, 0, 1, src, 0, bytes, land, what);
}

// The predecessor's transfer of the same number (this rank's sends of it come first): where its bytes start, piece p
// of them valid on stream s (the ring's, or a reader's: the compute stream, whose wait is timed as the exposed
// communication `what`, llmc/comm.cuh) from here (nccl: every piece sent so far). Several streams may ask for the
// same transfer; one releases it.
static const void *peer_ring_received_piece(PeerRing *r, cudaStream_t s, int p, const char *what) {
    RingTransfer x = ring_transfer(r->transfers);
    if (r->transport == RING_NCCL) {
        if (s != r->stream) {
            comm_signal(&r->received, r->stream);
            comm_compute_wait(s, &r->received, what);
        }
        return r->landed[x.slot];
    }
    uint32_t *ready = ring_flag(r->base, RING_READY + x.slot), value = x.ready + (uint32_t)p;
    if (s != r->stream) { comm_compute_wait_flag(s, ready, value, what); }
    // the ring's own wait; on a reader's stream, where the GPU can flush remote writes, the flush the polling lacks
    if (s == r->stream || (r->wait_flags & CU_STREAM_WAIT_VALUE_FLUSH)) { flag_wait(s, ready, value, r->wait_flags); }
    return ring_slot_of(r->base, r->slot_bytes, x.slot);
}

// All of it (its last piece).
static const void *peer_ring_received(PeerRing *r, cudaStream_t s, const char *what) {
    return peer_ring_received_piece(r, s, r->pieces[ring_transfer(r->transfers).slot] - 1, what);
}

// The received bytes consumed by the work queued so far on stream s (and, where s is another stream, by whatever of
// the ring's stream s waited for): ce: s lets the predecessor write the slot again; nccl: the ring's stream, where
// the slot's next receive is queued, waits for s. The next transfer.
static void peer_ring_release(PeerRing *r, cudaStream_t s) {
    if (r->transport == RING_CE) {
        RingTransfer x = ring_transfer(r->transfers);
        flag_write(s, ring_flag(r->prev_base, RING_FREE + x.slot), x.value);
    } else if (s != r->stream) {
        cudaCheck(cudaEventRecord(r->consumed, s));
        cudaCheck(cudaStreamWaitEvent(r->stream, r->consumed, 0));
    }
    r->transfers++;
}

// ----------------------------------------------------------------------------------------------------------------
// set-up over the TP communicator

/*
 * The ring of the TP group of communicator id (size ranks, this one `rank`), slots of slot_bytes: returns 1 with the
 * neighbours' buffers mapped, or 0 (nothing allocated) where some rank cannot map its neighbours' memory. Every rank
 * of the group calls it and gets the same answer.
 */
static int peer_ring_connect(PeerRing *r, int size, int rank, size_t slot_bytes, CommId id) {
    const char *what = "the exchange of the ring's peer buffers over the tensor-parallel ranks";
    int next = ring_next(rank, size), prev = ring_prev(rank, size), peers[2] = {next, prev};
    if (!peer_group_mappable(size, rank, id, peers, 2, what)) {
        comm_barrier("the ring's set-up", 0); // every rank passes it, whichever way its group went
        return 0;
    }
    peer_ring_alloc(r, size, rank, slot_bytes, RING_CE);
    PeerInfo *all = peer_exchange_handles(r->base, 0, size, rank, id, what);
    char *bases[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        bases[k] = k == 1 && prev == next ? bases[0] : (char *)peer_open(&all[peers[k]]);
    }
    peer_ring_link(r, bases[0], bases[1]);
    free(all);
    // no rank writes a neighbour's flags before every rank has zeroed its own and mapped the others'; every rank of
    // every group passes it, whichever way its group went
    comm_barrier("the ring's set-up", 0);
    return 1;
}

// The ring over NCCL send/recv, slots of slot_bytes: runs wherever NCCL connects the group's ranks. Every rank of the
// group calls it (the communicator's split is collective).
static void peer_ring_connect_nccl(PeerRing *r, int size, int rank, size_t slot_bytes) {
    peer_ring_alloc(r, size, rank, slot_bytes, RING_NCCL);
    r->comm = comm_split_tp_ring(rank);
}

#endif // LLMC_PEER_RING_CUH
