#!/usr/bin/env bash
# racecheck_diag.sh: why `compute-sanitizer --tool racecheck ./train_gpt ...` (issue 13's command) exits non-zero
# with no output, in one device call. Runs the command plain, under memcheck, under racecheck, then racecheck with
# the attention kernels left out and with the LayerNorm kernels left out, each with its stdout, stderr and the
# tool's own log kept apart and its exit status recorded; prints a table last. Logs under $OUT (or a temp folder).
#   dev/racecheck_diag.sh [PRECISION]     (default bf16; fp32 runs the fp32 attention kernels)
set -uo pipefail
cd "$(dirname "$0")/.."
PRECISION=${1:-bf16}
LOGS=${OUT:-$(mktemp -d)}/racecheck
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0
make -s train_gpt >"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; exit 1; }
CMD=(./train_gpt --depth 1 --width 128 --heads 2 --seq-len 128 --batch-size 2 --total-batch-tokens 256 --steps 1
     --warmup-steps 1 --val-every 0 --sample-every 0 --save 0 --precision "$PRECISION")
# name | tool options (empty: no tool)
CASES=("plain|"
       "memcheck|--tool memcheck"
       "racecheck|--tool racecheck"
       "racecheck_all_reports|--tool racecheck --racecheck-report all --print-level info"
       "racecheck_no_attention|--tool racecheck --kernel-name-exclude kns=attention_"
       "racecheck_no_layernorm|--tool racecheck --kernel-name-exclude kns=layernorm_"
       "racecheck_no_both|--tool racecheck --kernel-name-exclude kns=attention_ --kernel-name-exclude kns=layernorm_")
printf '%-26s %6s %8s %8s  %s\n' case exit "out B" "err B" "tool summary / last tool line" >"$LOGS/table.txt"
for c in "${CASES[@]}"; do
    name=${c%%|*} opts=${c#*|}
    dir="$LOGS/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    if [ -z "$opts" ]; then
        timeout 300 "${CMD[@]}" --out-dir "$dir/run" >"$dir/stdout" 2>"$dir/stderr"; rc=$?
    else
        # shellcheck disable=SC2086
        timeout 300 compute-sanitizer $opts --report-api-errors no --log-file "$dir/tool.log" \
            "${CMD[@]}" --out-dir "$dir/run" >"$dir/stdout" 2>"$dir/stderr"; rc=$?
    fi
    summary=$(grep -h "SUMMARY\|Target application\|Error\|error" "$dir/tool.log" 2>/dev/null | tail -1)
    printf '%-26s %6s %8s %8s  %s\n' "$name" "$rc" "$(wc -c <"$dir/stdout")" "$(wc -c <"$dir/stderr")" \
        "${summary:-$(tail -1 "$dir/stderr")}" >>"$LOGS/table.txt"
done
for c in "${CASES[@]}"; do
    name=${c%%|*}
    echo "== $name: stderr tail, tool log tail"
    tail -5 "$LOGS/$name/stderr"
    tail -8 "$LOGS/$name/tool.log" 2>/dev/null
done
cat "$LOGS/table.txt"
