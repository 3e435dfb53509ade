/*
 * test_bootstrap.c: the launcher bootstrap of llmc/bootstrap.h, on 127.0.0.1 only.
 * Each case forks one process per rank with the environment a launcher would set; each rank runs
 * bootstrap_init, a broadcast of rank 0's blob, two barriers and bootstrap_finalize (rank_main below) and
 * reports "ok rank R world W local L" on stderr. Failure cases check every rank's exit status and error line,
 * and that each ends within its (shortened) timeout: a bad launch must never hang.
 * `test_bootstrap worker` runs rank_main alone: test/test_bootstrap.sh runs it under mpirun, built with USE_MPI.
 */
#include "../llmc/bootstrap.h"
#include "test_util.h"

#define BLOB_BYTES 128 // sizeof(ncclUniqueId)
#define BARRIER_DELAY_MS 300 // rank 0 arrives this late at the first barrier; the others must wait for it
#define MAX_RANKS 8
#define MAX_VARS 8
#define VAR_LEN 96
#define SHORT_TIMEOUT_S 2 // TRAIN_GPT_BOOTSTRAP_TIMEOUT of the failure cases
#define SLACK_S 3.0       // scheduling slack on a loaded 2-core CI machine
#define FAIL_LIMIT_S (2 * SHORT_TIMEOUT_S + SLACK_S) // a rank other than 0 waits up to twice the timeout
#define RANK_EXIT_AFTER_INIT 3 // status of a rank told to die right after start-up

static unsigned char blob_byte(int i) { return (unsigned char)(i * 37 + 11); }

static void rank_main(int die_after_init) {
    Bootstrap b = bootstrap_init();
    if (die_after_init) { _exit(RANK_EXIT_AFTER_INIT); }
    unsigned char blob[BLOB_BYTES];
    for (int i = 0; i < BLOB_BYTES; i++) { blob[i] = b.rank == 0 ? blob_byte(i) : 0; }
    bootstrap_broadcast(&b, blob, sizeof(blob));
    for (int i = 0; i < BLOB_BYTES; i++) {
        if (blob[i] != blob_byte(i)) { fail("blob byte %d is %d, rank 0 sent %d", i, blob[i], blob_byte(i)); }
    }
    double t0 = now_s();
    if (b.rank == 0) { poll(NULL, 0, BARRIER_DELAY_MS); }
    bootstrap_barrier(&b);
    double waited_ms = 1000.0 * (now_s() - t0);
    if (waited_ms < 0.9 * BARRIER_DELAY_MS) { fail("left the barrier after %.0f ms, before rank 0 arrived", waited_ms); }
    bootstrap_barrier(&b);
    fprintf(stderr, "ok rank %d world %d local %d\n", b.rank, b.world, b.local_rank);
    bootstrap_finalize(&b);
}

// ---------------------------------------------------------------------------------------------------------
// Launching ranks.

typedef struct {
    char name[MAX_VARS][VAR_LEN], value[MAX_VARS][VAR_LEN];
    int n;
    int die_after_init;
} RankEnv;

static void env_set(RankEnv *e, const char *name, const char *value) {
    snprintf(e->name[e->n], VAR_LEN, "%s", name);
    snprintf(e->value[e->n], VAR_LEN, "%s", value);
    e->n++;
}

static void env_set_int(RankEnv *e, const char *name, int value) {
    char v[32];
    snprintf(v, sizeof(v), "%d", value);
    env_set(e, name, v);
}

// The variables of one launcher (LAUNCH_VARS[kind]) plus MASTER_ADDR/PORT and the bootstrap timeout.
static RankEnv launcher_env(int kind, int rank, int world, int local, int port, int timeout_s) {
    RankEnv e;
    memset(&e, 0, sizeof(e));
    env_set_int(&e, LAUNCH_VARS[kind].rank, rank);
    env_set_int(&e, LAUNCH_VARS[kind].world, world);
    env_set_int(&e, LAUNCH_VARS[kind].local_rank, local);
    env_set(&e, "MASTER_ADDR", "127.0.0.1");
    env_set_int(&e, "MASTER_PORT", port);
    if (timeout_s > 0) { env_set_int(&e, BOOTSTRAP_TIMEOUT_ENV, timeout_s); }
    return e;
}

