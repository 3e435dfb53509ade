#!/usr/bin/env bash
# Sequence parallelism's ring collectives on the GPU machine, in as few calls as possible: the one-GPU simulated ring
# (test/gpubin/test_ring_gemm, plain and under memcheck), then on 2 GPUs the SP parity rows with the ring and with
# --sp-overlap 0, the resume/update twins and the fault rows, and the 1558M TP=2 / TP=2+SP benchmark (bf16, fp8).
# Each part is bounded so that `all` fits one 10-minute call on 2 GPUs but the fp8 benchmark (run it alone next).
# trace (not in all): rank 0's GPU timeline of 1558M TP=2+SP over the ring (dev/trace.sh: where the compute stream
# stands still, and the ring's peer copies with their bandwidth).
#   dev/sp_check.sh [ring|parity|twins|bench|bench_fp8|trace|all]        logs under $OUT (or /tmp/sp_check)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
what=${1:-all}
export NCCL_NVLS_ENABLE=0
LOGS=${OUT:-/tmp/sp_check}
mkdir -p "$LOGS"
T0=$(date +%s)
make -j"$(nproc)" -s train_gpt test/gpubin/test_ring_gemm test/bin/compare_runs > "$LOGS/build.log" 2>&1 ||
    { tail -20 "$LOGS/build.log"; echo "build failed"; exit 1; }
echo "built in $(($(date +%s) - T0)) s"
status=0
step() { # NAME LIMIT_S COMMAND...: run it bounded, its log in $LOGS/NAME.log, its PASS/FAIL counts and status printed
    local name=$1 limit=$2 rc
    shift 2
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || status=1
    echo "$name: rc $rc at $(($(date +%s) - T0)) s, $(grep -c '^PASS' "$LOGS/$name.log") PASS, $(grep -c '^FAIL' "$LOGS/$name.log") FAIL"
    grep '^FAIL' "$LOGS/$name.log" | head -5
}
if [ "$what" = ring ] || [ "$what" = all ]; then
    step ring 120 test/gpubin/test_ring_gemm
    step ring_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 1 test/gpubin/test_ring_gemm
fi
if [ "$what" = parity ] || [ "$what" = all ]; then
    step parity 240 env LOG_DIR="$LOGS/mgpu_parity" MGPU_PARTS=parity MGPU_LAYOUTS=sp test/run_mgpu_tests.sh
    sed -n '/^layout/,$p' "$LOGS/parity.log" | head -20
fi
if [ "$what" = twins ] || [ "$what" = all ]; then
    step twins 180 env LOG_DIR="$LOGS/mgpu_twins" MGPU_PARTS="twins faults" MGPU_LAYOUTS=sp test/run_mgpu_tests.sh
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    step bench 200 env OUT="$LOGS" BENCH_ROWS="1558M_tp2 1558M_tp2_sp 1558M_tp2_sp_nccl" dev/bench_mgpu.sh
    tail -12 "$LOGS/bench.log"
fi
if [ "$what" = trace ]; then
    step trace 240 env OUT="$LOGS" TRACE_NP=2 dev/trace.sh d48 8 12 --keep-gelu-layers 12 --grad-clip 0 --tp 2 \
        --sequence-parallel 1
    sed -n '/steps,/,$p' "$LOGS/trace.log"
fi
if [ "$what" = bench_fp8 ]; then
    step bench_fp8 300 env OUT="$LOGS" BENCH_ROWS="1558M_tp2_fp8 1558M_tp2_sp_fp8 1558M_tp2_sp_fp8_nccl" dev/bench_mgpu.sh
    tail -12 "$LOGS/bench_fp8.log"
fi
exit $status
