#!/usr/bin/env python3
"""llama_hf_check.py: the CPU build's Llama against Hugging Face transformers' LlamaForCausalLM (the GPU machine:
needs torch, transformers, numpy; the GPU itself is not used).

A randomly initialised LlamaForCausalLM (2 layers of 64 channels, 4 query heads over 1 key/value head, a SwiGLU MLP of
96, its own LM head, rope theta 500000 with llama3 scaling whose original context ORIGINAL_CONTEXT puts the head's 8
frequencies in all three bands) has its weights redrawn with std WEIGHT_STD (norm gains around 1), so a misplaced,
transposed or missing tensor, a wrong rotation or a wrong scaling moves the loss by far more than the tolerance. It is
written as this project's model file (llmc/checkpoint.h: magic 20261201, the description in the header; the tensors
in config.h's order, HF's (out, in) weights as they are, q, k and v stacked into qkvw, gate and up into fcw, the
vocabulary padded to 128 with zero rows) and evaluated by ./train_gpt_cpu --init-from with --lr 0: AdamW moves no
weight, so the step-1 "val loss" is the file's. HF computes the loss of the same validation tokens in fp32 on the CPU;
both are fp32, so TOLERANCE is rounding. The same model without rope scaling must give a loss further than
SENSITIVITY x TOLERANCE away, or the check could not see the scaling.

Exits non-zero on a mismatch. Run from the repository root after `make train_gpt_cpu`:
    python3 dev/llama_hf_check.py [--work /tmp/llama_hf_check]
"""
import argparse
import copy
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_check import compare, hf_val_loss, last_val_loss, read_shard, run  # noqa: E402

TOLERANCE = 1e-4          # relative, train_gpt_cpu (fp32) vs HF (fp32): summation order only
SENSITIVITY = 10          # the unscaled model's loss must differ by this many tolerances
WEIGHT_STD = 0.3
VOCAB, LAYERS, WIDTH, HEADS, KV_HEADS, FFN = 50257, 2, 64, 4, 1, 96
THETA, FACTOR, LOW, HIGH = 500000.0, 8.0, 1.0, 4.0
ORIGINAL_CONTEXT = 256    # head size 16: wavelengths 6, 33 kept (< 64), 167 interpolated, the other five divided
MAX_POSITIONS = 1024
NORM_EPS = 1e-5
B, T, BATCHES = 4, 128, 4

MODEL_MAGIC, MODEL_VERSION_FP32, HEADER_INTS, VOCAB_PAD = 20261201, 3, 256, 128
ARCH_LLAMA, NORM_RMSNORM, POS_ROPE, MLP_SWIGLU, ROPE_SCALING_LLAMA3 = 1, 1, 1, 1, 1


def llama_config(scaled):
    from transformers import LlamaConfig
    scaling = {"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": LOW, "high_freq_factor": HIGH,
               "original_max_position_embeddings": ORIGINAL_CONTEXT} if scaled else None
    return LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POSITIONS,
                       rms_norm_eps=NORM_EPS, rope_theta=THETA, rope_scaling=scaling, tie_word_embeddings=False,
                       attention_bias=False, mlp_bias=False, hidden_act="silu")


