#!/usr/bin/env python3
"""Loss curves of several runs side by side, from their log.txt files (llm.c's "s:STEP trl:LOSS" and "s:STEP tel:LOSS"
lines): a table of the validation losses at every evaluation, one column a run, then a PNG with one panel a group of
runs (training loss faint, validation loss bold).
    plot_losses.py OUT.png TITLE:LABEL=DIR[,LABEL=DIR...] [TITLE:LABEL=DIR,...]...
"""
import re
import sys


def read_log(path):
    train, val = {}, {}
    for line in open(path):
        m = re.match(r"s:(\d+) (trl|tel):([-\d.eE+naif]+)", line)
        if m:
            (train if m.group(2) == "trl" else val)[int(m.group(1))] = float(m.group(3))
    return train, val


groups = []
for arg in sys.argv[2:]:
    title, runs = arg.split(":", 1)
    groups.append((title, [(label, read_log(d + "/log.txt")) for label, d in (r.split("=", 1) for r in runs.split(","))]))

for title, runs in groups:
    print(f"{title}: validation loss")
    steps = sorted(set().union(*(set(v) for _, (_, v) in runs)))
    print(f"{'step':>6} " + " ".join(f"{label:>16}" for label, _ in runs))
    for s in steps:
        print(f"{s:>6} " + " ".join(f"{v.get(s, float('nan')):16.4f}" for _, (_, v) in runs))
    base = runs[0][1][1]
    last = max(base) if base else None
    for label, (_, v) in runs[1:]:
        if last in v:
            print(f"  final {label} / {runs[0][0]}: {v[last]:.4f} / {base[last]:.4f} = {v[last] / base[last]:.4f} "
                  f"({100 * (v[last] / base[last] - 1):+.2f}%)")

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), 5), squeeze=False)
for ax, (title, runs) in zip(axes[0], groups):
    for i, (label, (train, val)) in enumerate(runs):
        color = f"C{i}"
        ax.plot(sorted(train), [train[s] for s in sorted(train)], color=color, alpha=0.3, lw=1)
        ax.plot(sorted(val), [val[s] for s in sorted(val)], color=color, lw=2, marker="o", ms=3, label=f"{label} (val)")
    ax.set_title(title)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (train faint, validation bold)")
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=110)
print(f"wrote {sys.argv[1]}")
