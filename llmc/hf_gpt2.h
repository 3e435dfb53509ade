/*
 * hf_gpt2.h: GPT-2 between llm.c model files and Hugging Face transformers' folders (GPT2LMHeadModel), both ways.
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
 * Nothing a user made is overwritten without force; every file is written atomically (utils.h's AtomicFile), and an
 * export writes config.json last, so an interrupted export is no loadable model.
 */
#ifndef LLMC_HF_GPT2_H
#define LLMC_HF_GPT2_H

#include <dirent.h>

#include "checkpoint.h"
#include "json.h"
#include "safetensors.h"
#include "tokenizer.h"

#define HF_PREFIX "transformer."
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
#define HF_MODEL_TYPE "gpt2"
#define HF_ARCHITECTURE "GPT2LMHeadModel"
#define HF_SAFETENSORS_FORMAT "pt" // the __metadata__ "format" transformers writes (and checks) for PyTorch weights
#define HF_EOT_TEXT "<|endoftext|>"
#define HF_LAYER_NORM_EPS 1e-5      // what both builds compute with (LAYERNORM_EPS of cpu_model.h and layernorm.cuh)
#define HF_LAYER_NORM_EPS_RTOL 1e-6 // a config's epsilon this close to it (relative) is the same
#define HF_BYTES_PER_MB 1000000LL   // HF counts shard sizes in powers of ten ("5GB" is 5 x 10^9 bytes)
#define HF_PATH_LEN 4096
#define HF_NAME_LEN 96
#define HF_HINT "save the model with transformers' save_pretrained (safetensors is its default)"

/* ---------------------------------------------------------------------------------------------------------
 * The tensors and their mapping to llm.c's layout (config.h).
 */
typedef struct {
    const char *suffix; // the name after "transformer.h.{i}."
    int param;          // llm.c's tensor (P_*)
    int transposed;     // a Conv1D weight: HF [in, out], llm.c [out, in]
    int out_c, in_c;    // llm.c's shape of a block's slice in units of C: [out_c C, in_c C]; [out_c C] if in_c is 0
} HfBlockTensor;

static const HfBlockTensor HF_BLOCK_TENSORS[] = {
    {"ln_1.weight", P_LN1W, 0, 1, 0},        {"ln_1.bias", P_LN1B, 0, 1, 0},
    {"attn.c_attn.weight", P_QKVW, 1, 3, 1}, {"attn.c_attn.bias", P_QKVB, 0, 3, 0},
    {"attn.c_proj.weight", P_ATTPROJW, 1, 1, 1}, {"attn.c_proj.bias", P_ATTPROJB, 0, 1, 0},
    {"ln_2.weight", P_LN2W, 0, 1, 0},        {"ln_2.bias", P_LN2B, 0, 1, 0},
    {"mlp.c_fc.weight", P_FCW, 1, 4, 1},     {"mlp.c_fc.bias", P_FCB, 0, 4, 0},
    {"mlp.c_proj.weight", P_FCPROJW, 1, 1, 4}, {"mlp.c_proj.bias", P_FCPROJB, 0, 1, 0}};
#define HF_TENSORS_PER_BLOCK ((int)(sizeof(HF_BLOCK_TENSORS) / sizeof(HF_BLOCK_TENSORS[0])))
#define HF_OUTSIDE_BLOCKS 4 // wte, wpe, ln_f.weight, ln_f.bias

typedef struct {
    char name[HF_NAME_LEN]; // the full name, "transformer." included
    int param, layer;       // llm.c's tensor (P_*) and block (0 outside the blocks)
    int transposed;
    int ndim;
    long long shape[2];     // HF's shape
} HfTensor;

static inline int hf_num_tensors(const GPTConfig *c) {
    return HF_OUTSIDE_BLOCKS + HF_TENSORS_PER_BLOCK * c->num_layers;
}

static inline size_t hf_numel(const HfTensor *h) {
    return (size_t)h->shape[0] * (size_t)(h->ndim == 2 ? h->shape[1] : 1);
}

