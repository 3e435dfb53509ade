#!/usr/bin/env bash
# Multi-GPU tests (make mgpu-test), on a machine with 2 or more GPUs. PASS/FAIL/SKIP lines, a parity table, and
# last a summary line "N passed, N failed, N skipped"; non-zero exit on any failure.
# 1. parity (fp32, bf16, fp8): a small model (2 layers, width 256, 4 heads of 64: TP=4 splits the heads and the
#    padded vocabulary 50304), 20 steps with the same global batch and seed on one GPU and on each parallel layout
#    of the LAYOUTS table that this machine has the GPUs for (the others print SKIP), compared by
#    test/bin/compare_runs: the train loss and the gradient norm of every step, the settings, and every final weight
#    tensor (see its header: the key biases are held to AdamW's sign-flip bound, other elements to WEIGHT_TOL but for
#    a stray fraction). tp2_head_chunks: TP=2 with the LM head in chunks of a few rows (1 MiB of logits), each chunk's
#    classifier statistics exchanged over the group and its chunks run between the forward chunks' final norms.
#    Layouts run under mpirun where it exists, else with torchrun-style variables; DP=2, TP=2 and TP=2+SP over
#    the ring of NCCL send/recv run once more with those variables over TCP with NCCL_P2P_DISABLE=1
#    NCCL_SHM_DISABLE=1 (the socket transport, as between nodes). Each layout starts from the one-GPU run's GEMM algorithm choices (see run_layout).
#    llama: a Llama (llama-tiny at width 512, 8 query heads in 4 key/value groups, MLP 512, untied) against its own
#    one-GPU run, judged alike: the layouts of LLAMA_LAYOUTS (DP=2 + ZeRO-1, TP=2, TP=2+SP, GTP=2 with its gathers
#    over the copy engines and over NCCL, which in fp8 gathers FP8 codes; with 4 GPUs TP=4, one key/value head a
#    rank, DP=2 x TP=2, TP=2 x GTP=2, GTP=4), a TP=2 checkpoint resumed on one GPU and on GTP=2 (fp32, within the
#    parity tolerances) and a TP=2+SP one resumed on TP=2+SP (bf16, bit-exact).
#    Tolerances (relative; weights relative to the tensor's largest element):
#    fp32: loss, norm and weights 1e-5 (the multi-GPU work's requirement). Only the summation order differs from one GPU.
#      Stray fraction 1e-1: accumulating the same 1024 tokens in other micro-batch orders (the CPU build, B 4 vs
#      2 vs 1, which reorders the gradient sums as DP does) left 1e-6..2e-5 of a weight matrix's elements and up
#      to 2e-3 of a bias's beyond 1e-5 (all within the bound); half the batch instead (what a rank sees whose
#      gradients are not summed) put 99-100% of every tensor beyond it, the loss 4e-2 and the norm 0.29 off.
#      Tensor parallelism splits the K sum of the row-parallel GEMMs across ranks as well, and over sockets NCCL
#      sums in yet another order: measured on 2 x H200 (TP=2 over TCP), up to 1.8% of a bias vector beyond 1e-5
#      (37 of fcb's 2048, worst 7.3e-5, loss 1.2e-7), and over NVLink 6.3% in one run of two (129 of fcb's 2048,
#      max diff 2.7e-6, all within the bound; dev/results/mgpu_tests_2xh200_bec70db.txt): a bias moves from zero
#      by AdamW's steps of about lr, so its tolerance is at most 2e-7 (1e-5 of 20 steps of lr 1e-3) and those of
#      its elements whose gradient passed near zero take the step's sign from rounding. So 1e-1, still 10x below the
#      half-batch bug.
#    bf16: the weights the GEMMs read are rounded to 8 bits, so a master weight that differs in its last fp32 bit
#      may round the other way, and that perturbs the run as a whole (measured DP=2 vs one GPU, 2 x H200: loss
#      1.2e-5, weights beyond 1e-2 in several tensors, worst 6.1e-2 apart from the key biases). TP adds its own
#      bf16 roundings (partial sums reduced across ranks), of the kind that separates the GPU build from the CPU
#      reference (measured there: loss up to 2.7e-4, norm 2e-3). Loss 1e-3 (4x that, 40x below the half-batch
#      bug), norm 1e-2 (5x that; gradients summed twice are 1.0 off, not summed 0.3), weights 1e-2 with a stray
#      fraction 5e-2 (as the GPU-vs-CPU parity test; the half-batch bug puts 20-95% of every tensor but the
#      LayerNorm weights beyond 1e-2).
#    fp8: FP8 rounds every GEMM operand to 3 (E4M3) or 2 (E5M2) mantissa bits, so a last-bit difference that moves
#      a value across a rounding boundary changes it by up to 2^-4 (2^-3), and the runs drift apart far faster than
#      in bf16. Measured with the CPU build's exact FP8 emulation (fp32 around the FP8 GEMMs, so no bf16 on top),
#      this test's model, micro-batches of 4 against 2 sequences (the gradient sums reordered as DP reorders them):
#      loss 1.1e-4, norm 2.4e-3, weights apart by up to 19% of a matrix's largest element and 82% of a bias's (all
#      within the sign-flip bound); beyond 1e-2: 2-14% of a matrix's elements, 9-47% of a bias's; beyond 5e-2: at
#      most 5.9% of any tensor (fp32 under the same reordering: loss 1e-7, weights 1.7e-4). Half the batch (the
#      not-summed bug) in fp8: loss 4.0e-2, norm 0.29; beyond 5e-2: 40-72% of every bias, 25-27% of the projection
#      matrices. So: loss 2e-3 (18x the reordering, room for the GPU's bf16 roundings; 20x below the bug), norm
#      2e-2 (8x; 15x below the bug), weights 5e-2 with a stray fraction 1.5e-1 (2.5x the reordering's 5.9%).
#      GTP in fp8 gathers the FP8 codes that each rank's update wrote with the scale all ranks share, the codes one
#      GPU would write from the same masters: against one GPU it changes what DP changes (its ranks read different
#      tokens, so the gradient sums are reordered), and its layouts are held to the same tolerances.
#    Validation (fp32, the val_ rows): DP=2 and GTP=2 must report the one-GPU run's validation loss (a pass is the same
#    tokens on every layout: llmc/dataloader.h, val_rows), with a --val-batches that leaves one rank a micro-batch of
#    padding only. Every run starts from the one-GPU fp32 run's final model with --lr 0 (AdamW's step is lr x (...) = 0
#    exactly), so all hold the same weights bit for bit; see VAL_LOSS_TOL_FP32. The same runs score a multiple-choice
#    file (--eval-data), each layout's completion loss sums and verdicts against the one-GPU run's (EVAL_TOL_FP32).
# 2. resume (bf16, under mpirun): TP=2, TP=2+SP (both ring transports), DP=2+ZeRO-1, GTP=2 (both gather transports, the
#    copy engines in fp8 too) and (4 GPUs) DP=2 x GTP=2+ZeRO-1 runs checkpointed at step 10 and resumed must end with the
#    same step-20 model file, byte for byte, as the same run straight through; across layouts (fp32): a GTP=2 checkpoint
#    resumed on one GPU and the other way round end within the fp32 parity tolerances. The update in backward (bf16,
#    --grad-clip 0, layer 1's AdamW in the backward and layer 0's after it: --update-after-layers 1): DP=2, DP=2+ZeRO-1,
#    TP=2 (the rest group's AdamW in two launches), TP=2+SP (both ring transports), GTP=2 (both gather transports; with
#    4 GPUs GTP=4 too) and (4 GPUs) DP=2 x GTP=2+ZeRO-1 end with the same step-20 model file as with
#    --update-in-backward 0; in fp8 (delayed) DP=2+ZeRO-1, TP=2+SP (both ring transports) and GTP=2 (both gather
#    transports) too (the weights' codes cast after the history there, written by AdamW after the backward, or cast from
#    the broadcast masters under ZeRO-1). ZeRO-1 (fp8, --grad-clip 0, the update after the backward): DP=2 and (4 GPUs)
#    DP=2 x GTP=2 end with the same step-20 model file as without it: the same updates, whoever owns them (every rank
#    sets every FP8 weight's scale). The ring's transports (bf16 and fp8, TP=2+SP and with 4 GPUs TP=4+SP): NCCL
#    send/recv (--sp-transport nccl) ends with the same step-20 model file as copy engines: the same chunks summed in
#    the same order, whatever moved them; and GTP's gathers (bf16 and fp8, GTP=2): NCCL's all-gather (--gtp-transport
#    nccl) against the copy engines' pulls, the same bytes in the same buffers. FP8 under SP over the ring (TP=2+SP over
#    both transports, a Llama's TP=2+SP, with 4 GPUs TP=4+SP): qkv's and fc's inputs gathered as E4M3 codes end with
#    the same step-20 model file as the activations gathered and cast on every rank (--sp-fp8-codes 0).
# 3. faults (2 ranks): kill -9 of one rank mid-run (rank 1, then rank 0): the other exits with status 1 within
#    FAULT_LIMIT_S with an error line naming the failure; SIGSTOP of rank 1 mid-run (alive but silent): rank 0
#    exits with status 1 and a line naming the collective it waited for; both again (rank 1) under TP=2 + SP, whose
#    collectives then wait for the dead rank's flags in the peer ring, over the ring of NCCL send/recv, whose
#    receives wait for it, and under GTP=2, whose copy-engine gathers wait for its ready flags and updates for its
#    read flags; a rank missing at start-up, a port in
#    use, a wrong world size: one line, non-zero exit; --tp greater than the model's key/value heads: one line on
#    every rank, each non-zero; GTP=2 ranks that each see their own GPU only: the gathers over NCCL, rank 0 saying
#    why, and the run trains; SIGUSR1 to mpirun -np 2
#    stops both ranks at one step with a checkpoint, and the same command finishes the run bit-exactly
#    (dev/preempt_check.sh).
# Logs stay in $LOG_DIR (default: a fresh temporary folder).
set -u
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
make -s train_gpt test/bin/compare_runs || { echo "FAIL build"; exit 1; }
export NCCL_NVLS_ENABLE=0
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
STEPS=20
LOSS_TOL_FP32=1e-5; NORM_TOL_FP32=1e-5; WEIGHT_TOL_FP32=1e-5; STRAY_FP32=1e-1
LOSS_TOL_BF16=1e-3; NORM_TOL_BF16=1e-2; WEIGHT_TOL_BF16=1e-2; STRAY_BF16=5e-2
LOSS_TOL_FP8=2e-3; NORM_TOL_FP8=2e-2; WEIGHT_TOL_FP8=5e-2; STRAY_FP8=1.5e-1
# The val_ rows' loss tolerance (training and validation losses; the norm and weights keep fp32's): with the same
# weights, micro-batches of the same shape and the one-GPU run's GEMM choices (run_layout), each token's loss is the
# same float on every layout, and only the order in which the micro-batches' sums are added (in double over the
# ranks) and the log's 6 decimals (~1.5e-7 relative at a loss near 7) remain: 1e-6. Another set of tokens is far
# off: --val-batches counted per rank, DP=2 validated 24 windows where one GPU took 12, which on this model after
# the parity run's 20 steps gives 8.292750 against 8.340819 (5.8e-3; the CPU build).
VAL_LOSS_TOL_FP32=1e-6
VAL_BATCHES=3 # x --batch-size 4 = 12 windows: 2 ranks take 4 each, then rank 0 the last 4 while rank 1 pads
VAL_LAYOUTS=("dp2|2|--zero 0" "gtp2|2|--gtp 2")
# The val_ rows also score a multiple-choice file (llmc/eval.h) of EVAL_EXAMPLES examples of 4 completions, short
# enough for --seq-len 64, so a forward holds one example: rank 0 scores one more than rank 1, which runs a padding
# forward (under GTP it must: the forward gathers weights). dev/eval_compare.py holds each layout's --eval-dump to the
# one-GPU run's: the same weights and forward shapes, so only the rows' places in the batch differ (1e-3 a token, as
# dev/eval_parity.sh's fp32), and the same verdicts but for near ties.
EVAL_EXAMPLES=101
EVAL_TOL_FP32=1e-3
FAULT_LIMIT_S=60
STUCK_TIMEOUT_S=10   # TRAIN_GPT_NCCL_TIMEOUT of the fault runs: a peer waits this long for a stopped rank
RUN_TIMEOUT_S=600
PORT_BASE=${PORT_BASE:-29600}
GEMM_ALGOS=gemm_algos.txt          # rank 0's GEMM choices (choose_gemm_algos in llmc/gemm_algos.cuh)
GEMM_ALGOS_GLOB='gemm_algos*.txt' # every rank's
# Global batch 1024 tokens = B 4 x T 64 x accum x DP: 4 micro-steps on one GPU or a TP group, 2 per DP=2 rank.
COMMON=(--depth 2 --width 256 --heads 4 --seq-len 64 --batch-size 4 --total-batch-tokens 1024 --steps "$STEPS"
        --warmup-steps 2 --lr 1e-3 --val-every 0 --sample-every 0 --checkpoint-every 0 --save 1 --log-every 1)

