/*
 * test_eval.c: multiple-choice evaluation (llmc/eval.h) with the CPU build's model (train_gpt_cpu.c's ModelOps).
 * - the plan's forwards per data rank on a hand-packed case;
 * - a tiny GPT-2 scores an eval file this test writes (contexts and completions of several lengths, 1 to 4
 *   completions, rows shorter than --seq-len so a forward holds more rows than --batch-size): each completion's
 *   loss sum in the dump against the model's ordinary forward of that row alone (row by row), and the counts
 *   against a hand scoring of those sums, with labels chosen so that acc and acc_norm differ (even examples:
 *   the lowest mean is the label; odd ones: the lowest sum);
 * - the split over data ranks: each of 2 and 3 ranks (no peers to sum with) scores its examples i % D == r in the
 *   plan's number of forwards (padding ones included); their counts and dumps add up to the one-rank run's;
 * - refusals before any work, each a line naming the problem: an example longer than --seq-len, more completions
 *   than a forward's rows, a token past the vocabulary, 16-bit tokens for a vocabulary above 65,536, and the
 *   options (--eval-every without --eval-data and the reverse, --eval-dump without --eval-data).
 */
#define main train_gpt_cpu_main // the CPU build's ModelOps (make_cpu_model), its main unused
#include "../train_gpt_cpu.c"
#undef main
#include "../llmc/eval.h"
#include "test_util.h"

#define TEST_DIR "/tmp/test_eval"
#define EVAL_PATH TEST_DIR "/eval.bin"
#define TINY_V 96
#define TINY_T 128 // rows of the test's examples fit 64 positions: a forward holds 2 x B rows
#define TINY_B 3
#define NUM_EXAMPLES 23
#define MAX_TOKENS 12
#define SUM_TOL 1e-5 // relative: the same float forward of a row, alone or among others

static int g_tokens[NUM_EXAMPLES][1 + EVAL_MAX_COMPLETIONS][MAX_TOKENS];

// Example i: 1 to 4 completions of 1 to 5 tokens after a context of 1 to 10, from a fixed generator.
static void make_examples(EvalExample *ex, const int *labels) {
    uint64_t s = 12345;
    for (int i = 0; i < NUM_EXAMPLES; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        EvalExample *e = &ex[i];
        memset(e, 0, sizeof(*e));
        e->index = i;
        e->num_completions = 1 + (int)((s >> 33) % 4);
        e->label = labels ? labels[i] : 0;
        e->context_len = 1 + (int)((s >> 40) % 10);
        e->context = g_tokens[i][0];
        for (int c = 0; c < e->num_completions; c++) {
            e->completion_len[c] = 1 + (int)((s >> (45 + c)) % 5);
            e->completion[c] = g_tokens[i][1 + c];
        }
        for (int p = 0; p <= e->num_completions; p++) {
            for (int t = 0; t < MAX_TOKENS; t++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                g_tokens[i][p][t] = (int)((s >> 33) % TINY_V);
            }
        }
    }
}

static ModelOps g_model;
static int g_calls; // row_loss_sums calls through the counting table
static void counting_row_loss_sums(void *ctx, const int *inputs, const int *targets, int B, int T, const int *begin,
                                   const int *end, double *sums) {
    g_calls++;
    g_model.row_loss_sums(ctx, inputs, targets, B, T, begin, end, sums);
}

static void make_model(void) {
    Options o;
    options_defaults(&o);
    o.seed = 7;
    GPTConfig c = config_gpt2(TINY_T, TINY_V, 2, 2, 32);
    Mesh mesh = mesh_make(1, 0, 1, 1);
    g_model = make_cpu_model(&c, &o, &mesh, TINY_B, TINY_T);
}

// Completion c of ex through the model's ordinary forward of that row alone: the sum of its tokens' losses.
static double row_alone(const EvalExample *ex, int c) {
    int n = ex->context_len + ex->completion_len[c], in[2 * MAX_TOKENS], tg[2 * MAX_TOKENS], tok[2 * MAX_TOKENS];
    for (int t = 0; t < n; t++) {
        tok[t] = t < ex->context_len ? ex->context[t] : ex->completion[c][t - ex->context_len];
    }
    for (int t = 0; t < n - 1; t++) {
        in[t] = tok[t];
        tg[t] = tok[t + 1];
    }
    CpuModel *m = (CpuModel *)g_model.ctx;
    cpu_model_forward(m, in, tg, 1, n - 1);
    double sum = 0.0;
    for (int t = ex->context_len - 1; t < n - 1; t++) { sum += m->acts.losses[t]; }
    return sum;
}

static void test_rank_forwards(void) {
    int completions[] = {4, 4, 1, 3, 2};
    // one rank, 6 rows: [4] [4 1] [3 2]; two ranks: rank 0 has 4 1 2 -> [4 1] [2], rank 1 has 4 3 -> [4] [3]
    long long one = eval_rank_forwards(completions, 5, 6, 0, 1), r0 = eval_rank_forwards(completions, 5, 6, 0, 2),
              r1 = eval_rank_forwards(completions, 5, 6, 1, 2), r2 = eval_rank_forwards(completions, 5, 6, 2, 3);
    check(one == 3 && r0 == 2 && r1 == 2 && r2 == 1, "plan_forwards_by_hand", "got %lld %lld %lld %lld, want 3 2 2 1",
          one, r0, r1, r2);
}

