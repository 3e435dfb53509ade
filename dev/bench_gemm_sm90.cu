/*
 * bench_gemm_sm90.cu (experiment, dev only): the fc forward of a GPT block, pre = x W^T + b and out = gelu(pre), as one
 * Hopper GEMM of our own whose epilogue writes both, against cuBLASLt's GELU_AUX_BIAS epilogue (dev/bench_gemm
 * --energy prices that at 1.22-1.49 J/TFLOP, against 1.06-1.16 for the same GEMM with a bias epilogue only).
 *
 * x: M x K bf16 (rows K-contiguous), W: N x K bf16 (PyTorch's Linear layout), b: N bf16; pre, out: M x N bf16.
 * Persistent, one block an SM, ping-pong: the block walks tiles of GM_BM x GM_BN (N fastest, blocks strided by the
 * grid), its two consumer warpgroups taking turns, so that one's epilogue (bias, GELU, two stores) runs while the
 * other's products keep the tensor cores busy. One producer warp's first lane loads GM_BK-deep slices of x and W with
 * the TMA into GM_STAGES shared-memory stages (128-byte swizzle, what wgmma reads through its descriptors), in the
 * order the warpgroups use them; mbarriers hand stages over (`full`: a slice's bytes landed; `empty`: the 4 warps
 * of the warpgroup that used it are done), and `turn` lets a warpgroup wait for its tile's stages only after the
 * other one has waited for all of its own (a waiter must never be more than one phase ahead of a barrier). Each
 * warpgroup stages its epilogue through its own shared memory, 64 rows at a time, and the TMA stores it (stored
 * straight from the accumulators, 16 bytes of 8 rows a warp's store, the GELU GEMM took 1.52x as long; staged and
 * stored by the threads in 16-byte pieces of rows, 1.1x). Assumes M % GM_BM == 0, N % GM_BN == 0, K % GM_BK == 0
 * (checked on the host).
 *
 * Where it stands (H200 at the power cap, dev/log/2026-11-26.md, "Attention in joules; a GEMM of our own"; cuBLASLt's
 * from dev/bench_gemm --energy):
 *   124M shape (C 768, N 32768): products alone 1.02 J/TFLOP; with the bias epilogue 1.16 (cuBLASLt 1.20); with bias
 *   and GELU (tanh.approx) 1.47 (cuBLASLt's GELU_AUX_BIAS 1.55). 1558M shape (C 1600, N 8192): 1.03, 1.14 (1.10),
 *   1.34 (1.27). The main loop's ~1.0 J/TFLOP is what a cooperative 128 x 256 form (branch gemm-coop-exp, inside
 *   shared memory's bandwidth where this one is not) measured too; the two outputs' bytes cost ~0.3 J/TFLOP at the
 *   124M shape (0.124 J/GB), so ~1.33 is the floor of a GEMM with this two-output epilogue.
 *
 *   make dev/bin/bench_gemm_sm90 && dev/bin/bench_gemm_sm90 [C N ...]
 * (default 768 32768 1600 8192: the fc GEMMs of the 124M and 1558M benches, M = N tokens, K = C, N = 4C).
 * Prints, per shape and epilogue: the worst error against an fp64 reference over sampled rows, TFLOP/s (median of
 * CUDA-event timings), and the energy at the power cap (dev/cuda_energy.cuh).
 */
#include <cuda.h>
#include <cudaTypedefs.h>

#include <vector>

#include "dev/cuda_energy.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/fp8.cuh"
#include "llmc/wgmma.cuh"
#include "test/cuda_timing.cuh"
#include "test/gpu_test_util.cuh"

#define GM_BM 128
#define GM_BN 128
#define GM_BK 64 // one 128-byte swizzle row of bf16
#define GM_STAGES 4
#define GM_CONSUMER_WARPS 8 // two warpgroups, each owning whole tiles
#define GM_THREADS (GM_CONSUMER_WARPS * WARP_SIZE + WARP_SIZE)
#define GM_A_BYTES (GM_BM * GM_BK * 2)
#define GM_B_BYTES (GM_BN * GM_BK * 2)
#define GM_STAGE_BYTES (GM_A_BYTES + GM_B_BYTES)
#define GM_EPI_ROWS 64                            // rows a warpgroup stages at a time
#define GM_EPI_BYTES (2 * GM_EPI_ROWS * GM_BN * 2) // both outputs
#define GM_BARS (2 * GM_STAGES + 2)                // full, empty, turn
#define GM_SMEM (GM_STAGES * GM_STAGE_BYTES + 2 * GM_EPI_BYTES + GM_BARS * 8 + WGMMA_ATOM_BYTES)
#define GM_SAMPLE_ROWS 256 // rows checked against the fp64 reference
// Worst |error| / (1 + |reference|) accepted: bf16 rounds to 2^-8 relative, the fp32 sums over K and tanh.approx
// (2^-10.7) add less than another 2^-8.
#define GM_TOLERANCE 0.0078125