# name | ranks | options | precisions (empty: all); world = DP x GTP x TP, so DP = ranks / (TP x GTP). tp2_sp_b1:
# micro-batches of one sequence, which SP splits between the two ranks' tokens (tp2_sp: 4 sequences, 2 a rank).
# SP layouts run their collectives over the ring beside the GEMMs (--sp-overlap 1, the default), its hops by copy
# engines into peer memory (--sp-transport ce, the default) or by NCCL send/recv (the _p2p layouts), but tp2_sp_nccl
# (NCCL's collectives, as before the ring); each must say so on its first lines (path_check). tp2_sp_pieces: the
# ring's reduce-scatters make and send their products in 3 pieces (128 rows a rank, cut at 64-row FP8 tiles: 0, 64 and
# 64, an empty piece among them), and say so. GTP layouts gather the
# weights over the copy engines (--gtp-transport ce, the default: pulls from the peers' mapped weights behind ready
# and read flags), but the _nccl ones over NCCL's all-gather (--gtp-transport nccl), and must say which too.
# shellcheck disable=SC2034 # read through layout_sweep's name reference
LAYOUTS=(
    "dp2|2|--zero 0|"
    "dp2_zero1|2|--zero 1|"
    "tp2|2|--tp 2|"
    "tp2_head_chunks|2|--tp 2 --logits-mib 1|"
    "tp2_sp|2|--tp 2 --sequence-parallel 1|"
    "tp2_sp_b1|2|--tp 2 --sequence-parallel 1 --batch-size 1|"
    "tp2_sp_nccl|2|--tp 2 --sequence-parallel 1 --sp-overlap 0|"
    "tp2_sp_p2p|2|--tp 2 --sequence-parallel 1 --sp-transport nccl|"
    "tp2_sp_pieces|2|--tp 2 --sequence-parallel 1 --sp-ring-pieces 3|"
    "tp4|4|--tp 4|"
    "tp4_sp|4|--tp 4 --sequence-parallel 1|"
    "tp4_sp_p2p|4|--tp 4 --sequence-parallel 1 --sp-transport nccl|"
    "dp2_tp2_sp|4|--tp 2 --sequence-parallel 1|"
    "dp2_tp2|4|--tp 2|"
    "gtp2|2|--gtp 2|"
    "gtp2_prefetch1|2|--gtp 2 --gtp-prefetch 1|fp32"
    "gtp2_nccl|2|--gtp 2 --gtp-transport nccl|"
    "gtp4|4|--gtp 4|"
    "gtp4_nccl|4|--gtp 4 --gtp-transport nccl|"
    "dp2_gtp2|4|--gtp 2|"
    "dp2_gtp2_zero1_nccl|4|--gtp 2 --zero 1 --gtp-transport nccl|"
    "dp2_gtp2_zero1|4|--gtp 2 --zero 1|"
    "tp2_gtp2|4|--tp 2 --gtp 2|"
)
# layouts that also run over sockets with torchrun-style variables (the ring of NCCL send/recv runs wherever NCCL does)
TCP_LAYOUTS=(dp2 tp2 tp2_sp_p2p)

