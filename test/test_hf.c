/*
 * test_hf.c: Hugging Face GPT-2 and Llama exchange (llmc/hf_model.h) and safetensors files (llmc/safetensors.h).
 * - 16-bit floats: bf16 rounding to nearest even (ties, overflow, NaNs) and f16 widening against known values;
 * - safetensors: a written file reads back (header 8-aligned, '{' first, offsets tiling the data); malformed files
 *   (header length too small, absurd or past the end, bad JSON, offsets past the end, overlapping, leaving a hole,
 *   not matching dtype x shape, unknown dtype, ...) are each refused with one line naming the file and the fault;
 * - the mapping means what HF means: a GPT-2 forward written from transformers' modeling_gpt2 (Conv1D x W + b,
 *   W [in, out]; c_attn split into q, k, v; tied head) on the exported tensors gives the CPU model's logits;
 * - round trips: fp32 export -> import is the same file byte for byte; bf16 export -> import gives each weight
 *   rounded to nearest even; a sharded export (index + shards) imports to the same file; F16 weights, names without
 *   "transformer.", the old mask buffers and a tied lm_head.weight are accepted;
 * - what is refused: a missing tensor, a wrong shape, an integer dtype, a non-finite weight, an untied head, a
 *   tensor GPT-2 does not have, configs that are not GPT-2's (model type, missing fields, n_embd % n_head, other
 *   vocabulary or activation), bad indexes (a path outside the folder, a tensor not in its shard, one in two);
 * - the exported folder: config.json's fields, vocab.json and merges.txt byte-equal to data/gpt2's; nothing is
 *   overwritten without force, and a forced export removes the weights files of the earlier one.
 * - Llama: export -> import is the same file (tied and untied, grouped-query attention, rope scaling none and llama3),
 *   config.json reads back as the same description, q/k/v and gate/up are the rows of qkvw and fcw (checked by hand),
 *   no tokenizer is written; a sharded folder (two shards and an index) and transformers 5's rope_parameters import;
 *   refused: another model type or class, rope scaling other than llama3, biases, head_dim, activation, key/value
 *   heads that do not divide, a duplicate key, missing/extra tensors, a wrong shape, a tied config with another head;
 *   the options the import prints.
 */
#include "../llmc/cpu_model.h"
#include "../llmc/hf_model.h"
#include "../llmc/rng.h"
#include "test_util.h"

#define CHILD_TIMEOUT_S 60.0
#define TEST_SEED 11u
#define WEIGHT_STD 0.3f   // large enough that a wrong mapping moves the logits far beyond rounding
#define LOGIT_TOL 1e-4    // the CPU model (fp32) against the reference (fp64): rounding only
#define BF16_SIGNIFICANT_BITS 8
#define F16_EXACT_SCALE 1024.0f // multiples of 2^-10 below 2 in magnitude are exact in f16
#define SHARD_TEST_BYTES 1000000LL
#define VOCAB_DIR "data/gpt2"
#define REF_PI 3.14159265358979323846
#define UNTIED_ELEMENT 777 // the element of wte an untied head differs in by one ulp

static char g_dir[] = "/tmp/test_hf_XXXXXX";

static GPTConfig tiny_config(void) {
    GPTConfig c = config_gpt2(16, GPT2_VOCAB_SIZE, 2, 4, 32);
    return c;
}

static void path_in_dir(char *out, const char *name) { snprintf(out, HF_PATH_LEN, "%s/%s", g_dir, name); }

// Random parameters as a trained model has them: every tensor random (biases, norms too), the vocabulary tensors'
// pad rows zero.
static float *random_params(const GPTConfig *c, uint32_t stream) {
    ParamLayout p;
    param_layout(c, &p);
    float *x = (float *)malloc_check(p.total * sizeof(float), "test params");
    for (size_t i = 0; i < p.total; i++) { x[i] = WEIGHT_STD * rng_normal(TEST_SEED, stream, i); }
    size_t real = (size_t)c->vocab_size * c->channels;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (param_is_vocab(t) && p.size[t] > 0) {
            memset(x + p.offset[t] + real, 0, (p.size[t] - real) * sizeof(float));
        }
    }
    return x;
}

// A field of a JSON object, or a value no test expects where it is absent or of another type.
static long long jint(const JsonValue *o, const char *key) {
    const JsonValue *v = json_get(o, key);
    return v && v->type == JSON_NUMBER && v->is_int ? v->integer : LLONG_MIN;
}
static double jnum(const JsonValue *o, const char *key) {
    const JsonValue *v = json_get(o, key);
    return v && v->type == JSON_NUMBER ? v->number : NAN;
}
static int jbool(const JsonValue *o, const char *key) {
    const JsonValue *v = json_get(o, key);
    return v && v->type == JSON_BOOL ? v->boolean : -1;
}

static char *slurp(const char *path, size_t *n) { return read_whole_file(path, n, "the test wrote it"); }

// The tree of a JSON file the export wrote.
static JsonValue read_json(const char *path) {
    HfJsonFile f;
    hf_read_json(&f, path, "the test wrote it");
    free(f.text);
    return f.root;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static float *read_model(const char *path, const GPTConfig *c) {
    ParamLayout p;
    param_layout(c, &p);
    float *x = (float *)malloc_check(p.total * sizeof(float), "model read back");
    model_file_read(path, c, x);
    return x;
}

static void export_model(const char *model, const char *out_dir, int bf16, long long shard_bytes, int force) {
    HfExportOptions o = {model, out_dir, VOCAB_DIR, bf16, shard_bytes, force};
    hf_export(&o);
}

// ---------------------------------------------------------------------------------------------------------
// 16-bit floats

static uint16_t bf16_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f32_to_bf16(f);
}

static void test_float16(void) {
    static const struct {
        uint32_t in;
        uint16_t want;
    } rne[] = {
        {0x3F800000u, 0x3F80}, // 1
        {0x3F808000u, 0x3F80}, // 1 + 2^-8: a tie, to the even 1
        {0x3F818000u, 0x3F82}, // 1 + 3 x 2^-8: a tie, to the even neighbour above
        {0x3F808001u, 0x3F81}, // just above the tie: up
        {0x3F807FFFu, 0x3F80}, // just below: down
        {0xBFC00000u, 0xBFC0}, // -1.5
        {0x80000000u, 0x8000}, // -0
        {0x7F7FFFFFu, 0x7F80}, // FLT_MAX rounds to inf, as round-to-nearest does
        {0x7F800000u, 0x7F80}, // inf
        {0xFF800000u, 0xFF80}, // -inf
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof(rne) / sizeof(rne[0]); i++) {
        uint16_t got = bf16_of_bits(rne[i].in);
        if (got != rne[i].want) {
            printf("  bf16(0x%08x) = 0x%04x, want 0x%04x\n", rne[i].in, got, rne[i].want);
            ok = 0;
        }
    }
    // a NaN whose payload lives only in the low half would become inf if truncated: it must stay a NaN
    ok &= isnan(bf16_to_f32(bf16_of_bits(0x7F800001u))) && isnan(bf16_to_f32(bf16_of_bits(0xFFC00000u)));
    ok &= bf16_to_f32(0x3F80) == 1.0f && bf16_to_f32(0xC040) == -3.0f;
    check(ok, "bf16_round_to_nearest_even", "a conversion is wrong (above)");

    static const struct {
        uint16_t in;
        float want;
    } half[] = {
        {0x3C00, 1.0f},           {0xC000, -2.0f},          {0x7BFF, 65504.0f},          {0x0400, 6.103515625e-05f},
        {0x0001, 5.9604644775390625e-08f}, {0x03FF, 6.097555160522461e-05f}, {0x3555, 0.333251953125f},
        {0x0000, 0.0f},
    };
    ok = 1;
    for (size_t i = 0; i < sizeof(half) / sizeof(half[0]); i++) {
        float got = f16_to_f32(half[i].in);
        if (got != half[i].want) {
            printf("  f16 0x%04x = %.10g, want %.10g\n", half[i].in, got, half[i].want);
            ok = 0;
        }
    }
    ok &= isinf(f16_to_f32(0x7C00)) && f16_to_f32(0x7C00) > 0 && isinf(f16_to_f32(0xFC00)) && f16_to_f32(0xFC00) < 0;
    ok &= isnan(f16_to_f32(0x7E00)) && signbit(f16_to_f32(0x8000)) && f16_to_f32(0x8000) == 0.0f;
    check(ok, "f16_to_f32_exact", "a conversion is wrong (above)");
}

// ---------------------------------------------------------------------------------------------------------
// safetensors files

