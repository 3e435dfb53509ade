#!/usr/bin/env bash
# Multi-GPU throughput benchmark, on a machine with 2 GPUs (or 4), in one call: ours beside the PyTorch baselines
# (shared/bench/torch_gpt.py and torch_llama.py, copied to .carry/: compiled, bf16, flash attention). Two groups of
# rows; BENCH_ROWS names rows or groups (gpt2, llama), default gpt2.
#
# gpt2 (T=1024, bf16 unless a row says fp8):
#   GPT-2 124M:  ours on 1 GPU (batch 32) | ours DP=2 (batch 32 per GPU) | ours on 1 GPU x2 (two independent one-GPU
#                runs at once, one a GPU: DP=2 without communication) | torch DDP on 2 GPUs (batch 32 per GPU)
#   GPT-2 1558M: ours TP=2 (batch 8) | ours TP=2 + sequence parallel (batch 8) | torch FSDP on 2 GPUs (batch 8 per GPU)
#                | ours DP=2 and ours GTP=2 (batch 8 per GPU each), in bf16 and in fp8
# sp (not in gpt2; BENCH_ROWS="1558M_tp2 1558M_tp2_sp sp"): 1558M TP=2+SP with its collectives over NCCL
#   (--sp-overlap 0) and over the ring of NCCL send/recv (--sp-transport nccl, the _p2p rows) beside the default
#   ring over peer memory (copy engines), in bf16 and fp8, and TP=2 in fp8; their lines: TP=2+SP / TP=2 tokens/s (bar
#   >= 0.98x: step time <= 1.02x), exposed communication (bar < 5%), peak memory, ring / NCCL, and the two ring
#   transports against each other: ring ce / nccl p2p tokens/s (above 1: copy engines faster; the faster is kept as
#   the default of --sp-transport); in fp8 the ring gathering the activations (--sp-fp8-codes 0, the _act row) against
#   its default E4M3 codes: "codes / activations tokens/s" and the _act row's exposed communication
# sppieces: 1558M TP=2+SP, bf16 and fp8, with the ring's reduce-scatters in 2 and 4 pieces (--sp-ring-pieces): their
#   exposed communication and "pieces / whole tokens/s" against the sp rows
# sp4 (4 GPUs): 1558M TP=4 and TP=4+SP over the ring, both transports (batch 8), the same lines
# sppieces4 (4 GPUs): 1558M TP=4+SP with the ring's reduce-scatters in 2 and 4 pieces, against the sp4 rows: at TP=4 a
#   chunk's GEMM is a quarter of the tokens, the thinnest beside its transfer, which is what the pieces are for
# gtpnccl (BENCH_ROWS="1558M_gtp2 1558M_gtp2_fp8 gtpnccl"; 1558M_gtp4 and 4 GPUs for the last): 1558M GTP=2 in bf16
#   and fp8, and GTP=4, with the weight gathers over NCCL's all-gather (--gtp-transport nccl) beside the copy engines'
#   pulls (the default, the gpt2 rows); their lines: "GTP=2 ce / nccl tokens/s" (and fp8, GTP=4: above 1, the copy
#   engines faster, which is why they are the default of --gtp-transport), and the nccl rows' exposed communication
#   4.7B (48 layers, 2816 channels): ours DP=2 and GTP=2 (batch 4 per GPU)
#   On 4 GPUs (rows skipped where fewer are present): 124M ours DP=4; 1558M ours DP=4, GTP=4 and DP=2 x GTP=2 (batch
#   8 per data rank each) and torch FSDP on 4 GPUs
# llama (T=2048, bf16; Llama 3's shapes, --model as llmc/config.h names them):
#   Llama-3.2-3B (28 x 3072, 24/8 heads, F 8192, tied): ours DP=2 | ours GTP=2 | torch FSDP2 on 2 GPUs
#                (torch_llama.py --mode fsdp), batch 4 per GPU each (BENCH_3B_BATCH sets it); on 4 GPUs ours DP=4 and
#                GTP=4, the same batch per GPU
#   Llama-3.1-8B (32 x 4096, 32/8 heads, F 14336, untied): ours GTP=2 (batch 1 per GPU), beside 8Bfit_dp2: the 8B
#                shape cut to the most layers DP=2 holds on this machine's GPUs (bench_memory.py picks the depth from
#                nvidia-smi's memory.total; BENCH_FIT_DEPTH sets it); on 4 GPUs ours GTP=4 (batch 1 per GPU)
#   Why batch 4 for 3B: DP=2 holds every parameter whole on each GPU, 18 bytes a parameter (fp32 master, gradient and
#   two AdamW moments, the bf16 copy): 57.8 GB, and each sequence of 2048 tokens 4.8 GB of activations and logits
#   (dev/bench_memory.py, which gave the measured 34.5 GB of the 1B shape on one H100 when every layer kept its SwiGLU
#   output). B 4 is 77.2 GB, B 5 82.0 GB, against an 80 GB H100's 85.5 GB of which 3.2 GB are the CUDA context's,
#   NCCL's and the driver's (measured under DP=2): B 5 would leave 0.3 GB, B 4 leaves 5.1 GB, so B 4. (Before
#   SwiGLU's output stopped being kept, B 4 was 80.9 GB and B 3 the choice: BENCH_3B_BATCH=3 if B 4 fails to
#   allocate.) GTP=2 at B 4: 52.5 GB (0.68x).
#   Where 8B fits, at B 1, T 2048 (dev/bench_memory.py): GTP=2 keeps half of the block weights (6.98B parameters,
#   sharded) and wte, lmhead and the norms whole (1.05B): 81.7 GB of parameter state, plus 7.9 GB of activations and
#   logits and 1.6 GB of GTP's gathered weights and their gradients: 91.3 GB a GPU. That is more than an 80 GB H100
#   holds, so 8B_gtp2 needs 141 GB H200s. DP=2 needs 152.5 GB a GPU for 8B (with ZeRO-1 120.3), so on H200s DP=2's
#   largest is the 8B shape cut to 30 of its 32 layers (144.1 GB, 7.6B parameters); on H100s to 14 (77.7 GB, 4.1B).
#   GTP=4 at B 1 is 59.9 GB: 8B_gtp4 runs on H100s.
#
# ms/step is the median of the steps after WARMUP_STEPS (the baseline takes the same median itself); tokens/s counts all
# GPUs; MFU is per GPU, as train_gpt and dev/bench_table.py count it (the model's FLOPs over the dense bf16 peak, 989
# TFLOP/s; in fp8 rows the block linears' FLOPs at the fp8 peak, 1979); peak memory is rank 0's; exposed communication
# is the median of our step line's "| comm X ms" field (world > 1), "-" where the trainer does not print it. The logs
# are read by dev/bench_table.py's measure. Then the ratios the targets (dev/log/README.md) set bars on, each printed
# where a run of it was asked for: ours DP=2 / torch DDP tokens/s (bar 1.10x), ours DP=2 / ours 1 GPU (bar 1.95x; then,
# for information, that ratio split in two: the pair over one GPU, the host's share, and DP=2 over the pair, the
# communication's), TP=2's exposed communication as a share of its step (bar < 3%: measured 0.9-1.4%); for 1558M in bf16
# and in fp8 and for Llama-3.2-3B, GTP=2 / DP=2 tokens/s (bar 0.95x) and peak memory (bar <= 0.75x), GTP=2 / torch FSDP
# tokens/s (bar 1.8x), GTP=2's exposed communication (bar < 5%); the largest-model lines (a model DP=2 cannot hold,
# trained with GTP=2); then the 4-GPU lines, for information (no bars there): DP=4 / one GPU, GTP=4 and DP=2 x GTP=2 /
# DP=4 tokens/s and peak memory, GTP=4 / torch FSDP on 4 GPUs, their exposed communication, 8B's GTP=4 / GTP=2 tokens/s.
# Note: FSDP at batch 8 per GPU runs 16 sequences a step where TP=2 runs 8; compare them by tokens/s. Ours trains as the
# baseline does, without clipping the gradient norm (--grad-clip 0; the baselines clip nothing), so that its update
# starts in the backward (--update-in-backward).
#   dev/bench_mgpu.sh [TORCH_SCRIPT] [SHARD] [TORCH_LLAMA_SCRIPT]
# BENCH_ROWS="124M_1gpu 124M_dp2 ..." runs only the rows named (a ratio none of whose rows was asked for is left out);
# a group's name runs all of its rows ("llama" on a 2-GPU machine: its 2-GPU rows, the 4-GPU ones skipped).
# Step counts are small so that the whole call (build included) fits in about 8 minutes (the gpt2 rows took ~5 minutes
# on 2 x H100): 25 steps at 124M, 15 at 1558M and 3B, 10 at 4.7B and 8B (BENCH_STEPS sets all three). Every run has a
# time limit, and all of them together end by BENCH_DEADLINE_S after the start: a run that fails, hangs or gets no
# time shows FAILED or SKIPPED in the table, and the script goes on. Logs under $OUT/bench_mgpu (default
# /tmp/bench_mgpu). CUDA_DEVICE_MAX_CONNECTIONS, where set, reaches our multi-GPU runs' ranks (it did not change the
# SP rows: dev/results/cuda_device_max_connections_sp_2xh200_2a6a5cc.txt).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 # NVLink multicast stays off on the GPU machines
TORCH=${1:-.carry/torch_gpt.py}
SHARD=${2:-$(ls data/brown/brown_train_*.bin 2>/dev/null | head -1)}
TORCH_LLAMA=${3:-.carry/torch_llama.py}
STEPS_SMALL=${BENCH_STEPS:-25}
STEPS_LARGE=${BENCH_STEPS:-15}
STEPS_BIG=${BENCH_STEPS:-10}
WARMUP_STEPS=5           # steps left out of the median (start-up, allocator, clocks); the baselines leave out 5 too
NP=2                     # GPUs of the 2-GPU rows; the 4-GPU rows name their own
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | head -1)
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
[ -f "$TORCH_LLAMA" ] ||
    echo "warning: no PyTorch baseline '$TORCH_LLAMA': its rows will show FAILED (carry .carry/torch_llama.py)"
