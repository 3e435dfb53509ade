#!/usr/bin/env bash
# Multi-GPU tests, on a machine with 2 GPUs (make mgpu-test). Each prints PASS/FAIL lines; last line a summary.
# 1. parity: a small model, 20 steps, the same config and seed on 1 GPU and on 2 data-parallel ranks (with and
#    without --zero 1), compared step by step (train loss) and at the end (every weight tensor) by
#    test/bin/compare_runs. fp32: LOSS_TOL_FP32 / WEIGHT_TOL_FP32 = 1e-5 (only the order of the gradient sum
#    differs: per rank, then across ranks). bf16: LOSS_TOL_BF16 1e-3 and WEIGHT_TOL_BF16 1e-2, since a summation
#    order that differs by one fp32 rounding can flip a bf16 weight rounding, which later steps then carry.
#    Layouts run under mpirun where it exists, and always once with torchrun-style variables over TCP with
#    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (the socket transport, as between nodes).
# 2. faults: kill -9 of one rank mid-run (rank 1, then rank 0): the other exits non-zero within FAULT_LIMIT_S with
#    an error line naming the failure; a rank missing at start-up, a port in use, a wrong world size: one line,
#    non-zero exit.
# Logs stay in $LOG_DIR (default: a fresh temporary folder).
set -u
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
make -s train_gpt test/bin/compare_runs || { echo "FAIL build"; exit 1; }
export NCCL_NVLS_ENABLE=0
NP=2
STEPS=20
LOSS_TOL_FP32=1e-5; WEIGHT_TOL_FP32=1e-5
LOSS_TOL_BF16=1e-3; WEIGHT_TOL_BF16=1e-2
FAULT_LIMIT_S=60
RUN_TIMEOUT_S=600
PORT_BASE=${PORT_BASE:-29600}
# 4 micro-steps of 4 x 64 on one GPU, 2 per rank on two
COMMON=(--depth 2 --width 128 --heads 2 --seq-len 64 --batch-size 4 --total-batch-tokens 1024 --steps "$STEPS"
        --warmup-steps 2 --lr 1e-3 --val-every 0 --sample-every 0 --checkpoint-every 0 --save 1)

passed=0; failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail_check() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
count_compare() { # the output of compare_runs
    passed=$((passed + $(grep -c '^PASS ' <<<"$1"))); failed=$((failed + $(grep -c '^FAIL ' <<<"$1")))
    grep -v '^PASS ' <<<"$1"
}

# launch_env NAME PORT ARGS...: NP ranks with torchrun-style variables in the background; pids in PIDS.
launch_env() {
    local name=$1 port=$2 r
    shift 2
    PIDS=()
    for r in $(seq 0 $((NP - 1))); do
        RANK=$r WORLD_SIZE=$NP LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            ./train_gpt "$@" > "$LOG_DIR/$name.rank$r.out" 2> "$LOG_DIR/$name.rank$r.err" &
        PIDS+=($!)
    done
}

# wait_all: waits for PIDS; returns the first non-zero status.
wait_all() {
    local rc=0 p s
    for p in "${PIDS[@]}"; do
        wait "$p"; s=$?
        [ "$rc" -eq 0 ] && rc=$s
    done
    return "$rc"
}

# --- 1. parity ------------------------------------------------------------------------------------------------
for prec in fp32 bf16; do
    if [ "$prec" = fp32 ]; then lt=$LOSS_TOL_FP32; wt=$WEIGHT_TOL_FP32; else lt=$LOSS_TOL_BF16; wt=$WEIGHT_TOL_BF16; fi
    ref="$LOG_DIR/single_$prec"
    if ! timeout "$RUN_TIMEOUT_S" ./train_gpt "${COMMON[@]}" --precision "$prec" --out-dir "$ref" \
            > "$ref.out" 2>&1; then
        fail_check "single_$prec" "the one-GPU run failed (see $ref.out)"; continue
    fi
    port=$PORT_BASE
    for zero in 0 1; do
        name="dp2_zero${zero}_$prec"
        if command -v mpirun >/dev/null; then
            timeout "$RUN_TIMEOUT_S" mpirun --allow-run-as-root -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE \
                ./train_gpt "${COMMON[@]}" --precision "$prec" --zero "$zero" --out-dir "$LOG_DIR/$name" \
                > "$LOG_DIR/$name.out" 2>&1
        else
            launch_env "$name" "$port" "${COMMON[@]}" --precision "$prec" --zero "$zero" --out-dir "$LOG_DIR/$name"
            wait_all
        fi
        rc=$?; port=$((port + 1))
        if [ "$rc" -ne 0 ]; then fail_check "$name" "exited $rc (see $LOG_DIR/$name.*)"; continue; fi
        echo "== $name against the one-GPU run"
        count_compare "$(test/bin/compare_runs "$ref" "$LOG_DIR/$name" "$STEPS" "$lt" "$wt")"
    done
    # the environment path over sockets only
    name="env_tcp_$prec"
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 launch_env "$name" "$port" "${COMMON[@]}" --precision "$prec" \
        --out-dir "$LOG_DIR/$name"
    if wait_all; then
        echo "== $name (torchrun-style variables, NCCL over sockets) against the one-GPU run"
        count_compare "$(test/bin/compare_runs "$ref" "$LOG_DIR/$name" "$STEPS" "$lt" "$wt")"
    else
        fail_check "$name" "a rank failed (see $LOG_DIR/$name.*)"
    fi
    PORT_BASE=$((PORT_BASE + 10))
