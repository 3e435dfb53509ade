/*
 * test_mesh.c: the process mesh and sharding arithmetic of llmc/mesh.h.
 * - rank <-> (dp, gtp, tp) round trip, data ranks, for every layout of worlds 1..MAX_WORLD;
 * - the TP, GTP, DP and data groups (ncclCommSplit color, key) partition the world into groups of the right size;
 * - mesh_validate(): each failure is one line with the values and exit status 1 (run in a child process); GPT-2 and
 *   Llama layouts pass where every split is exact;
 * - sharding: over one TP group the slices of every tensor cover each element of the full tensor exactly once
 *   (TP-replicated tensors: once per TP rank), GPT-2 and grouped-query Llamas at TP 1..4 (even and uneven head
 *   splits); the QKV split gives each rank its key/value heads and their groups' query heads, a fused grouped-query
 *   QKV of its own; SwiGLU's fc gives each rank the gate and up rows of its features; maps at known values by hand.
 *   (GTP: test_gtp_plan.)
 */
#include "../llmc/mesh.h"
#include "test_util.h"

#define MAX_WORLD 24
#define VALIDATE_TIMEOUT_S 10.0

static void test_coordinates(void) {
    int bad = 0, layouts = 0;
    for (int world = 1; world <= MAX_WORLD; world++) {
        for (int tp = 1; tp <= world; tp++) {
            for (int gtp = 1; tp * gtp <= world; gtp++) {
                if (world % (tp * gtp) != 0) { continue; }
                layouts++;
                int *data_seen = (int *)calloc_check((size_t)world, sizeof(int), "data ranks");
                for (int r = 0; r < world; r++) {
                    Mesh m = mesh_make(world, r, tp, gtp);
                    int in_range = m.tp_rank < tp && m.gtp_rank < gtp && m.dp_rank < m.dp && m.dp * tp * gtp == world;
                    if (!in_range || mesh_rank_of(&m, m.dp_rank, m.gtp_rank, m.tp_rank) != r ||
                        m.data_size != m.dp * gtp || m.data_rank != r / tp) {
                        if (bad++ < 3) { printf("  world %d tp %d gtp %d rank %d: wrong coordinates\n", world, tp, gtp, r); }
                        continue;
                    }
                    data_seen[m.data_rank]++;
                }
                // Each data rank is read by exactly one TP group (its tp ranks).
                for (int d = 0; d < world / tp; d++) { bad += data_seen[d] != tp; }
                free(data_seen);
            }
        }
    }
    check(bad == 0 && layouts > MAX_WORLD, "mesh coordinates round trip and data ranks",
          "%d errors over %d layouts", bad, layouts);
}

// Whether a and b agree on every coordinate that group kind g does not vary (the data group varies dp and gtp).
static int other_coords_equal(const Mesh *a, const Mesh *b, MeshGroup g) {
    int varies_dp = g == GROUP_DP || g == GROUP_DATA, varies_gtp = g == GROUP_GTP || g == GROUP_DATA;
    return (g == GROUP_TP || a->tp_rank == b->tp_rank) && (varies_gtp || a->gtp_rank == b->gtp_rank) &&
           (varies_dp || a->dp_rank == b->dp_rank);
}

// For each group kind: (color, key) maps the world one-to-one onto [0, world/size) x [0, size), and two ranks
// share a color exactly when they agree on every coordinate but the group's own.
static void test_groups(void) {
    int bad = 0;
    for (int world = 1; world <= MAX_WORLD; world++) {
        for (int tp = 1; tp <= world; tp++) {
            for (int gtp = 1; tp * gtp <= world; gtp++) {
                if (world % (tp * gtp) != 0) { continue; }
                for (int g = 0; g < NUM_GROUPS; g++) {
                    int *owner = (int *)malloc_check((size_t)world * sizeof(int), "group map");
                    for (int i = 0; i < world; i++) { owner[i] = -1; }
                    for (int r = 0; r < world; r++) {
                        Mesh m = mesh_make(world, r, tp, gtp);
                        int size = mesh_group_size(&m, (MeshGroup)g);
                        int color = mesh_group_color(&m, (MeshGroup)g), key = mesh_group_key(&m, (MeshGroup)g);
                        if (size * (world / size) != world || color < 0 || color >= world / size || key < 0 ||
                            key >= size || owner[color * size + key] != -1) {
                            bad++;
                            continue;
                        }
                        owner[color * size + key] = r;
                        for (int s = 0; s < world; s++) {
                            Mesh o = mesh_make(world, s, tp, gtp);
                            bad += (mesh_group_color(&o, (MeshGroup)g) == color) != other_coords_equal(&m, &o, (MeshGroup)g);
                        }
                    }
                    free(owner);
                }
            }
        }
    }
    check(bad == 0, "tp/gtp/dp/data groups partition the world (color, key) one-to-one", "%d errors", bad);
}

