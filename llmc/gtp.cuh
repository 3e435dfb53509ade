/*
 * gtp.cuh: GTP weight sharding on the GPU (llmc/gtp_plan.h has the arithmetic and the chain): the all-gathers that
 * materialize a sharded weight into a pool buffer before its layer runs, and the reduce-scatters that leave each rank
 * its shard of a weight gradient.
 *
 * Two streams of their own, so neither kind of collective queues behind the other or behind TP's: AG (gathers, on
 * COMM_GTP) and RS (reduce-scatters, on COMM_GTP_RS: a communicator serves one stream). Every dependency is an event:
 *   gather into buffer b: AG waits released[b] (the compute stream recorded it after the last GEMM that read the
 *     buffer's previous weight) and, for the first forward after an update, the weight's AdamW group; then the
 *     all-gather of the G shards (and for an FP8 weight in the backward the transposed copy of the gathered codes);
 *     gathered[b] after it. The compute stream waits for gathered[b] before the weight's first GEMM (timed: a gather
 *     the compute stream waits for is exposed communication).
 *   weight gradient: the GEMM writes the whole (padded) gradient into an RS buffer on the compute stream (on the
 *     micro-steps after the first it adds to what gtp_rs_buffer put there: this rank's shard gradient so far at its
 *     rows), RS waits for it, reduce-scatters it over the GTP group into this rank's fp32 shard gradient, and records
 *     rs_done[b], which the compute stream waits for before the buffer takes another gradient. gtp_rs_mark lets a
 *     reader of the shard gradients (grads_final) wait for all reduce-scatters queued so far.
 *   all-reduce over the group (the squared norm of the shards' gradients, the shards' amaxes of an FP8 weight under
 *     current scaling): on the RS stream, which is idle from the end of a backward to the next one's first
 *     reduce-scatter, behind what the calling stream queued; the caller's stream waits for its event.
 * The pool's buffers are bytes: a weight is gathered in its compute precision, or as FP8 codes (llmc/gtp_plan.h).
 * With one rank (--gtp-materialize under --gtp 1) the same calls run through a communicator of one rank: a gather and
 * a reduce-scatter are copies, and the run gives the plain path's bits (test/run_gpu_tests.sh checks it).
 *
 * The gathers' transport (--gtp-transport): copy-engine pulls from the peers' weights mapped into this process (ce,
 * the default, measured faster than NCCL's on H200: gtp_ce_connect, where every rank of the GTP group is on this host
 * and can map the others' GPU memory, else NCCL and rank 0 says why), or NCCL's all-gather (nccl). The
 * reduce-scatters and all-reduces stay NCCL's either way.
 *
 * Copy-engine gathers (ce). Every GTP rank's weights (the compute-precision copy, whose room holds an FP8 layer's
 * codes) lie in one cudaMalloc allocation of the same layout, so a shard is at the same offset in each: at start-up
 * each rank maps every peer's allocation and its flags (llmc/peer_memory.cuh). A gather of buffer b (weight w of
 * layer l) on the AG stream: for each rank p, from this one round the group (so the ranks do not all pull from one
 * peer at once): wait until ready[p][l] >= version[l], copy p's shard (its mapped base + the shard's offset) into
 * the buffer at p's place (cudaMemcpyAsync: a copy engine, no SMs; this rank's own shard is a copy too); then write
 * read[me][l] = the gather's number in every rank's flags; then the FP8 transpose as ever, then gathered[b].
 * One AG stream, not one per peer: at G = 2 a gather pulls from one peer (the own copy is local), and the next
 * gather of the prefetch chain queues on the same stream anyway; at G >= 4 the pulls from several peers run one
 * after another, each over its own NVLink path (to be measured against NCCL: dev/bench_mgpu.sh, 1558M_gtp4 beside
 * 1558M_gtp4_nccl).
 *
 * Hazards, and the two flags that close them (a layer's four weights are one flag group: one update writes them):
 *   read after write: a rank may pull owner p's shard of layer l only once p wrote it (its update, or its cast, or a
 *     set_params, of the version the reader expects). Every such write is a publication: the stream that wrote last
 *     (the update stream, or under ZeRO-1 without FP8 the DP stream's broadcast: the stream that recorded the group's
 *     updated[l]; the compute stream for set_params and the casts after it) writes, behind that work,
 *     ready[me][l] = version[l] into every rank's flags (gtp_published). A reader's AG stream waits for its own copy
 *     of that flag >= its own version[l] before the pull. Every rank publishes at the same points of the same
 *     program (each update, set_params, the first forward's casts), so version[l] counts alike everywhere.
 *   write after read: the owner must not overwrite its shard of layer l (the next update's AdamW or cast, under
 *     ZeRO-1 the broadcast behind it, a set_params) while a peer may still pull the old one: a slow peer's backward
 *     may gather layer l while the owner, ahead, updates layer l in its backward. Each reader, after a gather's
 *     pulls, writes read[me][l] = issued[l] (the gathers of layer l it issued so far) into every owner's flags; the
 *     stream that writes the shard first waits until every rank's read[p][l] >= this rank's own issued[l]
 *     (gtp_before_write). Every rank issues the same gathers in the same order (the same passes: training,
 *     validation and evaluation forwards, samples, the GEMM tuning pass), so issued[l] counts alike everywhere.
 *   no cycle: every rank queues the same operations in the same order (one SPMD program). A wait queued at point P
 *     of it is for work the peer queued at a point before P (a publication or a gather the waiter itself counted
 *     before P), and that work waits, on its own streams and events, only for work queued before it: its stream's
 *     earlier work, events recorded earlier, and flag waits that are again for earlier points. By induction on the
 *     points every wait is met (a hardware queue that two streams share runs their work in the order it was queued,
 *     so the induction holds there too). A flag's write waits for nothing itself: it follows the work it announces
 *     on that work's stream, and no new stream (no new wait on an event) is added.
 *   Flags are 32-bit counters compared modulo 2^32 (cuStreamWaitValue32 GEQ), written into the peer's memory and
 *     waited for in one's own; a flag that never comes (a dead or hung peer) stalls the AG stream or the writer's:
 *     gathered[b] and the event behind each write wait are tracked (comm_track), so the host's bounded waits name
 *     them and the watchdog ends the job. With one rank (--gtp-materialize) the rank is its own peer: its own
 *     weights and flags, no mapping, the same protocol.
 */
