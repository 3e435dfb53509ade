#!/usr/bin/env bash
# tokenize_speed.sh: ./tokenize's encoding speed beside the references, on the same machine and the same text: the
# default data's documents (data/brown's GPT-2 shards decoded by ./tokenize decode, so the script needs no node and
# no network), their lines as JSON Lines, repeated to about 100 MB. MB/s of UTF-8 text.
#   dev/tokenize_speed.sh [THREADS (16)] [REPEAT (16)]
#   dev/tokenize_speed.sh --carry     (on the CPU machine) what the GPU machine needs in .carry/, whose image has no
#                                     node and no PCRE2 headers: .carry/tokenize (PCRE2 linked in, x86-64-v3) and
#                                     .carry/llama3/tokenizer.json; then run it there carrying data/brown and .carry
# Rows, each where its reference is found (a missing one prints "-" and says why below the table):
#   gpt2    ours -j 1       tiktoken's gpt2 encode_ordinary (python3's tiktoken; without it, node's tiktoken package)
#   gpt2    ours -j THREADS tiktoken's encode_ordinary_batch with THREADS threads (python3's tiktoken)
#   llama3  ours -j 1       tiktoken with Llama 3's ranks and pattern from the tokenizer.json (python3), and
#                           llama3-tokenizer-js (node, data/node_modules: the CPU machine; the GPU machine has no node)
#   llama3  ours -j THREADS tiktoken's encode_ordinary_batch with Llama 3's ranks
# Ours is ./tokenize shards from the first document read to the last shard written (reading, JSON parsing, encoding,
# writing; the tokenizer's load excluded, as the references' is); theirs encode texts already in memory. tiktoken's
# gpt2 is built offline from data/gpt2 (its cache filled with those files, which are OpenAI's, hash-checked by it).
# The program: ./tokenize, else .carry/tokenize, else built by make (PCRE2's headers needed). Llama 3's tokenizer.json:
# data/llama3/tokenizer.json (make data-llama3), else .carry/llama3/tokenizer.json. Needs python3 and data/brown.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --carry ]; then
    [ -f data/llama3/tokenizer.json ] || make --no-print-directory data-llama3 >/dev/null
    mkdir -p .carry/llama3
    cp data/llama3/tokenizer.json .carry/llama3/
    # PROJECT_CFLAGS as the Makefile's, for a CPU of another kind, and PCRE2 linked in: the GPU machine lacks it
    cc -O3 -march=x86-64-v3 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-function -pthread -I. \
        data/tokenize.c -o .carry/tokenize -Wl,-Bstatic -lpcre2-8 -Wl,-Bdynamic -lm
    echo "wrote .carry/tokenize and .carry/llama3/tokenizer.json; on the GPU machine carry data/brown and .carry"
    exit 0
fi
THREADS=${1:-16}
REPEAT=${2:-16}
TOKENIZE=./tokenize
[ -x $TOKENIZE ] || { [ -x .carry/tokenize ] && TOKENIZE=.carry/tokenize; } ||
    make --no-print-directory tokenize >/dev/null ||
    { echo "error: no ./tokenize and it cannot be built here; run dev/tokenize_speed.sh --carry where it can" >&2; exit 1; }
