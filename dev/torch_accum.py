#!/usr/bin/env python3
"""The PyTorch baseline (torch_gpt.py) with gradient accumulation: ACCUM micro-batches of --batch rows a step.

    torch_accum.py TORCH_GPT_PY --accum N [torch_gpt.py's own options]
The model, its compilation and the optimizer are torch_gpt.py's own: its source runs up to its training loop, and only
the loop is replaced, so the baseline stays the one every benchmark uses. Prints torch_gpt.py's line (ms/step is the
median over steps after the first --skip, tok/s counts every micro-batch).
"""
import sys, time
import numpy as np, torch

script, argv = sys.argv[1], sys.argv[2:]


def take(flag, default=None):  # this script's own option, removed before torch_gpt.py parses the rest
    if flag not in argv:
        if default is None: sys.exit(f"torch_accum.py: {flag} N is required")
        return default
    i = argv.index(flag)
    value = int(argv[i + 1]); del argv[i:i + 2]
    return value


accum, skip = take("--accum"), take("--skip", 2)
source = open(script).read()
loop_at = source.index("data = np.memmap")  # torch_gpt.py's training loop starts here
sys.argv = [script] + argv
g = {"__name__": "torch_gpt"}
exec(compile(source[:loop_at], script, "exec"), g)
a, m, opt, B, T = g["a"], g["m"], g["opt"], g["B"], g["T"]
assert a.mode == "single", "torch_accum.py runs the one-GPU baseline"
data = np.memmap(a.data, dtype=np.uint16, mode="r", offset=1024)
pos, times = 0, []
for step in range(a.steps):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for micro in range(accum):
        if pos + B * T + 1 > len(data): pos = 0
        buf = torch.from_numpy(data[pos:pos + B * T + 1].astype(np.int64)).cuda(); pos += B * T
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = m(x, y) / accum
        loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
ms = float(np.median(times[skip:])) * 1e3
print(f"torch mode=single ranks=1 layers={a.layers} channels={a.channels} accum={accum} batch={B}x{T}x{accum} "
      f"ms/step={ms:.1f} tok/s={accum*B*T/ms*1e3:.0f} loss={loss.item()*accum:.3f} "
      f"peak_mem_GB={torch.cuda.max_memory_allocated()/1e9:.1f}", flush=True)
