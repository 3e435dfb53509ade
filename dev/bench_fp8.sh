#!/usr/bin/env bash
# The FP8 benchmark: ours in fp8 (each scaling recipe) beside ours in bf16 and beside the PyTorch float8 baseline
# (dev/torch_fp8.py: the shared torch_gpt.py with its four block linears in float8 through torch._scaled_mm), same GPU,
# same call. GPT-2 124M at batch 32 and 1558M at batch 8, T=1024. Prints ms/step (median after warm-up), tokens/s, MFU
# and peak memory (bench_table.py), then the ratios FP8 was measured against.
#   dev/bench_fp8.sh [TORCH_SCRIPT] [SHARD]        BENCH_STEPS (30), BENCH_SIZES ("124M 1558M"), BENCH_TORCH (1)
# Needs: a built ./train_gpt, python3 with torch, one training shard.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-.carry/torch_gpt.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin | head -1)}
STEPS=${BENCH_STEPS:-30}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT_DIR=${OUT:-/tmp}/bench_fp8
mkdir -p "$OUT_DIR"

args=()
ours() { # size who precision layers channels batch model [train_gpt options]
    local size=$1 who=$2 prec=$3 L=$4 C=$5 B=$6 model=$7 log="$OUT_DIR/${1}_$2.log"
    shift 7
    rm -rf "$OUT_DIR/run"
    ./train_gpt --model "$model" --batch-size "$B" --seq-len 1024 --total-batch-tokens $((B * 1024)) \
        --steps "$STEPS" --val-every 0 --sample-every 0 --precision "$prec" --train-data "$SHARD" \
        --out-dir "$OUT_DIR/run" --save 0 --warmup-steps 5 "$@" >"$log" 2>&1 || { echo "ours $size $who failed:"; tail -5 "$log"; }
    args+=("$size:$who:ours:$prec:$log:$L:$C:$B")
}
bench_size() { # size layers channels batch model keep_gelu_bf16 keep_gelu_fp8
    local size=$1 L=$2 C=$3 B=$4 model=$5 keep16=$6 keep8=$7 log="$OUT_DIR/${1}_torch_fp8.log"
    if [ "${BENCH_TORCH:-1}" = 1 ]; then
        python3 dev/torch_fp8.py "$TORCH" --data "$SHARD" --layers "$L" --channels "$C" --batch "$B" --steps "$STEPS" \
            >"$log" 2>&1 || { echo "torch float8 $size failed:"; tail -5 "$log"; }
        args+=("$size:torch_fp8:torch:fp8:$log:$L:$C:$B" --ratio "$size:fp8_delayed:torch_fp8"
               --ratio "$size:fp8_current:torch_fp8")
    fi
    ours "$size" bf16 bf16 "$L" "$C" "$B" "$model" --keep-gelu-layers "$keep16"
    ours "$size" fp8_delayed fp8 "$L" "$C" "$B" "$model" --keep-gelu-layers "$keep8" --fp8-recipe delayed
    ours "$size" fp8_current fp8 "$L" "$C" "$B" "$model" --keep-gelu-layers "$keep8" --fp8-recipe current
    args+=(--ratio "$size:fp8_delayed:bf16" --ratio "$size:fp8_current:bf16")
}
# bf16 as dev/bench.sh runs it (its fastest within PyTorch's memory); fp8 keeps as many layers' FP8 GELU output as fits
# in bf16's memory
for size in ${BENCH_SIZES:-124M 1558M}; do
    case $size in
        124M) bench_size 124M 12 768 32 d12 12 12 ;;
        1558M) bench_size 1558M 48 1600 8 d48 12 ${BENCH_KEEP_FP8:-12} ;;
    esac
done
python3 dev/bench_table.py "${args[@]}"
