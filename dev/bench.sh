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
    results+=("$name $tlog $olog $L $C $B")
}

# Each model as fast as fits in the baseline's memory: keeping a layer's GELU output costs 0.2 GB at 124M (all 12:
# 15.6 GB, under torch's 16.3) and 0.1 GB at 1558M (12 of 48: 45.6 GB, under torch's 46.0).
bench_one 124M 12 768 32 d12 --keep-gelu-layers 12
bench_one 1558M 48 1600 8 d48 --keep-gelu-layers 12

args=()
for r in "${results[@]}"; do
    read -r name tlog olog L C B <<<"$r"
    args+=("$name:torch:torch:bf16:$tlog:$L:$C:$B" "$name:ours:ours:bf16:$olog:$L:$C:$B" --ratio "$name:ours:torch")
done
python3 dev/bench_table.py "${args[@]}"
