#!/usr/bin/env bash
# Whole-step A/B of one build under several settings (environment: NCCL knobs, a GPU choice; trainer options), runs
# interleaved round by round so that the cards' drift under their power limit falls on every setting alike. Prints,
# per run, the median step time of steps AB_FROM (6).. and the median of the step line's "| comm X ms" (world > 1).
#   dev/ab_env.sh NP MODEL:BATCH:KEEP_GELU_LAYERS SETTING...
#   SETTING: "VAR=value VAR2=value --option value" ('' is the environment and options as they are): the words before
#   the first "--" are environment variables, the rest train_gpt options. NP 1: one process; NP > 1: mpirun -np NP
#   as data parallelism (every rank batch BATCH), with each setting's variables passed to the ranks.
#   ROUNDS (2) rounds, STEPS (20) steps a run, EXTRA (more train_gpt options). Needs data/brown (or SHARD).
#   AB_ALGOS: a gemm_algos.txt that every rank of every run loads instead of timing its own GEMM candidates, so that
#   settings differ only in what they set (the choices of near-ties differ from run to run otherwise).
# Examples: dev/ab_env.sh 2 d12:32:12 '' NCCL_MAX_CTAS=8 NCCL_MAX_CTAS=4
#           dev/ab_env.sh 1 d24:16:24 '--grad-clip 1' '--grad-clip 0'
set -euo pipefail
cd "$(dirname "$0")/.."
source dev/ab_lib.sh
NP=${1:?usage: dev/ab_env.sh NP MODEL:BATCH:KEEP SETTING...}
SPEC=${2:?usage: dev/ab_env.sh NP MODEL:BATCH:KEEP SETTING...}
shift 2
[ $# -gt 0 ] || { echo "error: name at least one setting ('' for the environment as it is)"; exit 1; }
IFS=: read -r model batch keep <<<"$SPEC"
SHARD=${SHARD:-$(ls data/brown/brown_train_*.bin | head -1)}
export NCCL_NVLS_ENABLE=0
make -j8 train_gpt > /tmp/ab_env_build.log 2>&1 || { tail -5 /tmp/ab_env_build.log; exit 1; }
for round in $(seq 1 "${ROUNDS:-2}"); do
    i=0
    for setting in "$@"; do
        i=$((i + 1))
        tag="s${i}_r$round" dir=/tmp/ab_env_run
        vars=() opts=() launch=()
        for word in $setting; do
            if [ ${#opts[@]} -eq 0 ] && [ "${word#--}" = "$word" ]; then vars+=("$word"); else opts+=("$word"); fi
        done
        if [ "$NP" -gt 1 ]; then
            launch=(mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE)
            for kv in ${vars[@]+"${vars[@]}"}; do launch+=(-x "${kv%%=*}"); done
        fi
        rm -rf "$dir"
        if [ -n "${AB_ALGOS:-}" ]; then mkdir -p "$dir" && cp "$AB_ALGOS" "$dir/gemm_algos.txt"; fi
        ab_options "$model" "$batch" "$keep" "$NP" "$dir"
        # shellcheck disable=SC2086 # EXTRA is a list of options
        env ${vars[@]+"${vars[@]}"} ${launch[@]+"${launch[@]}"} ./train_gpt "${AB_OPTS[@]}" ${EXTRA:-} \
            ${opts[@]+"${opts[@]}"} > "/tmp/ab_env_$tag.log" 2>&1 ||
            { echo "$tag failed:"; tail -3 "/tmp/ab_env_$tag.log"; continue; }
        ms=$(grep -o "| [0-9.]* ms | [0-9]* tok/s" "/tmp/ab_env_$tag.log" | awk '{print $2}' | ab_median)
        # one process prints no comm field: grep finding nothing is no failure here
        comm=$({ grep -o "| comm [0-9.]* ms" "/tmp/ab_env_$tag.log" || true; } | awk '{print $3}' | ab_median)
        printf '%-6s %-44s %8s ms  comm %6s ms\n' "$tag" "${setting:-(as is)}" "$ms" "$comm"
    done
done
