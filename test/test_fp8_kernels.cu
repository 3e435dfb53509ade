/*
 * test_fp8_kernels.cu: llmc/fp8.cuh's kernels and the FP8 GEMMs of llmc/matmul.cuh against llmc/fp8.h on the host.
 * - every bf16 value (a 256 x 256 tensor of all 65536 bit patterns, NaNs and infinities included) cast at scale 1
 *   gives exactly fp8_encode's byte, in both formats, row-major and transposed, and the recorded amax is NaN;
 * - casts of random fp32 and bf16 tensors, plain, through GELU and as a GELU backward (with its column sums, against
 *   fp64), through SwiGLU (h from fch = [gate | up]) and as SwiGLU's backward ([dgate | dup] from dh and fch), at
 *   shapes that leave partial tiles, with the transposed copy at an unaligned column of a wider matrix and at an
 *   aligned one: every byte equals fp8_encode of the value times the scale the recipe gives (current scaling: the
 *   tensor's own amax through the amax pass; delayed scaling: a given amax; a cast again: the stored scale), the
 *   bytes around the written region are untouched, and the scale, scale_inv and recorded amax are the host's. The
 *   values are the activation's as the GPU computes them (a kernel through the same device functions), so the cast
 *   is checked exactly; the SwiGLU casts' codes are checked against fp64's SwiGLU as well: each is fp8_encode of the
 *   fp64 value, or the code next to it where that value lies within fp32's rounding bound of the midpoint between
 *   the two (SWIGLU_ULPS);
 * - row_of (the casts' row of an element, 32-bit division below 2^32) against 64-bit division across 2^32;
 * - the byte transpose, whole and into columns of a wider matrix; AdamW writing a weight's FP8 codes (delayed
 *   scaling) against a cast of the updated masters;
 * - the history kernel against fp8_history_push over steps, and its verdict on a NaN amax;
 * - FP8 GEMMs in the three layouts the linear layers use (forward; input gradient through W's transposed copy; weight
 *   gradient through both transposed copies, accumulating into fp32), against an fp64 sum of the same products times
 *   both scale_inv's (GEMM_TOL says what differs); and which fused epilogues cuBLASLt runs with FP8 operands (printed
 *   for the notes: the linear layers fall back to unfused ones where it does not).
 */
#include <vector>

#include "llmc/adamw.cuh"
#include "llmc/matmul.cuh"
#include "test/gpu_test_util.cuh"
#include "test/test_util.h"

// An FP8 GEMM into fp32 against the fp64 sum of its exact products: Hopper's FP8 tensor cores add products in an
// accumulator narrower than fp32 (about 14 bits, DeepSeek-V3 reports; promoted to fp32 every few k-steps even without
// fast accumulation), so the sums differ by ~2^-13 relative (measured 1.4e-4 to 1.5e-4 at k = 64..256), not the
// ~1e-6 of an fp32 sum. 5e-4 holds that; a wrong layout, scale or operand shows as O(1).
#define GEMM_TOL 5e-4
// SwiGLU in fp32 against fp64, in units of 2^-24 of the terms' magnitude (|g| s |u| for h, |dy| |g| s for dup,
// |dy| |u| s (1 + |g|) for dgate, whose 1 - s carries s's absolute error times g): expf's 2 ulp, the division's and
// each product's half ulp make ~5; 16 holds that with room, and a wrong half, operand or formula is off by O(1).
#define SWIGLU_ULPS 16.0

static const char *const FMT_NAMES[] = {"e4m3", "e5m2"};

static uint32_t g_rng = 12345u;
static float rand_uniform(void) { // (-1, 1)
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((double)(g_rng >> 8) / (double)(1u << 24) * 2.0 - 1.0);
}

// Fills go through the compute stream as copies do (copy_now): a cudaMemset on the legacy stream could land after
// the kernel it was meant to precede.
static void fill(void *dst, int byte, size_t bytes) { cudaCheck(cudaMemsetAsync(dst, byte, bytes, g_cuda.stream)); }

// gelu, and dy gelu'(pre), as the casts compute them (fp8.cuh's gelu_fast), so the cast is checked, not the tanh
__global__ void gelu_values_kernel(float *out, const float *in, const float *dy, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = dy ? dy[i] * gelu_grad_fast(in[i]) : gelu_fast(in[i]); }
}

// SwiGLU as the casts compute it (swiglu.cuh's swiglu_of and swiglu_grads), out (rows, F) from fch (rows, 2F), or with
// dh (rows, F) its backward (rows, 2F) = [dgate | dup]; one thread an element of h.
__global__ void swiglu_values_kernel(float *out, const float *fch, const float *dh, int rows, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * F) { return; }
    size_t r = i / F, c = i % F;
    float g = fch[r * 2 * F + c], u = fch[r * 2 * F + F + c];
    if (!dh) {
        out[i] = swiglu_of(g, u);
        return;
    }
    swiglu_grads(dh[i], g, u, &out[r * 2 * F + c], &out[r * 2 * F + F + c]);
}

