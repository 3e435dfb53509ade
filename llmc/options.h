/*
 * options.h: every command-line option of both builds, in one table: long name, default, range, help line.
 *
 * The table drives parsing, --help, range checks and the echo of the configuration at start-up, so an option
 * cannot exist without a default, a check and a line of help. Values are "--name value" or "--name=value".
 * Parsing stops the program with one line naming the option, the value and the allowed range. A model option
 * whose default is 0 or "" means "the model's" (the named --model's, or its architecture's: llmc/config.h).
 * Cross-option checks (a batch that does not divide, a model that does not fit the layout) live in
 * options_validate(), run on every rank before any work.
 */
#ifndef LLMC_OPTIONS_H
#define LLMC_OPTIONS_H

#include <float.h>
#include <limits.h>
#include <stddef.h>

#include "config.h"
#include "fp8.h"
#include "head_chunks.h"
#include "ring_schedule.h"

#define OPT_STR_LEN 1024

#define GTP_PREFETCH_MAX 8     // --gtp-prefetch's largest value: more buffers than that only cost memory
#define GTP_PREFETCH_DEFAULT 2 // the pool of three weights the design's chain describes
#define OPT_STRINGIFY_(x) #x
#define OPT_STRINGIFY(x) OPT_STRINGIFY_(x)

typedef struct {
    // data
    char train_data[OPT_STR_LEN]; // glob of training shards
    char val_data[OPT_STR_LEN];   // glob of validation shards ("" = no validation)
    char tokenizer[OPT_STR_LEN];  // a tokenizer.json or GPT-2's folder (decoding samples)
    // model (llmc/config.h): a named size, what overrides it (0 or "": the model's own)
    char model[OPT_STR_LEN];      // d12/d24/d36/d48 (GPT-2), llama3.2-1b/llama3.2-3b/llama3.1-8b/llama-tiny
    char arch[OPT_STR_LEN];       // gpt2 | llama
    int depth, width, heads, kv_heads, ffn, vocab_size;
    double norm_eps;
    float rope_theta;
    char rope_scaling[OPT_STR_LEN]; // none | llama3
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    char tie_embeddings[OPT_STR_LEN]; // 1 | 0
    int seq_len;                  // T
    char init_from[OPT_STR_LEN];  // llm.c model file to start from ("" = fresh initialization)
    // batch
    int batch_size;               // B: sequences per micro-batch per data-parallel rank
    long long total_batch_tokens; // tokens per optimizer step over all ranks; 0 = B*T*data-parallel ranks
    // optimizer and schedule
    int steps;
    float lr, final_lr_frac;
    int warmup_steps;
    char lr_schedule[OPT_STR_LEN]; // cosine | linear | constant
    float weight_decay, beta1, beta2, eps, grad_clip;
    // evaluation, sampling, output
    int val_every, val_batches, sample_every, sample_tokens;
    char eval_data[OPT_STR_LEN]; // multiple-choice eval file (llmc/eval_data.h; "" = none)
    int eval_every;
    char eval_dump[OPT_STR_LEN]; // per-example losses of the latest evaluation ("" = none)
    char out_dir[OPT_STR_LEN];
    int checkpoint_every;
    int save;
    char resume[OPT_STR_LEN]; // 0 | 1 | auto (options_resume_mode)
    int log_every;
    // reproducibility and precision
    long long seed;
    char precision[OPT_STR_LEN]; // fp32 | bf16 | fp8
    // the FP8 recipe (llmc/fp8.h), --precision fp8 only
    char fp8_recipe[OPT_STR_LEN]; // delayed | current
    int fp8_amax_history, fp8_margin, fp8_bf16_blocks, fp8_fast_accum;
    char fp8_activations[OPT_STR_LEN]; // GPU build: bf16 | fp32 around the FP8 GEMMs
    int keep_gelu_layers;        // GPU build: layers (from the first) whose gelu(fc) is kept for backward
    int gemm_search;             // GPU build: time cuBLASLt's candidate algorithms at start-up (else its first)
    int update_in_backward;      // GPU build: without clipping, AdamW of each layer once its gradients are final
    int update_after_layers;     // GPU build, the update in backward: the first layers' AdamW after the backward
    int logits_mib;              // GPU build: the most logits the LM head holds at once (llmc/head_chunks.h); 0 = all
    // parallel layout (world = DP x GTP x TP)
    int tp, gtp, gtp_prefetch, gtp_materialize, sequence_parallel, sp_overlap, sp_fp8_codes, sp_ring_pieces, zero;
    char gtp_transport[OPT_STR_LEN]; // GPU build, GTP: ce | nccl, what carries the weight gathers
    char sp_transport[OPT_STR_LEN]; // GPU build: ce | nccl, what moves a chunk along SP's ring
    // CPU build: reference state for the GPU parity test
    char ref_out[OPT_STR_LEN];
    int ref_steps;
} Options;

typedef enum { OPT_INT, OPT_I64, OPT_FLOAT, OPT_DOUBLE, OPT_STR } OptType;

