#!/usr/bin/env python3
"""eval_compare.py: two --eval-dump files of the same eval file (llmc/eval.h: a JSON line per example, its
completions' loss sums and token counts) against each other, as PASS/FAIL lines.

  dev/eval_compare.py REF RUN TOL_PER_TOKEN NAME

- sums: every completion's |run - ref| <= TOL_PER_TOKEN x its tokens (a sum of that many token losses, each off by
  at most the tolerance); the worst difference is printed in the line either way;
- verdicts: acc (lowest sum) and acc_norm (lowest mean) of every example agree, except where the reference's two best
  completions are closer than the two runs' tolerance could move them (a near tie, which rounding may turn either
  way): those are counted, not failed.
Exit status 1 on any FAIL. dev/eval_check.py imports compare() for the PyTorch comparison.
"""
import json
import sys


def read_dump(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def verdict(sums, tokens, norm):
    scores = [s / n for s, n in zip(sums, tokens)] if norm else list(sums)
    return min(range(len(scores)), key=lambda c: (scores[c], c))  # ties to the first, as eval_score


def margin(sums, tokens, norm, tol):
    """Whether the best and second best scores are farther apart than tol can move them."""
    scores = [(s / n, tol) if norm else (s, tol * n) for s, n in zip(sums, tokens)]
    if len(scores) < 2:
        return True
    order = sorted(range(len(scores)), key=lambda c: scores[c][0])
    a, b = scores[order[0]], scores[order[1]]
    return b[0] - a[0] > a[1] + b[1]


def compare(ref, run, tol, name):
    """ref, run: lists of dump records (dicts). Prints PASS/FAIL lines; returns the number of failures."""
    failures = 0

    def check(ok, what, detail):
        nonlocal failures
        print(f"{'PASS' if ok else 'FAIL'} {name} {what}: {detail}")
        failures += 0 if ok else 1

    same_shape = len(ref) == len(run) and all(
        a["example"] == b["example"] and a["label"] == b["label"] and a["tokens"] == b["tokens"]
        for a, b in zip(ref, run))
    check(same_shape, "same examples", f"{len(ref)} and {len(run)} examples")
    if not same_shape:
        return failures
    diffs = [(abs(x - y) / n, abs(x - y), a["example"], c, n)
             for a, b in zip(ref, run) for c, (x, y, n) in enumerate(zip(a["loss_sums"], b["loss_sums"], a["tokens"]))]
    per_token, worst, example, c, n = max(diffs)
    beyond = sum(d[0] > tol for d in diffs)
    check(beyond == 0, "loss sums",
          f"worst {per_token:.3g} a token (|difference| {worst:.3g}: example {example} completion {c}, {n} tokens; "
          f"tolerance {tol:g} a token), {beyond} beyond")
    for norm, label in ((False, "acc"), (True, "acc_norm")):
        right = [0, 0]
        disagree = near = 0
        for a, b in zip(ref, run):
            va, vb = verdict(a["loss_sums"], a["tokens"], norm), verdict(b["loss_sums"], b["tokens"], norm)
            right[0] += va == a["label"]
            right[1] += vb == b["label"]
            if va != vb:
                if margin(a["loss_sums"], a["tokens"], norm, tol):
                    disagree += 1
                else:
                    near += 1
        n = len(ref)
        check(disagree == 0, label,
              f"ref {right[0] / n:.4f} run {right[1] / n:.4f} ({n} examples; {near} near ties differ, "
              f"{disagree} others)")
    return failures


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: dev/eval_compare.py REF_DUMP RUN_DUMP TOL_PER_TOKEN NAME")
    sys.exit(1 if compare(read_dump(sys.argv[1]), read_dump(sys.argv[2]), float(sys.argv[3]), sys.argv[4]) else 0)


if __name__ == "__main__":
    main()
