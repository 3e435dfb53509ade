/*
 * comm.cuh: NCCL for the process mesh, and the watchdog that turns a dead peer into an error instead of a hang.
 *
 * gpu_launch() finds this process's place in the job (llmc/bootstrap.h) and gives the trainer its Launcher.
 * comm_connect(), once every rank has checked its options: this rank's GPU (local rank modulo the visible GPUs),
 * rank 0's ncclUniqueId to every rank over the bootstrap, the world communicator (ncclCommInitRankConfig), and
 * the TP, GTP, DP and data groups by ncclCommSplit with llmc/mesh.h's colors and keys. One world is one process: then
 * nothing here runs and no NCCL call is made.
 *
 * No wait is unbounded. Communicators are non-blocking (ncclConfig_t.blocking = 0), and every NCCL call is
 * followed by comm_settle(), a bounded poll of ncclCommGetAsyncError. Collectives run on the DP stream; the host
 * waits for a value (a loss, the norm) only through comm_wait_event(), which fails after TRAIN_GPT_NCCL_TIMEOUT
 * seconds (default NCCL_DEFAULT_TIMEOUT_S) naming what it waited for and the first collective it saw incomplete.
 * The watchdog, a host thread, every WATCHDOG_POLL_MS: ncclCommGetAsyncError on every communicator, and on the
 * TCP bootstrap path the connection to rank 0, which the kernel closes when a process dies (kill -9 included).
 * Rank 0 sees a rank's connection close, tells the other ranks which one it was, and each fails with one line.
 * (Under mpirun, the launcher ends the job when a rank dies; the timeout covers the rest, e.g. a GPU that hangs.)
 * Every fatal error (fail() through g_fail_hook, or the watchdog) aborts all communicators (ncclCommAbort, all at
 * once) first, so no local collective keeps spinning; an alarm of ABORT_GRACE_S seconds ends the process, with a line
 * saying so, if an abort hangs.
 */
#ifndef LLMC_COMM_CUH
#define LLMC_COMM_CUH

#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include "bootstrap.h"
#include "cuda_common.cuh"
#include "mesh.h"
#include "model_ops.h"
#include "stream_flags.cuh"

#define NCCL_TIMEOUT_ENV "TRAIN_GPT_NCCL_TIMEOUT"
#define NCCL_DEFAULT_TIMEOUT_S 30.0  // a step's collectives finish in well under a second; a dead peer, never
#define LONG_WAIT_TIMEOUT_S 3600.0   // a barrier behind slow work of one rank (rank 0 writing a checkpoint)
#define WATCHDOG_POLL_MS 100
#define ABORT_GRACE_S 10             // seconds an abort may take before SIGALRM ends the process
#define SETTLE_SPIN_S 1e-3           // a non-blocking NCCL call's launch is polled without sleeping this long
#define SETTLE_POLL_US 100           // then with this sleep between polls
#define EVENT_POLL_US 20             // between polls of an event the host waits for (a step is milliseconds)
#define COMM_SCALARS_MAX LAUNCHER_SUM_MAX // doubles one sum_over_data_ranks call may carry
#define TRACKED_MAX 256              // collectives in flight that a timeout can name
#define TRACKED_WHAT_LEN 128
#define COMM_SITES_MAX 64            // distinct collectives the exposed-communication report names (comm_site)
#define COMM_WAIT_SLOTS (COMM_SITES_MAX + 1) // the sites', and one for the waits of collectives past them
#define COMM_SIGNAL_BLOCK 256        // the signals' counters are allocated this many at a time (comm_signal_create)
#define COMM_DRIVER_USER "the compute stream's waits for collectives" // flag_driver_load's user

// COMM_GTP_RS: a second communicator of the GTP group, for the reduce-scatters on their own stream: operations of one
// communicator must not run on two streams at once (each rank would be free to order them differently). COMM_TP_RING:
// the same for the TP group's SP ring over NCCL send/recv (llmc/peer_ring.cuh), made only for it (comm_split_tp_ring),
// hence last: comm_connect makes those before it.
typedef enum { COMM_WORLD, COMM_TP, COMM_GTP, COMM_DP, COMM_DATA, COMM_GTP_RS, COMM_TP_RING, NUM_COMMS } CommId;
#define COMMS_AT_CONNECT COMM_TP_RING

template <typename T> struct NcclType;
template <> struct NcclType<float> {
    static constexpr ncclDataType_t id = ncclFloat32;
};
template <> struct NcclType<bf16> {
    static constexpr ncclDataType_t id = ncclBfloat16;
};
template <> struct NcclType<double> {
    static constexpr ncclDataType_t id = ncclFloat64;
};

