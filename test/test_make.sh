#!/usr/bin/env bash
# test_make.sh: the build notices its environment. make decides nvcc, MPI and the flags when it runs, so a program
# built before `apt-get install libopenmpi-dev` must be rebuilt by the next make (the Makefile's build stamps). The
# Makefile, copied into a scratch folder with empty sources and stand-ins for nvcc, mpicc and cc (scripts that only
# make their output file: no compiler runs here), builds the trainer, a GPU test, a dev benchmark and the CPU trainer;
# then `make -n` finds them up to date under the same configuration, and wants to rebuild the CUDA programs where MPI
# is detected since or turned off, or where nvcc or its flags change, and the CPU programs where theirs change (and
# not the other kind).
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL # a make that runs this test passes its own options and variables down
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src
mkdir -p "$src/test" "$src/dev" "$tmp/bin" "$tmp/other"
cp Makefile "$src/"
touch "$src/train_gpt.cu" "$src/train_gpt_cpu.c" "$src/test/test_x.cu" "$src/test/test_util.h" \
    "$src/test/cuda_timing.cuh" "$src/test/gpu_test_util.cuh" "$src/dev/bench_x.cu" "$src/dev/cuda_energy.cuh"
# a compiler stand-in: makes the file after -o
cat >"$tmp/bin/nvcc" <<'EOF'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2"; shift; done
EOF
chmod +x "$tmp/bin/nvcc"
cp "$tmp/bin/nvcc" "$tmp/bin/cc"
cp "$tmp/bin/nvcc" "$tmp/other/nvcc"
# an Open MPI wrapper stand-in: what the Makefile asks it (--showme:compile, --showme:link)
cat >"$tmp/bin/mpicc" <<EOF
#!/usr/bin/env bash
case "\$1" in --showme:compile) echo "-I$tmp/mpi/include" ;; --showme:link) echo "-L$tmp/mpi/lib -lmpi" ;; esac
EOF
chmod +x "$tmp/bin/mpicc"

CUDA=(train_gpt test/gpubin/test_x dev/bin/bench_x)
BASE=(NVCC="$tmp/bin/nvcc" MPICC= CC="$tmp/bin/cc" CFLAGS=-O2)

# build VARIABLE=VALUE...: builds every program of the scratch tree under the base configuration changed by these.
build() { make -C "$src" -s "${CUDA[@]}" train_gpt_cpu "${BASE[@]}" "$@" >"$tmp/build.out" 2>&1; }

# expect NAME WANT TARGET VARIABLE=VALUE...: `make -n TARGET` under the base configuration changed by the variables
# rebuilds TARGET (WANT=rebuild; its command names the target) or finds it up to date (WANT=current).
expect() {
    local name=$1 want=$2 target=$3 out
    shift 3
    out=$(make -C "$src" --no-print-directory -n "$target" "${BASE[@]}" "$@" 2>&1)
    if { [ "$want" = rebuild ] && grep -q -- "-o $target" <<<"$out"; } ||
        { [ "$want" = current ] && grep -q "is up to date" <<<"$out"; }; then
        echo "PASS $name"
    else
        echo "FAIL $name: make -n $target $* should $want it; it printed: ${out//$'\n'/ | }"
    fi
}

if ! build || [ ! -e "$src/train_gpt" ] || [ ! -e "$src/train_gpt_cpu" ]; then
    echo "FAIL make_scratch_build: $(cat "$tmp/build.out")"
    exit 1
fi
for t in "${CUDA[@]}" train_gpt_cpu; do expect "make_up_to_date_${t##*/}" current "$t"; done
for t in "${CUDA[@]}"; do expect "make_mpi_installed_since_rebuilds_${t##*/}" rebuild "$t" MPICC="$tmp/bin/mpicc"; done
grep -q -- "-DUSE_MPI -I$tmp/mpi/include" <<<"$(make -C "$src" -n train_gpt "${BASE[@]}" MPICC="$tmp/bin/mpicc")" &&
    echo "PASS make_mpi_flags_in_the_rebuild" || echo "FAIL make_mpi_flags_in_the_rebuild: no -DUSE_MPI in its command"
build MPICC="$tmp/bin/mpicc"
expect make_mpi_build_up_to_date current train_gpt MPICC="$tmp/bin/mpicc"
expect make_mpi_turned_off_rebuilds rebuild train_gpt MPICC="$tmp/bin/mpicc" USE_MPI=0
build
expect make_other_nvcc_rebuilds rebuild train_gpt NVCC="$tmp/other/nvcc"
build
expect make_other_nvcc_flags_rebuild rebuild train_gpt CUDA_ARCH=-arch=sm_80
build
expect make_cpu_flags_rebuild_cpu_programs rebuild train_gpt_cpu CFLAGS=-O0
build
expect make_cpu_flags_leave_cuda_programs current train_gpt CFLAGS=-O0
exit 0
