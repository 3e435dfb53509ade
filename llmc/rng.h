/*
 * rng.h: a counter-based random generator (Philox4x32-10, Salmon et al. 2011) shared by the CPU and GPU builds.
 *
 * A draw is a pure function of (seed, stream, counter): no state to carry, split or checkpoint. So element e of
 * parameter tensor t is initialized from (seed, t, e) alone, identically on the CPU, on one GPU, and on any rank
 * of any parallel layout that owns element e. Streams keep unrelated uses apart (parameters, data shuffling,
 * sampling). Normals use Box-Muller in double precision, so the float result agrees between glibc and CUDA's
 * libm except when the double lands within an ulp of a float rounding boundary (about 1 in 2^29 draws).
 */
#ifndef LLMC_RNG_H
#define LLMC_RNG_H

#include <math.h>
#include <stdint.h>

#include "utils.h"

// Streams: the high bits of the counter that separate independent uses of one seed.
#define RNG_STREAM_PARAMS 0u   // + tensor index (0..NUM_PARAM_TENSORS - 1)
#define RNG_STREAM_SHUFFLE 64u // + epoch is folded into the counter
#define RNG_STREAM_SAMPLE 65u  // text generation

typedef struct {
    uint32_t v[4];
} Philox4;

HOST_DEVICE static inline uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

// Philox4x32 with 10 rounds; the constants are the published ones.
HOST_DEVICE static inline Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                uint32_t k1) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = philox_mulhilo(M0, c0, &hi0);
        uint32_t lo1 = philox_mulhilo(M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += W0;
        k1 += W1;
    }
    Philox4 out = {{c0, c1, c2, c3}};
    return out;
}

// Four random 32-bit words for (seed, stream, counter).
HOST_DEVICE static inline Philox4 rng_bits(uint64_t seed, uint32_t stream, uint64_t counter) {
    return philox4x32_10((uint32_t)counter, (uint32_t)(counter >> 32), stream, 0u, (uint32_t)seed,
                         (uint32_t)(seed >> 32));
}

// Uniform in (0, 1) with 53 random bits, never exactly 0 or 1.
HOST_DEVICE static inline double rng_uniform_from(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)(a >> 5) << 26) | (uint64_t)(b >> 6); // 27 + 26 = 53 bits
    return ((double)x + 0.5) * (1.0 / 9007199254740992.0);
}

HOST_DEVICE static inline double rng_uniform(uint64_t seed, uint32_t stream, uint64_t counter) {
    Philox4 r = rng_bits(seed, stream, counter);
    return rng_uniform_from(r.v[0], r.v[1]);
}

// Standard normal for (seed, stream, counter), by Box-Muller.
HOST_DEVICE static inline float rng_normal(uint64_t seed, uint32_t stream, uint64_t counter) {
    Philox4 r = rng_bits(seed, stream, counter);
    double u1 = rng_uniform_from(r.v[0], r.v[1]);
    double u2 = rng_uniform_from(r.v[2], r.v[3]);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Uniform integer in [0, n) (n < 2^32), by 64-bit multiply-shift: bias below 2^-32, negligible here.
HOST_DEVICE static inline uint32_t rng_below(uint64_t seed, uint32_t stream, uint64_t counter, uint32_t n) {
    Philox4 r = rng_bits(seed, stream, counter);
    return (uint32_t)(((uint64_t)r.v[0] * (uint64_t)n) >> 32);
}

#endif // LLMC_RNG_H