passed=0; failed=0; skipped=0; table=()
# MGPU_PARTS: which of the sections below run (parity, llama = a Llama on the layouts of LLAMA_LAYOUTS and its resumes,
# twins = resume, the update in backward, ZeRO-1 against plain DP and the SP ring's two transports, faults), so that
# runs under a time limit can take them in turns
MGPU_PARTS=${MGPU_PARTS:-parity llama twins faults}
# MGPU_LAYOUTS: an extended regular expression over the layouts' names (LAYOUTS, LLAMA_LAYOUTS, the validation rows'
# and the twins' tables, e.g. 'sp' for the sequence-parallel ones); only those it matches run in the parity, llama and
# twins parts (default: all; the one-GPU references and the cross-layout resumes always), so that one device call can
# take a part of them.
MGPU_LAYOUTS=${MGPU_LAYOUTS:-.}
part() { case " $MGPU_PARTS " in *" $1 "*) return 0 ;; esac; skip "$1: not in MGPU_PARTS ($MGPU_PARTS)"; return 1; }
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail_check() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP $1"; skipped=$((skipped + 1)); }
row() { table+=("$(printf '%-16s %-5s %10s %10s %10s %10s %10s  %s' "$@")"); }

# launch_env NAME NP PORT ARGS...: NP ranks with torchrun-style variables in the background; pids in PIDS.
launch_env() {
    local name=$1 np=$2 port=$3 r
    shift 3
    PIDS=()
    for r in $(seq 0 $((np - 1))); do
        RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            ./train_gpt "$@" > "$LOG_DIR/$name.rank$r.out" 2> "$LOG_DIR/$name.rank$r.err" &
        PIDS+=($!)
    done
}

# wait_all: waits for PIDS, all together at most RUN_TIMEOUT_S (then kills those left: a hang must not stall the
# tests); returns the first non-zero status. (PIDS are the trainers themselves, not a timeout wrapper, so that the
# fault tests can kill a rank.)
wait_all() {
    local deadline=$((SECONDS + RUN_TIMEOUT_S)) rc=0 p s left
    for p in "${PIDS[@]}"; do
        left=$((deadline - SECONDS))
        [ "$left" -ge 1 ] || left=1
        timeout "$left" tail --pid="$p" -f /dev/null || kill -9 "$p" 2>/dev/null
        wait "$p"; s=$?
        [ "$rc" -eq 0 ] && rc=$s
    done
    return "$rc"
}

# compare NAME PREC REF_DIR: compare_runs of $LOG_DIR/NAME against REF_DIR; counts its checks, adds a table row.
compare() {
    local name=$1 prec=$2 ref=$3 out rc p
    case $prec in
        fp32) p=("$LOSS_TOL_FP32" "$NORM_TOL_FP32" "$WEIGHT_TOL_FP32" "$STRAY_FP32") ;;
        bf16) p=("$LOSS_TOL_BF16" "$NORM_TOL_BF16" "$WEIGHT_TOL_BF16" "$STRAY_BF16") ;;
        fp8) p=("$LOSS_TOL_FP8" "$NORM_TOL_FP8" "$WEIGHT_TOL_FP8" "$STRAY_FP8") ;;
    esac
    case $name in val_*) p[0]=$VAL_LOSS_TOL_FP32 ;; esac
    out=$(test/bin/compare_runs "$ref" "$LOG_DIR/$name" "$STEPS" "${p[@]}" 2>&1); rc=$?
    passed=$((passed + $(grep -c '^PASS ' <<<"$out"))); failed=$((failed + $(grep -c '^FAIL ' <<<"$out")))
    grep -v '^PASS ' <<<"$out" | sed "s/^FAIL /FAIL $name: /" # a failed check names its run
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
        fail_check "$name" "compare_runs exited $rc without naming a failed check"
    fi
    # "parity DIR: loss L (step s) | norm N (step s) | weights W (tensor) | beyond tol K [| val V (step s)] | PASS"
    local line loss norm weights beyond val verdict
    line=$(grep '^parity ' <<<"$out" | sed 's/^parity [^:]*: //')
    loss=$(sed -n 's/^loss \([^ ]*\).*/\1/p' <<<"$line")
    norm=$(sed -n 's/.*| norm \([^ ]*\).*/\1/p' <<<"$line")
    weights=$(sed -n 's/.*| weights \([^ ]*\).*/\1/p' <<<"$line")
    beyond=$(sed -n 's/.*| beyond tol \([0-9]*\).*/\1/p' <<<"$line")
    val=$(sed -n 's/.*| val \([^ ]*\).*/\1/p' <<<"$line")
    verdict=PASS
    [ "$rc" -eq 0 ] || verdict=FAIL
    row "${name%_"$prec"}" "$prec" "${loss:--}" "${norm:--}" "${weights:--}" "${beyond:--}" "${val:--}" "$verdict"
}

