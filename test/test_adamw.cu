/*
 * test_adamw.cu: the AdamW kernel (llmc/adamw.cuh) against an fp64 AdamW on the host, with the clip factor.
 *
 * A group of spans whose lengths end mid-chunk (and one shorter than a chunk), with and without weight decay and the
 * bf16 copy: p, m, v within float rounding of fp64 (2e-6 relative to the terms summed: a handful of float operations,
 * each within 2^-24); the bf16 copy exactly p rounded to bf16 where the span has one, untouched where not; nothing
 * written outside the group's spans.
 */
#include <cmath>
#include <cstdio>
#include <vector>

#include "llmc/adamw.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define UPDATE_TOL 2e-6
#define GUARD 1024         // floats past the group's spans, which AdamW must leave alone
#define GUARD_VALUE 7.0f
#define CLIP 0.5f          // the clip factor AdamW reads on the device

struct Span {
    size_t n;
    float wd;
    int copy;
};

static float frand(unsigned *s) { // uniform in [-1, 1)
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

int main(void) {
    cuda_context_init();
    const std::vector<Span> spans = {{3000, 0.1f, 1}, {4096, 0.0f, 1}, {100, 0.1f, 0}, {2052, 0.0f, 1}};
    size_t total = 0;
    for (const Span &sp : spans) { total += sp.n; }
    std::vector<float> p(total + GUARD, GUARD_VALUE), g(total + GUARD, GUARD_VALUE), m(total + GUARD, GUARD_VALUE),
        v(total + GUARD, GUARD_VALUE);
    unsigned seed = 7;
    for (size_t i = 0; i < total; i++) {
        p[i] = frand(&seed);
        g[i] = 0.01f * frand(&seed);
        m[i] = 0.001f * frand(&seed);
        v[i] = 1e-5f * (1.0f + frand(&seed));
    }
    AdamWStep step = {1e-3f, 0.9f, 0.95f, 1.0f - 0.9f * 0.9f * 0.9f, 1.0f - 0.95f * 0.95f * 0.95f, 1e-8f};

    AdamWGroup grp;
    memset(&grp, 0, sizeof(grp));
    size_t at = 0;
    for (const Span &sp : spans) {
        adamw_group_add(&grp, at, at, sp.n, sp.wd, sp.copy);
        at += sp.n;
    }
    size_t chunks = 0;
    for (const Span &sp : spans) { chunks += (sp.n + ADAMW_CHUNK - 1) / ADAMW_CHUNK; }
    check(adamw_group_chunks(&grp) == (int)chunks, "adamw_chunks", "the group has %d chunks, its spans %zu",
          adamw_group_chunks(&grp), chunks);

    float *dp = to_device(p), *dg = to_device(g), *dm = to_device(m), *dv = to_device(v);
    float *dclip = to_device(std::vector<float>{CLIP});
    bf16 *dcopy = to_device(std::vector<bf16>(total + GUARD, to_type<bf16>(GUARD_VALUE)));
    AdamWFp8 f8;
    memset(&f8, 0, sizeof(f8));
    adamw_update(dp, dcopy, dg, dm, dv, &grp, step, dclip, f8, g_cuda.stream);
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    std::vector<float> out[3] = {to_host(dp, total + GUARD), to_host(dm, total + GUARD), to_host(dv, total + GUARD)};
    std::vector<bf16> copy = to_host(dcopy, total + GUARD);
    for (void *q : {(void *)dp, (void *)dg, (void *)dm, (void *)dv, (void *)dclip, (void *)dcopy}) {
        cudaCheck(cudaFree(q));
    }

    double worst[3] = {0, 0, 0};
    int copy_ok = 1, copy_untouched = 1, guard_ok = 1;
    at = 0;
    for (const Span &sp : spans) {
        for (size_t e = 0; e < sp.n; e++) {
            size_t i = at + e;
            double gi = (double)g[i] * CLIP;
            double mi = step.beta1 * (double)m[i] + (1.0 - step.beta1) * gi;
            double vi = step.beta2 * (double)v[i] + (1.0 - step.beta2) * gi * gi;
            double pi = p[i] - step.lr * ((mi / step.bias_corr1) / (sqrt(vi / step.bias_corr2) + step.eps) +
                                          sp.wd * (double)p[i]);
            double ref[3] = {pi, mi, vi};
            // relative to the terms summed, not the sum: m's two terms can cancel; p changes by ~lr, so against 1
            double scale[3] = {fmax(fabs(pi), 1.0), step.beta1 * fabs(m[i]) + (1.0 - step.beta1) * fabs(gi), vi};
            for (int t = 0; t < 3; t++) { worst[t] = fmax(worst[t], fabs(out[t][i] - ref[t]) / scale[t]); }
            float c = host_float(copy[i]);
            if (sp.copy) {
                copy_ok &= c == host_float(to_type<bf16>(out[0][i]));
            } else {
                copy_untouched &= c == GUARD_VALUE;
            }
        }
        at += sp.n;
    }
    for (size_t i = total; i < total + GUARD; i++) {
        for (int t = 0; t < 3; t++) { guard_ok &= out[t][i] == GUARD_VALUE; }
        guard_ok &= host_float(copy[i]) == GUARD_VALUE;
    }
    const char *names[3] = {"adamw_params", "adamw_m", "adamw_v"};
    for (int t = 0; t < 3; t++) {
        check(worst[t] <= UPDATE_TOL, names[t], "worst relative error %.3e against fp64 > %.1e", worst[t], UPDATE_TOL);
    }
    check(copy_ok, "adamw_bf16_copy", "the bf16 copy is not the updated p rounded to bf16");
    check(copy_untouched, "adamw_no_copy", "the bf16 copy was written for a span without one");
    check(guard_ok, "adamw_bounds", "AdamW wrote past the group's %zu parameters", total);
    return test_exit();
}