// The fp64 SwiGLU of the same inputs, and each value's fp32 rounding bound (SWIGLU_ULPS): h, or [dgate | dup].
static void swiglu_f64(const std::vector<float> &fch, const std::vector<float> &dh, int rows, int F, bool backward,
                       std::vector<double> &ref, std::vector<double> &bound) {
    const double ulp = SWIGLU_ULPS * ldexp(1.0, -24);
    ref.assign((size_t)rows * F * (backward ? 2 : 1), 0.0);
    bound.assign(ref.size(), 0.0);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < F; c++) {
            double g = fch[(size_t)r * 2 * F + c], u = fch[(size_t)r * 2 * F + F + c], s = 1.0 / (1.0 + exp(-g));
            if (!backward) {
                ref[(size_t)r * F + c] = g * s * u;
                bound[(size_t)r * F + c] = ulp * fabs(g) * s * fabs(u);
                continue;
            }
            double dy = dh[(size_t)r * F + c];
            size_t ig = (size_t)r * 2 * F + c, iu = ig + F;
            ref[ig] = dy * u * s * (1.0 + g * (1.0 - s));
            bound[ig] = ulp * fabs(dy) * fabs(u) * s * (1.0 + fabs(g));
            ref[iu] = dy * g * s;
            bound[iu] = ulp * fabs(dy) * fabs(g) * s;
        }
    }
}

// A code's place among the format's values in order (the two zeros at 0).
static int code_ordinal(uint8_t q) { return q & 0x80 ? -(int)(q & 0x7F) : (int)(q & 0x7F); }

// Whether code q stands for x (an exact value, scaled): fp8_encode's code of x, or the code next to it where x lies
// within err of the midpoint between the two (arithmetic within err of x may round either way).
static bool code_of_near(uint8_t q, double x, double err, Fp8Format f) {
    uint8_t want = fp8_encode((float)x, f);
    if (q == want || fp8_decode(q, f) == fp8_decode(want, f)) { return true; }
    double mid = 0.5 * ((double)fp8_decode(q, f) + (double)fp8_decode(want, f));
    return abs(code_ordinal(q) - code_ordinal(want)) == 1 && fabs(x - mid) <= err;
}

// A cast of tensor t of d on (rows, cols) values; returns (rows bytes, transposed matrix of cols x ld_t bytes).
template <typename Src>
static void run_cast(Fp8Device *d, int t, Src src, int rows, int cols, Fp8CastOut out, bool again, float *partials) {
    fp8_cast(d, t, src, rows, cols, out, true, again ? FP8_SCALE_AGAIN : FP8_SCALE_RECIPE, partials, g_cuda.stream);
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
}

static Fp8Recipe recipe(Fp8Scaling scaling, int margin) {
    Fp8Recipe r = {scaling, 4, margin, ldexpf(1.0f, -margin), 0, 0};
    return r;
}

// All 65536 bf16 bit patterns as a 256 x 256 tensor at scale 1 (delayed scaling from an amax of the format's max).
static void test_every_bf16(void) {
    const int R = 256, Cn = 256;
    std::vector<bf16> h(R * Cn);
    for (int i = 0; i < R * Cn; i++) {
        __nv_bfloat16_raw raw;
        raw.x = (unsigned short)i;
        h[i] = bf16(raw);
    }
    bf16 *src = to_device(h);
    uint8_t *rows, *cols;
    cudaCheck(cudaMalloc(&rows, R * Cn));
    cudaCheck(cudaMalloc(&cols, R * Cn));
    for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
        Fp8Recipe r = recipe(FP8_DELAYED, 0);
        Fp8Device d;
        fp8_device_init(&d, &r, 1);
        d.steps = 1;
        int t = fp8_tensor(0, LIN_QKV, f == FP8_E4M3 ? FP8_INPUT : FP8_GRAD);
        float mx = fp8_max((Fp8Format)f);
        copy_now(d.amax_scale + t, &mx, sizeof(float), cudaMemcpyHostToDevice);
        Fp8CastOut o = {rows, cols, R, 0, NULL};
        run_cast(&d, t, Fp8Plain<bf16>{src}, R, Cn, o, false, (float *)NULL);
        std::vector<uint8_t> qr = to_host(rows, R * Cn), qc = to_host(cols, R * Cn);
        int bad = 0, bad_t = 0, first = -1;
        for (int i = 0; i < R * Cn; i++) {
            uint8_t want = fp8_encode(__bfloat162float(h[i]), (Fp8Format)f);
            if (qr[i] != want) {
                bad++;
                if (first < 0) { first = i; }
            }
            bad_t += qc[(size_t)(i % Cn) * R + i / Cn] != qr[i];
        }
        unsigned amax = to_host(d.amax_step + t, 1)[0];
        float scale = to_host(fp8_scale(&d, t), 1)[0];
        char name[64];
        snprintf(name, sizeof(name), "every_bf16_%s", FMT_NAMES[f]);
        check(bad == 0 && bad_t == 0 && scale == 1.0f, name,
              "%d bytes differ from fp8_encode (first bf16 0x%04x: 0x%02x, want 0x%02x), %d transposed, scale %g", bad,
              first, first >= 0 ? qr[first] : 0, first >= 0 ? fp8_encode(__bfloat162float(h[first]), (Fp8Format)f) : 0,
              bad_t, scale);
        float a;
        memcpy(&a, &amax, sizeof(a));
        snprintf(name, sizeof(name), "every_bf16_%s_amax_nan", FMT_NAMES[f]);
        check(isnan(a), name, "recorded amax %g (bits 0x%08x): a NaN in the tensor must reach it", a, amax);
    }
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(rows));
    cudaCheck(cudaFree(cols));
}

