"""
bench_attention.py: PyTorch's flash attention (SDPA, FLASH backend) at the shapes test/test_attention.cu times,
the baseline for llmc/attention.cuh. Same layout (q, k, v strided views of one (B, T, 3, NH, HS) bf16 tensor),
same FLOP count (causal forward 4 B NH T^2 HS / 2, backward 2.5x), median of CUDA-event timings after warm-up.
Run on the GPU machine: python3 dev/bench_attention.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

WARMUP, REPS = 5, 30
SHAPES = [(32, 1024, 12, 64), (8, 1024, 25, 64), (16, 1024, 12, 128)]


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


def main():
    torch.manual_seed(0)
    for B, T, NH, HS in SHAPES:
        qkv = (torch.rand(B, T, 3, NH, HS, device="cuda", dtype=torch.bfloat16) * 4 - 2).requires_grad_()
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS) views
        dout = torch.rand(B, NH, T, HS, device="cuda", dtype=torch.bfloat16) * 2 - 1
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        flops = 4.0 * B * NH * T * T * HS / 2
        print(f"torch bf16  B={B:<3d} T={T:<5d} NH={NH:<3d} HS={HS:<4d} fwd {fwd:8.3f} ms {flops / fwd * 1e-9:7.1f} "
              f"TFLOP/s   bwd {bwd:8.3f} ms {2.5 * flops / bwd * 1e-9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
