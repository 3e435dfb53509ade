#!/usr/bin/env bash
# Multi-GPU throughput benchmark, on a machine with 2 GPUs, in one call: ours beside the PyTorch baseline
# (shared/bench/torch_gpt.py, copied to .carry/torch_gpt.py: compiled, bf16, flash attention). T=1024, bf16 unless
# a row says fp8.
#   GPT-2 124M:  ours on 1 GPU (batch 32) | ours DP=2 (batch 32 per GPU) | ours on 1 GPU x2 (two independent one-GPU
#                runs at once, one a GPU: DP=2 without communication) | torch DDP on 2 GPUs (batch 32 per GPU)
#   GPT-2 1558M: ours TP=2 (batch 8) | ours TP=2 + sequence parallel (batch 8) | torch FSDP on 2 GPUs (batch 8 per GPU)
#                | ours DP=2 and ours GTP=2 (batch 8 per GPU each), in bf16 and in fp8
#   4.7B (48 layers, 2816 channels): ours DP=2 and GTP=2 (batch 4 per GPU)
#   On 4 GPUs (rows skipped where fewer are present): 124M ours DP=4; 1558M ours DP=4, GTP=4 and DP=2 x GTP=2 (batch
#   8 per data rank each) and torch FSDP on 4 GPUs
# ms/step is the median of the steps after WARMUP_STEPS (the baseline takes the same median itself); tokens/s counts all
# GPUs; MFU is per GPU against the dense peak of the row's precision; peak memory is rank 0's; exposed communication is
# the median of our step line's "| comm X ms" field (world > 1), "-" where the trainer does not print it. Then the
# ratios the targets (dev/log/README.md) set bars on: ours DP=2 / torch DDP tokens/s (bar 1.10x), ours DP=2 / ours 1 GPU
# (bar 1.95x; then, for information, that ratio split in two: the pair over one GPU, the host's share, and DP=2 over the
# pair, the communication's), TP=2's exposed communication as a share of its step (bar < 10%); in bf16 and in fp8, GTP=2
# / DP=2 tokens/s (bar 0.95x) and peak memory (bar <= 0.75x), GTP=2 / torch FSDP tokens/s (bar 1.8x), GTP=2's exposed
# communication (bar < 5%); last the largest-model line (a model DP=2 cannot hold, trained with GTP=2); then the 4-GPU
# lines, for information (no bars there): DP=4 / one GPU, GTP=4 and DP=2 x GTP=2 / DP=4 tokens/s and peak memory, GTP=4
# / torch FSDP on 4 GPUs, their exposed communication.
# Note: FSDP at batch 8 per GPU runs 16 sequences a step where TP=2 runs 8; compare them by tokens/s. Ours trains as
# the baseline does, without clipping the gradient norm (--grad-clip 0; torch_gpt.py clips nothing), so that its
# update starts in the backward where the layout allows it (not fp8: --update-in-backward).
#   dev/bench_mgpu.sh [TORCH_SCRIPT] [SHARD]
# BENCH_ROWS="124M_1gpu 124M_dp2 ..." runs only the rows named (the table shows the others as missing).
# Step counts are small so that the whole call (build included) fits in about 8 minutes (all rows
# took ~5 minutes on 2 x H100): 25 steps at 124M, 15 at 1558M, 10 at 4.7B (BENCH_STEPS sets all three). Every run
# has a time limit, and all of them together end by BENCH_DEADLINE_S after the start: a run that fails, hangs or
# gets no time shows FAILED or SKIPPED in the table, and the script goes on. Logs under $OUT/bench_mgpu (default
# /tmp/bench_mgpu).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 # NVLink multicast stays off on the GPU machines
TORCH=${1:-.carry/torch_gpt.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin 2>/dev/null | head -1)}
STEPS_SMALL=${BENCH_STEPS:-25}
STEPS_LARGE=${BENCH_STEPS:-15}
STEPS_BIG=${BENCH_STEPS:-10}
WARMUP_STEPS=5           # steps left out of the median (start-up, allocator, clocks); torch_gpt.py leaves out 5 too
PEAK_TFLOPS_BF16=989     # dense peaks of H100/H200 SXM (the MFU denominator of a row, by its precision)
PEAK_TFLOPS_FP8=1979
SEQ=1024
NP=2                     # GPUs of the 2-GPU rows; the 4-GPU rows name their own
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
BENCH_DEADLINE_S=${BENCH_DEADLINE_S:-540} # every run ends by then, leaving time for the table within 10 minutes
OURS_LIMIT_S=150         # one run of ours: start-up (init, GEMM tuning) plus a few seconds of steps
TORCH_LIMIT_S=240        # one torch run: torch.compile of the blocks takes most of it
MIN_RUN_S=30             # a run given less time than this is not started
LOGS=${OUT:-/tmp}/bench_mgpu
mkdir -p "$LOGS"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
# Named targets only: the device image has no PCRE2 for ./tokenize, so never `make all`.
if ! make -j16 train_gpt > "$LOGS/build.log" 2>&1; then
    tail -20 "$LOGS/build.log"
    echo "error: building train_gpt failed (log above, $LOGS/build.log); fix the build and run again"
    exit 1