typedef struct {
    const char *name;
    OptType type;
    size_t offset;
    const char *def;     // default, as it would be typed
    double lo, hi;       // range for numbers; ignored for strings
    const char *choices; // "a|b|c" for strings with a fixed set of values (or "" where that is the default), NULL
                         // for free text
    const char *help;
} OptionSpec;

#define OPT_FIELD(f) offsetof(Options, f)

static const OptionSpec OPTION_SPECS[] = {
    {"train-data", OPT_STR, OPT_FIELD(train_data), "data/brown/brown_train_*.bin", 0, 0, NULL,
     "glob of training shards (llm.c format)"},
    {"val-data", OPT_STR, OPT_FIELD(val_data), "data/brown/brown_val_*.bin", 0, 0, NULL,
     "glob of validation shards; empty string disables validation"},
    {"tokenizer", OPT_STR, OPT_FIELD(tokenizer), "data/gpt2", 0, 0, NULL,
     "the data's tokenizer, to decode text samples: GPT-2's folder (encoder.json) or a Hugging Face tokenizer.json "
     "(data/llama3/tokenizer.json); its vocabulary must be the model's"},
    {"model", OPT_STR, OPT_FIELD(model), "d12", 0, 0, "d12|d24|d36|d48|llama3.2-1b|llama3.2-3b|llama3.1-8b|llama-tiny",
     "named size: GPT-2 d12=124M d24=350M d36=774M d48=1558M; Llama 3.2 1B and 3B, Llama 3.1 8B; llama-tiny (tests: "
     "2 x 64, GPT-2's vocabulary)"},
    {"arch", OPT_STR, OPT_FIELD(arch), "", 0, 0, "gpt2|llama",
     "architecture: gpt2 (llm.c's GPT-2) or llama (Llama 3, as Hugging Face's LlamaForCausalLM); empty = the "
     "--model's (llama at a GPT-2 size takes its shape)"},
    {"depth", OPT_INT, OPT_FIELD(depth), "0", 0, MAX_LAYERS, NULL, "layers; 0 = the model's"},
    {"width", OPT_INT, OPT_FIELD(width), "0", 0, MAX_CHANNELS, NULL, "channels; 0 = the model's"},
    {"heads", OPT_INT, OPT_FIELD(heads), "0", 0, 4096, NULL, "attention heads; 0 = the model's"},
    {"kv-heads", OPT_INT, OPT_FIELD(kv_heads), "0", 0, 4096, NULL,
     "llama: key/value heads (grouped-query attention; must divide --heads); 0 = the model's (--heads unless named)"},
    {"ffn", OPT_INT, OPT_FIELD(ffn), "0", 0, MAX_FFN_HIDDEN, NULL,
     "llama: the MLP's hidden features; 0 = the model's (GPT-2: 4 x width; Llama: 8/3 x width rounded up to 256)"},
    {"vocab-size", OPT_INT, OPT_FIELD(vocab_size), "0", 0, MAX_VOCAB_SIZE, NULL,
     "vocabulary size (padded to a multiple of 128); 0 = the model's (GPT-2 50257, Llama 3 128256)"},
    {"norm-eps", OPT_DOUBLE, OPT_FIELD(norm_eps), "0", 0, 1, NULL,
     "llama: RMSNorm epsilon; 0 = the model's (1e-5)"},
    {"rope-theta", OPT_FLOAT, OPT_FIELD(rope_theta), "0", 0, 1e12, NULL,
     "llama: rotary embedding base; 0 = the model's (500000)"},
    {"rope-scaling", OPT_STR, OPT_FIELD(rope_scaling), "", 0, 0, "none|llama3",
     "llama: rotary frequency scaling (llama3: Llama 3.1's, with the four numbers below); empty = the model's"},
    {"rope-factor", OPT_FLOAT, OPT_FIELD(rope_factor), "0", 0, 1024, NULL,
     "llama3 rope scaling: low frequencies divided by this; 0 = the model's (3.1: 8, 3.2: 32)"},
    {"rope-low-freq-factor", OPT_FLOAT, OPT_FIELD(rope_low_freq_factor), "0", 0, 1024, NULL,
     "llama3 rope scaling: wavelengths past original / this are low frequencies; 0 = the model's (1)"},
    {"rope-high-freq-factor", OPT_FLOAT, OPT_FIELD(rope_high_freq_factor), "0", 0, 1024, NULL,
     "llama3 rope scaling: wavelengths below original / this are kept; 0 = the model's (4)"},
    {"rope-original-max-pos", OPT_INT, OPT_FIELD(rope_original_max_pos), "0", 0, 1 << 24, NULL,
     "llama3 rope scaling: the context length of pretraining; 0 = the model's (8192)"},
    {"tie-embeddings", OPT_STR, OPT_FIELD(tie_embeddings), "", 0, 0, "1|0",
     "1 = the LM head is wte, 0 = its own tensor (llama); empty = the model's (GPT-2 and Llama 3.2: 1)"},
    {"seq-len", OPT_INT, OPT_FIELD(seq_len), "1024", 1, 65536, NULL, "sequence length T"},
    {"init-from", OPT_STR, OPT_FIELD(init_from), "", 0, 0, NULL,
     "llm.c model file to start from; empty = fresh initialization from --seed"},
    {"batch-size", OPT_INT, OPT_FIELD(batch_size), "16", 1, 65536, NULL,
     "micro-batch: sequences per forward/backward per data-parallel rank"},
    {"total-batch-tokens", OPT_I64, OPT_FIELD(total_batch_tokens), "65536", 0, 1e12, NULL,
     "tokens per optimizer step over all ranks (gradient accumulation fills it); 0 = one micro-batch per rank"},
    {"steps", OPT_INT, OPT_FIELD(steps), "60", 1, INT_MAX, NULL, "optimizer steps to train"},
    {"lr", OPT_FLOAT, OPT_FIELD(lr), "6e-4", 0, 10, NULL, "peak learning rate"},
    {"final-lr-frac", OPT_FLOAT, OPT_FIELD(final_lr_frac), "0.1", 0, 1, NULL,
     "learning rate at the last step, as a fraction of --lr"},
    {"warmup-steps", OPT_INT, OPT_FIELD(warmup_steps), "10", 0, INT_MAX, NULL, "linear warmup steps"},
    {"lr-schedule", OPT_STR, OPT_FIELD(lr_schedule), "cosine", 0, 0, "cosine|linear|constant",
     "decay after warmup"},
    {"weight-decay", OPT_FLOAT, OPT_FIELD(weight_decay), "0.1", 0, 10, NULL,
     "AdamW weight decay (2-D weights only)"},
    {"beta1", OPT_FLOAT, OPT_FIELD(beta1), "0.9", 0, 0.99999, NULL, "AdamW beta1"},
    {"beta2", OPT_FLOAT, OPT_FIELD(beta2), "0.95", 0, 0.99999, NULL, "AdamW beta2"},
    {"eps", OPT_FLOAT, OPT_FIELD(eps), "1e-8", 1e-30, 1, NULL, "AdamW epsilon"},
    {"grad-clip", OPT_FLOAT, OPT_FIELD(grad_clip), "1.0", 0, 1e9, NULL,
     "clip the global gradient norm to this; 0 = no clipping"},
    {"val-every", OPT_INT, OPT_FIELD(val_every), "10", 0, INT_MAX, NULL,
     "validation loss every N steps (and at the end); 0 = never"},
    {"val-batches", OPT_INT, OPT_FIELD(val_batches), "20", 1, INT_MAX, NULL,
     "a validation pass is the first N x --batch-size windows of --val-data (or all it holds), split over the data "
     "ranks: the same tokens on any number of GPUs"},
    {"eval-data", OPT_STR, OPT_FIELD(eval_data), "", 0, 0, NULL,
     "multiple-choice eval file (./tokenize hellaswag; llm.c's format) scored completion style, acc and acc_norm; "
     "empty = none"},
    {"eval-every", OPT_INT, OPT_FIELD(eval_every), "0", 0, INT_MAX, NULL,
     "with --eval-data: score it at step 0, every N steps and at the end; 0 = never"},
    {"eval-dump", OPT_STR, OPT_FIELD(eval_dump), "", 0, 0, NULL,
     "with --eval-data: write each example's completion loss sums here (JSON lines, replaced at every evaluation); "
     "empty = none"},
    {"sample-every", OPT_INT, OPT_FIELD(sample_every), "30", 0, INT_MAX, NULL,
     "print a text sample every N steps; 0 = never"},
    {"sample-tokens", OPT_INT, OPT_FIELD(sample_tokens), "64", 1, 65536, NULL, "tokens per text sample"},
    {"out-dir", OPT_STR, OPT_FIELD(out_dir), "runs/default", 0, 0, NULL,
     "folder for the log, metrics, loss curve, checkpoints and model files"},
    {"checkpoint-every", OPT_INT, OPT_FIELD(checkpoint_every), "0", 0, INT_MAX, NULL,
     "write a checkpoint every N steps (and at the end); 0 = only at the end"},
    {"save", OPT_INT, OPT_FIELD(save), "1", 0, 1, NULL,
     "1 = write checkpoints (every --checkpoint-every steps and at the end); 0 = write none (benchmarks)"},
    {"resume", OPT_STR, OPT_FIELD(resume), "0", 0, 0, "0|1|auto",
     "1 = continue from the latest checkpoint in --out-dir (or start again an earlier attempt that stopped before its "
     "first); auto = the same, or start a new run where --out-dir holds none (a requeued job's command line)"},
    {"log-every", OPT_INT, OPT_FIELD(log_every), "1", 1, INT_MAX, NULL, "print a log line every N steps"},
    {"seed", OPT_I64, OPT_FIELD(seed), "1337", 0, 9.0e18, NULL,
     "seed of initialization, data shuffling and sampling"},
    {"precision", OPT_STR, OPT_FIELD(precision), "bf16", 0, 0, "fp32|bf16|fp8",
     "activation and GEMM precision (master weights are always fp32); fp8: bf16 with the block linear layers' GEMMs "
     "in FP8 (the CPU build emulates them)"},
    {"fp8-recipe", OPT_STR, OPT_FIELD(fp8_recipe), "delayed", 0, 0, "delayed|current",
     "fp8: a tensor's scale from its largest amax of the last --fp8-amax-history steps (delayed), or from its own "
     "amax before each cast (current)"},
    {"fp8-amax-history", OPT_INT, OPT_FIELD(fp8_amax_history), "16", 1, 1024, NULL,
     "fp8, delayed scaling: optimizer steps of amax history"},
    {"fp8-margin", OPT_INT, OPT_FIELD(fp8_margin), "0", 0, 8, NULL,
     "fp8: binades of headroom, scale = fp8 max / amax / 2^margin"},
    {"fp8-bf16-blocks", OPT_INT, OPT_FIELD(fp8_bf16_blocks), "0", 0, MAX_LAYERS / 2, NULL,
     "fp8: the first and the last N blocks keep their linear layers in bf16"},
    {"fp8-fast-accum", OPT_INT, OPT_FIELD(fp8_fast_accum), "1", 0, 1, NULL,
     "fp8, GPU build: 1 = the forward GEMMs accumulate with cuBLASLt's fast FP8 accumulation (the input and weight "
     "gradients never do)"},
    {"fp8-activations", OPT_STR, OPT_FIELD(fp8_activations), "bf16", 0, 0, "bf16|fp32",
     "fp8, GPU build: activation type around the FP8 GEMMs; fp32 (slower) is for checking against the CPU build"},
    {"keep-gelu-layers", OPT_INT, OPT_FIELD(keep_gelu_layers), "0", 0, MAX_LAYERS, NULL,
     "GPU build: layers (from the first) that keep their MLP's GELU output for backward (faster, more memory); "
     "the others recompute it"},
    {"gemm-search", OPT_INT, OPT_FIELD(gemm_search), "1", 0, 1, NULL,
     "GPU build: 1 = time cuBLASLt's candidate algorithms of each GEMM at start-up and keep the fastest (saved in "
     "gemm_algos.txt); 0 = take cuBLASLt's first choice (compute-sanitizer's racecheck faults in some candidates)"},
    {"update-in-backward", OPT_INT, OPT_FIELD(update_in_backward), "1", 0, 1, NULL,
     "GPU build, with --grad-clip 0: 1 = update each layer's parameters as soon as its gradients are final, beside the "
     "rest of the backward; 0 = after the backward, as with clipping (the same numbers either way)"},
    {"update-after-layers", OPT_INT, OPT_FIELD(update_after_layers), "2", 0, MAX_LAYERS, NULL,
     "GPU build, with the update in backward: the first N layers' AdamW runs after the backward, in the order the "
     "next forward reads them, instead of at the end of the backward's AdamW queue, which trails the backward by a few "
     "layers: the next forward then starts behind the embedding's update and layer 0's (the same numbers either way)"},
    {"logits-mib", OPT_INT, OPT_FIELD(logits_mib), OPT_STRINGIFY(HEAD_CHUNK_BUDGET_MIB), 0, 1 << 22, NULL,
     "GPU build: the most MiB of logits (rows of the padded vocabulary) held at once: the LM head and the classifier "
     "run in chunks of whole rows within it, each chunk's head weight gradient adding to the fp32 gradient once "
     "more (fewer, larger chunks are faster); 0 = all rows at once"},
    {"tp", OPT_INT, OPT_FIELD(tp), "1", 1, 1024, NULL,
     "tensor-parallel degree: at most the model's key/value heads (its heads for GPT-2), dividing its MLP width and "
     "padded vocabulary"},
    {"gtp", OPT_INT, OPT_FIELD(gtp), "1", 1, 1024, NULL,
     "weight-sharding (GTP) degree: the block weight matrices, their gradients and AdamW state split over this many "
     "ranks (which read different tokens), gathered just before use"},
    {"gtp-prefetch", OPT_INT, OPT_FIELD(gtp_prefetch), OPT_STRINGIFY(GTP_PREFETCH_DEFAULT), 1, GTP_PREFETCH_MAX, NULL,
     "GTP: weights gathered ahead of the one in use (each costs a buffer of the largest weight)"},
    {"gtp-materialize", OPT_INT, OPT_FIELD(gtp_materialize), "0", 0, 1, NULL,
     "GPU build, with --gtp 1: 1 = run the GTP path (gathers, reduce-scatters, the prefetch chain) through a "
     "communicator of one rank, for testing it on one GPU"},
    {"gtp-transport", OPT_STR, OPT_FIELD(gtp_transport), "ce", 0, 0, "ce|nccl",
     "GPU build, GTP: what carries the weight gathers: ce = copy-engine copies from the GTP ranks' weights mapped "
     "into each other's memory (one node; where the ranks cannot map it, NCCL, said at start-up), the default: "
     "faster than NCCL's on H200 (1558M at --gtp 2: ~4% more tokens/s in bf16, ~3% in fp8); nccl = NCCL's "
     "all-gather (wherever NCCL runs). The gradients' reduce-scatters stay NCCL's"},
    {"sequence-parallel", OPT_INT, OPT_FIELD(sequence_parallel), "0", 0, 1, NULL,
     "1 = sequence parallelism in the TP group"},
    {"sp-overlap", OPT_INT, OPT_FIELD(sp_overlap), "1", 0, 1, NULL,
     "GPU build, sequence parallelism: 1 = its all-gathers and reduce-scatters run as a ring over the TP ranks, "
     "chunk by chunk beside the GEMMs that consume or produce them (--sp-transport moves the chunks); 0 (or with "
     "--sp-transport ce where the ranks' GPUs cannot map each other's memory) = NCCL's collectives, whole"},
    {"sp-transport", OPT_STR, OPT_FIELD(sp_transport), "ce", 0, 0, "ce|nccl",
     "GPU build, sequence parallelism over the ring (--sp-overlap 1): what moves a chunk to the next TP rank: ce = "
     "copy engines into the neighbours' mapped memory (one node); nccl = NCCL send/recv (wherever NCCL runs)"},
    {"sp-fp8-codes", OPT_INT, OPT_FIELD(sp_fp8_codes), "1", 0, 1, NULL,
     "GPU build, fp8, sequence parallelism over the ring: 1 = qkv's and fc's inputs travel as E4M3 codes (1 byte an "
     "element), each rank casting its own tokens, wherever the scales come from the amax history (delayed scaling "
     "after the first step); 0 = as the activations (2 bytes an element in bf16), each rank casting every token: the "
     "same numbers"},
    {"sp-ring-pieces", OPT_INT, OPT_FIELD(sp_ring_pieces), "1", 1, RING_MAX_PIECES, NULL,
     "GPU build, sequence parallelism over the ring: a reduce-scatter's GEMM makes each product it sends in this many "
     "pieces of rows, and each piece travels as soon as it is made (the transfer starts after a piece of the GEMM, "
     "not all of it); 1 = whole"},
    {"zero", OPT_INT, OPT_FIELD(zero), "0", 0, 1, NULL, "1 = ZeRO-1: shard optimizer state over data-parallel ranks"},
    {"ref-out", OPT_STR, OPT_FIELD(ref_out), "", 0, 0, NULL,
     "CPU build: write the reference state for the GPU parity test to this file"},
    {"ref-steps", OPT_INT, OPT_FIELD(ref_steps), "3", 1, 1000, NULL,
     "CPU build: optimizer steps whose updated weights the reference state records"},
};
#define NUM_OPTIONS ((int)(sizeof(OPTION_SPECS) / sizeof(OPTION_SPECS[0])))

