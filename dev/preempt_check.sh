#!/usr/bin/env bash
# preempt_check.sh: preemption of the GPU build (README, "Stopping and preemption"). A small model trains STEPS steps
# (default 60, 4 micro-steps each: long enough on an H100 that a signal forwarded by mpirun lands mid-run)
# straight; then the same run is signalled once its step-2 line is out, must stop with status 75 and a checkpoint,
# and the same command (--resume auto) must finish it with the straight run's last files, bit for bit (the runs
# share the straight run's GEMM choices: an algorithm sums in its own order).
#   dev/preempt_check.sh direct           ./train_gpt alone, SIGTERM to it
#   dev/preempt_check.sh mpirun NP        mpirun -np NP ./train_gpt, SIGUSR1 to one rank (the others must stop at the
#                                         same step: the ranks agree on stopping)
# SIG=USR1|TERM|INT overrides the signal; TO=mpirun sends it to mpirun instead, which forwards it to every rank
# (Open MPI's default; the GPU machines' mpirun, started with OMPI_MCA_plm=isolated, forwards nothing); STEPS the
# run's length.
# BIN=./train_gpt_cpu runs the same check on the CPU build (no GEMM choices to share; MODEL="--depth 2 --width 64
# --heads 4 --seq-len 64" keeps it short). Prints PASS/FAIL lines; exit
# status non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-direct}
NP=${2:-1}
SHARD=${SHARD:-$(ls data/brown/brown_train_*.bin | head -1)}
DIR=$(mktemp -d)
STOPPED=75
STEPS=${STEPS:-60}
LAST=$(printf '%08d' "$STEPS")
export NCCL_NVLS_ENABLE=0
BIN=${BIN:-./train_gpt}
LAUNCH=()
name="preempt $MODE"
if [ "$MODE" = mpirun ]; then
    LAUNCH=(mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE)
    name="preempt mpirun -np $NP"
fi
# SIG: the signal sent (default TERM alone, USR1 to mpirun: mpirun's own SIGTERM kills its ranks)
SIG=${SIG:-$([ "$MODE" = mpirun ] && echo USR1 || echo TERM)}
# MODEL: the model's options (the CPU build wants a smaller one than the default)
read -r -a MODEL <<<"${MODEL:---depth 4 --width 256 --heads 4 --seq-len 128}"
ARGS=("${MODEL[@]}" --batch-size 4 --total-batch-tokens $((2048 * NP)) --steps "$STEPS"
      --checkpoint-every $((STEPS / 3)) --warmup-steps 1 --val-every $((STEPS / 2)) --sample-every 0 --precision bf16 --train-data "$SHARD"
      --resume auto)
status=0
say() { echo "$1 $name: $2"; [ "$1" = PASS ] || status=1; }

timeout 300 "${LAUNCH[@]}" "$BIN" "${ARGS[@]}" --out-dir "$DIR/straight" >"$DIR/straight.log" 2>&1 ||
    { say FAIL "the straight run failed: $(tail -3 "$DIR/straight.log")"; exit 1; }
mkdir -p "$DIR/stopped"
cp "$DIR"/straight/gemm_algos*.txt "$DIR/stopped/" 2>/dev/null
"${LAUNCH[@]}" "$BIN" "${ARGS[@]}" --out-dir "$DIR/stopped" >"$DIR/stopped.log" 2>&1 &
pid=$!
for _ in $(seq 30000); do # up to 300 s
    grep -q "^step 2/$STEPS | loss" "$DIR/stopped.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
done
target=$pid who=$MODE
if [ "$MODE" = mpirun ] && [ "${TO:-rank}" = rank ]; then
    target=$(pgrep -n -f -- "^$BIN .*--out-dir $DIR/stopped") && who="one rank" || target=$pid
fi
kill -"$SIG" "$target"
signalled_at=$(grep '^step ' "$DIR/stopped.log" | tail -1)
wait "$pid"; rc=$?
line=$(grep 'stopped by SIG' "$DIR/stopped.log")
if [ "$rc" -eq "$STOPPED" ] && [ -n "$line" ]; then
    say PASS "SIG$SIG to $who after step 2: status $rc, '$line'"
else
    say FAIL "SIG$SIG to $who after step 2: status $rc (wanted $STOPPED): $(tail -3 "$DIR/stopped.log")"
    grep -q "^step $STEPS/$STEPS | checkpoint" "$DIR/stopped.log" &&
        echo "  (the run ended before the signal reached it: raise STEPS; signalled at '$signalled_at')"
fi
timeout 300 "${LAUNCH[@]}" "$BIN" "${ARGS[@]}" --out-dir "$DIR/stopped" >"$DIR/resumed.log" 2>&1; rc=$?
if [ "$rc" -eq 0 ] && cmp -s "$DIR/straight/model_$LAST.bin" "$DIR/stopped/model_$LAST.bin" &&
    cmp -s "$DIR/straight/state_$LAST.bin" "$DIR/stopped/state_$LAST.bin"; then
    say PASS "resumed with --resume auto to the straight run's step-$STEPS files, bit for bit"
else
    say FAIL "resumed run: status $rc, step-$STEPS files $(cmp "$DIR/straight/state_$LAST.bin" \
        "$DIR/stopped/state_$LAST.bin" 2>&1 | head -1): $(tail -2 "$DIR/resumed.log")"
fi
rm -rf "$DIR"
exit $status
