#!/usr/bin/env python3
"""The benchmark table of dev/bench.sh and dev/bench_fp8.sh from their runs' logs, and what the other benchmark
scripts (bench_llama.sh, bench_mgpu.sh, bench_memory.py) share with it: the parsing of a run's log, a model's
shape, its FLOPs a token and MFU.

    bench_table.py ROW... [--ratio MODEL:WHO:BASE_WHO]...
ROW is MODEL:WHO:KIND:PRECISION:LOG:LAYERS:CHANNELS:ROWS[:SKIP], a GPT-2 at T = 1024, KIND torch (torch_gpt.py's line)
or ours (train_gpt's log: the median of its step times after the first SKIP, default 5, and its peak memory line); ROWS
are the sequences of a step (batch x accumulation). Prints ms/step, tokens/s, MFU and peak memory per row, then each
asked ratio: tokens/s and peak memory of WHO over BASE_WHO for MODEL.
MFU: the model's FLOPs a token as llmc/config.h's flops_per_token counts them (6 x the weights a token meets in a GEMM,
the LM head once, + 12 L C T for attention) over the dense peak, 989 TFLOP/s bf16 on H100/H200; for fp8 rows the four
block linears' FLOPs (6 x their weights a layer a token) count at the fp8 peak (1979) and the rest at bf16's, as
train_gpt's own MFU does.
A shape is written arch:L:C:NH:KV:F:V:tied (gpt2 or llama; layers, channels, heads, key/value heads, the MLP's hidden
features, the vocabulary before padding, 1 for an LM head tied to wte), as llmc/config.h's description holds it.
"""
import re
import statistics
import sys
from collections import namedtuple

PEAK_BF16, PEAK_FP8, GPT2_T = 989e12, 1979e12, 1024
VOCAB_PAD = 128  # llmc/config.h pads the vocabulary to a multiple of this

Shape = namedtuple("Shape", "arch L C NH KV F V tied")


def shape_of(spec):  # "arch:L:C:NH:KV:F:V:tied"
    arch, *n = spec.split(":")
    if arch not in ("gpt2", "llama") or len(n) != 7:
        raise ValueError(f"shape '{spec}' is not arch:L:C:NH:KV:F:V:tied with arch gpt2 or llama")
    return Shape(arch, *map(int, n))


def gpt2_shape(L, C):
    return Shape("gpt2", L, C, C // 64, C // 64, 4 * C, 50257, 1)


def padded_vocab(s):
    return (s.V + VOCAB_PAD - 1) // VOCAB_PAD * VOCAB_PAD


def block_linear_weights(s):  # a layer's four linears: qkv, the attention projection, fc (SwiGLU: gate and up), down
    qkv = (s.NH + 2 * s.KV) * (s.C // s.NH)
    fc = 2 * s.F if s.arch == "llama" else s.F
    return qkv * s.C + s.C * s.C + fc * s.C + s.F * s.C


def head_weights(s):  # wte, and lmhead where untied
    return padded_vocab(s) * s.C * (1 if s.tied else 2)


def params_of(s, T):  # every parameter (T: GPT-2's learned positions)
    if s.arch == "gpt2":  # biases, both LayerNorms' weight and bias a layer, wpe, the final LayerNorm
        return head_weights(s) + T * s.C + s.L * (block_linear_weights(s) + 13 * s.C) + 2 * s.C
    return head_weights(s) + s.L * (block_linear_weights(s) + 2 * s.C) + s.C  # two RMSNorms a layer, the final one


def flops_per_token(s, T):  # llmc/config.h's: untied, wte is a lookup and lmhead the LM head's GEMM
    gemm_params = params_of(s, T) - (0 if s.tied else padded_vocab(s) * s.C)
    return 6 * gemm_params + 12 * s.L * s.C * T


def mfu(tok_s, s, T, precision):  # tok_s: one GPU's
    flops = flops_per_token(s, T)
    fp8 = 6 * s.L * block_linear_weights(s) if precision.startswith("fp8") else 0
    seconds = fp8 / PEAK_FP8 + (flops - fp8) / PEAK_BF16
    return 100.0 * tok_s * seconds


# (ms/step, tokens/s, peak GB, exposed communication ms) of one run's log: torch_gpt.py's or torch_llama.py's summary
# line, or train_gpt's step lines (the median after the first `skip`: its time and its "| comm X ms", present where
# the world is more than one GPU) and its peak memory line; `tokens` are a step's, over all GPUs. nan where the log
# has none.
def measure(kind, log, tokens, skip):
    nan = float("nan")
    text = open(log, errors="replace").read()
    if kind == "torch":
        m = re.search(r"ms/step=([\d.]+) tok/s=(\d+).*peak_mem_GB=([\d.]+)", text)
        return (float(m.group(1)), float(m.group(2)), float(m.group(3)), nan) if m else (nan,) * 4
    steps = re.findall(r"^step\s+\d+/\d+ .*?\|\s*([\d.]+) ms(.*)$", text, re.M)[skip:]
    ms = statistics.median(float(t) for t, _ in steps) if steps else nan
    comm = [float(m.group(1)) for _, rest in steps for m in [re.search(r"\| comm ([\d.]+) ms", rest)] if m]
    mem = re.search(r"peak GPU memory[^\d]*([\d.]+) GB", text)
    return ms, tokens / ms * 1e3, float(mem.group(1)) if mem else nan, statistics.median(comm) if comm else nan


if __name__ == "__main__":  # dev/bench_llama.sh and dev/bench_mgpu.sh import the functions above
    rows, ratios = {}, []
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--ratio":
            ratios.append(args.pop(0).split(":"))
            continue
        model, who, kind, precision, log, L, C, B, *skip = a.split(":")
        ms, tok, mem, _ = measure(kind, log, int(B) * GPT2_T, int(skip[0]) if skip else 5)
        rows[(model, who)] = (ms, tok, mfu(tok, gpt2_shape(int(L), int(C)), GPT2_T, precision), mem)

    print(f"{'model':6} {'who':14} {'ms/step':>9} {'tok/s':>10} {'MFU%':>6} {'peak GB':>8}")
    for (model, who), (ms, tok, m, mem) in rows.items():
        print(f"{model:6} {who:14} {ms:9.2f} {tok:10.0f} {m:6.1f} {mem:8.1f}")
    for model, who, base in ratios:
        a, b = rows.get((model, who)), rows.get((model, base))
        if a and b:
            print(f"{model:6} {who + ' / ' + base:34} tokens/s {a[1] / b[1]:6.3f}x  peak memory {a[3] / b[3]:6.3f}x")