// The dump's lines: sums[i][c].
static void read_dump(const char *path, double sums[][EVAL_MAX_COMPLETIONS], const EvalExample *ex) {
    FILE *f = fopen(path, "r");
    char line[4096];
    for (int i = 0; f && i < NUM_EXAMPLES && fgets(line, sizeof(line), f); i++) {
        char *p = strstr(line, "\"loss_sums\":[");
        for (int c = 0; p && c < ex[i].num_completions; c++) { sums[i][c] = strtod(p = strpbrk(p, "[,") + 1, &p); }
    }
    if (f) { fclose(f); }
}

typedef struct {
    EvalCounts counts;
    double sums[NUM_EXAMPLES][EVAL_MAX_COMPLETIONS];
    int calls;
    long long forwards, own_forwards;
    int rows;
} RankRun;

// Rank r of D (no peers: its own counts, its examples' sums in the dump) through the counting model.
static RankRun run_rank(int r, int D, const EvalExample *ex) {
    RankRun out;
    memset(&out, 0, sizeof(out));
    char dump[256];
    snprintf(dump, sizeof(dump), TEST_DIR "/dump_%d_of_%d.jsonl", r, D);
    Eval e;
    eval_open(&e, EVAL_PATH, dump, TINY_V, TINY_B, TINY_T, 1, r, D);
    Launcher alone;
    memset(&alone, 0, sizeof(alone));
    ModelOps ops = g_model;
    ops.row_loss_sums = counting_row_loss_sums;
    int *in = (int *)malloc_check((size_t)TINY_B * TINY_T * sizeof(int), "test"), *tg = (int *)malloc_check(
        (size_t)TINY_B * TINY_T * sizeof(int), "test");
    g_calls = 0;
    out.counts = eval_run(&e, &ops, &alone, 1, in, tg);
    out.calls = g_calls;
    out.forwards = e.forwards;
    out.rows = e.rows;
    int completions[NUM_EXAMPLES];
    for (int i = 0; i < NUM_EXAMPLES; i++) { completions[i] = ex[i].num_completions; }
    out.own_forwards = eval_rank_forwards(completions, NUM_EXAMPLES, e.rows, r, D);
    read_dump(dump, out.sums, ex);
    eval_free(&e);
    free(in);
    free(tg);
    return out;
}

static void test_scores_and_split(void) {
    EvalExample ex[NUM_EXAMPLES];
    make_examples(ex, NULL);
    double alone[NUM_EXAMPLES][EVAL_MAX_COMPLETIONS];
    int labels[NUM_EXAMPLES], want_acc = 0, want_norm = 0, differ = 0;
    for (int i = 0; i < NUM_EXAMPLES; i++) {
        int best = 0, best_norm = 0;
        for (int c = 0; c < ex[i].num_completions; c++) {
            alone[i][c] = row_alone(&ex[i], c);
            if (alone[i][c] < alone[i][best]) { best = c; }
            if (alone[i][c] / ex[i].completion_len[c] < alone[i][best_norm] / ex[i].completion_len[best_norm]) {
                best_norm = c;
            }
        }
        labels[i] = i % 2 == 0 ? best_norm : best;
        want_acc += best == labels[i];
        want_norm += best_norm == labels[i];
        differ += best != best_norm;
    }
    // each measure misses examples the other gets: the labels follow the other one where the two disagree
    check(want_acc < NUM_EXAMPLES && want_norm < NUM_EXAMPLES, "case_where_acc_and_acc_norm_differ",
          "%d examples where the lowest sum and the lowest mean differ; acc %d acc_norm %d of %d", differ, want_acc,
          want_norm, NUM_EXAMPLES);
    make_examples(ex, labels);
    eval_data_write(EVAL_PATH, EVAL_VERSION_U16, ex, NUM_EXAMPLES);

    RankRun one = run_rank(0, 1, ex);
    check(one.rows == 2 * TINY_B, "rows_shorter_than_seq_len_pack_more", "%d rows a forward, want %d", one.rows,
          2 * TINY_B);
    double worst = 0.0;
    for (int i = 0; i < NUM_EXAMPLES; i++) {
        for (int c = 0; c < ex[i].num_completions; c++) {
            double d = fabs(one.sums[i][c] - alone[i][c]) / (1.0 + fabs(alone[i][c]));
            worst = d > worst ? d : worst;
        }
    }
    check(worst <= SUM_TOL, "completion_sums_match_rows_alone", "worst relative difference %.3g", worst);
    check(one.counts.correct == want_acc && one.counts.correct_norm == want_norm &&
              one.counts.examples == NUM_EXAMPLES,
          "counts_match_hand_scoring", "acc %d acc_norm %d of %d, want %d %d of %d", one.counts.correct,
          one.counts.correct_norm, one.counts.examples, want_acc, want_norm, NUM_EXAMPLES);
    check(one.calls == one.forwards, "one_rank_runs_the_planned_forwards", "%d calls, plan %lld", one.calls,
          one.forwards);

    for (int D = 2; D <= 3; D++) {
        EvalCounts sum = {0, 0, 0};
        double sums[NUM_EXAMPLES][EVAL_MAX_COMPLETIONS];
        memset(sums, 0, sizeof(sums));
        int calls_ok = 1, padded = 0;
        for (int r = 0; r < D; r++) {
            RankRun run = run_rank(r, D, ex);
            sum.correct += run.counts.correct;
            sum.correct_norm += run.counts.correct_norm;
            sum.examples += run.counts.examples;
            calls_ok &= run.calls == run.forwards;
            padded |= run.own_forwards < run.forwards;
            for (int i = 0; i < NUM_EXAMPLES; i++) {
                for (int c = 0; c < ex[i].num_completions; c++) { sums[i][c] += run.sums[i][c]; }
            }
        }
        double worst_split = 0.0;
        for (int i = 0; i < NUM_EXAMPLES; i++) {
            for (int c = 0; c < ex[i].num_completions; c++) {
                double d = fabs(sums[i][c] - one.sums[i][c]);
                worst_split = d > worst_split ? d : worst_split;
            }
        }
        char name[96];
        snprintf(name, sizeof(name), "split_over_%d_ranks_adds_up", D);
        check(sum.correct == one.counts.correct && sum.correct_norm == one.counts.correct_norm &&
                  sum.examples == NUM_EXAMPLES && worst_split <= SUM_TOL,
              name, "acc %d acc_norm %d of %d (one rank: %d %d), worst sum difference %.3g", sum.correct,
              sum.correct_norm, sum.examples, one.counts.correct, one.counts.correct_norm, worst_split);
        snprintf(name, sizeof(name), "split_over_%d_ranks_same_forwards_each", D);
        check(calls_ok, name, "a rank's forwards differ from the plan's");
        if (D == 3) { check(padded, "some_rank_runs_padding_forwards", "every rank needed the plan's count"); }
    }
}