def write_model_file(model, path):
    """config.h's description in the header (CONFIG_FIELDS' order), then its tensors in param_layout's order."""
    import numpy as np
    padded = (VOCAB + VOCAB_PAD - 1) // VOCAB_PAD * VOCAB_PAD
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[0:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, MAX_POSITIONS, VOCAB, LAYERS, HEADS, WIDTH, padded]
    h[8:16] = [ARCH_LLAMA, KV_HEADS, FFN, NORM_RMSNORM, POS_ROPE, MLP_SWIGLU, 0, 0]  # no biases, untied
    h[16] = np.float32(THETA).view(np.int32)
    h[17] = ROPE_SCALING_LLAMA3
    h[18:21] = np.array([FACTOR, LOW, HIGH], dtype=np.float32).view(np.int32)
    h[21] = ORIGINAL_CONTEXT
    h[22:24] = np.array([NORM_EPS], dtype=np.float64).view(np.int32)

    def t(x):
        return x.detach().float().numpy()

    def vocab_rows(w):
        return np.concatenate([t(w), np.zeros((padded - VOCAB, WIDTH), dtype=np.float32)])

    layers = model.model.layers
    tensors = [vocab_rows(model.model.embed_tokens.weight),
               np.stack([t(l.input_layernorm.weight) for l in layers]),
               np.stack([np.concatenate([t(l.self_attn.q_proj.weight), t(l.self_attn.k_proj.weight),
                                         t(l.self_attn.v_proj.weight)]) for l in layers]),
               np.stack([t(l.self_attn.o_proj.weight) for l in layers]),
               np.stack([t(l.post_attention_layernorm.weight) for l in layers]),
               np.stack([np.concatenate([t(l.mlp.gate_proj.weight), t(l.mlp.up_proj.weight)]) for l in layers]),
               np.stack([t(l.mlp.down_proj.weight) for l in layers]),
               t(model.model.norm.weight),
               vocab_rows(model.lm_head.weight)]
    with open(path, "wb") as f:
        h.tofile(f)
        for x in tensors:
            np.ascontiguousarray(x, dtype=np.float32).tofile(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/llama_hf_check", help="scratch folder (emptied first)")
    ap.add_argument("--train-gpt-cpu", default="./train_gpt_cpu")
    ap.add_argument("--train-data", default="data/brown/brown_train_*.bin")
    ap.add_argument("--val-data", default="data/brown/brown_val_000000.bin", help="one validation shard")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(llama_config(True)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if name.endswith("norm.weight") else 0.0, WEIGHT_STD)
    model_file = os.path.join(args.work, "llama.bin")
    write_model_file(model, model_file)

    text = run([args.train_gpt_cpu, "--init-from", model_file, "--arch", "llama", "--depth", str(LAYERS),
                "--width", str(WIDTH), "--heads", str(HEADS), "--kv-heads", str(KV_HEADS), "--ffn", str(FFN),
                "--vocab-size", str(VOCAB), "--rope-theta", str(THETA), "--rope-scaling", "llama3",
                "--rope-factor", str(FACTOR), "--rope-low-freq-factor", str(LOW), "--rope-high-freq-factor", str(HIGH),
                "--rope-original-max-pos", str(ORIGINAL_CONTEXT), "--norm-eps", str(NORM_EPS),
                "--tie-embeddings", "0", "--seq-len", str(T), "--batch-size", str(B), "--total-batch-tokens",
                str(B * T), "--steps", "1", "--lr", "0", "--warmup-steps", "0", "--val-every", "1", "--val-batches",
                str(BATCHES), "--sample-every", "0", "--precision", "fp32", "--train-data", args.train_data,
                "--val-data", args.val_data, "--out-dir", os.path.join(args.work, "run")],
               os.path.join(args.work, "eval.log"))
    if "initialized from model file" not in text:
        sys.exit("FAIL llama_init_from: train_gpt_cpu did not start from the model file")
    ours = last_val_loss(text, "train_gpt_cpu")
    tokens = read_shard(args.val_data)
    theirs = hf_val_loss(model, tokens, B, T, BATCHES, "cpu")
    ok = compare("llama_hf_val_loss", ours, theirs, TOLERANCE)

    unscaled = LlamaForCausalLM(llama_config(False)).float().eval()
    unscaled.load_state_dict(copy.deepcopy(model.state_dict()))
    other = hf_val_loss(unscaled, tokens, B, T, BATCHES, "cpu")
    sensitive = abs(other - theirs) > SENSITIVITY * TOLERANCE * abs(theirs)
    print(f"{'PASS' if sensitive else 'FAIL'} llama_hf_sees_rope_scaling: without it transformers gives {other:.6f}, "
          f"{abs(other - theirs) / abs(theirs):.2e} relative away (more than {SENSITIVITY * TOLERANCE:.0e} wanted)")
    ok = ok and sensitive
    print("llama_hf_check: all passed" if ok else "llama_hf_check: FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