// One collective's exposed time over the run's steps after the first (comm_exposed_report).
typedef struct {
    char what[TRACKED_WHAT_LEN];
    double ms;
    long waits;
} CommSite;

/*
 * A point on a stream that the compute stream waits for (a collective queued there is done): an event, which other
 * streams wait for and the host's bounded waits track, and a counter in this GPU's memory that the stream writes as
 * it passes (comm_signal), which the compute stream's timed wait polls (comm_compute_wait). Where the point was last
 * put on the compute stream itself, stream order is the wait. A signal's counter is written by one stream (or
 * streams that are ordered with each other): its values only grow.
 */
typedef struct {
    cudaEvent_t event;
    uint32_t *flag;
    uint32_t count;      // the value written at the last comm_signal
    cudaStream_t stream; // where the last comm_signal put it
} CommSignal;
static const char *const COMM_NAMES[NUM_COMMS] = {"world", "tp", "gtp", "dp", "data", "gtp-rs", "tp-ring"};

typedef struct {
    cudaEvent_t done;
    char what[TRACKED_WHAT_LEN];
} Tracked;

typedef struct {
    Bootstrap boot;
    Mesh mesh;
    int connected;
    double timeout_s;               // comm_wait_event's default
    ncclComm_t comms[NUM_COMMS];
    int num_live;                   // comms[0..num_live) exist (the watchdog and aborts read it, under lock)
    pthread_mutex_t lock;
    int aborting;                   // set once: the first fatal error aborts the communicators
    pthread_t watchdog;
    int watchdog_running, stop, closing; // closing: a normal end, peers may now close their connections
    cudaStream_t dp_stream;         // the data-parallel collectives and the host's scalar reductions
    cudaEvent_t sums_done, barrier_done, stream_done;
    cudaEvent_t world_in;           // comm_world_reduce_on_device's start, and its end:
    CommSignal world_out;
    double *d_sums, *h_sums;        // sum_over_data_ranks staging (device, pinned host)
    int *d_barrier;
    Tracked tracked[TRACKED_MAX];
    int num_tracked;
    // the compute stream's timed waits (flag_wait_timed), by site: ns waited and waits, a site's at [i] and its count
    // at [COMM_WAIT_SLOTS + i], the last slot for waits past COMM_SITES_MAX sites; device counters, their pinned
    // copy, and the values at the last comm_exposed_ms_take
    unsigned long long *d_wait, *h_wait, taken[2 * COMM_WAIT_SLOTS];
    cudaEvent_t wait_copied;
    uint32_t *d_flags;              // the signals' counters: the block being handed out (comm_signal_create)
    int num_flags;                  // and how many of it are taken
    CommSite sites[COMM_SITES_MAX]; // what those waited for, summed over the takes after the first
    int num_sites, takes;
} Comm;

static Comm g_comm = {};

#define ncclCheck(call) nccl_check_((call), #call, __FILE__, __LINE__)
static inline void nccl_check_(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess && r != ncclInProgress) {
        fail("NCCL error '%s' at %s:%d (%s): %s", ncclGetErrorString(r), file, line, what, ncclGetLastError(NULL));
    }
}

static inline double comm_clock_s(void) { return bootstrap_clock_s(); }

// Where the watchdog has begun to end the process (it printed the cause and is aborting the communicators, then
// exits), the main thread's waits stop here instead of timing out into a second error line, the consequence of
// the first, and instead of polling communicators the abort is tearing down.
static void comm_park_if_aborting(void) {
    if (!__atomic_load_n(&g_comm.aborting, __ATOMIC_ACQUIRE)) { return; }
    for (;;) { pause(); } // the watchdog's _exit, or the abort alarm's, ends the process
}

