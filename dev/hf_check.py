#!/usr/bin/env python3
"""hf_check.py: ./hf_model against Hugging Face transformers itself (the GPU machine: needs torch, transformers, numpy).

GPT-2 (parts a and b):

(a) export: train a small model briefly with ./train_gpt, export its last checkpoint with `./hf_model export`, load the
    folder with GPT2LMHeadModel.from_pretrained (no missing or unexpected weights allowed) and its tokenizer with
    AutoTokenizer, and compute the validation loss on the tokens train_gpt validated on: the first
    min(windows, --val-batches x B) windows of T+1 tokens at offsets 0, T, 2T, ... of the validation shard, in order,
    the mean over all their tokens (llmc/dataloader.h, val_pass_windows). It must equal the "val loss" train_gpt
    printed at its last step (the checkpoint holds the weights it validated) within TOLERANCE_A[precision], relative: train_gpt computes in
    --precision, HF here in fp32 without TF32; fp32 leaves only summation order (and TF32 GEMMs if cuBLAS picks
    them), bf16 its 8-bit significands.
(b) import: save_pretrained a randomly initialised GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4,
    n_positions=256)), its weights redrawn with std WEIGHT_STD (GPT-2's 0.02 gives logits so flat that the loss is
    ln(50257) whatever the mapping; at 0.3 a transposed or misplaced tensor moves it by far more than the tolerance),
    import it with `./hf_model import`, and evaluate it with ./train_gpt_cpu --init-from. train_gpt has no
    evaluate-only mode (--steps is at least 1), so it runs one step with --lr 0: AdamW's update is lr x (mhat /
    (sqrt(vhat) + eps) + wd x p) = 0 exactly, the weights stay the imported ones, and the step-1 "val loss" is
    theirs. HF computes the loss of the same tokens in fp32 on the CPU; both are fp32, so TOLERANCE_B is rounding.

Llama (part llama; the GPU itself is not used): a LlamaForCausalLM of 2 layers of 64 channels, 4 query heads over 2
key/value heads, a SwiGLU MLP of 96, rope theta 500000 with llama3 scaling whose original context LLAMA_ORIGINAL puts
the head's 8 frequencies in all three bands, untied and tied, weights drawn with std WEIGHT_STD (norm gains around 1),
so a misplaced, transposed or missing tensor, a wrong rotation or a wrong scaling moves the loss far past the tolerance.
Each direction is checked on fixed tokens (the validation windows of part b) in fp32 on both sides, so the tolerance
LLAMA_TOLERANCE is rounding:
(import) save_pretrained -> `./hf_model import` -> ./train_gpt_cpu --init-from with the options the import printed and
    --lr 0 (its step-1 "val loss" is the file's) against transformers' loss of the model it saved;
(export) a random model file written here in config.h's layout (llmc/checkpoint.h: magic 20261201, the description in
    the header; HF's (out, in) weights as they are, q, k, v stacked into qkvw, gate and up into fcw, the vocabulary
    padded with zero rows) -> `./hf_model export` -> LlamaForCausalLM.from_pretrained (no missing or unexpected
    weights, every tensor equal to the one drawn) against ./train_gpt_cpu --lr 0 on the same file.
The same model without rope scaling must give a loss further than SENSITIVITY x LLAMA_TOLERANCE away, or the check
could not see the scaling.

Exits non-zero on any mismatch. Run from the repository root after `make train_gpt train_gpt_cpu hf_model` (part llama
needs only `make train_gpt_cpu hf_model`):
    python3 dev/hf_check.py [--part a|b|both|llama|all] [--work /tmp/hf_check]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# relative, train_gpt's val loss vs HF's on the exported model. fp32: train_gpt's fp32 build matches the CPU build's
# loss to ~1e-7 (make gpu-test) and HF sums in another order (~1e-6), so 1e-4 leaves room while a wrong transpose or
# a misplaced tensor moves the loss by O(1); bf16: its 8-bit significands, as the bf16 parity tolerance on the loss.
TOLERANCE_A = {"fp32": 1e-4, "bf16": 1e-2}
TOLERANCE_B = 1e-4                          # relative, train_gpt_cpu (fp32) vs HF (fp32) on the imported model
LLAMA_TOLERANCE = 1e-4                      # relative, train_gpt_cpu (fp32) vs HF (fp32): summation order only
SENSITIVITY = 10                            # the unscaled model's loss must differ by this many tolerances
WEIGHT_STD = 0.3
SHARD_MAGIC = 20240520
SHARD_HEADER_INTS = 256
EOT = 50256


def run(cmd, log):
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    text = open(log).read()
    if p.returncode != 0:
        sys.exit(f"FAIL: {cmd[0]} exited with {p.returncode}:\n{text[-2000:]}")
    return text


def last_val_loss(text, what):
    losses = re.findall(r"val loss ([0-9.]+)", text)
    if not losses:
        sys.exit(f"FAIL: {what} printed no val loss")
    return float(losses[-1])


def read_shard(path):
    import numpy as np
    header = np.fromfile(path, dtype=np.int32, count=SHARD_HEADER_INTS)
    if header[0] != SHARD_MAGIC:
        sys.exit(f"FAIL: {path} is not a token shard (magic {header[0]})")
    tokens = np.fromfile(path, dtype=np.uint16, offset=SHARD_HEADER_INTS * 4)
    if len(tokens) != header[2]:
        sys.exit(f"FAIL: {path} holds {len(tokens)} tokens, its header says {header[2]}")
    return tokens.astype(np.int64)


def hf_val_loss(model, tokens, B, T, val_batches, device):
    """The mean loss over the tokens of train_gpt's validation pass, in batches of (at most) B windows."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    windows = min((len(tokens) - 1) // T, val_batches * B)
    if windows < 1:
        sys.exit(f"FAIL: the validation shard holds no window of {T}+1 tokens")
    total = 0.0
    with torch.no_grad():
        for first in range(0, windows, B):
            starts = [w * T for w in range(first, min(first + B, windows))]
            x = torch.from_numpy(np.stack([tokens[s:s + T] for s in starts])).to(device)
            y = torch.from_numpy(np.stack([tokens[s + 1:s + T + 1] for s in starts])).to(device)
            logits = model(x).logits.float()
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum").item()
    return total / (windows * T)


