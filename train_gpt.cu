/*
 * train_gpt.cu: training the model llmc/config.h describes (GPT-2, or Llama 3: RMSNorm, RoPE, grouped-query
 * attention, SwiGLU, no biases, a tied or untied LM head) on one GPU or many (data parallel, optionally ZeRO-1; tensor
 * parallel, optionally sequence parallel; GTP; and their combinations).
 *
 * Reads top to bottom: the run-time precision, the model (parameters, activations), forward, backward, the
 * update, and the ModelOps table through which the training loop shared with the CPU build (llmc/trainer.h)
 * drives it. The kernels live in the llmc/ .cuh headers, one concern each; every linear layer goes through
 * llmc/matmul.cuh; every wait and record between the step's streams through llmc/step_schedule.cuh, whose table says
 * which stream runs what behind which event.
 *
 * Precision: master weights, gradients and AdamW moments are fp32 always. Activations and the weights the
 * kernels read are of type floatX: float in fp32 mode (the GEMMs read the masters directly; CUBLAS_COMPUTE_32F, no
 * TF32, so the CPU build is matched to ~1e-6), __nv_bfloat16 in bf16 mode (a bf16 copy of the weights that AdamW
 * rewrites each step; the GEMMs accumulate in fp32 and write weight gradients in fp32). fp8 is bf16 with the four
 * linear layers of each block (but --fp8-bf16-blocks at either end) multiplying in FP8 (llmc/fp8.h, llmc/fp8.cuh):
 * their weights cast after each update into the bf16 copy's room, their inputs and output gradients cast as they
 * are produced, the amax of every FP8 tensor reduced over all ranks once a step into the scaling history. With
 * --fp8-activations fp32 the same FP8 GEMMs sit among fp32 activations (the check against the CPU emulation).
 *
 * Every kernel is deterministic (no float atomics): the same run on the same GPU gives the same bits, so a
 * resumed run continues exactly.
 *
 * Several processes (mpirun, torchrun, srun; llmc/comm.cuh): each rank holds a replica and trains on its stride of
 * the global batch. On the last micro-step, the one place where backward hands a parameter group's final gradients
 * on (grads_final) also sums them over the ranks on the DP stream (llmc/data_parallel.cuh), and the group's norm
 * partials wait for that; under ZeRO-1 each rank then updates its slice and broadcasts it group by group. Under
 * tensor parallelism (--tp) a rank holds its TP-local tensors (llmc/tp_layout.h) and activations; the Linear layers,
 * the embedding and the classifier do the TP collectives (llmc/tensor_parallel.cuh), so forward and backward read
 * as on one GPU but for the token range t0 .. t0 + ns of the LayerNorm regions under sequence parallelism. One
 * process runs exactly the single-GPU program: no communicator, no extra event, no collective.
 */
#include <cuda_profiler_api.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "llmc/config.h"
#include "llmc/cuda_common.cuh"
#include "llmc/head_chunks.h"
#include "llmc/init.h"
#include "llmc/model_ops.h"
#include "llmc/options.h"
#include "llmc/rope.h"
#include "llmc/tp_layout.h"
#include "llmc/trainer.h"

#include "llmc/adamw.cuh"
#include "llmc/attention.cuh"
#include "llmc/classifier.cuh"
#include "llmc/comm.cuh"
#include "llmc/data_parallel.cuh"
#include "llmc/encoder.cuh"
#include "llmc/gemm_algos.cuh"
#include "llmc/gtp.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/model_io.cuh"
#include "llmc/params.cuh"
#include "llmc/rope.cuh"
#include "llmc/step_schedule.cuh"
#include "llmc/swiglu.cuh"
#include "llmc/tensor_parallel.cuh"

// ----------------------------------------------------------------------------------------------------------------
// precision

// fp8 is a recipe on top of bf16 (or, for checking, fp32): the block GEMMs of llmc/matmul.cuh in FP8.
typedef enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP8 } Precision;

static Precision precision_from_options(const Options *o) {
    if (strcmp(o->precision, "fp32") == 0) { return PRECISION_FP32; }
    if (strcmp(o->precision, "bf16") == 0) { return PRECISION_BF16; }
    if (strcmp(o->precision, "fp8") == 0) { return PRECISION_FP8; }
    fail("--precision '%s' is not supported by the GPU build; use fp32, bf16 or fp8", o->precision);
}

// Dense datasheet peaks (FLOP/s) of the GPUs we know, for MFU; 0 (no MFU) for others.
typedef struct {
    const char *match;
    double bf16, fp32, fp8;
} GpuPeaks;

static GpuPeaks gpu_peaks(const char *name) {
    static const GpuPeaks PEAKS[] = {{"H100 PCIe", 756e12, 51e12, 1513e12},
                                     {"H100", 989e12, 67e12, 1979e12},
                                     {"H200", 989e12, 67e12, 1979e12}};
    for (size_t i = 0; i < sizeof(PEAKS) / sizeof(PEAKS[0]); i++) {
        if (strstr(name, PEAKS[i].match)) { return PEAKS[i]; }
    }
    GpuPeaks none = {name, 0.0, 0.0, 0.0};
    return none;
}

/*
 * The peak MFU is taken against. fp8: the FP8 GEMMs' FLOPs at the fp8 peak and the rest at bf16's, as one rate: the
 * FLOPs of a token over the time the two parts would take at their peaks, so MFU stays "the fraction of the hardware's
 * peak the step reached" (fp8_flops: the FP8 GEMMs' share of flops, per token).
 */
static double mfu_peak(const char *name, Precision p, double flops, double fp8_flops) {
    GpuPeaks k = gpu_peaks(name);
    if (k.bf16 == 0.0) { return 0.0; }
    if (p == PRECISION_FP32) { return k.fp32; }
    if (p == PRECISION_BF16) { return k.bf16; }
    return flops / (fp8_flops / k.fp8 + (flops - fp8_flops) / k.bf16);
}

// ----------------------------------------------------------------------------------------------------------------
// the model

// Activations for up to maxB x maxT tokens (N = maxB * maxT); per layer where backward needs them. QKV = (NH + 2 KV)
// HS rows of the fused q, k, v projection (3C for GPT-2), FC the fc layer's outputs (GPT-2: F = 4C; SwiGLU: 2F, gate
// then up), F the MLP's hidden features (config.h). Under tensor parallelism a rank holds its TP-local features (the
// qkv rows of its KV/TP key/value heads and their groups' query heads, those heads' attention, F/TP of each fc part,
// Vp/TP logits: "/TP" below; llmc/mesh.h), and under sequence parallelism the residual stream and norm statistics of
// its Ns = N/TP tokens only (Ns = N otherwise); norm outputs are (N, C) all the same, as the column-parallel GEMM
// gathers them there. RMSNorm leaves the mean slot of its statistics unused.
template <typename floatX> struct Activations {
    floatX *res;                   // (L+1, Ns, C) residual stream: [0] the embeddings, [l+1] the output of block l
    floatX *res2;                  // (L, Ns, C) residual stream after attention
    floatX *ln1, *ln2;             // (L, N, C); fp8: a slot for each bf16 block, one the FP8 blocks share (their
                                   // weight gradients read the FP8 input Fp8Linear::x_t instead; under SP over the
                                   // ring, where they gather their input's codes, only this rank's rows are valid)
    float *ln1_stats, *ln2_stats;  // (L, 2, Ns): mean then rstd
    floatX *qkv;                   // (L, N, QKV/TP); the query and key heads rotated (RoPE) where the model has it
    floatX *atty;                  // (L, N, C/TP) attention output, heads side by side
    float *lse;                    // (L, B, NH/TP, T) log-sum-exp of each attention row
    floatX *fch;                   // (L, N, FC/TP) fc output before GELU or SwiGLU; SwiGLU's backward overwrites
                                   // a layer's with its gradient (fc's output gradient), which fc's backward reads
                                   // (an FP8 block's backward casts that gradient instead: fch stays)
    floatX *h4;                    // swiglu(fch): (N, F/TP) that every layer shares, where the forward writes it for
                                   // the fc projection and the backward's SwiGLU writes it again for that layer's
                                   // weight gradient (swiglu_backward; the weight gradient queue is empty between
                                   // layers): in the logits' buffer after d fch (see h4_alt); NULL in fp8 without
                                   // bf16 blocks (an FP8 block's fc casts swiglu(fch) as the fc projection's FP8
                                   // input, kept transposed in Fp8Linear::x_t).
                                   // gelu(fch): (keep_gelu, N, 4C/TP) for the first layers, which keep it for
                                   // backward, then (N, 4C/TP) for the others, which recompute it there a layer
                                   // ahead (gelu_recompute): the highest (GPT::top_recompute) and every second one
                                   // below use this slot, the others h4_alt
    floatX *h4_alt;                // (N, 4C/TP) the second buffer of the layers that recompute gelu(fch), so that
                                   // one layer's is written while the layer above still reads its own: in the
                                   // logits' buffer after d fch (the logits are dead from the end of the LM head's
                                   // backward to the next forward's LM head)
                                   // fp8: gelu(fch) is the fc projection's FP8 input; the bf16 blocks keep theirs in
                                   // h4 (a slot each), the FP8 ones keep it transposed in FP8 (Fp8Linear::x_t) or
                                   // recompute it into h4t[0] / h4t[1] (the same two places, as FP8 bytes)
    uint8_t *h4t[2];               // fp8: (4C/TP, N) FP8 gelu(fch) of the layers that recompute it
    floatX *lnf;                   // (N, C)
    float *lnf_stats;              // (2, Ns)
    floatX *logits;                // (R, Vp/TP) one chunk of R = GPT::head_rows rows of logits (gpt_head), which
                                   // the classifier overwrites with their gradient; the layers keep d fch and after
                                   // it SwiGLU's shared output or h4_alt here, so it is as large as the larger use
    float *losses;                 // (N)
    float *vocab_stats;            // TP > 1 or a row past shared memory: (TP, R, VOCAB_STATS) row statistics
    // scratch shared by all layers
    floatX *proj;                  // (N, C) a projection's output before its residual add; in backward the
                                   // gradient of a LayerNorm output or of the attention output
    floatX *dres;                  // (N, C) gradient of the residual stream (this rank's Ns tokens of it under SP,
                                   // gathered to all N where a row-parallel backward or the embedding needs them)
    floatX *dqkv;                  // (N, QKV/TP)
    floatX *dfch;                  // (N, FC/TP) gradient of the fc output (SwiGLU: of its output, (N, F/TP)): the
                                   // logits' buffer, which backward no longer needs once the LM head's is done
    void *attn_workspace;
    float *reduce_scratch;         // partial sums of the column reductions (bias and LayerNorm gradients)
    float *sums_scratch;           // the same for the fc bias sums on g_cuda.sums (fc_bias_backward)
    float *norm_scratch;           // partial sums of the gradient norm, all groups (GPT::norm_groups)
    double *norm_fold;             // their folds (grad_sum_partials)
    double *sum_squares;           // the squared norm (of this rank's part, then of all where it is split)
    float *scalars;                // [0] mean loss, [1] gradient norm, [2] clip factor
};

// Host side of one micro-batch: pinned so copies run asynchronously with the GPU.
typedef struct {
    int *tokens;        // inputs (N) then targets (N)
    int *buckets;       // the encoder backward's token buckets (3N + 1)
    int *bucket_count;  // V, for the counting sort
    float *scalars;     // copies of Activations::scalars
    int *spans;         // row_loss_sums: each row's [begin, end) (up to N rows)
    float *row_sums;    // and its sums (N)
} HostStaging;

template <typename floatX> struct GPT {
    GPTConfig config;
    ParamLayout layout;            // this rank's tensors (llmc/gtp_plan.h): its TP-local ones, the block weight
                                   // matrices cut to its GTP shard; the whole model on one rank
    ParamLayout tp_layout;         // its TP-local tensors whole (llmc/tp_layout.h): checkpoints go through them
    Mesh mesh;
    TensorParallel tp;             // the TP group's collectives (tp.size 1: none)
    Gtp gtp;                       // GTP weight sharding (llmc/gtp.cuh; gtp.active 0: none)
    GtpShape gtp_shapes[BLOCK_LINEARS]; // each block linear layer's weight as GTP shards it
    EmbeddingShard emb;            // the vocabulary rows of wte this rank holds
    int heads, kv_heads, attn, qkv;// this rank's query heads, key/value heads, the query heads' channels (heads x
                                   // head size) and the fused projection's rows ((heads + 2 kv_heads) x head size)
    int mlp, ffn;                  // this rank's fc outputs (FC / TP) and MLP hidden features (F / TP); the whole
                                   // model's without TP
    float *rope_cos, *rope_sin;    // RoPE: the (maxT, HS/2) tables of llmc/rope.h; NULL for learned positions
    Precision precision;
    int maxB, maxT;
    int keep_gelu;                 // --keep-gelu-layers (at most L): see Activations::h4
    int head_rows;                 // the most rows of logits a chunk of the LM head holds (--logits-mib of them,
                                   // whole rows of the padded vocabulary: llmc/head_chunks.h), at most maxB x maxT
    int top_recompute;             // the highest layer that recomputes gelu(fch) (recomputes_gelu), or -1: it and
                                   // every second one below use the first of the two buffers, the others the second
    float *params, *grads, *m, *v; // fp32, param_layout() order (m, v: this rank's ZeRO-1 slice only)
    int grads_zero;                // the gradients are zero (zero_grad): the next backward writes them, and
                                   // grads holds stale values until then; grads_materialize makes it true
    floatX *weights;               // what the kernels read: params itself (fp32) or its bf16 copy
    DataParallel dp;               // the parameter groups, and with DP > 1 the ranks' collectives
    ModelShards shards;            // the above as the host's copies of the model see them (llmc/model_io.cuh)
    Linear<floatX> *linears;       // (L, BLOCK_LINEARS): every block's linear layers (block_linear)
    Linear<floatX> head;           // the LM head
    Fp8Device *fp8;                // --precision fp8: the recipe's state (llmc/fp8.cuh); NULL otherwise
    Fp8Linear *fp8_linears;        // (L, BLOCK_LINEARS): the FP8 blocks' (Linear::fp8 points here)
    float *fp8_partials[2];        // amax-pass scratch of the compute stream and of the update stream (weight casts),
                                   // BLOCK_LINEARS x Fp8Device::amax_blocks floats each: a layer's weights at once
    Activations<floatX> acts;
    int *d_tokens;                 // inputs (N) then targets (N)
    int *d_spans;                  // row_loss_sums: each row's [begin, end) (up to N rows of one token)
    float *d_row_sums;             // and its sums (N)
    int *d_buckets;
    TokenBuckets buckets;
    HostStaging host;
    AdamWLate rest_late;           // the rest group's AdamW in two launches (rest_can_split); chunks 0 where not
    int rest_split;                // this backward's update does so
    // the norm's groups (see grads_final): groups 0 .. L-1 are the layers' gradients, group L the rest
    NormGroup *norm_groups;        // L + 1: the part of each group this rank owns (all of it without ZeRO-1)
    int *norm_first;               // L + 2: group k's partial sums start at norm_scratch + norm_first[k]
    StepSchedule sched;            // the step's streams and events (llmc/step_schedule.cuh)
    int eval_B, eval_T;            // shape of the logits the last eval_loss left
    floatX *row_gather;            // TP > 1: one row of logits, all-gathered (op_logits_at)
    char device_name[256];
};