static void test_safetensors_round_trip(void) {
    char path[HF_PATH_LEN];
    path_in_dir(path, "rt.safetensors");
    float a[6] = {1, -2, 3.5f, 4, 5, 6};
    uint16_t b[3] = {0x3F80, 0xC040, 0x0000};
    int32_t ints[2] = {7, -8};
    StSpec specs[4] = {{"a.weight", ST_F32, 2, {2, 3}}, {"b", ST_BF16, 1, {3}}, {"ints", ST_I32, 1, {2}},
                       {"empty", ST_F32, 2, {0, 4}}};
    StWriter w;
    st_writer_open(&w, path, specs, 4, "pt");
    st_writer_tensor(&w, a, sizeof(a));
    st_writer_tensor(&w, b, sizeof(b));
    st_writer_tensor(&w, ints, sizeof(ints));
    st_writer_tensor(&w, a, 0); // an empty tensor: no bytes
    st_writer_close(&w);

    size_t n;
    char *bytes = slurp(path, &n);
    uint64_t hlen;
    memcpy(&hlen, bytes, sizeof(hlen));
    int header_ok = (ST_HEADER_LEN_BYTES + hlen) % ST_ALIGN == 0 && bytes[ST_HEADER_LEN_BYTES] == '{' &&
                    strstr(bytes + ST_HEADER_LEN_BYTES, "\"__metadata__\":{\"format\":\"pt\"}") &&
                    n == ST_HEADER_LEN_BYTES + hlen + sizeof(a) + sizeof(b) + sizeof(ints);
    check(header_ok, "safetensors_header_layout", "header length %llu, file %zu bytes", (unsigned long long)hlen, n);
    free(bytes);

    StFile f;
    st_open(&f, path);
    const StTensor *ta = st_find(&f, "a.weight"), *tb = st_find(&f, "b"), *ti = st_find(&f, "ints");
    float ra[6], rb[3];
    int ok = f.count == 4 && ta && tb && ti && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3 &&
             ta->begin == 0 && ta->end == sizeof(a) && tb->dtype == ST_BF16 && ti->dtype == ST_I32;
    if (ok) {
        st_read_f32(&f, ta, ra);
        st_read_f32(&f, tb, rb);
        ok = memcmp(ra, a, sizeof(a)) == 0 && rb[0] == 1.0f && rb[1] == -3.0f && rb[2] == 0.0f;
    }
    check(ok, "safetensors_round_trip", "tensors read back differ");
    st_close(&f);
}

// Writes a file of header length field hlen, then `header` (strlen bytes), then data_len bytes of zeros.
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t data_len) {
    FILE *f = fopen_check(path, "wb");
    unsigned char len_bytes[ST_HEADER_LEN_BYTES];
    for (int i = 0; i < ST_HEADER_LEN_BYTES; i++) { len_bytes[i] = (unsigned char)(hlen >> (8 * i)); }
    fwrite_check(len_bytes, 1, sizeof(len_bytes), f, path);
    fwrite_check(header, 1, strlen(header), f, path);
    for (size_t i = 0; i < data_len; i++) { fputc(0, f); }
    fclose(f);
}

static void st_open_child(void *arg) {
    StFile f;
    st_open(&f, (const char *)arg);
}

static void expect_child_error(const char *name, void (*fn)(void *), void *arg, const char *expect1,
                               const char *expect2) {
    Child ch;
    child_start(&ch, fn, arg);
    child_wait(&ch, now_s() + CHILD_TIMEOUT_S);
    const char *nl = strchr(ch.err, '\n');
    check(ch.status > 0 && ch.status < 128 && strstr(ch.err, expect1) && strstr(ch.err, expect2) && nl &&
              nl[1] == '\0',
          name, "status %d, stderr '%s', expected one line with '%s' and '%s'", ch.status, ch.err, expect1, expect2);
}

