#!/usr/bin/env bash
# test_cli.sh: ./train_gpt_cpu from the outside, as a user meets it.
# - bad options and bad shards (missing, truncated, wrong magic, a token past the vocabulary) stop it with a
#   non-zero status and one line naming the option or the file, before it creates anything;
# - a folder holding a run is refused without --resume 1 and left unchanged; a checkpoint or model file of
#   another shape is refused;
# - exact resume: a tiny model trained 6 steps with a checkpoint at 3, against a copy cut back to checkpoint 3
#   and resumed: the same loss lines and byte-identical final model and state files;
# - the same in fp8 (the FP8 emulation and its amax history), which differs from fp32; a checkpoint continues in
#   another precision with a line saying so; an fp8 checkpoint refuses other FP8 settings;
# - preemption: SIGTERM after step 1 stops the run with a checkpoint and status 75; the same command with
#   --resume auto finishes it, with the uninterrupted run's final files (test_trainer signals at many more points);
# - Llama (--model llama-tiny: grouped-query attention, its own LM head, llama3 rope scaling): 4 steps with the loss
#   going down and a checkpoint at 2, resumed from 2 to the same losses and byte-identical step-4 files; its model file
#   refused by a GPT-2 of the same shape (--init-from), a Llama option refused by GPT-2;
# - metrics.jsonl and loss.svg: one JSON record a step and a validation, with log.txt's losses
#   (test/metrics_check.mjs, node's JSON parser), a picture that shows the last validation; a run interrupted after
#   step 13 with its last checkpoint at 10 and resumed holds each step once, with the uninterrupted run's values,
#   and the same picture.
# - --eval-data: bad ones refused before anything is made; a run scores the file at step 0, every N and the last step.
# Needs ./train_gpt_cpu and ./tokenize (make) and the default shards (make data): without them this FAILS, it does
# not skip.
set -u
cd "$(dirname "$0")/.."
source test/cli_lib.sh
BIN=./train_gpt_cpu
TINY=(--depth 2 --width 64 --heads 4 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --precision fp32
      --warmup-steps 2 --val-batches 2 --sample-every 0 --train-data "$TRAIN_GLOB" --val-data "$VAL_GLOB")

