/*
 * step_schedule.cuh: the GPU step's stream and event protocol. train_gpt.cu queues the model's arithmetic; this says
 * on which stream each part runs and what it waits for. StepSchedule holds the step's events and flags, and every
 * wait and record between the compute, side, sums and update streams goes through a function here; the TP, DP, AG
 * and RS streams' events belong to their layers (tensor_parallel.cuh, data_parallel.cuh, gtp.cuh), whose functions
 * take or return the events below.
 *
 * Every stream is non-blocking; every cross-stream dependency is an event (cudaEventDisableTiming), never a
 * device-wide synchronization; nothing runs on the legacy default stream (test/test_stream_order.sh); a buffer is
 * written again only behind the event of its last reader. The host waits only through comm_wait_event /
 * comm_wait_stream (bounded once connected; plain synchronization on one process).
 *
 * The table (stream, priority: what it runs; what it waits for; what it records):
 * compute (g_cuda.stream, highest): the forward, the LM head and loss with the head's backward chunk by chunk, the
 *   backward's kernels and GEMMs, the norm's finish, token copies; set_params's writes and the FP8 casts after it
 *   (under --gtp-transport ce, the default, behind the GTP peers' read flags, then writing the ready flags:
 *   llmc/gtp.cuh). Waits for updated[k] before the forward reads group k (only while an update is pending:
 *   updated_wait); gathered[b] before a GTP weight's first GEMM; a TP chunk's chunk_done or tp_mark where it reads a
 *   collective's result; over the SP ring (llmc/tensor_parallel.cuh) the ring's flags (or, over NCCL, its
 *   stream) where a forward GEMM reads a gathered chunk in its slot and where a reduce-scatter's last hop adds the
 *   predecessor's partial sum, arrived[k] before it frees such a slot, sent (the ring's sends) after that add;
 *   the norm's sums over DP, TP and GTP ranks where it is split; gelu_recomputed before a recomputing layer's fc
 *   projection backward; fc_bias_done before it writes d fch again; fp8_transposed before the
 *   first FP8 input gradient; rs_done[b] before an RS buffer takes another gradient; side_done at the end of the
 *   backward (grads_final_join); under the update in backward, the last group's updated[k] before the norm's finish
 *   (AdamW wrote the partial sums: norm_wait_update). Its waits for communication (llmc/comm.cuh's CommSignal, the
 *   ring's ready flags) are polling kernels that time themselves (llmc/stream_flags.cuh). Records grads_final_event, head_grads_final, backward_done,
 *   dfch_ready, forward_done, fp8_history_done, norm_done, scalars_ready; over the SP ring a row-parallel forward's
 *   chunk_done[k] and ring_out once its reduce-scatter's sum is whole.
 * side (one below highest): the gradient norm's partial sums per group, on the update's last micro-step, unless
 *   AdamW runs in the backward and writes them itself. Waits for the group's ready point: sums_final, or behind it
 *   SP's TP sum and the DP sum (reduced[k]). Records side_done.
 * sums (one below highest): the fc bias gradient's column sums; the GELU recompute a layer ahead; the FP8 weights'
 *   transposes where AdamW wrote their codes (delayed scaling, the update after the backward); the join point of a
 *   group's final gradients. Waits for dfch_ready; forward_done (layer L-1's recompute); updated[k] (transposes);
 *   grads_final_event and GTP's rs_mark. Records fc_bias_done, gelu_recomputed, fp8_transposed, sums_final.
 * update (lowest): AdamW group by group (in the backward also the norm's partial sums); the FP8 weights' casts from
 *   the updated masters where AdamW did not write their codes (current scaling, ZeRO-1, the update in backward).
 *   Waits for norm_done (update after the backward), or the group's ready point (update in backward) and then
 *   fp8_history_done before the casts; on one data rank the rest group's AdamW but the embedding rows of the
 *   micro-batch's tokens first, behind head_grads_final, before the layers'; the first --update-after-layers
 *   layers' after the backward (behind backward_done), in forward order. Records updated[k]. Under --gtp-transport
 *   ce a layer's AdamW first waits for the GTP peers' read flags of its shards, and behind the group's last write
 *   (this stream's, or the DP stream's broadcast: updated_on[k]) the ready flags go to the peers (llmc/gtp.cuh).
 * DP (g_comm.dp_stream, highest): the gradient sums of each group over DP/data ranks; ZeRO-1's reduce onto owners
 *   and per-group broadcasts; the loss and stop-flag all-reduces; the fp8 amax all-reduce; the barrier. Waits for
 *   the group's ready point; updated[k] before a broadcast, after which it records updated[k] again.
 * TP (tp->stream, highest): the forward's row-parallel sums (SP: reduce-scatters) and SP's all-gathers per chunk;
 *   the backward's input-gradient sums; SP's sum of replicated gradients. Waits for compute_mark (tp_fork); over the
 *   ring, for ring_out behind each collective it hands the ring. Records chunk_done[k], tp_mark, ring_in.
 * ring (tp->ring.stream, highest; SP over the ring, llmc/peer_ring.cuh): every SP all-gather and reduce-scatter as
 *   exchanges with the ring neighbours (ce: copy-engine copies into the neighbours' slots, the flags' writes and
 *   waits; nccl: grouped ncclSend/ncclRecv on COMM_TP_RING, which no other stream uses), the reduce-scatter's adds
 *   but the last (the compute stream's).
 *   Waits for ring_in (a collective of the TP stream's order), compute_mark (a column-parallel layer's input
 *   gathered beside its GEMM), made[k] recorded on the compute stream (each GEMM chunk's product, which the
 *   reduce-scatter adds and passes on), and the neighbours (flags, or NCCL). Records arrived[k] (an all-gather's
 *   chunk k in place, which the compute stream waits for before that chunk's GEMM, or before it frees the slot the
 *   GEMM read), ring_out (behind a collective it runs for the TP stream), sent (behind a reduce-scatter's sends).
 * AG (gtp->ag, highest): GTP weight all-gathers into pool buffer b (and the transposed FP8 codes for the backward).
 *   Waits for released[b] (after the last GEMM that read the buffer's previous weight); updated[l] for the first
 *   forward after an update (updated_if_pending); compute_mark after a cast of the masters set from outside; under
 *   --gtp-transport ce each owner's ready flag before its pull (the pulls are copy-engine copies on this stream),
 *   after which it writes its read flag into every owner's memory. Records gathered[b].
 * RS (gtp->rs, highest): GTP weight-gradient reduce-scatters; GTP all-reduces (the norm's squares, the shards' FP8
 *   amaxes). Waits for rs_ready[b]; reduce_from. Records rs_done[b], rs_mark, reduced.
 *
 * Within a block's backward the weight gradients wait in a queue (WgradQueue) from their layer's input gradient
 * until a collective is in flight, and run beside it: they are the backward's only GEMMs that nothing later in the
 * block reads, so they are what fills the time of the TP sums and gathers (and, with GTP, of weight gathers and
 * gradient reduce-scatters). wgrad_take runs the oldest `most` of them at each such point (the point is the same
 * without TP, where no collective runs). A deferred GEMM reads its dout and inp when it runs, so every point where
 * one of those buffers is written again comes after a point that drains the queue (train_gpt.cu's block_backward
 * says which).
 */
