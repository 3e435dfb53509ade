#!/usr/bin/env python3
"""Two dev/kernel_trace.c CSVs (dev/trace.sh) of the same run with different GEMM choices: kernel time by family
(dev/trace_summary.py's) in each, then each GEMM launch of the last STEPS steps paired by (stream, ordinal within the
step), in-step time by (kernel A, kernel B) pair, largest differences first.
   dev/trace_gemm_compare.py A.csv B.csv STEPS"""
import collections, sys

from trace_summary import family, last_steps, read_trace

def load(path, steps):
    """Each of the last `steps` steps: its length, its GEMM launches by stream (time, name), its time by family."""
    rows = read_trace(path)
    bounds = last_steps(rows, steps)
    out = []
    for w0, w1 in zip(bounds, bounds[1:]):
        per = collections.defaultdict(list)
        tot = collections.Counter()
        for s, e, st, n in rows:
            if w0 <= s < w1:
                fam = family(n)
                tot[fam] += e - s
                if fam.startswith("GEMM"):
                    per[st].append((e - s, n))
        out.append((w1 - w0, per, tot))
    return out

A, B = load(sys.argv[1], int(sys.argv[3])), load(sys.argv[2], int(sys.argv[3]))
n = len(A)
print(f"step A {sum(a[0] for a in A) / n / 1e6:.2f} ms, B {sum(b[0] for b in B) / n / 1e6:.2f} ms")
for fam in sorted(set(A[0][2]) | set(B[0][2]), key=lambda f: -A[0][2][f])[:14]:
    ta = sum(a[2][fam] for a in A) / n / 1e6
    tb = sum(b[2][fam] for b in B) / n / 1e6
    print(f"  {fam:42s} A {ta:8.3f}  B {tb:8.3f}  B-A {tb - ta:+7.3f} ms a step")
pairs = collections.defaultdict(lambda: [0, 0, 0, set()])
for (_, pa, _), (_, pb, _) in zip(A, B):
    for st in pa:
        la, lb = pa[st], pb.get(st, [])
        if len(la) != len(lb):
            print(f"stream {st}: {len(la)} GEMMs in A, {len(lb)} in B; not paired")
            continue
        for pos, ((da, na), (db, nb)) in enumerate(zip(la, lb)):
            p = pairs[(st, na[:110], nb[:110])]
            p[0] += da; p[1] += db; p[2] += 1; p[3].add(pos)
print("GEMM pairs (stream, A kernel, B kernel): ms a step in A and B, launches a step")
for (st, na, nb), (ta, tb, c, ps) in sorted(pairs.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0])):
    print(f"  {st:>3} A {ta / n / 1e6:7.3f} B {tb / n / 1e6:7.3f} ({(tb - ta) / n / 1e6:+6.3f}) x{c / n:4.0f} "
          f"at {sorted(ps)[:4]}  A: {na}\n{'':36}B: {nb}")