command -v mpirun > /dev/null || echo "warning: mpirun not found: our 2-GPU rows will show FAILED (install Open MPI)"
if command -v torchrun > /dev/null; then TORCHRUN=(torchrun); else TORCHRUN=(python3 -m torch.distributed.run); fi

# limit_for MAX: seconds the next run may take (MAX, or what is left before the deadline); 0 if too little is left.
limit_for() {
    local left=$((BENCH_DEADLINE_S - SECONDS))
    [ "$left" -gt "$1" ] && left=$1
    [ "$left" -ge "$MIN_RUN_S" ] && echo "$left" || echo 0
}

results=()
# record NAME WHO KIND STATUS LOG: a result row of the model model_shape set last (KIND: ours|pair|torch; SEQS:
# sequences per step over all GPUs; RUN_GPUS, RUN_STEPS: the run's).
record() {
    results+=("$1|$2|$3|$PREC|$SHAPE|$T|$SEQS|$RUN_GPUS|$RUN_STEPS|$4|$5")
}

# run_one NAME WHO KIND MAX COMMAND...: runs COMMAND into $LOGS/NAME.log under a time limit (MAX seconds, or what is
# left of the deadline) and records its row (the model of model_shape, SEQS, RUN_GPUS, RUN_STEPS as the caller set).
run_one() {
    local name=$1 who=$2 kind=$3 max=$4 limit status
    shift 4
    local log="$LOGS/$name.log"
    limit=$(limit_for "$max")
    if [ "$RUN_GPUS" -gt "$GPUS" ]; then
        echo "skipped $name: needs $RUN_GPUS GPUs, this machine has $GPUS"
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
    record "$name" "$who" "$kind" "$status" "$log"
}

