#!/usr/bin/env bash
# attention_bits.sh: holds the attention kernels (llmc/attention.cuh) to the bits an earlier revision's gave, at
# multi-head shapes (GPT-2's): dev/attention_bits.cu is built against this tree's llmc/ and against the earlier
# llmc/, both run, and their checksum lines (out, lse, dqkv, bias gradient; fp32 and bf16) must be the same.
#   dev/attention_bits.sh save REV   where git is: REV's llmc/ into dev/bin/attention_bits_base/ (ignored by git; a
#                                    device call carries it: carry ["dev/bin/attention_bits_base"])
#   dev/attention_bits.sh            on the GPU: builds both, runs both, prints PASS or FAIL (and the lines that differ)
# A base from before grouped-query attention (its interface takes no KV argument) is built with
# -DATTENTION_BEFORE_GQA, one whose backward takes no RoPE tables with -DATTENTION_BEFORE_ROPE.
set -u
cd "$(dirname "$0")/.."
BASE=dev/bin/attention_bits_base
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
FLAGS=(-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a)

if [ "${1:-}" = save ]; then
    rev=${2:?"usage: dev/attention_bits.sh save REV (a git revision, e.g. main)"}
    rm -rf "$BASE" && mkdir -p "$BASE" || exit 1
    git archive "$rev" llmc | tar -x -C "$BASE" || { echo "FAIL attention bits: cannot read llmc/ of $rev"; exit 1; }
    echo "saved llmc/ of $rev ($(git rev-parse --short "$rev")) in $BASE"
    exit 0
fi

[ -f "$BASE/llmc/attention.cuh" ] || {
    echo "FAIL attention bits: no base in $BASE; run dev/attention_bits.sh save REV where git is, and carry it"
    exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
base_flags=(-I"$BASE")
grep -q 'int NH, int KV, int HS' "$BASE/llmc/attention.cuh" || base_flags+=(-DATTENTION_BEFORE_GQA)
grep -q 'RopeTables rope, void \*workspace' "$BASE/llmc/attention.cuh" || base_flags+=(-DATTENTION_BEFORE_ROPE)
# the base's llmc/ first on the include path, so that "llmc/..." is its headers
"$NVCC" "${FLAGS[@]}" "${base_flags[@]}" dev/attention_bits.cu -o "$out/base" -lcublasLt & base_build=$!
"$NVCC" "${FLAGS[@]}" -I. dev/attention_bits.cu -o "$out/tree" -lcublasLt & tree_build=$!
wait "$base_build" && wait "$tree_build" || { echo "FAIL attention bits: build failed"; exit 1; }
"$out/base" > "$out/base.txt" && "$out/tree" > "$out/tree.txt" || { echo "FAIL attention bits: a run failed"; exit 1; }
if [ -s "$out/base.txt" ] && cmp -s "$out/base.txt" "$out/tree.txt"; then
    echo "PASS attention bits: $(wc -l < "$out/tree.txt") shapes and precisions give the base's bits"
else
    echo "FAIL attention bits: the tree's kernels give other bits than the base's"
    diff "$out/base.txt" "$out/tree.txt"
fi