def compare(name, ours, theirs, tol):
    rel = abs(ours - theirs) / abs(theirs)
    verdict = "PASS" if rel <= tol else "FAIL"
    print(f"{verdict} {name}: train_gpt {ours:.6f}, transformers {theirs:.6f}, relative difference {rel:.2e} "
          f"(tolerance {tol:.0e})", flush=True)
    return rel <= tol


def part_a(args):
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel
    run_dir, hf_dir = os.path.join(args.work, "a_run"), os.path.join(args.work, "a_hf")
    B, T = args.batch_size, args.seq_len
    text = run([args.train_gpt, "--depth", str(args.depth), "--width", str(args.width), "--heads", str(args.heads),
                "--seq-len", str(T), "--batch-size", str(B), "--total-batch-tokens", str(B * T),
                "--steps", str(args.steps), "--warmup-steps", "2", "--val-every", str(args.steps),
                "--val-batches", str(args.val_batches), "--sample-every", "0", "--precision", args.precision,
                "--train-data", args.train_data, "--val-data", args.val_data, "--out-dir", run_dir],
               os.path.join(args.work, "a_train.log"))
    ours = last_val_loss(text, "train_gpt")
    model_file = os.path.join(run_dir, f"model_{args.steps:08d}.bin")
    run([args.hf_model, "export", model_file, hf_dir, "--force"], os.path.join(args.work, "a_export.log"))

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, info = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if not k.endswith(("attn.bias", "attn.masked_bias", "lm_head.weight"))]
    if missing or info["unexpected_keys"] or info["mismatched_keys"]:
        print(f"FAIL hf_load: missing {missing}, unexpected {info['unexpected_keys']}, "
              f"mismatched {info['mismatched_keys']}")
        return False
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print("FAIL hf_tied_head: lm_head.weight is not tied to transformer.wte.weight")
        return False
    ok = True
    tok = AutoTokenizer.from_pretrained(hf_dir)
    ids = tok("Hello world")["input_ids"]
    if ids != [15496, 995] or tok.eos_token_id != EOT:
        print(f"FAIL hf_tokenizer: 'Hello world' -> {ids}, eos {tok.eos_token_id}")
        ok = False
    model = model.to(args.device).eval()
    theirs = hf_val_loss(model, read_shard(args.val_data), B, T, args.val_batches, args.device)
    return compare("hf_export_val_loss", ours, theirs, TOLERANCE_A[args.precision]) and ok


