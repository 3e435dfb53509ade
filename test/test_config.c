/*
 * test_config.c: the model description (llmc/config.h) and what follows from it.
 * - parameter layout: GPT-2's named sizes give llm.c's 16 tensors exactly as before the description (the formula
 *   written out here) and no lmhead, GPT-2 124M llm.c's 124,475,904 parameters; Llama's tensors have the shapes
 *   of config.h (fused qkv of NH + 2 KV heads, fc of 2F rows, no wpe, no biases, lmhead where untied), and the
 *   named Llama 3 sizes the parameter counts Hugging Face reports (Llama 3.2 1B 1,235,814,400, 3B 3,212,749,824,
 *   Llama 3.1 8B 8,030,261,248), through an unpadded count written out here;
 * - initialization: GPT-2 scales its residual projections by 1/sqrt(2L), Llama does not (HF's _init_weights), norms
 *   start at 1, both LM heads' padded rows at 0;
 * - the fields: every named description packs into header ints and back unchanged, floats and the double epsilon
 *   as text read back exactly, and config_check refuses an unknown enumeration value.
 */
#include "../llmc/init.h"
#include "test_util.h"

// The 16 sizes GPT-2 had before the description (llm.c's), then lmhead's 0.
static void gpt2_sizes(const GPTConfig *c, size_t *s) {
    size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels, L = (size_t)c->num_layers;
    size_t T = (size_t)c->max_seq_len;
    size_t want[NUM_PARAM_TENSORS] = {Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                                      L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C, 0};
    memcpy(s, want, sizeof(want));
}

static void test_gpt2_layouts(void) {
    for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
        if (MODEL_PRESETS[i].arch != ARCH_GPT2) { continue; }
        const ModelPreset *p = &MODEL_PRESETS[i];
        GPTConfig c = config_from_preset(p, ARCH_GPT2, GPT2_MAX_SEQ_LEN, p->layers, p->heads, p->channels);
        ParamLayout layout;
        param_layout(&c, &layout);
        size_t want[NUM_PARAM_TENSORS], off = 0;
        gpt2_sizes(&c, want);
        int ok = 1;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            ok &= layout.size[t] == want[t] && layout.offset[t] == off;
            off += want[t];
        }
        char name[96];
        snprintf(name, sizeof(name), "layout %s: llm.c's 16 tensors, no lmhead", p->name);
        check(ok && layout.total == off, name, "a size or offset differs (total %zu, want %zu)", layout.total, off);
    }
    GPTConfig d12 = config_gpt2(GPT2_MAX_SEQ_LEN, GPT2_VOCAB_SIZE, 12, 12, 768);
    ParamLayout p;
    param_layout(&d12, &p);
    check(p.total == 124475904, "layout d12: 124,475,904 parameters (llm.c's count)", "%zu", p.total);
}

// Parameters without the padded vocabulary rows, as Hugging Face counts them: embedding, per layer two norms, the
// q/k/v/o projections and the three MLP matrices, the final norm, and the head where untied.
static size_t llama_unpadded_count(const GPTConfig *c) {
    size_t V = (size_t)c->vocab_size, C = (size_t)c->channels, L = (size_t)c->num_layers;
    size_t HS = C / (size_t)c->num_heads, q = (size_t)c->num_heads * HS, kv = (size_t)c->num_kv_heads * HS;
    size_t F = (size_t)c->ffn_hidden;
    size_t layer = 2 * C + C * (q + 2 * kv) + q * C + 3 * C * F;
    return V * C * (c->tied ? 1 : 2) + L * layer + C;
}

static void test_llama_layouts(void) {
    const struct {
        const char *name;
        size_t hf_count; // 0: not a published model
    } want[] = {{"llama3.2-1b", 1235814400}, {"llama3.2-3b", 3212749824}, {"llama3.1-8b", 8030261248},
                {"llama-tiny", 0}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const ModelPreset *pr = model_preset_find(want[i].name);
        GPTConfig c = config_from_preset(pr, ARCH_LLAMA, 64, pr->layers, pr->heads, pr->channels);
        ParamLayout p;
        param_layout(&c, &p);
        size_t C = (size_t)c.channels, L = (size_t)c.num_layers, F = (size_t)c.ffn_hidden;
        size_t qkv = (size_t)(c.num_heads + 2 * c.num_kv_heads) * (C / (size_t)c.num_heads);
        size_t pad = (size_t)(c.padded_vocab_size - c.vocab_size) * C * (c.tied ? 1 : 2);
        int shapes = p.size[P_WPE] == 0 && p.size[P_LN1B] == 0 && p.size[P_QKVB] == 0 && p.size[P_ATTPROJB] == 0 &&
                     p.size[P_LN2B] == 0 && p.size[P_FCB] == 0 && p.size[P_FCPROJB] == 0 && p.size[P_LNFB] == 0 &&
                     p.size[P_QKVW] == L * qkv * C && p.size[P_FCW] == L * 2 * F * C &&
                     p.size[P_FCPROJW] == L * C * F && p.size[P_ATTPROJW] == L * C * C &&
                     p.size[P_LMHEAD] == (c.tied ? 0 : (size_t)c.padded_vocab_size * C);
        size_t count = llama_unpadded_count(&c);
        char name[96];
        snprintf(name, sizeof(name), "layout %s: Llama's tensors, %zu parameters", want[i].name, count);
        check(shapes && p.total - pad == count && (want[i].hf_count == 0 || count == want[i].hf_count), name,
              "shapes ok %d, layout %zu - padding %zu, counted %zu, Hugging Face's %zu", shapes, p.total, pad, count,
              want[i].hf_count);
    }
}

