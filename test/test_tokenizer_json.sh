#!/usr/bin/env bash
# test_tokenizer_json.sh: ./tokenize --tokenizer with Hugging Face tokenizer.json files: GPT-2's and Llama 3's
# against the JavaScript references (test/tokenizer_json_oracle.mjs), and the tokenizers it refuses, one line each.
# Needs node, tiktoken (npm ci --prefix test) and data/{gpt2,llama3}/tokenizer.json (make data-llama3); make test
# prepares them. A missing input is a failure, not a skip.
set -u
cd "$(dirname "$0")/.."
for need in "node:$(command -v node)" "test/node_modules/tiktoken:$(ls -d test/node_modules/tiktoken 2>/dev/null)" \
    "data/gpt2/tokenizer.json:$(ls data/gpt2/tokenizer.json 2>/dev/null)" \
    "data/llama3/tokenizer.json:$(ls data/llama3/tokenizer.json 2>/dev/null)" "./tokenize:$(ls ./tokenize 2>/dev/null)"; do
    [ -n "${need#*:}" ] || { echo "FAIL tokenizer_json_inputs: ${need%%:*} is missing; run make data-llama3 tokenize and npm ci --prefix test"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One tokenizer.json that ./tokenize must refuse, and what its one-line error must say.
expect_refused() {
    local name=$1 json=$2 want=$3
    printf '%s' "$json" >"$tmp/$name.json"
    local err rc
    err=$(./tokenize encode hi --tokenizer "$tmp/$name.json" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$want"* ]]; then
        echo "PASS tokenizer_json_refuses_$name"
    else
        echo "FAIL tokenizer_json_refuses_$name: status $rc, stderr '$err'"
    fi
}
ascii_vocab=$(node -e 'const v={};let n=0;for(let b=0;b<256;b++){const c=(b>=33&&b<=126)||(b>=161&&b<=172)||(b>=174)?b:256+n++;v[String.fromCodePoint(c)]=b}v["ab"]=256;v["abc"]=257;console.log(JSON.stringify(v))')
bytelevel='{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}'
expect_refused unigram '{"model":{"type":"Unigram","vocab":[["a",0.0]]}}' "a tokenizer of another kind (model type Unigram)"
expect_refused wordpiece '{"model":{"type":"WordPiece","vocab":{"a":0}}}' "a tokenizer of another kind (model type WordPiece)"
expect_refused metaspace "{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":$ascii_vocab,\"merges\":[\"a b\"]}}" \
    "its pre_tokenizer is not ByteLevel"
expect_refused merges_out_of_order "{\"pre_tokenizer\":$bytelevel,\"model\":{\"type\":\"BPE\",\"vocab\":$ascii_vocab,\"merges\":[\"ab c\",\"a b\"]}}" \
    "forms token 256 after a merge formed token 257"
expect_refused merge_not_in_vocab "{\"pre_tokenizer\":$bytelevel,\"model\":{\"type\":\"BPE\",\"vocab\":$ascii_vocab,\"merges\":[\"b c\"]}}" \
    "merge 0 does not join two tokens of the vocabulary into a third"
expect_refused special_out_of_order "{\"pre_tokenizer\":$bytelevel,\"added_tokens\":[{\"id\":300,\"content\":\"<|x|>\"}],\"model\":{\"type\":\"BPE\",\"vocab\":$ascii_vocab,\"merges\":[\"a b\"]}}" \
    "special tokens must follow the vocabulary's ids in order"
# the same small file with a well-formed header encodes by its own merges: "abc" is one token, "abd" two
printf '%s' "{\"pre_tokenizer\":$bytelevel,\"added_tokens\":[{\"id\":258,\"content\":\"<|x|>\"}],\"model\":{\"type\":\"BPE\",\"vocab\":$ascii_vocab,\"merges\":[\"a b\",\"ab c\"]}}" >"$tmp/small.json"
out=$(./tokenize encode "abc abd" --tokenizer "$tmp/small.json" 2>&1)
[ "$out" = "257 32 256 100" ] && echo "PASS tokenizer_json_small_file" || echo "FAIL tokenizer_json_small_file: got '$out'"
# Llama 3's vocabulary (128,256 ids) writes llm.c's uint32 shards (magic 20240801, version 7), each document after
# <|begin_of_text|> (128000), the ids those of `tokenize encode`
mkdir -p "$tmp/l3docs" "$tmp/l3"
printf 'Hello world' >"$tmp/l3docs/0.txt"
printf ' second \xf0\x9f\x98\x80 document' >"$tmp/l3docs/1.txt"
./tokenize shards --out "$tmp/l3/x" --val-every 1 --tokenizer data/llama3/tokenizer.json "$tmp/l3docs" >/dev/null 2>&1
want="128000 $(./tokenize encode --tokenizer data/llama3/tokenizer.json 'Hello world') 128000 $(printf ' second \xf0\x9f\x98\x80 document' | ./tokenize encode --tokenizer data/llama3/tokenizer.json -)"
got=$(od -A n -t u4 -v -j 1024 "$tmp/l3/x_val_000000.bin" 2>/dev/null | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
header=$(od -A n -t d4 -N 12 "$tmp/l3/x_val_000000.bin" 2>/dev/null | tr -s ' ' ' ' | sed 's/^ //; s/ $//')
if [ "$got" = "$want" ] && [ "$header" = "20240801 7 $(echo $want | wc -w)" ]; then
    echo "PASS tokenizer_json_llama3_shards_uint32"
else
    echo "FAIL tokenizer_json_llama3_shards_uint32: header '$header' ids '$got', want '20240801 7 $(echo $want | wc -w)' '$want'"
fi
# shards through GPT-2's tokenizer.json are GPT-2's folder's, byte for byte (the separator is its <|endoftext|>)
mkdir -p "$tmp/docs" "$tmp/a" "$tmp/b"
printf 'Hello world\r\n  it'"'"'s 12345 \xf0\x9f\x98\x80' >"$tmp/docs/0.txt"
printf '<|endoftext|> second document' >"$tmp/docs/1.txt"
if ./tokenize shards --out "$tmp/a/x" --val-every 2 "$tmp/docs" >/dev/null 2>&1 &&
    ./tokenize shards --out "$tmp/b/x" --val-every 2 --tokenizer data/gpt2/tokenizer.json "$tmp/docs" >/dev/null 2>&1 &&
    cmp -s "$tmp/a/x_train_000000.bin" "$tmp/b/x_train_000000.bin" && cmp -s "$tmp/a/x_val_000000.bin" "$tmp/b/x_val_000000.bin"; then
    echo "PASS tokenizer_json_gpt2_shards_equal_folder"
else
    echo "FAIL tokenizer_json_gpt2_shards_equal_folder: the shards differ or a run failed"
fi

node test/tokenizer_json_oracle.mjs
