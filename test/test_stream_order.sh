#!/usr/bin/env bash
# test_stream_order.sh: the CUDA code that runs on the trainer's streams queues nothing on the legacy default stream.
# The trainer's streams are non-blocking (llmc/cuda_common.cuh), so the legacy stream is not ordered with them: a
# cudaMemset, a cudaMemcpy or a kernel launched without a stream can run before, during or after the work it was
# meant to precede or follow, depending on how busy the GPU is. Seen on 4 x H200 (dev/log/2026-11-26.md, "The first
# 4-GPU machine"): test_fp8_kernels read back a transpose before it finished, and the trainer's FP8 state was zeroed
# that way. This scans the trainer (train_gpt.cu, llmc/) and the GPU tests that use its streams for cudaMemcpy( and
# cudaMemset( (the Async forms with a stream are the ones to use) and for launches <<<...>>> with fewer than four
# arguments. test_attention.cu and the dev benchmarks may use stream 0 throughout, which is ordered with itself.
# A planted violation of each kind must be found, so that a scanner that finds nothing fails here.
set -u
cd "$(dirname "$0")/.."
FILES=(train_gpt.cu llmc/*.cuh test/test_fp8_kernels.cu test/test_gpu_parity.cu test/test_layernorm.cu
       test/test_adamw.cu test/test_rope.cu test/test_swiglu.cu test/test_ring_gemm.cu test/gpu_test_util.cuh)

# scan FILE...: one line "FILE: what" for each legacy-stream call or launch
scan() {
    grep -HnE '\bcuda(Memcpy|Memset)\(' "$@" | sed 's/$/ (legacy stream: use the Async form on a stream)/'
    # launches: the configuration between <<< and >>> (possibly over several lines), arguments counted at depth 0
    perl -0777 -ne 'while (/<<<(.*?)>>>/sg) {
        my ($cfg, $depth, $args) = ($1, 0, 1);
        for my $c (split //, $cfg) {
            $depth++ if $c =~ /[(\[{]/;
            $depth-- if $c =~ /[)\]}]/;
            $args++ if $c eq "," && $depth == 0;
        }
        (my $one = $cfg) =~ s/\s+/ /g;
        print "$ARGV: <<<$one>>> (no stream: the legacy stream)\n" if $args < 4;
    }' "$@"
}

for f in "${FILES[@]}"; do
    [ -f "$f" ] || { echo "FAIL stream order: $f is missing (update FILES in $0)"; exit 0; }
done
found=$(scan "${FILES[@]}")
if [ -z "$found" ]; then
    echo "PASS stream order: no legacy-stream copy, fill or launch in ${#FILES[@]} files of the trainer and its GPU tests"
else
    echo "FAIL stream order: the legacy default stream is used where the trainer's non-blocking streams run:"
    printf '%s\n' "$found" | sed 's/^/  /'
fi

planted=$(mktemp --suffix=.cu)
trap 'rm -f "$planted"' EXIT
cat > "$planted" <<'EOF'
cudaCheck(cudaMemset(p, 0, n));
cudaCheck(cudaMemcpyAsync(p, q, n, cudaMemcpyDeviceToDevice, stream));
kernel<<<grid_for(n, 256), 256>>>(p, n);
other<<<dim3(a, b), threads, smem_of(C, threads),
        stream>>>(p);
EOF
got=$(scan "$planted" | wc -l)
if [ "$got" -eq 2 ]; then
    echo "PASS stream order scanner: finds a planted cudaMemset and a launch without a stream, and nothing else"
else
    echo "FAIL stream order scanner: found $got of the 2 planted violations:"
    scan "$planted" | sed 's/^/  /'
fi