static void test_safetensors_malformed(void) {
    static const struct {
        const char *name;
        long long hlen; // -1: the header's own length
        const char *header;
        size_t data;
        const char *want;
    } bad[] = {
        {"st_header_length_absurd", 1LL << 60, "{}", 0,
         "header length 1152921504606846976 is larger than the format's limit"},
        {"st_header_length_past_end", 1000, "{}", 0, "header length 1000 runs past the end of the file (10 bytes)"},
        {"st_header_not_an_object", -1, "[]", 0, "its header does not start with '{'"},
        {"st_header_bad_json", -1, "{\"a\": {\"dtype\": \"F32\",", 0,
         "its header is not valid JSON (expected a string key at byte 22 of the header)"},
        {"st_header_bad_json_trailing", -1, "{} x", 0, "not valid JSON (trailing characters after the value at byte 3"},
        {"st_offsets_past_end", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
         "tensor 'a' has data_offsets [0, 16], past the end of the data (8 bytes after the header)"},
        {"st_offsets_overlap", -1,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "tensors 'a' and 'b' overlap"},
        {"st_offsets_hole", -1,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20,
         "bytes [8, 12) of the data belong to no tensor"},
        {"st_trailing_data", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
         "the tensors end at byte 8 of the data but the file holds 12 bytes after the header"},
        {"st_offsets_not_dtype_x_shape", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16,
         "tensor 'a' spans 16 bytes (data_offsets [0, 16]) but dtype F32 x shape [2, 3] is 24 bytes"},
        {"st_unknown_dtype", -1, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "tensor 'a' has unknown dtype 'F33'"},
        {"st_no_offsets", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a' has no \"data_offsets\""},
        {"st_negative_dim", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
         "dimension 0 of its shape is not a non-negative integer"},
        {"st_offsets_reversed", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
         "ending before they begin"},
        {"st_shape_overflow", -1,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
         "shape [4294967296, 4294967296, 4294967296] overflows"},
        {"st_duplicate_tensor", -1,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         "its header is not valid JSON (duplicate key \"a\" at byte 54 of the header)"},
        {"st_metadata_not_strings", -1, "{\"__metadata__\":{\"format\":1}}", 0,
         "__metadata__ is not an object of strings"},
        {"st_entry_not_object", -1, "{\"a\":5}", 0, "tensor 'a' is described by a number, not an object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char path[HF_PATH_LEN];
        path_in_dir(path, bad[i].name);
        write_raw(path, bad[i].hlen < 0 ? strlen(bad[i].header) : (uint64_t)bad[i].hlen, bad[i].header, bad[i].data);
        expect_child_error(bad[i].name, st_open_child, path, path, bad[i].want);
    }
    char path[HF_PATH_LEN];
    path_in_dir(path, "st_too_short");
    FILE *f = fopen_check(path, "wb");
    fwrite_check("abcde", 1, 5, f, path);
    fclose(f);
    expect_child_error("st_shorter_than_header_length", st_open_child, path, path,
                       "it is 5 bytes, shorter than the 8-byte header length");
    // the spec's own padding (spaces after the object) and an empty file of tensors are valid
    path_in_dir(path, "st_padded");
    write_raw(path, 16, "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}      "
                        "                ", 1);
    write_raw(path, strlen("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}    "),
              "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}    ", 1);
    StFile st;
    st_open(&st, path);
    check(st.count == 1 && st.tensors[0].ndim == 0 && st_numel(&st.tensors[0]) == 1, "st_padded_scalar_accepted",
          "%zu tensors", st.count);
    st_close(&st);
}

// ---------------------------------------------------------------------------------------------------------
// the mapping

static void test_tensor_list(void) {
    GPTConfig c = tiny_config();
    ParamLayout p;
    param_layout(&c, &p);
    int n = hf_num_tensors(&c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensors");
    int made = hf_tensors(&c, hts);
    size_t total = 0;
    int unique = 1;
    for (int i = 0; i < n; i++) {
        total += hf_numel(&hts[i]);
        for (int j = 0; j < i; j++) { unique &= strcmp(hts[i].name, hts[j].name) != 0; }
    }
    size_t pad = (size_t)(c.padded_vocab_size - c.vocab_size) * (size_t)c.channels;
    check(made == n && n == 4 + 12 * c.num_layers && unique && total == p.total - pad, "hf_tensor_list_covers_layout",
          "%d tensors (%d expected), %zu elements (layout %zu less padding %zu)", made, n, total, p.total, pad);
    const HfTensor *qkv = &hts[4]; // transformer.h.0.attn.c_attn.weight
    const HfTensor *fcproj = &hts[2 + 10];
    check(strcmp(qkv->name, "transformer.h.0.attn.c_attn.weight") == 0 && qkv->shape[0] == c.channels &&
              qkv->shape[1] == 3 * c.channels && strcmp(fcproj->name, "transformer.h.0.mlp.c_proj.weight") == 0 &&
              fcproj->shape[0] == 4 * c.channels && fcproj->shape[1] == c.channels,
          "hf_conv1d_shapes_are_in_out", "%s [%lld, %lld], %s [%lld, %lld]", qkv->name, qkv->shape[0], qkv->shape[1],
          fcproj->name, fcproj->shape[0], fcproj->shape[1]);
    free(hts);
}

static float *load_tensor(const StFile *f, const char *name) {
    const StTensor *t = st_find(f, name);
    if (!t) { fail("test: the export has no '%s'", name); }
    float *x = (float *)malloc_check(st_numel(t) * sizeof(float), name);
    st_read_f32(f, t, x);
    return x;
}

static void ref_layernorm(double *out, const double *x, const float *w, const float *b, int T, int C) {
    for (int t = 0; t < T; t++) {
        double mean = 0, var = 0;
        for (int i = 0; i < C; i++) { mean += x[t * C + i]; }
        mean /= C;
        for (int i = 0; i < C; i++) { var += (x[t * C + i] - mean) * (x[t * C + i] - mean); }
        var /= C;
        for (int i = 0; i < C; i++) {
            out[t * C + i] = (x[t * C + i] - mean) / sqrt(var + HF_LAYER_NORM_EPS) * w[i] + b[i];
        }
    }
}

// transformers' Conv1D: out = x @ W + b, W [nx, nf].
static void ref_conv1d(double *out, const double *x, const float *W, const float *b, int T, int nx, int nf) {
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < nf; j++) {
            double s = b[j];
            for (int i = 0; i < nx; i++) { s += x[t * nx + i] * W[(size_t)i * nf + j]; }
            out[t * nf + j] = s;
        }
    }
}

/*
 * GPT2LMHeadModel's forward as transformers' modeling_gpt2.py writes it, in double, on the tensors of an exported
 * model.safetensors: h = wte[x] + wpe; per block h += c_proj(attn(ln_1(h))), h += mlp.c_proj(gelu_new(c_fc(ln_2(h))));
 * c_attn's output splits into q, k, v of C each, heads taking hs consecutive features; logits = ln_f(h) wte^T.
 */
static void hf_reference_logits(const char *path, const GPTConfig *c, const int *tokens, int T, double *logits) {
    StFile f;
    st_open(&f, path);
    int C = c->channels, NH = c->num_heads, hs = C / NH, V = c->vocab_size;
    float *wte = load_tensor(&f, "transformer.wte.weight"), *wpe = load_tensor(&f, "transformer.wpe.weight");
    double *h = (double *)calloc_check((size_t)T * C, sizeof(double), "h");
    double *x = (double *)calloc_check((size_t)T * 4 * C, sizeof(double), "x");
    double *y = (double *)calloc_check((size_t)T * 4 * C, sizeof(double), "y");
    double *qkv = (double *)calloc_check((size_t)T * 3 * C, sizeof(double), "qkv");
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < C; i++) { h[t * C + i] = (double)wte[(size_t)tokens[t] * C + i] + wpe[t * C + i]; }
    }
    for (int l = 0; l < c->num_layers; l++) {
        char name[HF_NAME_LEN];
#define BLOCK_TENSOR(var, suffix)                                                                             \
    snprintf(name, sizeof(name), "transformer.h.%d." suffix, l);                                              \
    float *var = load_tensor(&f, name)
        BLOCK_TENSOR(ln1w, "ln_1.weight"); BLOCK_TENSOR(ln1b, "ln_1.bias");
        BLOCK_TENSOR(aw, "attn.c_attn.weight"); BLOCK_TENSOR(ab, "attn.c_attn.bias");
        BLOCK_TENSOR(pw, "attn.c_proj.weight"); BLOCK_TENSOR(pb, "attn.c_proj.bias");
        BLOCK_TENSOR(ln2w, "ln_2.weight"); BLOCK_TENSOR(ln2b, "ln_2.bias");
        BLOCK_TENSOR(fw, "mlp.c_fc.weight"); BLOCK_TENSOR(fb, "mlp.c_fc.bias");
        BLOCK_TENSOR(mw, "mlp.c_proj.weight"); BLOCK_TENSOR(mb, "mlp.c_proj.bias");
#undef BLOCK_TENSOR
        ref_layernorm(x, h, ln1w, ln1b, T, C);
        ref_conv1d(qkv, x, aw, ab, T, C, 3 * C);
        for (int head = 0; head < NH; head++) {
            for (int t = 0; t < T; t++) {
                const double *q = qkv + t * 3 * C + head * hs;
                double att[64], maxv = -INFINITY, sum = 0; // T <= 64
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + u * 3 * C + C + head * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) { s += q[i] * k[i]; }
                    att[u] = s / sqrt((double)hs);
                    maxv = att[u] > maxv ? att[u] : maxv;
                }
                for (int u = 0; u <= t; u++) { att[u] = exp(att[u] - maxv); sum += att[u]; }
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++) { o += att[u] / sum * qkv[u * 3 * C + 2 * C + head * hs + i]; }
                    x[t * C + head * hs + i] = o;
                }
            }
        }
        ref_conv1d(y, x, pw, pb, T, C, C);
        for (int i = 0; i < T * C; i++) { h[i] += y[i]; }
        ref_layernorm(x, h, ln2w, ln2b, T, C);
        ref_conv1d(y, x, fw, fb, T, C, 4 * C);
        for (int i = 0; i < T * 4 * C; i++) {
            double v = y[i];
            y[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / REF_PI) * (v + 0.044715 * v * v * v))); // NewGELUActivation
        }
        ref_conv1d(x, y, mw, mb, T, 4 * C, C);
        for (int i = 0; i < T * C; i++) { h[i] += x[i]; }
        free(ln1w); free(ln1b); free(aw); free(ab); free(pw); free(pb);
        free(ln2w); free(ln2b); free(fw); free(fb); free(mw); free(mb);
    }
    float *lnfw = load_tensor(&f, "transformer.ln_f.weight"), *lnfb = load_tensor(&f, "transformer.ln_f.bias");
    ref_layernorm(x, h, lnfw, lnfb, T, C);
    for (int t = 0; t < T; t++) {
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int i = 0; i < C; i++) { s += x[t * C + i] * wte[(size_t)v * C + i]; }
            logits[(size_t)t * V + v] = s;
        }
    }
    free(lnfw); free(lnfb); free(wte); free(wpe); free(h); free(x); free(y); free(qkv);
    st_close(&f);
}

static void test_forward_matches_hf(const char *model_path, const char *hf_dir, const GPTConfig *c,
                                    const float *params) {
    int T = c->max_seq_len, V = c->vocab_size, Vp = c->padded_vocab_size;
    int tokens[64], targets[64];
    for (int t = 0; t < T; t++) {
        tokens[t] = (int)rng_below(TEST_SEED, 77, (uint64_t)t, (uint32_t)V);
        targets[t] = (int)rng_below(TEST_SEED, 78, (uint64_t)t, (uint32_t)V);
    }
    CpuModel *m = cpu_model_create(c, 1, T);
    memcpy(m->params, params, m->layout.total * sizeof(float));
    double loss = cpu_model_forward(m, tokens, targets, 1, T);
    char path[HF_PATH_LEN];
    hf_path(path, hf_dir, HF_WEIGHTS_FILE);
    double *ref = (double *)malloc_check((size_t)T * V * sizeof(double), "reference logits");
    hf_reference_logits(path, c, tokens, T, ref);
    float *ours = (float *)malloc_check((size_t)T * V * sizeof(float), "logits");
    float *theirs = (float *)malloc_check((size_t)T * V * sizeof(float), "logits");
    double ref_loss = 0;
    for (int t = 0; t < T; t++) {
        double maxv = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            ours[(size_t)t * V + v] = m->acts.logits[(size_t)t * Vp + v];
            theirs[(size_t)t * V + v] = (float)ref[(size_t)t * V + v];
            maxv = ref[(size_t)t * V + v] > maxv ? ref[(size_t)t * V + v] : maxv;
        }
        for (int v = 0; v < V; v++) { sum += exp(ref[(size_t)t * V + v] - maxv); }
        ref_loss += (log(sum) + maxv - ref[(size_t)t * V + targets[t]]) / T;
    }
    double err = max_rel_err(ours, theirs, (size_t)T * V);
    check(err < LOGIT_TOL && fabs(loss - ref_loss) < LOGIT_TOL * fabs(ref_loss), "hf_forward_matches_cpu_model",
          "logits differ by %.3g (relative), losses %.6f (ours) vs %.6f (HF's forward); model %s", err, loss, ref_loss,
          model_path);
    free(ours);
    free(theirs);
    free(ref);
    cpu_model_free(m);
}

// ---------------------------------------------------------------------------------------------------------
// round trips

// Rounds to bf16 by another route than f32_to_bf16: 8 significant bits, ties to even (the default rounding mode).
static float ref_bf16(float x) {
    if (x == 0.0f || !isfinite(x)) { return x; }
    int e;
    double m = frexp((double)x, &e);
    return (float)ldexp(nearbyint(ldexp(m, BF16_SIGNIFICANT_BITS)), e - BF16_SIGNIFICANT_BITS);
}

