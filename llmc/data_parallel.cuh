/*
 * data_parallel.cuh: the gradients of data-parallel replicas summed across the DP group as backward finishes
 * them, and ZeRO-1's sharded update (llmc/dp_plan.h has the arithmetic, llmc/comm.cuh the communicators).
 *
 * The unit is the parameter group (dp_plan.h: a block, or the rest), the same unit in which train_gpt.cu takes the
 * gradient norm and runs AdamW on its side stream. On the last micro-step of an optimizer step, as backward makes a
 * group's gradients final (dp_reduce_group): the DP stream waits for that point of the compute stream, sums the
 * group in place (fp32), and records the group's `reduced` event, which the side stream's norm partials wait for
 * instead of the compute stream. The gradients are of the global mean loss already (the trainer's loss scale counts
 * every rank's tokens), so the reduction is a plain sum. No device-wide synchronization anywhere.
 * Without ZeRO every rank then holds the same summed gradients and runs the same norm and AdamW on all of them.
 * With ZeRO-1 each span of a group is reduced (ncclReduce) onto the rank(s) owning its parts; each rank takes the
 * norm's partial sums of its parts only (their sum is summed over the ranks: dp_sum_on_device), updates its parts
 * with its slice of the AdamW moments, and broadcasts the updated weights the GEMMs read, group by group
 * (dp_gather_group), before the next forward reads that group; in bf16 mode the fp32 masters outside the slice go
 * stale until get_params gathers them (dp_all_gather).
 * Under GTP the ranks of a GTP group read other tokens too: the tensors GTP leaves whole are summed over the data
 * group (DP x GTP), the shards (already summed over GTP by their reduce-scatter) over DP (gtp_grad_sums_over_data).
 * ZeRO-1 then slices each rank's GTP-local buffer over its DP group (the same layout on every rank of it) and changes
 * only the DP sum: the shards' parts are reduced onto their owners; the whole tensors are all-reduced over the data
 * group as without ZeRO-1, and each owner updates its part of them.
 * One rank leaves every buffer and every kernel as on a single GPU: no event, no collective.
 */
#ifndef LLMC_DATA_PARALLEL_CUH
#define LLMC_DATA_PARALLEL_CUH

#include "comm.cuh"
#include "dp_plan.h"
#include "gtp_plan.h"

typedef struct {
    Mesh mesh;       // this rank's place: which group sums which gradients (gtp_grad_sums_over_data)
    int ranks, rank; // the DP group
    int data_ranks;  // the data group (DP x GTP)
    int zero;        // ZeRO-1 on (only with more than one rank: on one rank it would change nothing)
    ParamLayout layout;
    ZeroShards shards;
    int num_groups;                    // L + 1
    ParamGroup *groups;                // dp_plan.h's parameter groups, on every rank count
    cudaEvent_t *reduced;              // per group: summed over the ranks, on the DP stream (DP > 1 only)
    cudaEvent_t compute_mark, dp_mark; // ordering of the update's collectives between the two streams
} DataParallel;

static void dp_init(DataParallel *dp, const Mesh *m, const GPTConfig *c, const ParamLayout *p, int zero) {
    memset(dp, 0, sizeof(*dp));
    dp->mesh = *m;
    dp->ranks = m->dp;
    dp->rank = m->dp_rank;
    dp->data_ranks = m->data_size;
    dp->zero = zero && m->dp > 1;
    dp->layout = *p;
    dp->shards = zero_shards_make(p->total, dp->zero ? dp->ranks : 1);
    int L = c->num_layers;
    dp->num_groups = L + 1;
    dp->groups = (ParamGroup *)calloc_check((size_t)L + 1, sizeof(ParamGroup), "parameter groups");
    for (int k = 0; k <= L; k++) { dp->groups[k] = param_group(p, L, k); }
    if (dp->data_ranks == 1) { return; }
    dp->reduced = (cudaEvent_t *)malloc_check(((size_t)L + 1) * sizeof(cudaEvent_t), "reduction events");
    for (int k = 0; k <= L; k++) { cudaCheck(cudaEventCreateWithFlags(&dp->reduced[k], cudaEventDisableTiming)); }
    cudaCheck(cudaEventCreateWithFlags(&dp->compute_mark, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&dp->dp_mark, cudaEventDisableTiming));
}

