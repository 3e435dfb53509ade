#!/usr/bin/env bash
# The benchmark scripts' own logic, without a GPU: dev/bench_mgpu.sh, dev/bench_llama.sh and `dev/fp8_quality.sh
# llama` run in a copy of dev/ against stand-ins for nvidia-smi, make, mpirun, torchrun, ./train_gpt and the PyTorch
# baselines, which print llmc/logger.h's step lines and torch_*.py's summary line with step times chosen here (warm-up
# steps slow, timed steps spread around a median, so a table that does not skip the warm-up or take the median is
# wrong). The tables are checked against the numbers those imply: which rows ran or were skipped, ms/step, tokens/s,
# MFU, ratios and their verdicts, the largest-model lines, the depth DP=2 is given, the quality verdict; and
# dev/bench_memory.py against the measured Llama-3.2-1B memory. Needs python3 (no torch, no GPU).
# One line per check, "PASS name" or "FAIL name: why"; exit status 1 if any failed.
#   dev/bench_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/tree BIN=$WORK/bin
mkdir -p "$ROOT/data/brown" "$BIN"
cp -r dev "$ROOT/dev"
touch "$ROOT/data/brown/brown_train_000000.bin"
failed=0

check() { # NAME FILE TEXT: FILE holds the line TEXT (whole; a run of spaces matches any run of spaces)
    if tr -s ' ' < "$2" | grep -qxF -- "$(tr -s ' ' <<<"$3")"; then echo "PASS $1"; else
        echo "FAIL $1: no line '$3' in $2:"; sed 's/^/    /' "$2"; failed=1
    fi
}
check_absent() { # NAME FILE PATTERN: no line of FILE matches PATTERN (grep -E)
    if grep -qE -- "$3" "$2"; then echo "FAIL $1: '$3' in $2"; failed=1; else echo "PASS $1"; fi
}
check_called() { # NAME PATTERN: a command line the stand-in trainer was given matches PATTERN (grep -E)
    if grep -qE -- "$2" "$FAKE_CALLS"; then echo "PASS $1"; else
        echo "FAIL $1: no command line matches '$2':"; sed 's/^/    /' "$FAKE_CALLS"; failed=1
    fi
}
check_status() { # NAME WANT: the last case exited with status 0 (WANT ok) or not (WANT failed)
    if { [ "$2" = ok ] && [ "$RC" -eq 0 ]; } || { [ "$2" = failed ] && [ "$RC" -ne 0 ]; }; then echo "PASS $1"; else
        echo "FAIL $1: exit status $RC, want $2"; failed=1
    fi
}

# Stand-ins. make builds nothing; nvidia-smi shows FAKE_GPUS GPUs of FAKE_MIB MiB; mpirun and torchrun run their
# command once, as rank 0, with FAKE_WORLD ranks.
printf '#!/bin/sh\nexit 0\n' > "$BIN/make"
cat > "$BIN/nvidia-smi" <<'EOF'
#!/bin/sh
i=0
while [ "$i" -lt "$FAKE_GPUS" ]; do
    case "$*" in
        -L) echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)" ;;
        *nounits*) echo "$FAKE_MIB" ;;
        *) echo "NVIDIA H100 80GB HBM3, 0.0, $FAKE_MIB MiB" ;;
    esac
    i=$((i + 1))
