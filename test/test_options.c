/*
 * test_options.c: the command line (llmc/options.h).
 * - defaults are the table's; "--name value" and "--name=value" both work; --help is reported to the caller;
 * - every numeric option rejects a value just below and just above its range; choices, unknown options,
 *   missing values, malformed numbers and stray arguments are rejected; cross-option checks
 *   (options_validate) catch a batch that does not divide, warmup past the end, a sample longer than the
 *   context, parallel layouts this build lacks. Each failure is one line naming the option, exit status != 0
 *   (run in a child process);
 * - model presets and their overrides; option_format round-trips floats.
 */
#include "../llmc/options.h"
#include "test_util.h"

#define MAX_ARGS 24
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
        int integer = s->type != OPT_FLOAT;
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
    expect_error("gtp_materialize_needs_gtp_1", "--gtp-materialize 1 runs the GTP path on one rank and needs --gtp 1",
                 "--gtp", "2", "--gtp-materialize", "1", NULL);
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
    expect_error("fp8_token_alignment", "--precision fp8 needs --batch-size x --seq-len (1 x 100) to be a multiple of 16",
                 "--precision", "fp8", "--batch-size", "1", "--seq-len", "100", "--total-batch-tokens", "0",
                 "--sample-every", "0", NULL);
    Options f = parse("--precision", "fp8", "--fp8-recipe", "current", "--fp8-bf16-blocks", "1", "--depth", "3",
                      "--sample-every", "0", "--batch-size", "4", "--seq-len", "64", "--total-batch-tokens", "256", NULL);
    options_validate(&f, 1); // exits with the reason if refused
    check(options_fp8(&f) && strcmp(f.fp8_recipe, "current") == 0 && f.fp8_bf16_blocks == 1, "fp8_accepted",
          "precision %s recipe %s bf16 blocks %d", f.precision, f.fp8_recipe, f.fp8_bf16_blocks);
    Options gf = parse("--precision", "fp8", "--gtp-materialize", "1", "--sample-every", "0", "--batch-size", "4",
                       "--seq-len", "64", "--total-batch-tokens", "256", NULL);
    options_validate(&gf, 1); // exits with the reason if refused
    check(options_fp8(&gf) && options_gtp_path(&gf), "gtp_fp8_accepted", "precision %s gtp path %d", gf.precision,
          options_gtp_path(&gf));

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

static void test_models(void) {
    const int want[][3] = {{12, 768, 12}, {24, 1024, 16}, {36, 1280, 20}, {48, 1600, 25}};
    for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
        Options o = parse("--model", MODEL_PRESETS[i].name, "--seq-len", "256", NULL);
        GPTConfig c = options_model_config(&o);
        char name[64];
        snprintf(name, sizeof(name), "preset_%s", MODEL_PRESETS[i].name);
        check(c.num_layers == want[i][0] && c.channels == want[i][1] && c.num_heads == want[i][2] &&
                  c.max_seq_len == 256 && c.vocab_size == GPT2_VOCAB_SIZE && c.padded_vocab_size == 50304,
              name, "L %d C %d NH %d maxT %d V %d Vp %d", c.num_layers, c.channels, c.num_heads, c.max_seq_len,
              c.vocab_size, c.padded_vocab_size);
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
    test_format();
    return test_exit();
}
