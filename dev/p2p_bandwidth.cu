/*
 * p2p_bandwidth.cu: how fast GPU 0 and GPU 1 of a host move bytes to each other, in the ways SP's ring (llmc/
 * peer_ring.cuh) could: whether several copy engines at once, or SMs, beat the one copy engine a transfer takes
 * (on 2 x H200 they did not: dev/DESIGN.md, section 14).
 *
 * A transfer of S bytes goes from a buffer of one GPU into a buffer of the other (peer access, one process: the
 * trainer's ranks map each other's memory through CUDA IPC instead, over the same links), by:
 *   ce push  cudaMemcpyAsync on the sender's streams, the transfer cut into N pieces on N streams (copy_piece),
 *            N = 1, 2, 4; N = 1 is the ring's copy
 *   ce pull  the same on the receiver's streams (GTP's gathers pull)
 *   sm push  a kernel on the sender, a grid of B blocks reading local memory and writing the peer's
 *   sm pull  a kernel on the receiver reading the peer's memory and writing local memory
 * one way (GPU 0 to GPU 1) and both ways at once (each GPU sends S to the other, as a ring of two does). A row is the
 * median of MEDIAN_REPS runs (test/cuda_timing.cuh, CUDA events on GPU 0's lead stream, which forks to every stream
 * that copies, on either GPU, and joins them back), in GB/s each way (S over the time until the last byte of every
 * direction landed) and in all. Every way is checked once, both directions, at the largest size: the receiver holds
 * the sender's bytes.
 *
 *   make dev/bin/p2p_bandwidth && dev/bin/p2p_bandwidth [BYTES...]
 * BYTES: the transfer sizes (default 1, 2, 4, 8, 16, 32 and 64 MiB, and 13,107,200: a chunk of GPT-2 1558M at TP=2,
 * B 8, T 1024, bf16, the ring's transfer). Needs two GPUs with peer access to each other (CUDA_VISIBLE_DEVICES picks
 * which); prints one line a row.
 */
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "test/cuda_timing.cuh"

#define SIDES 2             // GPU 0 and GPU 1
#define MIB ((size_t)1 << 20)
#define DEFAULT_MAX_MIB 64  // the default sizes' largest: powers of two from 1 MiB up to it
#define RING_CHUNK_BYTES ((size_t)4096 * 1600 * 2) // 1558M at TP=2: B 8 x T 1024 / 2 tokens x 1600 channels, bf16
#define COPY_THREADS 512    // the SM copy's blocks
#define COPY_UNROLL 4       // 16-byte words a thread has in flight: remote reads are slow, so several at once
#define PATTERN_SEED 0x9e3779b9u
#define WIDTHS 3            // the widths each way is timed at
#define COPIES_MAX 4        // copy streams at once, at most
#define PIECE_ALIGN 16      // a piece starts on a 16-byte boundary, as aligned as the whole transfer

// Piece k of a transfer of `bytes` cut into `copies`: [k s, (k + 1) s) clipped to it, s = ceil(bytes / copies)
// rounded up to PIECE_ALIGN (the last pieces of a small transfer may be empty).
typedef struct {
    size_t offset, bytes;
} Piece;
static Piece copy_piece(size_t bytes, int copies, int k) {
    size_t share = (bytes + (size_t)copies - 1) / (size_t)copies;
    size_t step = (share + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    size_t begin = std::min((size_t)k * step, bytes), end = std::min(begin + step, bytes);
    return {begin, end - begin};
}

enum Method { CE_PUSH, CE_PULL, SM_PUSH, SM_PULL, METHODS };
static const char *const METHOD_NAMES[METHODS] = {"ce push", "ce pull", "sm push", "sm pull"};

// The SM copy: n 16-byte words from src to dst, one of them local and the other the peer's.
__global__ void __launch_bounds__(COPY_THREADS) copy_words(int4 *dst, const int4 *src, size_t n) {
    size_t stride = (size_t)gridDim.x * COPY_THREADS * COPY_UNROLL;
    for (size_t base = (size_t)blockIdx.x * COPY_THREADS * COPY_UNROLL + threadIdx.x; base < n; base += stride) {
        int4 w[COPY_UNROLL];
        for (int u = 0; u < COPY_UNROLL; u++) {
            size_t i = base + (size_t)u * COPY_THREADS;
            if (i < n) { w[u] = src[i]; }
        }
        for (int u = 0; u < COPY_UNROLL; u++) {
            size_t i = base + (size_t)u * COPY_THREADS;
            if (i < n) { dst[i] = w[u]; }
        }
    }
}

__device__ __forceinline__ uint32_t pattern_word(size_t i, uint32_t seed) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed ^ (uint32_t)(i >> 32);
    return x ^ (x >> 15);
}
__global__ void __launch_bounds__(COPY_THREADS) fill_pattern(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        p[i] = pattern_word(i, seed);
    }
}
__global__ void __launch_bounds__(COPY_THREADS) count_mismatches(const uint32_t *p, size_t n, uint32_t seed,
                                                                 unsigned long long *bad) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (p[i] != pattern_word(i, seed)) { atomicAdd(bad, 1ull); }
    }
}

