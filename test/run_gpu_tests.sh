#!/usr/bin/env bash
# GPU tests, on a machine with a GPU (CI compiles them but cannot run them). Builds the trainers and the GPU tests,
# writes the CPU build's reference state for small GPT-2 and Llama 3 models (head sizes 64 and 128; in fp32, and in
# fp8 with each scaling recipe), runs the parity test against each (fp32 and bf16; fp8 with fp32 and with bf16
# activations), the FP8 kernel test, the attention kernel test (multi-head and grouped-query; plain, and its small
# shapes under memcheck and racecheck), the AdamW kernel test (its update against fp64, the norm's partial sums it
# writes against the norm's own pass bit for bit), the LM head in chunks of rows against all rows at once (GPT-2 and a
# Llama with a 128256 vocabulary, fp32: losses, gradients, logits to fp32 rounding), the LayerNorm and RMSNorm
# kernel test (plain, memcheck, racecheck), the RoPE and SwiGLU kernel tests (plain, memcheck), sequence parallelism's
# ring collectives beside the GEMMs on a simulated group of 2-4 ranks (plain, memcheck), resume bit-exactness
# in bf16 and fp8 (GPT-2 and Llama), the multiple-choice evaluation against the CPU build's (dev/eval_parity.sh), and
# the GTP path on one rank against the plain path in fp32, bf16 and fp8
# (dev/gtp_check.sh, with compute-sanitizer memcheck and racecheck; GPT-2, and a grouped-query Llama in bf16 and fp8,
# whose FP8 blocks gather FP8 codes; its gathers over the copy engines with the flags, and over NCCL), the update
# in backward against the update after it in fp32, bf16 and fp8 (dev/update_check.sh), and preemption (dev/preempt_check.sh, alone and under mpirun); ends with a summary table
# and a non-zero exit on any failure. Logs go to $LOG_DIR (default: a fresh temporary folder).
# GPU_ROWS: an extended regular expression over the rows' names (as the summary table prints them, e.g.
# 'parity llama|resume'); only the rows it matches run (default: all), so that one device call can take a part.
set -u
cd "$(dirname "$0")/.."
GPU_ROWS=${GPU_ROWS:-.}
want() { [[ "$1" =~ $GPU_ROWS ]]; }
LOG_DIR=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
make -s train_gpt_cpu train_gpt test/gpubin/test_gpu_parity test/gpubin/test_attention test/gpubin/test_fp8_kernels \
    test/gpubin/test_layernorm test/gpubin/test_adamw test/gpubin/test_rope test/gpubin/test_swiglu \
    test/gpubin/test_classifier_chunks test/gpubin/test_ring_gemm ||
    { echo "FAIL build"; exit 1; }

# name, CPU options and GPU modes of each reference model: 20 steps of B 4 x T 64, two micro-steps per step (a row's
# own options come after these and override them). 3 layers in some, so that the parity test's GELU recompute runs
# both ways (test_gpu_parity.cu: keep_gelu_layers); one without clipping, whose updates after the first start in the
# backward; in fp8 the delayed recipe (its history shorter than the run in one), and the current one with a bf16
# block at each end. Llama 3 (llama-tiny: GPT-2's vocabulary, llama3 rope scaling): grouped-query ratios 1 and 4,
# head sizes 64 and 128, tied and untied LM heads, each fp8 recipe, Llama 3's vocabulary of 128256 (a row of logits
# too wide for shared memory: the classifier's two-pass path), and one sequence of T 2048 (few steps: its
# reference's logits are 2048 x Vp).
REF_COMMON="--ref-steps 20 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --sample-every 0"
REFS=("d3_w128_hs64:--depth 3 --width 128 --heads 2:fp32 bf16"
      "d2_w256_hs128:--depth 2 --width 256 --heads 2:fp32 bf16"
      "d3_w128_hs64_noclip:--depth 3 --width 128 --heads 2 --grad-clip 0:fp32 bf16"
      "d3_w128_hs64_fp8_delayed:--depth 3 --width 128 --heads 2 --precision fp8:fp8-fp32 fp8"
      "d3_w128_fp8_current_ends:--depth 3 --width 128 --heads 2 --precision fp8 --fp8-recipe current --fp8-bf16-blocks 1 --fp8-margin 1:fp8-fp32 fp8"
      "d2_w256_hs128_fp8_h4:--depth 2 --width 256 --heads 2 --precision fp8 --fp8-amax-history 4:fp8-fp32 fp8"
      "llama_hs64_gqa1_untied:--model llama-tiny --depth 2 --width 128 --heads 2 --kv-heads 2 --ffn 256:fp32 bf16"
      "llama_hs64_gqa4_tied:--model llama-tiny --depth 3 --width 256 --heads 4 --kv-heads 1 --ffn 384 --tie-embeddings 1:fp32 bf16"
      "llama_hs128_gqa4_untied:--model llama-tiny --depth 2 --width 512 --heads 4 --kv-heads 1 --ffn 512:fp32 bf16"
      "llama_hs128_gqa1_tied_fp8:--model llama-tiny --depth 3 --width 256 --heads 2 --kv-heads 2 --ffn 512 --tie-embeddings 1 --precision fp8:fp8-fp32 fp8"
      "llama_hs64_gqa4_fp8cur:--model llama-tiny --depth 3 --width 256 --heads 4 --kv-heads 1 --ffn 384 --precision fp8 --fp8-recipe current --fp8-bf16-blocks 1 --fp8-margin 1:fp8-fp32 fp8"
      "llama_vocab128k:--model llama-tiny --depth 1 --width 128 --heads 2 --kv-heads 1 --ffn 256 --vocab-size 128256:fp32 bf16"
      "llama_hs64_gqa2_T2048:--model llama-tiny --depth 2 --width 128 --heads 2 --kv-heads 1 --ffn 256 --seq-len 2048 --batch-size 1 --total-batch-tokens 2048 --ref-steps 4:fp32 bf16")