// GM_NONE: the products only (a diagnostic: what the main loop alone costs)
enum GmEpilogue { GM_NONE = -1, GM_BIAS = 0, GM_GELU = 1, GM_GELU_APPROX = 2 };

// ---------------------------------------------------------------------------------------------------------------
// mbarriers and the TMA

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed (a fresh barrier counts its phase "1" as completed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// Box (GM_BK, rows) of a 2-D tensor map at element (k, row) into shared memory; completes bytes on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int k, int row, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(k), "r"(row), "r"(bar)
                 : "memory");
}

// Box (64 columns, rows) of shared memory at src into a 2-D tensor map at element (col, row), in this thread's bulk
// group.
__device__ __forceinline__ void tma_store(const CUtensorMap *map, uint32_t src, int col, int row) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"((uint64_t)map),
                 "r"(col), "r"(row), "r"(src)
                 : "memory");
}

// ---------------------------------------------------------------------------------------------------------------
// wgmma: d (64 x 128, fp32) += A (64 x 16) B (16 x 128), both read K-major from 128-byte-swizzled shared memory

#define GM_TILE(n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
__device__ __forceinline__ void wgmma_64x128(float (&d)[16][4], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63"
                 "}, %64, %65, 1, 1, 1, 0, 0;\n"
                 : GM_TILE(0), GM_TILE(1), GM_TILE(2), GM_TILE(3), GM_TILE(4), GM_TILE(5), GM_TILE(6), GM_TILE(7),
                   GM_TILE(8), GM_TILE(9), GM_TILE(10), GM_TILE(11), GM_TILE(12), GM_TILE(13), GM_TILE(14),
                   GM_TILE(15)
                 : "l"(a), "l"(b));
}
template <int EPI> __device__ __forceinline__ float gm_gelu(float a) {
    if constexpr (EPI == GM_GELU_APPROX) {
        return gelu_fast(a);
    } else {
        return gelu_of(a);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// the kernel

// Bias (and GELU) of 64 rows x GM_BN columns of a warpgroup's accumulator into rows row0 + ... of the outputs,
// through `stage` (GM_EPI_BYTES of shared memory) and the TMA. The stage holds each output as GM_BN / 64 panels of 64
// rows x 128 bytes in the TMA's 128-byte swizzle (16-byte chunk k of row r at chunk k ^ (r % 8)), so that the 8 rows a
// warp's shared store covers fall in different banks. The warpgroup's first thread issues the stores and, before the
// stage is written again, waits until the TMA has read it.
template <int EPI>
__device__ __forceinline__ void gm_epilogue(const float (&d)[16][4], uint32_t stage, const CUtensorMap *map_pre,
                                            const CUtensorMap *map_out, const bf16 *bias, int row0, int n0, int wg) {
    constexpr int PANEL_BYTES = GM_EPI_ROWS * 128, OUT_BYTES = GM_EPI_ROWS * GM_BN * 2;
    const int lane = threadIdx.x % WARP_SIZE, g = lane / 4, c = lane % 4, r0 = (threadIdx.x / WARP_SIZE % 4) * 16 + g;
    const bool leader = threadIdx.x % 128 == 0;
    auto wg_sync = [&] { // a constant barrier id each: a computed one makes ptxas reserve all 16
        if (wg == 0) { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
        else { asm volatile("bar.sync 2, 128;\n" ::: "memory"); }
    };
    if (leader) { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
    wg_sync(); // the previous rows' stores have read the stage
#pragma unroll
    for (int n = 0; n < 16; n++) {
        const __nv_bfloat162 b2 = *reinterpret_cast<const __nv_bfloat162 *>(bias + n0 + 8 * n + 2 * c);
        const float b0 = __bfloat162float(b2.x), b1 = __bfloat162float(b2.y);
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int r = r0 + 8 * hf;
            const uint32_t at = (n / 8) * PANEL_BYTES + r * 128 + (((n % 8) ^ (r % 8)) << 4) + 4 * c;
            const float v0 = d[n][2 * hf] + b0, v1 = d[n][2 * hf + 1] + b1;
            __nv_bfloat162 p2 = __floats2bfloat162_rn(v0, v1);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(stage + at), "r"(*reinterpret_cast<uint32_t *>(&p2)));
            if constexpr (EPI != GM_BIAS) {
                __nv_bfloat162 g2 = __floats2bfloat162_rn(gm_gelu<EPI>(v0), gm_gelu<EPI>(v1));
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(stage + OUT_BYTES + at),
                             "r"(*reinterpret_cast<uint32_t *>(&g2)));
            }
        }
    }
    fence_proxy_async(); // the TMA reads what the threads wrote
    wg_sync();
    if (leader) {
#pragma unroll
        for (int p = 0; p < GM_BN / 64; p++) {
            if constexpr (EPI == GM_BIAS) {
                tma_store(map_out, stage + p * PANEL_BYTES, n0 + 64 * p, row0);
            } else {
                tma_store(map_pre, stage + p * PANEL_BYTES, n0 + 64 * p, row0);
                tma_store(map_out, stage + OUT_BYTES + p * PANEL_BYTES, n0 + 64 * p, row0);
            }
        }
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    }
}

template <int EPI>
__global__ void __launch_bounds__(GM_THREADS, 1)
    gemm_fc_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                   const __grid_constant__ CUtensorMap map_pre, const __grid_constant__ CUtensorMap map_out, bf16 *out,
                   const bf16 *bias, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t base = smem_u32(wgmma_smem_aligned(smem_raw));
    const uint32_t epi = base + GM_STAGES * GM_STAGE_BYTES, bars = epi + 2 * GM_EPI_BYTES;
    auto sA = [&](int s) { return base + s * GM_STAGE_BYTES; };
    auto sB = [&](int s) { return base + s * GM_STAGE_BYTES + GM_A_BYTES; };
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (GM_STAGES + s); };
    auto turn = [&](int w) { return bars + 8 * (2 * GM_STAGES + w); };
    const int tiles_n = N / GM_BN, tiles = (M / GM_BM) * tiles_n, nk = K / GM_BK;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GM_STAGES; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 4);
        }
        mbar_init(turn(0), 4);
        mbar_init(turn(1), 4);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp == GM_CONSUMER_WARPS) { // the producer: every slice of every tile of this block, in order
        if (lane == 0) {
            int c = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int m0 = (t / tiles_n) * GM_BM, n0 = (t % tiles_n) * GM_BN;
                for (int kb = 0; kb < nk; kb++, c++) {
                    const int s = c % GM_STAGES;
                    mbar_wait(empty(s), ((c / GM_STAGES) & 1) ^ 1);
                    mbar_expect_tx(full(s), GM_STAGE_BYTES);
                    tma_load(sA(s), &map_x, kb * GM_BK, m0, full(s));
                    tma_load(sB(s), &map_w, kb * GM_BK, n0, full(s));
                }
            }
        }
        return;
    }

    const int wg = warp / 4;
    // the block's tiles j = wg, wg + 2, ...; tile j's slices are the producer's c = j nk + kb
    for (int j = wg, t = blockIdx.x + wg * gridDim.x; t < tiles; j += 2, t += 2 * gridDim.x) {
        const int m0 = (t / tiles_n) * GM_BM, n0 = (t % tiles_n) * GM_BN;
        float d0[16][4], d1[16][4]; // rows 0-63 and 64-127 of the tile
#pragma unroll
        for (int n = 0; n < 16; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) { d0[n][e] = d1[n][e] = 0.0f; }
        }
        mbar_wait(turn(wg), ((j / 2) & 1) ^ (wg == 0)); // the other warpgroup has waited for its last slice
        for (int kb = 0; kb < nk; kb++) {
            const int c = j * nk + kb, s = c % GM_STAGES;
            mbar_wait(full(s), (c / GM_STAGES) & 1);
            if (kb == nk - 1 && lane == 0) { mbar_arrive(turn(wg ^ 1)); }
            const uint64_t a = wgmma_desc(sA(s)), b = wgmma_desc(sB(s));
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < GM_BK / 16; kc++) { // + 32 bytes a slice; the second 64 rows 8 KB further
                wgmma_64x128(d0, a + 2 * kc, b + 2 * kc);
                wgmma_64x128(d1, a + (64 * GM_BK * 2 >> 4) + 2 * kc, b + 2 * kc);
            }
            wgmma_commit();
            wgmma_wait<1>(); // the previous slice's products are done: its stage may be refilled
            if (kb > 0 && lane == 0) { mbar_arrive(empty((c - 1) % GM_STAGES)); }
        }
        wgmma_wait<0>();
        if (lane == 0) { mbar_arrive(empty((j * nk + nk - 1) % GM_STAGES)); }
        if constexpr (EPI == GM_NONE) {
            if (d0[0][0] == 12345.0f) { out[threadIdx.x] = __float2bfloat16(d1[1][1]); } // keeps the products alive
        } else {
            const uint32_t stage = epi + wg * GM_EPI_BYTES;
            gm_epilogue<EPI>(d0, stage, &map_pre, &map_out, bias, m0, n0, wg);
            gm_epilogue<EPI>(d1, stage, &map_pre, &map_out, bias, m0 + 64, n0, wg);
        }
    }
    if (threadIdx.x % 128 == 0) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); } // before the stage goes
}

