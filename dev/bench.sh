#!/usr/bin/env bash
# Throughput benchmark: ours beside the PyTorch baseline (shared/bench/torch_gpt.py: compiled, bf16, flash
# attention), same GPU, same call. T=1024, bf16. Prints ms/step (median after warm-up), tokens/s, MFU and peak
# memory, then ratios.
#   dev/bench.sh [TORCH_SCRIPT] [SHARD]
#   BENCH_WHAT=sizes (default): GPT-2 124M B32, 350M B16, 774M B8, 1558M B8, one micro-batch a step.
#   BENCH_WHAT=accum: 124M and 1558M accumulating to 0.5M tokens a step (AdamW amortised); the baseline is
#   torch_gpt.py's own model and optimizer with an accumulation loop (dev/torch_accum.py).
#   BENCH_SIZES="124M 1558M" picks sizes (all four accumulating take ~11 min); BENCH_STEPS (30;
#   accum 6) the steps of every run.
# Ours trains as the baseline does, without clipping the gradient norm (torch_gpt.py clips nothing): row "ours", with
# --grad-clip 0, whose update starts in the backward (--update-in-backward). Row "ours_clip" is our default, clipping
# at 1.0 (the norm first, then the update), for what clipping costs; BENCH_CLIPPED=0 leaves it out.
# Needs: python3 with torch, one training shard. Builds ./train_gpt first (a fresh device machine has none).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-.carry/torch_gpt.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin | head -1)}
WHAT=${BENCH_WHAT:-sizes}
if [ "$WHAT" = accum ]; then SIZES=${BENCH_SIZES:-124M 1558M}; else SIZES=${BENCH_SIZES:-124M 350M 774M 1558M}; fi
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT_DIR=${OUT:-/tmp}/bench
mkdir -p "$OUT_DIR"
make -j"$(nproc)" train_gpt >"$OUT_DIR/build.log" 2>&1 || { tail -20 "$OUT_DIR/build.log"; echo "build failed"; exit 1; }
ACCUM_TOKENS=524288
if [ "$WHAT" = accum ]; then STEPS=${BENCH_STEPS:-6} SKIP=2; else STEPS=${BENCH_STEPS:-30} SKIP=5; fi

args=()
bench_one() { # name layers channels batch model [train_gpt options]
    local name=$1 L=$2 C=$3 B=$4 model=$5
    shift 5
    case " $SIZES " in *" $name "*) ;; *) return 0 ;; esac
    local tlog="$OUT_DIR/torch_${name}_$WHAT.log" olog rows=$B tokens=$((B * 1024))
    local torch_cmd=("$TORCH")
    if [ "$WHAT" = accum ]; then
        tokens=$ACCUM_TOKENS rows=$((ACCUM_TOKENS / 1024))
        torch_cmd=(dev/torch_accum.py "$TORCH" --accum $((rows / B)) --skip "$SKIP")
    fi
    python3 "${torch_cmd[@]}" --data "$SHARD" --layers "$L" --channels "$C" --batch "$B" --steps "$STEPS" >"$tlog" 2>&1 ||
        { echo "torch baseline failed for $name:"; tail -5 "$tlog"; }
    args+=("$name:torch:torch:bf16:$tlog:$L:$C:$rows:$SKIP")
    local who clip
    for who in ours ours_clip; do
        if [ "$who" = ours ]; then clip=0; else clip=1.0; [ "${BENCH_CLIPPED:-1}" = 1 ] || continue; fi
        olog="$OUT_DIR/${who}_${name}_$WHAT.log"
        rm -rf "$OUT_DIR/run_$name"
        ./train_gpt --model "$model" --batch-size "$B" --seq-len 1024 --total-batch-tokens "$tokens" \
            --steps "$STEPS" --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD" \
            --out-dir "$OUT_DIR/run_$name" --save 0 --warmup-steps 5 --grad-clip "$clip" "$@" >"$olog" 2>&1 ||
            { echo "$who failed for $name:"; tail -5 "$olog"; }
        args+=("$name:$who:ours:bf16:$olog:$L:$C:$rows:$SKIP" --ratio "$name:$who:torch")
    done
}

# Each model as fast as fits in the baseline's memory: keeping a layer's GELU output (B x T x 4C bf16) costs 0.2 GB
# at 124M B32 (all 12: 15.6 GB, under torch's 16.3), 0.13 GB at 350M B16 (all 24: 21.2, torch 21.4), 0.08 GB at
# 774M B8 (all 36: 27.1 GB, over torch's 25.6; 16: ~25.4) and 0.1 GB at 1558M B8 (12 of 48: 45.6 GB, torch 46.0).
bench_one 124M 12 768 32 d12 --keep-gelu-layers 12
bench_one 350M 24 1024 16 d24 --keep-gelu-layers 24
bench_one 774M 36 1280 8 d36 --keep-gelu-layers 16
bench_one 1558M 48 1600 8 d48 --keep-gelu-layers 12
python3 dev/bench_table.py "${args[@]}"