static void run_rank(void *arg) {
    RankEnv *e = (RankEnv *)arg;
    for (int i = 0; i < NUM_LAUNCH_VARS; i++) {
        unsetenv(LAUNCH_VARS[i].rank);
        unsetenv(LAUNCH_VARS[i].world);
        unsetenv(LAUNCH_VARS[i].local_rank);
    }
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv(BOOTSTRAP_TIMEOUT_ENV);
    for (int i = 0; i < e->n; i++) { setenv(e->name[i], e->value[i], 1); }
    rank_main(e->die_after_init);
}

// Starts n ranks, waits for all until the deadline (killing stragglers); returns the slowest rank's seconds.
static double launch(int n, RankEnv *envs, Child *kids, double limit_s) {
    double deadline = now_s() + limit_s, slowest = 0;
    for (int i = 0; i < n; i++) { child_start(&kids[i], run_rank, &envs[i]); }
    for (int i = 0; i < n; i++) {
        child_wait(&kids[i], deadline);
        if (kids[i].elapsed_s > slowest) { slowest = kids[i].elapsed_s; }
    }
    return slowest;
}

// A port nobody listens on right now (bind to port 0, read it back, close).
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("free port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int has_line(const Child *c, const char *text) { return strstr(c->err, text) != NULL; }

// ---------------------------------------------------------------------------------------------------------
// Cases.

static void expect_all_ok(const char *name, int kind, int world) {
    RankEnv envs[MAX_RANKS];
    Child kids[MAX_RANKS];
    int port = free_port();
    for (int r = 0; r < world; r++) { envs[r] = launcher_env(kind, r, world, r, port, 0); }
    launch(world, envs, kids, 30.0);
    int ok = 1;
    char want[64], why[512] = "";
    for (int r = 0; r < world; r++) {
        snprintf(want, sizeof(want), "ok rank %d world %d local %d\n", r, world, r);
        if (kids[r].status != 0 || strcmp(kids[r].err, want) != 0) {
            ok = 0;
            snprintf(why, sizeof(why), "rank %d: status %d, stderr: %s", r, kids[r].status, kids[r].err);
        }
    }
    check(ok, name, "%s", why);
}

static void expect_single(const char *name, RankEnv env) {
    Child kid;
    launch(1, &env, &kid, 10.0);
    check(kid.status == 0 && strcmp(kid.err, "ok rank 0 world 1 local 0\n") == 0, name, "status %d, stderr: %s",
          kid.status, kid.err);
}

static void expect_env_error(const char *name, RankEnv env, const char *expect) {
    Child kid;
    launch(1, &env, &kid, 10.0);
    check(kid.status == 1 && has_line(&kid, expect), name, "status %d, want 1 and '%s'; stderr: %s", kid.status,
          expect, kid.err);
}

static void test_good_launches(void) {
    expect_all_ok("torchrun env: 4 ranks receive rank 0's blob and pass barriers", 0, 4);
    expect_all_ok("slurm env: 3 ranks receive rank 0's blob", 1, 3);
    expect_all_ok("mpirun env without an MPI build: 2 ranks over TCP", 2, 2);
    RankEnv none;
    memset(&none, 0, sizeof(none));
    expect_single("no launcher: one process, world 1", none);
    RankEnv one = launcher_env(0, 0, 1, 0, 0, 0);
    one.n = 3; // RANK, WORLD_SIZE, LOCAL_RANK only: a world of 1 needs no MASTER_ADDR
    expect_single("WORLD_SIZE=1: one process without MASTER_ADDR", one);
}

static void test_env_errors(void) {
    expect_env_error("RANK outside WORLD_SIZE", launcher_env(0, 4, 4, 0, free_port(), 0),
                     "RANK=4, WORLD_SIZE=4, LOCAL_RANK=0: need WORLD_SIZE >= 1, 0 <= RANK < WORLD_SIZE");
    RankEnv no_master = launcher_env(0, 1, 2, 1, 0, 0);
    no_master.n = 3;
    expect_env_error("WORLD_SIZE > 1 without MASTER_ADDR", no_master,
                     "WORLD_SIZE=2 but MASTER_ADDR or MASTER_PORT is not set");
    RankEnv no_local = launcher_env(1, 0, 2, 0, 0, 0);
    no_local.n = 2;
    expect_env_error("SLURM_PROCID without SLURM_LOCALID", no_local, "SLURM_LOCALID is not set but SLURM_PROCID is");
    RankEnv bad_int = launcher_env(0, 0, 2, 0, 0, 0);
    snprintf(bad_int.value[1], VAR_LEN, "two");
    expect_env_error("WORLD_SIZE not an integer", bad_int, "WORLD_SIZE='two' is not an integer");
    RankEnv bad_timeout = launcher_env(0, 1, 2, 1, free_port(), 0);
    env_set(&bad_timeout, BOOTSTRAP_TIMEOUT_ENV, "-1");
    expect_env_error("bootstrap timeout must be positive", bad_timeout,
                     "TRAIN_GPT_BOOTSTRAP_TIMEOUT='-1' must be a positive number of seconds");
}

// Every rank of a failed launch exits non-zero with an error line naming its rank.
static int all_failed_loudly(const Child *kids, const int *ranks, int n) {
    for (int i = 0; i < n; i++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "[train_gpt rank %d] error: ", ranks[i]);
        if (kids[i].status <= 0 || !has_line(&kids[i], prefix)) { return 0; }
    }
    return 1;
}

