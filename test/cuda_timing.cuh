/*
 * cuda_timing.cuh: the median time of a piece of GPU work, for the GPU tests' and dev benchmarks' timings: `reps`
 * runs after MEDIAN_WARMUP untimed ones, each between two CUDA events on `stream` (the work must run there, or on
 * the legacy default stream when it is 0).
 */
#ifndef TEST_CUDA_TIMING_CUH
#define TEST_CUDA_TIMING_CUH

#include <algorithm>
#include <vector>

#include "llmc/cuda_common.cuh"

#define MEDIAN_WARMUP 5
#define MEDIAN_REPS 30

template <typename F> static float median_ms(F fn, cudaStream_t stream = 0, int reps = MEDIAN_REPS) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    for (int i = 0; i < MEDIAN_WARMUP; i++) { fn(); }
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) {
        cudaCheck(cudaEventRecord(e0, stream));
        fn();
        cudaCheck(cudaEventRecord(e1, stream));
        cudaCheck(cudaEventSynchronize(e1));
        cudaCheck(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

#endif // TEST_CUDA_TIMING_CUH