// One poll of a non-blocking call on comm: returns its state, or fails on an NCCL error or past the deadline.
static ncclResult_t comm_poll(ncclComm_t comm, const char *what, double deadline, double timeout_s) {
    comm_park_if_aborting();
    ncclResult_t st;
    ncclCheck(ncclCommGetAsyncError(comm, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
        fail("NCCL error '%s' during %s: a peer rank failed or the network broke (see the other ranks' lines)",
             ncclGetErrorString(st), what);
    }
    if (st == ncclInProgress && comm_clock_s() > deadline) {
        fail("NCCL did not finish %s within %g s: a peer rank is missing or stuck; check that every rank was "
             "launched (raise %s if it is only slow)", what, timeout_s, NCCL_TIMEOUT_ENV);
    }
    return st;
}

// Waits until the non-blocking communicator has finished the call just made (ncclInProgress -> ncclSuccess).
static void comm_settle(ncclComm_t comm, const char *what, double timeout_s) {
    double deadline = comm_clock_s() + timeout_s;
    double spin_until = comm_clock_s() + SETTLE_SPIN_S;
    while (comm_poll(comm, what, deadline, timeout_s) == ncclInProgress) {
        // NCCL launches a non-blocking call's kernels from its own thread, typically within microseconds; a sleep
        // per call (hundreds of collectives a step under TP) would leave the GPU waiting for the host
        if (comm_clock_s() < spin_until) {
            sched_yield();
        } else {
            usleep(SETTLE_POLL_US);
        }
    }
}

// A non-blocking ncclCommSplit may return before NCCL's own thread has made the new communicator, with the handle
// still NULL (seen with NCCL 2.28 on 2 x H200: polling the NULL handle failed on every rank), so wait for the
// handle while watching the parent, then for the child itself, then for the parent: it stays ncclInProgress a
// little after the child is done, and the next split of it would be refused ("Attempt to use communicator before
// the previous operation returned ncclSuccess", seen once in ~50 launches on 4 x H200, two ranks over sockets).
static void comm_settle_split(ncclComm_t parent, ncclComm_t *child, const char *what, double timeout_s) {
    double deadline = comm_clock_s() + timeout_s;
    while (*(volatile ncclComm_t *)child == NULL) {
        comm_poll(parent, what, deadline, timeout_s);
        if (comm_clock_s() > deadline) {
            fail("NCCL handed back no communicator for %s within %g s: a peer rank is missing or stuck (raise %s if "
                 "it is only slow)", what, timeout_s, NCCL_TIMEOUT_ENV);
        }
        usleep(SETTLE_POLL_US);
    }
    comm_settle(*child, what, timeout_s);
    comm_settle(parent, what, timeout_s);
}

// ---------------------------------------------------------------------------------------------------------
// aborting

// The line SIGALRM prints when the abort, or the exit after it, outlives ABORT_GRACE_S; written before any abort
// (the handler may only write(2) and _exit), so that the job ends with a reason and a failure status rather than
// "Alarm clock".
static char g_abort_hung_note[320];

static void comm_on_abort_hung(int sig) {
    ssize_t w = write(STDERR_FILENO, g_abort_hung_note, strlen(g_abort_hung_note));
    (void)w;
    (void)sig;
    _exit(EXIT_FAILURE);
}

static void comm_arm_abort_alarm(void) {
    snprintf(g_abort_hung_note, sizeof(g_abort_hung_note),
             "[%s rank %d] error: NCCL's abort of the communicators, or the exit after it, was still running after "
             "%d s (a collective kernel or NCCL's proxy thread is stuck); exiting without it, the error above is the "
             "cause\n", g_program, g_rank, ABORT_GRACE_S);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = comm_on_abort_hung;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(ABORT_GRACE_S);
}

static void *comm_abort_one(void *comm) {
    ncclCommAbort((ncclComm_t)comm);
    return NULL;
}

// Aborts every communicator, once, whoever calls first (fail() on the main thread, or the watchdog). All at once,
// a thread each: an abort returns only once the device is free of its communicator's work, and a collective of
// another communicator spinning on a dead peer keeps it busy until that communicator's abort starts too. One after
// the other, the first abort waited for the alarm after every dead peer (measured on 2 x H200, NCCL 2.28.3: survivor
// out 10.3 s after the kill, its first abort still running); all at once they finish in ~1 s.
static void comm_abort_all(void) {
    pthread_mutex_lock(&g_comm.lock);
    int first = !g_comm.aborting;
    __atomic_store_n(&g_comm.aborting, 1, __ATOMIC_RELEASE);
    int n = g_comm.num_live;
    g_comm.num_live = 0;
    pthread_mutex_unlock(&g_comm.lock);
    if (!first) { return; }
    comm_arm_abort_alarm();
    pthread_t threads[NUM_COMMS];
    int started[NUM_COMMS] = {0};
    for (int i = 0; i < n; i++) {
        started[i] = pthread_create(&threads[i], NULL, comm_abort_one, (void *)g_comm.comms[i]) == 0;
    }
    for (int i = 0; i < n; i++) {
        if (started[i]) { pthread_join(threads[i], NULL); }
        else { comm_abort_one((void *)g_comm.comms[i]); } // no thread to be had: this one in turn
    }
}

// The watchdog's fail(): the same line, then abort and _exit (exit() would run teardown under the main thread).
LLMC_NORETURN LLMC_PRINTF(1, 2) static void watchdog_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error_line(fmt, ap);
    va_end(ap);
    comm_abort_all();
    _exit(EXIT_FAILURE);
}

