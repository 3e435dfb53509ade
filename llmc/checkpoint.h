/*
 * checkpoint.h: model files in llm.c's format, training-state files, and finding a run's latest checkpoint.
 *
 * Model file: 256 x int32 header, then the tensors of config.h in order (those of size 0 take no bytes).
 *   GPT-2: llm.c's own, so models move between llm.c and this project:
 *     [0] 20240326  [1] version  [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp  (rest 0)
 *   any other architecture (Llama): the same header with its own magic and the whole description after [7]:
 *     [0] 20261201  [1] version  [2..7] as llm.c's  [8...] config.h's CONFIG_FIELDS from arch on, in order
 *     (config_pack: an int as itself, a float as its bit pattern, the double norm eps as two ints), rest 0.
 *     (llm.c's own Llama 3 files, magic 20240803, hold another header and tensor order: they are refused.)
 * Version 3 = fp32, 5 = bf16 (both with the padded vocabulary); version 1 = llm.c's fp32 from before it padded the
 * vocabulary (wte has V rows, [7] unused). We write 3 and read 1, 3 and 5. A file may hold more positions (maxT)
 * than the run: the first rows of wpe are used.
 *
 * State file: everything beyond the weights that an exact resume needs.
 *   64 x int64 header: magic, version, step, parameter count, train loader epoch and position, key bytes, for a
 *     run in fp8 the FP8 amax history's tensors, length and steps recorded (zero otherwise: no history section),
 *     the checksum (utils.h) of the checkpoint's model file, and the checksum of this file (its header with this
 *     slot zero, then everything after the header); version 1 files, from before the checksums (both slots zero),
 *     still resume, unverified
 *   STATE_KEYS_BYTES of text, "name=value" lines: the settings the run cannot change on resume
 *   fp32 master params, AdamW m, AdamW v (parameter count each, config.h's layout)
 *   fp8 only: the amax history, tensors x length floats (llmc/fp8.h's Fp8History ring)
 * Checkpoint k of a run is out_dir/model_%08d.bin and out_dir/state_%08d.bin, k = optimizer steps done. Each
 * file is written atomically, the model first and the state last, so a state file marks a complete checkpoint (the
 * latest one without its model file is damaged, and refused), and no state file is ever written over.
 */
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>

#include "config.h"
#include "fp8.h"
#include "options.h"

#define MODEL_FILE_MAGIC 20240326           // llm.c's GPT-2
#define MODEL_FILE_MAGIC_DESCRIBED 20261201 // every other architecture: the description in the header
#define MODEL_HEADER_CONFIG 2               // the description's first int in the header
#define MODEL_HEADER_INTS 256
#define MODEL_VERSION_FP32_UNPADDED 1
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5

#define STATE_FILE_MAGIC 20241122
#define STATE_FILE_VERSION 2
#define STATE_FILE_VERSION_UNCHECKED 1 // before the checksums: read, not verified
#define STATE_HEADER_INTS 64
#define STATE_KEYS_BYTES 4096
enum {
    SH_MAGIC, SH_VERSION, SH_STEP, SH_NUM_PARAMS, SH_DATA_EPOCH, SH_DATA_NEXT, SH_KEYS_BYTES,
    SH_FP8_TENSORS, SH_FP8_LENGTH, SH_FP8_STEPS, SH_MODEL_CHECKSUM, SH_STATE_CHECKSUM
};

#define CKPT_PATH_LEN 4096
#define IO_CHUNK_ELEMS ((size_t)1 << 20) // bf16 files are converted through a buffer of this many elements

// ----------------------------------------------------------------------------------------------------------
// model files

typedef struct {
    GPTConfig config; // padded_vocab_size = rows of wte in the file (V for version 1)
    int version;
} ModelFileHeader;

static inline size_t model_file_elem_bytes(int version) { return version == MODEL_VERSION_BF16 ? 2 : 4; }

// The bytes a file of header h holds, or -1 where that overflows (no file is that large).
static inline long long model_file_expected_bytes(const ModelFileHeader *h) {
    ParamLayout p;
    int ok = param_layout(&h->config, &p);
    size_t bytes = add_size_checked(MODEL_HEADER_INTS * sizeof(int),
                                    mul_size_checked(p.total, model_file_elem_bytes(h->version), &ok), &ok);
    return ok && bytes <= (size_t)LLONG_MAX ? (long long)bytes : -1;
}