# run_layout NAME NP PREC REF_DIR LAUNCH OPTIONS...: one layout run (LAUNCH: mpi or tcp), then its comparison.
# Its out dir first gets the one-GPU run's GEMM algorithm file, which the trainer loads before tuning: each run
# otherwise times cuBLASLt's candidates anew and may pick another algorithm for the same GEMM (timing noise), which
# sums in another order (split-K, tile order) and adds differences that have nothing to do with the layout. With
# the file, every GEMM whose shape matches the one-GPU run's (all of DP's; TP's unsplit ones) uses the same
# algorithm; TP's split GEMMs have new shapes and are tuned as usual.
run_layout() {
    local name=$1 np=$2 prec=$3 ref=$4 launch=$5 rc
    shift 5
    mkdir -p "$LOG_DIR/$name"
    if ! cp "$ref/$GEMM_ALGOS" "$LOG_DIR/$name/"; then
        fail_check "$name" "the one-GPU run wrote no $ref/$GEMM_ALGOS to share; see $ref.out"
        row "${name%_"$prec"}" "$prec" - - - - - FAILED; return
    fi
    local args=("${COMMON[@]}" --precision "$prec" --out-dir "$LOG_DIR/$name" "$@")
    if [ "$launch" = mpi ]; then
        timeout "$RUN_TIMEOUT_S" mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE \
            ./train_gpt "${args[@]}" > "$LOG_DIR/$name.out" 2>&1
        rc=$?
    else
        NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 launch_env "$name" "$np" "$PORT" "${args[@]}"
        wait_all; rc=$?
        PORT=$((PORT + 1))
    fi
    if [ "$rc" -ne 0 ]; then
        fail_check "$name" "exited $rc (see $LOG_DIR/$name.*)"
        row "${name%_"$prec"}" "$prec" - - - - - FAILED; return
    fi
    path_check "$name" "$launch" "$*"
    echo "== $name ($launch) against the one-GPU run"
    compare "$name" "$prec" "$ref"
}

# path_check NAME LAUNCH OPTIONS [OUT]: a layout printed the path it was meant to test (the GPUs of one machine map
# each other's memory, so no fallback is expected): with sequence parallelism its collectives' (NCCL where
# --sp-overlap 0 says so, the ring over NCCL send/recv where --sp-transport nccl does, else the ring over peer memory),
# with GTP (--gtp > 1) the weight gathers' (NCCL where --gtp-transport nccl says so, else the copy engines).
# OUT: rank 0's output (default: the layout's log, LAUNCH's way). Returns non-zero where a path was not the one meant.
path_check() {
    local name=$1 out=${4:-$LOG_DIR/$1.out} want rc=0
    [ -n "${4:-}" ] || [ "$2" = mpi ] || out="$LOG_DIR/$name.rank0.out"
    if [[ " $3 " == *" --sequence-parallel 1 "* ]]; then
        want="SP collectives: ring exchange over peer memory"
        [[ " $3 " == *" --sp-transport nccl "* ]] && want="SP collectives: ring exchange over NCCL send/recv"
        [[ " $3 " == *" --sp-overlap 0 "* ]] && want="SP collectives: NCCL (--sp-overlap 0)"
        path_expect "$name" "$want" "$out" 'SP collectives' || rc=1
        if [[ " $3 " =~ \ --sp-ring-pieces\ ([0-9]+)\  ]]; then
            path_expect "$name" "reduce-scatters in ${BASH_REMATCH[1]} pieces" "$out" 'SP collectives' || rc=1
        fi
    fi
    if [[ " $3 " =~ \ --gtp\ ([0-9]+)\  ]] && [ "${BASH_REMATCH[1]}" -gt 1 ]; then
        want="GTP weight gathers: copy engines over peer memory (--gtp-transport ce)"
        [[ " $3 " == *" --gtp-transport nccl "* ]] && want="GTP weight gathers: NCCL (--gtp-transport nccl)"
        path_expect "$name" "$want" "$out" 'GTP weight gathers' || rc=1
    fi
    return "$rc"
}
path_expect() { # NAME WANT OUT PREFIX
    if grep -qF "$2" "$3"; then
        pass "$1: $2"
    else
        fail_check "$1" "expected '$2' in $3, got: $(grep "$4" "$3")"
        return 1
    fi
}

# Resume, update-in-backward and ZeRO-1 twins, and resumes across layouts: defined here, run in section 2 (and the
# Llama's in section 1's llama part).
RESUME_AT=10
RESUME_LAYOUTS=("tp2|2|--tp 2" "tp2_sp|2|--tp 2 --sequence-parallel 1"
                "tp2_sp_p2p|2|--tp 2 --sequence-parallel 1 --sp-transport nccl" "dp2_zero1|2|--zero 1" "gtp2|2|--gtp 2"
                "gtp2_fp8|2|--gtp 2 --precision fp8" "gtp2_nccl|2|--gtp 2 --gtp-transport nccl"
                "dp2_gtp2_zero1|4|--gtp 2 --zero 1")
EARLY_LAYOUTS=("dp2|2|--zero 0" "dp2_zero1|2|--zero 1" "tp2|2|--tp 2" "tp2_sp|2|--tp 2 --sequence-parallel 1"
               "tp2_sp_p2p|2|--tp 2 --sequence-parallel 1 --sp-transport nccl" "gtp2|2|--gtp 2"
               "dp2_gtp2_zero1|4|--gtp 2 --zero 1" "dp2_zero1_fp8|2|--zero 1 --precision fp8"
               "tp2_sp_fp8|2|--tp 2 --sequence-parallel 1 --precision fp8"
               "tp2_sp_p2p_fp8|2|--tp 2 --sequence-parallel 1 --sp-transport nccl --precision fp8"
               "gtp2_fp8|2|--gtp 2 --precision fp8"
               "gtp2_nccl|2|--gtp 2 --gtp-transport nccl"
               "gtp2_nccl_fp8|2|--gtp 2 --gtp-transport nccl --precision fp8" "gtp4|4|--gtp 4")
# ZeRO-1 against plain DP: without clipping (the norm over the owners' slices may differ in its last bits, and would
# change the clip factor) each parameter's update is the same arithmetic on the same summed gradient, so the models
# must match bit for bit. In fp8 after the backward plain DP's AdamW writes the FP8 codes itself, and ZeRO-1's ranks
# cast the masters the owners broadcast: the same codes and scales on every rank (a rank that owned none of a weight
# once kept its old scale).
ZERO_LAYOUTS=("dp2_fp8|2|--precision fp8" "dp2_gtp2_fp8|4|--gtp 2 --precision fp8")
# NCCL against the copy engines (the second run takes the first one's GEMM choices): SP's ring hops by NCCL
# send/recv (--sp-transport nccl), GTP's weight gathers by NCCL's all-gather (--gtp-transport nccl).
TRANSPORT_LAYOUTS=("tp2_sp|2|--tp 2 --sequence-parallel 1" "tp2_sp_fp8|2|--tp 2 --sequence-parallel 1 --precision fp8"
                   "tp2_sp_pieces|2|--tp 2 --sequence-parallel 1 --sp-ring-pieces 3"
                   "tp4_sp|4|--tp 4 --sequence-parallel 1" "gtp2|2|--gtp 2" "gtp2_fp8|2|--gtp 2 --precision fp8")
