/*
 * test_gtp_plan.c: the GTP sharding arithmetic and the prefetch chain of llmc/gtp_plan.h.
 * - shards: over the GTP group of every TP rank (TP 1..3, GTP 1..5, shapes that divide and that need padding), every
 *   element of a TP-local sharded tensor is held by exactly one rank, every element of a whole tensor by every
 *   rank, and the padding is exactly what G x ceil(rows / G) adds; the layout's sizes follow; for GPT-2 and for a
 *   grouped-query, untied Llama without biases (its TP-local QKV of unequal parts, SwiGLU fc of two), with a Llama's
 *   shard traced to its global element at known values;
 * - round trip: TP-local tensors cut into each rank's flat buffer and gathered back are the same bits, with zeros
 *   in the padding (GPT-2 and Llama);
 * - the chain, driven as the GPU build drives it (forward: a half-block's two weights interleaved over 1 or 2
 *   chunks; backward: one use each): every weight gathered once, into a buffer whose previous weight was released,
 *   before its first use; at most depth + 1 weights held; a depth too small for the interleaving fails with one
 *   line; uses at known values;
 * - bytes at known values: a pass's gathers (compute precision, FP8 codes, FP8 with bf16 blocks at the ends) and the
 *   pool buffers (FP8 codes with their transposed copy after them, aligned);
 * - gradient sums and the norm over DP x GTP x TP meshes, with and without ZeRO-1, driven as the GPU build drives
 *   them (test_data_sums): every element a rank updates holds the sum over all data ranks, once; the norm counts
 *   every element of the model once (GPT-2 and Llama, whose untied LM head is vocab-parallel and GTP-whole).
 */
#include "../llmc/gtp_plan.h"
#include "test_util.h"

#define CHAIN_TIMEOUT_S 10.0

// C = 48, 6 heads of 8 (qkv rows 144, or under TP 3 of 2 heads 48), Vp = 96, T = 16, 2 layers. GTP 5 pads every
// sharded tensor; GTP 4 pads fc projection's 48 / TP 3 = 16 rows not at all but qkv's 3 x 16 = 48 under TP 3 none.
static GPTConfig tiny_config(void) {
    GPTConfig c = config_gpt2(16, 90, 2, 6, 48);
    c.padded_vocab_size = 96; // not a multiple of 128: it divides by 3 and 6
    return c;
}

// A Llama every TP of 1..3 splits: C = 48, 6 query heads of 8 in 3 groups (TP 2: key/value heads 2, 1), F = 48,
// Vp = 96, untied, no biases. TP-local qkv rows: 96 whole; 64 and 32 under TP 2; 32 under TP 3.
static GPTConfig tiny_llama(void) {
    GPTConfig c = config_default(ARCH_LLAMA, 16, 2, 6, 48);
    c.num_kv_heads = 3;
    c.ffn_hidden = 48;
    c.vocab_size = 90;
    c.padded_vocab_size = 96;
    return c;
}

// Over the GTP group of TP rank tp_rank: how often each TP-local element is held, against what it must be.
static int check_shards(const GPTConfig *c, int tp, int gtp, int tp_rank) {
    Mesh m0 = mesh_make(tp * gtp, tp_rank, tp, gtp);
    ParamLayout pt;
    param_layout_local(c, &m0, &pt);
    int bad = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        unsigned char *seen = (unsigned char *)calloc_check(pt.size[t], 1, "shard counts");
        size_t padding = 0;
        for (int g = 0; g < gtp; g++) {
            Mesh m = mesh_make(tp * gtp, mesh_rank_of(&m0, 0, g, tp_rank), tp, gtp);
            ParamLayout pg;
            param_layout_gtp(c, &m, &pg);
            for (size_t i = 0; i < pg.size[t]; i++) {
                size_t e = gtp_local_to_tp(c, &m, t, i);
                if (e == GTP_PADDING) { padding++; } else if (e >= pt.size[t]) { bad++; } else { seen[e]++; }
            }
        }
        int want = gtp_sharded(t) ? 1 : gtp;
        for (size_t e = 0; e < pt.size[t]; e++) { bad += seen[e] != want; }
        GtpShape s = gtp_shape(c, &m0, t);
        bad += padding != param_num_layers(c, t) * (s.padded_rows - s.rows) * s.cols;
        bad += !gtp_sharded(t) && (s.shard_rows != s.rows || s.padded_rows != s.rows);
        bad += gtp_sharded(t) && (s.padded_rows < s.rows || s.padded_rows - s.rows >= (size_t)gtp);
        free(seen);
    }
    return bad;
}