done

# --- 2. faults ------------------------------------------------------------------------------------------------
LONG=(--depth 2 --width 128 --heads 2 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --steps 1000000
      --warmup-steps 0 --val-every 0 --sample-every 0 --save 0 --precision bf16)

# kill_test VICTIM PORT: kills rank VICTIM after a few steps; the other must fail fast and say why.
kill_test() {
    local victim=$1 port=$2 name="kill_rank$1" survivor=$((1 - $1)) t0 waited
    launch_env "$name" "$port" "${LONG[@]}" --out-dir "$LOG_DIR/$name"
    for _ in $(seq 600); do # until rank 0 has logged step 5 (at most 60 s)
        grep -q '^step 5/' "$LOG_DIR/$name.rank0.out" 2>/dev/null && break
        sleep 0.1
    done
    kill -9 "${PIDS[$victim]}"
    t0=$(date +%s.%N)
    for _ in $(seq $((FAULT_LIMIT_S * 10))); do
        kill -0 "${PIDS[$survivor]}" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "${PIDS[$survivor]}" 2>/dev/null; then
        kill -9 "${PIDS[$survivor]}"
        wait "${PIDS[$survivor]}" 2>/dev/null
        fail_check "$name" "rank $survivor still ran $FAULT_LIMIT_S s after rank $victim was killed (a hang)"
        return
    fi
    wait "${PIDS[$survivor]}"; local rc=$?
    wait "${PIDS[$victim]}" 2>/dev/null
    waited=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")
    local err="$LOG_DIR/$name.rank$survivor.err"
    if [ "$rc" -ne 0 ] && grep -q "^\[train_gpt rank $survivor\] error: .*rank $victim" "$err"; then
        pass "$name: rank $survivor exited $rc after ${waited}s: $(grep -m1 'error:' "$err")"
    else
        fail_check "$name" "rank $survivor exited $rc after ${waited}s without naming rank $victim: $(tail -2 "$err")"
    fi
}
kill_test 1 $((PORT_BASE + 1))
kill_test 0 $((PORT_BASE + 2))

# expect_start_error NAME TEXT: every rank of the last launch exits non-zero within FAULT_LIMIT_S, one says TEXT.
expect_start_error() {
    local name=$1 want=$2 rc=0 p
    for p in "${PIDS[@]}"; do
        timeout "$FAULT_LIMIT_S" tail --pid="$p" -f /dev/null
        wait "$p" && rc=1
    done
    if [ "$rc" -eq 0 ] && cat "$LOG_DIR/$name".rank*.err | grep -q -- "$want"; then
        pass "$name: $(cat "$LOG_DIR/$name".rank*.err | grep -m1 -- "$want")"
    else
        fail_check "$name" "expected every rank to fail with '$want': $(cat "$LOG_DIR/$name".rank*.err)"
    fi
}

# a missing rank: only rank 0 of 2 is started
port=$((PORT_BASE + 3))
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=5 \
    ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/missing" > "$LOG_DIR/missing.rank0.out" 2> "$LOG_DIR/missing.rank0.err" &
PIDS=($!)
expect_start_error missing "for ranks \[1\] to connect"

# a wrong world size: rank 1 believes in 3 ranks
port=$((PORT_BASE + 4))
PIDS=()
for r in 0 1; do
    w=$((r == 0 ? 2 : 3))
    RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=5 \
        ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/world" > "$LOG_DIR/world.rank$r.out" 2> "$LOG_DIR/world.rank$r.err" &
    PIDS+=($!)
done
expect_start_error world "world size"

# a port in use: the rank 0 of another job (waiting for its rank 1) holds MASTER_PORT
port=$((PORT_BASE + 5))
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=30 \
    ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/holder" > /dev/null 2>&1 &
holder=$!
sleep 2
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/port" > "$LOG_DIR/port.rank0.out" 2> "$LOG_DIR/port.rank0.err" &
PIDS=($!)
expect_start_error port "MASTER_PORT $port on 127.0.0.1 is in use"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

echo
echo "$passed passed, $failed failed (logs in $LOG_DIR)"
[ "$failed" -eq 0 ]
