#!/usr/bin/env bash
# Sequence parallelism's ring collectives on the GPU machine, in as few calls as possible: the one-GPU simulated ring
# (test/gpubin/test_ring_gemm, plain and under memcheck: the copy-engine transport), then on 2 GPUs the SP parity
# rows with the ring (copy engines, and NCCL send/recv: the _p2p rows) and with --sp-overlap 0, the resume/update,
# transport and FP8 codes twins and the fault rows, and the 1558M TP=2 / TP=2+SP benchmark (bf16, fp8) with both ring
# transports (fp8 also with its inputs gathered as activations, --sp-fp8-codes 0: the _act row).
# Each part is bounded; with both ring transports `all` (every part but the fp8 benchmark) may outgrow one 10-minute
# call on 2 GPUs, so name parts, several at once: `ring parity`, then `twins bench`, then `bench_fp8`.
# bench4 (not in all; 4 GPUs): 1558M TP=4 and TP=4+SP over both ring transports, and TP=4+SP with the reduce-scatters
# in 2 and 4 pieces (dev/bench_mgpu.sh's groups sp4 and sppieces4); parity and twins take the 4-GPU SP layouts (TP=4+SP,
# DP=2 x TP=2+SP) by themselves where 4 GPUs are present.
# trace (not in all): rank 0's GPU timeline of 1558M TP=2+SP over the ring (dev/trace.sh: where the compute stream
# stands still, and the ring's peer copies with their bandwidth).
#   dev/sp_check.sh [PART...]     PART: ring|parity|twins|bench|bench_fp8|bench4|trace|all (default all); logs
#                                 under $OUT (or /tmp/sp_check)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
what=" ${*:-all} "
export NCCL_NVLS_ENABLE=0
LOGS=${OUT:-/tmp/sp_check}
mkdir -p "$LOGS"
T0=$(date +%s)
make -j"$(nproc)" -s train_gpt test/gpubin/test_ring_gemm test/bin/compare_runs > "$LOGS/build.log" 2>&1 ||
    { tail -20 "$LOGS/build.log"; echo "build failed"; exit 1; }
echo "built in $(($(date +%s) - T0)) s"
status=0
asked() { # PART: named, or in all (all leaves out the parts named in its header)
    [[ "$what" == *" $1 "* ]] || { [[ " bench_fp8 bench4 trace " != *" $1 "* ]] && [[ "$what" == *" all "* ]]; }
}
step() { # NAME LIMIT_S COMMAND...: run it bounded, its log in $LOGS/NAME.log, its PASS/FAIL counts and status printed
    local name=$1 limit=$2 rc
    shift 2
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || status=1
    echo "$name: rc $rc at $(($(date +%s) - T0)) s, $(grep -c '^PASS' "$LOGS/$name.log") PASS, $(grep -c '^FAIL' "$LOGS/$name.log") FAIL"
    grep '^FAIL' "$LOGS/$name.log" | head -5
}
if asked ring; then
    step ring 120 test/gpubin/test_ring_gemm
    step ring_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 1 test/gpubin/test_ring_gemm
fi
if asked parity; then
    step parity 300 env LOG_DIR="$LOGS/mgpu_parity" MGPU_PARTS=parity MGPU_LAYOUTS=sp test/run_mgpu_tests.sh
    sed -n '/^layout/,$p' "$LOGS/parity.log" | head -20
fi
if asked twins; then
    step twins 330 env LOG_DIR="$LOGS/mgpu_twins" MGPU_PARTS="twins faults" MGPU_LAYOUTS=sp test/run_mgpu_tests.sh
fi
if asked bench; then
    step bench 260 env OUT="$LOGS" BENCH_ROWS="1558M_tp2 1558M_tp2_sp 1558M_tp2_sp_nccl 1558M_tp2_sp_p2p" \
        dev/bench_mgpu.sh
    tail -14 "$LOGS/bench.log"
fi
if asked bench4; then
    step bench4 450 env OUT="$LOGS" BENCH_ROWS="sp4 sppieces4" dev/bench_mgpu.sh
    tail -16 "$LOGS/bench4.log"
fi
if asked trace; then
    step trace 240 env OUT="$LOGS" TRACE_NP=2 dev/trace.sh d48 8 12 --keep-gelu-layers 12 --grad-clip 0 --tp 2 \
        --sequence-parallel 1
    sed -n '/steps,/,$p' "$LOGS/trace.log"
fi
if asked bench_fp8; then
    step bench_fp8 450 env OUT="$LOGS" BENCH_ROWS="1558M_tp2_fp8 1558M_tp2_sp_fp8 1558M_tp2_sp_fp8_nccl \
        1558M_tp2_sp_fp8_p2p 1558M_tp2_sp_fp8_act" dev/bench_mgpu.sh
    tail -16 "$LOGS/bench_fp8.log"
fi
exit $status
