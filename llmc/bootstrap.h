/*
 * bootstrap.h: how the processes of a job find each other before NCCL exists.
 *
 * bootstrap_init() learns (world, rank, local rank) from the launcher, first match wins:
 *   1. MPI (a build with USE_MPI, started by mpirun/srun with an MPI launcher, or MPI already initialized):
 *      MPI_COMM_WORLD; the local rank is the rank among the processes of this node (MPI_COMM_TYPE_SHARED).
 *   2. the environment: RANK / WORLD_SIZE / LOCAL_RANK (torchrun), else SLURM_PROCID / SLURM_NTASKS /
 *      SLURM_LOCALID (srun), else OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun of a build without MPI);
 *      MASTER_ADDR / MASTER_PORT name rank 0's host and a free TCP port.
 *   3. none of these: one process, world 1.
 * bootstrap_broadcast() then copies rank 0's bytes (the ncclUniqueId) to every rank; bootstrap_barrier() waits
 * for all ranks.
 *
 * The environment path, over TCP: rank 0 listens on MASTER_PORT; every other rank connects (retrying while
 * rank 0 starts) and sends a hello (magic, protocol version, its world size, its rank). Rank 0 checks each
 * (same world size, no rank twice), answers a bad one with the reason, and once all world-1 ranks are in,
 * acknowledges them. The connections stay open: a broadcast is rank 0 writing to each, a barrier a star
 * (every rank reports to rank 0, rank 0 releases them all).
 * No wait is unbounded: rank 0 waits at most TRAIN_GPT_BOOTSTRAP_TIMEOUT seconds (default 120) for the others,
 * the others twice that for rank 0 (so rank 0, which knows who is missing, reports first); a process that dies
 * closes its sockets, which ends its peers' waits at once. Every failure is one fail() line on each rank that
 * sees it. Rank 0 binds the wildcard address (other nodes must reach it) unless MASTER_ADDR is a loopback
 * address; then it binds only that, so a single-node job opens no port to the network.
 *
 * Plain C11 + POSIX sockets; also compiled by nvcc as C++, with or without USE_MPI.
 */
#ifndef LLMC_BOOTSTRAP_H
#define LLMC_BOOTSTRAP_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: under nvcc, no C++ bindings (nor their warnings, nor libmpi_cxx)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "utils.h"

#define BOOTSTRAP_MAGIC 0x67707432u // "gpt2"
#define BOOTSTRAP_VERSION 1u
#define BOOTSTRAP_DEFAULT_TIMEOUT_S 120.0
#define BOOTSTRAP_TIMEOUT_ENV "TRAIN_GPT_BOOTSTRAP_TIMEOUT"
#define BOOTSTRAP_RETRY_MS 100     // between attempts to reach rank 0 while it starts
#define BOOTSTRAP_HELLO_TIMEOUT_S 10.0 // a connected rank sends its hello at once; anything slower is a stray
#define BOOTSTRAP_RANK_LIST_LEN 512
#define IPV4_LOOPBACK_NET 127 // 127.0.0.0/8

typedef enum { BOOT_SINGLE, BOOT_MPI, BOOT_TCP } BootMethod;

// Where the environment path reads (rank, world size, local rank), in order of preference.
typedef struct {
    const char *rank, *world, *local_rank;
    const char *hint; // the other way out when MASTER_ADDR is missing
} LaunchVars;

static const LaunchVars LAUNCH_VARS[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", ""},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "; or rebuild with MPI (make finds mpicc) so mpirun needs neither"},
};
#define NUM_LAUNCH_VARS ((int)(sizeof(LAUNCH_VARS) / sizeof(LAUNCH_VARS[0])))

typedef struct {
    int world, rank, local_rank;
    BootMethod method;
    // TCP only
    const LaunchVars *vars; // the variables the rank came from (named in messages)
    char host[256];         // MASTER_ADDR
    int port;               // MASTER_PORT
    double timeout_s;       // how long rank 0 waits for the others
    int *fds;               // rank 0: fds[r] is the link to rank r (r >= 1); others: fds[0] is the link to rank 0
    int owns_mpi;           // MPI: we called MPI_Init, so we call MPI_Finalize
} Bootstrap;

