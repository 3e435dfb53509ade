#!/usr/bin/env bash
# A variant of the GPU trainer's path against its plain path, bit for bit: 6 steps of a small model, two micro-steps
# a step (so the gradients are written, then added to), checkpointed at step 3 and resumed; the variant's step-6 model
# and state files, and its resumed run's, must be identical to the plain run's, and so must the gradient norm each
# step logged (metrics.jsonl: 9 significant digits, which round-trip a float). The variant runs start from the plain
# run's GEMM choices (the same algorithms: an algorithm sums in its own order). OPTS go to every run, the plain one's
# too; the variant's options come after them, so they override.
#   dev/variant_check.sh NAME "VARIANT OPTIONS" [PRECISION] [SHARD]   SANITIZE=memcheck|racecheck: also that tool on
#   a short run of the variant
# dev/gtp_check.sh (the GTP path on one rank) and dev/update_check.sh (the update in backward) are two such variants.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1
read -r -a VARIANT <<<"$2"
PRECISION=${3:-bf16}
SHARD=${4:-$(ls data/brown/brown_train_*.bin | head -1)}
read -r -a EXTRA <<<"${OPTS:-}"
DIR=$(mktemp -d)
run() { ./train_gpt --depth 3 --width 256 --heads 4 --batch-size 4 --seq-len 64 --total-batch-tokens 512 --steps 6 \
    --checkpoint-every 3 --warmup-steps 1 --val-every 3 --val-batches 2 --sample-every 0 --precision "$PRECISION" \
    ${EXTRA[@]+"${EXTRA[@]}"} --train-data "$SHARD" --out-dir "$@" >/dev/null; }
run "$DIR/plain"
mkdir -p "$DIR/variant" "$DIR/resumed"
cp "$DIR/plain/gemm_algos.txt" "$DIR/variant/"
run "$DIR/variant" "${VARIANT[@]}"
cp "$DIR/variant/model_00000003.bin" "$DIR/variant/state_00000003.bin" "$DIR/variant/gemm_algos.txt" \
    "$DIR/variant/log.txt" "$DIR/resumed/"
run "$DIR/resumed" "${VARIANT[@]}" --resume 1
status=0
for f in model_00000006.bin state_00000006.bin; do
    for d in variant resumed; do
        if cmp -s "$DIR/plain/$f" "$DIR/$d/$f"; then
            echo "PASS $NAME: $d $f identical to the plain run's"
        else
            echo "FAIL $NAME: $d $f differs from the plain run's"; status=1
        fi
    done
done
norms() { sed -n 's/.*"step":\([0-9]*\),.*"norm":\([^,}]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
norms "$DIR/plain" > "$DIR/plain_norms"
for d in variant resumed; do
    norms "$DIR/$d" > "$DIR/${d}_norms"
    # the resumed run logs steps 4 .. 6 only: each of its steps against the plain run's
    differ=$(join "$DIR/${d}_norms" "$DIR/plain_norms" | awk '$2 != $3' | wc -l)
    steps=$(wc -l < "$DIR/${d}_norms")
    if [ "$steps" -gt 0 ] && [ "$differ" -eq 0 ]; then
        echo "PASS $NAME: $d run's logged gradient norms ($steps steps) identical to the plain run's"
    else
        echo "FAIL $NAME: $d run's logged gradient norms: $differ of $steps steps differ from the plain run's"; status=1
    fi
done
if [ -n "${SANITIZE:-}" ]; then
    dev/sanitize.sh "$NAME compute-sanitizer $SANITIZE" "$SANITIZE" "$DIR/sanitize.log" ./train_gpt \
        --depth 2 --width 128 --heads 2 --batch-size 2 --seq-len 64 --total-batch-tokens 256 --steps 2 \
        --warmup-steps 1 --gemm-search 0 --val-every 0 --sample-every 0 --precision "$PRECISION" \
        ${EXTRA[@]+"${EXTRA[@]}"} --train-data "$SHARD" --out-dir "$DIR/sanitize_$SANITIZE" --save 0 \
        "${VARIANT[@]}" || status=1
fi
exit $status