// rows x cols is llm.c's shape (cols 0: a vector); HF's is its transpose for a Conv1D weight.
static inline void hf_tensor_set(HfTensor *h, const char *name, int param, int layer, int transposed, long long rows,
                                 long long cols) {
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->param = param;
    h->layer = layer;
    h->transposed = transposed;
    h->ndim = cols ? 2 : 1;
    h->shape[0] = transposed ? cols : rows;
    h->shape[1] = transposed ? rows : cols;
}

// All tensors of a GPT-2 of config c in the module order of transformers' state_dict; returns their number.
static inline int hf_tensors(const GPTConfig *c, HfTensor *out) {
    long long C = c->channels;
    int n = 0;
    hf_tensor_set(&out[n++], HF_PREFIX "wte.weight", P_WTE, 0, 0, c->vocab_size, C);
    hf_tensor_set(&out[n++], HF_PREFIX "wpe.weight", P_WPE, 0, 0, c->max_seq_len, C);
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < HF_TENSORS_PER_BLOCK; k++) {
            const HfBlockTensor *b = &HF_BLOCK_TENSORS[k];
            char name[HF_NAME_LEN];
            snprintf(name, sizeof(name), HF_PREFIX "h.%d.%s", l, b->suffix);
            hf_tensor_set(&out[n++], name, b->param, l, b->transposed, b->out_c * C, b->in_c * C);
        }
    }
    hf_tensor_set(&out[n++], HF_PREFIX "ln_f.weight", P_LNFW, 0, 0, C, 0);
    hf_tensor_set(&out[n++], HF_PREFIX "ln_f.bias", P_LNFB, 0, 0, C, 0);
    return n;
}

