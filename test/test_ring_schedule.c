/*
 * test_ring_schedule.c: the ring collectives' schedule (llmc/ring_schedule.h) for TP groups of 1 to 8, run as the
 * ranks would, in a random interleaving of their transfers' pieces under the slot and flag protocol, with collectives
 * of 1 to RING_MAX_PIECES pieces a transfer: all-gather + GEMM leaves every rank every chunk exactly once; GEMM +
 * reduce-scatter (each piece added and sent on as soon as it lands, as tp_ring_reduce_scatter does) leaves every
 * rank its own chunk summed over every rank exactly once in every piece, in the fixed order (rank c + 1 first, c
 * last); no piece overwrites a slot not yet consumed, none reads one not yet written, none deadlocks, and the
 * counters may wrap. Also the pieces' rows.
 */
#include <stdlib.h>
#include <string.h>

#include "../llmc/ring_schedule.h"
#include "test_util.h"

#define MAX_P 8
#define COLLECTIVES 6 // alternately AG and RS, back to back on the same slots
#define MAX_OPS (COLLECTIVES * (MAX_P - 1) * (2 * RING_MAX_PIECES + 1))

static const int PIECES[COLLECTIVES] = {1, 3, RING_MAX_PIECES, 1, 2, RING_MAX_PIECES}; // a transfer's, by collective

typedef enum { OP_SEND, OP_RECV, OP_RELEASE } OpKind;
typedef struct {
    OpKind kind;
    int coll, j, p; // transfer j of the collective, piece p
} Op;

typedef struct {
    int chunk;        // which chunk the piece carries
    int order[MAX_P]; // RS: the ranks whose products the partial sum holds, in the order they were added
    int count;
    uint64_t t;       // the transfer it was written for
} Piece;

typedef struct {
    Piece pieces[RING_MAX_PIECES];
    int full;   // written (from its first piece on) and not yet released
    uint64_t t; // the transfer that filled it
} Slot;

typedef struct {
    Slot slots[RING_SLOTS];
    uint32_t ready[RING_SLOTS], free_[RING_SLOTS];
    int op;                                  // the next of the ops every rank runs
    int seen[COLLECTIVES][MAX_P];            // AG: how often each chunk was multiplied
    int order[RING_MAX_PIECES][MAX_P], count[RING_MAX_PIECES]; // RS: each piece's sum this rank holds
    int final_order[COLLECTIVES][RING_MAX_PIECES][MAX_P], final_count[COLLECTIVES][RING_MAX_PIECES];
} Rank;

typedef struct {
    int P;
    uint64_t t0; // the ring's transfers before the first collective (to cross the counters' wrap)
    Op ops[MAX_OPS];
    int num_ops;
    Rank r[MAX_P];
    int errors;
} Sim;

static int is_ag(int coll) { return coll % 2 == 0; }

static void add_op(Sim *s, OpKind kind, int coll, int j, int p) {
    Op o = {kind, coll, j, p};
    s->ops[s->num_ops++] = o;
}

// Every rank's ops, in the order it queues them: AG: transfer j's pieces sent, then received, then released; RS:
// transfer 0's pieces sent, then for each transfer j each piece received (added) and, but at the last, sent on as
// transfer j + 1's, then j released.
static void make_ops(Sim *s) {
    int P = s->P;
    s->num_ops = 0;
    for (int coll = 0; coll < COLLECTIVES && P > 1; coll++) {
        int S = PIECES[coll];
        if (is_ag(coll)) {
            for (int j = 0; j < P - 1; j++) {
                for (int p = 0; p < S; p++) { add_op(s, OP_SEND, coll, j, p); }
                for (int p = 0; p < S; p++) { add_op(s, OP_RECV, coll, j, p); }
                add_op(s, OP_RELEASE, coll, j, 0);
            }
            continue;
        }
        for (int p = 0; p < S; p++) { add_op(s, OP_SEND, coll, 0, p); }
        for (int j = 0; j < P - 1; j++) {
            for (int p = 0; p < S; p++) {
                add_op(s, OP_RECV, coll, j, p);
                if (j + 1 < P - 1) { add_op(s, OP_SEND, coll, j + 1, p); }
            }
            add_op(s, OP_RELEASE, coll, j, 0);
        }
    }
}

