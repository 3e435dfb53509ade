#!/usr/bin/env python3
"""Summary of a dev/kernel_trace.c CSV over the last STEPS whole training steps (a step begins with the
encoder_forward kernel): step length, how long the GPU ran nothing (and the largest such gaps, with the kernels
around them), each stream's busy time, and the GPU time per kernel family, all per step.
   dev/trace_summary.py TRACE.csv [STEPS]"""
import collections, re, sys

def family(name):
    if name.startswith("memcpy"):  # "memcpy KIND BYTES" (dev/kernel_trace.c)
        return "copies " + (name.split()[1] if len(name.split()) > 1 else "")
    n = name.lower()
    if "fp8_cast_kernel" in n:
        return "FP8 cast" + (" of gelu" if "fp8gelu" in n else "") + (" from fp32" if "<float" in n else "")
    for key, fam in (("fp8_amax", "FP8 amax passes"), ("fp8_history", "FP8 history"),
                     ("e4m3", "GEMM FP8 (cuBLAS)"), ("e5m2", "GEMM FP8 (cuBLAS)"), ("gemm", "GEMM (cuBLAS)"), ("nvjet", "GEMM (cuBLAS)"), ("xmma", "GEMM (cuBLAS)"),
                     ("cutlass", "GEMM (cuBLAS)"), ("attention", None), ("adamw", "AdamW"),
                     ("layernorm_backward", "LayerNorm backward"), ("layernorm_forward", "LayerNorm forward"),
                     ("gelu", "GELU (recompute / fallback)"), ("sum_squares", "gradient norm partials"),
                     ("column_sum", "bias column sums"), ("add_partial_sums", "partial-sum reductions"),
                     ("classifier", "classifier"), ("encoder", "encoder"), ("wte_backward", "encoder backward"),
                     ("wpe_backward", "encoder backward"), ("nccl", "NCCL"), ("memcpy", "copies"),
                     ("memset", "memsets")):
        if key in n:
            if fam is None:  # attention: one family per kernel
                m = re.search(r"attention_(forward|backward_dkdv|backward_dq)", n)
                return "attention " + (m.group(1).replace("backward_", "") if m else "other")
            return fam
    return re.sub(r"^_Z\d+", "", name)[:40]

def read_trace(path):
    """The trace's rows (start ns, end ns, stream, name), in order of their start."""
    rows = []
    for line in open(path).read().splitlines():
        s, e, st, name = line.split(",", 3)
        rows.append((int(s), int(e), st, name))
    rows.sort()
    return rows

def last_steps(rows, steps):
    """The starts of the trace's last `steps` whole steps and the end of the last one (where the next begins: each step
    begins with its encoder_forward kernel); exits where the trace holds fewer."""
    starts = [r[0] for r in rows if "encoder_forward" in r[3]]
    if len(starts) < steps + 1:
        sys.exit(f"only {len(starts)} step starts (encoder_forward) in the trace; run more steps")
    return starts[-steps - 1:]

def main():
    rows = read_trace(sys.argv[1])
    steps_wanted = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    bounds = last_steps(rows, steps_wanted)
    w0, w1 = bounds[0], bounds[-1]
    win = [(max(s, w0), min(e, w1), st, n) for s, e, st, n in rows if e > w0 and s < w1]
    span = w1 - w0
    per = lambda ns: ns / steps_wanted / 1e6  # ms per step

    def union(intervals):
        busy, gaps, cur_s, cur_e, last = 0, [], None, None, ""
        for s, e, st, n in intervals:
            if cur_e is None:
                cur_s, cur_e, last = s, e, n
            elif s > cur_e:
                busy += cur_e - cur_s
                gaps.append((s - cur_e, last, n))
                cur_s, cur_e = s, e
            if e >= cur_e:
                cur_e, last = e, n
        if cur_e is not None:
            busy += cur_e - cur_s
        return busy, gaps

    busy, gaps = union(win)
    print(f"{steps_wanted} steps, {per(span):.2f} ms a step: GPU busy {per(busy):.2f} ms, "
          f"idle {per(span - busy):.2f} ms ({100 * (span - busy) / span:.1f}%) "
          f"in {len(gaps) / steps_wanted:.0f} gaps a step")
    hist = collections.Counter()
    for g, _, _ in gaps:
        hist["<2us" if g < 2e3 else "2-10us" if g < 1e4 else "10-100us" if g < 1e5 else ">=100us"] += g
    print("  idle by gap length (ms a step): " + ", ".join(f"{k} {per(v):.2f}" for k, v in sorted(hist.items())))
    for g, a, b in sorted(gaps, reverse=True)[:8]:
        print(f"  {g / 1e3:8.1f} us idle after {family(a)} before {family(b)}")
    by_stream = collections.defaultdict(list)
    for r in win:
        by_stream[r[2]].append(r)
    for st, rs in sorted(by_stream.items(), key=lambda kv: -sum(r[1] - r[0] for r in kv[1])):
        b, _ = union(rs)
        print(f"stream {st:>4}: busy {per(b):7.2f} ms a step, {len(rs) / steps_wanted:5.0f} launches")
    # the busiest stream (the compute stream): where it stood still, by the kernel it went on with (what it waited for
    # is usually another stream's work ahead of that kernel: AdamW's update, a recompute, a collective)
    compute = max(by_stream, key=lambda k: sum(r[1] - r[0] for r in by_stream[k]))
    rs = sorted(by_stream[compute])
    waits = collections.Counter()
    for (s0, e0, _, n0), (s1, e1, _, n1) in zip(rs, rs[1:]):
        if s1 - e0 > 5000:
            waits[(family(n0), family(n1))] += s1 - e0
    print(f"stream {compute} stood still (gaps over 5 us) {per(sum(waits.values())):.2f} ms a step, between:")
    for (a, b), t in waits.most_common(10):
        print(f"  {per(t):8.2f} ms  {a} -> {b}")
    fam = collections.Counter()
    cnt = collections.Counter()
    for s, e, st, n in win:
        fam[family(n)] += e - s
        cnt[family(n)] += 1
    print(f"kernel time per step by family (sum {per(sum(fam.values())):.2f} ms; streams overlap):")
    for f, t in fam.most_common():
        print(f"  {per(t):8.2f} ms {cnt[f] / steps_wanted:6.0f}x  {f}")
    # copies by kind: their bytes and the bandwidth while one ran (PtoP: between GPUs, the SP ring's transfers)
    copies = collections.defaultdict(lambda: [0, 0, 0])
    for s_, e, st, n in win:
        parts = n.split()
        if parts[0] == "memcpy" and len(parts) == 3:
            c = copies[parts[1]]
            c[0] += 1
            c[1] += int(parts[2])
            c[2] += e - s_
    for kind, (count, nbytes, t) in sorted(copies.items()):
        print(f"copies {kind}: {count / steps_wanted:.0f} a step, {nbytes / steps_wanted / 1e6:.1f} MB a step, "
              f"{per(t):.2f} ms a step, {nbytes / t if t else 0:.1f} GB/s while copying")
    names = collections.Counter()
    for s_, e, st, n in win:
        names[n[:90]] += e - s_
    print("the 12 longest kernels by name (ms a step):")
    for n, t in names.most_common(12):
        print(f"  {per(t):8.2f} ms  {n}")

if __name__ == "__main__":
    main()