# FP8 under SP over the ring, delayed scaling: qkv's and fc's inputs gathered as E4M3 codes (each rank casting its own
# tokens, the default) against the activations gathered and every token cast on every rank (--sp-fp8-codes 0; the
# second run takes the first one's GEMM choices): the same codes (one scale from the history on every rank), the same
# row-block GEMMs (a chunk's codes read where they land, at the alignment of the row block the other run casts), the
# same transposed copies and, once maxed over the world, the same amaxes. Over both transports, TP=4 too, and a Llama
# (its fc is [gate | up]) in the twins part below.
CODES_LAYOUTS=("tp2_sp_fp8|2|--tp 2 --sequence-parallel 1 --precision fp8"
               "tp2_sp_p2p_fp8|2|--tp 2 --sequence-parallel 1 --sp-transport nccl --precision fp8"
               "tp4_sp_fp8|4|--tp 4 --sequence-parallel 1 --precision fp8")
FP8_CODES_LINE="FP8 layers gather their inputs as E4M3 codes" # rank 0's SP line says so (tp_ring_connect)
twin_test() { # resume|early|zero|transport|codes NAME NP OPTIONS...: two runs (bf16 unless OPTIONS say) under mpirun
              # that must end with the same model file
    local kind=$1 name="$1_$2" np=$3 d s final runs
    shift 3
    d="$LOG_DIR/$name"
    local args=("${COMMON[@]}" --precision bf16 "$@")
    case $kind in
        resume) runs=(straight resumed); args+=(--checkpoint-every "$RESUME_AT") ;;
        early) runs=(after during); args+=(--grad-clip 0 --update-after-layers 1) ;; # layer 1 in it, 0 after
        zero) runs=(plain zero1); args+=(--grad-clip 0 --update-in-backward 0) ;;
        transport) runs=(ce nccl) ;;
        codes) runs=(activations codes) ;;
    esac
    mkdir -p "$d/${runs[0]}" "$d/${runs[1]}"
    final=$(printf 'model_%08d.bin' "$STEPS")
    for s in "${runs[@]}"; do
        local more=()
        if [ "$s" = resumed ]; then
            cp "$d/straight/$(printf 'model_%08d.bin' "$RESUME_AT")" \
                "$d/straight/$(printf 'state_%08d.bin' "$RESUME_AT")" "$d/straight/"$GEMM_ALGOS_GLOB \
                "$d/straight/log.txt" "$d/resumed/"
            more=(--resume 1)
        fi
        [ "$s" = after ] && more=(--update-in-backward 0)
        [ "$s" = during ] && cp "$d/after/"$GEMM_ALGOS_GLOB "$d/during/"
        [ "$s" = zero1 ] && more=(--zero 1) && cp "$d/plain/"$GEMM_ALGOS_GLOB "$d/zero1/"
        [ "$s" = activations ] && more=(--sp-fp8-codes 0)
        [ "$s" = codes ] && cp "$d/activations/"$GEMM_ALGOS_GLOB "$d/codes/"
        if [ "$s" = nccl ]; then
            more=(--sp-transport nccl)
            [[ " $* " == *" --gtp "* ]] && more=(--gtp-transport nccl)
            cp "$d/ce/"$GEMM_ALGOS_GLOB "$d/nccl/"
        fi
        if ! timeout "$RUN_TIMEOUT_S" mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE \
            ./train_gpt "${args[@]}" "${more[@]}" --out-dir "$d/$s" > "$d/$s.out" 2>&1; then
            fail_check "$name" "the $s run failed (see $d/$s.out)"; return
        fi
    done
    path_check "$name" mpi "$*" "$d/${runs[0]}.out" || return
    # the transport twins must have run the two transports, or they would compare a path with itself
    if [ "$kind" = transport ]; then path_check "$name" mpi "$* ${more[*]}" "$d/nccl.out" || return; fi
    # and the codes twins the two ways of gathering
    if [ "$kind" = codes ]; then
        path_expect "$name" "$FP8_CODES_LINE" "$d/codes.out" 'SP collectives' || return
        if grep -qF "$FP8_CODES_LINE" "$d/activations.out"; then
            fail_check "$name" "the --sp-fp8-codes 0 run gathered codes too ($d/activations.out)"; return
        fi
    fi
    if ! cmp -s "$d/${runs[0]}/$final" "$d/${runs[1]}/$final"; then
        fail_check "$name" "the step-$STEPS models of the ${runs[0]} and the ${runs[1]} run differ ($d)"
    elif [ "$kind" = resume ]; then
        pass "$name: resumed at step $RESUME_AT, step-$STEPS model bit-identical to the straight run"
    elif [ "$kind" = early ]; then
        pass "$name: update during the backward, step-$STEPS model bit-identical to the update after it"
    elif [ "$kind" = transport ]; then
        pass "$name: over NCCL (${more[*]}), step-$STEPS model bit-identical to the copy engines'"
    elif [ "$kind" = codes ]; then
        pass "$name: FP8 inputs gathered as codes, step-$STEPS model bit-identical to gathering the activations"
    else
        pass "$name: ZeRO-1, step-$STEPS model bit-identical to the run without it"
    fi
}
# Checkpoints are the whole model, so a run may resume on another layout: a GTP=2 run's step-RESUME_AT checkpoint
# resumed on one GPU, and a one-GPU run's on GTP=2, in fp32, must each end within the fp32 parity tolerances of the
# one-GPU run straight through (REF: single_fp32, or the Llama's llama_single_fp32 with its options in both).
cross_resume() { # NAME FROM_NP TO_NP "FROM OPTIONS" "TO OPTIONS" REF
    local name="cross_resume_$1" from_np=$2 to_np=$3 ref=$6 np s dir opts
    for s in first resumed; do
        dir="$LOG_DIR/$name"
        if [ "$s" = first ]; then
            dir="${dir}_first"; np=$from_np; read -r -a opts <<<"$4"
        else
            np=$to_np; read -r -a opts <<<"$5"
        fi
        mkdir -p "$dir"
        local args=("${COMMON[@]}" --precision fp32 --checkpoint-every "$RESUME_AT" --out-dir "$dir" "${opts[@]}")
        if [ "$s" = resumed ]; then
            cp "$LOG_DIR/${name}_first/$(printf 'model_%08d.bin' "$RESUME_AT")" \
                "$LOG_DIR/${name}_first/$(printf 'state_%08d.bin' "$RESUME_AT")" "$LOG_DIR/${name}_first/log.txt" "$dir/"
            args+=(--resume 1)
        fi
        local launch=(./train_gpt)
        [ "$np" -gt 1 ] && launch=(mpirun --allow-run-as-root -np "$np" --bind-to none -x NCCL_NVLS_ENABLE ./train_gpt)
        if ! timeout "$RUN_TIMEOUT_S" "${launch[@]}" "${args[@]}" > "$dir.out" 2>&1; then
            fail_check "$name" "the $s run failed (see $dir.out)"; return
        fi
    done
    compare "$name" fp32 "$ref"
}

