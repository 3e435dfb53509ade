/*
 * config.h: the model description that every part of the tree reads (the CPU and GPU models, the parameter layout,
 * the TP/GTP/DP plans, checkpoints, the Hugging Face converters), its named sizes, and the parameter tensor layout.
 *
 * Every model is a stack of pre-norm blocks, x += Wo attn(norm1(x)); x += Wdown act(Wfc norm2(x)), then
 * logits = normf(x) head^T over the padded vocabulary. GPTConfig says explicitly how each piece is made, and the
 * architecture (`arch`) names a family: its defaults, and its model-file format.
 *   gpt2   GPT-2: learned position embeddings (wpe), LayerNorm with bias, biases on every linear layer,
 *          multi-head attention, a 4C GELU(tanh) MLP, the LM head tied to wte; llm.c's model files.
 *   llama  Llama 3 as Hugging Face's LlamaForCausalLM computes it: RMSNorm, rotary position embeddings on q and k
 *          (llmc/rope.h, theta and Llama 3.1's "llama3" scaling), grouped-query attention (num_kv_heads key/value
 *          heads, each shared by num_heads / num_kv_heads query heads), a SwiGLU MLP of ffn_hidden features,
 *          no biases, the LM head its own tensor or tied to wte.
 * Head size HS = C / NH for both. The vocabulary is padded to a multiple of 128 so the LM head GEMM and its
 * vocab-parallel split stay aligned; padded rows of wte (and lmhead) are zero and get zero gradient.
 *
 * Parameters are llm.c's 16 tensors in llm.c's order, then lmhead; a tensor the description does not have has size
 * 0, so GPT-2's layout, flat buffer and model files are llm.c's. Per layer (L of each, stacked), with
 * QKV = (NH + 2 KV) HS rows [q heads | k heads | v heads] and F = ffn_hidden:
 *   wte (Vp,C)  wpe (maxT,C) learned only  ln1w (L,C)  ln1b (L,C) LayerNorm only  qkvw (L,QKV,C)  qkvb (L,QKV)
 *   attprojw (L,C,C)  attprojb (L,C)  ln2w ln2b as ln1  fcw (L,FC,C)  fcb (L,FC)  fcprojw (L,C,F)  fcprojb (L,C)
 *   lnfw (C)  lnfb (C) LayerNorm only  lmhead (Vp,C) untied only
 * where FC = F (GELU) or 2F, rows [gate | up] (SwiGLU), and the biases exist with `bias` only. GPT-2 has KV = NH,
 * F = 4C. A linear weight is (out, in) row-major and computes y = x W^T + b.
 */
#ifndef LLMC_CONFIG_H
#define LLMC_CONFIG_H

#include <math.h>
#include <stddef.h>

#include "utils.h"

#define GPT2_VOCAB_SIZE 50257
#define GPT2_EOT_TOKEN 50256
#define GPT2_NORM_EPS 1e-5 // llm.c's LayerNorm (its model files do not record it)
#define VOCAB_PAD_MULTIPLE 128
#define GPT2_MAX_SEQ_LEN 1024
#define NUM_PARAM_TENSORS 17

// Llama 3.x, as their Hugging Face config.json files say.
#define LLAMA3_VOCAB_SIZE 128256
#define LLAMA3_NORM_EPS 1e-5
#define LLAMA3_ROPE_THETA 500000.0f
#define LLAMA3_MAX_POSITIONS 131072
#define LLAMA31_ROPE_FACTOR 8.0f // Llama 3.1's llama3 rope scaling; 3.2 has factor 32 and the same rest
#define LLAMA3_ROPE_LOW_FREQ_FACTOR 1.0f
#define LLAMA3_ROPE_HIGH_FREQ_FACTOR 4.0f
#define LLAMA3_ROPE_ORIGINAL_MAX_POS 8192
// Llama's MLP width where no named size gives one: Meta's rule (llama/model.py's FeedForward, without its
// multiplier): 2/3 of 4C, the parameters of a 4C GELU MLP in three matrices, rounded up to a multiple of 256.
#define LLAMA_FFN_MULTIPLE 256

