#!/usr/bin/env bash
# test_hf.sh: ./hf_model from the outside, on models the CPU trainer wrote (GPT-2, and Llama: llama-tiny).
# - export -> import gives the trainer's model file back byte for byte, from one file and from shards; bf16 imports;
# - the exported GPT-2 folder holds GPT-2's tokenizer files byte-equal and a GPT-2 config.json; the Llama folder a
#   Llama config.json and no tokenizer;
# - an imported model starts ./train_gpt_cpu --init-from (a Llama with the options the import prints);
# - nothing is overwritten without --force; bad arguments and malformed files stop it with one line naming the tool
#   and the problem, and a non-zero status.
# (test/test_hf.c checks the mapping itself, bf16 rounding and every malformed input in detail.)
# Needs ./hf_model and ./train_gpt_cpu (make) and the default shards (make data): without them this FAILS.
set -u
cd "$(dirname "$0")/.."
source test/cli_lib.sh
HF=./hf_model
TRAIN=./train_gpt_cpu
TINY=(--depth 2 --width 64 --heads 4 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --precision fp32
      --warmup-steps 1 --val-batches 2 --sample-every 0 --train-data "$TRAIN_GLOB" --val-data "$VAL_GLOB")

require_inputs hf_inputs "$HF" "$TRAIN"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_error NAME TEXT ARGS...: ./hf_model ARGS exits non-zero with exactly one line on stderr, "[hf_model] error: "
# and containing TEXT.
expect_error() {
    local name=$1 want=$2
    shift 2
    if fails_with_one_line "$want" "[hf_model] error: " "$HF" "$@"; then
        pass "$name"
    else
        fail_check "$name" "status $RC, want one line '[hf_model] error: ...$want...'; stderr: $ERR"
    fi
}

