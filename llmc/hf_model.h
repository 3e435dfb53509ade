/*
 * hf_model.h: GPT-2 and Llama between llm.c model files and Hugging Face transformers' folders (GPT2LMHeadModel,
 * LlamaForCausalLM), both ways. One table per architecture names each HF tensor, its llm.c tensor and its shape in
 * named sizes of the description (HfDim); everything else (reading, checking, sharding, writing) is shared.
 *
 * A Hugging Face GPT-2 folder holds model.safetensors (or shards model-0000k-of-0000n.safetensors that
 * model.safetensors.index.json's "weight_map" lists), config.json (the shape), generation_config.json, and the
 * tokenizer: vocab.json (GPT-2's encoder.json), merges.txt (its vocab.bpe), tokenizer_config.json. Tensors, block i:
 *   transformer.wte.weight [V, C]       wte's first V rows (llm.c pads wte to Vp rows; the pad rows are zero)
 *   transformer.wpe.weight [maxT, C]
 *   transformer.h.i.ln_1.weight, .bias [C]          transformer.h.i.ln_2.weight, .bias [C]
 *   transformer.h.i.attn.c_attn.weight [C, 3C] = qkvw^T      transformer.h.i.attn.c_attn.bias [3C]
 *   transformer.h.i.attn.c_proj.weight [C, C]  = attprojw^T  transformer.h.i.attn.c_proj.bias [C]
 *   transformer.h.i.mlp.c_fc.weight    [C, 4C] = fcw^T       transformer.h.i.mlp.c_fc.bias [4C]
 *   transformer.h.i.mlp.c_proj.weight  [4C, C] = fcprojw^T   transformer.h.i.mlp.c_proj.bias [C]
 *   transformer.ln_f.weight, .bias [C]
 * HF's GPT-2 linear layers are Conv1D modules, whose weight is [in, out]: llm.c's [out, in] transposed. q, k and v
 * are stacked alike in both (c_attn's output columns, qkvw's rows: q, k, v, each head's features contiguous). The LM
 * head is tied to wte, so, as save_pretrained, export writes no lm_head.weight; import accepts one equal to wte.
 * Older checkpoints (the original "gpt2" repository) name tensors without "transformer." and carry the attention's
 * causal-mask buffers (h.i.attn.bias, h.i.attn.masked_bias): both are accepted, the buffers ignored.
 *
 * A Llama folder holds the same weights files and config.json (no tokenizer is written: train_gpt has none of
 * Llama's). Tensors, block i, all Linear weights [out, in] as llm.c's, with HS = C / NH, KV key/value heads, F:
 *   model.embed_tokens.weight [V, C]  model.layers.i.input_layernorm.weight [C]  ...post_attention_layernorm [C]
 *   model.layers.i.self_attn.q_proj [NH HS, C], k_proj [KV HS, C], v_proj [KV HS, C] = qkvw's rows [q | k | v]
 *   model.layers.i.self_attn.o_proj [C, C] = attprojw
 *   model.layers.i.mlp.gate_proj [F, C], up_proj [F, C] = fcw's rows [gate | up]   mlp.down_proj [C, F] = fcprojw
 *   model.norm.weight [C]   lm_head.weight [V, C] untied only (tied: absent, or accepted if equal to embed_tokens)
 * HF's q and k rows are in the rotate-half order (pairs (j, j + HS/2)) that rope.h computes: no permutation.
 *
 * Nothing a user made is overwritten without force; every file is written atomically (utils.h's AtomicFile), and an
 * export writes config.json last, so an interrupted export is no loadable model.
 */
#ifndef LLMC_HF_MODEL_H
#define LLMC_HF_MODEL_H

#include <dirent.h>

#include "checkpoint.h"
#include "json.h"
#include "safetensors.h"
#include "tokenizer.h"

#define HF_GPT2_PREFIX "transformer." // the base model's prefix of every GPT-2 name
#define HF_LLAMA_PREFIX "model."
#define HF_LM_HEAD "lm_head.weight"
#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_INDEX_FILE "model.safetensors.index.json"
#define HF_SHARD_FORMAT "model-%05d-of-%05d.safetensors"
#define HF_SHARD_SCAN "model-%5d-of-%5d.safetensors%n"
#define HF_CONFIG_FILE "config.json"
#define HF_GENERATION_FILE "generation_config.json"
#define HF_TOKENIZER_CONFIG_FILE "tokenizer_config.json"
#define HF_VOCAB_FILE "vocab.json"
#define HF_MERGES_FILE "merges.txt"
#define GPT2_ENCODER_FILE "encoder.json"
#define GPT2_MERGES_FILE "vocab.bpe"
#define HF_GPT2_MODEL_TYPE "gpt2"
#define HF_GPT2_CLASS "GPT2LMHeadModel"
#define HF_LLAMA_MODEL_TYPE "llama"
#define HF_LLAMA_CLASS "LlamaForCausalLM"
#define HF_SAFETENSORS_FORMAT "pt" // the __metadata__ "format" transformers writes (and checks) for PyTorch weights
#define HF_EOT_TEXT "<|endoftext|>"
#define HF_LAYER_NORM_EPS 1e-5      // what both builds compute with (LAYERNORM_EPS of cpu_model.h and layernorm.cuh)
#define HF_LAYER_NORM_EPS_RTOL 1e-6 // a config's epsilon this close to it (relative) is the same
#define HF_BYTES_PER_MB 1000000LL   // HF counts shard sizes in powers of ten ("5GB" is 5 x 10^9 bytes)
#define HF_PATH_LEN 4096
#define HF_NAME_LEN 96
#define HF_DEFAULT_VOCAB_DIR "data/gpt2" // GPT-2's encoder.json and vocab.bpe, in the repository
#define HF_HINT "save the model with transformers' save_pretrained (safetensors is its default)"

/* ---------------------------------------------------------------------------------------------------------
 * The tensors and their mapping to llm.c's layout (config.h), one table per architecture.
 */
// A size of config c, by name: HF tensors are described by these, so one table serves every shape.
typedef enum { HD_NONE, HD_C, HD_V, HD_POS, HD_QKV, HD_KV, HD_FC, HD_F } HfDim;

static inline long long hf_dim(const GPTConfig *c, int d) {
    switch (d) {
    case HD_C: return c->channels;
    case HD_V: return c->vocab_size; // wte and lm_head without their padding rows
    case HD_POS: return c->max_seq_len;
    case HD_QKV: return config_qkv_rows(c);
    case HD_KV: return (long long)c->num_kv_heads * config_head_size(c);
    case HD_FC: return config_fc_rows(c);
    case HD_F: return c->ffn_hidden;
    default: return 0;
    }
}

typedef enum { HF_BEFORE_BLOCKS, HF_IN_BLOCK, HF_AFTER_BLOCKS } HfPlace;

// One HF tensor. Tensors of a block that map to the same llm.c tensor are its row blocks, stacked in the table's
// order (Llama's q, k, v into qkvw; gate, up into fcw).
typedef struct {
    const char *name; // after the base model's prefix (and, in a block, after "{block}{i}.")
    int place;        // HfPlace
    int bare;         // named without the base model's prefix (the LM head)
    int param;        // llm.c's tensor (P_*)
    int transposed;   // a Conv1D weight: HF [in, out], llm.c [out, in]
    int rows, cols;   // HfDim: llm.c's shape of this part, [rows, cols]; [rows] where cols is HD_NONE
} HfTensorSpec;