static void test_shards(void) {
    GPTConfig cases[] = {tiny_config(), tiny_llama()};
    for (int i = 0; i < 2; i++) {
        const GPTConfig *c = &cases[i];
        int bad = 0, padded = 0;
        for (int tp = 1; tp <= 3; tp++) for (int gtp = 1; gtp <= 5; gtp++) for (int r = 0; r < tp; r++) {
            int b = check_shards(c, tp, gtp, r);
            if (b) { printf("  %s tp %d gtp %d tp rank %d: %d errors\n", ARCH_NAMES[c->arch], tp, gtp, r, b); }
            bad += b;
            Mesh m = mesh_make(tp * gtp, r, tp, gtp);
            padded += gtp_shape(c, &m, P_QKVW).padded_rows != gtp_shape(c, &m, P_QKVW).rows;
        }
        char name[160];
        snprintf(name, sizeof(name), "gtp shards of %s hold every sharded element once, every whole tensor on every "
                 "rank, padding exact", ARCH_NAMES[c->arch]);
        check(bad == 0 && padded > 0, name, "%d errors, %d padded layouts", bad, padded);
    }
    GPTConfig c = tiny_config();
    // By hand: TP 1, GTP 5, fc (192, 48): S = 39, padded 195; rank 4 keeps rows 156..191 and 3 rows of padding
    Mesh m = mesh_make(5, 4, 1, 5);
    GtpShape s = gtp_shape(&c, &m, P_FCW);
    Span real = gtp_shard_real_rows(&s, 4);
    ParamLayout pg, pt;
    param_layout_gtp(&c, &m, &pg);
    param_layout_local(&c, &m, &pt);
    int ok = s.rows == 192 && s.shard_rows == 39 && s.padded_rows == 195 && real.begin == 156 && real.count == 36;
    ok = ok && pg.size[P_FCW] == 2 * 39 * 48 && pg.size[P_LN1W] == pt.size[P_LN1W] && pg.size[P_WTE] == pt.size[P_WTE];
    ok = ok && gtp_local_to_tp(&c, &m, P_FCW, 39 * 48 + 35 * 48 + 7) == (192 + 156 + 35) * 48 + 7;
    ok = ok && gtp_local_to_tp(&c, &m, P_FCW, 36 * 48) == GTP_PADDING;
    check(ok, "gtp shard of fc at known values (TP 1, GTP 5, rank 4)", "S %zu padded %zu real %zu+%zu", s.shard_rows,
          s.padded_rows, real.begin, real.count);
    Mesh one = mesh_make(3, 1, 3, 1);
    ParamLayout a, b;
    param_layout_gtp(&c, &one, &a);
    param_layout_local(&c, &one, &b);
    check(memcmp(&a, &b, sizeof(a)) == 0, "gtp 1: the layout is the TP-local one", "they differ");
    // Llama, TP 2 x GTP 5, TP rank 1 (key/value head 2, query heads 4-5): its qkv is 32 rows [q 16 | k 8 | v 8],
    // S = 7, padded 35; GTP rank 4 keeps rows 28..31 (the last 4 v rows) and 3 of padding. Its shard row 3 of layer 1
    // is TP-local row 31, global row (6 + 3 + 3) x 8 - 1 = 95 of layer 1 (the last row of v head 2).
    GPTConfig llama = tiny_llama();
    Mesh lm = mesh_make(10, 9, 2, 5); // (dp, gtp, tp) = (0, 4, 1)
    GtpShape qs = gtp_shape(&llama, &lm, P_QKVW), fs = gtp_shape(&llama, &lm, P_FCW);
    Span qreal = gtp_shard_real_rows(&qs, 4);
    size_t e = gtp_local_to_tp(&llama, &lm, P_QKVW, (7 + 3) * 48 + 5);
    ParamLayout lg;
    param_layout_gtp(&llama, &lm, &lg);
    int lok = lm.tp_rank == 1 && lm.gtp_rank == 4 && qs.rows == 32 && qs.shard_rows == 7 && qs.padded_rows == 35 &&
              qreal.begin == 28 && qreal.count == 4 && e == (32 + 31) * 48 + 5 &&
              tp_local_to_global(&llama, &lm, P_QKVW, e) == (96 + 95) * 48 + 5;
    lok = lok && gtp_local_to_tp(&llama, &lm, P_QKVW, 4 * 48) == GTP_PADDING;
    lok = lok && fs.rows == 48 && fs.shard_rows == 10 && lg.size[P_QKVB] == 0 && lg.size[P_FCB] == 0 &&
          lg.size[P_LMHEAD] == 48 * 48; // lmhead: its 96 / TP 2 vocabulary rows, whole over GTP
    check(lok, "gtp shard of a llama's qkv at known values (TP 2 x GTP 5, TP rank 1, GTP rank 4)",
          "rows %zu S %zu padded %zu real %zu+%zu element %zu", qs.rows, qs.shard_rows, qs.padded_rows, qreal.begin,
          qreal.count, e);
}

static int round_trip_errors(const GPTConfig *cp) {
    GPTConfig c = *cp;
    int bad = 0;
    for (int tp = 1; tp <= 2; tp++) for (int gtp = 1; gtp <= 5; gtp += 2) {
        Mesh m0 = mesh_make(tp * gtp, tp - 1, tp, gtp); // the last TP rank's group
        ParamLayout pt, pg;
        param_layout_local(&c, &m0, &pt);
        float *tp_buf = (float *)malloc_check(pt.total * sizeof(float), "tp buffer");
        float *back = (float *)calloc_check(pt.total, sizeof(float), "tp buffer");
        for (size_t i = 0; i < pt.total; i++) { tp_buf[i] = (float)i + 0.5f; }
        float **local = (float **)malloc_check((size_t)gtp * sizeof(float *), "gtp buffers");
        for (int g = 0; g < gtp; g++) {
            Mesh m = mesh_make(tp * gtp, mesh_rank_of(&m0, 0, g, tp - 1), tp, gtp);
            param_layout_gtp(&c, &m, &pg);
            local[g] = (float *)malloc_check(pg.total * sizeof(float), "gtp buffer");
            memset(local[g], 0xff, pg.total * sizeof(float)); // NaN: padding must be overwritten with zeros
            param_slice_gtp(&c, &m, tp_buf, local[g]);
            for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
                for (size_t i = 0; i < pg.size[t]; i++) {
                    size_t e = gtp_local_to_tp(&c, &m, t, i);
                    float want = e == GTP_PADDING ? 0.0f : tp_buf[pt.offset[t] + e];
                    bad += memcmp(&local[g][pg.offset[t] + i], &want, sizeof(float)) != 0;
                }
            }
        }
        param_gather_gtp(&c, &m0, (const float *const *)local, back);
        bad += memcmp(back, tp_buf, pt.total * sizeof(float)) != 0;
        for (int g = 0; g < gtp; g++) { free(local[g]); }
        free(local);
        free(tp_buf);
        free(back);
    }
    return bad;
}

static void test_round_trip(void) {
    GPTConfig cases[] = {tiny_config(), tiny_llama()};
    for (int i = 0; i < 2; i++) {
        char name[128];
        snprintf(name, sizeof(name), "gtp slice and gather of %s round trip bit-exactly, padding zero",
                 ARCH_NAMES[cases[i].arch]);
        int bad = round_trip_errors(&cases[i]);
        check(bad == 0, name, "%d errors", bad);
    }
}

// ---------------------------------------------------------------------------------------------------------
// The chain

