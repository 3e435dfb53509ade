/*
 * test_layernorm.cu: llmc/layernorm.cuh's forward and backward, LayerNorm and RMSNorm, against an fp64 reference on
 * the host, in fp32 and bf16, at widths that take every backward launch shape: one-warp row groups (no barrier),
 * groups of several warps (their named barriers), rows that leave a warp's last threads idle, and the widest rows the
 * kernels take (8192 bf16, 4096 fp32 channels: LN_MAX_PACKS packs), each at every packs-a-thread limit (1 to
 * LN_PACKS_MAX), with row counts that do and do not fill the grid's row groups evenly and that make each group take
 * several rows; RMSNorm also at Llama 3's widths 2048, 3072 and 4096. Checks:
 * - forward: out, the residual sum, mean (LayerNorm) and rstd;
 * - backward: dinp (accumulated onto a given dinp), and the column sums dw, db (LayerNorm) and dsum (of the new
 *   dinp), written (accumulate 0) and then added (accumulate 1: twice the sums);
 * - the backward twice gives the same bits (no atomics, a fixed order of sums).
 * Tolerances (max |gpu - ref| / max |ref| per tensor): fp32 1e-5 for values of one row (sums of up to 8192 fp32
 * terms: n u = 5e-4 at worst, ~sqrt(n) u = 5e-6 for random signs, and the reference's own inputs are exact) and for the
 * column sums (over up to 3000 rows); bf16 1e-2 for dinp and the forward's outputs (stored in bf16: 2^-9 relative a
 * value), 1e-4 for dw, db and dsum (fp32 sums of values the reference reads exactly: dsum adds dinp as stored). A
 * missed pack or row shows as O(1).
 *   test/gpubin/test_layernorm [small]     (small: a few rows a shape, for compute-sanitizer)
 */
#include <string.h>

#include <vector>

#include "llmc/layernorm.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

#define TOL_F32 1e-5
#define TOL_BF16_STORED 1e-2
#define TOL_BF16_SUMS 1e-4
#define RMSNORM_TEST_EPS 1e-5f // Llama 3's rms_norm_eps

static uint64_t g_rng = 88172645463325252ull;
static float rand_uniform(void) { // (-1, 1)
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// A host copy of n values at d, in fp64 (the references' type).
template <typename T> static std::vector<double> to_host_f64(const T *d, size_t n) {
    std::vector<T> h = to_host(d, n);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; i++) { out[i] = host_float(h[i]); }
    return out;
}
template <typename T> static std::vector<T> random_tensor(size_t n, float scale, float offset = 0.0f) {
    std::vector<T> h(n);
    for (auto &e : h) { e = to_type<T>(rand_uniform() * scale + offset); }
    return h;
}

static double rel_err(const std::vector<double> &a, const std::vector<double> &b) {
    return max_rel_err_f64(a.data(), b.data(), a.size());
}

static void expect(const char *what, const char *label, double err, double tol) {
    char name[256];
    snprintf(name, sizeof(name), "%s %s", label, what);
    check(err <= tol, name, "max error %.3e relative, tolerance %.1e", err, tol);
}

