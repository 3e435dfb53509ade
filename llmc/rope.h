/*
 * rope.h: rotary position embeddings (RoPE) as Hugging Face's Llama computes them: the inverse frequencies, Llama
 * 3.1's "llama3" scaling of them, and the (T, d/2) cos and sin tables. Plain C shared by both builds: each takes
 * its tables from here (the GPU build uploads them), so both rotate by the same fp32 numbers.
 *
 * For head size d and i < d/2 (transformers' _compute_default_rope_parameters, in fp32):
 *   inv_freq[i] = 1 / theta^(2i / d)
 * llama3 scaling (_compute_llama3_parameters), with wavelen = 2 pi / inv_freq[i] and o = original_max_pos:
 *   wavelen < o / high_freq_factor   kept (high frequencies)
 *   wavelen > o / low_freq_factor    inv_freq / factor (low frequencies)
 *   otherwise                        (1 - s) inv_freq / factor + s inv_freq,
 *                                    s = (o / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
 * Position p turns pair i by the angle p inv_freq[i] (one fp32 product, as HF's outer product of positions and
 * frequencies). A head vector x of q or k is rotated in HF's rotate-half layout, channel i paired with i + d/2:
 *   x'[i] = x[i] cos - x[i + d/2] sin,   x'[i + d/2] = x[i + d/2] cos + x[i] sin.
 * The rotation is orthogonal: its backward is the rotation by the opposite angle (sin negated).
 *
 * Rounding: every step is the fp32 operation torch performs, in its order (a Python number divided by a tensor is
 * torch's reciprocal, then a product); theta^x, cos and sin are computed in double and rounded once, which is
 * torch's value wherever its fp32 pow, cos and sin are correctly rounded, and within an ulp elsewhere.
 */
#ifndef LLMC_ROPE_H
#define LLMC_ROPE_H

#include <math.h>

#include "config.h"

#define ROPE_TWO_PI 6.283185307179586 // 2 * math.pi, as HF writes it (rounded to fp32 where it meets a tensor)

// The HS/2 inverse frequencies of c's head size, scaled as c->rope_scaling says.
static inline void rope_inv_freq(const GPTConfig *c, float *inv_freq) {
    int d = config_head_size(c), half = d / 2;
    const RopeScaling *s = &c->rope_scaling;
    for (int i = 0; i < half; i++) {
        float exponent = (float)(2 * i) / (float)d;
        float f = 1.0f / (float)pow((double)c->rope_theta, (double)exponent);
        if (s->type == ROPE_SCALING_LLAMA3) {
            float low_wavelen = (float)s->original_max_pos / s->low_freq_factor;
            float high_wavelen = (float)s->original_max_pos / s->high_freq_factor;
            float wavelen = (1.0f / f) * (float)ROPE_TWO_PI;
            if (wavelen > low_wavelen) {
                f = f / s->factor;
            } else if (!(wavelen < high_wavelen)) {
                float smooth = ((1.0f / wavelen) * (float)s->original_max_pos - s->low_freq_factor) /
                               (s->high_freq_factor - s->low_freq_factor);
                f = (1.0f - smooth) * f / s->factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

// cos and sin (T rows of HS/2) of the angles of positions 0 .. T-1: row p, column i is of p * inv_freq[i].
static inline void rope_tables(const GPTConfig *c, int T, float *cos_table, float *sin_table) {
    int half = config_head_size(c) / 2;
    float *inv_freq = (float *)malloc_check((size_t)half * sizeof(float), "rope frequencies");
    rope_inv_freq(c, inv_freq);
    for (int p = 0; p < T; p++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];
            cos_table[(size_t)p * half + i] = (float)cos((double)angle);
            sin_table[(size_t)p * half + i] = (float)sin((double)angle);
        }
    }
    free(inv_freq);
}

#endif // LLMC_ROPE_H
