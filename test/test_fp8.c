/*
 * test_fp8.c: the FP8 quantizer and the scaling recipe (llmc/fp8.h), which both builds share.
 * - every one of the 256 codes of each format decodes to the value its bits define (written out here from the
 *   format's definition, independently of fp8_decode), and encodes back to itself;
 * - rounding against an exhaustive nearest-value search over the code table, ties to even, for every bf16 value
 *   and a million random floats; the midpoint of every pair of neighbouring codes and the floats either side of it;
 *   subnormals and the underflow to signed zero; saturation of every magnitude past the largest finite value,
 *   infinities included; NaN;
 * - the scale from an amax (margin, zero, a tiny amax); the amax history against hand-computed windows; the
 *   NaN-propagating amax merge; tensor indices and names.
 */
#include "../llmc/fp8.h"
#include "test_util.h"

static const char *const FORMAT_NAMES[] = {"e4m3", "e5m2"};

// The value of a code from the format's definition: (-1)^s 2^(e - bias) (1 + mant / 2^m), subnormals
// 2^(1 - bias) mant / 2^m; E4M3's S.1111.111 and E5M2's exponent 31 are special.
static double reference_value(int code, Fp8Format f) {
    int m = f == FP8_E4M3 ? 3 : 2, ebits = f == FP8_E4M3 ? 4 : 5, bias = f == FP8_E4M3 ? 7 : 15;
    int sign = code >> 7, e = (code >> m) & ((1 << ebits) - 1), mant = code & ((1 << m) - 1);
    double v;
    if (f == FP8_E4M3 && e == 15 && mant == 7) {
        v = NAN;
    } else if (f == FP8_E5M2 && e == 31) {
        v = mant ? NAN : INFINITY;
    } else if (e == 0) {
        v = pow(2.0, 1 - bias) * mant / (1 << m);
    } else {
        v = pow(2.0, e - bias) * (1.0 + (double)mant / (1 << m));
    }
    return sign ? -v : v;
}

static int same_value(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

// The code fp8_encode must give x, by exhaustive search: the nearest finite code (ties to the even code), a
// magnitude at or past the largest finite value saturating to it, NaN to 0x7F; zero keeps x's sign.
static uint8_t reference_encode(float x, Fp8Format f) {
    if (isnan(x)) { return FP8_NAN_CODE; }
    double ax = fabs((double)x);
    if (ax >= fp8_max(f)) { return (uint8_t)((signbit(x) ? 0x80 : 0) | fp8_max_code(f)); }
    int best = 0;
    double best_d = INFINITY;
    for (int c = 0; c <= fp8_max_code(f); c++) {
        double d = fabs(reference_value(c, f) - ax);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return (uint8_t)((signbit(x) ? 0x80 : 0) | best);
}

static void test_tables(void) {
    for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
        int bad_decode = 0, bad_round_trip = 0, first_bad = -1;
        for (int c = 0; c < 256; c++) {
            double want = reference_value(c, (Fp8Format)f);
            if (!same_value(fp8_decode((uint8_t)c, (Fp8Format)f), want)) {
                bad_decode++;
                if (first_bad < 0) { first_bad = c; }
            }
            if (isfinite(want) && fp8_encode((float)want, (Fp8Format)f) != c) { bad_round_trip++; }
        }
        char name[64];
        snprintf(name, sizeof(name), "%s_decode_all_codes", FORMAT_NAMES[f]);
        check(bad_decode == 0, name, "%d codes decode wrongly, the first 0x%02x", bad_decode, first_bad);
        snprintf(name, sizeof(name), "%s_encode_round_trip", FORMAT_NAMES[f]);
        check(bad_round_trip == 0, name, "%d finite codes do not encode back to themselves", bad_round_trip);
    }
    check(fp8_decode(fp8_max_code(FP8_E4M3), FP8_E4M3) == 448.0f && fp8_decode(fp8_max_code(FP8_E5M2), FP8_E5M2) ==
              57344.0f && fp8_max(FP8_E4M3) == 448.0f && fp8_max(FP8_E5M2) == 57344.0f,
          "largest_finite", "e4m3 %g e5m2 %g", fp8_decode(0x7E, FP8_E4M3), fp8_decode(0x7B, FP8_E5M2));
}

// Every value bf16 can hold (the GPU's activations), and random bit patterns (fp32 activations and scaled values).
static void test_rounding_exhaustive(void) {
    for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
        long bad = 0;
        float first = 0;
        for (uint32_t hi = 0; hi < 65536; hi++) {
            uint32_t bits = hi << 16;
            float x;
            memcpy(&x, &bits, sizeof(x));
            if (fp8_encode(x, (Fp8Format)f) != reference_encode(x, (Fp8Format)f)) {
                if (bad++ == 0) { first = x; }
            }
        }
        uint64_t state = 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < 1000000; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t bits = (uint32_t)(state >> 32);
            // mostly magnitudes around FP8's range (exponent 100..160), some anywhere
            if (i % 4 != 0) { bits = (bits & 0x807FFFFFu) | ((100u + (bits >> 23) % 61u) << 23); }
            float x;
            memcpy(&x, &bits, sizeof(x));
            if (fp8_encode(x, (Fp8Format)f) != reference_encode(x, (Fp8Format)f)) {
                if (bad++ == 0) { first = x; }
            }
        }
        char name[64];
        snprintf(name, sizeof(name), "%s_nearest_every_bf16_and_random", FORMAT_NAMES[f]);
        check(bad == 0, name, "%ld values round wrongly, the first %.9g -> 0x%02x (want 0x%02x)", bad, first,
              fp8_encode(first, (Fp8Format)f), reference_encode(first, (Fp8Format)f));
    }
}

