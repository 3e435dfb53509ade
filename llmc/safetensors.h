/*
 * safetensors.h: Hugging Face's safetensors files, read with every check the format allows and written as its
 * reference implementation writes them. Plain C11.
 *
 * Layout (all little-endian):
 *   8 bytes  N, the header's length (u64); at most ST_MAX_HEADER_BYTES, as the reference implementation demands
 *   N bytes  a UTF-8 JSON object, starting with '{' and padded with spaces so the data starts 8-aligned:
 *              {"__metadata__": {string: string},                   (optional)
 *               NAME: {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
 *   the data each tensor's bytes, row-major, at [begin, end) counted from the byte after the header
 * A file is accepted only when every tensor's range is exactly its dtype x shape in bytes, the ranges tile the data
 * with no hole and no overlap, and the last one ends where the file does (the reference implementation's rules: no
 * byte of the file is unaccounted for). Anything else is refused with one line naming the file, the tensor and what
 * is wrong. Tensors are read into fp32 from F32, BF16 and F16.
 */
#ifndef LLMC_SAFETENSORS_H
#define LLMC_SAFETENSORS_H

#include <math.h>
#include <sys/types.h>

#include "json.h"
#include "utils.h"

#define ST_HEADER_LEN_BYTES 8
#define ST_MAX_HEADER_BYTES 100000000ULL // the reference implementation refuses larger headers
#define ST_ALIGN 8                       // the header is padded so the data starts at a multiple of this
#define ST_MAX_DIMS 8
#define ST_PATH_LEN 4096
#define ST_METADATA_KEY "__metadata__"
#define ST_CONVERT_CHUNK ((size_t)1 << 20) // 16-bit tensors are widened through a buffer of this many elements
#define ST_REMEDY "the file is corrupt or was not written by safetensors: download or save it again"

// The dtypes of the format, each with its name in the header and its size in bytes.
typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64,
    ST_I64, ST_U64, ST_NUM_DTYPES
} StDtype;
static const char *const ST_DTYPE_NAMES[ST_NUM_DTYPES] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                                                          "I16",  "U16", "F16", "BF16",    "I32",
                                                          "U32",  "F32", "F64", "I64",     "U64"};
static const int ST_DTYPE_BYTES[ST_NUM_DTYPES] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

static inline int st_dtype_from_name(const char *name) {
    for (int d = 0; d < ST_NUM_DTYPES; d++) {
        if (strcmp(name, ST_DTYPE_NAMES[d]) == 0) { return d; }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------------------
 * 16-bit floats. bf16 is the top half of an fp32; f32_to_bf16 rounds to nearest even as the GPU's
 * __float2bfloat16 and PyTorch do, and keeps a NaN a NaN.
 */
#define F32_ABS_MASK 0x7FFFFFFFu
#define F32_INF_BITS 0x7F800000u
#define BF16_QUIET_BIT 0x0040u
#define BF16_HALF_ULP 0x7FFFu // 0x8000 (half a bf16 ulp in fp32 bits) less one: ties go to the even neighbour

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline uint16_t f32_to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if ((bits & F32_ABS_MASK) > F32_INF_BITS) { return (uint16_t)((bits >> 16) | BF16_QUIET_BIT); }
    return (uint16_t)((bits + BF16_HALF_ULP + ((bits >> 16) & 1u)) >> 16);
}

#define F16_EXP_BITS 0x1Fu
#define F16_MANT_BITS 10
#define F16_SUBNORMAL_SCALE (-24)              // a subnormal f16 is mantissa x 2^-24
#define F16_TO_F32_EXP_BIAS (127 - 15)
#define F32_MANT_BITS 23

// IEEE half to float, exactly (every f16 is an f32): subnormals, infinities and NaNs included.
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> F16_MANT_BITS) & F16_EXP_BITS;
    uint32_t mant = h & ((1u << F16_MANT_BITS) - 1u), bits;
    if (exp == 0) {
        float mag = ldexpf((float)mant, F16_SUBNORMAL_SCALE);
        memcpy(&bits, &mag, sizeof(bits));
        bits |= sign;
    } else if (exp == F16_EXP_BITS) {
        bits = sign | F32_INF_BITS | (mant << (F32_MANT_BITS - F16_MANT_BITS));
    } else {
        bits = sign | ((exp + F16_TO_F32_EXP_BIAS) << F32_MANT_BITS) | (mant << (F32_MANT_BITS - F16_MANT_BITS));
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* ---------------------------------------------------------------------------------------------------------
 * Reading.
 */
typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    long long shape[ST_MAX_DIMS];
    uint64_t begin, end; // byte range in the data, which starts at the file's data_start
} StTensor;

