/*
 * model_io.cuh: the host's copies of a rank's model buffers, for checkpoints, resume and tests (the ModelOps get/set
 * functions of llmc/model_ops.h) and for the logits the loop reads.
 *
 * The host side of the model is whole (param_layout() order: model files, state files); a rank's device buffers hold
 * its tensors (layout: TP-local, llmc/tp_layout.h, with GTP's shards of the block weight matrices, llmc/gtp_plan.h),
 * and under ZeRO-1 its slice of the AdamW moments only (llmc/dp_plan.h). ModelShards says where those are and which
 * groups hold the rest: pointers into the model's own state (train_gpt.cu: GPT::shards).
 * gather_to_host: the whole tensors from every rank's buffer, first its GTP group's shards (all-gathered, assembled
 * into TP-local tensors on the host: gtp_gather_to_tp), then its TP group's slices (all-gathered TP_GATHER_CHUNK
 * floats at a time through a temporary buffer, then placed on the host: tp_gather_to_host); every rank of the groups
 * gets them. scatter_to_device: elements [begin, begin + count) of this rank's buffer, cut from whole tensors.
 * Every copy runs on the compute stream (the GTP gather on the AG stream, behind it) and the host waits for it before
 * it returns (comm_wait_stream: bounded, and named in the error line of a peer that never comes).
 */
#ifndef LLMC_MODEL_IO_CUH
#define LLMC_MODEL_IO_CUH

#include <type_traits>

#include "comm.cuh"
#include "config.h"
#include "cuda_common.cuh"
#include "data_parallel.cuh"
#include "gtp.cuh"
#include "gtp_plan.h"
#include "mesh.h"
#include "tensor_parallel.cuh"
#include "tp_layout.h"

typedef struct {
    const GPTConfig *config;
    const Mesh *mesh;
    TensorParallel *tp; // this rank's TP group
    Gtp *gtp;           // its GTP group
    DataParallel *dp;   // its ZeRO-1 slices of the moments (dp->zero 0: it holds them whole)
    size_t elems;       // the tensors its buffers hold (the GTP layout: llmc/gtp_plan.h)
    size_t tp_elems;    // its TP-local tensors whole (llmc/tp_layout.h)
} ModelShards;

// n values of type T on the device to fp32 on the host.
template <typename T> static void copy_to_host_float(float *out, const T *src, size_t n) {
    if constexpr (std::is_same<T, float>::value) {
        cudaCheck(cudaMemcpyAsync(out, src, n * sizeof(float), cudaMemcpyDeviceToHost, g_cuda.stream));
        comm_wait_stream(g_cuda.stream, "a copy to the host");
    } else {
        T *tmp = (T *)malloc_check(n * sizeof(T), "logits copy");
        cudaCheck(cudaMemcpyAsync(tmp, src, n * sizeof(T), cudaMemcpyDeviceToHost, g_cuda.stream));
        comm_wait_stream(g_cuda.stream, "a copy to the host");
        for (size_t i = 0; i < n; i++) { out[i] = __bfloat162float(tmp[i]); }
        free(tmp);
    }
}

// One row of Vp logits to the host, from `row`, this rank's Vl = Vp / TP columns of it. Under TP those are the
// columns of its vocabulary rows: the row is all-gathered over the TP group (rank r's part is columns
// [r Vl, (r+1) Vl), so the gathered row is in vocabulary order) in `gathered` (Vp elements).
template <typename T>
static void logits_row_to_host(TensorParallel *tp, T *gathered, const T *row, size_t Vp, float *out) {
    size_t Vl = Vp / tp->size;
    if (tp_active(tp)) {
        cudaCheck(cudaMemcpyAsync(gathered + tp->rank * Vl, row, Vl * sizeof(T), cudaMemcpyDeviceToDevice,
                                  g_cuda.stream));
        const char *what = "the tensor-parallel all-gather of a row of logits";
        tp_all_gather_joined(tp, gathered, Vl, g_cuda.stream, what);
        row = gathered;
    }
    copy_to_host_float(out, row, Vp);
}

static void copy_device_to_host(float *out, const float *src, size_t n) {
    cudaCheck(cudaMemcpyAsync(out, src, n * sizeof(float), cudaMemcpyDeviceToHost, g_cuda.stream));
    comm_wait_stream(g_cuda.stream, "a copy to the host");
}
static void copy_host_to_device(float *dst, const float *src, size_t n) {
    cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g_cuda.stream));
    comm_wait_stream(g_cuda.stream, "a copy to the GPU");
}

#define TP_GATHER_CHUNK ((size_t)1 << 25) // 128 MB of fp32 per rank and chunk