/*
 * The one provider of parameter tensors: every reader of a weight, a master weight or a gradient (LayerNorms,
 * biases, linear layers, embedding, LM head, AdamW's FP8 codes) takes its pointer from a view, as activations come
 * from layer_acts. A view holds, for layer l, that layer's slice of each of the 12 per-layer tensors (NULL for wte,
 * wpe, the final norm and lmhead), or for MODEL_TENSORS those four whole (NULL for the per-layer ones), in one flat
 * buffer of the layout (config.h's tensor-major order: layer l's slice of tensor t is the l-th of L equal parts).
 * A tensor the model lacks (Llama's biases and wpe, a tied model's lmhead) is NULL in every view, which is how the
 * kernels are told to skip it.
 */
#define MODEL_TENSORS (-1)

template <typename U> struct ParamView {
    U *p[NUM_PARAM_TENSORS];
    U *operator[](int t) const { return p[t]; }
};

// Where layer l's (or MODEL_TENSORS') part of tensor t begins in a flat buffer; (size_t)-1 where it has none.
template <typename floatX> static size_t param_view_begin(const GPT<floatX> *g, int t, int l) {
    size_t rows, cols;
    param_layer_shape(&g->config, t, &rows, &cols);
    if (rows == 0 || param_is_per_layer(t) != (l != MODEL_TENSORS)) { return (size_t)-1; }
    size_t layer = l == MODEL_TENSORS ? 0 : (size_t)l;
    return g->layout.offset[t] + layer * (g->layout.size[t] / param_num_layers(&g->config, t));
}

template <typename floatX, typename U> static ParamView<U> param_view(const GPT<floatX> *g, U *base, int l) {
    ParamView<U> v;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t b = param_view_begin(g, t, l);
        v.p[t] = b == (size_t)-1 ? NULL : base + b;
    }
    return v;
}

// What the kernels read (the masters themselves in fp32, else their copy), the fp32 masters, the fp32 gradients.
template <typename floatX> static ParamView<const floatX> weights_of(const GPT<floatX> *g, int l) {
    return param_view(g, (const floatX *)g->weights, l);
}
template <typename floatX> static ParamView<const float> masters_of(const GPT<floatX> *g, int l) {
    return param_view(g, (const float *)g->params, l);
}
template <typename floatX> static ParamView<float> grads_of(const GPT<floatX> *g, int l) {
    return param_view(g, g->grads, l);
}

// Layer l's linear layer `lin` (config.h's LIN_*), made once by linears_make.
template <typename floatX> static const Linear<floatX> &block_linear(const GPT<floatX> *g, int l, int lin) {
    return g->linears[l * BLOCK_LINEARS + lin];
}

/*
 * Every linear layer, made once, each this rank's in x out features (its part under TP): a block's four, their bias
 * gradients summed where the data passes anyway (the attention and MLP projections write the residual stream, whose
 * gradient the LayerNorm backward above them sums; the attention backward sums the QKV output gradient it writes;
 * fc's is summed beside the fc GEMMs: fc_bias_backward), and the LM head: logits = lnf wte^T over the padded
 * vocabulary (this rank's rows of it), no bias: its weight is wte (tied to the token embedding) or lmhead. A model
 * without biases (Llama) has NULL for each, and sums nothing.
 */
template <typename floatX> static void linears_make(GPT<floatX> *g) {
    int L = g->config.num_layers, C = g->config.channels, A = g->attn, M = g->mlp, F = g->ffn;
    const struct {
        int bias, in, out;
        LinearSplit split;
    } spec[BLOCK_LINEARS] = {{P_QKVB, C, g->qkv, LINEAR_COLUMN}, {P_ATTPROJB, A, C, LINEAR_ROW},
                             {P_FCB, C, M, LINEAR_COLUMN}, {P_FCPROJB, F, C, LINEAR_ROW}};
    g->linears = (Linear<floatX> *)calloc_check((size_t)L * BLOCK_LINEARS, sizeof(Linear<floatX>), "linear layers");
    for (int l = 0; l < L; l++) {
        ParamView<const floatX> w = weights_of(g, l);
        ParamView<float> dw = grads_of(g, l);
        for (int k = 0; k < BLOCK_LINEARS; k++) {
            int tw = BLOCK_LINEAR_WEIGHT[k];
            const floatX *wk = g->gtp.active ? (const floatX *)NULL : w[tw]; // GTP: the chain's buffer (gtp_acquire)
            Linear<floatX> lin = {spec[k].in, spec[k].out, wk, w[spec[k].bias], dw[tw], spec[k].split, &g->tp};
            lin.name = BLOCK_LINEAR_NAMES[k];
            g->linears[l * BLOCK_LINEARS + k] = lin;
        }
    }
    int head_w = g->config.tied ? P_WTE : P_LMHEAD;
    Linear<floatX> head = {C, g->config.padded_vocab_size / g->tp.size, weights_of(g, MODEL_TENSORS)[head_w], NULL,
                           grads_of(g, MODEL_TENSORS)[head_w], LINEAR_COLUMN, &g->tp};
    head.name = "LM head";
    g->head = head;
}

// Whether layer l's linear layers multiply in FP8.
template <typename floatX> static bool fp8_layer(const GPT<floatX> *g, int l) {
    return g->fp8 && fp8_block(&g->fp8->recipe, l, g->config.num_layers);
}

// Whether layer l computes gelu(fch) again for its backward (gelu_recompute) rather than keeping it: past
// --keep-gelu-layers; in fp8 that is the FP8 blocks' FP8 copy, and the bf16 blocks (few, at the ends) keep theirs.
// SwiGLU's output is written again by its backward instead (Activations::h4), and an FP8 block keeps it transposed
// in FP8 (fp8_make).
template <typename floatX> static bool recomputes_gelu(const GPT<floatX> *g, int l) {
    return g->config.mlp == MLP_GELU && l >= g->keep_gelu && (!g->fp8 || fp8_layer(g, l));
}

// fp8: the bf16 blocks (the first and last --fp8-bf16-blocks), and layer l's place among them (a bf16 block's).
template <typename floatX> static int bf16_blocks(const GPT<floatX> *g) {
    return g->fp8 ? 2 * g->fp8->recipe.bf16_blocks : g->config.num_layers;
}
template <typename floatX> static int bf16_block_index(const GPT<floatX> *g, int l) {
    if (!g->fp8) { return l; }
    int K = g->fp8->recipe.bf16_blocks;
    return l < K ? l : l - (g->config.num_layers - 2 * K);
}

// Pointers to layer l's activations.
template <typename floatX> struct LayerActs {
    floatX *res_in, *res2, *res_out, *ln1, *ln2, *qkv, *atty, *fch, *h4;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
};

template <typename floatX> static LayerActs<floatX> layer_acts(const GPT<floatX> *g, int l) {
    const Activations<floatX> &a = g->acts;
    size_t N = (size_t)g->maxB * g->maxT, Ns = tp_local_tokens(&g->tp, (int)N), C = g->config.channels;
    size_t A = g->attn, M = g->mlp;
    LayerActs<floatX> x;
    x.res_in = a.res + l * Ns * C;
    x.res_out = a.res + (l + 1) * Ns * C;
    x.res2 = a.res2 + l * Ns * C;
    int slot = fp8_layer(g, l) ? bf16_blocks(g) : bf16_block_index(g, l); // the FP8 blocks share the last
    x.ln1 = a.ln1 + slot * N * C;
    x.ln2 = a.ln2 + slot * N * C;
    x.qkv = a.qkv + l * N * g->qkv;
    x.atty = a.atty + l * N * A;
    x.fch = a.fch + l * N * M;
    int keep = g->keep_gelu;
    if (g->config.mlp == MLP_SWIGLU) {
        x.h4 = fp8_layer(g, l) ? NULL : a.h4;
    } else if (g->fp8) {
        x.h4 = fp8_layer(g, l) ? NULL : a.h4 + slot * N * M;
    } else {
        x.h4 = l < keep ? a.h4 + l * N * M : (g->top_recompute - l) % 2 == 0 ? a.h4 + keep * N * M : a.h4_alt;
    }
    x.ln1_mean = a.ln1_stats + l * 2 * Ns;
    x.ln1_rstd = x.ln1_mean + Ns;
    x.ln2_mean = a.ln2_stats + l * 2 * Ns;
    x.ln2_rstd = x.ln2_mean + Ns;
    x.lse = a.lse + l * N * g->heads;
    return x;
}

template <typename T> static T *dev_alloc(size_t count, const char *what) {
    return (T *)cuda_alloc(count * sizeof(T), what);
}

// Bytes between slices that share an allocation: cudaMalloc's alignment, the most cuBLASLt is told a pointer has
// (pointer_alignment), so a GEMM on a slice runs the same algorithm as on a buffer of its own.
#define SLICE_ALIGN 256