// Reads and checks the header; leaves f positioned at the first parameter.
static inline ModelFileHeader model_file_read_header(FILE *f, const char *path) {
    int hd[MODEL_HEADER_INTS];
    fread_check(hd, sizeof(int), MODEL_HEADER_INTS, f, path);
    int described = hd[0] == MODEL_FILE_MAGIC_DESCRIBED;
    if (hd[0] != MODEL_FILE_MAGIC && !described) {
        fail("'%s' is not an llm.c model file (magic %d, expected %d, or %d for a model other than GPT-2)", path, hd[0],
             MODEL_FILE_MAGIC, MODEL_FILE_MAGIC_DESCRIBED);
    }
    ModelFileHeader h;
    h.version = hd[1];
    if (h.version != MODEL_VERSION_FP32 && h.version != MODEL_VERSION_BF16 &&
        (h.version != MODEL_VERSION_FP32_UNPADDED || described)) {
        fail("model file '%s' has version %d; supported are %d (fp32), %d (bf16) and %d (fp32, unpadded vocabulary): "
             "re-export it with llm.c's current train_gpt2.py",
             path, h.version, MODEL_VERSION_FP32, MODEL_VERSION_BF16, MODEL_VERSION_FP32_UNPADDED);
    }
    GPTConfig *c = &h.config;
    memset(c, 0, sizeof(*c));
    config_unpack((const int32_t *)hd + MODEL_HEADER_CONFIG, described ? NUM_CONFIG_FIELDS : CONFIG_LLMC_FIELDS, c);
    if (!described) { // llm.c's header holds GPT-2's shape: the rest is GPT-2's, derived from it (4C, padded V)
        if (c->channels < 1 || c->channels > MAX_CHANNELS || c->vocab_size < 1 || c->vocab_size > MAX_VOCAB_SIZE) {
            fail("model file '%s' has a corrupt header: C %d and V %d must be in [1, %d] and [1, %d]; replace the file",
                 path, c->channels, c->vocab_size, MAX_CHANNELS, MAX_VOCAB_SIZE);
        }
        int Vp = c->padded_vocab_size;
        *c = config_gpt2(c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels);
        c->padded_vocab_size = h.version == MODEL_VERSION_FP32_UNPADDED ? c->vocab_size : Vp;
    }
    char why[512];
    if (!config_check(c, why, sizeof(why))) { fail("model file '%s' has a corrupt header: %s", path, why); }
    long long want = model_file_expected_bytes(&h), have = file_size_or_neg(path);
    if (want < 0 || have != want) {
        fail("model file '%s' is %lld bytes but its header (L %d, C %d, V %d, Vp %d, maxT %d, version %d) implies "
             "%lld; the file is truncated or corrupt",
             path, have, c->num_layers, c->channels, c->vocab_size, c->padded_vocab_size, c->max_seq_len, h.version,
             want);
    }
    return h;
}

static inline ModelFileHeader model_file_header(const char *path) {
    FILE *f = fopen_check(path, "rb");
    ModelFileHeader h = model_file_read_header(f, path);
    fclose(f);
    return h;
}

// Fails unless the file's model can start this run's model: the same description, at least as many positions.
static inline void model_file_check_fits(const char *path, const ModelFileHeader *h, const GPTConfig *c) {
    for (int i = 0; i < NUM_CONFIG_FIELDS; i++) {
        if (i == CF_MAX_SEQ_LEN || i == CF_PADDED_VOCAB_SIZE || config_field_equal(&h->config, c, i)) { continue; }
        char have[32], want[32];
        config_field_format(&h->config, i, have, sizeof(have));
        config_field_format(c, i, want, sizeof(want));
        fail("model file '%s' has %s %s but this run's model has %s; pass the matching --model or %s", path,
             CONFIG_FIELDS[i].name, have, want, CONFIG_FIELDS[i].option);
    }
    if (h->config.max_seq_len < c->max_seq_len) {
        fail("model file '%s' has %d positions but this run's model has %d (--seq-len or the --model's); lower "
             "--seq-len or start from a model with more", path, h->config.max_seq_len, c->max_seq_len);
    }
}

// Reads n parameters stored as fp32 or bf16 (bf16 is the top half of an fp32) into dst, then skips `skip`.
static inline void model_file_read_elems(FILE *f, const char *path, int version, float *dst, size_t n, size_t skip) {
    if (version != MODEL_VERSION_BF16) {
        fread_check(dst, sizeof(float), n, f, path);
    } else {
        uint16_t *buf = (uint16_t *)malloc_check(IO_CHUNK_ELEMS * sizeof(uint16_t), "bf16 read buffer");
        for (size_t done = 0; done < n; done += IO_CHUNK_ELEMS) {
            size_t k = n - done < IO_CHUNK_ELEMS ? n - done : IO_CHUNK_ELEMS;
            fread_check(buf, sizeof(uint16_t), k, f, path);
            for (size_t i = 0; i < k; i++) {
                uint32_t bits = (uint32_t)buf[i] << 16;
                memcpy(&dst[done + i], &bits, sizeof(float));
            }
        }
        free(buf);
    }
    if (skip > 0 && fseek(f, (long)(skip * model_file_elem_bytes(version)), SEEK_CUR) != 0) {
        fail("seeking in model file '%s' failed: %s", path, strerror(errno));
    }
}