rows=(); failed=0
record() { # name, log, exit status
    local p f
    p=$(grep -c '^PASS ' "$2"); f=$(grep -c '^FAIL ' "$2")
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$f" -eq 0 ] || failed=$((failed + 1))
    rows+=("$(printf '%-44s %5d %5d  %s' "$1" "$p" "$f" "$(grep -h '^parity' "$2" | sed 's/^parity [a-z0-9-]*: //')")")
}

for ref in "${REFS[@]}"; do
    IFS=: read -r name opts modes <<<"$ref"
    wanted=""
    for prec in $modes; do want "parity $name $prec" && wanted+=" $prec"; done
    [ -n "$wanted" ] || continue
    modes=$wanted
    file="$LOG_DIR/ref_$name.bin"
    # shellcheck disable=SC2086
    if ! ./train_gpt_cpu --ref-out "$file" $REF_COMMON $opts > "$LOG_DIR/ref_$name.log" 2>&1; then
        echo "FAIL reference $name: train_gpt_cpu failed (see $LOG_DIR/ref_$name.log)"; tail -3 "$LOG_DIR/ref_$name.log"
        failed=$((failed + 1)); continue
    fi
    for prec in $modes; do
        log="$LOG_DIR/parity_${name}_$prec.log"
        echo "== parity $name $prec"
        test/gpubin/test_gpu_parity "$file" "$prec" > "$log" 2>&1; rc=$?
        grep -v '^PASS ' "$log"
        record "parity $name $prec" "$log" "$rc"
    done
    rm -f "$file"
done

# kernel_row NAME PROGRAM [ARGS...]: a kernel test as one row
kernel_row() {
    local name=$1 log="$LOG_DIR/${1// /_}.log" rc
    shift
    want "$name" || return 0
    echo "== $name"
    "$@" > "$log" 2>&1; rc=$?
    grep -v '^PASS \|^  attention_' "$log" | tail -20
    record "$name" "$log" "$rc"
}

kernel_row attention test/gpubin/test_attention
# the attention kernels alone under compute-sanitizer at small shapes, multi-head and grouped-query (GQA's dK/dV
# blocks walk several query heads through the same shared-memory stages), both head sizes and precisions: the row
# fails on any error or hazard the tool reports (its exit status) as on a failed check
for tool in memcheck racecheck; do
    kernel_row "attention small $tool" compute-sanitizer --tool "$tool" --error-exitcode 9 test/gpubin/test_attention small
done
kernel_row adamw test/gpubin/test_adamw
kernel_row "classifier chunks" test/gpubin/test_classifier_chunks
kernel_row "fp8 kernels" test/gpubin/test_fp8_kernels
kernel_row layernorm test/gpubin/test_layernorm
# the LayerNorm kernels' shared memory, barriers and row groups under compute-sanitizer (a few rows a shape):
# the row fails on any error or hazard the tool reports (its exit status) as on a failed check
for tool in memcheck racecheck; do
    kernel_row "layernorm small $tool" compute-sanitizer --tool "$tool" --error-exitcode 9 test/gpubin/test_layernorm small
done

