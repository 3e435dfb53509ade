/*
 * test_classifier_chunks.cu: the LM head and classifier in chunks of rows (train_gpt.cu's gpt_head, --logits-mib)
 * against the same model holding all rows' logits at once (--logits-mib 0), in fp32.
 *
 *   test/gpubin/test_classifier_chunks
 *
 * Two models of one description and seed, one cutting the head into many chunks (1 MiB of logits: a few rows each,
 * of two sizes), one not. Over two micro-steps (the head's weight gradient written on the first chunk of the first,
 * added to on every other chunk), the losses and every gradient tensor must agree to fp32 rounding (1e-5 of a
 * tensor's largest element, 1e-6 relative for the loss: only the order in which the chunks' rows are summed into
 * the head's gradient differs, and the GEMMs' own order on a shape of fewer rows); so must the validation loss and
 * the logits copy_logits makes again chunk by chunk, and logits_at's row (the head chunk that holds the position)
 * against that copy's row. GPT-2 (tied head, one-kernel classifier rows) and a Llama with Llama 3's vocabulary
 * (untied head: lmhead's gradient, and wte's from the embedding alone; rows too wide for shared memory: the
 * two-pass classifier).
 */
#define TESTING
#include "../train_gpt.cu"

#include "test_util.h"

#define LOSS_TOL 1e-6
#define GRAD_TOL 1e-5
#define LOGITS_TOL 1e-5
#define CHUNKED_MIB 1 // a few rows of logits a chunk at these vocabularies
#define B 4
#define T 64
#define MICRO_STEPS 2

// A model of the description the options give, its head chunks under logits_mib.
static ModelOps make_model(Options *o, int logits_mib) {
    o->logits_mib = logits_mib;
    GPTConfig config = options_model_config(o);
    Mesh mesh = mesh_make(1, 0, 1, 1);
    return make_gpu_model(&config, o, &mesh, B, T);
}

static int head_chunks_of(const ModelOps *ops) {
    const GPT<float> *g = (const GPT<float> *)ops->ctx;
    return head_chunks(B * T, g->head_rows);
}

static void compare(const char *model, const char *extra_opts[], int extra) {
    Options o;
    options_defaults(&o);
    option_set(&o, option_find("precision", strlen("precision")), "fp32");
    for (int i = 0; i + 1 < extra; i += 2) {
        const char *name = extra_opts[i] + 2; // past "--"
        option_set(&o, option_find(name, strlen(name)), extra_opts[i + 1]);
    }
    o.out_dir[0] = '\0'; // no GEMM algorithm file
    o.seq_len = T;
    ModelOps whole = make_model(&o, 0), chunked = make_model(&o, CHUNKED_MIB);
    GPTConfig config = options_model_config(&o);
    ParamLayout layout;
    param_layout(&config, &layout);
    size_t P = layout.total, N = (size_t)B * T, Vp = config.padded_vocab_size;
    char name[160];
    snprintf(name, sizeof(name), "%s: chunks", model);
    check(head_chunks_of(&whole) == 1 && head_chunks_of(&chunked) > 2, name, "%d and %d chunks (want 1 and > 2)",
          head_chunks_of(&whole), head_chunks_of(&chunked));

    int *tokens = (int *)malloc_check(MICRO_STEPS * (N + 1) * sizeof(int), "tokens");
    uint32_t s = 12345;
    for (size_t i = 0; i < MICRO_STEPS * (N + 1); i++) {
        s = s * 1664525u + 1013904223u;
        tokens[i] = (int)((s >> 8) % (uint32_t)config.vocab_size);
    }
    float *grads[2], loss[2] = {0, 0};
    ModelOps *ops[2] = {&whole, &chunked};
    for (int m = 0; m < 2; m++) {
        grads[m] = (float *)malloc_check(P * sizeof(float), "gradients");
        ops[m]->zero_grad(ops[m]->ctx);
        for (int k = 0; k < MICRO_STEPS; k++) {
            const int *in = tokens + k * (N + 1);
            loss[m] += ops[m]->forward_backward(ops[m]->ctx, in, in + 1, B, T, 1.0f / (MICRO_STEPS * N), NULL);
        }
        ops[m]->get_grads(ops[m]->ctx, grads[m]);
    }
    double e = fabs(loss[1] - loss[0]) / fabs(loss[0]);
    snprintf(name, sizeof(name), "%s: training loss", model);
    check(e <= LOSS_TOL, name, "chunked %.9g, whole %.9g: relative %.3e > %.1e", loss[1], loss[0], e, LOSS_TOL);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (layout.size[t] == 0) { continue; }
        e = max_rel_err(grads[1] + layout.offset[t], grads[0] + layout.offset[t], layout.size[t]);
        snprintf(name, sizeof(name), "%s: gradient %s", model, PARAM_NAMES[t]);
        check(e <= GRAD_TOL, name, "max rel err %.3e > %.1e", e, GRAD_TOL);
    }

    double val[2];
    float *logits[2], *row = (float *)malloc_check(Vp * sizeof(float), "a row of logits");
    for (int m = 0; m < 2; m++) {
        val[m] = ops[m]->eval_loss(ops[m]->ctx, tokens, tokens + 1, B, T, B);
        logits[m] = (float *)malloc_check(N * Vp * sizeof(float), "logits");
        ops[m]->copy_logits(ops[m]->ctx, logits[m]);
    }
    e = fabs(val[1] - val[0]) / fabs(val[0]);
    snprintf(name, sizeof(name), "%s: validation loss", model);
    check(e <= LOSS_TOL, name, "chunked %.9g, whole %.9g: relative %.3e > %.1e", val[1], val[0], e, LOSS_TOL);
    e = max_rel_err(logits[1], logits[0], N * Vp);
    snprintf(name, sizeof(name), "%s: copy_logits", model);
    check(e <= LOGITS_TOL, name, "max rel err %.3e > %.1e", e, LOGITS_TOL);
    int pos = T - 1; // the last head chunk of a sequence
    chunked.logits_at(chunked.ctx, tokens, T, pos, row);
    e = max_rel_err(row, logits[0] + (size_t)pos * Vp, Vp);
    snprintf(name, sizeof(name), "%s: logits_at", model);
    check(e <= LOGITS_TOL, name, "position %d: max rel err %.3e > %.1e", pos, e, LOGITS_TOL);

    for (int m = 0; m < 2; m++) {
        free(grads[m]);
        free(logits[m]);
    }
    free(row);
    free(tokens);
}

int main(void) {
    const char *gpt2[] = {"--depth", "2", "--width", "128", "--heads", "2"};
    compare("gpt2 tied", gpt2, 6);
    const char *llama[] = {"--model", "llama-tiny", "--depth", "1", "--width", "128", "--heads", "2", "--kv-heads", "1",
                           "--ffn", "256", "--vocab-size", "128256", "--tie-embeddings", "0"};
    compare("llama vocab 128256 untied", llama, 16);
    return test_exit();
}