// Loads the parameters of a model file into params (laid out for config c). Padded vocabulary rows are zero
// whatever the file holds there; wpe keeps the first c->max_seq_len rows.
static inline void model_file_read(const char *path, const GPTConfig *c, float *params) {
    FILE *f = fopen_check(path, "rb");
    ModelFileHeader h = model_file_read_header(f, path);
    model_file_check_fits(path, &h, c);
    ParamLayout ours, theirs;
    param_layout(c, &ours);
    param_layout(&h.config, &theirs);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t keep = ours.size[t];
        if (param_is_vocab(t) && keep > 0) { keep = (size_t)c->vocab_size * (size_t)c->channels; }
        float *dst = params + ours.offset[t];
        model_file_read_elems(f, path, h.version, dst, keep, theirs.size[t] - keep);
        memset(dst + keep, 0, (ours.size[t] - keep) * sizeof(float));
    }
    fclose(f);
}

// The model-file header of config c: magic, version, then maxT, V, L, NH, C, Vp (0 for the unpadded version 1) as
// llm.c writes GPT-2's, and the rest of the description for any other architecture.
static inline void model_header_fill(int hd[MODEL_HEADER_INTS], const GPTConfig *c, int version) {
    memset(hd, 0, MODEL_HEADER_INTS * sizeof(int));
    int gpt2 = c->arch == ARCH_GPT2;
    hd[0] = gpt2 ? MODEL_FILE_MAGIC : MODEL_FILE_MAGIC_DESCRIBED;
    hd[1] = version;
    config_pack(c, gpt2 ? CONFIG_LLMC_FIELDS : NUM_CONFIG_FIELDS, (int32_t *)hd + MODEL_HEADER_CONFIG);
    if (version == MODEL_VERSION_FP32_UNPADDED) { hd[MODEL_HEADER_CONFIG + CF_PADDED_VOCAB_SIZE] = 0; }
}

// Writes params as a model file (fp32: llm.c's version 3 for GPT-2), atomically; returns the checksum of its bytes.
static inline uint64_t model_file_write(const char *path, const GPTConfig *c, const float *params) {
    int hd[MODEL_HEADER_INTS];
    model_header_fill(hd, c, MODEL_VERSION_FP32);
    ParamLayout p;
    param_layout(c, &p);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, hd, sizeof(int), MODEL_HEADER_INTS);
    atomic_write(&af, params, sizeof(float), p.total);
    uint64_t sum = atomic_checksum(&af);
    atomic_commit(&af);
    return sum;
}

// Adds the rest of f (the file at path) to c, IO_CHUNK_ELEMS words at a time.
static inline void checksum_stream(Checksum *c, FILE *f, const char *path) {
    size_t cap = IO_CHUNK_ELEMS * sizeof(float), got;
    unsigned char *buf = (unsigned char *)malloc_check(cap, "checksum buffer");
    while ((got = fread(buf, 1, cap, f)) > 0) { checksum_update(c, buf, got); }
    if (ferror(f)) { fail("reading '%s' failed: %s", path, strerror(errno)); }
    free(buf);
}

// The checksum of a file's bytes.
static inline uint64_t file_checksum(const char *path) {
    FILE *f = fopen_check(path, "rb");
    Checksum c;
    checksum_init(&c);
    checksum_stream(&c, f, path);
    fclose(f);
    return checksum_final(&c);
}

// ----------------------------------------------------------------------------------------------------------
// training-state files

typedef struct {
    int step;                        // optimizer steps done
    long long data_epoch, data_next; // the training loader's position (its DataLoaderState)
    char precision[16];              // read from a state file: the --precision it was written in
    uint64_t model_checksum;         // read from a state file: its model file's checksum (0: not recorded)
} TrainProgress;

// The settings a checkpoint can only be resumed under, as "name=value\n" lines: the model's shape, and every
// option that changes the data order, the arithmetic, or the learning rate of a step.
typedef struct {
    char text[STATE_KEYS_BYTES];
} ResumeKeys;

static const char *const RESUME_OPTIONS[] = {"seed", "batch-size", "seq-len", "precision", "lr-schedule", "lr",
                                             "final-lr-frac", "warmup-steps", "steps", "weight-decay", "beta1",
                                             "beta2", "eps", "grad-clip", "keep-gelu-layers"};
#define NUM_RESUME_OPTIONS ((int)(sizeof(RESUME_OPTIONS) / sizeof(RESUME_OPTIONS[0])))
// A model other than GPT-2 records its architecture under this key, and the rest of its description after it;
// GPT-2's keys stay those of the checkpoints written before there was a description, so they resume.
#define ARCH_KEY "arch"