fi
[ -n "$SHARD" ] && [ -f "$SHARD" ] ||
    { echo "error: no training shard '$SHARD': carry data/brown or pass a shard as the second argument"; exit 1; }
[ -f "$TORCH" ] || echo "warning: no PyTorch baseline '$TORCH': its rows will show FAILED (carry .carry/torch_gpt.py)"
command -v mpirun > /dev/null || echo "warning: mpirun not found: our 2-GPU rows will show FAILED (install Open MPI)"
if command -v torchrun > /dev/null; then TORCHRUN=(torchrun); else TORCHRUN=(python3 -m torch.distributed.run); fi

# limit_for MAX: seconds the next run may take (MAX, or what is left before the deadline); 0 if too little is left.
limit_for() {
    local left=$((BENCH_DEADLINE_S - SECONDS))
    [ "$left" -gt "$1" ] && left=$1
    [ "$left" -ge "$MIN_RUN_S" ] && echo "$left" || echo 0
}

results=()
# run_one NAME WHO KIND PREC L C GLOBAL_SEQS GPUS STEPS LIMIT COMMAND...: runs COMMAND into $LOGS/NAME.log under a
# time limit; records a result row (KIND: ours|torch; GLOBAL_SEQS: sequences per step over all GPUs).
run_one() {
    local name=$1 who=$2 kind=$3 prec=$4 L=$5 C=$6 seqs=$7 gpus=$8 steps=$9 max=${10} limit status
    shift 10
    local log="$LOGS/$name.log"
    limit=$(limit_for "$max")
    if [ "$gpus" -gt "$GPUS" ]; then
        echo "skipped $name: needs $gpus GPUs, this machine has $GPUS"
        status=SKIPPED
    elif [ "$limit" -eq 0 ]; then
        echo "skipped $name: less than ${MIN_RUN_S}s left of BENCH_DEADLINE_S=${BENCH_DEADLINE_S}s"
        status=SKIPPED
    else
        echo "== $name ($who, up to ${limit}s): $*"
        timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
        local rc=$?
        status=ok
        if [ "$rc" -ne 0 ]; then
            status=FAILED
            [ "$rc" -eq 124 ] && echo "$name: no result within ${limit}s"
            echo "$name failed (exit $rc):"; tail -5 "$log"
        fi
    fi
    results+=("$name|$who|$kind|$prec|$L|$C|$seqs|$gpus|$steps|$status|$log")
}

# trainer_args MODEL B STEPS DATA_RANKS [options]: sets L, C and PREC from the preset and the options (--depth, --width
# and --precision override the preset's shape and bf16) and ARGS to the trainer's options but --out-dir.
trainer_args() {
    local model=$1 B=$2 steps=$3 dp=$4 prev=""
    shift 4
    PREC=bf16
    case $model in d12) L=12 C=768 ;; d48) L=48 C=1600 ;; esac
    for a in "$@"; do
        case $prev in --depth) L=$a ;; --width) C=$a ;; --precision) PREC=$a ;; esac
        prev=$a
    done
    ARGS=(--model "$model" --batch-size "$B" --seq-len "$SEQ" --total-batch-tokens $((B * SEQ * dp)) --steps "$steps"
          --val-every 0 --sample-every 0 --precision bf16 --train-data "$SHARD" --save 0 --warmup-steps 5
          --grad-clip 0 "$@")
}