typedef enum { ARCH_GPT2, ARCH_LLAMA } ModelArch;
typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
typedef enum { POS_LEARNED, POS_ROPE } PosKind;
typedef enum { MLP_GELU, MLP_SWIGLU } MlpKind;
typedef enum { ROPE_SCALING_NONE, ROPE_SCALING_LLAMA3 } RopeScalingKind;
static const char *const ARCH_NAMES[] = {"gpt2", "llama"};
static const char *const NORM_NAMES[] = {"layernorm", "rmsnorm"};
static const char *const POS_NAMES[] = {"learned", "rope"};
static const char *const MLP_NAMES[] = {"gelu", "swiglu"};
static const char *const ROPE_SCALING_NAMES[] = {"none", "llama3"};

// Hugging Face's rope_scaling of rope_type "llama3" (Llama 3.1 and 3.2); all zero for none.
typedef struct {
    int type;                // RopeScalingKind
    float factor;            // low frequencies are divided by it
    float low_freq_factor;   // wavelengths above original / low_freq_factor are low frequencies
    float high_freq_factor;  // wavelengths below original / high_freq_factor are kept
    int original_max_pos;    // original_max_position_embeddings: the context the model was pretrained at
} RopeScaling;

// Every field is 4 bytes but the last, so the struct has no padding (the reference-state header embeds it).
typedef struct {
    int max_seq_len;       // maxT: positions the model has (learned: wpe's rows; rope: the longest sequence it takes)
    int vocab_size;        // V: real tokens
    int padded_vocab_size; // Vp: V rounded up to VOCAB_PAD_MULTIPLE
    int num_layers;        // L
    int num_heads;         // NH: query heads
    int channels;          // C
    int arch;              // ModelArch: the family (its defaults and its model-file format)
    int num_kv_heads;      // KV: key/value heads, dividing NH (NH for GPT-2)
    int ffn_hidden;        // F: the MLP's hidden features (4C for GPT-2)
    int norm;              // NormKind
    int pos;               // PosKind
    int mlp;               // MlpKind
    int bias;              // 1: every linear layer has a bias
    int tied;              // 1: the LM head is wte; 0: its own tensor lmhead
    float rope_theta;      // rope: the base of the inverse frequencies (0 for learned positions)
    RopeScaling rope_scaling;
    double norm_eps;       // added to the variance (LayerNorm) or the mean square (RMSNorm); double: GPT-2's 1e-5
} GPTConfig;

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_LMHEAD
};

static const char *const PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lmhead"};

// How a tensor is initialized: GPT-2's recipe (llm.c) and Llama's (Hugging Face's LlamaPreTrainedModel) alike.
typedef enum { INIT_ZERO, INIT_ONE, INIT_NORMAL } InitKind;

#define INIT_STD 0.02f

typedef struct {
    size_t size[NUM_PARAM_TENSORS];   // elements of each tensor (all layers together; 0 where the model has none)
    size_t offset[NUM_PARAM_TENSORS]; // element offset of each tensor in one flat buffer
    size_t total;                     // elements of all tensors
} ParamLayout;

static inline int padded_vocab(int v) { return ceil_div_int(v, VOCAB_PAD_MULTIPLE) * VOCAB_PAD_MULTIPLE; }

// ----------------------------------------------------------------------------------------------------------
// shapes

static inline int config_head_size(const GPTConfig *c) { return c->channels / c->num_heads; }
// Rows of the fused q, k, v projection: NH query heads, then KV key heads and KV value heads.
static inline int config_qkv_rows(const GPTConfig *c) {
    return (c->num_heads + 2 * c->num_kv_heads) * config_head_size(c);
}
// Rows of the MLP's first linear layer: F, or the gate's F then the up projection's F (SwiGLU).
static inline int config_fc_rows(const GPTConfig *c) {
    return c->mlp == MLP_SWIGLU ? 2 * c->ffn_hidden : c->ffn_hidden;
}

// Tensors with a slice per layer (all but wte, wpe, the final norm and lmhead).
static inline int param_is_per_layer(int t) {
    return t != P_WTE && t != P_WPE && t != P_LNFW && t != P_LNFB && t != P_LMHEAD;
}

// Tensors with a row per token of the padded vocabulary (rows past V are zero padding).
static inline int param_is_vocab(int t) { return t == P_WTE || t == P_LMHEAD; }

