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
 * receive slots of slot_bytes. ce, at start-up (peer_ring_connect): the ranks exchange over the TP communicator their
 * host name and GPU (PCI bus id); where every rank's successor and predecessor are on its host and visible to it, and
 * the GPUs can map each other's memory (cudaDeviceCanAccessPeer), every rank exports its buffer
 * (cudaIpcGetMemHandle), the handles are exchanged the same way, and each rank opens its neighbours'
 * (cudaIpcOpenMemHandle). Otherwise nothing is allocated and the caller keeps NCCL's collectives. The exchange goes
 * over NCCL rather than the TCP bootstrap: once the watchdog runs, the bootstrap's connections carry only the news of
 * a dead rank (llmc/comm.cuh). nccl (peer_ring_connect_nccl): the buffer and the communicator, split from the TP
 * group's.
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
 *                       into my slot (or straight where the caller wants the bytes), ncclGroupEnd
 *   peer_ring_received: ce: wait until my ready[slot] >= value; nccl: nothing (the receive is earlier on the stream).
 *                       Where the bytes are, valid on the ring's stream from here
 *   peer_ring_release:  ce: write the predecessor's free[slot]: the slot may be written again. The next transfer
 * ce's flags are written with cuStreamWriteValue32 (which fences the copy before it, as __threadfence_system) and
 * waited for with cuStreamWaitValue32 (GEQ, modulo 2^32; flushing remote writes where the GPU can): driver functions,
 * taken from the driver the runtime loaded (cudaGetDriverEntryPointByVersion) rather than linked, so that a binary
 * that never opens a ring still starts where no driver is installed (--help, the CPU machine's checks).
 * A flag or a receive that never comes (a dead or hung peer) stalls the ring's stream: the caller records an event
 * behind each collective and tracks it (comm_track), so the host's bounded waits name it (llmc/comm.cuh's watchdog and
 * timeouts end the job, its abort of every communicator, the ring's included, ending NCCL's kernels). ce's IPC
 * mappings are closed at exit (peer_ring_close_all, registered with atexit: fail() and a normal end both pass there,
 * the abort alarm bounding a close behind a stalled ring; a process killed outright has its mappings released by the
 * driver).
 */
#ifndef LLMC_PEER_RING_CUH
#define LLMC_PEER_RING_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include "comm.cuh"
#include "ring_schedule.h"

#define RING_FLAG_BYTES 256  // the flags, then the slots at an aligned offset
#define RING_HOST_LEN 64
#define RING_BUS_ID_LEN 16   // "0000:00:00.0" and its NUL
#define RING_MAX_OPEN 2      // the successor's mapping and the predecessor's (one for a ring of two)
#define RING_MAX_RINGS 8     // rings with IPC mappings one process may hold (a trainer: one per model)

enum { RING_READY = 0, RING_FREE = RING_SLOTS };

typedef enum { RING_CE, RING_NCCL } RingTransport;

// The driver functions the ring calls (ring_driver_load), at the ABI versions these signatures are.
#define RING_DRIVER_WAIT_WRITE_VERSION 11070
#define RING_DRIVER_ERROR_VERSION 6000
static struct {
    PFN_cuStreamWaitValue32_v11070 wait_value;
    PFN_cuStreamWriteValue32_v11070 write_value;
    PFN_cuGetErrorString_v6000 error_string;
} g_ring_driver;

static void *ring_driver_symbol(const char *name, unsigned version) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found;
    cudaCheck(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !fn) {
        fail("the CUDA driver has no %s (version %u) for the SP ring; update the driver or pass --sp-overlap 0", name,
             version);
    }
    return fn;
}

static void ring_driver_load(void) {
    if (g_ring_driver.wait_value) { return; }
    g_ring_driver.wait_value =
        (PFN_cuStreamWaitValue32_v11070)ring_driver_symbol("cuStreamWaitValue32", RING_DRIVER_WAIT_WRITE_VERSION);
    g_ring_driver.write_value =
        (PFN_cuStreamWriteValue32_v11070)ring_driver_symbol("cuStreamWriteValue32", RING_DRIVER_WAIT_WRITE_VERSION);
    g_ring_driver.error_string =
        (PFN_cuGetErrorString_v6000)ring_driver_symbol("cuGetErrorString", RING_DRIVER_ERROR_VERSION);
}

#define cuCheck(call) cu_check_((call), #call, __FILE__, __LINE__)
static inline void cu_check_(CUresult r, const char *what, const char *file, int line) {
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        g_ring_driver.error_string(r, &s);
        fail("CUDA driver error '%s' at %s:%d (%s)", s ? s : "unknown", file, line, what);
    }
}