typedef struct {
    char path[ST_PATH_LEN];
    uint64_t data_start; // 8 + the header's length
    StTensor *tensors;   // in the header's order
    size_t count;
} StFile;

LLMC_NORETURN LLMC_PRINTF(2, 3) static void st_bad(const char *path, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fail("'%s' is not a valid safetensors file: %s; " ST_REMEDY, path, what);
}

static inline size_t st_numel(const StTensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) { n *= (size_t)t->shape[d]; }
    return n;
}

// The tensor's size in bytes from its dtype and shape; 0 where that overflows size_t (*ok = 0).
static inline uint64_t st_shape_bytes(const StTensor *t, int *ok) {
    size_t bytes = (size_t)ST_DTYPE_BYTES[t->dtype];
    *ok = 1;
    for (int d = 0; d < t->ndim; d++) { bytes = mul_size_checked(bytes, (size_t)t->shape[d], ok); }
    return bytes;
}

// "[d0, d1, ...]" into out.
static inline const char *st_shape_str(const long long *shape, int ndim, char *out, size_t cap) {
    size_t used = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && used < cap; d++) {
        used += (size_t)snprintf(out + used, cap - used, d ? ", %lld" : "%lld", shape[d]);
    }
    if (used < cap) { snprintf(out + used, cap - used, "]"); }
    return out;
}

// A JSON number that is a non-negative integer, in *out.
static inline int st_json_count(const JsonValue *v, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->is_int || v->integer < 0) { return 0; }
    *out = (uint64_t)v->integer;
    return 1;
}

// One tensor's entry of the header (member m), checked on its own.
static inline void st_parse_tensor(const char *path, const JsonValue *m, StTensor *t) {
    const char *name = m->key;
    if (strlen(name) != m->key_len) { st_bad(path, "a tensor name holds a NUL character"); }
    if (m->type != JSON_OBJECT) {
        st_bad(path, "tensor '%s' is described by %s, not an object", name, json_type_name(m->type));
    }
    const JsonValue *dtype = json_get(m, "dtype"), *shape = json_get(m, "shape"), *offs = json_get(m, "data_offsets");
    if (!dtype || dtype->type != JSON_STRING) { st_bad(path, "tensor '%s' has no \"dtype\" string", name); }
    int d = st_dtype_from_name(dtype->str);
    if (d < 0) { st_bad(path, "tensor '%s' has unknown dtype '%s'", name, dtype->str); }
    if (!shape || shape->type != JSON_ARRAY) { st_bad(path, "tensor '%s' has no \"shape\" array", name); }
    if (shape->count > ST_MAX_DIMS) {
        st_bad(path, "tensor '%s' has %zu dimensions, more than %d", name, shape->count, ST_MAX_DIMS);
    }
    uint64_t begin, end;
    if (!offs || offs->type != JSON_ARRAY || offs->count != 2 || !st_json_count(&offs->items[0], &begin) ||
        !st_json_count(&offs->items[1], &end)) {
        st_bad(path, "tensor '%s' has no \"data_offsets\" [begin, end] of two non-negative integers", name);
    }
    t->name = (char *)malloc_check(m->key_len + 1, "tensor name");
    memcpy(t->name, name, m->key_len + 1);
    t->dtype = (StDtype)d;
    t->ndim = (int)shape->count;
    for (int k = 0; k < t->ndim; k++) {
        uint64_t dim;
        if (!st_json_count(&shape->items[k], &dim)) {
            st_bad(path, "tensor '%s': dimension %d of its shape is not a non-negative integer", name, k);
        }
        t->shape[k] = (long long)dim;
    }
    if (end < begin) { st_bad(path, "tensor '%s' has data_offsets [%llu, %llu], ending before they begin", name,
                              (unsigned long long)begin, (unsigned long long)end); }
    t->begin = begin;
    t->end = end;
    int ok;
    uint64_t need = st_shape_bytes(t, &ok);
    char sh[256];
    if (!ok) { st_bad(path, "tensor '%s': shape %s overflows", name, st_shape_str(t->shape, t->ndim, sh, sizeof(sh))); }
    if (end - begin != need) {
        st_bad(path, "tensor '%s' spans %llu bytes (data_offsets [%llu, %llu]) but dtype %s x shape %s is %llu bytes",
               name, (unsigned long long)(end - begin), (unsigned long long)begin, (unsigned long long)end,
               ST_DTYPE_NAMES[d], st_shape_str(t->shape, t->ndim, sh, sizeof(sh)), (unsigned long long)need);
    }
}