static const HfTensorSpec HF_GPT2_TENSORS[] = {
    {"wte.weight", HF_BEFORE_BLOCKS, 0, P_WTE, 0, HD_V, HD_C},
    {"wpe.weight", HF_BEFORE_BLOCKS, 0, P_WPE, 0, HD_POS, HD_C},
    {"ln_1.weight", HF_IN_BLOCK, 0, P_LN1W, 0, HD_C, HD_NONE},
    {"ln_1.bias", HF_IN_BLOCK, 0, P_LN1B, 0, HD_C, HD_NONE},
    {"attn.c_attn.weight", HF_IN_BLOCK, 0, P_QKVW, 1, HD_QKV, HD_C},
    {"attn.c_attn.bias", HF_IN_BLOCK, 0, P_QKVB, 0, HD_QKV, HD_NONE},
    {"attn.c_proj.weight", HF_IN_BLOCK, 0, P_ATTPROJW, 1, HD_C, HD_C},
    {"attn.c_proj.bias", HF_IN_BLOCK, 0, P_ATTPROJB, 0, HD_C, HD_NONE},
    {"ln_2.weight", HF_IN_BLOCK, 0, P_LN2W, 0, HD_C, HD_NONE},
    {"ln_2.bias", HF_IN_BLOCK, 0, P_LN2B, 0, HD_C, HD_NONE},
    {"mlp.c_fc.weight", HF_IN_BLOCK, 0, P_FCW, 1, HD_FC, HD_C},
    {"mlp.c_fc.bias", HF_IN_BLOCK, 0, P_FCB, 0, HD_FC, HD_NONE},
    {"mlp.c_proj.weight", HF_IN_BLOCK, 0, P_FCPROJW, 1, HD_C, HD_F},
    {"mlp.c_proj.bias", HF_IN_BLOCK, 0, P_FCPROJB, 0, HD_C, HD_NONE},
    {"ln_f.weight", HF_AFTER_BLOCKS, 0, P_LNFW, 0, HD_C, HD_NONE},
    {"ln_f.bias", HF_AFTER_BLOCKS, 0, P_LNFB, 0, HD_C, HD_NONE},
};

// q has NH x HS = C rows, k and v KV x HS each; HF's q and k rows are already in the rotate-half order of rope.h.
static const HfTensorSpec HF_LLAMA_TENSORS[] = {
    {"embed_tokens.weight", HF_BEFORE_BLOCKS, 0, P_WTE, 0, HD_V, HD_C},
    {"input_layernorm.weight", HF_IN_BLOCK, 0, P_LN1W, 0, HD_C, HD_NONE},
    {"self_attn.q_proj.weight", HF_IN_BLOCK, 0, P_QKVW, 0, HD_C, HD_C},
    {"self_attn.k_proj.weight", HF_IN_BLOCK, 0, P_QKVW, 0, HD_KV, HD_C},
    {"self_attn.v_proj.weight", HF_IN_BLOCK, 0, P_QKVW, 0, HD_KV, HD_C},
    {"self_attn.o_proj.weight", HF_IN_BLOCK, 0, P_ATTPROJW, 0, HD_C, HD_C},
    {"post_attention_layernorm.weight", HF_IN_BLOCK, 0, P_LN2W, 0, HD_C, HD_NONE},
    {"mlp.gate_proj.weight", HF_IN_BLOCK, 0, P_FCW, 0, HD_F, HD_C},
    {"mlp.up_proj.weight", HF_IN_BLOCK, 0, P_FCW, 0, HD_F, HD_C},
    {"mlp.down_proj.weight", HF_IN_BLOCK, 0, P_FCPROJW, 0, HD_C, HD_F},
    {"norm.weight", HF_AFTER_BLOCKS, 0, P_LNFW, 0, HD_C, HD_NONE},
    {"lm_head.weight", HF_AFTER_BLOCKS, 1, P_LMHEAD, 0, HD_V, HD_C}, // untied only (tied: lmhead has size 0)
};

// An architecture as transformers names it.
typedef struct {
    int arch;                 // ModelArch
    const char *display;      // in messages
    const char *model_type;   // config.json's "model_type"
    const char *class_name;   // config.json's "architectures"
    const char *prefix;       // the base model's prefix of every name but the bare ones
    const char *block;        // a block's name after the prefix, before its index
    const HfTensorSpec *tensors;
    int num_tensors;
} HfArch;

static const HfArch HF_ARCHS[] = {
    {ARCH_GPT2, "GPT-2", HF_GPT2_MODEL_TYPE, HF_GPT2_CLASS, HF_GPT2_PREFIX, "h.", HF_GPT2_TENSORS,
     (int)(sizeof(HF_GPT2_TENSORS) / sizeof(HF_GPT2_TENSORS[0]))},
    {ARCH_LLAMA, "Llama", HF_LLAMA_MODEL_TYPE, HF_LLAMA_CLASS, HF_LLAMA_PREFIX, "layers.", HF_LLAMA_TENSORS,
     (int)(sizeof(HF_LLAMA_TENSORS) / sizeof(HF_LLAMA_TENSORS[0]))},
};
#define HF_NUM_ARCHS ((int)(sizeof(HF_ARCHS) / sizeof(HF_ARCHS[0])))

static inline const HfArch *hf_arch_of(const GPTConfig *c) {
    for (int i = 0; i < HF_NUM_ARCHS; i++) {
        if (HF_ARCHS[i].arch == c->arch) { return &HF_ARCHS[i]; }
    }
    fail("architecture %d has no Hugging Face mapping: add its table here", c->arch);
    return NULL;
}

typedef struct {
    char name[HF_NAME_LEN]; // the full name, the base model's prefix included
    int param, layer;       // llm.c's tensor (P_*) and block (0 outside the blocks)
    long long row_offset;   // the first of llm.c's rows (of the block's slice) this tensor fills
    int transposed;
    int ndim;
    long long shape[2];     // HF's shape
} HfTensor;

static inline size_t hf_numel(const HfTensor *h) {
    return (size_t)h->shape[0] * (size_t)(h->ndim == 2 ? h->shape[1] : 1);
}

// Tensor spec s of layer `layer` (named with `name`), at row_offset of llm.c's tensor; HF's shape is llm.c's
// transposed for a Conv1D weight.
static inline void hf_tensor_set(HfTensor *h, const char *name, const HfTensorSpec *s, const GPTConfig *c, int layer,
                                 long long row_offset) {
    long long rows = hf_dim(c, s->rows), cols = hf_dim(c, s->cols);
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->param = s->param;
    h->layer = layer;
    h->row_offset = row_offset;
    h->transposed = s->transposed;
    h->ndim = cols ? 2 : 1;
    h->shape[0] = s->transposed ? cols : rows;
    h->shape[1] = s->transposed ? rows : cols;
}

// The specs of place `place` as tensors of layer `layer`; writes to out (when not NULL), returns their number. A
// tensor the description does not have (Llama's lm_head when tied) is left out.
static inline int hf_tensors_at(const GPTConfig *c, const HfArch *a, int place, int layer, HfTensor *out) {
    ParamLayout p;
    param_layout(c, &p);
    long long rows_used[NUM_PARAM_TENSORS] = {0};
    int n = 0;
    for (int k = 0; k < a->num_tensors; k++) {
        const HfTensorSpec *s = &a->tensors[k];
        if (s->place != place || p.size[s->param] == 0) { continue; }
        char name[HF_NAME_LEN];
        if (place == HF_IN_BLOCK) { snprintf(name, sizeof(name), "%s%s%d.%s", a->prefix, a->block, layer, s->name); }
        else { snprintf(name, sizeof(name), "%s%s", s->bare ? "" : a->prefix, s->name); }
        if (out) { hf_tensor_set(&out[n], name, s, c, layer, rows_used[s->param]); }
        rows_used[s->param] += hf_dim(c, s->rows);
        n++;
    }
    return n;
}

// All tensors of a model of config c in the module order of transformers' state_dict; returns their number (out
// NULL: only counts them).
static inline int hf_tensors(const GPTConfig *c, HfTensor *out) {
    const HfArch *a = hf_arch_of(c);
    int n = hf_tensors_at(c, a, HF_BEFORE_BLOCKS, 0, out);
    for (int l = 0; l < c->num_layers; l++) { n += hf_tensors_at(c, a, HF_IN_BLOCK, l, out ? out + n : NULL); }
    return n + hf_tensors_at(c, a, HF_AFTER_BLOCKS, 0, out ? out + n : NULL);
}

static inline int hf_num_tensors(const GPTConfig *c) { return hf_tensors(c, NULL); }

