#!/usr/bin/env bash
# Runs every CPU test: the binaries test/bin/test_* (built from test/test_*.c) and the scripts test/test_*.sh.
# Each prints one line per check, "PASS name" or "FAIL name: why". A program that exits non-zero without
# printing a FAIL line (a crash, a missing tool) counts as one failure. Last line: "N passed, N failed".
# A test taking longer than TEST_TIMEOUT_S is stopped and fails (a hang must not stall CI); TEST_TIME_SCALE (the
# Makefile's, for sanitized builds) stretches it and the scripts' own limits (test/cli_lib.sh).
set -u
cd "$(dirname "$0")/.."
export TEST_TIME_SCALE=${TEST_TIME_SCALE:-1}
TEST_TIMEOUT_S=$((1200 * TEST_TIME_SCALE))
passed=0; failed=0
for t in test/bin/test_* test/test_*.sh; do
    [ -e "$t" ] || continue
    echo "== $t"
    out=$(timeout "$TEST_TIMEOUT_S" "$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | grep -c '^PASS ')
    f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $t: exited with status $rc without naming a failed check"
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