// One check over a launch; on failure every rank's status and stderr follow the FAIL line.
static void check_launch(int ok, const char *name, const Child *kids, const int *ranks, int n, double slowest) {
    check(ok, name, "after %.1f s the ranks said:", slowest);
    for (int i = 0; i < n && !ok; i++) { printf("  rank %d (status %d): %s", ranks[i], kids[i].status, kids[i].err); }
}

// A failure case: every rank gets its launcher_env (worlds[i], ranks[i]) and must fail within the limit.
static double launch_failing(int n, const int *ranks, const int *worlds, int port, Child *kids) {
    RankEnv envs[MAX_RANKS];
    for (int i = 0; i < n; i++) { envs[i] = launcher_env(0, ranks[i], worlds[i], i, port, SHORT_TIMEOUT_S); }
    return launch(n, envs, kids, FAIL_LIMIT_S + SLACK_S);
}

static void test_world_mismatch(void) {
    int port = free_port(), ranks[3] = {0, 1, 2}, worlds[3] = {3, 3, 4};
    Child kids[3];
    double slowest = launch_failing(3, ranks, worlds, port, kids);
    int ok = all_failed_loudly(kids, ranks, 3) && slowest < FAIL_LIMIT_S &&
             has_line(&kids[0], "rank 2 was launched with world size 4 but rank 0 with WORLD_SIZE=3: launch every "
                                "rank with the same world size") &&
             has_line(&kids[2], "rank 0 has world size 3 but this rank has WORLD_SIZE=4");
    check_launch(ok, "a rank with another WORLD_SIZE: every rank fails with a clear line", kids, ranks, 3, slowest);
}

static void test_duplicate_rank(void) {
    int port = free_port(), ranks[3] = {0, 1, 1}, worlds[3] = {3, 3, 3};
    Child kids[3];
    double slowest = launch_failing(3, ranks, worlds, port, kids);
    const char *told = "two processes were launched with RANK=1; give each process its own rank";
    int ok = all_failed_loudly(kids, ranks, 3) && slowest < FAIL_LIMIT_S &&
             has_line(&kids[0], "two processes claim rank 1 (of WORLD_SIZE=3): give each process its own RANK") &&
             (has_line(&kids[1], told) || has_line(&kids[2], told));
    check_launch(ok, "two processes with the same RANK: every rank fails with a clear line", kids, ranks, 3, slowest);
}

