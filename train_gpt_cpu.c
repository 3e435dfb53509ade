/*
 * train_gpt_cpu.c: the CPU build, plain C11 + OpenMP in fp32, the reference the GPU build must match.
 *
 * It fills a ModelOps table over the CPU model (llmc/cpu_model.h) and hands it to the training loop both builds
 * share (llmc/trainer.h), so options, data order, schedule, logging and checkpoints are the GPU build's. With
 * --ref-out FILE it trains nothing and writes the reference state (llmc/refstate.h) of --ref-steps optimizer
 * steps instead, taking its data, batch and schedule from the same options as training would. This build computes
 * in fp32 whatever --precision says, but for fp8, whose FP8 GEMMs it emulates (llmc/cpu_model.h): the reference of
 * the GPU build's fp8.
 */
#include "llmc/cpu_model.h"
#include "llmc/dataloader.h"
#include "llmc/model_ops.h"
#include "llmc/options.h"
#include "llmc/refstate.h"
#include "llmc/schedule.h"
#include "llmc/trainer.h"

// ----------------------------------------------------------------------------------------------------------
// ModelOps over CpuModel

static void cpu_zero_grad(void *ctx) { cpu_model_zero_grad((CpuModel *)ctx); }

static float cpu_forward_backward(void *ctx, const int *inputs, const int *targets, int B, int T, float loss_scale,
                                  const UpdateArgs *last) {
    (void)last; // one process: nothing to reduce across ranks; the update waits for cpu_update
    CpuModel *m = (CpuModel *)ctx;
    m->training = 1;
    float loss = (float)cpu_model_forward(m, inputs, targets, B, T);
    cpu_model_backward(m, loss_scale);
    m->training = 0;
    return loss;
}

static float cpu_update(void *ctx, const UpdateArgs *args) { return cpu_model_update((CpuModel *)ctx, args); }

static double cpu_eval_loss(void *ctx, const int *inputs, const int *targets, int B, int T, int rows) {
    CpuModel *m = (CpuModel *)ctx;
    cpu_model_forward(m, inputs, targets, B, T);
    return cpu_model_loss_sum(m, rows * T);
}

static void cpu_row_loss_sums(void *ctx, const int *inputs, const int *targets, int B, int T, const int *begin,
                              const int *end, double *sums) {
    CpuModel *m = (CpuModel *)ctx;
    cpu_model_forward(m, inputs, targets, B, T);
    for (int r = 0; r < B; r++) {
        cpu_acc sum = 0.0;
        for (int t = begin[r]; t < end[r]; t++) { sum += m->acts.losses[(size_t)r * T + t]; }
        sums[r] = (double)sum;
    }
}

// Attention is causal, so the logits at pos depend on tokens[0..pos] only: forward just those.
static void cpu_logits_at(void *ctx, const int *tokens, int T, int pos, float *out) {
    CpuModel *m = (CpuModel *)ctx;
    if (pos < 0 || pos >= T) { fail("logits_at: position %d is outside the sequence of %d tokens", pos, T); }
    cpu_model_forward(m, tokens, NULL, 1, pos + 1);
    size_t Vp = (size_t)m->config.padded_vocab_size;
    float_from_real(out, m->acts.logits + (size_t)pos * Vp, Vp);
}

static void cpu_copy_logits(void *ctx, float *out) {
    CpuModel *m = (CpuModel *)ctx;
    float_from_real(out, m->acts.logits, (size_t)m->B * m->T * m->config.padded_vocab_size);
}

static void cpu_get_params(void *ctx, float *out) {
    CpuModel *m = (CpuModel *)ctx;
    float_from_real(out, m->params, m->layout.total);
}

static void cpu_set_params(void *ctx, const float *in) {
    CpuModel *m = (CpuModel *)ctx;
    real_from_float(m->params, in, m->layout.total);
    if (m->fp8) { m->fp8->weights_stale = 1; }
}

static void cpu_get_grads(void *ctx, float *out) {
    CpuModel *m = (CpuModel *)ctx;
    float_from_real(out, m->grads, m->layout.total);
}

static void cpu_get_opt_state(void *ctx, float *mo, float *vo) {
    CpuModel *m = (CpuModel *)ctx;
    float_from_real(mo, m->adam_m, m->layout.total);
    float_from_real(vo, m->adam_v, m->layout.total);
}

static void cpu_set_opt_state(void *ctx, const float *mi, const float *vi) {
    CpuModel *m = (CpuModel *)ctx;
    real_from_float(m->adam_m, mi, m->layout.total);
    real_from_float(m->adam_v, vi, m->layout.total);
}

static void cpu_get_fp8_history(void *ctx, Fp8History *h) { cpu_model_get_fp8_history((CpuModel *)ctx, h); }
static void cpu_set_fp8_history(void *ctx, const Fp8History *h) { cpu_model_set_fp8_history((CpuModel *)ctx, h); }
static void cpu_destroy(void *ctx) { cpu_model_free((CpuModel *)ctx); }

