/*
 * gemm_algos.cuh: the GEMM choices of a run, and the file that keeps them (gemm_algos.txt in the output folder).
 *
 * llmc/matmul.cuh makes a plan per GEMM configuration and, during a tuning pass, times cuBLASLt's candidates for it
 * (gemm_tuning); a plan whose key is among the loaded choices takes that algorithm instead, and a loaded algorithm
 * that does not run on this cuBLAS and GPU is refused there, where the plan's descriptors exist to check it.
 * This file owns the rest: choose_gemm_algos runs the tuning pass, one forward and backward of a full micro-batch of
 * made-up tokens through a ModelOps table (llmc/model_ops.h), during which each GEMM times its candidates; its
 * gradients are then discarded (the pass is not a last micro-step, so no rank reduces them). A resumed run loads the
 * choices instead of timing, so that it uses the same algorithms (the same summation order) and continues
 * bit-exactly. The ranks of a TP group time their own GEMMs (whose shapes can differ: 13 and 12 of 25 heads) and
 * near-ties go either way, so each rank writes the choices it used to a file of its own in out_dir (gemm_algos.txt
 * for rank 0, gemm_algos.rank<r>.txt for rank r) and loads its own; a rank without one reads rank 0's (a one-GPU
 * run's choices copied in serve the same shapes). Ranks that choose differently stay in step: what they share is
 * summed over the ranks, the same on all of them.
 * The file: one line per chosen plan, its key (gemm_plan_key) " : " the cublasLtMatmulAlgo_t's bytes in hex.
 */
#ifndef LLMC_GEMM_ALGOS_CUH
#define LLMC_GEMM_ALGOS_CUH

#include "matmul.cuh"
#include "model_ops.h"
#include "options.h"
#include "utils.h"

// Reads the choices a previous run saved; a missing file is no error (nothing was saved yet).
static void gemm_algos_load(const char *path) {
    if (!file_exists(path)) { return; }
    FILE *f = fopen_check(path, "r"); // a FIFO or folder of that name is refused, not opened (which could block)
    char line[GEMM_KEY_CHARS + 2 * sizeof(cublasLtMatmulAlgo_t) + 8];
    while (fgets(line, sizeof(line), f)) {
        char *sep = strstr(line, " : ");
        if (!sep || sep - line >= GEMM_KEY_CHARS || g_num_gemm_loaded == GEMM_PLANS_MAX) {
            fail("'%s' is not a GEMM algorithm file", path);
        }
        GemmChoice *c = &g_gemm_loaded[g_num_gemm_loaded++];
        memcpy(c->key, line, sep - line);
        c->key[sep - line] = '\0';
        unsigned char *bytes = (unsigned char *)&c->algo;
        for (size_t i = 0; i < sizeof(c->algo); i++) {
            unsigned v;
            if (sscanf(sep + 3 + 2 * i, "%2x", &v) != 1) { fail("'%s': a truncated algorithm", path); }
            bytes[i] = (unsigned char)v;
        }
    }
    fclose(f);
}

// Writes the chosen algorithm of every timed or loaded plan, one line each: key " : " algorithm bytes in hex.
static void gemm_algos_save(const char *path) {
    AtomicFile af;
    atomic_open(&af, path);
    for (int i = 0; i < g_num_gemm_plans; i++) {
        const GemmPlan *p = &g_gemm_plans[i];
        if (!p->chosen) { continue; }
        char key[GEMM_KEY_CHARS];
        gemm_plan_key(p, key);
        fprintf(af.f, "%s : ", key);
        const unsigned char *bytes = (const unsigned char *)&p->algo;
        for (size_t b = 0; b < sizeof(p->algo); b++) { fprintf(af.f, "%02x", bytes[b]); }
        fprintf(af.f, "\n");
    }
    atomic_commit(&af);
}

#define GEMM_ALGOS_FILE "gemm_algos.txt"

// Rank r's file of choices in out_dir.
static void gemm_algos_path(char *path, size_t n, const char *out_dir, int rank) {
    if (rank == 0) { snprintf(path, n, "%s/%s", out_dir, GEMM_ALGOS_FILE); }
    else { snprintf(path, n, "%s/gemm_algos.rank%d.txt", out_dir, rank); }
}

// Every training GEMM's algorithm: this rank's file of choices loaded (else rank 0's), the tuning pass run, in which
// the GEMMs without a loaded choice time their candidates (search 0: take cuBLASLt's first), the choices saved.
static void choose_gemm_algos(ModelOps *ops, const GPTConfig *config, const char *out_dir, int rank, int B, int T,
                              int search) {
    char path[OPT_STR_LEN + 32];
    gemm_algos_path(path, sizeof(path), out_dir, rank);
    if (out_dir[0]) {
        char shared[OPT_STR_LEN + 32];
        gemm_algos_path(shared, sizeof(shared), out_dir, 0);
        gemm_algos_load(access(path, F_OK) == 0 ? path : shared);
    }
    int N = B * T;
    int *tokens = (int *)malloc_check((size_t)N * sizeof(int), "tuning tokens");
    for (int i = 0; i < N; i++) { tokens[i] = i % config->vocab_size; }
    gemm_tuning(search);
    ops->zero_grad(ops->ctx);
    ops->forward_backward(ops->ctx, tokens, tokens, B, T, 1.0f / N, NULL);
    gemm_tuning(0);
    ops->zero_grad(ops->ctx);
    free(tokens);
    if (out_dir[0]) {
        // rank 0 made it, but on another node a rank may see a folder of its own
        make_dirs_named(out_dir, "--out-dir");
        gemm_algos_save(path);
    }
}

#endif // LLMC_GEMM_ALGOS_CUH
