/*
 * bench_l2_reduce.cu: how fast fp32 tiles can be added into an L2-resident accumulator, the cost that decides
 * whether a single-pass attention backward (dQ summed over key blocks inside the dK/dV kernel) can pay.
 *
 * Each block of 128 threads (a warpgroup, as the attention kernels) adds one 64 x 64 fp32 tile (16 KB: a dQ tile
 * of 64 queries at head size 64) into the accumulator `iters` times, each time into the next of `tiles` tiles
 * (a window of tiles x 16 KB, which stays in L2 as the resident blocks' heads would), in one of four ways:
 *   red4   red.global.add.v4.f32 (Hopper's vector reduction: 8 a thread a tile)
 *   red1   red.global.add.f32 (32 a thread a tile)
 *   rmw    load, add, store (what an ordered accumulation, one block a tile at a time, could do)
 *   store  store only (the write floor)
 * and prints the added bytes per second. Timed with CUDA events (test/cuda_timing.cuh). Blocks at different
 * iterations may hit the same tile at once (rmw then loses updates): a timing, not a sum.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. dev/bench_l2_reduce.cu -o /tmp/bench_l2_reduce
 *   /tmp/bench_l2_reduce [blocks iters tiles]       (default 396 64 400: 3 blocks an SM, 6.6 MB window)
 */
#include <stdio.h>
#include <stdlib.h>

#include "llmc/cuda_common.cuh"
#include "test/cuda_timing.cuh"

#define TILE_FLOATS (64 * 64)
#define THREADS 128
#define PER_THREAD (TILE_FLOATS / THREADS) // 32 floats

enum { RED4, RED1, RMW, STORE, MODES };
static const char *const MODE_NAMES[MODES] = {"red4", "red1", "rmw", "store"};

template <int MODE> __global__ void __launch_bounds__(THREADS) add_tiles(float *acc, int iters, int tiles) {
    float v[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) { v[i] = 1e-3f * (threadIdx.x + i); } // not zeros
    for (int it = 0; it < iters; it++) {
        float *tile = acc + (size_t)((blockIdx.x + it) % tiles) * TILE_FLOATS;
        // thread t owns float4s t, t + 128, ...: each warp instruction covers 512 contiguous bytes
        for (int k = 0; k < PER_THREAD / 4; k++) {
            float *p = tile + ((size_t)k * THREADS + threadIdx.x) * 4;
            const float *x = v + 4 * k;
            if constexpr (MODE == RED4) {
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(x[0]), "f"(x[1]),
                             "f"(x[2]), "f"(x[3])
                             : "memory");
            } else if constexpr (MODE == RED1) {
                for (int e = 0; e < 4; e++) { atomicAdd(p + e, x[e]); }
            } else if constexpr (MODE == RMW) {
                float4 a = *reinterpret_cast<float4 *>(p);
                a.x += x[0], a.y += x[1], a.z += x[2], a.w += x[3];
                *reinterpret_cast<float4 *>(p) = a;
            } else {
                *reinterpret_cast<float4 *>(p) = make_float4(x[0], x[1], x[2], x[3]);
            }
        }
    }
}

int main(int argc, char **argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 396, iters = argc > 2 ? atoi(argv[2]) : 64;
    int tiles = argc > 3 ? atoi(argv[3]) : 400;
    if (blocks < 1 || iters < 1 || tiles < 1) {
        fprintf(stderr, "usage: %s [blocks iters tiles], each >= 1\n", argv[0]);
        return 1;
    }
    float *acc;
    cudaCheck(cudaMalloc(&acc, (size_t)tiles * TILE_FLOATS * sizeof(float)));
    cudaCheck(cudaMemset(acc, 0, (size_t)tiles * TILE_FLOATS * sizeof(float)));
    double bytes = (double)blocks * iters * TILE_FLOATS * sizeof(float);
    printf("%d blocks x %d tiles of 16 KB into a %.1f MB window: %.1f MB added a launch\n", blocks, iters,
           tiles * TILE_FLOATS * 4.0 / 1e6, bytes / 1e6);
    for (int m = 0; m < MODES; m++) {
        auto launch = [&]() {
            switch (m) {
            case RED4: add_tiles<RED4><<<blocks, THREADS>>>(acc, iters, tiles); break;
            case RED1: add_tiles<RED1><<<blocks, THREADS>>>(acc, iters, tiles); break;
            case RMW: add_tiles<RMW><<<blocks, THREADS>>>(acc, iters, tiles); break;
            default: add_tiles<STORE><<<blocks, THREADS>>>(acc, iters, tiles); break;
            }
            cudaCheckLaunch();
        };
        double ms = median_ms(launch);
        printf("%-6s %8.3f ms  %7.2f TB/s of tiles added\n", MODE_NAMES[m], ms, bytes / (ms * 1e-3) / 1e12);
    }
    cudaCheck(cudaFree(acc));
    return 0;
}