// The pool as the GPU would hold it: what each buffer holds, and whether its holder was released.
typedef struct {
    GtpChain ch;
    int slot_holder[GTP_PREFETCH_MAX + 1];
    int slot_released[GTP_PREFETCH_MAX + 1];
    int *gathered; // per use: times gathered
    int bad, held_most;
} Pool;

static void pool_gather(Pool *p, int use) {
    if (use < 0) { return; }
    int s = gtp_chain_slot(&p->ch, use);
    if (p->slot_holder[s] >= 0 && !p->slot_released[s]) { p->bad++; } // overwritten under a reader
    p->slot_holder[s] = use;
    p->slot_released[s] = 0;
    p->gathered[use]++;
}

static void pool_start(Pool *p, int uses, int depth) {
    memset(p->slot_holder, 0xff, sizeof(p->slot_holder));
    memset(p->slot_released, 0, sizeof(p->slot_released));
    int n = gtp_chain_start(&p->ch, uses, depth);
    for (int i = 0; i < n; i++) { pool_gather(p, i); }
}

static void pool_use(Pool *p, int use) {
    int s = gtp_chain_acquire(&p->ch, use);
    p->bad += p->slot_holder[s] != use || p->slot_released[s];
    int held = p->ch.issued - p->ch.released;
    p->held_most = held > p->held_most ? held : p->held_most;
}

static void pool_release(Pool *p, int use) {
    p->slot_released[gtp_chain_slot(&p->ch, use)] = 1;
    pool_gather(p, gtp_chain_release(&p->ch, use));
}

/*
 * One pass as train_gpt.cu runs it. Forward: each half-block's two linear layers run chunk after chunk (qkv and the
 * attention projection, then fc and the fc projection), each released after its last chunk's GEMM. Backward: each
 * weight's input gradient once, in chain order.
 */
static void run_pass(Pool *p, int L, GtpPass pass, int chunks) {
    pool_start(p, gtp_chain_uses(L), p->ch.slots - 1);
    if (pass == GTP_BACKWARD) {
        for (int i = 0; i < gtp_chain_uses(L); i++) {
            GtpUse u = gtp_chain_use(L, pass, i);
            p->bad += gtp_chain_index(L, pass, u.layer, u.linear) != i;
            pool_use(p, i);
            pool_release(p, i);
        }
        return;
    }
    for (int l = 0; l < L; l++) {
        for (int half = 0; half < 2; half++) {
            int a = gtp_chain_index(L, pass, l, 2 * half), b = a + 1;
            for (int k = 0; k < chunks; k++) {
                pool_use(p, a);
                if (k == chunks - 1) { pool_release(p, a); }
                pool_use(p, b);
                if (k == chunks - 1) { pool_release(p, b); }
            }
        }
    }
}

typedef struct {
    int L, depth, chunks;
    GtpPass pass;
} ChainCase;

static int chain_case_bad(const ChainCase *cc) {
    Pool p;
    memset(&p, 0, sizeof(p));
    int uses = gtp_chain_uses(cc->L);
    p.gathered = (int *)calloc_check((size_t)uses, sizeof(int), "gather counts");
    p.ch.slots = cc->depth + 1;
    run_pass(&p, cc->L, cc->pass, cc->chunks);
    for (int i = 0; i < uses; i++) { p.bad += p.gathered[i] != 1; }
    p.bad += p.ch.released != uses || p.held_most > cc->depth + 1;
    free(p.gathered);
    return p.bad;
}

static void run_chain_case(void *arg) { exit(chain_case_bad((const ChainCase *)arg) ? 2 : 0); }

static void test_chain(void) {
    int bad = 0, cases = 0;
    for (int L = 1; L <= 5; L += 2) for (int depth = 1; depth <= GTP_PREFETCH_MAX; depth++) {
        for (int chunks = 1; chunks <= 2; chunks++) for (int pass = 0; pass < 2; pass++) {
            ChainCase cc = {L, depth, chunks, (GtpPass)pass};
            int b = chain_case_bad(&cc);
            if (b) { printf("  L %d depth %d chunks %d pass %d: %d errors\n", L, depth, chunks, pass, b); }
            bad += b;
            cases++;
        }
    }
    check(bad == 0 && cases > 0, "gtp chain: each weight gathered once before use, no buffer overwritten under a "
          "reader, at most depth + 1 held", "%d errors", bad);
    // depth 0 holds one weight: enough for the backward and a forward of one chunk, not for two interleaved
    ChainCase ok1 = {3, 0, 1, GTP_FORWARD}, ok2 = {3, 0, 2, GTP_BACKWARD}, stall = {3, 0, 2, GTP_FORWARD};
    check(chain_case_bad(&ok1) == 0 && chain_case_bad(&ok2) == 0, "gtp chain of depth 0 without interleaving",
          "errors");
    Child child;
    child_start(&child, run_chain_case, &stall);
    child_wait(&child, now_s() + CHAIN_TIMEOUT_S);
    check(child.status == 1 && strstr(child.err, "used before its gather was issued") &&
          strstr(child.err, "raise --gtp-prefetch"), "gtp chain of depth 0 under two chunks fails with one line",
          "status %d: %s", child.status, child.err);
    // uses at known values: 3 layers, backward use 5 is layer 1's fc; forward use 6 layer 1's fc
    GtpUse b5 = gtp_chain_use(3, GTP_BACKWARD, 5), f6 = gtp_chain_use(3, GTP_FORWARD, 6);
    check(b5.layer == 1 && b5.linear == LIN_FC && f6.layer == 1 && f6.linear == LIN_FC,
          "gtp chain uses at known values", "backward 5: %d/%d forward 6: %d/%d", b5.layer, b5.linear, f6.layer,
          f6.linear);
}