// ---------------------------------------------------------------------------------------------------------
// the watchdog

static void watchdog_check_comms(void) {
    pthread_mutex_lock(&g_comm.lock);
    ncclResult_t bad = ncclSuccess;
    int which = 0;
    for (int i = 0; i < g_comm.num_live && bad == ncclSuccess; i++) {
        ncclResult_t st = ncclSuccess;
        ncclCommGetAsyncError(g_comm.comms[i], &st);
        if (st != ncclSuccess && st != ncclInProgress) {
            bad = st;
            which = i;
        }
    }
    pthread_mutex_unlock(&g_comm.lock);
    if (bad != ncclSuccess) {
        watchdog_fail("the %s communicator reports NCCL error '%s': a peer rank died or the network failed; "
                      "stopping (see the other ranks' lines)", COMM_NAMES[which], ncclGetErrorString(bad));
    }
}

// Rank 0: a rank's bootstrap connection closed. Tells every other rank which one, then fails.
LLMC_NORETURN static void watchdog_peer_lost(int peer) {
    const Bootstrap *b = &g_comm.boot;
    uint32_t notice = htonl((uint32_t)peer);
    for (int r = 1; r < b->world; r++) {
        if (r != peer) { send_exact(b->fds[r], &notice, sizeof(notice)); } // best effort: we fail either way
    }
    watchdog_fail("rank %d exited or was killed (its connection to rank 0 closed); stopping the job", peer);
}

// TCP path only: the connections to the other ranks (rank 0) or to rank 0, for WATCHDOG_POLL_MS.
static void watchdog_poll_peers(struct pollfd *pfds) {
    const Bootstrap *b = &g_comm.boot;
    int n = b->rank == 0 ? b->world - 1 : 1;
    for (int i = 0; i < n; i++) {
        pfds[i].fd = b->fds[b->rank == 0 ? i + 1 : 0];
        pfds[i].events = POLLIN;
        pfds[i].revents = 0;
    }
    if (poll(pfds, (nfds_t)n, WATCHDOG_POLL_MS) <= 0 || __atomic_load_n(&g_comm.closing, __ATOMIC_ACQUIRE)) {
        return;
    }
    for (int i = 0; i < n; i++) {
        if (!pfds[i].revents) { continue; }
        uint32_t notice = 0;
        ssize_t got = recv(pfds[i].fd, &notice, sizeof(notice), MSG_WAITALL);
        if (b->rank == 0) { watchdog_peer_lost(i + 1); } // ranks send rank 0 nothing after start-up
        if (got == (ssize_t)sizeof(notice)) {
            watchdog_fail("rank %u exited or was killed (rank 0 saw its connection close); stopping the job",
                          ntohl(notice));
        }
        watchdog_fail("lost the connection to rank 0: it exited or was killed; stopping the job");
    }
}

static void *watchdog_main(void *arg) {
    struct pollfd *pfds = (struct pollfd *)arg; // one per peer connection
    while (!__atomic_load_n(&g_comm.stop, __ATOMIC_ACQUIRE)) {
        watchdog_check_comms();
        if (g_comm.boot.method == BOOT_TCP && !__atomic_load_n(&g_comm.closing, __ATOMIC_ACQUIRE)) {
            watchdog_poll_peers(pfds);
        } else {
            usleep(WATCHDOG_POLL_MS * 1000);
        }
    }
    free(pfds);
    return NULL;
}

static void watchdog_start(void) {
    void *pfds = calloc_check((size_t)g_comm.boot.world, sizeof(struct pollfd), "watchdog poll set");
    if (pthread_create(&g_comm.watchdog, NULL, watchdog_main, pfds) != 0) {
        fail("cannot start the communication watchdog thread: %s", strerror(errno));
    }
    g_comm.watchdog_running = 1;
}

static void watchdog_stop(void) {
    if (!g_comm.watchdog_running) { return; }
    __atomic_store_n(&g_comm.stop, 1, __ATOMIC_RELEASE);
    pthread_join(g_comm.watchdog, NULL);
    g_comm.watchdog_running = 0;
}

// ---------------------------------------------------------------------------------------------------------
// host waits

// Remembers a collective whose completion `done` records, so a timeout can name it.
static void comm_track(cudaEvent_t done, const char *what) {
    if (g_comm.num_tracked == TRACKED_MAX) { return; } // untracked: a timeout still fires, it just names less
    Tracked *t = &g_comm.tracked[g_comm.num_tracked++];
    t->done = done;
    snprintf(t->what, sizeof(t->what), "%s", what);
}

