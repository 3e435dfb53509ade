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
 * (t / RING_SLOTS)-th time, "use" u. It moves in 1 to RING_MAX_PIECES pieces of its rows (ring_piece_first), the
 * same count on its sender and its receiver, which run the same collective: a reduce-scatter sends a product as soon
 * as each of its pieces is made, and its receiver reads each piece as it lands. Two flags per slot,
 * 32-bit counters: ready (in the receiver's memory, written by the sender after each piece's copy: u RING_MAX_PIECES
 * + p + 1, counted in pieces at a fixed stride a use, so that it only grows whatever each transfer's count) and free
 * (in the sender's memory, written by the receiver once it has consumed the whole slot: u + 1). Before writing use u
 * the sender waits for free >= u; the receiver waits for ready >= u RING_MAX_PIECES + p + 1 before reading piece p.
 * Counters compare modulo 2^32 (the GPU's wait is (int32_t)(flag - value) >= 0), so they may wrap. (The flags are
 * the copy-engine transport's; over NCCL send/recv a piece is one grouped send and receive, which NCCL matches
 * itself, and a slot's next receive is queued behind the work that consumed its last use on the same stream.)
 */
#ifndef LLMC_RING_SCHEDULE_H
#define LLMC_RING_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#define RING_SLOTS 2 // double buffering: one transfer lands while the one before is consumed

static inline int ring_mod(int a, int P) { return ((a % P) + P) % P; }
static inline int ring_next(int r, int P) { return ring_mod(r + 1, P); }
static inline int ring_prev(int r, int P) { return ring_mod(r - 1, P); }

// The chunk rank r multiplies at step k of an all-gather + GEMM, and of a GEMM + reduce-scatter.
static inline int ring_ag_chunk(int r, int k, int P) { return ring_mod(r - k, P); }
static inline int ring_rs_chunk(int r, int k, int P) { return ring_mod(r - k - 1, P); }

#define RING_MAX_PIECES 8 // pieces a transfer may move in; the ready flag's stride a use

// Transfer t's slot and flag values.
typedef struct {
    int slot;
    uint32_t send_after; // the sender waits for its free flag of the slot >= this
    uint32_t ready;      // then writes the receiver's ready flag to this + p after piece p
    uint32_t value;      // the receiver, once done with the slot, writes the sender's free flag to this
} RingTransfer;

static inline RingTransfer ring_transfer(uint64_t t) {
    RingTransfer x;
    uint64_t use = t / RING_SLOTS;
    x.slot = (int)(t % RING_SLOTS);
    x.send_after = (uint32_t)use;
    x.ready = (uint32_t)(use * RING_MAX_PIECES + 1);
    x.value = (uint32_t)(use + 1);
    return x;
}

// Piece p of `pieces` of a transfer of `rows` rows, cut at multiples of `unit` rows (an FP8 cast's tile): its first
// row and its row count (a piece may be empty where rows < pieces units, and still counts: its flag is written).
static inline size_t ring_piece_first(size_t rows, size_t unit, int pieces, int p) {
    return p >= pieces ? rows : rows / unit * (size_t)p / (size_t)pieces * unit;
}
static inline size_t ring_piece_rows(size_t rows, size_t unit, int pieces, int p) {
    return ring_piece_first(rows, unit, pieces, p + 1) - ring_piece_first(rows, unit, pieces, p);
}

// Whether a flag holding `flag` satisfies a wait for `value`, as the GPU compares them.
static inline int ring_flag_reached(uint32_t flag, uint32_t value) { return (int32_t)(flag - value) >= 0; }

#endif // LLMC_RING_SCHEDULE_H
