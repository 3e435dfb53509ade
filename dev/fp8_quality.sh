#!/usr/bin/env bash
# FP8 against bf16 in training quality, on the default data with the same seed.
#   dev/fp8_quality.sh [gpt2|llama]       (QUALITY_D12_STEPS, QUALITY_D48_STEPS; QUALITY_LLAMA_STEPS)
# gpt2 (default): GPT-2 124M (d12) for 300 steps at the default batch (65536 tokens a step), and GPT-2 1558M (d48)
# for 50 steps at batch 8 (8192 tokens a step); bf16, fp8 with delayed scaling, fp8 with current scaling, and (d12)
# fp8 delayed with the forward GEMMs' exact accumulation (--fp8-fast-accum 0; the default is fast). Prints the
# validation losses side by side and the final fp8 / bf16 ratios; curves in $OUT/fp8_quality.png.
# llama: a small Llama (llama-tiny's architecture, GPT-2's vocabulary, made 12 x 768 with 12 query and 4 key/value
# heads and Llama's MLP width, 2048: 153M parameters, untied) for 300 steps of 32768 tokens (batch 32, T 1024), in
# bf16 and in fp8 with delayed scaling. Prints both runs' validation losses, the final relative difference and PASS
# or FAIL against QUALITY_TOLERANCE (default 0.01: within 1%), exit status 1 on FAIL; curves in
# $OUT/fp8_quality_llama.png. Two runs of ~20 s of steps each on an H100 (the step ~60 ms, as GPT-2 124M's at the same
# tokens), with start-up and validation well under 2 minutes.
# Builds ./train_gpt first (a fresh device machine has none).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-gpt2}
OUT_DIR=${OUT:-/tmp}/quality
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0
case $MODE in gpt2 | llama) ;; *) echo "error: unknown mode '$MODE': pass gpt2 or llama"; exit 1 ;; esac
make -j"$(nproc)" train_gpt >"$OUT_DIR/build.log" 2>&1 ||
    { tail -20 "$OUT_DIR/build.log"; echo "error: building train_gpt failed (log above)"; exit 1; }
run() { # name options...
    local name=$1
    shift
    rm -rf "$OUT_DIR/$name"
    ./train_gpt --out-dir "$OUT_DIR/$name" --save 0 --sample-every 0 "$@" >"$OUT_DIR/$name.log" 2>&1 ||
        { echo "$name failed:"; tail -3 "$OUT_DIR/$name.log"; }
    echo "$name: $(grep -c '^step.*loss' "$OUT_DIR/$name.log") log lines, last: $(grep '^step' "$OUT_DIR/$name.log" | tail -1)"
}
d=$OUT_DIR
if [ "$MODE" = llama ]; then
    steps=${QUALITY_LLAMA_STEPS:-300}
    LLAMA=(--model llama-tiny --depth 12 --width 768 --heads 12 --kv-heads 4 --ffn 2048 --batch-size 32
           --total-batch-tokens 32768 --steps "$steps" --val-every 25)
    run llama_bf16 "${LLAMA[@]}" --precision bf16
    run llama_fp8_delayed "${LLAMA[@]}" --precision fp8 --fp8-recipe delayed
    python3 dev/plot_losses.py --tolerance "${QUALITY_TOLERANCE:-0.01}" "${OUT:-/tmp}/fp8_quality_llama.png" \
        "Llama 12 x 768, $steps steps:bf16=$d/llama_bf16,fp8 delayed=$d/llama_fp8_delayed"
    exit
fi
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
python3 dev/plot_losses.py "${OUT:-/tmp}/fp8_quality.png" \
    "GPT-2 124M, 300 steps:bf16=$d/d12_bf16,fp8 delayed=$d/d12_fp8_delayed,fp8 current=$d/d12_fp8_current,fp8 delayed exact-accum=$d/d12_fp8_delayed_exact" \
    "GPT-2 1558M, 50 steps, B=8:bf16=$d/d48_bf16,fp8 delayed=$d/d48_fp8_delayed,fp8 current=$d/d48_fp8_current"