// Where tensor h's elements start in llm.c's flat parameters: its tensor, then its block's slice.
static inline size_t hf_llmc_offset(const HfTensor *h, const GPTConfig *c, const ParamLayout *p) {
    size_t cols = h->ndim == 2 ? (size_t)h->shape[h->transposed ? 0 : 1] : 1; // llm.c's columns
    return p->offset[h->param] + (size_t)h->layer * (p->size[h->param] / param_num_layers(c, h->param)) +
           (size_t)h->row_offset * cols;
}

// dst = src^T for src [rows, cols]. One thread: a fraction of a second for GPT-2 1558M, and OpenMP's threads would
// not survive a fork (the tests run imports in child processes).
static inline void hf_transpose(const float *src, float *dst, size_t rows, size_t cols) {
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < cols; j++) { dst[j * rows + i] = src[i * cols + j]; }
    }
}

// Tensor h in HF's layout, from llm.c's parameters.
static inline void hf_gather(const HfTensor *h, const GPTConfig *c, const ParamLayout *p, const float *params,
                             float *dst) {
    const float *src = params + hf_llmc_offset(h, c, p);
    if (h->transposed) { hf_transpose(src, dst, (size_t)h->shape[1], (size_t)h->shape[0]); }
    else { memcpy(dst, src, hf_numel(h) * sizeof(float)); }
}

// Tensor h from HF's layout into llm.c's parameters.
static inline void hf_scatter(const HfTensor *h, const GPTConfig *c, const ParamLayout *p, const float *src,
                              float *params) {
    float *dst = params + hf_llmc_offset(h, c, p);
    if (h->transposed) { hf_transpose(src, dst, (size_t)h->shape[0], (size_t)h->shape[1]); }
    else { memcpy(dst, src, hf_numel(h) * sizeof(float)); }
}

// name without its base model's prefix ("transformer.", "model."): transformers loads a base model's checkpoint,
// whose names lack it, into the model with a head, and so does the import.
static inline const char *hf_short_name(const char *name) {
    for (int i = 0; i < HF_NUM_ARCHS; i++) {
        size_t n = strlen(HF_ARCHS[i].prefix);
        if (strncmp(name, HF_ARCHS[i].prefix, n) == 0) { return name + n; }
    }
    return name;
}

// h.{i}.attn.bias and h.{i}.attn.masked_bias: the causal mask and its fill value, buffers older versions saved.
static inline int hf_is_mask_buffer(const char *short_name) {
    int layer, end = 0;
    if (sscanf(short_name, "h.%d.attn.bias%n", &layer, &end) == 1 && end > 0 && short_name[end] == '\0') { return 1; }
    end = 0;
    return sscanf(short_name, "h.%d.attn.masked_bias%n", &layer, &end) == 1 && end > 0 && short_name[end] == '\0';
}

/* ---------------------------------------------------------------------------------------------------------
 * Files and folders.
 */
static inline void hf_path(char *out, const char *dir, const char *name) {
    if (snprintf(out, HF_PATH_LEN, "%s/%s", dir, name) >= HF_PATH_LEN) { fail("path too long: '%s/%s'", dir, name); }
}

// Writes n bytes to path atomically.
static inline void hf_write_file(const char *path, const void *data, size_t n) {
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, data, 1, n);
    atomic_commit(&af);
}

static inline int hf_dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) { fail("cannot read folder '%s': %s", dir, strerror(errno)); }
    int empty = 1;
    for (struct dirent *e = readdir(d); e && empty; e = readdir(d)) {
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    }
    closedir(d);
    return empty;
}

// A weights file an export writes: model.safetensors, its index, or a shard model-0000k-of-0000n.safetensors.
static inline int hf_is_weights_file(const char *name) {
    int k, n, end = 0;
    if (strcmp(name, HF_WEIGHTS_FILE) == 0 || strcmp(name, HF_INDEX_FILE) == 0) { return 1; }
    return sscanf(name, HF_SHARD_SCAN, &k, &n, &end) == 2 && end > 0 && name[end] == '\0';
}

/* ---------------------------------------------------------------------------------------------------------
 * config.json
 */

// A JSON file as read: its tree, and its text, which the tree's spans index (messages quote values as written).
typedef struct {
    const char *path;
    char *text;
    JsonValue root;
} HfJsonFile;

// Reads and parses path, which must hold an object; fails naming it.
static inline void hf_read_json(HfJsonFile *f, const char *path, const char *hint) {
    size_t n;
    f->path = path;
    f->text = read_whole_file(path, &n, hint);
    JsonError err;
    if (!json_parse(f->text, n, &f->root, &err)) {
        fail("'%s' is not valid JSON (%s at byte %zu); %s", path, err.what, err.pos, hint);
    }
    if (f->root.type != JSON_OBJECT) {
        fail("'%s' holds %s, not an object; %s", path, json_type_name(f->root.type), hint);
    }
}

static inline void hf_json_free(HfJsonFile *f) {
    json_free(&f->root);
    free(f->text);
}

#define HF_VALUE_SHOWN 64 // bytes of a value that a message quotes

// Member `key` of object obj of f as written in the file ("(none)" where absent), into out[HF_VALUE_SHOWN].
static inline const char *hf_shown_in(const HfJsonFile *f, const JsonValue *obj, const char *key, char *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v) { return strcpy(out, "(none)"); }
    return json_source(v, f->text, out, HF_VALUE_SHOWN);
}

// The same, of the file's top-level object.
static inline const char *hf_json_shown(const HfJsonFile *f, const char *key, char *out) {
    return hf_shown_in(f, &f->root, key, out);
}

// A config.json as read, and the architecture its model_type names.
typedef struct {
    HfJsonFile file;
    const HfArch *arch;
} HfConfigFile;

static inline int hf_config_int_in(const HfConfigFile *cfg, const JsonValue *obj, const char *key, long long lo,
                                   long long hi) {
    const JsonValue *v = json_get(obj, key);
    if (!v) {
        fail("'%s' has no %s: it is not a %s config.json; " HF_HINT, cfg->file.path, key, cfg->arch->display);
    }
    if (v->type != JSON_NUMBER || !v->is_int || v->integer < lo || v->integer > hi) {
        char have[HF_VALUE_SHOWN];
        fail("'%s': %s is %s, not an integer in [%lld, %lld]", cfg->file.path, key,
             hf_shown_in(&cfg->file, obj, key, have), lo, hi);
    }
    return (int)v->integer;
}

static inline int hf_config_int(const HfConfigFile *cfg, const char *key, long long lo, long long hi) {
    return hf_config_int_in(cfg, &cfg->file.root, key, lo, hi);
}

// A number config.json must have (config_check judges its range with the rest of the description).
static inline double hf_config_number_in(const HfConfigFile *cfg, const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    if (!v) {
        fail("'%s' has no %s: it is not a %s config.json; " HF_HINT, cfg->file.path, key, cfg->arch->display);
    }
    if (v->type != JSON_NUMBER) {
        char have[HF_VALUE_SHOWN];
        fail("'%s': %s is %s, not a number", cfg->file.path, key, hf_shown_in(&cfg->file, obj, key, have));
    }
    return v->number;
}

// An optional boolean that changes the model's arithmetic: refused unless absent or `want`.
static inline void hf_config_bool(const HfConfigFile *cfg, const char *key, int want) {
    const JsonValue *v = json_get(&cfg->file.root, key);
    if (!v || (v->type == JSON_BOOL && v->boolean == want)) { return; }
    char have[HF_VALUE_SHOWN];
    fail("'%s' has %s = %s, but %s as train_gpt computes it has %s; this model cannot be converted", cfg->file.path,
         key, hf_json_shown(&cfg->file, key, have), cfg->arch->display, want ? "true" : "false");
}

// An optional string setting: refused unless absent or one of want1, want2 (want2 may be NULL).
static inline void hf_config_string(const HfConfigFile *cfg, const char *key, const char *want1, const char *want2,
                                    const char *what) {
    const JsonValue *v = json_get(&cfg->file.root, key);
    if (!v || json_is_string(v, want1) || (want2 && json_is_string(v, want2))) { return; }
    char have[HF_VALUE_SHOWN];
    fail("'%s' has %s %s, but train_gpt computes %s (\"%s\"); this model cannot be converted", cfg->file.path, key,
         hf_json_shown(&cfg->file, key, have), what, want1);
}

