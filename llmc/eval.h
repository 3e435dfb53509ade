/*
 * eval.h: multiple-choice evaluation during training (--eval-data FILE --eval-every N): the examples of an eval file
 * (llmc/eval_data.h) packed into rows of forwards, spread over the data ranks, scored completion style, the counts
 * summed. Plain C shared by both builds: a model gives one number per row (ModelOps.row_loss_sums).
 *
 * A row is an example's context followed by one of its completions, tokens x_0 .. x_{n-1} (n = context + completion):
 * inputs x_0 .. x_{n-2}, targets x_1 .. x_{n-1}, so it needs n - 1 positions, and completion token i (x_{ctx+i}) is
 * predicted at position ctx - 1 + i: the row's number is the sum of the losses at positions [ctx - 1, ctx - 1 + len).
 * The positions after n - 1 are padding (token 0), which a causal model's earlier positions never see. An example
 * longer than --seq-len is refused at start-up, naming it: truncating its context would score another question.
 *
 * Every forward is R rows of L positions: L is the file's longest row rounded up to EVAL_ROW_ALIGN x TP positions (at
 * most --seq-len; whole 64-token tiles, and sequence parallelism's split of a row over the TP ranks), and R = B x T /
 * L, so a forward holds no more tokens than a training micro-batch (the models' activations hold that many) while
 * HellaSwag's ~70-position rows are not padded to T = 1024 (~13x fewer tokens to run). An example's rows are in one
 * forward: a forward ends where the next example's would not fit, so R must hold an example's completions.
 *
 * Spread: example i goes to data rank i % D (D = DP x GTP: the ranks that read different tokens; the TP ranks of a
 * data rank run the same forward, whose collectives they share). Every rank runs the same number of forwards, the
 * most any rank needs (the plan, made once from the whole file): a rank with fewer runs forwards of padding rows, as
 * validation pads its last batch, because under GTP every forward gathers weights from the whole data group. Each
 * rank counts its examples (correct by acc, by acc_norm, examples), and the counts are summed over the data ranks
 * as the validation loss is.
 *
 * --eval-dump FILE (rank 0, replaced at every evaluation) writes a JSON line per example,
 *   {"example":i,"label":l,"loss_sums":[S_0,..],"tokens":[len_0,..]}
 * S_c the sum of completion c's token losses, len_c its tokens: for comparing with another implementation
 * (dev/eval_check.py).
 */
#ifndef LLMC_EVAL_H
#define LLMC_EVAL_H

#include "eval_data.h"
#include "model_ops.h"

#define EVAL_ROW_ALIGN 64 // a row's positions are whole multiples of this (times TP)
#define EVAL_PAD_TOKEN 0  // what fills the positions after a row's last input: any token of the vocabulary

typedef struct {
    int correct, correct_norm, examples; // over every data rank
} EvalCounts;

// Where one example of the forward being packed sits: its fields (the token arrays not kept), first row, and its
// first completion's place among the file's completions (the dump's).
typedef struct {
    EvalExample ex;
    int row;
    long long completion;
} EvalSlot;

typedef struct {
    const char *path, *dump_path; // dump_path NULL: no dump
    int vocab_size;
    int num_examples;
    long long completions;        // over the whole file
    int row_len, rows;            // L and R: the shape of every forward
    long long forwards;           // every rank's forwards in one evaluation: the most any data rank needs
    int data_rank, data_ranks;
    // one forward's rows, and its examples
    int *begin, *end;             // (R) the positions each row's sum covers
    double *sums;                 // (R)
    EvalSlot *slots;              // (R): an example has at least one row
    double *dump_sums;            // (completions) with a dump: every example's sums, this rank's filled
} Eval;

// The forwards data rank r runs for its examples (i % D == r) of C[i] completions each, R rows a forward.
static inline long long eval_rank_forwards(const int *completions, int n, int rows, int r, int data_ranks) {
    long long forwards = 0;
    int used = 0;
    for (int i = r; i < n; i += data_ranks) {
        if (used + completions[i] > rows) {
            forwards++;
            used = 0;
        }
        used += completions[i];
    }
    return forwards + (used > 0);
}

/*
 * Reads and checks the whole file at path (every field, tokens below vocab_size, every example's rows within T),
 * then plans the evaluation for micro-batches of B x T and this data rank of data_ranks, TP ranks sharing each:
 * fails with one line on anything wrong, before any work.
 */
