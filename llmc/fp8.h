/*
 * fp8.h: the FP8 formats and the per-tensor scaling recipe, in plain C shared by both builds: the GPU build's cast
 * kernels must produce fp8_encode's bytes (test_fp8_kernels checks them), and the CPU build emulates every FP8 GEMM
 * with fp8_encode / fp8_decode, so a GPU run in fp8 has a reference.
 *
 * Formats (OCP FP8, as Hopper's tensor cores read them):
 *   E4M3  sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN; largest 448
 *   E5M2  sign, 5 exponent bits (bias 15), 2 mantissa bits; S.11111.00 infinite, S.11111.xx NaN; largest 57344
 * fp8_encode rounds to nearest, ties to even, and saturates: every magnitude past the largest finite value (infinity
 * included) becomes +-largest, as the GPU's cvt.rn.satfinite does; NaN becomes 0x7F; zero keeps its sign.
 *
 * The recipe ("hybrid", TransformerEngine's): the four linear layers of a block (qkv, attention projection, fc, fc
 * projection) multiply in FP8: forward input x weight in E4M3 x E4M3, input gradient dy x W in E5M2 x E4M3, weight
 * gradient dy x x in E5M2 x E4M3, accumulating in fp32. Each of a layer's three operands (input, weight, output
 * gradient: a "tensor" below) has one scale for the whole tensor:
 *   q = fp8(x * scale),  x ~ q * scale_inv,  scale = fp8_max / amax / 2^margin,  scale_inv = 1 / scale,
 * and a GEMM of two such operands is sum(qa qb) * (scale_inv_a scale_inv_b): FP8 products are exact in fp32.
 * Which amax: "current" scaling takes the tensor's own max |x| just before the cast (an extra pass over it);
 * "delayed" scaling takes the largest amax the tensor had over the last `history` optimizer steps, so a cast needs
 * no pass of its own. Every cast of a training step records its tensor's amax (the largest over the step's
 * micro-steps and, summed over ranks, over every rank that holds a part of it); at the update the step's amaxes
 * enter the history. Until a first step is recorded, delayed scaling scales like current scaling.
 */
#ifndef LLMC_FP8_H
#define LLMC_FP8_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "utils.h"

typedef enum { FP8_E4M3, FP8_E5M2 } Fp8Format;

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
#define FP8_NAN_CODE 0x7F // what a NaN encodes to, in both formats (the GPU's canonical NaN)

static inline int fp8_mantissa_bits(Fp8Format f) { return f == FP8_E4M3 ? 3 : 2; }
static inline int fp8_exponent_bias(Fp8Format f) { return f == FP8_E4M3 ? 7 : 15; }
static inline uint8_t fp8_max_code(Fp8Format f) { return f == FP8_E4M3 ? 0x7E : 0x7B; }
HOST_DEVICE static inline float fp8_max(Fp8Format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

// x to the nearest FP8 value (ties to even), saturating; the code's bits.
static inline uint8_t fp8_encode(float x, Fp8Format f) {
    const int m = fp8_mantissa_bits(f), bias = fp8_exponent_bias(f);
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) { return FP8_NAN_CODE; }
    uint32_t code;
    if ((int)(a >> 23) - 127 >= 1 - bias) {
        // a normal FP8 exponent: round the float's mantissa to m bits in place (a carry moves into the exponent),
        // then move the exponent from the float's bias to FP8's
        int shift = 23 - m;
        uint32_t t = a >> shift, rest = a & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (t & 1u))) { t++; }
        code = t - ((uint32_t)(127 - bias) << m);
        if (code > fp8_max_code(f)) { code = fp8_max_code(f); }
    } else {
        // below FP8's smallest normal: a multiple of its smallest subnormal 2^(1 - bias - m), rounded to the nearest
        // (rintf: ties to even); 2^m, the carry into the smallest normal, is that normal's code
        code = (uint32_t)rintf(ldexpf(fabsf(x), bias + m - 1));
    }
    return (uint8_t)(sign | code);
}

// The value of an FP8 code, exactly.
static inline float fp8_decode(uint8_t code, Fp8Format f) {
    const int m = fp8_mantissa_bits(f), bias = fp8_exponent_bias(f);
    int e = (code & 0x7F) >> m, mant = code & ((1 << m) - 1);
    float v;
    if (f == FP8_E4M3 && (code & 0x7F) == 0x7F) {
        v = NAN;
    } else if (f == FP8_E5M2 && e == 31) {
        v = mant ? NAN : INFINITY;
    } else if (e == 0) {
        v = ldexpf((float)mant, 1 - bias - m);
    } else {
        v = ldexpf((float)((1 << m) | mant), e - bias - m);
    }
    return (code & 0x80) ? -v : v;
}

// What the GEMM sees of x: fp8(x * scale) as a float (scale_inv is applied to the GEMM's sum).
static inline float fp8_round(float x, float scale, Fp8Format f) { return fp8_decode(fp8_encode(x * scale, f), f); }

/*
 * The scale from an amax: fp8_max / amax * 2^-margin (margin_scale = 2^-margin, exact), so amax lands margin
 * binades below the format's largest value. An amax of zero (a tensor of zeros) scales by 1; a scale past the
 * largest float (a tiny amax) is clamped to it. Host and GPU compute the same bits: IEEE division and an exact
 * multiplication.
 */
