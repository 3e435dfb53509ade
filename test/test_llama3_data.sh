#!/usr/bin/env bash
# test_llama3_data.sh: the default data in Llama 3's tokens (make data-llama3: data/brown_llama3/, uint32 shards,
# each document after <|begin_of_text|>) trained on by a Llama of Llama 3's vocabulary in ./train_gpt_cpu, the loss
# going down and the sample decoded by --tokenizer data/llama3/tokenizer.json; and the refusals where data, model and
# tokenizer disagree, each one line before any work: Llama 3 shards under GPT-2's vocabulary, a --tokenizer of
# another vocabulary than the model's (both ways). Needs ./train_gpt_cpu, ./tokenize and make data-llama3's files;
# missing, it is a failure, not a skip.
set -u
cd "$(dirname "$0")/.."
source test/cli_lib.sh
BIN=./train_gpt_cpu
LLAMA3=data/llama3/tokenizer.json
L3_TRAIN='data/brown_llama3/brown_llama3_train_*.bin'
require_inputs llama3_data_inputs "$BIN" ./tokenize
if [ ! -f $LLAMA3 ] || [ -z "$(ls $L3_TRAIN 2>/dev/null)" ]; then
    fail_check llama3_data_inputs "$LLAMA3 or $L3_TRAIN is missing; run make data-llama3"; exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the shard: llm.c's Llama 3 header (magic 20240801, version 7), the first document's ids after <|begin_of_text|>
shard=$(ls $L3_TRAIN | head -1)
header=$(od -A n -t d4 -N 8 "$shard" | tr -s ' ' ' ' | sed 's/^ //; s/ $//')
first=$(od -A n -t u4 -N 4 -j 1024 "$shard" | tr -d ' ')
if [ "$header" = "20240801 7" ] && [ "$first" = 128000 ]; then
    pass llama3_data_shard_format
else
    fail_check llama3_data_shard_format "'$shard' header '$header' (want 20240801 7), first id '$first' (want 128000)"
fi

# A Llama of llama-tiny's shape with Llama 3's 128256 tokens, 4 steps on the Llama 3 shards: the loss goes down, and
# the step-4 sample decodes with Llama 3's tokenizer.json.
LLAMA=(--model llama-tiny --vocab-size 128256 --seq-len 32 --batch-size 4 --total-batch-tokens 128 --precision fp32
       --lr 3e-3 --warmup-steps 1 --val-every 0 --checkpoint-every 0 --steps 4 --train-data "$L3_TRAIN")
run=$tmp/run
if timeout "$RUN_TIMEOUT" "$BIN" "${LLAMA[@]}" --sample-every 4 --sample-tokens 8 --tokenizer $LLAMA3 \
    --out-dir "$run" >"$run.stdout" 2>&1; then
    pass llama3_data_trains
    first=$(sed -n 's/^s:1 trl:\([0-9.]*\)$/\1/p' "$run/log.txt") last=$(sed -n 's/^s:4 trl:\([0-9.]*\)$/\1/p' "$run/log.txt")
    if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }'; then
        pass llama3_data_loss_goes_down
    else
        fail_check llama3_data_loss_goes_down "step 1 loss '$first', step 4 loss '$last'"
    fi
    if grep -q '^step 4/4 | sample:$' "$run.stdout"; then
        pass llama3_data_sample
    else
        fail_check llama3_data_sample "no sample at step 4: $(tail -3 "$run.stdout")"
    fi
else
    fail_check llama3_data_trains "status $?: $(tail -3 "$run.stdout")"
fi

GPT2_TINY=(--depth 1 --width 64 --heads 4 --seq-len 32 --batch-size 4 --total-batch-tokens 128 --precision fp32
           --warmup-steps 1 --val-every 0 --steps 1)
expect_error llama3_data_refused_by_gpt2_vocab "is 128000, outside the model's vocabulary of 50257" \
    "${GPT2_TINY[@]}" --sample-every 0 --train-data "$L3_TRAIN"
expect_error llama3_tokenizer_refused_by_gpt2_model \
    "--tokenizer '$LLAMA3' holds a vocabulary of 128256 tokens, but the model's is 50257" \
    "${GPT2_TINY[@]}" --sample-every 1 --sample-tokens 4 --tokenizer $LLAMA3 --train-data "$TRAIN_GLOB"
expect_error gpt2_tokenizer_refused_by_llama3_model \
    "--tokenizer 'data/gpt2' holds a vocabulary of 50257 tokens, but the model's is 128256" \
    "${LLAMA[@]}" --sample-every 1 --sample-tokens 4 --tokenizer data/gpt2
