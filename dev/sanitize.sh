#!/usr/bin/env bash
# sanitize.sh: one run under compute-sanitizer, judged in one line. PASS when the program exits 0 with the tool's
# summary and no error in our kernels; hazards racecheck reports inside cuBLASLt's own kernels (nvjet_*, *_xmma_*,
# cutlass*: TMA and mbarrier-synchronized code that racecheck does not model, and nothing we can change) are named
# on the line and do not fail it.
#   dev/sanitize.sh NAME TOOL LOG ./train_gpt OPTIONS...     (TOOL memcheck|racecheck; the tool's output into LOG)
# API errors are left out: NCCL and cuBLAS probe kernels of other GPUs (cudaFuncGetAttributes: no kernel image).
# Pass --gemm-search 0 to the trainer under racecheck: the start-up's algorithm search times cuBLASLt candidates that
# racecheck cannot run (it reports a hardware exception and kills the program; dev/racecheck_diag.sh).
set -uo pipefail
name=$1 tool=$2 log=$3
shift 3
compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 "$@" >"$log" 2>&1
rc=$?
summary=$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$log" | tail -1)
# racecheck: "Race reported between Read access at KERNEL+0x.. and Write access at KERNEL+0x.." (two lines)
kernels=$(grep -o 'access at [A-Za-z_][A-Za-z0-9_]*' "$log" | sed 's/^access at //' | sort -u)
LIBRARY='^(nvjet_|sm[0-9]+_xmma|cutlass|cublas)'
ours=$(grep -Ev "$LIBRARY" <<<"$kernels" | grep . | tr '\n' ' ')
theirs=$(grep -E "$LIBRARY" <<<"$kernels" | tr '\n' ' ')
other_errors=$(grep -c '^========= \(Invalid\|Program hit\|Internal\|Error: process\|Target application\)' "$log")
ran=$(grep -c '^step [0-9]*/[0-9]* | loss' "$log")
if [ -n "$summary" ] && [ -z "$ours" ] && [ "$other_errors" -eq 0 ] && [ "$ran" -gt 0 ] &&
    { [ "$rc" -eq 0 ] || [ -n "$theirs" ]; }; then
    echo "PASS $name: $summary${theirs:+ (all in the cuBLASLt kernels $theirs)}"
else
    echo "FAIL $name (exit $rc): ${summary:-no summary}${ours:+; our kernels: $ours}"
    tail -12 "$log"
    exit 1
fi