static void test_round_trips(void) {
    GPTConfig c = tiny_config();
    ParamLayout p;
    param_layout(&c, &p);
    float *params = random_params(&c, 1);
    char model[HF_PATH_LEN], hf[HF_PATH_LEN], back[HF_PATH_LEN], path[HF_PATH_LEN];
    path_in_dir(model, "model.bin");
    model_file_write(model, &c, params);

    path_in_dir(hf, "hf_fp32");
    export_model(model, hf, 0, 0, 0);
    test_forward_matches_hf(model, hf, &c, params);
    path_in_dir(back, "back_fp32.bin");
    hf_import(hf, back, 0);
    check(files_equal(model, back), "hf_fp32_round_trip_identical", "'%s' differs from '%s'", back, model);

    // the exported folder's files
    JsonValue cfg;
    hf_path(path, hf, HF_CONFIG_FILE);
    cfg = read_json(path);
    const JsonValue *arch = json_get(&cfg, "architectures");
    const JsonValue *inner = json_get(&cfg, "n_inner");
    int ok = jint(&cfg, "n_embd") == c.channels && jint(&cfg, "n_layer") == c.num_layers &&
             jint(&cfg, "n_head") == c.num_heads && jint(&cfg, "n_positions") == c.max_seq_len &&
             jint(&cfg, "n_ctx") == c.max_seq_len && jint(&cfg, "vocab_size") == GPT2_VOCAB_SIZE &&
             jnum(&cfg, "layer_norm_epsilon") == 1e-5 && jnum(&cfg, "initializer_range") == 0.02 &&
             json_is_string(json_get(&cfg, "activation_function"), "gelu_new") &&
             json_is_string(json_get(&cfg, "model_type"), "gpt2") && arch && arch->type == JSON_ARRAY &&
             arch->count == 1 && json_is_string(&arch->items[0], "GPT2LMHeadModel") &&
             jint(&cfg, "bos_token_id") == 50256 && jint(&cfg, "eos_token_id") == 50256 &&
             json_is_string(json_get(&cfg, "torch_dtype"), "float32") && jbool(&cfg, "tie_word_embeddings") == 1 &&
             inner && inner->type == JSON_NULL;
    check(ok, "hf_config_json_fields", "config.json lacks a field or has a wrong value: see %s", path);
    json_free(&cfg);
    GPTConfig read_back = hf_config_read(hf);
    check(config_equal(&read_back, &c), "hf_config_json_reads_back", "L %d C %d NH %d T %d", read_back.num_layers,
          read_back.channels, read_back.num_heads, read_back.max_seq_len);
    hf_path(path, hf, HF_GENERATION_FILE);
    cfg = read_json(path);
    check(jint(&cfg, "eos_token_id") == 50256 && jint(&cfg, "bos_token_id") == 50256,
          "hf_generation_config", "see %s", path);
    json_free(&cfg);
    hf_path(path, hf, HF_TOKENIZER_CONFIG_FILE);
    cfg = read_json(path);
    check(jint(&cfg, "model_max_length") == c.max_seq_len &&
              json_is_string(json_get(&cfg, "eos_token"), "<|endoftext|>"),
          "hf_tokenizer_config", "see %s", path);
    json_free(&cfg);
    char vocab[HF_PATH_LEN], merges[HF_PATH_LEN];
    hf_path(vocab, hf, HF_VOCAB_FILE);
    hf_path(merges, hf, HF_MERGES_FILE);
    check(files_equal(vocab, VOCAB_DIR "/encoder.json") && files_equal(merges, VOCAB_DIR "/vocab.bpe"),
          "hf_tokenizer_files_are_gpt2s", "vocab.json or merges.txt differs from data/gpt2's");
    StFile st;
    hf_path(path, hf, HF_WEIGHTS_FILE);
    st_open(&st, path);
    check(st.count == (size_t)hf_num_tensors(&c) && !st_find(&st, HF_LM_HEAD) &&
              st_find(&st, "transformer.wte.weight")->shape[0] == GPT2_VOCAB_SIZE,
          "hf_no_lm_head_real_vocab_rows", "%zu tensors", st.count);
    st_close(&st);

    // bf16: each weight rounded to nearest even
    path_in_dir(hf, "hf_bf16");
    export_model(model, hf, 1, 0, 0);
    path_in_dir(back, "back_bf16.bin");
    hf_import(hf, back, 0);
    float *got = read_model(back, &c);
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < p.total; i++) {
        if (got[i] != ref_bf16(params[i]) && wrong++ == 0) { first = i; }
    }
    check(wrong == 0, "hf_bf16_round_trip_rounds_to_nearest_even", "%zu weights differ, first %zu: %.9g, want %.9g",
          wrong, first, (double)got[first], (double)ref_bf16(params[first]));
    hf_path(path, hf, HF_CONFIG_FILE);
    cfg = read_json(path);
    hf_path(path, hf, HF_WEIGHTS_FILE);
    st_open(&st, path);
    check(json_is_string(json_get(&cfg, "torch_dtype"), "bfloat16") && st.tensors[0].dtype == ST_BF16,
          "hf_bf16_dtype_recorded", "torch_dtype or the safetensors dtype is not bf16");
    st_close(&st);
    json_free(&cfg);
    free(got);

    // sharded: an index and two shards
    path_in_dir(hf, "hf_sharded");
    export_model(model, hf, 0, SHARD_TEST_BYTES, 0);
    char shard1[HF_PATH_LEN], shard2[HF_PATH_LEN], index[HF_PATH_LEN], single[HF_PATH_LEN];
    hf_path(shard1, hf, "model-00001-of-00002.safetensors");
    hf_path(shard2, hf, "model-00002-of-00002.safetensors");
    hf_path(index, hf, HF_INDEX_FILE);
    hf_path(single, hf, HF_WEIGHTS_FILE);
    cfg = read_json(index);
    const JsonValue *map = json_get(&cfg, "weight_map");
    check(file_exists(shard1) && file_exists(shard2) && !file_exists(single) && map &&
              map->count == (size_t)hf_num_tensors(&c) &&
              jint(json_get(&cfg, "metadata"), "total_size") ==
                  (long long)(p.total - (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels) * 4,
          "hf_sharded_export_layout", "shards, index or total_size wrong in %s", hf);
    json_free(&cfg);
    path_in_dir(back, "back_sharded.bin");
    hf_import(hf, back, 0);
    check(files_equal(model, back), "hf_sharded_round_trip_identical", "'%s' differs from '%s'", back, model);

    // a forced export into the sharded folder: one file, the shards and the index removed
    export_model(model, hf, 0, 0, 1);
    check(file_exists(single) && !file_exists(shard1) && !file_exists(shard2) && !file_exists(index),
          "hf_forced_export_removes_stale_weights", "%s holds an earlier export's weights files", hf);
    path_in_dir(back, "back_forced.bin");
    hf_import(hf, back, 0);
    check(files_equal(model, back), "hf_forced_export_round_trip", "'%s' differs from '%s'", back, model);
    free(params);
}

// ---------------------------------------------------------------------------------------------------------
// variants of a Hugging Face folder, written by hand

typedef struct {
    const char *drop;       // leave this tensor out
    const char *swap_shape; // write this 2-D tensor with its dimensions swapped (as a Linear's [out, in] would be)
    const char *as_i32;     // label this tensor I32
    const char *nan_in;     // this tensor's element 3 is NaN
    const char *extra;      // add a [C] tensor of this name
    const char *only;       // write this tensor alone
    int no_prefix;          // names without "transformer." (the original gpt2 repository's)
    int f16;                // every tensor F16 (the values must be exact in f16)
    int mask_buffers;       // add each block's attn.bias [1, 1, T, T] and attn.masked_bias [] buffers
    int lm_head;            // 1: add lm_head.weight equal to wte; 2: one that differs in one element; 3: by one ulp
} Variant;

typedef struct {
    char name[HF_NAME_LEN];
    StSpec spec;
    void *data;
    size_t bytes;
} Entry;

// An exact f16 value (zero or normal) as f16 bits.
static uint16_t f16_exact_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    uint32_t sign = (b >> 16) & 0x8000u, exp = (b >> F32_MANT_BITS) & 0xFFu;
    if (exp == 0) { return (uint16_t)sign; }
    uint32_t mant = (b & 0x7FFFFFu) >> (F32_MANT_BITS - F16_MANT_BITS);
    return (uint16_t)(sign | ((exp - F16_TO_F32_EXP_BIAS) << F16_MANT_BITS) | mant);
}

static void entry_set(Entry *e, const char *name, StDtype dtype, int ndim, const long long *shape, const float *values,
                      size_t n) {
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->spec.name = e->name;
    e->spec.dtype = dtype;
    e->spec.ndim = ndim;
    for (int d = 0; d < ndim; d++) { e->spec.shape[d] = shape[d]; }
    e->bytes = n * (size_t)ST_DTYPE_BYTES[dtype];
    e->data = malloc_check(e->bytes, "entry");
    if (dtype == ST_F16) {
        for (size_t i = 0; i < n; i++) { ((uint16_t *)e->data)[i] = f16_exact_bits(values[i]); }
    } else {
        memcpy(e->data, values, e->bytes); // F32, or I32 holding the same bytes
    }
}