#ifndef LLMC_STEP_SCHEDULE_CUH
#define LLMC_STEP_SCHEDULE_CUH

#include "comm.cuh"
#include "gtp.cuh"
#include "matmul.cuh"
#include "model_ops.h"

typedef struct {
    cudaEvent_t scalars_ready;     // the loss or the norm the host reads has been copied (host.scalars)
    // gradients final (grads_final): groups 0 .. L-1 are the layers' gradients, group L the rest
    int reduce_grads;              // this backward is the last micro-step's: sum each group over the DP ranks (DP > 1)
                                   // and, under SP, the replicated parameters' gradients over the TP ranks
    int norm_ready;                // the last backward left every group's partial sums in the norm's scratch
    int norm_in_backward;          // this backward is an update's last micro-step: it takes the partial sums
    cudaEvent_t grads_final_event;
    CommSignal side_done;
    cudaEvent_t head_grads_final;  // the rest group's gradients but the embedding's rows are final (the early AdamW)
    cudaEvent_t backward_done;     // every gradient is final (the deferred layers' AdamW)
    cudaEvent_t dfch_ready, fc_bias_done, sums_final; // the fc bias sum and grads_final
    cudaEvent_t forward_done, gelu_recomputed;        // the GELU recompute
    cudaEvent_t fp8_transposed;    // the FP8 weights' transposes of the last update are made (codes by AdamW)
    int fp8_transposes_pending;    // and the next backward waits for them
    cudaEvent_t fp8_history_done;  // the step's FP8 amaxes are in the history, by which the weights' casts scale
    // parameters updated: AdamW runs group by group on the update stream, the next forward waits for each group just
    // before it reads it
    cudaEvent_t norm_done;         // the clip factor AdamW reads is ready
    cudaEvent_t *updated;          // L + 1: group k's parameters are updated
    cudaStream_t *updated_on;      // L + 1: the stream that recorded updated[k] last
    int update_last;               // the group whose event was recorded last: it follows all the others
    int update_pending;            // AdamW was queued and the compute stream has not waited for all of it
    int update_in_backward;        // --update-in-backward
    int update_after_layers;       // --update-after-layers: layers 0 .. this - 1 update after the backward
    int num_layers;
    int norm_group;                // the last group whose AdamW in the backward wrote its norm's partial sums
    int update_started;            // the last micro-step's backward queues AdamW group by group (update_starts_early)
    UpdateArgs update_args;        // with these arguments, which the update after it must be given
} StepSchedule;