// ---------------------------------------------------------------------------------------------------------
// Validation failures, each in a child process.

typedef struct {
    int world, tp, gtp;
    GPTConfig config;
    Options options;
} ValidateCase;

static void run_validate(void *arg) {
    ValidateCase *v = (ValidateCase *)arg;
    int rank = v->world - 1; // the message must name the rank that saw the problem
    set_error_rank(rank);
    Mesh m = mesh_make(v->world, rank, v->tp, v->gtp);
    mesh_validate(&m, &v->config, &v->options);
}

// A small model every layout below divides: C = 64, 8 heads, Vp = 128, T = 64 (all powers of two).
static ValidateCase small_case(int world, int tp, int gtp) {
    ValidateCase v;
    v.world = world;
    v.tp = tp;
    v.gtp = gtp;
    v.config = config_gpt2(64, 100, 2, 8, 64);
    options_defaults(&v.options);
    v.options.seq_len = 64;
    v.options.batch_size = 2;
    v.options.total_batch_tokens = 0;
    v.options.tp = tp;
    v.options.gtp = gtp;
    return v;
}

static void expect_validate(const char *name, ValidateCase v, const char *expect) {
    Child c;
    child_start(&c, run_validate, &v);
    child_wait(&c, now_s() + VALIDATE_TIMEOUT_S);
    if (!expect) {
        check(c.status == 0 && c.err[0] == '\0', name, "status %d, stderr: %s", c.status, c.err);
        return;
    }
    int one_line = strchr(c.err, '\n') == c.err + strlen(c.err) - 1;
    check(c.status == 1 && one_line && strstr(c.err, expect) != NULL, name,
          "status %d, want 1 and one line containing '%s'; stderr: %s", c.status, expect, c.err);
}

// A Llama of C = 64 (head size 64 / NH), padded vocabulary 128, untied: NH query heads over KV key/value heads, MLP F.
static GPTConfig llama_config(int NH, int KV, int F) {
    GPTConfig c = config_default(ARCH_LLAMA, 64, 2, NH, 64);
    c.num_kv_heads = KV;
    c.ffn_hidden = F;
    c.vocab_size = 100;
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    return c;
}