# RoPE and SwiGLU (Llama's elementwise kernels): against fp64, then under memcheck (no shared memory to race on)
for kernel in rope swiglu; do
    kernel_row "$kernel" "test/gpubin/test_$kernel"
    kernel_row "$kernel memcheck" compute-sanitizer --tool memcheck --error-exitcode 9 "test/gpubin/test_$kernel"
done

# sequence parallelism's ring collectives beside the GEMMs, with a simulated group of 2-4 ranks on this one GPU
# (test_ring_gemm.cu), plain and under memcheck (the ring's copies and adds stay inside their slots and rows). The
# simulated ranks' streams wait for each other's flags on the GPU: under a time limit, since a tool that ran the
# streams' work one submission after another would wait forever (exit 124: the tool, where the plain row passes)
RING_GEMM_LIMIT_S=300
kernel_row "ring gemm" timeout "$RING_GEMM_LIMIT_S" test/gpubin/test_ring_gemm
kernel_row "ring gemm memcheck" timeout "$RING_GEMM_LIMIT_S" compute-sanitizer --tool memcheck --error-exitcode 9 \
    test/gpubin/test_ring_gemm

# multiple-choice evaluation: the GPU build's completion loss sums and verdicts in fp32 and bf16 against the CPU
# build's, on the same trained model file and eval file (dev/eval_parity.sh: tolerances there)
kernel_row "eval parity" dev/eval_parity.sh "$LOG_DIR/eval_parity"

# each row "NAME PRECISION [MODEL OPTIONS]": GPT-2 d12, and a Llama (untied LM head, grouped-query attention)
LLAMA_RESUME="--model llama-tiny --depth 2 --width 256 --heads 4 --kv-heads 1 --ffn 512"
RESUMES=("bf16 bf16" "fp8 fp8" "llama_bf16 bf16 $LLAMA_RESUME" "llama_fp8 fp8 $LLAMA_RESUME")
for r in "${RESUMES[@]}"; do
    read -r name prec model <<<"$r"
    want "resume $name" || continue
    log="$LOG_DIR/resume_$name.log"
    echo "== resume $name"
    MODEL_OPTS=${model:---model d12} dev/resume_check.sh "$prec" > "$log" 2>&1; rc=$?
    sed 's/^resume: bit-exact/PASS resume/; s/^resume: FAIL/FAIL resume:/' "$log" > "$log.checks"
    cat "$log"
    record "resume $name" "$log.checks" "$rc"
done

# variant_row NAME OPTIONS TOOL SCRIPT ARGS...: a dev/variant_check.sh variant (OPTS, SANITIZE) as one row
variant_row() {
    local name=$1 log="$LOG_DIR/${1//[^A-Za-z0-9]/_}.log" opts=$2 tool=$3 rc
    shift 3
    want "$name" || return 0
    echo "== $name"
    OPTS="$opts" SANITIZE="$tool" "$@" > "$log" 2>&1; rc=$?
    cat "$log"
    record "$name" "$log" "$rc"
}

# the GTP path through communicators of one rank against the plain path, bit for bit, with compute-sanitizer: each
# row "PRECISION PREFETCH [TOOL][|OPTIONS]" (dev/gtp_check.sh's OPTS). fp8: delayed scaling, every block gathering FP8
# codes; current scaling with a bf16 block at each end (the shards' amaxes maxed over the group before each cast,
# bf16 and FP8 weights through one pool); without clipping: the update in backward, on the shards (in fp8 the
# shards' codes cast after the history, which the forward's gathers wait for). A Llama (grouped-query 2:1, SwiGLU,
# untied, no biases) in bf16 and fp8: its shards of the unequal QKV parts and [gate; up].
LLAMA_GTP="--model llama-tiny --kv-heads 2 --ffn 512"
GTP_CHECKS=("fp32 1" "bf16 2 memcheck" "bf16 3 racecheck" "fp8 2 memcheck"
            "fp8 1|--fp8-recipe current --fp8-bf16-blocks 1" "bf16 2|--grad-clip 0" "fp8 1|--grad-clip 0"
            "bf16 2|$LLAMA_GTP" "fp8 2|$LLAMA_GTP")