static inline void option_set(Options *o, const OptionSpec *s, const char *val) {
    char *p = (char *)o + s->offset;
    char *end = NULL;
    errno = 0;
    if (s->type == OPT_STR) {
        if (strlen(val) >= OPT_STR_LEN) { fail("--%s: value is longer than %d characters", s->name, OPT_STR_LEN - 1); }
        if (s->choices) {
            int ok = val[0] == '\0' && s->def[0] == '\0'; // "" = the default, where the default is ""
            size_t n = strlen(val);
            for (const char *c = s->choices; *c;) {
                const char *bar = strchr(c, '|');
                size_t len = bar ? (size_t)(bar - c) : strlen(c);
                if (len == n && strncmp(c, val, n) == 0) { ok = 1; }
                c += len + (bar ? 1 : 0);
            }
            if (!ok) { fail("--%s: '%s' is not one of %s; pass one of those", s->name, val, s->choices); }
        }
        strcpy(p, val);
        return;
    }
    double v;
    if (s->type == OPT_FLOAT || s->type == OPT_DOUBLE) {
        v = strtod(val, &end);
    } else {
        long long iv = strtoll(val, &end, 10);
        v = (double)iv;
        if (s->type == OPT_INT) { *(int *)p = (int)iv; } else { *(long long *)p = iv; }
    }
    if (end == val || *end != '\0' || errno == ERANGE) {
        fail("--%s: '%s' is not a valid %s", s->name, val,
             s->type == OPT_FLOAT || s->type == OPT_DOUBLE ? "number" : "integer");
    }
    if (!(v >= s->lo && v <= s->hi)) {
        fail("--%s: %s is out of range [%g, %g]", s->name, val, s->lo, s->hi);
    }
    if (s->type == OPT_FLOAT) { *(float *)p = (float)v; }
    if (s->type == OPT_DOUBLE) { *(double *)p = v; }
}

