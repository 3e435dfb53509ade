/*
 * test_head_chunks.c: the LM head's chunks of rows (llmc/head_chunks.h): whole rows in order covering the pass once,
 * none past the budget's rows, as few chunks as that allows and of sizes within one row; known values at the
 * benchmarks' shapes.
 */
#include "../llmc/head_chunks.h"
#include "test_util.h"

#define BF16_BYTES 2
#define FP32_BYTES 4
#define SHOWN_FAILURES 10 // failing cases printed before the count

// The chunks of N rows under `most`: in order, covering [0, N) once, each of 1..most rows, all within one row of
// each other, and no fewer could hold N.
static int check_chunks(int N, int most) {
    int K = head_chunks(N, most), bad = 0, next_row = 0, least = N, largest = 0;
    bad += K < 1 || (long long)K * most < N || (K > 1 && (long long)(K - 1) * most >= N);
    for (int k = 0; k < K; k++) {
        HeadChunk c = head_chunk(N, most, k);
        bad += c.k != k || c.row != next_row || c.rows < 1 || c.rows > most;
        next_row = c.row + c.rows;
        least = c.rows < least ? c.rows : least;
        largest = c.rows > largest ? c.rows : largest;
    }
    bad += next_row != N || largest - least > 1;
    return bad;
}

static void test_head_chunks(void) {
    int bad = 0, cases = 0;
    for (int N = 1; N <= 600; N++) {
        for (int most = 1; most <= N + 2; most++) {
            int b = check_chunks(N, most);
            if (b && cases++ < SHOWN_FAILURES) { printf("  N %d, at most %d rows: %d errors\n", N, most, b); }
            bad += b;
        }
    }
    bad += check_chunks(1 << 20, 4185) + check_chunks(1 << 20, INT_MAX) + check_chunks(INT_MAX, 1 << 30);
    check(bad == 0, "head chunks: whole rows in order covering the pass once, none past the budget", "%d errors", bad);

    // The rows a budget holds: at least one; no budget is no limit.
    size_t gib = (size_t)HEAD_CHUNK_BUDGET_MIB * HEAD_CHUNK_MIB;
    int llama = head_chunk_rows_max(gib, 128256, BF16_BYTES), gpt2 = head_chunk_rows_max(gib, 50304, BF16_BYTES);
    int fp32 = head_chunk_rows_max(gib, 50304, FP32_BYTES), none = head_chunk_rows_max(0, 128256, BF16_BYTES);
    int byte = head_chunk_rows_max(1, 128256, BF16_BYTES);
    int row = head_chunk_rows_max(128256 * BF16_BYTES, 128256, BF16_BYTES);
    int ok = llama == 4185 && gpt2 == 10672 && fp32 == 5336 && none == INT_MAX && byte == 1 && row == 1;
    check(ok, "head chunk rows of a budget",
          "Llama 3 %d (want 4185), GPT-2 %d (10672), in fp32 %d (5336), no budget %d (INT_MAX), 1 byte %d (1), one row "
          "%d (1)", llama, gpt2, fp32, none, byte, row);

    // The benchmarks: Llama-3.2-1B at B 4 x T 2048 in two chunks of 4096 rows, GPT-2 124M at B 32 x T 1024 in four
    // of 8192; an uneven split, 10 rows at most 4 a chunk: 3 chunks of 3, 3 and 4 rows; no budget: one chunk.
    HeadChunk l1 = head_chunk(8192, llama, 1), g3 = head_chunk(32768, gpt2, 3);
    HeadChunk u0 = head_chunk(10, 4, 0), u1 = head_chunk(10, 4, 1), u2 = head_chunk(10, 4, 2);
    HeadChunk w = head_chunk(8192, INT_MAX, 0);
    ok = head_chunks(8192, llama) == 2 && l1.row == 4096 && l1.rows == 4096;
    ok = ok && head_chunks(32768, gpt2) == 4 && g3.row == 24576 && g3.rows == 8192;
    ok = ok && head_chunks(10, 4) == 3 && u0.row == 0 && u0.rows == 3 && u1.row == 3 && u1.rows == 3 && u2.row == 6 &&
         u2.rows == 4;
    ok = ok && head_chunks(8192, INT_MAX) == 1 && w.row == 0 && w.rows == 8192;
    check(ok, "head chunks at known values", "Llama %d chunks, GPT-2 %d, 10 rows by 4: %d", head_chunks(8192, llama),
          head_chunks(32768, gpt2), head_chunks(10, 4));
}

int main(void) {
    test_head_chunks();
    return test_exit();
}
