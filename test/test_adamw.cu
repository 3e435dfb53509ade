/*
 * test_adamw.cu: the AdamW kernel (llmc/adamw.cuh) against an fp64 AdamW on the host, with the clip factor, and the
 * gradient norm's partial sums it writes against the norm's own pass.
 *
 * A group of spans whose lengths end mid-chunk (and one shorter than a chunk), with and without weight decay and the
 * bf16 copy: p, m, v within float rounding of fp64 (2e-6 relative to the terms summed: a handful of float operations,
 * each within 2^-24); the bf16 copy exactly p rounded to bf16 where the span has one, untouched where not; nothing
 * written outside the group's spans. The norm: the spans but one (a tensor the norm counts on another rank) write
 * their chunks' partial sums of squares of the unclipped gradient, which must be bit for bit those of
 * sum_squares_kernel over the same slices (that is what makes the update in backward's norm the update after it's),
 * within float rounding of fp64 (1e-5: the sums of 1024 squares), and nothing outside them (the uncounted span's); and
 * grad_sum_partials' double sum of them within 1e-6 of fp64.
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
#define PARTIAL_TOL 1e-5   // a chunk's sum of squares against fp64
#define NORM_TOL 1e-6      // the squared norm, summed in double, against fp64
#define UNCOUNTED 2        // the span the norm does not count

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

    float *dp = to_device(p), *dg = to_device(g), *dm = to_device(m), *dv = to_device(v);
    AdamWGroup grp;
    NormGroup norm;
    memset(&grp, 0, sizeof(grp));
    memset(&norm, 0, sizeof(norm));
    size_t at = 0;
    std::vector<int> norm_first(spans.size(), -1);
    for (size_t k = 0; k < spans.size(); k++) {
        adamw_group_add(&grp, at, at, spans[k].n, spans[k].wd, spans[k].copy);
        if (k != UNCOUNTED) {
            norm_first[k] = norm_group_chunks(&norm);
            norm_group_add(&norm, dg + at, spans[k].n);
            adamw_group_norm(&grp, norm_first[k]);
        }
        at += spans[k].n;
    }
    size_t chunks = 0;
    for (const Span &sp : spans) { chunks += (sp.n + ADAMW_CHUNK - 1) / ADAMW_CHUNK; }
    check(adamw_group_chunks(&grp) == (int)chunks, "adamw_chunks", "the group has %d chunks, its spans %zu",
          adamw_group_chunks(&grp), chunks);

    float *dclip = to_device(std::vector<float>{CLIP});
    bf16 *dcopy = to_device(std::vector<bf16>(total + GUARD, to_type<bf16>(GUARD_VALUE)));
    int parts = norm_group_chunks(&norm);
    float *dguarded = to_device(std::vector<float>(GUARD + parts + GUARD, GUARD_VALUE)), *dparts = dguarded + GUARD;
    float *dpass = to_device(std::vector<float>(parts, GUARD_VALUE));
    double *dfold = to_device(std::vector<double>(norm_folds(parts))), *dsum = to_device(std::vector<double>(1));
    grad_norm_partials(dpass, &norm, g_cuda.stream); // before AdamW, which leaves the gradients as they are
    AdamWFp8 f8;
    memset(&f8, 0, sizeof(f8));
    adamw_update(dp, dcopy, dg, dm, dv, &grp, step, dclip, f8, dparts, g_cuda.stream);
    grad_sum_partials(dsum, dparts, parts, dfold, g_cuda.stream);
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    std::vector<float> out[3] = {to_host(dp, total + GUARD), to_host(dm, total + GUARD), to_host(dv, total + GUARD)};
    std::vector<bf16> copy = to_host(dcopy, total + GUARD);
    std::vector<float> guarded = to_host(dguarded, GUARD + parts + GUARD), by_pass = to_host(dpass, parts);
    const float *by_adamw = guarded.data() + GUARD;
    double sum = to_host(dsum, 1)[0];
    for (void *q : {(void *)dp, (void *)dg, (void *)dm, (void *)dv, (void *)dclip, (void *)dcopy, (void *)dguarded,
                    (void *)dpass, (void *)dfold, (void *)dsum}) {
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

    // the norm's partial sums: each chunk's in fp64, then AdamW's against the pass's bit for bit
    double worst_part = 0, sum_ref = 0;
    at = 0;
    for (size_t k = 0; k < spans.size(); k++) {
        for (size_t c = 0; k != UNCOUNTED && c * NORM_CHUNK < spans[k].n; c++) {
            double ref = 0;
            for (size_t e = c * NORM_CHUNK; e < spans[k].n && e < (c + 1) * NORM_CHUNK; e++) {
                ref += (double)g[at + e] * g[at + e];
            }
            worst_part = fmax(worst_part, fabs(by_adamw[norm_first[k] + c] - ref) / ref);
            sum_ref += ref;
        }
        at += spans[k].n;
    }
    check(parts > (int)spans.size() && worst_part <= PARTIAL_TOL, "adamw_norm_partials",
          "%d partial sums, worst relative error %.3e against fp64 > %.1e", parts, worst_part, PARTIAL_TOL);
    check(memcmp(by_adamw, by_pass.data(), parts * sizeof(float)) == 0, "adamw_norm_partials_bitwise",
          "AdamW's partial sums of squares differ from sum_squares_kernel's");
    int parts_guard = 1;
    for (int i = 0; i < GUARD; i++) { parts_guard &= guarded[i] == GUARD_VALUE && by_adamw[parts + i] == GUARD_VALUE; }
    check(parts_guard, "adamw_norm_bounds", "AdamW wrote partial sums outside the norm's %d (the uncounted span's?)",
          parts);
    check(fabs(sum - sum_ref) <= NORM_TOL * sum_ref, "grad_sum_partials", "squared norm %.9e, fp64 %.9e", sum,
          sum_ref);

    // The same update in two launches (AdamWLate): the late one takes rows late_rows (of LATE_WIDTH parameters) of span
    // LATE_ROWS_SPAN and the whole of span UNCOUNTED, the early one every other chunk; together bit for bit the one
    // launch's parameters, moments, copy and partial sums. Shown to fail with a chunk left out of both (a late row
    // that is not flagged, or flagged but not listed).
    const int LATE_ROWS_SPAN = 1, LATE_WIDTH = 300;
    const std::vector<int> late_rows = {0, 7, 8};
    float *dp2 = to_device(p), *dg2 = to_device(g), *dm2 = to_device(m), *dv2 = to_device(v);
    float *dclip2 = to_device(std::vector<float>{CLIP}), *dparts2 = to_device(std::vector<float>(parts, GUARD_VALUE));
    bf16 *dcopy2 = to_device(std::vector<bf16>(total + GUARD, to_type<bf16>(GUARD_VALUE)));
    AdamWLate late;
    late.chunks = adamw_group_chunks(&grp);
    late.count = 0;
    std::vector<int> staging(late.chunks);
    late.staging = staging.data();
    cudaCheck(cudaMalloc(&late.flag, late.chunks));
    cudaCheck(cudaMalloc(&late.list, late.chunks * sizeof(int)));
    adamw_late_rows(&late, grp.chunk_end[LATE_ROWS_SPAN - 1], late_rows.data(), (int)late_rows.size(), LATE_WIDTH);
    adamw_late_span(&late, grp.chunk_end[UNCOUNTED - 1], grp.chunk_end[UNCOUNTED]);
    adamw_late_upload(&late, g_cuda.stream);
    adamw_update(dp2, dcopy2, dg2, dm2, dv2, &grp, step, dclip2, f8, dparts2, g_cuda.stream, adamw_early_part(&late));
    adamw_update(dp2, dcopy2, dg2, dm2, dv2, &grp, step, dclip2, f8, dparts2, g_cuda.stream, adamw_late_part(&late));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    std::vector<float> out2[3] = {to_host(dp2, total + GUARD), to_host(dm2, total + GUARD),
                                  to_host(dv2, total + GUARD)};
    std::vector<bf16> copy2 = to_host(dcopy2, total + GUARD);
    std::vector<float> parts2 = to_host(dparts2, parts);
    for (void *q : {(void *)dp2, (void *)dg2, (void *)dm2, (void *)dv2, (void *)dclip2, (void *)dparts2,
                    (void *)dcopy2, (void *)late.flag, (void *)late.list}) {
        cudaCheck(cudaFree(q));
    }
    // rows 0, 7 and 8 of 300 meet chunks 0 and 2 of the span (8 ends at 2700 < 3072), and span 2 is one chunk
    check(late.count == 3, "adamw_late_list", "%d late chunks listed, expected 3 (a chunk two rows meet once)",
          late.count);
    int same = 1;
    for (int t = 0; t < 3; t++) { same &= memcmp(out2[t].data(), out[t].data(), out[t].size() * sizeof(float)) == 0; }
    same &= memcmp(copy2.data(), copy.data(), copy.size() * sizeof(bf16)) == 0;
    check(same, "adamw_two_launches", "the early and late launches differ from one launch (p, m, v or the copy)");
    check(memcmp(parts2.data(), by_adamw, parts * sizeof(float)) == 0, "adamw_two_launches_norm",
          "the two launches' partial sums of squares differ from one launch's");
    return test_exit();
}