#ifndef LLMC_GTP_CUH
#define LLMC_GTP_CUH

#include "comm.cuh"
#include "fp8.cuh"
#include "gtp_plan.h"
#include "peer_memory.cuh"

#define GTP_RS_BUFFERS 2 // one gradient reduce-scattered while the next GEMM writes the other

// The copy-engine gathers' state (gtp_ce_connect; on 0: NCCL's all-gathers).
typedef struct {
    int on;
    int layers;                 // flag groups: one a layer
    const char *base;           // this rank's weights (one allocation, bytes long): the shards the gathers read
    size_t bytes;
    const char **peer_base;     // G: every GTP rank's weights as this rank addresses them (its own: base)
    uint32_t *flags;            // mine: ready[G][layers] (written by each owner), read[G][layers] (by each reader):
                                // llmc/gtp_plan.h's gtp_flag_index
    uint32_t **peer_flags;      // G: every rank's flags, mapped (its own: flags)
    GtpFlagCounts counts;       // this rank's publications and gathers of each layer (llmc/gtp_plan.h)
    cudaEvent_t *write_ok;      // layers: behind the wait for the peers' reads before a write (tracked)
    unsigned wait_flags;        // llmc/stream_flags.cuh's flag_wait_flags
} GtpPeers;

typedef struct {
    int active;             // the GTP path runs: --gtp > 1, or --gtp-materialize
    int size, rank;         // the GTP group
    cudaStream_t ag, rs;
    GtpChain chain;
    GtpPass pass;
    int depth;
    uint8_t *slot[GTP_PREFETCH_MAX + 1]; // the pool: materialized weights, gtp_buffer_bytes each
    CommSignal gathered[GTP_PREFETCH_MAX + 1];
    cudaEvent_t released[GTP_PREFETCH_MAX + 1];
    float *rs_buf[GTP_RS_BUFFERS];    // whole weight gradients, the largest padded one each
    cudaEvent_t rs_ready[GTP_RS_BUFFERS];
    CommSignal rs_done[GTP_RS_BUFFERS];
    int rs_next;
    cudaEvent_t rs_mark, compute_mark, reduce_from;
    CommSignal reduced;
    GtpPeers ce;            // --gtp-transport ce
} Gtp;