# model_shape MODEL [options]: the row's model as dev/bench_table.py writes a shape (SHAPE, arch:L:C:NH:KV:F:V:tied;
# the parts in ARCH L C NH KV F V TIED), its sequence length T and its precision PREC, from the preset (the values of
# llmc/config.h) and the options that override it (--depth, --width, --heads, --precision; bf16 unless named).
model_shape() {
    local model=$1 prev=""
    shift
    case $model in
        d12) ARCH=gpt2 L=12 C=768 NH=12 V=50257 TIED=1 T=1024 ;;
        d48) ARCH=gpt2 L=48 C=1600 NH=25 V=50257 TIED=1 T=1024 ;;
        llama3.2-3b) ARCH=llama L=28 C=3072 NH=24 KV=8 F=8192 V=128256 TIED=1 T=2048 ;;
        llama3.1-8b) ARCH=llama L=32 C=4096 NH=32 KV=8 F=14336 V=128256 TIED=0 T=2048 ;;
        *) echo "error: bench_mgpu.sh knows no shape for --model $model; add its preset to model_shape"; exit 1 ;;
    esac
    PREC=bf16
    for a in "$@"; do
        case $prev in --depth) L=$a ;; --width) C=$a ;; --heads) NH=$a ;; --precision) PREC=$a ;; esac
        prev=$a
    done
    [ "$ARCH" = gpt2 ] && KV=$NH F=$((4 * C)) # GPT-2: multi-head attention, a 4C MLP
    SHAPE="$ARCH:$L:$C:$NH:$KV:$F:$V:$TIED"
}

