# shellcheck shell=bash
# dev/ab_lib.sh, sourced by dev/ab_step.sh and dev/ab_env.sh: what their timing runs share.
# ab_options MODEL BATCH KEEP_GELU_LAYERS DATA_RANKS DIR: sets AB_OPTS to the trainer's options for a bf16 timing run
#   of STEPS (20) steps on SHARD, BATCH sequences a data rank, no validation, samples or saved model, into DIR.
# ab_median: the median of the numbers on stdin from the AB_FROM-th (6: after start-up, the allocator and the clocks
#   settle), or "-" if none. A change that trades energy for time is judged late in long runs too (STEPS=300
#   AB_FROM=150): a run's step lengthens up to 3.7% as it trains, and the ranking of two builds can turn (dev/DESIGN.md,
#   "Measuring").
ab_options() {
    # shellcheck disable=SC2034 # read by the scripts that source this file
    AB_OPTS=(--model "$1" --batch-size "$2" --seq-len 1024 --total-batch-tokens $(($2 * 1024 * $4))
             --steps "${STEPS:-20}" --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD"
             --out-dir "$5" --save 0 --warmup-steps 5 --keep-gelu-layers "$3")
}
ab_median() {
    awk -v from="${AB_FROM:-6}" 'NR >= from' | sort -n |
        awk '{a[NR] = $1} END {print NR ? (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) : "-"}'
}
