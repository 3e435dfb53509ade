/*
 * test_util.h: the check protocol of the CPU tests. Each check prints "PASS name" or "FAIL name: why";
 * test_exit() returns non-zero if any check failed. test/run_tests.sh counts the lines.
 */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_test_failures = 0;

static void check(int ok, const char *name, const char *fmt, ...) {
    if (ok) {
        printf("PASS %s\n", name);
    } else {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL %s: ", name);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        g_test_failures++;
    }
    fflush(stdout);
}

static int test_exit(void) { return g_test_failures ? 1 : 0; }

// max |a - b| / max |b|: the per-tensor relative error used by every parity check (elementwise relative
// error is meaningless where the reference crosses zero).
static double max_rel_err(const float *a, const float *b, size_t n) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= maxdiff)) { maxdiff = d; } // NaN propagates to the result
        if (fabs((double)b[i]) > maxref) { maxref = fabs((double)b[i]); }
    }
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/*
 * Child processes, for tests of fatal errors and of multi-process protocols. child_start() forks and runs
 * fn(arg) in the child with stderr captured (the child exits 0 when fn returns); child_wait() waits until a
 * deadline on now_s()'s clock and kills a child that outlives it, so a hang fails a check instead of the run.
 */
typedef struct {
    pid_t pid;
    int err_fd;
    char err[8192];   // what the child wrote to stderr, NUL-terminated
    int status;       // exit status; 128 + signal when killed by one; -1 when killed at the deadline
    double start_s, elapsed_s;
} Child;

static void child_start(Child *c, void (*fn)(void *), void *arg) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(NULL); // else the child's exit() would print the parent's buffered output a second time
    c->start_s = now_s();
    c->pid = fork();
    if (c->pid < 0) { perror("fork"); exit(1); }
    if (c->pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    c->err_fd = fds[0];
}

#define CHILD_POLL_MS 10

static int child_wait(Child *c, double deadline_s) {
    int st = 0, killed = 0;
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        if (now_s() > deadline_s) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            killed = 1;
            break;
        }
        poll(NULL, 0, CHILD_POLL_MS);
    }
    c->status = killed ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    c->elapsed_s = now_s() - c->start_s;
    size_t len = 0;
    ssize_t got;
    while (len + 1 < sizeof(c->err) && (got = read(c->err_fd, c->err + len, sizeof(c->err) - 1 - len)) > 0) {
        len += (size_t)got;
    }
    c->err[len] = '\0';
    close(c->err_fd);
    return c->status;
}

#endif // TEST_UTIL_H