// Rows and columns of one layer's slice of tensor t (the whole tensor for the others); 1-D has cols = 1, and a
// tensor the description does not have 0 rows.
static inline void param_layer_shape(const GPTConfig *c, int t, size_t *rows, size_t *cols) {
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size, qkv = (size_t)config_qkv_rows(c);
    size_t fc = (size_t)config_fc_rows(c), F = (size_t)c->ffn_hidden;
    size_t norm_bias = c->norm == NORM_LAYERNORM ? C : 0;
    *cols = 1;
    switch (t) {
    case P_WTE: *rows = Vp; *cols = C; break;
    case P_WPE: *rows = c->pos == POS_LEARNED ? (size_t)c->max_seq_len : 0; *cols = C; break;
    case P_LN1B: case P_LN2B: case P_LNFB: *rows = norm_bias; break;
    case P_QKVW: *rows = qkv; *cols = C; break;
    case P_QKVB: *rows = c->bias ? qkv : 0; break;
    case P_ATTPROJW: *rows = C; *cols = C; break;
    case P_FCW: *rows = fc; *cols = C; break;
    case P_FCB: *rows = c->bias ? fc : 0; break;
    case P_FCPROJW: *rows = C; *cols = F; break;
    case P_ATTPROJB: case P_FCPROJB: *rows = c->bias ? C : 0; break;
    case P_LMHEAD: *rows = c->tied ? 0 : Vp; *cols = C; break;
    default: *rows = C; break; // the norms' weights
    }
}

// Layers stacked in tensor t: L for the per-layer tensors, 1 for the others.
static inline size_t param_num_layers(const GPTConfig *c, int t) {
    return param_is_per_layer(t) ? (size_t)c->num_layers : 1;
}

// Fills *p; returns 0 where a size overflows size_t (only a description past config_check's limits can), else 1.
static inline int param_layout(const GPTConfig *c, ParamLayout *p) {
    size_t off = 0;
    int ok = 1;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t rows, cols;
        param_layer_shape(c, t, &rows, &cols);
        p->size[t] = mul_size_checked(param_num_layers(c, t), mul_size_checked(rows, cols, &ok), &ok);
        p->offset[t] = off;
        off = add_size_checked(off, p->size[t], &ok);
    }
    p->total = off;
    return ok;
}

// The linear layers of a block, in the order they run, and their weight tensors.
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, BLOCK_LINEARS };
static const char *const BLOCK_LINEAR_NAMES[BLOCK_LINEARS] = {"qkv", "attention projection", "fc", "fc projection"};
static const int BLOCK_LINEAR_WEIGHT[BLOCK_LINEARS] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};

// Which of a block's linear layers tensor t is the weight of (LIN_*), or -1.
static inline int block_linear_of_weight(int t) {
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        if (BLOCK_LINEAR_WEIGHT[k] == t) { return k; }
    }
    return -1;
}

// Weight decay applies to 2-D weights only (embeddings, linear weights, the LM head), never to biases or norms.
static inline int param_is_decayed(int t) {
    return t == P_WTE || t == P_WPE || t == P_QKVW || t == P_ATTPROJW || t == P_FCW || t == P_FCPROJW ||
           t == P_LMHEAD;
}

static inline InitKind param_init_kind(int t) {
    if (t == P_LN1W || t == P_LN2W || t == P_LNFW) { return INIT_ONE; }
    if (param_is_decayed(t)) { return INIT_NORMAL; }
    return INIT_ZERO;
}

// GPT-2 scales its residual projections by 1/sqrt(2L) (the GPT-2 paper, llm.c) so the residual stream's variance
// does not grow with depth. Llama takes Hugging Face's LlamaPreTrainedModel._init_weights: N(0, 0.02) for every
// linear layer and embedding, no depth scaling, so a fresh Llama here starts as one that transformers makes.
static inline float param_init_std(const GPTConfig *c, int t) {
    if (c->arch == ARCH_GPT2 && (t == P_ATTPROJW || t == P_FCPROJW)) {
        return INIT_STD / sqrtf(2.0f * (float)c->num_layers);
    }
    return INIT_STD;
}

// ----------------------------------------------------------------------------------------------------------
// the description's fields, one table: model-file headers, resume keys, comparisons and messages all read it

typedef enum { FIELD_INT, FIELD_FLOAT, FIELD_DOUBLE } ConfigFieldType;

typedef struct {
    const char *name;         // in messages and resume keys
    const char *option;       // the option that sets it
    size_t offset;            // in GPTConfig
    ConfigFieldType type;
    const char *const *names; // an enumeration's value names, NULL for a number
    int num_names;
} ConfigField;

