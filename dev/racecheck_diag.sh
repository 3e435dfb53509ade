#!/usr/bin/env bash
# racecheck_diag.sh: why `compute-sanitizer --tool racecheck ./train_gpt ...` (README's command) exited non-zero
# with no output, in one call on a GPU machine. Runs the command plain, under memcheck and under racecheck in several forms
# (with and without the GEMM algorithm search, only our attention kernels, only our LayerNorm kernels), each with the program's
# output line-buffered and its own exit status recorded by a wrapper shell, and writes one report per case (the
# program's last lines, the tool log's head and tail, hazards counted per kernel); prints a table last.
# Logs under $OUT (or a temp folder).
#   dev/racecheck_diag.sh            ONLY=REGEX: the cases whose names match
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${OUT:-$(mktemp -d)}/racecheck
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0
make -s train_gpt >"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; exit 1; }
WORK=$(mktemp -d)
CMD="./train_gpt --depth 1 --width 128 --heads 2 --seq-len 128 --batch-size 2 --total-batch-tokens 256 --steps 1"
CMD+=" --warmup-steps 1 --val-every 0 --sample-every 0 --save 0"
# name | precision and other options | tool options (empty: no tool)
CASES=("plain|--precision bf16|"
       "memcheck|--precision bf16|--tool memcheck"
       "racecheck|--precision bf16|--tool racecheck"
       "racecheck_no_search|--precision bf16 --gemm-search 0|--tool racecheck"
       "racecheck_no_search_attention|--precision bf16 --gemm-search 0|--tool racecheck --kernel-name kns=attention_"
       "racecheck_no_search_layernorm|--precision bf16 --gemm-search 0|--tool racecheck --kernel-name kns=layernorm_")
printf '%-30s %5s %6s %6s  %s\n' case tool target "out L" "tool summary" >"$LOGS/table.txt"
for c in "${CASES[@]}"; do
    IFS='|' read -r name args opts <<<"$c"
    [[ $name =~ ${ONLY:-.} ]] || continue
    dir="$WORK/$name" rep="$LOGS/$name.txt"
    mkdir -p "$dir"
    # the wrapper shell records the program's own status (128+N: killed by signal N)
    wrapped="stdbuf -oL -eL $CMD $args --out-dir $dir/run; echo \$? > $dir/target_rc"
    if [ -z "$opts" ]; then
        timeout 300 bash -c "$wrapped" >"$dir/stdout" 2>&1; rc=$?
    else
        # shellcheck disable=SC2086
        timeout 300 compute-sanitizer $opts --target-processes all --report-api-errors no --log-file "$dir/tool.log" \
            bash -c "$wrapped" >"$dir/stdout" 2>&1; rc=$?
    fi
    target=$(cat "$dir/target_rc" 2>/dev/null || echo none)
    summary=$(grep -h "SUMMARY" "$dir/tool.log" 2>/dev/null | tail -1)
    {
        echo "== $name: tool exit $rc, target exit $target"
        echo "-- program output, last 6 lines"; tail -6 "$dir/stdout"
        if [ -f "$dir/tool.log" ]; then
            echo "-- tool log, first 30 lines"; head -30 "$dir/tool.log"
            echo "-- tool log, last 12 lines"; tail -12 "$dir/tool.log"
            echo "-- hazards per kernel"
            grep -h -A2 -i 'hazard\|race' "$dir/tool.log" | grep -o 'in [A-Za-z_][A-Za-z0-9_:<>, ]*' | sort | uniq -c |
                sort -rn | head -15
        fi
    } >"$rep"
    printf '%-30s %5s %6s %6s  %s\n' "$name" "$rc" "$target" "$(wc -l <"$dir/stdout")" "${summary:-}" >>"$LOGS/table.txt"
done
rm -rf "$WORK"
for f in "$LOGS"/*.txt; do [ "$f" = "$LOGS/table.txt" ] || cut -c1-240 "$f"; done
cat "$LOGS/table.txt"
