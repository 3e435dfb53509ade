#!/usr/bin/env bash
# Llama throughput: ours in bf16 and fp8 beside the PyTorch baseline (shared/bench/torch_llama.py: compiled, bf16,
# flash attention with GQA, fused AdamW), same GPU, same call. Llama-3.2-1B's shape (--model llama3.2-1b: 16 layers,
# width 2048, 32 heads / 8 KV heads, F 8192, vocabulary 128256, tied) at B=4, T=2048, one micro-batch a step. Prints
# ms/step (median after warm-up), tokens/s, MFU and peak memory per row, then ratios.
#   dev/bench_llama.sh [TORCH_SCRIPT] [SHARD]        BENCH_STEPS (30), BENCH_TORCH (1), BENCH_PRECISIONS ("bf16 fp8"),
#                                                    BENCH_OPTS (more train_gpt options for our rows)
# Ours trains as the baseline does, without clipping (--grad-clip 0; the update starts in the backward). The GPT-2
# shards are valid tokens for Llama 3's vocabulary (ids below 50257), and the baseline takes them modulo its own.
# MFU counts as train_gpt does (dev/bench_table.py's mfu, llmc/config.h's flops_per_token): 6 x the parameters a token
# meets in a GEMM (the tied wte once, as the LM head) + 12 L C T for attention, over the dense peak (989 TFLOP/s bf16 on
# H100/H200); in fp8 the four block linears' FLOPs count at the fp8 peak (1979) and the rest at bf16's.
# Needs: python3 with torch, one training shard. Builds ./train_gpt first (a fresh device machine has none).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-.carry/torch_llama.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin | head -1)}
STEPS=${BENCH_STEPS:-30}
SKIP=5
L=16 C=2048 NH=32 KV=8 F=8192 V=128256 B=4 T=2048
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT_DIR=${OUT:-/tmp}/bench_llama
mkdir -p "$OUT_DIR"
make -j"$(nproc)" train_gpt >"$OUT_DIR/build.log" 2>&1 || { tail -20 "$OUT_DIR/build.log"; echo "build failed"; exit 1; }

rows=()
if [ "${BENCH_TORCH:-1}" = 1 ]; then
    log="$OUT_DIR/torch.log"
    python3 "$TORCH" --data "$SHARD" --layers $L --dim $C --heads $NH --kv-heads $KV --ffn $F --vocab $V --batch $B \
        --seq $T --steps "$STEPS" >"$log" 2>&1 || { echo "torch baseline failed:"; tail -5 "$log"; }
    rows+=("torch:bf16:$log")
fi
for prec in ${BENCH_PRECISIONS:-bf16 fp8}; do
    log="$OUT_DIR/ours_$prec.log"
    rm -rf "$OUT_DIR/run"
    ./train_gpt --model llama3.2-1b --batch-size $B --seq-len $T --total-batch-tokens $((B * T)) --steps "$STEPS" \
        --val-every 0 --sample-every 0 --precision "$prec" --train-data "$SHARD" --out-dir "$OUT_DIR/run" --save 0 \
        --warmup-steps 5 --grad-clip 0 ${BENCH_OPTS:-} >"$log" 2>&1 || { echo "ours $prec failed:"; tail -5 "$log"; }
    rows+=("ours_$prec:$prec:$log")
done

python3 - "llama:$L:$C:$NH:$KV:$F:$V:1" "$B" "$T" "$SKIP" "${rows[@]}" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "dev"))
from bench_table import flops_per_token, measure, mfu, params_of, shape_of  # noqa: E402 (dev/bench.sh's parsing)
shape, B, T, skip = shape_of(sys.argv[1]), *map(int, sys.argv[2:5])

res = {}
for row in sys.argv[5:]:
    who, prec, log = row.split(":", 2)
    ms, tok, mem, _ = measure("torch" if who == "torch" else "ours", log, B * T, skip)
    res[who] = (ms, tok, mfu(tok, shape, T, prec), mem)
print(f"Llama-3.2-1B shape: {params_of(shape, T) / 1e6:.0f}M parameters, B {B} x T {T}, "
      f"{flops_per_token(shape, T) / 1e9:.2f} GFLOP a token")
print(f"{'who':10} {'ms/step':>9} {'tok/s':>10} {'MFU%':>6} {'peak GB':>8}")
for who, (ms, tok, m, mem) in res.items():
    print(f"{who:10} {ms:9.2f} {tok:10.0f} {m:6.1f} {mem:8.1f}")
for who, base in (("ours_bf16", "torch"), ("ours_fp8", "torch"), ("ours_fp8", "ours_bf16")):
    a, b = res.get(who), res.get(base)
    if a and b:
        print(f"{who + ' / ' + base:22} tokens/s {a[1] / b[1]:6.3f}x  peak memory {a[3] / b[3]:6.3f}x")
EOF
