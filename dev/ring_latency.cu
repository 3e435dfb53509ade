/*
 * ring_latency.cu: what a hop of SP's ring (llmc/peer_ring.cuh) costs beyond moving its bytes, and whether the
 * signalling could cost less. Two GPUs of a host play a ring of two (TP=2): in each round both cast a chunk (a small
 * kernel), send it to the other over a copy engine, run X us of busy work on their compute stream (the GEMM of their
 * own chunk), then wait for the other's chunk there and read it (the GEMM of the peer's chunk), as the ring's
 * all-gather + GEMM does. The compute stream's wait is timed with CUDA events around it, as the trainer timed its
 * exposed communication before its waits timed themselves (llmc/stream_flags.cuh): where the signalling were free,
 * it would be max(0, copy - X).
 *
 * How a hop signals, the rows' "how":
 *   stream  the trainer's: the ring stream waits for the compute stream's event, waits (cuStreamWaitValue32) for the
 *           slot's free flag, copies (cudaMemcpyAsync), writes the receiver's ready flag (cuStreamWriteValue32); the
 *           receiver's compute stream waits with cuStreamWaitValue32 (GEQ, and FLUSH where the GPU has it) and frees
 *           the slot with cuStreamWriteValue32
 *   kwait   the same, but the receiver's compute stream waits with the trainer's kernel of one thread that polls the
 *           flag and times its wait (llmc/stream_flags.cuh's flag_wait_timed), the next kernel launched behind it
 *   kboth   kwait, and the sender's ready flag written by a one-thread kernel (st.release.sys) after the copy
 * Every round checks that the reader sees the round's bytes (a word at each end of the chunk, written by the cast).
 *
 * First, what one operation between two kernels of a stream costs it, where it waits for nothing (a flag already
 * reached, an event already complete): a chain of OP_CHAIN busy kernels of OP_BUSY_US each on GPU 0, with the
 * operation between every two, against the chain alone, in us an operation.
 *
 *   make dev/bin/ring_latency && dev/bin/ring_latency [BYTES...]
 * BYTES: chunk sizes (default 16, 6,553,600: an FP8 chunk of GPT-2 1558M at TP=2, B 8, T 1024; and 13,107,200, its
 * bf16 chunk). Needs two GPUs with peer access (CUDA_VISIBLE_DEVICES picks which); one line a row.
 */
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/stream_flags.cuh"

#define SIDES 2
#define ROUNDS_WARMUP 10
#define ROUNDS 60                           // timed rounds a row; the median wait of each GPU's is printed
#define FP8_CHUNK_BYTES ((size_t)4096 * 1600) // 1558M at TP=2: B 8 x T 1024 / 2 tokens x 1600 channels, E4M3
#define BUSY_THREADS 128
#define NS_PER_US 1000ull
static const int BUSY_US[] = {0, 10, 20, 30, 40, 60}; // the compute stream's work beside the transfer
#define OP_CHAIN 200
#define OP_BUSY_US 10

enum Op { OP_NONE, OP_EVENT, OP_EVENT_UNTIMED, OP_TIMED_SPIN, OP_TIMED_WAIT, OP_WAIT, OP_WAIT_FLUSH, OP_WRITE_LOCAL,
          OP_WRITE_PEER, OP_EVENT_WAIT, OPS };
static const char *const OP_NAMES[OPS] = {"nothing",
                                          "an event record",
                                          "an event record (cudaEventDisableTiming)",
                                          "a one-thread polling kernel that times its wait (flag_wait_timed)",
                                          "two event records around a flag wait (the timed wait before)",
                                          "cuStreamWaitValue32 GEQ",
                                          "cuStreamWaitValue32 GEQ|FLUSH",
                                          "cuStreamWriteValue32 to this GPU",
                                          "cuStreamWriteValue32 to the peer",
                                          "cudaStreamWaitEvent on another stream's event"};

enum How { HOW_STREAM, HOW_KWAIT, HOW_KBOTH, HOWS };
static const char *const HOW_NAMES[HOWS] = {"stream", "kwait", "kboth"};

// The busy work beside a transfer: every SM's block spins for `ns`.
__global__ void __launch_bounds__(BUSY_THREADS) busy_kernel(unsigned long long ns) {
    unsigned long long end = flag_clock_ns() + ns;
    while (flag_clock_ns() < end) {}
}

// The cast of a round: the chunk's first and last words say which round it is.
__global__ void cast_kernel(uint32_t *chunk, size_t words, uint32_t round) {
    chunk[0] = round;
    chunk[words - 1] = round;
}

// The reader of a round's chunk: counts a chunk whose ends do not say the round.
__global__ void read_kernel(const uint32_t *chunk, size_t words, uint32_t round, unsigned *bad) {
    if (chunk[0] != round || chunk[words - 1] != round) { atomicAdd(bad, 1u); }
}

