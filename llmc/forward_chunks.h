/*
 * forward_chunks.h: the forward's chunks of a micro-batch (B sequences of T tokens, N = B T rows of the
 * activations): the schedule by which train_gpt.cu's gpt_forward pipelines tensor-parallel collectives behind
 * compute. Plain C (the CPU tests check it); the mesh (llmc/mesh.h) says which rank holds what, this says in which
 * pieces a rank runs its forward.
 *
 * gpt_forward pipelines chunks of whole sequences (attention never crosses one) so that one chunk's
 * TP sum runs beside another chunk's GEMMs and attention: min(B, TP_SEQUENCE_CHUNKS) chunks of about B/K sequences.
 * One chunk without TP (nothing to hide), and one under sequence parallelism (SP), where TP rank r owns the tokens
 * [r N/TP, (r+1) N/TP) between blocks and runs the LayerNorms on those only. SP's collectives (an all-gather before
 * a column-parallel GEMM, a reduce-scatter after a row-parallel one) move as many bytes as one all-reduce, but each
 * stands between a LayerNorm and a GEMM, and every way of cutting them we measured was slower (dev/log/2026-11-23.md,
 * "SP forward"; GPT-2 1558M, TP=2 on 2 x H200): 115 ms a step as one chunk; 119.6 ms in chunks of a piece of every
 * owner's tokens, though those waited 15 ms a step for communication instead of 30; 120.7 ms in chunks of one
 * owner's tokens; 118.6 ms with each GEMM cut by owner around its collective. Those cuts ran NCCL's collectives, on
 * SMs the GEMMs then lacked; SP over the peer ring (llmc/tensor_parallel.cuh, --sp-overlap) cuts each such GEMM by
 * owner around copy-engine transfers instead, inside this one chunk.
 */
#ifndef LLMC_FORWARD_CHUNKS_H
#define LLMC_FORWARD_CHUNKS_H

#include "mesh.h"

/*
 * Two chunks suffice when a chunk's work between collectives takes longer than its collective: at GPT-2 1558M, TP=2
 * on 2 x H200, a sum of 4 sequences (13 MB bf16, ~90 us at the measured 150 GB/s) against 120-140 us of GEMMs and
 * attention. More chunks would only shrink the GEMMs and add collective latency.
 */
#define TP_SEQUENCE_CHUNKS 2

typedef struct {
    int tokens;          // the micro-batch's, B x T
    int k;               // which chunk
    int row, rows;       // its sequences' tokens: rows [row, row + rows) of the (N, ...) activations
    int ln_row, ln_rows; // rows of the LayerNorm outputs this rank computes: the chunk's, or under SP its own tokens
    int res_row;         // the first of those in this rank's residual stream (all N tokens, or under SP its N/TP)
} ForwardChunk;

// The chunks of a B-sequence micro-batch, at most `most` (1 where every cast of an FP8 tensor needs the amax of the
// whole tensor first: current scaling).
static inline int forward_chunks(const Mesh *m, int sp, int B, int most) {
    if (m->tp == 1 || sp) { return 1; }
    int K = B < TP_SEQUENCE_CHUNKS ? B : TP_SEQUENCE_CHUNKS;
    return K < most ? K : most;
}

// Chunk k of a B x T micro-batch as this rank sees it; sp is honoured only under TP (mesh_validate: T % TP == 0).
static inline ForwardChunk forward_chunk(const Mesh *m, int sp, int B, int T, int most, int k) {
    sp = sp && m->tp > 1;
    int K = forward_chunks(m, sp, B, most);
    ForwardChunk f;
    f.tokens = B * T;
    f.k = k;
    f.row = k * B / K * T;
    f.rows = (k + 1) * B / K * T - f.row;
    f.ln_rows = sp ? f.rows / m->tp : f.rows;
    f.ln_row = sp ? m->tp_rank * f.ln_rows : f.row;
    f.res_row = sp ? 0 : f.row;
    return f;
}

#endif // LLMC_FORWARD_CHUNKS_H