// Hello (rank -> rank 0) and reply (rank 0 -> rank), four uint32 in network byte order:
//   hello {magic, version, world, rank}   reply {magic, status, rank 0's world, 0}
typedef enum { REPLY_OK, REPLY_WORLD_MISMATCH, REPLY_DUPLICATE_RANK, REPLY_VERSION_MISMATCH } BootReply;
#define BOOTSTRAP_MSG_WORDS 4

typedef enum { IO_OK, IO_CLOSED, IO_TIMEOUT } IoResult;

static inline double bootstrap_clock_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Milliseconds left until the deadline, as poll() takes them.
static inline int ms_until(double deadline_s) {
    double left_ms = 1000.0 * (deadline_s - bootstrap_clock_s());
    if (left_ms <= 0) { return 0; }
    return left_ms < INT32_MAX - 1 ? (int)left_ms + 1 : INT32_MAX;
}

// ---------------------------------------------------------------------------------------------------------
// Reading the environment.

// The integer value of environment variable name, or fail() naming it.
static inline int env_int(const char *name) {
    const char *s = getenv(name);
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX) {
        fail("%s='%s' is not an integer; fix the launch environment", name, s);
    }
    return (int)v;
}

// A positive number of seconds from environment variable `name`, or `def` where it is unset.
static inline double env_seconds(const char *name, double def) {
    const char *s = getenv(name);
    if (!s) { return def; }
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0)) { fail("%s='%s' must be a positive number of seconds", name, s); }
    return v;
}

static inline double bootstrap_timeout_from_env(void) {
    return env_seconds(BOOTSTRAP_TIMEOUT_ENV, BOOTSTRAP_DEFAULT_TIMEOUT_S);
}

static inline const LaunchVars *launch_vars_from_env(void) {
    for (int i = 0; i < NUM_LAUNCH_VARS; i++) {
        if (getenv(LAUNCH_VARS[i].rank) || getenv(LAUNCH_VARS[i].world)) { return &LAUNCH_VARS[i]; }
    }
    return NULL;
}

// Fills world, rank, local rank from vars; fails on a missing or inconsistent value.
static inline void bootstrap_read_env(Bootstrap *b, const LaunchVars *v) {
    const char *names[3] = {v->rank, v->world, v->local_rank};
    for (int i = 0; i < 3; i++) {
        if (!getenv(names[i])) {
            fail("%s is not set but %s is: set all of %s, %s and %s (torchrun and srun do), or none of them",
                 names[i], getenv(v->rank) ? v->rank : v->world, v->rank, v->world, v->local_rank);
        }
    }
    b->world = env_int(v->world);
    b->rank = env_int(v->rank);
    b->local_rank = env_int(v->local_rank);
    if (b->world < 1 || b->rank < 0 || b->rank >= b->world || b->local_rank < 0) {
        fail("%s=%d, %s=%d, %s=%d: need %s >= 1, 0 <= %s < %s and %s >= 0; fix the launch environment", v->rank,
             b->rank, v->world, b->world, v->local_rank, b->local_rank, v->world, v->rank, v->world, v->local_rank);
    }
    set_error_rank(b->rank);
    if (b->world == 1) { return; }
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (!addr || !port || !addr[0]) {
        fail("%s=%d but MASTER_ADDR or MASTER_PORT is not set: export MASTER_ADDR (rank 0's host) and MASTER_PORT "
             "(a free TCP port) on every rank%s", v->world, b->world, v->hint);
    }
    if (strlen(addr) >= sizeof(b->host)) { fail("MASTER_ADDR '%s' is too long for a host name", addr); }
    strcpy(b->host, addr);
    b->port = env_int("MASTER_PORT");
    if (b->port < 1 || b->port > 65535) { fail("MASTER_PORT=%d is not a TCP port: use 1..65535", b->port); }
    b->vars = v;
    b->timeout_s = bootstrap_timeout_from_env();
}

// ---------------------------------------------------------------------------------------------------------
// Sockets.

static inline IoResult recv_exact(int fd, void *buf, size_t n, double deadline_s) {
    char *p = (char *)buf;
    while (n > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, ms_until(deadline_s));
        if (ready < 0 && errno == EINTR) { continue; }
        if (ready == 0) { return IO_TIMEOUT; }
        ssize_t got = recv(fd, p, n, 0);
        if (got < 0 && errno == EINTR) { continue; }
        if (got <= 0) { return IO_CLOSED; } // EOF or reset: the peer is gone
        p += got;
        n -= (size_t)got;
    }
    return IO_OK;
}