/*
 * One cast of a random (rows, cols) tensor of T, plain, through GELU, as the GELU backward of a second one (with the
 * column sums), through SwiGLU (of a (rows, 2 cols) fch) or as its backward (of fch and a (rows, cols / 2) dh), in one
 * of three ways (current: the tensor's amax; delayed: a given amax; again: a given scale), with the transposed copy at
 * column col0 of rows ld_t long.
 */
typedef enum { CAST_CURRENT, CAST_DELAYED, CAST_AGAIN } CastWay;
static const char *const WAY_NAMES[] = {"current", "delayed", "again"};
typedef enum { SRC_PLAIN, SRC_GELU, SRC_DGELU, SRC_SWIGLU, SRC_DSWIGLU } SrcKind;
static const char *const SRC_NAMES[] = {"", "_gelu", "_dgelu_colsums", "_swiglu", "_dswiglu"};

template <typename T>
static void check_cast(const char *what, int rows, int cols, int col0, int ld_t, Fp8Format f, CastWay way,
                       SrcKind kind, int margin) {
    size_t n = (size_t)rows * cols;
    bool swiglu = kind == SRC_SWIGLU || kind == SRC_DSWIGLU;
    int F = kind == SRC_SWIGLU ? cols : cols / 2; // SwiGLU's features: h's width
    // the inputs: the tensor, pre-activation or fch (na values), and the gradient a backward cast takes (nb)
    size_t na = kind == SRC_SWIGLU ? 2 * n : n, nb = kind == SRC_DSWIGLU ? n / 2 : n;
    std::vector<T> h(na), h2(nb);
    for (size_t i = 0; i < na; i++) { h[i] = to_type<T>(3.0f * rand_uniform()); }
    for (size_t i = 0; i < nb; i++) { h2[i] = to_type<T>(rand_uniform()); }
    h[n / 2] = to_type<T>(-7.5f); // the amax, negative (a plain cast's)
    T *src = to_device(h), *src2 = to_device(h2);
    // the values the cast sees, as floats (the activations as the GPU computes them)
    std::vector<float> v(na), v2(nb);
    for (size_t i = 0; i < na; i++) { v[i] = host_float(h[i]); }
    for (size_t i = 0; i < nb; i++) { v2[i] = host_float(h2[i]); }
    std::vector<double> ref, bound; // SwiGLU in fp64, and its fp32 rounding bounds
    if (kind != SRC_PLAIN) {
        float *dv = to_device(v), *dv2 = to_device(v2), *dg;
        cudaCheck(cudaMalloc(&dg, n * sizeof(float)));
        if (swiglu) {
            swiglu_values_kernel<<<grid_for((size_t)rows * F, 256), 256, 0, g_cuda.stream>>>(
                dg, dv, kind == SRC_DSWIGLU ? dv2 : (float *)NULL, rows, F);
            swiglu_f64(v, v2, rows, F, kind == SRC_DSWIGLU, ref, bound);
        } else {
            gelu_values_kernel<<<grid_for(n, 256), 256, 0, g_cuda.stream>>>(
                dg, dv, kind == SRC_DGELU ? dv2 : (float *)NULL, n);
        }
        cudaCheckLaunch();
        v = to_host(dg, n);
        for (float *p : {dv, dv2, dg}) { cudaCheck(cudaFree(p)); }
    }
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) { amax = fp8_amax_merge(amax, fabsf(v[i])); }
    Fp8Recipe r = recipe(way == CAST_CURRENT ? FP8_CURRENT : FP8_DELAYED, margin);
    Fp8Device d;
    fp8_device_init(&d, &r, 1);
    d.steps = 1;
    int t = fp8_tensor(0, LIN_FC, f == FP8_E4M3 ? FP8_INPUT : FP8_GRAD);
    float given = 2.5f, scale = fp8_scale_of(amax, f, r.margin_scale);
    if (way == CAST_DELAYED) {
        copy_now(d.amax_scale + t, &given, sizeof(float), cudaMemcpyHostToDevice);
        scale = fp8_scale_of(given, f, r.margin_scale);
    }
    if (way == CAST_AGAIN) {
        scale = 37.25f;
        copy_now(fp8_scale(&d, t), &scale, sizeof(float), cudaMemcpyHostToDevice);
    }
    size_t tbytes = (size_t)cols * ld_t, nsums = fp8_col_sums_floats(rows, cols);
    uint8_t *rows_out, *t_out;
    float *partials, *sums;
    cudaCheck(cudaMalloc(&rows_out, n));
    cudaCheck(cudaMalloc(&t_out, tbytes));
    cudaCheck(cudaMalloc(&partials, d.amax_blocks * sizeof(float)));
    cudaCheck(cudaMalloc(&sums, nsums * sizeof(float)));
    fill(t_out, POISON_BYTE, tbytes);
    Fp8CastOut o = {rows_out, t_out, ld_t, col0, kind == SRC_DGELU ? sums : (float *)NULL};
    bool again = way == CAST_AGAIN;
    if (kind == SRC_PLAIN) { run_cast(&d, t, Fp8Plain<T>{src}, rows, cols, o, again, partials); }
    if (kind == SRC_GELU) { run_cast(&d, t, Fp8GeluOf<T>{src}, rows, cols, o, again, partials); }
    if (kind == SRC_DGELU) { run_cast(&d, t, Fp8DgeluOf<T>{src2, src}, rows, cols, o, again, partials); }
    if (kind == SRC_SWIGLU) { run_cast(&d, t, Fp8SwigluOf<T>{src, F}, rows, cols, o, again, partials); }
    if (kind == SRC_DSWIGLU) { run_cast(&d, t, Fp8DswigluOf<T>{src2, src, F}, rows, cols, o, again, partials); }
    std::vector<uint8_t> qr = to_host(rows_out, n), qt = to_host(t_out, tbytes);
    long bad = 0, bad_t = 0, touched = 0, far = 0, off = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t want = fp8_encode(v[i] * scale, f);
        bad += qr[i] != want;
        bad_t += qt[(i % cols) * ld_t + col0 + i / cols] != want;
        if (swiglu) { // against fp64: the code of the exact value, or its neighbour within rounding of a midpoint
            far += !code_of_near(qr[i], ref[i] * scale, bound[i] * scale, f);
            off += fp8_decode(qr[i], f) != fp8_decode(fp8_encode((float)(ref[i] * scale), f), f);
        }
    }
    for (size_t c = 0; c < (size_t)cols; c++) {
        for (int j = 0; j < ld_t; j++) { touched += (j < col0 || j >= col0 + rows) && qt[c * ld_t + j] != POISON_BYTE; }
    }
    double sums_err = 0.0;
    if (kind == SRC_DGELU) { // the tiles' column sums, added up, against fp64 column sums
        std::vector<float> got = to_host(sums, nsums), col(cols, 0.0f), want(cols, 0.0f);
        for (int c = 0; c < cols; c++) {
            double w = 0.0;
            for (int i = 0; i < rows; i++) { w += v[(size_t)i * cols + c]; }
            want[c] = (float)w;
            for (int p = 0; p < fp8_col_sums_parts(rows); p++) { col[c] += got[(size_t)p * cols + c]; }
        }
        sums_err = max_rel_err(col.data(), want.data(), cols);
    }
    float got_scale = to_host(fp8_scale(&d, t), 1)[0], got_inv = to_host(fp8_scale_inv(&d, t), 1)[0];
    unsigned got_amax = to_host(d.amax_step + t, 1)[0];
    bool scale_ok = got_scale == scale && (way == CAST_AGAIN || got_inv == 1.0f / scale);
    char name[160];
    snprintf(name, sizeof(name), "cast_%s_%s_%s%s_%dx%d_col%d_ld%d", what, FMT_NAMES[f], WAY_NAMES[way],
             SRC_NAMES[kind], rows, cols, col0, ld_t);
    check(bad == 0 && bad_t == 0 && touched == 0 && scale_ok && got_amax == host_bits(amax) && sums_err <= 1e-5 &&
              far == 0,
          name,
          "%ld row-major and %ld transposed bytes differ from fp8_encode, %ld bytes outside the copy written; scale "
          "%g (want %g), scale_inv %g, amax bits 0x%08x (want 0x%08x), column sums rel err %.2e; %ld codes not the "
          "fp64 value's nor next to it within rounding of a midpoint (%ld a code off in all)",
          bad, bad_t, touched, got_scale, scale, got_inv, got_amax, host_bits(amax), sums_err, far, off);
    for (void *p : {(void *)src, (void *)src2, (void *)rows_out, (void *)t_out, (void *)partials, (void *)sums}) {
        cudaCheck(cudaFree(p));
    }
}

