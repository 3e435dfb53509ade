#!/usr/bin/env python3
"""The benchmark table of dev/bench.sh and dev/bench_fp8.sh from their runs' logs.

    bench_table.py ROW... [--ratio MODEL:WHO:BASE_WHO]...
ROW is MODEL:WHO:KIND:PRECISION:LOG:LAYERS:CHANNELS:ROWS[:SKIP], KIND torch (torch_gpt.py's line) or ours (train_gpt's
log: the median of its step times after the first SKIP, default 5, and its peak memory line); ROWS are the sequences of
a step (batch x accumulation). Prints ms/step, tokens/s, MFU and peak
memory per row, then each asked ratio: tokens/s and peak memory of WHO over BASE_WHO for MODEL.
MFU: the model's FLOPs a token as llm.c counts them (6 params + 12 L C T) over the dense peak, 989 TFLOP/s bf16 on
H100/H200; for fp8 rows the four block linears' FLOPs (72 C^2 a layer a token) count at the fp8 peak (1979) and the
rest at bf16's, as train_gpt's own MFU does.
"""
import re
import statistics
import sys

PEAK_BF16, PEAK_FP8, T, V = 989e12, 1979e12, 1024, 50304


def params_of(L, C):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def mfu(tok_s, L, C, precision):
    flops = 6 * params_of(L, C) + 12 * L * C * T
    fp8 = 72 * L * C * C if precision.startswith("fp8") else 0
    seconds = fp8 / PEAK_FP8 + (flops - fp8) / PEAK_BF16
    return 100.0 * tok_s * seconds


# (ms/step, tokens/s, peak GB) of one run's log: torch_gpt.py's or torch_llama.py's summary line, or train_gpt's
# step lines (the median after the first `skip`) and its peak memory line; `tokens` are a step's.
def measure(kind, log, tokens, skip):
    text = open(log).read()
    if kind == "torch":
        m = re.search(r"ms/step=([\d.]+) tok/s=(\d+).*peak_mem_GB=([\d.]+)", text)
        return (float(m.group(1)), float(m.group(2)), float(m.group(3))) if m else (float("nan"),) * 3
    steps = [float(x) for x in re.findall(r"^step\s+\d+/\d+ .*?\|\s*([\d.]+) ms", text, re.M)]
    ms = statistics.median(steps[skip:]) if len(steps) > skip else float("nan")
    mem = re.search(r"peak GPU memory[^\d]*([\d.]+) GB", text)
    return ms, tokens / ms * 1e3, float(mem.group(1)) if mem else float("nan")


if __name__ == "__main__":  # dev/bench_llama.sh imports measure
    rows, ratios = {}, []
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--ratio":
            ratios.append(args.pop(0).split(":"))
            continue
        model, who, kind, precision, log, L, C, B, *skip = a.split(":")
        ms, tok, mem = measure(kind, log, int(B) * T, int(skip[0]) if skip else 5)
        rows[(model, who)] = (ms, tok, mfu(tok, int(L), int(C), precision), mem)

    print(f"{'model':6} {'who':14} {'ms/step':>9} {'tok/s':>10} {'MFU%':>6} {'peak GB':>8}")
    for (model, who), (ms, tok, m, mem) in rows.items():
        print(f"{model:6} {who:14} {ms:9.2f} {tok:10.0f} {m:6.1f} {mem:8.1f}")
    for model, who, base in ratios:
        a, b = rows.get((model, who)), rows.get((model, base))
        if a and b:
            print(f"{model:6} {who + ' / ' + base:34} tokens/s {a[1] / b[1]:6.3f}x  peak memory {a[3] / b[3]:6.3f}x")