done
EOF
cat > "$BIN/mpirun" <<'EOF'
#!/bin/sh
while [ "$1" != ./train_gpt ]; do [ "$1" = -np ] && FAKE_WORLD=$2; shift; done
FAKE_WORLD=$FAKE_WORLD exec "$@"
EOF
cat > "$BIN/torchrun" <<'EOF'
#!/bin/sh
shift # --standalone
FAKE_WORLD=${1#--nproc_per_node=}
shift
FAKE_WORLD=$FAKE_WORLD exec python3 "$@"
EOF
# The trainer: its run is the --out-dir's name (run_NAME: bench_mgpu.sh's, NAME elsewhere; bench_llama.sh's "run" is
# ours_PRECISION, as its log); FAKE_TABLE's line
# "NAME MS COMM GB" gives its median step, exposed communication and peak memory, "NAME fail" an allocation failure,
# "NAME val LOSS" its final validation loss. Every command line goes to FAKE_CALLS.
cat > "$ROOT/train_gpt" <<'EOF'
#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
opt = lambda k, d=None: a[a.index(k) + 1] if k in a else d
out = opt("--out-dir")
name = os.path.basename(out).removeprefix("run_")
name = "ours_" + opt("--precision") if name == "run" else name
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(name + " " + " ".join(a) + "\n")
table = {l.split()[0]: l.split()[1:] for l in open(os.environ["FAKE_TABLE"]) if l.strip()}
row = table.get(name, table["*"])
if row[0] == "fail":
    print("[train_gpt rank 1] error: cannot allocate 8.00 GiB of GPU memory for parameters (1.00 GiB free of 79.18): "
          "out of memory; lower --batch-size or use a smaller model", file=sys.stderr)
    sys.exit(1)
steps, val_every = int(opt("--steps")), int(opt("--val-every", "0"))
world = int(os.environ.get("FAKE_WORLD", "1"))
os.makedirs(out, exist_ok=True)
log = open(os.path.join(out, "log.txt"), "w")
print("train_gpt | device fake | precision " + opt("--precision", "bf16"))
timed = steps - 5
for s in range(1, steps + 1):
    if row[0] == "val":
        ms, comm = 50.0, 0.0
    else:  # warm-up 10x slow; timed steps 1 ms apart around the median, so the median is MS only after the warm-up
        ms = float(row[0]) * 10 if s <= 5 else float(row[0]) + (s - 6) - (timed - 1) / 2
        comm = float(row[1]) * 10 if s <= 5 else float(row[1])
    tail = f" | comm {comm:.2f} ms" if world > 1 else ""
    print(f"step {s}/{steps} | loss 5.000000 | lr 1.000e-04 | norm 1.0000 | {ms:.1f} ms | 1000 tok/s | MFU 40.0%{tail}")
    log.write(f"s:{s} trl:5.000000\n")
    if val_every and (s % val_every == 0 or s == steps):
        loss = float(row[1]) + 0.001 * (steps - s)
        print(f"step {s}/{steps} | val loss {loss:.6f}")
        log.write(f"s:{s} tel:{loss:.6f}\n")
if row[0] != "val":
    print(f"peak GPU memory: {row[2]} GB")
EOF
# The baselines: FAKE_TABLE's line "torch_MODE_LAYERS MS GB".
cat > "$WORK/torch_fake.py" <<'EOF'
import os, sys
a = sys.argv[1:]
opt = lambda k: a[a.index(k) + 1]
ws, B, T = int(os.environ.get("FAKE_WORLD", "1")), int(opt("--batch")), int(opt("--seq"))
mode = opt("--mode") if "--mode" in a else "single"
table = {l.split()[0]: l.split()[1:] for l in open(os.environ["FAKE_TABLE"]) if l.strip()}
ms, mem = map(float, table[f"torch_{mode}_{opt('--layers')}"])
print(f"torch fake mode={mode} ranks={ws} layers={opt('--layers')} params=1.0M batch={B}x{T}/rank ms/step={ms:.1f} "
      f"tok/s={ws * B * T / ms * 1e3:.0f} loss=5.000 peak_mem_GB={mem:.1f}")
EOF
chmod +x "$BIN"/* "$ROOT/train_gpt"
export PATH="$BIN:$PATH" FAKE_TABLE=$WORK/table FAKE_CALLS=$WORK/calls OUT=$WORK/out
run_case() { # NAME GPUS MIB COMMAND...: the command in the copy, its output in $WORK/NAME.txt, its status in RC
    local name=$1
    FAKE_GPUS=$2 FAKE_MIB=$3
    export FAKE_GPUS FAKE_MIB
    shift 3
    : > "$FAKE_CALLS"
    (cd "$ROOT" && "$@") > "$WORK/$name.txt" 2>&1
    RC=$?
}

# Llama on two H200-sized GPUs: the 2-GPU rows run, the 4-GPU ones are skipped; GTP=2's bars (its exposed share
# misses, the rest meet); DP=2 gets the 8B cut to what bench_memory.py fits in 143771 MiB.
cat > "$FAKE_TABLE" <<'EOF'
* 100 1.0 10.0
3B_dp2 400 2.0 77.2
3B_gtp2 416 24.0 52.5
8B_gtp2 230 4.0 91.3
8Bfit_dp2 200 3.0 144.1
torch_fsdp_28 800 60.1
EOF
SHARD=$ROOT/data/brown/brown_train_000000.bin
run_case mgpu_llama2 2 143771 env BENCH_ROWS=llama dev/bench_mgpu.sh .carry/none "$SHARD" "$WORK/torch_fake.py"
T=$WORK/mgpu_llama2.txt
check mgpu_3b_dp2_row "$T" "3B_dp2 ours DP=2 400.00 40960 44.3 77.2 2.00"
check mgpu_3b_gtp2_row "$T" "3B_gtp2 ours GTP=2 416.00 39385 42.6 52.5 24.00"
check mgpu_3b_fsdp_row "$T" "3B_fsdp torch FSDP 800.00 20480 22.1 60.1 -"
check mgpu_3b_gtp2_vs_dp2 "$T" "Llama 3B ours GTP=2 / ours DP=2 tokens/s 0.962x (bar 0.95x: meets)"
check mgpu_3b_gtp2_vs_fsdp "$T" "Llama 3B ours GTP=2 / torch FSDP tokens/s 1.923x (bar 1.8x: meets)"
check mgpu_3b_gtp2_memory "$T" "Llama 3B ours GTP=2 / DP=2 peak memory 0.680x (bar <= 0.75x: meets)"
check mgpu_3b_gtp2_exposed "$T" "3B_gtp2 exposed comm / step 5.8% (bar < 5%: MISSES)"
check mgpu_8b_fit_depth "$T" \
    "8Bfit_dp2: --model llama3.1-8b cut to 30 of 32 layers, the most DP=2 holds in 143771 MiB a GPU"
want="largest-model line: GTP=2 trains a 32-layer, 4096-channel Llama (8.03B parameters) at 17809 tokens/s, 91.3 GB"
want+=" a GPU; DP=2 holds a 30-layer, 4096-channel Llama (7.59B parameters): 20480 tokens/s, 144.1 GB a GPU"
check mgpu_8b_line "$T" "$want"
check mgpu_4gpu_skipped "$T" "skipped 3B_gtp4: needs 4 GPUs, this machine has 2"
check_absent mgpu_no_gpt2_rows "$T" "^(124M|1558M|big)_"
check_called mgpu_8b_fit_command "^8Bfit_dp2 .*--model llama3.1-8b .* --depth 30 "
check_called mgpu_8b_gtp2_command "^8B_gtp2 .*--batch-size 1 --seq-len 2048 --total-batch-tokens 4096 .*--gtp 2 "
check_called mgpu_3b_dp2_command "^3B_dp2 --model llama3.2-3b --batch-size 4 --seq-len 2048 --total-batch-tokens 16384 "

# Llama on four H100-sized GPUs: 8B with GTP=2 fails to allocate (the trainer's line in the table), DP=2's cut is 14
# layers, the 4-GPU lines.
cat > "$FAKE_TABLE" <<'EOF'
* 100 1.0 10.0
3B_dp4 400 3.0 77.2
3B_gtp4 440 12.0 39.8
8B_gtp2 fail
8Bfit_dp2 100 2.0 77.7
8B_gtp4 240 6.0 59.9
EOF
run_case mgpu_llama4 4 81559 env BENCH_ROWS="3B_dp4 3B_gtp4 8B_gtp2 8Bfit_dp2 8B_gtp4" \
    dev/bench_mgpu.sh .carry/none "$SHARD" "$WORK/torch_fake.py"
T=$WORK/mgpu_llama4.txt
want="8B_gtp2 ours GTP=2 FAILED [train_gpt rank 1] error: cannot allocate 8.00 GiB of GPU memory for parameters"
want+=" (1.00 GiB free of 79.18): out of memory; lower --batch-size or use a smaller model"
check mgpu_8b_gtp2_failed "$T" "$want"
check mgpu_8b_fit_h100 "$T" \
    "8Bfit_dp2: --model llama3.1-8b cut to 14 of 32 layers, the most DP=2 holds in 81559 MiB a GPU"
want="largest-model line: GTP=2 did not train a 32-layer, 4096-channel Llama (8.03B parameters) (row above); DP=2"
want+=" holds a 14-layer, 4096-channel Llama (4.10B parameters): 40960 tokens/s, 77.7 GB a GPU"
check mgpu_8b_line_failed "$T" "$want"
check mgpu_3b_gtp4_vs_dp4 "$T" "Llama 3B ours GTP=4 / ours DP=4 tokens/s 0.909x (no bar)"
check mgpu_3b_gtp4_memory "$T" "Llama 3B ours GTP=4 / DP=4 peak memory 0.516x (no bar)"
check mgpu_3b_gtp4_exposed "$T" "3B_gtp4 exposed comm / step 2.7% (bar < 5%: meets)"
check mgpu_8b_gtp4_vs_gtp2 "$T" "Llama 8B ours GTP=4 / GTP=2 tokens/s - (no bar; a run is missing)"
check mgpu_8b_gtp4_row "$T" "8B_gtp4 ours GTP=4 240.00 34133 41.6 59.9 6.00"

# The GPT-2 rows by default (no Llama row asked for): the pair's step is its slower GPU's, the ratios as before.
cat > "$FAKE_TABLE" <<'EOF'
* 200 2.0 30.0
124M_1gpu 57 0 15.6
124M_dp2 59 0.7 15.6
124M_pair 58 0 15.6
124M_pair_gpu1 58.5 0 15.6
1558M_dp2 180 3.0 45.6
1558M_gtp2 190 3.0 32.5
big_dp2 fail
torch_ddp_12 90 16.3
torch_fsdp_48 500 35.0
EOF
run_case mgpu_gpt2 2 81559 dev/bench_mgpu.sh "$WORK/torch_fake.py" "$SHARD"
T=$WORK/mgpu_gpt2.txt
check mgpu_gpt2_pair_slower "$T" "124M_pair ours 1 GPU x2 58.50 1120274 48.7 15.6 -"
check mgpu_gpt2_dp2_vs_1gpu "$T" "ours DP=2 / ours 1 GPU tokens/s 1.932x (bar 1.95x: MISSES)"
check mgpu_gpt2_dp2_vs_ddp "$T" "ours DP=2 / torch DDP tokens/s 1.525x (bar 1.1x: meets)"
check mgpu_gpt2_gtp2_memory "$T" "ours GTP=2 / DP=2 peak memory 0.713x (bar <= 0.75x: meets)"
want="largest-model line: GTP=2 trains a 48-layer, 2816-channel GPT-2 (4.71B parameters) at 40960 tokens/s, 30.0 GB"
check mgpu_gpt2_big_line "$T" "$want a GPU; DP=2 cannot hold it (row above)"
check mgpu_gpt2_no_llama "$T" "not asked for: 3B_dp2 (BENCH_ROWS)"
check_absent mgpu_gpt2_no_llama_lines "$T" "Llama"

# GTP's gathers over NCCL (group gtpnccl) beside the copy engines' (the default rows): each transport's row, the
# ce / nccl lines (the default row over the _nccl one), the trainer given --gtp-transport nccl on those rows only.
cat > "$FAKE_TABLE" <<'EOF'
* 200 2.0 30.0
1558M_gtp2 185 1.0 32.6
1558M_gtp2_nccl 190 3.0 32.5
1558M_gtp2_fp8 160 2.0 31.1
1558M_gtp2_nccl_fp8 150 3.0 31.0
1558M_gtp4 200 4.0 25.8
EOF
run_case mgpu_gtpnccl 4 81559 env BENCH_ROWS="1558M_gtp2 1558M_gtp2_fp8 1558M_gtp4 gtpnccl" \
    dev/bench_mgpu.sh "$WORK/torch_fake.py" "$SHARD"
T=$WORK/mgpu_gtpnccl.txt
check mgpu_gtpnccl_bf16 "$T" "GTP=2 ce / nccl tokens/s 1.027x (no bar)"
check mgpu_gtpnccl_fp8 "$T" "GTP=2 fp8 ce / nccl tokens/s 0.938x (no bar)"
check mgpu_gtpnccl_gtp4 "$T" "GTP=4 ce / nccl tokens/s 1.000x (no bar)"
check mgpu_gtpnccl_exposed "$T" "1558M_gtp2_nccl exposed comm / step 1.6% (bar < 5%: meets)"
check_called mgpu_gtpnccl_option "^1558M_gtp2_nccl_fp8 .*--gtp 2 --gtp-transport nccl"
check_absent mgpu_gtpnccl_default_rows "$FAKE_CALLS" "^1558M_gtp(2|2_fp8|4) .*--gtp-transport"

# FP8 under SP over the ring: the inputs gathered as E4M3 codes (the default row) against the activations (the _act
# row, the trainer given --sp-fp8-codes 0 there only), and that row's exposed communication.
cat > "$FAKE_TABLE" <<'EOF'
* 200 2.0 30.0
1558M_tp2_sp_fp8 88 3.5 40.0
1558M_tp2_sp_fp8_act 90 7.0 40.0
EOF
run_case mgpu_spcodes 2 143771 env BENCH_ROWS="1558M_tp2_sp_fp8 1558M_tp2_sp_fp8_act" \
    dev/bench_mgpu.sh "$WORK/torch_fake.py" "$SHARD"
T=$WORK/mgpu_spcodes.txt
check mgpu_spcodes_ratio "$T" "ours TP=2+SP fp8 codes / activations tokens/s 1.023x (no bar)"
check mgpu_spcodes_exposed "$T" "1558M_tp2_sp_fp8_act exposed comm / step 7.8% (bar < 5%: MISSES)"
check_called mgpu_spcodes_option "^1558M_tp2_sp_fp8_act .*--sequence-parallel 1 --precision fp8 --sp-fp8-codes 0"
check_absent mgpu_spcodes_default_row "$FAKE_CALLS" "^1558M_tp2_sp_fp8 .*--sp-fp8-codes"

# One GPU: dev/bench_llama.sh's table (its MFU and parameters from bench_table.py).
cat > "$FAKE_TABLE" <<'EOF'
* 100 0 10.0
ours_bf16 126.4 0 34.5
ours_fp8 106.4 0 35.9
torch_single_16 137.1 31.8
EOF
run_case llama1 1 81559 env BENCH_STEPS=20 dev/bench_llama.sh "$WORK/torch_fake.py" "$SHARD"
T=$WORK/llama1.txt
check llama1_header "$T" "Llama-3.2-1B shape: 1236M parameters, B 4 x T 2048, 8.22 GFLOP a token"
check llama1_torch "$T" "torch 137.10 59752 49.7 31.8"
check llama1_bf16 "$T" "ours_bf16 126.40 64810 53.9 34.5"
check llama1_fp8 "$T" "ours_fp8 106.40 76992 41.3 35.9"
check llama1_fp8_vs_bf16 "$T" "ours_fp8 / ours_bf16 tokens/s 1.188x peak memory 1.041x"

# Quality: the Llama pair, within 1% (PASS, status 0) and past it (FAIL, status 1).
printf '* val 0\nllama_bf16 val 3.000\nllama_fp8_delayed val 3.020\n' > "$FAKE_TABLE"
run_case quality_pass 1 81559 dev/fp8_quality.sh llama
T=$WORK/quality_pass.txt
check quality_pass_line "$T" "PASS final fp8 delayed / bf16: 3.0200 / 3.0000 = 1.0067 (+0.67%): within 1%"
check_status quality_pass_status ok
want="--model llama-tiny --depth 12 --width 768 --heads 12 --kv-heads 4 --ffn 2048 --batch-size 32"
check_called quality_command "^llama_fp8_delayed .*$want --total-batch-tokens 32768 --steps 300 .*--precision fp8 "
printf '* val 0\nllama_bf16 val 3.000\nllama_fp8_delayed val 3.040\n' > "$FAKE_TABLE"
run_case quality_fail 1 81559 dev/fp8_quality.sh llama
check quality_fail_line "$WORK/quality_fail.txt" \
    "FAIL final fp8 delayed / bf16: 3.0400 / 3.0000 = 1.0133 (+1.33%): more than 1%"
check_status quality_fail_status failed

# The memory estimate: the figures the headers quote (the 1B shape's are its measured 34.5 and 35.9 GB, less the
# 2.15 GB of SwiGLU outputs the trainer no longer keeps).
memory() { # NAME WANT_GB SHAPE OPTIONS...: dev/bench_memory.py's estimate
    local name=$1 want=$2 got
    shift 2
    got=$(python3 dev/bench_memory.py "$@" 2>&1 | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then echo "PASS $name"; else echo "FAIL $name: $got GB, want $want"; failed=1; fi
}
L1=llama:16:2048:32:8:8192:128256:1 L3=llama:28:3072:24:8:8192:128256:1 L8=llama:32:4096:32:8:14336:128256:0
memory memory_1b_bf16 32.4 "$L1" --batch 4 --seq 2048
memory memory_1b_fp8 33.7 "$L1" --batch 4 --seq 2048 --precision fp8
memory memory_3b_dp2_b4 77.2 "$L3" --batch 4 --seq 2048 --dp 2
memory memory_3b_dp2_b5 82.0 "$L3" --batch 5 --seq 2048 --dp 2
memory memory_3b_gtp2_b4 52.5 "$L3" --batch 4 --seq 2048 --gtp 2
memory memory_8b_gtp2_b1 91.3 "$L8" --batch 1 --seq 2048 --gtp 2
memory memory_8b_gtp4_b1 59.9 "$L8" --batch 1 --seq 2048 --gtp 4
memory memory_8b_dp2_b1 152.5 "$L8" --batch 1 --seq 2048 --dp 2

exit $failed