template <typename floatX> static void activations_alloc(GPT<floatX> *g) {
    const GPTConfig *c = &g->config;
    size_t N = (size_t)g->maxB * g->maxT, C = c->channels, L = c->num_layers, tp = g->tp.size;
    size_t Ns = tp_local_tokens(&g->tp, (int)N), A = g->attn, M = g->mlp, F = g->ffn, NHl = g->heads;
    size_t Vl = c->padded_vocab_size / tp;
    Activations<floatX> &a = g->acts;
    a.res = dev_alloc<floatX>((L + 1) * Ns * C, "the residual stream");
    a.res2 = dev_alloc<floatX>(L * Ns * C, "the residual stream");
    size_t ln_slots = g->fp8 ? bf16_blocks(g) + 1 : L; // layer_acts
    a.ln1 = dev_alloc<floatX>(ln_slots * N * C, "LayerNorm outputs");
    a.ln2 = dev_alloc<floatX>(ln_slots * N * C, "LayerNorm outputs");
    a.ln1_stats = dev_alloc<float>(L * 2 * Ns, "LayerNorm statistics");
    a.ln2_stats = dev_alloc<float>(L * 2 * Ns, "LayerNorm statistics");
    a.qkv = dev_alloc<floatX>(L * N * g->qkv, "QKV activations");
    a.atty = dev_alloc<floatX>(L * N * A, "attention outputs");
    a.lse = dev_alloc<float>(L * N * NHl, "attention log-sum-exps");
    a.fch = dev_alloc<floatX>(L * N * M, "MLP activations");
    a.lnf = dev_alloc<floatX>(N * C, "final LayerNorm output");
    a.lnf_stats = dev_alloc<float>(2 * Ns, "LayerNorm statistics");
    a.losses = dev_alloc<float>(N, "per-token losses");
    size_t R = g->head_rows;
    if (tp > 1 || !classifier_row_fits<floatX>(c->padded_vocab_size)) {
        a.vocab_stats = dev_alloc<float>(tp * R * VOCAB_STATS, "classifier row statistics");
    }
    if (tp > 1) { g->row_gather = dev_alloc<floatX>(c->padded_vocab_size, "a gathered row of logits"); }
    a.proj = dev_alloc<floatX>(N * C, "projection scratch");
    a.dres = dev_alloc<floatX>(N * C, "residual gradient");
    a.dqkv = dev_alloc<floatX>(N * g->qkv, "QKV gradient");
    // The logits' buffer: a chunk of the LM head's logits (gpt_head); in the backward, which is done with them, d fch
    // and after it SwiGLU's output that every layer shares or the second buffer of the layers that recompute
    // gelu(fch); as large as the larger use. A forward's layers use those before its LM head writes the logits.
    int recomputing = 0; // layers that recompute gelu(fch): they alternate between two buffers (layer_acts)
    for (int l = 0; l < (int)L; l++) { recomputing += recomputes_gelu(g, l); }
    bool swiglu_out = c->mlp == MLP_SWIGLU && (!g->fp8 || bf16_blocks(g) > 0); // not FP8 blocks only (layer_acts)
    size_t elem = g->fp8 ? 1 : sizeof(floatX), bytes = N * M * elem;                // an FP8 recompute is FP8 bytes
    size_t after_dfch = (N * M * sizeof(floatX) + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    size_t second_bytes = swiglu_out ? N * F * sizeof(floatX) : recomputing > 1 ? bytes : 0;
    size_t logits_bytes = R * Vl * sizeof(floatX), backward_bytes = after_dfch + second_bytes;
    a.logits = (floatX *)cuda_alloc(logits_bytes > backward_bytes ? logits_bytes : backward_bytes,
                                    "logits (a chunk of rows) and the MLP gradient");
    a.dfch = a.logits;
    void *second = (char *)a.logits + after_dfch;
    if (c->mlp == MLP_SWIGLU) {
        a.h4 = swiglu_out ? (floatX *)second : (floatX *)NULL;
    } else {
        size_t h4_slots = g->fp8 ? bf16_blocks(g) : g->keep_gelu + (recomputing > 0);
        a.h4 = dev_alloc<floatX>(h4_slots * N * F, "MLP activation outputs");
        if (g->fp8 && recomputing > 0) { a.h4t[0] = (uint8_t *)cuda_alloc(bytes, "FP8 GELU outputs"); }
        if (recomputing > 1) {
            if (g->fp8) {
                a.h4t[1] = (uint8_t *)second;
            } else {
                a.h4_alt = (floatX *)second;
            }
        }
    }
    a.attn_workspace = cuda_alloc(attention_backward_workspace_bytes<floatX>(g->maxB, g->maxT, (int)NHl, g->kv_heads,
                                                                             config_head_size(c)),
                                  "attention backward workspace");
    size_t reduce = column_sum_scratch_floats(4 * c->channels);
    size_t ln = c->norm == NORM_RMSNORM ? layernorm_backward_scratch_floats<floatX, true>((int)Ns, c->channels)
                                        : layernorm_backward_scratch_floats<floatX>((int)Ns, c->channels);
    a.reduce_scratch = dev_alloc<float>(reduce > ln ? reduce : ln, "reduction scratch");
    a.sums_scratch = dev_alloc<float>(reduce, "fc bias reduction scratch");
    a.norm_scratch = dev_alloc<float>(g->norm_first[L + 1], "gradient norm scratch");
    a.norm_fold = dev_alloc<double>(norm_folds(g->norm_first[L + 1]), "gradient norm scratch");
    a.sum_squares = dev_alloc<double>(1, "squared gradient norm");
    a.scalars = dev_alloc<float>(3, "loss and norm");
}

// m: the rank whose part of the model the kernels run (under TP its MLP features).
template <typename floatX> static void gpt_check_shape(const GPTConfig *c, const Mesh *m) {
    if (c->channels % Packed<bf16>::N != 0) {
        fail("--width %d must be a multiple of %d on the GPU (16-byte vector loads)", c->channels, Packed<bf16>::N);
    }
    (void)layernorm_shape<floatX>(c->channels); // fails with the reason if LayerNorm cannot take this width
    // the kernels' own checks of the description, before any work
    if (c->mlp == MLP_SWIGLU) { swiglu_check<floatX>((int)tp_mlp_features(m, c).count, 0); }
    if (c->pos == POS_ROPE) { rope_check<floatX>(0, 0, config_head_size(c), 0); }
}

// RoPE: the cos and sin tables of positions 0 .. T-1 (llmc/rope.h, the CPU build's numbers), made once and uploaded.
template <typename floatX> static void rope_upload(GPT<floatX> *g, int T) {
    size_t n = (size_t)T * (config_head_size(&g->config) / 2);
    float *cos_table = (float *)malloc_check(2 * n * sizeof(float), "RoPE tables"), *sin_table = cos_table + n;
    rope_tables(&g->config, T, cos_table, sin_table);
    g->rope_cos = dev_alloc<float>(2 * n, "RoPE tables");
    g->rope_sin = g->rope_cos + n;
    cudaCheck(cudaMemcpyAsync(g->rope_cos, cos_table, 2 * n * sizeof(float), cudaMemcpyHostToDevice, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream)); // the host tables are freed next
    free(cos_table);
}

// The gradient-norm groups (dp_plan.h's parameter groups: layer l's 12 tensors; then wte, wpe, lnf), each the part
// this rank owns, and where each one's partial sums go. TP ranks hold the same replicated tensors, GTP ranks the same
// whole ones: only TP rank 0, GTP rank 0 counts them (norm_counts_tensor: the sums over the groups then count every
// parameter once).
template <typename floatX> static void norm_groups_make(GPT<floatX> *g) {
    int L = g->config.num_layers;
    g->norm_groups = (NormGroup *)calloc_check(L + 1, sizeof(NormGroup), "gradient norm groups");
    g->norm_first = (int *)calloc_check(L + 2, sizeof(int), "gradient norm groups");
    for (int k = 0; k <= L; k++) {
        ParamGroup own = dp_owned_group(&g->dp, k);
        for (int i = 0; i < own.count; i++) {
            if (!norm_counts_tensor(&g->mesh, own.tensor[i])) { continue; }
            norm_group_add(&g->norm_groups[k], g->grads + own.span[i].begin, own.span[i].count);
        }
    }
    for (int k = 0; k <= L; k++) { g->norm_first[k + 1] = g->norm_first[k] + norm_group_chunks(&g->norm_groups[k]); }
}

/*
 * The rest group's AdamW in two launches (llmc/adamw.cuh's AdamWLate) under the update in backward. The embedding's
 * backward, the backward's last kernel, writes only the wte rows of the micro-batch's tokens (and all of wpe); every
 * other gradient of the group (the LM head's weight, the other rows of a tied wte, zero rows of an untied one, the
 * final norm's) is final once the head's and the final norm's backward have run. So AdamW takes those chunks there,
 * beside the blocks' backward, and after the embedding's backward only the chunks its rows meet (~6% of Llama-3.2-1B's
 * 128256 x 2048 wte at B 4 x T 2048), where the next forward waited for the whole group (~30 bytes a parameter: 2.6
 * ms a step on an H100). It needs the group's gradients to be this rank's own at that point: one data rank (no sum
 * over ranks follows), no GTP (whose reduce-scatter follows the embedding's backward) and no SP (whose TP sum of the
 * final norm's gradient does).
 */
template <typename floatX> static bool rest_can_split(const GPT<floatX> *g) {
    return g->sched.update_in_backward && g->mesh.data_size == 1 && !g->gtp.active && !g->tp.sp;
}

template <typename floatX> static void rest_late_alloc(GPT<floatX> *g) {
    AdamWLate *l = &g->rest_late;
    ParamGroup own = dp_owned_group(&g->dp, g->config.num_layers);
    for (int i = 0; i < own.count; i++) { l->chunks += adamw_span_chunks(own.span[i].count); }
    l->flag = dev_alloc<uint8_t>(l->chunks, "the rest group's late AdamW chunks");
    l->list = dev_alloc<int>(l->chunks, "the rest group's late AdamW chunks");
    cudaCheck(cudaMallocHost(&l->staging, l->chunks * sizeof(int)));
}

// The late launch's chunks for the micro-batch whose buckets the host just built (this rank's wte rows of its
// tokens), copied and flagged on the compute stream ahead of the backward (the caller keeps the staging until the
// loss, which follows the copy, has been read).
template <typename floatX> static void rest_late_upload(GPT<floatX> *g) {
    AdamWLate *l = &g->rest_late;
    ParamGroup own = dp_owned_group(&g->dp, g->config.num_layers);
    l->count = 0;
    for (int i = 0, first = 0; i < own.count; i++) {
        int end = first + adamw_span_chunks(own.span[i].count);
        if (own.tensor[i] == P_WTE) {
            adamw_late_rows(l, first, g->buckets.unique, g->buckets.num_unique, (size_t)g->config.channels);
        } else if (own.tensor[i] == P_WPE) {
            adamw_late_span(l, first, end);
        }
        first = end;
    }
    adamw_late_upload(l, g_cuda.stream);
}

template <typename floatX>
static GPT<floatX> *gpt_create(const GPTConfig *config, Precision precision, const Fp8Recipe *fp8, const Options *o,
                               const Mesh *mesh, int B, int T) {
    gpt_check_shape<floatX>(config, mesh);
    if (T > config->max_seq_len) { fail("sequence length %d exceeds the model's %d", T, config->max_seq_len); }
    GPT<floatX> *g = (GPT<floatX> *)calloc_check(1, sizeof(GPT<floatX>), "GPU model");
    g->config = *config;
    g->precision = precision;
    g->maxB = B;
    g->maxT = T;
    g->keep_gelu = o->keep_gelu_layers < config->num_layers ? o->keep_gelu_layers : config->num_layers;
    int head_rows = head_chunk_rows_max((size_t)o->logits_mib * HEAD_CHUNK_MIB, config->padded_vocab_size,
                                        sizeof(floatX));
    g->head_rows = head_rows < B * T ? head_rows : B * T;
    g->mesh = *mesh;
    tp_init(&g->tp, mesh, o->sequence_parallel);
    RingTransport transport = strcmp(o->sp_transport, "nccl") == 0 ? RING_NCCL : RING_CE;
    tp_ring_connect(&g->tp, o->sp_overlap, transport, (size_t)(B * T / mesh->tp) * config->channels * sizeof(floatX),
                    fp8 && fp8->scaling == FP8_DELAYED && o->sp_fp8_codes, o->sp_ring_pieces, mesh->rank == 0);
    Span vocab = tp_vocab_rows(mesh, config);
    g->emb = {(int)vocab.begin, (int)vocab.count, config->pos == POS_LEARNED && mesh->tp_rank == 0};
    g->heads = (int)tp_heads(mesh, config).count;
    g->kv_heads = (int)tp_kv_heads(mesh, config).count;
    g->attn = (int)tp_attention_channels(mesh, config).count;
    g->ffn = (int)tp_mlp_features(mesh, config).count;
    size_t rows, cols; // the fused projections' outputs: this rank's rows of qkv and fc
    param_tp_shape(config, mesh, P_QKVW, &rows, &cols);
    g->qkv = (int)rows;
    param_tp_shape(config, mesh, P_FCW, &rows, &cols);
    g->mlp = (int)rows;
    param_layout_local(config, mesh, &g->tp_layout);
    param_layout_gtp(config, mesh, &g->layout);
    size_t gathered = 0;
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        GtpShape sh = g->gtp_shapes[k] = gtp_shape(config, mesh, BLOCK_LINEAR_WEIGHT[k]);
        gathered = sh.padded_rows * sh.cols > gathered ? sh.padded_rows * sh.cols : gathered;
    }
    gtp_init(&g->gtp, mesh, o->gtp_materialize, o->gtp_prefetch, gtp_buffer_bytes(config, mesh, fp8, sizeof(floatX)),
             gathered);
    dp_init(&g->dp, mesh, config, &g->layout, o->zero);
    g->shards = {&g->config, &g->mesh, &g->tp, &g->gtp, &g->dp, g->layout.total, g->tp_layout.total};
    if (fp8) {
        g->fp8 = (Fp8Device *)calloc_check(1, sizeof(Fp8Device), "FP8 state");
        fp8_device_init(g->fp8, fp8, config->num_layers);
    }
    // E = P but under ZeRO-1, where the flat buffers are padded to equal slices; M: the moments this rank keeps.
    size_t P = g->layout.total, E = dp_buffer_elems(&g->dp), M = dp_moment_elems(&g->dp);
    size_t N = (size_t)B * T, V = config->vocab_size;
    cudaStream_t s = g_cuda.stream;

    g->params = dev_alloc<float>(E, "parameters");
    g->grads = dev_alloc<float>(E, "gradients");
    g->m = dev_alloc<float>(M, "AdamW first moments");
    g->v = dev_alloc<float>(M, "AdamW second moments");
    // the GEMMs read the masters themselves in fp32; a copy in bf16, and in fp8 (whose FP8 weights live in the room
    // of the block weights' copy: fp8_make) in any activation type
    g->weights = std::is_same<floatX, float>::value && !fp8 ? (floatX *)g->params
                                                           : dev_alloc<floatX>(E, "the weights the GEMMs read");
    g->grads_zero = 1;
    cudaCheck(cudaMemsetAsync(g->m, 0, M * sizeof(float), s));
    cudaCheck(cudaMemsetAsync(g->v, 0, M * sizeof(float), s));
    if (E > P) { // ZeRO padding, gathered with the slices and never written by backward or AdamW: zero once
        cudaCheck(cudaMemsetAsync(g->params + P, 0, (E - P) * sizeof(float), s));
        cudaCheck(cudaMemsetAsync(g->grads + P, 0, (E - P) * sizeof(float), s));
    }
    param_init_device(g->params, config, mesh, &g->layout, (uint64_t)o->seed, s);
    if ((void *)g->weights != (void *)g->params) { convert_from_float(g->weights, g->params, E, s); }

    if (config->pos == POS_ROPE) { rope_upload(g, T); }
    linears_make(g);
    norm_groups_make(g);
    g->top_recompute = -1;
    for (int l = 0; l < config->num_layers; l++) { g->top_recompute = recomputes_gelu(g, l) ? l : g->top_recompute; }
    activations_alloc(g);
    if (g->fp8) { fp8_make(g); }
    g->d_tokens = dev_alloc<int>(2 * N, "tokens");
    g->d_buckets = dev_alloc<int>(3 * N + 1, "token buckets");
    g->d_spans = dev_alloc<int>(2 * N, "evaluation row spans");
    g->d_row_sums = dev_alloc<float>(N, "evaluation row sums");
    cudaCheck(cudaMallocHost(&g->host.tokens, 2 * N * sizeof(int)));
    cudaCheck(cudaMallocHost(&g->host.buckets, (3 * N + 1) * sizeof(int)));
    cudaCheck(cudaMallocHost(&g->host.scalars, 3 * sizeof(float)));
    cudaCheck(cudaMallocHost(&g->host.spans, 2 * N * sizeof(int)));
    cudaCheck(cudaMallocHost(&g->host.row_sums, N * sizeof(float)));
    g->host.bucket_count = (int *)malloc_check(V * sizeof(int), "token counts");
    step_schedule_init(&g->sched, config->num_layers, o->update_in_backward, o->update_after_layers);
    if (rest_can_split(g)) { rest_late_alloc(g); }
    snprintf(g->device_name, sizeof(g->device_name), "%s", g_cuda.props.name);
    cudaCheck(cudaStreamSynchronize(s));
    // the gathers' transport, once the weights the peers read are written (its set-up ends with a barrier)
    gtp_ce_connect(&g->gtp, o->gtp_transport, g->weights, E * sizeof(floatX), config->num_layers, mesh->rank == 0);
    return g;
}

// ----------------------------------------------------------------------------------------------------------------
// FP8

// Where layer l's FP8 weight k keeps its E4M3 codes, which AdamW or a cast writes: the room of its compute-precision
// copy, which no GEMM reads (under GTP this rank's shard of it, where the gathers take the codes from).
template <typename floatX> static uint8_t *fp8_codes(const GPT<floatX> *g, int l, int k) {
    return (uint8_t *)param_view(g, g->weights, l)[BLOCK_LINEAR_WEIGHT[k]];
}

/*
 * Each FP8 block's Fp8Linear (llmc/matmul.cuh): the weights' FP8 copies in the room of their compute-precision copy
 * (2 or more bytes an element: W as fp8_codes, then W transposed; under GTP the chain's buffer instead, set by
 * gtp_acquire for the GEMMs that read it); the inputs' transposed copies, kept per layer for the weight gradients
 * (the fc projection's in the layers that keep gelu(fch); the others recompute it into the alternating h4t buffers);
 * the row-major scratch of the inputs and output gradients every layer shares (the fc projection's inputs and fc's
 * output gradient in ones of their own: under SP over the peer ring fc's forward runs every chunk before the
 * projection reads any, and the projection's input gradient every chunk before fc's reads any, and the next chunk's
 * codes would land on those the activation's cast left); and a transposed output gradient per kind of layer (it lives
 * from the input gradient to the weight gradient, and the backward interleaves a block's two pairs of layers). fc and
 * the fc projection are coupled through the MLP's activation (Fp8Linear::act_consumer): fc's forward casts gelu(fch)
 * or swiglu(fch) as the fc projection's input, whose input-gradient step casts fc's output gradient through the
 * activation's backward. SwiGLU's output is kept transposed in FP8 in every layer
 * (N F bytes a layer, half of what its bf16 copy took): recasting it in the backward, as the GELU layers past
 * --keep-gelu-layers do, would read fch again (4 bytes an element for every byte written) beside each layer's
 * backward, and fp8's bar is speed.
 */