static void write_config(const char *dir, const char *text) {
    char path[HF_PATH_LEN];
    hf_path(path, dir, HF_CONFIG_FILE);
    hf_write_file(path, text, strlen(text));
}

static void write_standard_config(const char *dir, const GPTConfig *c) {
    JsonText t = {NULL, 0, 0};
    hf_config_json(&t, c, "float32");
    write_config(dir, t.s);
    json_text_free(&t);
}

// Writes the weights of params as `file` in dir, altered as v says.
static void write_variant_weights(const char *dir, const char *file, const GPTConfig *c, const float *params,
                                  const Variant *v) {
    ParamLayout p;
    param_layout(c, &p);
    int n = hf_num_tensors(c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensors");
    hf_tensors(c, hts);
    Entry *es = (Entry *)calloc_check((size_t)n + 2 * (size_t)c->num_layers + 2, sizeof(Entry), "entries");
    int ne = 0;
    float *buf = (float *)malloc_check(((size_t)c->vocab_size * c->channels + 1) * sizeof(float), "buffer");
    StDtype dtype = v->f16 ? ST_F16 : ST_F32;
    for (int i = 0; i < n; i++) {
        const HfTensor *h = &hts[i];
        if ((v->drop && strcmp(h->name, v->drop) == 0) || (v->only && strcmp(h->name, v->only) != 0)) { continue; }
        hf_gather(h, c, &p, params, buf);
        long long shape[2] = {h->shape[0], h->shape[1]};
        if (v->swap_shape && strcmp(h->name, v->swap_shape) == 0) { shape[0] = h->shape[1]; shape[1] = h->shape[0]; }
        if (v->nan_in && strcmp(h->name, v->nan_in) == 0) { buf[3] = NAN; }
        StDtype d = v->as_i32 && strcmp(h->name, v->as_i32) == 0 ? ST_I32 : dtype;
        entry_set(&es[ne++], v->no_prefix ? hf_short_name(h->name) : h->name, d, h->ndim, shape, buf, hf_numel(h));
    }
    if (v->mask_buffers) {
        size_t TT = (size_t)c->max_seq_len * c->max_seq_len;
        float *mask = (float *)calloc_check(TT, sizeof(float), "mask");
        for (int t = 0; t < c->max_seq_len; t++) {
            for (int u = 0; u <= t; u++) { mask[t * c->max_seq_len + u] = 1.0f; }
        }
        float fill = -1e4f;
        for (int l = 0; l < c->num_layers; l++) {
            char name[HF_NAME_LEN];
            long long shape[4] = {1, 1, c->max_seq_len, c->max_seq_len};
            snprintf(name, sizeof(name), "%sh.%d.attn.bias", v->no_prefix ? "" : HF_GPT2_PREFIX, l);
            entry_set(&es[ne++], name, ST_F32, 4, shape, mask, TT);
            snprintf(name, sizeof(name), "%sh.%d.attn.masked_bias", v->no_prefix ? "" : HF_GPT2_PREFIX, l);
            entry_set(&es[ne++], name, ST_F32, 0, shape, &fill, 1);
        }
        free(mask);
    }
    if (v->lm_head) {
        hf_gather(&hts[0], c, &p, params, buf);
        if (v->lm_head == 2) { buf[12345] += 1.0f; }
        if (v->lm_head == 3) { buf[UNTIED_ELEMENT] = nextafterf(buf[UNTIED_ELEMENT], INFINITY); }
        entry_set(&es[ne++], HF_LM_HEAD, ST_F32, 2, hts[0].shape, buf, hf_numel(&hts[0]));
    }
    if (v->extra) {
        long long shape[1] = {c->channels};
        memset(buf, 0, (size_t)c->channels * sizeof(float));
        entry_set(&es[ne++], v->extra, ST_F32, 1, shape, buf, (size_t)c->channels);
    }
    StSpec *specs = (StSpec *)calloc_check((size_t)ne, sizeof(StSpec), "specs");
    for (int i = 0; i < ne; i++) { specs[i] = es[i].spec; }
    char path[HF_PATH_LEN];
    hf_path(path, dir, file);
    StWriter w;
    st_writer_open(&w, path, specs, (size_t)ne, "pt");
    for (int i = 0; i < ne; i++) {
        st_writer_tensor(&w, es[i].data, es[i].bytes);
        free(es[i].data);
    }
    st_writer_close(&w);
    free(specs);
    free(buf);
    free(es);
    free(hts);
}

static void make_variant(const char *dir, const GPTConfig *c, const float *params, const Variant *v) {
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, c);
    write_variant_weights(dir, HF_WEIGHTS_FILE, c, params, v);
}

typedef struct {
    char hf_dir[HF_PATH_LEN], out[HF_PATH_LEN];
} ImportArgs;

static void import_child(void *arg) {
    ImportArgs *a = (ImportArgs *)arg;
    hf_import(a->hf_dir, a->out, 0);
}

// The import fails with one line holding want1 and want2, and writes no model file.
static void expect_import_error(const char *name, const char *dir, const char *want1, const char *want2) {
    ImportArgs a;
    snprintf(a.hf_dir, sizeof(a.hf_dir), "%s", dir);
    path_in_dir(a.out, "never.bin");
    Child ch;
    child_start(&ch, import_child, &a);
    child_wait(&ch, now_s() + CHILD_TIMEOUT_S);
    const char *nl = strchr(ch.err, '\n');
    check(ch.status > 0 && ch.status < 128 && strstr(ch.err, want1) && strstr(ch.err, want2) && nl && nl[1] == '\0' &&
              !file_exists(a.out),
          name, "status %d, stderr '%s', expected one line with '%s' and '%s' and no '%s'", ch.status, ch.err, want1,
          want2, a.out);
}