static void step_schedule_init(StepSchedule *s, int num_layers, int update_in_backward, int update_after_layers) {
    memset(s, 0, sizeof(*s));
    s->update_in_backward = update_in_backward;
    s->update_after_layers = update_after_layers;
    s->num_layers = num_layers;
    cudaCheck(cudaEventCreateWithFlags(&s->scalars_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&s->grads_final_event, cudaEventDisableTiming));
    comm_signal_create(&s->side_done);
    for (cudaEvent_t *e : {&s->dfch_ready, &s->fc_bias_done, &s->sums_final, &s->forward_done, &s->gelu_recomputed,
                           &s->fp8_transposed, &s->fp8_history_done, &s->head_grads_final, &s->backward_done}) {
        cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    cudaCheck(cudaEventCreateWithFlags(&s->norm_done, cudaEventDisableTiming));
    s->updated = (cudaEvent_t *)malloc_check((num_layers + 1) * sizeof(cudaEvent_t), "update events");
    s->updated_on = (cudaStream_t *)calloc_check((size_t)num_layers + 1, sizeof(cudaStream_t), "update streams");
    for (int k = 0; k <= num_layers; k++) {
        cudaCheck(cudaEventCreateWithFlags(&s->updated[k], cudaEventDisableTiming));
    }
}

// ----------------------------------------------------------------------------------------------------------------
// a micro-step

/*
 * AdamW of a group may start in the backward (grads_final) when nothing but the group's own final gradients decides
 * it: no clipping (the clip factor needs every group's gradients). In fp8 it then writes the masters only: the FP8
 * weights' codes take their scale from the history, which takes this step's amaxes only after the backward, so they
 * are cast from the masters after it (fp8_history_wait), on every layout. The same AdamW and the same casts either
 * way, so the same bits.
 */
static bool update_starts_early(const StepSchedule *s, const UpdateArgs *last) {
    return last && s->update_in_backward && last->grad_clip == 0.0f;
}

// What a micro-step's backward does beside its gradients: the last one of an update (last: the update's arguments)
// takes the norm's partial sums, sums the groups over ranks when `reduce`, and starts AdamW when it may.
static void step_schedule_micro_step(StepSchedule *s, const UpdateArgs *last, bool reduce) {
    s->reduce_grads = reduce;
    s->norm_in_backward = last != NULL;
    s->update_started = update_starts_early(s, last);
    if (s->update_started) { s->update_args = *last; }
}

// The host's copy of the loss or the norm: recorded behind the copy on stream st, waited for by the host.
static void scalars_record(StepSchedule *s, cudaStream_t st) { cudaCheck(cudaEventRecord(s->scalars_ready, st)); }

static void scalars_wait(StepSchedule *s, const char *what) { comm_wait_event(s->scalars_ready, what); }

// ----------------------------------------------------------------------------------------------------------------
// parameters updated

// The compute stream waits until group k's parameters are updated, if an update is pending.
static void updated_wait(StepSchedule *s, int group) {
    if (s->update_pending) { cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->updated[group], 0)); }
}