static inline const OptionSpec *option_find(const char *name, size_t len) {
    for (int i = 0; i < NUM_OPTIONS; i++) {
        if (strlen(OPTION_SPECS[i].name) == len && strncmp(OPTION_SPECS[i].name, name, len) == 0) {
            return &OPTION_SPECS[i];
        }
    }
    return NULL;
}

static inline void options_defaults(Options *o) {
    memset(o, 0, sizeof(*o));
    for (int i = 0; i < NUM_OPTIONS; i++) { option_set(o, &OPTION_SPECS[i], OPTION_SPECS[i].def); }
}

static inline void options_print_help(FILE *f, const char *prog) {
    fprintf(f, "usage: %s [--option value]...\n\noptions (default in brackets):\n", prog);
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptionSpec *s = &OPTION_SPECS[i];
        fprintf(f, "  --%-20s %s [%s]", s->name, s->help, s->def);
        if (s->choices) { fprintf(f, " {%s}", s->choices); }
        fprintf(f, "\n");
    }
    fprintf(f, "  --%-20s print this help and exit\n", "help");
}

// Parses argv into *o (defaults first). Returns 0 normally, 1 when --help was printed (the caller exits 0).
static inline int options_parse(Options *o, int argc, char **argv) {
    options_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            options_print_help(stdout, argv[0]);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            fail("unexpected argument '%s'; options look like --name value (see --help)", a);
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const OptionSpec *s = option_find(name, len);
        if (!s) { fail("unknown option '%.*s' (see --help for the list)", (int)(len + 2), a); }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc) { fail("--%s needs a value (see --help)", s->name); }
            val = argv[++i];
        }
        option_set(o, s, val);
    }
    return 0;
}

