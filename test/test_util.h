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
#include <string.h>
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

// Flips one bit of the byte at offset `at` of the file at path (a test's corruption of a file it wrote).
static void flip_byte(const char *path, long long at) {
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, (long)at, SEEK_SET) != 0) {
        fprintf(stderr, "flip_byte: cannot open '%s' at byte %lld\n", path, at);
        exit(1);
    }
    int c = fgetc(f);
    fseek(f, (long)at, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

// snprintf into out[cap] that says when out was too small: the text is cut to end in "..." and 0 is returned. A
// message keeps what fits; a caller building a path must stop on 0, since a cut path names another file.
__attribute__((format(printf, 3, 4))) static int format_into(char *out, size_t cap, const char *fmt, ...) {
    static const char CUT_MARK[] = "...";
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) { return 1; }
    if (cap >= sizeof(CUT_MARK)) { memcpy(out + cap - sizeof(CUT_MARK), CUT_MARK, sizeof(CUT_MARK)); }
    return 0;
}

// max |a - b| / max |b|: the per-tensor relative error used by every parity check (elementwise relative
// error is meaningless where the reference crosses zero). One definition for float and double arrays (the GPU
// kernel tests compare against fp64 references).
#define DEFINE_MAX_REL_ERR(name, T)                                                                                  \
    static double name(const T *a, const T *b, size_t n) {                                                           \
        double maxdiff = 0.0, maxref = 0.0;                                                                          \
        for (size_t i = 0; i < n; i++) {                                                                             \
            double d = fabs((double)a[i] - (double)b[i]);                                                            \
            if (!(d <= maxdiff)) { maxdiff = d; } /* NaN propagates to the result */                                 \
            if (fabs((double)b[i]) > maxref) { maxref = fabs((double)b[i]); }                                        \
        }                                                                                                            \
        return maxref > 0 ? maxdiff / maxref : maxdiff;                                                              \
    }
DEFINE_MAX_REL_ERR(max_rel_err, float)
DEFINE_MAX_REL_ERR(max_rel_err_f64, double)

/*
 * Weights after AdamW updates, compared between two runs that differ only in rounding (summation order, bf16
 * roundings). AdamW's step is lr * mhat / (sqrt(vhat) + eps), whose size does not depend on the gradient's scale:
 * where the gradient is zero up to rounding noise (the key biases' gradient is exactly zero in exact arithmetic,
 * since softmax ignores a constant added to a row of scores), the step is that noise amplified to up to lr, and its
 * sign is the noise's. Two runs can then differ there by up to the sign-flip bound, the sum over the steps of
 * twice the largest step AdamW can take:
 *   mhat_t = sum_k w_k g_k, vhat_t = sum_k u_k g_k^2 (k = 1..t), w_k = (1-b1) b1^(t-k) / (1-b1^t),
 *   u_k = (1-b2) b2^(t-k) / (1-b2^t); by Cauchy-Schwarz |mhat_t| <= sqrt(sum_k w_k^2 / u_k) sqrt(vhat_t),
 * so |step_t| <= lr_t * adam_step_bound(b1, b2, t), for any gradients (clipped or not). It is 1 at t = 1 and
 * grows towards sqrt((1-b1)^2 / ((1-b2)(1 - b1^2/b2))) where b1^2 < b2 (1.17 at 0.9/0.95, 7.3 at 0.9/0.999), so the
 * usual "2 lr per step" would understate it. Weight decay (lr wd p) only shrinks a difference between two runs.
 */
static double adam_step_bound(double beta1, double beta2, int t) {
    double m_norm = 1.0 - pow(beta1, t), v_norm = 1.0 - pow(beta2, t), sum = 0.0;
    for (int k = 1; k <= t; k++) {
        double w = (1.0 - beta1) * pow(beta1, t - k) / m_norm, u = (1.0 - beta2) * pow(beta2, t - k) / v_norm;
        if (w == 0.0) { continue; }
        if (u == 0.0) { return INFINITY; } // beta2 = 0: vhat forgets a gradient that mhat still holds
        sum += w * w / u;
    }
    return sqrt(sum);
}

// The sign-flip bound after `steps` steps whose learning rates are lr[0..steps-1] (see adam_step_bound).
static double adam_flip_bound(const float *lr, int steps, double beta1, double beta2) {
    double bound = 0.0;
    for (int t = 1; t <= steps; t++) { bound += 2.0 * (double)lr[t - 1] * adam_step_bound(beta1, beta2, t); }
    return bound;
}

/*
 * One tensor of updated weights `a` against the reference `b` (n elements). Elements flagged in `exempt` (NULL:
 * none) are those whose gradient is known to be zero up to rounding: held only to the sign-flip bound. Every other
 * element must be within tol * max|b|, except at most ceil(fraction * n) of them (gradients near zero at some
 * step, which no one recorded), and those too within flip_bound + tol * max|b|. A broken update or reduction moves
 * most elements, which this still catches. NaN anywhere fails.
 */
typedef struct {
    size_t n, held_beyond, exempt_beyond, beyond_bound, allowed; // beyond tol: held and exempt elements
    double strict;    // max |a-b| / max|b| over the held elements within tol: the part held strictly
    double held;      // max |a-b| / max|b| over all held elements
    double max_diff;  // max |a-b| over all elements
    int ok;
} UpdateVerdict;

static UpdateVerdict judge_updated(const float *a, const float *b, size_t n, const unsigned char *exempt, double tol,
                                   double fraction, double flip_bound) {
    UpdateVerdict v = {0};
    v.n = n;
    v.allowed = (size_t)ceil(fraction * (double)n);
    double maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)b[i]) > maxref) { maxref = fabs((double)b[i]); }
    }
    double scale = maxref > 0 ? maxref : 1.0, limit = tol * maxref;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= v.max_diff)) { v.max_diff = d; } // NaN propagates
        int is_exempt = exempt && exempt[i];
        if (!is_exempt && !(d / scale <= v.held)) { v.held = d / scale; }
        if (d <= limit) {
            if (!is_exempt && d / scale > v.strict) { v.strict = d / scale; }
            continue;
        }
        if (!(d <= flip_bound + limit)) { v.beyond_bound++; }
        if (is_exempt) { v.exempt_beyond++; } else { v.held_beyond++; }
    }
    v.ok = v.beyond_bound == 0 && v.held_beyond <= v.allowed;
    return v;
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

// Runs fn(arg) in a child and checks that it failed with status 1 and an error line holding `expect`: how a test shows
// that bad input is refused with one line (the child, so that the refusal's exit does not end the test).
static void expect_child_fails(void (*fn)(void *), void *arg, const char *name, const char *expect) {
    Child c;
    child_start(&c, fn, arg);
    child_wait(&c, now_s() + 30.0);
    check(c.status == 1 && strstr(c.err, expect) != NULL, name, "exit %d, stderr: %s", c.status, c.err);
}

#endif // TEST_UTIL_H