// The precision may change on resume (the model and the optimizer state are the same in every precision); the FP8
// recipe's settings are recorded by a run in fp8 and must match when an fp8 checkpoint continues in fp8.
#define PRECISION_KEY "--precision"
static const char *const FP8_RESUME_OPTIONS[] = {"fp8-recipe", "fp8-amax-history", "fp8-margin", "fp8-bf16-blocks",
                                                 "fp8-fast-accum", "fp8-activations"};
#define NUM_FP8_RESUME_OPTIONS ((int)(sizeof(FP8_RESUME_OPTIONS) / sizeof(FP8_RESUME_OPTIONS[0])))
// The training data (the trainer adds dataloader_identity's text): checkpoints written before it was recorded
// resume without the check.
#define RESUME_DATA_KEY "--train-data shards"

static inline void resume_keys_add(ResumeKeys *k, const char *name, const char *value) {
    size_t used = strlen(k->text);
    int n = snprintf(k->text + used, sizeof(k->text) - used, "%s=%s\n", name, value);
    if (n < 0 || (size_t)n >= sizeof(k->text) - used) { fail("resume settings exceed %d bytes", STATE_KEYS_BYTES); }
}

static inline void resume_keys_add_int(ResumeKeys *k, const char *name, long long value) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", value);
    resume_keys_add(k, name, buf);
}

// tokens_per_step: the resolved global batch (--total-batch-tokens, or its default).
static inline ResumeKeys resume_keys_make(const Options *o, const GPTConfig *c, long long tokens_per_step) {
    ResumeKeys k;
    memset(&k, 0, sizeof(k)); // the whole block goes into the state file: no byte may depend on the stack
    resume_keys_add_int(&k, "layers", c->num_layers);
    resume_keys_add_int(&k, "heads", c->num_heads);
    resume_keys_add_int(&k, "channels", c->channels);
    resume_keys_add_int(&k, "vocabulary size", c->vocab_size);
    resume_keys_add_int(&k, "padded vocabulary size", c->padded_vocab_size);
    resume_keys_add_int(&k, "max sequence length", c->max_seq_len);
    for (int i = CONFIG_LLMC_FIELDS; i < NUM_CONFIG_FIELDS && c->arch != ARCH_GPT2; i++) {
        char value[32];
        config_field_format(c, i, value, sizeof(value));
        resume_keys_add(&k, CONFIG_FIELDS[i].name, value);
    }
    resume_keys_add_int(&k, "tokens per step", tokens_per_step);
    int constant_lr = strcmp(o->lr_schedule, "constant") == 0;
    int n = NUM_RESUME_OPTIONS + (options_fp8(o) ? NUM_FP8_RESUME_OPTIONS : 0);
    for (int i = 0; i < n; i++) {
        const char *opt = i < NUM_RESUME_OPTIONS ? RESUME_OPTIONS[i] : FP8_RESUME_OPTIONS[i - NUM_RESUME_OPTIONS];
        // A constant schedule does not depend on --steps, so such a run may be extended.
        if (constant_lr && strcmp(opt, "steps") == 0) { continue; }
        const OptionSpec *s = option_find(opt, strlen(opt));
        char name[80], value[OPT_STR_LEN];
        snprintf(name, sizeof(name), "--%s", s->name);
        option_format(o, s, value, sizeof(value));
        resume_keys_add(&k, name, value);
    }
    return k;
}

// The value of key `name` in keys (copied to out), or 0 if absent.
static inline int resume_keys_get(const ResumeKeys *k, const char *name, char *out, size_t cap) {
    size_t n = strlen(name);
    for (const char *line = k->text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) { break; }
        if (strncmp(line, name, n) == 0 && line[n] == '=') {
            snprintf(out, cap, "%.*s", (int)(end - line - (ptrdiff_t)n - 1), line + n + 1);
            return 1;
        }
        line = end + 1;
    }
    return 0;
}

