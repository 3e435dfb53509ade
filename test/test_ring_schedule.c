/*
 * test_ring_schedule.c: the ring collectives' schedule (llmc/ring_schedule.h) for TP groups of 1 to 8, run as the
 * ranks would, in a random interleaving of their transfers under the slot and flag protocol: all-gather + GEMM leaves
 * every rank every chunk exactly once; GEMM + reduce-scatter leaves every rank its own chunk summed over every rank
 * exactly once, in the fixed order (rank c + 1 first, c last); no transfer overwrites a slot not yet consumed, none
 * reads one not yet written, none deadlocks, and the counters may wrap.
 */
#include <stdlib.h>
#include <string.h>

#include "../llmc/ring_schedule.h"
#include "test_util.h"

#define MAX_P 8
#define COLLECTIVES 6 // alternately AG and RS, back to back on the same slots

typedef struct {
    int chunk;          // which chunk the transfer carries
    int order[MAX_P];   // RS: the ranks whose products the partial sum holds, in the order they were added
    int count;
    int full;           // written and not yet consumed
    uint64_t t;         // the transfer it belongs to
} Slot;

typedef struct {
    Slot slots[RING_SLOTS];
    uint32_t ready[RING_SLOTS], free_[RING_SLOTS];
    int op;                // next operation of this rank: collective op / (2 (P-1)), then send or receive
    int seen[COLLECTIVES][MAX_P];    // AG: how often each chunk was multiplied
    int order[MAX_P], count;         // RS: the sum this rank holds (its own product added last)
    int final_order[COLLECTIVES][MAX_P], final_count[COLLECTIVES];
} Rank;

typedef struct {
    int P;
    uint64_t t0; // the ring's transfers before the first collective (to cross the counters' wrap)
    Rank r[MAX_P];
    int errors;
} Sim;

static int is_ag(int coll) { return coll % 2 == 0; }

// Rank i's step 0 of collective coll (no transfer before it): AG multiplies its own chunk, RS its first product.
static void step_zero(Sim *s, int i, int coll) {
    Rank *me = &s->r[i];
    if (is_ag(coll)) {
        me->seen[coll][ring_ag_chunk(i, 0, s->P)]++;
    } else {
        me->count = 0;
        me->order[me->count++] = i;
    }
}

// Tries rank i's next operation; returns 1 if it ran.
static int try_op(Sim *s, int i) {
    int P = s->P, per = 2 * (P - 1);
    Rank *me = &s->r[i];
    if (P == 1) { // no transfers: a collective is its one step
        if (me->op >= COLLECTIVES) { return 0; }
        step_zero(s, i, me->op);
        if (!is_ag(me->op)) {
            memcpy(me->final_order[me->op], me->order, sizeof(me->order));
            me->final_count[me->op] = me->count;
        }
        me->op++;
        return 1;
    }
    if (me->op >= COLLECTIVES * per) { return 0; }
    int coll = me->op / per, j = (me->op % per) / 2, recv = me->op % 2;
    uint64_t t = s->t0 + (uint64_t)coll * (P - 1) + j;
    RingTransfer x = ring_transfer(t);
    if (!recv) {
        if (!ring_flag_reached(me->free_[x.slot], x.send_after)) { return 0; }
        if (j == 0) { step_zero(s, i, coll); }
        Rank *next = &s->r[ring_next(i, P)];
        Slot *dst = &next->slots[x.slot];
        if (dst->full) { s->errors++; } // overwrote a transfer its receiver had not consumed
        dst->full = 1;
        dst->t = t;
        if (is_ag(coll)) {
            dst->chunk = ring_ag_chunk(i, j, P);
        } else {
            dst->chunk = ring_rs_chunk(i, j, P);
            memcpy(dst->order, me->order, sizeof(me->order));
            dst->count = me->count;
        }
        next->ready[x.slot] = x.value;
    } else {
        if (!ring_flag_reached(me->ready[x.slot], x.value)) { return 0; }
        Slot *src = &me->slots[x.slot];
        if (!src->full || src->t != t) { s->errors++; } // read a slot its sender had not written for this transfer
        int k = j + 1;
        if (is_ag(coll)) {
            if (src->chunk != ring_ag_chunk(i, k, P)) { s->errors++; }
            me->seen[coll][src->chunk]++;
        } else {
            if (src->chunk != ring_rs_chunk(i, k, P)) { s->errors++; }
            memcpy(me->order, src->order, sizeof(me->order));
            me->count = src->count;
            if (me->count < MAX_P) { me->order[me->count++] = i; }
            if (k == P - 1) {
                memcpy(me->final_order[coll], me->order, sizeof(me->order));
                me->final_count[coll] = me->count;
            }
        }
        src->full = 0;
        s->r[ring_prev(i, P)].free_[x.slot] = x.value;
    }
    me->op++;
    return 1;
}