// --rope-scaling and its four numbers over the model's rope scaling in *c.
static inline void options_rope_scaling(const Options *o, GPTConfig *c) {
    if (strcmp(o->rope_scaling, "none") == 0) { memset(&c->rope_scaling, 0, sizeof(c->rope_scaling)); }
    if (strcmp(o->rope_scaling, "llama3") == 0 && c->rope_scaling.type != ROPE_SCALING_LLAMA3) {
        c->rope_scaling = llama3_rope_scaling(LLAMA31_ROPE_FACTOR);
    }
    RopeScaling *r = &c->rope_scaling;
    const struct {
        const char *name;
        double value;
    } numbers[] = {{"rope-factor", o->rope_factor},
                   {"rope-low-freq-factor", o->rope_low_freq_factor},
                   {"rope-high-freq-factor", o->rope_high_freq_factor},
                   {"rope-original-max-pos", (double)o->rope_original_max_pos}};
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        if (numbers[i].value != 0 && r->type != ROPE_SCALING_LLAMA3) {
            fail("--%s %g applies to llama3 rope scaling, but the model's is none; drop it or pass --rope-scaling "
                 "llama3", numbers[i].name, numbers[i].value);
        }
    }
    if (o->rope_factor > 0) { r->factor = o->rope_factor; }
    if (o->rope_low_freq_factor > 0) { r->low_freq_factor = o->rope_low_freq_factor; }
    if (o->rope_high_freq_factor > 0) { r->high_freq_factor = o->rope_high_freq_factor; }
    if (o->rope_original_max_pos > 0) { r->original_max_pos = o->rope_original_max_pos; }
}