#define CONFIG_NUMBER(name, option, member, type) {name, option, offsetof(GPTConfig, member), type, NULL, 0}
#define CONFIG_ENUM(name, option, member, names)                                                                     \
    {name, option, offsetof(GPTConfig, member), FIELD_INT, names, (int)(sizeof(names) / sizeof(names[0]))}

// The first CONFIG_LLMC_FIELDS are llm.c's model-file header (its ints 2..7, in this order): all a GPT-2 needs.
enum { CF_MAX_SEQ_LEN, CF_VOCAB_SIZE, CF_LAYERS, CF_HEADS, CF_CHANNELS, CF_PADDED_VOCAB_SIZE, CONFIG_LLMC_FIELDS };
static const ConfigField CONFIG_FIELDS[] = {
    CONFIG_NUMBER("max sequence length", "--seq-len", max_seq_len, FIELD_INT),
    CONFIG_NUMBER("vocabulary size", "--vocab-size", vocab_size, FIELD_INT),
    CONFIG_NUMBER("layers", "--depth", num_layers, FIELD_INT),
    CONFIG_NUMBER("heads", "--heads", num_heads, FIELD_INT),
    CONFIG_NUMBER("channels", "--width", channels, FIELD_INT),
    CONFIG_NUMBER("padded vocabulary size", "--vocab-size", padded_vocab_size, FIELD_INT),
    CONFIG_ENUM("arch", "--arch", arch, ARCH_NAMES),
    CONFIG_NUMBER("kv heads", "--kv-heads", num_kv_heads, FIELD_INT),
    CONFIG_NUMBER("ffn hidden", "--ffn", ffn_hidden, FIELD_INT),
    CONFIG_ENUM("norm", "--arch", norm, NORM_NAMES),
    CONFIG_ENUM("position embedding", "--arch", pos, POS_NAMES),
    CONFIG_ENUM("mlp", "--arch", mlp, MLP_NAMES),
    CONFIG_NUMBER("linear biases", "--arch", bias, FIELD_INT),
    CONFIG_NUMBER("tied embeddings", "--tie-embeddings", tied, FIELD_INT),
    CONFIG_NUMBER("rope theta", "--rope-theta", rope_theta, FIELD_FLOAT),
    CONFIG_ENUM("rope scaling", "--rope-scaling", rope_scaling.type, ROPE_SCALING_NAMES),
    CONFIG_NUMBER("rope factor", "--rope-factor", rope_scaling.factor, FIELD_FLOAT),
    CONFIG_NUMBER("rope low freq factor", "--rope-low-freq-factor", rope_scaling.low_freq_factor, FIELD_FLOAT),
    CONFIG_NUMBER("rope high freq factor", "--rope-high-freq-factor", rope_scaling.high_freq_factor, FIELD_FLOAT),
    CONFIG_NUMBER("rope original max positions", "--rope-original-max-pos", rope_scaling.original_max_pos, FIELD_INT),
    CONFIG_NUMBER("norm eps", "--norm-eps", norm_eps, FIELD_DOUBLE),
};
#define NUM_CONFIG_FIELDS ((int)(sizeof(CONFIG_FIELDS) / sizeof(CONFIG_FIELDS[0])))

static inline const char *config_field_addr(const GPTConfig *c, int i) {
    return (const char *)c + CONFIG_FIELDS[i].offset;
}

// Ints a field takes in a header: a double's 8 bytes take two.
static inline int config_field_ints(int i) { return CONFIG_FIELDS[i].type == FIELD_DOUBLE ? 2 : 1; }

// The first `fields` fields as int32s, in the table's order: ints as they are, a float or a double as its bytes (a
// double's two ints in memory order), so every value reads back exactly. Returns the ints written.
static inline int config_pack(const GPTConfig *c, int fields, int32_t *out) {
    int n = 0;
    for (int i = 0; i < fields; i++) {
        memcpy(out + n, config_field_addr(c, i), (size_t)config_field_ints(i) * sizeof(int32_t));
        n += config_field_ints(i);
    }
    return n;
}