static void comm_drop_completed(void) {
    int kept = 0;
    for (int i = 0; i < g_comm.num_tracked; i++) {
        if (cudaEventQuery(g_comm.tracked[i].done) != cudaSuccess) { g_comm.tracked[kept++] = g_comm.tracked[i]; }
    }
    g_comm.num_tracked = kept;
}

static const char *comm_first_pending(void) {
    for (int i = 0; i < g_comm.num_tracked; i++) {
        if (cudaEventQuery(g_comm.tracked[i].done) != cudaSuccess) { return g_comm.tracked[i].what; }
    }
    return "no tracked collective (the GPU itself is slow or stuck)";
}

// The host waits for ev (recorded on some stream), at most timeout_s seconds once connected.
static void comm_wait_event_for(cudaEvent_t ev, const char *what, double timeout_s) {
    if (!g_comm.connected) {
        cudaCheck(cudaEventSynchronize(ev));
        return;
    }
    double deadline = comm_clock_s() + timeout_s;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) { break; }
        if (e != cudaErrorNotReady) { cudaCheck(e); }
        comm_park_if_aborting();
        if (comm_clock_s() > deadline) {
            // the first pending collective is often the one waited for; say it once then
            const char *pending = comm_first_pending();
            int same = strcmp(pending, what) == 0;
            fail("waited %g s for %s; %s%s. A peer rank died, hung or fell behind (see the other ranks' lines); "
                 "raise %s if a step legitimately takes longer", timeout_s, what,
                 same ? "it is still incomplete" : "still incomplete: ", same ? "" : pending, NCCL_TIMEOUT_ENV);
        }
        usleep(EVENT_POLL_US);
    }
    comm_drop_completed();
}

static void comm_wait_event(cudaEvent_t ev, const char *what) { comm_wait_event_for(ev, what, g_comm.timeout_s); }

// The host waits for everything queued on the stream so far.
static void comm_wait_stream(cudaStream_t stream, const char *what) {
    if (!g_comm.connected) {
        cudaCheck(cudaStreamSynchronize(stream));
        return;
    }
    cudaCheck(cudaEventRecord(g_comm.stream_done, stream));
    comm_wait_event(g_comm.stream_done, what);
}

// ---------------------------------------------------------------------------------------------------------
// exposed communication: how long the compute stream stood still waiting for collectives

// The report's entry for `what` (a collective; the same text from any caller is one entry), made at its first use;
// NULL once COMM_SITES_MAX are taken (then that collective's time counts in the total only).
static CommSite *comm_site_of(const char *what) {
    Comm *c = &g_comm;
    if (!what) { what = "a collective with no name"; }
    for (int i = 0; i < c->num_sites; i++) {
        if (strcmp(c->sites[i].what, what) == 0) { return &c->sites[i]; }
    }
    if (c->num_sites == COMM_SITES_MAX) { return NULL; }
    CommSite *site = &c->sites[c->num_sites++];
    snprintf(site->what, sizeof(site->what), "%s", what);
    return site;
}

// "what (layer)": a collective of one linear layer, as timeouts and the report name it; a pointer that stays valid
// (the report's entry), or what itself once the entries are taken.
static const char *comm_site(const char *what, const char *layer) {
    char name[TRACKED_WHAT_LEN];
    snprintf(name, sizeof(name), "%s (%s)", what, layer);
    CommSite *site = comm_site_of(name);
    return site ? site->what : what;
}

// The device counters of the timed waits and the signals' flags, made at first use (a ring of several ranks on one GPU
// in the tests waits without a connected mesh).
static void comm_waits_init(void) {
    Comm *c = &g_comm;
    if (c->d_wait) { return; }
    flag_driver_load(COMM_DRIVER_USER);
    size_t bytes = 2 * COMM_WAIT_SLOTS * sizeof(unsigned long long);
    c->d_wait = (unsigned long long *)cuda_alloc(bytes, "the exposed-communication counters");
    cudaCheck(cudaMemsetAsync(c->d_wait, 0, bytes, g_cuda.stream));
    comm_wait_stream(g_cuda.stream, "zeroing the compute stream's wait counters"); // before any stream adds to them
    cudaCheck(cudaMallocHost(&c->h_wait, bytes));
    memset(c->taken, 0, sizeof(c->taken));
    cudaCheck(cudaEventCreateWithFlags(&c->wait_copied, cudaEventDisableTiming));
    c->num_flags = COMM_SIGNAL_BLOCK; // the first signal allocates a block
}