static inline void st_check_metadata(const char *path, const JsonValue *m) {
    int ok = m->type == JSON_OBJECT;
    for (size_t i = 0; ok && i < m->count; i++) { ok = m->items[i].type == JSON_STRING; }
    if (!ok) { st_bad(path, "its " ST_METADATA_KEY " is not an object of strings"); }
}

static const StTensor *g_st_sort_base; // qsort has no context argument: the array being sorted by index
static inline int st_cmp_offsets(const void *a, const void *b) {
    const StTensor *x = &g_st_sort_base[*(const size_t *)a], *y = &g_st_sort_base[*(const size_t *)b];
    if (x->begin != y->begin) { return x->begin < y->begin ? -1 : 1; }
    return x->end < y->end ? -1 : x->end > y->end;
}

// The whole-file rules: every range inside the data, and the ranges tiling it exactly. (Names are unique: the JSON
// parser refuses a key given twice.)
static inline void st_check_layout(const StFile *f, uint64_t data_bytes) {
    size_t *order = (size_t *)malloc_check(f->count * sizeof(size_t), "tensor order");
    for (size_t i = 0; i < f->count; i++) { order[i] = i; }
    g_st_sort_base = f->tensors;
    for (size_t i = 0; i < f->count; i++) {
        const StTensor *t = &f->tensors[i];
        if (t->end > data_bytes) {
            st_bad(f->path, "tensor '%s' has data_offsets [%llu, %llu], past the end of the data (%llu bytes after the "
                   "header)", t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)data_bytes);
        }
    }
    qsort(order, f->count, sizeof(size_t), st_cmp_offsets);
    uint64_t at = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < f->count; i++) {
        const StTensor *t = &f->tensors[order[i]];
        if (t->begin < at) {
            st_bad(f->path, "tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] begin before byte %llu)", prev,
                   t->name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)at);
        }
        if (t->begin > at) {
            st_bad(f->path, "bytes [%llu, %llu) of the data belong to no tensor (a hole before '%s')",
                   (unsigned long long)at, (unsigned long long)t->begin, t->name);
        }
        at = t->end;
        prev = t->name;
    }
    if (at != data_bytes) {
        st_bad(f->path, "the tensors end at byte %llu of the data but the file holds %llu bytes after the header",
               (unsigned long long)at, (unsigned long long)data_bytes);
    }
    free(order);
}

