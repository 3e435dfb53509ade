"""
bench_attention.py: PyTorch's flash attention (SDPA, FLASH backend) at the shapes test/test_attention.cu times,
the baseline for llmc/attention.cuh. Same layout (q, k, v strided views of one (B, T, 3, NH, HS) bf16 tensor),
same FLOP count (causal forward 4 B NH T^2 HS / 2, backward 2.5x), median of CUDA-event timings after warm-up.
Run on the GPU machine: python3 dev/bench_attention.py [--energy] [B T NH HS [KV]]
With --energy: a layer's forward alone, its backward alone and both back to back at the card's power cap, in the
FLASH and the cuDNN backends (cuDNN's is what torch_gpt.py's and torch_llama.py's steps run), joules a call and per
TFLOP from NVML's energy counter, as dev/bench_attention.cu --energy (dev/cuda_energy.cuh) prints ours. A shape on
the command line replaces the default ones; KV < NH is grouped-query attention (SDPA's enable_gqa, as
torch_llama.py), e.g. 4 2048 32 64 8 for Llama 3.2 1B's.
"""
import ctypes
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

WARMUP, REPS = 5, 30
ENERGY_SECONDS, ENERGY_WARMUP_SECONDS, ENERGY_BATCH = 3.0, 1.5, 8
NVML_CLOCK_SM = 1
SHAPES = [(32, 1024, 12, 64, 12), (8, 1024, 25, 64, 25), (16, 1024, 12, 128, 12)]


def median_ms(fn):
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(REPS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return sorted(times)[REPS // 2]


def inputs(B, T, NH, HS, KV):
    """q (B, NH, T, HS), k and v (B, KV, T, HS) as views of one (B, T, NH + 2 KV, HS) tensor that wants gradients
    (GPT-2's (B, T, 3, NH, HS) where KV = NH), and a dout."""
    qkv = (torch.rand(B, T, NH + 2 * KV, HS, device="cuda", dtype=torch.bfloat16) * 4 - 2).requires_grad_()
    q, k, v = (t.transpose(1, 2) for t in qkv.split([NH, KV, KV], dim=2))
    dout = torch.rand(B, NH, T, HS, device="cuda", dtype=torch.bfloat16) * 2 - 1
    return q, k, v, dout


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


def causal_flops(B, T, NH, HS):
    """The causal forward's products: 4 B NH T^2 HS / 2."""
    return 4.0 * B * NH * T * T * HS / 2


class Nvml:
    """NVML's energy counter and SM clock of the current GPU, through the driver's libnvidia-ml."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.dev = ctypes.c_void_p()
        if self.lib.nvmlInit_v2() != 0 or self.lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(torch.cuda.current_device()), ctypes.byref(self.dev)) != 0:
            sys.exit("NVML did not open the GPU")

    def energy_j(self):
        mj = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, ctypes.byref(mj)) != 0:
            sys.exit("NVML has no energy counter for this GPU")
        return mj.value * 1e-3

    def clock_mhz(self):
        mhz = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.dev, NVML_CLOCK_SM, ctypes.byref(mhz))
        return mhz.value


def energy(nvml, name, fn, tflop):
    def run_for(seconds):
        calls, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(ENERGY_BATCH):
                fn()
            calls += ENERGY_BATCH
            torch.cuda.synchronize()
        return calls
    run_for(ENERGY_WARMUP_SECONDS)
    e0, t0 = nvml.energy_j(), time.monotonic()
    calls = run_for(ENERGY_SECONDS)
    seconds, joules = time.monotonic() - t0, nvml.energy_j() - e0
    print(f"{name:<24s} {joules / seconds:6.1f} W  SM {nvml.clock_mhz():4d} MHz  "
          f"{seconds / calls * 1e3:8.3f} ms a call  {tflop * calls / seconds:7.1f} TFLOP/s  "
          f"{joules / calls:7.3f} J a call  {joules / (tflop * calls):7.3f} J per TFLOP")


def main_energy(shapes):
    nvml = Nvml()
    torch.manual_seed(0)
    for B, T, NH, HS, KV in shapes:
        q, k, v, dout = inputs(B, T, NH, HS, KV)
        tflop = causal_flops(B, T, NH, HS) * 1e-12
        print(f"B={B} T={T} NH={NH} HS={HS} KV={KV}")
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            name = f"torch {backend.name.lower().replace('_attention', '')}"
            with sdpa_kernel(backend):
                out = sdpa(q, k, v)
                energy(nvml, f"{name} forward", lambda: sdpa(q, k, v), tflop)
                energy(nvml, f"{name} backward",
                       lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), 2.5 * tflop)
                energy(nvml, f"{name} layer", lambda: torch.autograd.grad(sdpa(q, k, v), (q, k, v), dout),
                       3.5 * tflop)


def main():
    args = [a for a in sys.argv[1:] if a != "--energy"]
    if len(args) not in (0, 4, 5):
        sys.exit("usage: bench_attention.py [--energy] [B T NH HS [KV]]")
    shapes = [tuple(int(a) for a in (args + args[2:3])[:5])] if args else SHAPES
    if "--energy" in sys.argv[1:]:
        return main_energy(shapes)
    torch.manual_seed(0)
    for B, T, NH, HS, KV in shapes:
        q, k, v, dout = inputs(B, T, NH, HS, KV)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fwd = median_ms(lambda: sdpa(q, k, v))
            out = sdpa(q, k, v)
            bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        flops = causal_flops(B, T, NH, HS)
        print(f"torch bf16  B={B:<3d} T={T:<5d} NH={NH:<3d} KV={KV:<3d} HS={HS:<4d} "
              f"fwd {fwd:8.3f} ms {flops / fwd * 1e-9:7.1f} TFLOP/s   "
              f"bwd {bwd:8.3f} ms {2.5 * flops / bwd * 1e-9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