# ours NAME WHO RANKS MODEL B STEPS [options]: our trainer (trainer_args), one process or RANKS under mpirun.
ours() {
    local name=$1 who=$2 ranks=$3 model=$4 B=$5 steps=$6 dp=$3
    shift 6
    case " $* " in *" --tp "*) dp=1 ;; esac # the TP runs here use both GPUs for one model
    trainer_args "$model" "$B" "$steps" "$dp" "$@"
    local launch=()
    [ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root -np "$ranks" --bind-to none -x NCCL_NVLS_ENABLE)
    rm -rf "$LOGS/run_$name"
    run_one "$name" "$who" ours "$PREC" "$L" "$C" $((B * dp)) "$ranks" "$steps" "$OURS_LIMIT_S" "${launch[@]}" \
        ./train_gpt "${ARGS[@]}" --out-dir "$LOGS/run_$name"
}

# ours_pair NAME WHO MODEL B STEPS [options]: two independent one-GPU runs at once, on GPU 0 (its log NAME.log) and
# GPU 1 (NAME.gpu1.log): no MPI, no NCCL, so what DP=2 costs over this pair is its communication, and what the pair
# costs over one GPU alone is the host's (two cards busy at once, one card slower than the other). The row's step is
# the slower run's median, as DP's step is its slower rank's.
ours_pair() {
    local name=$1 who=$2 model=$3 B=$4 steps=$5
    shift 5
    trainer_args "$model" "$B" "$steps" 1 "$@"
    rm -rf "$LOGS/run_$name" "$LOGS/run_${name}_gpu1"
    # shellcheck disable=SC2016 # the inner bash expands them: $0 the out dir, $1 GPU 1's log, the rest the command
    run_one "$name" "$who" pair "$PREC" "$L" "$C" $((B * 2)) 2 "$steps" "$OURS_LIMIT_S" bash -c \
        'CUDA_VISIBLE_DEVICES=1 "${@:2}" --out-dir "${0}_gpu1" > "$1" 2>&1 &
         CUDA_VISIBLE_DEVICES=0 "${@:2}" --out-dir "$0"; here=$?; wait $!; there=$?; exit $((here | there))' \
        "$LOGS/run_$name" "$LOGS/$name.gpu1.log" ./train_gpt "${ARGS[@]}"
}

# torch NAME WHO MODE L C B STEPS [GPUS]: the baseline on GPUS GPUs (default NP; B sequences per GPU).
torch_run() {
    local name=$1 who=$2 mode=$3 L=$4 C=$5 B=$6 steps=$7 np=${8:-$NP}
    run_one "$name" "$who" torch bf16 "$L" "$C" $((B * np)) "$np" "$steps" "$TORCH_LIMIT_S" "${TORCHRUN[@]}" \
        --standalone \
        --nproc_per_node="$np" "$TORCH" --mode "$mode" --data "$SHARD" --layers "$L" --channels "$C" --batch "$B" \
        --seq "$SEQ" --steps "$steps"
}

# row RUNNER NAME ...: RUNNER NAME ... when BENCH_ROWS (names, space-separated) is unset or names NAME.
row() {
    case " ${BENCH_ROWS:-$2} " in *" $2 "*) "$@" ;; *) echo "not asked for: $2 (BENCH_ROWS)" ;; esac
}

# As dev/bench.sh: 124M keeps every layer's GELU output (fits beside torch's memory), 1558M the first 12 of 48.
# Ours first: on a fresh machine each torch run spends minutes compiling, and what the deadline cuts should be those.
row ours 124M_1gpu "ours 1 GPU" 1 d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
row ours 124M_dp2 "ours DP=2" "$NP" d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
# Three times the steps: the pair's two runs start up in their own time, and most timed steps must overlap.
row ours_pair 124M_pair "ours 1 GPU x2" d12 32 $((STEPS_SMALL * 3)) --keep-gelu-layers 12
row ours 1558M_dp2 "ours DP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12
row ours 1558M_gtp2 "ours GTP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp "$NP"
row ours 1558M_tp2 "ours TP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP"
row ours 1558M_tp2_sp "ours TP=2+SP" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" --sequence-parallel 1
row ours 1558M_dp2_fp8 "ours DP=2 fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --precision fp8
row ours 1558M_gtp2_fp8 "ours GTP=2 fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --precision fp8 --gtp "$NP"
# What GTP is for: BIG_MODEL (4.7B parameters; under DP a GPU holds 18 bytes a parameter, fp32 and bf16 weights, fp32
# gradients, both AdamW moments: 85 GB, more than an 80 GB card) trains with GTP=2, which halves the block weights'
# share (44 GB); the DP=2 row shows the failure a user would get.
BIG_MODEL=(--depth 48 --width 2816 --heads 22)
row ours big_dp2 "ours DP=2" "$NP" d48 4 "$STEPS_BIG" --keep-gelu-layers 0 "${BIG_MODEL[@]}"
row ours big_gtp2 "ours GTP=2" "$NP" d48 4 "$STEPS_BIG" --keep-gelu-layers 0 --gtp "$NP" "${BIG_MODEL[@]}"
row torch_run 124M_ddp "torch DDP" ddp 12 768 32 "$STEPS_SMALL"
row torch_run 1558M_fsdp "torch FSDP" fsdp 48 1600 8 "$STEPS_LARGE"
# 4 GPUs: GTP over all four, and GTP=2 inside each of two data-parallel pairs, beside plain DP=4.
row ours 124M_dp4 "ours DP=4" 4 d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
row ours 1558M_dp4 "ours DP=4" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12
row ours 1558M_gtp4 "ours GTP=4" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp 4
row ours 1558M_dp2_gtp2 "ours DP2xGTP2" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp 2
row torch_run 1558M_fsdp4 "torch FSDP" fsdp 48 1600 8 "$STEPS_LARGE" 4

