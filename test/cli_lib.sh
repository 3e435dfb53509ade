# cli_lib.sh: what the end-to-end scripts (test_cli.sh, test_hf.sh) share, sourced by them from the repository root:
# the default shards, PASS/FAIL lines, the checks that their programs and data exist, and the test that a command
# fails with one error line.
RUN_TIMEOUT=$((600 * ${TEST_TIME_SCALE:-1})) # seconds one run may take (test/run_tests.sh stretches it when sanitized)
TRAIN_GLOB='data/brown/brown_train_*.bin'
VAL_GLOB='data/brown/brown_val_*.bin'

pass() { echo "PASS $1"; }
fail_check() { echo "FAIL $1: $2"; }

# require_inputs NAME PROGRAM...: FAILs check NAME and exits where a program is not built or the default shards are
# missing (without them nothing here is checked: a failure, not a skip).
require_inputs() {
    local name=$1 b
    shift
    for b in "$@"; do
        if [ ! -x "$b" ]; then fail_check "$name" "$b is missing; run make"; exit 1; fi
    done
    if [ -z "$(ls $TRAIN_GLOB 2>/dev/null)" ] || [ -z "$(ls $VAL_GLOB 2>/dev/null)" ]; then
        fail_check "$name" "no shards match $TRAIN_GLOB or $VAL_GLOB; run make data"
        exit 1
    fi
}

# fails_with_one_line WANT PREFIX COMMAND...: true where COMMAND exits non-zero (not by the timeout) with exactly one
# line on stderr, which starts with PREFIX and contains WANT. ERR and RC keep what it printed and its status.
fails_with_one_line() {
    local want=$1 prefix=$2
    shift 2
    ERR=$(timeout "$RUN_TIMEOUT" "$@" 2>&1 >/dev/null)
    RC=$?
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$(printf '%s\n' "$ERR" | grep -c .)" -eq 1 ] &&
        [[ "$ERR" == "$prefix"* ]] && grep -qF -- "$want" <<<"$ERR"
}

# expect_error NAME TEXT ARGS...: the trainer $BIN run with ARGS exits non-zero with exactly one error line on stderr
# containing TEXT, and creates no output folder ($tmp/never).
expect_error() {
    local name=$1 want=$2
    shift 2
    if fails_with_one_line "$want" "[train_gpt rank 0] error: " "$BIN" --out-dir "$tmp/never" "$@" &&
        [ ! -e "$tmp/never" ]; then
        pass "$name"
    else
        fail_check "$name" "status $RC, want one line with '$want' and no $tmp/never; stderr: $ERR"
    fi
}
