#!/usr/bin/env bash
# The MPI path of llmc/bootstrap.h: 3 ranks under mpirun (test/bin/mpi_bootstrap, built with USE_MPI where
# mpicc is found) must each receive rank 0's blob, pass two barriers and report distinct ranks and local ranks.
# Prints SKIP (counted neither way) where mpirun or the binary is missing.
set -u
cd "$(dirname "$0")/.."
bin=test/bin/mpi_bootstrap
world=3
if ! command -v mpirun >/dev/null || [ ! -x "$bin" ]; then
    echo "SKIP mpi bootstrap: needs mpirun and $bin (make builds it where mpicc is found)"
    exit 0
fi
# Every wait of the bootstrap is bounded; the timeout here only guards against a broken MPI installation.
# Built with SANITIZE=1, memory errors are still caught, but not leaks: Open MPI's components (dlopen'ed, so
# LeakSanitizer cannot name them for a suppression) never free what they allocate; ours are checked elsewhere.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
out=$(TRAIN_GPT_BOOTSTRAP_TIMEOUT=10 timeout 60 mpirun --allow-run-as-root --oversubscribe -np "$world" \
      "$bin" worker 2>&1); rc=$?
want=$(for r in $(seq 0 $((world - 1))); do echo "ok rank $r world $world local $r"; done)
got=$(printf '%s\n' "$out" | grep '^ok rank' | sort)
if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then
    echo "PASS mpi bootstrap: $world ranks under mpirun receive rank 0's blob and pass barriers"
else
    echo "FAIL mpi bootstrap: mpirun exited $rc; output:"
    printf '%s\n' "$out" | sed 's/^/  /'
fi
