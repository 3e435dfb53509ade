#!/usr/bin/env python3
"""Loss curves of several runs side by side, from their log.txt files (llm.c's "s:STEP trl:LOSS" and "s:STEP tel:LOSS"
lines): a table of the validation losses at every evaluation, one column a run, each run's final validation loss
against the group's first run, then a PNG with one panel a group of runs (training loss faint, validation loss bold;
none where matplotlib is not installed: the table is the result).
    plot_losses.py [--tolerance FRACTION] OUT.png TITLE:LABEL=DIR[,LABEL=DIR...] [TITLE:LABEL=DIR,...]...
--tolerance: each final ratio is judged, PASS where the relative difference is within FRACTION, else FAIL (and the
exit status is 1); a run without the first run's last evaluation FAILs too.
"""
import re
import sys


def read_log(path):  # a run that wrote no log (it failed to start) has no losses
    train, val = {}, {}
    try:
        lines = open(path).readlines()
    except FileNotFoundError:
        print(f"no {path}: that run has no losses")
        lines = []
    for line in lines:
        m = re.match(r"s:(\d+) (trl|tel):([-\d.eE+naif]+)", line)
        if m:
            (train if m.group(2) == "trl" else val)[int(m.group(1))] = float(m.group(3))
    return train, val


args = sys.argv[1:]
tolerance = None
if args[:1] == ["--tolerance"]:
    tolerance = float(args[1])
    args = args[2:]
out_png = args[0]
groups = []
for arg in args[1:]:
    title, runs = arg.split(":", 1)
    groups.append((title, [(label, read_log(d + "/log.txt")) for label, d in (r.split("=", 1) for r in runs.split(","))]))

failed = False
for title, runs in groups:
    print(f"{title}: validation loss")
    steps = sorted(set().union(*(set(v) for _, (_, v) in runs)))
    print(f"{'step':>6} " + " ".join(f"{label:>16}" for label, _ in runs))
    for s in steps:
        print(f"{s:>6} " + " ".join(f"{v.get(s, float('nan')):16.4f}" for _, (_, v) in runs))
    base = runs[0][1][1]
    last = max(base) if base else None
    for label, (_, v) in runs[1:]:
        if last is None:
            failed |= tolerance is not None
            print(f"{'FAIL' if tolerance is not None else ' '} final {label} / {runs[0][0]}: {runs[0][0]} has no "
                  "validation loss")
        elif last in v:
            rel = v[last] / base[last] - 1
            line = (f"final {label} / {runs[0][0]}: {v[last]:.4f} / {base[last]:.4f} = {v[last] / base[last]:.4f} "
                    f"({100 * rel:+.2f}%)")
            if tolerance is None:
                print("  " + line)
            else:
                within = abs(rel) <= tolerance
                failed |= not within
                print(f"{'PASS' if within else 'FAIL'} {line}: {'within' if within else 'more than'} "
                      f"{100 * tolerance:g}%")
        elif tolerance is not None:
            failed = True
            print(f"FAIL final {label} / {runs[0][0]}: {label} has no validation loss at step {last}")

try:
    import matplotlib
except ImportError:
    print(f"matplotlib is not installed: no {out_png} (the table above is the result)")
    sys.exit(1 if failed else 0)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (only where matplotlib is installed)

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
fig.savefig(out_png, dpi=110)
print(f"wrote {out_png}")
sys.exit(1 if failed else 0)