// The compute stream waits for the whole pending update: for whatever reads or writes the parameters, moments or
// gradients other than the forward, which waits group by group.
static void updated_join(StepSchedule *s) {
    updated_wait(s, s->update_last);
    s->update_pending = 0;
}

// Group k's event for a stream that reads its parameters outside the compute stream (a GTP gather), NULL when no
// update is pending.
static cudaEvent_t updated_if_pending(const StepSchedule *s, int group) {
    return s->update_pending ? s->updated[group] : (cudaEvent_t)NULL;
}

// Stream st waits for group k's update so far (a cast or transpose of its new weights).
static void updated_wait_on(StepSchedule *s, int group, cudaStream_t st) {
    cudaCheck(cudaStreamWaitEvent(st, s->updated[group], 0));
}

// Group k's update so far is published: recorded on the update stream, or (recorded) by ZeRO-1's broadcast on
// `stream`, the DP stream. The last one recorded follows all the others (updated_join).
static void updated_record(StepSchedule *s, int group) {
    cudaCheck(cudaEventRecord(s->updated[group], g_cuda.update));
    s->updated_on[group] = g_cuda.update;
    s->update_last = group;
}

static void updated_recorded(StepSchedule *s, int group, cudaStream_t stream) {
    s->updated_on[group] = stream;
    s->update_last = group;
}

/*
 * Under the update in backward a group's AdamW runs as soon as its gradients are final (grads_final), except the first
 * --update-after-layers layers': the update stream trails the backward (its AdamW runs in the gaps the GEMMs leave), by
 * ~4 layers at the end of Llama-3.2-1B's (2.2 ms on an H100), and the next forward reads layer 0 first, which the
 * backward finishes last. Those layers' AdamW is queued after the backward in forward order (update_after_backward),
 * so the forward waits for the embedding's update and layer 0's, not for the queue behind them; their norm partial
 * sums come from the side stream's pass, the others' from AdamW.
 */
static bool update_deferred(const StepSchedule *s, int group) {
    return group < s->num_layers && group < s->update_after_layers;
}

// AdamW wrote the norm's partial sums of the groups it updated in the backward: the norm's finish on the compute
// stream waits for the last of those (the side stream's pass wrote the others', grads_final_join).
static void norm_wait_update(StepSchedule *s) {
    cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->updated[s->norm_group], 0));
}

// The update's start: the norm is known on the compute stream (norm_done); AdamW after the backward waits for it.
static void norm_done_record(StepSchedule *s) { cudaCheck(cudaEventRecord(s->norm_done, g_cuda.stream)); }

static void update_wait_norm(StepSchedule *s) { cudaCheck(cudaStreamWaitEvent(g_cuda.update, s->norm_done, 0)); }