// One width of LayerNorm, or of RMSNorm (no mean, no bias: mu = 0, b = 0 in the reference's formulas, and the mean(g)
// term of dinp, the gradient through the mean, gone).
template <typename T, bool RMS> static void test_width(int rows, int C, double tol_stored, double tol_sums) {
    const size_t n = (size_t)rows * C;
    std::vector<T> x = random_tensor<T>(n, 2.0f, 0.3f), dx = random_tensor<T>(n, 1.0f);
    std::vector<T> dout = random_tensor<T>(n, 1.0f), dinp0 = random_tensor<T>(n, 0.5f);
    std::vector<T> w = random_tensor<T>(C, 1.0f, 1.0f), b = random_tensor<T>(C, 0.5f);
    T *d_x = to_device(x), *d_dx = to_device(dx), *d_dout = to_device(dout), *d_w = to_device(w), *d_b = to_device(b);
    T *d_out = (T *)cuda_alloc(n * sizeof(T), "out"), *d_res = (T *)cuda_alloc(n * sizeof(T), "resid");
    float *d_mean = (float *)cuda_alloc(rows * sizeof(float), "mean");
    float *d_rstd = (float *)cuda_alloc(rows * sizeof(float), "rstd");
    const char *norm = RMS ? "rmsnorm" : "layernorm";
    char label[64];
    snprintf(label, sizeof(label), "%s %s rows %d C %d", norm, TypeInfo<T>::name, rows, C);
    const double eps = RMS ? RMSNORM_TEST_EPS : LAYERNORM_EPS;

    // forward, with the residual add; the reference takes r as stored (rounded to T), as backward does
    if (RMS) {
        rmsnorm_forward(d_out, d_rstd, d_res, d_x, d_dx, d_w, rows, C, RMSNORM_TEST_EPS, g_cuda.stream);
    } else {
        layernorm_forward(d_out, d_mean, d_rstd, d_res, d_x, d_dx, d_w, d_b, rows, C, g_cuda.stream);
    }
    std::vector<double> res = to_host_f64(d_res, n), out = to_host_f64(d_out, n);
    std::vector<double> mean(rows, 0.0), rstd = to_host_f64(d_rstd, rows);
    if (!RMS) { mean = to_host_f64(d_mean, rows); }
    std::vector<double> ref_res(n), ref_out(n), ref_mean(rows), ref_rstd(rows);
    for (int r = 0; r < rows; r++) {
        double mu = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            ref_res[i] = host_float(to_type<T>((float)host_float(x[i]) + (float)host_float(dx[i])));
            mu += ref_res[i];
        }
        mu = RMS ? 0.0 : mu / C;
        for (int c = 0; c < C; c++) { var += (ref_res[(size_t)r * C + c] - mu) * (ref_res[(size_t)r * C + c] - mu); }
        double rs = 1.0 / sqrt(var / C + eps);
        ref_mean[r] = mu, ref_rstd[r] = rs;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            ref_out[i] = (ref_res[i] - mu) * rs * host_float(w[c]) + (RMS ? 0.0 : host_float(b[c]));
        }
    }
    expect("forward resid", label, rel_err(res, ref_res), tol_stored);
    expect("forward out", label, rel_err(out, ref_out), tol_stored);
    if (!RMS) { expect("forward mean", label, rel_err(mean, ref_mean), TOL_F32); }
    expect("forward rstd", label, rel_err(rstd, ref_rstd), TOL_F32);

    // backward reference, from the forward's r, mean (0 for RMSNorm) and rstd as the GPU stored them
    std::vector<double> ref_dinp(n), ref_dw(C, 0.0), ref_db(C, 0.0);
    for (int r = 0; r < rows; r++) {
        double mg = 0.0, mgx = 0.0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            double g = host_float(dout[i]) * host_float(w[c]), xhat = (res[i] - mean[r]) * rstd[r];
            mg += g, mgx += g * xhat;
        }
        mg = RMS ? 0.0 : mg / C, mgx /= C;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            double g = host_float(dout[i]) * host_float(w[c]), xhat = (res[i] - mean[r]) * rstd[r];
            ref_dinp[i] = host_float(dinp0[i]) + rstd[r] * (g - mg - xhat * mgx);
            ref_dw[c] += host_float(dout[i]) * xhat;
            ref_db[c] += host_float(dout[i]);
        }
    }
    T *d_dinp = (T *)cuda_alloc(n * sizeof(T), "dinp");
    constexpr int SUMS = norm_partials<RMS>(); // dw, db (LayerNorm), dsum
    const char *sum_names[LN_PARTIALS] = {"dw", RMS ? "dsum" : "db", "dsum"};
    float *d_sums = (float *)cuda_alloc(SUMS * C * sizeof(float), "sums");
    for (int most = 1; most <= LN_PACKS_MAX; most++) {
        LnShape s = layernorm_shape<T>(C, most);
        char shape[160];
        snprintf(shape, sizeof(shape), "%s, at most %d packs (%d x %d threads)", label, most, s.packs_per_thread,
                 s.threads);
        check(s.packs_per_thread >= 1 && s.packs_per_thread <= LN_PACKS_MAX &&
                  s.packs_per_thread * s.threads >= C / Packed<T>::N,
              shape, "the shape does not cover the row's %d packs", C / Packed<T>::N);
        // scratch for this shape (layernorm_backward_scratch_floats sizes it for the trainer's, LN_BWD_PACKS)
        float *shape_scratch = (float *)cuda_alloc(
            (size_t)layernorm_backward_launch<T, RMS>(rows, C, s).blocks * SUMS * C * sizeof(float), "scratch");
        // dinp from dinp0 again, then the backward: the sums written (accumulate 0) or added
        auto backward = [&](int accumulate) {
            copy_now(d_dinp, dinp0.data(), n * sizeof(T), cudaMemcpyHostToDevice);
            if (RMS) {
                rmsnorm_backward(d_dinp, d_sums, d_sums + C, shape_scratch, d_dout, d_res, d_w, d_rstd, rows, C,
                                 accumulate, g_cuda.stream, most);
            } else {
                layernorm_backward(d_dinp, d_sums, d_sums + C, d_sums + 2 * C, shape_scratch, d_dout, d_res, d_w,
                                   d_mean, d_rstd, rows, C, accumulate, g_cuda.stream, most);
            }
            cudaCheck(cudaStreamSynchronize(g_cuda.stream));
        };
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            backward(accumulate);
            std::vector<double> dinp = to_host_f64(d_dinp, n), sums = to_host_f64(d_sums, SUMS * C);
            std::vector<double> ref_ds(C, 0.0);
            for (size_t i = 0; i < n; i++) { ref_ds[i % C] += dinp[i]; } // dsum adds dinp as stored
            const double times = accumulate ? 2.0 : 1.0; // accumulate adds the same sums onto the first call's
            std::vector<double> want(SUMS * C);
            for (int c = 0; c < C; c++) {
                want[c] = times * ref_dw[c], want[(SUMS - 1) * C + c] = times * ref_ds[c];
                if (!RMS) { want[C + c] = times * ref_db[c]; }
            }
            const char *what = accumulate ? "accumulated" : "written";
            char name[64];
            snprintf(name, sizeof(name), "dinp (%s)", what);
            expect(name, shape, rel_err(dinp, ref_dinp), tol_stored);
            for (int k = 0; k < SUMS; k++) {
                std::vector<double> got(sums.begin() + k * C, sums.begin() + (k + 1) * C);
                std::vector<double> ref(want.begin() + k * C, want.begin() + (k + 1) * C);
                snprintf(name, sizeof(name), "%s (%s)", sum_names[k], what);
                expect(name, shape, rel_err(got, ref), tol_sums);
            }
        }
        // the same call twice: the same bits (dinp from the same start; the sums written, not added)
        backward(0);
        std::vector<double> again = to_host_f64(d_dinp, n), sums_again = to_host_f64(d_sums, SUMS * C);
        backward(0);
        std::vector<double> third = to_host_f64(d_dinp, n), sums_third = to_host_f64(d_sums, SUMS * C);
        char name[200];
        snprintf(name, sizeof(name), "%s repeat", shape);
        check(again == third && sums_again == sums_third, name, "two calls on the same inputs differ");
        cudaCheck(cudaFree(shape_scratch));
    }
    for (void *p : {(void *)d_x, (void *)d_dx, (void *)d_dout, (void *)d_w, (void *)d_b, (void *)d_out, (void *)d_res,
                    (void *)d_mean, (void *)d_rstd, (void *)d_dinp, (void *)d_sums}) {
        cudaCheck(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    cuda_context_init();
    const bool small = argc > 1 && strcmp(argv[1], "small") == 0;
    // bf16 widths: 8 packs (one warp, most threads idle), 96 (one warp at 3 packs), 200 (multi-warp groups at every
    // limit), 257 (a warp's last threads idle at every limit), 769 and 1024 (the widest: 4 packs of 256 threads)
    const int bf16_widths[] = {64, 768, 1600, 2056, 6152, 8192};
    const int f32_widths[] = {64, 1600, 4096};
    // RMSNorm: the same launch shapes, and Llama 3's widths (3.2 1B, 3.2 3B, 3.1 8B)
    const int rms_widths[] = {64, 768, 2048, 2056, 3072, 4096, 8192};
    auto rows_of = [&](int C, int many) { return small ? 37 : (C <= 1600 ? many : 301); };
    for (int C : bf16_widths) {
        if (small && C > 2056) { continue; }
        test_width<bf16, false>(rows_of(C, 3000), C, TOL_BF16_STORED, TOL_BF16_SUMS);
    }
    for (int C : f32_widths) {
        if (small && C > 1600) { continue; }
        test_width<float, false>(rows_of(C, 1000), C, TOL_F32, TOL_F32);
    }
    for (int C : rms_widths) {
        if (small && C > 2056) { continue; }
        test_width<bf16, true>(rows_of(C, 3000), C, TOL_BF16_STORED, TOL_BF16_SUMS);
        if (C <= LN_MAX_PACKS * Packed<float>::N) { test_width<float, true>(rows_of(C, 1000), C, TOL_F32, TOL_F32); }
    }
    return test_exit();
}