// The midpoint of each pair of neighbouring finite codes goes to the even one, the floats just beside it to the
// nearer; on both signs.
static void test_ties(void) {
    for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
        int bad = 0;
        for (int c = 0; c < fp8_max_code(f); c++) {
            float lo = fp8_decode((uint8_t)c, (Fp8Format)f), hi = fp8_decode((uint8_t)(c + 1), (Fp8Format)f);
            float mid = (lo + hi) / 2; // exact: FP8 values have 4 significant bits
            int even = (c % 2 == 0) ? c : c + 1;
            for (int s = 0; s < 2; s++) {
                float sg = s ? -1.0f : 1.0f;
                uint8_t sb = s ? 0x80 : 0;
                bad += fp8_encode(sg * mid, (Fp8Format)f) != (sb | even);
                bad += fp8_encode(sg * nextafterf(mid, 0.0f), (Fp8Format)f) != (sb | c);
                bad += fp8_encode(sg * nextafterf(mid, INFINITY), (Fp8Format)f) != (sb | (c + 1));
            }
        }
        char name[64];
        snprintf(name, sizeof(name), "%s_ties_to_even", FORMAT_NAMES[f]);
        check(bad == 0, name, "%d midpoints or their neighbours round wrongly", bad);
    }
}

static void test_edges(void) {
    // subnormals: the smallest is 2^-9 (E4M3) and 2^-16 (E5M2); half of it is a tie with zero (even), a hair more
    // rounds up; 1.5 of it is a tie between codes 1 and 2
    for (int f = FP8_E4M3; f <= FP8_E5M2; f++) {
        Fp8Format ff = (Fp8Format)f;
        float sub = fp8_decode(1, ff);
        char name[64];
        snprintf(name, sizeof(name), "%s_subnormals", FORMAT_NAMES[f]);
        check(sub == (f == FP8_E4M3 ? ldexpf(1, -9) : ldexpf(1, -16)) && fp8_encode(sub / 2, ff) == 0x00 &&
                  fp8_encode(nextafterf(sub / 2, 1), ff) == 0x01 && fp8_encode(1.5f * sub, ff) == 0x02 &&
                  fp8_encode(-sub / 4, ff) == 0x80 && fp8_encode(-0.0f, ff) == 0x80 && fp8_encode(1e-40f, ff) == 0x00,
              name, "smallest %g; sub/2 -> 0x%02x, 1.5 sub -> 0x%02x, -sub/4 -> 0x%02x", sub, fp8_encode(sub / 2, ff),
              fp8_encode(1.5f * sub, ff), fp8_encode(-sub / 4, ff));
        uint8_t mx = fp8_max_code(ff);
        float top = fp8_max(ff), next = f == FP8_E4M3 ? 480.0f : 61440.0f; // the value past the largest finite
        snprintf(name, sizeof(name), "%s_saturation", FORMAT_NAMES[f]);
        check(fp8_encode(top, ff) == mx && fp8_encode((top + next) / 2, ff) == mx && fp8_encode(next, ff) == mx &&
                  fp8_encode(1e30f, ff) == mx && fp8_encode(FLT_MAX, ff) == mx && fp8_encode(INFINITY, ff) == mx &&
                  fp8_encode(-INFINITY, ff) == (0x80 | mx) && fp8_encode(-1e9f, ff) == (0x80 | mx),
              name, "max+1/2ulp -> 0x%02x, inf -> 0x%02x, -inf -> 0x%02x", fp8_encode((top + next) / 2, ff),
              fp8_encode(INFINITY, ff), fp8_encode(-INFINITY, ff));
        snprintf(name, sizeof(name), "%s_nan", FORMAT_NAMES[f]);
        check(fp8_encode(NAN, ff) == FP8_NAN_CODE && fp8_encode(-NAN, ff) == FP8_NAN_CODE &&
                  isnan(fp8_decode(FP8_NAN_CODE, ff)) && isnan(fp8_decode(0xFF, ff)),
              name, "NaN -> 0x%02x, -NaN -> 0x%02x", fp8_encode(NAN, ff), fp8_encode(-NAN, ff));
    }
    check(fp8_decode(0x7C, FP8_E5M2) == INFINITY && fp8_decode(0xFC, FP8_E5M2) == -INFINITY &&
              isnan(fp8_decode(0x7D, FP8_E5M2)) && isnan(fp8_decode(0x7E, FP8_E5M2)),
          "e5m2_infinities", "0x7C -> %g", fp8_decode(0x7C, FP8_E5M2));
    check(fp8_round(1.0f, 448.0f, FP8_E4M3) == 448.0f && fp8_round(3.0f, 10.0f, FP8_E4M3) == 30.0f &&
              fp8_round(3.0f, 10.0f, FP8_E5M2) == 32.0f,
          "round_with_scale", "1 x 448 -> %g, 3 x 10 -> %g (e4m3), %g (e5m2)", fp8_round(1.0f, 448.0f, FP8_E4M3),
          fp8_round(3.0f, 10.0f, FP8_E4M3), fp8_round(3.0f, 10.0f, FP8_E5M2));
}