static inline void eval_open(Eval *e, const char *path, const char *dump_path, int vocab_size, int B, int T, int tp,
                             int data_rank, int data_ranks) {
    memset(e, 0, sizeof(*e));
    e->path = path;
    e->dump_path = dump_path && dump_path[0] ? dump_path : NULL;
    e->vocab_size = vocab_size;
    e->data_rank = data_rank;
    e->data_ranks = data_ranks;
    EvalData d;
    eval_data_open(&d, path, vocab_size);
    int *completions = (int *)malloc_check((size_t)d.num_examples * sizeof(int), "the eval plan");
    int longest = 0, most_completions = 0;
    EvalExample ex;
    for (int i = 0; eval_data_next(&d, &ex); i++) {
        for (int c = 0; c < ex.num_completions; c++) {
            int positions = ex.context_len + ex.completion_len[c] - 1;
            if (positions > T) {
                fail("eval file '%s' example %d: its context (%d tokens) and completion %d (%d tokens) need %d "
                     "positions, more than --seq-len %d; raise --seq-len or leave the example out of the file",
                     path, i, ex.context_len, c, ex.completion_len[c], positions, T);
            }
            longest = positions > longest ? positions : longest;
        }
        completions[i] = ex.num_completions;
        most_completions = ex.num_completions > most_completions ? ex.num_completions : most_completions;
        e->completions += ex.num_completions;
    }
    e->num_examples = d.num_examples;
    eval_data_close(&d);
    int align = EVAL_ROW_ALIGN * tp;
    e->row_len = (int)round_up_size((size_t)longest, (size_t)align);
    if (e->row_len > T) { e->row_len = T; }
    e->rows = (int)((long long)B * T / e->row_len);
    if (e->rows < most_completions) {
        fail("eval file '%s' has an example of %d completions, which one forward scores together, but a forward holds "
             "%d rows of %d positions (--batch-size %d x --seq-len %d); raise --batch-size", path, most_completions,
             e->rows, e->row_len, B, T);
    }
    for (int r = 0; r < data_ranks; r++) {
        long long f = eval_rank_forwards(completions, e->num_examples, e->rows, r, data_ranks);
        e->forwards = f > e->forwards ? f : e->forwards;
    }
    free(completions);
    e->begin = (int *)malloc_check((size_t)e->rows * sizeof(int), "eval rows");
    e->end = (int *)malloc_check((size_t)e->rows * sizeof(int), "eval rows");
    e->sums = (double *)malloc_check((size_t)e->rows * sizeof(double), "eval rows");
    e->slots = (EvalSlot *)malloc_check((size_t)e->rows * sizeof(EvalSlot), "eval rows");
    if (e->dump_path) {
        e->dump_sums = (double *)malloc_check((size_t)e->completions * sizeof(double), "the eval dump");
    }
}

static inline void eval_free(Eval *e) {
    free(e->begin);
    free(e->end);
    free(e->sums);
    free(e->slots);
    free(e->dump_sums);
    memset(e, 0, sizeof(*e));
}

// Row `row` of the forward in inputs/targets (R x L): the context and completion c of ex, then padding.
static inline void eval_pack_row(Eval *e, const EvalExample *ex, int c, int row, int *inputs, int *targets) {
    int L = e->row_len, n = ex->context_len + ex->completion_len[c];
    int *in = inputs + (size_t)row * L, *tg = targets + (size_t)row * L;
    for (int t = 0; t < L; t++) {
        in[t] = t < n - 1 ? eval_example_token(ex, c, t) : EVAL_PAD_TOKEN;
        tg[t] = t < n - 1 ? eval_example_token(ex, c, t + 1) : EVAL_PAD_TOKEN;
    }
    e->begin[row] = ex->context_len - 1;
    e->end[row] = n - 1;
}

// Runs one forward of the `used` rows packed (the rest padding) and scores its `n` examples into *counts.
static inline void eval_forward(Eval *e, const ModelOps *ops, int *inputs, int *targets, int used, int n,
                                EvalCounts *counts) {
    int L = e->row_len;
    for (int r = used; r < e->rows; r++) {
        for (int t = 0; t < L; t++) { inputs[(size_t)r * L + t] = targets[(size_t)r * L + t] = EVAL_PAD_TOKEN; }
        e->begin[r] = e->end[r] = 0;
    }
    ops->row_loss_sums(ops->ctx, inputs, targets, e->rows, L, e->begin, e->end, e->sums);
    for (int k = 0; k < n; k++) {
        const EvalSlot *s = &e->slots[k];
        int correct, correct_norm;
        eval_score(&s->ex, e->sums + s->row, &correct, &correct_norm);
        counts->correct += correct;
        counts->correct_norm += correct_norm;
        counts->examples++;
        if (e->dump_sums) {
            memcpy(e->dump_sums + s->completion, e->sums + s->row, (size_t)s->ex.num_completions * sizeof(double));
        }
    }
}