static void test_casts(void) {
    const int shapes[][4] = {{200, 336, 3, 219}, {64, 128, 0, 64}, {1, 16, 5, 32}, {130, 4800, 16, 160},
                             {1000, 768, 0, 1000}};
    for (const auto &sh : shapes) {
        for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
            for (int w = CAST_CURRENT; w <= CAST_AGAIN; w++) {
                check_cast<bf16>("bf16", sh[0], sh[1], sh[2], sh[3], (Fp8Format)f, (CastWay)w, SRC_PLAIN, 0);
                check_cast<float>("fp32", sh[0], sh[1], sh[2], sh[3], (Fp8Format)f, (CastWay)w, SRC_PLAIN, 1);
            }
        }
        check_cast<bf16>("bf16", sh[0], sh[1], sh[2], sh[3], FP8_E4M3, CAST_CURRENT, SRC_GELU, 0);
        check_cast<float>("fp32", sh[0], sh[1], sh[2], sh[3], FP8_E4M3, CAST_DELAYED, SRC_GELU, 2);
        check_cast<bf16>("bf16", sh[0], sh[1], sh[2], sh[3], FP8_E5M2, CAST_CURRENT, SRC_DGELU, 0);
        check_cast<float>("fp32", sh[0], sh[1], sh[2], sh[3], FP8_E5M2, CAST_DELAYED, SRC_DGELU, 0);
        // SwiGLU's: h as the fc projection's E4M3 input, [dgate | dup] as fc's E5M2 output gradient (every width here
        // is a multiple of 16, so the backward's F = cols / 2 is one of 8)
        for (int w = CAST_CURRENT; w <= CAST_AGAIN; w++) {
            check_cast<bf16>("bf16", sh[0], sh[1], sh[2], sh[3], FP8_E4M3, (CastWay)w, SRC_SWIGLU, 0);
            check_cast<bf16>("bf16", sh[0], sh[1], sh[2], sh[3], FP8_E5M2, (CastWay)w, SRC_DSWIGLU, 0);
        }
        check_cast<float>("fp32", sh[0], sh[1], sh[2], sh[3], FP8_E4M3, CAST_DELAYED, SRC_SWIGLU, 2);
        check_cast<float>("fp32", sh[0], sh[1], sh[2], sh[3], FP8_E5M2, CAST_CURRENT, SRC_DSWIGLU, 1);
    }
}