// GPT-2's shape; the rest is llm.c's GPT-2, and config.json must not say otherwise.
static inline GPTConfig hf_config_gpt2(const HfConfigFile *cfg) {
    char have[HF_VALUE_SHOWN];
    GPTConfig c;
    c.num_layers = hf_config_int(cfg, "n_layer", 1, MAX_LAYERS);
    c.channels = hf_config_int(cfg, "n_embd", 1, MAX_CHANNELS);
    c.num_heads = hf_config_int(cfg, "n_head", 1, MAX_CHANNELS);
    c.vocab_size = hf_config_int(cfg, "vocab_size", 1, MAX_VOCAB_SIZE);
    // n_ctx is what configs from before transformers 4 called it
    const char *positions = json_get(&cfg->file.root, "n_positions") ? "n_positions" : "n_ctx";
    c.max_seq_len = hf_config_int(cfg, positions, 1, MAX_POSITIONS);
    c = config_gpt2(c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels); // the rest is GPT-2's
    if (c.channels % c.num_heads != 0) {
        fail("'%s': n_embd %d is not divisible by n_head %d; the config is corrupt", cfg->file.path, c.channels,
             c.num_heads);
    }
    if (c.vocab_size != GPT2_VOCAB_SIZE) {
        fail("'%s' has vocab_size %d, but train_gpt's models use GPT-2's vocabulary of %d tokens; a model with another "
             "vocabulary cannot be imported", cfg->file.path, c.vocab_size, GPT2_VOCAB_SIZE);
    }
    hf_config_string(cfg, "activation_function", "gelu_new", "gelu_pytorch_tanh", "GELU's tanh approximation");
    const JsonValue *eps = json_get(&cfg->file.root, "layer_norm_epsilon");
    if (eps && (eps->type != JSON_NUMBER ||
                fabs(eps->number - HF_LAYER_NORM_EPS) > HF_LAYER_NORM_EPS_RTOL * HF_LAYER_NORM_EPS)) {
        fail("'%s' has layer_norm_epsilon %s, but train_gpt's LayerNorm uses %g; this model cannot be converted",
             cfg->file.path, hf_json_shown(&cfg->file, "layer_norm_epsilon", have), HF_LAYER_NORM_EPS);
    }
    ParamLayout p;
    param_layout(&c, &p);
    long long mlp_width = (long long)(p.size[P_FCB] / (size_t)c.num_layers); // GPT-2's 4 x n_embd
    const JsonValue *inner = json_get(&cfg->file.root, "n_inner");
    if (inner && inner->type != JSON_NULL &&
        !(inner->type == JSON_NUMBER && inner->is_int && inner->integer == mlp_width)) {
        fail("'%s' has n_inner %s, not null or %lld (4 x n_embd), GPT-2's MLP width; this model cannot be converted",
             cfg->file.path, hf_json_shown(&cfg->file, "n_inner", have), mlp_width);
    }
    hf_config_bool(cfg, "scale_attn_weights", 1);
    hf_config_bool(cfg, "scale_attn_by_inverse_layer_idx", 0);
    hf_config_bool(cfg, "add_cross_attention", 0);
    return c;
}

// Rotary scaling from object s, config.json's member `key`: null (or absent), rope_type "default" (none), or Llama
// 3.1's "llama3" (named by rope_type, or type in older configs).
static inline RopeScaling hf_config_rope_scaling(const HfConfigFile *cfg, const JsonValue *s, const char *key) {
    RopeScaling r;
    memset(&r, 0, sizeof(r));
    if (!s || s->type == JSON_NULL) { return r; }
    const char *type_key = json_get(s, "rope_type") ? "rope_type" : "type";
    if (s->type == JSON_OBJECT && json_is_string(json_get(s, type_key), "default")) { return r; }
    if (s->type != JSON_OBJECT || !json_is_string(json_get(s, type_key), "llama3")) {
        char have[HF_VALUE_SHOWN];
        fail("'%s' has %s %s, but train_gpt computes only no scaling or rope_type \"llama3\"; this model cannot be "
             "converted", cfg->file.path, key, hf_json_shown(&cfg->file, key, have));
    }
    r.type = ROPE_SCALING_LLAMA3;
    r.factor = (float)hf_config_number_in(cfg, s, "factor");
    r.low_freq_factor = (float)hf_config_number_in(cfg, s, "low_freq_factor");
    r.high_freq_factor = (float)hf_config_number_in(cfg, s, "high_freq_factor");
    r.original_max_pos = hf_config_int_in(cfg, s, "original_max_position_embeddings", 1, MAX_POSITIONS);
    return r;
}

// LlamaForCausalLM's description. num_key_value_heads and tie_word_embeddings take LlamaConfig's defaults where
// absent (heads, false); a head_dim other than hidden / heads, biases or another activation are refused.
static inline GPTConfig hf_config_llama(const HfConfigFile *cfg) {
    const JsonValue *root = &cfg->file.root;
    int layers = hf_config_int(cfg, "num_hidden_layers", 1, MAX_LAYERS);
    int channels = hf_config_int(cfg, "hidden_size", 1, MAX_CHANNELS);
    int heads = hf_config_int(cfg, "num_attention_heads", 1, MAX_CHANNELS);
    GPTConfig c = config_default(ARCH_LLAMA, hf_config_int(cfg, "max_position_embeddings", 1, MAX_POSITIONS), layers,
                                 heads, channels);
    c.num_kv_heads = json_get(root, "num_key_value_heads") ? hf_config_int(cfg, "num_key_value_heads", 1, heads)
                                                           : heads;
    c.ffn_hidden = hf_config_int(cfg, "intermediate_size", 1, MAX_FFN_HIDDEN);
    c.vocab_size = hf_config_int(cfg, "vocab_size", 1, MAX_VOCAB_SIZE);
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    c.norm_eps = hf_config_number_in(cfg, root, "rms_norm_eps");
    const JsonValue *rope = json_get(root, "rope_parameters"); // transformers 5: theta and scaling in one object
    if (rope && rope->type == JSON_OBJECT && !json_get(root, "rope_theta")) {
        c.rope_theta = (float)hf_config_number_in(cfg, rope, "rope_theta");
        c.rope_scaling = hf_config_rope_scaling(cfg, rope, "rope_parameters");
    } else {
        c.rope_theta = (float)hf_config_number_in(cfg, root, "rope_theta");
        c.rope_scaling = hf_config_rope_scaling(cfg, json_get(root, "rope_scaling"), "rope_scaling");
    }
    const JsonValue *tied = json_get(root, "tie_word_embeddings");
    if (tied && tied->type != JSON_BOOL) {
        char have[HF_VALUE_SHOWN];
        fail("'%s': tie_word_embeddings is %s, not true or false", cfg->file.path,
             hf_json_shown(&cfg->file, "tie_word_embeddings", have));
    }
    c.tied = tied && tied->boolean;
    const JsonValue *head_dim = json_get(root, "head_dim");
    if (head_dim && head_dim->type != JSON_NULL &&
        !(head_dim->type == JSON_NUMBER && head_dim->is_int && channels % heads == 0 &&
          head_dim->integer == channels / heads)) {
        char have[HF_VALUE_SHOWN];
        fail("'%s' has head_dim %s, but train_gpt's heads are hidden_size / num_attention_heads (%d / %d); this model "
             "cannot be converted", cfg->file.path, hf_json_shown(&cfg->file, "head_dim", have), channels, heads);
    }
    hf_config_bool(cfg, "attention_bias", 0);
    hf_config_bool(cfg, "mlp_bias", 0);
    hf_config_string(cfg, "hidden_act", "silu", NULL, "SwiGLU's SiLU");
    char why[512];
    if (!config_check(&c, why, sizeof(why))) {
        fail("'%s' describes a model train_gpt cannot build: %s", cfg->file.path, why);
    }
    return c;
}

