#!/usr/bin/env bash
# run_1gpu.sh: GPT-2 124M (d12) on one GPU, bf16, on the default data set (the Brown corpus, `make data`).
# 64Ki tokens per step = micro-batch 16 x 1024 x 4 accumulation micro-steps.
#   scripts/run_1gpu.sh                    a new run in runs/1gpu (refused if the folder holds one)
#   scripts/run_1gpu.sh --resume 1         continue it from its latest checkpoint
#   scripts/run_1gpu.sh --out-dir X ...    any option of ./train_gpt --help; later ones win
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./train_gpt ] || make train_gpt
ls data/brown/brown_train_*.bin >/dev/null 2>&1 || make data
export NCCL_NVLS_ENABLE=0 # harmless on one GPU; kept so every launch script runs NCCL the same way

./train_gpt \
    --model d12 --seq-len 1024 --precision bf16 \
    --batch-size 16 --total-batch-tokens 65536 \
    --steps 300 --lr 6e-4 --warmup-steps 30 --lr-schedule cosine --weight-decay 0.1 --grad-clip 1.0 \
    --val-every 50 --sample-every 100 --checkpoint-every 100 \
    --out-dir runs/1gpu \
    "$@"