template <typename floatX> static void fp8_make(GPT<floatX> *g) {
    int L = g->config.num_layers, M = g->mlp;
    size_t N = (size_t)g->maxB * g->maxT;
    int in[BLOCK_LINEARS], out[BLOCK_LINEARS], widest = 0; // every layer's shape: layer 0's
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        in[k] = block_linear(g, 0, k).in;
        out[k] = block_linear(g, 0, k).out;
        widest = in[k] > widest ? in[k] : widest;
        widest = out[k] > widest ? out[k] : widest;
    }
    for (int i = 0; i < 2; i++) {
        g->fp8_partials[i] = dev_alloc<float>(BLOCK_LINEARS * g->fp8->amax_blocks, "FP8 amax scratch");
    }
    uint8_t *x = (uint8_t *)cuda_alloc(N * widest, "FP8 inputs"), *dy = (uint8_t *)cuda_alloc(N * widest, "FP8 grads");
    uint8_t *x_act = (uint8_t *)cuda_alloc(N * in[LIN_FCPROJ], "FP8 inputs of the fc projections");
    uint8_t *dy_act = (uint8_t *)cuda_alloc(N * out[LIN_FC], "FP8 output gradients of fc");
    uint8_t *dy_t[BLOCK_LINEARS];
    for (int k = 0; k < BLOCK_LINEARS; k++) { dy_t[k] = (uint8_t *)cuda_alloc(N * out[k], "FP8 output gradients"); }
    float *dbias = g->config.bias ? dev_alloc<float>(fp8_col_sums_floats((int)N, M), "fc bias gradient partial sums")
                                  : (float *)NULL;
    g->fp8_linears = (Fp8Linear *)calloc_check((size_t)L * BLOCK_LINEARS, sizeof(Fp8Linear), "FP8 linear layers");
    for (int l = 0; l < L; l++) {
        if (!fp8_layer(g, l)) { continue; }
        for (int k = 0; k < BLOCK_LINEARS; k++) {
            Fp8Linear *q = &g->fp8_linears[l * BLOCK_LINEARS + k];
            Linear<floatX> *lin = &g->linears[l * BLOCK_LINEARS + k];
            q->dev = g->fp8;
            q->layer = l;
            q->linear = k;
            q->w = g->gtp.active ? NULL : fp8_codes(g, l, k);
            q->w_t = q->w ? q->w + (size_t)lin->out * lin->in : NULL;
            q->x = k == LIN_FCPROJ ? x_act : x;
            q->dy = k == LIN_FC ? dy_act : dy;
            q->dy_t = dy_t[k];
            q->partials = g->fp8_partials[0];
            q->keeps_input = k != LIN_FCPROJ || !recomputes_gelu(g, l);
            q->x_t = q->keeps_input ? (uint8_t *)cuda_alloc(N * in[k], "FP8 inputs")
                                    : g->acts.h4t[(g->top_recompute - l) % 2];
            lin->fp8 = q;
        }
        Fp8Linear *fc = &g->fp8_linears[l * BLOCK_LINEARS + LIN_FC];
        Fp8Linear *fcproj = &g->fp8_linears[l * BLOCK_LINEARS + LIN_FCPROJ];
        fc->act_consumer = fcproj;
        fc->act = g->config.mlp;
        fc->grad_from_consumer = 1;
        fc->dbias_partials = dbias;
        fcproj->act_producer = fc;
        fcproj->input_from_producer = 1;
    }
}

/*
 * Layer l's FP8 weights from their fp32 masters (after their update, or once the masters were set), on stream s with
 * its amax scratch (fp8_partials). Under GTP a rank casts its shard (rows as gtp_shapes says: the layer's own
 * without GTP), codes only: the transposed copy is made after the gather (gtp_issue). A scale from the weights' own
 * amaxes (current scaling, and delayed scaling before the first step) must then be the whole weight's: the shards'
 * amax passes are maxed over the group (as the bits of non-negative floats: exact, as the casts' atomics take them)
 * before the casts. With one rank the casts see the plain path's maxima, so they write its bytes.
 */
template <typename floatX> static void fp8_cast_layer_weights(GPT<floatX> *g, int l, float *partials, cudaStream_t s) {
    const Fp8Device *d = g->fp8;
    bool own_amax = fp8_scales_current(d);
    auto master = [&](int k) { return Fp8Plain<float>{masters_of(g, l)[BLOCK_LINEAR_WEIGHT[k]]}; };
    for (int k = 0; k < BLOCK_LINEARS && own_amax; k++) {
        const GtpShape &sh = g->gtp_shapes[k];
        fp8_amax_pass(d, master(k), sh.shard_rows * sh.cols, partials + k * d->amax_blocks, s);
    }
    if (own_amax && g->gtp.active) {
        char what[TRACKED_WHAT_LEN];
        snprintf(what, sizeof(what), "the GTP all-reduce of layer %d's FP8 weight amaxes", l);
        cudaCheck(cudaStreamWaitEvent(s, gtp_all_reduce(&g->gtp, partials, (size_t)BLOCK_LINEARS * d->amax_blocks,
                                                        ncclUint32, ncclMax, s, what)->event, 0));
    }
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        const Linear<floatX> &lin = block_linear(g, l, k);
        const GtpShape &sh = g->gtp_shapes[k];
        Fp8CastOut o = {fp8_codes(g, l, k), g->gtp.active ? NULL : lin.fp8->w_t, lin.out, 0, NULL};
        fp8_cast(d, fp8_tensor_of(lin, FP8_WEIGHT), master(k), (int)sh.shard_rows, lin.in, o, true,
                 own_amax ? FP8_SCALE_PARTIALS : FP8_SCALE_RECIPE, partials + k * d->amax_blocks, s);
    }
}

// ----------------------------------------------------------------------------------------------------------------
// GTP: the prefetch chain (llmc/gtp_plan.h) over the block linear layers' weights (llmc/gtp.cuh)

/*
 * A pass starts its chain (gtp_pass_start) and then brackets each block linear layer's GEMMs that read the weight
 * with gtp_acquire (before the first: wait for its gather, point the Linear at its buffer) and gtp_done (after the
 * last: release the buffer, issue the gather that goes into it next). A forward's gathers of layer l wait for its
 * AdamW group when an update is pending: the first gather of a step is the only one the compute stream may wait
 * for. An FP8 layer's weights travel as E4M3 codes (fp8_codes: written by AdamW or a cast with the scale every rank
 * holds), and in the backward, whose GEMM reads the weight transposed, the AG stream transposes the gathered codes
 * into the same buffer (llmc/gtp_plan.h: gtp_transposed_at). Nothing happens without GTP.
 */
template <typename floatX> static void gtp_issue(GPT<floatX> *g, int i) {
    GtpUse u = gtp_chain_use(g->config.num_layers, g->gtp.pass, i);
    const GtpShape &sh = g->gtp_shapes[u.linear];
    const void *shard = weights_of(g, u.layer)[BLOCK_LINEAR_WEIGHT[u.linear]]; // its copy, or the codes in its room
    size_t bytes = gtp_shard_bytes(&g->config, g->fp8 ? &g->fp8->recipe : NULL, u.layer, &sh, sizeof(floatX));
    GtpTransposed t = {(int)sh.rows, (int)sh.cols, gtp_transposed_at(&sh)};
    bool transpose = fp8_layer(g, u.layer) && g->gtp.pass == GTP_BACKWARD;
    cudaEvent_t after = g->gtp.pass == GTP_FORWARD ? updated_if_pending(&g->sched, u.layer) : (cudaEvent_t)NULL;
    char what[TRACKED_WHAT_LEN];
    snprintf(what, sizeof(what), "the GTP all-gather of layer %d's %s", u.layer,
             PARAM_NAMES[BLOCK_LINEAR_WEIGHT[u.linear]]);
    gtp_gather(&g->gtp, gtp_chain_slot(&g->gtp.chain, i), u.layer, shard, bytes, transpose ? &t : NULL, after, what);
}

template <typename floatX> static void gtp_pass_start(GPT<floatX> *g, GtpPass pass) {
    if (!g->gtp.active) { return; }
    g->gtp.pass = pass;
    int n = gtp_chain_start(&g->gtp.chain, gtp_chain_uses(g->config.num_layers), g->gtp.depth);
    for (int i = 0; i < n; i++) { gtp_issue(g, i); }
}

template <typename floatX> static void gtp_acquire(GPT<floatX> *g, int l, int k) {
    if (!g->gtp.active) { return; }
    int i = gtp_chain_index(g->config.num_layers, g->gtp.pass, l, k);
    int first = i >= g->gtp.chain.acquired;
    int b = gtp_chain_acquire(&g->gtp.chain, i);
    if (first) { gtp_wait_gathered(&g->gtp, b, g_cuda.stream); }
    Linear<floatX> &lin = g->linears[l * BLOCK_LINEARS + k];
    uint8_t *buf = g->gtp.slot[b];
    if (lin.fp8) { // the codes, which the forward reads, and in the backward their transpose, which it reads instead
        lin.fp8->w = buf;
        lin.fp8->w_t = g->gtp.pass == GTP_BACKWARD ? buf + gtp_transposed_at(&g->gtp_shapes[k]) : NULL;
    } else {
        lin.w = (const floatX *)buf;
    }
}

template <typename floatX> static void gtp_done(GPT<floatX> *g, int l, int k) {
    if (!g->gtp.active) { return; }
    int i = gtp_chain_index(g->config.num_layers, g->gtp.pass, l, k);
    gtp_release(&g->gtp, gtp_chain_slot(&g->gtp.chain, i), g_cuda.stream);
    Linear<floatX> &lin = g->linears[l * BLOCK_LINEARS + k]; // a GEMM queued past the release would read another weight
    lin.w = NULL;
    if (lin.fp8) { lin.fp8->w = lin.fp8->w_t = NULL; }
    int next = gtp_chain_release(&g->gtp.chain, i);
    if (next >= 0) { gtp_issue(g, next); }
}

// ----------------------------------------------------------------------------------------------------------------
// forward

// Copies one micro-batch's tokens (targets may be NULL) to the GPU, checking they are in the vocabulary.
template <typename floatX> static void gpt_load_tokens(GPT<floatX> *g, const int *inputs, const int *targets, int N) {
    int V = g->config.vocab_size;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V))) {
            fail("token at position %d is outside the vocabulary [0, %d); the data shard is corrupt", i, V);
        }
    }
    // The previous micro-step's copies finished before its loss was read (stream order), so staging is free.
    memcpy(g->host.tokens, inputs, N * sizeof(int));
    if (targets) { memcpy(g->host.tokens + N, targets, N * sizeof(int)); }
    cudaCheck(cudaMemcpyAsync(g->d_tokens, g->host.tokens, (targets ? 2 : 1) * N * sizeof(int),
                              cudaMemcpyHostToDevice, g_cuda.stream));
}

// The forward's chunks: at most one where every FP8 cast needs its whole tensor's amax first (current scaling, and
// delayed scaling's first step: the kept input codes of several chunks would have several scales under one scale_inv).
template <typename floatX> static int gpt_most_chunks(const GPT<floatX> *g) {
    return g->fp8 && fp8_scales_current(g->fp8) ? 1 : TP_SEQUENCE_CHUNKS;
}
template <typename floatX> static ForwardChunk gpt_chunk(const GPT<floatX> *g, int B, int T, int k) {
    return forward_chunk(&g->mesh, g->tp.sp, B, T, gpt_most_chunks(g), k);
}

// The model's norm (config.h's NormKind: LayerNorm, or RMSNorm with the description's epsilon, which has no mean and
// no bias), forward and backward, as layernorm.cuh's kernels take them.
template <typename floatX>
static void norm_forward_of(const GPT<floatX> *g, floatX *out, float *mean, float *rstd, floatX *resid, const floatX *x,
                            const floatX *dx, const floatX *w, const floatX *b, int rows, cudaStream_t s) {
    int C = g->config.channels;
    if (g->config.norm == NORM_RMSNORM) {
        rmsnorm_forward(out, rstd, resid, x, dx, w, rows, C, (float)g->config.norm_eps, s);
    } else {
        layernorm_forward(out, mean, rstd, resid, x, dx, w, b, rows, C, s);
    }
}
template <typename floatX>
static void norm_backward_of(const GPT<floatX> *g, floatX *dinp, float *dw, float *db, float *dsum, const floatX *dout,
                             const floatX *inp, const floatX *w, const float *mean, const float *rstd, int rows,
                             int accumulate, cudaStream_t s) {
    int C = g->config.channels;
    float *scratch = g->acts.reduce_scratch;
    if (g->config.norm == NORM_RMSNORM) {
        rmsnorm_backward(dinp, dw, dsum, scratch, dout, inp, w, rstd, rows, C, accumulate, s);
    } else {
        layernorm_backward(dinp, dw, db, dsum, scratch, dout, inp, w, mean, rstd, rows, C, accumulate, s);
    }
}

// Once chunk f's last collective is in: the fused residual add + norm of the chunk, out and dx at its norm rows, the
// residual stream (resid, x) and the statistics at its residual-stream rows; resid and dx may be NULL
// (layernorm_forward). Under SP out holds this rank's tokens; the layer that reads it gathers them (linear_forward, or
// gpt_head for the final norm).
template <typename floatX>
static void chunk_layernorm(GPT<floatX> *g, const ForwardChunk &f, floatX *out, float *mean, float *rstd,
                            floatX *resid, const floatX *x, const floatX *dx, const floatX *w, const floatX *b) {
    size_t C = g->config.channels, lr = (size_t)f.ln_row * C, rr = (size_t)f.res_row * C;
    cudaStream_t s = g_cuda.stream;
    tp_chunk_wait(&g->tp, s, f.k);
    norm_forward_of(g, out + lr, mean + f.res_row, rstd + f.res_row, resid ? resid + rr : NULL, x + rr,
                    dx ? dx + lr : NULL, w, b, f.ln_rows, s);
}

// The input embedding of chunk f's tokens into the residual stream (acts.res[0]). Under TP each rank embeds the
// tokens of its vocabulary rows (llmc/encoder.cuh), and the group sums them as the chunk's collective: all-reduced,
// or under SP reduce-scattered from the projection scratch onto each rank's tokens.
template <typename floatX> static void gpt_embed(GPT<floatX> *g, int T, const ForwardChunk &f) {
    const Activations<floatX> &a = g->acts;
    int C = g->config.channels;
    ParamView<const floatX> w = weights_of(g, MODEL_TENSORS);
    floatX *dst = g->tp.sp ? a.proj : a.res;
    encoder_forward(dst + (size_t)f.row * C, g->d_tokens + f.row, w[P_WTE], w[P_WPE], f.rows / T, T, C, g->emb,
                    g_cuda.stream);
    tp_chunk_sum(&g->tp, dst, g->tp.sp ? a.res : (floatX *)NULL, C, f, g_cuda.stream,
                 "the tensor-parallel sum of the embeddings");
}

// Layer l's linear layer k on forward chunk f of K (linear_forward): under GTP its weight is materialized before the
// first chunk and released after the last.
template <typename floatX, typename MakeInput = NoRows>
static void block_linear_forward(GPT<floatX> *g, int l, int k, floatX *out, floatX *inp, floatX *gelu_aux,
                                 const ForwardChunk &f, int K, MakeInput make_input = MakeInput()) {
    if (f.k == 0) { gtp_acquire(g, l, k); }
    linear_forward(block_linear(g, l, k), out, inp, gelu_aux, f, g_cuda.stream, make_input);
    if (f.k == K - 1) { gtp_done(g, l, k); }
}