// Whether the run's settings differ from the file's (but for the precision, and the FP8 settings unless both are in
// fp8: PRECISION_KEY); if so, msg says how, naming the file, the setting and both values. The architecture is
// compared first, as gpt2 where it is not recorded (ARCH_KEY), so that a GPT-2 run and another architecture's
// checkpoint refuse each other whichever holds the key.
static inline int resume_keys_mismatch(const ResumeKeys *file, const ResumeKeys *run, const char *path, char *msg,
                                       size_t cap) {
    char file_arch[OPT_STR_LEN] = "gpt2", run_arch[OPT_STR_LEN] = "gpt2";
    resume_keys_get(file, ARCH_KEY, file_arch, sizeof(file_arch));
    resume_keys_get(run, ARCH_KEY, run_arch, sizeof(run_arch));
    if (strcmp(file_arch, run_arch) != 0) {
        snprintf(msg, cap, "checkpoint '%s' was written with --arch %s but this run has --arch %s; resume with the same "
                 "settings, or choose another --out-dir to start a new run", path, file_arch, run_arch);
        return 1;
    }
    char file_precision[OPT_STR_LEN] = "", run_precision[OPT_STR_LEN] = "";
    resume_keys_get(file, PRECISION_KEY, file_precision, sizeof(file_precision));
    resume_keys_get(run, PRECISION_KEY, run_precision, sizeof(run_precision));
    int both_fp8 = strcmp(file_precision, "fp8") == 0 && strcmp(run_precision, "fp8") == 0;
    for (const char *line = run->text; *line;) {
        const char *eq = strchr(line, '='), *end = strchr(line, '\n');
        char name[128], want[OPT_STR_LEN], have[OPT_STR_LEN];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - line), line);
        snprintf(want, sizeof(want), "%.*s", (int)(end - eq - 1), eq + 1);
        if (strcmp(name, PRECISION_KEY) == 0 || (strncmp(name, "--fp8-", 6) == 0 && !both_fp8)) {
            line = end + 1;
            continue;
        }
        int recorded = resume_keys_get(file, name, have, sizeof(have));
        int is_data = strcmp(name, RESUME_DATA_KEY) == 0;
        if (!recorded && is_data) {
            line = end + 1;
            continue;
        }
        if (!recorded) { snprintf(have, sizeof(have), "(not recorded)"); }
        if (strcmp(have, want) != 0) {
            snprintf(msg, cap, "checkpoint '%s' was written with %s %s but this run has %s %s; resume with the same "
                     "settings, or choose another --out-dir to start a new run%s",
                     path, name, have, name, want,
                     is_data ? " (--init-from its model file trains it on other data)" : "");
            return 1;
        }
        line = end + 1;
    }
    return 0;
}

// The checksum of a state file's bytes but its own slot (zero in hd): header, settings, arrays, FP8 history.
static inline uint64_t state_checksum(const int64_t *hd, const ResumeKeys *keys, const float *params, const float *m,
                                      const float *v, size_t n, const float *ring, size_t ring_n) {
    Checksum c;
    checksum_init(&c);
    checksum_update(&c, hd, STATE_HEADER_INTS * sizeof(int64_t));
    checksum_update(&c, keys->text, STATE_KEYS_BYTES);
    checksum_update(&c, params, n * sizeof(float));
    checksum_update(&c, m, n * sizeof(float));
    checksum_update(&c, v, n * sizeof(float));
    if (ring_n > 0) { checksum_update(&c, ring, ring_n * sizeof(float)); }
    return checksum_final(&c);
}

// fp8: the run's FP8 amax history, NULL for a run in another precision; model_sum: the checkpoint's model file's.
static inline void state_file_write(const char *path, const ResumeKeys *keys, const TrainProgress *pr,
                                    const float *params, const float *m, const float *v, size_t n,
                                    const Fp8History *fp8, uint64_t model_sum) {
    int64_t hd[STATE_HEADER_INTS];
    memset(hd, 0, sizeof(hd));
    hd[SH_MAGIC] = STATE_FILE_MAGIC;
    hd[SH_VERSION] = STATE_FILE_VERSION;
    hd[SH_STEP] = pr->step;
    hd[SH_NUM_PARAMS] = (int64_t)n;
    hd[SH_DATA_EPOCH] = pr->data_epoch;
    hd[SH_DATA_NEXT] = pr->data_next;
    hd[SH_KEYS_BYTES] = STATE_KEYS_BYTES;
    if (fp8) {
        hd[SH_FP8_TENSORS] = fp8->tensors;
        hd[SH_FP8_LENGTH] = fp8->length;
        hd[SH_FP8_STEPS] = fp8->steps;
    }
    hd[SH_MODEL_CHECKSUM] = (int64_t)model_sum;
    size_t ring_n = fp8 ? (size_t)fp8->tensors * fp8->length : 0;
    hd[SH_STATE_CHECKSUM] = (int64_t)state_checksum(hd, keys, params, m, v, n, fp8 ? fp8->ring : NULL, ring_n);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, hd, sizeof(int64_t), STATE_HEADER_INTS);
    atomic_write(&af, keys->text, 1, STATE_KEYS_BYTES);
    atomic_write(&af, params, sizeof(float), n);
    atomic_write(&af, m, sizeof(float), n);
    atomic_write(&af, v, sizeof(float), n);
    if (fp8) { atomic_write(&af, fp8->ring, sizeof(float), (size_t)fp8->tensors * fp8->length); }
    atomic_commit(&af);
}

#define STATE_MESSAGE_CHARS (2 * CKPT_PATH_LEN + 2 * OPT_STR_LEN + 512)