// The model's description from <dir>/config.json, with every setting that would make it another model refused.
// Values are quoted as the file writes them: a message shows what is in the file.
static inline GPTConfig hf_config_read(const char *dir) {
    char path[HF_PATH_LEN], have[HF_VALUE_SHOWN];
    hf_path(path, dir, HF_CONFIG_FILE);
    HfConfigFile cfg;
    hf_read_json(&cfg.file, path, "HF_DIR must be a Hugging Face model folder; " HF_HINT);
    cfg.arch = NULL;
    for (int i = 0; i < HF_NUM_ARCHS && !cfg.arch; i++) {
        if (json_is_string(json_get(&cfg.file.root, "model_type"), HF_ARCHS[i].model_type)) { cfg.arch = &HF_ARCHS[i]; }
    }
    if (!cfg.arch) {
        fail("'%s' has model_type %s, not \"" HF_GPT2_MODEL_TYPE "\" or \"" HF_LLAMA_MODEL_TYPE "\": only GPT-2 and "
             "Llama models can be imported", path, hf_json_shown(&cfg.file, "model_type", have));
    }
    const JsonValue *classes = json_get(&cfg.file.root, "architectures");
    if (classes && !(classes->type == JSON_ARRAY && classes->count == 1 &&
                     json_is_string(&classes->items[0], cfg.arch->class_name))) {
        fail("'%s' has architectures %s, not [\"%s\"]: only the language model with its head converts", path,
             hf_json_shown(&cfg.file, "architectures", have), cfg.arch->class_name);
    }
    GPTConfig c = cfg.arch->arch == ARCH_GPT2 ? hf_config_gpt2(&cfg) : hf_config_llama(&cfg);
    hf_json_free(&cfg.file);
    return c;
}

// config.json as transformers' save_pretrained writes it for GPT2LMHeadModel (keys sorted, indent 2). The dropouts
// are 0: train_gpt trains without dropout (set them for fine-tuning with it).
static inline void hf_config_json_gpt2(JsonText *t, const GPTConfig *c, const char *torch_dtype) {
    json_text_printf(t,
                     "{\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"architectures\": [\n"
                     "    \"" HF_GPT2_CLASS "\"\n"
                     "  ],\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"bos_token_id\": %d,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"eos_token_id\": %d,\n"
                     "  \"initializer_range\": %g,\n"
                     "  \"layer_norm_epsilon\": %g,\n"
                     "  \"model_type\": \"" HF_GPT2_MODEL_TYPE "\",\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": null,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"summary_activation\": null,\n"
                     "  \"summary_first_dropout\": 0.1,\n"
                     "  \"summary_proj_to_labels\": true,\n"
                     "  \"summary_type\": \"cls_index\",\n"
                     "  \"summary_use_proj\": true,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"torch_dtype\": \"%s\",\n"
                     "  \"use_cache\": true,\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     GPT2_EOT_TOKEN, GPT2_EOT_TOKEN, (double)INIT_STD, HF_LAYER_NORM_EPS, c->max_seq_len, c->channels,
                     c->num_heads, c->num_layers, c->max_seq_len, torch_dtype, c->vocab_size);
}

// A float as Python writes one (json.dumps(float)): an integer below 10^16 with ".0", so that transformers' checks
// of rope_scaling see floats; otherwise the shortest text that reads back as x. Into out[32].
#define HF_FLOAT_INTEGER_LIMIT 1e16 // where Python's repr turns to an exponent
static inline const char *hf_float_text(double x, char *out) {
    if (x == floor(x) && fabs(x) < HF_FLOAT_INTEGER_LIMIT) {
        snprintf(out, 32, "%.1f", x);
        return out;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(out, 32, "%.*g", digits, x);
        if (strtod(out, NULL) == x) { break; }
    }
    return out;
}

// config.json as save_pretrained writes it for LlamaForCausalLM (keys sorted, indent 2); no bos/eos token ids (the
// export carries no tokenizer), no dropout.
static inline void hf_config_json_llama(JsonText *t, const GPTConfig *c, const char *torch_dtype) {
    char eps[32], theta[32], scaling[512] = "null";
    const RopeScaling *r = &c->rope_scaling;
    if (r->type == ROPE_SCALING_LLAMA3) {
        char factor[32], low[32], high[32];
        snprintf(scaling, sizeof(scaling),
                 "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
                 "    \"original_max_position_embeddings\": %d,\n    \"rope_type\": \"llama3\"\n  }",
                 hf_float_text(r->factor, factor), hf_float_text(r->high_freq_factor, high),
                 hf_float_text(r->low_freq_factor, low), r->original_max_pos);
    }
    json_text_printf(t,
                     "{\n"
                     "  \"architectures\": [\n"
                     "    \"" HF_LLAMA_CLASS "\"\n"
                     "  ],\n"
                     "  \"attention_bias\": false,\n"
                     "  \"attention_dropout\": 0.0,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"hidden_act\": \"silu\",\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"initializer_range\": %g,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"mlp_bias\": false,\n"
                     "  \"model_type\": \"" HF_LLAMA_MODEL_TYPE "\",\n"
                     "  \"num_attention_heads\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n"
                     "  \"pretraining_tp\": 1,\n"
                     "  \"rms_norm_eps\": %s,\n"
                     "  \"rope_scaling\": %s,\n"
                     "  \"rope_theta\": %s,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"torch_dtype\": \"%s\",\n"
                     "  \"use_cache\": true,\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     config_head_size(c), c->channels, (double)INIT_STD, c->ffn_hidden, c->max_seq_len, c->num_heads,
                     c->num_layers, c->num_kv_heads, hf_float_text(c->norm_eps, eps), scaling,
                     hf_float_text(c->rope_theta, theta), c->tied ? "true" : "false", torch_dtype, c->vocab_size);
}

static inline void hf_config_json(JsonText *t, const GPTConfig *c, const char *torch_dtype) {
    if (c->arch == ARCH_GPT2) { hf_config_json_gpt2(t, c, torch_dtype); }
    else { hf_config_json_llama(t, c, torch_dtype); }
}

/* ---------------------------------------------------------------------------------------------------------
 * Import: a Hugging Face folder into an llm.c model file.
 */
typedef struct {
    StFile *files;
    size_t nfiles;
    char where[HF_PATH_LEN]; // model.safetensors or the index, for messages
} HfSource;

typedef struct {
    const StFile *file;
    const StTensor *t;
} HfFound;

static inline int hf_cmp_short_names(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    return strcmp(hf_short_name(x->name), hf_short_name(y->name));
}

// Refuses a tensor present twice: with and without "transformer.", or in two shards.
static inline void hf_source_check_unique(const HfSource *s) {
    size_t n = 0;
    for (size_t f = 0; f < s->nfiles; f++) { n += s->files[f].count; }
    const StTensor **all = (const StTensor **)malloc_check(n * sizeof(*all), "tensor list");
    n = 0;
    for (size_t f = 0; f < s->nfiles; f++) {
        for (size_t i = 0; i < s->files[f].count; i++) { all[n++] = &s->files[f].tensors[i]; }
    }
    qsort(all, n, sizeof(*all), hf_cmp_short_names);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(hf_short_name(all[i]->name), hf_short_name(all[i - 1]->name)) == 0) {
            fail("'%s' holds tensor '%s' twice (as '%s' and '%s'); " HF_HINT, s->where, hf_short_name(all[i]->name),
                 all[i - 1]->name, all[i]->name);
        }
    }
    free(all);
}

