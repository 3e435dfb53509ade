/*
 * head_chunks.h: the LM head's chunks of a micro-batch's rows. The logits, one row of the padded vocabulary Vp per
 * token, are the largest activation of a step at a large vocabulary (Llama 3's 128256 at B 4 x T 2048: 2.1 GB in
 * bf16), and each is needed only from the LM head's GEMM to the classifier's gradient and the head's own backward.
 * So train_gpt.cu's gpt_head runs all of it a chunk of whole rows at a time: the logits of the chunk, softmax /
 * cross-entropy and its gradient in place, and when the pass trains the head's two backward GEMMs for those rows;
 * only one chunk's logits exist at once. Plain C (the CPU tests check it).
 *
 * A chunk holds at most `budget` bytes of logits counted over the whole padded vocabulary, not a TP rank's part of
 * it, so every layout cuts the same rows (a TP group's ranks exchange each chunk's row statistics in step). A pass of
 * N rows takes K = ceil(N / most) chunks of N/K rows give or take one, chunk k rows [k N / K, (k+1) N / K), so the
 * GEMMs see at most two shapes. A budget of 0 (or one past all rows) is one chunk of all N.
 */
#ifndef LLMC_HEAD_CHUNKS_H
#define LLMC_HEAD_CHUNKS_H

#include <limits.h>
#include <stddef.h>

/*
 * The default budget, 1 GiB. Each chunk's weight-gradient GEMM (dW_head += dlogits^T x: 2 Vp C rows FLOPs) reads and
 * writes the head's fp32 gradient (8 Vp C bytes) once more, so a chunk does rows / 4 FLOPs a byte of that traffic:
 * fewer, larger chunks keep it under the GEMM's math (the H100's ridge is 989 TFLOP/s over 3.35 TB/s, ~295 FLOPs a
 * byte). 1 GiB of bf16 rows is 4185 rows of Llama 3's 128256 (~1050 FLOPs a byte: 3.5x the ridge) and 10672 of
 * GPT-2's 50304, while the logits of the benchmarks' micro-batches drop to half (Llama-3.2-1B, B 4 x T 2048: two
 * chunks) and a quarter (GPT-2 124M, B 32 x T 1024: four).
 */
#define HEAD_CHUNK_BUDGET_MIB 1024
#define HEAD_CHUNK_MIB ((size_t)1 << 20)

typedef struct {
    int k;         // which chunk
    int row, rows; // rows [row, row + rows) of the (N, ...) activations
} HeadChunk;

// The most rows a chunk may hold: budget bytes of rows of Vp logits of elem bytes each (at least one row); 0 (no
// budget) is no limit.
static inline int head_chunk_rows_max(size_t budget, size_t Vp, size_t elem) {
    if (budget == 0) { return INT_MAX; }
    size_t rows = budget / (Vp * elem);
    if (rows < 1) { return 1; }
    return rows > INT_MAX ? INT_MAX : (int)rows;
}

// The chunks of a pass of N rows, none past `most` rows.
static inline int head_chunks(int N, int most) { return N <= most ? 1 : (int)(((long long)N + most - 1) / most); }

// Chunk k of the head_chunks(N, most) chunks of N rows.
static inline HeadChunk head_chunk(int N, int most, int k) {
    long long K = head_chunks(N, most);
    HeadChunk c;
    c.k = k;
    c.row = (int)(k * (long long)N / K);
    c.rows = (int)((k + 1) * (long long)N / K) - c.row;
    return c;
}

#endif // LLMC_HEAD_CHUNKS_H