static void test_import_variants(void) {
    GPTConfig c = tiny_config();
    float *params = random_params(&c, 2);
    char model[HF_PATH_LEN], dir[HF_PATH_LEN], back[HF_PATH_LEN], path[HF_PATH_LEN];
    path_in_dir(model, "variants_model.bin");
    model_file_write(model, &c, params);

    // accepted: the original gpt2 repository's naming, its mask buffers and a tied head
    Variant old = {.no_prefix = 1, .mask_buffers = 1, .lm_head = 1};
    path_in_dir(dir, "hf_old_style");
    make_variant(dir, &c, params, &old);
    path_in_dir(back, "back_old_style.bin");
    hf_import(dir, back, 0);
    check(files_equal(model, back), "hf_import_unprefixed_buffers_tied_head", "'%s' differs from '%s'", back, model);

    // F16: f16-exact values import as themselves
    ParamLayout p;
    param_layout(&c, &p);
    float *exact = (float *)malloc_check(p.total * sizeof(float), "f16 params");
    for (size_t i = 0; i < p.total; i++) { exact[i] = roundf(params[i] * F16_EXACT_SCALE) / F16_EXACT_SCALE; }
    Variant f16 = {.f16 = 1};
    path_in_dir(dir, "hf_f16");
    make_variant(dir, &c, exact, &f16);
    path_in_dir(back, "back_f16.bin");
    hf_import(dir, back, 0);
    float *got = read_model(back, &c);
    check(memcmp(got, exact, p.total * sizeof(float)) == 0, "hf_import_f16", "F16 weights did not import exactly");
    free(got);
    free(exact);

    static const struct {
        const char *name;
        Variant v;
        const char *want1, *want2;
    } bad[] = {
        {"hf_refuses_missing_tensor", {.drop = "transformer.ln_f.bias"},
         "has no tensor 'transformer.ln_f.bias' (nor 'ln_f.bias')", "not a complete GPT-2 checkpoint"},
        {"hf_refuses_wrong_shape", {.swap_shape = "transformer.h.1.attn.c_attn.weight"},
         "tensor 'transformer.h.1.attn.c_attn.weight' has shape [96, 32]", "needs [32, 96]"},
        {"hf_refuses_integer_dtype", {.as_i32 = "transformer.wpe.weight"},
         "tensor 'transformer.wpe.weight' has dtype I32", "only F32, BF16 and F16"},
        {"hf_refuses_non_finite", {.nan_in = "transformer.h.0.mlp.c_fc.bias"},
         "element 3 of tensor 'transformer.h.0.mlp.c_fc.bias' is nan", "non-finite"},
        {"hf_refuses_untied_head", {.lm_head = 2},
         "lm_head.weight differs from the token embedding", "element 12345"},
        {"hf_refuses_unknown_tensor", {.extra = "transformer.h.0.attn.q_norm.weight"},
         "holds tensor 'transformer.h.0.attn.q_norm.weight', which GPT-2 (GPT2LMHeadModel) does not have", ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        path_in_dir(dir, bad[i].name);
        make_variant(dir, &c, params, &bad[i].v);
        expect_import_error(bad[i].name, dir, bad[i].want1, bad[i].want2);
    }
    // a head one ulp from wte: the message shows two different numbers (%.9g tells every two floats apart)
    Variant ulp = {.lm_head = 3};
    path_in_dir(dir, "hf_untied_by_one_ulp");
    make_variant(dir, &c, params, &ulp);
    char want[128];
    float mine = params[UNTIED_ELEMENT]; // wte's element, at the start of the parameters
    snprintf(want, sizeof(want), "(%.9g vs %.9g)", (double)nextafterf(mine, INFINITY), (double)mine);
    expect_import_error("hf_untied_by_one_ulp_shows_both_values", dir, "differs from the token embedding", want);

    // configs that are not GPT-2's, or not this shape
    Variant plain = {.f16 = 0};
    static const struct {
        const char *name, *config, *want;
    } configs[] = {
        {"hf_config_other_model_type", "{\"model_type\": \"mistral\", \"n_layer\": 2}",
         "has model_type \"mistral\", not \"gpt2\" or \"llama\""},
        {"hf_config_no_model_type", "{\"n_layer\": 2}", "has model_type (none), not \"gpt2\""},
        {"hf_config_missing_n_head",
         "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"vocab_size\": 50257, \"n_positions\": 16}",
         "has no n_head: it is not a GPT-2 config.json"},
        {"hf_config_heads_do_not_divide", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 5, "
                                          "\"vocab_size\": 50257, \"n_positions\": 16}",
         "n_embd 32 is not divisible by n_head 5"},
        {"hf_config_other_vocabulary", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 4, "
                                       "\"vocab_size\": 50304, \"n_positions\": 16}", "has vocab_size 50304"},
        {"hf_config_other_activation", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 4, "
                                       "\"vocab_size\": 50257, \"n_positions\": 16, \"activation_function\": \"relu\"}",
         "has activation_function \"relu\""},
        {"hf_config_layer_count_not_integer", "{\"model_type\": \"gpt2\", \"n_layer\": 2.5, \"n_embd\": 32}",
         "n_layer is 2.5, not an integer in [1, 1024]"},
        // values are shown as the file writes them: 2.0 is no integer to transformers either
        {"hf_config_layer_count_written_as_float", "{\"model_type\": \"gpt2\", \"n_layer\": 2.0, \"n_embd\": 32}",
         "n_layer is 2.0, not an integer in [1, 1024]"},
        {"hf_config_epsilon_a_string", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 4, "
                                       "\"vocab_size\": 50257, \"n_positions\": 16, \"layer_norm_epsilon\": \"1e-5\"}",
         "has layer_norm_epsilon \"1e-5\", but train_gpt's LayerNorm uses 1e-05"},
        {"hf_config_epsilon_near", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 4, "
                                   "\"vocab_size\": 50257, \"n_positions\": 16, \"layer_norm_epsilon\": 1.00002e-5}",
         "has layer_norm_epsilon 1.00002e-5, but"},
        // Python's json and transformers take the last of a repeated key, a first-match lookup the first: refused
        {"hf_config_duplicate_key", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 32, \"n_head\": 4, "
                                    "\"vocab_size\": 50257, \"n_positions\": 16, \"n_layer\": 3}",
         "is not valid JSON (duplicate key \"n_layer\" at byte 104)"},
        {"hf_config_bad_json", "{\"model_type\": \"gpt2\",", "is not valid JSON (expected a string key at byte 22)"},
        {"hf_config_shape_mismatch", // n_ctx: the older name of n_positions
         "{\"model_type\": \"gpt2\", \"n_layer\": 3, \"n_embd\": 32, \"n_head\": 4, \"vocab_size\": 50257, "
         "\"n_ctx\": 16}",
         "has no tensor 'transformer.h.2.ln_1.weight'"},
    };
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        path_in_dir(dir, configs[i].name);
        make_variant(dir, &c, params, &plain);
        write_config(dir, configs[i].config);
        expect_import_error(configs[i].name, dir, "config.json", configs[i].want);
    }
    path_in_dir(dir, "hf_no_config");
    make_variant(dir, &c, params, &plain);
    hf_path(path, dir, HF_CONFIG_FILE);
    unlink(path);
    expect_import_error("hf_config_missing", dir, "cannot open", "config.json");
    path_in_dir(dir, "hf_no_weights");
    make_variant(dir, &c, params, &plain);
    hf_path(path, dir, HF_WEIGHTS_FILE);
    unlink(path);
    expect_import_error("hf_weights_missing", dir, "holds neither model.safetensors nor model.safetensors.index.json",
                        "save_pretrained");

    // an existing model file is not replaced without force
    path_in_dir(dir, "hf_plain");
    make_variant(dir, &c, params, &plain);
    ImportArgs a;
    snprintf(a.hf_dir, sizeof(a.hf_dir), "%s", dir);
    snprintf(a.out, sizeof(a.out), "%s", model);
    expect_child_error("hf_import_refuses_overwrite", import_child, &a, "exists; pass --force to replace it", model);
    free(params);
}

// Indexes written by hand over hand-written shards.
static void write_index(const char *dir, const GPTConfig *c, const char *default_file, const char *odd_tensor,
                        const char *odd_file) {
    int n = hf_num_tensors(c);
    HfTensor *hts = (HfTensor *)malloc_check((size_t)n * sizeof(HfTensor), "tensors");
    hf_tensors(c, hts);
    JsonText t = {NULL, 0, 0};
    json_text_printf(&t, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int i = 0; i < n; i++) {
        json_text_printf(&t, "%s\"%s\": \"%s\"", i ? ", " : "", hts[i].name,
                         odd_tensor && strcmp(hts[i].name, odd_tensor) == 0 ? odd_file : default_file);
    }
    json_text_printf(&t, "}}");
    char path[HF_PATH_LEN];
    hf_path(path, dir, HF_INDEX_FILE);
    hf_write_file(path, t.s, t.len);
    json_text_free(&t);
    free(hts);
}

static void test_bad_indexes(void) {
    GPTConfig c = tiny_config();
    float *params = random_params(&c, 3);
    Variant all = {.f16 = 0}, no_wpe = {.drop = "transformer.wpe.weight"};
    char dir[HF_PATH_LEN];

    path_in_dir(dir, "hf_index_escapes");
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, &c);
    write_variant_weights(dir, "a.safetensors", &c, params, &all);
    write_index(dir, &c, "a.safetensors", "transformer.wpe.weight", "../a.safetensors");
    expect_import_error("hf_index_refuses_path_outside", dir, "places tensor 'transformer.wpe.weight' in "
                        "\"../a.safetensors\"", "not the name of a file beside it");

    path_in_dir(dir, "hf_index_mismatch");
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, &c);
    write_variant_weights(dir, "a.safetensors", &c, params, &no_wpe);
    write_index(dir, &c, "a.safetensors", NULL, NULL);
    expect_import_error("hf_index_tensor_not_in_shard", dir, "places tensor 'transformer.wpe.weight' in",
                        "the index and the shards do not match");

    path_in_dir(dir, "hf_index_duplicate");
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, &c);
    write_variant_weights(dir, "a.safetensors", &c, params, &all);
    write_variant_weights(dir, "b.safetensors", &c, params, &all);
    write_index(dir, &c, "a.safetensors", "transformer.wpe.weight", "b.safetensors");
    expect_import_error("hf_index_tensor_in_two_shards", dir, "model.safetensors.index.json' holds tensor", "twice");

    path_in_dir(dir, "hf_index_no_map");
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, &c);
    char path[HF_PATH_LEN];
    hf_path(path, dir, HF_INDEX_FILE);
    hf_write_file(path, "{\"metadata\": {}}", strlen("{\"metadata\": {}}"));
    expect_import_error("hf_index_without_weight_map", dir, "has no \"weight_map\" object", "save_pretrained");

    free(params);
}

// ---------------------------------------------------------------------------------------------------------
// export's refusals

typedef struct {
    char model[HF_PATH_LEN], out[HF_PATH_LEN], vocab[HF_PATH_LEN];
} ExportArgs;

static void export_child(void *arg) {
    ExportArgs *a = (ExportArgs *)arg;
    HfExportOptions o = {a->model, a->out, a->vocab, 0, 0, 0};
    hf_export(&o);
}