// row_of at indices across 2^32 (the 32-bit division below it, the 64-bit one above) against 64-bit division.
__global__ void row_of_kernel(size_t *out, const size_t *in, int n, int cols) {
    int i = threadIdx.x;
    if (i < n) { out[i] = row_of(in[i], cols); }
}
static void test_row_of(void) {
    std::vector<size_t> in;
    for (size_t base : {(size_t)0, (size_t)UINT_MAX - 64, (size_t)UINT_MAX * 3}) {
        for (size_t k = 0; k < 128; k += 8) { in.push_back(base + k); }
    }
    size_t *din = to_device(in), *dout = (size_t *)cuda_alloc(in.size() * sizeof(size_t), "rows");
    long bad = 0;
    for (int cols : {8, 336, 16384, 28672}) {
        row_of_kernel<<<1, 256, 0, g_cuda.stream>>>(dout, din, (int)in.size(), cols);
        cudaCheckLaunch();
        std::vector<size_t> got = to_host(dout, in.size());
        for (size_t i = 0; i < in.size(); i++) { bad += got[i] != in[i] / (size_t)cols; }
    }
    check(bad == 0, "row_of_across_2^32", "%ld rows differ from 64-bit division", bad);
    cudaCheck(cudaFree(din));
    cudaCheck(cudaFree(dout));
}