// slot_bytes: a pool buffer (gtp_buffer_bytes); gathered_elems: the largest padded weight (G x shard rows x cols).
static void gtp_init(Gtp *g, const Mesh *m, int materialize, int depth, size_t slot_bytes, size_t gathered_elems) {
    memset(g, 0, sizeof(*g));
    g->active = m->gtp > 1 || materialize;
    g->size = m->gtp;
    g->rank = m->gtp_rank;
    if (!g->active) { return; }
    g->depth = depth;
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g->ag, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g->rs, cudaStreamNonBlocking, greatest));
    for (int b = 0; b <= depth; b++) {
        g->slot[b] = (uint8_t *)cuda_alloc(slot_bytes, "GTP materialized weights");
        comm_signal_create(&g->gathered[b]);
        cudaCheck(cudaEventCreateWithFlags(&g->released[b], cudaEventDisableTiming));
    }
    for (int b = 0; b < GTP_RS_BUFFERS; b++) {
        g->rs_buf[b] = (float *)cuda_alloc(gathered_elems * sizeof(float), "GTP weight gradients");
        cudaCheck(cudaEventCreateWithFlags(&g->rs_ready[b], cudaEventDisableTiming));
        comm_signal_create(&g->rs_done[b]);
    }
    for (cudaEvent_t *e : {&g->rs_mark, &g->compute_mark, &g->reduce_from}) {
        cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    comm_signal_create(&g->reduced);
}

// The AG stream starts after what the compute stream has queued so far.
static void gtp_after_compute(Gtp *g, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(g->compute_mark, compute));
    cudaCheck(cudaStreamWaitEvent(g->ag, g->compute_mark, 0));
}

// An FP8 weight the backward reads: the transpose of its gathered rows x cols codes, at byte `at` of the buffer.
typedef struct {
    int rows, cols;
    size_t at;
} GtpTransposed;

// Rank p's flag of `kind` for layer l in the flags at f.
static inline uint32_t *gtp_flag(const Gtp *g, uint32_t *f, int kind, int p, int l) {
    return f + gtp_flag_index(g->size, g->ce.layers, kind, p, l);
}

// The copy-engine gather of the G shards of layer `group`'s weight at `shard` (this rank's) into buffer b, on the AG
// stream: each rank's pull once it published the version this rank expects, then the read flags (see the header).
static void gtp_ce_pull(Gtp *g, int b, int group, const void *shard, size_t shard_bytes) {
    GtpPeers *c = &g->ce;
    const char *at = (const char *)shard;
    if (at < c->base || (size_t)(at - c->base) + shard_bytes > c->bytes) {
        fail("internal error: a GTP shard of layer %d lies outside the weights' allocation the peers map", group);
    }
    size_t off = (size_t)(at - c->base);
    GtpPull n = gtp_flags_pull(&c->counts, group);
    for (int j = 0; j < g->size; j++) {
        int p = (g->rank + j) % g->size;
        flag_wait(g->ag, gtp_flag(g, c->flags, GTP_READY, p, group), n.ready, c->wait_flags);
        cudaCheck(cudaMemcpyAsync(g->slot[b] + (size_t)p * shard_bytes, c->peer_base[p] + off, shard_bytes,
                                  cudaMemcpyDeviceToDevice, g->ag));
    }
    for (int p = 0; p < g->size; p++) {
        flag_write(g->ag, gtp_flag(g, c->peer_flags[p], GTP_READ, g->rank, group), n.read);
    }
}

