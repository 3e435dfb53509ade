#!/usr/bin/env bash
# Everything a GPU machine should run, in one call: build, the GPU tests (parity against the CPU build in fp32, bf16
# and fp8, kernels, resume, GTP on one rank, preemption), ./hf_model against transformers (dev/hf_check.py), the
# multiple-choice evaluation against transformers and its 10,042-example timing (dev/eval_check.py), the
# default run (./train_gpt with no options; its loss.svg is kept in $OUT), then the throughput benchmark beside
# PyTorch. Logs under $OUT (or /tmp/device_check); the last lines are the summary tables.
#   dev/device_check.sh [tests|hf|eval|default|bench|racecheck|all]   (default all; racecheck, dev/racecheck_diag.sh,
#   only when asked: compute-sanitizer's racecheck takes minutes)
# Needs data/brown (make data, or carried) and .carry/torch_gpt.py (the PyTorch baseline) for the benchmark; hf needs
# python3 with torch, transformers and numpy, eval torch and transformers.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
export NCCL_NVLS_ENABLE=0
LOGS=${OUT:-/tmp/device_check}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$LOGS/gpu.txt"
# Only what runs on the GPU machine: its image has no PCRE2 headers for ./tokenize (shards travel with the call).
make -j"$(nproc)" train_gpt train_gpt_cpu hf_model test/gpubin/test_gpu_parity test/gpubin/test_attention test/gpubin/test_fp8_kernels \
    > "$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; echo "build failed"; exit 1; }
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
    LOG_DIR="$LOGS/gpu_tests" test/run_gpu_tests.sh > "$LOGS/gpu_tests.log" 2>&1 || status=1
fi
if [ "$what" = hf ] || [ "$what" = all ]; then
    python3 dev/hf_check.py --part all --work "$LOGS/hf_check" > "$LOGS/hf_check.log" 2>&1 || status=1
fi
if [ "$what" = eval ] || [ "$what" = all ]; then
    python3 dev/eval_check.py --work "$LOGS/eval_check" > "$LOGS/eval_check.log" 2>&1 || status=1
fi
if [ "$what" = default ] || [ "$what" = all ]; then
    rm -rf runs/default
    ./train_gpt > "$LOGS/default_run.log" 2>&1 || status=1
    cp runs/default/loss.svg runs/default/metrics.jsonl "$LOGS/" 2>/dev/null || status=1
fi
if [ "$what" = racecheck ]; then
    OUT="$LOGS" dev/racecheck_diag.sh > "$LOGS/racecheck_diag.log" 2>&1 || status=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    test/gpubin/test_attention --bench > "$LOGS/attention_bench.log" 2>&1 || status=1
    dev/bench.sh > "$LOGS/bench.log" 2>&1 || status=1
fi
echo
[ -f "$LOGS/gpu_tests.log" ] && sed -n '/^test /,$p' "$LOGS/gpu_tests.log"
[ -f "$LOGS/attention_bench.log" ] && tail -8 "$LOGS/attention_bench.log"
[ -f "$LOGS/bench.log" ] && sed -n '/^model /,$p' "$LOGS/bench.log"
[ -f "$LOGS/hf_check.log" ] && grep -E '^(PASS|FAIL|hf_check)' "$LOGS/hf_check.log"
[ -f "$LOGS/eval_check.log" ] && grep -E '^(PASS|FAIL)' "$LOGS/eval_check.log"
[ -f "$LOGS/default_run.log" ] && grep -E '^step (1|60)/60|val loss' "$LOGS/default_run.log" | tail -8
[ -f "$LOGS/racecheck_diag.log" ] && tail -9 "$LOGS/racecheck_diag.log"
exit $status
