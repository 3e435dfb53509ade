#!/usr/bin/env bash
# GPU tests, on a machine with a GPU (CI compiles them but cannot run them). Builds the trainers and the GPU tests,
# writes the CPU build's reference state for two small models (head sizes 64 and 128), runs the parity test in fp32
# and bf16 against each, and the attention kernel test; ends with a summary table and a non-zero exit on any
# failure. Logs go to $LOG_DIR (default: a fresh temporary folder).
set -u
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
make -s train_gpt_cpu train_gpt test/gpubin/test_gpu_parity test/gpubin/test_attention || { echo "FAIL build"; exit 1; }

# name and CPU options of each reference model: 20 steps of B 4 x T 64, two micro-steps per step. 3 layers in one,
# so that the parity test's GELU recompute runs both ways (test_gpu_parity.cu: keep_gelu_layers).
REF_COMMON="--ref-steps 20 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --sample-every 0"
REFS=("d3_w128_hs64:--depth 3 --width 128 --heads 2" "d2_w256_hs128:--depth 2 --width 256 --heads 2")

rows=(); failed=0
record() { # name, log, exit status
    local p f
    p=$(grep -c '^PASS ' "$2"); f=$(grep -c '^FAIL ' "$2")
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$f" -eq 0 ] || failed=$((failed + 1))
    rows+=("$(printf '%-28s %5d %5d  %s' "$1" "$p" "$f" "$(grep -h '^parity' "$2" | sed 's/^parity [a-z0-9]*: //')")")
}

for ref in "${REFS[@]}"; do
    name=${ref%%:*}; opts=${ref#*:}
    file="$LOG_DIR/ref_$name.bin"
    # shellcheck disable=SC2086
    if ! ./train_gpt_cpu --ref-out "$file" $opts $REF_COMMON > "$LOG_DIR/ref_$name.log" 2>&1; then
        echo "FAIL reference $name: train_gpt_cpu failed (see $LOG_DIR/ref_$name.log)"; tail -3 "$LOG_DIR/ref_$name.log"
        failed=$((failed + 1)); continue
    fi
    for prec in fp32 bf16; do
        log="$LOG_DIR/parity_${name}_$prec.log"
        echo "== parity $name $prec"
        test/gpubin/test_gpu_parity "$file" "$prec" > "$log" 2>&1; rc=$?
        grep -v '^PASS ' "$log"
        record "parity $name $prec" "$log" "$rc"
    done
    rm -f "$file"
done

log="$LOG_DIR/attention.log"
echo "== attention"
test/gpubin/test_attention > "$log" 2>&1; rc=$?
grep -v '^PASS ' "$log" | tail -20
record "attention" "$log" "$rc"

echo
printf '%-28s %5s %5s  %s\n' "test" "pass" "fail" "worst errors"
for r in "${rows[@]}"; do echo "$r"; done
[ "$failed" -eq 0 ] && echo "all GPU tests passed" || echo "$failed GPU test(s) failed"
[ "$failed" -eq 0 ]