// The blocks' forward over B x T tokens (already on the GPU), up to the last block's output, whose final norm the LM
// head takes (gpt_head). The micro-batch runs in chunks of whole sequences (llmc/forward_chunks.h); each half-block
// (attention, MLP) runs chunk after chunk and begins, once the chunk's last TP sum is in, with the residual add of
// the half-block below fused into its LayerNorm. A chunk's row-parallel sum (linear_forward) then runs beside the
// other chunks' work.
template <typename floatX> static void gpt_forward(GPT<floatX> *g, int B, int T) {
    const GPTConfig *c = &g->config;
    int L = c->num_layers, A = g->attn, M = g->mlp;
    int K = forward_chunks(&g->mesh, g->tp.sp, B, gpt_most_chunks(g));
    int HS = config_head_size(c), NHl = g->heads, KVl = g->kv_heads, QKV = g->qkv, F = g->ffn;
    bool swiglu = c->mlp == MLP_SWIGLU;
    const Activations<floatX> &a = g->acts;
    cudaStream_t s = g_cuda.stream;

    if (g->fp8 && g->fp8->weights_stale) { // the masters were set from outside (or a tuning pass forgot the casts)
        for (int l = 0; l < L; l++) {
            if (!fp8_layer(g, l)) { continue; }
            gtp_before_write(&g->gtp, l, s); // the peers' gathers read the codes in place
            fp8_cast_layer_weights(g, l, g->fp8_partials[0], s);
            gtp_published(&g->gtp, l, s);
        }
        g->fp8->weights_stale = 0;
        if (g->gtp.active) { gtp_after_compute(&g->gtp, s); } // the gathers take the codes just cast
    }
    updated_wait(&g->sched, L);
    gtp_pass_start(g, GTP_FORWARD);
    for (int k = 0; k < K; k++) { gpt_embed(g, T, gpt_chunk(g, B, T, k)); }
    std::vector<char> attended((size_t)B); // this layer's sequences whose attention is made
    for (int l = 0; l < L; l++) {
        LayerActs<floatX> x = layer_acts(g, l), below = layer_acts(g, l > 0 ? l - 1 : 0);
        ParamView<const floatX> w = weights_of(g, l);
        updated_wait(&g->sched, l);
        std::fill(attended.begin(), attended.end(), 0);
        // the attention of the sequences rows [r0, r1) touch, those not made yet, where the projection needs them
        auto attention_rows = [&](int r0, int r1) {
            for (int q = r0 / T, end = (r1 + T - 1) / T; q < end;) {
                if (attended[q]) {
                    q++;
                    continue;
                }
                int from = q;
                for (; q < end && !attended[q]; q++) { attended[q] = 1; }
                size_t r = (size_t)from * T; // lse is (B, NH/TP, T): sequence from's starts at r NH/TP
                attention_forward(x.atty + r * A, x.lse + r * NHl, x.qkv + r * QKV, q - from, T, NHl, KVl, HS, s);
            }
        };
        for (int k = 0; k < K; k++) {
            ForwardChunk f = gpt_chunk(g, B, T, k);
            size_t r = f.row; // lse is (B, NH/TP, T): the chunk's sequences start at r NH/TP
            // block l - 1's output = its attention output + its MLP's (in proj); none below the first block
            chunk_layernorm(g, f, x.ln1, x.ln1_mean, x.ln1_rstd, l > 0 ? x.res_in : (floatX *)NULL,
                            l > 0 ? below.res2 : x.res_in, l > 0 ? a.proj : (const floatX *)NULL,
                            w[P_LN1W], w[P_LN1B]);
            block_linear_forward(g, l, LIN_QKV, x.qkv, x.ln1, (floatX *)NULL, f, K);
            if (g->rope_cos) { // q and k rotated in place: attention and its backward read them so
                rope_forward(x.qkv + r * QKV, g->rope_cos, g->rope_sin, g->maxT, f.rows / T, T, NHl, KVl, HS, s);
            }
            // over SP's ring, the attention as the projection takes its rows: the sequences of the chunk its
            // reduce-scatter sends first, then the rest beside that transfer; else the chunk's before the projection
            // (and under GTP before its wait for the gathered weight)
            const Linear<floatX> &attproj = block_linear(g, l, LIN_ATTPROJ);
            if (!linear_reduce_scatters_by_rows(attproj)) { attention_rows(f.row, f.row + f.rows); }
            block_linear_forward(g, l, LIN_ATTPROJ, a.proj, x.atty, (floatX *)NULL, f, K, attention_rows);
        }
        for (int k = 0; k < K; k++) {
            ForwardChunk f = gpt_chunk(g, B, T, k);
            chunk_layernorm(g, f, x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, x.res_in, a.proj, w[P_LN2W], w[P_LN2B]);
            // GELU is fc's epilogue (fch kept as its aux); SwiGLU a pass of its own over [gate | up] into the shared
            // h4, but in an FP8 block, whose fc casts either activation as the fc projection's input (x.h4 NULL)
            block_linear_forward(g, l, LIN_FC, swiglu ? x.fch : x.h4, x.ln2, swiglu ? (floatX *)NULL : x.fch, f, K);
            if (swiglu && x.h4) { swiglu_forward(x.h4 + (size_t)f.row * F, x.fch + (size_t)f.row * M, f.rows, F, s); }
            block_linear_forward(g, l, LIN_FCPROJ, a.proj, x.h4, (floatX *)NULL, f, K);
        }
    }
    g->sched.update_pending = 0; // every group was waited for
}

/*
 * The final norm, then the LM head a chunk of whole rows at a time (llmc/head_chunks.h), so that the logits of one
 * chunk exist at once, never the micro-batch's (N, Vp). Chunk c: its logits = lnf[c] W^T (W: wte or lmhead, this
 * rank's vocabulary rows under TP) into acts.logits; with HEAD_LOSS the classifier's per-token losses; with
 * HEAD_TRAIN also their gradient dloss (softmax - onehot) in place, and the head's backward for those rows right
 * there: dlnf[c] = dlogits W into acts.proj and dW += dlogits^T lnf[c] (written, beta 0, on the first chunk of an
 * optimizer step's first micro-step). The chunks run in a fixed order, so dW sums alike every time. Under TP each
 * rank holds its columns of a chunk, the classifier exchanges the chunk's row statistics (llmc/classifier.cuh), and
 * dlnf's sum over the group, which needs every row, starts before the last chunk's dW, which runs beside it
 * (gpt_backward joins it). The final norm runs forward chunk after forward chunk (llmc/forward_chunks.h: whole
 * sequences; head chunks end anywhere), and a chunk's logits GEMM takes its rows as their norm is done, so under TP
 * the logits of the first forward chunk's rows are made beside the last forward chunk's sum. HEAD_NORM: the final
 * norm only (op_logits_at makes the chunk it needs).
 */
typedef enum { HEAD_NORM, HEAD_LOSS, HEAD_TRAIN } HeadWork;

// Rows [r0, r1) of chunk c's logits into their rows of acts.logits.
template <typename floatX> static void head_logits(GPT<floatX> *g, HeadChunk c, int r0, int r1) {
    const floatX *x = g->acts.lnf + (size_t)r0 * g->config.channels;
    floatX *out = g->acts.logits + (size_t)(r0 - c.row) * g->head.out;
    linear_rows_forward(g->head, (const floatX *)NULL, out, x, 0, r1 - r0, r1 - r0, (floatX *)NULL, g_cuda.stream);
}

// Chunk c of a pass of N rows, its logits made, whose targets are the second half of d_tokens: the classifier, and
// in training the head's backward.
template <typename floatX> static void head_chunk_finish(GPT<floatX> *g, HeadChunk c, int N, HeadWork work,
                                                         float dloss) {
    const Activations<floatX> &a = g->acts;
    size_t C = g->config.channels;
    cudaStream_t s = g_cuda.stream;
    fused_classifier(a.logits, a.losses + c.row, g->d_tokens + N + c.row, dloss, c.rows, g->config.vocab_size,
                     g->config.padded_vocab_size, work == HEAD_TRAIN, &g->tp, a.vocab_stats, s);
    if (work != HEAD_TRAIN) { return; }
    linear_dgrad(g->head, a.proj + c.row * C, a.logits, (const floatX *)NULL, c.rows, s);
    if (c.row + c.rows == N) { linear_backward_input_sum(g->head, a.proj, N, s); } // every row's dlnf is in
    linear_backward_weight(g->head, a.logits, a.lnf + c.row * C, c.rows, !g->grads_zero || c.k > 0, s);
}

template <typename floatX> static void gpt_head(GPT<floatX> *g, int B, int T, HeadWork work, float dloss) {
    const Activations<floatX> &a = g->acts;
    int N = B * T, ns = tp_local_tokens(&g->tp, N), K = forward_chunks(&g->mesh, g->tp.sp, B, gpt_most_chunks(g));
    int chunks = work == HEAD_NORM ? 0 : head_chunks(N, g->head_rows), next = 0, made = 0; // made: rows of chunk next
    LayerActs<floatX> top = layer_acts(g, g->config.num_layers - 1);
    ParamView<const floatX> w = weights_of(g, MODEL_TENSORS);
    for (int k = 0; k < K; k++) {
        ForwardChunk f = gpt_chunk(g, B, T, k);
        chunk_layernorm(g, f, a.lnf, a.lnf_stats, a.lnf_stats + ns, top.res_out, top.res2, a.proj, w[P_LNFW],
                        w[P_LNFB]);
        if (g->tp.sp) { // the LM head reads every token's final norm
            tp_chunk_gather(&g->tp, a.lnf, g->config.channels, f, g_cuda.stream,
                            "the tensor-parallel gather of the final norm's output");
            tp_chunk_wait(&g->tp, g_cuda.stream, f.k);
        }
        for (; next < chunks; next++, made = 0) {
            HeadChunk c = head_chunk(N, g->head_rows, next);
            int ready = c.row + c.rows < f.row + f.rows ? c.row + c.rows : f.row + f.rows;
            head_logits(g, c, c.row + made, ready);
            made = ready - c.row;
            if (made < c.rows) { break; } // its other rows after the next forward chunk's norm
            head_chunk_finish(g, c, N, work, dloss);
        }
    }
}

// The sum of the first `counted` per-token losses of the last gpt_head to host.scalars[0], ready once scalars_ready
// has fired.
template <typename floatX> static void gpt_loss_sum(GPT<floatX> *g, int counted) {
    const Activations<floatX> &a = g->acts;
    loss_sum_kernel<<<1, LOSS_SUM_THREADS, 0, g_cuda.stream>>>(a.scalars, a.losses, counted);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(g->host.scalars, a.scalars, sizeof(float), cudaMemcpyDeviceToHost, g_cuda.stream));
    scalars_record(&g->sched, g_cuda.stream);
}

// ----------------------------------------------------------------------------------------------------------------
// gradients final

/*
 * Backward finishes the gradients group by group: layer l's once its first LayerNorm's backward has run (the last
 * kernel that writes any of them: the one above writes the fcproj bias of layer l - 1, already final), the rest
 * (wte, wpe, lnf) after the encoder backward. Work that needs a group's final gradients waits for it on the side
 * stream, behind an event, and so runs beside the compute stream's next layer: on the last micro-step, the group's
 * sums of squares for the gradient norm (memory-bound, ~2 ms a step at 1558M if it ran alone). On it with DP > 1 the
 * group is first summed over the ranks on the DP stream, and the partials wait for that instead. Under sequence
 * parallelism each TP rank's replicated LayerNorm and projection-bias gradients cover its own tokens: on the last
 * micro-step they are first summed over the TP group (on the TP stream; wpe's gradient is taken from all tokens,
 * gathered, so it is whole already). grads_final_join makes the compute stream wait for all of it (so for the
 * reductions too), before anything reads the norm or writes the gradients again. When the update starts during the
 * backward (update_starts_early), the group's AdamW follows on the update stream instead of the side stream's pass,
 * and writes the group's partial sums of squares itself, the same bits (llmc/adamw.cuh), reading the gradients once
 * where the pass read them a second time; the compute stream waits for the update stream only in gpt_update (for
 * the last group's AdamW, before the norm) and in the next forward.
 */
static bool sp_partial_gradient(int t) { return param_tp_split(t) == TP_REPLICATED && t != P_WPE; }

template <typename floatX>
static void update_group_adamw(GPT<floatX> *g, int k, const UpdateArgs *u, const float *clip_factor, bool started,
                               bool writes_norm, AdamWPart part);

template <typename floatX> static cudaEvent_t sp_sum_replicated(GPT<floatX> *g, int group, cudaEvent_t ready) {
    TensorParallel *tp = &g->tp;
    const ParamGroup *pg = &g->dp.groups[group];
    const char *what = "the tensor-parallel sum of the replicated gradients (sequence parallelism)";
    cudaCheck(cudaStreamWaitEvent(tp->stream, ready, 0));
    ncclCheck(ncclGroupStart());
    for (int i = 0; i < pg->count; i++) {
        if (!sp_partial_gradient(pg->tensor[i])) { continue; }
        ncclCheck(ncclAllReduce(g->grads + pg->span[i].begin, g->grads + pg->span[i].begin, pg->span[i].count,
                                ncclFloat32, ncclSum, comm_get(COMM_TP), tp->stream));
    }
    ncclCheck(ncclGroupEnd());
    comm_settle(comm_get(COMM_TP), what, g_comm.timeout_s);
    comm_signal(&tp->tp_mark, tp->stream);
    comm_track(tp->tp_mark.event, what);
    return tp->tp_mark.event;
}

template <typename floatX> static void grads_final(GPT<floatX> *g, int group) {
    StepSchedule *sc = &g->sched;
    // The group's fc bias gradient comes from the sums stream (fc_bias_backward), under GTP its weight gradients from
    // the RS stream: final where all streams are.
    cudaEvent_t ready = grads_final_point(sc, &g->gtp);
    if (sc->reduce_grads && g->tp.sp) { ready = sp_sum_replicated(g, group, ready); }
    if (sc->reduce_grads && g->mesh.data_size > 1) { ready = dp_reduce_group(&g->dp, group, g->grads, ready); }
    side_wait(ready);
    if (sc->update_started && !update_deferred(sc, group)) { // AdamW takes the norm's partial sums as it reads them
        update_wait_ready(sc, ready);
        AdamWPart part = g->rest_split && group == g->config.num_layers ? adamw_late_part(&g->rest_late) : ADAMW_WHOLE;
        update_group_adamw(g, group, &sc->update_args, (const float *)NULL, true, true, part);
        sc->norm_group = group;
    } else if (sc->norm_in_backward) {
        grad_norm_partials(g->acts.norm_scratch + g->norm_first[group], &g->norm_groups[group], g_cuda.side);
    }
}

// The layers whose AdamW waited for the end of the backward (update_deferred), in the order the next forward reads
// them, behind all of the backward's work (grads_final_join) and the late rest group's AdamW, which that forward reads
// first.
template <typename floatX> static void update_after_backward(GPT<floatX> *g) {
    StepSchedule *sc = &g->sched;
    int n = sc->update_after_layers < g->config.num_layers ? sc->update_after_layers : g->config.num_layers;
    if (n == 0) { return; }
    update_wait_ready(sc, compute_point(sc->backward_done));
    for (int l = 0; l < n; l++) {
        update_group_adamw(g, l, &sc->update_args, (const float *)NULL, true, false, ADAMW_WHOLE);
    }
}

// ----------------------------------------------------------------------------------------------------------------
// backward

/*
 * The fc bias gradient db (+)= the column sums of d fch, on the low-priority sums stream beside the fc GEMMs that read
 * d fch too. Only cuBLAS reads d fch on the compute stream, so no kernel can sum it in passing (cuBLASLt's DGELU_BGRAD
 * epilogue runs at a third of the GEMM's speed), and in line the pass cost ~35 us a layer at 1558M (1.7 ms a step).
 * d fch lives in one buffer (acts.dfch) that every layer's backward writes: the compute stream waits for
 * fc_bias_done before writing it again; grads_final makes the group's gradients final behind this sum too. In an FP8
 * block the cast of d fch, which computes it (acts.dfch holds the fc projection's input gradient there, before gelu'),
 * takes its column sums per tile of rows as it goes, and this adds those up: the same events, a smaller pass.
 */