static void test_export_refusals(void) {
    GPTConfig c = tiny_config();
    float *params = random_params(&c, 4);
    ExportArgs a;
    path_in_dir(a.model, "export_model.bin");
    model_file_write(a.model, &c, params);
    snprintf(a.vocab, sizeof(a.vocab), VOCAB_DIR);
    path_in_dir(a.out, "export_nonempty");
    make_dirs_named(a.out, "test folder");
    char path[HF_PATH_LEN];
    hf_path(path, a.out, "notes.txt");
    hf_write_file(path, "mine", 4);
    expect_child_error("hf_export_refuses_nonempty_dir", export_child, &a, "exists and is not empty; pass --force",
                       a.out);
    size_t n;
    char *mine = slurp(path, &n);
    hf_path(path, a.out, HF_CONFIG_FILE);
    check(n == 4 && memcmp(mine, "mine", 4) == 0 && !file_exists(path), "hf_export_refusal_writes_nothing",
          "the refused export wrote into %s", a.out);
    free(mine);

    path_in_dir(a.out, "export_other_vocab");
    path_in_dir(a.vocab, "vocab3");
    make_dirs_named(a.vocab, "test folder");
    hf_path(path, a.vocab, GPT2_ENCODER_FILE);
    hf_write_file(path, "{\"a\": 0, \"b\": 1}", strlen("{\"a\": 0, \"b\": 1}"));
    expect_child_error("hf_export_refuses_other_vocabulary", export_child, &a,
                       "holds 2 tokens but the model's vocabulary has 50257", "--vocab-dir");

    // GPT-2's encoder.json without its vocab.bpe: found before the folder is made, so nothing is created
    path_in_dir(a.out, "export_no_merges");
    path_in_dir(a.vocab, "vocab_no_merges");
    make_dirs_named(a.vocab, "test folder");
    char *encoder = slurp(VOCAB_DIR "/" GPT2_ENCODER_FILE, &n);
    hf_path(path, a.vocab, GPT2_ENCODER_FILE);
    hf_write_file(path, encoder, n);
    free(encoder);
    expect_child_error("hf_export_refuses_missing_merges", export_child, &a, "vocab.bpe", "--vocab-dir");
    check(!file_exists(a.out), "hf_export_refusal_creates_nothing", "the refused export made '%s'", a.out);

    snprintf(a.vocab, sizeof(a.vocab), VOCAB_DIR);
    path_in_dir(a.model, "export_garbage.bin");
    hf_write_file(a.model, "not a model", 11);
    expect_child_error("hf_export_refuses_non_model_file", export_child, &a, "export_garbage.bin",
                       "truncated or unreadable");

    // a crafted header whose size arithmetic wraps to a header-only file (C = 2^30, Vp + maxT + 13 L + 2 = 2^32)
    GPTConfig huge = config_gpt2(16, GPT2_VOCAB_SIZE, 1, 1, 8); // GPT-2's description, the crafted llm.c values
    huge.max_seq_len = INT_MAX - 13;
    huge.padded_vocab_size = INT_MAX;
    huge.channels = 1 << 30;
    int hd[MODEL_HEADER_INTS];
    model_header_fill(hd, &huge, MODEL_VERSION_FP32);
    path_in_dir(a.model, "export_crafted.bin");
    hf_write_file(a.model, hd, sizeof(hd));
    path_in_dir(a.out, "export_crafted");
    expect_child_error("hf_export_refuses_crafted_header", export_child, &a, "export_crafted.bin",
                       "has a corrupt header");
    check(!file_exists(a.out), "hf_export_crafted_header_creates_nothing", "the refused export made '%s'", a.out);
    free(params);
}

// ---------------------------------------------------------------------------------------------------------
// Llama

#define LLAMA_TEST_ORIGINAL_POS 32 // llama3 scaling's original context, below the model's 64 positions

// A tiny Llama with grouped-query attention: 2 layers of 32 channels, 4 query heads over 2 key/value heads (head
// size 8), a SwiGLU MLP of 48, a vocabulary of 200 (padded to 256), 64 positions; tied or not, llama3 rope scaling
// or none.
static GPTConfig tiny_llama(int tied, int scaled) {
    GPTConfig c = config_default(ARCH_LLAMA, 64, 2, 4, 32);
    c.num_kv_heads = 2;
    c.ffn_hidden = 48;
    c.vocab_size = 200;
    c.padded_vocab_size = padded_vocab(c.vocab_size);
    c.tied = tied;
    if (scaled) {
        c.rope_scaling = llama3_rope_scaling(LLAMA31_ROPE_FACTOR);
        c.rope_scaling.original_max_pos = LLAMA_TEST_ORIGINAL_POS;
    }
    config_validate(&c);
    return c;
}

static void export_llama(const char *model, const char *out_dir) {
    HfExportOptions o = {model, out_dir, NULL, 0, 0, 0};
    hf_export(&o);
}

// HF tensor `name` of the folder's model.safetensors equals rows [row0, row0 + rows) of layer `layer` of llm.c's
// tensor t: the mapping computed here by hand, not by the table.
static int hf_tensor_is_rows(const char *dir, const char *name, const GPTConfig *c, const float *params, int t,
                             int layer, size_t row0, size_t rows) {
    char path[HF_PATH_LEN];
    hf_path(path, dir, HF_WEIGHTS_FILE);
    StFile f;
    st_open(&f, path);
    ParamLayout p;
    param_layout(c, &p);
    size_t cols = (size_t)c->channels;
    if (t == P_FCPROJW) { cols = (size_t)c->ffn_hidden; }
    const StTensor *st = st_find(&f, name);
    int ok = st && st->ndim == 2 && (size_t)st->shape[0] == rows && (size_t)st->shape[1] == cols;
    if (ok) {
        float *x = load_tensor(&f, name);
        const float *want = params + p.offset[t] + (size_t)layer * (p.size[t] / (size_t)c->num_layers) + row0 * cols;
        ok = memcmp(x, want, rows * cols * sizeof(float)) == 0;
        free(x);
    }
    st_close(&f);
    return ok;
}

// Export then import gives the same file; the folder holds what transformers loads and no tokenizer.
static void test_llama_round_trips(void) {
    for (int tied = 0; tied <= 1; tied++) {
        for (int scaled = 0; scaled <= 1; scaled++) {
            GPTConfig c = tiny_llama(tied, scaled);
            float *params = random_params(&c, 20 + (uint32_t)(2 * tied + scaled));
            char model[HF_PATH_LEN], hf[HF_PATH_LEN], back[HF_PATH_LEN], path[HF_PATH_LEN], name[HF_NAME_LEN];
            snprintf(name, sizeof(name), "llama_tied%d_scaled%d", tied, scaled);
            path_in_dir(model, name);
            strcat(model, ".bin");
            path_in_dir(hf, name);
            path_in_dir(back, name);
            strcat(back, "_back.bin");
            model_file_write(model, &c, params);
            export_llama(model, hf);
            GPTConfig read_back = hf_config_read(hf);
            char what[HF_NAME_LEN + 32];
            snprintf(what, sizeof(what), "%s_config_round_trip", name);
            check(config_equal(&read_back, &c), what, "config.json does not describe the exported model");

            hf_path(path, hf, HF_WEIGHTS_FILE);
            StFile st;
            st_open(&st, path);
            snprintf(what, sizeof(what), "%s_tensors", name);
            check(st.count == (size_t)hf_num_tensors(&c) && (st_find(&st, HF_LM_HEAD) != NULL) == !tied &&
                      st.count == (size_t)(1 + 9 * c.num_layers + 1 + !tied),
                  what, "%zu tensors, lm_head.weight %s", st.count, st_find(&st, HF_LM_HEAD) ? "present" : "absent");
            st_close(&st);
            // layer 1's k: rows C.. of qkvw (after the C rows of q); v after k's KV x HS; up after gate's F rows
            size_t C = (size_t)c.channels, kv = (size_t)c.num_kv_heads * (size_t)config_head_size(&c);
            size_t F = (size_t)c.ffn_hidden;
            snprintf(what, sizeof(what), "%s_qkv_gate_up_rows", name);
            check(hf_tensor_is_rows(hf, "model.layers.1.self_attn.q_proj.weight", &c, params, P_QKVW, 1, 0, C) &&
                      hf_tensor_is_rows(hf, "model.layers.1.self_attn.k_proj.weight", &c, params, P_QKVW, 1, C, kv) &&
                      hf_tensor_is_rows(hf, "model.layers.1.self_attn.v_proj.weight", &c, params, P_QKVW, 1, C + kv,
                                        kv) &&
                      hf_tensor_is_rows(hf, "model.layers.1.mlp.gate_proj.weight", &c, params, P_FCW, 1, 0, F) &&
                      hf_tensor_is_rows(hf, "model.layers.1.mlp.up_proj.weight", &c, params, P_FCW, 1, F, F) &&
                      hf_tensor_is_rows(hf, "model.layers.1.mlp.down_proj.weight", &c, params, P_FCPROJW, 1, 0, C),
                  what, "a projection is not the rows of qkvw, fcw or fcprojw it should be");
            hf_path(path, hf, HF_VOCAB_FILE);
            char gen[HF_PATH_LEN];
            hf_path(gen, hf, HF_GENERATION_FILE);
            snprintf(what, sizeof(what), "%s_no_tokenizer", name);
            check(!file_exists(path) && !file_exists(gen), what, "a Llama export wrote GPT-2's tokenizer files");

            hf_import(hf, back, 0);
            snprintf(what, sizeof(what), "%s_import_same_bytes", name);
            check(files_equal(model, back), what, "'%s' differs from '%s'", back, model);
            free(params);
        }
    }
    // the options the import prints build the same description
    GPTConfig c = tiny_llama(0, 1);
    char options[1024];
    hf_train_options(&c, options, sizeof(options));
    const char *want = " --arch llama --depth 2 --width 32 --heads 4 --vocab-size 200 --kv-heads 2 --ffn 48 "
                       "--rope-scaling llama3 --rope-factor 8 --rope-low-freq-factor 1 --rope-high-freq-factor 4 "
                       "--rope-original-max-pos 32";
    check(strcmp(options, want) == 0, "llama_train_options", "'%s', expected '%s'", options, want);
}

