#!/usr/bin/env bash
# The GTP path on one GPU (--gtp 1 --gtp-materialize 1: gathers, reduce-scatters and the prefetch chain through
# communicators of one rank) against the plain path, bit for bit, plain and resumed (dev/variant_check.sh). In
# PRECISION (default bf16), with PREFETCH weights gathered ahead (default 2; 1 is the smallest pool the forward's
# chunks allow), and OPTS added to every run (e.g. OPTS="--fp8-recipe current --fp8-bf16-blocks 1": in fp8, the FP8
# blocks gather FP8 codes, the others bf16, and current scaling maxes the shards' amaxes over the group before each
# weight cast). GTP_TRANSPORT: ce (the default) the gathers as copy-engine copies behind the ready and read flags
# (llmc/gtp.cuh; one rank is its own peer), nccl NCCL's all-gather. The row's name says which.
#   dev/gtp_check.sh [PRECISION] [PREFETCH] [SHARD]          SANITIZE=memcheck|racecheck: also that tool on a GTP run
set -euo pipefail
cd "$(dirname "$0")/.."
PRECISION=${1:-bf16}
PREFETCH=${2:-2}
TRANSPORT=${GTP_TRANSPORT:-ce}
exec dev/variant_check.sh "gtp one-rank $TRANSPORT $PRECISION prefetch $PREFETCH${OPTS:+ $OPTS}" \
    "--gtp-materialize 1 --gtp-prefetch $PREFETCH --gtp-transport $TRANSPORT" "$PRECISION" ${3:+"$3"}