// A file name inside the folder: no path separator, not "." or "..".
static inline int hf_is_plain_file_name(const char *name, size_t len) {
    return len > 0 && strlen(name) == len && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

// The shards that <dir>/model.safetensors.index.json lists, each checked; every tensor of its weight_map must be in
// the shard it names.
static inline void hf_source_open_index(HfSource *s, const char *dir) {
    HfJsonFile index;
    hf_read_json(&index, s->where, HF_HINT);
    const JsonValue *map = json_get(&index.root, "weight_map");
    if (!map || map->type != JSON_OBJECT || map->count == 0) {
        fail("'%s' has no \"weight_map\" object naming each tensor's shard; " HF_HINT, s->where);
    }
    s->files = (StFile *)calloc_check(map->count, sizeof(StFile), "shards");
    const char **names = (const char **)calloc_check(map->count, sizeof(char *), "shard names");
    for (size_t i = 0; i < map->count; i++) {
        const JsonValue *m = &map->items[i];
        if (m->type != JSON_STRING || !hf_is_plain_file_name(m->str, m->len)) {
            char shown[HF_VALUE_SHOWN];
            fail("'%s' places tensor '%s' in %s, which is not the name of a file beside it; " HF_HINT, s->where,
                 m->key, json_source(m, index.text, shown, sizeof(shown)));
        }
        size_t f = 0;
        while (f < s->nfiles && strcmp(names[f], m->str) != 0) { f++; }
        if (f == s->nfiles) {
            char path[HF_PATH_LEN];
            hf_path(path, dir, m->str);
            st_open(&s->files[s->nfiles], path);
            names[s->nfiles++] = m->str;
        }
        if (!st_find(&s->files[f], m->key)) {
            fail("'%s' places tensor '%s' in '%s', which has no such tensor: the index and the shards do not match; "
                 HF_HINT, s->where, m->key, s->files[f].path);
        }
    }
    free(names);
    hf_json_free(&index);
}

// Opens <dir>/model.safetensors, or the shards its index lists where there is no single file.
static inline void hf_source_open(HfSource *s, const char *dir) {
    memset(s, 0, sizeof(*s));
    hf_path(s->where, dir, HF_WEIGHTS_FILE);
    if (file_exists(s->where)) {
        s->files = (StFile *)calloc_check(1, sizeof(StFile), "weights file");
        st_open(&s->files[0], s->where);
        s->nfiles = 1;
    } else {
        hf_path(s->where, dir, HF_INDEX_FILE);
        if (!file_exists(s->where)) {
            fail("'%s' holds neither " HF_WEIGHTS_FILE " nor " HF_INDEX_FILE " (pytorch_model.bin is not read); "
                 HF_HINT, dir);
        }
        hf_source_open_index(s, dir);
    }
    hf_source_check_unique(s);
}

static inline void hf_source_close(HfSource *s) {
    for (size_t f = 0; f < s->nfiles; f++) { st_close(&s->files[f]); }
    free(s->files);
    memset(s, 0, sizeof(*s));
}

// The tensor named `name`, with or without the "transformer." prefix (returns 0 if absent).
static inline int hf_source_find(const HfSource *s, const char *name, HfFound *out) {
    const char *want = hf_short_name(name);
    for (size_t f = 0; f < s->nfiles; f++) {
        for (size_t i = 0; i < s->files[f].count; i++) {
            if (strcmp(hf_short_name(s->files[f].tensors[i].name), want) == 0) {
                out->file = &s->files[f];
                out->t = &s->files[f].tensors[i];
                return 1;
            }
        }
    }
    return 0;
}

// Reads the found tensor into buf as fp32, checking its shape against `shape` and its values for finiteness.
static inline void hf_read_checked(const HfSource *s, const HfFound *found, int ndim, const long long *shape,
                                   const GPTConfig *c, float *buf) {
    const StTensor *t = found->t;
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) { same = t->shape[d] == shape[d]; }
    if (!same) {
        char have[256], want[256], model[512];
        config_describe(c, model, sizeof(model));
        fail("'%s': tensor '%s' has shape %s, but config.json's model (%d layers, %d channels, %d heads, %d positions, "
             "vocabulary %d; %s) needs %s%s", found->file->path, t->name,
             st_shape_str(t->shape, t->ndim, have, sizeof(have)), c->num_layers, c->channels, c->num_heads,
             c->max_seq_len, c->vocab_size, model, st_shape_str(shape, ndim, want, sizeof(want)),
             c->arch == ARCH_GPT2 ? " (Conv1D weights are [in, out])" : "");
    }
    st_read_f32(found->file, t, buf);
    size_t n = st_numel(t);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(buf[i])) {
            fail("'%s': element %zu of tensor '%s' is %g; the checkpoint holds non-finite weights, use another one",
                 s->where, i, t->name, (double)buf[i]);
        }
    }
}

// The tensors that are not the model's weights: with a tied head, an lm_head.weight equal to the token embedding
// (hts[0]), and GPT-2's mask buffers are accepted; anything else means another model. Prints what it accepted.
static inline void hf_check_other_tensors(const HfSource *s, const HfTensor *hts, int n, const GPTConfig *c,
                                          const ParamLayout *p, const float *params, float *buf) {
    const HfArch *a = hf_arch_of(c);
    int buffers = 0;
    for (size_t f = 0; f < s->nfiles; f++) {
        for (size_t i = 0; i < s->files[f].count; i++) {
            const char *name = s->files[f].tensors[i].name, *short_name = hf_short_name(name);
            int known = 0;
            for (int k = 0; k < n && !known; k++) { known = strcmp(hf_short_name(hts[k].name), short_name) == 0; }
            if (known) { continue; }
            if (c->arch == ARCH_GPT2 && hf_is_mask_buffer(short_name)) { buffers++; continue; }
            if (strcmp(name, HF_LM_HEAD) != 0) { // untied, the head is one of hts
                fail("'%s' holds tensor '%s', which %s (%s) does not have: this is another model, which this tool "
                     "does not convert", s->where, name, a->display, a->class_name);
            }
            HfFound found = {&s->files[f], &s->files[f].tensors[i]};
            hf_read_checked(s, &found, hts[0].ndim, hts[0].shape, c, buf); // wte's shape
            size_t wte = hf_numel(&hts[0]);
            const float *ours = params + hf_llmc_offset(&hts[0], c, p);
            for (size_t e = 0; e < wte; e++) {
                if (buf[e] != ours[e]) {
                    fail("'%s': " HF_LM_HEAD " differs from the token embedding (%s) at element %zu (%.9g vs %.9g): "
                         "this model's output head is not tied to its embedding, as config.json says, and cannot be "
                         "converted", s->where, hts[0].name, e, (double)buf[e], (double)ours[e]);
                }
            }
            printf("note: " HF_LM_HEAD " equals the token embedding (tied): not stored separately\n");
        }
    }
    if (buffers > 0) {
        printf("note: ignored %d attention-mask buffers (h.N.attn.bias, h.N.attn.masked_bias): constants, not "
               "weights\n", buffers);
    }
}

// The options of train_gpt that build description c from its shape: the architecture's defaults are left out.
static inline void hf_train_options(const GPTConfig *c, char *out, size_t cap) {
    GPTConfig base = config_default((ModelArch)c->arch, c->max_seq_len, c->num_layers, c->num_heads, c->channels);
    int gpt2 = c->arch == ARCH_GPT2; // the default architecture
    size_t len = (size_t)snprintf(out, cap, "%s%s --depth %d --width %d --heads %d", gpt2 ? "" : " --arch ",
                                  gpt2 ? "" : ARCH_NAMES[c->arch], c->num_layers, c->channels, c->num_heads);
    for (int i = 0; i < NUM_CONFIG_FIELDS && len < cap; i++) {
        const char *option = CONFIG_FIELDS[i].option;
        if (i == CF_MAX_SEQ_LEN || i == CF_PADDED_VOCAB_SIZE || strcmp(option, "--arch") == 0 ||
            config_field_equal(c, &base, i)) {
            continue;
        }
        char value[32];
        config_field_format(c, i, value, sizeof(value));
        len += (size_t)snprintf(out + len, cap - len, " %s %s", option, value);
    }
}

