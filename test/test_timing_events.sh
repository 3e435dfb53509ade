#!/usr/bin/env bash
# test_timing_events.sh: the trainer makes no CUDA timing event but where it times GEMM candidates at start-up. A timing
# event holds its stream ~2.9 us on an H200 where a disable-timing one costs nothing (dev/bin/ring_latency,
# dev/results/ring_latency_ops_2xh200.txt), and the two that once bracketed each compute-stream wait for communication
# cost a 1558M TP=2+SP step 1.5-1.7% (dev/DESIGN.md, section 14): the step's waits time themselves
# (llmc/stream_flags.cuh), and its events are made with cudaEventDisableTiming. This scans train_gpt.cu and llmc/ for
# cudaEventCreate( (a timing event) and cudaEventCreateWithFlags( without cudaEventDisableTiming, naming the function
# each is in (the last line at column 0 that opens one), and allows ALLOWED's functions only. A planted event of each
# kind, and one allowed, must be told apart, so that a scanner that finds nothing fails here.
set -u
cd "$(dirname "$0")/.." || exit 1
FILES=(train_gpt.cu llmc/*.cuh)
ALLOWED=("llmc/matmul.cuh gemm_plan_tune") # GEMM candidates timed once, before the first step

# scan FILE...: "FILE FUNCTION LINE: text" for each timing event made
scan() {
    awk '/^[A-Za-z_].*\(/ { if (match($0, /[A-Za-z_][A-Za-z_0-9]*\(/)) {
             head = substr($0, 1, RSTART + RLENGTH - 2); n = split(head, w, /[ *&]+/); fn = w[n] } }
         /cudaEventCreate\(/ || (/cudaEventCreateWithFlags\(/ && !/cudaEventDisableTiming/) {
             print FILENAME " " fn " " FNR ": " $0 }' "$@"
}

# the scan's lines but those of ALLOWED's functions
disallowed() {
    local line allowed a
    while IFS= read -r line; do
        allowed=0
        for a in "${ALLOWED[@]}"; do [[ "$line" == "$a "* ]] && allowed=1; done
        [ "$allowed" -eq 1 ] || printf '%s\n' "$line"
    done
}

for f in "${FILES[@]}"; do
    [ -f "$f" ] || { echo "FAIL timing events: $f is missing (update FILES in $0)"; exit 0; }
done
found=$(scan "${FILES[@]}" | disallowed)
allowed=$(scan "${FILES[@]}" | wc -l)
if [ -z "$found" ] && [ "$allowed" -ge 1 ]; then
    echo "PASS timing events: none in ${#FILES[@]} files of the trainer but the GEMM tuner's ($allowed lines)"
elif [ -z "$found" ]; then
    echo "FAIL timing events: the GEMM tuner's events were not found (update ALLOWED in $0)"
else
    echo "FAIL timing events: the trainer makes CUDA timing events (use cudaEventDisableTiming; time a wait as"
    echo "  llmc/stream_flags.cuh's flag_wait_timed does):"
    printf '%s\n' "$found" | sed 's/^/  /'
fi

planted_dir=$(mktemp -d)
trap 'rm -rf "$planted_dir"' EXIT
mkdir -p "$planted_dir/llmc"
cat > "$planted_dir/llmc/matmul.cuh" <<'EOF'
static void gemm_plan_tune(GemmPlan *p) {
    cudaCheck(cudaEventCreate(&start));
}
template <typename T>
static void linear_forward(const Linear<T> &lin, T *out) {
    cudaCheck(cudaEventCreateWithFlags(&ok, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&begin));
}
static void tp_join(TensorParallel *tp,
                    cudaStream_t compute) {
    cudaCheck(cudaEventCreateWithFlags(&mark, cudaEventDefault));
}
EOF
got=$(cd "$planted_dir" && scan llmc/matmul.cuh | disallowed)
want=$'llmc/matmul.cuh linear_forward 7:     cudaCheck(cudaEventCreate(&begin));\nllmc/matmul.cuh tp_join 11:     cudaCheck(cudaEventCreateWithFlags(&mark, cudaEventDefault));'
if [ "$got" = "$want" ]; then
    echo "PASS timing events scanner: finds a planted timing event of each kind in its function, and passes the tuner's"
else
    echo "FAIL timing events scanner: found"
    printf '%s\n' "$got" | sed 's/^/  /'
    echo "  wanted"
    printf '%s\n' "$want" | sed 's/^/  /'
fi