// local: this rank's TP-local tensors (tp_layout) on the device.
static void tp_gather_to_host(const ModelShards *s, const float *local, float *full) {
    size_t P = s->tp_elems;
    if (!tp_active(s->tp)) {
        copy_device_to_host(full, local, P);
        return;
    }
    int tp = s->tp->size;
    size_t chunk = P < TP_GATHER_CHUNK ? P : TP_GATHER_CHUNK;
    float *host = (float *)malloc_check((size_t)tp * P * sizeof(float), "the gathered tensor-parallel parameters");
    float *stage = NULL;
    cudaCheck(cudaMalloc(&stage, (size_t)tp * chunk * sizeof(float)));
    const char *what = "the tensor-parallel all-gather of the parameters or optimizer state";
    for (size_t o = 0; o < P; o += chunk) {
        size_t n = P - o < chunk ? P - o : chunk;
        cudaCheck(cudaMemcpyAsync(stage + s->tp->rank * n, local + o, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                  g_cuda.stream));
        tp_all_gather_joined(s->tp, stage, n, g_cuda.stream, what);
        for (int r = 0; r < tp; r++) {
            cudaCheck(cudaMemcpyAsync(host + r * P + o, stage + r * n, n * sizeof(float), cudaMemcpyDeviceToHost,
                                      g_cuda.stream));
        }
        comm_wait_stream(g_cuda.stream, what);
    }
    cudaCheck(cudaFree(stage));
    const float **locals = (const float **)malloc_check(tp * sizeof(float *), "tensor-parallel buffers");
    for (int r = 0; r < tp; r++) { locals[r] = host + r * P; }
    param_gather_tp(s->config, tp, locals, full);
    free(locals);
    free(host);
}

// The TP-local tensors (on the device, tp_layout) of this rank's GTP group, from the G ranks' buffers (local, layout).
static float *gtp_gather_to_tp(const ModelShards *s, const float *local) {
    size_t P = s->elems, Pt = s->tp_elems, G = (size_t)s->gtp->size;
    const char *what = "the GTP all-gather of the parameters or optimizer state";
    float *all = NULL, *tp = NULL;
    cudaCheck(cudaMalloc(&all, G * P * sizeof(float)));
    cudaCheck(cudaMalloc(&tp, Pt * sizeof(float)));
    gtp_after_compute(s->gtp, g_cuda.stream); // behind whatever wrote `local`
    ncclCheck(ncclAllGather(local, all, P, ncclFloat32, comm_get(COMM_GTP), s->gtp->ag));
    comm_settle(comm_get(COMM_GTP), what, g_comm.timeout_s);
    float *host = (float *)malloc_check(G * P * sizeof(float), "the gathered GTP shards");
    float *host_tp = (float *)malloc_check(Pt * sizeof(float), "the TP-local parameters");
    cudaCheck(cudaMemcpyAsync(host, all, G * P * sizeof(float), cudaMemcpyDeviceToHost, s->gtp->ag));
    comm_wait_stream(s->gtp->ag, what);
    const float **parts = (const float **)malloc_check(G * sizeof(float *), "GTP buffers");
    for (size_t r = 0; r < G; r++) { parts[r] = host + r * P; }
    param_gather_gtp(s->config, s->mesh, parts, host_tp);
    copy_host_to_device(tp, host_tp, Pt);
    free(parts);
    free(host_tp);
    free(host);
    cudaCheck(cudaFree(all));
    return tp;
}

static void gather_to_host(const ModelShards *s, const float *local, float *full) {
    if (s->gtp->size == 1) { // the layout is the TP-local one
        tp_gather_to_host(s, local, full);
        return;
    }
    float *tp = gtp_gather_to_tp(s, local);
    tp_gather_to_host(s, tp, full);
    cudaCheck(cudaFree(tp));
}

static void scatter_to_device(const ModelShards *s, const float *full, float *dst, size_t begin, size_t count) {
    if (!tp_active(s->tp) && s->gtp->size == 1) {
        copy_host_to_device(dst, full + begin, count);
        return;
    }
    float *tp = (float *)malloc_check(s->tp_elems * sizeof(float), "tensor-parallel parameters");
    param_slice_tp(s->config, s->mesh, full, tp);
    float *local = tp;
    if (s->gtp->size > 1) {
        local = (float *)malloc_check(s->elems * sizeof(float), "GTP shards");
        param_slice_gtp(s->config, s->mesh, tp, local);
    }
    copy_host_to_device(dst, local + begin, count);
    if (local != tp) { free(local); }
    free(tp);
}

// The AdamW moments m, v (this rank's) to the host whole. Under ZeRO-1 each moment is gathered from the slices into
// `spare` (a buffer of the layout's size that is free: the model lends its gradients between an update and the next
// zero_grad), so a checkpoint needs no extra GPU memory; the state file is the single-GPU one.
static void gather_opt_state_to_host(const ModelShards *s, const float *m, const float *v, float *spare,
                                     float *host_m, float *host_v) {
    if (!s->dp->zero) {
        gather_to_host(s, m, host_m);
        gather_to_host(s, v, host_v);
        return;
    }
    dp_gather_slices(s->dp, m, spare, g_cuda.stream, "the all-gather of AdamW's first moments");
    gather_to_host(s, spare, host_m);
    dp_gather_slices(s->dp, v, spare, g_cuda.stream, "the all-gather of AdamW's second moments");
    gather_to_host(s, spare, host_v);
}

// Each rank keeps its own slice of the whole model's moments (its TP-local tensors, all of them without ZeRO-1).
static void scatter_opt_state_to_device(const ModelShards *s, const float *host_m, const float *host_v, float *m,
                                        float *v) {
    Span owned = dp_owned(s->dp);
    scatter_to_device(s, host_m, m, owned.begin, owned.count);
    scatter_to_device(s, host_v, v, owned.begin, owned.count);
}

#endif // LLMC_MODEL_IO_CUH