static void test_bytes(void) {
    // a Llama's gathers: GTP 4 of qkv 96, attention projection 48, fc 96 (gate | up), fc projection 48 rows of 48
    GPTConfig llama = tiny_llama();
    Mesh g4 = mesh_make(4, 0, 1, 4);
    size_t llama_layer = 3 * (24 * 48 + 12 * 48 + 24 * 48 + 12 * 48);
    Fp8Recipe every = {FP8_DELAYED, 16, 0, 1.0f, 0, 1};
    size_t lb = gtp_pass_gather_bytes(&llama, &g4, NULL, 2), lb8 = gtp_pass_gather_bytes(&llama, &g4, &every, 2);
    check(lb == 2 * llama_layer * 2 && lb8 == 2 * llama_layer, "gtp bytes gathered a pass of a llama at known values",
          "bf16 %zu vs %zu, fp8 %zu vs %zu", lb, 2 * llama_layer * 2, lb8, 2 * llama_layer);
    GPTConfig c = tiny_config();
    Mesh m = mesh_make(4, 0, 1, 4); // shards of 144/4 = 36, 48/4 = 12, 192/4 = 48, 48/4 = 12 rows of 48, 48, 48, 192
    size_t layer = 3 * (36 * 48 + 12 * 48 + 48 * 48 + 12 * 192); // elements a rank receives of one layer's weights
    size_t want = 2 * layer * 2;
    size_t got = gtp_pass_gather_bytes(&c, &m, NULL, 2);
    Mesh one = mesh_make(1, 0, 1, 1);
    check(got == want && gtp_pass_gather_bytes(&c, &one, NULL, 2) == 0, "gtp bytes gathered a pass at known values",
          "%zu vs %zu", got, want);
    // fp8: the FP8 blocks' codes a byte each; with a bf16 block at each end of 3 layers, those two gather bf16
    Fp8Recipe all = {FP8_DELAYED, 16, 0, 1.0f, 0, 1}, ends = all;
    ends.bf16_blocks = 1;
    GPTConfig c3 = c;
    c3.num_layers = 3;
    size_t fp8_all = gtp_pass_gather_bytes(&c, &m, &all, 2), fp8_ends = gtp_pass_gather_bytes(&c3, &m, &ends, 2);
    check(fp8_all == 2 * layer && fp8_ends == 2 * layer * 2 + layer, "gtp fp8 bytes gathered a pass at known values",
          "%zu vs %zu, %zu vs %zu", fp8_all, 2 * layer, fp8_ends, 2 * layer * 2 + layer);
    /*
     * Pool buffers at GTP 5 (every weight padded): gathered rows 145, 50, 195, 50 of 48, 48, 48, 192 columns. FP8:
     * the codes, rounded up to GTP_BUFFER_ALIGN, then the real rows transposed: qkv 7168 + 6912, attention projection
     * 2560 + 2304, fc 9472 + 9216, fc projection 9728 + 9216 = 18944 the largest; bf16: fc projection's 50 x 192 x 2.
     */
    Mesh m5 = mesh_make(5, 0, 1, 5);
    GtpShape fcproj = gtp_shape(&c, &m5, P_FCPROJW);
    size_t at = gtp_transposed_at(&fcproj), b8 = gtp_buffer_bytes(&c, &m5, &all, 2);
    size_t b16 = gtp_buffer_bytes(&c, &m5, NULL, 2), mixed = gtp_buffer_bytes(&c3, &m5, &ends, 2);
    check(at == 9728 && at % GTP_BUFFER_ALIGN == 0 && b8 == 18944 && b16 == 19200 && mixed == 19200 &&
              gtp_buffer_bytes(&c, &m5, NULL, 4) == 38400, "gtp pool buffer bytes at known values",
          "transposed at %zu, fp8 %zu, bf16 %zu, mixed %zu", at, b8, b16, mixed);
}

// Ranks numbered node by node, ranks_per_node each: does some rank see its GTP group span nodes?
static int some_group_spans_nodes(int world, int tp, int gtp, int ranks_per_node) {
    int seen = 0;
    for (int r = 0; r < world; r++) {
        Mesh m = mesh_make(world, r, tp, gtp);
        seen |= gtp_group_spans_nodes(&m, r % ranks_per_node);
    }
    return seen;
}

