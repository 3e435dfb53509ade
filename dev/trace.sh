#!/usr/bin/env bash
# GPU timeline of training steps (dev/kernel_trace.c, CUPTI), summarized by dev/trace_summary.py: idle time, stream
# occupancy and time per kernel family in the last STEPS - 3 steps, as they run (power limit and overlap included).
#   dev/trace.sh MODEL BATCH [STEPS] [extra train_gpt options]      e.g. dev/trace.sh d48 8 12 --keep-gelu-layers 12
# TRACE_T: the sequence length (1024), TRACE_PRECISION: bf16 (default), fp8 or fp32. TRACE_NP: ranks (1); above 1 the
# run goes through mpirun, each rank writes its own CSV (trace_..._rankR.csv) and rank 0's is summarized, e.g.
#   TRACE_NP=2 dev/trace.sh d48 8 12 --keep-gelu-layers 12 --tp 2 --sequence-parallel 1
# A step is one micro-step of B x T tokens a data rank, whatever the layout (--total-batch-tokens 0).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1 B=$2 STEPS=${3:-12} T=${TRACE_T:-1024} PREC=${TRACE_PRECISION:-bf16} NP=${TRACE_NP:-1}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # NVLink multicast stays off (it can take a shared host down)
shift $(($# < 3 ? $# : 3))
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUT_DIR=${OUT:-/tmp}/trace
mkdir -p "$OUT_DIR"
make -j"$(nproc)" train_gpt >"$OUT_DIR/build.log" 2>&1 || { tail -20 "$OUT_DIR/build.log"; echo "build failed"; exit 1; }
lib="$OUT_DIR/libktrace.so"
gcc -O2 -shared -fPIC -I"$CUDA_HOME/include" dev/kernel_trace.c -o "$lib" \
    -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -L"$CUDA_HOME/extras/CUPTI/lib64" -lcupti
SHARD=$(ls data/brown/brown_train_*.bin | head -1)
tag="${MODEL}_b${B}_t${T}_$PREC"
csv="$OUT_DIR/trace_$tag.csv" launch=()
if [ "$NP" -gt 1 ]; then
    tag="${tag}_np$NP"
    csv="$OUT_DIR/trace_${tag}_rank%r.csv" # kernel_trace.c puts each rank's number for %r
    launch=(mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE -x KTRACE_OUT
            -x CUDA_INJECTION64_PATH -x LD_LIBRARY_PATH)
fi
rm -rf "$OUT_DIR/run_$MODEL"
export KTRACE_OUT="$csv" CUDA_INJECTION64_PATH="$lib" \
    LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
"${launch[@]}" ./train_gpt --model "$MODEL" --batch-size "$B" --seq-len "$T" --total-batch-tokens 0 \
    --steps "$STEPS" --val-every 0 --sample-every 0 --precision "$PREC" --train-data "$SHARD" \
    --out-dir "$OUT_DIR/run_$MODEL" --save 0 --warmup-steps 1 "$@" >"$OUT_DIR/trace_$tag.log" 2>&1 ||
    { echo "traced run failed:"; tail -5 "$OUT_DIR/trace_$tag.log"; exit 1; }
grep "^step" "$OUT_DIR/trace_$tag.log" | tail -3
python3 dev/trace_summary.py "${csv/\%r/0}" $((STEPS - 3))
