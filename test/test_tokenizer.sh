#!/usr/bin/env bash
# test_tokenizer.sh: ./tokenize against tiktoken's gpt2 encoding (test/tokenizer_oracle.mjs), plus the command
# line itself, and what `tokenize shards` refuses to overwrite. Needs node and the pinned tiktoken: `npm ci --prefix
# test` (CI's .ci/run does it). A missing oracle is a failure, not a skip: without it nothing here is checked.
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

tmp_dir=$(mktemp -d)
tmp_err=$tmp_dir/stderr
trap 'rm -rf "$tmp_dir"' EXIT

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

# Nothing is printed unless every id is valid (a bad id after good ones printed their text first).
out=$(./tokenize decode 12 13x 2>/dev/null); rc=$?
[ "$rc" -ne 0 ] && [ -z "$out" ] && echo "PASS tokenize_decode_bad_id_prints_nothing" ||
    echo "FAIL tokenize_decode_bad_id_prints_nothing: status $rc, stdout '$out'"
# -0: CRLF line ends are line ends; a NUL inside a line, or a signed id, is refused naming the line, printing nothing.
out=$(printf '15496 995\r\n\t50256\n' | ./tokenize decode -0 | tr '\0' '|')
[ "$out" = "Hello world|<|endoftext|>|" ] && echo "PASS tokenize_decode_crlf_lines" ||
    echo "FAIL tokenize_decode_crlf_lines: got '$out'"
for case in "nul:15496 9\x0095\n:line 1 of standard input holds a NUL byte" "sign:15496\n+995\n:line 2 of standard input: '+995'"; do
    name=${case%%:*} rest=${case#*:}
    input=${rest%%:*} want=${rest#*:}
    out=$(printf "$input" | ./tokenize decode -0 2>"$tmp_err"); rc=$?
    if [ "$rc" -ne 0 ] && [ -z "$out" ] && grep -qF -- "$want" "$tmp_err"; then
        echo "PASS tokenize_decode_refuses_$name"
    else
        echo "FAIL tokenize_decode_refuses_$name: status $rc, stdout '$out', stderr '$(cat "$tmp_err")'"
    fi
done
# shards: an --out folder that does not exist is found before tokenizing (the input here is not UTF-8, which
# tokenizing would find first)
printf 'caf\xe9' >"$tmp_dir/latin1.txt"
err=$(./tokenize shards --out "$tmp_dir/nonexistent/x" "$tmp_dir/latin1.txt" 2>&1 >/dev/null)
case "$err" in *"the folder '$tmp_dir/nonexistent' does not exist"*) echo "PASS tokenize_shards_checks_out_first" ;;
    *) echo "FAIL tokenize_shards_checks_out_first: stderr '$err'" ;; esac

# shards: any shard of the prefix stops a run without --force (not only the _000000 ones) and is left as it was;
# with --force, every shard of the earlier run past the new ones is removed, gaps or not, and other files are kept
printf 'Hello world' >"$tmp_dir/doc0.txt"
printf 'Goodbye world' >"$tmp_dir/doc1.txt"
out=$tmp_dir/out
mkdir -p "$out"
printf 'an earlier shard' >"$out/x_train_000001.bin"
err=$(./tokenize shards --out "$out/x" --val-every 2 "$tmp_dir/doc0.txt" "$tmp_dir/doc1.txt" 2>&1 >/dev/null); rc=$?
if [ "$rc" -ne 0 ] && [[ "$err" == *"'$out/x_train_000001.bin' exists; pass --force"* ]] &&
    [ "$(cat "$out/x_train_000001.bin")" = "an earlier shard" ] && [ "$(ls "$out")" = x_train_000001.bin ]; then
    echo "PASS tokenize_shards_refuses_any_existing_shard"
else
    echo "FAIL tokenize_shards_refuses_any_existing_shard: status $rc, stderr '$err', folder:" $(ls "$out")
fi
printf 'another' >"$out/x_train_000005.bin"
printf 'mine' >"$out/x_train_notes.bin"
if ./tokenize shards --out "$out/x" --val-every 2 --force "$tmp_dir/doc0.txt" "$tmp_dir/doc1.txt" >/dev/null 2>&1 &&
    [ "$(ls "$out" | tr '\n' ' ')" = "x_train_000000.bin x_train_notes.bin x_val_000000.bin " ]; then
    echo "PASS tokenize_shards_force_removes_every_stale_shard"
else
    echo "FAIL tokenize_shards_force_removes_every_stale_shard: folder:" $(ls "$out")
fi

node test/tokenizer_oracle.mjs