// Opens and checks a safetensors file (its header; the data is read by st_read_f32). Fails on anything malformed.
static inline void st_open(StFile *f, const char *path) {
    memset(f, 0, sizeof(*f));
    if (strlen(path) >= sizeof(f->path)) { fail("path too long: '%s'", path); }
    strcpy(f->path, path);
    FILE *fp = fopen_check(path, "rb");
    long long size = file_size_or_neg(path);
    if (size < ST_HEADER_LEN_BYTES) {
        st_bad(path, "it is %lld bytes, shorter than the %d-byte header length", size, ST_HEADER_LEN_BYTES);
    }
    unsigned char len_bytes[ST_HEADER_LEN_BYTES];
    fread_check(len_bytes, 1, ST_HEADER_LEN_BYTES, fp, path);
    uint64_t hlen = 0;
    for (int i = ST_HEADER_LEN_BYTES - 1; i >= 0; i--) { hlen = hlen << 8 | len_bytes[i]; }
    if (hlen > ST_MAX_HEADER_BYTES) {
        st_bad(path, "its header length %llu is larger than the format's limit of %llu bytes", (unsigned long long)hlen,
               ST_MAX_HEADER_BYTES);
    }
    if (hlen > (uint64_t)size - ST_HEADER_LEN_BYTES) {
        st_bad(path, "its header length %llu runs past the end of the file (%lld bytes)", (unsigned long long)hlen,
               size);
    }
    char *header = (char *)malloc_check((size_t)hlen + 1, "safetensors header");
    fread_check(header, 1, (size_t)hlen, fp, path);
    fclose(fp);
    header[hlen] = '\0';
    if (hlen == 0 || header[0] != '{') { st_bad(path, "its header does not start with '{'"); }
    JsonValue doc;
    JsonError err;
    if (!json_parse(header, (size_t)hlen, &doc, &err)) {
        st_bad(path, "its header is not valid JSON (%s at byte %zu of the header)", err.what, err.pos);
    }
    free(header);
    f->data_start = ST_HEADER_LEN_BYTES + hlen;
    f->tensors = (StTensor *)calloc_check(doc.count, sizeof(StTensor), "safetensors tensors");
    for (size_t i = 0; i < doc.count; i++) {
        const JsonValue *m = &doc.items[i];
        if (strcmp(m->key, ST_METADATA_KEY) == 0) { st_check_metadata(path, m); continue; }
        st_parse_tensor(path, m, &f->tensors[f->count++]);
    }
    json_free(&doc);
    st_check_layout(f, (uint64_t)size - f->data_start);
}

static inline const StTensor *st_find(const StFile *f, const char *name) {
    for (size_t i = 0; i < f->count; i++) {
        if (strcmp(f->tensors[i].name, name) == 0) { return &f->tensors[i]; }
    }
    return NULL;
}

static inline int st_is_float_dtype(StDtype d) { return d == ST_F32 || d == ST_BF16 || d == ST_F16; }

// Reads tensor t of f into dst as fp32 (st_numel(t) elements): F32 as stored, BF16 and F16 widened exactly.
static inline void st_read_f32(const StFile *f, const StTensor *t, float *dst) {
    if (!st_is_float_dtype(t->dtype)) {
        fail("'%s': tensor '%s' has dtype %s; only F32, BF16 and F16 weights can be read (save the model in one of "
             "those)", f->path, t->name, ST_DTYPE_NAMES[t->dtype]);
    }
    FILE *fp = fopen_check(f->path, "rb");
    if (fseeko(fp, (off_t)(f->data_start + t->begin), SEEK_SET) != 0) {
        fail("seeking in '%s' failed: %s", f->path, strerror(errno));
    }
    size_t n = st_numel(t);
    if (t->dtype == ST_F32) {
        fread_check(dst, sizeof(float), n, fp, f->path);
    } else {
        uint16_t *buf = (uint16_t *)malloc_check(ST_CONVERT_CHUNK * sizeof(uint16_t), "16-bit read buffer");
        for (size_t done = 0; done < n; done += ST_CONVERT_CHUNK) {
            size_t k = n - done < ST_CONVERT_CHUNK ? n - done : ST_CONVERT_CHUNK;
            fread_check(buf, sizeof(uint16_t), k, fp, f->path);
            for (size_t i = 0; i < k; i++) {
                dst[done + i] = t->dtype == ST_BF16 ? bf16_to_f32(buf[i]) : f16_to_f32(buf[i]);
            }
        }
        free(buf);
    }
    fclose(fp);
}