HOST_DEVICE static inline float fp8_scale_of(float amax, Fp8Format f, float margin_scale) {
    if (!(amax > 0.0f)) { return 1.0f; }
    float s = fp8_max(f) / amax * margin_scale;
    return s <= FLT_MAX ? s : FLT_MAX;
}

// The larger of two amaxes as the GPU's atomicMax on their bits takes it: an integer max of the bits of non-negative
// floats, under which a NaN (bits above infinity's) wins, so a NaN anywhere in a tensor reaches its recorded amax.
static inline float fp8_amax_merge(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof(ua));
    memcpy(&ub, &b, sizeof(ub));
    return ua >= ub ? a : b;
}

// ----------------------------------------------------------------------------------------------------------
// the recipe and its tensors

typedef enum { FP8_DELAYED, FP8_CURRENT } Fp8Scaling;

typedef struct {
    Fp8Scaling scaling;
    int history;        // delayed: steps of amax history the scale looks back over
    int margin;         // binades of headroom below the format's largest value
    float margin_scale; // 2^-margin
    int bf16_blocks;    // the first and the last this many blocks run in bf16
    int fast_accum;     // GPU: forward GEMMs with cuBLASLt's fast (non-split) FP8 accumulation
} Fp8Recipe;

// Whether block `layer` of L runs its linear layers in FP8.
static inline int fp8_block(const Fp8Recipe *r, int layer, int L) {
    return layer >= r->bf16_blocks && layer < L - r->bf16_blocks;
}

// The operands of a block's linear layers (config.h's LIN_*). Tensor (layer, linear, role) is index
// (layer * BLOCK_LINEARS + linear) * FP8_ROLES + role of every per-tensor array (every block has its slots; those of
// the bf16 blocks stay zero).
enum { FP8_INPUT, FP8_WEIGHT, FP8_GRAD, FP8_ROLES };
static const char *const FP8_ROLE_NAMES[FP8_ROLES] = {"input", "weight", "output gradient"};

static inline int fp8_tensor(int layer, int linear, int role) {
    return (layer * BLOCK_LINEARS + linear) * FP8_ROLES + role;
}
static inline int fp8_num_tensors(int L) { return L * BLOCK_LINEARS * FP8_ROLES; }
static inline Fp8Format fp8_role_format(int role) { return role == FP8_GRAD ? FP8_E5M2 : FP8_E4M3; }

// "layer 3 fc projection output gradient", for messages.
static inline void fp8_tensor_name(int t, char *out, size_t cap) {
    int role = t % FP8_ROLES, linear = (t / FP8_ROLES) % BLOCK_LINEARS, layer = t / (FP8_ROLES * BLOCK_LINEARS);
    snprintf(out, cap, "layer %d %s %s", layer, BLOCK_LINEAR_NAMES[linear], FP8_ROLE_NAMES[role]);
}

// ----------------------------------------------------------------------------------------------------------
// amax history

/*
 * Each tensor's amax of its last `length` optimizer steps, a ring: step s's at ring[t * length + s % length]. Both
 * builds keep it (the GPU on the device, updated by a kernel that calls fp8_history_push), and a checkpoint saves it,
 * so a resumed run scales exactly as the uninterrupted one would.
 */
typedef struct {
    int tensors, length;
    long long steps; // optimizer steps recorded
    float *ring;     // (tensors, length)
} Fp8History;

// The amax a delayed scale comes from: the largest of the recorded steps in the window.
HOST_DEVICE static inline float fp8_history_max(const float *ring, int length, long long steps) {
    int n = steps < length ? (int)steps : length;
    float m = 0.0f;
    for (int i = 0; i < n; i++) { m = fmaxf(m, ring[i]); }
    return m;
}

// Records step `step`'s amax of one tensor in its ring; returns the amax the next step's delayed scale comes from.
HOST_DEVICE static inline float fp8_history_push(float *ring, int length, long long step, float amax) {
    ring[step % length] = amax;
    return fp8_history_max(ring, length, step + 1);
}

// The first tensor whose amax is not finite, or -1 (a NaN or infinity in a training step: the run cannot go on).
static inline int fp8_first_nonfinite(const float *amax, int n) {
    for (int t = 0; t < n; t++) {
        if (!isfinite(amax[t])) { return t; }
    }
    return -1;
}

// The first of n amax history values that no step records (an amax is finite and >= 0), or -1: a checkpoint's history
// is checked with it as it is read.
static inline long long fp8_history_first_invalid(const float *ring, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!(ring[i] >= 0.0f && ring[i] <= FLT_MAX)) { return (long long)i; }
    }
    return -1;
}

// Stops the run naming the tensor (fp8_tensor) whose amax was not finite at step `step` (1-based).
LLMC_NORETURN static inline void fp8_fail_nonfinite(int t, float amax, int step) {
    char name[96];
    fp8_tensor_name(t, name, sizeof(name));
    fail("step %d: the %s holds %s values (amax %g), so FP8 cannot scale it; the run diverged: lower --lr, raise "
         "--warmup-steps, or resume from an earlier checkpoint",
         step, name, isnan(amax) ? "NaN" : "infinite", amax);
}

static inline void fp8_history_init(Fp8History *h, int L, int length) {
    h->tensors = fp8_num_tensors(L);
    h->length = length;
    h->steps = 0;
    h->ring = (float *)calloc_check((size_t)h->tensors * length, sizeof(float), "FP8 amax history");
}

static inline void fp8_history_free(Fp8History *h) {
    free(h->ring);
    h->ring = NULL;
}

#endif // LLMC_FP8_H