// Converts the Hugging Face folder hf_dir (GPT-2 or Llama) into the llm.c model file out_path (fp32; the vocabulary
// padded to Vp rows of zeros as train_gpt writes it). An existing out_path is replaced only with force.
static inline void hf_import(const char *hf_dir, const char *out_path, int force) {
    if (!force && file_exists(out_path)) {
        fail("'%s' exists; pass --force to replace it, or choose another MODEL.bin", out_path);
    }
    GPTConfig c = hf_config_read(hf_dir);
    const HfArch *a = hf_arch_of(&c);
    HfSource src;
    hf_source_open(&src, hf_dir);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = (float *)calloc_check(p.total, sizeof(float), "imported parameters"); // pad rows stay zero
    int n = hf_num_tensors(&c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensor list");
    hf_tensors(&c, hts);
    size_t largest = 0, total = 0;
    for (int i = 0; i < n; i++) {
        largest = hf_numel(&hts[i]) > largest ? hf_numel(&hts[i]) : largest;
        total += hf_numel(&hts[i]);
    }
    float *buf = (float *)malloc_check(largest * sizeof(float), "tensor buffer");
    for (int i = 0; i < n; i++) {
        HfFound found;
        if (!hf_source_find(&src, hts[i].name, &found)) {
            fail("'%s' has no tensor '%s' (nor '%s'): it is not a complete %s checkpoint of config.json's shape; "
                 HF_HINT, src.where, hts[i].name, hf_short_name(hts[i].name), a->display);
        }
        hf_read_checked(&src, &found, hts[i].ndim, hts[i].shape, &c, buf);
        hf_scatter(&hts[i], &c, &p, buf, params);
    }
    hf_check_other_tensors(&src, hts, n, &c, &p, params, buf);
    model_file_write(out_path, &c, params);
    char options[1024];
    hf_train_options(&c, options, sizeof(options));
    printf("wrote '%s': %s of %d layers, %d channels, %d heads, %d positions, %zu parameters (fp32), from '%s'\n"
           "train from it with: --init-from %s%s --seq-len <= %d\n",
           out_path, a->display, c.num_layers, c.channels, c.num_heads, c.max_seq_len, total, src.where, out_path,
           options, c.max_seq_len);
    free(buf);
    free(hts);
    free(params);
    hf_source_close(&src);
}

/* ---------------------------------------------------------------------------------------------------------
 * Export: an llm.c model file into a Hugging Face folder.
 */
typedef struct {
    const char *model_path, *out_dir, *vocab_dir;
    int bf16;                  // weights in BF16 (rounded to nearest even), else F32
    long long max_shard_bytes; // > 0: shards of at most this many bytes (a larger tensor goes alone), as HF does
    int force;                 // write into a non-empty out_dir
} HfExportOptions;

// The export's folder may be absent (hf_export makes it) or a folder; one that holds anything is used only with force.
static inline void hf_check_out_dir(const char *dir, int force) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) { fail("'%s' exists and is not a folder; choose another OUT_DIR", dir); }
        if (!force && !hf_dir_is_empty(dir)) {
            fail("'%s' exists and is not empty; pass --force to write the export into it (files of the same names are "
                 "replaced), or choose another OUT_DIR", dir);
        }
    }
}

static const HfTensor *g_hf_tensor_base; // qsort has no context argument
static inline int hf_cmp_tensor_names(const void *a, const void *b) {
    return strcmp(g_hf_tensor_base[*(const int *)a].name, g_hf_tensor_base[*(const int *)b].name);
}

// Writes the tensors members[0..count) of hts to one safetensors file, sorted by name as safetensors' own writer
// orders them. Returns the bytes of tensor data.
static inline uint64_t hf_write_weights(const char *path, const HfTensor *hts, int *members, int count,
                                        const GPTConfig *c, const ParamLayout *p, const float *params, int bf16) {
    g_hf_tensor_base = hts;
    qsort(members, (size_t)count, sizeof(int), hf_cmp_tensor_names);
    StSpec *specs = (StSpec *)calloc_check((size_t)count, sizeof(StSpec), "tensor specs");
    size_t largest = 0;
    for (int i = 0; i < count; i++) {
        const HfTensor *h = &hts[members[i]];
        specs[i].name = h->name;
        specs[i].dtype = bf16 ? ST_BF16 : ST_F32;
        specs[i].ndim = h->ndim;
        memcpy(specs[i].shape, h->shape, sizeof(h->shape));
        largest = hf_numel(h) > largest ? hf_numel(h) : largest;
    }
    float *buf = (float *)malloc_check(largest * sizeof(float), "tensor buffer");
    uint16_t *half = bf16 ? (uint16_t *)malloc_check(largest * sizeof(uint16_t), "bf16 buffer") : NULL;
    StWriter w;
    st_writer_open(&w, path, specs, (size_t)count, HF_SAFETENSORS_FORMAT);
    uint64_t bytes = 0;
    for (int i = 0; i < count; i++) {
        const HfTensor *h = &hts[members[i]];
        size_t n = hf_numel(h);
        hf_gather(h, c, p, params, buf);
        if (bf16) {
            for (size_t e = 0; e < n; e++) { half[e] = f32_to_bf16(buf[e]); }
            st_writer_tensor(&w, half, n * sizeof(uint16_t));
        } else {
            st_writer_tensor(&w, buf, n * sizeof(float));
        }
        bytes += n * (bf16 ? sizeof(uint16_t) : sizeof(float));
    }
    st_writer_close(&w);
    free(half);
    free(buf);
    free(specs);
    return bytes;
}

// Which shard each tensor goes to (in module order, as transformers splits a state_dict); returns the number of
// shards. A tensor goes to the current shard unless that would pass max_bytes; one larger than max_bytes goes alone.
static inline int hf_plan_shards(const HfTensor *hts, int n, int bytes_per_elem, long long max_bytes, int *shard_of) {
    int shards = 1;
    long long used = 0;
    for (int i = 0; i < n; i++) {
        long long size = (long long)hf_numel(&hts[i]) * bytes_per_elem;
        if (max_bytes > 0 && used > 0 && used + size > max_bytes) {
            shards++;
            used = 0;
        }
        shard_of[i] = shards - 1;
        used += size;
    }
    return shards;
}

// model.safetensors.index.json as transformers writes it (keys sorted, indent 2).
static inline void hf_index_json(JsonText *t, const HfTensor *hts, int n, const int *shard_of, int shards,
                                 uint64_t total_bytes) {
    int *order = (int *)malloc_check((size_t)n * sizeof(int), "tensor order");
    for (int i = 0; i < n; i++) { order[i] = i; }
    g_hf_tensor_base = hts;
    qsort(order, (size_t)n, sizeof(int), hf_cmp_tensor_names);
    json_text_printf(t, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                     (unsigned long long)total_bytes);
    for (int i = 0; i < n; i++) {
        char file[HF_NAME_LEN];
        snprintf(file, sizeof(file), HF_SHARD_FORMAT, shard_of[order[i]] + 1, shards);
        json_text_printf(t, "    ");
        json_text_string(t, hts[order[i]].name);
        json_text_printf(t, ": \"%s\"%s\n", file, i + 1 < n ? "," : "");
    }
    json_text_printf(t, "  }\n}\n");
    free(order);
}