// ---------------------------------------------------------------------------------------------------------------
// host

// A rows x K bf16 matrix (K contiguous) as a TMA tensor map with boxes of GM_BK x box_rows, 128-byte swizzled (the
// inputs, K their reduction; the outputs, K their columns).
static CUtensorMap tensor_map(const bf16 *p, int rows, int K, int box_rows) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                                   cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !encode) { fail("the driver has no cuTensorMapEncodeTiled"); }
    }
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)K * sizeof(bf16)};
    const cuuint32_t box[2] = {GM_BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { fail("cuTensorMapEncodeTiled failed (%d) for a %d x %d matrix", (int)r, rows, K); }
    return map;
}

template <int EPI>
static void gemm_fc(bf16 *pre, bf16 *out, const bf16 *x, const bf16 *w, const bf16 *bias, int M, int N, int K) {
    if (M % GM_BM || N % GM_BN || K % GM_BK) {
        fail("gemm_fc takes whole tiles only: tokens %d, 4C %d, C %d must be multiples of %d, %d, %d",
             M, N, K, GM_BM, GM_BN, GM_BK);
    }
    const CUtensorMap mx = tensor_map(x, M, K, GM_BM), mw = tensor_map(w, N, K, GM_BN);
    const CUtensorMap mpre = tensor_map(pre, M, N, GM_EPI_ROWS), mout = tensor_map(out, M, N, GM_EPI_ROWS);
    static int sms = 0;
    if (!sms) {
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        cudaCheck(cudaFuncSetAttribute(gemm_fc_kernel<EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, GM_SMEM));
    }
    const int tiles = (M / GM_BM) * (N / GM_BN);
    gemm_fc_kernel<EPI>
        <<<std::min(sms, tiles), GM_THREADS, GM_SMEM, g_cuda.stream>>>(mx, mw, mpre, mout, out, bias, M, N, K);
    cudaCheckLaunch();
}

