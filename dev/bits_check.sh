#!/usr/bin/env bash
# bits_check.sh: holds whole training runs to the bits an earlier revision's trainer gave them: ./train_gpt of this
# tree and of the tree with the earlier train_gpt.cu and llmc/ laid over it, the same small model (GPT-2 by default)
# for 6 steps of two micro-steps each, the new run on the earlier run's GEMM choices (an algorithm sums in its own
# order); the step-6 model and state files must be identical. For a change that must leave a path's arithmetic alone
# (GPT-2's, say, when another model's path changes).
#   dev/bits_check.sh save REV        where git is: REV's train_gpt.cu and llmc/ into dev/bin/bits_base/ (ignored by
#                                     git; a device call carries it: carry ["dev/bin/bits_base"])
#   dev/bits_check.sh [PRECISION...]  on the GPU: builds both, runs each precision (default: bf16 fp8), PASS or FAIL
#                                     a line each. MODEL_OPTS: the model (default a 3-layer GPT-2); OPTS: more options
set -u
cd "$(dirname "$0")/.." || exit 1
BASE=dev/bin/bits_base

if [ "${1:-}" = save ]; then
    rev=${2:?"usage: dev/bits_check.sh save REV (a git revision, e.g. main)"}
    rm -rf "$BASE" && mkdir -p "$BASE" || exit 1
    git archive "$rev" train_gpt.cu llmc | tar -x -C "$BASE" || { echo "FAIL bits: cannot read $rev's files"; exit 1; }
    echo "saved train_gpt.cu and llmc/ of $rev ($(git rev-parse --short "$rev")) in $BASE"
    exit 0
fi

[ -f "$BASE/train_gpt.cu" ] || {
    echo "FAIL bits: no base in $BASE; run dev/bits_check.sh save REV where git is, and carry it"
    exit 1
}
PRECISIONS=("$@")
[ ${#PRECISIONS[@]} -gt 0 ] || PRECISIONS=(bf16 fp8)
SHARD=${SHARD:-$(ls data/brown/brown_train_*.bin | head -1)}
read -r -a MODEL <<<"${MODEL_OPTS:---depth 3 --width 256 --heads 4}"
read -r -a EXTRA <<<"${OPTS:-}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# the earlier trainer: this tree (its Makefile) with the base's sources over it
mkdir -p "$out/tree"
tar --exclude=./data --exclude=./runs --exclude=./dev/bin -cf - . | tar -xf - -C "$out/tree"
cp -r "$BASE"/. "$out/tree/"
(cd "$out/tree" && make -j8 train_gpt > "$out/base_build.log" 2>&1) & base_build=$!
make -j8 train_gpt > "$out/build.log" 2>&1 || { tail -5 "$out/build.log"; echo "FAIL bits: build"; exit 1; }
wait $base_build || { tail -5 "$out/base_build.log"; echo "FAIL bits: the base's build"; exit 1; }

run() { # binary precision dir
    "$1" "${MODEL[@]}" --batch-size 4 --seq-len 64 --total-batch-tokens 512 --steps 6 --checkpoint-every 6 \
        --warmup-steps 1 --val-every 0 --sample-every 0 --precision "$2" ${EXTRA[@]+"${EXTRA[@]}"} \
        --train-data "$SHARD" --out-dir "$3" > "$3.log" 2>&1
}
status=0
for p in "${PRECISIONS[@]}"; do
    mkdir -p "$out/new_$p"
    if ! run "$out/tree/train_gpt" "$p" "$out/base_$p"; then
        tail -3 "$out/base_$p.log"; echo "FAIL bits $p: the base's run"; status=1; continue
    fi
    cp "$out/base_$p/gemm_algos.txt" "$out/new_$p/"
    if ! run ./train_gpt "$p" "$out/new_$p"; then
        tail -3 "$out/new_$p.log"; echo "FAIL bits $p: this tree's run"; status=1; continue
    fi
    if cmp -s "$out/base_$p/model_00000006.bin" "$out/new_$p/model_00000006.bin" &&
        cmp -s "$out/base_$p/state_00000006.bin" "$out/new_$p/state_00000006.bin"; then
        echo "PASS bits $p: step-6 model and state identical to the base's"
    else
        echo "FAIL bits $p: step-6 model or state differs from the base's"; status=1
    fi
done
exit $status