// The model the options describe: the named size as --arch (its own architecture where empty), its shape overridden
// by --depth/--width/--heads, then every other option that is set. Fails with one line where it is not a model.
static inline GPTConfig options_model_config(const Options *o) {
    const ModelPreset *p = model_preset_find(o->model);
    if (!p) { fail("--model: unknown model '%s'", o->model); }
    ModelArch arch = (ModelArch)p->arch;
    if (o->arch[0]) { arch = strcmp(o->arch, "llama") == 0 ? ARCH_LLAMA : ARCH_GPT2; }
    if (arch != (ModelArch)p->arch && p->arch != ARCH_GPT2) {
        fail("--model %s is a %s model but --arch is %s; drop --arch, or pass a --model of that architecture (GPT-2: "
             "d12, d24, d36, d48)", o->model, ARCH_NAMES[p->arch], o->arch);
    }
    GPTConfig c = config_from_preset(p, arch, o->seq_len, o->depth > 0 ? o->depth : p->layers,
                                     o->heads > 0 ? o->heads : p->heads, o->width > 0 ? o->width : p->channels);
    if (o->kv_heads > 0) { c.num_kv_heads = o->kv_heads; }
    if (o->ffn > 0) { c.ffn_hidden = o->ffn; }
    if (o->vocab_size > 0) {
        c.vocab_size = o->vocab_size;
        c.padded_vocab_size = padded_vocab(o->vocab_size);
    }
    if (o->norm_eps > 0) { c.norm_eps = o->norm_eps; }
    if (o->rope_theta > 0) { c.rope_theta = o->rope_theta; }
    options_rope_scaling(o, &c);
    if (o->tie_embeddings[0]) { c.tied = strcmp(o->tie_embeddings, "1") == 0; }
    config_validate(&c);
    if (o->seq_len > c.max_seq_len) {
        fail("--seq-len %d is longer than the %d positions of --model %s; lower --seq-len", o->seq_len,
             c.max_seq_len, o->model);
    }
    return c;
}

