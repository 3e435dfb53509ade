#!/usr/bin/env bash
# The GPU build's multiple-choice evaluation against the CPU build's on the same model file and eval file: a small
# GPT-2 trained briefly by ./train_gpt_cpu on the Brown text, then both builds score a synthetic eval file of that text
# (dev/eval_synth.py) with --lr 0 (one step that leaves the weights as they are), and dev/eval_compare.py compares their
# --eval-dump: every completion's loss sum within a tolerance a token, and the acc and acc_norm verdicts of every
# example that is not a near tie. Rows of ~70 positions in --seq-len 256: a forward holds 2 x --batch-size rows.
# Tolerances a token: fp32 1e-3 (the builds differ in summation order only: ~1e-6 relative on losses of ~5-10, over
# 12 layers); bf16 0.1 (activations and logits rounded to 8 significant bits: ~0.4% of logits of magnitude ~10 moves a
# token's loss by a few hundredths, a tenth at worst).
#   dev/eval_parity.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
TRAIN=$(ls data/brown/brown_train_*.bin | head -1)
VAL=$(ls data/brown/brown_val_*.bin | head -1)
MODEL=(--depth 2 --width 128 --heads 2 --seq-len 256 --batch-size 4 --sample-every 0 --val-every 0
       --train-data "$TRAIN")
python3 dev/eval_synth.py "$VAL" "$WORK/eval.bin" 64
./train_gpt_cpu "${MODEL[@]}" --total-batch-tokens 2048 --steps 30 --warmup-steps 3 --lr 3e-3 --precision fp32 \
    --out-dir "$WORK/train" > "$WORK/train.log"
score() { # BUILD PRECISION NAME: the trained model's evaluation, its dump in $WORK/NAME.jsonl
    "$1" "${MODEL[@]}" --init-from "$WORK/train/model_00000030.bin" --total-batch-tokens 1024 --steps 1 --lr 0 \
        --warmup-steps 0 --precision "$2" --eval-data "$WORK/eval.bin" --eval-every 1 --eval-dump "$WORK/$3.jsonl" \
        --save 0 --out-dir "$WORK/$3" | grep '^eval |'
}
score ./train_gpt_cpu fp32 cpu
score ./train_gpt fp32 gpu_fp32
score ./train_gpt bf16 gpu_bf16
status=0
python3 dev/eval_compare.py "$WORK/cpu.jsonl" "$WORK/gpu_fp32.jsonl" 1e-3 "eval fp32" || status=1
python3 dev/eval_compare.py "$WORK/cpu.jsonl" "$WORK/gpu_bf16.jsonl" 0.1 "eval bf16" || status=1
exit $status