// Gathers the G shards of layer `group`'s weight (shard_bytes each; this rank's at `shard`) into buffer b, after
// `after` (an update's event, or NULL) and after the buffer's previous weight was released; with t, the transposed
// copy of the gathered FP8 codes is made too before the buffer counts as gathered. An all-gather moves bits, not
// values, so bytes carry any element type (NCCL itself runs every all-gather as one of bytes).
static void gtp_gather(Gtp *g, int b, int group, const void *shard, size_t shard_bytes, const GtpTransposed *t,
                       cudaEvent_t after, const char *what) {
    cudaCheck(cudaStreamWaitEvent(g->ag, g->released[b], 0));
    if (after) { cudaCheck(cudaStreamWaitEvent(g->ag, after, 0)); }
    if (g->ce.on) {
        gtp_ce_pull(g, b, group, shard, shard_bytes);
    } else {
        ncclCheck(ncclAllGather(shard, g->slot[b], shard_bytes, ncclUint8, comm_get(COMM_GTP), g->ag));
        comm_settle(comm_get(COMM_GTP), what, g_comm.timeout_s);
    }
    if (t) { fp8_transpose(g->slot[b], g->slot[b] + t->at, t->rows, t->cols, t->rows, 0, g->ag); }
    comm_signal(&g->gathered[b], g->ag);
    comm_track(g->gathered[b].event, what);
}

// Stream s is about to write this rank's shards of layer `group` (an update, a cast, set_params): it first waits
// until every rank has pulled them as often as this rank gathered them (write after read; nothing under NCCL, whose
// all-gathers the writers' events already order).
static void gtp_before_write(Gtp *g, int group, cudaStream_t s) {
    GtpPeers *c = &g->ce;
    if (!c->on) { return; }
    for (int p = 0; p < g->size; p++) {
        flag_wait(s, gtp_flag(g, c->flags, GTP_READ, p, group), gtp_flags_before_write(&c->counts, group),
                  c->wait_flags);
    }
    char what[TRACKED_WHAT_LEN];
    snprintf(what, sizeof(what), "the wait for the GTP peers' pulls of layer %d's weights before they are rewritten",
             group);
    cudaCheck(cudaEventRecord(c->write_ok[group], s));
    comm_track(c->write_ok[group], what);
}

// This rank's shards of layer `group` are written by the work stream s queued so far: the next version, announced to
// every rank behind that work (read after write: the pulls of this version wait for it).
static void gtp_published(Gtp *g, int group, cudaStream_t s) {
    GtpPeers *c = &g->ce;
    if (!c->on) { return; }
    uint32_t v = gtp_flags_published(&c->counts, group);
    for (int p = 0; p < g->size; p++) {
        flag_write(s, gtp_flag(g, c->peer_flags[p], GTP_READY, g->rank, group), v);
    }
}

// The compute stream waits until buffer b holds its weight.
static void gtp_wait_gathered(Gtp *g, int b, cudaStream_t compute) {
    comm_compute_wait(compute, &g->gathered[b], "the GTP all-gathers of the weights");
}

// Buffer b's weight is read by nothing queued after this on the compute stream.
static void gtp_release(Gtp *g, int b, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(g->released[b], compute));
}

// Zeroes n floats at p on the stream (none when n is 0).
static void gtp_zero(float *p, size_t n, cudaStream_t stream) {
    if (n > 0) { cudaCheck(cudaMemsetAsync(p, 0, n * sizeof(float), stream)); }
}

/*
 * The next RS buffer, once its previous gradient was reduce-scattered, made ready for the GEMM that writes this
 * rank's whole gradient of a weight of shape s into it (its rows x cols; another weight's gradient may have left
 * values anywhere). On the first micro-step of a step (!accumulate) the GEMM writes (beta 0) and only the padding
 * rows are zeroed. On the others it adds (beta 1) to what is here: this rank's shard gradient so far (shard_grad) at
 * the shard's rows, zeros at the other ranks', so the reduce-scatter that follows leaves the shard so far plus every
 * rank's new gradient in shard_grad. With one rank that is the plain path's own GEMM, beta and C: its bits whatever
 * the GEMM's epilogue rounds (an FP8 GEMM scales its sum before adding C, where a separate add after a GEMM with
 * beta 0 could round differently from one fused multiply-add).
 */
