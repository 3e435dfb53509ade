/*
 * peer_ring.cuh: the transport of sequence parallelism's ring collectives (llmc/tensor_parallel.cuh) between the TP
 * ranks of one node: receive buffers every rank maps into its ring neighbours' address space, chunk copies into them
 * on copy engines (no SMs taken from the GEMMs), and readiness flags in GPU memory.
 *
 * Each rank allocates one buffer: RING_FLAG_BYTES of flags (llmc/ring_schedule.h: ready[RING_SLOTS], written by its
 * predecessor, free[RING_SLOTS], written by its successor), then RING_SLOTS receive slots of slot_bytes. At start-up
 * (peer_ring_connect, over the TP communicator: llmc/peer_memory.cuh) where every rank can map its successor's and its
 * predecessor's memory, every rank exports its buffer and opens its neighbours'. Otherwise nothing is allocated and
 * the caller keeps NCCL.
 *
 * A transfer (the t-th of the ring's life), all on the ring's stream, in the order of ring_schedule.h:
 *   peer_ring_send:    wait until my free[slot] >= send_after (the successor consumed the slot's last use), copy
 *                      into the successor's slot (cudaMemcpyAsync: a copy engine), write the successor's ready[slot]
 *   peer_ring_recv:    wait until my ready[slot] >= value; the slot's bytes are then valid on the ring's stream
 *   peer_ring_release: write the predecessor's free[slot]: the slot may be written again; the next transfer
 * Flags (llmc/peer_memory.cuh) are written and waited for on the ring's stream. A flag that never comes (a dead or
 * hung peer) stalls the ring's stream: the caller records an event behind each collective and tracks it (comm_track),
 * so the host's bounded waits name it (llmc/comm.cuh's watchdog and timeouts end the job). The IPC mappings are
 * closed at exit (llmc/peer_memory.cuh).
 */
#ifndef LLMC_PEER_RING_CUH
#define LLMC_PEER_RING_CUH

#include "comm.cuh"
#include "peer_memory.cuh"
#include "ring_schedule.h"

#define RING_FLAG_BYTES 256  // the flags, then the slots at an aligned offset

enum { RING_READY = 0, RING_FREE = RING_SLOTS };

// Who loads the driver's flag functions, for the line that says what to do where it has none.
static const char *const RING_DRIVER_USER = "the SP ring; pass --sp-overlap 0";

typedef struct PeerRing {
    int size, rank;
    cudaStream_t stream;          // the copies and the flags' writes and waits
    size_t slot_bytes;
    char *base;                   // mine: flags, then the slots
    char *next_base, *prev_base;  // the successor's and the predecessor's, mapped
    uint64_t transfers;           // transfers so far, the same count on every rank
    unsigned wait_flags;          // cuStreamWaitValue32's: GEQ, and a flush of remote writes where the GPU has one
} PeerRing;

static inline uint32_t *ring_flag(char *base, int i) { return (uint32_t *)base + i; }
static inline char *ring_slot_of(char *base, size_t slot_bytes, int slot) {
    return base + RING_FLAG_BYTES + (size_t)slot * slot_bytes;
}

// This rank's buffer (flags zeroed, synchronously: peers may write them once the caller's exchange is done) and the
// ring's stream, at the greatest priority (a copy is queued behind nothing of the GEMMs').
static void peer_ring_alloc(PeerRing *r, int size, int rank, size_t slot_bytes) {
    peer_driver_load(RING_DRIVER_USER);
    memset(r, 0, sizeof(*r));
    r->size = size;
    r->rank = rank;
    r->slot_bytes = (slot_bytes + 255) / 256 * 256;
    size_t bytes = RING_FLAG_BYTES + RING_SLOTS * r->slot_bytes;
    cudaCheck(cudaMalloc(&r->base, bytes)); // cudaMalloc itself: IPC exports only its allocations
    g_cuda_allocated_bytes += bytes;
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&r->stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaMemsetAsync(r->base, 0, RING_FLAG_BYTES, r->stream));
    comm_wait_stream(r->stream, "zeroing the ring's flags");
    r->wait_flags = peer_wait_flags();
}

// The neighbours' buffers as this rank addresses them (mapped, or on one GPU the other rings' own).
static void peer_ring_link(PeerRing *r, char *next_base, char *prev_base) {
    r->next_base = next_base;
    r->prev_base = prev_base;
}

// Transfer `transfers`: bytes (at most slot_bytes) from src to the successor's slot, behind the ring stream's work.
static void peer_ring_send(PeerRing *r, const void *src, size_t bytes) {
    if (bytes > r->slot_bytes) { fail("peer_ring_send: %zu bytes exceed the slot's %zu", bytes, r->slot_bytes); }
    RingTransfer x = ring_transfer(r->transfers);
    peer_flag_wait(r->stream, ring_flag(r->base, RING_FREE + x.slot), x.send_after, CU_STREAM_WAIT_VALUE_GEQ);
    cudaCheck(cudaMemcpyAsync(ring_slot_of(r->next_base, r->slot_bytes, x.slot), src, bytes, cudaMemcpyDeviceToDevice,
                              r->stream));
    peer_flag_write(r->stream, ring_flag(r->next_base, RING_READY + x.slot), x.value);
}

// The predecessor's transfer of the same number: its bytes, valid on the ring's stream from here.
static const void *peer_ring_recv(PeerRing *r) {
    RingTransfer x = ring_transfer(r->transfers);
    peer_flag_wait(r->stream, ring_flag(r->base, RING_READY + x.slot), x.value, r->wait_flags);
    return ring_slot_of(r->base, r->slot_bytes, x.slot);
}

// The received slot consumed (by the ring stream's work so far): the predecessor may write it again.
static void peer_ring_release(PeerRing *r) {
    RingTransfer x = ring_transfer(r->transfers);
    peer_flag_write(r->stream, ring_flag(r->prev_base, RING_FREE + x.slot), x.value);
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
    peer_ring_alloc(r, size, rank, slot_bytes);
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

#endif // LLMC_PEER_RING_CUH