static void test_scale(void) {
    float m0 = 1.0f, m2 = 0.25f;
    check(fp8_scale_of(448.0f, FP8_E4M3, m0) == 1.0f && fp8_scale_of(1.0f, FP8_E4M3, m0) == 448.0f &&
              fp8_scale_of(1.0f, FP8_E4M3, m2) == 112.0f && fp8_scale_of(2.0f, FP8_E5M2, m0) == 28672.0f &&
              fp8_scale_of(3.0f, FP8_E4M3, m0) == 448.0f / 3.0f,
          "scale_from_amax", "448 -> %g, 1 -> %g, 1 (margin 2) -> %g, e5m2 2 -> %g", fp8_scale_of(448, FP8_E4M3, m0),
          fp8_scale_of(1, FP8_E4M3, m0), fp8_scale_of(1, FP8_E4M3, m2), fp8_scale_of(2, FP8_E5M2, m0));
    check(fp8_scale_of(0.0f, FP8_E4M3, m0) == 1.0f && fp8_scale_of(1e-45f, FP8_E5M2, m0) == FLT_MAX,
          "scale_zero_and_tiny_amax", "amax 0 -> %g, 1e-45 -> %g", fp8_scale_of(0.0f, FP8_E4M3, m0),
          fp8_scale_of(1e-45f, FP8_E5M2, m0));
    // the amax itself lands on the largest value (times 2^-margin), never past it
    int bad = 0;
    for (float a = 1e-6f; a < 1e6f; a *= 1.37f) {
        for (int margin = 0; margin <= 2; margin++) {
            float s = fp8_scale_of(a, FP8_E4M3, ldexpf(1.0f, -margin));
            bad += fabsf(fp8_round(a, s, FP8_E4M3) - ldexpf(448.0f, -margin)) > ldexpf(448.0f, -margin) / 8;
            bad += fp8_encode(a * s, FP8_E4M3) > fp8_max_code(FP8_E4M3);
        }
    }
    check(bad == 0, "scale_maps_amax_to_max", "%d amaxes scale away from the largest value", bad);
}