// Rank i's step 0 of collective coll (before its first send): AG multiplies its own chunk, RS makes its first product.
static void step_zero(Sim *s, int i, int coll) {
    Rank *me = &s->r[i];
    if (is_ag(coll)) {
        me->seen[coll][ring_ag_chunk(i, 0, s->P)]++;
        return;
    }
    for (int p = 0; p < PIECES[coll]; p++) {
        me->count[p] = 0;
        me->order[p][me->count[p]++] = i;
    }
}

static void keep_final(Rank *me, int coll) {
    memcpy(me->final_order[coll], me->order, sizeof(me->order));
    memcpy(me->final_count[coll], me->count, sizeof(me->count));
}

// Tries rank i's next operation; returns 1 if it ran.
static int try_op(Sim *s, int i) {
    int P = s->P;
    Rank *me = &s->r[i];
    if (P == 1) { // no transfers: a collective is its one step
        if (me->op >= COLLECTIVES) { return 0; }
        step_zero(s, i, me->op);
        if (!is_ag(me->op)) { keep_final(me, me->op); }
        me->op++;
        return 1;
    }
    if (me->op >= s->num_ops) { return 0; }
    Op o = s->ops[me->op];
    uint64_t t = s->t0 + (uint64_t)o.coll * (P - 1) + o.j;
    RingTransfer x = ring_transfer(t);
    if (o.kind == OP_SEND) {
        if (o.p == 0 && !ring_flag_reached(me->free_[x.slot], x.send_after)) { return 0; }
        if (o.j == 0 && o.p == 0) { step_zero(s, i, o.coll); }
        Rank *next = &s->r[ring_next(i, P)];
        Slot *dst = &next->slots[x.slot];
        if (o.p == 0) {
            if (dst->full) { s->errors++; } // overwrote a transfer its receiver had not consumed
            dst->full = 1;
            dst->t = t;
        } else if (!dst->full || dst->t != t) {
            s->errors++; // a later piece into a slot its first did not fill
        }
        Piece *piece = &dst->pieces[o.p];
        piece->t = t;
        if (is_ag(o.coll)) {
            piece->chunk = ring_ag_chunk(i, o.j, P);
        } else {
            piece->chunk = ring_rs_chunk(i, o.j, P);
            memcpy(piece->order, me->order[o.p], sizeof(piece->order));
            piece->count = me->count[o.p];
        }
        next->ready[x.slot] = x.ready + (uint32_t)o.p;
    } else if (o.kind == OP_RECV) {
        if (!ring_flag_reached(me->ready[x.slot], x.ready + (uint32_t)o.p)) { return 0; }
        Slot *src = &me->slots[x.slot];
        const Piece *piece = &src->pieces[o.p];
        if (!src->full || src->t != t || piece->t != t) { s->errors++; } // read what its sender had not written
        int k = o.j + 1;
        if (is_ag(o.coll)) {
            if (piece->chunk != ring_ag_chunk(i, k, P)) { s->errors++; }
            if (o.p == 0) { me->seen[o.coll][piece->chunk]++; }
        } else {
            if (piece->chunk != ring_rs_chunk(i, k, P)) { s->errors++; }
            memcpy(me->order[o.p], piece->order, sizeof(piece->order));
            me->count[o.p] = piece->count;
            if (me->count[o.p] < MAX_P) { me->order[o.p][me->count[o.p]++] = i; }
            if (k == P - 1 && o.p == PIECES[o.coll] - 1) { keep_final(me, o.coll); }
        }
    } else {
        Slot *src = &me->slots[x.slot];
        if (!src->full || src->t != t) { s->errors++; }
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
    make_ops(&s);
    // the flags as a ring that made t0 transfers (of RING_MAX_PIECES pieces) left them: every use written and consumed
    for (int i = 0; i < P; i++) {
        for (int slot = 0; slot < RING_SLOTS; slot++) {
            uint64_t uses = t0 / RING_SLOTS + (slot < (int)(t0 % RING_SLOTS));
            s.r[i].ready[slot] = (uint32_t)(uses * RING_MAX_PIECES);
            s.r[i].free_[slot] = (uint32_t)uses;
        }
    }
    srand(seed);
    for (;;) {
        int ran = 0, start = rand() % P;
        for (int n = 0; n < P && !ran; n++) { ran = try_op(&s, (start + n) % P); }
        if (ran) { continue; }
        int done = 1;
        for (int i = 0; i < P; i++) { done &= s.r[i].op >= (P == 1 ? COLLECTIVES : s.num_ops); }
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
            for (int p = 0; p < PIECES[coll]; p++) {
                s.errors += me->final_count[coll][p] != P;
                for (int n = 0; n < me->final_count[coll][p] && n < P; n++) {
                    s.errors += me->final_order[coll][p][n] != ring_mod(i + 1 + n, P); // c + 1 first, c itself last
                }
            }
        }
    }
    return s.errors;
}