template <typename floatX>
static void fc_bias_backward(GPT<floatX> *g, int l, int N, int accumulate) {
    float *db = grads_of(g, l)[P_FCB];
    if (!db) { return; } // a model without biases
    dfch_to_sums(&g->sched);
    const Fp8Linear *fc = block_linear(g, l, LIN_FC).fp8;
    if (fc) { // the column sums come from the cast of d fch (fp8_linear_dgrad): their rows, in order
        PartialSumDsts dst = {{db}};
        add_partial_sums(dst, 1, fc->dbias_partials, fp8_col_sums_parts(N), g->mlp, g->mlp, accumulate, g_cuda.sums);
    } else {
        column_sum(db, g->acts.sums_scratch, g->acts.dfch, N, g->mlp, accumulate, g_cuda.sums);
    }
    fc_bias_done_record(&g->sched);
}

/*
 * gelu(fch) again for layer l, which did not keep it (recomputes_gelu), on the sums stream a layer ahead: beside the
 * compute stream's backward of layer l + 1 instead of in line before layer l's fc2 backward (a memory-bound pass,
 * 70 us a layer at 1558M, where the compute-bound GEMMs leave gaps). gpt_backward queues it right behind layer
 * l + 1's fc bias sum (fc_bias_backward), whose wait for dfch_ready orders it after its buffer's last reader
 * (below). The bias sum goes first, so fc_bias_done never waits for a recompute, and the next bias sum is not held
 * back by this one either (it starts after layer l's fc2 input gradient, which waits for gelu_recomputed); the
 * recompute has the rest of layer l + 1's backward (~2.5 ms at 1558M) to finish in. Layer L - 1 has no layer
 * ahead: gpt_backward_begin queues it before the LM head, beside which it runs. The layers that recompute alternate
 * between two buffers (layer_acts: layer l + 1's is the other one). Writers and readers, and what orders them:
 *   h4 of layer l: written here (sums); read by layer l's fc2 weight gradient (compute), which waits for
 *     gelu_recomputed (one event for all layers: that wait is queued before layer l - 1's recompute records it
 *     again). The buffer held layer l + 2's h4, last read by that layer's fc2 weight gradient (compute),
 *     which precedes layer l + 1's fc2 input gradient, that is dfch_ready, which the sums stream waited for in
 *     fc_bias_backward just before. Layer L - 1's (h4's last slot) was last read by the forward's fc2: the sums
 *     stream waits for forward_done.
 *   fch of layer l: written by the forward only (before forward_done and every dfch_ready); read here and by the
 *     DGELU of layer l's fc2 input gradient.
 *   the logits' buffer, where h4_alt lies after d fch (disjoint): the LM head's chunks (compute) use it before
 *     layer L - 1's dfch_ready, which precedes every recompute into h4_alt. The next forward writes both buffers
 *     after grads_final_join, which is behind all the sums stream's work, and its LM head the logits after the
 *     layers have read h4_alt.
 * gelu_forward is elementwise: the same bits as in line. In fp8 the FP8 blocks recompute their fc projection's
 * transposed FP8 input instead (the forward's cast again, by the scale it stored: the same bytes), into h4t[0] and
 * h4t[1], which stand where h4's last slot and h4_alt do, in the same order; the bf16 blocks keep their h4.
 */
template <typename floatX> static void gelu_recompute(GPT<floatX> *g, int l, int N) {
    LayerActs<floatX> x = layer_acts(g, l);
    if (g->fp8) { // an FP8 block: the fc projection's transposed FP8 input, as its forward cast it
        const Linear<floatX> &fcproj = block_linear(g, l, LIN_FCPROJ);
        Fp8CastOut o = {NULL, fcproj.fp8->x_t, N, 0, NULL};
        fp8_cast(g->fp8, fp8_tensor_of(fcproj, FP8_INPUT), Fp8GeluOf<floatX>{x.fch}, N, g->mlp, o, false,
                 FP8_SCALE_AGAIN, (float *)NULL, g_cuda.sums);
    } else {
        gelu_forward(x.h4, x.fch, (size_t)N * g->mlp, g_cuda.sums);
    }
    gelu_recomputed_record(&g->sched);
}

static const char *const EMBEDDINGS_GATHER = "the tensor-parallel all-gather of the embeddings' gradient";

/*
 * One deferred weight gradient (llmc/step_schedule.cuh: WgradQueue). Under GTP the GEMM writes the whole gradient
 * into an RS buffer, which is reduce-scattered into this rank's shard of lin.dw; on the micro-steps after the first it
 * adds (as the plain path's GEMM adds to lin.dw) to the shard so far that gtp_rs_buffer placed at the shard's rows.
 * With one rank the GEMM is the plain path's, beta and C included, and the reduce-scatter a copy: the same bits.
 */
template <typename floatX>
static void wgrad_run(GPT<floatX> *g, int linear, const Linear<floatX> &lin, const floatX *dout, const floatX *inp,
                      int N, int accumulate) {
    cudaStream_t s = g_cuda.stream;
    if (!g->gtp.active) {
        linear_backward_weight(lin, dout, inp, N, accumulate, s);
        return;
    }
    const GtpShape &sh = g->gtp_shapes[linear];
    Linear<floatX> whole = lin;
    whole.dw = gtp_rs_buffer(&g->gtp, &sh, lin.dw, accumulate, s);
    linear_backward_weight(whole, dout, inp, N, accumulate, s);
    char what[TRACKED_WHAT_LEN];
    snprintf(what, sizeof(what), "the GTP reduce-scatter of a %s gradient", PARAM_NAMES[BLOCK_LINEAR_WEIGHT[linear]]);
    gtp_reduce_scatter(&g->gtp, lin.dw, sh.shard_rows * sh.cols, s, what);
}

// The oldest `most` deferred weight gradients, beside the collective in flight.
template <typename floatX> static void wgrad_overlap(GPT<floatX> *g, WgradQueue<floatX> *q, int most) {
    wgrad_take(q, most, [&](int linear, const Linear<floatX> &lin, const floatX *dout, const floatX *inp) {
        wgrad_run(g, linear, lin, dout, inp, q->N, q->accumulate);
    });
}

// Layer l's linear layer k's input gradient (linear_backward_input; under GTP with its weight materialized for it), its
// own weight gradient deferred to the queue, and the oldest `beside` deferred weight gradients beside its TP sum (over
// SP's ring, in the wait for the last partial sums): where beside takes them all, the layer's own is among them.
template <typename floatX>
static void block_input_grad(GPT<floatX> *g, WgradQueue<floatX> *q, int l, int k, floatX *dinp, const floatX *dout,
                             const floatX *inp, const floatX *act_aux, int beside = 0) {
    const Linear<floatX> &lin = block_linear(g, l, k);
    gtp_acquire(g, l, k);
    wgrad_defer(q, k, lin, dout, inp);
    linear_backward_input(lin, dinp, dout, inp, act_aux, q->N, g_cuda.stream, [&]() {
        gtp_done(g, l, k); // its GEMMs are queued
        if (beside > 0) { wgrad_overlap(g, q, beside); }
    });
}

/*
 * Block l's backward: dres holds the gradient of its output (all N tokens where the fc projection reads it: gathered
 * under SP); leaves the gradient of its input there (this rank's tokens under SP, their gather started for the layer
 * below), and its parameters' gradients final (grads_final). Each column-parallel input gradient's TP sum runs beside
 * deferred weight gradients: all of them beside an all-reduce, the oldest one beside SP's reduce-scatter (half the
 * time), the rest beside the all-gather of the residual gradient that the LayerNorm backward after the sum leaves
 * (the row-parallel layer below reads every token's, and so do the embeddings). The queue is empty again at the end.
 */
template <typename floatX> static void block_backward(GPT<floatX> *g, int l, int B, int T, WgradQueue<floatX> *q) {
    const GPTConfig *c = &g->config;
    int C = c->channels, N = B * T, acc = !g->grads_zero, ns = tp_local_tokens(&g->tp, N), HS = config_head_size(c);
    size_t t0 = (size_t)tp_first_token(&g->tp, N) * C;
    const Activations<floatX> &a = g->acts;
    cudaStream_t s = g_cuda.stream;
    LayerActs<floatX> x = layer_acts(g, l);
    ParamView<const floatX> w = weights_of(g, l);
    ParamView<float> dw = grads_of(g, l);
    const Linear<floatX> &qkv = block_linear(g, l, LIN_QKV), &attproj = block_linear(g, l, LIN_ATTPROJ);
    const Linear<floatX> &fc = block_linear(g, l, LIN_FC);
    int beside_sum = g->tp.sp ? 1 : WGRAD_ALL;

    // MLP: a layer that did not keep h4 = gelu(fch) waits for its recompute (gelu_recompute); d fch goes to its own
    // buffer (a.dfch), once the layer above has summed its fc bias gradient there. SwiGLU: a.dfch takes the gradient
    // of h4 = swiglu(fch) instead, and swiglu_backward turns it into d fch in place of fch (which nothing reads
    // after), where fc's input and weight gradients read it, and writes h4 again into the buffer every layer shares
    // for the fc projection's weight gradient, queued before and run after it (the queue is empty at the end of the
    // layer above, so no weight gradient of that layer is left to read the buffer). The fc projection's input
    // gradient applies the activation's backward itself (act_aux) for GELU, and in an FP8 block for SwiGLU too:
    // there its casts make fc's FP8 output gradient from fch, which stays.
    bool swiglu = c->mlp == MLP_SWIGLU, act_in_fcproj = !swiglu || fp8_layer(g, l);
    floatX *dfch = swiglu ? x.fch : a.dfch;
    if (recomputes_gelu(g, l)) { gelu_recomputed_wait(&g->sched); }
    fc_bias_done_wait(&g->sched);
    block_input_grad(g, q, l, LIN_FCPROJ, a.dfch, a.dres, x.h4, act_in_fcproj ? x.fch : (const floatX *)NULL);
    if (!act_in_fcproj) { swiglu_backward(dfch, x.h4, a.dfch, x.fch, N, g->ffn, s); }
    fc_bias_backward(g, l, N, acc);
    if (l > 0 && recomputes_gelu(g, l - 1)) { gelu_recompute(g, l - 1, N); }
    block_input_grad(g, q, l, LIN_FC, a.proj, dfch, x.ln2, (const floatX *)NULL, beside_sum);
    linear_backward_join(fc, s);
    norm_backward_of(g, a.dres + t0, dw[P_LN2W], dw[P_LN2B], dw[P_ATTPROJB], a.proj + t0, x.res2, w[P_LN2W],
                     x.ln2_mean, x.ln2_rstd, ns, acc, s); // dres written: fcproj's ran
    // attention; its backward also sums dqkv into the QKV bias gradient, while it holds the rows
    linear_backward_gather(attproj, a.dres, N, s);
    wgrad_overlap(g, q, WGRAD_ALL); // before the next layer writes d fch
    block_input_grad(g, q, l, LIN_ATTPROJ, a.proj, a.dres, x.atty, (const floatX *)NULL);
    // under RoPE dq and dk rotated back as they are stored: the gradient of the projection's output
    const RopeTables rope = {g->rope_cos, g->rope_sin, g->maxT};
    attention_backward(a.dqkv, dw[P_QKVB], a.proj, x.atty, x.qkv, x.lse, rope, a.attn_workspace, B, T, g->heads,
                       g->kv_heads, HS, acc, s);
    block_input_grad(g, q, l, LIN_QKV, a.proj, a.dqkv, x.ln1, (const floatX *)NULL, beside_sum);
    linear_backward_join(qkv, s);
    norm_backward_of(g, a.dres + t0, dw[P_LN1W], dw[P_LN1B], l > 0 ? grads_of(g, l - 1)[P_FCPROJB] : (float *)NULL,
                     a.proj + t0, x.res_in, w[P_LN1W], x.ln1_mean, x.ln1_rstd, ns, acc, s);
    if (l > 0) {
        linear_backward_gather(block_linear(g, l - 1, LIN_FCPROJ), a.dres, N, s);
    } else if (g->tp.sp) {
        tp_gather_start(&g->tp, a.dres, (size_t)ns * C, s, EMBEDDINGS_GATHER);
    }
    wgrad_overlap(g, q, WGRAD_ALL); // the block's gradients are final after this
    grads_final(g, l);
}

// What the backward queues before the LM head's (gpt_head), to run beside it: the GTP backward chain's first gathers
// and layer L-1's GELU recompute (its buffer is not the logits': no need to wait for the head).
template <typename floatX> static void gpt_backward_begin(GPT<floatX> *g, int N) {
    int L = g->config.num_layers;
    gtp_pass_start(g, GTP_BACKWARD);
    if (recomputes_gelu(g, L - 1)) {
        forward_to_sums(&g->sched);
        gelu_recompute(g, L - 1, N);
    }
}

// Gradients of the last forward's loss (the LM head's backward ran in gpt_head, leaving the final norm's output
// gradient in acts.proj) are added to g->grads, or written there when they are zero (g->grads_zero: the first
// micro-step of an optimizer step), which saves a pass that zeroes them. The last micro-step (the one the caller
// passes the update's arguments) takes the norm's partial sums group by group as the gradients become final
// (grads_final); the others' would be thrown away (accumulating at 1558M, 8 micro-steps: 1.29 -> 1.27 s a step).
// Without those arguments gpt_update takes them instead.
template <typename floatX> static void gpt_backward(GPT<floatX> *g, int B, int T) {
    const GPTConfig *c = &g->config;
    int C = c->channels, L = c->num_layers, N = B * T, acc = !g->grads_zero, ns = tp_local_tokens(&g->tp, N);
    size_t t0 = (size_t)tp_first_token(&g->tp, N) * C;
    const Activations<floatX> &a = g->acts;
    cudaStream_t s = g_cuda.stream;
    ParamView<const floatX> w = weights_of(g, MODEL_TENSORS);
    ParamView<float> dw = grads_of(g, MODEL_TENSORS);

    fp8_transposed_wait(&g->sched); // the first input gradients read the FP8 weights' transposes
    linear_backward_join(g->head, s); // the TP sum of the final norm's output gradient
    cudaCheck(cudaMemsetAsync(a.dres, 0, (size_t)N * C * sizeof(floatX), s));
    // The encoder backward adds to dwte what the LM head's weight gradient wrote there; an untied head wrote lmhead's
    if (!c->tied && !acc) { cudaCheck(cudaMemsetAsync(dw[P_WTE], 0, g->layout.size[P_WTE] * sizeof(float), s)); }
    // Each LayerNorm backward also sums the residual gradient it leaves: the bias gradient of the projection below.
    norm_backward_of(g, a.dres + t0, dw[P_LNFW], dw[P_LNFB], grads_of(g, L - 1)[P_FCPROJB], a.proj + t0,
                     layer_acts(g, L - 1).res_out, w[P_LNFW], a.lnf_stats, a.lnf_stats + ns, ns, acc, s);
    if (g->rest_split) { // the rest group but the embedding rows of this micro-batch's tokens is final
        update_wait_ready(&g->sched, compute_point(g->sched.head_grads_final));
        update_group_adamw(g, L, &g->sched.update_args, (const float *)NULL, true, true,
                           adamw_early_part(&g->rest_late));
    }
    linear_backward_gather(block_linear(g, L - 1, LIN_FCPROJ), a.dres, N, s);
    WgradQueue<floatX> q = wgrad_queue<floatX>(N, acc);
    for (int l = L - 1; l >= 0; l--) { block_backward(g, l, B, T, &q); }
    if (g->tp.sp) { tp_join(&g->tp, s, EMBEDDINGS_GATHER); }
    encoder_backward(dw[P_WTE], dw[P_WPE], a.dres, &g->buckets, g->d_buckets, B, T,
                     c->pos == POS_LEARNED ? c->max_seq_len : 0, C, acc, s);
    grads_final(g, L);
    grads_final_join(&g->sched);
    g->grads_zero = 0;
    if (g->sched.update_started) { update_after_backward(g); }
}

