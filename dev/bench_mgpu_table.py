#!/usr/bin/env python3
"""dev/bench_mgpu.sh's table: a line per row, then the ratios its targets set bars on (the header of bench_mgpu.sh
lists them), each printed where a run of it was asked for.

    bench_mgpu_table.py WARMUP_STEPS ROW...
ROW is NAME|WHO|KIND|PRECISION|SHAPE|T|SEQS|GPUS|STEPS|STATUS|LOG: KIND ours (train_gpt's log), pair (two one-GPU
runs: LOG and LOG's .gpu1.log beside it; the slower one's step) or torch (the baseline's line); SHAPE as
dev/bench_table.py writes it; SEQS the sequences of a step over all GPUs; STATUS ok, FAILED or SKIPPED. The logs are
read by bench_table.py's measure, MFU is its mfu.
"""
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_table import PEAK_BF16, PEAK_FP8, measure, mfu, params_of, shape_of  # noqa: E402 (one parsing)

MISSING = (None,) * 4  # ms/step, tokens/s, exposed comm ms, peak GB of a row that did not run or was not asked for


def known(v):
    return v is not None and not math.isnan(v)


def table(warm, specs):  # prints a line per row; returns {name: (ms, tok, comm, mem)}, {name: (shape, T)}
    rows, shapes = {}, {}
    print(f"{'layout':14} {'who':14} {'ms/step':>9} {'tok/s':>10} {'MFU%/GPU':>9} {'peak GB':>8} {'comm ms':>8}")
    for spec in specs:
        name, who, kind, prec, shape, T, seqs, gpus, _steps, status, log = spec.split("|")
        shape, T, seqs, gpus = shape_of(shape), int(T), int(seqs), int(gpus)
        text = open(log, errors="replace").read() if status == "FAILED" and os.path.exists(log) else ""
        ms = tok = comm = mem = None
        if status == "ok":
            ms, tok, mem, comm = measure("torch" if kind == "torch" else "ours", log, seqs * T, warm)
            if kind == "pair":  # the slower of the two runs (GPU 1's log beside GPU 0's)
                other = measure("ours", log[:-len(".log")] + ".gpu1.log", seqs * T, warm)[0]
                ms = max(ms, other) if known(ms) and known(other) else math.nan
                tok = seqs * T / ms * 1e3
            if not known(ms):
                status, text = "FAILED", open(log, errors="replace").read()  # ran, but printed no timed step
        rows[name] = (ms, tok, comm, mem) if status == "ok" else MISSING
        shapes[name] = (shape, T)
        if status != "ok":
            why = ""
            if status == "FAILED":  # the trainer's own error line, if it printed one (an allocation that failed, say)
                m = re.search(r"^\[train_gpt rank \d+\] error: .*$", text, re.M)
                why = "  " + m.group(0) if m else ""
            print(f"{name:14} {who:14} {status:>9}{why}")
            continue
        fmt = lambda v, f: format(v, f) if known(v) else "-"
        print(f"{name:14} {who:14} {ms:9.2f} {tok:10.0f} {mfu(tok / gpus, shape, T, prec):9.1f} "
              f"{fmt(mem, '8.1f'):>8} {fmt(comm, '8.2f'):>8}")
    print(f"(MFU per GPU as train_gpt counts it: the model's FLOPs over {PEAK_BF16 / 1e12:.0f} TFLOP/s bf16, fp8 rows' "
          f"block linears over {PEAK_FP8 / 1e12:.0f})")
    return rows, shapes


