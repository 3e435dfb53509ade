#!/usr/bin/env bash
# test_tokenizer.sh: ./tokenize against tiktoken's gpt2 encoding (test/tokenizer_oracle.mjs), plus the command
# line itself. Needs node and the pinned tiktoken: `npm ci --prefix test` (CI's .ci/run does it). A missing
# oracle is a failure, not a skip: without it nothing here is checked.
set -u
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null; then
    echo "FAIL tokenizer_oracle: node not found; install Node.js 18+ and run npm ci --prefix test"; exit 1
fi
if [ ! -f test/node_modules/tiktoken/package.json ]; then
    echo "FAIL tokenizer_oracle: tiktoken is not installed; run npm ci --prefix test"; exit 1
fi
if [ ! -x ./tokenize ]; then
    echo "FAIL tokenizer_oracle: ./tokenize is not built; run make tokenize"; exit 1
fi

# The plain command line: arguments in, ids and text out.
out=$(./tokenize encode "Hello world")
[ "$out" = "15496 995" ] && echo "PASS tokenize_encode_argument" || echo "FAIL tokenize_encode_argument: got '$out'"
out=$(printf 'Hello world' | ./tokenize encode)
[ "$out" = "15496 995" ] && echo "PASS tokenize_encode_stdin" || echo "FAIL tokenize_encode_stdin: got '$out'"
out=$(./tokenize decode 15496 995 50256)
[ "$out" = "Hello world<|endoftext|>" ] && echo "PASS tokenize_decode_arguments" || echo "FAIL tokenize_decode_arguments: got '$out'"
err=$(./tokenize decode 50257 2>&1 >/dev/null)
case "$err" in *"'50257' is not a token id"*) echo "PASS tokenize_decode_rejects_bad_id" ;;
    *) echo "FAIL tokenize_decode_rejects_bad_id: stderr '$err'" ;; esac

node test/tokenizer_oracle.mjs