// The model for micro-batches of B x T, initialized from --seed (the trainer then loads --init-from or a
// checkpoint over it where asked).
static ModelOps make_cpu_model(const GPTConfig *config, const Options *opts, const Mesh *mesh, int B, int T) {
    (void)mesh; // always world 1 (single_process_launch)
    CpuModel *m = cpu_model_create(config, B, T);
    cpu_model_init_params(m, (uint64_t)opts->seed);
    ModelOps ops;
    memset(&ops, 0, sizeof(ops)); // no exposed_comm_ms: no communication
    ops.ctx = m;
    ops.device_name = "cpu";
    ops.zero_grad = cpu_zero_grad;
    ops.forward_backward = cpu_forward_backward;
    ops.update = cpu_update;
    ops.eval_loss = cpu_eval_loss;
    ops.row_loss_sums = cpu_row_loss_sums;
    ops.logits_at = cpu_logits_at;
    ops.copy_logits = cpu_copy_logits;
    ops.get_params = cpu_get_params;
    ops.set_params = cpu_set_params;
    ops.get_grads = cpu_get_grads;
    ops.get_opt_state = cpu_get_opt_state;
    ops.set_opt_state = cpu_set_opt_state;
    ops.destroy = cpu_destroy;
    if (options_fp8(opts)) {
        Fp8Recipe r = fp8_recipe_from_options(opts);
        cpu_model_enable_fp8(m, &r);
        ops.get_fp8_history = cpu_get_fp8_history;
        ops.set_fp8_history = cpu_set_fp8_history;
    }
    return ops;
}

// ----------------------------------------------------------------------------------------------------------
// --ref-out: the reference state

static RefHeader reference_header(const GPTConfig *c, const Options *o, int accum, size_t num_params) {
    RefHeader h;
    memset(&h, 0, sizeof(h));
    h.config = *c;
    h.B = o->batch_size;
    h.T = o->seq_len;
    h.accum = accum;
    h.steps = o->ref_steps;
    h.seed = o->seed;
    h.weight_decay = o->weight_decay;
    h.beta1 = o->beta1;
    h.beta2 = o->beta2;
    h.eps = o->eps;
    h.grad_clip = o->grad_clip;
    if (options_fp8(o)) {
        Fp8Recipe r = fp8_recipe_from_options(o);
        h.fp8 = 1;
        h.fp8_scaling = (int32_t)r.scaling;
        h.fp8_history = r.history;
        h.fp8_margin = r.margin;
        h.fp8_bf16_blocks = r.bf16_blocks;
    }
    h.num_params = (int64_t)num_params;
    return h;
}

// Runs --ref-steps optimizer steps exactly as trainer_step does (same data order, loss scale, schedule and
// update arguments), recording what the GPU parity test compares.
static int write_reference_state(const Options *o) {
    const int dp = 1;
    options_validate(o, dp);
    GPTConfig config = options_model_config(o);
    ParamLayout layout;
    param_layout(&config, &layout);
    int B = o->batch_size, T = o->seq_len, accum = options_grad_accum(o, dp);
    size_t n = (size_t)B * T, P = layout.total;
    DataLoader dl;
    dataloader_init(&dl, o->train_data, B, T, 0, dp, (long long)B * accum * dp, (uint64_t)o->seed, 1,
                    config.vocab_size);
    Mesh mesh = mesh_make(1, 0, 1, 1);
    ModelOps ops = make_cpu_model(&config, o, &mesh, B, T);

    float *params = (float *)malloc_check(P * sizeof(float), "reference params");
    float *grads = (float *)malloc_check(P * sizeof(float), "reference gradients");
    float *logits = (float *)malloc_check(n * config.padded_vocab_size * sizeof(float), "reference logits");
    int *inputs = (int *)malloc_check(accum * n * sizeof(int), "reference inputs");
    int *targets = (int *)malloc_check(accum * n * sizeof(int), "reference targets");
    RefHeader h = reference_header(&config, o, accum, P);
    RefWriter w;
    ops.get_params(ops.ctx, params);
    refstate_write_begin(&w, o->ref_out, &h, params);

    float loss_scale = 1.0f / (float)((double)n * accum * dp);
    for (int step = 0; step < o->ref_steps; step++) {
        ops.zero_grad(ops.ctx);
        double loss = 0.0;
        UpdateArgs args = update_args_at(o, step);
        for (int micro = 0; micro < accum; micro++) {
            int *in = inputs + micro * n, *tg = targets + micro * n;
            dataloader_next(&dl, in, tg);
            if (step == 0 && micro == 0) { // logits of a clean forward, before any backward
                ops.eval_loss(ops.ctx, in, tg, B, T, B);
                ops.copy_logits(ops.ctx, logits);
            }
            loss += ops.forward_backward(ops.ctx, in, tg, B, T, loss_scale, micro == accum - 1 ? &args : NULL);
        }
        if (step == 0) { ops.get_grads(ops.ctx, grads); }
        float norm = ops.update(ops.ctx, &args);
        int records_params = step < refstate_param_steps(&h);
        if (records_params) { ops.get_params(ops.ctx, params); }
        refstate_write_step(&w, inputs, targets, (float)(loss / accum), norm, args.lr, step == 0 ? logits : NULL,
                            step == 0 ? grads : NULL, records_params ? params : NULL);
        printf("reference step %d/%d | loss %.6f | norm %.6f | lr %.6e\n", step + 1, o->ref_steps, loss / accum,
               norm, args.lr);
    }
    ops.get_params(ops.ctx, params);
    refstate_write_end(&w, params);
    printf("wrote the reference state of %d steps to '%s'\n", o->ref_steps, o->ref_out);

    cpu_model_free((CpuModel *)ops.ctx);
    dataloader_free(&dl);
    free(params);
    free(grads);
    free(logits);
    free(inputs);
    free(targets);
    return 0;
}

int main(int argc, char **argv) {
    Options o;
    if (options_parse(&o, argc, argv)) { return 0; } // --help
    if (o.ref_out[0] != '\0') { return write_reference_state(&o); }
    return train_main(argc, argv, single_process_launch, make_cpu_model, NULL); // every description
}