// Elements of the flat parameter, weight and gradient buffers: P, padded to equal slices under ZeRO-1.
static size_t dp_buffer_elems(const DataParallel *dp) { return dp->zero ? dp->shards.padded : dp->layout.total; }

// Elements of each AdamW moment buffer: this rank's slice under ZeRO-1, else all P.
static size_t dp_moment_elems(const DataParallel *dp) { return dp->zero ? dp->shards.slice : dp->layout.total; }

// The parameters this rank updates: its slice under ZeRO-1, else all of them.
static Span dp_owned(const DataParallel *dp) {
    Span all = {0, dp->layout.total};
    return dp->zero ? zero_owned(&dp->shards, dp->rank) : all;
}

// The part of group k this rank takes the norm of and updates (all of it without ZeRO-1).
static ParamGroup dp_owned_group(const DataParallel *dp, int k) {
    return param_group_owned(&dp->groups[k], dp_owned(dp));
}

// Calls f(part, owner, tensor) for every part of group k's spans that one rank owns under ZeRO-1.
template <typename F> static void dp_for_each_owned_part(const DataParallel *dp, int k, F f) {
    const ParamGroup *g = &dp->groups[k];
    for (int i = 0; i < g->count; i++) {
        for (int r = 0; r < dp->ranks; r++) {
            Span part = span_intersect(g->span[i], zero_padded_slice(&dp->shards, r));
            if (part.count > 0) { f(part, r, g->tensor[i]); }
        }
    }
}

// "<verb> of the gradients of block k" (or of wte, wpe, lnf), for a timeout's message.
static void dp_group_what(const DataParallel *dp, int k, const char *verb, char *out) {
    if (k < dp->num_groups - 1) {
        snprintf(out, TRACKED_WHAT_LEN, "the data-parallel %s of block %d", verb, k);
    } else {
        snprintf(out, TRACKED_WHAT_LEN, "the data-parallel %s of wte, wpe and lnf", verb);
    }
}

// All-reduces group k's spans that sum over `comm` (the whole tensors over the data group under GTP, the rest over DP:
// gtp_grad_sums_over_data), as one grouped call, on the DP stream.
static void dp_all_reduce_spans(DataParallel *dp, int k, float *grads, CommId comm, const char *what) {
    const ParamGroup *g = &dp->groups[k];
    int over_data = comm == COMM_DATA, any = 0;
    ncclCheck(ncclGroupStart());
    for (int i = 0; i < g->count; i++) {
        if (gtp_grad_sums_over_data(&dp->mesh, g->tensor[i]) != over_data) { continue; }
        float *p = grads + g->span[i].begin;
        ncclCheck(ncclAllReduce(p, p, g->span[i].count, ncclFloat32, ncclSum, comm_get(comm), g_comm.dp_stream));
        any = 1;
    }
    ncclCheck(ncclGroupEnd());
    if (any) { comm_settle(comm_get(comm), what, g_comm.timeout_s); }
}

// ZeRO-1: group k's parts that sum over DP, each reduced onto the rank that owns it, as one grouped call on the DP
// stream (the whole tensors under GTP were all-reduced over the data group already).
static void dp_reduce_onto_owners(DataParallel *dp, int k, float *grads, const char *what) {
    ncclComm_t comm = comm_get(COMM_DP);
    int any = 0;
    ncclCheck(ncclGroupStart());
    dp_for_each_owned_part(dp, k, [&](Span part, int owner, int tensor) {
        if (gtp_grad_sums_over_data(&dp->mesh, tensor)) { return; }
        float *p = grads + part.begin;
        ncclCheck(ncclReduce(p, p, part.count, ncclFloat32, ncclSum, owner, comm, g_comm.dp_stream));
        any = 1;
    });
    ncclCheck(ncclGroupEnd());
    if (any) { comm_settle(comm, what, g_comm.timeout_s); }
}

// Group k's gradients are final where `final_event` was recorded on the compute stream: sum them over the ranks that
// read other tokens, on the DP stream (the DP sum onto the owning ranks under ZeRO-1). Returns the event that marks
// them summed.
static cudaEvent_t dp_reduce_group(DataParallel *dp, int k, float *grads, cudaEvent_t final_event) {
    cudaStream_t s = g_comm.dp_stream;
    cudaCheck(cudaStreamWaitEvent(s, final_event, 0));
    char what[TRACKED_WHAT_LEN];
    dp_group_what(dp, k, "sum of the gradients", what);
    if (dp->data_ranks > dp->ranks) { dp_all_reduce_spans(dp, k, grads, COMM_DATA, what); }
    if (dp->zero) {
        dp_reduce_onto_owners(dp, k, grads, what);
    } else if (dp->ranks > 1) {
        dp_all_reduce_spans(dp, k, grads, COMM_DP, what);
    }
    cudaCheck(cudaEventRecord(dp->reduced[k], s));
    comm_track(dp->reduced[k], what);
    return dp->reduced[k];
}