// One GPU: what it sends from (src), what the other writes into (dst), its streams.
typedef struct {
    int dev, sms;
    char *src, *dst;
    cudaStream_t lead;                  // GPU 0's: where a run starts and ends (the timing events); GPU 1's: checks
    cudaStream_t streams[COPIES_MAX];
    cudaEvent_t join[COPIES_MAX];
    unsigned long long *bad; // the check's count of wrong words received
} Side;

static Side g_side[SIDES];
static cudaEvent_t g_fork; // on GPU 0's lead stream: every copying stream starts behind it

// One direction of a run: `bytes` from side `from`'s src into the other's dst by method m, over `width` streams (ce)
// or blocks (sm), behind g_fork; GPU 0's lead stream waits for it.
static void transfer(int from, Method m, int width, size_t bytes) {
    Side *sender = &g_side[from], *receiver = &g_side[1 - from];
    Side *issuer = m == CE_PUSH || m == SM_PUSH ? sender : receiver;
    cudaCheck(cudaSetDevice(issuer->dev));
    bool ce = m == CE_PUSH || m == CE_PULL;
    int streams = ce ? width : 1;
    for (int k = 0; k < streams; k++) {
        cudaStream_t s = issuer->streams[k];
        cudaCheck(cudaStreamWaitEvent(s, g_fork, 0));
        if (ce) {
            Piece p = copy_piece(bytes, streams, k);
            cudaCheck(cudaMemcpyAsync(receiver->dst + p.offset, sender->src + p.offset, p.bytes,
                                      cudaMemcpyDeviceToDevice, s));
        } else {
            copy_words<<<width, COPY_THREADS, 0, s>>>((int4 *)receiver->dst, (const int4 *)sender->src, bytes / 16);
            cudaCheckLaunch();
        }
        cudaCheck(cudaEventRecord(issuer->join[k], s));
        cudaCheck(cudaStreamWaitEvent(g_side[0].lead, issuer->join[k], 0));
    }
}

// A run: GPU 0 to GPU 1, and GPU 1 to GPU 0 too where both; GPU 0 current before and after (the timing events').
static void run(Method m, int width, size_t bytes, bool both) {
    cudaCheck(cudaEventRecord(g_fork, g_side[0].lead));
    transfer(0, m, width, bytes);
    if (both) { transfer(1, m, width, bytes); }
    cudaCheck(cudaSetDevice(g_side[0].dev));
}

// The receiver of each direction holds the sender's pattern (its dst cleared first); fails naming the way if not.
static void check_run(Method m, int width, size_t bytes, bool both) {
    for (int i = 0; i < SIDES; i++) {
        cudaCheck(cudaSetDevice(g_side[i].dev));
        cudaCheck(cudaMemsetAsync(g_side[i].dst, 0, bytes, g_side[i].lead));
        cudaCheck(cudaStreamSynchronize(g_side[i].lead));
    }
    cudaCheck(cudaSetDevice(g_side[0].dev));
    run(m, width, bytes, both);
    cudaCheck(cudaStreamSynchronize(g_side[0].lead));
    for (int to = 1; to >= (both ? 0 : 1); to--) {
        Side *r = &g_side[to];
        cudaCheck(cudaSetDevice(r->dev));
        unsigned long long host = 0;
        cudaCheck(cudaMemsetAsync(r->bad, 0, sizeof(*r->bad), r->lead));
        count_mismatches<<<r->sms, COPY_THREADS, 0, r->lead>>>((const uint32_t *)r->dst, bytes / 4,
                                                               PATTERN_SEED + (1 - to), r->bad);
        cudaCheckLaunch();
        cudaCheck(cudaMemcpyAsync(&host, r->bad, sizeof(host), cudaMemcpyDeviceToHost, r->lead));
        cudaCheck(cudaStreamSynchronize(r->lead));
        if (host) {
            fail("%s, width %d, %zu bytes%s: GPU %d received %llu wrong 4-byte words", METHOD_NAMES[m], width, bytes,
                 both ? " both ways" : "", to, host);
        }
    }
    cudaCheck(cudaSetDevice(g_side[0].dev));
}