// The weights: one file, or shards and their index. Writes the names of the files into written (returns how many).
static inline int hf_export_weights(const HfExportOptions *o, const GPTConfig *c, const float *params,
                                    char (*written)[HF_NAME_LEN]) {
    ParamLayout p;
    param_layout(c, &p);
    int n = hf_num_tensors(c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensor list");
    hf_tensors(c, hts);
    int *shard_of = (int *)malloc_check((size_t)n * sizeof(int), "shard plan");
    int *members = (int *)malloc_check((size_t)n * sizeof(int), "shard members");
    int shards = hf_plan_shards(hts, n, o->bf16 ? (int)sizeof(uint16_t) : (int)sizeof(float), o->max_shard_bytes,
                                shard_of);
    uint64_t total = 0;
    for (int s = 0; s < shards; s++) {
        int count = 0;
        for (int i = 0; i < n; i++) {
            if (shard_of[i] == s) { members[count++] = i; }
        }
        if (shards == 1) { snprintf(written[s], HF_NAME_LEN, HF_WEIGHTS_FILE); }
        else { snprintf(written[s], HF_NAME_LEN, HF_SHARD_FORMAT, s + 1, shards); }
        char path[HF_PATH_LEN];
        hf_path(path, o->out_dir, written[s]);
        uint64_t bytes = hf_write_weights(path, hts, members, count, c, &p, params, o->bf16);
        printf("wrote %s: %d tensors, %llu bytes of %s\n", path, count, (unsigned long long)bytes,
               o->bf16 ? "bf16" : "fp32");
        total += bytes;
    }
    int files = shards;
    if (shards > 1) {
        JsonText index = {NULL, 0, 0};
        hf_index_json(&index, hts, n, shard_of, shards, total);
        char path[HF_PATH_LEN];
        hf_path(path, o->out_dir, HF_INDEX_FILE);
        hf_write_file(path, index.s, index.len);
        json_text_free(&index);
        snprintf(written[files++], HF_NAME_LEN, HF_INDEX_FILE);
    }
    free(members);
    free(shard_of);
    free(hts);
    return files;
}

// Removes the weights files of an earlier export into the same folder (force) that this one did not write: a
// model.safetensors beside new shards would be loaded instead of them.
static inline void hf_remove_stale_weights(const char *dir, char (*written)[HF_NAME_LEN], int n_written) {
    DIR *d = opendir(dir);
    if (!d) { fail("cannot read folder '%s': %s", dir, strerror(errno)); }
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (!hf_is_weights_file(e->d_name)) { continue; }
        int ours = 0;
        for (int i = 0; i < n_written && !ours; i++) { ours = strcmp(written[i], e->d_name) == 0; }
        if (ours) { continue; }
        char path[HF_PATH_LEN];
        hf_path(path, dir, e->d_name);
        if (unlink(path) != 0) { fail("cannot remove the stale '%s': %s", path, strerror(errno)); }
        printf("removed %s (an earlier export's weights)\n", path);
    }
    closedir(d);
}

// GPT-2's tokenizer files as read from --vocab-dir (encoder.json, vocab.bpe), written as HF names them.
typedef struct {
    char *encoder, *merges;
    size_t encoder_len, merges_len;
} HfVocabFiles;

// The tokenizer's files: GPT-2's own, copied byte for byte, and tokenizer_config.json.
static inline void hf_export_tokenizer(const HfExportOptions *o, const GPTConfig *c, const HfVocabFiles *v) {
    char dst[HF_PATH_LEN];
    hf_path(dst, o->out_dir, HF_MERGES_FILE);
    hf_write_file(dst, v->merges, v->merges_len);
    hf_path(dst, o->out_dir, HF_VOCAB_FILE);
    hf_write_file(dst, v->encoder, v->encoder_len);
    JsonText t = {NULL, 0, 0};
    json_text_printf(&t,
                     "{\n"
                     "  \"add_prefix_space\": false,\n"
                     "  \"bos_token\": \"" HF_EOT_TEXT "\",\n"
                     "  \"eos_token\": \"" HF_EOT_TEXT "\",\n"
                     "  \"model_max_length\": %d,\n"
                     "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
                     "  \"unk_token\": \"" HF_EOT_TEXT "\"\n"
                     "}\n",
                     c->max_seq_len);
    hf_path(dst, o->out_dir, HF_TOKENIZER_CONFIG_FILE);
    hf_write_file(dst, t.s, t.len);
    json_text_free(&t);
}

/*
 * Writes the llm.c model file o->model_path (version 1, 3 or 5) as a Hugging Face GPT-2 folder o->out_dir. Everything
 * is checked and read (the folder, the model file's header and weights, GPT-2's vocabulary files) before the folder
 * is made, so a refused export creates nothing.
 */
static inline void hf_export(const HfExportOptions *o) {
    hf_check_out_dir(o->out_dir, o->force);
    ModelFileHeader h = model_file_header(o->model_path);
    GPTConfig c = h.config;
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    const HfArch *a = hf_arch_of(&c);
    GPTConfig base = config_default((ModelArch)c.arch, c.max_seq_len, c.num_layers, c.num_heads, c.channels);
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) { // what the architecture fixes (GPT-2's, config_check checks all)
        if (strcmp(CONFIG_FIELDS[i].option, "--arch") != 0 || config_field_equal(&c, &base, i)) { continue; }
        char have[32];
        config_field_format(&c, i, have, sizeof(have));
        fail("model file '%s' has %s %s, which transformers' %s does not compute; it cannot be exported",
             o->model_path, CONFIG_FIELDS[i].name, have, a->class_name);
    }
    const char *vocab_dir = o->vocab_dir ? o->vocab_dir : HF_DEFAULT_VOCAB_DIR;
    HfVocabFiles vocab = {NULL, NULL, 0, 0};
    char path[HF_PATH_LEN];
    if (c.arch == ARCH_GPT2) {
        if (c.vocab_size != GPT2_VOCAB_SIZE) {
            fail("model file '%s' has a vocabulary of %d tokens, but GPT-2's tokenizer files (vocab.json, merges.txt) "
                 "have %d; only GPT-2-vocabulary models can be exported", o->model_path, c.vocab_size,
                 GPT2_VOCAB_SIZE);
        }
        Tokenizer tok; // GPT-2's vocabulary
        tokenizer_init(&tok, vocab_dir);
        if (tok.vocab_size != c.vocab_size) {
            fail("'%s/" GPT2_ENCODER_FILE "' holds %d tokens but the model's vocabulary has %d; pass --vocab-dir with "
                 "GPT-2's vocabulary", vocab_dir, tok.vocab_size, c.vocab_size);
        }
        tokenizer_free(&tok);
        hf_path(path, vocab_dir, GPT2_ENCODER_FILE);
        vocab.encoder = read_whole_file(path, &vocab.encoder_len, "pass --vocab-dir with GPT-2's encoder.json");
        hf_path(path, vocab_dir, GPT2_MERGES_FILE);
        vocab.merges = read_whole_file(path, &vocab.merges_len,
                                       "pass --vocab-dir with a folder holding GPT-2's vocab.bpe");
    } else if (o->vocab_dir) {
        fail("--vocab-dir: a %s export carries no tokenizer (model file '%s'); drop --vocab-dir", a->display,
             o->model_path);
    }
    ParamLayout p;
    param_layout(&c, &p);
    float *params = (float *)malloc_check(p.total * sizeof(float), "model parameters");
    model_file_read(o->model_path, &c, params);

    make_dirs_named(o->out_dir, "OUT_DIR");
    int max_files = hf_num_tensors(&c) + 1; // a shard per tensor at most, and the index
    char(*written)[HF_NAME_LEN] = (char(*)[HF_NAME_LEN])calloc_check((size_t)max_files, HF_NAME_LEN, "file names");
    int n_written = hf_export_weights(o, &c, params, written);
    if (o->force) { hf_remove_stale_weights(o->out_dir, written, n_written); }
    JsonText t = {NULL, 0, 0};
    if (c.arch == ARCH_GPT2) {
        hf_export_tokenizer(o, &c, &vocab);
        json_text_printf(&t, "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n",
                         GPT2_EOT_TOKEN, GPT2_EOT_TOKEN);
        hf_path(path, o->out_dir, HF_GENERATION_FILE);
        hf_write_file(path, t.s, t.len);
        json_text_free(&t);
    }
    hf_config_json(&t, &c, o->bf16 ? "bfloat16" : "float32");
    hf_path(path, o->out_dir, HF_CONFIG_FILE); // last: a folder without it is no model, so a half export never loads
    hf_write_file(path, t.s, t.len);
    json_text_free(&t);
    printf("exported '%s' (%s of %d layers, %d channels, %d heads, %d positions) to '%s' in %s: load it with "
           "%s.from_pretrained(\"%s\")\n", o->model_path, a->display, c.num_layers, c.channels, c.num_heads,
           c.max_seq_len, o->out_dir, o->bf16 ? "bf16" : "fp32", a->class_name, o->out_dir);
    free(written);
    free(vocab.encoder);
    free(vocab.merges);
    free(params);
}

#endif // LLMC_HF_MODEL_H