// fp8_transpose against the host's transpose, at shapes that leave partial tiles: whole (ld_t = rows, col0 = 0), and
// into columns of a wider matrix as SP's ring places one owner's rows (aligned, and at a column and a row count that
// leave the 16-byte stores unaligned or short), the bytes around them untouched.
static void test_transpose(void) {
    const int shapes[][4] = {{64, 64, 64, 0},   {80, 48, 80, 0},     {4800, 1600, 4800, 0}, {16, 1024, 16, 0},
                             {96, 64, 384, 192}, {40, 48, 200, 37}, {130, 32, 300, 7},     {24, 1600, 48, 24}};
    for (const auto &sh : shapes) {
        int R = sh[0], Cn = sh[1], ld = sh[2], col0 = sh[3];
        std::vector<uint8_t> h((size_t)R * Cn);
        for (auto &x : h) { x = (uint8_t)(rand_uniform() * 127.0f + 128.0f); }
        uint8_t *in = to_device(h), *out;
        size_t out_bytes = (size_t)Cn * ld;
        cudaCheck(cudaMalloc(&out, out_bytes));
        fill(out, POISON_BYTE, out_bytes);
        fp8_transpose(in, out, R, Cn, ld, col0, g_cuda.stream);
        std::vector<uint8_t> got = to_host(out, out_bytes);
        long bad = 0, outside = 0;
        for (int c = 0; c < Cn; c++) {
            for (int j = 0; j < ld; j++) {
                uint8_t b = got[(size_t)c * ld + j];
                int r = j - col0;
                if (r >= 0 && r < R) {
                    bad += b != h[(size_t)r * Cn + c];
                } else {
                    outside += b != POISON_BYTE;
                }
            }
        }
        char name[64];
        snprintf(name, sizeof(name), "transpose_%dx%d_ld%d_col%d", R, Cn, ld, col0);
        check(bad == 0 && outside == 0, name, "%ld bytes misplaced, %ld outside the columns written", bad, outside);
        cudaCheck(cudaFree(in));
        cudaCheck(cudaFree(out));
    }
}

// AdamW writing a weight's FP8 codes (delayed scaling) gives the bytes, scale and amax of a cast of the updated
// masters with the same history amax.
static void test_adamw_fp8(void) {
    const size_t n = 3 * 64 * 1024 + 512; // a span of several chunks, the last partial
    std::vector<float> p(n), gr(n), z(n, 0.0f);
    for (size_t i = 0; i < n; i++) {
        p[i] = 0.05f * rand_uniform();
        gr[i] = 0.01f * rand_uniform();
    }
    float *dp = to_device(p), *dg = to_device(gr), *dm = to_device(z), *dv = to_device(z);
    float *clip = to_device(std::vector<float>{0.0f, 1.0f});
    Fp8Recipe r = recipe(FP8_DELAYED, 0);
    Fp8Device d;
    fp8_device_init(&d, &r, 1);
    d.steps = 1;
    int t = fp8_tensor(0, LIN_QKV, FP8_WEIGHT);
    float hist = 0.04f;
    copy_now(d.amax_scale + t, &hist, sizeof(float), cudaMemcpyHostToDevice);
    uint8_t *codes, *cast;
    cudaCheck(cudaMalloc(&codes, n));
    cudaCheck(cudaMalloc(&cast, n));
    AdamWGroup grp;
    memset(&grp, 0, sizeof(grp));
    adamw_group_add(&grp, 0, 0, n, 0.1f, 0);
    adamw_group_fp8(&grp, codes, t);
    AdamWStep step = {1e-3f, 0.9f, 0.95f, 0.1f, 0.05f, 1e-8f};
    adamw_update(dp, (bf16 *)NULL, dg, dm, dv, &grp, step, clip, adamw_fp8_of(&d), (float *)NULL, g_cuda.stream);
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    float scale = to_host(fp8_scale(&d, t), 1)[0];
    unsigned amax = to_host(d.amax_step + t, 1)[0];
    fill(d.amax_step + t, 0, sizeof(unsigned));
    Fp8CastOut o = {cast, NULL, 0, 0, NULL};
    run_cast(&d, t, Fp8Plain<float>{dp}, 1, (int)n, o, false, (float *)NULL);
    std::vector<uint8_t> a = to_host(codes, n), b = to_host(cast, n);
    unsigned amax_cast = to_host(d.amax_step + t, 1)[0];
    check(a == b && amax == amax_cast && scale == fp8_scale_of(hist, FP8_E4M3, 1.0f), "adamw_writes_fp8_codes",
          "codes %s, amax bits 0x%08x vs the cast's 0x%08x, scale %g", a == b ? "equal" : "differ", amax, amax_cast,
          scale);
    for (void *q : {(void *)dp, (void *)dg, (void *)dm, (void *)dv, (void *)clip, (void *)codes, (void *)cast}) {
        cudaCheck(cudaFree(q));
    }
}

