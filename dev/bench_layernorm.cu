/*
 * bench_layernorm.cu: the bf16 LayerNorm backward (llmc/layernorm.cuh, with its partial-sum pass) timed at the GPT-2
 * widths and token counts of dev/bench.sh, for each launch shape (packs a thread takes of a row), and the shapes'
 * results compared with the first's (they differ only in the order of the row sums). Median of CUDA-event timings
 * after warm-up, on random inputs; GB/s counts dout, inp and dinp read, dinp written.
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. dev/bench_layernorm.cu -lcublasLt -o /tmp/bench_ln
 *   /tmp/bench_ln [rows C packs]      (one shape only, at most that many packs a thread; e.g. under ncu)
 */
#include <vector>

#include "llmc/layernorm.cuh"
#include "test/cuda_timing.cuh"
#include "test/test_util.h"

#define REPS 50 // timed runs a shape

static std::vector<bf16> random_bf16(size_t n, uint64_t seed, float scale) {
    std::vector<bf16> h(n);
    for (auto &e : h) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        e = __float2bfloat16_rn(((float)((seed >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f) * scale);
    }
    return h;
}

template <typename T> static T *upload(const std::vector<T> &h) {
    T *d = (T *)cuda_alloc(h.size() * sizeof(T), "bench buffer");
    // through the stream the kernels run on: the legacy stream's copy is not ordered with it
    cudaCheck(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    return d;
}

static void bench_width(int rows, int C, int only_ppt) {
    const size_t n = (size_t)rows * C;
    bf16 *dout = upload(random_bf16(n, 1, 1.0f)), *inp = upload(random_bf16(n, 2, 2.0f));
    bf16 *w = upload(random_bf16(C, 3, 1.0f)), *dinp0 = upload(random_bf16(n, 4, 0.5f));
    std::vector<float> hm(rows), hr(rows);
    for (int r = 0; r < rows; r++) { hm[r] = 0.01f * (r % 7), hr[r] = 0.8f + 0.01f * (r % 11); }
    float *mean = upload(hm), *rstd = upload(hr);
    bf16 *dinp = (bf16 *)cuda_alloc(n * sizeof(bf16), "dinp");
    float *sums = (float *)cuda_alloc(3 * C * sizeof(float), "sums");
    std::vector<float> first;
    LnShape last = {0, 0};
    for (int ppt = 1; ppt <= LN_PACKS_MAX; ppt++) { // at most ppt packs a thread
        LnShape s = layernorm_shape<bf16>(C, ppt);
        bool same = s.packs_per_thread == last.packs_per_thread && s.threads == last.threads;
        if (same || (only_ppt && ppt != only_ppt)) { continue; }
        last = s;
        LnBackwardLaunch l = layernorm_backward_launch<bf16>(rows, C, s);
        int blocks = l.blocks;
        float *scratch = (float *)cuda_alloc((size_t)blocks * LN_PARTIALS * C * sizeof(float), "scratch");
        auto run = [&] {
            layernorm_backward(dinp, sums, sums + C, sums + 2 * C, scratch, dout, inp, w, mean, rstd, rows, C, 0,
                               g_cuda.stream, ppt);
        };
        float ms = median_ms(run, g_cuda.stream, REPS);
        // one call from the same dinp for the comparison (the stream does not synchronize with cudaMemcpy's)
        cudaCheck(cudaMemcpyAsync(dinp, dinp0, n * sizeof(bf16), cudaMemcpyDeviceToDevice, g_cuda.stream));
        run();
        cudaCheck(cudaStreamSynchronize(g_cuda.stream));
        std::vector<bf16> hd(n);
        std::vector<float> out(n + 3 * C);
        cudaCheck(cudaMemcpy(hd.data(), dinp, n * sizeof(bf16), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(out.data() + n, sums, 3 * C * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) { out[i] = __bfloat162float(hd[i]); }
        if (first.empty()) { first = out; }
        double e_dinp = max_rel_err(out.data(), first.data(), n), e_sums = max_rel_err(out.data() + n, first.data() + n, 3 * C);
        double gb = 4.0 * n * sizeof(bf16) / 1e9;
        printf("rows %6d C %5d | %d packs x %3d threads x %d groups, %4d blocks | %7.1f us %6.0f GB/s | vs first: dinp "
               "%.1e sums %.1e\n",
               rows, C, s.packs_per_thread, s.threads, l.groups, blocks, ms * 1e3, gb / (ms * 1e-3), e_dinp, e_sums);
        cudaCheck(cudaFree(scratch));
    }
    for (void *p : {(void *)dout, (void *)inp, (void *)w, (void *)dinp0, (void *)mean, (void *)rstd, (void *)dinp,
                    (void *)sums}) {
        cudaCheck(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    cuda_context_init();
    printf("%s, bf16 LayerNorm backward (LN_BWD_STAGES %d)\n", g_cuda.props.name, LN_BWD_STAGES);
    if (argc == 4) { // rows C packs: one shape (for a profiler)
        bench_width(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]));
        return 0;
    }
    bench_width(32768, 768, 0);  // 124M, B 32
    bench_width(16384, 1024, 0); // 350M, B 16
    bench_width(8192, 1280, 0);  // 774M, B 8
    bench_width(8192, 1600, 0);  // 1558M, B 8
    return 0;
}
