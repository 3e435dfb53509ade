#!/usr/bin/env bash
# Throughput benchmark: ours beside the PyTorch baseline (shared/bench/torch_gpt.py: compiled, bf16, flash
# attention), same GPU, same call. GPT-2 124M at batch 32 and 1558M at batch 8, T=1024, bf16.
# Prints ms/step (median after warm-up), tokens/s, MFU and peak memory, then ratios.
#   dev/bench.sh [TORCH_SCRIPT] [SHARD]
# Needs: a built ./train_gpt, python3 with torch, one training shard.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-.carry/torch_gpt.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin | head -1)}
STEPS=${BENCH_STEPS:-30}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT_DIR=${OUT:-/tmp}/bench
mkdir -p "$OUT_DIR"
peak_tflops=989 # dense bf16 peak of H100/H200 SXM (the MFU denominator)

results=()
bench_one() { # name layers channels batch model [train_gpt options]
    local name=$1 L=$2 C=$3 B=$4 model=$5
    shift 5
    local tlog="$OUT_DIR/torch_$name.log" olog="$OUT_DIR/ours_$name.log"
    python3 "$TORCH" --data "$SHARD" --layers "$L" --channels "$C" --batch "$B" --steps "$STEPS" >"$tlog" 2>&1 ||
        { echo "torch baseline failed for $name:"; tail -5 "$tlog"; }
    rm -rf "$OUT_DIR/run_$name"
    ./train_gpt --model "$model" --batch-size "$B" --seq-len 1024 --total-batch-tokens $((B * 1024)) \
        --steps "$STEPS" --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD" \
        --out-dir "$OUT_DIR/run_$name" --save 0 --warmup-steps 5 "$@" >"$olog" 2>&1 ||
        { echo "ours failed for $name:"; tail -5 "$olog"; }
    results+=("$name $tlog $olog $L $C")
}

# Each model as fast as fits in the baseline's memory: keeping a layer's GELU output costs 0.2 GB at 124M (all 12:
# 15.6 GB, under torch's 16.3) and 0.1 GB at 1558M (12 of 48: 45.6 GB, under torch's 46.0).
bench_one 124M 12 768 32 d12 --keep-gelu-layers 12
bench_one 1558M 48 1600 8 d48 --keep-gelu-layers 12

python3 - "$peak_tflops" "${results[@]}" <<'PY'
import re, statistics, sys
peak = float(sys.argv[1]) * 1e12
def flops_per_token(L, C, params, T=1024):
    return 6 * params + 12 * L * C * T
def params_of(L, C, V=50304, T=1024):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
rows = []
for r in sys.argv[2:]:
    name, tlog, olog, L, C = r.split(); L, C = int(L), int(C)
    fpt = flops_per_token(L, C, params_of(L, C))
    t = open(tlog).read(); o = open(olog).read()
    m = re.search(r"ms/step=([\d.]+) tok/s=(\d+).*peak_mem_GB=([\d.]+)", t)
    tms, ttok, tmem = (float(m.group(1)), float(m.group(2)), float(m.group(3))) if m else (float('nan'),) * 3
    steps = [float(x) for x in re.findall(r"^step\s+\d+/\d+ .*?\|\s*([\d.]+) ms", o, re.M)]
    oms = statistics.median(steps[5:]) if len(steps) > 6 else float('nan')
    B = 32 if name == "124M" else 8
    otok = B * 1024 / oms * 1e3
    mm = re.search(r"peak GPU memory[^\d]*([\d.]+) GB", o)
    omem = float(mm.group(1)) if mm else float('nan')
    rows.append((name, "torch", tms, ttok, ttok * fpt / peak * 100, tmem))
    rows.append((name, "ours", oms, otok, otok * fpt / peak * 100, omem))
    rows.append((name, "ratio", oms / tms, otok / ttok, float('nan'), omem / tmem))
print(f"{'model':6} {'who':6} {'ms/step':>9} {'tok/s':>10} {'MFU%':>6} {'peak GB':>8}")
for n, w, ms, tok, mfu, mem in rows:
    print(f"{n:6} {w:6} {ms:9.2f} {tok:10.0f} {mfu:6.1f} {mem:8.1f}" if w != "ratio" else
          f"{n:6} {w:6} {ms:9.3f} {tok:10.3f} {'':>6} {mem:8.3f}")
PY