static void test_validation(void) {
    expect_validate("validate: good layout passes", small_case(16, 2, 4), NULL);
    ValidateCase d12 = small_case(16, 4, 2);
    d12.config = config_gpt2(1024, GPT2_VOCAB_SIZE, 12, 12, 768);
    d12.options.seq_len = 1024;
    d12.options.batch_size = 4;
    d12.options.total_batch_tokens = 4 * 1024 * 4 * 2;
    expect_validate("validate: d12 on tp 4 x gtp 2 x dp 2 passes", d12, NULL);

    expect_validate("validate: world not divisible by tp x gtp", small_case(6, 2, 2),
                    "[train_gpt rank 5] error: world size 6 is not divisible by tp x gtp = 4: launch a multiple of 4 "
                    "ranks or change --tp/--gtp\n");
    ValidateCase heads = small_case(8, 8, 1);
    heads.config = config_gpt2(64, 100, 2, 4, 64);
    expect_validate("validate: fewer heads than tp ranks", heads,
                    "[train_gpt rank 7] error: --tp 8 exceeds the model's 4 key/value heads (each TP rank needs one): "
                    "use --tp <= 4, and --gtp or data parallelism for more GPUs\n");
    ValidateCase uneven = small_case(4, 4, 1); // 5 heads of 8 over 4 ranks: 2, 1, 1, 1 (like 25 heads over 2)
    uneven.config = config_gpt2(64, 100, 2, 5, 40);
    expect_validate("validate: heads that do not divide by tp pass (balanced split)", uneven, NULL);
    ValidateCase vocab = small_case(3, 3, 1);
    vocab.config = config_gpt2(64, 100, 2, 6, 48);
    expect_validate("validate: padded vocab not divisible by tp", vocab,
                    "padded vocabulary = 128 is not divisible by --tp 3");
    ValidateCase sp = small_case(4, 4, 1);
    sp.options.seq_len = 62;
    sp.config.max_seq_len = 62;
    sp.options.sequence_parallel = 1;
    expect_validate("validate: sequence parallel needs seq-len % tp", sp,
                    "--seq-len 62 is not divisible by --tp 4, which sequence parallelism needs");
    sp.options.sequence_parallel = 0;
    sp.config.max_seq_len = 64;
    expect_validate("validate: same seq-len without sequence parallel passes", sp, NULL);
    // A Llama splits by its key/value heads (8 query heads in 4 groups here) and its MLP width
    ValidateCase llama = small_case(8, 2, 2);
    llama.config = llama_config(8, 4, 192);
    expect_validate("validate: llama on tp 2 x gtp 2 x dp 2 passes", llama, NULL);
    llama = small_case(4, 4, 1);
    llama.config = llama_config(8, 4, 192);
    expect_validate("validate: llama on tp 4 (one key/value head a rank) passes", llama, NULL);
    llama = small_case(6, 3, 2);
    llama.config = llama_config(8, 4, 192);
    llama.config.padded_vocab_size = 384;
    expect_validate("validate: llama on tp 3 (key/value heads 2, 1, 1) passes", llama, NULL);
    llama = small_case(4, 4, 1);
    llama.config = llama_config(8, 2, 192);
    expect_validate("validate: tp greater than the key/value heads", llama,
                    "[train_gpt rank 3] error: --tp 4 exceeds the model's 2 key/value heads (each TP rank needs one): "
                    "use --tp <= 2, and --gtp or data parallelism for more GPUs\n");
    llama = small_case(4, 4, 1);
    llama.config = llama_config(8, 4, 200);
    expect_validate("validate: MLP width divides by tp 4 (200) passes", llama, NULL);
    llama.config = llama_config(8, 4, 198); // 4C = 256 divides by 4: the description's width is what TP splits
    expect_validate("validate: MLP width not divisible by tp", llama, "MLP width = 198 is not divisible by --tp 4");
    // fp8: F = 48 is a multiple of 16, its halves under TP 2 (fc projection's columns) are not
    ValidateCase fp8 = small_case(2, 2, 1);
    strcpy(fp8.options.precision, "fp8");
    fp8.config = llama_config(4, 2, 48);
    expect_validate("validate: fp8 needs 16-aligned TP parts of the block linears", fp8,
                    "--tp 2 leaves rank 0 64 x 24 of fcprojw: choose another --tp, --ffn or --heads");
    fp8.config = llama_config(4, 2, 64);
    expect_validate("validate: fp8 with 16-aligned TP parts passes", fp8, NULL);
    ValidateCase batch = small_case(12, 2, 2); // data ranks = dp x gtp = 3 x 2 = 6
    batch.options.total_batch_tokens = 2 * 64 * 4;
    expect_validate("validate: global batch over data ranks", batch,
                    "--total-batch-tokens 512 is not a multiple of batch-size x seq-len x data-parallel ranks = "
                    "2 x 64 x 6 = 768");
}

// ---------------------------------------------------------------------------------------------------------
// Sharding.

// C = 48, 6 heads of 8, Vp = 96, T = 16: divisible by tp in {1, 2, 3, 4, 6} (heads by 4 unevenly).
static GPTConfig tiny_config(void) {
    GPTConfig c = config_gpt2(16, 90, 2, 6, 48);
    c.padded_vocab_size = 96; // not a multiple of 128: it divides by 3 and 6
    return c;
}

// Over the ranks of one TP group, count how often each element of every full tensor is held. Split tensors: exactly
// once; replicated: once per TP rank. (GTP's shards of these: test_gtp_plan.)
static int check_tiling(const GPTConfig *c, int tp) {
    ParamLayout p;
    param_layout(c, &p);
    int bad = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        unsigned char *seen = (unsigned char *)calloc_check(p.size[t], 1, "tiling counts");
        size_t rows, cols;
        int layers = (int)param_num_layers(c, t);
        for (int r = 0; r < tp; r++) {
            Mesh m = mesh_make(tp, r, tp, 1);
            param_tp_shape(c, &m, t, &rows, &cols);
            for (int l = 0; l < layers; l++) {
                for (size_t i = 0; i < rows; i++) {
                    for (size_t k = 0; k < cols; k++) {
                        size_t e = tp_global_element(&m, c, t, l, i, k);
                        if (e >= p.size[t]) { bad++; } else { seen[e]++; }
                    }
                }
            }
        }
        int want = param_tp_split(t) == TP_REPLICATED ? tp : 1;
        for (size_t e = 0; e < p.size[t]; e++) { bad += seen[e] != want; }
        free(seen);
    }
    return bad;
}

