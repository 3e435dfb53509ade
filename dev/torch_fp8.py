#!/usr/bin/env python3
"""The PyTorch float8 baseline: the shared torch_gpt.py model and training loop, run as they are, but for the four
linear layers of each block (qkv, attention projection, fc, fc2), which multiply in float8 through torch._scaled_mm
with tensorwise dynamic scaling in the forward and the backward, as torchao's float8 training does (torchao itself is
not installable on the GPU machines): each operand is scaled by float8 max / its own amax and cast, E4M3 for inputs
and weights, E5M2 for output gradients; the forward GEMM accumulates fast, the two backward GEMMs exactly (torchao's
defaults); inputs and weights are kept in float8 for the backward. Everything else (embedding, LM head, LayerNorm,
attention, AdamW, torch.compile of the whole model) is torch_gpt.py's.

    python3 dev/torch_fp8.py PATH/torch_gpt.py --data SHARD.bin --layers 12 --channels 768 --batch 32
Prints torch_gpt.py's line.
"""
import sys

import torch
import torch.nn as nn

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_float8(x, dtype):
    """x scaled by its own amax into dtype, and the inverse scale (a 0-d fp32 tensor) _scaled_mm multiplies by."""
    fmax = torch.finfo(dtype).max
    amax = x.abs().max().float().clamp(min=1e-12)
    scale = fmax / amax
    q = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()


def col_major(q):
    """The same matrix stored column-major, as _scaled_mm wants its second operand."""
    return q.t().contiguous().t()


class Float8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xs = to_float8(x2, E4M3)
        wq, ws = to_float8(w, E4M3)
        y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16, use_fast_accum=True)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.shape = shape
        return y.reshape(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, gy):
        xq, xs, wq, ws = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        gq, gs = to_float8(g2, E5M2)
        # input gradient: gy (N, out) @ w (out, in); weight gradient: gy^T (out, N) @ x (N, in)
        gx = torch._scaled_mm(gq, col_major(wq), scale_a=gs, scale_b=ws, out_dtype=torch.bfloat16)
        gw = torch._scaled_mm(gq.t().contiguous(), col_major(xq), scale_a=gs, scale_b=xs, out_dtype=torch.float32)
        return gx.reshape(ctx.shape), gw


class Float8Linear(nn.Linear):
    def forward(self, x):
        return Float8Matmul.apply(x, self.weight) + self.bias.to(torch.bfloat16)


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = [script] + sys.argv[2:]
    nn.Linear = Float8Linear  # torch_gpt.py makes exactly the four block linears with nn.Linear
    # run it in this module's namespace: torch.compile's guards look up what the compiled code reads (E4M3, ...) in
    # the globals of __main__, which a second __main__ (runpy) would not have
    exec(compile(open(script).read(), script, "exec"), globals())