// Writes all n bytes; returns 0, or -1 when the peer is gone.
static inline int send_exact(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR) { continue; }
        if (put <= 0) { return -1; }
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

static inline void msg_pack(uint32_t out[BOOTSTRAP_MSG_WORDS], uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    out[0] = htonl(a);
    out[1] = htonl(b);
    out[2] = htonl(c);
    out[3] = htonl(d);
}

static inline void msg_unpack(uint32_t m[BOOTSTRAP_MSG_WORDS]) {
    for (int i = 0; i < BOOTSTRAP_MSG_WORDS; i++) { m[i] = ntohl(m[i]); }
}

static inline struct addrinfo *resolve_master(const Bootstrap *b) {
    char port[16];
    snprintf(port, sizeof(port), "%d", b->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = NULL;
    int err = getaddrinfo(b->host, port, &hints, &res);
    if (err != 0) {
        fail("cannot resolve MASTER_ADDR '%s': %s; set it to rank 0's host name or IP address", b->host,
             gai_strerror(err));
    }
    return res;
}

static inline int is_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET) {
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == IPV4_LOOPBACK_NET;
    }
    return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

static inline void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); // latency only; failure is harmless
}

// Rank 0: the listening socket on MASTER_PORT.
static inline int listen_master(const Bootstrap *b) {
    struct addrinfo *res = resolve_master(b);
    struct sockaddr_storage addr;
    memcpy(&addr, res->ai_addr, res->ai_addrlen);
    socklen_t len = res->ai_addrlen;
    freeaddrinfo(res);
    if (!is_loopback((struct sockaddr *)&addr)) {
        if (addr.ss_family == AF_INET) {
            ((struct sockaddr_in *)&addr)->sin_addr.s_addr = htonl(INADDR_ANY);
        } else {
            ((struct sockaddr_in6 *)&addr)->sin6_addr = in6addr_any;
        }
    }
    int fd = socket(addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0) { fail("cannot create a TCP socket: %s", strerror(errno)); }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); // a previous run's TIME_WAIT must not block us
    if (bind(fd, (struct sockaddr *)&addr, len) != 0) {
        if (errno == EADDRINUSE) {
            fail("MASTER_PORT %d on %s is in use (another job, or an earlier run still exiting): export a free "
                 "MASTER_PORT to every rank, or stop the process that holds it", b->port, b->host);
        }
        fail("rank 0 cannot listen on %s:%d: %s; set MASTER_ADDR to this host and MASTER_PORT to a free port",
             b->host, b->port, strerror(errno));
    }
    if (listen(fd, SOMAXCONN) != 0) { fail("listen on port %d failed: %s", b->port, strerror(errno)); }
    return fd;
}

// One connection attempt to addr, bounded by the deadline; returns the socket or -1 (errno says why).
static inline int connect_once(const struct addrinfo *a, double deadline_s) {
    int fd = socket(a->ai_family, SOCK_STREAM, 0);
    if (fd < 0) { return -1; }
    int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK); // a connect to a host that drops packets must not outlive the deadline
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int err = ETIMEDOUT;
        socklen_t len = sizeof(err);
        if (poll(&pfd, 1, ms_until(deadline_s)) == 1) { getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len); }
        rc = err ? -1 : 0;
        errno = err;
    }
    if (rc != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    fcntl(fd, F_SETFL, flags);
    set_nodelay(fd);
    return fd;
}

// "[2, 5, 7]": the ranks r >= 1 with have[r] == 0.
static inline void format_missing_ranks(const int *have, int world, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int r = 1; r < world && len < cap; r++) {
        if (!have[r]) { len += (size_t)snprintf(buf + len, cap - len, "%s%d", len > 1 ? ", " : "", r); }
    }
    if (len < cap) { snprintf(buf + len, cap - len, "]"); }
}

// ---------------------------------------------------------------------------------------------------------
// The TCP rendezvous.