// The inverse of config_pack for the first `fields` fields (the others of *c are left as they are).
static inline int config_unpack(const int32_t *in, int fields, GPTConfig *c) {
    int n = 0;
    for (int i = 0; i < fields; i++) {
        memcpy((char *)c + CONFIG_FIELDS[i].offset, in + n, (size_t)config_field_ints(i) * sizeof(int32_t));
        n += config_field_ints(i);
    }
    return n;
}

// Whether field i has the same value (the same bits) in both descriptions.
static inline int config_field_equal(const GPTConfig *a, const GPTConfig *b, int i) {
    return memcmp(config_field_addr(a, i), config_field_addr(b, i), (size_t)config_field_ints(i) * 4) == 0;
}

static inline int config_equal(const GPTConfig *a, const GPTConfig *b) {
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) {
        if (!config_field_equal(a, b, i)) { return 0; }
    }
    return 1;
}

// Field i's value as text: an enumeration's name, an integer, or a float in its shortest form that reads back as
// the same value (so the text identifies it: resume keys compare it).
static inline void config_field_format(const GPTConfig *c, int i, char *buf, size_t cap) {
    const ConfigField *f = &CONFIG_FIELDS[i];
    const char *p = config_field_addr(c, i);
    if (f->type == FIELD_INT) {
        int v;
        memcpy(&v, p, sizeof(v));
        if (f->names && v >= 0 && v < f->num_names) { snprintf(buf, cap, "%s", f->names[v]); }
        else { snprintf(buf, cap, "%d", v); }
        return;
    }
    double v;
    if (f->type == FIELD_FLOAT) {
        float x;
        memcpy(&x, p, sizeof(x));
        v = x;
    } else {
        memcpy(&v, p, sizeof(v));
    }
    int digits = f->type == FIELD_FLOAT ? 9 : 17; // enough for any float, any double
    snprintf(buf, cap, "%g", v);
    double back = strtod(buf, NULL);
    if (f->type == FIELD_FLOAT ? (float)back != (float)v : back != v) { snprintf(buf, cap, "%.*g", digits, v); }
}

// ----------------------------------------------------------------------------------------------------------
// descriptions

// Llama's MLP width for channels C where no named size gives one (LLAMA_FFN_MULTIPLE).
static inline int llama_default_ffn(int C) {
    return ceil_div_int(2 * 4 * C / 3, LLAMA_FFN_MULTIPLE) * LLAMA_FFN_MULTIPLE;
}

static inline RopeScaling llama3_rope_scaling(float factor) {
    RopeScaling r = {ROPE_SCALING_LLAMA3, factor, LLAMA3_ROPE_LOW_FREQ_FACTOR, LLAMA3_ROPE_HIGH_FREQ_FACTOR,
                     LLAMA3_ROPE_ORIGINAL_MAX_POS};
    return r;
}

// The description of architecture `arch` at L layers, C channels and NH heads, with maxT positions: every other
// field the family's default (GPT-2: llm.c's GPT-2 exactly; Llama: Llama 3's, its KV = NH, Meta's MLP width,
// an untied head as LlamaConfig's default, no rope scaling).
static inline GPTConfig config_default(ModelArch arch, int max_seq_len, int layers, int heads, int channels) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = max_seq_len;
    c.num_layers = layers;
    c.num_heads = heads;
    c.channels = channels;
    c.arch = (int)arch;
    c.num_kv_heads = heads;
    if (arch == ARCH_GPT2) {
        c.vocab_size = GPT2_VOCAB_SIZE;
        c.ffn_hidden = 4 * channels;
        c.norm = NORM_LAYERNORM;
        c.pos = POS_LEARNED;
        c.mlp = MLP_GELU;
        c.bias = 1;
        c.tied = 1;
        c.norm_eps = GPT2_NORM_EPS;
    } else {
        c.vocab_size = LLAMA3_VOCAB_SIZE;
        c.ffn_hidden = llama_default_ffn(channels);
        c.norm = NORM_RMSNORM;
        c.pos = POS_ROPE;
        c.mlp = MLP_SWIGLU;
        c.rope_theta = LLAMA3_ROPE_THETA;
        c.norm_eps = LLAMA3_NORM_EPS;
    }
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    return c;
}

// llm.c's GPT-2 of this shape (what an llm.c model-file header describes).
static inline GPTConfig config_gpt2(int max_seq_len, int vocab_size, int layers, int heads, int channels) {
    GPTConfig c = config_default(ARCH_GPT2, max_seq_len, layers, heads, channels);
    c.vocab_size = vocab_size;
    c.padded_vocab_size = padded_vocab(vocab_size);
    return c;
}

