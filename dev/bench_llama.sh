#!/usr/bin/env bash
# Llama throughput: ours in bf16 and fp8 beside the PyTorch baseline (shared/bench/torch_llama.py: compiled, bf16,
# flash attention with GQA, fused AdamW), same GPU, same call. Llama-3.2-1B's shape (--model llama3.2-1b: 16 layers,
# width 2048, 32 heads / 8 KV heads, F 8192, vocabulary 128256, tied) at B=4, T=2048, one micro-batch a step. Prints
# ms/step (median after warm-up), tokens/s, MFU and peak memory per row, then ratios.
#   dev/bench_llama.sh [TORCH_SCRIPT] [SHARD]        BENCH_STEPS (30), BENCH_TORCH (1)
# Ours trains as the baseline does, without clipping (--grad-clip 0; the update starts in the backward). The GPT-2
# shards are valid tokens for Llama 3's vocabulary (ids below 50257), and the baseline takes them modulo its own.
# MFU counts as train_gpt does (llmc/config.h's flops_per_token): 6 x the parameters a token meets in a GEMM (the
# tied wte once, as the LM head) + 12 L C T for attention, over the dense peak (989 TFLOP/s bf16 on H100/H200); in
# fp8 the four block linears' FLOPs count at the fp8 peak (1979) and the rest at bf16's.
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
for prec in bf16 fp8; do
    log="$OUT_DIR/ours_$prec.log"
    rm -rf "$OUT_DIR/run"
    ./train_gpt --model llama3.2-1b --batch-size $B --seq-len $T --total-batch-tokens $((B * T)) --steps "$STEPS" \
        --val-every 0 --sample-every 0 --precision "$prec" --train-data "$SHARD" --out-dir "$OUT_DIR/run" --save 0 \
        --warmup-steps 5 --grad-clip 0 >"$log" 2>&1 || { echo "ours $prec failed:"; tail -5 "$log"; }
    rows+=("ours_$prec:$prec:$log")
done

python3 - "$L" "$C" "$NH" "$KV" "$F" "$V" "$B" "$T" "$SKIP" "${rows[@]}" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "dev"))
from bench_table import measure  # noqa: E402 (the same parsing as dev/bench.sh's table)
L, C, NH, KV, F, V, B, T, skip = map(int, sys.argv[1:10])
PEAK_BF16, PEAK_FP8 = 989e12, 1979e12
QKV = (NH + 2 * KV) * (C // NH)
block = QKV * C + C * C + 2 * F * C + F * C           # the four block linears' weights
params = V * C + L * (block + 2 * C) + C              # tied: wte is the LM head too
flops = 6 * params + 12 * L * C * T                   # a token's training FLOPs (llmc/config.h's flops_per_token)

res = {}
for row in sys.argv[10:]:
    who, prec, log = row.split(":", 2)
    ms, tok, mem = measure("torch" if who == "torch" else "ours", log, B * T, skip)
    fp8 = 6 * L * block if prec == "fp8" else 0
    res[who] = (ms, tok, 100.0 * tok * (fp8 / PEAK_FP8 + (flops - fp8) / PEAK_BF16), mem)
print(f"Llama-3.2-1B shape: {params / 1e6:.0f}M parameters, B {B} x T {T}, {flops / 1e9:.2f} GFLOP a token")
print(f"{'who':10} {'ms/step':>9} {'tok/s':>10} {'MFU%':>6} {'peak GB':>8}")
for who, (ms, tok, mfu, mem) in res.items():
    print(f"{who:10} {ms:9.2f} {tok:10.0f} {mfu:6.1f} {mem:8.1f}")
for who, base in (("ours_bf16", "torch"), ("ours_fp8", "torch"), ("ours_fp8", "ours_bf16")):
    a, b = res.get(who), res.get(base)
    if a and b:
        print(f"{who + ' / ' + base:22} tokens/s {a[1] / b[1]:6.3f}x  peak memory {a[3] / b[3]:6.3f}x")
EOF
