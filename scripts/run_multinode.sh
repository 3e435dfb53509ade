#!/usr/bin/env bash
# run_multinode.sh: GPT-2 350M (d24) data-parallel over several nodes with mpirun and a hostfile.
#   HOSTFILE=hosts.txt GPUS_PER_NODE=8 scripts/run_multinode.sh [--zero 1] [other options]
# hosts.txt, one line per node: "node1 slots=8". Every node needs the same build and data at the same path, and
# --out-dir must be on a file system all nodes share (rank 0 writes checkpoints; every rank reads them on resume).
# NCCL picks the network itself; set NCCL_SOCKET_IFNAME / NCCL_IB_HCA here if your nodes need a particular one.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:?set HOSTFILE to an Open MPI hostfile (one "host slots=N" line per node)}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NODES=$(grep -cv '^\s*\(#\|$\)' "$HOSTFILE")
NP=$((NODES * GPUS_PER_NODE))
export NCCL_NVLS_ENABLE=0 # NVLink multicast (NVLS) off: it can take down a shared host

mpirun --allow-run-as-root -np "$NP" --hostfile "$HOSTFILE" --map-by ppr:"$GPUS_PER_NODE":node --bind-to none \
    -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH \
    ./train_gpt \
    --model d24 --seq-len 1024 --precision bf16 \
    --batch-size 8 --total-batch-tokens 524288 \
    --steps 2000 --lr 3e-4 --warmup-steps 200 --lr-schedule cosine --weight-decay 0.1 --grad-clip 1.0 \
    --val-every 100 --sample-every 500 --checkpoint-every 250 \
    --out-dir runs/multinode \
    "$@"