// A grouped-query Llama the tiling covers at TP 1..4: C = 64, 8 query heads of 8 in 4 groups (TP 3 splits the
// key/value heads 2, 1, 1), F = 48 (divides by 1..4), Vp = 96, untied (lmhead split like wte).
static GPTConfig tiny_llama(void) {
    GPTConfig c = config_default(ARCH_LLAMA, 16, 2, 8, 64);
    c.num_kv_heads = 4;
    c.ffn_hidden = 48;
    c.vocab_size = 90;
    c.padded_vocab_size = 96;
    return c;
}

static void test_tiling(void) {
    GPTConfig c = tiny_config(), llama = tiny_llama();
    int tps[] = {1, 2, 3, 4, 6}; // tp 4: 6 heads split 2, 2, 1, 1
    int bad = 0;
    for (int i = 0; i < 5; i++) {
        int b = check_tiling(&c, tps[i]);
        if (b) { printf("  gpt2 tp %d: %d elements covered the wrong number of times\n", tps[i], b); }
        bad += b;
    }
    check(bad == 0, "tp slices tile every tensor exactly once", "%d errors", bad);
    bad = 0;
    for (int tp = 1; tp <= 4; tp++) {
        int b = check_tiling(&llama, tp);
        if (b) { printf("  llama tp %d: %d elements covered the wrong number of times\n", tp, b); }
        bad += b;
    }
    check(bad == 0, "tp slices tile every tensor of a grouped-query, untied, SwiGLU llama exactly once (tp 1..4)",
          "%d errors", bad);
}

/*
 * Each rank's local QKV rows are [q; k; v] of its heads, in head order, and form a fused grouped-query QKV of their
 * own: local query head j reads local key/value head j / g, which is the global key/value head of its global query
 * head. GPT-2 (g = 1) and the Llama above (g = 2) at every TP they take.
 */
static int qkv_head_errors(const GPTConfig *c, int tp) {
    size_t hs = (size_t)(c->channels / c->num_heads), NH = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads;
    size_t g = NH / KV;
    int bad = 0;
    for (int r = 0; r < tp; r++) {
        Mesh m = mesh_make(tp, r, tp, 1);
        Span kv = tp_kv_heads(&m, c);
        size_t rows, cols, q_rows = g * kv.count * hs, kv_rows = kv.count * hs;
        param_tp_shape(c, &m, P_QKVW, &rows, &cols);
        bad += rows != q_rows + 2 * kv_rows || cols != (size_t)c->channels;
        for (size_t i = 0; i < rows; i++) {
            size_t part = i < q_rows ? 0 : i < q_rows + kv_rows ? 1 : 2;
            size_t in_part = part == 0 ? i : (i - q_rows) % kv_rows, local_head = in_part / hs;
            size_t grow = tp_global_row(&m, c, P_QKVW, i);
            size_t part_first = part == 0 ? 0 : part == 1 ? NH * hs : (NH + KV) * hs; // of the global part
            size_t global_head = (grow - part_first) / hs;
            if (part == 0) { // a query head of one of this rank's groups, whose key/value head is local j / g
                bad += global_head != g * kv.begin + local_head || global_head / g != kv.begin + local_head / g;
            } else {
                bad += global_head != kv.begin + local_head;
            }
            bad += grow < part_first || grow % hs != i % hs;
            if (c->bias) { bad += tp_global_row(&m, c, P_QKVB, i) != grow; }
        }
        Span ch = tp_attention_channels(&m, c); // attn proj's columns: the query heads' channels
        bad += ch.begin != g * kv.begin * hs || ch.count != q_rows || tp_global_col(&m, c, P_ATTPROJW, 0) != ch.begin;
    }
    return bad;
}