def part_b(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    hf_dir, model_file = os.path.join(args.work, "b_hf"), os.path.join(args.work, "b_model.bin")
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=256)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm_gain = name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
            p.normal_(1.0 if is_norm_gain else 0.0, WEIGHT_STD)
    model.save_pretrained(hf_dir)  # safetensors, the default
    run([args.hf_model, "import", hf_dir, model_file, "--force"], os.path.join(args.work, "b_import.log"))

    B, T, batches = 4, config.n_positions, 4
    text = run([args.train_gpt_cpu, "--init-from", model_file, "--depth", "2", "--width", "128", "--heads", "4",
                "--seq-len", str(T), "--batch-size", str(B), "--total-batch-tokens", str(B * T), "--steps", "1",
                "--lr", "0", "--warmup-steps", "0", "--val-every", "1", "--val-batches", str(batches),
                "--sample-every", "0", "--precision", "fp32", "--train-data", args.train_data,
                "--val-data", args.val_data, "--out-dir", os.path.join(args.work, "b_run")],
               os.path.join(args.work, "b_eval.log"))
    if "initialized from model file" not in text:
        print("FAIL hf_import_init_from: train_gpt_cpu did not start from the imported model")
        return False
    ours = last_val_loss(text, "train_gpt_cpu")
    theirs = hf_val_loss(model.float().eval(), read_shard(args.val_data), B, T, batches, "cpu")
    return compare("hf_import_val_loss", ours, theirs, TOLERANCE_B)


# --- Llama -----------------------------------------------------------------------------------------------------
LLAMA_VOCAB, LLAMA_LAYERS, LLAMA_WIDTH, LLAMA_HEADS, LLAMA_KV_HEADS, LLAMA_FFN = 50257, 2, 64, 4, 2, 96
LLAMA_THETA, LLAMA_FACTOR, LLAMA_LOW, LLAMA_HIGH = 500000.0, 8.0, 1.0, 4.0
LLAMA_ORIGINAL = 256      # head size 16: wavelengths 6, 33 kept (< 64), 167 interpolated, the other five divided
LLAMA_MAX_POSITIONS = 1024
LLAMA_NORM_EPS = 1e-5
LLAMA_B, LLAMA_T, LLAMA_BATCHES = 4, 128, 4
MODEL_MAGIC, MODEL_VERSION_FP32, HEADER_INTS, VOCAB_PAD = 20261201, 3, 256, 128
ARCH_LLAMA, NORM_RMSNORM, POS_ROPE, MLP_SWIGLU, ROPE_SCALING_LLAMA3 = 1, 1, 1, 1, 1


def llama_config(tied, scaled):
    from transformers import LlamaConfig
    scaling = {"rope_type": "llama3", "factor": LLAMA_FACTOR, "low_freq_factor": LLAMA_LOW,
               "high_freq_factor": LLAMA_HIGH, "original_max_position_embeddings": LLAMA_ORIGINAL} if scaled else None
    return LlamaConfig(vocab_size=LLAMA_VOCAB, hidden_size=LLAMA_WIDTH, intermediate_size=LLAMA_FFN,
                       num_hidden_layers=LLAMA_LAYERS, num_attention_heads=LLAMA_HEADS,
                       num_key_value_heads=LLAMA_KV_HEADS, max_position_embeddings=LLAMA_MAX_POSITIONS,
                       rms_norm_eps=LLAMA_NORM_EPS, rope_theta=LLAMA_THETA, rope_scaling=scaling,
                       tie_word_embeddings=tied, attention_bias=False, mlp_bias=False, hidden_act="silu")


def random_llama(tied, seed):
    """A LlamaForCausalLM (fp32, eval) whose weights are redrawn with std WEIGHT_STD, norm gains around 1."""
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(tied, True)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied head is embed_tokens, drawn once
            p.normal_(1.0 if name.endswith("norm.weight") else 0.0, WEIGHT_STD)
    return model