echo
python3 - "$PEAK_TFLOPS_BF16" "$PEAK_TFLOPS_FP8" "$SEQ" "$WARMUP_STEPS" "${results[@]}" <<'PY'
import re, statistics, sys
peaks = {"bf16": float(sys.argv[1]) * 1e12, "fp8": float(sys.argv[2]) * 1e12}
T, warm = int(sys.argv[3]), int(sys.argv[4])
V = 50304  # padded vocabulary
def flops_per_token(L, C):  # as dev/bench.sh: 6 x parameters + attention
    params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * params + 12 * L * C * T
STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss .*?\| ([\d.]+) ms \| [\d.]+ tok/s(.*)$", re.M)
def timed_median(text):  # our log's median step time after the warm-up and median exposed communication, or None
    timed = [(float(t), rest) for s, t, rest in STEP.findall(text) if int(s) > warm]
    if not timed:
        return None, None
    c = [float(m.group(1)) for _, rest in timed for m in [re.search(r"\| comm ([\d.]+) ms", rest)] if m]
    return statistics.median(t for t, _ in timed), statistics.median(c) if c else None
rows, shapes = {}, {}
print(f"{'layout':14} {'who':14} {'ms/step':>9} {'tok/s':>10} {'MFU%/GPU':>9} {'peak GB':>8} {'comm ms':>8}")
for r in sys.argv[5:]:
    name, who, kind, prec, L, C, seqs, gpus, steps, status, log = r.split("|")
    L, C, seqs, gpus = int(L), int(C), int(seqs), int(gpus)
    text = open(log, errors="replace").read() if status != "SKIPPED" else ""
    ms = tok = mem = comm = None
    if status == "ok" and kind in ("ours", "pair"):
        ms, comm = timed_median(text)
        if kind == "pair":  # the slower of the two runs (GPU 1's log beside GPU 0's)
            other = timed_median(open(log[:-len(".log")] + ".gpu1.log", errors="replace").read())[0]
            ms = None if ms is None or other is None else max(ms, other)
        if ms is not None:
            tok = seqs * T / ms * 1e3
        m = re.search(r"peak GPU memory: ([\d.]+) GB", text)
        mem = float(m.group(1)) if m else None
    elif status == "ok":
        m = re.search(r"ms/step=([\d.]+) tok/s=(\d+).*peak_mem_GB=([\d.]+)", text)
        if m: ms, tok, mem = float(m.group(1)), float(m.group(2)), float(m.group(3))
    if ms is None and status == "ok":
        status = "FAILED"  # ran, but printed no timed step
    rows[name] = (ms, tok, comm, mem)
    shapes[name] = (L, C)
    if ms is None:
        why = ""
        if status == "FAILED":  # the trainer's own error line, if it printed one (an allocation that failed, say)
            m = re.search(r"^\[train_gpt rank \d+\] error: .*$", text, re.M)
            why = "  " + m.group(0) if m else ""
        print(f"{name:14} {who:14} {status:>9}{why}")
        continue
    mfu = tok / gpus * flops_per_token(L, C) / peaks[prec] * 100
    fmt = lambda v, f: format(v, f) if v is not None else "-"
    print(f"{name:14} {who:14} {ms:9.2f} {tok:10.0f} {mfu:9.1f} {fmt(mem, '8.1f'):>8} {fmt(comm, '8.2f'):>8}")