// GELU in fp64 with the kernels' own constants (llmc/cuda_common.cuh).
static double gelu_ref(double a) {
    return 0.5 * a * (1.0 + tanh((double)GELU_SCALE * (a + (double)GELU_CUBIC * a * a * a)));
}

static int sample_row(int i, int M) { return (int)((size_t)i * (M - 1) / (GM_SAMPLE_ROWS - 1)); }

// x W^T + b in fp64 for the GM_SAMPLE_ROWS rows sample_row(0 ..) spread over M, row after row: once a shape.
static std::vector<double> reference_pre(const bf16 *x, const bf16 *w, const bf16 *bias, int M, int N, int K) {
    std::vector<bf16> hx = to_host(x, (size_t)M * K), hw = to_host(w, (size_t)N * K), hb = to_host(bias, N);
    std::vector<double> ref((size_t)GM_SAMPLE_ROWS * N);
    for (int i = 0; i < GM_SAMPLE_ROWS; i++) {
        const size_t r = sample_row(i, M);
        for (int col = 0; col < N; col++) {
            double acc = __bfloat162float(hb[col]);
            for (int k = 0; k < K; k++) {
                acc += (double)__bfloat162float(hx[r * K + k]) * __bfloat162float(hw[(size_t)col * K + k]);
            }
            ref[(size_t)i * N + col] = acc;
        }
    }
    return ref;
}