# --- 1. parity ------------------------------------------------------------------------------------------------
echo "GPUs: $NGPU"
PORT=$PORT_BASE
if command -v mpirun > /dev/null; then LAUNCH=mpi; else LAUNCH=tcp; fi
# One model's parity sweep: per precision its one-GPU run (PREFIXsingle_PREC), then each layout of the array named
# LAYOUTS ("NAME|NP|OPTIONS|PRECISIONS", empty PRECISIONS = all) against it, and the bootstrap-by-environment (TCP)
# rows of TCP_LAYOUTS when TCP is 1.   layout_sweep PREFIX LAYOUTS TCP [model options...]
layout_sweep() {
    local prefix=$1 tcp_rows=$3 prec ref entry name np opt_text precs tcp
    local -n layouts=$2
    shift 3
    for prec in fp32 bf16 fp8; do
        ref="$LOG_DIR/${prefix}single_$prec"
        if ! timeout "$RUN_TIMEOUT_S" ./train_gpt "${COMMON[@]}" "$@" --precision "$prec" --out-dir "$ref" \
            > "$ref.out" 2>&1; then
            fail_check "${prefix}single_$prec" "the one-GPU run failed (see $ref.out)"
            row "${prefix}single" "$prec" - - - - - FAILED; continue
        fi
        for entry in "${layouts[@]}"; do
            IFS='|' read -r name np opt_text precs <<<"$entry"
            [[ "$name" =~ $MGPU_LAYOUTS ]] || continue
            local opts=()
            read -r -a opts <<<"$opt_text"
            if [ -n "$precs" ] && ! grep -qw "$prec" <<<"$precs"; then continue; fi
            if [ "$np" -gt "$NGPU" ]; then
                skip "$prefix$name $prec: needs $np GPUs, this machine has $NGPU"
                row "$prefix$name" "$prec" - - - - - "SKIP ($np GPUs)"; continue
            fi
            run_layout "$prefix${name}_$prec" "$np" "$prec" "$ref" "$LAUNCH" "$@" "${opts[@]}"
            [ "$tcp_rows" = 1 ] || continue
            for tcp in "${TCP_LAYOUTS[@]}"; do
                [ "$tcp" = "$name" ] && run_layout "env_tcp_${name}_$prec" "$np" "$prec" "$ref" tcp "$@" "${opts[@]}"
            done
        done
    done
}

if part parity; then layout_sweep "" LAYOUTS 1; fi

# A Llama (grouped-query attention, SwiGLU, untied LM head, no biases) on its layouts against its one-GPU run: DP sums
# and ZeRO-1 slices flat gradient spans whatever tensors the model has; TP splits its key/value heads with their query
# heads, fc's gate and up rows by features, lmhead by the vocabulary (llmc/mesh.h); GTP shards the TP-local weights.
# Width 512 gives 8 heads of 64 in 4 groups, so TP=4 holds one key/value head a rank. The 4-GPU rows run in fp32 (the
# tight check of the maps) and fp8 (each rank's FP8 parts); GPT-2's rows cover their bf16.
# --lr 3e-4 (COMMON's 1e-3 is GPT-2's): at 1e-3 this model's gradient norm spikes around steps 14-18 and the runs
# there are chaotic: one GPU against itself with the sums reordered (micro-batches of 4 against 2) moved the norm by
# 1.8e-2 in bf16 and 4e-2..1e-1 in fp8 (GPT-2 of this width by 1.4e-1 in fp8), TP=2 by 2.5e-2 and 2e-1, so the norm
# told nothing. At 3e-4 the same reorder moves it by 1.6e-4 (bf16) and 2.7e-3 (fp8), TP=2 by 2.8e-4 and 3.7e-3, and
# the tolerances above keep their margins (dev/norm_drift.sh; dev/results/llama_norm_drift_lr_2xh200_*.txt).
LLAMA=(--model llama-tiny --width 512 --heads 8 --kv-heads 4 --ffn 512 --lr 3e-4)
# shellcheck disable=SC2034 # read through layout_sweep's name reference
LLAMA_LAYOUTS=(
    "dp2_zero1|2|--zero 1|fp32 bf16"
    "tp2|2|--tp 2|"
    "tp2_sp|2|--tp 2 --sequence-parallel 1|"
    "gtp2|2|--gtp 2|"
    "gtp2_nccl|2|--gtp 2 --gtp-transport nccl|"
    "tp4|4|--tp 4|fp32 fp8"
    "dp2_tp2|4|--tp 2|fp32 fp8"
    "tp2_gtp2|4|--tp 2 --gtp 2|fp32 fp8"
    "gtp4|4|--gtp 4|fp32 fp8"
)
if part llama; then
    layout_sweep llama_ LLAMA_LAYOUTS 0 "${LLAMA[@]}"
    # a TP=2 checkpoint resumed on one GPU and on GTP=2 (scattered through other maps), and on TP=2+SP bit-exactly
    if [ "$NGPU" -ge 2 ] && command -v mpirun > /dev/null && [ -d "$LOG_DIR/llama_single_fp32" ]; then
        cross_resume llama_tp2_to_1gpu 2 1 "${LLAMA[*]} --tp 2" "${LLAMA[*]}" "$LOG_DIR/llama_single_fp32"
        cross_resume llama_tp2_to_gtp2 2 2 "${LLAMA[*]} --tp 2" "${LLAMA[*]} --gtp 2" "$LOG_DIR/llama_single_fp32"
        twin_test resume llama_tp2_sp 2 "${LLAMA[@]}" --tp 2 --sequence-parallel 1
    else
        skip "llama resumes: need 2 GPUs, mpirun and the Llama's one-GPU fp32 run"
    fi
fi

if part parity; then
    # validation on every layout, from the one-GPU fp32 run's final weights (see the header and VAL_LOSS_TOL_FP32)
    model="$LOG_DIR/single_fp32/$(printf 'model_%08d.bin' "$STEPS")"
    eval_file="$LOG_DIR/eval.bin"
    python3 dev/eval_synth.py "$(ls data/brown/brown_val_*.bin | head -1)" "$eval_file" "$EVAL_EXAMPLES" \
        --context 20 --ending 8 > /dev/null
    VAL_RUN=(--init-from "$model" --lr 0 --val-every "$STEPS" --val-batches "$VAL_BATCHES" --eval-data "$eval_file"
             --eval-every "$STEPS")
    ref="$LOG_DIR/val_single_fp32"
    if [ ! -f "$model" ]; then
        skip "val: needs the one-GPU fp32 run's model $model"
    elif ! timeout "$RUN_TIMEOUT_S" ./train_gpt "${COMMON[@]}" --precision fp32 "${VAL_RUN[@]}" --out-dir "$ref" \
        --eval-dump "$ref.eval.jsonl" > "$ref.out" 2>&1; then
        fail_check val_single_fp32 "the one-GPU validation run failed (see $ref.out)"
    else
        for entry in "${VAL_LAYOUTS[@]}"; do
            IFS='|' read -r name np opt_text <<<"$entry"
            [[ "$name" =~ $MGPU_LAYOUTS ]] || continue
            read -r -a opts <<<"$opt_text"
            if [ "$np" -gt "$NGPU" ]; then
                skip "val_$name: needs $np GPUs, this machine has $NGPU"; continue
            fi
            run_layout "val_${name}_fp32" "$np" fp32 "$ref" "$LAUNCH" "${VAL_RUN[@]}" "${opts[@]}" \
                --eval-dump "$LOG_DIR/val_${name}_fp32.eval.jsonl"
            out=$(python3 dev/eval_compare.py "$ref.eval.jsonl" "$LOG_DIR/val_${name}_fp32.eval.jsonl" \
                "$EVAL_TOL_FP32" "eval_${name}_fp32" 2>&1)
            echo "$out"
            passed=$((passed + $(grep -c '^PASS ' <<<"$out"))); failed=$((failed + $(grep -c '^FAIL ' <<<"$out")))
            grep -q '^[A-Z]* ' <<<"$out" || fail_check "eval_${name}_fp32" "dev/eval_compare.py printed no verdict"
        done
    fi