# trainer_args MODEL B STEPS DATA_RANKS [options]: model_shape's variables, and ARGS: the trainer's options but
# --out-dir.
trainer_args() {
    local model=$1 B=$2 steps=$3 dp=$4
    shift 4
    model_shape "$model" "$@"
    ARGS=(--model "$model" --batch-size "$B" --seq-len "$T" --total-batch-tokens $((B * T * dp)) --steps "$steps"
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
    # the GPU's hardware queues a process's streams map onto, where the caller set it (the ranks get mpirun's copy)
    [ "$ranks" -gt 1 ] && [ -n "${CUDA_DEVICE_MAX_CONNECTIONS:-}" ] && launch+=(-x CUDA_DEVICE_MAX_CONNECTIONS)
    rm -rf "$LOGS/run_$name"
    SEQS=$((B * dp)) RUN_GPUS=$ranks RUN_STEPS=$steps
    run_one "$name" "$who" ours "$OURS_LIMIT_S" "${launch[@]}" ./train_gpt "${ARGS[@]}" --out-dir "$LOGS/run_$name"
}

# ours_fit NAME WHO RANKS MODEL B STEPS [options]: ours, with MODEL cut to the most layers that data parallelism over
# RANKS holds in this machine's GPU memory (dev/bench_memory.py; BENCH_FIT_DEPTH sets it): the largest model plain DP
# trains, beside which GTP's largest-model line sets a model it cannot hold.
ours_fit() {
    local name=$1 ranks=$3 model=$4 B=$5 depth why="the most DP=$3 holds in ${GPU_MIB:-?} MiB a GPU"
    model_shape "$model"
    if [ -n "${BENCH_FIT_DEPTH:-}" ]; then
        depth=$BENCH_FIT_DEPTH why="BENCH_FIT_DEPTH"
    else
        depth=$(python3 dev/bench_memory.py "$SHAPE" --batch "$B" --seq "$T" --dp "$ranks" \
                    --most-layers "${GPU_MIB:-0}")
    fi
    case $depth in '' | *[!0-9]*) depth=0 ;; esac
    if [ "$depth" -lt 1 ]; then
        echo "skipped $name: no depth of --model $model fits ${GPU_MIB:-an unknown number of} MiB under DP=$ranks"
        SEQS=$((B * ranks)) RUN_GPUS=$ranks RUN_STEPS=$6
        record "$name" "$2" ours SKIPPED "$LOGS/$name.log"
        return
    fi
    echo "$name: --model $model cut to $depth of $L layers, $why"
    ours "$@" --depth "$depth"
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
    SEQS=$((B * 2)) RUN_GPUS=2 RUN_STEPS=$steps
    # shellcheck disable=SC2016 # the inner bash expands them: $0 the out dir, $1 GPU 1's log, the rest the command
    run_one "$name" "$who" pair "$OURS_LIMIT_S" bash -c \
        'CUDA_VISIBLE_DEVICES=1 "${@:2}" --out-dir "${0}_gpu1" > "$1" 2>&1 &
         CUDA_VISIBLE_DEVICES=0 "${@:2}" --out-dir "$0"; here=$?; wait $!; there=$?; exit $((here | there))' \
        "$LOGS/run_$name" "$LOGS/$name.gpu1.log" ./train_gpt "${ARGS[@]}"
}

# torch_run NAME WHO MODE MODEL B STEPS [GPUS]: the baseline of MODEL's architecture (torch_gpt.py or torch_llama.py)
# on GPUS GPUs (default NP; B sequences per GPU).
torch_run() {
    local name=$1 who=$2 mode=$3 model=$4 B=$5 steps=$6 np=${7:-$NP}
    model_shape "$model"
    local script=("$TORCH" --layers "$L" --channels "$C")
    if [ "$ARCH" = llama ]; then
        script=("$TORCH_LLAMA" --layers "$L" --dim "$C" --heads "$NH" --kv-heads "$KV" --ffn "$F" --vocab "$V")
        [ "$TIED" = 1 ] || script+=(--untied)
    fi
    SEQS=$((B * np)) RUN_GPUS=$np RUN_STEPS=$steps
    run_one "$name" "$who" torch "$TORCH_LIMIT_S" "${TORCHRUN[@]}" --standalone --nproc_per_node="$np" "${script[@]}" \
        --mode "$mode" --data "$SHARD" --batch "$B" --seq "$T" --steps "$steps"
}

