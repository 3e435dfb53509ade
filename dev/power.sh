#!/usr/bin/env bash
# Power and clocks while training: nvidia-smi sampled every 250 ms during a 30-step bf16 run of each model, averaged
# over the samples of the last 60% (the training steps), with the throttle reasons seen (0x4: SW power cap).
#   dev/power.sh [MODEL:BATCH:KEEP_GELU_LAYERS ...]      (default d12:32:12 d24:16:24 d48:8:12)
set -euo pipefail
cd "$(dirname "$0")/.."
SPECS=("$@")
[ ${#SPECS[@]} -gt 0 ] || SPECS=(d12:32:12 d24:16:24 d48:8:12)
SHARD=${SHARD:-$(ls data/brown/brown_train_*.bin | head -1)}
export NCCL_NVLS_ENABLE=0
make -j"$(nproc)" train_gpt >/tmp/power_build.log 2>&1 || { tail -20 /tmp/power_build.log; echo "build failed"; exit 1; }
nvidia-smi --query-gpu=power.limit,clocks.max.sm --format=csv
for spec in "${SPECS[@]}"; do
    IFS=: read -r model batch keep <<<"$spec"
    nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader,nounits \
        -lms 250 > "/tmp/power_$model.csv" &
    smi=$!
    rm -rf /tmp/power_run
    ./train_gpt --model "$model" --batch-size "$batch" --seq-len 1024 --total-batch-tokens $((batch * 1024)) \
        --steps 30 --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD" --out-dir /tmp/power_run \
        --save 0 --warmup-steps 5 --keep-gelu-layers "$keep" > "/tmp/power_$model.log" 2>&1
    kill $smi
    n=$(wc -l < "/tmp/power_$model.csv")
    tail -n $((n * 6 / 10)) "/tmp/power_$model.csv" | awk -F', ' -v m="$model" '{c += $1; p += $2; k++; r[$3]++}
        END {printf "%s: SM clock %.0f MHz, power %.0f W (%d samples); throttle reasons:", m, c / k, p / k, k;
             for (x in r) printf " %s x%d", x, r[x]; print ""}'
done
