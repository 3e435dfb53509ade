/*
 * test_forward_chunks.c: the forward's chunks of a micro-batch (llmc/forward_chunks.h), with and without tensor and
 * sequence parallelism, for every rank of TP groups up to 8: whole sequences in order covering the micro-batch once,
 * and known values.
 */
#include "../llmc/forward_chunks.h"
#include "test_util.h"

// The forward's chunks (forward_chunk) as rank `rank` sees them: whole sequences in order, covering the micro-batch
// once; under SP one chunk, whose LayerNorm rows are this rank's own tokens, at the start of its residual stream.
static int check_chunks(int tp, int rank, int sp, int B, int T, int most) {
    Mesh m = mesh_make(tp, rank, tp, 1);
    int K = forward_chunks(&m, sp, B, most), N = B * T, mine = N / tp, bad = 0, next_row = 0;
    bad += K < 1 || K > B || K > TP_SEQUENCE_CHUNKS || K > most || ((tp == 1 || sp) && K != 1);
    bad += tp > 1 && !sp && B > 1 && most > 1 && K == 1;
    for (int k = 0; k < K; k++) {
        ForwardChunk f = forward_chunk(&m, sp, B, T, most, k);
        bad += f.k != k || f.tokens != N || f.row != next_row || f.rows < T || f.row % T != 0 || f.rows % T != 0;
        next_row = f.row + f.rows;
        if (sp && tp > 1) {
            bad += f.ln_row != rank * mine || f.ln_rows != mine || f.res_row != 0;
        } else {
            bad += f.ln_row != f.row || f.ln_rows != f.rows || f.res_row != f.row;
        }
    }
    bad += next_row != N;
    return bad;
}

static void test_forward_chunks(void) {
    int bad = 0;
    for (int tp = 1; tp <= 8; tp++) for (int rank = 0; rank < tp; rank++) for (int sp = 0; sp <= 1; sp++) {
        for (int B = 1; B <= 16; B++) for (int t = 1; t <= 3; t += 2) for (int most = 1; most <= 2; most++) {
            int b = check_chunks(tp, rank, sp, B, t * tp, most); // T % tp == 0 under SP (mesh_validate)
            if (b) { printf("  tp %d rank %d sp %d B %d T %d most %d: %d errors\n", tp, rank, sp, B, t * tp, most, b); }
            bad += b;
        }
    }
    check(bad == 0, "forward chunks: whole sequences covering the batch once, one chunk under SP", "%d errors", bad);
    // By hand, T = 64, TP = 2, rank 1: without SP, B = 8 is two chunks of 4 sequences, B = 3 one of 1 and one of 2;
    // under SP, B = 8 is one chunk, rank 1's tokens 256-511; at most one chunk, B = 8 is one of 8 sequences.
    Mesh m2 = mesh_make(2, 1, 2, 1);
    ForwardChunk a = forward_chunk(&m2, 0, 8, 64, 2, 1), b = forward_chunk(&m2, 0, 3, 64, 2, 1);
    ForwardChunk c = forward_chunk(&m2, 1, 8, 64, 2, 0), d = forward_chunk(&m2, 0, 8, 64, 1, 0);
    int ok = a.row == 256 && a.rows == 256 && a.ln_row == 256 && a.res_row == 256 && b.row == 64 && b.rows == 128;
    ok = ok && c.row == 0 && c.rows == 512 && c.ln_row == 256 && c.ln_rows == 256 && c.res_row == 0;
    ok = ok && d.row == 0 && d.rows == 512 && d.ln_row == 0 && d.res_row == 0;
    check(ok, "forward chunks at known values", "see the values above");
}

int main(void) {
    test_forward_chunks();
    return test_exit();
}