// Rank 0 tells a rank why it is refused (best effort: rank 0 fails right after, either way).
static inline void send_reply(const Bootstrap *b, int fd, BootReply status) {
    uint32_t reply[BOOTSTRAP_MSG_WORDS];
    msg_pack(reply, BOOTSTRAP_MAGIC, status, (uint32_t)b->world, 0);
    send_exact(fd, reply, sizeof(reply));
}

// Rank 0: accepts world-1 ranks and checks their hellos, then acknowledges them all.
static inline void tcp_gather_ranks(Bootstrap *b) {
    int lfd = listen_master(b);
    double deadline = bootstrap_clock_s() + b->timeout_s;
    int joined = 0;
    while (joined < b->world - 1) {
        struct pollfd pfd = {lfd, POLLIN, 0};
        int ready = poll(&pfd, 1, ms_until(deadline));
        if (ready < 0 && errno == EINTR) { continue; }
        if (ready == 0) {
            char missing[BOOTSTRAP_RANK_LIST_LEN];
            int *have = (int *)calloc_check((size_t)b->world, sizeof(int), "rank list");
            for (int r = 1; r < b->world; r++) { have[r] = b->fds[r] >= 0; }
            format_missing_ranks(have, b->world, missing, sizeof(missing));
            fail("rank 0 waited %g s for ranks %s to connect to %s:%d; check that all %s=%d ranks were launched "
                 "(and can reach MASTER_ADDR)", b->timeout_s, missing, b->host, b->port, b->vars->world, b->world);
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) { continue; }
        set_nodelay(fd);
        uint32_t hello[BOOTSTRAP_MSG_WORDS];
        double hello_deadline = bootstrap_clock_s() + BOOTSTRAP_HELLO_TIMEOUT_S;
        IoResult io = recv_exact(fd, hello, sizeof(hello), hello_deadline < deadline ? hello_deadline : deadline);
        msg_unpack(hello);
        if (io != IO_OK || hello[0] != BOOTSTRAP_MAGIC) {
            close(fd); // not one of ours (a port scan, a stray client): ignore it
            continue;
        }
        int peer_world = (int)hello[2], peer = (int)hello[3];
        if (hello[1] != BOOTSTRAP_VERSION) {
            send_reply(b, fd, REPLY_VERSION_MISMATCH);
            fail("rank %d speaks bootstrap protocol %u, rank 0 speaks %u: launch the same train_gpt build on every "
                 "rank", peer, hello[1], BOOTSTRAP_VERSION);
        }
        if (peer_world != b->world) {
            send_reply(b, fd, REPLY_WORLD_MISMATCH);
            fail("rank %d was launched with world size %d but rank 0 with %s=%d: launch every rank with the same "
                 "world size", peer, peer_world, b->vars->world, b->world);
        }
        if (peer < 1 || peer >= b->world || b->fds[peer] >= 0) {
            send_reply(b, fd, REPLY_DUPLICATE_RANK);
            fail("two processes claim rank %d (of %s=%d): give each process its own %s", peer, b->vars->world,
                 b->world, b->vars->rank);
        }
        b->fds[peer] = fd;
        joined++;
    }
    close(lfd);
    uint32_t ack[BOOTSTRAP_MSG_WORDS];
    msg_pack(ack, BOOTSTRAP_MAGIC, REPLY_OK, (uint32_t)b->world, 0);
    for (int r = 1; r < b->world; r++) {
        if (send_exact(b->fds[r], ack, sizeof(ack)) != 0) {
            fail("rank %d disconnected during start-up (it failed: see its error line)", r);
        }
    }
}