typedef struct PeerRing {
    int size, rank;
    RingTransport transport;
    cudaStream_t stream;          // the transfers (ce: copies and the flags' writes and waits; nccl: send/recv)
    size_t slot_bytes;
    char *base;                   // mine: flags, then the slots
    uint64_t transfers;           // transfers so far, the same count on every rank
    // ce
    char *next_base, *prev_base;  // the successor's and the predecessor's, mapped
    void *opened[RING_MAX_OPEN];  // IPC mappings to close
    int num_opened;
    unsigned wait_flags;          // cuStreamWaitValue32's: GEQ, and a flush of remote writes where the GPU has one
    // nccl
    ncclComm_t comm;              // the TP group's communicator of the ring's stream (COMM_TP_RING)
    const void *landed;           // where the exchange put the transfer's bytes
} PeerRing;

static PeerRing *g_rings[RING_MAX_RINGS];
static int g_num_rings = 0;

static inline uint32_t *ring_flag(char *base, int i) { return (uint32_t *)base + i; }
static inline char *ring_slot_of(char *base, size_t slot_bytes, int slot) {
    return base + RING_FLAG_BYTES + (size_t)slot * slot_bytes;
}
static inline CUdeviceptr ring_dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

// Closes every ring's IPC mappings (atexit; also safe to call twice).
static void peer_ring_close_all(void) {
    for (int i = 0; i < g_num_rings; i++) {
        PeerRing *r = g_rings[i];
        for (int k = 0; k < r->num_opened; k++) { cudaIpcCloseMemHandle(r->opened[k]); }
        r->num_opened = 0;
    }
    g_num_rings = 0;
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
    if (transport == RING_NCCL) { return; }
    ring_driver_load();
    cudaCheck(cudaMemsetAsync(r->base, 0, RING_FLAG_BYTES, r->stream));
    comm_wait_stream(r->stream, "zeroing the ring's flags");
    // The flag arrives after the data it announces (the sender's write fences its copy), but a GPU may reorder remote
    // writes as they land: where it can, the wait flushes them, so the slot's bytes are visible to the work after it.
    int flush = 0;
    cudaCheck(cudaDeviceGetAttribute(&flush, cudaDevAttrCanFlushRemoteWrites, g_cuda_device));
    r->wait_flags = CU_STREAM_WAIT_VALUE_GEQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
}

// The ring's IPC mappings are closed at exit.
static void peer_ring_register(PeerRing *r) {
    if (g_num_rings == RING_MAX_RINGS) { fail("more than %d peer rings in one process", RING_MAX_RINGS); }
    if (g_num_rings == 0) { atexit(peer_ring_close_all); }
    g_rings[g_num_rings++] = r;
}

// The neighbours' buffers as this rank addresses them (mapped, or on one GPU the other rings' own).
static void peer_ring_link(PeerRing *r, char *next_base, char *prev_base) {
    r->next_base = next_base;
    r->prev_base = prev_base;
}

/*
 * Transfer t (r->transfers), in the ring's stream's order: bytes (at most slot_bytes) from src to the successor, and
 * the predecessor's transfer t to this rank: ce into my slot (the predecessor's copy), nccl at land where given (the
 * bytes' final place, sparing a copy), else into my slot. Every transfer of a collective has the same size on every
 * rank. what names the collective for a timeout.
 */