def write_model_file(model, tied, path):
    """config.h's description in the header (CONFIG_FIELDS' order), then its tensors in param_layout's order."""
    import numpy as np
    padded = (LLAMA_VOCAB + VOCAB_PAD - 1) // VOCAB_PAD * VOCAB_PAD
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[0:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, LLAMA_MAX_POSITIONS, LLAMA_VOCAB, LLAMA_LAYERS, LLAMA_HEADS,
              LLAMA_WIDTH, padded]
    h[8:16] = [ARCH_LLAMA, LLAMA_KV_HEADS, LLAMA_FFN, NORM_RMSNORM, POS_ROPE, MLP_SWIGLU, 0, int(tied)]  # no biases
    h[16] = np.float32(LLAMA_THETA).view(np.int32)
    h[17] = ROPE_SCALING_LLAMA3
    h[18:21] = np.array([LLAMA_FACTOR, LLAMA_LOW, LLAMA_HIGH], dtype=np.float32).view(np.int32)
    h[21] = LLAMA_ORIGINAL
    h[22:24] = np.array([LLAMA_NORM_EPS], dtype=np.float64).view(np.int32)

    def t(x):
        return x.detach().float().numpy()

    def vocab_rows(w):
        return np.concatenate([t(w), np.zeros((padded - LLAMA_VOCAB, LLAMA_WIDTH), dtype=np.float32)])

    layers = model.model.layers
    tensors = [vocab_rows(model.model.embed_tokens.weight),
               np.stack([t(l.input_layernorm.weight) for l in layers]),
               np.stack([np.concatenate([t(l.self_attn.q_proj.weight), t(l.self_attn.k_proj.weight),
                                         t(l.self_attn.v_proj.weight)]) for l in layers]),
               np.stack([t(l.self_attn.o_proj.weight) for l in layers]),
               np.stack([t(l.post_attention_layernorm.weight) for l in layers]),
               np.stack([np.concatenate([t(l.mlp.gate_proj.weight), t(l.mlp.up_proj.weight)]) for l in layers]),
               np.stack([t(l.mlp.down_proj.weight) for l in layers]),
               t(model.model.norm.weight)]
    if not tied:
        tensors.append(vocab_rows(model.lm_head.weight))
    with open(path, "wb") as f:
        h.tofile(f)
        for x in tensors:
            np.ascontiguousarray(x, dtype=np.float32).tofile(f)


def llama_options(tied):
    """train_gpt's options for llama_config(tied, True)."""
    return ["--arch", "llama", "--depth", str(LLAMA_LAYERS), "--width", str(LLAMA_WIDTH), "--heads", str(LLAMA_HEADS),
            "--kv-heads", str(LLAMA_KV_HEADS), "--ffn", str(LLAMA_FFN), "--vocab-size", str(LLAMA_VOCAB),
            "--rope-theta", str(LLAMA_THETA), "--rope-scaling", "llama3", "--rope-factor", str(LLAMA_FACTOR),
            "--rope-low-freq-factor", str(LLAMA_LOW), "--rope-high-freq-factor", str(LLAMA_HIGH),
            "--rope-original-max-pos", str(LLAMA_ORIGINAL), "--norm-eps", str(LLAMA_NORM_EPS),
            "--tie-embeddings", str(int(tied))]


def cpu_loss(args, model_file, options, name):
    """./train_gpt_cpu's val loss of model_file: one step at --lr 0 leaves the weights as they are."""
    text = run([args.train_gpt_cpu, "--init-from", model_file] + options +
               ["--seq-len", str(LLAMA_T), "--batch-size", str(LLAMA_B), "--total-batch-tokens",
                str(LLAMA_B * LLAMA_T), "--steps", "1", "--lr", "0", "--warmup-steps", "0", "--val-every", "1",
                "--val-batches", str(LLAMA_BATCHES), "--sample-every", "0", "--precision", "fp32",
                "--train-data", args.train_data, "--val-data", args.val_data,
                "--out-dir", os.path.join(args.work, name + "_run")],
               os.path.join(args.work, name + "_eval.log"))
    if f"initialized from model file '{model_file}'" not in text:
        sys.exit(f"FAIL {name}: train_gpt_cpu did not start from the model file")
    return last_val_loss(text, "train_gpt_cpu")


