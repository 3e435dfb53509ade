#!/usr/bin/env bash
# The GTP path on one GPU (--gtp 1 --gtp-materialize 1: gathers, reduce-scatters and the prefetch chain through
# communicators of one rank) against the plain path: 6 steps of a small model, two micro-steps a step (so the shard
# gradients are written, then added to), checkpointed at step 3 and resumed; the step-6 model and state files must be
# identical to the plain run's, bit for bit, and so must the resumed run's. The GTP runs start from the plain run's
# GEMM choices (the same algorithms: an algorithm sums in its own order). In PRECISION (default bf16), with
# PREFETCH weights gathered ahead (default 2; 1 is the smallest pool the forward's chunks allow), and OPTS added to
# every run (e.g. OPTS="--fp8-recipe current --fp8-bf16-blocks 1": in fp8, the FP8 blocks gather FP8 codes, the others
# bf16, and current scaling maxes the shards' amaxes over the group before each weight cast).
#   dev/gtp_check.sh [PRECISION] [PREFETCH] [SHARD]          SANITIZE=memcheck|racecheck: also that tool on a GTP run
set -euo pipefail
cd "$(dirname "$0")/.."
PRECISION=${1:-bf16}
PREFETCH=${2:-2}
SHARD=${3:-$(ls data/brown/brown_train_*.bin | head -1)}
read -r -a EXTRA <<<"${OPTS:-}"
NAME="gtp one-rank $PRECISION prefetch $PREFETCH${OPTS:+ $OPTS}"
DIR=$(mktemp -d)
run() { ./train_gpt --depth 3 --width 256 --heads 4 --batch-size 4 --seq-len 64 --total-batch-tokens 512 --steps 6 \
    --checkpoint-every 3 --warmup-steps 1 --val-every 3 --val-batches 2 --sample-every 0 --precision "$PRECISION" \
    ${EXTRA[@]+"${EXTRA[@]}"} --train-data "$SHARD" --out-dir "$@" >"${LOG:-/dev/null}"; }
run "$DIR/plain"
mkdir -p "$DIR/gtp" "$DIR/resumed"
cp "$DIR/plain/gemm_algos.txt" "$DIR/gtp/"
LOG="$DIR/gtp.log" run "$DIR/gtp" --gtp-materialize 1 --gtp-prefetch "$PREFETCH"
cp "$DIR/gtp/model_00000003.bin" "$DIR/gtp/state_00000003.bin" "$DIR/gtp/gemm_algos.txt" "$DIR/gtp/log.txt" \
    "$DIR/resumed/"
run "$DIR/resumed" --gtp-materialize 1 --gtp-prefetch "$PREFETCH" --resume 1
grep -h "^GTP:" "$DIR/gtp.log" || true
status=0
for f in model_00000006.bin state_00000006.bin; do
    for d in gtp resumed; do
        if cmp -s "$DIR/plain/$f" "$DIR/$d/$f"; then
            echo "PASS $NAME: $d $f identical to the plain run's"
        else
            echo "FAIL $NAME: $d $f differs from the plain run's"; status=1
        fi
    done
done
if [ -n "${SANITIZE:-}" ]; then
    dev/sanitize.sh "$NAME compute-sanitizer $SANITIZE" "$SANITIZE" "$DIR/sanitize.log" ./train_gpt \
        --depth 2 --width 128 --heads 2 --batch-size 2 --seq-len 64 --total-batch-tokens 256 --steps 2 \
        --warmup-steps 1 --gemm-search 0 --val-every 0 --sample-every 0 --precision "$PRECISION" \
        ${EXTRA[@]+"${EXTRA[@]}"} --train-data "$SHARD" --out-dir "$DIR/sanitize_$SANITIZE" --save 0 \
        --gtp-materialize 1 --gtp-prefetch "$PREFETCH" || status=1
fi
exit $status