static void setup(size_t max_bytes) {
    int n = 0;
    cudaCheck(cudaGetDeviceCount(&n));
    if (n < SIDES) {
        fail("needs 2 GPUs, this process sees %d; run it where two are visible (CUDA_VISIBLE_DEVICES)", n);
    }
    for (int i = 0; i < SIDES; i++) {
        int peer = 0;
        cudaCheck(cudaDeviceCanAccessPeer(&peer, i, 1 - i));
        if (!peer) { fail("GPU %d cannot access GPU %d's memory (no peer access); pick two GPUs that can", i, 1 - i); }
    }
    int least, greatest;
    for (int i = 0; i < SIDES; i++) {
        Side *s = &g_side[i];
        s->dev = i;
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaDeviceEnablePeerAccess(1 - i, 0));
        cudaCheck(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, i));
        s->src = (char *)cuda_alloc(max_bytes, "the bytes a GPU sends");
        s->dst = (char *)cuda_alloc(max_bytes, "the bytes a GPU receives");
        s->bad = (unsigned long long *)cuda_alloc(sizeof(*s->bad), "the check's count");
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        cudaCheck(cudaStreamCreateWithPriority(&s->lead, cudaStreamNonBlocking, greatest));
        for (int k = 0; k < COPIES_MAX; k++) { // the ring's streams: the greatest priority
            cudaCheck(cudaStreamCreateWithPriority(&s->streams[k], cudaStreamNonBlocking, greatest));
            cudaCheck(cudaEventCreateWithFlags(&s->join[k], cudaEventDisableTiming));
        }
        fill_pattern<<<s->sms, COPY_THREADS, 0, s->lead>>>((uint32_t *)s->src, max_bytes / 4, PATTERN_SEED + i);
        cudaCheckLaunch();
        cudaCheck(cudaStreamSynchronize(s->lead));
    }
    cudaCheck(cudaSetDevice(g_side[0].dev));
    cudaCheck(cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming));
}

int main(int argc, char **argv) {
    set_error_program("p2p_bandwidth");
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        unsigned long long b = strtoull(argv[i], &end, 10);
        if (end == argv[i] || *end || b == 0 || b % 16) {
            fail("'%s' is not a transfer size: give bytes, a positive multiple of 16 (the SM copy moves 16-byte "
                 "words)", argv[i]);
        }
        sizes.push_back((size_t)b);
    }
    if (sizes.empty()) {
        for (size_t mib = 1; mib <= DEFAULT_MAX_MIB; mib *= 2) { sizes.push_back(mib * MIB); }
        sizes.push_back(RING_CHUNK_BYTES);
        std::sort(sizes.begin(), sizes.end());
    }
    size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
    setup(max_bytes);
    cudaDeviceProp props[SIDES];
    for (int i = 0; i < SIDES; i++) { cudaCheck(cudaGetDeviceProperties(&props[i], i)); }
    printf("GPU 0 %s <-> GPU 1 %s, peer access; a row: the median of %d runs after %d, timed with CUDA events\n",
           props[0].name, props[1].name, MEDIAN_REPS, MEDIAN_WARMUP);
    // widths: copy streams for ce, blocks for sm (a few SMs, as a ring beside GEMMs could spare, up to all of them)
    const int ce_widths[WIDTHS] = {1, 2, COPIES_MAX};
    const int sm_widths[WIDTHS] = {16, 64, g_side[0].sms < g_side[1].sms ? g_side[0].sms : g_side[1].sms};
    printf("%-9s %-8s %7s %12s %10s %12s %10s\n", "direction", "method", "width", "bytes", "us", "GB/s each",
           "GB/s all");
    for (int both = 0; both <= 1; both++) {
        for (int m = 0; m < METHODS; m++) {
            const int *widths = m == CE_PUSH || m == CE_PULL ? ce_widths : sm_widths;
            for (int w = 0; w < WIDTHS; w++) {
                check_run((Method)m, widths[w], max_bytes, both);
                for (size_t bytes : sizes) {
                    float ms = median_ms([&]() { run((Method)m, widths[w], bytes, both); }, g_side[0].lead);
                    double each = bytes / (ms * 1e-3) / 1e9;
                    printf("%-9s %-8s %7d %12zu %10.1f %12.1f %10.1f\n", both ? "both ways" : "one way",
                           METHOD_NAMES[m], widths[w], bytes, ms * 1e3, each, each * (both ? 2 : 1));
                }
            }
        }
    }
    printf("(width: copy streams of ce, the transfer cut as the ring cuts it; blocks of %d threads of sm)\n",
           COPY_THREADS);
    return 0;
}