LLMC_NORETURN static inline void state_file_corrupt(const char *path, uint64_t have, uint64_t want) {
    fail("checkpoint '%s' is corrupt: its bytes give checksum %016llx, it recorded %016llx; resume from an earlier "
         "checkpoint (move this one and its model file away)",
         path, (unsigned long long)have, (unsigned long long)want);
}

/*
 * Refuses the state file whose header is hd with the message, unless its bytes do not give the checksum the header
 * records: then it is corrupt, and says that instead (a flipped byte in the header or the settings block would read
 * as another format, another model or other settings). The whole file is read for it on this path only: a file that
 * passes every check is verified as it is read (state_file_read).
 */
LLMC_NORETURN LLMC_PRINTF(3, 4) static void state_file_refuse(const char *path, const int64_t *hd, const char *fmt,
                                                              ...) {
    if (hd[SH_STATE_CHECKSUM] != 0) {
        int64_t own_slot_zero[STATE_HEADER_INTS];
        memcpy(own_slot_zero, hd, sizeof(own_slot_zero));
        own_slot_zero[SH_STATE_CHECKSUM] = 0;
        Checksum c;
        checksum_init(&c);
        checksum_update(&c, own_slot_zero, sizeof(own_slot_zero));
        FILE *f = fopen_check(path, "rb");
        if (fseek(f, (long)sizeof(own_slot_zero), SEEK_SET) != 0) {
            fail("seeking in '%s' failed: %s", path, strerror(errno));
        }
        checksum_stream(&c, f, path);
        fclose(f);
        uint64_t have = checksum_final(&c), want = (uint64_t)hd[SH_STATE_CHECKSUM];
        if (have != want) { state_file_corrupt(path, have, want); }
    }
    char msg[STATE_MESSAGE_CHARS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fail("%s", msg);
}

// Opens a state file and checks it against this run (settings `expect`, n parameters), every refusal telling a
// corrupt file first (state_file_refuse): returns the file positioned at the parameters, its progress in *pr, and its
// FP8 history's shape and steps in *fp8 (zero tensors where it has none).
// hd and keys (the file's, as read) may be NULL.
static inline FILE *state_file_open(const char *path, const ResumeKeys *expect, size_t n, TrainProgress *pr,
                                    Fp8History *fp8, int64_t *hd_out, ResumeKeys *keys_out) {
    FILE *f = fopen_check(path, "rb");
    int64_t hd[STATE_HEADER_INTS];
    fread_check(hd, sizeof(int64_t), STATE_HEADER_INTS, f, path);
    if (hd[SH_MAGIC] != STATE_FILE_MAGIC) {
        state_file_refuse(path, hd, "'%s' is not a training-state file (magic %lld, expected %d); move it out of the "
                          "run's folder", path, (long long)hd[SH_MAGIC], STATE_FILE_MAGIC);
    }
    if (hd[SH_VERSION] != STATE_FILE_VERSION && hd[SH_VERSION] != STATE_FILE_VERSION_UNCHECKED) {
        state_file_refuse(path, hd, "checkpoint '%s' has version %lld; this build reads versions %d and %d: resume it "
                          "with the train_gpt that wrote it", path, (long long)hd[SH_VERSION],
                          STATE_FILE_VERSION_UNCHECKED, STATE_FILE_VERSION);
    }
    // Version 1 had no checksums: slots that hold one belong to a later file whose version was changed.
    if (hd[SH_VERSION] == STATE_FILE_VERSION_UNCHECKED && (hd[SH_MODEL_CHECKSUM] != 0 || hd[SH_STATE_CHECKSUM] != 0)) {
        state_file_refuse(path, hd, "checkpoint '%s' is corrupt: it says version %d, which has no checksums, but "
                          "records checksums; resume from an earlier checkpoint (move this one and its model file "
                          "away)", path, STATE_FILE_VERSION_UNCHECKED);
    }
    if (hd[SH_KEYS_BYTES] != STATE_KEYS_BYTES) {
        state_file_refuse(path, hd, "checkpoint '%s' has a corrupt header (a settings block of %lld bytes, expected "
                          "%d); resume from an earlier checkpoint (move this one and its model file away)", path,
                          (long long)hd[SH_KEYS_BYTES], STATE_KEYS_BYTES);
    }
    ResumeKeys keys;
    fread_check(keys.text, 1, STATE_KEYS_BYTES, f, path);
    if (keys_out) { *keys_out = keys; }
    if (hd_out) { memcpy(hd_out, hd, sizeof(hd)); }
    keys.text[STATE_KEYS_BYTES - 1] = '\0';
    char msg[STATE_MESSAGE_CHARS];
    if (resume_keys_mismatch(&keys, expect, path, msg, sizeof(msg))) { state_file_refuse(path, hd, "%s", msg); }
    if (hd[SH_NUM_PARAMS] != (int64_t)n) {
        state_file_refuse(path, hd, "checkpoint '%s' holds %lld parameters but this run's model has %zu", path,
                          (long long)hd[SH_NUM_PARAMS], n);
    }
    memset(fp8, 0, sizeof(*fp8));
    if (hd[SH_FP8_TENSORS] < 0 || hd[SH_FP8_TENSORS] > INT32_MAX || hd[SH_FP8_LENGTH] < 0 ||
        hd[SH_FP8_LENGTH] > INT32_MAX || hd[SH_FP8_STEPS] < 0) {
        state_file_refuse(path, hd, "checkpoint '%s' has a corrupt FP8 history header (%lld tensors, length %lld, "
                          "%lld steps)", path, (long long)hd[SH_FP8_TENSORS], (long long)hd[SH_FP8_LENGTH],
                          (long long)hd[SH_FP8_STEPS]);
    }
    fp8->tensors = (int)hd[SH_FP8_TENSORS];
    fp8->length = (int)hd[SH_FP8_LENGTH];
    fp8->steps = hd[SH_FP8_STEPS];
    long long want = (long long)(sizeof(hd) + STATE_KEYS_BYTES + 3 * n * sizeof(float)) +
                     (long long)fp8->tensors * fp8->length * (long long)sizeof(float);
    long long have = file_size_or_neg(path);
    if (have != want) {
        state_file_refuse(path, hd, "checkpoint '%s' is %lld bytes, expected %lld; the file is truncated or corrupt",
                          path, have, want);
    }
    pr->step = (int)hd[SH_STEP];
    pr->data_epoch = hd[SH_DATA_EPOCH];
    pr->data_next = hd[SH_DATA_NEXT];
    pr->model_checksum = (uint64_t)hd[SH_MODEL_CHECKSUM]; // 0 in version 1
    if (!resume_keys_get(&keys, PRECISION_KEY, pr->precision, sizeof(pr->precision))) { pr->precision[0] = '\0'; }
    return f;
}

// Fails unless the state file can resume this run; reads its header and settings (the whole file only to tell a
// corrupt one from one of other settings: state_file_refuse).
static inline void state_file_check(const char *path, const ResumeKeys *expect, size_t n) {
    TrainProgress pr;
    Fp8History shape;
    fclose(state_file_open(path, expect, n, &pr, &shape, NULL, NULL));
}

/*
 * Reads a checkpoint's state. fp8: the run's history (fp8_history_init's shape), NULL for a run in another
 * precision. An fp8 run's history is the checkpoint's where it was written in fp8 (the same settings, so the same
 * shape), and empty otherwise (steps 0: the first step scales like current scaling). A history the run has no use for
 * is not read.
 */
static inline TrainProgress state_file_read(const char *path, const ResumeKeys *expect, float *params, float *m,
                                            float *v, size_t n, Fp8History *fp8) {
    TrainProgress pr;
    Fp8History saved;
    int64_t hd[STATE_HEADER_INTS];
    ResumeKeys keys;
    FILE *f = state_file_open(path, expect, n, &pr, &saved, hd, &keys);
    fread_check(params, sizeof(float), n, f, path);
    fread_check(m, sizeof(float), n, f, path);
    fread_check(v, sizeof(float), n, f, path);
    size_t ring_n = (size_t)saved.tensors * saved.length;
    float *ring = ring_n > 0 ? (float *)malloc_check(ring_n * sizeof(float), "FP8 history") : NULL;
    if (ring_n > 0) { fread_check(ring, sizeof(float), ring_n, f, path); }
    fclose(f);
    if (hd[SH_VERSION] == STATE_FILE_VERSION) {
        uint64_t want = (uint64_t)hd[SH_STATE_CHECKSUM];
        hd[SH_STATE_CHECKSUM] = 0;
        uint64_t have = state_checksum(hd, &keys, params, m, v, n, ring, ring_n);
        if (have != want) { state_file_corrupt(path, have, want); }
    }
    long long bad = fp8_history_first_invalid(ring, ring_n); // what a checksum cannot vouch for (or a file has none)
    if (bad >= 0) {
        char name[96];
        fp8_tensor_name((int)(bad / saved.length), name, sizeof(name));
        fail("checkpoint '%s' is corrupt: its FP8 amax history holds %g for the %s, and an amax is finite and >= 0; "
             "resume from an earlier checkpoint (move this one and its model file away)", path, ring[bad], name);
    }
    if (fp8) {
        fp8->steps = 0;
        if (saved.tensors > 0) {
            if (saved.tensors != fp8->tensors || saved.length != fp8->length) {
                fail("checkpoint '%s' holds an FP8 history of %d tensors x %d steps but this run keeps %d x %d; resume "
                     "with the checkpoint's model and --fp8-amax-history",
                     path, saved.tensors, saved.length, fp8->tensors, fp8->length);
            }
            memcpy(fp8->ring, ring, ring_n * sizeof(float));
            fp8->steps = saved.steps;
        }
    }
    free(ring);
    return pr;
}

// Fails unless checkpoint `step`'s files are the ones its state file recorded: the header's step is the file name's
// (a renamed file would resume as another step), and the model file's bytes give the checksum the state file holds.
static inline void checkpoint_verify(const char *model_path, const char *state_path, int step,
                                     const TrainProgress *pr) {
    if (pr->step != step) {
        fail("checkpoint '%s' records step %d but its name says %d: the file was renamed or is corrupt; move it away",
             state_path, pr->step, step);
    }
    if (pr->model_checksum == 0) { return; } // version 1: written before the checksums
    uint64_t have = file_checksum(model_path);
    if (have != pr->model_checksum) {
        fail("model file '%s' is corrupt: its bytes give checksum %016llx, its state file recorded %016llx; resume from "
             "an earlier checkpoint (move this one and its state file away)",
             model_path, (unsigned long long)have, (unsigned long long)pr->model_checksum);
    }
}

// ----------------------------------------------------------------------------------------------------------
// checkpoints of a run

static inline void checkpoint_paths(const char *out_dir, int step, char *model_path, char *state_path) {
    snprintf(model_path, CKPT_PATH_LEN, "%s/model_%08d.bin", out_dir, step);
    snprintf(state_path, CKPT_PATH_LEN, "%s/state_%08d.bin", out_dir, step);
}

// The step of a file named prefix%08d.bin exactly (no tmp suffix; 8 digits, more from step 100,000,000 on), or -1.
#define CHECKPOINT_STEP_DIGITS 8
static inline int checkpoint_step_of(const char *name, const char *prefix) {
    size_t np = strlen(prefix), len = strlen(name), ext = strlen(".bin");
    if (len < np + CHECKPOINT_STEP_DIGITS + ext || strncmp(name, prefix, np) != 0 ||
        strcmp(name + len - ext, ".bin") != 0) {
        return -1;
    }
    long long step = 0;
    size_t digits = len - np - ext;
    if (digits > CHECKPOINT_STEP_DIGITS && name[np] == '0') { return -1; } // %08d pads to 8 digits only
    for (size_t i = np; i < np + digits; i++) {
        if (name[i] < '0' || name[i] > '9') { return -1; }
        step = step * 10 + (name[i] - '0');
        if (step > INT_MAX) { return -1; }
    }
    return (int)step;
}

/*
 * The latest checkpoint in out_dir: the highest step with a state file, or -1 if none (or no such folder); a model
 * file without its state file is a checkpoint whose writing was cut short. Fails where the latest state file has no
 * model file beside it: that checkpoint was complete and is damaged, and resuming from an earlier one (or starting
 * again) would write its state file, the one copy of its optimizer state, over. An earlier one without its model
 * file is left alone: the run continues past it.
 */
static inline int checkpoint_find_latest(const char *out_dir) {
    DIR *d = opendir(out_dir);
    if (!d) { return -1; }
    int latest = -1;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        int step = checkpoint_step_of(e->d_name, "state_");
        latest = step > latest ? step : latest;
    }
    closedir(d);
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(out_dir, latest, model_path, state_path);
    if (latest >= 0 && !file_exists(model_path)) {
        fail("the latest checkpoint in '%s' (step %d) is damaged: its model file '%s' is missing; put it back, or move "
             "'%s' away to resume from the checkpoint before it", out_dir, latest, model_path, state_path);
    }
    return latest;
}

// Writes checkpoint pr->step: the model file, then the state file that marks it complete. A complete checkpoint is
// never written over (a model file alone, an interrupted write's, is).
static inline void checkpoint_write(const char *out_dir, const GPTConfig *c, const ResumeKeys *keys,
                                    const TrainProgress *pr, const float *params, const float *m, const float *v,
                                    const Fp8History *fp8) {
    ParamLayout p;
    param_layout(c, &p);
    char model_path[CKPT_PATH_LEN], state_path[CKPT_PATH_LEN];
    checkpoint_paths(out_dir, pr->step, model_path, state_path);
    if (file_exists(state_path)) {
        fail("checkpoint '%s' exists already, and a checkpoint is never written over; move it and its model file "
             "away to write step %d again", state_path, pr->step);
    }
    uint64_t model_sum = model_file_write(model_path, c, params);
    state_file_write(state_path, keys, pr, params, m, v, p.total, fp8, model_sum);
}

#endif // LLMC_CHECKPOINT_H
