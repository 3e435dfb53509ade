#!/usr/bin/env bash
# run_1node.sh: GPT-2 124M (d12) data-parallel over the GPUs of one node with mpirun (NGPU, default 8).
# Every rank reads its stride of the same global batch (64Ki tokens per step, as in run_1gpu.sh: with 8 ranks one
# micro-step of 8 x 1024 each), so the loss curve is the one-GPU run's. --zero 1 shards AdamW's state over the ranks.
#   scripts/run_1node.sh                        8 GPUs, runs/1node
#   NGPU=4 scripts/run_1node.sh --zero 1        4 GPUs with ZeRO-1
#   scripts/run_1node.sh --resume 1             continue the run from its latest checkpoint
# Without mpirun (a build without MPI), the same job starts with torchrun-style variables, one process per GPU:
#   for r in $(seq 0 7); do RANK=$r WORLD_SIZE=8 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
#       ./train_gpt ... & done; wait
set -euo pipefail
cd "$(dirname "$0")/.."
NGPU=${NGPU:-8}
[ -x ./train_gpt ] || make train_gpt
ls data/brown/brown_train_*.bin >/dev/null 2>&1 || make data
export NCCL_NVLS_ENABLE=0 # NVLink multicast (NVLS) off: it can take down a shared host

mpirun --allow-run-as-root -np "$NGPU" --bind-to none -x NCCL_NVLS_ENABLE \
    ./train_gpt \
    --model d12 --seq-len 1024 --precision bf16 \
    --batch-size 8 --total-batch-tokens 65536 \
    --steps 300 --lr 6e-4 --warmup-steps 30 --lr-schedule cosine --weight-decay 0.1 --grad-clip 1.0 \
    --val-every 50 --sample-every 100 --checkpoint-every 100 \
    --out-dir runs/1node \
    "$@"
