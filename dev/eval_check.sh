#!/usr/bin/env bash
# The multiple-choice evaluation on the GPU machine: the builds (train_gpt, hf_model), then dev/eval_check.py (train
# GPT-2 small's shape on the Brown text, its evaluation against transformers' in fp32 and bf16, and the time of a
# 10,042-example file on one GPU). PASS/FAIL lines; exit status non-zero on any FAIL.
#   dev/eval_check.sh [eval_check.py's options]
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt hf_model
python3 dev/eval_check.py "$@"