// The history kernel against fp8_history_push: 3 layers' tensors, history 4, six steps; a NaN at the last.
static void test_history(void) {
    Fp8Recipe r = recipe(FP8_DELAYED, 0);
    Fp8Device d;
    fp8_device_init(&d, &r, 3);
    Fp8History h;
    fp8_history_init(&h, 3, 4);
    std::vector<float> want_scale(d.tensors);
    int bad = 0;
    for (int s = 0; s < 6; s++) {
        std::vector<unsigned> step(d.tensors);
        for (int t = 0; t < d.tensors; t++) {
            float a = fabsf(rand_uniform()) * (float)(1 + t);
            if (s == 5 && t == 7) { a = NAN; }
            step[t] = host_bits(a);
            want_scale[t] = fp8_history_push(h.ring + (size_t)t * h.length, h.length, s, a);
        }
        copy_now(d.amax_step, step.data(), d.tensors * sizeof(unsigned), cudaMemcpyHostToDevice);
        fp8_end_step(&d, g_cuda.stream);
        cudaCheck(cudaStreamSynchronize(g_cuda.stream));
        std::vector<float> got = to_host(d.amax_scale, d.tensors);
        std::vector<unsigned> reset = to_host(d.amax_step, d.tensors);
        for (int t = 0; t < d.tensors; t++) { bad += host_bits(got[t]) != host_bits(want_scale[t]) || reset[t] != 0; }
        int want_bad = s == 5 ? 7 : d.tensors;
        bad += d.host_verdict->tensor != want_bad;
    }
    std::vector<float> ring = to_host(d.ring, (size_t)d.tensors * d.length);
    bad += memcmp(ring.data(), h.ring, ring.size() * sizeof(float)) != 0;
    check(bad == 0 && d.steps == 6 && isnan(d.host_verdict->amax), "history_kernel",
          "%d mismatches against fp8_history_push over 6 steps (verdict tensor %d amax %g)", bad,
          d.host_verdict->tensor, d.host_verdict->amax);
    fp8_history_free(&h);
}

/*
 * D = op(A) op(B) in FP8 through gemm_lt, in the layouts of the linear layers (matmul.cuh), against an fp64 sum of
 * the same FP8 products times the two scale_inv's. A's values are E4M3 codes, B's E5M2 (the backward's) or E4M3.
 */
static void check_gemm(const char *name, int m, int n, int k, bool a_t_only, bool b_t_only, Fp8Format bf,
                       cudaDataType_t dt, float beta) {
    // logical A (m x k) and B (k x n), as random codes of their formats
    std::vector<uint8_t> A(m * k), B(k * n);
    for (auto &x : A) { x = fp8_encode(4.0f * rand_uniform(), FP8_E4M3); }
    for (auto &x : B) { x = fp8_encode(4.0f * rand_uniform(), bf); }
    // stored as the linear layers store them: A column-major k x m transposed (transa), i.e. rows of k; its copy m x k
    std::vector<uint8_t> a_kmajor(m * k), a_mmajor(m * k), b_kmajor(k * n), b_nmajor(k * n);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++) {
            a_kmajor[(size_t)i * k + j] = A[(size_t)i * k + j];
            a_mmajor[(size_t)j * m + i] = A[(size_t)i * k + j];
        }
    }
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < k; i++) {
            b_kmajor[(size_t)j * k + i] = B[(size_t)i * n + j];
            b_nmajor[(size_t)i * n + j] = B[(size_t)i * n + j];
        }
    }
    float sa = 0.125f, sb = 3.0f; // scale_inv's
    float *d_sa = to_device(std::vector<float>{sa}), *d_sb = to_device(std::vector<float>{sb});
    uint8_t *ak = to_device(a_kmajor), *am = to_device(a_mmajor), *bk = to_device(b_kmajor), *bn = to_device(b_nmajor);
    cudaDataType_t bt = bf == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    // as written: A not transposed when only its transposed copy is K-major (the input gradient, the weight gradient)
    GemmOperand ga = a_t_only ? GemmOperand{am, ak, CUDA_R_8F_E4M3, d_sa} : GemmOperand{ak, NULL, CUDA_R_8F_E4M3, d_sa};
    GemmOperand gb = b_t_only ? GemmOperand{bn, bk, bt, d_sb} : GemmOperand{bk, NULL, bt, d_sb};
    int transa = a_t_only ? 0 : 1, lda = a_t_only ? m : k, transb = b_t_only ? 1 : 0, ldb = b_t_only ? n : k;
    size_t esz = dt == CUDA_R_32F ? 4 : 2;
    std::vector<float> d0(m * n);
    for (auto &x : d0) { x = rand_uniform(); }
    void *dd;
    cudaCheck(cudaMalloc(&dd, (size_t)m * n * esz));
    if (dt == CUDA_R_32F) {
        copy_now(dd, d0.data(), (size_t)m * n * 4, cudaMemcpyHostToDevice);
    }
    gemm_lt(dd, dt, ga, transa, lda, gb, transb, ldb, m, n, k, beta, GEMM_PLAIN, 0, g_cuda.stream);
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    std::vector<float> got(m * n);
    if (dt == CUDA_R_32F) {
        got = to_host((float *)dd, (size_t)m * n);
    } else {
        std::vector<bf16> gb16 = to_host((bf16 *)dd, (size_t)m * n);
        for (size_t i = 0; i < got.size(); i++) { got[i] = __bfloat162float(gb16[i]); }
    }
    std::vector<float> want(m * n);
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                s += (double)fp8_decode(A[(size_t)i * k + p], FP8_E4M3) * fp8_decode(B[(size_t)p * n + j], bf);
            }
            want[(size_t)j * m + i] = (float)(s * sa * sb + (beta != 0.0f ? d0[(size_t)j * m + i] : 0.0));
        }
    }
    double e = max_rel_err(got.data(), want.data(), got.size()), tol = dt == CUDA_R_32F ? GEMM_TOL : 1e-2;
    check(e <= tol, name, "max rel err %.3e > %.1e", e, tol);
    for (void *p : {(void *)d_sa, (void *)d_sb, (void *)ak, (void *)am, (void *)bk, (void *)bn, dd}) {
        cudaCheck(cudaFree(p));
    }
}