static void comm_signal_create(CommSignal *s) {
    Comm *c = &g_comm;
    comm_waits_init();
    if (c->num_flags == COMM_SIGNAL_BLOCK) {
        c->d_flags = (uint32_t *)cuda_alloc(COMM_SIGNAL_BLOCK * sizeof(uint32_t), "the signals' counters");
        cudaCheck(cudaMemsetAsync(c->d_flags, 0, COMM_SIGNAL_BLOCK * sizeof(uint32_t), g_cuda.stream));
        // zero before any stream writes a counter or polls it (the other streams are not ordered with this one)
        comm_wait_stream(g_cuda.stream, "zeroing the compute stream's signal counters");
        c->num_flags = 0;
    }
    memset(s, 0, sizeof(*s));
    cudaCheck(cudaEventCreateWithFlags(&s->event, cudaEventDisableTiming));
    s->flag = c->d_flags + c->num_flags++;
}

// The work queued on `stream` so far is what s marks: its event is recorded there and, unless stream is the compute
// stream (whose own order is its wait), its counter written (one CUDA driver stream write, ~2.8 us on that stream).
static void comm_signal(CommSignal *s, cudaStream_t stream) {
    cudaCheck(cudaEventRecord(s->event, stream));
    s->stream = stream;
    if (stream != g_cuda.stream) { flag_write(stream, s->flag, ++s->count); }
}

// The compute stream waits until the flag at p (this GPU's memory) reaches value, modulo 2^32, for the collective
// `what` (copied: it may be the caller's buffer): a kernel that polls it and adds the time it polled to the site's
// counter, so that the wait times itself: zero where the collective finished behind earlier compute.
static void comm_compute_wait_flag(cudaStream_t compute, const uint32_t *p, uint32_t value, const char *what) {
    Comm *c = &g_comm;
    comm_waits_init();
    CommSite *site = comm_site_of(what);
    int i = site ? (int)(site - c->sites) : COMM_SITES_MAX;
    flag_wait_timed(compute, p, value, c->d_wait + i, c->d_wait + COMM_WAIT_SLOTS + i);
}

// The compute stream waits for the point s marks (timed, as above), unless it put it there itself or it was never put.
static void comm_compute_wait(cudaStream_t compute, const CommSignal *s, const char *what) {
    if (s->stream == compute || (!s->stream && !s->count)) { return; }
    comm_compute_wait_flag(compute, s->flag, s->count, what);
}

// The exposed time of the compute stream's waits since the last call, in ms. Call it once the compute stream is past
// the last of them (the step's host waits are), or it waits for that. From the second call on (the first step
// starts up: GEMM choices, first launches) each wait's time is also added to its collective's entry.
static double comm_exposed_ms_take(void) {
    Comm *c = &g_comm;
    if (!c->d_wait) { // no wait yet
        c->takes++;
        return 0.0;
    }
    cudaCheck(cudaMemcpyAsync(c->h_wait, c->d_wait, 2 * COMM_WAIT_SLOTS * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost, g_cuda.stream));
    cudaCheck(cudaEventRecord(c->wait_copied, g_cuda.stream));
    cudaCheck(cudaEventSynchronize(c->wait_copied));
    double ms = 0.0;
    for (int i = 0; i < COMM_WAIT_SLOTS; i++) {
        double t = (double)(c->h_wait[i] - c->taken[i]) * 1e-6;
        unsigned long long n = c->h_wait[COMM_WAIT_SLOTS + i] - c->taken[COMM_WAIT_SLOTS + i];
        ms += t;
        if (i < c->num_sites && c->takes > 0) {
            c->sites[i].ms += t;
            c->sites[i].waits += (long)n;
        }
    }
    memcpy(c->taken, c->h_wait, sizeof(c->taken));
    c->takes++;
    return ms;
}

// Where the compute stream waited for communication, in ms a step over the steps after the first, the largest first
// (the collectives under COMM_REPORT_LEAST_MS a step together on one line): what to hide next.
#define COMM_REPORT_LEAST_MS 0.01
static void comm_exposed_report(void) {
    Comm *c = &g_comm;
    int steps = c->takes - 1;
    if (steps < 1) { return; }
    CommSite *order[COMM_SITES_MAX];
    int n = 0;
    double total = 0.0, rest = 0.0;
    for (int i = 0; i < c->num_sites; i++) {
        if (c->sites[i].waits == 0) { continue; } // a name comm_site made whose waits never came
        total += c->sites[i].ms;
        if (c->sites[i].ms / steps < COMM_REPORT_LEAST_MS) {
            rest += c->sites[i].ms;
            continue;
        }
        int k = n++;
        for (; k > 0 && order[k - 1]->ms < c->sites[i].ms; k--) { order[k] = order[k - 1]; }
        order[k] = &c->sites[i];
    }
    printf("exposed communication by collective, ms a step over the %d steps after the first (%.2f in all):\n", steps,
           total / steps);
    for (int i = 0; i < n; i++) {
        printf("  %7.3f  %5.1f waits  %s\n", order[i]->ms / steps, (double)order[i]->waits / steps, order[i]->what);
    }
    if (rest > 0.0) { printf("  %7.3f  the rest, each under %.2f ms a step\n", rest / steps, COMM_REPORT_LEAST_MS); }
}

