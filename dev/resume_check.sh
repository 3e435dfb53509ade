#!/usr/bin/env bash
# Resume bit-exactness of the GPU build: 4 steps straight, then the same run stopped at its step-2 checkpoint and
# resumed; the step-4 model and state files (in fp8 with the amax history) must be identical. Two micro-steps per
# step, a d12 (or the model MODEL_OPTS names), in PRECISION (default bf16).
#   [MODEL_OPTS="--model llama-tiny ..."] dev/resume_check.sh [PRECISION] [SHARD]
set -euo pipefail
cd "$(dirname "$0")/.."
PRECISION=${1:-bf16}
SHARD=${2:-$(ls data/brown/brown_train_*.bin | head -1)}
MODEL_OPTS=${MODEL_OPTS:---model d12}
DIR=$(mktemp -d)
# shellcheck disable=SC2086
run() { ./train_gpt $MODEL_OPTS --batch-size 4 --seq-len 256 --total-batch-tokens 2048 --steps 4 --checkpoint-every 2 \
    --warmup-steps 1 --val-every 0 --sample-every 0 --precision "$PRECISION" --train-data "$SHARD" --out-dir "$@" \
    >/dev/null; }
run "$DIR/a"
mkdir -p "$DIR/b"
cp "$DIR/a/model_00000002.bin" "$DIR/a/state_00000002.bin" "$DIR/a/gemm_algos.txt" "$DIR/a/log.txt" "$DIR/b/"
run "$DIR/b" --resume 1
if cmp -s "$DIR/a/model_00000004.bin" "$DIR/b/model_00000004.bin" &&
    cmp -s "$DIR/a/state_00000004.bin" "$DIR/b/state_00000004.bin"; then
    echo "resume: bit-exact ($PRECISION)"
else
    echo "resume: FAIL (step-4 model or state files differ, $PRECISION)"; exit 1
fi
