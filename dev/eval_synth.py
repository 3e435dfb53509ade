#!/usr/bin/env python3
"""eval_synth.py: a synthetic multiple-choice eval file (llmc/eval_data.h, version 1: llm.c's HellaSwag format) cut
from a token shard (llm.c's format, uint16), of HellaSwag's shape: each example a context of ~CONTEXT tokens of the
shard's text, then 4 endings of ~ENDING tokens, one of them the text's own continuation (the label, at a random
place), the others taken from elsewhere in the shard. A model trained on that text prefers the true continuation, so
its accuracy rises above chance (0.25); lengths vary by half either way, so acc (lowest sum) and acc_norm (lowest mean)
differ.

  dev/eval_synth.py SHARD OUT.bin EXAMPLES [--context 50] [--ending 20] [--seed 1]
"""
import argparse
import random
import struct

EVAL_MAGIC, EVAL_VERSION_U16, HEADER_INTS, SHARD_MAGIC, DELIMITER = 20240522, 1, 256, 20240520, 65535
COMPLETIONS = 4


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack(f"<{HEADER_INTS}i", f.read(4 * HEADER_INTS))
        if header[0] != SHARD_MAGIC:
            raise SystemExit(f"{path}: magic {header[0]}, not a uint16 token shard ({SHARD_MAGIC})")
        n = header[2]
        data = f.read(2 * n)
    return struct.unpack(f"<{n}H", data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shard")
    ap.add_argument("out")
    ap.add_argument("examples", type=int)
    ap.add_argument("--context", type=int, default=50)
    ap.add_argument("--ending", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    tokens = read_shard(a.shard)
    rng = random.Random(a.seed)
    vary = lambda n: rng.randint(n - n // 2, n + n // 2)
    span = a.context + a.context // 2 + a.ending + a.ending // 2  # the longest context and true ending
    examples, longest = [], 0
    for i in range(a.examples):
        at = rng.randrange(len(tokens) - span)
        ctx_len = vary(a.context)
        context = tokens[at:at + ctx_len]
        label = rng.randrange(COMPLETIONS)
        endings = []
        for c in range(COMPLETIONS):
            n = vary(a.ending)
            start = at + ctx_len if c == label else rng.randrange(len(tokens) - n)
            endings.append(tokens[start:start + n])
        fields = [DELIMITER, 0, i, label, COMPLETIONS, len(context), *context]
        for e in endings:
            fields += [len(e), *e]
        fields[1] = 2 * len(fields)
        longest = max(longest, fields[1])
        examples.append(struct.pack(f"<{len(fields)}H", *fields))
    header = [EVAL_MAGIC, EVAL_VERSION_U16, a.examples, longest] + [0] * (HEADER_INTS - 4)
    with open(a.out, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        for e in examples:
            f.write(e)
    print(f"wrote {a.out}: {a.examples} examples, contexts ~{a.context} and {COMPLETIONS} endings ~{a.ending} tokens "
          f"from {a.shard}")


if __name__ == "__main__":
    main()