// Writes a flag, after every write of the work before it on the stream (stream order) is visible system-wide.
__global__ void flag_write_kernel(uint32_t *flag, uint32_t value) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

typedef struct {
    int dev, sms;
    uint32_t *chunk, *slot;   // what it sends; where the other's chunk lands
    uint32_t *flags;          // [0] ready (written by the other), [1] free (written by the other)
    unsigned *bad;
    cudaStream_t compute, ring;
    cudaEvent_t cast_done, sent;
    std::vector<cudaEvent_t> w0, w1; // around each round's wait
    unsigned wait_flags;
    unsigned long long *waited; // [0] ns and [1] waits of its polling kernels (flag_wait_timed's counters)
} Side;

static Side g_side[SIDES];

// One round u (from 1) of GPU i: cast, send (behind the cast), busy X us, wait for the other's chunk, read it, free
// its slot. The next round's cast waits for this round's send to have read the chunk.
static void round_of(int i, How how, size_t bytes, int busy_us, uint32_t u, int timer) {
    Side *me = &g_side[i], *other = &g_side[1 - i];
    size_t words = bytes / 4;
    cudaCheck(cudaSetDevice(me->dev));
    cudaCheck(cudaStreamWaitEvent(me->compute, me->sent, 0));
    cast_kernel<<<1, 1, 0, me->compute>>>(me->chunk, words, u);
    cudaCheck(cudaEventRecord(me->cast_done, me->compute));
    // the send, on the ring stream
    cudaCheck(cudaStreamWaitEvent(me->ring, me->cast_done, 0));
    flag_wait(me->ring, &me->flags[1], u - 1, CU_STREAM_WAIT_VALUE_GEQ);
    cudaCheck(cudaMemcpyAsync(other->slot, me->chunk, bytes, cudaMemcpyDeviceToDevice, me->ring));
    if (how == HOW_KBOTH) {
        flag_write_kernel<<<1, 1, 0, me->ring>>>(&other->flags[0], u);
        cudaCheckLaunch();
    } else {
        flag_write(me->ring, &other->flags[0], u);
    }
    cudaCheck(cudaEventRecord(me->sent, me->ring));
    // the compute stream: its own chunk's work, then the other's chunk
    if (busy_us > 0) {
        busy_kernel<<<me->sms, BUSY_THREADS, 0, me->compute>>>((unsigned long long)busy_us * NS_PER_US);
        cudaCheckLaunch();
    }
    if (timer >= 0) { cudaCheck(cudaEventRecord(me->w0[timer], me->compute)); }
    if (how == HOW_STREAM) {
        flag_wait(me->compute, &me->flags[0], u, me->wait_flags);
    } else {
        flag_wait_timed(me->compute, &me->flags[0], u, me->waited, me->waited + 1);
    }
    if (timer >= 0) { cudaCheck(cudaEventRecord(me->w1[timer], me->compute)); }
    read_kernel<<<1, 1, 0, me->compute>>>(me->slot, words, u, me->bad);
    cudaCheckLaunch();
    flag_write(me->compute, &other->flags[1], u);
}