// x[0..n) summed over the data ranks, in pieces as large as the launcher's sum carries.
static inline void eval_sum_over_data_ranks(const Launcher *l, double *x, long long n) {
    if (!l->sum_over_data_ranks) { return; }
    for (long long i = 0; i < n; i += LAUNCHER_SUM_MAX) {
        l->sum_over_data_ranks(x + i, (int)(n - i < LAUNCHER_SUM_MAX ? n - i : LAUNCHER_SUM_MAX));
    }
}

// The dump (rank 0): the file read again for each example's label and completion lengths beside the sums.
static inline void eval_write_dump(const Eval *e) {
    EvalData d;
    eval_data_open(&d, e->path, e->vocab_size);
    AtomicFile af;
    atomic_open(&af, e->dump_path);
    char line[64 + EVAL_MAX_COMPLETIONS * 48];
    EvalExample ex;
    for (long long at = 0; eval_data_next(&d, &ex); at += ex.num_completions) {
        int len = snprintf(line, sizeof(line), "{\"example\":%d,\"label\":%d,\"loss_sums\":[", ex.index, ex.label);
        for (int c = 0; c < ex.num_completions; c++) {
            len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%.9g", c ? "," : "", e->dump_sums[at + c]);
        }
        len += snprintf(line + len, sizeof(line) - (size_t)len, "],\"tokens\":[");
        for (int c = 0; c < ex.num_completions; c++) {
            len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%d", c ? "," : "", ex.completion_len[c]);
        }
        len += snprintf(line + len, sizeof(line) - (size_t)len, "]}\n");
        atomic_write(&af, line, 1, (size_t)len);
    }
    atomic_commit(&af);
    eval_data_close(&d);
}

/*
 * One evaluation of the whole file on every rank: this rank's examples in forwards of R x L tokens (inputs, targets:
 * room for R x L each), then padding forwards up to the plan's count, then the counts (and the dump's sums) summed
 * over the data ranks. Returns the counts, the same on every rank; rank 0 (is_root) writes the dump.
 */
static inline EvalCounts eval_run(Eval *e, const ModelOps *ops, const Launcher *l, int is_root, int *inputs,
                                  int *targets) {
    EvalCounts counts = {0, 0, 0};
    if (e->dump_sums) { memset(e->dump_sums, 0, (size_t)e->completions * sizeof(double)); }
    EvalData d;
    eval_data_open(&d, e->path, e->vocab_size);
    long long forwards = 0, completion = 0;
    int used = 0, n = 0;
    EvalExample ex;
    for (int i = 0; eval_data_next(&d, &ex); i++, completion += ex.num_completions) {
        if (i % e->data_ranks != e->data_rank) { continue; }
        if (used + ex.num_completions > e->rows) {
            eval_forward(e, ops, inputs, targets, used, n, &counts);
            forwards++;
            used = n = 0;
        }
        EvalSlot *s = &e->slots[n++];
        s->ex = ex;
        s->ex.context = NULL; // valid only until the next example is read; the rows hold the tokens
        for (int c = 0; c < EVAL_MAX_COMPLETIONS; c++) { s->ex.completion[c] = NULL; }
        s->row = used;
        s->completion = completion;
        for (int c = 0; c < ex.num_completions; c++) { eval_pack_row(e, &ex, c, used + c, inputs, targets); }
        used += ex.num_completions;
    }
    eval_data_close(&d);
    for (; used > 0 || forwards < e->forwards; used = n = 0, forwards++) {
        eval_forward(e, ops, inputs, targets, used, n, &counts);
    }
    if (forwards != e->forwards) {
        fail("internal error: data rank %d ran %lld eval forwards, the plan says %lld", e->data_rank, forwards,
             e->forwards);
    }
    double c[3] = {(double)counts.correct, (double)counts.correct_norm, (double)counts.examples};
    eval_sum_over_data_ranks(l, c, 3);
    EvalCounts all = {(int)c[0], (int)c[1], (int)c[2]};
    if (e->dump_sums) {
        eval_sum_over_data_ranks(l, e->dump_sums, e->completions);
        if (is_root) { eval_write_dump(e); }
    }
    return all;
}

#endif // LLMC_EVAL_H
