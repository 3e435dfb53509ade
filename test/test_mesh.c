/*
 * test_mesh.c: the process mesh and sharding arithmetic of llmc/mesh.h.
 * - rank <-> (dp, gtp, tp) round trip, data ranks, for every layout of worlds 1..MAX_WORLD;
 * - the TP, GTP, DP and data groups (ncclCommSplit color, key) partition the world into groups of the right size;
 * - mesh_validate(): each failure is one line with the values and exit status 1 (run in a child process);
 * - sharding: over one TP group the slices of every tensor cover each element of the full tensor exactly once
 *   (TP-replicated tensors: once per TP rank); the QKV split gives each rank its heads. (GTP: test_gtp_plan.)
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
                    "attention heads = 4 cannot be split over --tp 8 ranks (each needs at least one head)");
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
    // TP and GTP split GPT-2's shapes: another architecture is refused there, and runs data-parallel
    ValidateCase llama = small_case(2, 2, 1);
    llama.config = config_default(ARCH_LLAMA, 64, 2, 8, 64);
    expect_validate("validate: llama refuses tp", llama, "--arch llama does not run under --tp or --gtp yet");
    llama = small_case(2, 1, 2);
    llama.config = config_default(ARCH_LLAMA, 64, 2, 8, 64);
    expect_validate("validate: llama refuses gtp", llama, "--arch llama does not run under --tp or --gtp yet");
    llama = small_case(2, 1, 1);
    llama.config = config_default(ARCH_LLAMA, 64, 2, 8, 64);
    expect_validate("validate: llama data-parallel passes", llama, NULL);
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

static void test_tiling(void) {
    GPTConfig c = tiny_config();
    int tps[] = {1, 2, 3, 4, 6}; // tp 4: 6 heads split 2, 2, 1, 1
    int bad = 0;
    for (int i = 0; i < 5; i++) {
        int b = check_tiling(&c, tps[i]);
        if (b) { printf("  tp %d: %d elements covered the wrong number of times\n", tps[i], b); }
        bad += b;
    }
    check(bad == 0, "tp slices tile every tensor exactly once", "%d errors", bad);
}

// Each rank's local QKV rows are [q; k; v] of exactly its heads, in head order.
static void test_qkv_heads(void) {
    GPTConfig c = tiny_config();
    int hs = c.channels / c.num_heads, bad = 0;
    for (int tp = 3; tp <= 4; tp++) for (int r = 0; r < tp; r++) { // tp 4: heads 2, 2, 1, 1
        Mesh m = mesh_make(tp, r, tp, 1);
        Span heads = tp_heads(&m, &c);
        size_t rows, cols;
        param_tp_shape(&c, &m, P_QKVW, &rows, &cols);
        size_t per_part = rows / QKV_PARTS;
        for (size_t i = 0; i < rows; i++) {
            size_t g = tp_global_row(&m, &c, P_QKVW, i);
            size_t part = g / (size_t)c.channels, head = (g % (size_t)c.channels) / (size_t)hs;
            size_t local_head = (i % per_part) / (size_t)hs;
            bad += part != i / per_part || head != heads.begin + local_head || g % (size_t)hs != i % (size_t)hs;
            bad += tp_global_row(&m, &c, P_QKVB, i) != g;
        }
    }
    // By hand: C = 48, tp = 3, rank 1 holds heads 2..3 = channels 16..31 of each of q, k, v.
    Mesh m1 = mesh_make(3, 1, 3, 1);
    bad += tp_global_row(&m1, &c, P_QKVW, 0) != 16 || tp_global_row(&m1, &c, P_QKVW, 15) != 31;
    bad += tp_global_row(&m1, &c, P_QKVW, 16) != 64 || tp_global_row(&m1, &c, P_QKVW, 47) != 96 + 31;
    // tp = 4: rank 2 holds head 4 only, channels 32..39 of q, k, v; its attn proj columns are those channels.
    Mesh m2 = mesh_make(4, 2, 4, 1);
    bad += tp_global_row(&m2, &c, P_QKVW, 0) != 32 || tp_global_row(&m2, &c, P_QKVW, 8) != 48 + 32;
    bad += tp_global_col(&m2, &c, P_ATTPROJW, 7) != 39 || tp_global_col(&m2, &c, P_FCPROJW, 0) != 96;
    check(bad == 0, "qkv split: each tp rank holds q, k, v rows of its own heads", "%d errors", bad);
}

static void test_spans(void) {
    GPTConfig c = tiny_config();
    Mesh m = mesh_make(12, 7, 3, 2); // (dp, gtp, tp) = (1, 0, 1)
    Span vocab = tp_vocab_rows(&m, &c), fc = tp_column_parallel_rows(&m, 4 * 48), proj = tp_row_parallel_cols(&m, 4 * 48);
    int ok = vocab.begin == 32 && vocab.count == 32 && fc.begin == 64 && fc.count == 64 && proj.begin == 64 &&
             proj.count == 64;
    size_t rows, cols;
    param_tp_shape(&c, &m, P_FCPROJW, &rows, &cols);
    ok = ok && rows == 48 && cols == 64 && tp_global_col(&m, &c, P_FCPROJW, 5) == 69 && tp_global_col(&m, &c, P_FCW, 5) == 5;
    check(ok, "vocab, column- and row-parallel spans at known values", "vocab %zu+%zu fc %zu+%zu proj %zu+%zu",
          vocab.begin, vocab.count, fc.begin, fc.count, proj.begin, proj.count);
}

int main(void) {
    test_coordinates();
    test_groups();
    test_validation();
    test_tiling();
    test_qkv_heads();
    test_spans();
    return test_exit();
}