// Runs the ranks in a random interleaving; returns the number of errors (a deadlock counts as one).
static int simulate(int P, uint64_t t0, unsigned seed) {
    static Sim s;
    memset(&s, 0, sizeof(s));
    s.P = P;
    s.t0 = t0;
    // the flags as a ring that made t0 transfers left them: every use before t0 written and consumed
    for (int i = 0; i < P; i++) {
        for (int slot = 0; slot < RING_SLOTS; slot++) {
            uint64_t uses = t0 / RING_SLOTS + (slot < (int)(t0 % RING_SLOTS));
            s.r[i].ready[slot] = s.r[i].free_[slot] = (uint32_t)uses;
        }
    }
    srand(seed);
    for (;;) {
        int ran = 0, start = rand() % P;
        for (int n = 0; n < P && !ran; n++) { ran = try_op(&s, (start + n) % P); }
        if (ran) { continue; }
        int done = 1;
        for (int i = 0; i < P; i++) { done &= s.r[i].op >= (P == 1 ? COLLECTIVES : COLLECTIVES * 2 * (P - 1)); }
        if (!done) { s.errors++; } // no rank can go on: deadlock
        break;
    }
    for (int coll = 0; coll < COLLECTIVES; coll++) {
        for (int i = 0; i < P; i++) {
            const Rank *me = &s.r[i];
            if (is_ag(coll)) {
                for (int c = 0; c < P; c++) { s.errors += me->seen[coll][c] != 1; }
                continue;
            }
            s.errors += me->final_count[coll] != P;
            for (int n = 0; n < me->final_count[coll] && n < P; n++) {
                s.errors += me->final_order[coll][n] != ring_mod(i + 1 + n, P); // c + 1 first, c itself last
            }
        }
    }
    return s.errors;
}

static void test_schedule(void) {
    const uint64_t starts[] = {0, 1, 2 * ((uint64_t)1 << 32) - 3}; // fresh, odd, across the 32-bit wrap of a slot
    int bad = 0;
    for (int P = 1; P <= MAX_P; P++) {
        for (int s = 0; s < (int)(sizeof(starts) / sizeof(starts[0])); s++) {
            for (unsigned seed = 1; seed <= 50; seed++) {
                int e = simulate(P, starts[s], seed);
                if (e) { printf("  P %d start %llu seed %u: %d errors\n", P, (unsigned long long)starts[s], seed, e); }
                bad += e;
            }
        }
    }
    check(bad == 0, "ring schedule: AG every chunk once, RS every rank once in order, no overwrite, no deadlock",
          "%d errors", bad);
}

static void test_values(void) {
    // by hand, P = 4, rank 1: AG multiplies chunks 1, 0, 3, 2; RS 0, 3, 2, 1 (its own last)
    int ag[4], rs[4];
    for (int k = 0; k < 4; k++) {
        ag[k] = ring_ag_chunk(1, k, 4);
        rs[k] = ring_rs_chunk(1, k, 4);
    }
    check(ag[0] == 1 && ag[1] == 0 && ag[2] == 3 && ag[3] == 2 && rs[0] == 0 && rs[1] == 3 && rs[2] == 2 && rs[3] == 1,
          "ring schedule: rank 1 of 4 by hand", "AG %d %d %d %d, RS %d %d %d %d", ag[0], ag[1], ag[2], ag[3], rs[0],
          rs[1], rs[2], rs[3]);
    RingTransfer a = ring_transfer(0), b = ring_transfer(5);
    check(a.slot == 0 && a.send_after == 0 && a.value == 1 && b.slot == 1 && b.send_after == 2 && b.value == 3,
          "ring schedule: transfer slots and flag values", "t0 slot %d after %u value %u; t5 slot %d after %u value %u",
          a.slot, a.send_after, a.value, b.slot, b.send_after, b.value);
    check(ring_flag_reached(2u, 0xfffffffeu) && !ring_flag_reached(0xfffffffeu, 2u),
          "ring schedule: flags compare across the 32-bit wrap", "");
}

int main(void) {
    test_values();
    test_schedule();
    return test_exit();
}
