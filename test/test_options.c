/*
 * test_options.c: the command line (llmc/options.h).
 * - defaults are the table's; "--name value" and "--name=value" both work; --help is reported to the caller;
 * - every numeric option rejects a value just below and just above its range; choices, unknown options,
 *   missing values, malformed numbers and stray arguments are rejected; cross-option checks
 *   (options_validate) catch a batch that does not divide, warmup past the end, a sample longer than the
 *   context, parallel layouts this build lacks, a model that is not one (heads or key/value heads that do not
 *   divide, an odd head size under RoPE, a sequence past the model's positions, bad rope scaling, a Llama option
 *   given to GPT-2). Each failure is one line naming the option, exit status != 0 (run in a child process);
 * - model presets (GPT-2's and Llama 3's, as their config.json say) and their overrides; the architecture options;
 *   option_format round-trips floats.
 */
#include "../llmc/options.h"
#include "test_util.h"

#define MAX_ARGS 32
#define CHILD_TIMEOUT_S 10.0

typedef struct {
    int argc;
    char *argv[MAX_ARGS];
} Args;

// Builds argv from a NULL-terminated list of arguments (the program name is added).
static Args make_args(const char *first, va_list ap) {
    Args a;
    a.argc = 0;
    a.argv[a.argc++] = (char *)"train_gpt";
    for (const char *s = first; s; s = va_arg(ap, const char *)) {
        if (a.argc >= MAX_ARGS) { fprintf(stderr, "too many arguments in a test\n"); exit(1); }
        a.argv[a.argc++] = (char *)s;
    }
    return a;
}

static Options parse(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    Args a = make_args(first, ap);
    va_end(ap);
    Options o;
    options_parse(&o, a.argc, a.argv);
    return o;
}

static void parse_and_validate(void *arg) {
    Args *a = (Args *)arg;
    Options o;
    if (options_parse(&o, a->argc, a->argv)) { return; }
    options_validate(&o, 1);
}

static int one_line(const char *s) {
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == '\0';
}

// The arguments must fail with exit status != 0 and one line on stderr containing `expect`.
static void expect_error(const char *name, const char *expect, const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    Args a = make_args(first, ap);
    va_end(ap);
    Child c;
    child_start(&c, parse_and_validate, &a);
    child_wait(&c, now_s() + CHILD_TIMEOUT_S);
    check(c.status > 0 && strstr(c.err, expect) && one_line(c.err), name,
          "status %d, stderr '%s', expected one line containing '%s'", c.status, c.err, expect);
}

static void test_defaults_and_forms(void) {
    Options o = parse(NULL);
    check(o.batch_size == 16 && o.seq_len == 1024 && o.total_batch_tokens == 65536 && o.steps == 60 &&
              o.seed == 1337 && fabsf(o.lr - 6e-4f) == 0.0f && strcmp(o.lr_schedule, "cosine") == 0 &&
              strcmp(o.model, "d12") == 0 && strcmp(o.precision, "bf16") == 0 && options_resume_mode(&o) == RESUME_NO,
          "options_defaults", "a default differs from the table");
    o = parse("--batch-size", "8", "--lr=1e-3", "--out-dir=runs/x=y", "--val-data=", NULL);
    check(o.batch_size == 8 && o.lr == 1e-3f && strcmp(o.out_dir, "runs/x=y") == 0 && o.val_data[0] == '\0',
          "options_name_value_forms", "batch %d lr %g out '%s' val '%s'", o.batch_size, o.lr, o.out_dir, o.val_data);
    o = parse("--seed", "1", "--seed", "2", NULL);
    check(o.seed == 2, "options_last_wins", "seed %lld", o.seed);
    char *help[] = {(char *)"train_gpt", (char *)"--help"};
    int saved = dup(STDOUT_FILENO);
    FILE *null = freopen("/dev/null", "w", stdout);
    int r = options_parse(&o, 2, help);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    check(null && r == 1, "options_help", "options_parse returned %d for --help", r);
}