// Rank r >= 1: connects to rank 0 (retrying while it starts), says hello and waits for the acknowledgement.
static inline void tcp_join(Bootstrap *b) {
    double start = bootstrap_clock_s();
    struct addrinfo *res = resolve_master(b);
    int fd = -1, err = 0;
    while (fd < 0) {
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            fd = connect_once(a, start + b->timeout_s);
            err = errno;
        }
        if (fd >= 0) { break; }
        if (bootstrap_clock_s() + BOOTSTRAP_RETRY_MS / 1000.0 > start + b->timeout_s) {
            fail("could not reach rank 0 at %s:%d for %g s (%s); check that rank 0 was launched and that "
                 "MASTER_ADDR/MASTER_PORT point to it", b->host, b->port, b->timeout_s, strerror(err));
        }
        poll(NULL, 0, BOOTSTRAP_RETRY_MS);
    }
    freeaddrinfo(res);
    b->fds[0] = fd;
    uint32_t msg[BOOTSTRAP_MSG_WORDS];
    msg_pack(msg, BOOTSTRAP_MAGIC, BOOTSTRAP_VERSION, (uint32_t)b->world, (uint32_t)b->rank);
    if (send_exact(fd, msg, sizeof(msg)) != 0) {
        fail("lost the connection to rank 0 at %s:%d while saying hello: %s", b->host, b->port, strerror(errno));
    }
    IoResult io = recv_exact(fd, msg, sizeof(msg), start + 2 * b->timeout_s);
    if (io == IO_TIMEOUT) {
        fail("rank 0 at %s:%d did not finish start-up within %g s; check that all %s=%d ranks were launched",
             b->host, b->port, 2 * b->timeout_s, b->vars->world, b->world);
    }
    if (io == IO_CLOSED) {
        fail("rank 0 at %s:%d closed the connection during start-up: it failed (see its error line)", b->host,
             b->port);
    }
    msg_unpack(msg);
    if (msg[0] != BOOTSTRAP_MAGIC) {
        fail("%s:%d is not a train_gpt rank 0 (bad reply): check MASTER_ADDR/MASTER_PORT", b->host, b->port);
    }
    switch ((BootReply)msg[1]) {
    case REPLY_OK: return;
    case REPLY_WORLD_MISMATCH:
        fail("rank 0 has world size %d but this rank has %s=%d: launch every rank with the same world size",
             (int)msg[2], b->vars->world, b->world);
    case REPLY_DUPLICATE_RANK:
        fail("rank 0 already has a rank %d: two processes were launched with %s=%d; give each process its own rank",
             b->rank, b->vars->rank, b->rank);
    case REPLY_VERSION_MISMATCH:
    default:
        fail("rank 0 speaks another bootstrap protocol than this rank (%u): launch the same train_gpt build on "
             "every rank", BOOTSTRAP_VERSION);
    }
}

// A rank >= 1 waits for rank 0; the fail() line says what it was waiting for.
static inline void tcp_recv_from_root(const Bootstrap *b, void *buf, size_t n, const char *what) {
    IoResult io = recv_exact(b->fds[0], buf, n, bootstrap_clock_s() + 2 * b->timeout_s);
    if (io == IO_TIMEOUT) {
        fail("waited %g s for rank 0 (%s:%d) at %s; raise %s if rank 0 is slow", 2 * b->timeout_s, b->host,
             b->port, what, BOOTSTRAP_TIMEOUT_ENV);
    }
    if (io == IO_CLOSED) {
        fail("lost the connection to rank 0 (%s:%d) at %s: rank 0 failed (see its error line) or its node went down",
             b->host, b->port, what);
    }
}

static inline void tcp_send_to_all(const Bootstrap *b, const void *buf, size_t n, const char *what) {
    for (int r = 1; r < b->world; r++) {
        if (send_exact(b->fds[r], buf, n) != 0) {
            fail("lost the connection to rank %d at %s: it failed (see its error line)", r, what);
        }
    }
}

// Rank 0 collects one byte from every rank, waiting on all of them at once so a timeout can name the missing.
static inline void tcp_gather_tokens(const Bootstrap *b) {
    struct pollfd *pfds = (struct pollfd *)calloc_check((size_t)b->world, sizeof(struct pollfd), "barrier");
    int *have = (int *)calloc_check((size_t)b->world, sizeof(int), "barrier");
    double deadline = bootstrap_clock_s() + b->timeout_s;
    int arrived = 0;
    while (arrived < b->world - 1) {
        for (int r = 1; r < b->world; r++) {
            pfds[r].fd = have[r] ? -1 : b->fds[r]; // poll ignores negative fds
            pfds[r].events = POLLIN;
            pfds[r].revents = 0;
        }
        int ready = poll(pfds + 1, (nfds_t)(b->world - 1), ms_until(deadline));
        if (ready < 0 && errno == EINTR) { continue; }
        if (ready == 0) {
            char missing[BOOTSTRAP_RANK_LIST_LEN];
            format_missing_ranks(have, b->world, missing, sizeof(missing));
            fail("rank 0 waited %g s at a barrier for ranks %s; raise %s if they are slow", b->timeout_s, missing,
                 BOOTSTRAP_TIMEOUT_ENV);
        }
        for (int r = 1; r < b->world; r++) {
            if (have[r] || !pfds[r].revents) { continue; }
            char token;
            if (recv(b->fds[r], &token, 1, 0) != 1) {
                fail("lost the connection to rank %d at a barrier: it failed (see its error line)", r);
            }
            have[r] = 1;
            arrived++;
        }
    }
    free(have);
    free(pfds);
}