// Named sizes. GPT-2's: d12 = 124M, d24 = 350M, d36 = 774M, d48 = 1558M, head size 64, positions = --seq-len.
// Llama 3's as their Hugging Face config.json say (vocabulary 128256, rope theta 500000, llama3 rope scaling with
// low 1, high 4, original 8192, 131072 positions). llama-tiny is a test shape: Llama 3.1's architecture with GPT-2's
// vocabulary, so it trains on this project's GPT-2-tokenized shards and its samples decode, and the 8192 positions
// of Llama 3.1's pretraining.
typedef struct {
    const char *name;
    int arch;
    int layers, channels, heads;
    // a Llama's own (zero for GPT-2's sizes, whose every other field is the architecture's default)
    int kv_heads, ffn_hidden, vocab_size, tied, max_positions;
    float rope_factor;
} ModelPreset;

static const ModelPreset MODEL_PRESETS[] = {
    {"d12", ARCH_GPT2, 12, 768, 12, 0, 0, 0, 0, 0, 0.0f},
    {"d24", ARCH_GPT2, 24, 1024, 16, 0, 0, 0, 0, 0, 0.0f},
    {"d36", ARCH_GPT2, 36, 1280, 20, 0, 0, 0, 0, 0, 0.0f},
    {"d48", ARCH_GPT2, 48, 1600, 25, 0, 0, 0, 0, 0, 0.0f},
    {"llama3.2-1b", ARCH_LLAMA, 16, 2048, 32, 8, 8192, LLAMA3_VOCAB_SIZE, 1, LLAMA3_MAX_POSITIONS, 32.0f},
    {"llama3.2-3b", ARCH_LLAMA, 28, 3072, 24, 8, 8192, LLAMA3_VOCAB_SIZE, 1, LLAMA3_MAX_POSITIONS, 32.0f},
    {"llama3.1-8b", ARCH_LLAMA, 32, 4096, 32, 8, 14336, LLAMA3_VOCAB_SIZE, 0, LLAMA3_MAX_POSITIONS,
     LLAMA31_ROPE_FACTOR},
    {"llama-tiny", ARCH_LLAMA, 2, 64, 4, 2, 192, GPT2_VOCAB_SIZE, 0, LLAMA3_ROPE_ORIGINAL_MAX_POS,
     LLAMA31_ROPE_FACTOR},
};
#define NUM_MODEL_PRESETS ((int)(sizeof(MODEL_PRESETS) / sizeof(MODEL_PRESETS[0])))

static inline const ModelPreset *model_preset_find(const char *name) {
    for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
        if (strcmp(name, MODEL_PRESETS[i].name) == 0) { return &MODEL_PRESETS[i]; }
    }
    return NULL;
}

// Named preset p as architecture arch (p's own, or Llama at a GPT-2 size) with L, NH, C in place of its shape;
// max_seq_len: the run's sequence length, the positions of a model whose size names none.
static inline GPTConfig config_from_preset(const ModelPreset *p, ModelArch arch, int max_seq_len, int layers,
                                           int heads, int channels) {
    GPTConfig c = config_default(arch, max_seq_len, layers, heads, channels);
    if (p->arch == ARCH_LLAMA) {
        c.max_seq_len = p->max_positions;
        c.num_kv_heads = p->kv_heads;
        c.ffn_hidden = p->ffn_hidden;
        c.vocab_size = p->vocab_size;
        c.padded_vocab_size = padded_vocab(p->vocab_size);
        c.tied = p->tied;
        c.rope_scaling = llama3_rope_scaling(p->rope_factor);
    }
    return c;
}

// One line on the architecture, for the start of a run's console output.
static inline void config_describe(const GPTConfig *c, char *buf, size_t cap) {
    char theta[32], scaling[160] = "";
    snprintf(theta, sizeof(theta), "%g", c->rope_theta);
    if (c->rope_scaling.type == ROPE_SCALING_LLAMA3) {
        snprintf(scaling, sizeof(scaling), ", llama3 scaling (factor %g, low %g, high %g, original %d)",
                 c->rope_scaling.factor, c->rope_scaling.low_freq_factor, c->rope_scaling.high_freq_factor,
                 c->rope_scaling.original_max_pos);
    }
    snprintf(buf, cap, "%s: %s eps %g, %s positions%s%s%s, %d of %d heads for keys and values, %s MLP of %d, %s, %s LM "
             "head", ARCH_NAMES[c->arch], NORM_NAMES[c->norm], c->norm_eps, POS_NAMES[c->pos],
             c->pos == POS_ROPE ? " theta " : "", c->pos == POS_ROPE ? theta : "", scaling, c->num_kv_heads,
             c->num_heads, MLP_NAMES[c->mlp], c->ffn_hidden, c->bias ? "biases" : "no biases",
             c->tied ? "tied" : "untied");
}