// Gradient-accumulation micro-steps per optimizer step for data-parallel degree dp; fails if it does not divide.
static inline int options_grad_accum(const Options *o, int dp) {
    long long per_micro = (long long)o->batch_size * o->seq_len * dp;
    long long total = o->total_batch_tokens > 0 ? o->total_batch_tokens : per_micro;
    if (total % per_micro != 0) {
        fail("--total-batch-tokens %lld is not a multiple of batch-size x seq-len x data-parallel ranks = %d x %d x %d "
             "= %lld; change --total-batch-tokens or --batch-size",
             total, o->batch_size, o->seq_len, dp, per_micro);
    }
    if (total / per_micro > INT_MAX) {
        fail("--total-batch-tokens %lld needs %lld micro-steps of %lld tokens per optimizer step, more than %d; lower "
             "--total-batch-tokens or raise --batch-size", total, total / per_micro, per_micro, INT_MAX);
    }
    return (int)(total / per_micro);
}

// The option's value as text. A float gets the short form when it reads back as the same float, else 9
// significant digits (17 for a double: always exact), so the text identifies the value (the state file compares it
// on resume).
static inline void option_format(const Options *o, const OptionSpec *s, char *buf, size_t cap) {
    const char *p = (const char *)o + s->offset;
    switch (s->type) {
    case OPT_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case OPT_I64: snprintf(buf, cap, "%lld", *(const long long *)p); break;
    case OPT_FLOAT:
        snprintf(buf, cap, "%g", *(const float *)p);
        if ((float)strtod(buf, NULL) != *(const float *)p) { snprintf(buf, cap, "%.9g", *(const float *)p); }
        break;
    case OPT_DOUBLE:
        snprintf(buf, cap, "%g", *(const double *)p);
        if (strtod(buf, NULL) != *(const double *)p) { snprintf(buf, cap, "%.17g", *(const double *)p); }
        break;
    case OPT_STR: snprintf(buf, cap, "%s", p); break;
    }
}

// FP8 GEMMs on Hopper read 16-byte rows of both operands, and the weight gradient's operands have a row per token.
#define FP8_ALIGN 16

static inline int options_fp8(const Options *o) { return strcmp(o->precision, "fp8") == 0; }

// The FP8 options apply to --precision fp8 only: another precision refuses them rather than ignore them. In fp8, the
// model's shape must suit the FP8 GEMMs (mesh_validate checks a tensor-parallel rank's slices too).
static inline void options_validate_fp8(const Options *o) {
    if (!options_fp8(o)) {
        for (int i = 0; i < NUM_OPTIONS; i++) {
            const OptionSpec *s = &OPTION_SPECS[i];
            char value[OPT_STR_LEN];
            option_format(o, s, value, sizeof(value));
            if (strncmp(s->name, "fp8-", 4) == 0 && strcmp(value, s->def) != 0) {
                fail("--%s %s applies to --precision fp8 only, but --precision is %s; drop it or pass --precision fp8",
                     s->name, value, o->precision);
            }
        }
        return;
    }
    GPTConfig c = options_model_config(o);
    if (2 * o->fp8_bf16_blocks >= c.num_layers) {
        fail("--fp8-bf16-blocks %d keeps the first and last %d of the %d blocks in bf16, leaving none in FP8; lower it "
             "below %d", o->fp8_bf16_blocks, o->fp8_bf16_blocks, c.num_layers, (c.num_layers + 1) / 2);
    }
    if (c.channels % FP8_ALIGN != 0) {
        fail("--precision fp8 needs --width to be a multiple of %d (the FP8 GEMMs read 16-byte rows), but it is %d; "
             "choose another width or --precision bf16", FP8_ALIGN, c.channels);
    }
    // the other sides of the block linears: the fused projection's q, k, v rows and the MLP's hidden features
    if (config_qkv_rows(&c) % FP8_ALIGN != 0 || c.ffn_hidden % FP8_ALIGN != 0) {
        fail("--precision fp8 needs the QKV projection's rows ((heads + 2 x kv-heads) x head size = %d) and --ffn (%d) "
             "to be multiples of %d (the FP8 GEMMs read 16-byte rows); choose other --heads/--kv-heads/--ffn or "
             "--precision bf16", config_qkv_rows(&c), c.ffn_hidden, FP8_ALIGN);
    }
    if (((long long)o->batch_size * o->seq_len) % FP8_ALIGN != 0) {
        fail("--precision fp8 needs --batch-size x --seq-len (%d x %d) to be a multiple of %d (the FP8 weight gradient "
             "reads rows of one per token); change --batch-size or --seq-len",
             o->batch_size, o->seq_len, FP8_ALIGN);
    }
}

// The FP8 recipe (llmc/fp8.h) the options describe.
static inline Fp8Recipe fp8_recipe_from_options(const Options *o) {
    Fp8Recipe r;
    r.scaling = strcmp(o->fp8_recipe, "current") == 0 ? FP8_CURRENT : FP8_DELAYED;
    r.history = o->fp8_amax_history;
    r.margin = o->fp8_margin;
    r.margin_scale = ldexpf(1.0f, -o->fp8_margin);
    r.bf16_blocks = o->fp8_bf16_blocks;
    r.fast_accum = o->fp8_fast_accum;
    return r;
}