static void test_nodes(void) {
    // {world, tp, gtp, ranks per node, spans}: a group spans nodes exactly when tp x gtp does not divide the node
    int cases[][5] = {{8, 1, 8, 8, 0},  {16, 1, 8, 8, 0}, {16, 1, 16, 8, 1}, {16, 2, 4, 8, 0}, {16, 2, 8, 8, 1},
                      {16, 4, 4, 8, 1}, {12, 1, 4, 6, 1}, {12, 1, 3, 6, 0}, {8, 8, 1, 4, 0},  {4, 1, 2, 1, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int *c = cases[i];
        int got = some_group_spans_nodes(c[0], c[1], c[2], c[3]);
        check(got == c[4], "gtp group spanning nodes", "world %d tp %d gtp %d, %d ranks a node: %d, want %d", c[0],
              c[1], c[2], c[3], got, c[4]);
    }
    // only the ranks on the later node see it: world 16, gtp 16, 8 a node: ranks 8..15
    Mesh first = mesh_make(16, 7, 1, 16), later = mesh_make(16, 8, 1, 16);
    check(!gtp_group_spans_nodes(&first, 7) && gtp_group_spans_nodes(&later, 0), "gtp spanning seen by later ranks",
          "rank 7: %d, rank 8: %d", gtp_group_spans_nodes(&first, 7), gtp_group_spans_nodes(&later, 0));
}

// ---------------------------------------------------------------------------------------------------------
// Gradient sums and the norm over the data group

/*
 * One rank of a simulated mesh: its GTP-local buffer (padded to its DP group's ZeRO-1 slices as dp_init pads it), the
 * model element (param_layout()'s index) behind each element or GTP_PADDING, and its gradient. A gradient is a sum of
 * hashes of (data rank, model element), added modulo 2^64: exact, and a term missing or counted twice changes it.
 */
typedef struct {
    Mesh m;
    ParamLayout pg;
    ZeroShards z;
    int zero;       // ZeRO-1 on: --zero 1 with DP > 1 (dp_init)
    size_t elems;   // the flat buffer's length (dp_buffer_elems)
    size_t *model;  // model element of each buffer element, or GTP_PADDING
    uint64_t *grad;
} SimRank;

static uint64_t grad_term(int data_rank, size_t e) { // splitmix64 of both
    uint64_t x = ((uint64_t)data_rank << 40) ^ (uint64_t)e;
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Rank r's buffer after a backward: a shard's gradient is its GTP group's sum (their reduce-scatter), any other its
// own data rank's term (TP ranks read the same tokens, so they hold the same replicated gradients).
static void sim_rank_init(SimRank *r, const GPTConfig *c, int world, int rank, int tp, int gtp, int zero) {
    r->m = mesh_make(world, rank, tp, gtp);
    r->zero = zero && r->m.dp > 1;
    param_layout_gtp(c, &r->m, &r->pg);
    r->z = zero_shards_make(r->pg.total, r->zero ? r->m.dp : 1);
    r->elems = r->zero ? r->z.padded : r->pg.total;
    r->model = (size_t *)malloc_check(r->elems * sizeof(size_t), "model elements");
    r->grad = (uint64_t *)calloc_check(r->elems, sizeof(uint64_t), "gradients");
    ParamLayout full;
    param_layout(c, &full);
    for (size_t i = r->pg.total; i < r->elems; i++) { r->model[i] = GTP_PADDING; }
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        for (size_t i = 0; i < r->pg.size[t]; i++) {
            size_t b = r->pg.offset[t] + i, e = gtp_local_to_tp(c, &r->m, t, i);
            r->model[b] = e == GTP_PADDING ? GTP_PADDING : full.offset[t] + tp_local_to_global(c, &r->m, t, e);
            if (r->model[b] == GTP_PADDING) { continue; }
            for (int g = 0; g < gtp; g++) {
                if (gtp_sharded(t) || g == r->m.gtp_rank) {
                    r->grad[b] += grad_term(r->m.dp_rank * gtp + g, r->model[b]);
                }
            }
        }
    }
}

// Sums elements [s.begin, s.begin + s.count) over the ranks of `group` that hold rank `me`'s place in it (`onto`: the
// one that receives the sum, or -1 for all of them: an all-reduce), as the collective would.
static void sim_sum(SimRank *ranks, int world, const SimRank *me, MeshGroup group, Span s, int onto) {
    int color = mesh_group_color(&me->m, group);
    for (size_t e = s.begin; e < s.begin + s.count; e++) {
        uint64_t sum = 0;
        for (int q = 0; q < world; q++) {
            if (mesh_group_color(&ranks[q].m, group) == color) { sum += ranks[q].grad[e]; }
        }
        for (int q = 0; q < world; q++) {
            const Mesh *m = &ranks[q].m;
            if (mesh_group_color(m, group) == color && (onto < 0 || mesh_group_key(m, group) == onto)) {
                ranks[q].grad[e] = sum;
            }
        }
    }
}

// llmc/data_parallel.cuh's dp_reduce_group for every group, on every group of ranks at once (a group's first rank
// stands for it): the data group's all-reduce of the spans gtp_grad_sums_over_data names, then the DP sum of the
// others, under ZeRO-1 each part (of a span and a DP rank's padded slice, as dp_for_each_owned_part cuts them) onto
// its owner.
static void sim_reduce(SimRank *ranks, int world, const GPTConfig *c) {
    for (int k = 0; k <= c->num_layers; k++) {
        for (int q = 0; q < world; q++) {
            const SimRank *r = &ranks[q];
            ParamGroup g = param_group(&r->pg, c->num_layers, k);
            for (int i = 0; i < g.count; i++) {
                if (gtp_grad_sums_over_data(&r->m, g.tensor[i])) {
                    if (r->m.data_rank == 0) { sim_sum(ranks, world, r, GROUP_DATA, g.span[i], -1); }
                } else if (r->m.dp_rank == 0 && r->zero) {
                    for (int o = 0; o < r->m.dp; o++) {
                        Span part = span_intersect(g.span[i], zero_padded_slice(&r->z, o));
                        if (part.count > 0) { sim_sum(ranks, world, r, GROUP_DP, part, o); }
                    }
                } else if (r->m.dp_rank == 0 && r->m.dp > 1) {
                    sim_sum(ranks, world, r, GROUP_DP, g.span[i], -1);
                }
            }
        }
    }
}

// The part of the buffer rank r updates (and takes the norm of): its ZeRO-1 slice, else all of it (dp_owned).
static Span sim_owned(const SimRank *r) {
    Span all = {0, r->pg.total};
    return r->zero ? zero_owned(&r->z, r->m.dp_rank) : all;
}

// Errors of one mesh: elements updated from a wrong sum, model elements the norm counts other than once, ranks of a
// GTP group whose ZeRO-1 slices hold other parts of their (identical) whole tensors.
static int data_sums_bad(const GPTConfig *c, int dp, int gtp, int tp, int zero) {
    int world = dp * gtp * tp, bad = 0;
    SimRank *ranks = (SimRank *)calloc_check((size_t)world, sizeof(SimRank), "simulated ranks");
    for (int q = 0; q < world; q++) { sim_rank_init(&ranks[q], c, world, q, tp, gtp, zero); }
    sim_reduce(ranks, world, c);
    ParamLayout full;
    param_layout(c, &full);
    for (int q = 0; q < world; q++) {
        const SimRank *r = &ranks[q];
        Span own = sim_owned(r);
        for (size_t b = own.begin; b < own.begin + own.count; b++) {
            if (r->model[b] == GTP_PADDING) { continue; }
            uint64_t want = 0;
            for (int d = 0; d < r->m.data_size; d++) { want += grad_term(d, r->model[b]); }
            bad += r->grad[b] != want;
        }
        const SimRank *first = &ranks[mesh_rank_of(&r->m, r->m.dp_rank, 0, r->m.tp_rank)];
        bad += memcmp(&r->pg, &first->pg, sizeof(r->pg)) != 0 || r->z.slice != first->z.slice;
    }
    // The norm: one rank's sums its own squares, then over TP and GTP, and under ZeRO-1 over DP too (grad_norm)
    unsigned char *counted = (unsigned char *)malloc_check(full.total, "norm counts");
    for (int view = 0; view < (ranks[0].zero ? 1 : dp); view++) {
        memset(counted, 0, full.total);
        for (int q = 0; q < world; q++) {
            const SimRank *r = &ranks[q];
            if (!r->zero && r->m.dp_rank != view) { continue; }
            for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
                Span tensor = {r->pg.offset[t], r->pg.size[t]}, part = span_intersect(tensor, sim_owned(r));
                if (!norm_counts_tensor(&r->m, t)) { continue; }
                for (size_t b = part.begin; b < part.begin + part.count; b++) {
                    if (r->model[b] != GTP_PADDING) { counted[r->model[b]]++; }
                }
            }
        }
        for (size_t e = 0; e < full.total; e++) { bad += counted[e] != 1; }
    }
    free(counted);
    for (int q = 0; q < world; q++) {
        free(ranks[q].model);
        free(ranks[q].grad);
    }
    free(ranks);
    return bad;
}