// Makes the gradient buffers hold the zeros that grads_zero promises, for a reader that comes before a backward.
template <typename floatX> static void grads_materialize(GPT<floatX> *g) {
    if (!g->grads_zero) { return; }
    cudaCheck(cudaMemsetAsync(g->grads, 0, g->layout.total * sizeof(float), g_cuda.stream));
    g->grads_zero = 0;
}

// ----------------------------------------------------------------------------------------------------------------
// update

// The norm and clip factor (acts.scalars + 1) from the partial sums of every group. Under ZeRO-1 those cover this
// rank's slice only, under TP its TP-local tensors, under GTP its shards: their sum is summed over those ranks before
// the square root.
template <typename floatX> static void grad_norm(GPT<floatX> *g, float grad_clip) {
    cudaStream_t s = g_cuda.stream;
    const Activations<floatX> &a = g->acts;
    int parts = g->norm_first[g->config.num_layers + 1];
    grad_sum_partials(a.sum_squares, a.norm_scratch, parts, a.norm_fold, s);
    if (g->dp.zero) { dp_sum_on_device(&g->dp, a.sum_squares, 1, s); }
    if (tp_active(&g->tp)) { tp_sum_on_device(&g->tp, a.sum_squares, 1, s); }
    if (g->gtp.size > 1) {
        const char *what = "the all-reduce of the squared gradient norm over the GTP ranks";
        comm_compute_wait(s, gtp_all_reduce(&g->gtp, a.sum_squares, 1, ncclFloat64, ncclSum, s, what), what);
    }
    grad_norm_from_sum(a.scalars + 1, a.sum_squares, grad_clip, s);
}

/*
 * AdamW group by group on the update stream, in one of two orders:
 * - After the norm (gpt_update): the rest (wte, wpe, lnf) first, then layers 0, 1, ..., the order in which the next
 *   forward reads them; each group's event lets that forward start on a layer as soon as it is updated, so the
 *   memory-bound update (30 bytes a parameter: ~15 ms a step at 1558M) runs beside the forward's GEMMs instead of
 *   before them. The clip factor needs every group's gradients, so with clipping this is the only order.
 * - During the backward (update_starts_early): without clipping a group's update needs nothing but its own final
 *   gradients, so grads_final queues it there, layers L-1 ... 0 and then the rest, beside the backward of the layers
 *   below; nothing reads a layer's weights again in that backward. The next forward then waits only for what is
 *   still running. Each group's AdamW also writes its partial sums for the norm (it reads every gradient anyway), so
 *   the side stream reads none a second time; the norm, and the host, then wait for the last group (the rest:
 *   wte, ...), which the next forward's embedding waits for anyway. In fp8 AdamW then writes the masters only: the
 *   FP8 weights' codes scale by the history, which takes the step's amaxes after the backward (fp8_end_step), so
 *   gpt_update casts them from the masters behind it, group by group in forward order, and the next forward waits
 *   for each layer's cast (~6 bytes a weight) where it waited for its AdamW (~30).
 * The same AdamW and the same FP8 codes either way (fp8_codes_by_adamw), so the same bits. With DP > 1 the
 * gradients were summed over the ranks in backward (grads_final); under ZeRO-1 each rank updates the part of each
 * group it owns, then broadcasts it (dp_gather_group, queued in forward order by gpt_update, so that no broadcast
 * waits in the DP stream ahead of a backward's sums) before that group's event fires. The stream and event protocol
 * is llmc/step_schedule.cuh's.
 */

template <typename floatX> static bool fp8_weight(const GPT<floatX> *g, int k, int tensor) {
    return k < g->config.num_layers && fp8_layer(g, k) && block_linear_of_weight(tensor) >= 0;
}

// The FP8 codes of element e of an FP8 weight of layer k.
template <typename floatX> static uint8_t *fp8_code(GPT<floatX> *g, int k, int tensor, size_t e) {
    return fp8_codes(g, k, block_linear_of_weight(tensor)) + (e - param_view_begin(g, tensor, k));
}

/*
 * Who writes an update's FP8 weight codes. AdamW itself where it runs after the step's amaxes entered the history
 * (delayed scaling, the update after the backward) and updates every weight whole on this rank (not ZeRO-1, where a
 * rank that owns no part of a weight would never set its scale): it has the new weight in hand and the scale is the
 * history's, so it writes the codes (a byte a weight), and the transposes follow on the sums stream (2 more).
 * Otherwise update_group_publish casts the updated masters (fp8_cast_layer_weights: reads 4 bytes a weight, writes
 * the codes and their transpose in one pass), behind the history: under current scaling, whose scale is the new
 * weight's own amax; under ZeRO-1, from the masters the owners broadcast; and after the update in backward, which ran
 * before the step's amaxes were in. Either way the same fp32 master times the same scale, rounded alike, and the same
 * amax of the new weights recorded into the next step: the same bits.
 */
template <typename floatX> static bool fp8_codes_by_adamw(const GPT<floatX> *g, bool in_backward) {
    return g->fp8 && !in_backward && !g->dp.zero && !fp8_scales_current(g->fp8);
}

/*
 * AdamW of the part of group k this rank owns (all of it without ZeRO-1), on the update stream (whose caller made it
 * wait for the group's gradients and, with clipping, the clip factor: clip_factor, NULL when not clipping), then its
 * event. FP8 weights get no compute-precision copy: AdamW writes their codes or update_group_publish casts them
 * (fp8_codes_by_adamw). In the backward (the update in backward) it also writes the group's partial sums of squares
 * for the gradient norm, where grad_norm_partials would (writes_norm). started: the update started in the backward
 * (fp8_codes_by_adamw). part: the whole group, or one of its two launches (rest_can_split); the group's event follows
 * the late one.
 */
template <typename floatX>
static void update_group_adamw(GPT<floatX> *g, int k, const UpdateArgs *u, const float *clip_factor, bool started,
                               bool writes_norm, AdamWPart part) {
    AdamWStep step = {u->lr, u->beta1, u->beta2, (float)(1.0 - pow(u->beta1, u->t)),
                      (float)(1.0 - pow(u->beta2, u->t)), u->eps};
    floatX *copy = (void *)g->weights == (void *)g->params ? NULL : g->weights;
    size_t moments_begin = dp_owned(&g->dp).begin; // the moments hold the owned span only
    bool fused_fp8 = fp8_codes_by_adamw(g, started);
    AdamWFp8 f8;
    memset(&f8, 0, sizeof(f8));
    if (g->fp8) { f8 = adamw_fp8_of(g->fp8); }
    ParamGroup own = dp_owned_group(&g->dp, k);
    const NormGroup *ng = &g->norm_groups[k];
    // the first write of a layer's shards in an update (its casts and, under ZeRO-1, broadcast follow on this stream
    // or behind its event): the peers' gathers of the old ones come first (gtp_published follows in gpt_update)
    if (k < g->config.num_layers) { gtp_before_write(&g->gtp, k, g_cuda.update); }
    AdamWGroup grp;
    memset(&grp, 0, sizeof(grp));
    for (int i = 0, slice = 0; i < own.count; i++) {
        size_t o = own.span[i].begin;
        int t = own.tensor[i];
        adamw_group_add(&grp, o, o - moments_begin, own.span[i].count, param_is_decayed(t) ? u->weight_decay : 0.0f,
                        !fp8_weight(g, k, t));
        if (fused_fp8 && fp8_weight(g, k, t)) {
            adamw_group_fp8(&grp, fp8_code(g, k, t, o), fp8_tensor(k, block_linear_of_weight(t), FP8_WEIGHT));
        }
        if (writes_norm && norm_counts_tensor(&g->mesh, t)) { // the norm group's next slice (norm_groups_make)
            if (slice == ng->count || ng->p[slice] != g->grads + o || ng->n[slice] != own.span[i].count) {
                fail("internal error: group %d's AdamW span %d is not its gradient-norm slice %d", k, i, slice);
            }
            adamw_group_norm(&grp, g->norm_first[k] + (slice ? ng->chunk_end[slice - 1] : 0));
            slice++;
        }
    }
    adamw_update(g->params, copy, g->grads, g->m, g->v, &grp, step, clip_factor, f8,
                 writes_norm ? g->acts.norm_scratch : (float *)NULL, g_cuda.update, part);
    if (!part.skip) { updated_record(&g->sched, k); }
}

/*
 * What the next forward needs of group k besides its AdamW (codes_by_adamw: fp8_codes_by_adamw of it): under ZeRO-1
 * the owners' parts, broadcast; FP8 weights whose codes AdamW did not write cast from their masters (under ZeRO-1
 * broadcast first), scale and all, codes and transposes in one pass; where AdamW wrote them, their transposes, which
 * only the backward reads, made on the sums stream, idle until then (fp8_transposed). Under GTP a rank writes the
 * codes of its shards, and each gather makes the transposes (gtp_issue). In fp8 the update stream closes every group,
 * so the last group's event still follows all the others (updated_join).
 */
template <typename floatX> static void update_group_publish(GPT<floatX> *g, int k, bool codes_by_adamw) {
    if (g->dp.zero) {
        dp_gather_group(&g->dp, k, [&](Span part, int tensor) -> DpPart {
            if (!fp8_weight(g, k, tensor)) { return {g->weights + part.begin, NcclType<floatX>::id}; }
            return {g->params + part.begin, ncclFloat32}; // the ranks cast them (fp8_codes_by_adamw)
        }, g->sched.updated[k]);
        updated_recorded(&g->sched, k, g_comm.dp_stream);
    }
    if (!g->fp8) { return; }
    updated_wait_on(&g->sched, k, g_cuda.update);
    if (!codes_by_adamw && fp8_layer(g, k)) { fp8_cast_layer_weights(g, k, g->fp8_partials[1], g_cuda.update); }
    updated_record(&g->sched, k);
    if (codes_by_adamw && !g->gtp.active && k < g->config.num_layers && fp8_layer(g, k)) {
        updated_wait_on(&g->sched, k, g_cuda.sums);
        for (int j = 0; j < BLOCK_LINEARS; j++) {
            const Linear<floatX> &lin = block_linear(g, k, j);
            fp8_transpose(lin.fp8->w, lin.fp8->w_t, lin.out, lin.in, lin.out, 0, g_cuda.sums);
        }
    }
}

// The norm, then (unless the backward started it) AdamW, and every group's publication. Returns the norm as soon as
// it is known, with the update still running.
template <typename floatX> static float gpt_update(GPT<floatX> *g, const UpdateArgs *u) {
    cudaStream_t s = g_cuda.stream;
    const Activations<floatX> &a = g->acts;
    int L = g->config.num_layers;
    bool started = update_take_started(&g->sched, u);
    if (!started) { // the update in flight, if any, is the last step's
        updated_join(&g->sched);
        grads_materialize(g);
    }
    if (!g->sched.norm_ready) { // not taken in backward (none since zero_grad, or no arguments passed): the same here
        for (int k = 0; k <= L; k++) { grad_norm_partials(a.norm_scratch + g->norm_first[k], &g->norm_groups[k], s); }
    }
    // The step's amaxes, the largest over every rank (each holds parts, or other data), into the history. An update
    // that started in the backward records none (fp8_codes_by_adamw), so this need not wait for it.
    if (g->fp8) {
        if (g_comm.connected) {
            comm_world_reduce_on_device(g->fp8->amax_step, (size_t)g->fp8->tensors, ncclUint32, ncclMax, s,
                                        "the all-reduce of the FP8 amaxes");
        }
        fp8_end_step(g->fp8, s);
        fp8_history_record(&g->sched);
    }
    // Started in backward, AdamW wrote the partial sums: the norm waits for the last group's. The host, which waits for
    // the norm below, so waits for the whole update; but the next forward waits for that last group (wte) before its
    // first kernel anyway.
    if (started) { norm_wait_update(&g->sched); }
    grad_norm(g, u->grad_clip);
    g->sched.norm_ready = 0;
    norm_done_record(&g->sched);
    cudaCheck(cudaMemcpyAsync(g->host.scalars + 1, a.scalars + 1, sizeof(float), cudaMemcpyDeviceToHost, s));
    scalars_record(&g->sched, s);

    // The update stream waits for what it reads next: AdamW the clip factor (norm_done, which follows the history its
    // FP8 codes may scale by); after the update in backward only the FP8 weights' casts are left, which need the
    // history alone.
    if (!started) {
        update_wait_norm(&g->sched);
    } else if (g->fp8) {
        fp8_history_wait(&g->sched);
    }
    const float *clip_factor = u->grad_clip > 0.0f ? a.scalars + 2 : NULL;
    bool codes_by_adamw = fp8_codes_by_adamw(g, started);
    for (int i = 0; i <= L; i++) {
        int k = i == 0 ? L : i - 1; // the rest first, then the layers in forward order
        if (!started) { update_group_adamw(g, k, u, clip_factor, false, false, ADAMW_WHOLE); }
        update_group_publish(g, k, codes_by_adamw);
        if (k < L) { gtp_published(&g->gtp, k, g->sched.updated_on[k]); } // behind the group's last write
    }
    if (codes_by_adamw && !g->gtp.active) { fp8_transposed_record(&g->sched); }
    g->sched.update_pending = 1;
    scalars_wait(&g->sched, "the gradient norm");
    if (g->fp8) { fp8_check_step(g->fp8, u->t); }
    return g->host.scalars[1];
}

// ----------------------------------------------------------------------------------------------------------------
// the ModelOps table (llmc/model_ops.h)

template <typename floatX> static void check_batch(const GPT<floatX> *g, int B, int T) {
    if (B < 1 || T < 1 || B > g->maxB || T > g->maxT) {
        fail("micro-batch %d x %d does not fit the GPU model's capacity %d x %d", B, T, g->maxB, g->maxT);
    }
}

template <typename floatX> static void op_zero_grad(void *ctx) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    g->grads_zero = 1;
    g->sched.norm_ready = 0;
}