// Cross-option checks, before any work: fail() with one line on the first problem.
typedef enum { RESUME_NO, RESUME_YES, RESUME_AUTO } ResumeMode;

static inline ResumeMode options_resume_mode(const Options *o) {
    if (strcmp(o->resume, "1") == 0) { return RESUME_YES; }
    return strcmp(o->resume, "auto") == 0 ? RESUME_AUTO : RESUME_NO;
}

// Whether the GTP path runs: weights sharded over --gtp ranks, or the one-rank test of the same path.
static inline int options_gtp_path(const Options *o) { return o->gtp > 1 || o->gtp_materialize; }

static inline void options_validate_gtp(const Options *o) {
    if (o->gtp_materialize && o->gtp != 1) {
        fail("--gtp-materialize 1 runs the GTP path on one rank and needs --gtp 1 (with --gtp %d the path runs "
             "anyway); drop --gtp-materialize", o->gtp);
    }
    if (!options_gtp_path(o) && o->gtp_prefetch != GTP_PREFETCH_DEFAULT) {
        fail("--gtp-prefetch %d applies to GTP (--gtp > 1) only; drop it or set --gtp", o->gtp_prefetch);
    }
    if (!options_gtp_path(o) && strcmp(o->gtp_transport, "ce") != 0) {
        fail("--gtp-transport %s applies to GTP (--gtp > 1, or --gtp-materialize 1) only; drop it or set --gtp",
             o->gtp_transport);
    }
}

static inline void options_validate(const Options *o, int dp) {
    options_validate_gtp(o);
    if (o->sequence_parallel && o->tp == 1) {
        fail("--sequence-parallel 1 splits the tokens over the tensor-parallel ranks and needs --tp > 1; set --tp or "
             "--sequence-parallel 0");
    }
    if (strcmp(o->sp_transport, "ce") != 0 && !(o->sequence_parallel && o->sp_overlap)) {
        fail("--sp-transport %s moves sequence parallelism's ring and applies only with --sequence-parallel 1 and "
             "--sp-overlap 1; drop it or pass those", o->sp_transport);
    }
    if (o->sp_ring_pieces != 1 && !(o->sequence_parallel && o->sp_overlap)) {
        fail("--sp-ring-pieces %d cuts sequence parallelism's ring transfers and applies only with --sequence-parallel "
             "1 and --sp-overlap 1; drop it or pass those", o->sp_ring_pieces);
    }
    int delayed_fp8 = options_fp8(o) && strcmp(o->fp8_recipe, "delayed") == 0;
    if (!o->sp_fp8_codes && !(delayed_fp8 && o->sequence_parallel && o->sp_overlap)) {
        fail("--sp-fp8-codes 0 chooses what FP8 layers gather over sequence parallelism's ring and applies only with "
             "--precision fp8 (--fp8-recipe delayed), --sequence-parallel 1 and --sp-overlap 1; drop it or pass those");
    }
    if (o->train_data[0] == '\0') { fail("--train-data is empty; give a glob of training shards"); }
    if (o->out_dir[0] == '\0') { fail("--out-dir is empty; give a folder for the log and checkpoints"); }
    options_model_config(o);
    options_grad_accum(o, dp);
    if (o->warmup_steps > o->steps) {
        fail("--warmup-steps %d is more than --steps %d; lower --warmup-steps", o->warmup_steps, o->steps);
    }
    options_validate_fp8(o);
    if (o->eval_every > 0 && o->eval_data[0] == '\0') {
        fail("--eval-every %d needs --eval-data, the file to score; pass one or drop --eval-every", o->eval_every);
    }
    if (o->eval_data[0] != '\0' && o->eval_every == 0) {
        fail("--eval-data '%s' needs --eval-every N > 0, how often to score it; pass one or drop --eval-data",
             o->eval_data);
    }
    if (o->eval_dump[0] != '\0' && o->eval_data[0] == '\0') {
        fail("--eval-dump '%s' writes the losses of --eval-data's examples, but there is no --eval-data; pass one or "
             "drop --eval-dump", o->eval_dump);
    }
    if (o->sample_every > 0 && o->sample_tokens >= o->seq_len) {
        fail("--sample-tokens %d must be less than --seq-len %d (a sample lives in one context window); lower "
             "--sample-tokens or pass --sample-every 0", o->sample_tokens, o->seq_len);
    }
}

static inline void options_print(FILE *f, const Options *o) {
    char value[OPT_STR_LEN];
    for (int i = 0; i < NUM_OPTIONS; i++) {
        option_format(o, &OPTION_SPECS[i], value, sizeof(value));
        fprintf(f, "  %-20s %s\n", OPTION_SPECS[i].name, value);
    }
}

#endif // LLMC_OPTIONS_H