static void test_data_sums(void) {
    GPTConfig models[] = {tiny_config(), tiny_llama()};
    int dps[] = {1, 2, 3}, gtps[] = {1, 2, 5}, tps[] = {1, 2};
    for (int i = 0; i < 2; i++) for (int zero = 0; zero <= 1; zero++) {
        int bad = 0;
        for (int a = 0; a < 3; a++) for (int b = 0; b < 3; b++) for (int d = 0; d < 2; d++) {
            int n = data_sums_bad(&models[i], dps[a], gtps[b], tps[d], zero);
            if (n) { printf("  dp %d gtp %d tp %d zero %d: %d errors\n", dps[a], gtps[b], tps[d], zero, n); }
            bad += n;
        }
        char name[160];
        snprintf(name, sizeof(name), "%s: %s", ARCH_NAMES[models[i].arch],
                 zero ? "gtp data sums under ZeRO-1: owned parts summed over all data ranks once, norm once"
                      : "gtp data sums: every rank's gradients summed over all data ranks once, norm once");
        check(bad == 0, name, "%d errors", bad);
    }
    // The same at known values: DP 2 x GTP 2, rank 1 (DP rank 0, GTP rank 1): fc's shard sums over DP only, wte over
    // the data group; rank 1 counts its shards in the norm but not wte (GTP rank 1), its TP-replicated LayerNorm too.
    Mesh m = mesh_make(4, 1, 1, 2);
    check(!gtp_grad_sums_over_data(&m, P_FCW) && gtp_grad_sums_over_data(&m, P_WTE) &&
              gtp_grad_sums_over_data(&m, P_LN1W) && norm_counts_tensor(&m, P_FCW) && !norm_counts_tensor(&m, P_WTE) &&
              !norm_counts_tensor(&m, P_LN1W),
          "gtp data sums at known values", "fcw %d wte %d; norm fcw %d wte %d ln1w %d",
          gtp_grad_sums_over_data(&m, P_FCW), gtp_grad_sums_over_data(&m, P_WTE), norm_counts_tensor(&m, P_FCW),
          norm_counts_tensor(&m, P_WTE), norm_counts_tensor(&m, P_LN1W));
    Mesh one = mesh_make(2, 1, 1, 1);
    check(!gtp_grad_sums_over_data(&one, P_WTE) && norm_counts_tensor(&one, P_WTE),
          "without GTP every gradient sums over DP", "wte over data %d", gtp_grad_sums_over_data(&one, P_WTE));
}

// ---------------------------------------------------------------------------------------------------------
// The copy-engine gathers' flags (llmc/gtp.cuh), simulated: G ranks run the same program of gathers, uses and
// updates on three streams each (compute, AG, update), in random interleavings, with the flag arithmetic of
// llmc/gtp_plan.h. Every pull must read the version of the owner's shard its reader expects (neither an older one:
// read after write; nor a newer one: write after read), and the program must end (no wait that is never met).

#define SIM_MAX_ITEMS 4096
#define SIM_MAX_RANKS 4
#define SIM_LAYERS 3
enum { SIM_COMPUTE, SIM_AG, SIM_UPDATE, SIM_STREAMS };
enum { SIM_PULL, SIM_READ_FLAGS, SIM_WRITE, SIM_PUBLISH, SIM_USE, SIM_JOINT };

typedef struct {
    int stream, kind, layer, owner; // owner: a pull's peer
    uint32_t want, value;           // the flag count waited for (pull, write); the count or version written
    int dep[2];                     // local items done first (events), or -1
} SimItem;

typedef struct {
    SimItem *items;
    int n, *done, next[SIM_STREAMS]; // next: each stream's first item not done (items of a stream run in order)
    uint32_t flags[2 * SIM_MAX_RANKS * SIM_LAYERS];
    uint32_t shard[SIM_LAYERS];      // the version the rank's shard of each layer holds
    uint32_t version[SIM_LAYERS], issued[SIM_LAYERS];
    GtpFlagCounts counts;
    int me, ranks;
    int last_publish[SIM_LAYERS], last_compute;
} SimFlagRank;

typedef struct {
    int ranks, depth, in_backward, micro_steps, steps;
    uint32_t base;      // every count and flag starts here (near 2^32: the counts wrap during the run)
    int no_read_wait;   // a broken protocol: writes do not wait for the read flags (the test must catch it)
    int no_ready_wait;  // a broken protocol: pulls do not wait for the ready flags
} SimFlagCase;

static int sim_add(SimFlagRank *r, SimItem it) {
    if (r->n == SIM_MAX_ITEMS) {
        fprintf(stderr, "flag simulation: more than %d items\n", SIM_MAX_ITEMS);
        exit(1);
    }
    if (it.stream == SIM_COMPUTE) { r->last_compute = r->n; }
    r->items[r->n] = it;
    return r->n++;
}