// ---------------------------------------------------------------------------------------------------------
// refusals

static void open_with(const char *path, int vocab, int B, int T) {
    Eval e;
    eval_open(&e, path, NULL, vocab, B, T, 1, 0, 1);
}
static void open_short_t(void *arg) { open_with((const char *)arg, TINY_V, TINY_B, 8); }
static void open_one_row(void *arg) { open_with((const char *)arg, TINY_V, 1, TINY_T); }
static void open_small_vocab(void *arg) { open_with((const char *)arg, 10, TINY_B, TINY_T); }
static void open_big_vocab(void *arg) { open_with((const char *)arg, 128256, TINY_B, TINY_T); }
static void open_missing(void *arg) { open_with((const char *)arg, TINY_V, TINY_B, TINY_T); }

static void validate_args(void *arg) {
    Options o;
    options_defaults(&o);
    const char **kv = (const char **)arg;
    for (int i = 0; kv[i]; i += 2) { option_set(&o, option_find(kv[i], strlen(kv[i])), kv[i + 1]); }
    options_validate(&o, 1);
}

static void test_refusals(void) {
    expect_child_fails(open_short_t, (void *)EVAL_PATH, "refuse_example_longer_than_seq_len",
                       "positions, more than --seq-len 8; raise --seq-len");
    expect_child_fails(open_one_row, (void *)EVAL_PATH, "refuse_more_completions_than_rows",
                       "completions, which one forward scores together, but a forward holds 2 rows");
    expect_child_fails(open_small_vocab, (void *)EVAL_PATH, "refuse_token_past_vocabulary",
                       "not below the vocabulary size 10");
    expect_child_fails(open_big_vocab, (void *)EVAL_PATH, "refuse_u16_file_for_big_vocabulary",
                       "has 16-bit tokens but the model's vocabulary is 128256");
    expect_child_fails(open_missing, (void *)(TEST_DIR "/missing.bin"), "refuse_missing_file", "missing.bin");
    static const char *every_alone[] = {"eval-every", "5", NULL};
    static const char *data_alone[] = {"eval-data", EVAL_PATH, NULL};
    static const char *dump_alone[] = {"eval-dump", TEST_DIR "/d.jsonl", NULL};
    expect_child_fails(validate_args, (void *)every_alone, "refuse_eval_every_without_data",
                       "--eval-every 5 needs --eval-data");
    expect_child_fails(validate_args, (void *)data_alone, "refuse_eval_data_without_every",
                       "needs --eval-every N > 0");
    expect_child_fails(validate_args, (void *)dump_alone, "refuse_eval_dump_without_data",
                       "there is no --eval-data");
}

int main(void) {
    if (system("rm -rf " TEST_DIR " && mkdir -p " TEST_DIR) != 0) { return 1; }
    test_rank_forwards();
    make_model();
    test_scores_and_split();
    test_refusals();
    g_model.destroy(g_model.ctx);
    return test_exit();
}
