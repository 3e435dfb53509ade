/*
 * test_util.h: the check protocol of the CPU tests. Each check prints "PASS name" or "FAIL name: why";
 * test_exit() returns non-zero if any check failed. test/run_tests.sh counts the lines.
 */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

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

#endif // TEST_UTIL_H