fi

# --- 2. resume on parallel layouts, the update in backward, ZeRO-1 against plain DP, the ring's transports -------
# A run checkpointed at step RESUME_AT and resumed from there must end with the same bits as the same run straight
# through: the layout's checkpoint gathers its shards (TP slices, ZeRO-1 moments) and the resume scatters them back.
# Without clipping the update starts in the backward, each group's AdamW behind that layout's own events for it (the
# DP sums, ZeRO-1's reduction onto the owners and the broadcasts after it, SP's TP sums, GTP's reduce-scatters): such
# a run must end with the same bits as the same run updating after the backward (--update-in-backward 0).
if part twins; then
    for kind in resume early zero transport codes; do
        case $kind in
            resume) layouts=("${RESUME_LAYOUTS[@]}") ;;
            early) layouts=("${EARLY_LAYOUTS[@]}") ;;
            zero) layouts=("${ZERO_LAYOUTS[@]}") ;;
            transport) layouts=("${TRANSPORT_LAYOUTS[@]}") ;;
            codes) layouts=("${CODES_LAYOUTS[@]}"
                            "llama_tp2_sp_fp8|2|${LLAMA[*]} --tp 2 --sequence-parallel 1 --precision fp8") ;;
        esac
        for entry in "${layouts[@]}"; do
            IFS='|' read -r name np opt_text <<<"$entry"
            [[ "$name" =~ $MGPU_LAYOUTS ]] || continue
            read -r -a opts <<<"$opt_text"
            if [ "$np" -gt "$NGPU" ] || ! command -v mpirun > /dev/null; then
                skip "${kind}_$name: needs $np GPUs and mpirun"; continue
            fi
            twin_test "$kind" "$name" "$np" "${opts[@]}"
        done
    done

    if [ "$NGPU" -ge 2 ] && command -v mpirun > /dev/null && [ -d "$LOG_DIR/single_fp32" ]; then
        cross_resume gtp2_to_1gpu 2 1 "--gtp 2" "" "$LOG_DIR/single_fp32"
        cross_resume 1gpu_to_gtp2 1 2 "" "--gtp 2" "$LOG_DIR/single_fp32"
    else
        skip "cross_resume: needs 2 GPUs, mpirun and the one-GPU fp32 run"
    fi
fi

# --- 3. faults ------------------------------------------------------------------------------------------------
FAULT_NP=2
PORT_FAULT=$((PORT + 10))
LONG=(--depth 2 --width 128 --heads 2 --seq-len 64 --batch-size 4 --total-batch-tokens 512 --steps 1000000
      --warmup-steps 0 --val-every 0 --sample-every 0 --save 0 --precision bf16)

# fault_test NAME VICTIM SIGNAL PORT WANT [OPTIONS]: sends SIGNAL to rank VICTIM after a few steps (of LONG with
# OPTIONS); the other rank must exit
# with status 1 within FAULT_LIMIT_S with one error line, matching WANT (a grep -E pattern): the cause, not also
# its consequences (a wait that then times out). Status 1, not 128 + a signal: an NCCL abort that hangs behind the
# dead peer must end in the alarm's line, not in SIGALRM itself. Ranks wait at most STUCK_TIMEOUT_S for a
# collective, so that a stopped rank's peer fails well within the limit.
fault_test() {
    local name=$1 victim=$2 sig=$3 port=$4 want=$5 survivor=$((1 - $2)) t0 waited
    TRAIN_GPT_NCCL_TIMEOUT=$STUCK_TIMEOUT_S launch_env "$name" "$FAULT_NP" "$port" "${LONG[@]}" "${@:6}" \
        --out-dir "$LOG_DIR/$name"
    for _ in $(seq 600); do # until rank 0 has logged step 5 (at most 60 s)
        grep -q '^step 5/' "$LOG_DIR/$name.rank0.out" 2>/dev/null && break
        sleep 0.1
    done
    kill -"$sig" "${PIDS[$victim]}"
    t0=$(date +%s.%N)
    for _ in $(seq $((FAULT_LIMIT_S * 10))); do
        kill -0 "${PIDS[$survivor]}" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "${PIDS[$survivor]}" 2>/dev/null; then
        kill -9 "${PIDS[@]}"
        wait "${PIDS[@]}" 2>/dev/null
        fail_check "$name" "rank $survivor still ran $FAULT_LIMIT_S s after rank $victim got SIG$sig (a hang)"
        return
    fi
    wait "${PIDS[$survivor]}"; local rc=$?
    kill -9 "${PIDS[$victim]}" 2>/dev/null # a stopped rank stays stopped until killed
    wait "${PIDS[$victim]}" 2>/dev/null
    waited=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")
    # the cause, once: error lines but the abort alarm's (which may follow when NCCL's abort hangs)
    local causes
    causes=$(grep 'error:' "$LOG_DIR/$name.rank$survivor.err" | grep -v "NCCL's abort of the communicators")
    if [ "$rc" -eq 1 ] && [ "$(grep -c . <<< "$causes")" -eq 1 ] &&
        grep -Eq "^\[train_gpt rank $survivor\] error: .*($want)" <<< "$causes"; then
        pass "$name: rank $survivor exited $rc after ${waited}s: $causes"
    else
        fail_check "$name" "rank $survivor exited $rc after ${waited}s; expected status 1 and one error line \
matching '$want', got: $causes"
    fi
    path_check "$name" env "${*:6}" # the path whose waits it meant to fail (rank 0's start-up lines)
}

# expect_start_error NAME TEXT: every rank of the last launch exits non-zero within FAULT_LIMIT_S, one says TEXT.
expect_start_error() {
    local name=$1 want=$2 rc=0 p
    for p in "${PIDS[@]}"; do
        timeout "$FAULT_LIMIT_S" tail --pid="$p" -f /dev/null
        wait "$p" && rc=1
    done
    if [ "$rc" -eq 0 ] && cat "$LOG_DIR/$name".rank*.err | grep -q -- "$want"; then
        pass "$name: $(cat "$LOG_DIR/$name".rank*.err | grep -m1 -- "$want")"
    else
        fail_check "$name" "expected every rank to fail with '$want': $(cat "$LOG_DIR/$name".rank*.err)"
    fi
}

# expect_refused_everywhere NAME TEXT: every rank of the last launch exits non-zero within FAULT_LIMIT_S, and each one's
# stderr is the one line of its own refusal, TEXT.
expect_refused_everywhere() {
    local name=$1 want=$2 bad="" r=0 p err
    for p in "${PIDS[@]}"; do
        timeout "$FAULT_LIMIT_S" tail --pid="$p" -f /dev/null
        wait "$p" && bad+=" rank $r exited 0;"
        err="$LOG_DIR/$name.rank$r.err"
        if [ "$(grep -c . "$err")" -ne 1 ] || ! grep -qF -- "[train_gpt rank $r] error: $want" "$err"; then
            bad+=" rank $r said: $(tr '\n' ' ' < "$err");"
        fi
        r=$((r + 1))
    done
    if [ -z "$bad" ]; then
        pass "$name: every rank refused, one line each: $(cat "$LOG_DIR/$name.rank0.err")"
    else
        fail_check "$name" "expected each rank to exit non-zero with the one line '$want':$bad"
    fi
}