// A gather of layer l behind the local items dep0, dep1: a pull from each rank (this one first, then round the
// group), then the read flags; returns the last item, which gathered[b] follows.
static int sim_gather(SimFlagRank *r, const SimFlagCase *sc, int l, int dep0, int dep1) {
    GtpPull n = gtp_flags_pull(&r->counts, l);
    for (int j = 0; j < r->ranks; j++) {
        SimItem it = {SIM_AG, SIM_PULL, l, (r->me + j) % r->ranks, sc->no_ready_wait ? 0 : n.ready, n.ready,
                      {j == 0 ? dep0 : -1, j == 0 ? dep1 : -1}};
        if (sc->no_ready_wait) { it.want = r->counts.version[l] - (1u << 30); } // always reached
        sim_add(r, it);
    }
    SimItem rf = {SIM_AG, SIM_READ_FLAGS, l, 0, 0, n.read, {-1, -1}};
    return sim_add(r, rf);
}

// A write of this rank's layer-l shards on `stream` behind dep, then (publish) its ready flags on the same stream.
static void sim_write(SimFlagRank *r, const SimFlagCase *sc, int l, int stream, int dep) {
    uint32_t want = gtp_flags_before_write(&r->counts, l);
    if (sc->no_read_wait) { want = r->counts.issued[l] - (1u << 30); }
    SimItem w = {stream, SIM_WRITE, l, 0, want, r->counts.version[l] + 1, {dep, -1}};
    sim_add(r, w);
}
static void sim_publish(SimFlagRank *r, int l, int stream) {
    SimItem p = {stream, SIM_PUBLISH, l, 0, 0, gtp_flags_published(&r->counts, l), {-1, -1}};
    r->last_publish[l] = sim_add(r, p);
}

// A pass of the prefetch chain (llmc/gtp_plan.h): its gathers on AG, each weight's use on the compute stream; a
// forward after an update waits for each layer's publication (gather and use), a backward that updates writes each
// layer behind its last use.
static void sim_pass(SimFlagRank *r, const SimFlagCase *sc, GtpPass pass, int pending, int update) {
    int uses = gtp_chain_uses(SIM_LAYERS), slots = sc->depth + 1, gathered[SIM_LAYERS * BLOCK_LINEARS];
    int after[SIM_LAYERS];
    for (int l = 0; l < SIM_LAYERS; l++) { after[l] = pending && pass == GTP_FORWARD ? r->last_publish[l] : -1; }
    for (int i = 0; i < uses && i < slots; i++) {
        gathered[i] = sim_gather(r, sc, gtp_chain_use(SIM_LAYERS, pass, i).layer, -1,
                                 after[gtp_chain_use(SIM_LAYERS, pass, i).layer]);
    }
    for (int i = 0; i < uses; i++) {
        GtpUse u = gtp_chain_use(SIM_LAYERS, pass, i);
        SimItem use = {SIM_COMPUTE, SIM_USE, u.layer, 0, 0, 0, {gathered[i], after[u.layer]}};
        int used = sim_add(r, use);
        if (i + slots < uses) {
            int l = gtp_chain_use(SIM_LAYERS, pass, i + slots).layer;
            gathered[i + slots] = sim_gather(r, sc, l, used, after[l]);
        }
        if (update && pass == GTP_BACKWARD && u.linear == 0) { sim_write(r, sc, u.layer, SIM_UPDATE, used); }
    }
}

static void sim_joint(SimFlagRank *r) {
    SimItem j = {SIM_COMPUTE, SIM_JOINT, 0, 0, 0, 0, {-1, -1}};
    sim_add(r, j);
}

// The program every rank queues: a tuning pass, set_params (its writes and the FP8 casts after it, on the compute
// stream), then steps of micro-steps with the update in the backward or after it, an evaluation forward after step 1.
static void sim_program(SimFlagRank *r, const SimFlagCase *sc) {
    for (int l = 0; l < SIM_LAYERS; l++) { r->last_publish[l] = -1; }
    sim_pass(r, sc, GTP_FORWARD, 0, 0);
    sim_pass(r, sc, GTP_BACKWARD, 0, 0);
    sim_joint(r);
    for (int cast = 0; cast < 2; cast++) { // set_params, then the casts of the first forward
        for (int l = 0; l < SIM_LAYERS; l++) { sim_write(r, sc, l, SIM_COMPUTE, -1); }
        for (int l = 0; l < SIM_LAYERS; l++) { sim_publish(r, l, SIM_COMPUTE); }
    }
    int pending = 0;
    for (int s = 0; s < sc->steps; s++) {
        for (int a = 0; a < sc->micro_steps; a++) {
            int last = a == sc->micro_steps - 1;
            sim_pass(r, sc, GTP_FORWARD, pending, 0);
            pending = 0;
            sim_pass(r, sc, GTP_BACKWARD, 0, last && sc->in_backward);
            sim_joint(r);
        }
        int end = r->last_compute; // the norm: the update after the backward waits for it
        for (int l = 0; l < SIM_LAYERS; l++) {
            if (!sc->in_backward) { sim_write(r, sc, l, SIM_UPDATE, end); }
            sim_publish(r, l, SIM_UPDATE);
        }
        pending = 1;
        if (s == 0) { // validation: a forward of the updated weights
            sim_pass(r, sc, GTP_FORWARD, pending, 0);
            pending = 0;
            sim_joint(r);
        }
    }
}

static int sim_runnable(SimFlagRank *ranks, const SimFlagRank *r, int i) {
    const SimItem *it = &r->items[i];
    for (int d = 0; d < 2; d++) {
        if (it->dep[d] >= 0 && !r->done[it->dep[d]]) { return 0; }
    }
    if (it->kind == SIM_PULL) {
        return gtp_flag_reached(r->flags[gtp_flag_index(r->ranks, SIM_LAYERS, GTP_READY, it->owner, it->layer)],
                                it->want);
    }
    if (it->kind == SIM_WRITE) {
        for (int p = 0; p < r->ranks; p++) {
            if (!gtp_flag_reached(r->flags[gtp_flag_index(r->ranks, SIM_LAYERS, GTP_READ, p, it->layer)], it->want)) {
                return 0;
            }
        }
    }
    if (it->kind == SIM_JOINT) { // every rank's compute stream has reached this item (the same program)
        for (int p = 0; p < r->ranks; p++) {
            if (ranks[p].next[SIM_COMPUTE] != i) { return 0; }
        }
    }
    return 1;
}

