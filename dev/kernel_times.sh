#!/usr/bin/env bash
# Per-kernel GPU time of a few training steps (ncu, one metric, clocks left as they are), summed by kernel and
# divided by the steps, largest first. bf16, T=1024.
#   dev/kernel_times.sh MODEL BATCH [STEPS] [SHARD]      e.g. dev/kernel_times.sh d48 8
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1 B=$2 STEPS=${3:-2}
SHARD=${4:-$(ls data/brown/brown_train_*.bin | head -1)}
OUT_DIR=${OUT:-/tmp}/kernels
mkdir -p "$OUT_DIR"
csv="$OUT_DIR/ncu_${MODEL}_b$B.csv"
rm -rf "$OUT_DIR/run_$MODEL"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1) ||
    { echo "ncu not found"; exit 1; }
"$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --log-file "$csv" \
    ./train_gpt --model "$MODEL" --batch-size "$B" --seq-len 1024 --total-batch-tokens $((B * 1024)) --steps "$STEPS" \
    --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD" --out-dir "$OUT_DIR/run_$MODEL" \
    --checkpoint-every 0 --save 0 --warmup-steps 1 >"$OUT_DIR/ncu_${MODEL}_b$B.log" 2>&1 || { echo "ncu failed:"; tail -5 "$OUT_DIR/ncu_${MODEL}_b$B.log"; exit 1; }
python3 - "$csv" "$STEPS" "$MODEL" "$B" <<'PY'
import csv, re, sys, collections
path, steps = sys.argv[1], int(sys.argv[2])
tot, cnt = collections.Counter(), collections.Counter()
rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
hdr = rows[0]; ki, gi, vi, mi = (hdr.index(k) for k in ("Kernel Name", "Grid Size", "Metric Value", "Metric Name"))
for r in rows[1:]:
    if r[mi] != "gpu__time_duration.sum" or "init" in r[ki] or "convert" in r[ki]: continue
    name = re.sub(r"^void ", "", r[ki]); name = re.split(r"[(<]", name)[0][:48]
    key = f"{name} {r[gi]}"
    tot[key] += float(r[vi].replace(",", "")) / 1e6; cnt[key] += 1
total = sum(tot.values()) / steps
print(f"== {sys.argv[3]} B{sys.argv[4]}: {total:.2f} ms of kernels per step")
for k, v in tot.most_common(45):
    print(f"{v / steps:8.3f} ms {cnt[k] / steps:6.0f}x  {k}")
PY