def llama_import(args, tied, tokens):
    name = "llama_import_" + ("tied" if tied else "untied")
    hf_dir, model_file = os.path.join(args.work, name + "_hf"), os.path.join(args.work, name + ".bin")
    model = random_llama(tied, args.seed + int(tied))
    model.save_pretrained(hf_dir)  # safetensors, the default
    text = run([args.hf_model, "import", hf_dir, model_file, "--force"], os.path.join(args.work, name + ".log"))
    printed = re.search(r"^train from it with: --init-from \S+ (.*) --seq-len <= (\d+)$", text, re.M)
    if not printed:
        sys.exit(f"FAIL {name}: the import printed no train_gpt options:\n{text}")
    ours = cpu_loss(args, model_file, printed.group(1).split(), name)
    theirs = hf_val_loss(model, tokens, LLAMA_B, LLAMA_T, LLAMA_BATCHES, "cpu")
    ok = compare(name + "_val_loss", ours, theirs, LLAMA_TOLERANCE)
    if not tied:
        import copy
        from transformers import LlamaForCausalLM
        unscaled = LlamaForCausalLM(llama_config(tied, False)).float().eval()
        unscaled.load_state_dict(copy.deepcopy(model.state_dict()))
        other = hf_val_loss(unscaled, tokens, LLAMA_B, LLAMA_T, LLAMA_BATCHES, "cpu")
        sensitive = abs(other - theirs) > SENSITIVITY * LLAMA_TOLERANCE * abs(theirs)
        print(f"{'PASS' if sensitive else 'FAIL'} llama_sees_rope_scaling: without it transformers gives "
              f"{other:.6f}, {abs(other - theirs) / abs(theirs):.2e} relative away (more than "
              f"{SENSITIVITY * LLAMA_TOLERANCE:.0e} wanted)", flush=True)
        ok = ok and sensitive
    return ok


def llama_export(args, tied, tokens):
    import torch
    from transformers import LlamaForCausalLM
    name = "llama_export_" + ("tied" if tied else "untied")
    hf_dir, model_file = os.path.join(args.work, name + "_hf"), os.path.join(args.work, name + ".bin")
    drawn = random_llama(tied, args.seed + 2 + int(tied))
    write_model_file(drawn, tied, model_file)
    run([args.hf_model, "export", model_file, hf_dir], os.path.join(args.work, name + ".log"))
    model, info = LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if not (tied and k == "lm_head.weight")]
    if missing or info["unexpected_keys"] or info["mismatched_keys"]:
        print(f"FAIL {name}_load: missing {missing}, unexpected {info['unexpected_keys']}, "
              f"mismatched {info['mismatched_keys']}")
        return False
    model = model.float().eval()
    theirs_sd, drawn_sd = model.state_dict(), drawn.state_dict()
    differ = [k for k in drawn_sd if k not in theirs_sd or not torch.equal(theirs_sd[k], drawn_sd[k])]
    is_tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tied_ok = is_tied == tied
    print(f"{'PASS' if not differ and tied_ok else 'FAIL'} {name}_weights: {len(drawn_sd) - len(differ)} of "
          f"{len(drawn_sd)} tensors loaded as drawn{' (not ' + ', '.join(differ) + ')' if differ else ''}, lm_head "
          f"{'tied' if is_tied else 'untied'} (want {'tied' if tied else 'untied'})", flush=True)
    ours = cpu_loss(args, model_file, llama_options(tied), name)
    theirs = hf_val_loss(model, tokens, LLAMA_B, LLAMA_T, LLAMA_BATCHES, "cpu")
    return compare(name + "_val_loss", ours, theirs, LLAMA_TOLERANCE) and not differ and tied_ok


def part_llama(args):
    tokens = read_shard(args.val_data)
    ok = True
    for tied in (False, True):
        ok = llama_import(args, tied, tokens) and ok
        ok = llama_export(args, tied, tokens) and ok
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["a", "b", "both", "llama", "all"], default="both",
                    help="a, b: GPT-2 export and import; llama: Llama both ways; all: every part")
    ap.add_argument("--work", default="/tmp/hf_check", help="scratch folder (emptied first)")
    ap.add_argument("--train-gpt", default="./train_gpt")
    ap.add_argument("--train-gpt-cpu", default="./train_gpt_cpu")
    ap.add_argument("--hf-model", default="./hf_model")
    ap.add_argument("--train-data", default="data/brown/brown_train_*.bin")
    ap.add_argument("--val-data", default="data/brown/brown_val_000000.bin", help="one validation shard")
    ap.add_argument("--precision", choices=sorted(TOLERANCE_A), default="fp32", help="train_gpt's, part a")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", default="cuda", help="where HF evaluates part a")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    ok = True
    if args.part in ("a", "both", "all"):
        ok = part_a(args) and ok
    if args.part in ("b", "both", "all"):
        ok = part_b(args) and ok
    if args.part in ("llama", "all"):
        ok = part_llama(args) and ok
    print("hf_check: all passed" if ok else "hf_check: FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