// A sharded checkpoint (two shards and their index, as Llama 3.1-8B ships four), and a tied head stored anyway.
static void test_llama_import_variants(void) {
    GPTConfig c = tiny_llama(0, 1);
    float *params = random_params(&c, 30);
    char model[HF_PATH_LEN], dir[HF_PATH_LEN], back[HF_PATH_LEN];
    path_in_dir(model, "llama_variants.bin");
    model_file_write(model, &c, params);
    Variant no_norm = {.drop = "model.norm.weight"}, norm = {.only = "model.norm.weight"};
    path_in_dir(dir, "llama_sharded");
    make_dirs_named(dir, "test folder");
    write_standard_config(dir, &c);
    write_variant_weights(dir, "model-00001-of-00002.safetensors", &c, params, &no_norm);
    write_variant_weights(dir, "model-00002-of-00002.safetensors", &c, params, &norm);
    write_index(dir, &c, "model-00001-of-00002.safetensors", "model.norm.weight", "model-00002-of-00002.safetensors");
    path_in_dir(back, "llama_sharded_back.bin");
    hf_import(dir, back, 0);
    check(files_equal(model, back), "llama_import_sharded_index", "'%s' differs from '%s'", back, model);

    static const struct {
        const char *name;
        Variant v;
        const char *want1, *want2;
    } bad[] = {
        {"llama_refuses_missing_tensor", {.drop = "model.layers.1.self_attn.v_proj.weight"},
         "has no tensor 'model.layers.1.self_attn.v_proj.weight'", "not a complete Llama checkpoint"},
        {"llama_refuses_missing_head", {.drop = HF_LM_HEAD}, "has no tensor 'lm_head.weight'", "Llama"},
        {"llama_refuses_unknown_tensor", {.extra = "model.layers.0.self_attn.q_norm.weight"},
         "holds tensor 'model.layers.0.self_attn.q_norm.weight', which Llama (LlamaForCausalLM) does not have", ""},
        {"llama_refuses_wrong_shape", {.swap_shape = "model.layers.0.self_attn.k_proj.weight"},
         "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 16]", "needs [16, 32]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        path_in_dir(dir, bad[i].name);
        make_variant(dir, &c, params, &bad[i].v);
        expect_import_error(bad[i].name, dir, bad[i].want1, bad[i].want2);
    }
    free(params);

    // tied: an lm_head.weight equal to the embedding is accepted, one an ulp away refused
    GPTConfig t = tiny_llama(1, 0);
    params = random_params(&t, 31);
    path_in_dir(model, "llama_tied_variants.bin");
    model_file_write(model, &t, params);
    Variant head = {.lm_head = 1}, other_head = {.lm_head = 3};
    path_in_dir(dir, "llama_tied_with_head");
    make_variant(dir, &t, params, &head);
    path_in_dir(back, "llama_tied_with_head.bin");
    hf_import(dir, back, 0);
    check(files_equal(model, back), "llama_tied_head_stored_accepted", "'%s' differs from '%s'", back, model);
    path_in_dir(dir, "llama_tied_other_head");
    make_variant(dir, &t, params, &other_head);
    expect_import_error("llama_tied_config_other_head_refused", dir, "differs from the token embedding",
                        "model.embed_tokens.weight");
    free(params);
}

// text with its first `from` replaced by `to` (malloc'd), or NULL where it has none.
static char *replace_once(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) { return NULL; }
    JsonText t = {NULL, 0, 0};
    json_text_append(&t, text, (size_t)(at - text));
    json_text_printf(&t, "%s%s", to, at + strlen(from));
    return t.s;
}

// config.json: the exported one with one edit (from -> to) each, refused with a line naming the value.
static void test_llama_bad_configs(void) {
    GPTConfig c = tiny_llama(0, 1);
    float *params = random_params(&c, 32);
    Variant plain = {.f16 = 0};
    JsonText good = {NULL, 0, 0};
    hf_config_json(&good, &c, "float32");
    static const struct {
        const char *name, *from, *to, *want;
    } edits[] = {
        {"llama_config_other_model_type", "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"",
         "has model_type \"mistral\""},
        {"llama_config_other_class", "\"LlamaForCausalLM\"", "\"LlamaForSequenceClassification\"",
         "\"LlamaForSequenceClassification\"   ], not [\"LlamaForCausalLM\"]: only the language model"},
        {"llama_config_rope_scaling_linear", "\"rope_type\": \"llama3\"", "\"rope_type\": \"linear\"",
         "has rope_scaling {"},
        {"llama_config_rope_scaling_no_factor", "\"factor\": 8.0,", "", "has no factor"},
        {"llama_config_attention_bias", "\"attention_bias\": false", "\"attention_bias\": true",
         "has attention_bias = true"},
        {"llama_config_mlp_bias", "\"mlp_bias\": false", "\"mlp_bias\": true", "has mlp_bias = true"},
        {"llama_config_head_dim", "\"head_dim\": 8", "\"head_dim\": 16", "has head_dim 16"},
        {"llama_config_activation", "\"silu\"", "\"gelu\"", "has hidden_act \"gelu\""},
        {"llama_config_kv_heads_do_not_divide", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
         "--kv-heads 3 must be >= 1 and divide --heads 4"},
        {"llama_config_duplicate_key", "\"vocab_size\": 200", "\"vocab_size\": 200, \"vocab_size\": 201",
         "duplicate key \"vocab_size\""},
        {"llama_config_eps_a_string", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": \"1e-5\"",
         "rms_norm_eps is \"1e-5\", not a number"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *text = replace_once(good.s, edits[i].from, edits[i].to);
        if (!text) {
            check(0, edits[i].name, "the exported config.json has no '%s' to edit", edits[i].from);
            continue;
        }
        char dir[HF_PATH_LEN];
        path_in_dir(dir, edits[i].name);
        make_variant(dir, &c, params, &plain);
        write_config(dir, text);
        free(text);
        expect_import_error(edits[i].name, dir, "config.json", edits[i].want);
    }
    // transformers 5 writes theta and the scaling as one rope_parameters object: the same model
    char *no_theta = replace_once(good.s, "  \"rope_theta\": 500000.0,\n", "");
    const char *v5_scaling = "\"rope_parameters\": {\n    \"rope_theta\": 500000.0,";
    char *v5 = no_theta ? replace_once(no_theta, "\"rope_scaling\": {", v5_scaling) : NULL;
    char dir[HF_PATH_LEN], model[HF_PATH_LEN], back[HF_PATH_LEN];
    path_in_dir(dir, "llama_rope_parameters");
    path_in_dir(model, "llama_rope_parameters.bin");
    path_in_dir(back, "llama_rope_parameters_back.bin");
    model_file_write(model, &c, params);
    make_variant(dir, &c, params, &plain);
    if (v5) { write_config(dir, v5); }
    int same = 0;
    if (v5) {
        hf_import(dir, back, 0);
        same = files_equal(model, back);
    }
    check(v5 && same, "llama_config_rope_parameters", "%s", v5 ? "the import differs" : "no rope_theta to move");
    free(no_theta);
    free(v5);
    json_text_free(&good);
    free(params);
}

// A Llama export takes no --vocab-dir (it writes no tokenizer), and refuses before creating anything.
static void test_llama_export_refusals(void) {
    GPTConfig c = tiny_llama(1, 0);
    float *params = random_params(&c, 33);
    ExportArgs a;
    path_in_dir(a.model, "llama_export.bin");
    model_file_write(a.model, &c, params);
    snprintf(a.vocab, sizeof(a.vocab), VOCAB_DIR);
    path_in_dir(a.out, "llama_export_vocab");
    expect_child_error("llama_export_refuses_vocab_dir", export_child, &a, "--vocab-dir: a Llama export carries no "
                       "tokenizer", "drop --vocab-dir");
    check(!file_exists(a.out), "llama_export_refusal_creates_nothing", "the refused export made '%s'", a.out);
    free(params);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_float16();
    test_safetensors_round_trip();
    test_safetensors_malformed();
    test_tensor_list();
    test_round_trips();
    test_import_variants();
    test_bad_indexes();
    test_export_refusals();
    test_llama_round_trips();
    test_llama_import_variants();
    test_llama_bad_configs();
    test_llama_export_refusals();
    char cmd[HF_PATH_LEN + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { printf("note: could not remove %s\n", g_dir); }
    return test_exit();
}
