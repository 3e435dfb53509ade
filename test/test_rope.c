/*
 * test_rope.c: rotary position embeddings (llmc/rope.h, and cpu_model.h's rope_rotate) against numbers computed here
 * independently, in double, from the published formulas.
 * - inverse frequencies 1 / theta^(2i/d) of Llama 3's head sizes, and Llama 3.1's and 3.2's llama3 scaling of them
 *   (transformers' _compute_llama3_parameters: kept, divided by the factor, or interpolated by wavelength), with
 *   every band present, the kept ones bit-equal to the unscaled frequencies and the divided ones to them / factor;
 * - a hand-computed rotation: head size 4, theta 100 (frequencies 1 and 1/10), positions 0..3, in HF's rotate-half
 *   layout (channel i paired with i + 2), q and k rotated, v untouched, position 0 the identity;
 * - the backward (sign -1) undoes the forward.
 */
#include "../llmc/cpu_model.h"
#include "test_util.h"

#define HEAD_DIM_1B 64   // Llama 3.2 1B: 2048 / 32
#define HEAD_DIM_8B 128  // Llama 3.1 8B: 4096 / 32
#define FLOAT_REL_TOL 4e-6 // a few fp32 roundings (HF computes each step in fp32)

// A description with head size d (one head of d channels) and the given rope scaling.
static GPTConfig rope_config(int d, float theta, float factor) {
    GPTConfig c = config_default(ARCH_LLAMA, LLAMA3_MAX_POSITIONS, 1, 1, d);
    c.rope_theta = theta;
    if (factor > 0) { c.rope_scaling = llama3_rope_scaling(factor); }
    config_validate(&c);
    return c;
}

enum { BAND_KEPT, BAND_DIVIDED, BAND_SMOOTHED };

// The published llama3 scaling of one frequency, in double; *band says which branch it took.
static double llama3_scaled(double f, const RopeScaling *s, int *band) {
    double wavelen = 2.0 * acos(-1.0) / f, o = s->original_max_pos;
    if (wavelen < o / s->high_freq_factor) {
        *band = BAND_KEPT;
        return f;
    }
    if (wavelen > o / s->low_freq_factor) {
        *band = BAND_DIVIDED;
        return f / s->factor;
    }
    *band = BAND_SMOOTHED;
    double smooth = (o / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * f / s->factor + smooth * f;
}

static void test_inv_freq(const char *name, int d, float factor) {
    GPTConfig plain = rope_config(d, LLAMA3_ROPE_THETA, 0), scaled = rope_config(d, LLAMA3_ROPE_THETA, factor);
    float *f0 = (float *)malloc_check((size_t)d / 2 * sizeof(float), "frequencies");
    float *f1 = (float *)malloc_check((size_t)d / 2 * sizeof(float), "frequencies");
    rope_inv_freq(&plain, f0);
    rope_inv_freq(&scaled, f1);
    double worst_plain = 0, worst_scaled = 0;
    int bands[3] = {0, 0, 0}, exact = 1;
    for (int i = 0; i < d / 2; i++) {
        double f = 1.0 / pow((double)LLAMA3_ROPE_THETA, 2.0 * i / d);
        int band;
        double g = llama3_scaled(f, &scaled.rope_scaling, &band);
        bands[band]++;
        worst_plain = fmax(worst_plain, fabs(f0[i] - f) / f);
        worst_scaled = fmax(worst_scaled, fabs(f1[i] - g) / g);
        if (band == BAND_KEPT) { exact &= f1[i] == f0[i]; }
        if (band == BAND_DIVIDED) { exact &= f1[i] == f0[i] / factor; }
    }
    char n[128];
    snprintf(n, sizeof(n), "%s: 1 / theta^(2i/d)", name);
    check(worst_plain <= FLOAT_REL_TOL && f0[0] == 1.0f, n, "worst relative error %.3g, first %.9g", worst_plain,
          f0[0]);
    snprintf(n, sizeof(n), "%s: llama3 scaling (factor %g) in every band", name, factor);
    check(worst_scaled <= FLOAT_REL_TOL && exact && bands[0] > 0 && bands[1] > 0 && bands[2] > 0, n,
          "worst relative error %.3g, kept/divided exact %d, bands kept %d divided %d smoothed %d", worst_scaled, exact,
          bands[0], bands[1], bands[2]);
    free(f0);
    free(f1);
}

// Head size 4, theta 100: frequencies 1 and 1/10. One sequence of 4 positions, one q, one k and one v head.
#define HAND_D 4
#define HAND_T 4
#define HAND_THETA 100.0f
#define HAND_TOL 1e-6

static void test_hand_rotation(void) {
    GPTConfig c = rope_config(HAND_D, HAND_THETA, 0);
    float cos_t[HAND_T * HAND_D / 2], sin_t[HAND_T * HAND_D / 2];
    rope_tables(&c, HAND_T, cos_t, sin_t);
    const int row = 3 * HAND_D; // q, k, v
    float qkv[HAND_T * 3 * HAND_D], orig[HAND_T * 3 * HAND_D];
    for (int i = 0; i < HAND_T * row; i++) { orig[i] = qkv[i] = (float)(i % row + 1); }
    rope_rotate(qkv, cos_t, sin_t, 1, HAND_T, 1, 1, HAND_D, 1);
    double worst = 0;
    int v_same = 1, p0_same = memcmp(qkv, orig, (size_t)row * sizeof(float)) == 0;
    for (int p = 0; p < HAND_T; p++) {
        const float *x = orig + p * row, *y = qkv + p * row;
        for (int h = 0; h < 2; h++) { // q, then k: x0..x3 paired (0, 2) at angle p, (1, 3) at angle p / 10
            const float *a = x + h * HAND_D, *b = y + h * HAND_D;
            double c0 = cos(p), s0 = sin(p), c1 = cos(p / 10.0), s1 = sin(p / 10.0);
            double want[HAND_D] = {a[0] * c0 - a[2] * s0, a[1] * c1 - a[3] * s1, a[2] * c0 + a[0] * s0,
                                   a[3] * c1 + a[1] * s1};
            for (int i = 0; i < HAND_D; i++) { worst = fmax(worst, fabs(b[i] - want[i])); }
        }
        v_same &= memcmp(x + 2 * HAND_D, y + 2 * HAND_D, HAND_D * sizeof(float)) == 0;
    }
    check(worst <= HAND_TOL && v_same && p0_same, "rope: hand-computed rotation (d 4, theta 100, positions 0..3)",
          "worst error %.3g, v untouched %d, position 0 unchanged %d", worst, v_same, p0_same);
    rope_rotate(qkv, cos_t, sin_t, 1, HAND_T, 1, 1, HAND_D, -1);
    double back = 0;
    for (int i = 0; i < HAND_T * row; i++) { back = fmax(back, fabs(qkv[i] - orig[i])); }
    check(back <= HAND_TOL, "rope: the backward rotation undoes the forward", "worst error %.3g", back);
}

int main(void) {
    test_inv_freq("rope Llama 3.2 1B head size", HEAD_DIM_1B, 32.0f);
    test_inv_freq("rope Llama 3.1 8B head size", HEAD_DIM_8B, LLAMA31_ROPE_FACTOR);
    test_hand_rotation();
    return test_exit();
}
