#!/usr/bin/env bash
# train_gpt2_124m.sh: GPT-2 124M (d12) on one GPU, on the default data set (the Brown corpus, `make data`).
# Builds what is missing, then trains in bf16: micro-batch 32 x 1024 tokens, 64Ki tokens per step (2
# accumulation micro-steps), 300 steps, checkpoints every 100 steps in runs/gpt2_124m.
#   scripts/train_gpt2_124m.sh                  a new run (refused if runs/gpt2_124m already holds one)
#   scripts/train_gpt2_124m.sh --resume 1       continue it from its latest checkpoint
#   scripts/train_gpt2_124m.sh --out-dir X ...  any option of ./train_gpt --help; later ones win
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./train_gpt ] || make train_gpt
ls data/brown/brown_train_*.bin >/dev/null 2>&1 || make data

./train_gpt \
    --model d12 --seq-len 1024 --precision bf16 \
    --batch-size 32 --total-batch-tokens 65536 \
    --steps 300 --lr 6e-4 --warmup-steps 30 --lr-schedule cosine --final-lr-frac 0.1 --weight-decay 0.1 \
    --val-every 50 --val-batches 20 --sample-every 100 --checkpoint-every 100 \
    --out-dir runs/gpt2_124m \
    "$@"