def ratio(label, a, b, bar):  # bar None: for information, no target set
    x, y = rows.get(a, (None,) * 4)[1], rows.get(b, (None,) * 4)[1]
    want = f"bar {bar}x" if bar else "no bar"
    if x is None or y is None:
        print(f"{label:34} -        ({want}; a run is missing)")
        return
    v = x / y
    verdict = "" if bar is None else (": meets" if v >= bar else ": MISSES")
    print(f"{label:34} {v:6.3f}x  ({want}{verdict})")
print(f"(MFU against the dense peak of the row's precision: bf16 {peaks['bf16'] / 1e12:.0f}, "
      f"fp8 {peaks['fp8'] / 1e12:.0f} TFLOP/s)")
print()
ratio("ours DP=2 / torch DDP tokens/s", "124M_dp2", "124M_ddp", 1.10)
ratio("ours DP=2 / ours 1 GPU tokens/s", "124M_dp2", "124M_1gpu", 1.95)
# Where DP=2's shortfall comes from: the pair is two one-GPU runs at once with no communication at all.
ratio("ours 1 GPU x2 / 1 GPU tokens/s", "124M_pair", "124M_1gpu", None)
ratio("ours DP=2 / 1 GPU x2 tokens/s", "124M_dp2", "124M_pair", None)
def exposed(name, bar):
    ms, _, comm, _ = rows.get(name, (None,) * 4)
    if ms is None or comm is None:
        print(f"{name + ' exposed comm / step':34} -        (bar < {bar}%; {'no run' if ms is None else 'no comm field'})")
    else:
        share = comm / ms * 100
        print(f"{name + ' exposed comm / step':34} {share:6.1f}%  (bar < {bar}%: {'meets' if share < bar else 'MISSES'})")
def memory_ratio(label, a, b, bar):  # peak memory a GPU of a against b's; bar None: for information
    ma, mb = rows.get(a, (None,) * 4)[3], rows.get(b, (None,) * 4)[3]
    want = f"bar <= {bar}x" if bar else "no bar"
    if ma is None or mb is None:
        print(f"{label:34} -        ({want}; a run is missing)")
    else:
        verdict = "" if bar is None else (": meets" if ma / mb <= bar else ": MISSES")
        print(f"{label:34} {ma / mb:6.3f}x  ({want}{verdict})")
exposed("1558M_tp2", 10)
exposed("1558M_tp2_sp", 10)
ratio("ours TP=2 / torch FSDP tokens/s", "1558M_tp2", "1558M_fsdp", None)
for p in ("", "_fp8"):  # GTP's bars, in bf16 and in fp8 (against the same bf16 FSDP baseline)
    gtp, dp, label = "1558M_gtp2" + p, "1558M_dp2" + p, "ours GTP=2" + p.replace("_", " ")
    ratio(f"{label} / ours DP=2 tokens/s", gtp, dp, 0.95)
    ratio(f"{label} / torch FSDP tokens/s", gtp, "1558M_fsdp", 1.8)
    memory_ratio(f"{label} / DP=2 peak memory", gtp, dp, 0.75)
    exposed(gtp, 5)
ms, tok, _, mem = rows.get("big_gtp2", (None,) * 4)
if ms is not None:
    L, C = shapes["big_gtp2"]
    dp_runs = rows.get("big_dp2", (None,) * 4)[0] is not None
    print(f"largest-model line: GTP=2 trains a {L}-layer, {C}-channel GPT at {tok:.0f} tokens/s, "
          f"{mem:.1f} GB a GPU; DP=2: {'fits too' if dp_runs else 'does not run (row above)'}")
four = ("124M_dp4", "1558M_dp4", "1558M_gtp4", "1558M_dp2_gtp2", "1558M_fsdp4")
if any(rows.get(n, (None,) * 4)[0] is not None for n in four):  # the 4-GPU lines, where such rows ran
    ratio("ours DP=4 / ours 1 GPU tokens/s", "124M_dp4", "124M_1gpu", None)
    for name, label in (("1558M_gtp4", "ours GTP=4"), ("1558M_dp2_gtp2", "ours DP2xGTP2")):
        ratio(f"{label} / ours DP=4 tokens/s", name, "1558M_dp4", None)
        memory_ratio(f"{label} / DP=4 peak memory", name, "1558M_dp4", None)
        exposed(name, 5)
    ratio("ours GTP=4 / torch FSDP 4 GPUs tokens/s", "1558M_gtp4", "1558M_fsdp4", None)
PY