// The step's FP8 amaxes are in the history (fp8_end_step on the compute stream). The weights' casts after an update
// that ran in the backward scale by it and record the new weights' amaxes into the next step: the update stream waits
// for it (after the backward it waits for norm_done, which follows).
static void fp8_history_record(StepSchedule *s) {
    cudaCheck(cudaEventRecord(s->fp8_history_done, g_cuda.stream));
}

static void fp8_history_wait(StepSchedule *s) {
    cudaCheck(cudaStreamWaitEvent(g_cuda.update, s->fp8_history_done, 0));
}

// The update after the norm takes over an update that the last micro-step's backward started, which must have been
// given the same arguments; returns whether it started.
static bool update_take_started(StepSchedule *s, const UpdateArgs *u) {
    bool started = s->update_started;
    if (started && memcmp(&s->update_args, u, sizeof(*u)) != 0) {
        fail("the update's arguments (step %d, lr %g) are not the ones its last micro-step was given (step %d, lr %g), "
             "with which that backward already started it; pass forward_backward the update's own arguments",
             u->t, u->lr, s->update_args.t, s->update_args.lr);
    }
    s->update_started = 0;
    return started;
}

// Where AdamW wrote the FP8 weights' codes the weights' transposes are made on the sums stream; the next backward's
// first FP8 input gradient waits for them.
static void fp8_transposed_record(StepSchedule *s) {
    cudaCheck(cudaEventRecord(s->fp8_transposed, g_cuda.sums));
    s->fp8_transposes_pending = 1;
}

static void fp8_transposed_wait(StepSchedule *s) {
    if (!s->fp8_transposes_pending) { return; }
    cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->fp8_transposed, 0));
    s->fp8_transposes_pending = 0;
}

// ----------------------------------------------------------------------------------------------------------------
// the backward's sums stream: the fc bias sum and the GELU recompute

// The sums stream takes d fch (dfch_ready) for the fc bias sum, and says when it is done with it (fc_bias_done),
// which the compute stream waits for before writing d fch again.
static void dfch_to_sums(StepSchedule *s) {
    cudaCheck(cudaEventRecord(s->dfch_ready, g_cuda.stream));
    cudaCheck(cudaStreamWaitEvent(g_cuda.sums, s->dfch_ready, 0));
}

static void fc_bias_done_record(StepSchedule *s) { cudaCheck(cudaEventRecord(s->fc_bias_done, g_cuda.sums)); }

static void fc_bias_done_wait(StepSchedule *s) { cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->fc_bias_done, 0)); }

// The sums stream follows the forward (forward_done: layer L-1's recompute overwrites what it read); a recompute
// says when it is done (gelu_recomputed), which the compute stream waits for before the layer's fc projection.
static void forward_to_sums(StepSchedule *s) {
    cudaCheck(cudaEventRecord(s->forward_done, g_cuda.stream));
    cudaCheck(cudaStreamWaitEvent(g_cuda.sums, s->forward_done, 0));
}

static void gelu_recomputed_record(StepSchedule *s) { cudaCheck(cudaEventRecord(s->gelu_recomputed, g_cuda.sums)); }

static void gelu_recomputed_wait(StepSchedule *s) {
    cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->gelu_recomputed, 0));
}

// ----------------------------------------------------------------------------------------------------------------
// gradients final

// A group's gradients are final where the compute stream is (grads_final_event), the sums stream (its fc bias sum)
// and under GTP the RS stream (its reduce-scatters) are: the sums stream joins them and records sums_final, the
// group's ready point, which the reductions over ranks and then the side stream follow.
static cudaEvent_t grads_final_point(StepSchedule *s, Gtp *gtp) {
    cudaCheck(cudaEventRecord(s->grads_final_event, g_cuda.stream));
    cudaCheck(cudaStreamWaitEvent(g_cuda.sums, s->grads_final_event, 0));
    cudaEvent_t scattered = gtp_rs_mark(gtp);
    if (scattered) { cudaCheck(cudaStreamWaitEvent(g_cuda.sums, scattered, 0)); }
    cudaCheck(cudaEventRecord(s->sums_final, g_cuda.sums));
    return s->sums_final;
}