def ratios(rows, shapes):
    def asked(*names):
        return any(n in rows for n in names)

    def compare(label, a, b, col, bar, at_most):  # column col of a over b's; bar None: for information, no target
        if not asked(a, b):
            return
        x, y = rows.get(a, MISSING)[col], rows.get(b, MISSING)[col]
        want = (f"bar <= {bar}x" if at_most else f"bar {bar}x") if bar else "no bar"
        if not known(x) or not known(y):
            print(f"{label:46} -        ({want}; a run is missing)")
            return
        verdict = ""
        if bar is not None:
            verdict = ": meets" if (x / y <= bar if at_most else x / y >= bar) else ": MISSES"
        print(f"{label:46} {x / y:6.3f}x  ({want}{verdict})")

    def ratio(label, a, b, bar):  # tokens/s of a over b's, at least bar
        compare(label, a, b, 1, bar, False)

    def memory_ratio(label, a, b, bar):  # peak memory a GPU of a against b's, at most bar
        compare(label, a, b, 3, bar, True)

    def exposed(name, bar):
        if not asked(name):
            return
        ms, _, comm, _ = rows[name]
        label = name + " exposed comm / step"
        if not known(ms) or not known(comm):
            print(f"{label:46} -        (bar < {bar}%; {'no run' if not known(ms) else 'no comm field'})")
        else:
            share = comm / ms * 100
            print(f"{label:46} {share:6.1f}%  (bar < {bar}%: {'meets' if share < bar else 'MISSES'})")

    def model(name):
        s, T = shapes[name]
        arch = {"gpt2": "GPT-2", "llama": "Llama"}[s.arch]
        return f"a {s.L}-layer, {s.C}-channel {arch} ({params_of(s, T) / 1e9:.2f}B parameters)"

    def largest_model(gtp, dp):  # a model DP cannot hold, trained with GTP, beside what DP holds
        if not asked(gtp, dp):
            return
        said = []
        if asked(gtp):
            ms, tok, _, mem = rows[gtp]
            said.append(f"GTP=2 trains {model(gtp)} at {tok:.0f} tokens/s, {mem:.1f} GB a GPU" if known(ms)
                        else f"GTP=2 did not train {model(gtp)} (row above)")
        if asked(dp):
            ms, tok, _, mem = rows[dp]
            if asked(gtp) and shapes[dp] == shapes[gtp]:
                said.append("DP=2 fits it too" if known(ms) else "DP=2 cannot hold it (row above)")
            else:  # a cut of the model: the most DP holds
                said.append(f"DP=2 holds {model(dp)}" +
                            (f": {tok:.0f} tokens/s, {mem:.1f} GB a GPU" if known(ms) else ", but its row did not run"))
        print("largest-model line: " + "; ".join(said))

    print()
    ratio("ours DP=2 / torch DDP tokens/s", "124M_dp2", "124M_ddp", 1.10)
    ratio("ours DP=2 / ours 1 GPU tokens/s", "124M_dp2", "124M_1gpu", 1.95)
    # Where DP=2's shortfall comes from: the pair is two one-GPU runs at once with no communication at all.
    ratio("ours 1 GPU x2 / 1 GPU tokens/s", "124M_pair", "124M_1gpu", None)
    ratio("ours DP=2 / 1 GPU x2 tokens/s", "124M_dp2", "124M_pair", None)
    # TP=2's collectives hide behind the weight gradients: 0.9-1.4% of the step exposed on 2 x H100 and 2 x H200. The
    # first bar was 10%, which a deferral order that left 10 ms a step of its sums exposed (9.2%) passed; 3% does not.
    exposed("1558M_tp2", 3)
    exposed("1558M_tp2_sp", 10)
    # sequence parallelism over the ring: no slower than TP=2 (step time <= 1.02x), its waits under 5%, at SP's
    # memory; against its collectives over NCCL, for information; the ring's two transports against each other (copy
    # engines over peer memory, the default, and NCCL send/recv: the faster is kept as the default)
    for sp, tp, nccl, p2p, label in (
            ("1558M_tp2_sp", "1558M_tp2", "1558M_tp2_sp_nccl", "1558M_tp2_sp_p2p", "ours TP=2+SP"),
            ("1558M_tp2_sp_fp8", "1558M_tp2_fp8", "1558M_tp2_sp_fp8_nccl", "1558M_tp2_sp_fp8_p2p", "ours TP=2+SP fp8")):
        ratio(f"{label} / TP=2 tokens/s", sp, tp, 0.98)
        exposed(sp, 5)
        memory_ratio(f"{label} / TP=2 peak memory", sp, tp, None)
        ratio(f"{label} ring / NCCL tokens/s", sp, nccl, None)
        ratio(f"{label} ring ce / nccl p2p tokens/s", sp, p2p, None)
        exposed(p2p, 5)
    # FP8's gathered inputs as E4M3 codes (the default) against the activations (--sp-fp8-codes 0), for information
    ratio("ours TP=2+SP fp8 codes / activations tokens/s", "1558M_tp2_sp_fp8", "1558M_tp2_sp_fp8_act", None)
    exposed("1558M_tp2_sp_fp8_act", 5)
    # the ring's reduce-scatters in pieces (--sp-ring-pieces) against whole products, for information
    for label, sp in (("TP=2+SP", "1558M_tp2_sp"), ("TP=2+SP fp8", "1558M_tp2_sp_fp8"), ("TP=4+SP", "1558M_tp4_sp")):
        for pieces in (2, 4):
            row = f"{sp}_pc{pieces}"
            ratio(f"ours {label} {pieces} pieces / whole tokens/s", row, sp, None)
            exposed(row, 5)
    ratio("ours TP=2 / torch FSDP tokens/s", "1558M_tp2", "1558M_fsdp", None)
    # GTP's bars: 1558M in bf16 and in fp8 (against the same bf16 FSDP baseline), Llama-3.2-3B in bf16
    for gtp, dp, fsdp, label in (("1558M_gtp2", "1558M_dp2", "1558M_fsdp", "ours GTP=2"),
                                 ("1558M_gtp2_fp8", "1558M_dp2_fp8", "1558M_fsdp", "ours GTP=2 fp8"),
                                 ("3B_gtp2", "3B_dp2", "3B_fsdp", "Llama 3B ours GTP=2")):
        ratio(f"{label} / ours DP=2 tokens/s", gtp, dp, 0.95)
        ratio(f"{label} / torch FSDP tokens/s", gtp, fsdp, 1.8)
        memory_ratio(f"{label} / DP=2 peak memory", gtp, dp, 0.75)
        exposed(gtp, 5)
    # GTP's weight gathers over the copy engines (--gtp-transport ce, the default rows) against NCCL's all-gather (the
    # _nccl rows): the faster is the default (no bar: the measurement decides)
    for ce, nccl, label in (("1558M_gtp2", "1558M_gtp2_nccl", "GTP=2"),
                            ("1558M_gtp2_fp8", "1558M_gtp2_nccl_fp8", "GTP=2 fp8"),
                            ("1558M_gtp4", "1558M_gtp4_nccl", "GTP=4")):
        ratio(f"{label} ce / nccl tokens/s", ce, nccl, None)
        exposed(nccl, 5)
    largest_model("big_gtp2", "big_dp2")
    largest_model("8B_gtp2", "8Bfit_dp2")
    # the 4-GPU lines, for information
    ratio("ours DP=4 / ours 1 GPU tokens/s", "124M_dp4", "124M_1gpu", None)
    for name, dp4, label in (("1558M_gtp4", "1558M_dp4", "ours GTP=4"),
                             ("1558M_dp2_gtp2", "1558M_dp4", "ours DP2xGTP2"),
                             ("3B_gtp4", "3B_dp4", "Llama 3B ours GTP=4")):
        ratio(f"{label} / ours DP=4 tokens/s", name, dp4, None)
        memory_ratio(f"{label} / DP=4 peak memory", name, dp4, None)
        exposed(name, 5)
    ratio("ours GTP=4 / torch FSDP 4 GPUs tokens/s", "1558M_gtp4", "1558M_fsdp4", None)
    ratio("Llama 8B ours GTP=4 / GTP=2 tokens/s", "8B_gtp4", "8B_gtp2", None)
    ratio("ours TP=4+SP / TP=4 tokens/s", "1558M_tp4_sp", "1558M_tp4", 0.98)
    exposed("1558M_tp4_sp", 5)
    ratio("ours TP=4+SP ring ce / nccl p2p tokens/s", "1558M_tp4_sp", "1558M_tp4_sp_p2p", None)
    exposed("1558M_tp4_sp_p2p", 5)
    exposed("8B_gtp4", 5)


if __name__ == "__main__":
    rows, shapes = table(int(sys.argv[1]), sys.argv[2:])
    ratios(rows, shapes)