static void sim_advance(SimFlagRank *r, int s) {
    while (r->next[s] < r->n && (r->done[r->next[s]] || r->items[r->next[s]].stream != s)) { r->next[s]++; }
}

// Runs the case once in the interleaving drawn from seed; returns the errors (stale or early pulls, a stall).
static int sim_flags_run(const SimFlagCase *sc, uint64_t seed, char *why, size_t why_len) {
    SimFlagRank ranks[SIM_MAX_RANKS];
    int G = sc->ranks, errors = 0;
    for (int p = 0; p < G; p++) {
        SimFlagRank *r = &ranks[p];
        memset(r, 0, sizeof(*r));
        r->items = (SimItem *)calloc(SIM_MAX_ITEMS, sizeof(SimItem));
        r->done = (int *)calloc(SIM_MAX_ITEMS, sizeof(int));
        r->me = p;
        r->ranks = G;
        for (size_t f = 0; f < sizeof(r->flags) / sizeof(r->flags[0]); f++) { r->flags[f] = sc->base; }
        for (int l = 0; l < SIM_LAYERS; l++) { r->version[l] = r->issued[l] = r->shard[l] = sc->base; }
        r->counts.version = r->version;
        r->counts.issued = r->issued;
        sim_program(r, sc);
        for (int s = 0; s < SIM_STREAMS; s++) { sim_advance(r, s); }
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (;;) {
        int cand[SIM_MAX_RANKS * SIM_STREAMS][2], nc = 0, left = 0;
        for (int p = 0; p < G; p++) {
            for (int s = 0; s < SIM_STREAMS; s++) {
                int i = ranks[p].next[s];
                if (i >= ranks[p].n) { continue; }
                left = 1;
                if (sim_runnable(ranks, &ranks[p], i)) {
                    cand[nc][0] = p;
                    cand[nc][1] = s;
                    nc++;
                }
            }
        }
        if (!left) { break; }
        if (nc == 0) {
            snprintf(why, why_len, "stalled: no stream of any rank can go on (rank 0 at items %d %d %d of %d)",
                     ranks[0].next[0], ranks[0].next[1], ranks[0].next[2], ranks[0].n);
            errors++;
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int p = cand[x % (uint64_t)nc][0], s = cand[x % (uint64_t)nc][1];
        SimFlagRank *r = &ranks[p];
        int i = r->next[s];
        const SimItem *it = &r->items[i];
        if (it->kind == SIM_PULL && ranks[it->owner].shard[it->layer] != it->value) {
            if (errors++ == 0) {
                snprintf(why, why_len, "rank %d pulled version %u of rank %d's layer %d, expecting %u", p,
                         ranks[it->owner].shard[it->layer], it->owner, it->layer, it->value);
            }
        } else if (it->kind == SIM_READ_FLAGS) {
            for (int q = 0; q < G; q++) {
                ranks[q].flags[gtp_flag_index(G, SIM_LAYERS, GTP_READ, p, it->layer)] = it->value;
            }
        } else if (it->kind == SIM_WRITE) {
            r->shard[it->layer] = it->value;
        } else if (it->kind == SIM_PUBLISH) {
            for (int q = 0; q < G; q++) {
                ranks[q].flags[gtp_flag_index(G, SIM_LAYERS, GTP_READY, p, it->layer)] = it->value;
            }
        }
        if (it->kind == SIM_JOINT) {
            for (int q = 0; q < G; q++) {
                ranks[q].done[i] = 1;
                sim_advance(&ranks[q], SIM_COMPUTE);
            }
        } else {
            r->done[i] = 1;
            sim_advance(r, s);
        }
    }
    for (int p = 0; p < G; p++) {
        free(ranks[p].items);
        free(ranks[p].done);
    }
    return errors;
}

static void test_flags(void) {
    const int seeds = 40; // interleavings a case (the broken protocols are caught within the first few)
    int bad_cases = 0, runs = 0;
    char first[320] = "";
    for (int G = 1; G <= SIM_MAX_RANKS; G++) {
        for (int depth = 1; depth <= 2; depth++) {
            for (int in_backward = 0; in_backward <= 1; in_backward++) {
                for (int A = 1; A <= 2; A++) {
                    for (int wrap = 0; wrap <= 1; wrap++) {
                        SimFlagCase sc = {G, depth, in_backward, A, 3, wrap ? 0xFFFFFFF0u : 0u, 0, 0};
                        for (int seed = 0; seed < seeds; seed++, runs++) {
                            char why[200];
                            if (sim_flags_run(&sc, (uint64_t)seed, why, sizeof(why)) && bad_cases++ == 0) {
                                snprintf(first, sizeof(first), "G %d depth %d in backward %d A %d base %u seed %d: %s",
                                         G, depth, in_backward, A, sc.base, seed, why);
                            }
                        }
                    }
                }
            }
        }
    }
    check(bad_cases == 0,
          "gtp ce flags: every pull reads the version it expects, no stall (G 1-4, random interleavings)",
          "%d of %d runs failed; first: %s", bad_cases, runs, first);
    // The simulation can fail: without the read flags' wait an owner ahead overwrites a shard a peer has yet to pull;
    // without the ready flags' wait a peer ahead pulls the old version
    for (int broken = 0; broken < 2; broken++) {
        SimFlagCase sc = {2, 2, 1, 2, 3, 0, broken == 0, broken == 1};
        int caught = 0;
        for (int seed = 0; seed < seeds && !caught; seed++) {
            char why[200];
            caught = sim_flags_run(&sc, (uint64_t)seed, why, sizeof(why)) > 0;
        }
        check(caught, broken == 0 ? "gtp ce flags: writes that skip the read flags are caught"
                                  : "gtp ce flags: pulls that skip the ready flags are caught",
              "no interleaving of %d showed a wrong version", seeds);
    }
}

int main(void) {
    test_nodes();
    test_shards();
    test_round_trip();
    test_chain();
    test_bytes();
    test_data_sums();
    test_flags();
    return test_exit();
}