static float *gtp_rs_buffer(Gtp *g, const GtpShape *s, const float *shard_grad, int accumulate, cudaStream_t compute) {
    int b = g->rs_next;
    float *buf = g->rs_buf[b];
    size_t real = s->rows * s->cols, padded = s->padded_rows * s->cols, shard = s->shard_rows * s->cols;
    comm_compute_wait(compute, &g->rs_done[b], "the GTP reduce-scatters of the weight gradients (a buffer's last)");
    if (!accumulate) {
        gtp_zero(buf + real, padded - real, compute);
        return buf;
    }
    size_t mine = (size_t)g->rank * shard; // the shard's first element: the reduce-scatter's block of this rank
    gtp_zero(buf, mine, compute);
    cudaCheck(cudaMemcpyAsync(buf + mine, shard_grad, shard * sizeof(float), cudaMemcpyDeviceToDevice, compute));
    gtp_zero(buf + mine + shard, padded - mine - shard, compute);
    return buf;
}

// The gradient the compute stream just wrote into the current RS buffer (gtp_rs_buffer), summed over the GTP group
// into this rank's shard gradient (shard_elems long).
static void gtp_reduce_scatter(Gtp *g, float *shard_grad, size_t shard_elems, cudaStream_t compute, const char *what) {
    int b = g->rs_next;
    g->rs_next = (b + 1) % GTP_RS_BUFFERS;
    cudaCheck(cudaEventRecord(g->rs_ready[b], compute));
    cudaCheck(cudaStreamWaitEvent(g->rs, g->rs_ready[b], 0));
    ncclCheck(ncclReduceScatter(g->rs_buf[b], shard_grad, shard_elems, ncclFloat32, ncclSum, comm_get(COMM_GTP_RS),
                                g->rs));
    comm_settle(comm_get(COMM_GTP_RS), what, g_comm.timeout_s);
    comm_signal(&g->rs_done[b], g->rs);
    comm_track(g->rs_done[b].event, what);
}

// An event behind every reduce-scatter queued so far (NULL when the path is off).
static cudaEvent_t gtp_rs_mark(Gtp *g) {
    if (!g->active) { return NULL; }
    cudaCheck(cudaEventRecord(g->rs_mark, g->rs));
    return g->rs_mark;
}

// In place on the device: x[0..n) (of `type`) reduced with op over the GTP group, on the RS stream behind what
// `stream` queued so far. Returns the signal behind it, which the reader's stream waits for.
static const CommSignal *gtp_all_reduce(Gtp *g, void *x, size_t n, ncclDataType_t type, ncclRedOp_t op,
                                        cudaStream_t stream, const char *what) {
    cudaCheck(cudaEventRecord(g->reduce_from, stream));
    cudaCheck(cudaStreamWaitEvent(g->rs, g->reduce_from, 0));
    ncclCheck(ncclAllReduce(x, x, n, type, op, comm_get(COMM_GTP_RS), g->rs));
    comm_settle(comm_get(COMM_GTP_RS), what, g_comm.timeout_s);
    comm_signal(&g->reduced, g->rs);
    comm_track(g->reduced.event, what);
    return &g->reduced;
}

// ----------------------------------------------------------------------------------------------------------------
// the copy-engine gathers' set-up

static const char *const GTP_CE_DRIVER_USER = "GTP's copy-engine gathers; pass --gtp-transport nccl";

/*
 * With transport "ce" (the default): the copy-engine gathers over the GTP group, where every rank of it can map
 * every other's GPU memory (llmc/peer_memory.cuh; a group of one is its own peer: nothing to map), else NCCL's
 * all-gathers. weights: this rank's allocation the gathers read (bytes long, the same layout on every rank, written
 * before this is called); layers: the flag groups. Every rank calls it (with GTP ranks on several groups, each decides
 * for itself; the world then passes one barrier, after which peers may write each other's flags); rank 0 says which
 * transport runs, when log is set.
 */
