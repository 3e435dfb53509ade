/*
 * ring_schedule.h: the arithmetic of sequence parallelism's ring collectives hidden behind GEMMs
 * (llmc/tensor_parallel.cuh runs them over llmc/peer_ring.cuh). Plain C, checked on the CPU
 * (test/test_ring_schedule.c).
 *
 * The P ranks of a TP group form a ring: rank r sends to r + 1 and receives from r - 1 (mod P). An activation of N
 * rows is P chunks of N/P rows; chunk c is rank c's tokens.
 *   all-gather + GEMM (AG): at step k = 0 .. P-1 rank r multiplies chunk (r - k) mod P: its own at step 0, then at
 *     each step the one its predecessor held the step before, which arrived while it multiplied the previous one.
 *     After P steps it has seen every chunk once and written every chunk's output rows.
 *   GEMM + reduce-scatter (RS): at step k rank r multiplies chunk (r - k - 1) mod P and adds the product to the
 *     partial sum of that chunk its predecessor sends (none at step 0), then sends the sum on; at the last step the
 *     chunk is r's own and the sum is whole. Chunk c is summed in one fixed order: rank c + 1 first, c itself last.
 * Either makes P - 1 transfers a rank, send j then receive j: AG sends what it holds at step j and receives the chunk
 * of step j + 1; RS sends its sum of step j and receives the partial sum of step j + 1.
 *
 * A transfer lands in one of RING_SLOTS receive buffers, in turn: transfer t (counted over the ring's life, the same
 * on every rank, which issue the same collectives in the same order) uses slot t % RING_SLOTS for the
 * (t / RING_SLOTS)-th time, "use" u. Two flags per slot, 32-bit counters of uses: ready (in the receiver's memory,
 * written by the sender after its copy: u + 1) and free (in the sender's memory, written by the receiver once it has
 * consumed the slot: u + 1). Before writing use u the sender waits for free >= u; the receiver waits for
 * ready >= u + 1. Counters compare modulo 2^32 (the GPU's wait is (int32_t)(flag - value) >= 0), so they may wrap. (The
 * flags are the copy-engine transport's; over NCCL send/recv transfer j is one grouped send and receive, which NCCL
 * matches itself, and a slot's next receive is queued behind the work that consumed its last use on the same stream.)
 */
#ifndef LLMC_RING_SCHEDULE_H
#define LLMC_RING_SCHEDULE_H

#include <stdint.h>

#define RING_SLOTS 2 // double buffering: one transfer lands while the one before is consumed

static inline int ring_mod(int a, int P) { return ((a % P) + P) % P; }
static inline int ring_next(int r, int P) { return ring_mod(r + 1, P); }
static inline int ring_prev(int r, int P) { return ring_mod(r - 1, P); }

// The chunk rank r multiplies at step k of an all-gather + GEMM, and of a GEMM + reduce-scatter.
static inline int ring_ag_chunk(int r, int k, int P) { return ring_mod(r - k, P); }
static inline int ring_rs_chunk(int r, int k, int P) { return ring_mod(r - k - 1, P); }

// Transfer t's slot and flag values.
typedef struct {
    int slot;
    uint32_t send_after; // the sender waits for its free flag of the slot >= this
    uint32_t value;      // then writes the receiver's ready flag to this; the receiver, once done, its free flag
} RingTransfer;

static inline RingTransfer ring_transfer(uint64_t t) {
    RingTransfer x;
    uint64_t use = t / RING_SLOTS;
    x.slot = (int)(t % RING_SLOTS);
    x.send_after = (uint32_t)use;
    x.value = (uint32_t)(use + 1);
    return x;
}

// Whether a flag holding `flag` satisfies a wait for `value`, as the GPU compares them.
static inline int ring_flag_reached(uint32_t flag, uint32_t value) { return (int32_t)(flag - value) >= 0; }

#endif // LLMC_RING_SCHEDULE_H