// Where tensor h's elements start in llm.c's flat parameters: its tensor, then its block's slice.
static inline size_t hf_llmc_offset(const HfTensor *h, const GPTConfig *c, const ParamLayout *p) {
    return p->offset[h->param] + (size_t)h->layer * (p->size[h->param] / (size_t)c->num_layers);
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

// name without the "transformer." prefix.
static inline const char *hf_short_name(const char *name) {
    size_t n = strlen(HF_PREFIX);
    return strncmp(name, HF_PREFIX, n) == 0 ? name + n : name;
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

// Member `key` of f's object as written in the file ("(none)" where absent), into out[HF_VALUE_SHOWN].
static inline const char *hf_json_shown(const HfJsonFile *f, const char *key, char *out) {
    const JsonValue *v = json_get(&f->root, key);
    if (!v) { return strcpy(out, "(none)"); }
    return json_source(v, f->text, out, HF_VALUE_SHOWN);
}

static inline int hf_config_int(const HfJsonFile *cfg, const char *key, long long lo, long long hi) {
    const JsonValue *v = json_get(&cfg->root, key);
    if (!v) { fail("'%s' has no %s: it is not a GPT-2 config.json; " HF_HINT, cfg->path, key); }
    if (v->type != JSON_NUMBER || !v->is_int || v->integer < lo || v->integer > hi) {
        char have[HF_VALUE_SHOWN];
        fail("'%s': %s is %s, not an integer in [%lld, %lld]", cfg->path, key, hf_json_shown(cfg, key, have), lo, hi);
    }
    return (int)v->integer;
}

// An optional boolean that changes the model's arithmetic: refused unless absent or `want`.
static inline void hf_config_bool(const HfJsonFile *cfg, const char *key, int want) {
    const JsonValue *v = json_get(&cfg->root, key);
    if (!v || (v->type == JSON_BOOL && v->boolean == want)) { return; }
    char have[HF_VALUE_SHOWN];
    fail("'%s' has %s = %s, but GPT-2 as train_gpt computes it has %s; this model cannot be converted", cfg->path, key,
         hf_json_shown(cfg, key, have), want ? "true" : "false");
}

// The model's shape from <dir>/config.json, with every setting that would make it another model refused. Values are
// quoted as the file writes them: a message shows what is in the file.
static inline GPTConfig hf_config_read(const char *dir) {
    char path[HF_PATH_LEN], have[HF_VALUE_SHOWN];
    hf_path(path, dir, HF_CONFIG_FILE);
    HfJsonFile cfg;
    hf_read_json(&cfg, path, "HF_DIR must be a Hugging Face model folder; " HF_HINT);
    if (!json_is_string(json_get(&cfg.root, "model_type"), HF_MODEL_TYPE)) {
        fail("'%s' has model_type %s, not \"" HF_MODEL_TYPE "\": only GPT-2 models can be imported", path,
             hf_json_shown(&cfg, "model_type", have));
    }
    GPTConfig c;
    c.num_layers = hf_config_int(&cfg, "n_layer", 1, MAX_LAYERS);
    c.channels = hf_config_int(&cfg, "n_embd", 1, MAX_CHANNELS);
    c.num_heads = hf_config_int(&cfg, "n_head", 1, MAX_CHANNELS);
    c.vocab_size = hf_config_int(&cfg, "vocab_size", 1, MAX_VOCAB_SIZE);
    // n_ctx is what configs from before transformers 4 called it
    c.max_seq_len = hf_config_int(&cfg, json_get(&cfg.root, "n_positions") ? "n_positions" : "n_ctx", 1, MAX_POSITIONS);
    c = config_gpt2(c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels); // the rest is GPT-2's
    if (c.channels % c.num_heads != 0) {
        fail("'%s': n_embd %d is not divisible by n_head %d; the config is corrupt", path, c.channels, c.num_heads);
    }
    if (c.vocab_size != GPT2_VOCAB_SIZE) {
        fail("'%s' has vocab_size %d, but train_gpt's models use GPT-2's vocabulary of %d tokens; a model with another "
             "vocabulary cannot be imported", path, c.vocab_size, GPT2_VOCAB_SIZE);
    }
    const JsonValue *act = json_get(&cfg.root, "activation_function");
    if (act && !json_is_string(act, "gelu_new") && !json_is_string(act, "gelu_pytorch_tanh")) {
        fail("'%s' has activation_function %s, but train_gpt computes GELU's tanh approximation (\"gelu_new\"); "
             "this model cannot be converted", path, hf_json_shown(&cfg, "activation_function", have));
    }
    const JsonValue *eps = json_get(&cfg.root, "layer_norm_epsilon");
    if (eps && (eps->type != JSON_NUMBER ||
                fabs(eps->number - HF_LAYER_NORM_EPS) > HF_LAYER_NORM_EPS_RTOL * HF_LAYER_NORM_EPS)) {
        fail("'%s' has layer_norm_epsilon %s, but train_gpt's LayerNorm uses %g; this model cannot be converted", path,
             hf_json_shown(&cfg, "layer_norm_epsilon", have), HF_LAYER_NORM_EPS);
    }
    ParamLayout p;
    param_layout(&c, &p);
    long long mlp_width = (long long)(p.size[P_FCB] / (size_t)c.num_layers); // GPT-2's 4 x n_embd
    const JsonValue *inner = json_get(&cfg.root, "n_inner");
    if (inner && inner->type != JSON_NULL &&
        !(inner->type == JSON_NUMBER && inner->is_int && inner->integer == mlp_width)) {
        fail("'%s' has n_inner %s, not null or %lld (4 x n_embd), GPT-2's MLP width; this model cannot be converted",
             path, hf_json_shown(&cfg, "n_inner", have), mlp_width);
    }
    hf_config_bool(&cfg, "scale_attn_weights", 1);
    hf_config_bool(&cfg, "scale_attn_by_inverse_layer_idx", 0);
    hf_config_bool(&cfg, "add_cross_attention", 0);
    hf_json_free(&cfg);
    return c;
}

// config.json as transformers' save_pretrained writes it for GPT2LMHeadModel (keys sorted, indent 2). The dropouts
// are 0: train_gpt trains without dropout (set them for fine-tuning with it).
static inline void hf_config_json(JsonText *t, const GPTConfig *c, const char *torch_dtype) {
    json_text_printf(t,
                     "{\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"architectures\": [\n"
                     "    \"" HF_ARCHITECTURE "\"\n"
                     "  ],\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"bos_token_id\": %d,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"eos_token_id\": %d,\n"
                     "  \"initializer_range\": %g,\n"
                     "  \"layer_norm_epsilon\": %g,\n"
                     "  \"model_type\": \"" HF_MODEL_TYPE "\",\n"
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
        char have[256], want[256];
        fail("'%s': tensor '%s' has shape %s, but config.json's GPT-2 (n_layer %d, n_embd %d, n_positions %d, "
             "vocab_size %d) needs %s (Conv1D weights are [in, out])", found->file->path, t->name,
             st_shape_str(t->shape, t->ndim, have, sizeof(have)), c->num_layers, c->channels, c->max_seq_len,
             c->vocab_size, st_shape_str(shape, ndim, want, sizeof(want)));
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

// The tensors that are not GPT-2's weights: a tied lm_head.weight (equal to wte) and the mask buffers are accepted;
// anything else means another model. Prints what it accepted.
static inline void hf_check_other_tensors(const HfSource *s, const HfTensor *hts, int n, const GPTConfig *c,
                                          const ParamLayout *p, const float *params, float *buf) {
    int buffers = 0;
    for (size_t f = 0; f < s->nfiles; f++) {
        for (size_t i = 0; i < s->files[f].count; i++) {
            const char *name = s->files[f].tensors[i].name, *short_name = hf_short_name(name);
            int known = 0;
            for (int k = 0; k < n && !known; k++) { known = strcmp(hf_short_name(hts[k].name), short_name) == 0; }
            if (known) { continue; }
            if (hf_is_mask_buffer(short_name)) { buffers++; continue; }
            if (strcmp(name, HF_LM_HEAD) != 0) {
                fail("'%s' holds tensor '%s', which GPT-2 (GPT2LMHeadModel) does not have: this is another model, "
                     "which this tool does not convert", s->where, name);
            }
            HfFound found = {&s->files[f], &s->files[f].tensors[i]};
            hf_read_checked(s, &found, hts[0].ndim, hts[0].shape, c, buf); // wte's shape
            size_t wte = hf_numel(&hts[0]);
            const float *ours = params + hf_llmc_offset(&hts[0], c, p);
            for (size_t e = 0; e < wte; e++) {
                if (buf[e] != ours[e]) {
                    fail("'%s': " HF_LM_HEAD " differs from the token embedding (transformer.wte.weight) at element "
                         "%zu (%.9g vs %.9g): this model's output head is not tied to its embedding, as GPT-2's "
                         "is, and cannot be converted", s->where, e, (double)buf[e], (double)ours[e]);
                }
            }
            printf("note: " HF_LM_HEAD " equals the token embedding (tied, as GPT-2's): not stored separately\n");
        }
    }
    if (buffers > 0) {
        printf("note: ignored %d attention-mask buffers (h.N.attn.bias, h.N.attn.masked_bias): constants, not "
               "weights\n", buffers);
    }
}

// Converts the Hugging Face GPT-2 folder hf_dir into the llm.c model file out_path (fp32, version 3, wte padded
// to Vp rows of zeros as train_gpt writes it). An existing out_path is replaced only with force.
static inline void hf_import(const char *hf_dir, const char *out_path, int force) {
    if (!force && file_exists(out_path)) {
        fail("'%s' exists; pass --force to replace it, or choose another MODEL.bin", out_path);
    }
    GPTConfig c = hf_config_read(hf_dir);
    HfSource src;
    hf_source_open(&src, hf_dir);
    ParamLayout p;
    param_layout(&c, &p);
    float *params = (float *)calloc_check(p.total, sizeof(float), "imported parameters"); // pad rows stay zero
    int n = hf_num_tensors(&c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensor list");
    hf_tensors(&c, hts);
    size_t largest = 0;
    for (int i = 0; i < n; i++) { largest = hf_numel(&hts[i]) > largest ? hf_numel(&hts[i]) : largest; }
    float *buf = (float *)malloc_check(largest * sizeof(float), "tensor buffer");
    for (int i = 0; i < n; i++) {
        HfFound found;
        if (!hf_source_find(&src, hts[i].name, &found)) {
            fail("'%s' has no tensor '%s' (nor '%s'): it is not a complete GPT-2 checkpoint of config.json's shape; "
                 HF_HINT, src.where, hts[i].name, hf_short_name(hts[i].name));
        }
        hf_read_checked(&src, &found, hts[i].ndim, hts[i].shape, &c, buf);
        hf_scatter(&hts[i], &c, &p, buf, params);
    }
    hf_check_other_tensors(&src, hts, n, &c, &p, params, buf);
    model_file_write(out_path, &c, params);
    printf("wrote '%s': GPT-2 of %d layers, %d channels, %d heads, %d positions, %zu parameters (fp32), from '%s'\n"
           "train from it with: --init-from %s --depth %d --width %d --heads %d --seq-len <= %d\n",
           out_path, c.num_layers, c.channels, c.num_heads, c.max_seq_len,
           p.total - (size_t)(c.padded_vocab_size - c.vocab_size) * (size_t)c.channels, src.where, out_path,
           c.num_layers, c.channels, c.num_heads, c.max_seq_len);
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
    if (c.arch != ARCH_GPT2) {
        fail("model file '%s' is a %s model; only GPT-2 models can be exported as Hugging Face GPT-2", o->model_path,
             ARCH_NAMES[c.arch]);
    }
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    if (c.vocab_size != GPT2_VOCAB_SIZE) {
        fail("model file '%s' has a vocabulary of %d tokens, but GPT-2's tokenizer files (vocab.json, merges.txt) "
             "have %d; only GPT-2-vocabulary models can be exported", o->model_path, c.vocab_size, GPT2_VOCAB_SIZE);
    }
    Tokenizer tok; // GPT-2's vocabulary
    tokenizer_init(&tok, o->vocab_dir);
    if (tok.vocab_size != c.vocab_size) {
        fail("'%s/" GPT2_ENCODER_FILE "' holds %d tokens but the model's vocabulary has %d; pass --vocab-dir with "
             "GPT-2's vocabulary", o->vocab_dir, tok.vocab_size, c.vocab_size);
    }
    tokenizer_free(&tok);
    char path[HF_PATH_LEN];
    HfVocabFiles vocab;
    hf_path(path, o->vocab_dir, GPT2_ENCODER_FILE);
    vocab.encoder = read_whole_file(path, &vocab.encoder_len, "pass --vocab-dir with GPT-2's encoder.json");
    hf_path(path, o->vocab_dir, GPT2_MERGES_FILE);
    vocab.merges = read_whole_file(path, &vocab.merges_len, "pass --vocab-dir with a folder holding GPT-2's vocab.bpe");
    ParamLayout p;
    param_layout(&c, &p);
    float *params = (float *)malloc_check(p.total * sizeof(float), "model parameters");
    model_file_read(o->model_path, &c, params);

    make_dirs_named(o->out_dir, "OUT_DIR");
    int max_files = hf_num_tensors(&c) + 1; // a shard per tensor at most, and the index
    char(*written)[HF_NAME_LEN] = (char(*)[HF_NAME_LEN])calloc_check((size_t)max_files, HF_NAME_LEN, "file names");
    int n_written = hf_export_weights(o, &c, params, written);
    if (o->force) { hf_remove_stale_weights(o->out_dir, written, n_written); }
    hf_export_tokenizer(o, &c, &vocab);

    JsonText t = {NULL, 0, 0};
    json_text_printf(&t, "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n",
                     GPT2_EOT_TOKEN, GPT2_EOT_TOKEN);
    hf_path(path, o->out_dir, HF_GENERATION_FILE);
    hf_write_file(path, t.s, t.len);
    json_text_free(&t);
    hf_config_json(&t, &c, o->bf16 ? "bfloat16" : "float32");
    hf_path(path, o->out_dir, HF_CONFIG_FILE); // last: a folder without it is no model, so a half export never loads
    hf_write_file(path, t.s, t.len);
    json_text_free(&t);
    printf("exported '%s' (GPT-2 of %d layers, %d channels, %d heads, %d positions) to '%s' in %s: load it with "
           "GPT2LMHeadModel.from_pretrained(\"%s\")\n", o->model_path, c.num_layers, c.channels, c.num_heads,
           c.max_seq_len, o->out_dir, o->bf16 ? "bf16" : "fp32", o->out_dir);
    free(written);
    free(vocab.encoder);
    free(vocab.merges);
    free(params);
}

#endif // LLMC_HF_GPT2_H