static void test_missing_rank(void) {
    int port = free_port(), ranks[2] = {0, 1}, worlds[2] = {3, 3};
    Child kids[2];
    double slowest = launch_failing(2, ranks, worlds, port, kids);
    char want[256];
    snprintf(want, sizeof(want), "rank 0 waited %d s for ranks [2] to connect to 127.0.0.1:%d; check that all "
                                 "WORLD_SIZE=3 ranks were launched", SHORT_TIMEOUT_S, port);
    int ok = all_failed_loudly(kids, ranks, 2) && slowest < SHORT_TIMEOUT_S + SLACK_S && has_line(&kids[0], want);
    check_launch(ok, "a missing rank: rank 0 names it and every rank fails within the timeout", kids, ranks, 2, slowest);
}

static void test_missing_rank0(void) {
    int port = free_port(), ranks[2] = {1, 2}, worlds[2] = {3, 3};
    Child kids[2];
    double slowest = launch_failing(2, ranks, worlds, port, kids);
    char want[128];
    snprintf(want, sizeof(want), "could not reach rank 0 at 127.0.0.1:%d for %d s", port, SHORT_TIMEOUT_S);
    int ok = all_failed_loudly(kids, ranks, 2) && slowest < SHORT_TIMEOUT_S + SLACK_S && has_line(&kids[0], want) &&
             has_line(&kids[1], want);
    check_launch(ok, "rank 0 missing: the others give up within the timeout", kids, ranks, 2, slowest);
}

static void test_port_in_use(void) {
    int port = free_port(), ranks[1] = {0}, worlds[1] = {2};
    int holder = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    setsockopt(holder, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(holder, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(holder, 1) != 0) {
        check(0, "MASTER_PORT in use: rank 0 fails at once", "could not hold port %d: %s", port, strerror(errno));
        return;
    }
    Child kid;
    double slowest = launch_failing(1, ranks, worlds, port, &kid);
    close(holder);
    char want[160];
    snprintf(want, sizeof(want), "MASTER_PORT %d on 127.0.0.1 is in use (another job, or an earlier run still "
                                 "exiting): export a free MASTER_PORT to every rank", port);
    int ok = kid.status == 1 && has_line(&kid, want) && slowest < SLACK_S;
    check_launch(ok, "MASTER_PORT in use: rank 0 fails at once", &kid, ranks, 1, slowest);
}

// A rank that dies right after start-up ends the others' next wait (the broadcast or a barrier) at once.
static void test_dead_rank(void) {
    int port = free_port(), ranks[3] = {0, 1, 2};
    RankEnv envs[3];
    for (int r = 0; r < 3; r++) { envs[r] = launcher_env(0, r, 3, r, port, SHORT_TIMEOUT_S); }
    envs[2].die_after_init = 1;
    Child kids[3];
    double slowest = launch(3, envs, kids, FAIL_LIMIT_S + SLACK_S);
    int ok = kids[2].status == RANK_EXIT_AFTER_INIT && all_failed_loudly(kids, ranks, 2) &&
             slowest < SHORT_TIMEOUT_S + SLACK_S && has_line(&kids[0], "lost the connection to rank 2");
    check_launch(ok, "a rank dies after start-up: the others fail at once instead of hanging", kids, ranks, 3, slowest);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "worker") == 0) {
        rank_main(0);
        return 0;
    }
    test_good_launches();
    test_env_errors();
    test_world_mismatch();
    test_duplicate_rank();
    test_missing_rank();
    test_missing_rank0();
    test_port_in_use();
    test_dead_rank();
    return test_exit();
}