// Event e recorded where the compute stream is, for the update stream to wait for: head_grads_final after the head's
// and the final norm's backward (the rest group's gradients but the embedding rows of the micro-batch's tokens are
// final: train_gpt.cu's rest_can_split), backward_done after grads_final_join (every gradient: the deferred layers').
static cudaEvent_t compute_point(cudaEvent_t e) {
    cudaCheck(cudaEventRecord(e, g_cuda.stream));
    return e;
}

// The side stream (the group's norm partials) follows the group's ready point.
static void side_wait(cudaEvent_t ready) { cudaCheck(cudaStreamWaitEvent(g_cuda.side, ready, 0)); }

// An update that starts in the backward queues the group's AdamW behind its ready point; the next forward waits.
static void update_wait_ready(StepSchedule *s, cudaEvent_t ready) {
    cudaCheck(cudaStreamWaitEvent(g_cuda.update, ready, 0));
    s->update_pending = 1;
}

// The end of a backward: the compute stream waits for the side stream, hence for every reduction (timed as exposed
// communication when there were reductions), before anything reads the norm or writes the gradients again.
static void grads_final_join(StepSchedule *s) {
    if (s->reduce_grads) { // behind the reductions: count the wait as exposed communication
        comm_signal(&s->side_done, g_cuda.side);
        comm_compute_wait(g_cuda.stream, &s->side_done, "the gradient reductions, at the end of the backward");
    } else {
        cudaCheck(cudaEventRecord(s->side_done.event, g_cuda.side));
        cudaCheck(cudaStreamWaitEvent(g_cuda.stream, s->side_done.event, 0));
    }
    s->norm_ready = s->norm_in_backward;
}

// ----------------------------------------------------------------------------------------------------------------
// the deferred weight gradients

#define WGRAD_ALL BLOCK_LINEARS

template <typename floatX> struct WgradQueue {
    int linear[BLOCK_LINEARS]; // config.h's LIN_*
    const Linear<floatX> *lin[BLOCK_LINEARS];
    const floatX *dout[BLOCK_LINEARS], *inp[BLOCK_LINEARS];
    int count, N, accumulate;
};

template <typename floatX> static WgradQueue<floatX> wgrad_queue(int N, int accumulate) {
    WgradQueue<floatX> q;
    memset(&q, 0, sizeof(q));
    q.N = N;
    q.accumulate = accumulate;
    return q;
}

template <typename floatX>
static void wgrad_defer(WgradQueue<floatX> *q, int linear, const Linear<floatX> &lin, const floatX *dout,
                        const floatX *inp) {
    if (q->count == BLOCK_LINEARS) { fail("wgrad_defer: more than %d weight gradients deferred", BLOCK_LINEARS); }
    q->linear[q->count] = linear;
    q->lin[q->count] = &lin;
    q->dout[q->count] = dout;
    q->inp[q->count] = inp;
    q->count++;
}

// The oldest `most` deferred weight gradients, each run(linear, lin, dout, inp), oldest first, and off the queue.
template <typename floatX, typename Run> static void wgrad_take(WgradQueue<floatX> *q, int most, Run run) {
    int n = q->count < most ? q->count : most;
    for (int i = 0; i < n; i++) { run(q->linear[i], *q->lin[i], q->dout[i], q->inp[i]); }
    for (int i = n; i < q->count; i++) {
        q->linear[i - n] = q->linear[i];
        q->lin[i - n] = q->lin[i];
        q->dout[i - n] = q->dout[i];
        q->inp[i - n] = q->inp[i];
    }
    q->count -= n;
}

#endif // LLMC_STEP_SCHEDULE_CUH