static void test_init(void) {
    GPTConfig g = config_gpt2(64, 300, 4, 4, 32), l = config_default(ARCH_LLAMA, 64, 4, 4, 32);
    l.vocab_size = 300;
    l.padded_vocab_size = padded_vocab(300);
    ParamLayout pg, pl;
    param_layout(&g, &pg);
    param_layout(&l, &pl);
    InitSpec gproj = param_init_spec(&g, &pg, P_FCPROJW), lproj = param_init_spec(&l, &pl, P_FCPROJW);
    InitSpec head = param_init_spec(&l, &pl, P_LMHEAD), norm = param_init_spec(&l, &pl, P_LN1W);
    check(gproj.kind == INIT_NORMAL && gproj.std == INIT_STD / sqrtf(8.0f) && lproj.kind == INIT_NORMAL &&
              lproj.std == INIT_STD && head.kind == INIT_NORMAL && head.std == INIT_STD &&
              head.zero_from == 300 * 32 && norm.kind == INIT_ONE,
          "init: GPT-2's residual scaling, Llama's plain 0.02, norms 1, lmhead's padded rows 0",
          "gpt2 proj %d %g, llama proj %d %g, lmhead %d %g from %llu, norm %d", gproj.kind, gproj.std, lproj.kind,
          lproj.std, head.kind, head.std, (unsigned long long)head.zero_from, norm.kind);
}

static void test_fields(void) {
    int ok = 1;
    for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
        const ModelPreset *p = &MODEL_PRESETS[i];
        GPTConfig c = config_from_preset(p, (ModelArch)p->arch, 64, p->layers, p->heads, p->channels), back;
        memset(&back, 0, sizeof(back));
        int32_t ints[64];
        int n = config_pack(&c, NUM_CONFIG_FIELDS, ints);
        int m = config_unpack(ints, NUM_CONFIG_FIELDS, &back);
        ok &= m == n && n == NUM_CONFIG_FIELDS + 1 && config_equal(&c, &back) && memcmp(&c, &back, sizeof(c)) == 0;
    }
    check(ok, "fields: every named model packs into header ints and back unchanged", "a description changed");
    GPTConfig c = config_default(ARCH_LLAMA, 64, 2, 4, 32);
    c.norm_eps = 1e-6;
    c.rope_theta = 123456.7f;
    char eps[32], theta[32], arch[32];
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) {
        if (CONFIG_FIELDS[i].offset == offsetof(GPTConfig, norm_eps)) { config_field_format(&c, i, eps, sizeof(eps)); }
        if (CONFIG_FIELDS[i].offset == offsetof(GPTConfig, rope_theta)) {
            config_field_format(&c, i, theta, sizeof(theta));
        }
        if (CONFIG_FIELDS[i].offset == offsetof(GPTConfig, arch)) { config_field_format(&c, i, arch, sizeof(arch)); }
    }
    check(strcmp(eps, "1e-06") == 0 && (float)strtod(theta, NULL) == c.rope_theta && strcmp(arch, "llama") == 0,
          "fields: values as text that reads back exactly", "eps '%s', theta '%s', arch '%s'", eps, theta, arch);
    char why[256];
    c.norm = 7;
    check(!config_check(&c, why, sizeof(why)) && strstr(why, "norm 7 is not a known value"),
          "fields: an unknown enumeration value is refused", "'%s'", why);
}

// FLOPs a token for MFU: 6 per parameter a GEMM meets, + 12 L C T; an untied model's wte (a lookup) is not one, the
// tied one stands for the LM head (llm.c's count for GPT-2).
static void test_flops(void) {
    const char *names[] = {"d12", "llama3.2-1b", "llama3.1-8b"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const ModelPreset *pr = model_preset_find(names[i]);
        GPTConfig c = config_from_preset(pr, (ModelArch)pr->arch, 1024, pr->layers, pr->heads, pr->channels);
        ParamLayout p;
        param_layout(&c, &p);
        double gemm = (double)(p.total - (c.tied ? 0 : p.size[P_WTE]));
        double want = 6.0 * gemm + 12.0 * c.num_layers * c.channels * 1024.0, got = flops_per_token(&c, p.total, 1024);
        char name[96];
        snprintf(name, sizeof(name), "flops per token %s (%s)", names[i], c.tied ? "tied" : "untied: wte left out");
        check(got == want, name, "got %.6e, want %.6e", got, want);
    }
}

int main(void) {
    test_gpt2_layouts();
    test_llama_layouts();
    test_flops();
    test_init();
    test_fields();
    return test_exit();
}