// For every numeric option: a value just below its range and one just above are rejected, naming it.
static void test_ranges(void) {
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptionSpec *s = &OPTION_SPECS[i];
        if (s->type == OPT_STR) { continue; }
        int integer = s->type == OPT_INT || s->type == OPT_I64;
        double below = integer ? s->lo - 1 : (s->lo == 0 ? -1.0 : s->lo / 2);
        double above = s->hi + (s->hi * 0.01 > 1 ? s->hi * 0.01 : 1);
        char lo[64], hi[64], name[128], expect[96];
        snprintf(lo, sizeof(lo), integer ? "%.0f" : "%g", below);
        snprintf(hi, sizeof(hi), integer ? "%.0f" : "%g", above);
        char opt[64];
        snprintf(opt, sizeof(opt), "--%s", s->name);
        snprintf(expect, sizeof(expect), "--%s: %s is out of range", s->name, lo);
        snprintf(name, sizeof(name), "range_below_%s", s->name);
        expect_error(name, expect, opt, lo, NULL);
        snprintf(expect, sizeof(expect), "--%s: %s is out of range", s->name, hi);
        snprintf(name, sizeof(name), "range_above_%s", s->name);
        expect_error(name, expect, opt, hi, NULL);
    }
}

static void test_bad_arguments(void) {
    expect_error("choice_model", "--model: 'd13' is not one of d12|d24|d36|d48", "--model", "d13", NULL);
    expect_error("choice_schedule", "--lr-schedule: 'cos' is not one of", "--lr-schedule", "cos", NULL);
    expect_error("choice_precision", "--precision: 'fp16' is not one of", "--precision=fp16", NULL);
    expect_error("unknown_option", "unknown option '--batch'", "--batch", "8", NULL);
    expect_error("unknown_option_eq", "unknown option '--bogus'", "--bogus=1", NULL);
    expect_error("missing_value", "--steps needs a value", "--steps", NULL);
    expect_error("not_integer", "--steps: 'ten' is not a valid integer", "--steps", "ten", NULL);
    expect_error("not_integer_fraction", "--batch-size: '4.5' is not a valid integer", "--batch-size", "4.5", NULL);
    expect_error("not_number", "--lr: '1e-3x' is not a valid number", "--lr", "1e-3x", NULL);
    expect_error("empty_number", "--lr: '' is not a valid number", "--lr=", NULL);
    expect_error("stray_argument", "unexpected argument 'd12'", "d12", NULL);
}