static void gtp_ce_connect(Gtp *g, const char *transport, void *weights, size_t bytes, int layers, int log) {
    if (!g->active) { return; }
    const char *why = "--gtp-transport nccl";
    int want = strcmp(transport, "ce") == 0, G = g->size;
    GtpPeers *c = &g->ce;
    if (want) {
        const char *what = "the exchange of the GTP ranks' weight mappings";
        why = "the GTP ranks cannot map each other's GPU memory: another node, a GPU this process cannot see, or no "
              "peer access; --gtp-transport ce needs them on one node with peer access";
        int *peers = (int *)calloc_check((size_t)G, sizeof(int), "GTP peers"), n = 0;
        for (int p = 0; p < G; p++) {
            if (p != g->rank) { peers[n++] = p; }
        }
        c->on = G == 1 || peer_group_mappable(G, g->rank, COMM_GTP, peers, n, what);
        free(peers);
        if (c->on) {
            flag_driver_load(GTP_CE_DRIVER_USER);
            c->layers = layers;
            c->base = (const char *)weights;
            c->bytes = bytes;
            size_t flag_bytes = gtp_flag_count(G, layers) * sizeof(uint32_t);
            cudaCheck(cudaMalloc(&c->flags, flag_bytes)); // cudaMalloc itself: IPC exports only its allocations
            g_cuda_allocated_bytes += flag_bytes;
            cudaCheck(cudaMemsetAsync(c->flags, 0, flag_bytes, g->ag));
            comm_wait_stream(g->ag, "zeroing the GTP gathers' flags");
            c->peer_base = (const char **)calloc_check((size_t)G, sizeof(char *), "GTP peer weights");
            c->peer_flags = (uint32_t **)calloc_check((size_t)G, sizeof(uint32_t *), "GTP peer flags");
            c->peer_base[g->rank] = c->base;
            c->peer_flags[g->rank] = c->flags;
            if (G > 1) {
                PeerInfo *w = peer_exchange_handles(weights, bytes, G, g->rank, COMM_GTP, what);
                PeerInfo *f = peer_exchange_handles(c->flags, flag_bytes, G, g->rank, COMM_GTP, what);
                for (int p = 0; p < G; p++) {
                    if (p == g->rank) { continue; }
                    if (w[p].bytes != bytes) {
                        fail("GTP rank %d's weights take %zu bytes where this rank's take %zu: the GTP ranks must run "
                             "the same model and options", p, w[p].bytes, bytes);
                    }
                    c->peer_base[p] = (const char *)peer_open(&w[p]);
                    c->peer_flags[p] = (uint32_t *)peer_open(&f[p]);
                }
                free(w);
                free(f);
            }
            c->counts.version = (uint32_t *)calloc_check((size_t)layers, sizeof(uint32_t), "GTP flag counts");
            c->counts.issued = (uint32_t *)calloc_check((size_t)layers, sizeof(uint32_t), "GTP flag counts");
            c->write_ok = (cudaEvent_t *)calloc_check((size_t)layers, sizeof(cudaEvent_t), "GTP flag events");
            for (int l = 0; l < layers; l++) {
                cudaCheck(cudaEventCreateWithFlags(&c->write_ok[l], cudaEventDisableTiming));
            }
            c->wait_flags = flag_wait_flags(g_cuda_device);
        }
        // no rank writes a peer's flags before every rank has zeroed its own and mapped the others'; every rank of
        // every group passes it, whichever way its group went
        if (G > 1) { comm_barrier("the GTP gathers' set-up", 0); }
    }
    if (log) {
        if (c->on) {
            printf("GTP weight gathers: copy engines over peer memory (--gtp-transport ce)\n");
        } else {
            printf("GTP weight gathers: NCCL (%s)\n", why);
        }
    }
}

#endif // LLMC_GTP_CUH
