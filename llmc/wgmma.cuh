/*
 * wgmma.cuh: what Hopper's warpgroup MMA (wgmma, sm_90a) needs around its products, shared by the kernels that use it
 * (llmc/attention.cuh; dev/bench_gemm_sm90.cu). A wgmma reads its shared-memory operands through 64-bit descriptors;
 * the ones here describe K-major or MN-major tiles stored in 128-byte-swizzled panels: rows of 128 bytes whose 16-byte
 * chunk c lies at chunk c ^ (row % 8), in atoms of 8 rows (1024 bytes, the alignment a panel needs). Products are
 * issued between wgmma_fence and wgmma_commit and run while the warps go on; wgmma_wait<N> returns once at most N
 * committed groups are still in flight.
 */
#ifndef LLMC_WGMMA_CUH
#define LLMC_WGMMA_CUH

#include <stdint.h>

#include "cuda_common.cuh"

#define WGMMA_ATOM_BYTES 1024 // 8 rows of 128 bytes: a 128-byte-swizzle atom, and the alignment panels need
#define WGMMA_K 16            // the reduction depth of one wgmma

// The first WGMMA_ATOM_BYTES-aligned byte at or after smem: dynamic shared memory is not that aligned, so a
// kernel asks for WGMMA_ATOM_BYTES more than its panels need and starts them here.
__device__ __forceinline__ unsigned char *wgmma_smem_aligned(unsigned char *smem) {
    return smem + (WGMMA_ATOM_BYTES - smem_u32(smem) % WGMMA_ATOM_BYTES) % WGMMA_ATOM_BYTES;
}

// Descriptor of a 128-byte-swizzled panel at shared address addr: start (16-byte units), leading byte offset (unused
// by swizzled layouts: 1), stride byte offset (between 8-row atoms), swizzle mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(WGMMA_ATOM_BYTES >> 4) << 32) |
           ((uint64_t)1 << 62);
}
// The descriptor advanced by `bytes` (a multiple of 16) within the tile.
__device__ __forceinline__ uint64_t wgmma_desc_at(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (cp.async included) visible to wgmma's reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of an accumulator across the asynchronous MMAs that write it.
template <int NT> __device__ __forceinline__ void wgmma_hold(float (&d)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) { asm volatile("" : "+f"(d[n][e])::"memory"); }
    }
}

#endif // LLMC_WGMMA_CUH