# row GROUP RUNNER NAME ...: RUNNER NAME ... when BENCH_ROWS (names, space-separated; default gpt2) names NAME or
# GROUP.
row() {
    local group=$1
    shift
    case " ${BENCH_ROWS:-gpt2} " in
        *" $2 "* | *" $group "*) "$@" ;;
        *) echo "not asked for: $2 (BENCH_ROWS)" ;;
    esac
}

# As dev/bench.sh: 124M keeps every layer's GELU output (fits beside torch's memory), 1558M the first 12 of 48.
# Ours first: on a fresh machine each torch run spends minutes compiling, and what the deadline cuts should be those.
row gpt2 ours 124M_1gpu "ours 1 GPU" 1 d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
row gpt2 ours 124M_dp2 "ours DP=2" "$NP" d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
# Three times the steps: the pair's two runs start up in their own time, and most timed steps must overlap.
row gpt2 ours_pair 124M_pair "ours 1 GPU x2" d12 32 $((STEPS_SMALL * 3)) --keep-gelu-layers 12
row gpt2 ours 1558M_dp2 "ours DP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12
row gpt2 ours 1558M_gtp2 "ours GTP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp "$NP"
row gpt2 ours 1558M_tp2 "ours TP=2" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP"
row gpt2 ours 1558M_tp2_sp "ours TP=2+SP" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" \
    --sequence-parallel 1
# SP's collectives: over the peer ring beside the GEMMs (the default, 1558M_tp2_sp) against NCCL (--sp-overlap 0),
# in bf16 and fp8, beside TP=2 in fp8 (group sp: BENCH_ROWS="1558M_tp2 1558M_tp2_sp sp" for the whole comparison)
row sp ours 1558M_tp2_sp_nccl "ours TP=2+SP NCCL" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" \
    --sequence-parallel 1 --sp-overlap 0
# the same ring, its hops by NCCL send/recv instead of copy engines (--sp-transport nccl)
row sp ours 1558M_tp2_sp_p2p "ours TP=2+SP p2p" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" \
    --sequence-parallel 1 --sp-transport nccl
row sp ours 1558M_tp2_fp8 "ours TP=2 fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" --precision fp8
row sp ours 1558M_tp2_sp_fp8 "ours TP=2+SP fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp "$NP" \
    --sequence-parallel 1 --precision fp8
row sp ours 1558M_tp2_sp_fp8_nccl "ours TP=2+SP fp8 NCCL" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 \
    --tp "$NP" --sequence-parallel 1 --precision fp8 --sp-overlap 0
row sp ours 1558M_tp2_sp_fp8_p2p "ours TP=2+SP fp8 p2p" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 \
    --tp "$NP" --sequence-parallel 1 --precision fp8 --sp-transport nccl
# the ring gathering qkv's and fc's FP8 inputs as the activations, every token cast on every rank (--sp-fp8-codes 0),
# against the E4M3 codes it gathers by default (half the bytes)
row sp ours 1558M_tp2_sp_fp8_act "ours TP=2+SP fp8 act" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 \
    --tp "$NP" --sequence-parallel 1 --precision fp8 --sp-fp8-codes 0
# the ring's reduce-scatters making and sending their products in 2 and 4 pieces (--sp-ring-pieces), each piece on its
# way as soon as its rows of the GEMM are made, against whole products (the default rows); group sppieces
for pieces in 2 4; do
    row sppieces ours "1558M_tp2_sp_pc$pieces" "ours TP=2+SP $pieces pieces" "$NP" d48 8 "$STEPS_LARGE" \
        --keep-gelu-layers 12 --tp "$NP" --sequence-parallel 1 --sp-ring-pieces "$pieces"
    row sppieces ours "1558M_tp2_sp_fp8_pc$pieces" "ours TP=2+SP fp8 $pieces pieces" "$NP" d48 8 "$STEPS_LARGE" \
        --keep-gelu-layers 12 --tp "$NP" --sequence-parallel 1 --precision fp8 --sp-ring-pieces "$pieces"
done
row gpt2 ours 1558M_dp2_fp8 "ours DP=2 fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --precision fp8
row gpt2 ours 1558M_gtp2_fp8 "ours GTP=2 fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --precision fp8 \
    --gtp "$NP"