require_inputs cli_inputs "$BIN" ./tokenize
first_shard=$(ls $TRAIN_GLOB | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


# train NAME OUT_DIR ARGS...: a run that must succeed; its console output goes to OUT_DIR.stdout.
train() {
    local name=$1 dir=$2 rc
    shift 2
    timeout "$RUN_TIMEOUT" "$BIN" "${TINY[@]}" --out-dir "$dir" "$@" >"$dir.stdout" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then pass "$name"; else fail_check "$name" "status $rc: $(tail -3 "$dir.stdout")"; fi
    return "$rc"
}

# --- options ----------------------------------------------------------------------------------------------
if "$BIN" --help | grep -q -- '--total-batch-tokens'; then pass cli_help; else fail_check cli_help "no option list"; fi
expect_error cli_out_of_range "--batch-size: 0 is out of range" "${TINY[@]}" --batch-size 0
expect_error cli_unknown_option "unknown option '--batchsize'" "${TINY[@]}" --batchsize 4
expect_error cli_missing_value "--steps needs a value" "${TINY[@]}" --steps
expect_error cli_bad_choice "--lr-schedule: 'cos' is not one of" "${TINY[@]}" --lr-schedule cos
expect_error cli_sp_transport_needs_sp "--sp-transport nccl moves sequence parallelism's ring and applies only with" \
    "${TINY[@]}" --sp-transport nccl
expect_error cli_not_a_number "--lr: 'fast' is not a valid number" "${TINY[@]}" --lr fast
expect_error cli_batch_divisibility "--total-batch-tokens 500 is not a multiple" "${TINY[@]}" --total-batch-tokens 500
expect_error cli_warmup "--warmup-steps 30 is more than --steps 10" "${TINY[@]}" --steps 10 --warmup-steps 30
# --tp 2 is a layout of 2 ranks: one process cannot hold it
expect_error cli_tp_needs_ranks "world size 1 is not divisible by tp x gtp = 2" "${TINY[@]}" --tp 2
# a multi-process launch of the one-process CPU build (torchrun's variables)
(export WORLD_SIZE=2 RANK=0 LOCAL_RANK=0
 expect_error cli_cpu_refuses_world_2 "this build runs as one process, but WORLD_SIZE=2" "${TINY[@]}")
expect_error cli_missing_init_from "$tmp/nothing.bin" "${TINY[@]}" --init-from "$tmp/nothing.bin"
# a vocabulary that is not GPT-2's is found before training, not at the first sample
mkdir -p "$tmp/vocab3"
printf '{"a": 0, "b": 1, "c": 2}' > "$tmp/vocab3/encoder.json"
expect_error cli_other_vocabulary "holds a vocabulary of 3 tokens, but the model's is 50257" "${TINY[@]}" \
    --sample-every 5 --sample-tokens 16 --tokenizer "$tmp/vocab3"
# --eval-data: refused before anything is made without its partner option or where it is not an eval file; a run
# scores it at step 0, every --eval-every steps and at the end, on the console and in log.txt and metrics.jsonl
expect_error cli_eval_every_alone "--eval-every 2 needs --eval-data" "${TINY[@]}" --eval-every 2
expect_error cli_eval_not_an_eval_file "not an eval file" "${TINY[@]}" --eval-data "$first_shard" --eval-every 2
printf '%s\n' '{"ctx": "The dog ran", "endings": ["into the house", "up", "away from the cat", "home"], "label": 2}' \
    '{"ctx": "She opened the door and", "endings": ["walked in", "sang", "closed it", "left"], "label": 0}' \
    > "$tmp/eval.jsonl"
if ./tokenize hellaswag "$tmp/eval.jsonl" "$tmp/eval.bin" >/dev/null &&
    train cli_eval_run "$tmp/eval_run" --steps 3 --warmup-steps 1 --val-every 0 --eval-data "$tmp/eval.bin" \
        --eval-every 2; then
    lines=$(grep -c '^eval | step [023] | acc [0-9.]* | acc_norm [0-9.]* | 2 examples | [0-9]* ms$' \
        "$tmp/eval_run.stdout")
    records=$(grep -c '^{"step":[023],"eval_acc":[0-9.e-]*,"eval_acc_norm":[0-9.e-]*,"eval_examples":2,' \
        "$tmp/eval_run/metrics.jsonl")
    machine=$(grep -c '^s:[023] eval:' "$tmp/eval_run/log.txt")
    if [ "$lines" -eq 3 ] && [ "$records" -eq 3 ] && [ "$machine" -eq 3 ]; then
        pass cli_eval_logged_at_0_every_and_last
    else
        fail_check cli_eval_logged_at_0_every_and_last "$lines console lines, $records metrics records, $machine" \
            "log.txt lines at steps 0, 2, 3; want 3 each"
    fi
fi

# README's CPU quick start, as printed there (into a scratch folder)
quick=$(awk '/^\.\/train_gpt_cpu /{p=1} p{print} p&&!/\\$/{exit}' README.md | tr -d '\\\n')
quick=${quick/--out-dir runs\/tiny/--out-dir $tmp/quick}
if [ -n "$quick" ] && [[ "$quick" == *"$tmp/quick"* ]] && timeout "$RUN_TIMEOUT" bash -c "$quick" >"$tmp/quick.out" 2>&1; then
    pass cli_readme_quick_start
else
    fail_check cli_readme_quick_start "'$quick' failed: $(tail -2 "$tmp/quick.out" 2>/dev/null)"
fi

# --- shards -----------------------------------------------------------------------------------------------
expect_error cli_no_shards "no shard matches '$tmp/none/*.bin'" "${TINY[@]}" --train-data "$tmp/none/*.bin"
mkdir -p "$tmp/trunc" "$tmp/magic" "$tmp/vocab"
head -c 3000 "$first_shard" >"$tmp/trunc/train_000.bin"
expect_error cli_truncated_shard "$tmp/trunc/train_000.bin" "${TINY[@]}" --train-data "$tmp/trunc/*.bin"
# a good shard with its magic, then one token, overwritten (little-endian): 12345 and 65535 (past 50257)
cp "$first_shard" "$tmp/magic/train_000.bin"
printf '\x39\x30\x00\x00' | dd of="$tmp/magic/train_000.bin" conv=notrunc status=none
cp "$first_shard" "$tmp/vocab/train_000.bin"
printf '\xff\xff' | dd of="$tmp/vocab/train_000.bin" bs=1 seek=3000 conv=notrunc status=none
expect_error cli_wrong_magic_shard "$tmp/magic/train_000.bin" "${TINY[@]}" --train-data "$tmp/magic/*.bin"
expect_error cli_token_past_vocab "$tmp/vocab/train_000.bin" "${TINY[@]}" --train-data "$tmp/vocab/*.bin"
expect_error cli_bad_val_shard "$tmp/vocab/train_000.bin" "${TINY[@]}" --val-data "$tmp/vocab/*.bin"

# --- exact resume -----------------------------------------------------------------------------------------
full=$tmp/full part=$tmp/part
if train cli_train_6_steps "$full" --steps 6 --checkpoint-every 3 --val-every 3; then
    mkdir -p "$part"
    cp "$full/model_00000003.bin" "$full/state_00000003.bin" "$part/"
    awk -F'[: ]' '/^s:/ && $2 <= 3' "$full/log.txt" >"$part/log.txt"
    if train cli_resume_from_3 "$part" --steps 6 --checkpoint-every 3 --val-every 3 --resume 1; then
        if diff <(grep '^s:' "$full/log.txt") <(grep '^s:' "$part/log.txt") >"$tmp/diff"; then
            pass cli_resume_same_losses
        else
            fail_check cli_resume_same_losses "$(head -5 "$tmp/diff")"
        fi
        if cmp -s "$full/model_00000006.bin" "$part/model_00000006.bin" &&
            cmp -s "$full/state_00000006.bin" "$part/state_00000006.bin"; then
            pass cli_resume_identical_files
        else
            fail_check cli_resume_identical_files "model or state of step 6 differs after resume"
        fi
    fi
    grep -q '^s:6 tel:' "$full/log.txt" && pass cli_log_val_line || fail_check cli_log_val_line "no s:6 tel: line"

    # --- preemption -----------------------------------------------------------------------------------------
    pre=$tmp/preempt
    pre_args=(--steps 6 --checkpoint-every 3 --val-every 3 --resume auto)
    "$BIN" "${TINY[@]}" --out-dir "$pre" "${pre_args[@]}" >"$pre.stdout" 2>&1 &
    pid=$!
    tenths=0 # waits at most RUN_TIMEOUT tenths of a second (a tenth of a run's limit) for the first step
    until grep -q '^step 1/6 | loss' "$pre.stdout" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null ||
        [ "$tenths" -ge "$RUN_TIMEOUT" ]; do
        sleep 0.1; tenths=$((tenths + 1))
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"; rc=$?
    stop_line=$(grep 'stopped by SIGTERM with a checkpoint' "$pre.stdout")
    stop_step=$(sed -n 's/^step \([0-9]*\)\/6 | stopped by SIGTERM.*/\1/p' <<<"$stop_line")
    if [ "$rc" -eq 75 ] && [ -n "$stop_step" ] && [ -e "$pre/state_0000000$stop_step.bin" ]; then
        pass cli_sigterm_stops_with_checkpoint
    else
        fail_check cli_sigterm_stops_with_checkpoint "status $rc (75 wanted): $(tail -2 "$pre.stdout")"
    fi
    if timeout "$RUN_TIMEOUT" "$BIN" "${TINY[@]}" --out-dir "$pre" "${pre_args[@]}" >"$pre.stdout" 2>&1 &&
        cmp -s "$full/model_00000006.bin" "$pre/model_00000006.bin" &&
        cmp -s "$full/state_00000006.bin" "$pre/state_00000006.bin"; then
        pass cli_preempted_run_resumes_identically
    else
        fail_check cli_preempted_run_resumes_identically "the resumed run failed or its step-6 files differ: $(tail -2 "$pre.stdout")"
    fi

    # --- a folder that holds a run --------------------------------------------------------------------------
    sums=$(cd "$full" && md5sum ./*)
    err=$(timeout "$RUN_TIMEOUT" "$BIN" "${TINY[@]}" --out-dir "$full" --steps 6 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -ne 0 ] && grep -qF "holds checkpoints of an earlier run; pass --resume 1" <<<"$err" &&
        [ "$sums" = "$(cd "$full" && md5sum ./*)" ]; then
        pass cli_refuse_overwrite
    else
        fail_check cli_refuse_overwrite "status $rc, stderr: $err"
    fi
    expect_error cli_resume_other_config "was written with channels 64 but this run has channels 128" \
        "${TINY[@]}" --width 128 --steps 6 --resume 1 --out-dir "$full"
    # the training data is part of the run: other shards are refused, the same shards in another folder resume
    mkdir -p "$tmp/moved" "$tmp/renamed" "$tmp/moved_run"
    cp $TRAIN_GLOB "$tmp/moved/"
    cp "$first_shard" "$tmp/renamed/other_train_000000.bin"
    cp "$full/model_00000003.bin" "$full/state_00000003.bin" "$tmp/moved_run/"
    expect_error cli_resume_other_data "was written with --train-data shards 1 shard(s)" \
        "${TINY[@]}" --steps 6 --checkpoint-every 3 --resume 1 --out-dir "$tmp/moved_run" \
        --train-data "$tmp/renamed/*.bin"
    if train cli_resume_moved_data "$tmp/moved_run" --steps 6 --checkpoint-every 3 --val-every 3 --resume 1 \
        --train-data "$tmp/moved/*.bin" && cmp -s "$full/state_00000006.bin" "$tmp/moved_run/state_00000006.bin"; then
        pass cli_resume_moved_data_identical
    else
        fail_check cli_resume_moved_data_identical "the run resumed on moved shards differs from the uninterrupted one"
    fi
    expect_error cli_init_from_other_shape "has layers 2 but this run's model has 3" \
        "${TINY[@]}" --depth 3 --init-from "$full/model_00000006.bin"

    # --- fp8 --------------------------------------------------------------------------------------------------
    f8=$tmp/fp8 p8=$tmp/fp8_part
    if train cli_fp8_train_6_steps "$f8" --precision fp8 --steps 6 --checkpoint-every 3 --val-every 3; then
        if diff -q <(grep '^s:' "$full/log.txt") <(grep '^s:' "$f8/log.txt") >/dev/null; then
            fail_check cli_fp8_is_not_fp32 "the fp8 run logged the fp32 run's losses: no FP8 rounding happened"
        else
            pass cli_fp8_is_not_fp32
        fi
        mkdir -p "$p8"
        cp "$f8/model_00000003.bin" "$f8/state_00000003.bin" "$p8/"
        awk -F'[: ]' '/^s:/ && $2 <= 3' "$f8/log.txt" >"$p8/log.txt"
        if train cli_fp8_resume_from_3 "$p8" --precision fp8 --steps 6 --checkpoint-every 3 --val-every 3 \
            --resume 1; then
            if diff <(grep '^s:' "$f8/log.txt") <(grep '^s:' "$p8/log.txt") >"$tmp/diff" &&
                cmp -s "$f8/model_00000006.bin" "$p8/model_00000006.bin" &&
                cmp -s "$f8/state_00000006.bin" "$p8/state_00000006.bin"; then
                pass cli_fp8_resume_identical
            else
                fail_check cli_fp8_resume_identical "losses or the files of step 6 differ after resume: $(head -3 "$tmp/diff")"
            fi
        fi
        expect_error cli_fp8_settings_must_match "was written with --fp8-amax-history 16 but this run has --fp8-amax-history 8" \
            "${TINY[@]}" --precision fp8 --fp8-amax-history 8 --steps 6 --resume 1 --out-dir "$f8"
        # another precision continues a checkpoint, and says so
        for pair in "fp8:fp32:$f8" "fp32:fp8:$full"; do
            from=${pair%%:*} rest=${pair#*:}
            to=${rest%%:*} src=${rest#*:}
            dir=$tmp/${from}_to_$to
            mkdir -p "$dir"
            cp "$src/model_00000003.bin" "$src/state_00000003.bin" "$dir/"
            if train "cli_${from}_continues_in_$to" "$dir" --precision "$to" --steps 6 --val-every 3 --resume 1; then
                if grep -q "the checkpoint was written in $from and continues in $to" "$dir.stdout"; then
                    pass "cli_${from}_to_${to}_says_so"
                else
                    fail_check "cli_${from}_to_${to}_says_so" "no line on the change of precision"
                fi
            fi
        done
    fi
fi

# --- Llama ------------------------------------------------------------------------------------------------
# llama-tiny is TINY's shape (2 x 64, 4 heads, GPT-2's vocabulary) with Llama's architecture; smaller batches than
# TINY's keep it cheap under the sanitizers.
LLAMA=(--model llama-tiny --seq-len 32 --batch-size 4 --total-batch-tokens 128 --precision fp32 --lr 3e-3
       --warmup-steps 1 --val-every 0 --sample-every 0 --checkpoint-every 2 --steps 4 --train-data "$TRAIN_GLOB")
lf=$tmp/llama lp=$tmp/llama_part
if timeout "$RUN_TIMEOUT" "$BIN" "${LLAMA[@]}" --out-dir "$lf" >"$lf.stdout" 2>&1 &&
    grep -q '^architecture llama: rmsnorm' "$lf.stdout"; then
    pass cli_llama_trains
    first=$(sed -n 's/^s:1 trl:\([0-9.]*\)$/\1/p' "$lf/log.txt") last=$(sed -n 's/^s:4 trl:\([0-9.]*\)$/\1/p' "$lf/log.txt")
    if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
        pass cli_llama_loss_goes_down
    else
        fail_check cli_llama_loss_goes_down "step 1 loss '$first', step 4 loss '$last'"
    fi
    mkdir -p "$lp"
    cp "$lf/model_00000002.bin" "$lf/state_00000002.bin" "$lp/"
    awk -F'[: ]' '/^s:/ && $2 <= 2' "$lf/log.txt" >"$lp/log.txt"
    if timeout "$RUN_TIMEOUT" "$BIN" "${LLAMA[@]}" --out-dir "$lp" --resume 1 >"$lp.stdout" 2>&1 &&
        diff -q <(grep '^s:' "$lf/log.txt") <(grep '^s:' "$lp/log.txt") >/dev/null &&
        cmp -s "$lf/model_00000004.bin" "$lp/model_00000004.bin" &&
        cmp -s "$lf/state_00000004.bin" "$lp/state_00000004.bin"; then
        pass cli_llama_resume_identical
    else
        fail_check cli_llama_resume_identical "the resumed run failed or differs: $(tail -2 "$lp.stdout")"
    fi
    expect_error cli_llama_model_into_gpt2 "has arch llama but this run's model has gpt2" \
        "${TINY[@]}" --init-from "$lf/model_00000004.bin"
else
    fail_check cli_llama_trains "status $?: $(tail -3 "$lf.stdout")"
fi
expect_error cli_gpt2_refuses_kv_heads "--arch gpt2 is llm.c's GPT-2, whose kv heads is 4, not 2" \
    "${TINY[@]}" --kv-heads 2

# --- metrics.jsonl and loss.svg ---------------------------------------------------------------------------
# metrics_ok NAME DIR [REFERENCE_DIR]: DIR's metrics of a 20-step run validated every 5 (test/metrics_check.mjs)
metrics_ok() {
    local name=$1 dir=$2 ref=${3:-} out
    if out=$(node test/metrics_check.mjs "$dir/metrics.jsonl" "$dir/log.txt" 20 5 ${ref:+"$ref/metrics.jsonl"} 2>&1); then
        pass "$name"
    else
        fail_check "$name" "$out"
    fi
}
m20=$tmp/metrics m13=$tmp/metrics_part
if ! command -v node >/dev/null; then
    fail_check cli_metrics_node "node not found (it reads metrics.jsonl); install Node.js 18+"
elif train cli_metrics_run_20_steps "$m20" --steps 20 --warmup-steps 1 --val-every 5 --checkpoint-every 10; then
    metrics_ok cli_metrics_one_record_per_step "$m20"
    if grep -q 'step 20: train loss [0-9.]*, validation loss' "$m20/loss.svg" && grep -q '</svg>' "$m20/loss.svg"; then
        pass cli_loss_svg_shows_last_validation
    else
        fail_check cli_loss_svg_shows_last_validation "$m20/loss.svg is missing or does not show step 20"
    fi
    # interrupted after step 13: checkpoint 10, the log and the metrics up to 13, a record cut short
    mkdir -p "$m13"
    cp "$m20/model_00000010.bin" "$m20/state_00000010.bin" "$m13/"
    awk -F'[: ]' '/^s:/ && $2 <= 13' "$m20/log.txt" >"$m13/log.txt"
    awk -F'[:,]' '$2 <= 13' "$m20/metrics.jsonl" >"$m13/metrics.jsonl"
    printf '{"step":14,"train_lo' >>"$m13/metrics.jsonl"
    if train cli_metrics_resume_from_10 "$m13" --steps 20 --warmup-steps 1 --val-every 5 --checkpoint-every 10 \
        --resume 1; then
        metrics_ok cli_metrics_resume_each_step_once "$m13" "$m20"
        if cmp -s <(sed "s|$m20|OUT|g" "$m20/loss.svg") <(sed "s|$m13|OUT|g" "$m13/loss.svg"); then
            pass cli_loss_svg_resume_same_picture
        else
            fail_check cli_loss_svg_resume_same_picture "the resumed run's loss.svg differs from the uninterrupted run's"
        fi
    fi
fi
exit 0
