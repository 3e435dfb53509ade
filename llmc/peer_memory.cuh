/*
 * peer_memory.cuh: GPU memory the ranks of one node map into each other's address space, and flags in it that
 * streams write and wait for on the GPU: the transport under SP's ring (llmc/peer_ring.cuh) and GTP's copy-engine
 * weight gathers (llmc/gtp.cuh).
 *
 * Set-up, over a group's communicator (peer_group_mappable, then peer_exchange_handles): every rank sends its host
 * name and GPU (PCI bus id); each says whether it can map the peers it needs (same host, the peer's GPU visible to
 * this process and reachable by peer access: cudaDeviceCanAccessPeer), and the group goes ahead only where every rank
 * can. Then each rank exports the cudaMalloc allocation the peers read or write (cudaIpcGetMemHandle: IPC exports
 * whole allocations only), the handles go round the same way, and each rank opens the ones it needs (peer_open). The
 * exchanges go over NCCL rather than the TCP bootstrap: once the watchdog runs, the bootstrap's connections carry
 * only the news of a dead rank (llmc/comm.cuh). The mappings are closed at exit (peer_close_all, registered with
 * atexit: fail() and a normal end both pass there, the abort alarm bounding a close behind a stalled stream; a
 * process killed outright has its mappings released by the driver).
 *
 * Flags (llmc/stream_flags.cuh) are written into the peer's memory and waited for in one's own: a wait polls local
 * memory.
 */
#ifndef LLMC_PEER_MEMORY_CUH
#define LLMC_PEER_MEMORY_CUH

#include <unistd.h>

#include "comm.cuh"

#define PEER_HOST_LEN 64
#define PEER_BUS_ID_LEN 16   // "0000:00:00.0" and its NUL
#define PEER_MAX_OPEN 64     // IPC mappings one process may hold (a ring: 2; GTP: its peers' weights and flags)

// ----------------------------------------------------------------------------------------------------------------
// the mappings, closed at exit

static void *g_peer_opened[PEER_MAX_OPEN];
static int g_peer_num_opened = 0, g_peer_close_registered = 0;

// Closes every IPC mapping (atexit; also safe to call twice).
static void peer_close_all(void) {
    for (int i = 0; i < g_peer_num_opened; i++) { cudaIpcCloseMemHandle(g_peer_opened[i]); }
    g_peer_num_opened = 0;
}

// ----------------------------------------------------------------------------------------------------------------
// set-up over a group's communicator

typedef struct {
    char host[PEER_HOST_LEN];
    char bus[PEER_BUS_ID_LEN];
    int can_map;          // second round: this rank can map every peer it needs
    size_t bytes;         // third round: the allocation's size
    cudaIpcMemHandle_t handle;
} PeerInfo;

// Every rank's `mine` into all[its rank] over communicator id (this one `rank` of size), through the device; the host
// waits (bounded). what: the exchange, for the error line of a peer that never comes.
static void peer_all_gather_info(const PeerInfo *mine, PeerInfo *all, int size, int rank, CommId id,
                                 const char *what) {
    Comm *c = &g_comm;
    size_t n = sizeof(PeerInfo);
    char *d = (char *)cuda_alloc(n * (size_t)size, "the peer memory set-up exchange");
    cudaCheck(cudaMemcpyAsync(d + (size_t)rank * n, mine, n, cudaMemcpyHostToDevice, c->dp_stream));
    ncclCheck(ncclAllGather(d + (size_t)rank * n, d, n, ncclUint8, comm_get(id), c->dp_stream));
    comm_settle(comm_get(id), what, c->timeout_s);
    cudaCheck(cudaMemcpyAsync(all, d, n * (size_t)size, cudaMemcpyDeviceToHost, c->dp_stream));
    comm_wait_stream(c->dp_stream, what);
    cudaCheck(cudaFree(d));
    g_cuda_allocated_bytes -= n * (size_t)size;
}

// Whether this rank can map rank `peer`'s memory: same host, its GPU visible here and reachable by peer access.
static int peer_can_map(const PeerInfo *me, const PeerInfo *peer) {
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

// Whether every rank of the group (communicator id; this one `rank` of size) can map the peers it needs: this rank's
// peers[0 .. n). Every rank calls it and gets the same answer.
static int peer_group_mappable(int size, int rank, CommId id, const int *peers, int n, const char *what) {
    PeerInfo mine, *all = (PeerInfo *)calloc_check((size_t)size, sizeof(PeerInfo), "peer memory set-up");
    memset(&mine, 0, sizeof(mine));
    if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) { fail("gethostname failed: %s", strerror(errno)); }
    cudaCheck(cudaDeviceGetPCIBusId(mine.bus, PEER_BUS_ID_LEN, g_cuda_device));
    peer_all_gather_info(&mine, all, size, rank, id, what);
    mine.can_map = 1;
    for (int i = 0; i < n; i++) { mine.can_map &= peer_can_map(&mine, &all[peers[i]]); }
    peer_all_gather_info(&mine, all, size, rank, id, what);
    int every = 1;
    for (int i = 0; i < size; i++) { every &= all[i].can_map; }
    free(all);
    return every;
}

// Every rank's IPC handle of its allocation at base (bytes long, from cudaMalloc itself), all[rank] this rank's;
// the caller frees the array.
static PeerInfo *peer_exchange_handles(void *base, size_t bytes, int size, int rank, CommId id, const char *what) {
    PeerInfo mine, *all = (PeerInfo *)calloc_check((size_t)size, sizeof(PeerInfo), "peer memory handles");
    memset(&mine, 0, sizeof(mine));
    mine.bytes = bytes;
    cudaCheck(cudaIpcGetMemHandle(&mine.handle, base));
    peer_all_gather_info(&mine, all, size, rank, id, what);
    return all;
}

// A peer's allocation mapped here (closed at exit).
static void *peer_open(const PeerInfo *peer) {
    if (g_peer_num_opened == PEER_MAX_OPEN) { fail("more than %d peer memory mappings in one process", PEER_MAX_OPEN); }
    if (!g_peer_close_registered) {
        atexit(peer_close_all);
        g_peer_close_registered = 1;
    }
    void *p = NULL;
    cudaCheck(cudaIpcOpenMemHandle(&p, peer->handle, cudaIpcMemLazyEnablePeerAccess));
    g_peer_opened[g_peer_num_opened++] = p;
    return p;
}

#endif // LLMC_PEER_MEMORY_CUH