# run NAME ARGS...: ./hf_model ARGS must succeed.
run() {
    local name=$1 out rc
    shift
    out=$(timeout "$RUN_TIMEOUT" "$HF" "$@" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then pass "$name"; else fail_check "$name" "status $rc: $out"; fi
    return "$rc"
}

# --- command line -----------------------------------------------------------------------------------------
if "$HF" --help | grep -q 'export MODEL.bin OUT_DIR'; then pass hf_cli_help; else fail_check hf_cli_help "no usage"; fi
expect_error hf_cli_unknown_command "unknown command 'convert'" convert a b
expect_error hf_cli_export_needs_two "export needs MODEL.bin and OUT_DIR" export "$tmp/x.bin"
expect_error hf_cli_bad_dtype "--dtype: 'fp16' is not one of fp32, bf16" export a b --dtype fp16
expect_error hf_cli_bad_shard_size "--max-shard-mb: '0' is not an integer" export a b --max-shard-mb 0
expect_error hf_cli_unknown_option "unknown option '--out'" import a b --out c
expect_error hf_cli_import_export_option "import takes only --force" import a b --dtype bf16
expect_error hf_cli_missing_model "$tmp/none.bin" export "$tmp/none.bin" "$tmp/none_out"
[ ! -e "$tmp/none_out" ] && pass hf_cli_missing_model_writes_nothing ||
    fail_check hf_cli_missing_model_writes_nothing "$tmp/none_out was made"

# --- a model the trainer wrote ----------------------------------------------------------------------------
if ! timeout "$RUN_TIMEOUT" "$TRAIN" "${TINY[@]}" --steps 2 --out-dir "$tmp/run" >"$tmp/run.out" 2>&1; then
    fail_check hf_train_tiny "$(tail -3 "$tmp/run.out")"
    exit 1
fi
model=$tmp/run/model_00000002.bin

if run hf_export_fp32 export "$model" "$tmp/hf"; then
    if cmp -s "$tmp/hf/vocab.json" data/gpt2/encoder.json && cmp -s "$tmp/hf/merges.txt" data/gpt2/vocab.bpe; then
        pass hf_export_tokenizer_files
    else
        fail_check hf_export_tokenizer_files "vocab.json or merges.txt differs from data/gpt2"
    fi
    missing=""
    for field in '"model_type": "gpt2"' '"GPT2LMHeadModel"' '"n_embd": 64' '"n_layer": 2' '"n_head": 4' \
        '"n_positions": 64' '"n_ctx": 64' '"vocab_size": 50257' '"activation_function": "gelu_new"' \
        '"layer_norm_epsilon": 1e-05' '"torch_dtype": "float32"' '"bos_token_id": 50256' '"eos_token_id": 50256'; do
        grep -qF -- "$field" "$tmp/hf/config.json" || missing="$missing $field"
    done
    [ -z "$missing" ] && pass hf_export_config_fields || fail_check hf_export_config_fields "config.json lacks$missing"
    for f in model.safetensors generation_config.json tokenizer_config.json; do
        [ -s "$tmp/hf/$f" ] || fail_check hf_export_files "no $f"
    done

    sums=$(cd "$tmp/hf" && md5sum ./*)
    expect_error hf_export_refuses_nonempty "'$tmp/hf' exists and is not empty; pass --force" export "$model" "$tmp/hf"
    [ "$sums" = "$(cd "$tmp/hf" && md5sum ./*)" ] && pass hf_export_refusal_keeps_files ||
        fail_check hf_export_refusal_keeps_files "the refused export changed $tmp/hf"
    run hf_export_force export "$model" "$tmp/hf" --force

    if run hf_import import "$tmp/hf" "$tmp/back.bin"; then
        cmp -s "$model" "$tmp/back.bin" && pass hf_round_trip_identical ||
            fail_check hf_round_trip_identical "the imported model differs from the trainer's $model"
        expect_error hf_import_refuses_overwrite "'$tmp/back.bin' exists; pass --force" import "$tmp/hf" "$tmp/back.bin"
        run hf_import_force import "$tmp/hf" "$tmp/back.bin" --force
        # the imported model starts a run, as a Hugging Face model would
        if timeout "$RUN_TIMEOUT" "$TRAIN" "${TINY[@]}" --steps 2 --init-from "$tmp/back.bin" --out-dir "$tmp/ft" \
            >"$tmp/ft.out" 2>&1 && grep -q "initialized from model file '$tmp/back.bin'" "$tmp/ft.out"; then
            pass hf_imported_model_trains
        else
            fail_check hf_imported_model_trains "$(tail -3 "$tmp/ft.out")"
        fi
    fi
fi

if run hf_export_sharded export "$model" "$tmp/hf_sharded" --max-shard-mb 1; then
    n=$(ls "$tmp/hf_sharded"/model-*-of-*.safetensors 2>/dev/null | wc -l)
    if [ "$n" -ge 2 ] && [ -s "$tmp/hf_sharded/model.safetensors.index.json" ] &&
        [ ! -e "$tmp/hf_sharded/model.safetensors" ]; then
        pass hf_export_sharded_files
    else
        fail_check hf_export_sharded_files "$n shards; $(ls "$tmp/hf_sharded")"
    fi
    run hf_import_sharded import "$tmp/hf_sharded" "$tmp/back_sharded.bin" &&
        { cmp -s "$model" "$tmp/back_sharded.bin" && pass hf_sharded_round_trip_identical ||
            fail_check hf_sharded_round_trip_identical "the model imported from shards differs from $model"; }
fi

if run hf_export_bf16 export "$model" "$tmp/hf_bf16" --dtype bf16; then
    grep -qF '"torch_dtype": "bfloat16"' "$tmp/hf_bf16/config.json" && pass hf_export_bf16_dtype ||
        fail_check hf_export_bf16_dtype "config.json does not say bfloat16"
    if run hf_import_bf16 import "$tmp/hf_bf16" "$tmp/back_bf16.bin"; then
        [ "$(stat -c %s "$tmp/back_bf16.bin")" = "$(stat -c %s "$model")" ] && ! cmp -s "$model" "$tmp/back_bf16.bin" &&
            pass hf_bf16_import_is_rounded || fail_check hf_bf16_import_is_rounded "size differs or nothing was rounded"
    fi
fi

# --- a Llama the trainer wrote ------------------------------------------------------------------------------
LLAMA=(--model llama-tiny --seq-len 16 --batch-size 1 --total-batch-tokens 16 --precision fp32 --warmup-steps 1
       --val-batches 1 --sample-every 0 --train-data "$TRAIN_GLOB" --val-data "$VAL_GLOB")
if ! timeout "$RUN_TIMEOUT" "$TRAIN" "${LLAMA[@]}" --steps 1 --out-dir "$tmp/lrun" >"$tmp/lrun.out" 2>&1; then
    fail_check hf_llama_train_tiny "$(tail -3 "$tmp/lrun.out")"
    exit 1
fi
lmodel=$tmp/lrun/model_00000001.bin
expect_error hf_llama_export_refuses_vocab_dir "--vocab-dir: a Llama export carries no tokenizer" \
    export "$lmodel" "$tmp/lhf" --vocab-dir data/gpt2
if run hf_llama_export export "$lmodel" "$tmp/lhf"; then
    missing=""
    for field in '"model_type": "llama"' '"LlamaForCausalLM"' '"hidden_size": 64' '"num_hidden_layers": 2' \
        '"num_attention_heads": 4' '"num_key_value_heads": 2' '"head_dim": 16' '"intermediate_size": 192' \
        '"vocab_size": 50257' '"max_position_embeddings": 8192' '"rope_theta": 500000.0' '"rope_type": "llama3"' \
        '"factor": 8.0' '"original_max_position_embeddings": 8192' '"rms_norm_eps": 1e-05' \
        '"tie_word_embeddings": false' '"torch_dtype": "float32"'; do
        grep -qF -- "$field" "$tmp/lhf/config.json" || missing="$missing $field"
    done
    [ -z "$missing" ] && pass hf_llama_config_fields || fail_check hf_llama_config_fields "config.json lacks$missing"
    [ ! -e "$tmp/lhf/vocab.json" ] && [ ! -e "$tmp/lhf/tokenizer_config.json" ] && pass hf_llama_no_tokenizer ||
        fail_check hf_llama_no_tokenizer "a Llama export wrote tokenizer files: $(ls "$tmp/lhf")"
    if out=$(timeout "$RUN_TIMEOUT" "$HF" import "$tmp/lhf" "$tmp/lback.bin" 2>&1); then
        cmp -s "$lmodel" "$tmp/lback.bin" && pass hf_llama_round_trip_identical ||
            fail_check hf_llama_round_trip_identical "the imported Llama differs from the trainer's $lmodel"
        # the options the import prints build the model it wrote
        pattern='s/^train from it with: --init-from [^ ]* \(.*\) --seq-len <= [0-9]*$/\1/p'
        read -r -a opts <<<"$(sed -n "$pattern" <<<"$out")"
        if [ "${#opts[@]}" -gt 0 ] && timeout "$RUN_TIMEOUT" "$TRAIN" "${opts[@]}" --seq-len 16 --batch-size 1 \
            --total-batch-tokens 16 --precision fp32 --warmup-steps 0 --val-batches 1 --sample-every 0 \
            --train-data "$TRAIN_GLOB" --val-data "$VAL_GLOB" --steps 1 --init-from "$tmp/lback.bin" \
            --out-dir "$tmp/lft" >"$tmp/lft.out" 2>&1 &&
            grep -q "initialized from model file '$tmp/lback.bin'" "$tmp/lft.out"; then
            pass hf_llama_imported_model_trains
        else
            fail_check hf_llama_imported_model_trains "options '${opts[*]}': $(tail -3 "$tmp/lft.out" 2>/dev/null)"
        fi
    else
        fail_check hf_llama_import "$out"
    fi
fi
if run hf_llama_export_sharded export "$lmodel" "$tmp/lhf_sharded" --max-shard-mb 1; then
    run hf_llama_import_sharded import "$tmp/lhf_sharded" "$tmp/lback_sharded.bin" &&
        { cmp -s "$lmodel" "$tmp/lback_sharded.bin" && pass hf_llama_sharded_round_trip_identical ||
            fail_check hf_llama_sharded_round_trip_identical "the Llama imported from shards differs from $lmodel"; }
fi

# --- malformed folders --------------------------------------------------------------------------------------
mkdir -p "$tmp/trunc"
cp "$tmp/hf/config.json" "$tmp/trunc/"
head -c 100 "$tmp/hf/model.safetensors" >"$tmp/trunc/model.safetensors"
expect_error hf_import_truncated_safetensors \
    "'$tmp/trunc/model.safetensors' is not a valid safetensors file: its header length" \
    import "$tmp/trunc" "$tmp/never.bin"
mkdir -p "$tmp/noconfig"
cp "$tmp/hf/model.safetensors" "$tmp/noconfig/"
expect_error hf_import_without_config "cannot open '$tmp/noconfig/config.json'" import "$tmp/noconfig" "$tmp/never.bin"
[ ! -e "$tmp/never.bin" ] && pass hf_refused_imports_write_nothing ||
    fail_check hf_refused_imports_write_nothing "$tmp/never.bin was written"
exit 0