// ZeRO-1: group k's weights are updated on their owners where `updated` was recorded; each owner broadcasts its
// parts, and `updated` is recorded again behind that, so whoever waits for it sees the whole group on every rank.
// part_buffer(part, tensor) says what a part is broadcast as (DpPart): the weights the GEMMs read, or for an FP8 weight
// its FP8 codes or its fp32 masters (the ranks cast them).
typedef struct {
    void *ptr; // the part's first element
    ncclDataType_t type;
} DpPart;

template <typename F> static void dp_gather_group(DataParallel *dp, int k, F part_buffer, cudaEvent_t updated) {
    ncclComm_t comm = comm_get(COMM_DP);
    cudaStream_t s = g_comm.dp_stream;
    cudaCheck(cudaStreamWaitEvent(s, updated, 0));
    ncclCheck(ncclGroupStart());
    dp_for_each_owned_part(dp, k, [&](Span part, int owner, int tensor) {
        DpPart b = part_buffer(part, tensor);
        ncclCheck(ncclBroadcast(b.ptr, b.ptr, part.count, b.type, owner, comm, s));
    });
    ncclCheck(ncclGroupEnd());
    char what[TRACKED_WHAT_LEN];
    dp_group_what(dp, k, "broadcast of the updated weights", what);
    comm_settle(comm, what, g_comm.timeout_s);
    cudaCheck(cudaEventRecord(updated, s));
    comm_track(updated, what);
}

// The DP stream starts after what the compute stream has queued so far.
static void dp_after_compute(DataParallel *dp, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(dp->compute_mark, compute));
    cudaCheck(cudaStreamWaitEvent(g_comm.dp_stream, dp->compute_mark, 0));
}

// The compute stream continues after what the DP stream has queued so far (`what`, for a timeout's message).
static void compute_after_dp(DataParallel *dp, cudaStream_t compute, const char *what) {
    cudaCheck(cudaEventRecord(dp->dp_mark, g_comm.dp_stream));
    comm_track(dp->dp_mark, what);
    cudaCheck(cudaStreamWaitEvent(compute, dp->dp_mark, 0));
}

// In place on the device: x[0..n) summed over the DP group (the squared norms of the ZeRO slices).
static void dp_sum_on_device(DataParallel *dp, double *x, int n, cudaStream_t compute) {
    dp_after_compute(dp, compute);
    ncclCheck(ncclAllReduce(x, x, (size_t)n, ncclFloat64, ncclSum, comm_get(COMM_DP), g_comm.dp_stream));
    comm_settle(comm_get(COMM_DP), "the all-reduce of the squared gradient norm", g_comm.timeout_s);
    compute_after_dp(dp, compute, "the all-reduce of the squared gradient norm over the ZeRO slices");
}

// In place: every rank's slice of buf (dp_buffer_elems long) to every rank.
template <typename T> static void dp_all_gather(DataParallel *dp, T *buf, cudaStream_t compute, const char *what) {
    size_t S = dp->shards.slice;
    dp_after_compute(dp, compute);
    ncclCheck(ncclAllGather(buf + (size_t)dp->rank * S, buf, S, NcclType<T>::id, comm_get(COMM_DP),
                            g_comm.dp_stream));
    comm_settle(comm_get(COMM_DP), what, g_comm.timeout_s);
    compute_after_dp(dp, compute, what);
}

// Every rank's slice (slice, dp_moment_elems long) side by side into full (dp_buffer_elems long).
static void dp_gather_slices(DataParallel *dp, const float *slice, float *full, cudaStream_t compute,
                             const char *what) {
    dp_after_compute(dp, compute);
    ncclCheck(ncclAllGather(slice, full, dp->shards.slice, ncclFloat32, comm_get(COMM_DP), g_comm.dp_stream));
    comm_settle(comm_get(COMM_DP), what, g_comm.timeout_s);
    compute_after_dp(dp, compute, what);
}

#endif // LLMC_DATA_PARALLEL_CUH