// The cost of each operation between two kernels on GPU 0's compute stream, where it waits for nothing.
static void op_costs(void) {
    Side *me = &g_side[0], *other = &g_side[1];
    cudaCheck(cudaSetDevice(me->dev));
    cudaEvent_t e0, e1, other_done, mark, untimed;
    cudaCheck(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaEventCreate(&mark));
    cudaCheck(cudaEventCreateWithFlags(&other_done, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(other_done, me->ring));
    cudaCheck(cudaMemset(me->flags, 0, 2 * sizeof(uint32_t)));
    cudaCheck(cudaDeviceSynchronize());
    double base = 0.0;
    for (int op = 0; op < OPS; op++) {
        std::vector<float> ms(5);
        for (int rep = 0; rep < 5; rep++) {
            cudaCheck(cudaEventRecord(e0, me->compute));
            for (int k = 0; k < OP_CHAIN; k++) {
                busy_kernel<<<me->sms, BUSY_THREADS, 0, me->compute>>>((unsigned long long)OP_BUSY_US * NS_PER_US);
                cudaCheckLaunch();
                cudaStream_t s = me->compute;
                uint32_t *flag = &me->flags[0]; // 0: every wait is met
                switch ((Op)op) {
                case OP_NONE: break;
                case OP_EVENT: cudaCheck(cudaEventRecord(mark, s)); break;
                case OP_EVENT_UNTIMED: cudaCheck(cudaEventRecord(untimed, s)); break;
                case OP_TIMED_SPIN: flag_wait_timed(s, flag, 0, me->waited, me->waited + 1); break;
                case OP_TIMED_WAIT:
                    cudaCheck(cudaEventRecord(mark, s));
                    flag_wait(s, flag, 0, me->wait_flags);
                    cudaCheck(cudaEventRecord(mark, s));
                    break;
                case OP_WAIT: flag_wait(s, flag, 0, CU_STREAM_WAIT_VALUE_GEQ); break;
                case OP_WAIT_FLUSH: flag_wait(s, flag, 0, me->wait_flags); break;
                case OP_WRITE_LOCAL: flag_write(s, &me->flags[1], 0); break;
                case OP_WRITE_PEER: flag_write(s, &other->flags[1], 0); break;
                case OP_EVENT_WAIT: cudaCheck(cudaStreamWaitEvent(s, other_done, 0)); break;
                default: break;
                }
            }
            cudaCheck(cudaEventRecord(e1, me->compute));
            cudaCheck(cudaEventSynchronize(e1));
            cudaCheck(cudaEventElapsedTime(&ms[rep], e0, e1));
        }
        std::sort(ms.begin(), ms.end());
        double us = ms[2] * 1e3 / OP_CHAIN;
        if (op == OP_NONE) { base = us; }
        printf("%-66s %7.2f us a kernel, %+6.2f us an operation\n", OP_NAMES[op], us, us - base);
    }
    cudaCheck(cudaDeviceSynchronize());
}

static uint32_t g_round = 0; // rounds so far: the flags' counters only grow

// A row: the median wait of each GPU's timed rounds, in us, and the mean round; fails where a reader saw stale bytes.
static void row(How how, size_t bytes, int busy_us, double wait_us[SIDES], double *round_us) {
    for (int r = 0; r < ROUNDS_WARMUP + ROUNDS; r++) {
        uint32_t u = ++g_round;
        if (r == ROUNDS_WARMUP) {
            cudaCheck(cudaSetDevice(g_side[0].dev));
            cudaCheck(cudaEventRecord(g_side[0].w0[ROUNDS], g_side[0].compute));
        }
        int timer = r >= ROUNDS_WARMUP ? r - ROUNDS_WARMUP : -1;
        for (int i = 0; i < SIDES; i++) { round_of(i, how, bytes, busy_us, u, timer); }
    }
    cudaCheck(cudaSetDevice(g_side[0].dev));
    cudaCheck(cudaEventRecord(g_side[0].w1[ROUNDS], g_side[0].compute));
    for (int i = 0; i < SIDES; i++) {
        Side *s = &g_side[i];
        cudaCheck(cudaSetDevice(s->dev));
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> ms(ROUNDS);
        for (int r = 0; r < ROUNDS; r++) { cudaCheck(cudaEventElapsedTime(&ms[r], s->w0[r], s->w1[r])); }
        std::sort(ms.begin(), ms.end());
        wait_us[i] = ms[ROUNDS / 2] * 1e3;
        unsigned bad = 0;
        cudaCheck(cudaMemcpy(&bad, s->bad, sizeof(bad), cudaMemcpyDeviceToHost));
        if (bad) {
            fail("%s, %zu bytes: GPU %d read %u chunks before their bytes had landed", HOW_NAMES[how], bytes, i, bad);
        }
    }
    float all = 0.0f;
    cudaCheck(cudaSetDevice(g_side[0].dev));
    cudaCheck(cudaEventElapsedTime(&all, g_side[0].w0[ROUNDS], g_side[0].w1[ROUNDS]));
    *round_us = all * 1e3 / ROUNDS;
}

// The copy alone, both ways at once (the ring stream of each GPU, started together from GPU 0's compute stream).
static double copy_us(size_t bytes) {
    cudaEvent_t fork, join, e0, e1;
    cudaCheck(cudaSetDevice(g_side[0].dev));
    cudaCheck(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    std::vector<float> ms(ROUNDS);
    for (int r = 0; r < ROUNDS_WARMUP + ROUNDS; r++) {
        cudaCheck(cudaSetDevice(g_side[0].dev));
        cudaCheck(cudaEventRecord(e0, g_side[0].compute));
        cudaCheck(cudaEventRecord(fork, g_side[0].compute));
        for (int i = 0; i < SIDES; i++) {
            Side *me = &g_side[i];
            cudaCheck(cudaSetDevice(me->dev));
            cudaCheck(cudaStreamWaitEvent(me->ring, fork, 0));
            cudaCheck(cudaMemcpyAsync(g_side[1 - i].slot, me->chunk, bytes, cudaMemcpyDeviceToDevice, me->ring));
            cudaCheck(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
            cudaCheck(cudaEventRecord(join, me->ring));
            cudaCheck(cudaSetDevice(g_side[0].dev));
            cudaCheck(cudaStreamWaitEvent(g_side[0].compute, join, 0));
            cudaCheck(cudaEventDestroy(join));
        }
        cudaCheck(cudaEventRecord(e1, g_side[0].compute));
        cudaCheck(cudaEventSynchronize(e1));
        if (r >= ROUNDS_WARMUP) { cudaCheck(cudaEventElapsedTime(&ms[r - ROUNDS_WARMUP], e0, e1)); }
    }
    std::sort(ms.begin(), ms.end());
    return ms[ROUNDS / 2] * 1e3;
}

static void setup(size_t max_bytes) {
    int n = 0;
    cudaCheck(cudaGetDeviceCount(&n));
    if (n < SIDES) {
        fail("needs 2 GPUs, this process sees %d; run it where two are visible (CUDA_VISIBLE_DEVICES)", n);
    }
    flag_driver_load("ring_latency");
    for (int i = 0; i < SIDES; i++) {
        Side *s = &g_side[i];
        int peer = 0, least, greatest;
        cudaCheck(cudaDeviceCanAccessPeer(&peer, i, 1 - i));
        if (!peer) { fail("GPU %d cannot access GPU %d's memory (no peer access); pick two GPUs that can", i, 1 - i); }
        s->dev = i;
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaDeviceEnablePeerAccess(1 - i, 0));
        cudaCheck(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, i));
        s->wait_flags = flag_wait_flags(i);
        s->chunk = (uint32_t *)cuda_alloc(max_bytes, "the chunk a GPU sends");
        s->slot = (uint32_t *)cuda_alloc(max_bytes, "the slot a GPU receives into");
        s->flags = (uint32_t *)cuda_alloc(2 * sizeof(uint32_t), "the flags");
        s->bad = (unsigned *)cuda_alloc(sizeof(unsigned), "the check's count");
        s->waited = (unsigned long long *)cuda_alloc(2 * sizeof(unsigned long long), "the polling kernels' counters");
        cudaCheck(cudaMemset(s->flags, 0, 2 * sizeof(uint32_t)));
        cudaCheck(cudaMemset(s->waited, 0, 2 * sizeof(unsigned long long)));
        cudaCheck(cudaMemset(s->bad, 0, sizeof(unsigned)));
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        cudaCheck(cudaStreamCreateWithPriority(&s->compute, cudaStreamNonBlocking, least));
        cudaCheck(cudaStreamCreateWithPriority(&s->ring, cudaStreamNonBlocking, greatest)); // as the trainer's ring
        cudaCheck(cudaEventCreateWithFlags(&s->cast_done, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&s->sent, cudaEventDisableTiming));
        s->w0.resize(ROUNDS + 1);
        s->w1.resize(ROUNDS + 1);
        for (int r = 0; r <= ROUNDS; r++) {
            cudaCheck(cudaEventCreate(&s->w0[r]));
            cudaCheck(cudaEventCreate(&s->w1[r]));
        }
        cudaCheck(cudaDeviceSynchronize());
    }
}

int main(int argc, char **argv) {
    set_error_program("ring_latency");
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        unsigned long long b = strtoull(argv[i], &end, 10);
        if (end == argv[i] || *end || b < 8 || b % 4) {
            fail("'%s' is not a chunk size: give bytes, a multiple of 4, at least 8", argv[i]);
        }
        sizes.push_back((size_t)b);
    }
    if (sizes.empty()) { sizes = {16, FP8_CHUNK_BYTES, 2 * FP8_CHUNK_BYTES}; }
    setup(*std::max_element(sizes.begin(), sizes.end()));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("%s: a chain of %d kernels of %d us on one stream, an operation between every two (the median of 5)\n",
           prop.name, OP_CHAIN, OP_BUSY_US);
    op_costs();
    printf("2 x %s, a ring of two; wait: the median of %d rounds of each GPU's compute-stream wait (CUDA events), "
           "free: max(0, copy - busy)\n", prop.name, ROUNDS);
    printf("%-7s %10s %8s %9s %9s %9s %9s %9s\n", "how", "bytes", "busy us", "copy us", "free us", "wait0 us",
           "wait1 us", "round us");
    for (size_t bytes : sizes) {
        double copy = copy_us(bytes);
        for (int b : BUSY_US) {
            for (int h = 0; h < HOWS; h++) {
                double wait[SIDES], round;
                row((How)h, bytes, b, wait, &round);
                double free_us = copy - b > 0 ? copy - b : 0.0;
                printf("%-7s %10zu %8d %9.1f %9.1f %9.1f %9.1f %9.1f\n", HOW_NAMES[h], bytes, b, copy, free_us,
                       wait[0], wait[1], round);
            }
        }
    }
    return 0;
}
