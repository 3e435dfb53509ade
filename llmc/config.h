/*
 * config.h: the GPT-2 model configuration, its named sizes, and the parameter tensor layout.
 *
 * The model is GPT-2: learned position embeddings, token embedding tied to the LM head, pre-LayerNorm blocks
 * (x += attn(ln1(x)); x += mlp(ln2(x))), causal multi-head attention, a 4x GELU(tanh) MLP, a final LayerNorm.
 * The vocabulary (50257) is padded to a multiple of 128 so the LM head GEMM and its vocab-parallel split stay
 * aligned; padded rows of wte are zero and get zero gradient.
 *
 * Parameters are 16 tensors in llm.c's order, so model files move between llm.c and this project:
 *   wte (Vp,C)  wpe (maxT,C)  ln1w ln1b (L,C)  qkvw (L,3C,C) qkvb (L,3C)  attprojw (L,C,C) attprojb (L,C)
 *   ln2w ln2b (L,C)  fcw (L,4C,C) fcb (L,4C)  fcprojw (L,C,4C) fcprojb (L,C)  lnfw lnfb (C)
 * A linear weight is (out, in) row-major and computes y = x W^T + b.
 */
#ifndef LLMC_CONFIG_H
#define LLMC_CONFIG_H

#include <math.h>

#include "utils.h"

#define GPT2_VOCAB_SIZE 50257
#define GPT2_EOT_TOKEN 50256
#define VOCAB_PAD_MULTIPLE 128
#define GPT2_MAX_SEQ_LEN 1024
#define NUM_PARAM_TENSORS 16

typedef struct {
    int max_seq_len;       // maxT: rows of wpe
    int vocab_size;        // V: real tokens
    int padded_vocab_size; // Vp: V rounded up to VOCAB_PAD_MULTIPLE
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPTConfig;

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

static const char *const PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// How a tensor is initialized (GPT-2 / llm.c recipe).
typedef enum { INIT_ZERO, INIT_ONE, INIT_NORMAL } InitKind;

#define INIT_STD 0.02f

typedef struct {
    size_t size[NUM_PARAM_TENSORS];   // elements of each tensor (all layers together)
    size_t offset[NUM_PARAM_TENSORS]; // element offset of each tensor in one flat buffer
    size_t total;                     // elements of all tensors
} ParamLayout;

static inline int padded_vocab(int v) { return ceil_div_int(v, VOCAB_PAD_MULTIPLE) * VOCAB_PAD_MULTIPLE; }

// Fills *p; returns 0 where a size overflows size_t (only a config past config_within_limits can), 1 otherwise.
static inline int param_layout(const GPTConfig *c, ParamLayout *p) {
    size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels, L = (size_t)c->num_layers;
    size_t maxT = (size_t)c->max_seq_len;
    int ok = 1;
    size_t LC = mul_size_checked(L, C, &ok), LCC = mul_size_checked(LC, C, &ok);
    size_t s[NUM_PARAM_TENSORS] = {mul_size_checked(Vp, C, &ok), mul_size_checked(maxT, C, &ok), LC, LC,
                                   mul_size_checked(3, LCC, &ok), mul_size_checked(3, LC, &ok), LCC, LC, LC, LC,
                                   mul_size_checked(4, LCC, &ok), mul_size_checked(4, LC, &ok),
                                   mul_size_checked(4, LCC, &ok), LC, C, C};
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        p->size[i] = s[i];
        p->offset[i] = off;
        off = add_size_checked(off, s[i], &ok);
    }
    p->total = off;
    return ok;
}

// The linear layers of a block, in the order they run, and their weight tensors.
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, BLOCK_LINEARS };
static const int BLOCK_LINEAR_WEIGHT[BLOCK_LINEARS] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};

// Which of a block's linear layers tensor t is the weight of (LIN_*), or -1.
static inline int block_linear_of_weight(int t) {
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        if (BLOCK_LINEAR_WEIGHT[k] == t) { return k; }
    }
    return -1;
}

// Weight decay applies to 2-D weights only (embeddings and linear weights), never to biases or LayerNorm.
static inline int param_is_decayed(int t) {
    return t == P_WTE || t == P_WPE || t == P_QKVW || t == P_ATTPROJW || t == P_FCW || t == P_FCPROJW;
}