static void test_qkv_heads(void) {
    GPTConfig c = tiny_config(), llama = tiny_llama();
    int bad = 0;
    for (int tp = 1; tp <= 6; tp++) { bad += qkv_head_errors(&c, tp); }
    for (int tp = 1; tp <= 4; tp++) { bad += qkv_head_errors(&llama, tp); }
    // By hand: C = 48, tp = 3, rank 1 holds heads 2..3 = channels 16..31 of each of q, k, v.
    Mesh m1 = mesh_make(3, 1, 3, 1);
    bad += tp_global_row(&m1, &c, P_QKVW, 0) != 16 || tp_global_row(&m1, &c, P_QKVW, 15) != 31;
    bad += tp_global_row(&m1, &c, P_QKVW, 16) != 64 || tp_global_row(&m1, &c, P_QKVW, 47) != 96 + 31;
    // tp = 4: rank 2 holds head 4 only, channels 32..39 of q, k, v; its attn proj columns are those channels.
    Mesh m2 = mesh_make(4, 2, 4, 1);
    bad += tp_global_row(&m2, &c, P_QKVW, 0) != 32 || tp_global_row(&m2, &c, P_QKVW, 8) != 48 + 32;
    bad += tp_global_col(&m2, &c, P_ATTPROJW, 7) != 39 || tp_global_col(&m2, &c, P_FCPROJW, 0) != 96;
    check(bad == 0, "qkv split: each tp rank holds q, k, v rows of its own heads, a fused grouped-query qkv",
          "%d errors", bad);
}

// Grouped-query splits by hand.
static void test_gqa_by_hand(void) {
    // NH 4, KV 2, C 64 (head size 16): q rows 0..63, k 64..95, v 96..127. TP 2, rank 0: q heads 0-1 (rows 0..31),
    // kv head 0 (k rows 64..79, v rows 96..111): 64 local rows. Rank 1: q 32..63, k 80..95, v 112..127.
    GPTConfig a = config_default(ARCH_LLAMA, 16, 2, 4, 64);
    a.num_kv_heads = 2;
    Mesh r0 = mesh_make(2, 0, 2, 1), r1 = mesh_make(2, 1, 2, 1);
    size_t rows, cols;
    param_tp_shape(&a, &r0, P_QKVW, &rows, &cols);
    Span q0 = tp_heads(&r0, &a), kv0 = tp_kv_heads(&r0, &a);
    int ok = rows == 64 && cols == 64 && q0.begin == 0 && q0.count == 2 && kv0.begin == 0 && kv0.count == 1;
    ok = ok && tp_global_row(&r0, &a, P_QKVW, 31) == 31 && tp_global_row(&r0, &a, P_QKVW, 32) == 64 &&
         tp_global_row(&r0, &a, P_QKVW, 47) == 79 && tp_global_row(&r0, &a, P_QKVW, 48) == 96 &&
         tp_global_row(&r0, &a, P_QKVW, 63) == 111;
    ok = ok && tp_global_row(&r1, &a, P_QKVW, 0) == 32 && tp_global_row(&r1, &a, P_QKVW, 32) == 80 &&
         tp_global_row(&r1, &a, P_QKVW, 48) == 112 && tp_global_col(&r1, &a, P_ATTPROJW, 0) == 32;
    check(ok, "gqa NH 4 KV 2 tp 2 by hand: rank 0 holds q heads 0-1 and kv head 0", "rows %zu cols %zu", rows, cols);
    // NH 8, KV 4, C 64 (head size 8): q rows 0..63, k 64..95, v 96..127. TP 3 splits the kv heads 2, 1, 1: rank 0
    // q heads 0-3, kv 0-1 (64 rows); rank 1 q heads 4-5 (rows 32..47), kv 2 (k 80..87, v 112..119): 32 rows; rank 2
    // q heads 6-7 (48..63), kv 3 (k 88..95, v 120..127).
    GPTConfig b = tiny_llama();
    Mesh s0 = mesh_make(3, 0, 3, 1), s1 = mesh_make(3, 1, 3, 1), s2 = mesh_make(3, 2, 3, 1);
    size_t rows0, rows1, rows2;
    param_tp_shape(&b, &s0, P_QKVW, &rows0, &cols);
    param_tp_shape(&b, &s1, P_QKVW, &rows1, &cols);
    param_tp_shape(&b, &s2, P_QKVW, &rows2, &cols);
    ok = rows0 == 64 && rows1 == 32 && rows2 == 32;
    ok = ok && tp_global_row(&s0, &b, P_QKVW, 40) == 72 && tp_global_row(&s0, &b, P_QKVW, 48) == 96;
    ok = ok && tp_global_row(&s1, &b, P_QKVW, 0) == 32 && tp_global_row(&s1, &b, P_QKVW, 15) == 47 &&
         tp_global_row(&s1, &b, P_QKVW, 16) == 80 && tp_global_row(&s1, &b, P_QKVW, 24) == 112 &&
         tp_global_row(&s1, &b, P_QKVW, 31) == 119;
    ok = ok && tp_global_row(&s2, &b, P_QKVW, 0) == 48 && tp_global_row(&s2, &b, P_QKVW, 16) == 88 &&
         tp_global_row(&s2, &b, P_QKVW, 24) == 120;
    ok = ok && tp_global_col(&s1, &b, P_ATTPROJW, 0) == 32 && tp_attention_channels(&s2, &b).count == 16;
    check(ok, "gqa NH 8 KV 4 tp 3 by hand: key/value heads split 2, 1, 1 with their query heads",
          "rows %zu %zu %zu", rows0, rows1, rows2);
}