ls data/brown/brown_train_*.bin >/dev/null 2>&1 || { echo "error: no data/brown shards; run make data (or carry data/brown)" >&2; exit 1; }
LLAMA3=
for f in data/llama3/tokenizer.json .carry/llama3/tokenizer.json; do [ -f "$f" ] && { LLAMA3=$f; break; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
notes=()

# The text: each document of the GPT-2 shards (the ids between <|endoftext|>s) decoded, its non-blank lines as JSON
# Lines; text_MB is the UTF-8 text's size of the whole corpus.
python3 - "$work" "$REPEAT" "$TOKENIZE" <<'PY'
import array, glob, json, subprocess, sys
work, repeat, tokenize = sys.argv[1], int(sys.argv[2]), sys.argv[3]
EOT = 50256
docs, cur = [], []
for path in sorted(glob.glob("data/brown/brown_train_*.bin")) + sorted(glob.glob("data/brown/brown_val_*.bin")):
    a = array.array("H")
    with open(path, "rb") as f:
        f.seek(1024)
        a.frombytes(f.read())
    for t in a:
        if t == EOT:
            if cur: docs.append(cur)
            cur = []
        else:
            cur.append(t)
if cur: docs.append(cur)
lines_in = "".join(" ".join(map(str, d)) + "\n" for d in docs).encode()
out = subprocess.run([tokenize, "decode", "-0"], input=lines_in, capture_output=True, check=True).stdout
texts = out.decode("utf-8").split("\0")[:-1]
with open(f"{work}/one.jsonl", "w", encoding="utf-8") as f:
    size = 0
    for t in texts:
        for line in t.split("\n"):
            if line.strip():
                f.write(json.dumps({"text": line}, ensure_ascii=False) + "\n")
                size += len(line.encode("utf-8"))
with open(f"{work}/text_MB", "w") as f:
    f.write(f"{size * repeat / 1e6:.1f}\n")
PY
for _ in $(seq "$REPEAT"); do cat "$work/one.jsonl"; done >"$work/corpus.jsonl"
size=$(cat "$work/text_MB")

mkdir -p "$work/out"
ours() { # THREADS [TOKENIZER] -> MB/s from the summary line (the progress lines on stderr shown only on a failure)
    $TOKENIZE shards --out "$work/out/s" --force -j "$1" ${2:+--tokenizer "$2"} "$work/corpus.jsonl" \
        2>"$work/tokenize_err" | tail -1 | sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p'
    [ "${PIPESTATUS[0]}" = 0 ] || { cat "$work/tokenize_err" >&2; exit 1; }
}

# python3's tiktoken: "ENCODING ONE MANY" MB/s, or nothing where it is missing
tiktoken_py() { # gpt2 | llama3 TOKENIZER_JSON
    python3 - "$work" "$THREADS" "$@" <<'PY' 2>"$work/tiktoken_err" || true
import hashlib, json, os, shutil, sys, time
work, threads, which = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    import tiktoken
except ImportError:
    sys.exit(1)
if which == "gpt2":
    # tiktoken's own gpt2, its two files from data/gpt2 (the ones it would download; it checks their hashes)
    cache = os.path.join(work, "tiktoken_cache")
    os.makedirs(cache, exist_ok=True)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for name in ("vocab.bpe", "encoder.json"):
        shutil.copy(os.path.join("data/gpt2", name), os.path.join(cache, hashlib.sha1((base + name).encode()).hexdigest()))
    enc = tiktoken.get_encoding("gpt2")
else:
    # Llama 3 was a tiktoken BPE: its ranks are the ids, each token's bytes under GPT-2's byte-to-character mapping
    doc = json.load(open(sys.argv[4], encoding="utf-8"))
    printable = [b for b in range(256) if (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)]
    code_to_byte = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            code_to_byte[chr(256 + n)] = b
            n += 1
    ranks = {bytes(code_to_byte[c] for c in s): i for s, i in doc["model"]["vocab"].items()}
    pattern = next(p["pattern"]["Regex"] for p in doc["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split")
    specials = {t["content"]: t["id"] for t in doc["added_tokens"]}
    enc = tiktoken.Encoding("llama3", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
texts = [json.loads(line)["text"] for line in open(os.path.join(work, "corpus.jsonl"), encoding="utf-8")]
mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
t0 = time.perf_counter()
for t in texts:
    enc.encode_ordinary(t)
one = mb / (time.perf_counter() - t0)
t0 = time.perf_counter()
enc.encode_ordinary_batch(texts, num_threads=threads)
many = mb / (time.perf_counter() - t0)
print(f"{one:.1f} {many:.1f}")
PY
}

# node's JavaScript references, one thread: "MB/s", or nothing where node or the package is missing
js_ref() { # gpt2 | llama3
    command -v node >/dev/null || return 0
    node --input-type=module - "$work/corpus.jsonl" "$1" <<'JS' 2>>"$work/js_err" || true
import fs from "node:fs";
import { createRequire } from "node:module";
const [file, which] = process.argv.slice(2);
const texts = fs.readFileSync(file, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l).text);
let encode;
if (which === "gpt2") {
  const { get_encoding } = createRequire(`${process.cwd()}/test/`)("tiktoken"); // test/node_modules
  const enc = get_encoding("gpt2");
  encode = (t) => enc.encode_ordinary(t);
} else {
  const { Llama3Tokenizer } = await import(`file://${process.cwd()}/data/node_modules/llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js`);
  const tok = new Llama3Tokenizer(), never = /(?!)/g;
  encode = (t) => tok.encode(t, { bos: false, eos: false, specialTokenRegex: never });
}
const mb = texts.reduce((s, t) => s + Buffer.byteLength(t, "utf8"), 0) / 1e6;
const t0 = process.hrtime.bigint();
for (const t of texts) encode(t);
console.log((mb / (Number(process.hrtime.bigint() - t0) / 1e9)).toFixed(1));
JS
}

ratio() { # OURS THEIRS
    [ -n "$2" ] && [ "$2" != - ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }' || printf -- '-'
}
row() { # TOKENIZER THREADS OURS REFERENCE THEIRS
    printf '%-9s %-7s %8s %10s  %-54s %9s %6s\n' "$1" "$2" "$size" "$3" "$4" "${5:--}" "$(ratio "$3" "${5:-}")"
}
printf '%-9s %-7s %8s %10s  %-54s %9s %6s\n' tokenizer threads text_MB ours_MB/s reference ref_MB/s ratio

read -r tik1 tikn <<<"$(tiktoken_py gpt2)" || true
ours1=$(ours 1) oursn=$(ours "$THREADS")
if [ -n "${tik1:-}" ]; then
    row gpt2 1 "$ours1" "tiktoken encode_ordinary (python)" "$tik1"
else
    notes+=("python3 has no tiktoken here: the gpt2 rows use node's tiktoken package (wasm, one thread)")
    row gpt2 1 "$ours1" "tiktoken encode_ordinary (node, wasm)" "$(js_ref gpt2)"
fi
row gpt2 "$THREADS" "$oursn" "tiktoken encode_ordinary_batch, $THREADS threads" "${tikn:-}"

if [ -n "$LLAMA3" ]; then
    read -r ltik1 ltikn <<<"$(tiktoken_py llama3 "$LLAMA3")" || true
    lours1=$(ours 1 "$LLAMA3") loursn=$(ours "$THREADS" "$LLAMA3")
    [ -n "${ltik1:-}" ] && row llama3 1 "$lours1" "tiktoken, Llama 3's ranks (python)" "$ltik1"
    if [ -d data/node_modules/llama3-tokenizer-js ] && command -v node >/dev/null; then
        row llama3 1 "$lours1" "llama3-tokenizer-js (node)" "$(js_ref llama3)"
    else
        notes+=("no node or data/node_modules/llama3-tokenizer-js here: its row runs on the CPU machine (npm ci --prefix data)")
    fi
    row llama3 "$THREADS" "$loursn" "tiktoken encode_ordinary_batch, Llama 3's, $THREADS threads" "${ltikn:-}"
else
    notes+=("no Llama 3 tokenizer.json (data/llama3/ or .carry/llama3/): no llama3 rows; make data-llama3, or carry it")
fi
[ -s "$work/tiktoken_err" ] && notes+=("python3's tiktoken failed: $(tail -1 "$work/tiktoken_err")")
[ -s "$work/js_err" ] && notes+=("node failed: $(tail -1 "$work/js_err")")
for n in "${notes[@]+"${notes[@]}"}"; do echo "note: $n"; done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
