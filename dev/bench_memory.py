#!/usr/bin/env python3
"""The GPU memory one rank of train_gpt takes for a Llama (SwiGLU) model, from its shape and layout: the sum of what
train_gpt.cu's gpt_create allocates (what its "peak GPU memory" line prints), so a benchmark can choose a batch or a
depth that fits a GPU before it spends device time finding out.

    bench_memory.py SHAPE --batch B --seq T [--dp D] [--gtp G] [--zero] [--precision bf16|fp8|fp32]
        the estimate, in GB (1e9 bytes, as train_gpt prints it), and its parts
    bench_memory.py SHAPE ... --most-layers GPU_MIB
        the most layers of SHAPE (its L cut, the rest kept) whose estimate fits a GPU of GPU_MIB MiB (nvidia-smi's
        memory.total) less HEADROOM_GIB; 0 if none does
SHAPE as bench_table.py writes it (arch:L:C:NH:KV:F:V:tied), here a llama.

The parts, per rank (N = B T tokens, x = 2 bytes in bf16 and fp8, 4 in fp32):
  state      fp32 masters and gradients (8 bytes a parameter), AdamW's two moments (8; ZeRO-1: over D), the GEMMs'
             copy (x; none in fp32). GTP shards the block linears' weights over G (rows padded to G equal shards);
             wte, lmhead and the norms stay whole.
  gtp        G > 1: the pool of prefetch + 1 gathered weights (the largest, x an element) and two whole fp32
             gradients of it for the reduce-scatters.
  activations per layer and token 5C + QKV + 2F elements (residual stream twice, both norm outputs, attention
             output; q/k/v; fc's gate and up) and 4 (NH + 4) bytes (log-sum-exps, norm statistics); fp8: the FP8
             copies of the four linears' inputs (3C + F bytes), one norm output slot for all layers.
  head       the logits (N x padded vocabulary, x each; d fch and the (N, F) SwiGLU output the layers share lie in
             them where they fit), per-token scratch, the cuBLASLt workspace.
Validated against the measured Llama-3.2-1B shape on one H100 (B 4, T 2048; dev/results/llama_gpu_h100_3969a4f.txt):
bf16 34.5 GB, fp8 35.9 GB, when every layer kept its SwiGLU output (L x N x F elements more, 2.15 GB); with those
this gives 34.5 and 35.9, and for today's tree 32.4 and 33.7.
HEADROOM_GIB: what the GPU holds beside train_gpt's own allocations: measured 2.95 GiB on an H100 under DP=2 (79.65
GiB in nvidia-smi, 79.18 of them free to CUDA, 2.48 of those taken by the context, cuBLAS and NCCL's communicators:
dev/results/mgpu_2xh100_2026-11-25.txt, big_dp2), and 2 GiB more for allocator rounding and other layouts'
communicators: a cut that fails to start costs a device call, one layer too few costs nothing.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_table import padded_vocab, shape_of  # noqa: E402 (one shape notation for every benchmark script)

HEADROOM_GIB = 5.0
GTP_PREFETCH = 2           # --gtp-prefetch's default: a pool of three gathered weights
GTP_RS_BUFFERS = 2         # llmc/gtp.cuh
CUBLASLT_WORKSPACE = 32 << 20
SLICE_ALIGN = 256          # train_gpt.cu: buffers that share an allocation start at this alignment
SMEM_ROW_BYTES = 232448    # H100/H200's opt-in shared memory a block: a logits row wider than this takes row stats
VOCAB_STATS = 3            # llmc/classifier.cuh
GiB = 1 << 30


def ceil_div(a, b):
    return (a + b - 1) // b


def estimate(s, B, T, dp=1, gtp=1, zero=False, precision="bf16"):  # {part: bytes} of one rank
    if s.arch != "llama":
        raise ValueError(f"shape {s.arch}: only a llama (SwiGLU) is modelled, not GPT-2's GELU recompute; pass a llama")
    x = 4 if precision == "fp32" else 2
    N, C, L, HS = B * T, s.C, s.L, s.C // s.NH
    QKV, Vp = (s.NH + 2 * s.KV) * HS, padded_vocab(s)
    linears = [(QKV, C), (C, C), (2 * s.F, C), (C, s.F)]  # (out, in) of qkv, attention projection, fc, down
    shard = sum(L * ceil_div(rows, gtp) * cols for rows, cols in linears)
    P = shard + Vp * C * (1 if s.tied else 2) + L * 2 * C + C
    E = ceil_div(P, dp) * dp if zero else P
    parts = {"state": 8 * E + 8 * (E // dp if zero else E) + (0 if precision == "fp32" else x * E)}
    if gtp > 1:
        largest = max(ceil_div(rows, gtp) * gtp * cols for rows, cols in linears)
        parts["gtp"] = (GTP_PREFETCH + 1) * largest * x + GTP_RS_BUFFERS * largest * 4
    fp8 = precision == "fp8"
    norm_slots = 1 if fp8 else L  # fp8 (no bf16 blocks): the FP8 blocks share one slot of each norm output
    # residual stream (L + 1, and L after attention), attention output, q/k/v, fc's gate and up, both norm outputs
    per_token = ((2 * L + 1) * C + L * C + L * QKV + 2 * L * s.F + 2 * norm_slots * C) * x
    per_token += L * 4 * (s.NH + 4) + (3 * C + s.F) * L * fp8  # lse, norm stats; FP8 inputs of the four linears
    parts["activations"] = N * per_token
    # the logits; the final norm's output, proj, dres, dqkv; losses, tokens and targets, token buckets, lnf stats
    head = N * Vp * x + N * (3 * C + QKV) * x + N * (4 + 8 + 12 + 8)
    dfch_in_logits = Vp >= 2 * s.F  # else d fch has a buffer of its own
    if not dfch_in_logits:
        head += N * 2 * s.F * x
    after_dfch = ceil_div(N * 2 * s.F * x, SLICE_ALIGN) * SLICE_ALIGN
    if not fp8 and not (dfch_in_logits and after_dfch + N * s.F * x <= N * Vp * x):  # SwiGLU's output, where the
        head += N * s.F * x                                                        # logits cannot hold it
    if Vp * x > SMEM_ROW_BYTES:
        head += N * VOCAB_STATS * 4
    if fp8:  # the FP8 input and gradient scratch (widest: fc's output) and each linear's output gradient
        head += 2 * N * 2 * s.F + N * sum(rows for rows, _ in linears)
    head += N * s.NH * 4 + T * HS * 4 + CUBLASLT_WORKSPACE  # attention backward workspace, RoPE tables
    parts["head"] = head
    return parts


def most_layers(s, gpu_mib, **layout):  # the deepest cut of s that fits
    budget = gpu_mib * (1 << 20) - HEADROOM_GIB * GiB
    best = 0
    for L in range(1, s.L + 1):
        if sum(estimate(s._replace(L=L), **layout).values()) <= budget:
            best = L
    return best


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--gtp", type=int, default=1)
    p.add_argument("--zero", action="store_true")
    p.add_argument("--precision", choices=["bf16", "fp8", "fp32"], default="bf16")
    p.add_argument("--most-layers", type=float, metavar="GPU_MIB")
    a = p.parse_args()
    try:
        shape = shape_of(a.shape)
        layout = dict(B=a.batch, T=a.seq, dp=a.dp, gtp=a.gtp, zero=a.zero, precision=a.precision)
        if a.most_layers is not None:
            print(most_layers(shape, a.most_layers, **layout))
        else:
            parts = estimate(shape, **layout)
            print(f"{sum(parts.values()) / 1e9:.1f} GB a GPU (" +
                  ", ".join(f"{k} {v / 1e9:.1f}" for k, v in parts.items()) + ")")
    except ValueError as e:
        sys.exit(f"bench_memory.py: error: {e}")