// fc: one part of F rows (GELU), or SwiGLU's [gate F; up F], each rank the rows of its features in each part.
static void test_fc_rows(void) {
    GPTConfig c = tiny_config(), llama = tiny_llama(); // GELU F = 192; SwiGLU F = 48
    Mesh m = mesh_make(12, 7, 3, 2);                    // (dp, gtp, tp) = (1, 0, 1)
    Span vocab = tp_vocab_rows(&m, &c), f = tp_mlp_features(&m, &c), proj = tp_cols(&m, &c, P_FCPROJW);
    size_t rows, cols;
    param_tp_shape(&c, &m, P_FCPROJW, &rows, &cols);
    int ok = vocab.begin == 32 && vocab.count == 32 && f.begin == 64 && f.count == 64 && proj.begin == 64 &&
             proj.count == 64 && rows == 48 && cols == 64;
    ok = ok && tp_global_col(&m, &c, P_FCPROJW, 5) == 69 && tp_global_col(&m, &c, P_FCW, 5) == 5;
    ok = ok && tp_global_row(&m, &c, P_FCW, 0) == 64 && tp_global_row(&m, &c, P_FCW, 63) == 127 &&
         tp_global_row(&m, &c, P_FCB, 10) == 74;
    check(ok, "vocab, GELU fc and fc projection spans at known values", "vocab %zu+%zu fc %zu+%zu proj %zu+%zu",
          vocab.begin, vocab.count, f.begin, f.count, proj.begin, proj.count);
    // SwiGLU, F 48, TP 2, rank 1: gate rows 24..47, up rows 72..95 (48 local rows); fc projection columns 24..47
    Mesh r1 = mesh_make(2, 1, 2, 1);
    param_tp_shape(&llama, &r1, P_FCW, &rows, &cols);
    ok = rows == 48 && cols == 64 && tp_global_row(&r1, &llama, P_FCW, 0) == 24 &&
         tp_global_row(&r1, &llama, P_FCW, 23) == 47 && tp_global_row(&r1, &llama, P_FCW, 24) == 72 &&
         tp_global_row(&r1, &llama, P_FCW, 47) == 95 && tp_global_col(&r1, &llama, P_FCPROJW, 0) == 24;
    // every TP: local row j < F/TP is gate feature f0 + j, row F/TP + j up feature f0 + j
    for (int tp = 1; tp <= 4; tp++) for (int r = 0; r < tp; r++) {
        Mesh mr = mesh_make(tp, r, tp, 1);
        Span fr = tp_mlp_features(&mr, &llama);
        for (size_t j = 0; j < fr.count; j++) {
            ok = ok && tp_global_row(&mr, &llama, P_FCW, j) == fr.begin + j &&
                 tp_global_row(&mr, &llama, P_FCW, fr.count + j) == 48 + fr.begin + j &&
                 tp_global_col(&mr, &llama, P_FCPROJW, j) == fr.begin + j;
        }
    }
    check(ok, "swiglu fc: each tp rank holds the gate and the up rows of its features", "rows %zu cols %zu", rows,
          cols);
}

int main(void) {
    test_coordinates();
    test_groups();
    test_validation();
    test_tiling();
    test_qkv_heads();
    test_gqa_by_hand();
    test_fc_rows();
    return test_exit();
}