// ----------------------------------------------------------------------------------------------------------
// validation

// The shape limits every build supports (and model files may hold: far past any model trained, so that a larger
// count read from a file is a corrupt file, and small enough that no size computed from a shape comes near 2^63).
#define MAX_LAYERS 1024
#define MAX_CHANNELS 65536
#define MAX_FFN_HIDDEN (4 * MAX_CHANNELS)
#define MAX_POSITIONS (1 << 20)  // maxT: wpe's rows, or the longest sequence a rotary model takes
#define MAX_VOCAB_SIZE (1 << 20) // the largest vocabularies in use are ~256k

static inline int config_enum_ok(const GPTConfig *c, int i) {
    int v;
    memcpy(&v, config_field_addr(c, i), sizeof(v));
    return v >= 0 && v < CONFIG_FIELDS[i].num_names;
}

// The first field in which c differs from llm.c's GPT-2 of its shape, or -1. GPT-2 is that model exactly: its files
// record the shape and nothing else, and every build assumes the rest.
static inline int config_gpt2_difference(const GPTConfig *c) {
    GPTConfig gpt2 = config_gpt2(c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels);
    for (int i = CONFIG_LLMC_FIELDS; i < NUM_CONFIG_FIELDS; i++) {
        if (!config_field_equal(c, &gpt2, i)) { return i; }
    }
    return -1;
}