static void test_schedule(void) {
    // fresh, odd, and across the 32-bit wrap of a slot's ready flag (counted in pieces: RING_MAX_PIECES a use)
    const uint64_t starts[] = {0, 1, 2 * (((uint64_t)1 << 32) / RING_MAX_PIECES) - 3};
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
    check(bad == 0,
          "ring schedule: AG every chunk once, RS every rank once in order in every piece, no overwrite, no deadlock",
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
    check(a.slot == 0 && a.send_after == 0 && a.ready == 1 && a.value == 1 && b.slot == 1 && b.send_after == 2 &&
              b.ready == 2 * RING_MAX_PIECES + 1 && b.value == 3,
          "ring schedule: transfer slots and flag values", "t0 slot %d after %u ready %u value %u; t5 slot %d after %u "
          "ready %u value %u", a.slot, a.send_after, a.ready, a.value, b.slot, b.send_after, b.ready, b.value);
    check(ring_flag_reached(2u, 0xfffffffeu) && !ring_flag_reached(0xfffffffeu, 2u),
          "ring schedule: flags compare across the 32-bit wrap", "");
}

static void test_pieces(void) {
    // 4096 rows in 4 pieces of 64-row units: 1024 each; 1000 rows in 3: 320, 320, 360 (the last takes the rest);
    // 100 rows of 64-row units in 4 pieces: 0, 0, 0, 100 (empty pieces still count); every cut covers the rows once
    int ok = ring_piece_first(4096, 64, 4, 1) == 1024 && ring_piece_rows(4096, 64, 4, 3) == 1024 &&
             ring_piece_first(1000, 64, 3, 1) == 320 && ring_piece_first(1000, 64, 3, 2) == 640 &&
             ring_piece_rows(1000, 64, 3, 2) == 360 && ring_piece_rows(100, 64, 4, 0) == 0 &&
             ring_piece_rows(100, 64, 4, 3) == 100;
    int bad = 0;
    for (size_t rows = 0; rows < 700; rows += 7) {
        for (size_t unit = 1; unit <= 64; unit *= 4) {
            for (int pieces = 1; pieces <= RING_MAX_PIECES; pieces++) {
                size_t next = 0;
                for (int p = 0; p < pieces; p++) {
                    size_t first = ring_piece_first(rows, unit, pieces, p);
                    bad += first != next || (p > 0 && first % unit != 0);
                    next = first + ring_piece_rows(rows, unit, pieces, p);
                }
                bad += next != rows;
            }
        }
    }
    check(ok && bad == 0, "ring schedule: pieces of rows, cut at whole units, cover every row once",
          "by hand %s, %d bad cuts", ok ? "right" : "wrong", bad);
}

int main(void) {
    test_values();
    test_pieces();
    test_schedule();
    return test_exit();
}
