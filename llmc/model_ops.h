/*
 * model_ops.h: the interface between the shared training loop (trainer.h) and a model implementation.
 *
 * The CPU build (train_gpt_cpu.c) and the GPU build (train_gpt.cu) each fill one ModelOps table; everything
 * else (options, data, schedule, validation, sampling, logging, checkpoints, resume) is written once, in
 * trainer.h, and so behaves identically in both builds. Host arrays of parameters, gradients and optimizer
 * state are fp32 and laid out as param_layout() says (its tensors back to back).
 */
#ifndef LLMC_MODEL_OPS_H
#define LLMC_MODEL_OPS_H

#include <stddef.h>

#include "fp8.h"
#include "mesh.h"

typedef struct {
    float lr, weight_decay, beta1, beta2, eps, grad_clip;
    int t; // AdamW step counter, 1 for the first update
} UpdateArgs;

typedef struct {
    void *ctx;
    const char *device_name; // printed at start-up ("cpu", "NVIDIA H100 80GB HBM3", ...)
    double peak_flops;       // dense peak for the precision in use (FLOP/s), 0 where MFU has no meaning
    // Gradients to zero; called before the first micro-step of every optimizer step.
    void (*zero_grad)(void *ctx);
    // Forward and backward of one micro-batch of B x T tokens (int32, targets are inputs shifted by one);
    // gradients of loss_scale * (sum of per-token losses) are ADDED to the gradient buffers. The trainer passes
    // loss_scale = 1 / (B*T*accum*data-parallel ranks), so gradients are those of the global mean loss.
    // last is NULL but on the last micro-step of an optimizer step, where it points at the arguments that the update
    // after it will get: the gradients are final during this backward, so a data-parallel model starts reducing them
    // across ranks as they become final, and a model may start the update of the parameters whose gradients are
    // final where it does not wait for the global norm (no clipping). Returns the mean loss over this rank's B*T
    // tokens.
    float (*forward_backward)(void *ctx, const int *inputs, const int *targets, int B, int T, float loss_scale,
                              const UpdateArgs *last);
    // Global gradient norm, clipping and AdamW as dev/DESIGN.md defines them, on the gradients summed over the
    // data-parallel ranks. Returns the norm before clipping (the same on every rank). After a last micro-step it
    // takes the arguments that micro-step was given.
    float (*update)(void *ctx, const UpdateArgs *args);
    // Forward only over B x T tokens: returns the sum of the per-token losses of the first `rows` sequences (0..B);
    // the others are padding that keeps the ranks' forwards in step (validation), computed and left out. Leaves the
    // logits of this batch readable by copy_logits.
    double (*eval_loss)(void *ctx, const int *inputs, const int *targets, int B, int T, int rows);
    // Forward only over B rows of T tokens, B x T at most the micro-batch's tokens and T at most its length (the
    // evaluation runs more, shorter rows: llmc/eval.h): sums[r] = the sum of row r's per-token losses at positions
    // [begin[r], end[r]) (0 where they are equal). Deterministic: the same tokens give the same sums.
    void (*row_loss_sums)(void *ctx, const int *inputs, const int *targets, int B, int T, const int *begin,
                          const int *end, double *sums);
    // Forward only over one sequence tokens[0..T) (B = 1); writes the logits of position pos
    // (padded_vocab_size floats) to out. Used for text samples.
    void (*logits_at)(void *ctx, const int *tokens, int T, int pos, float *out);
    // Copy the logits of the last eval_loss to host (B*T*padded_vocab_size floats). Tests only.
    void (*copy_logits)(void *ctx, float *out);
    // Host copies in/out of the fp32 master weights, gradients, and AdamW moments: always the whole model, on
    // every rank (a model that shards its optimizer gathers for get_* and keeps its own slice on set_*; every rank
    // must call get_params and get_opt_state together).
    void (*get_params)(void *ctx, float *out);
    void (*set_params)(void *ctx, const float *in);
    void (*get_grads)(void *ctx, float *out);
    void (*get_opt_state)(void *ctx, float *m, float *v);
    void (*set_opt_state)(void *ctx, const float *m, const float *v);
    // Milliseconds the compute stream stood still waiting for collectives since the last call (exposed
    // communication, for the log line); < 0 where there is no communication. NULL in the CPU build.
    double (*exposed_comm_ms)(void *ctx);
    // Prints where the compute stream waited for collectives, by collective, over the steps after the first (called
    // on the root at the end of a run); NULL in the CPU build.
    void (*comm_report)(void *ctx);
    // The FP8 recipe's amax history (llmc/fp8.h), the same on every rank, for checkpoints: get copies it into h (of
    // the run's shape, fp8_history_init), set makes h the model's (the next forward scales by it). Both NULL where the
    // model runs no FP8.
    void (*get_fp8_history)(void *ctx, Fp8History *h);
    void (*set_fp8_history)(void *ctx, const Fp8History *h);
    // Frees the model at the end of a run; NULL where the process's exit releases it (the GPU build: the driver
    // frees device memory at exit, and tearing down streams and communicators first only delays it).
    void (*destroy)(void *ctx);
} ModelOps;

/*
 * The processes of a job, outside the model. The CPU build is one process: world 1, every function NULL. The GPU
 * build fills it from llmc/bootstrap.h and llmc/comm.cuh. The trainer calls a function only where it is not NULL.
 */
#define LAUNCHER_SUM_MAX 8 // values one sum_over_data_ranks or max_over_world call may carry

typedef struct {
    int world, rank, local_rank;
    // Once every rank has checked its options and inputs: the communicators of the mesh. All ranks take part, so
    // it is also the barrier after which rank 0 may write to the output folder.
    void (*connect)(const Mesh *mesh);
    // In place: every rank gets the sums of x[0..n) (n <= LAUNCHER_SUM_MAX) over its data group (DP x GTP: the ranks
    // that read other tokens).
    void (*sum_over_data_ranks)(double *x, int n);
    // In place: every rank gets the maxima of x[0..n) (n <= LAUNCHER_SUM_MAX) over all ranks of the job.
    void (*max_over_world)(double *x, int n);
    // Waits for every rank; `what` names the wait in an error, long_wait allows slow work before it (a checkpoint
    // that rank 0 writes while the others wait).
    void (*barrier)(const char *what, int long_wait);
    // The end of a run on every rank: a last barrier, then the communicators and their watchdog close.
    void (*finish)(void);
} Launcher;

typedef Launcher (*LaunchFn)(void);

#endif // LLMC_MODEL_OPS_H