static inline InitKind param_init_kind(int t) {
    if (t == P_LN1W || t == P_LN2W || t == P_LNFW) { return INIT_ONE; }
    if (param_is_decayed(t)) { return INIT_NORMAL; }
    return INIT_ZERO;
}

// Residual projections are scaled by 1/sqrt(2L) (GPT-2 paper) so the residual stream's variance does not grow
// with depth.
static inline float param_init_std(const GPTConfig *c, int t) {
    if (t == P_ATTPROJW || t == P_FCPROJW) { return INIT_STD / sqrtf(2.0f * (float)c->num_layers); }
    return INIT_STD;
}

// GPT-2 sizes by name. d12 = 124M, d24 = 350M, d36 = 774M, d48 = 1558M; all with head size 64.
typedef struct {
    const char *name;
    int layers, channels, heads;
} ModelPreset;

static const ModelPreset MODEL_PRESETS[] = {
    {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}};
#define NUM_MODEL_PRESETS ((int)(sizeof(MODEL_PRESETS) / sizeof(MODEL_PRESETS[0])))

// Returns 1 and fills *c if name is a preset, else 0.
static inline int config_from_preset(const char *name, int max_seq_len, GPTConfig *c) {
    for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
        if (strcmp(name, MODEL_PRESETS[i].name) == 0) {
            c->num_layers = MODEL_PRESETS[i].layers;
            c->channels = MODEL_PRESETS[i].channels;
            c->num_heads = MODEL_PRESETS[i].heads;
            c->max_seq_len = max_seq_len;
            c->vocab_size = GPT2_VOCAB_SIZE;
            c->padded_vocab_size = padded_vocab(GPT2_VOCAB_SIZE);
            return 1;
        }
    }
    return 0;
}

// The shape limits every build supports (and model files may hold: far past any GPT trained, so that a larger count
// is a corrupt file, and small enough that no size computed from a shape comes near 2^63 bytes).
#define MAX_LAYERS 1024
#define MAX_CHANNELS 65536
#define MAX_POSITIONS (1 << 20)   // rows of wpe
#define MAX_VOCAB_SIZE (1 << 24)  // padded rows of wte (GPT-2 has 50257 tokens, the largest vocabularies ~256k)

// 1 where every count of c is within the limits (heads dividing the channels, V <= Vp), 0 otherwise: what a
// shape read from a file must pass before any size is computed from it.
static inline int config_within_limits(const GPTConfig *c) {
    return c->num_layers >= 1 && c->num_layers <= MAX_LAYERS && c->channels >= 1 && c->channels <= MAX_CHANNELS &&
           c->num_heads >= 1 && c->channels % c->num_heads == 0 && c->max_seq_len >= 1 &&
           c->max_seq_len <= MAX_POSITIONS && c->vocab_size >= 1 && c->vocab_size <= c->padded_vocab_size &&
           c->padded_vocab_size <= MAX_VOCAB_SIZE;
}

// fail() with the offending value and the option to change.
static inline void config_validate(const GPTConfig *c) {
    if (c->num_layers < 1 || c->num_layers > MAX_LAYERS) {
        fail("--depth %d is out of range [1, %d]", c->num_layers, MAX_LAYERS);
    }
    if (c->channels < 1 || c->channels > MAX_CHANNELS) {
        fail("--width %d is out of range [1, %d]", c->channels, MAX_CHANNELS);
    }
    if (c->num_heads < 1 || c->channels % c->num_heads != 0) {
        fail("--heads %d must be >= 1 and divide --width %d", c->num_heads, c->channels);
    }
    if (c->max_seq_len < 1) { fail("--seq-len %d must be >= 1", c->max_seq_len); }
    if (c->vocab_size < 1 || c->padded_vocab_size < c->vocab_size) {
        fail("vocabulary size %d (padded %d) is invalid", c->vocab_size, c->padded_vocab_size);
    }
}

static inline int config_equal(const GPTConfig *a, const GPTConfig *b) {
    return a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size &&
           a->padded_vocab_size == b->padded_vocab_size && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->channels == b->channels;
}

// Training FLOPs per token as llm.c counts them: 6 * params + 12 * L * C * T (attention, causal halving ignored).
static inline double flops_per_token(const GPTConfig *c, size_t num_params, int T) {
    return 6.0 * (double)num_params + 12.0 * (double)c->num_layers * (double)c->channels * (double)T;
}

#endif // LLMC_CONFIG_H