// ---------------------------------------------------------------------------------------------------------
// the Launcher (llmc/model_ops.h)

static double comm_timeout_from_env(void) { return env_seconds(NCCL_TIMEOUT_ENV, NCCL_DEFAULT_TIMEOUT_S); }

static ncclComm_t comm_get(CommId id) { return g_comm.comms[id]; }

// comms[id] is ready: from now on the watchdog polls it and an abort includes it.
static void comm_publish(CommId id) {
    pthread_mutex_lock(&g_comm.lock);
    g_comm.num_live = (int)id + 1;
    pthread_mutex_unlock(&g_comm.lock);
}

// The mesh group a communicator other than the world's spans.
static MeshGroup comm_group(CommId id) {
    switch (id) {
    case COMM_TP: case COMM_TP_RING: return GROUP_TP;
    case COMM_GTP: case COMM_GTP_RS: return GROUP_GTP;
    case COMM_DP: return GROUP_DP;
    default: return GROUP_DATA;
    }
}

static void comm_connect(const Mesh *m) {
    Comm *c = &g_comm;
    c->mesh = *m;
    int devices = 0;
    cudaCheck(cudaGetDeviceCount(&devices));
    if (devices < 1) { fail("no CUDA device is visible to this rank; check CUDA_VISIBLE_DEVICES"); }
    g_cuda_device = c->boot.local_rank % devices;
    cuda_context_init();
    double init_timeout = bootstrap_timeout_from_env();

    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (m->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    bootstrap_broadcast(&c->boot, &id, sizeof(id));
    g_fail_hook = comm_abort_all;
    watchdog_start(); // from here a peer that dies, even during the set-up below, ends this rank too

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclCheck(ncclCommInitRankConfig(&c->comms[COMM_WORLD], m->world, id, m->rank, &cfg));
    comm_settle(c->comms[COMM_WORLD], "creating the world communicator", init_timeout);
    comm_publish(COMM_WORLD);
    for (int id = COMM_WORLD + 1; id < COMMS_AT_CONNECT; id++) { // each a split of the world by its mesh group
        MeshGroup g = comm_group((CommId)id);
        ncclComm_t *dst = &c->comms[id];
        ncclCheck(ncclCommSplit(c->comms[COMM_WORLD], mesh_group_color(m, g), mesh_group_key(m, g), dst, &cfg));
        char what[64];
        snprintf(what, sizeof(what), "splitting the %s communicator", COMM_NAMES[id]);
        comm_settle_split(c->comms[COMM_WORLD], dst, what, init_timeout);
        comm_publish((CommId)id);
    }

    // At the compute stream's priority, as the TP and GTP streams: NCCL's few blocks must not queue behind AdamW's
    // many on the lowest-priority update stream, or the last gradient sums are exposed longer.
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&c->dp_stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&c->sums_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&c->barrier_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&c->stream_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&c->world_in, cudaEventDisableTiming));
    comm_signal_create(&c->world_out);
    c->d_sums = (double *)cuda_alloc(COMM_SCALARS_MAX * sizeof(double), "collective scalars");
    c->d_barrier = (int *)cuda_alloc(sizeof(int), "barrier token");
    cudaCheck(cudaMallocHost(&c->h_sums, COMM_SCALARS_MAX * sizeof(double)));
    c->connected = 1;
}

// COMM_TP_RING, split from the TP group's communicator (every rank of the group calls it, this one tp_rank); from
// here the watchdog polls it and an abort includes it.
static ncclComm_t comm_split_tp_ring(int tp_rank) {
    Comm *c = &g_comm;
    if (c->comms[COMM_TP_RING]) { fail("comm_split_tp_ring: the SP ring's communicator exists already (one a run)"); }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclCheck(ncclCommSplit(c->comms[COMM_TP], 0, tp_rank, &c->comms[COMM_TP_RING], &cfg));
    comm_settle_split(c->comms[COMM_TP], &c->comms[COMM_TP_RING], "splitting the tp-ring communicator",
                      bootstrap_timeout_from_env());
    comm_publish(COMM_TP_RING);
    return c->comms[COMM_TP_RING];
}