// Which epilogues of the linear layers run fused on FP8 operands (information: linear_gemm_bias and linear_dgrad run
// the unfused equivalent where not).
static void report_fused_epilogues(void) {
    const int m = 128, n = 64, k = 128;
    uint8_t *a, *b;
    bf16 *d, *aux, *bias;
    float *s = to_device(std::vector<float>{1.0f});
    cudaCheck(cudaMalloc(&a, m * k));
    cudaCheck(cudaMalloc(&b, k * n));
    cudaCheck(cudaMalloc(&d, m * n * 2));
    cudaCheck(cudaMalloc(&aux, m * n * 2));
    cudaCheck(cudaMalloc(&bias, m * 2));
    fill(a, 0x38, m * k); // 1.0 in E4M3
    fill(b, 0x38, k * n);
    fill(aux, 0, m * n * 2);
    fill(bias, 0, m * 2);
    GemmOperand ga = {a, NULL, CUDA_R_8F_E4M3, s}, gb = {b, NULL, CUDA_R_8F_E4M3, s};
    const struct {
        const char *name;
        GemmEpilogue ep;
    } eps[] = {{"bias", {CUBLASLT_EPILOGUE_BIAS, bias, NULL}},
               {"gelu_aux_bias", {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, aux}},
               {"dgelu", {CUBLASLT_EPILOGUE_DGELU, NULL, aux}}};
    for (const auto &e : eps) {
        int fused = gemm_lt(d, CUDA_R_16BF, ga, 1, k, gb, 0, k, m, n, k, 0.0f, e.ep, 0, g_cuda.stream);
        printf("INFO fp8 gemm epilogue %s: %s\n", e.name, fused ? "fused" : "not available, unfused");
    }
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    for (void *p : {(void *)a, (void *)b, (void *)d, (void *)aux, (void *)bias, (void *)s}) { cudaCheck(cudaFree(p)); }
}

static void test_gemms(void) {
    report_fused_epilogues();
    // forward: y^T (out x n) = W (A, K-major rows) x (B, K-major rows), into bf16 (the output's rounding: 1e-2)
    check_gemm("gemm_fp8_forward_e4m3_e4m3_bf16", 96, 80, 64, false, false, FP8_E4M3, CUDA_R_16BF, 0.0f);
    check_gemm("gemm_fp8_forward_e4m3_e4m3_fp32", 96, 80, 64, false, false, FP8_E4M3, CUDA_R_32F, 0.0f);
    // input gradient: W read through its transposed copy, dy (E5M2) K-major
    check_gemm("gemm_fp8_dgrad_w_transposed_e5m2", 64, 112, 96, true, false, FP8_E5M2, CUDA_R_32F, 0.0f);
    // weight gradient: both through transposed copies, accumulating into an fp32 gradient (beta 1)
    check_gemm("gemm_fp8_wgrad_both_transposed_accumulate", 48, 96, 256, true, true, FP8_E5M2, CUDA_R_32F, 1.0f);
}

int main(void) {
    cuda_context_init();
    test_every_bf16();
    test_casts();
    test_row_of();
    test_transpose();
    test_adamw_fp8();
    test_history();
    test_gemms();
    return test_exit();
}