// ---------------------------------------------------------------------------------------------------------
// The API.

#ifdef USE_MPI
static inline void mpi_check(int err, const char *what) {
    if (err != MPI_SUCCESS) { fail("%s failed with MPI error %d", what, err); }
}

static inline int launched_by_mpi(void) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    return initialized || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static inline void bootstrap_init_mpi(Bootstrap *b) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) { mpi_check(MPI_Init(NULL, NULL), "MPI_Init"); }
    b->owns_mpi = !initialized;
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &b->world), "MPI_Comm_size");
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &b->rank), "MPI_Comm_rank");
    set_error_rank(b->rank);
    MPI_Comm node;
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    mpi_check(MPI_Comm_rank(node, &b->local_rank), "MPI_Comm_rank");
    MPI_Comm_free(&node);
}
#endif

// Discovers this process's place in the job and, on the TCP path, connects every rank to rank 0.
static inline Bootstrap bootstrap_init(void) {
    Bootstrap b;
    memset(&b, 0, sizeof(b));
    b.world = 1;
    b.method = BOOT_SINGLE;
#ifdef USE_MPI
    if (launched_by_mpi()) {
        b.method = BOOT_MPI;
        bootstrap_init_mpi(&b);
        return b;
    }
#endif
    const LaunchVars *vars = launch_vars_from_env();
    if (!vars) { return b; }
    bootstrap_read_env(&b, vars);
    if (b.world == 1) { return b; }
    b.method = BOOT_TCP;
    b.fds = (int *)malloc_check((size_t)b.world * sizeof(int), "bootstrap links");
    for (int r = 0; r < b.world; r++) { b.fds[r] = -1; }
    if (b.rank == 0) { tcp_gather_ranks(&b); } else { tcp_join(&b); }
    return b;
}

// Copies rank 0's n bytes at buf to buf on every rank (n the same everywhere, e.g. sizeof(ncclUniqueId)).
static inline void bootstrap_broadcast(const Bootstrap *b, void *buf, size_t n) {
#ifdef USE_MPI
    if (b->method == BOOT_MPI) { mpi_check(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast"); }
#endif
    if (b->method != BOOT_TCP) { return; }
    if (b->rank == 0) {
        tcp_send_to_all(b, buf, n, "the broadcast");
    } else {
        tcp_recv_from_root(b, buf, n, "the broadcast");
    }
}

static inline void bootstrap_barrier(const Bootstrap *b) {
#ifdef USE_MPI
    if (b->method == BOOT_MPI) { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
#endif
    if (b->method != BOOT_TCP) { return; }
    char token = 0;
    if (b->rank == 0) {
        tcp_gather_tokens(b);
        tcp_send_to_all(b, &token, 1, "a barrier");
    } else {
        if (send_exact(b->fds[0], &token, 1) != 0) {
            fail("lost the connection to rank 0 (%s) at a barrier: rank 0 failed (see its error line)", b->host);
        }
        tcp_recv_from_root(b, &token, 1, "a barrier");
    }
}

static inline void bootstrap_finalize(Bootstrap *b) {
#ifdef USE_MPI
    if (b->method == BOOT_MPI && b->owns_mpi) { MPI_Finalize(); }
#endif
    if (b->method == BOOT_TCP) {
        for (int r = 0; r < b->world; r++) {
            if (b->fds[r] >= 0) { close(b->fds[r]); }
        }
        free(b->fds);
        b->fds = NULL;
    }
    b->method = BOOT_SINGLE;
}

#endif // LLMC_BOOTSTRAP_H