// In place: x[0..n) reduced by op over the ranks of communicator `id`, through the device, waited for on the host.
static void comm_reduce_scalars(double *x, int n, ncclRedOp_t op, CommId id, const char *what) {
    Comm *c = &g_comm;
    if (n > COMM_SCALARS_MAX) { fail("%s: %d values in one reduction; at most %d", what, n, COMM_SCALARS_MAX); }
    memcpy(c->h_sums, x, (size_t)n * sizeof(double));
    cudaCheck(cudaMemcpyAsync(c->d_sums, c->h_sums, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, c->dp_stream));
    ncclCheck(ncclAllReduce(c->d_sums, c->d_sums, (size_t)n, ncclFloat64, op, comm_get(id), c->dp_stream));
    comm_settle(comm_get(id), what, c->timeout_s);
    cudaCheck(cudaMemcpyAsync(c->h_sums, c->d_sums, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, c->dp_stream));
    cudaCheck(cudaEventRecord(c->sums_done, c->dp_stream));
    comm_track(c->sums_done, what);
    comm_wait_event(c->sums_done, what);
    memcpy(x, c->h_sums, (size_t)n * sizeof(double));
}

static void comm_sum_over_data_ranks(double *x, int n) {
    comm_reduce_scalars(x, n, ncclSum, COMM_DATA, "the all-reduce of the loss over the data-parallel ranks");
}

static void comm_max_over_world(double *x, int n) {
    comm_reduce_scalars(x, n, ncclMax, COMM_WORLD, "the all-reduce of the stop requests over every rank");
}

// In place on the device, in the compute stream's order: x[0..n) reduced over every rank (on the DP stream; the
// compute stream's wait for it counts as exposed communication).
static void comm_world_reduce_on_device(void *x, size_t n, ncclDataType_t type, ncclRedOp_t op, cudaStream_t compute,
                                        const char *what) {
    Comm *c = &g_comm;
    cudaCheck(cudaEventRecord(c->world_in, compute));
    cudaCheck(cudaStreamWaitEvent(c->dp_stream, c->world_in, 0));
    ncclCheck(ncclAllReduce(x, x, n, type, op, comm_get(COMM_WORLD), c->dp_stream));
    comm_settle(comm_get(COMM_WORLD), what, c->timeout_s);
    comm_signal(&c->world_out, c->dp_stream);
    comm_track(c->world_out.event, what);
    comm_compute_wait(compute, &c->world_out, what);
}

static void comm_barrier(const char *what, int long_wait) {
    Comm *c = &g_comm;
    ncclCheck(ncclAllReduce(c->d_barrier, c->d_barrier, 1, ncclInt32, ncclSum, comm_get(COMM_WORLD), c->dp_stream));
    comm_settle(comm_get(COMM_WORLD), what, c->timeout_s);
    cudaCheck(cudaEventRecord(c->barrier_done, c->dp_stream));
    comm_track(c->barrier_done, what);
    comm_wait_event_for(c->barrier_done, what, long_wait ? LONG_WAIT_TIMEOUT_S : c->timeout_s);
}

static void comm_finish(void) {
    Comm *c = &g_comm;
    if (c->connected) {
        // Peers that pass the last barrier close their connections; that is no longer a failure.
        __atomic_store_n(&c->closing, 1, __ATOMIC_RELEASE);
        comm_barrier("the end of the run", 0);
        watchdog_stop();
        pthread_mutex_lock(&c->lock);
        int n = c->num_live;
        c->num_live = 0;
        pthread_mutex_unlock(&c->lock);
        for (int i = n - 1; i >= 0; i--) { ncclCommDestroy(c->comms[i]); }
        g_fail_hook = NULL;
        c->connected = 0;
    }
    bootstrap_finalize(&c->boot);
}

static Launcher gpu_launch(void) {
    Comm *c = &g_comm;
    pthread_mutex_init(&c->lock, NULL);
    c->boot = bootstrap_init();
    c->timeout_s = comm_timeout_from_env();
    Launcher l;
    memset(&l, 0, sizeof(l));
    l.world = c->boot.world;
    l.rank = c->boot.rank;
    l.local_rank = c->boot.local_rank;
    l.finish = comm_finish; // MPI_Finalize even for one rank
    if (l.world > 1) {
        l.connect = comm_connect;
        l.sum_over_data_ranks = comm_sum_over_data_ranks;
        l.max_over_world = comm_max_over_world;
        l.barrier = comm_barrier;
    }
    return l;
}

#endif // LLMC_COMM_CUH
