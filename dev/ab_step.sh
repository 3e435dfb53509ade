#!/usr/bin/env bash
# Whole-step A/B of two builds in one call, runs interleaved (old, new, old, new) so that the card's drift under its
# power limit falls on both: "new" is ./train_gpt built from this tree, "old" the same tree with the files under
# OLD_DIR laid over it (same relative paths, e.g. OLD_DIR/llmc/layernorm.cuh; copy them from `git show REV:path`
# before the call, the device has no git history). Prints the median step time of steps AB_FROM (6).. of each run,
# and how many GEMM algorithm choices (gemm_algos.txt) differ between runs.
#   dev/ab_step.sh OLD_DIR [MODEL:BATCH:KEEP_GELU_LAYERS ...]     (default d24:16:24 d36:8:16 d12:32:12)
#   STEPS (20) steps a run, AB_FROM (6) the first step timed, EXTRA (more train_gpt options, e.g. "--grad-clip 0").
#   Needs data/brown (or SHARD).
set -euo pipefail
cd "$(dirname "$0")/.."
source dev/ab_lib.sh
OLD_DIR=${1:?usage: dev/ab_step.sh OLD_DIR [MODEL:BATCH:KEEP ...]}
shift
SPECS=("$@")
[ ${#SPECS[@]} -gt 0 ] || SPECS=(d24:16:24 d36:8:16 d12:32:12)
SHARD=${SHARD:-$(ls data/brown/brown_train_*.bin | head -1)}
export NCCL_NVLS_ENABLE=0
OLD_TREE=/tmp/ab_old_tree
rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE"
tar --exclude=./data --exclude=./runs -cf - . | tar -xf - -C "$OLD_TREE"
cp -r "$OLD_DIR"/. "$OLD_TREE"/
ln -s "$PWD/data" "$OLD_TREE/data"
(cd "$OLD_TREE" && make -j8 train_gpt > /tmp/ab_old_build.log 2>&1) & old_build=$!
make -j8 train_gpt > /tmp/ab_new_build.log 2>&1 || { tail -5 /tmp/ab_new_build.log; exit 1; }
wait $old_build || { tail -5 /tmp/ab_old_build.log; exit 1; }
run() { # binary model batch keep tag
    local dir=/tmp/ab_run_$5
    rm -rf "$dir"
    ab_options "$2" "$3" "$4" 1 "$dir"
    # shellcheck disable=SC2086 # EXTRA is a list of options
    "$1" "${AB_OPTS[@]}" ${EXTRA:-} > "/tmp/ab_$5.log" 2>&1 || { echo "$5 failed"; tail -3 "/tmp/ab_$5.log"; }
    echo "$5 $(grep -o "| [0-9.]* ms |" "/tmp/ab_$5.log" | awk '{print $2}' | ab_median) ms"
}
for spec in "${SPECS[@]}"; do
    IFS=: read -r model batch keep <<<"$spec"
    for rep in 1 2; do
        run "$OLD_TREE/train_gpt" "$model" "$batch" "$keep" "${model}_old_$rep"
        run ./train_gpt "$model" "$batch" "$keep" "${model}_new_$rep"
    done
    n=$(wc -l < "/tmp/ab_run_${model}_new_1/gemm_algos.txt")
    d() { diff "/tmp/ab_run_$1/gemm_algos.txt" "/tmp/ab_run_$2/gemm_algos.txt" | grep -c '^<' || true; }
    echo "$model GEMM choices differing (of $n): old runs $(d "${model}_old_1" "${model}_old_2"), new runs" \
        "$(d "${model}_new_1" "${model}_new_2"), old vs new $(d "${model}_old_1" "${model}_new_1")"
done
