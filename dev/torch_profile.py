#!/usr/bin/env python3
"""Kernel time a step of the PyTorch baseline (torch_gpt.py), by family and by kernel, from torch.profiler.

    torch_profile.py TORCH_GPT_PY [torch_gpt.py's own options, e.g. --layers 24 --channels 1024 --batch 16]
torch_gpt.py runs unchanged (its model, compilation, optimizer and loop); the profiler records PROFILED steps after
WAIT + WARMUP steps, so pass --steps of at least their sum. Kernel times are the GPU's, summed over the profiled steps
and divided by their number; dev/trace.sh gives ours by the same families, for a side-by-side of where each spends a
step. Families by kernel name: cuDNN's or a flash kernel is attention, nvjet/xmma/cutlass/splitK a GEMM, Triton's the
fused elementwise, norm and loss kernels torch.compile generates, the fused AdamW the optimizer.
"""
import collections, sys

WAIT, WARMUP, PROFILED = 8, 2, 3
TOP = 22 # kernels listed by name

script = sys.argv[1]
source = open(script).read()
loop = "for step in range(a.steps):"
step_end = "    torch.cuda.synchronize(); times.append(time.perf_counter() - t0)\n"
if loop not in source or step_end not in source:
    sys.exit(f"torch_profile.py: {script} does not have torch_gpt.py's training loop; update the two markers here")
source = source.replace(loop, "prof.start()\n" + loop, 1).replace(step_end, step_end + "    prof.step()\n", 1)

import torch
from torch.profiler import profile, ProfilerActivity, schedule

sys.argv = [script] + sys.argv[2:]
prof = profile(activities=[ProfilerActivity.CUDA],
               schedule=schedule(wait=WAIT, warmup=WARMUP, active=PROFILED, repeat=1)) # one window, however many steps
exec(compile(source, script, "exec"), {"__name__": "torch_gpt", "prof": prof})
prof.stop()


def family(name):
    n = name.lower()
    if any(w in n for w in ("flash", "fmha", "sdpa", "attention", "cudnn")): return "attention"
    if any(w in n for w in ("nvjet", "gemm", "cutlass", "xmma", "splitk")): return "GEMM"
    if any(w in n for w in ("adam", "multi_tensor")): return "optimizer"
    if "triton" in n: return "Triton (fused elementwise, norms, loss)"
    return "other"


by_family, by_kernel, launches = collections.defaultdict(float), collections.defaultdict(float), collections.Counter()
for e in prof.key_averages():
    us = getattr(e, "self_device_time_total", None)
    us = e.self_cuda_time_total if us is None else us
    if us <= 0: continue
    by_family[family(e.key)] += us
    by_kernel[e.key] += us
    launches[e.key] += e.count
print("torch kernel time a step by family (ms):")
for name, us in sorted(by_family.items(), key=lambda x: -x[1]): print(f"  {us / 1e3 / PROFILED:9.2f}  {name}")
print(f"  {sum(by_family.values()) / 1e3 / PROFILED:9.2f}  total")
print("longest kernels (ms a step, launches a step):")
for name, us in sorted(by_kernel.items(), key=lambda x: -x[1])[:TOP]:
    print(f"  {us / 1e3 / PROFILED:8.2f} {launches[name] // PROFILED:5d}  {name[:110]}")