if part faults; then
    if [ "$NGPU" -lt "$FAULT_NP" ]; then
        skip "faults: need $FAULT_NP GPUs, this machine has $NGPU"
    else
        fault_test kill_rank1 1 KILL $((PORT_FAULT + 1)) "rank 1"
        fault_test kill_rank0 0 KILL $((PORT_FAULT + 2)) "rank 0"
        # a rank that stops answering without exiting (a hung GPU or process): its peer's next wait for a
        # collective times out, and it names what it waited for
        fault_test stopped_rank1 1 STOP $((PORT_FAULT + 6)) "waited [0-9.]+ s for .*still incomplete"
        # the same under TP=2 + SP over the peer ring: a dead peer's flags never come; the ring's waits stall, the
        # bootstrap connection (kill) or the bounded host waits (stop) end the survivor
        fault_test kill_rank1_sp_ring 1 KILL $((PORT_FAULT + 8)) "rank 1" --tp 2 --sequence-parallel 1
        fault_test stopped_rank1_sp_ring 1 STOP $((PORT_FAULT + 9)) "waited [0-9.]+ s for .*still incomplete" \
            --tp 2 --sequence-parallel 1
        # and under GTP=2 with the copy-engine gathers (the default): the pulls wait for a dead peer's ready flags,
        # its updates for its read flags (over NCCL a GTP gather waits as the DP sums above do)
        fault_test kill_rank1_gtp 1 KILL $((PORT_FAULT + 11)) "rank 1" --gtp 2
        fault_test stopped_rank1_gtp 1 STOP $((PORT_FAULT + 12)) "waited [0-9.]+ s for .*still incomplete" --gtp 2
        # and over the ring of NCCL send/recv: its receives wait for the dead rank in NCCL's kernels, which the abort
        # of every communicator (the ring's among them) ends; the stopped rank's peer may be held in the bounded wait
        # for a group's launch instead (comm_settle), whose line names the collective too
        fault_test kill_rank1_sp_p2p 1 KILL $((PORT_FAULT + 13)) "rank 1" --tp 2 --sequence-parallel 1 \
            --sp-transport nccl
        fault_test stopped_rank1_sp_p2p 1 STOP $((PORT_FAULT + 14)) \
            "waited [0-9.]+ s for .*still incomplete|NCCL did not finish .* within [0-9.]+ s" \
            --tp 2 --sequence-parallel 1 --sp-transport nccl

        # a missing rank: only rank 0 of 2 is started
        port=$((PORT_FAULT + 3))
        RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=5 \
            ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/missing" > "$LOG_DIR/missing.rank0.out" \
            2> "$LOG_DIR/missing.rank0.err" &
        PIDS=($!)
        expect_start_error missing "for ranks \[1\] to connect"

        # a wrong world size: rank 1 believes in 3 ranks
        port=$((PORT_FAULT + 4))
        PIDS=()
        for r in 0 1; do
            w=$((r == 0 ? 2 : 3))
            RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=5 \
                ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/world" > "$LOG_DIR/world.rank$r.out" \
                2> "$LOG_DIR/world.rank$r.err" &
            PIDS+=($!)
        done
        expect_start_error world "world size"

        # TP greater than the model's key/value heads (a Llama of one, 2 query heads): every rank refuses it in one
        # line naming the values, before any work
        port=$((PORT_FAULT + 7))
        PIDS=()
        for r in 0 1; do
            RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=5 \
                ./train_gpt "${LONG[@]}" --model llama-tiny --kv-heads 1 --tp 2 --out-dir "$LOG_DIR/tp_kv_heads" \
                > "$LOG_DIR/tp_kv_heads.rank$r.out" 2> "$LOG_DIR/tp_kv_heads.rank$r.err" &
            PIDS+=($!)
        done
        expect_refused_everywhere tp_kv_heads "--tp 2 exceeds the model's 1 key/value heads (each TP rank needs one)"

        # GTP ranks that cannot map each other's GPU memory (each process sees its own GPU only, as under a scheduler
        # that binds a GPU to a task): the default copy-engine gathers fall back to NCCL's, rank 0 says why, and the
        # run trains
        port=$((PORT_FAULT + 15))
        IFS=, read -r -a visible <<<"${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((NGPU - 1)))}"
        PIDS=()
        for r in 0 1; do
            CUDA_VISIBLE_DEVICES=${visible[$r]} RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$port ./train_gpt "${LONG[@]}" --steps 3 --gtp 2 --out-dir "$LOG_DIR/gtp_unmapped" \
                > "$LOG_DIR/gtp_unmapped.rank$r.out" 2> "$LOG_DIR/gtp_unmapped.rank$r.err" &
            PIDS+=($!)
        done
        if wait_all; then
            path_expect gtp_unmapped "GTP weight gathers: NCCL (the GTP ranks cannot map each other's GPU memory" \
                "$LOG_DIR/gtp_unmapped.rank0.out" 'GTP weight gathers'
        else
            fail_check gtp_unmapped "a rank exited non-zero (see $LOG_DIR/gtp_unmapped.rank*.err)"
        fi

        # a port in use: the rank 0 of another job (waiting for its rank 1) holds MASTER_PORT
        port=$((PORT_FAULT + 5))
        RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAIN_GPT_BOOTSTRAP_TIMEOUT=30 \
            ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/holder" > /dev/null 2>&1 &
        holder=$!
        sleep 2
        RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            ./train_gpt "${LONG[@]}" --out-dir "$LOG_DIR/port" > "$LOG_DIR/port.rank0.out" \
            2> "$LOG_DIR/port.rank0.err" &
        PIDS=($!)
        expect_start_error port "MASTER_PORT $port on 127.0.0.1 is in use"
        kill "$holder" 2>/dev/null
        wait "$holder" 2>/dev/null

        # preemption: SIGUSR1 to mpirun reaches both ranks; they stop at one step with a checkpoint and the same command
        # finishes the run bit-exactly (dev/preempt_check.sh)
        if command -v mpirun > /dev/null; then
            while read -r line; do
                case "$line" in
                    PASS*) pass "${line#PASS }" ;;
                    FAIL*) fail_check preempt_mpirun_np2 "${line#FAIL }" ;;
                esac
            done < <(dev/preempt_check.sh mpirun "$FAULT_NP" 2>&1)
        else
            skip "preempt_mpirun_np2: needs mpirun"
        fi
    fi
fi

echo
echo "parity against one GPU (loss, norm: worst relative error of a step; weights: worst strict part of a tensor;"
echo "beyond tol: elements of all tensors past the weight tolerance, within the allowed stray fraction; val: worst"
echo "relative error of a validation loss, in the val_ rows)"
printf '%-16s %-5s %10s %10s %10s %10s %10s  %s\n' layout prec loss norm weights "beyond tol" val result
printf '%s\n' "${table[@]}"
echo
echo "$passed passed, $failed failed, $skipped skipped (logs in $LOG_DIR)"
[ "$failed" -eq 0 ]