template <typename floatX>
static float op_forward_backward(void *ctx, const int *inputs, const int *targets, int B, int T, float loss_scale,
                                 const UpdateArgs *last) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    check_batch(g, B, T);
    step_schedule_micro_step(&g->sched, last, last && (g->mesh.data_size > 1 || g->tp.sp));
    int N = B * T;
    if (g->fp8) { g->fp8->recording = 1; } // a training pass: its FP8 casts record their amax
    gpt_load_tokens(g, inputs, targets, N);
    gpt_forward(g, B, T);
    gpt_backward_begin(g, N);
    gpt_head(g, B, T, HEAD_TRAIN, loss_scale);
    // Built while the GPU runs the forward; copied ahead of the loss, like the tokens, so the staging buffer is
    // free again once the loss has been read.
    token_buckets_build(&g->buckets, g->host.buckets, g->host.bucket_count, inputs, N, g->config.vocab_size, g->emb);
    cudaCheck(cudaMemcpyAsync(g->d_buckets, g->host.buckets, g->buckets.ints * sizeof(int), cudaMemcpyHostToDevice,
                              g_cuda.stream));
    g->rest_split = g->sched.update_started && rest_can_split(g);
    if (g->rest_split) { rest_late_upload(g); }
    gpt_loss_sum(g, N);
    gpt_backward(g, B, T);
    if (g->fp8) { g->fp8->recording = 0; }
    // Backward is queued behind the loss; wait only for the loss, so the GPU runs on while the host goes ahead.
    scalars_wait(&g->sched, "the loss");
    g->eval_B = 0; // the final norm's output is this pass's
    return g->host.scalars[0] / (float)N;
}

template <typename floatX> static float op_update(void *ctx, const UpdateArgs *args) {
    return gpt_update((GPT<floatX> *)ctx, args);
}

template <typename floatX>
static double op_eval_loss(void *ctx, const int *inputs, const int *targets, int B, int T, int rows) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    check_batch(g, B, T);
    if (rows < 0 || rows > B) { fail("internal error: eval_loss counts %d sequences of a micro-batch of %d", rows, B); }
    gpt_load_tokens(g, inputs, targets, B * T);
    gpt_forward(g, B, T);
    gpt_head(g, B, T, HEAD_LOSS, 0.0f);
    gpt_loss_sum(g, rows * T);
    scalars_wait(&g->sched, "the validation loss");
    g->eval_B = B;
    g->eval_T = T;
    return g->host.scalars[0];
}

// The forward of B rows of T positions, as many tokens as the capacity or fewer (more, shorter rows than training's:
// every activation holds N = maxB x maxT rows, attention keeps no T x T matrix, and forward_backward, whose backward
// workspace is sized by maxB, never takes such a shape), then each row's loss sum over its span: B floats to the
// host, not the logits.
template <typename floatX>
static void op_row_loss_sums(void *ctx, const int *inputs, const int *targets, int B, int T, const int *begin,
                             const int *end, double *sums) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    if (B < 1 || T < 1 || T > g->maxT || (long long)B * T > (long long)g->maxB * g->maxT) {
        fail("internal error: an evaluation forward of %d x %d does not fit the GPU model's %d x %d tokens", B, T,
             g->maxB, g->maxT);
    }
    gpt_load_tokens(g, inputs, targets, B * T);
    for (int r = 0; r < B; r++) {
        g->host.spans[2 * r] = begin[r];
        g->host.spans[2 * r + 1] = end[r];
    }
    cudaStream_t s = g_cuda.stream;
    cudaCheck(cudaMemcpyAsync(g->d_spans, g->host.spans, 2 * (size_t)B * sizeof(int), cudaMemcpyHostToDevice, s));
    gpt_forward(g, B, T);
    gpt_head(g, B, T, HEAD_LOSS, 0.0f);
    row_loss_sums_kernel<<<B, ROW_LOSS_THREADS, 0, s>>>(g->d_row_sums, g->acts.losses, g->d_spans, T);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(g->host.row_sums, g->d_row_sums, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost, s));
    scalars_record(&g->sched, s);
    scalars_wait(&g->sched, "the evaluation's loss sums");
    g->eval_B = 0; // not eval_loss's logits
    for (int r = 0; r < B; r++) { sums[r] = g->host.row_sums[r]; }
}

// The logits of the head chunk that holds position pos (the rows the training passes' head GEMMs take). Under TP a
// rank's logits are the columns of its vocabulary rows: the row is gathered in row_gather.
template <typename floatX> static void op_logits_at(void *ctx, const int *tokens, int T, int pos, float *out) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    check_batch(g, 1, T);
    if (pos < 0 || pos >= T) { fail("logits_at: position %d is outside [0, %d)", pos, T); }
    gpt_load_tokens(g, tokens, (const int *)NULL, T);
    gpt_forward(g, 1, T);
    gpt_head(g, 1, T, HEAD_NORM, 0.0f);
    g->eval_B = 0;
    HeadChunk c = head_chunk(T, g->head_rows, 0);
    for (int k = 1; c.row + c.rows <= pos; k++) { c = head_chunk(T, g->head_rows, k); }
    head_logits(g, c, c.row, c.row + c.rows);
    size_t Vp = g->config.padded_vocab_size, Vl = Vp / g->tp.size;
    logits_row_to_host(&g->tp, g->row_gather, g->acts.logits + (size_t)(pos - c.row) * Vl, Vp, out);
}

// The logits of the last eval_loss, made again chunk by chunk from its final norm's output: the same GEMMs on the
// same rows, so the same bits.
template <typename floatX> static void op_copy_logits(void *ctx, float *out) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    if (g->eval_B == 0) { fail("copy_logits needs an eval_loss just before it"); }
    if (tp_active(&g->tp)) { fail("copy_logits (a test hook) is for one GPU; under --tp each rank holds a slice"); }
    int N = g->eval_B * g->eval_T;
    size_t Vp = g->config.padded_vocab_size;
    for (int k = 0; k < head_chunks(N, g->head_rows); k++) {
        HeadChunk c = head_chunk(N, g->head_rows, k);
        head_logits(g, c, c.row, c.row + c.rows);
        copy_to_host_float(out + (size_t)c.row * Vp, g->acts.logits, (size_t)c.rows * Vp);
    }
}

template <typename floatX> static void op_get_params(void *ctx, float *out) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    // Under ZeRO-1 with a copy of the weights beside the masters (bf16, or fp8 also with fp32 activations) only this
    // rank's slice of the fp32 masters is current (the copy the GEMMs read was broadcast, the masters were not):
    // gather them first. In fp32 mode the masters are the weights the GEMMs read.
    if (g->dp.zero && (void *)g->weights != (void *)g->params) {
        dp_all_gather(&g->dp, g->params, g_cuda.stream, "the all-gather of the master weights");
    }
    gather_to_host(&g->shards, g->params, out);
}
template <typename floatX> static void op_set_params(void *ctx, const float *in) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    int L = g->config.num_layers;
    updated_join(&g->sched);
    for (int l = 0; l < L; l++) { gtp_before_write(&g->gtp, l, g_cuda.stream); } // in fp32 the masters are them
    scatter_to_device(&g->shards, in, g->params, 0, g->layout.total);
    if ((void *)g->weights != (void *)g->params) {
        convert_from_float(g->weights, g->params, g->layout.total, g_cuda.stream);
        comm_wait_stream(g_cuda.stream, "the conversion of the weights");
    }
    for (int l = 0; l < L; l++) { gtp_published(&g->gtp, l, g_cuda.stream); }
    if (g->fp8) { g->fp8->weights_stale = 1; } // the conversion wrote over the FP8 weights' room too
}
// Under ZeRO-1, only this rank's slice holds gradients summed over the ranks (and get_opt_state reuses the buffer).
template <typename floatX> static void op_get_grads(void *ctx, float *out) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    grads_materialize(g);
    gather_to_host(&g->shards, g->grads, out);
}
// Under ZeRO-1 the moments are gathered through the gradient buffer, free between an update and the next zero_grad.
template <typename floatX> static void op_get_opt_state(void *ctx, float *m, float *v) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    gather_opt_state_to_host(&g->shards, g->m, g->v, g->grads, m, v);
}
template <typename floatX> static void op_set_opt_state(void *ctx, const float *m, const float *v) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    scatter_opt_state_to_device(&g->shards, m, v, g->m, g->v);
}

// Where the compute stream waited for collectives over the run (rank 0's view), where there were any.
static void op_comm_report(void *ctx) {
    (void)ctx;
    if (g_comm.connected) { comm_exposed_report(); }
}

// The time the compute stream waited for collectives since the last call (the log line's exposed communication);
// < 0 for one process, which has none.
template <typename floatX> static double op_exposed_comm_ms(void *ctx) {
    (void)ctx;
    return g_comm.connected ? comm_exposed_ms_take() : -1.0;
}

// The FP8 amax history (the same on every rank: the step's amaxes are reduced over all of them).
template <typename floatX> static void op_get_fp8_history(void *ctx, Fp8History *h) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    fp8_history_get(g->fp8, h, g_cuda.stream);
    comm_wait_stream(g_cuda.stream, "the copy of the FP8 amax history");
}
template <typename floatX> static void op_set_fp8_history(void *ctx, const Fp8History *h) {
    GPT<floatX> *g = (GPT<floatX> *)ctx;
    updated_join(&g->sched);
    fp8_history_set(g->fp8, h, g_cuda.stream);
}

template <typename floatX> static ModelOps gpt_ops(GPT<floatX> *g) {
    ModelOps ops;
    memset(&ops, 0, sizeof(ops));
    ops.ctx = g;
    ops.device_name = g->device_name;
    // MFU counts the whole model's FLOPs (flops_per_token), the FP8 blocks' linear layers 6 x their weights' elements
    // a token each (GPT-2: 12 C^2)
    ParamLayout full;
    param_layout(&g->config, &full);
    double flops = flops_per_token(&g->config, full.total, g->maxT), fp8_flops = 0.0, block_weights = 0.0;
    for (int k = 0; k < BLOCK_LINEARS; k++) {
        block_weights += (double)full.size[BLOCK_LINEAR_WEIGHT[k]] / g->config.num_layers;
    }
    for (int l = 0; l < g->config.num_layers; l++) { fp8_flops += fp8_layer(g, l) ? 6.0 * block_weights : 0.0; }
    ops.peak_flops = mfu_peak(g->device_name, g->precision, flops, fp8_flops);
    ops.zero_grad = op_zero_grad<floatX>;
    ops.forward_backward = op_forward_backward<floatX>;
    ops.update = op_update<floatX>;
    ops.eval_loss = op_eval_loss<floatX>;
    ops.row_loss_sums = op_row_loss_sums<floatX>;
    ops.logits_at = op_logits_at<floatX>;
    ops.copy_logits = op_copy_logits<floatX>;
    ops.get_params = op_get_params<floatX>;
    ops.set_params = op_set_params<floatX>;
    ops.get_grads = op_get_grads<floatX>;
    ops.get_opt_state = op_get_opt_state<floatX>;
    ops.set_opt_state = op_set_opt_state<floatX>;
    ops.exposed_comm_ms = op_exposed_comm_ms<floatX>;
    ops.comm_report = op_comm_report;
    if (g->fp8) {
        ops.get_fp8_history = op_get_fp8_history<floatX>;
        ops.set_fp8_history = op_set_fp8_history<floatX>;
    }
    return ops;
}

// The model with its GEMM algorithms chosen; the tuning pass's FP8 amaxes are forgotten.
template <typename floatX>
static ModelOps gpt_make(const GPTConfig *config, const Options *opts, Precision p, const Fp8Recipe *fp8,
                         const Mesh *mesh, int B, int T) {
    GPT<floatX> *g = gpt_create<floatX>(config, p, fp8, opts, mesh, B, T);
    ModelOps ops = gpt_ops(g);
    choose_gemm_algos(&ops, config, opts->out_dir, mesh->rank, B, T, opts->gemm_search);
    if (g->fp8) { fp8_discard_step(g->fp8, g_cuda.stream); }
    return ops;
}

// The one place the precision picks the activation type.
static ModelOps make_gpu_model(const GPTConfig *config, const Options *opts, const Mesh *mesh, int B, int T) {
    // --gtp-materialize on one process: the communicators the GTP path runs through, each of this one rank
    if (opts->gtp_materialize && !g_comm.connected) { comm_connect(mesh); }
    cuda_context_init(); // on the GPU comm_connect chose (the first one for a single process)
    Precision p = precision_from_options(opts);
    bool fp32 = p == PRECISION_FP32 || (p == PRECISION_FP8 && strcmp(opts->fp8_activations, "fp32") == 0);
    Fp8Recipe recipe = fp8_recipe_from_options(opts);
    const Fp8Recipe *fp8 = p == PRECISION_FP8 ? &recipe : (const Fp8Recipe *)NULL;
    ModelOps ops = fp32 ? gpt_make<float>(config, opts, p, fp8, mesh, B, T)
                        : gpt_make<bf16>(config, opts, p, fp8, mesh, B, T);
    // A profiler started with --profile-from-start off (dev/kernel_times.sh) sees training, not the tuning pass.
    (void)cudaProfilerStart();
    if (mesh->rank == 0) { printf("peak GPU memory: %.1f GB\n", g_cuda_allocated_bytes / 1e9); }
    // a pass's gathers into each rank: the FP8 blocks' weights as FP8 codes, the others in the activation type
    double gathered_mb = gtp_pass_gather_bytes(config, mesh, fp8, fp32 ? sizeof(float) : sizeof(bf16)) / 1e6;
    if (mesh->rank == 0 && options_gtp_path(opts)) {
        ParamLayout mine;
        param_layout_gtp(config, mesh, &mine);
        printf("GTP: %d ranks, prefetch %d; rank 0 holds %zu parameters (%.1f MB of fp32 masters); a pass gathers "
               "%.1f MB into each rank%s\n", mesh->gtp, opts->gtp_prefetch, mine.total, mine.total * 4.0 / 1e6,
               gathered_mb, p == PRECISION_FP8 ? " (the FP8 blocks' weights as FP8 codes)" : "");
    }
    if (gtp_group_spans_nodes(mesh, g_comm.boot.local_rank)) {
        warn("this rank's GTP group spans nodes (local rank %d, GTP rank %d of %d, --tp %d): every pass's weight "
             "gathers (%.1f MB into each rank) and the gradient reduce-scatters cross the network between nodes, "
             "many times slower than NVLink; choose --gtp x --tp that divides the GPUs of a node",
             g_comm.boot.local_rank, mesh->gtp_rank, mesh->gtp, mesh->tp, gathered_mb);
    }
    return ops;
}

// What the GPU kernels cannot take in the description (head size, widths), refused before any work; gpt_create checks
// the widths again in the run's activation type (bf16's 16-byte packs hold more elements: what passes here passes
// there).
static void gpu_check_model(const GPTConfig *config) {
    attention_check_args(1, 1, config->num_heads, config->num_kv_heads, config_head_size(config), 0);
    Mesh one = mesh_make(1, 0, 1, 1);
    gpt_check_shape<bf16>(config, &one);
}

#ifndef TESTING
int main(int argc, char **argv) { return train_main(argc, argv, gpu_launch, make_gpu_model, gpu_check_model); }
#endif