// A history of length 3 through six steps, every window by hand: amaxes 1, 5, 2, 0.5, 0.25, 3.
static void test_history(void) {
    Fp8History h;
    fp8_history_init(&h, 2, 3);
    check(h.tensors == 2 * BLOCK_LINEARS * FP8_ROLES && h.length == 3 && h.steps == 0 &&
              fp8_history_max(h.ring, h.length, 0) == 0.0f,
          "history_init", "tensors %d length %d", h.tensors, h.length);
    const float amax[6] = {1.0f, 5.0f, 2.0f, 0.5f, 0.25f, 3.0f}, want[6] = {1.0f, 5.0f, 5.0f, 5.0f, 2.0f, 3.0f};
    int bad = 0;
    float *ring = h.ring + 5 * h.length; // tensor 5's ring
    for (int s = 0; s < 6; s++) { bad += fp8_history_push(ring, h.length, s, amax[s]) != want[s]; }
    check(bad == 0 && ring[0] == 0.5f && ring[1] == 0.25f && ring[2] == 3.0f && h.ring[0] == 0.0f, "history_windows",
          "%d windows differ; ring %g %g %g", bad, ring[0], ring[1], ring[2]);
    fp8_history_free(&h);
    check(fp8_amax_merge(1.0f, 2.0f) == 2.0f && fp8_amax_merge(INFINITY, 1e30f) == INFINITY &&
              isnan(fp8_amax_merge(NAN, INFINITY)) && isnan(fp8_amax_merge(3.0f, NAN)),
          "amax_merge_keeps_nan", "the merge of a NaN amax lost it");
    const float steps[4] = {1.0f, 2.0f, INFINITY, NAN};
    check(fp8_first_nonfinite(steps, 2) == -1 && fp8_first_nonfinite(steps, 4) == 2, "first_nonfinite",
          "got %d and %d", fp8_first_nonfinite(steps, 2), fp8_first_nonfinite(steps, 4));
}

static void test_tensors(void) {
    char name[96];
    int t = fp8_tensor(3, LIN_FCPROJ, FP8_GRAD);
    fp8_tensor_name(t, name, sizeof(name));
    check(t == 47 && strcmp(name, "layer 3 fc projection output gradient") == 0 && fp8_num_tensors(4) == 48 &&
              fp8_role_format(FP8_GRAD) == FP8_E5M2 && fp8_role_format(FP8_INPUT) == FP8_E4M3 &&
              fp8_role_format(FP8_WEIGHT) == FP8_E4M3,
          "tensor_index_and_name", "index %d, name '%s'", t, name);
    Fp8Recipe r = {FP8_DELAYED, 16, 0, 1.0f, 1, 0};
    check(!fp8_block(&r, 0, 4) && fp8_block(&r, 1, 4) && fp8_block(&r, 2, 4) && !fp8_block(&r, 3, 4), "bf16_blocks",
          "blocks 0..3 of 4 with 1 bf16 block at each end");
}

int main(void) {
    test_tables();
    test_rounding_exhaustive();
    test_ties();
    test_edges();
    test_scale();
    test_history();
    test_tensors();
    return test_exit();
}