static void test_validate(void) {
    expect_error("grad_accum_divisibility",
                 "--total-batch-tokens 1000 is not a multiple of batch-size x seq-len x data-parallel ranks = 4 x 64 x 1",
                 "--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "1000", NULL);
    expect_error("grad_accum_overflow", "needs 4294967304 micro-steps of 64 tokens per optimizer step", "--batch-size",
                 "1", "--seq-len", "64", "--total-batch-tokens", "274877907456", NULL);
    expect_error("warmup_past_steps", "--warmup-steps 30 is more than --steps 10", "--steps", "10", "--warmup-steps",
                 "30", NULL);
    expect_error("sample_longer_than_context", "--sample-tokens 64 must be less than --seq-len 64", "--seq-len", "64",
                 "--total-batch-tokens", "0", NULL);
    expect_error("sp_needs_tp", "--sequence-parallel 1 splits the tokens over the tensor-parallel ranks and needs --tp > 1",
                 "--sequence-parallel", "1", NULL);
    expect_error("choice_sp_transport", "--sp-transport: 'p2p' is not one of ce|nccl; pass one of those",
                 "--sp-transport", "p2p", NULL);
    expect_error("sp_transport_needs_sp", "--sp-transport nccl moves sequence parallelism's ring and applies only with "
                 "--sequence-parallel 1 and --sp-overlap 1", "--tp", "2", "--sp-transport", "nccl", NULL);
    expect_error("sp_transport_needs_overlap", "--sp-transport nccl moves sequence parallelism's ring", "--tp", "2",
                 "--sequence-parallel", "1", "--sp-overlap", "0", "--sp-transport", "nccl", NULL);
    expect_error("sp_ring_pieces_needs_overlap", "--sp-ring-pieces 2 cuts sequence parallelism's ring transfers and "
                 "applies only with --sequence-parallel 1 and --sp-overlap 1", "--tp", "2", "--sequence-parallel", "1",
                 "--sp-overlap", "0", "--sp-ring-pieces", "2", NULL);
    expect_error("sp_ring_pieces_range", "--sp-ring-pieces", "--tp", "2", "--sequence-parallel", "1",
                 "--sp-ring-pieces", "9", NULL);
    expect_error("sp_fp8_codes_needs_fp8", "--sp-fp8-codes 0 chooses what FP8 layers gather over sequence "
                 "parallelism's ring and applies only with --precision fp8 (--fp8-recipe delayed), --sequence-parallel "
                 "1 and --sp-overlap 1", "--tp", "2", "--sequence-parallel", "1", "--sp-fp8-codes", "0", NULL);
    expect_error("sp_fp8_codes_needs_delayed", "--sp-fp8-codes 0 chooses what FP8 layers gather", "--precision", "fp8",
                 "--fp8-recipe", "current", "--tp", "2", "--sequence-parallel", "1", "--sp-fp8-codes", "0", NULL);
    expect_error("sp_fp8_codes_needs_overlap", "--sp-fp8-codes 0 chooses what FP8 layers gather", "--precision", "fp8",
                 "--tp", "2", "--sequence-parallel", "1", "--sp-overlap", "0", "--sp-fp8-codes", "0", NULL);
    expect_error("gtp_materialize_needs_gtp_1", "--gtp-materialize 1 runs the GTP path on one rank and needs --gtp 1",
                 "--gtp", "2", "--gtp-materialize", "1", NULL);
    expect_error("choice_gtp_transport", "--gtp-transport: 'nvlink' is not one of ce|nccl", "--gtp", "2",
                 "--gtp-transport", "nvlink", NULL);
    expect_error("gtp_transport_needs_gtp",
                 "--gtp-transport nccl applies to GTP (--gtp > 1, or --gtp-materialize 1) only", "--gtp-transport",
                 "nccl", NULL);
    expect_error("gtp_prefetch_needs_gtp", "--gtp-prefetch 3 applies to GTP (--gtp > 1) only", "--gtp-prefetch", "3",
                 NULL);
    expect_error("heads_divide_width", "--heads 5 must be >= 1 and divide --width 64", "--width", "64", "--heads",
                 "5", NULL);
    expect_error("empty_train_data", "--train-data is empty", "--train-data=", NULL);
    expect_error("choice_fp8_recipe", "--fp8-recipe: 'late' is not one of delayed|current", "--fp8-recipe", "late",
                 NULL);
    expect_error("fp8_option_needs_fp8", "--fp8-recipe current applies to --precision fp8 only, but --precision is bf16",
                 "--fp8-recipe", "current", NULL);
    expect_error("fp8_option_needs_fp8_int", "--fp8-margin 2 applies to --precision fp8 only", "--precision", "fp32",
                 "--fp8-margin", "2", NULL);
    expect_error("fp8_fast_accum_off_needs_fp8", "--fp8-fast-accum 0 applies to --precision fp8 only", "--fp8-fast-accum",
                 "0", NULL);
    expect_error("fp8_bf16_blocks_leave_none", "--fp8-bf16-blocks 1 keeps the first and last 1 of the 2 blocks in bf16",
                 "--precision", "fp8", "--depth", "2", "--fp8-bf16-blocks", "1", NULL);
    expect_error("fp8_width_alignment", "--precision fp8 needs --width to be a multiple of 16", "--precision", "fp8",
                 "--width", "72", "--heads", "4", NULL);
    expect_error("fp8_qkv_alignment", "QKV projection's rows ((heads + 2 x kv-heads) x head size = 140)", "--precision",
                 "fp8", "--arch", "llama", "--width", "112", "--heads", "8", "--kv-heads", "1", NULL);
    expect_error("fp8_ffn_alignment", "and --ffn (200) to be multiples of 16", "--precision", "fp8", "--arch", "llama",
                 "--width", "128", "--heads", "2", "--ffn", "200", NULL);
    expect_error("fp8_token_alignment", "--precision fp8 needs --batch-size x --seq-len (1 x 100) to be a multiple of 16",
                 "--precision", "fp8", "--batch-size", "1", "--seq-len", "100", "--total-batch-tokens", "0",
                 "--sample-every", "0", NULL);
    Options f = parse("--precision", "fp8", "--fp8-recipe", "current", "--fp8-bf16-blocks", "1", "--depth", "3",
                      "--sample-every", "0", "--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "256", NULL);
    options_validate(&f, 1); // exits with the reason if refused
    check(options_fp8(&f) && strcmp(f.fp8_recipe, "current") == 0 && f.fp8_bf16_blocks == 1, "fp8_accepted",
          "precision %s recipe %s bf16 blocks %d", f.precision, f.fp8_recipe, f.fp8_bf16_blocks);
    Options gf = parse("--precision", "fp8", "--gtp-materialize", "1", "--gtp-transport", "nccl", "--sample-every",
                       "0", "--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "256", NULL);
    options_validate(&gf, 1); // exits with the reason if refused
    check(options_fp8(&gf) && options_gtp_path(&gf) && strcmp(gf.gtp_transport, "nccl") == 0, "gtp_fp8_accepted",
          "precision %s gtp path %d transport %s", gf.precision, options_gtp_path(&gf), gf.gtp_transport);
    // the copy engines by default, which a run without GTP passes unasked (the plain runs below validate with it)
    check(strcmp(parse(NULL).gtp_transport, "ce") == 0, "gtp_transport_default", "--gtp-transport default %s",
          parse(NULL).gtp_transport);

    Options sp = parse("--tp", "2", "--sequence-parallel", "1", "--sp-transport", "nccl", "--sample-every", "0", NULL);
    options_validate(&sp, 1); // exits with the reason if refused
    check(strcmp(sp.sp_transport, "nccl") == 0 && strcmp(parse(NULL).sp_transport, "ce") == 0, "sp_transport",
          "--sp-transport %s, default %s", sp.sp_transport, parse(NULL).sp_transport);

    Options spc = parse("--precision", "fp8", "--tp", "2", "--sequence-parallel", "1", "--sp-fp8-codes", "0",
                        "--sample-every", "0", NULL);
    options_validate(&spc, 1); // exits with the reason if refused
    check(spc.sp_fp8_codes == 0 && parse(NULL).sp_fp8_codes == 1, "sp_fp8_codes", "--sp-fp8-codes %d, default %d",
          spc.sp_fp8_codes, parse(NULL).sp_fp8_codes);

    Options spp = parse("--tp", "2", "--sequence-parallel", "1", "--sp-ring-pieces", "4", "--sample-every", "0", NULL);
    options_validate(&spp, 1); // exits with the reason if refused
    check(spp.sp_ring_pieces == 4 && parse(NULL).sp_ring_pieces == 1, "sp_ring_pieces",
          "--sp-ring-pieces %d, default %d", spp.sp_ring_pieces, parse(NULL).sp_ring_pieces);

    Options z = parse("--zero", "1", "--sample-every", "0", "--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "1024", NULL);
    options_validate(&z, 2); // exits with the reason if refused
    check(z.zero == 1, "zero_accepted", "--zero %d", z.zero);
    Options zg = parse("--zero", "1", "--gtp", "2", "--sample-every", "0", "--batch-size", "4", "--seq-len", "64",
                       "--total-batch-tokens", "1024", NULL);
    options_validate(&zg, 4); // DP 2 x GTP 2 data ranks; exits with the reason if refused
    check(zg.zero == 1 && zg.gtp == 2, "zero_with_gtp_accepted", "--zero %d --gtp %d", zg.zero, zg.gtp);

    Options o = parse("--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "1024", NULL);
    check(options_grad_accum(&o, 1) == 4 && options_grad_accum(&o, 2) == 2, "grad_accum", "accum %d (dp 1), %d (dp 2)",
          options_grad_accum(&o, 1), options_grad_accum(&o, 2));
    o = parse("--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "0", NULL);
    check(options_grad_accum(&o, 3) == 1, "grad_accum_default", "accum %d", options_grad_accum(&o, 3));
}

// The named sizes as their sources say: llm.c's GPT-2 (positions = --seq-len), and Hugging Face's config.json of
// Llama 3.2 1B and 3B and Llama 3.1 8B (rope theta 500000, llama3 scaling low 1, high 4, original 8192).
static void test_models(void) {
    const struct {
        const char *name;
        int L, C, NH, KV, F, V, Vp, tied, maxT;
        float rope_factor;
    } want[] = {{"d12", 12, 768, 12, 12, 3072, 50257, 50304, 1, 256, 0},
                {"d24", 24, 1024, 16, 16, 4096, 50257, 50304, 1, 256, 0},
                {"d36", 36, 1280, 20, 20, 5120, 50257, 50304, 1, 256, 0},
                {"d48", 48, 1600, 25, 25, 6400, 50257, 50304, 1, 256, 0},
                {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 128256, 1, 131072, 32},
                {"llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 128256, 1, 131072, 32},
                {"llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 128256, 0, 131072, 8},
                {"llama-tiny", 2, 64, 4, 2, 192, 50257, 50304, 0, 8192, 8}};
    int n = (int)(sizeof(want) / sizeof(want[0]));
    check(n == NUM_MODEL_PRESETS, "presets_all_checked", "%d presets, %d checked", NUM_MODEL_PRESETS, n);
    const char *choices = option_find("model", 5)->choices;
    for (int i = 0; i < n && i < NUM_MODEL_PRESETS; i++) {
        Options o = parse("--model", want[i].name, "--seq-len", "256", NULL);
        GPTConfig c = options_model_config(&o);
        int llama = want[i].rope_factor > 0;
        const RopeScaling *r = &c.rope_scaling;
        int rope_ok = llama ? c.pos == POS_ROPE && c.rope_theta == 500000.0f && r->type == ROPE_SCALING_LLAMA3 &&
                                  r->factor == want[i].rope_factor && r->low_freq_factor == 1.0f &&
                                  r->high_freq_factor == 4.0f && r->original_max_pos == 8192
                            : c.pos == POS_LEARNED && c.rope_theta == 0 && r->type == ROPE_SCALING_NONE;
        int arch_ok = llama ? c.arch == ARCH_LLAMA && c.norm == NORM_RMSNORM && c.mlp == MLP_SWIGLU && !c.bias
                            : c.arch == ARCH_GPT2 && c.norm == NORM_LAYERNORM && c.mlp == MLP_GELU && c.bias;
        char name[64];
        snprintf(name, sizeof(name), "preset_%s", want[i].name);
        check(strcmp(MODEL_PRESETS[i].name, want[i].name) == 0 && strstr(choices, want[i].name) &&
                  c.num_layers == want[i].L && c.channels == want[i].C && c.num_heads == want[i].NH &&
                  c.num_kv_heads == want[i].KV && c.ffn_hidden == want[i].F && c.vocab_size == want[i].V &&
                  c.padded_vocab_size == want[i].Vp && c.tied == want[i].tied && c.max_seq_len == want[i].maxT &&
                  c.norm_eps == 1e-5 && rope_ok && arch_ok,
              name, "L %d C %d NH %d KV %d F %d V %d Vp %d tied %d maxT %d, rope ok %d, arch ok %d (or not in "
              "--model's choices)", c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_hidden, c.vocab_size,
              c.padded_vocab_size, c.tied, c.max_seq_len, rope_ok, arch_ok);
    }
    Options o = parse("--model", "d24", "--depth", "2", "--width", "64", "--heads", "4", NULL);
    GPTConfig c = options_model_config(&o);
    check(c.num_layers == 2 && c.channels == 64 && c.num_heads == 4, "preset_overrides", "L %d C %d NH %d",
          c.num_layers, c.channels, c.num_heads);
    o = parse("--depth", "3", NULL);
    c = options_model_config(&o);
    check(c.num_layers == 3 && c.channels == 768 && c.num_heads == 12, "preset_partial_override", "L %d C %d NH %d",
          c.num_layers, c.channels, c.num_heads);
}

// --arch llama at a GPT-2 size takes its shape and Llama's defaults; every model option sets its field; the rope
// scaling's numbers default to Llama 3.1's where it is turned on, and to the named model's where it has them.
static void test_arch_options(void) {
    Options o = parse("--arch", "llama", "--seq-len", "256", NULL);
    GPTConfig c = options_model_config(&o);
    check(c.arch == ARCH_LLAMA && c.num_layers == 12 && c.channels == 768 && c.num_heads == 12 &&
              c.num_kv_heads == 12 && c.ffn_hidden == 2048 && c.vocab_size == 128256 && !c.tied &&
              c.max_seq_len == 256 && c.rope_theta == 500000.0f && c.rope_scaling.type == ROPE_SCALING_NONE &&
              c.pos == POS_ROPE && c.norm == NORM_RMSNORM && c.mlp == MLP_SWIGLU && !c.bias && c.norm_eps == 1e-5,
          "arch_llama_at_d12", "arch %d L %d C %d NH %d KV %d F %d V %d tied %d maxT %d theta %g", c.arch,
          c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_hidden, c.vocab_size, c.tied, c.max_seq_len,
          c.rope_theta);
    o = parse("--arch", "llama", "--depth", "2", "--width", "64", "--heads", "8", "--kv-heads", "2", "--ffn", "100",
              "--vocab-size", "1000", "--norm-eps", "1e-6", "--rope-theta", "10000", "--rope-scaling", "llama3",
              "--rope-high-freq-factor", "2", "--tie-embeddings", "1", "--seq-len", "64", NULL);
    c = options_model_config(&o);
    const RopeScaling *r = &c.rope_scaling;
    check(c.num_kv_heads == 2 && c.ffn_hidden == 100 && c.vocab_size == 1000 && c.padded_vocab_size == 1024 &&
              c.norm_eps == 1e-6 && c.rope_theta == 10000.0f && r->type == ROPE_SCALING_LLAMA3 && r->factor == 8.0f &&
              r->low_freq_factor == 1.0f && r->high_freq_factor == 2.0f && r->original_max_pos == 8192 && c.tied,
          "arch_options_set_fields", "KV %d F %d V %d Vp %d eps %g theta %g scaling %d (%g %g %g %d) tied %d",
          c.num_kv_heads, c.ffn_hidden, c.vocab_size, c.padded_vocab_size, c.norm_eps, c.rope_theta, r->type,
          r->factor, r->low_freq_factor, r->high_freq_factor, r->original_max_pos, c.tied);
    o = parse("--model", "llama3.2-1b", "--rope-low-freq-factor", "2", "--tie-embeddings", "0", "--seq-len", "64",
              NULL);
    c = options_model_config(&o);
    check(r->factor == 32.0f && r->low_freq_factor == 2.0f && !c.tied, "arch_options_over_named_model",
          "factor %g low %g tied %d", r->factor, r->low_freq_factor, c.tied);
    o = parse("--model", "llama3.2-1b", "--rope-scaling", "none", "--arch=", "--seq-len", "64", NULL);
    c = options_model_config(&o);
    check(c.arch == ARCH_LLAMA && r->type == ROPE_SCALING_NONE && r->factor == 0 && r->original_max_pos == 0,
          "rope_scaling_none_and_empty_arch", "arch %d scaling %d factor %g", c.arch, r->type, r->factor);
    o = parse("--arch", "gpt2", "--kv-heads", "12", "--ffn", "3072", "--norm-eps", "1e-5", "--rope-scaling", "none",
              "--tie-embeddings", "1", "--seq-len", "64", NULL);
    c = options_model_config(&o);
    GPTConfig d12 = config_gpt2(64, GPT2_VOCAB_SIZE, 12, 12, 768);
    check(config_equal(&c, &d12), "gpt2_takes_its_own_values", "a GPT-2 option at GPT-2's value changed the model");
    o = parse("--vocab-size", "1000", "--seq-len", "64", NULL);
    c = options_model_config(&o);
    check(c.arch == ARCH_GPT2 && c.vocab_size == 1000 && c.padded_vocab_size == 1024, "gpt2_vocab_size",
          "arch %d V %d Vp %d", c.arch, c.vocab_size, c.padded_vocab_size);
}

static void test_arch_errors(void) {
    expect_error("choice_arch", "--arch: 'gpt3' is not one of gpt2|llama", "--arch", "gpt3", NULL);
    expect_error("llama_model_not_gpt2", "--model llama-tiny is a llama model but --arch is gpt2", "--model",
                 "llama-tiny", "--arch", "gpt2", NULL);
    expect_error("kv_heads_divide_heads", "--kv-heads 3 must be >= 1 and divide --heads 4", "--arch", "llama",
                 "--width", "64", "--heads", "4", "--kv-heads", "3", NULL);
    expect_error("rope_head_size_even", "head size 15 (--width 60 / --heads 4) must be even", "--arch", "llama",
                 "--width", "60", "--heads", "4", NULL);
    expect_error("seq_len_past_positions", "--seq-len 8200 is longer than the 8192 positions of --model llama-tiny",
                 "--model", "llama-tiny", "--seq-len", "8200", NULL);
    expect_error("rope_factor_below_1", "--rope-factor 0.5 must be >= 1", "--model", "llama-tiny", "--rope-factor",
                 "0.5", NULL);
    expect_error("rope_high_above_low", "--rope-high-freq-factor 1 must be greater than --rope-low-freq-factor 2",
                 "--model", "llama-tiny", "--rope-low-freq-factor", "2", "--rope-high-freq-factor", "1", NULL);
    expect_error("rope_numbers_need_llama3", "--rope-factor 4 applies to llama3 rope scaling, but the model's is none",
                 "--arch", "llama", "--rope-factor", "4", NULL);
    const struct {
        const char *name, *option, *value, *expect;
    } gpt2[] = {{"gpt2_refuses_kv_heads", "--kv-heads", "4", "whose kv heads is 12, not 4: drop --kv-heads"},
                {"gpt2_refuses_ffn", "--ffn", "1000", "whose ffn hidden is 3072, not 1000: drop --ffn"},
                {"gpt2_refuses_untied", "--tie-embeddings", "0", "whose tied embeddings is 1, not 0"},
                {"gpt2_refuses_norm_eps", "--norm-eps", "1e-6", "whose norm eps is 1e-05, not 1e-06"},
                {"gpt2_refuses_rope_theta", "--rope-theta", "10000", "whose rope theta is 0, not 10000"},
                {"gpt2_refuses_rope_scaling", "--rope-scaling", "llama3", "whose rope scaling is none, not llama3"}};
    for (size_t i = 0; i < sizeof(gpt2) / sizeof(gpt2[0]); i++) {
        expect_error(gpt2[i].name, gpt2[i].expect, gpt2[i].option, gpt2[i].value, NULL);
    }
}

static void test_format(void) {
    Options o = parse("--lr", "6e-4", "--beta2", "0.95", "--eps", "1.00000001e-8", NULL);
    char a[64], b[64], e[64];
    option_format(&o, option_find("lr", 2), a, sizeof(a));
    option_format(&o, option_find("beta2", 5), b, sizeof(b));
    option_format(&o, option_find("eps", 3), e, sizeof(e));
    check(strcmp(a, "0.0006") == 0 && strcmp(b, "0.95") == 0, "format_short", "lr '%s' beta2 '%s'", a, b);
    check((float)strtod(e, NULL) == o.eps, "format_round_trip", "eps '%s' reads back as %.9g, was %.9g", e,
          (float)strtod(e, NULL), o.eps);
}

int main(void) {
    test_defaults_and_forms();
    test_ranges();
    test_bad_arguments();
    test_validate();
    test_models();
    test_arch_options();
    test_arch_errors();
    test_format();
    return test_exit();
}