# GTP's weight gathers by NCCL's all-gather, beside 1558M_gtp2 (the default: copy-engine pulls from the peers' mapped
# weights)
row gtpnccl ours 1558M_gtp2_nccl "ours GTP=2 nccl" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp "$NP" \
    --gtp-transport nccl
row gtpnccl ours 1558M_gtp2_nccl_fp8 "ours GTP=2 nccl fp8" "$NP" d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 \
    --precision fp8 --gtp "$NP" --gtp-transport nccl
# What GTP is for: BIG_MODEL (4.7B parameters; under DP a GPU holds 18 bytes a parameter, fp32 and bf16 weights, fp32
# gradients, both AdamW moments: 85 GB, more than an 80 GB card) trains with GTP=2, which halves the block weights'
# share (44 GB); the DP=2 row shows the failure a user would get.
BIG_MODEL=(--depth 48 --width 2816 --heads 22)
row gpt2 ours big_dp2 "ours DP=2" "$NP" d48 4 "$STEPS_BIG" --keep-gelu-layers 0 "${BIG_MODEL[@]}"
row gpt2 ours big_gtp2 "ours GTP=2" "$NP" d48 4 "$STEPS_BIG" --keep-gelu-layers 0 --gtp "$NP" "${BIG_MODEL[@]}"
# Llama (the header says why these batches): ours first, as above.
B3=${BENCH_3B_BATCH:-4}
row llama ours 3B_dp2 "ours DP=2" "$NP" llama3.2-3b "$B3" "$STEPS_LARGE"
row llama ours 3B_gtp2 "ours GTP=2" "$NP" llama3.2-3b "$B3" "$STEPS_LARGE" --gtp "$NP"
row llama ours 8B_gtp2 "ours GTP=2" "$NP" llama3.1-8b 1 "$STEPS_BIG" --gtp "$NP"
row llama ours_fit 8Bfit_dp2 "ours DP=2" "$NP" llama3.1-8b 1 "$STEPS_BIG"
row gpt2 torch_run 124M_ddp "torch DDP" ddp d12 32 "$STEPS_SMALL"
row gpt2 torch_run 1558M_fsdp "torch FSDP" fsdp d48 8 "$STEPS_LARGE"
row llama torch_run 3B_fsdp "torch FSDP" fsdp llama3.2-3b "$B3" "$STEPS_LARGE"
# 4 GPUs: GTP over all four, and GTP=2 inside each of two data-parallel pairs, beside plain DP=4.
row gpt2 ours 124M_dp4 "ours DP=4" 4 d12 32 "$STEPS_SMALL" --keep-gelu-layers 12
row gpt2 ours 1558M_dp4 "ours DP=4" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12
row gpt2 ours 1558M_gtp4 "ours GTP=4" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp 4
row gpt2 ours 1558M_dp2_gtp2 "ours DP2xGTP2" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp 2
row gtpnccl ours 1558M_gtp4_nccl "ours GTP=4 nccl" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --gtp 4 \
    --gtp-transport nccl
row llama ours 3B_dp4 "ours DP=4" 4 llama3.2-3b "$B3" "$STEPS_LARGE"
row llama ours 3B_gtp4 "ours GTP=4" 4 llama3.2-3b "$B3" "$STEPS_LARGE" --gtp 4
row llama ours 8B_gtp4 "ours GTP=4" 4 llama3.1-8b 1 "$STEPS_BIG" --gtp 4
row gpt2 torch_run 1558M_fsdp4 "torch FSDP" fsdp d48 8 "$STEPS_LARGE" 4
# 4 GPUs, TP=4: SP's collectives over the ring (a ring of four: three transfers a collective), by copy engines and
# by NCCL send/recv, beside plain TP
row sp4 ours 1558M_tp4 "ours TP=4" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp 4
row sp4 ours 1558M_tp4_sp "ours TP=4+SP" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp 4 --sequence-parallel 1
row sp4 ours 1558M_tp4_sp_p2p "ours TP=4+SP p2p" 4 d48 8 "$STEPS_LARGE" --keep-gelu-layers 12 --tp 4 \
    --sequence-parallel 1 --sp-transport nccl
for pieces in 2 4; do
    row sppieces4 ours "1558M_tp4_sp_pc$pieces" "ours TP=4+SP $pieces pieces" 4 d48 8 "$STEPS_LARGE" \
        --keep-gelu-layers 12 --tp 4 --sequence-parallel 1 --sp-ring-pieces "$pieces"
done

echo
python3 dev/bench_mgpu_table.py "$WARMUP_STEPS" "${results[@]}"
