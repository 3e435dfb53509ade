#!/usr/bin/env bash
# FP8 against bf16 in training quality, on the default data with the same seed: GPT-2 124M (d12) for 300 steps at
# the default batch (65536 tokens a step), and GPT-2 1558M (d48) for 50 steps at batch 8 (8192 tokens a step); bf16,
# fp8 with delayed scaling, fp8 with current scaling, and (d12) fp8 delayed with the forward GEMMs' exact accumulation
# (--fp8-fast-accum 0; the default is fast).
# Prints the validation losses side by side, the final fp8 / bf16 ratios, and writes the curves to $OUT/fp8_quality.png.
#   dev/fp8_quality.sh            (QUALITY_D12_STEPS, QUALITY_D48_STEPS)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-/tmp}/quality
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0
run() { # name options...
    local name=$1
    shift
    rm -rf "$OUT_DIR/$name"
    ./train_gpt --out-dir "$OUT_DIR/$name" --save 0 --sample-every 0 "$@" >"$OUT_DIR/$name.log" 2>&1 ||
        { echo "$name failed:"; tail -3 "$OUT_DIR/$name.log"; }
    echo "$name: $(grep -c '^step.*loss' "$OUT_DIR/$name.log") log lines, last: $(grep '^step' "$OUT_DIR/$name.log" | tail -1)"
}
D12=(--model d12 --steps "${QUALITY_D12_STEPS:-300}" --val-every 25 --keep-gelu-layers 12)
D48=(--model d48 --batch-size 8 --total-batch-tokens 8192 --steps "${QUALITY_D48_STEPS:-50}" --val-every 10
     --val-batches 10 --keep-gelu-layers 12)
run d12_bf16 "${D12[@]}" --precision bf16
run d12_fp8_delayed "${D12[@]}" --precision fp8 --fp8-recipe delayed
run d12_fp8_current "${D12[@]}" --precision fp8 --fp8-recipe current
run d12_fp8_delayed_exact "${D12[@]}" --precision fp8 --fp8-recipe delayed --fp8-fast-accum 0
run d48_bf16 "${D48[@]}" --precision bf16
run d48_fp8_delayed "${D48[@]}" --precision fp8 --fp8-recipe delayed
run d48_fp8_current "${D48[@]}" --precision fp8 --fp8-recipe current
d=$OUT_DIR
python3 dev/plot_losses.py "${OUT:-/tmp}/fp8_quality.png" \
    "GPT-2 124M, 300 steps:bf16=$d/d12_bf16,fp8 delayed=$d/d12_fp8_delayed,fp8 current=$d/d12_fp8_current,fp8 delayed exact-accum=$d/d12_fp8_delayed_exact" \
    "GPT-2 1558M, 50 steps, B=8:bf16=$d/d48_bf16,fp8 delayed=$d/d48_fp8_delayed,fp8 current=$d/d48_fp8_current"