static inline void st_close(StFile *f) {
    for (size_t i = 0; i < f->count; i++) { free(f->tensors[i].name); }
    free(f->tensors);
    memset(f, 0, sizeof(*f));
}

/* ---------------------------------------------------------------------------------------------------------
 * Writing: st_writer_open writes the header of the tensors `specs` (in that order), st_writer_tensor each one's
 * bytes in the same order, st_writer_close checks that all came and renames the file into place (AtomicFile).
 */
typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    long long shape[ST_MAX_DIMS];
} StSpec;

typedef struct {
    AtomicFile af;
    uint64_t *bytes; // each tensor's size
    size_t count, next;
} StWriter;

static inline uint64_t st_spec_bytes(const StSpec *s) {
    StTensor t;
    memset(&t, 0, sizeof(t));
    t.dtype = s->dtype;
    t.ndim = s->ndim;
    memcpy(t.shape, s->shape, sizeof(t.shape));
    int ok;
    uint64_t bytes = st_shape_bytes(&t, &ok);
    if (!ok) { fail("tensor '%s' is too large to write", s->name); }
    return bytes;
}

// format: the "format" value of __metadata__ ("pt" as transformers writes), or NULL for no metadata.
static inline void st_writer_open(StWriter *w, const char *path, const StSpec *specs, size_t count,
                                  const char *format) {
    memset(w, 0, sizeof(*w));
    w->count = count;
    w->bytes = (uint64_t *)malloc_check(count * sizeof(uint64_t), "tensor sizes");
    JsonText h = {NULL, 0, 0};
    json_text_append(&h, "{", 1);
    if (format) {
        json_text_printf(&h, "\"" ST_METADATA_KEY "\":{\"format\":");
        json_text_string(&h, format);
        json_text_append(&h, "}", 1);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        w->bytes[i] = st_spec_bytes(&specs[i]);
        if (i > 0 || format) { json_text_append(&h, ",", 1); }
        json_text_string(&h, specs[i].name);
        json_text_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", ST_DTYPE_NAMES[specs[i].dtype]);
        for (int d = 0; d < specs[i].ndim; d++) { json_text_printf(&h, d ? ",%lld" : "%lld", specs[i].shape[d]); }
        json_text_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                         (unsigned long long)(offset + w->bytes[i]));
        offset += w->bytes[i];
    }
    json_text_append(&h, "}", 1);
    while (h.len % ST_ALIGN != 0) { json_text_append(&h, " ", 1); }
    unsigned char len_bytes[ST_HEADER_LEN_BYTES];
    for (int i = 0; i < ST_HEADER_LEN_BYTES; i++) { len_bytes[i] = (unsigned char)((uint64_t)h.len >> (8 * i)); }
    atomic_open(&w->af, path);
    atomic_write(&w->af, len_bytes, 1, ST_HEADER_LEN_BYTES);
    atomic_write(&w->af, h.s, 1, h.len);
    json_text_free(&h);
}

// The next tensor's bytes (exactly its dtype x shape).
static inline void st_writer_tensor(StWriter *w, const void *data, uint64_t nbytes) {
    if (w->next >= w->count || nbytes != w->bytes[w->next]) {
        fail("internal error writing '%s': tensor %zu of %zu given %llu bytes", w->af.path, w->next, w->count,
             (unsigned long long)nbytes);
    }
    atomic_write(&w->af, data, 1, (size_t)nbytes);
    w->next++;
}

static inline void st_writer_close(StWriter *w) {
    if (w->next != w->count) {
        fail("internal error writing '%s': %zu of %zu tensors written", w->af.path, w->next, w->count);
    }
    atomic_commit(&w->af);
    free(w->bytes);
    w->bytes = NULL;
}

#endif // LLMC_SAFETENSORS_H