// Worst |got - want| / (1 + |want|) over the sampled rows of the output y, want the reference (through GELU if gelu).
static double worst_error(const bf16 *y, const std::vector<double> &ref, int M, int N, bool gelu) {
    double worst = 0;
    for (int i = 0; i < GM_SAMPLE_ROWS; i++) {
        const std::vector<bf16> row = to_host(y + (size_t)sample_row(i, M) * N, N);
        for (int col = 0; col < N; col++) {
            const double want = gelu ? gelu_ref(ref[(size_t)i * N + col]) : ref[(size_t)i * N + col];
            worst = std::max(worst, fabs(__bfloat162float(row[col]) - want) / (1.0 + fabs(want)));
        }
    }
    return worst;
}

template <int EPI>
static void run(const char *name, const Nvml &nv, bf16 *pre, bf16 *out, const bf16 *x, const bf16 *w,
                const bf16 *bias, const std::vector<double> &ref, int M, int N, int K) {
    cudaCheck(cudaMemsetAsync(pre, 0, (size_t)M * N * sizeof(bf16), g_cuda.stream));
    cudaCheck(cudaMemsetAsync(out, 0, (size_t)M * N * sizeof(bf16), g_cuda.stream));
    gemm_fc<EPI>(pre, out, x, w, bias, M, N, K);
    const double ep = EPI == GM_NONE ? 0 : worst_error(EPI == GM_BIAS ? out : pre, ref, M, N, false);
    const double eo = EPI == GM_NONE || EPI == GM_BIAS ? 0 : worst_error(out, ref, M, N, true);
    const double tflop = 2.0 * M * N * K * 1e-12;
    const float ms = median_ms([&] { gemm_fc<EPI>(pre, out, x, w, bias, M, N, K); }, g_cuda.stream);
    printf("%-18s worst error pre %.2e out %.2e   %7.3f ms  %6.1f TFLOP/s\n", name, ep, eo, ms, tflop / ms * 1e3);
    if (ep > GM_TOLERANCE || eo > GM_TOLERANCE) {
        fail("%s: the outputs are off the fp64 reference by more than %.2e: the kernel is wrong", name, GM_TOLERANCE);
    }
    energy(nv, name, [&] { gemm_fc<EPI>(pre, out, x, w, bias, M, N, K); }, g_cuda.stream, tflop, "TFLOP");
}

int main(int argc, char **argv) {
    std::vector<int> shapes = {768, 32768, 1600, 8192};
    if (argc > 2) { shapes.assign(argc - 1, 0); for (int i = 1; i < argc; i++) { shapes[i - 1] = atoi(argv[i]); } }
    cuda_context_init();
    Nvml nv = nvml_open();
    for (size_t a = 0; a + 1 < shapes.size(); a += 2) {
        const int C = shapes[a], M = shapes[a + 1], K = C, N = 4 * C;
        bf16 *x, *w, *bias, *pre, *out;
        cudaCheck(cudaMalloc(&x, (size_t)M * K * sizeof(bf16)));
        cudaCheck(cudaMalloc(&w, (size_t)N * K * sizeof(bf16)));
        cudaCheck(cudaMalloc(&bias, (size_t)N * sizeof(bf16)));
        cudaCheck(cudaMalloc(&pre, (size_t)M * N * sizeof(bf16)));
        cudaCheck(cudaMalloc(&out, (size_t)M * N * sizeof(bf16)));
        fill_random<<<ceil_div_int(M * K, 256), 256, 0, g_cuda.stream>>>(x, (size_t)M * K, 1);
        fill_random<<<ceil_div_int(N * K, 256), 256, 0, g_cuda.stream>>>(w, (size_t)N * K, 2);
        fill_random<<<ceil_div_int(N, 256), 256, 0, g_cuda.stream>>>(bias, N, 3);
        printf("== C %d, N %d: out (%d x %d) = gelu(x (%d x %d) W^T + b)\n", C, M, M, N, M, K);
        const std::vector<double> ref = reference_pre(x, w, bias, M, N, K);
        run<GM_NONE>("ours products only", nv, pre, out, x, w, bias, ref, M, N, K);
        run<GM_BIAS>("ours bias", nv, pre, out, x, w, bias, ref, M, N, K);
        run<GM_GELU>("ours gelu", nv, pre, out, x, w, bias, ref, M, N, K);
        run<GM_GELU_APPROX>("ours gelu approx", nv, pre, out, x, w, bias, ref, M, N, K);
        for (bf16 *p : {x, w, bias, pre, out}) { cudaCheck(cudaFree(p)); }
    }
    return 0;
}
