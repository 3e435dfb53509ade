#!/usr/bin/env bash
# The update in backward (--grad-clip 0: each group's AdamW queued as soon as its gradients are final) against the
# update after the backward (--update-in-backward 0), bit for bit, plain and resumed (dev/variant_check.sh). In
# PRECISION (default bf16), OPTS added to every run (e.g. OPTS="--total-batch-tokens 256": one micro-step a step).
#   dev/update_check.sh [PRECISION] [SHARD]          SANITIZE=memcheck|racecheck: also that tool on a short run
set -euo pipefail
cd "$(dirname "$0")/.."
PRECISION=${1:-bf16}
OPTS="--grad-clip 0 --update-in-backward 0${OPTS:+ $OPTS}" exec dev/variant_check.sh \
    "update in backward $PRECISION${OPTS:+ $OPTS}" "--update-in-backward 1" "$PRECISION" ${2:+"$2"}