// Whether c is a model every part of the tree can build; if not, why (one sentence naming the option to change).
static inline int config_check(const GPTConfig *c, char *why, size_t cap) {
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) {
        if (CONFIG_FIELDS[i].names && !config_enum_ok(c, i)) {
            char v[32];
            config_field_format(c, i, v, sizeof(v));
            snprintf(why, cap, "%s %s is not a known value", CONFIG_FIELDS[i].name, v);
            return 0;
        }
    }
    if (c->num_layers < 1 || c->num_layers > MAX_LAYERS) {
        snprintf(why, cap, "--depth %d is out of range [1, %d]", c->num_layers, MAX_LAYERS);
    } else if (c->channels < 1 || c->channels > MAX_CHANNELS) {
        snprintf(why, cap, "--width %d is out of range [1, %d]", c->channels, MAX_CHANNELS);
    } else if (c->num_heads < 1 || c->channels % c->num_heads != 0) {
        snprintf(why, cap, "--heads %d must be >= 1 and divide --width %d", c->num_heads, c->channels);
    } else if (c->arch == ARCH_GPT2 && config_gpt2_difference(c) >= 0) {
        int i = config_gpt2_difference(c);
        GPTConfig gpt2 = config_gpt2(c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels);
        char want[32], have[32];
        config_field_format(&gpt2, i, want, sizeof(want));
        config_field_format(c, i, have, sizeof(have));
        snprintf(why, cap, "--arch gpt2 is llm.c's GPT-2, whose %s is %s, not %s: drop %s or pass --arch llama",
                 CONFIG_FIELDS[i].name, want, have, CONFIG_FIELDS[i].option);
    } else if (c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads != 0) {
        snprintf(why, cap, "--kv-heads %d must be >= 1 and divide --heads %d (each key/value head serves a group of "
                 "query heads)", c->num_kv_heads, c->num_heads);
    } else if (c->ffn_hidden < 1 || c->ffn_hidden > MAX_FFN_HIDDEN) {
        snprintf(why, cap, "--ffn %d is out of range [1, %d]", c->ffn_hidden, MAX_FFN_HIDDEN);
    } else if (c->max_seq_len < 1 || c->max_seq_len > MAX_POSITIONS) {
        snprintf(why, cap, "the model's positions %d are out of range [1, %d]", c->max_seq_len, MAX_POSITIONS);
    } else if (c->vocab_size < 1 || c->vocab_size > MAX_VOCAB_SIZE || c->padded_vocab_size < c->vocab_size ||
               c->padded_vocab_size > padded_vocab(MAX_VOCAB_SIZE)) {
        snprintf(why, cap, "vocabulary size %d (padded %d) is invalid: --vocab-size must be in [1, %d]",
                 c->vocab_size, c->padded_vocab_size, MAX_VOCAB_SIZE);
    } else if ((c->bias != 0 && c->bias != 1) || (c->tied != 0 && c->tied != 1)) {
        snprintf(why, cap, "linear biases %d and tied embeddings %d must be 0 or 1", c->bias, c->tied);
    } else if (!(c->norm_eps > 0 && c->norm_eps < 1)) {
        snprintf(why, cap, "--norm-eps %g must be in (0, 1)", c->norm_eps);
    } else if (c->pos == POS_ROPE && config_head_size(c) % 2 != 0) {
        snprintf(why, cap, "head size %d (--width %d / --heads %d) must be even: rotary embeddings turn pairs of "
                 "channels", config_head_size(c), c->channels, c->num_heads);
    } else if (c->pos == POS_ROPE && !(c->rope_theta > 0 && isfinite(c->rope_theta))) {
        snprintf(why, cap, "--rope-theta %g must be > 0", c->rope_theta);
    } else if (c->pos == POS_LEARNED && (c->rope_theta != 0 || c->rope_scaling.type != ROPE_SCALING_NONE)) {
        snprintf(why, cap, "--rope-theta and --rope-scaling apply to rotary position embeddings, but this model "
                 "learns its positions (%s); drop them", ARCH_NAMES[c->arch]);
    } else if (c->rope_scaling.type == ROPE_SCALING_LLAMA3 && !(c->rope_scaling.factor >= 1)) {
        snprintf(why, cap, "--rope-factor %g must be >= 1", c->rope_scaling.factor);
    } else if (c->rope_scaling.type == ROPE_SCALING_LLAMA3 &&
               !(c->rope_scaling.low_freq_factor > 0 &&
                 c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor)) {
        snprintf(why, cap, "--rope-high-freq-factor %g must be greater than --rope-low-freq-factor %g, which must be "
                 "> 0", c->rope_scaling.high_freq_factor, c->rope_scaling.low_freq_factor);
    } else if (c->rope_scaling.type == ROPE_SCALING_LLAMA3 && c->rope_scaling.original_max_pos < 1) {
        snprintf(why, cap, "--rope-original-max-pos %d must be >= 1", c->rope_scaling.original_max_pos);
    } else if (c->rope_scaling.type == ROPE_SCALING_NONE &&
               (c->rope_scaling.factor != 0 || c->rope_scaling.low_freq_factor != 0 ||
                c->rope_scaling.high_freq_factor != 0 || c->rope_scaling.original_max_pos != 0)) {
        snprintf(why, cap, "rope scaling none has no factors, but they are %g, %g, %g, %d", c->rope_scaling.factor,
                 c->rope_scaling.low_freq_factor, c->rope_scaling.high_freq_factor, c->rope_scaling.original_max_pos);
    } else {
        return 1;
    }
    return 0;
}

// fail() with the reason where c is not a model every build can make.
static inline void config_validate(const GPTConfig *c) {
    char why[512];
    if (!config_check(c, why, sizeof(why))) { fail("%s", why); }
}

// Training FLOPs per token as llm.c counts them: 6 (forward 2, backward 4) per weight a token meets in a GEMM, plus
// attention's 12 * L * C * T (q k^T and att v over the NH query heads' C channels, causal halving ignored). The
// weights are all parameters, the LM head's GEMM counted once: tied, wte stands for it (and its lookup is free);
// untied, lmhead does and wte, a lookup only, is left out. GPT-2 counts wpe and the norms and biases, as llm.c does.
static inline double flops_per_token(const GPTConfig *c, size_t num_params, int T) {
    size_t wte_rows, cols;
    param_layer_shape(c, P_WTE, &wte_rows, &cols);
    double gemm_params = (double)num_params - (c->tied ? 0.0 : (double)wte_rows * (double)cols);
    return 6.0 * gemm_params + 12.0 * (double)c->num_layers * (double)c->channels * (double)T;
}

#endif // LLMC_CONFIG_H