# GTP_CHECKS run the gathers over the copy engines (--gtp-transport ce, the default: the rank pulls its own shard
# behind its own ready flag and writes its read flag, which its updates wait for); GTP_NCCL_CHECKS over NCCL's
# all-gather (--gtp-transport nccl), the same bits: bf16 and fp8 after the backward and in it, fp8 under memcheck.
GTP_NCCL_CHECKS=("bf16 2" "fp8 2 memcheck" "bf16 2|--grad-clip 0" "fp8 1|--grad-clip 0" "fp8 2|$LLAMA_GTP")
for transport in ce nccl; do
    checks=("${GTP_CHECKS[@]}")
    [ "$transport" = nccl ] && checks=("${GTP_NCCL_CHECKS[@]}")
    for c in "${checks[@]}"; do
        IFS='|' read -r spec opts <<<"$c"
        read -r prec depth tool <<<"$spec"
        variant_row "gtp one-rank $transport $prec prefetch $depth${tool:+ $tool}${opts:+ $opts}" "${opts:-}" \
            "${tool:-}" env GTP_TRANSPORT="$transport" dev/gtp_check.sh "$prec" "$depth"
    done
done

# the update in backward (--grad-clip 0) against the update after it, bit for bit: each row "PRECISION [TOOL][|OPTIONS]"
# (dev/update_check.sh's OPTS); one micro-step a step too (the gradients written, not added to, before AdamW reads them),
# and the LM head in chunks of a few rows (their weight gradients summed in order, bit for bit again on resume); the
# layers' AdamW all after the backward (the default --update-after-layers covers these small models' layers) and all
# but layer 0's in it (1); the rest group's in two launches everywhere (one GPU). fp8:
# in the backward AdamW writes the masters only and the FP8 weights are cast after the history, where after the
# backward AdamW writes their codes itself (delayed scaling, every block FP8; a history of 2 steps, which the 6 steps
# roll over; a Llama, whose fc casts SwiGLU), or casts them too (current scaling, a bf16 block at each end).
UPDATE_CHECKS=("fp32" "bf16 memcheck" "bf16|--total-batch-tokens 256" "bf16|--logits-mib 1" "bf16|--update-after-layers 1"
               "fp8 memcheck"
               "fp8|--fp8-amax-history 2" "fp8|--model llama-tiny --kv-heads 1 --ffn 512"
               "fp8|--fp8-recipe current --fp8-bf16-blocks 1")
for c in "${UPDATE_CHECKS[@]}"; do
    IFS='|' read -r spec opts <<<"$c"
    read -r prec tool <<<"$spec"
    variant_row "update in backward $prec${tool:+ $tool}${opts:+ $opts}" "${opts:-}" "${tool:-}" \
        dev/update_check.sh "$prec"
done

# compute-sanitizer racecheck on the plain path (README's command, "Tests"), our attention and LayerNorm kernels at head
# sizes 64 and 128 among all the others (dev/sanitize.sh: no hazard in our kernels; with --gemm-search 0)
RACECHECK_SHAPES=("--width 128 --heads 2" "--width 256 --heads 2")
for shape in "${RACECHECK_SHAPES[@]}"; do
    name="racecheck plain ${shape//--/}"
    want "$name" || continue
    log="$LOG_DIR/racecheck_${shape//[- ]/_}.log"
    echo "== $name"
    rm -rf "$LOG_DIR/racecheck_run"
    # shellcheck disable=SC2086
    dev/sanitize.sh "$name" racecheck "$log.tool" ./train_gpt --depth 1 $shape --seq-len 128 --batch-size 2 \
        --total-batch-tokens 256 --steps 1 --warmup-steps 1 --val-every 0 --sample-every 0 --save 0 \
        --gemm-search 0 --out-dir "$LOG_DIR/racecheck_run" > "$log" 2>&1; rc=$?
    cat "$log"
    record "$name" "$log" "$rc"
done

# preemption: a signal stops the run with a checkpoint, the same command finishes it bit-exactly (under mpirun, one
# rank gets the signal)
PREEMPT_CHECKS=("direct")
command -v mpirun > /dev/null && PREEMPT_CHECKS+=("mpirun 1")
for c in "${PREEMPT_CHECKS[@]}"; do
    want "preempt $c" || continue
    log="$LOG_DIR/preempt_${c// /_}.log"
    echo "== preempt $c"
    # shellcheck disable=SC2086
    dev/preempt_check.sh $c > "$log" 2>&1; rc=$?
    cat "$log"
    record "preempt $c" "$log" "$rc"
done

[ "${#rows[@]}" -gt 0 ] || { echo "FAIL no GPU test row matches GPU_ROWS='$GPU_ROWS'"; exit 1; }
echo
printf '%-44s %5s %5s  %s\n' "test" "pass" "fail" "worst errors"
for r in "${rows[@]}"; do echo "$r"; done
[ "$failed" -eq 0 ] && echo "all GPU tests passed" || echo "$failed GPU test(s) failed"
[ "$failed" -eq 0 ]
