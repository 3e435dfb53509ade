#!/usr/bin/env python3
"""eval_check.py: train_gpt's multiple-choice evaluation (--eval-data, llmc/eval.h) against PyTorch/transformers, and
its time on a HellaSwag-sized file (the GPU machine: needs torch, transformers).

(1) Train GPT-2 small's shape (--model d12) for --steps steps on the Brown text with ./train_gpt (bf16), scoring a
    synthetic eval file of the Brown validation text (dev/eval_synth.py, --examples examples) at the last step with
    --eval-dump; score the same checkpoint again in fp32 (--init-from, one step at --lr 0, which leaves the weights as
    they are). Export the checkpoint with ./hf_model export, load it with GPT2LMHeadModel in fp32 (no TF32), and
    compute the same completion-style score: per completion the sum of the cross-entropies of its tokens given the
    context and the tokens before them, acc by the lowest sum, acc_norm by the lowest mean. dev/eval_compare.py's
    compare() prints PASS/FAIL lines: every completion's sum within a tolerance a token (fp32 1e-3: summation order;
    bf16 0.1: activations and logits of 8 significant bits), and every verdict that is not a near tie the same.
(2) Timing: a synthetic file of 10,042 examples (HellaSwag's validation size: 4 endings, contexts ~50 and endings
    ~20 tokens) scored by the trained 124M model on one GPU at --batch-size 16 x --seq-len 1024 in bf16: the "eval |
    step 0 | ... | X ms" line of train_gpt's log. PASS under --bar-ms (10,000: the issue's bar).

Run from the repository root after `make train_gpt hf_model` (dev/eval_check.sh does both):
    python3 dev/eval_check.py [--work /tmp/eval_check] [--steps 40] [--examples 500]
"""
import argparse
import os
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_compare import compare, read_dump  # noqa: E402
from hf_check import run  # noqa: E402 (a command's output to a log, FAIL on a non-zero exit)

TOLERANCE = {"fp32": 1e-3, "bf16": 0.1}  # a token, as dev/eval_parity.sh
EVAL_MAGIC, HEADER_INTS = 20240522, 256
HELLASWAG_EXAMPLES = 10042


def read_eval_file(path):
    """The examples of an eval file (version 1 uint16 or 2 uint32) as (label, context, [endings])."""
    with open(path, "rb") as f:
        header = struct.unpack(f"<{HEADER_INTS}i", f.read(4 * HEADER_INTS))
        if header[0] != EVAL_MAGIC or header[1] not in (1, 2):
            sys.exit(f"FAIL: {path} is not an eval file (magic {header[0]}, version {header[1]})")
        width = "H" if header[1] == 1 else "I"
        size = struct.calcsize(width)
        data = f.read()
    fields = struct.unpack(f"<{len(data) // size}{width}", data)
    examples, at = [], 0
    for _ in range(header[2]):
        n = fields[at + 1] // size
        ex = fields[at:at + n]
        label, completions, pos = ex[3], ex[4], 5
        context = list(ex[pos + 1:pos + 1 + ex[pos]])
        pos += 1 + ex[pos]
        endings = []
        for _ in range(completions):
            endings.append(list(ex[pos + 1:pos + 1 + ex[pos]]))
            pos += 1 + ex[pos]
        examples.append((label, context, endings))
        at += n
    return examples


def hf_scores(model, examples, device):
    """Dump records (as --eval-dump writes them) from transformers: one forward of an example's rows, padded."""
    import torch
    import torch.nn.functional as F
    records = []
    with torch.no_grad():
        for i, (label, context, endings) in enumerate(examples):
            rows = [context + e for e in endings]
            width = max(len(r) for r in rows) - 1
            inputs = torch.zeros((len(rows), width), dtype=torch.long)
            for r, row in enumerate(rows):
                inputs[r, :len(row) - 1] = torch.tensor(row[:-1])
            logits = model(inputs.to(device)).logits.float()
            sums = []
            for r, (row, e) in enumerate(zip(rows, endings)):
                at = len(context) - 1  # the position that predicts the first ending token
                target = torch.tensor(e, device=device)
                sums.append(F.cross_entropy(logits[r, at:at + len(e)], target, reduction="sum").item())
            records.append({"example": i, "label": label, "loss_sums": sums, "tokens": [len(e) for e in endings]})
    return records


def eval_line(text, step):
    m = re.search(rf"^eval \| step {step} \| acc ([0-9.]+) \| acc_norm ([0-9.]+) \| (\d+) examples \| (\d+) ms$", text,
                  re.M)
    if not m:
        sys.exit(f"FAIL: no 'eval | step {step}' line in train_gpt's output")
    return float(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/eval_check")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--examples", type=int, default=500)
    ap.add_argument("--bar-ms", type=float, default=10000.0)
    ap.add_argument("--train-data", default="data/brown/brown_train_000000.bin")
    ap.add_argument("--val-data", default="data/brown/brown_val_000000.bin")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda name: os.path.join(a.work, name)
    for f in ("run", "fp32", "timing"):
        subprocess.run(["rm", "-rf", w(f)])
    small, big = w("eval.bin"), w("eval_10042.bin")
    run([sys.executable, "dev/eval_synth.py", a.val_data, small, str(a.examples)], w("synth.log"))
    run([sys.executable, "dev/eval_synth.py", a.val_data, big, str(HELLASWAG_EXAMPLES), "--seed", "2"], w("synth.log"))
    common = ["--model", "d12", "--batch-size", "16", "--seq-len", "1024", "--sample-every", "0", "--val-every", "0",
              "--train-data", a.train_data]
    run(["./train_gpt", *common, "--total-batch-tokens", "65536", "--steps", str(a.steps), "--warmup-steps", "5",
         "--lr", "1e-3", "--precision", "bf16", "--eval-data", small, "--eval-every", str(a.steps),
         "--eval-dump", w("bf16.jsonl"), "--out-dir", w("run")], w("train.log"))
    model_file = w(f"run/model_{a.steps:08d}.bin")
    once = ["--init-from", model_file, "--total-batch-tokens", "16384", "--steps", "1", "--lr", "0", "--warmup-steps",
            "0", "--eval-every", "1", "--save", "0"]
    run(["./train_gpt", *common, *once, "--precision", "fp32", "--eval-data", small, "--eval-dump", w("fp32.jsonl"),
         "--out-dir", w("fp32")], w("fp32.log"))
    run(["./hf_model", "export", model_file, w("hf"), "--force"], w("export.log"))

    import torch
    from transformers import GPT2LMHeadModel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT2LMHeadModel.from_pretrained(w("hf"), torch_dtype=torch.float32).to(a.device).eval()
    theirs = hf_scores(model, read_eval_file(small), a.device)
    failures = 0
    for precision in ("fp32", "bf16"):
        failures += compare(theirs, read_dump(w(f"{precision}.jsonl")), TOLERANCE[precision],
                            f"eval {precision} vs transformers")

    text = run(["./train_gpt", *common, *once, "--precision", "bf16", "--eval-data", big, "--out-dir", w("timing")],
               w("timing.log"))
    acc, acc_norm, n, ms = eval_line(text, 0)
    ok = n == HELLASWAG_EXAMPLES and ms < a.bar_ms
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} eval timing: {n} examples in {ms} ms (bar {a.bar_ms:.0f} ms; acc {acc:.4f} "
          f"acc_norm {acc_norm:.4f}; d12 bf16, B 16 x T 1024, {torch.cuda.get_device_name()})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