static void peer_ring_exchange(PeerRing *r, const void *src, size_t bytes, void *land, const char *what) {
    if (bytes > r->slot_bytes) { fail("peer_ring_exchange: %zu bytes exceed the slot's %zu", bytes, r->slot_bytes); }
    RingTransfer x = ring_transfer(r->transfers);
    if (r->transport == RING_NCCL) {
        void *dst = land ? land : ring_slot_of(r->base, r->slot_bytes, x.slot);
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclSend(src, bytes, ncclUint8, ring_next(r->rank, r->size), r->comm, r->stream));
        ncclCheck(ncclRecv(dst, bytes, ncclUint8, ring_prev(r->rank, r->size), r->comm, r->stream));
        ncclCheck(ncclGroupEnd());
        comm_settle(r->comm, what, g_comm.timeout_s);
        r->landed = dst;
        return;
    }
    cuCheck(g_ring_driver.wait_value((CUstream)r->stream, ring_dptr(ring_flag(r->base, RING_FREE + x.slot)),
                                     x.send_after, CU_STREAM_WAIT_VALUE_GEQ));
    cudaCheck(cudaMemcpyAsync(ring_slot_of(r->next_base, r->slot_bytes, x.slot), src, bytes, cudaMemcpyDeviceToDevice,
                              r->stream));
    cuCheck(g_ring_driver.write_value((CUstream)r->stream, ring_dptr(ring_flag(r->next_base, RING_READY + x.slot)),
                                      x.value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

// The predecessor's transfer of the same number: where its bytes are, valid on the ring's stream from here.
static const void *peer_ring_received(PeerRing *r) {
    if (r->transport == RING_NCCL) { return r->landed; }
    RingTransfer x = ring_transfer(r->transfers);
    cuCheck(g_ring_driver.wait_value((CUstream)r->stream, ring_dptr(ring_flag(r->base, RING_READY + x.slot)),
                                     x.value, r->wait_flags));
    return ring_slot_of(r->base, r->slot_bytes, x.slot);
}

// The received bytes consumed (by the ring stream's work so far): ce: the predecessor may write the slot again
// (nccl's next receive into it comes later on this stream). The next transfer.
static void peer_ring_release(PeerRing *r) {
    if (r->transport == RING_CE) {
        RingTransfer x = ring_transfer(r->transfers);
        cuCheck(g_ring_driver.write_value((CUstream)r->stream, ring_dptr(ring_flag(r->prev_base, RING_FREE + x.slot)),
                                          x.value, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    r->transfers++;
}

// ----------------------------------------------------------------------------------------------------------------
// set-up over the TP communicator

typedef struct {
    char host[RING_HOST_LEN];
    char bus[RING_BUS_ID_LEN];
    int can_map;          // second round: this rank can map both neighbours
    cudaIpcMemHandle_t handle;
} RingPeerInfo;

// Every rank's `mine` into all[its rank] over communicator id (this one `rank` of size), through the device; the host
// waits (bounded).
static void ring_all_gather_info(const RingPeerInfo *mine, RingPeerInfo *all, int size, int rank, CommId id) {
    Comm *c = &g_comm;
    size_t n = sizeof(RingPeerInfo);
    char *d = (char *)cuda_alloc(n * (size_t)size, "the ring's set-up exchange");
    const char *what = "the exchange of the ring's peer buffers over the tensor-parallel ranks";
    cudaCheck(cudaMemcpyAsync(d + (size_t)rank * n, mine, n, cudaMemcpyHostToDevice, c->dp_stream));
    ncclCheck(ncclAllGather(d + (size_t)rank * n, d, n, ncclUint8, comm_get(id), c->dp_stream));
    comm_settle(comm_get(id), what, c->timeout_s);
    cudaCheck(cudaMemcpyAsync(all, d, n * (size_t)size, cudaMemcpyDeviceToHost, c->dp_stream));
    comm_wait_stream(c->dp_stream, what);
    cudaCheck(cudaFree(d));
    g_cuda_allocated_bytes -= n * (size_t)size;
}

// Whether this rank can map rank `peer`'s buffer: same host, its GPU visible here and reachable by peer access.
static int ring_can_map(const RingPeerInfo *me, const RingPeerInfo *peer) {
    if (strcmp(me->host, peer->host) != 0) { return 0; }
    int dev = -1, ok = 0;
    if (cudaDeviceGetByPCIBusId(&dev, peer->bus) != cudaSuccess) {
        cudaGetLastError(); // not visible to this process: clear the error
        return 0;
    }
    if (dev == g_cuda_device) { return 1; }
    cudaCheck(cudaDeviceCanAccessPeer(&ok, g_cuda_device, dev));
    return ok;
}

/*
 * The ring of the TP group of communicator id (size ranks, this one `rank`), slots of slot_bytes: returns 1 with the
 * neighbours' buffers mapped, or 0 (nothing allocated) where some rank cannot map its neighbours' memory. Every rank
 * of the group calls it and gets the same answer.
 */
static int peer_ring_connect(PeerRing *r, int size, int rank, size_t slot_bytes, CommId id) {
    RingPeerInfo mine, *all = (RingPeerInfo *)calloc_check((size_t)size, sizeof(RingPeerInfo), "ring peers");
    memset(&mine, 0, sizeof(mine));
    if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) { fail("gethostname failed: %s", strerror(errno)); }
    cudaCheck(cudaDeviceGetPCIBusId(mine.bus, RING_BUS_ID_LEN, g_cuda_device));
    ring_all_gather_info(&mine, all, size, rank, id);
    mine.can_map = ring_can_map(&mine, &all[ring_next(rank, size)]) && ring_can_map(&mine, &all[ring_prev(rank, size)]);
    ring_all_gather_info(&mine, all, size, rank, id);
    int every = 1;
    for (int i = 0; i < size; i++) { every &= all[i].can_map; }
    if (!every) {
        free(all);
        comm_barrier("the ring's set-up", 0); // every rank passes it, whichever way its group went
        return 0;
    }
    peer_ring_alloc(r, size, rank, slot_bytes, RING_CE);
    peer_ring_register(r);
    cudaCheck(cudaIpcGetMemHandle(&mine.handle, r->base));
    ring_all_gather_info(&mine, all, size, rank, id);
    int next = ring_next(rank, size), prev = ring_prev(rank, size);
    char *bases[2] = {NULL, NULL};
    int peers[2] = {next, prev};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && prev == next) {
            bases[1] = bases[0];
            break;
        }
        void *p = NULL;
        cudaCheck(cudaIpcOpenMemHandle(&p, all[peers[k]].handle, cudaIpcMemLazyEnablePeerAccess));
        r->opened[r->num_opened++] = p;
        bases[k] = (char *)p;
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
