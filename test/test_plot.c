/*
 * test_plot.c: the loss plot (llmc/plot.h) and the metrics records it is drawn from (llmc/logger.h).
 * - nice ticks: steps of 1, 2 or 5 times a power of ten, ranges snapped outwards to them, at most the intervals
 *   asked for, whole steps on the step axis, learning rates labelled in units of a power of ten;
 * - decimation: every point while they fit, else per pixel column its smallest and largest, in order;
 * - the SVG: well-formed (every tag closed in order, entities only where XML allows them), the series it should
 *   hold (polylines and their point counts, a dot per validation), for one point, no validation, no points at
 *   all, 20000 steps (a small file) and values that are not finite (left out);
 * - metrics records: non-finite values written as null, records read back, lines cut short refused.
 * PLOT_TEST_OUT=DIR keeps the pictures drawn here (DIR/<case>.svg), to look at them.
 */
#include "../llmc/logger.h"
#include "../llmc/rng.h"
#include "test_util.h"

#define SVG_COLUMNS (PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT) // the panels' width in pixels: decimation's columns

// ----------------------------------------------------------------------------------------------------------
// ticks

static int is_nice(double step) {
    double mag = pow(10.0, floor(log10(step) + 1e-9)), f = step / mag;
    return fabs(f - 1) < 1e-9 || fabs(f - 2) < 1e-9 || fabs(f - 5) < 1e-9;
}

static int is_multiple(double x, double step) { return fabs(x / step - round(x / step)) < 1e-6; }

// The axis covers [lo, hi] with a nice step, ends on multiples of it, and has 1..max intervals.
static int axis_ok(const Axis *a, double lo, double hi, int max_intervals) {
    return is_nice(a->step) && is_multiple(a->lo, a->step) && is_multiple(a->hi, a->step) && a->lo <= lo &&
           a->hi >= hi && a->intervals >= 1 && a->intervals <= max_intervals &&
           fabs(a->lo + a->intervals * a->step - a->hi) < 1e-6 * a->step;
}

static void test_ticks(void) {
    check(nice_at_least(0.3) == 0.5 && nice_at_least(7) == 10 && nice_at_least(1) == 1 &&
              fabs(nice_at_least(0.00013) - 2e-4) < 1e-12,
          "plot_nice_step", "0.3 -> %g, 7 -> %g, 1 -> %g, 0.00013 -> %g", nice_at_least(0.3), nice_at_least(7),
          nice_at_least(1), nice_at_least(0.00013));
    Axis a = nice_axis(5.83, 8.2, 8, 0);
    check(axis_ok(&a, 5.83, 8.2, 8) && a.step == 0.5 && a.lo == 5.5 && a.hi == 8.5, "plot_nice_loss_axis",
          "[5.83, 8.2] -> [%g, %g] step %g", a.lo, a.hi, a.step);
    // many ranges: always a valid axis, and not much coarser than asked (1-2-5: at most 2.5x, plus snapping)
    int bad = 0;
    for (int i = 0; i < 2000 && bad == 0; i++) {
        double lo = rng_uniform(7, 0, (uint64_t)i) * 20 - 5, span = pow(10.0, rng_uniform(7, 1, (uint64_t)i) * 8 - 5);
        int max_intervals = 3 + i % 8;
        Axis r = nice_axis(lo, lo + span, max_intervals, 0);
        if (!axis_ok(&r, lo, lo + span, max_intervals) || r.intervals * 5 < max_intervals) {
            bad = 1;
            printf("range [%g, %g] max %d -> [%g, %g] step %g, %d intervals\n", lo, lo + span, max_intervals, r.lo,
                   r.hi, r.step, r.intervals);
        }
    }
    check(!bad, "plot_nice_axis_ranges", "an axis above is not nice or does not cover its range");

    Axis lr = nice_axis(0, 6e-4f, 3, 0); // a float learning rate: 6.00000028e-4
    char l0[32], l3[32];
    axis_label(&lr, 0, axis_exponent(&lr), l0, sizeof(l0));
    axis_label(&lr, 3, axis_exponent(&lr), l3, sizeof(l3));
    check(axis_ok(&lr, 0, 6e-4, 3) && fabs(lr.step - 2e-4) < 1e-12 && axis_exponent(&lr) == -4 &&
              strcmp(l0, "0") == 0 && strcmp(l3, "6") == 0,
          "plot_lr_axis_scaled", "[0, 6e-4f] -> [%g, %g] step %g, exponent %d, labels '%s'..'%s'", lr.lo, lr.hi,
          lr.step, axis_exponent(&lr), l0, l3);

    Axis one = nice_axis(0, 1, PLOT_STEP_INTERVALS, 1), big = nice_axis(0, 20000, PLOT_STEP_INTERVALS, 1),
         odd = nice_axis(0, 13, PLOT_STEP_INTERVALS, 1);
    check(one.step == 1 && one.intervals == 1 && big.step == 2000 && big.hi == 20000 && odd.step == 2 && odd.hi == 14,
          "plot_step_axis_whole_steps", "1 -> step %g; 20000 -> step %g to %g; 13 -> step %g to %g", one.step,
          big.step, big.hi, odd.step, odd.hi);

    Axis loss = nice_axis(-0.3, 0.7, 5, 0), flat = nice_axis(3.5, 3.5, 5, 0);
    char l[32], m[32];
    axis_label(&loss, 1, 0, l, sizeof(l));
    axis_label(&loss, 2, 0, m, sizeof(m));
    check(strcmp(l, "0.0") == 0 && strcmp(m, "0.5") == 0 && axis_ok(&flat, 3.5, 3.5, 5) && flat.lo < 3.5 &&
              flat.hi > 3.5,
          "plot_tick_labels", "[-0.3, 0.7]: '%s' '%s'; one value 3.5 -> [%g, %g]", l, m, flat.lo, flat.hi);
}

// ----------------------------------------------------------------------------------------------------------
// decimation

// A noisy falling curve of n steps with a spike at `spike` and a dip at `dip`.
static void fill_curve(PlotSeries *s, int n, int spike, int dip) {
    for (int i = 1; i <= n; i++) {
        float v = 3.0f + 8.0f * expf(-(float)i / (0.02f * n)) + 0.2f * (float)rng_uniform(3, 0, (uint64_t)i);
        if (i == spike) { v += 5.0f; }
        if (i == dip) { v -= 1.0f; }
        plot_series_push(s, i, v);
    }
}

static void test_decimation(void) {
    PlotSeries s = {NULL, NULL, 0, 0};
    fill_curve(&s, 100, 0, 0);
    int *keep = (int *)malloc_check(20000 * sizeof(int), "keep");
    int n = plot_decimate(&s, 0, 100, SVG_COLUMNS, keep);
    check(n == 100 && keep[0] == 0 && keep[99] == 99, "plot_decimate_small_keeps_all", "kept %d of 100", n);
    plot_series_free(&s);

    const int steps = 20000, columns = SVG_COLUMNS, spike = 12345, dip = 17777;
    fill_curve(&s, steps, spike, dip);
    s.value[500] = NAN;
    n = plot_decimate(&s, 0, steps, columns, keep);
    int ordered = 1, has_spike = 0, has_dip = 0, has_nan = 0;
    for (int i = 0; i < n; i++) {
        ordered &= i == 0 || keep[i] > keep[i - 1];
        has_spike |= keep[i] == spike - 1;
        has_dip |= keep[i] == dip - 1;
        has_nan |= keep[i] == 500;
    }
    // every column's smallest and largest point is kept (brute force)
    int missing = 0;
    for (int c = 0; c < columns; c++) {
        int lo = -1, hi = -1;
        for (int i = 0; i < s.n; i++) {
            int col = (int)((double)s.step[i] / steps * columns);
            col = col >= columns ? columns - 1 : col;
            if (col != c || !isfinite(s.value[i])) { continue; }
            if (lo < 0 || s.value[i] < s.value[lo]) { lo = i; }
            if (hi < 0 || s.value[i] > s.value[hi]) { hi = i; }
        }
        int found_lo = lo < 0, found_hi = hi < 0;
        for (int i = 0; i < n; i++) {
            found_lo |= keep[i] == lo;
            found_hi |= keep[i] == hi;
        }
        missing += !found_lo + !found_hi;
    }
    check(n <= 2 * columns && n > columns && ordered && has_spike && has_dip && !has_nan && missing == 0,
          "plot_decimate_keeps_min_max", "kept %d (at most %d), ordered %d, spike %d, dip %d, NaN %d, columns missing "
          "their min or max: %d", n, 2 * columns, ordered, has_spike, has_dip, has_nan, missing);
    plot_series_free(&s);
    free(keep);
}

// ----------------------------------------------------------------------------------------------------------
// the SVG

// 1 where every tag is closed in the order opened, the root is <svg>, and '&' only starts an entity XML knows;
// else 0 with the reason in err.
static int xml_well_formed(const char *s, char *err, size_t cap) {
    enum { DEPTH = 16, NAME = 32 };
    char stack[DEPTH][NAME];
    int depth = 0, roots = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '&') {
            const char *ok[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"};
            int known = 0;
            for (int i = 0; i < 6; i++) { known |= strncmp(p, ok[i], strlen(ok[i])) == 0; }
            if (!known) { snprintf(err, cap, "a bare '&' at byte %ld", (long)(p - s)); return 0; }
            continue;
        }
        if (*p != '<') { continue; }
        if (strncmp(p, "<?", 2) == 0) {
            p = strstr(p, "?>");
            if (!p) { snprintf(err, cap, "an unclosed <?"); return 0; }
            continue;
        }
        const char *end = strchr(p, '>');
        if (!end) { snprintf(err, cap, "an unclosed tag at byte %ld", (long)(p - s)); return 0; }
        int closing = p[1] == '/', empty = end[-1] == '/';
        const char *name = p + 1 + closing;
        int len = (int)strcspn(name, " />");
        if (len <= 0 || len >= NAME) { snprintf(err, cap, "a bad tag at byte %ld", (long)(p - s)); return 0; }
        int quotes = 0;
        for (const char *q = p; q < end; q++) { quotes += *q == '"'; }
        if (quotes % 2) { snprintf(err, cap, "an unbalanced quote at byte %ld", (long)(p - s)); return 0; }
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, (size_t)len) != 0 || stack[depth - 1][len]) {
                snprintf(err, cap, "</%.*s> closes <%s>", len, name, depth ? stack[depth - 1] : "(nothing)");
                return 0;
            }
            depth--;
        } else if (!empty) {
            if (depth == DEPTH) { snprintf(err, cap, "nested too deep"); return 0; }
            if (depth == 0) { roots++; }
            snprintf(stack[depth++], NAME, "%.*s", len, name);
        } else if (depth == 0) {
            roots++;
        }
        p = end;
    }
    if (depth != 0) { snprintf(err, cap, "<%s> is never closed", stack[depth - 1]); return 0; }
    if (roots != 1 || !strstr(s, "<svg ")) { snprintf(err, cap, "%d root elements, want one <svg>", roots); return 0; }
    return 1;
}

// How many times `needle` occurs in s.
static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) { n++; }
    return n;
}

// The number of points of the polyline drawn in `color`, -1 where there is none.
static int polyline_points(const char *svg, const char *color) {
    char want[64];
    snprintf(want, sizeof(want), "<polyline fill=\"none\" stroke=\"%s\"", color);
    const char *p = strstr(svg, want);
    if (!p) { return -1; }
    p = strstr(p, "points=\"") + strlen("points=\"");
    const char *end = strchr(p, '"');
    int n = 1;
    for (; p < end; p++) { n += *p == ' '; }
    return n;
}

typedef struct {
    PlotSeries train, val, lr;
} Run;

static void run_free(Run *r) {
    plot_series_free(&r->train);
    plot_series_free(&r->val);
    plot_series_free(&r->lr);
}

// A run of `steps` steps (the loss falling from ~11 to ~3, a cosine learning rate) validated every val_every.
static void make_run(Run *r, int steps, int val_every) {
    memset(r, 0, sizeof(*r));
    fill_curve(&r->train, steps, 0, 0);
    for (int i = 1; i <= steps; i++) {
        plot_series_push(&r->lr, i, (float)(6e-4 * (0.55 + 0.45 * cos(acos(-1.0) * i / steps))));
        if (val_every > 0 && i % val_every == 0) { plot_series_push(&r->val, i, r->train.value[i - 1] + 0.05f); }
    }
}

// The SVG of run r, checked well-formed and free of non-numbers, kept in $PLOT_TEST_OUT/<name>.svg if set.
static char *draw(const char *name, const Run *r, const char *title) {
    LossPlot p = {title, "2 layers, 64 channels, 4 heads (3.32M parameters), fp32, 512 tokens a step", &r->train,
                  &r->val, &r->lr};
    size_t len;
    char *svg = plot_svg(&p, &len);
    char err[256] = "", check_name[128];
    int ok = xml_well_formed(svg, err, sizeof(err));
    snprintf(check_name, sizeof(check_name), "plot_svg_well_formed_%s", name);
    check(ok && strlen(svg) == len && !strstr(svg, "nan") && !strstr(svg, "inf"), check_name, "%s", err);
    const char *dir = getenv("PLOT_TEST_OUT");
    if (dir) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s.svg", dir, name);
        plot_svg_save(path, &p);
    }
    return svg;
}

static void test_svg(void) {
    char err[256];
    check(xml_well_formed("<svg a=\"1\"><g/><text>&amp;</text></svg>", err, sizeof(err)) &&
              !xml_well_formed("<svg><g></svg>", err, sizeof(err)) &&
              !xml_well_formed("<svg><text>a & b</text></svg>", err, sizeof(err)) &&
              !xml_well_formed("<svg><g>", err, sizeof(err)) && !xml_well_formed("<svg/><svg/>", err, sizeof(err)),
          "plot_xml_check_catches_errors", "the test's own well-formedness check misjudged an example");
    Run r;
    make_run(&r, 200, 20);
    char *svg = draw("run_200", &r, "runs/plotrun");
    check(polyline_points(svg, PLOT_TRAIN_COLOR) == 200 && polyline_points(svg, PLOT_VAL_COLOR) == 10 &&
              polyline_points(svg, PLOT_LR_COLOR) == 200 && count_of(svg, "fill=\"" PLOT_VAL_COLOR "\"") == 10 + 1 &&
              strstr(svg, ">runs/plotrun</text>") && strstr(svg, "validation loss") &&
              strstr(svg, "step 200: train loss") && !strstr(svg, "(step 200)"),
          "plot_svg_series", "points: train %d, val %d, lr %d; val dots %d (with the legend's)",
          polyline_points(svg, PLOT_TRAIN_COLOR), polyline_points(svg, PLOT_VAL_COLOR),
          polyline_points(svg, PLOT_LR_COLOR), count_of(svg, "fill=\"" PLOT_VAL_COLOR "\""));
    // the first steps' loss (~11) is cut off the top, and the subtitle says so
    check(strstr(svg, "; up to step 1") && strstr(svg, " the loss runs off the top (to "), "plot_svg_clips_first_steps", "no note of the clipped steps");
    free(svg);
    run_free(&r);

    make_run(&r, 1, 0);
    svg = draw("one_step", &r, "one step");
    check(polyline_points(svg, PLOT_TRAIN_COLOR) == -1 && count_of(svg, "<circle") == 2 &&
              !strstr(svg, "validation loss") && strstr(svg, "step 1: train loss"),
          "plot_svg_one_point", "a single point should be a dot (train, lr), no validation legend: %d circles",
          count_of(svg, "<circle"));
    free(svg);
    run_free(&r);

    make_run(&r, 300, 0);
    svg = draw("no_validation", &r, "no validation");
    check(polyline_points(svg, PLOT_TRAIN_COLOR) == 300 && polyline_points(svg, PLOT_VAL_COLOR) == -1 &&
              !strstr(svg, "validation loss"),
          "plot_svg_no_validation", "train %d points, val %d", polyline_points(svg, PLOT_TRAIN_COLOR),
          polyline_points(svg, PLOT_VAL_COLOR));
    free(svg);
    run_free(&r);

    make_run(&r, 20000, 250);
    svg = draw("steps_20000", &r, "twenty thousand steps");
    int train = polyline_points(svg, PLOT_TRAIN_COLOR);
    check(train > SVG_COLUMNS / 2 && train <= 2 * SVG_COLUMNS && polyline_points(svg, PLOT_VAL_COLOR) == 80 &&
              count_of(svg, "fill=\"" PLOT_VAL_COLOR "\"") == 1 && strlen(svg) < 64 * 1024,
          "plot_svg_many_steps", "train %d points, val %d, %zu bytes", train, polyline_points(svg, PLOT_VAL_COLOR),
          strlen(svg));
    free(svg);
    run_free(&r);

    memset(&r, 0, sizeof(r));
    svg = draw("empty", &r, "nothing yet");
    check(strstr(svg, "no steps yet") && polyline_points(svg, PLOT_TRAIN_COLOR) == -1, "plot_svg_no_points",
          "no placeholder text");
    free(svg);

    make_run(&r, 50, 10);
    r.train.value[20] = NAN;
    r.train.value[30] = INFINITY;
    r.val.value[2] = NAN;
    svg = draw("non_finite", &r, "a <run> & \"its\" folder");
    check(polyline_points(svg, PLOT_TRAIN_COLOR) == 48 && polyline_points(svg, PLOT_VAL_COLOR) == 4 &&
              strstr(svg, ">a &lt;run&gt; &amp; &quot;its&quot; folder</text>"),
          "plot_svg_skips_non_finite_escapes_title", "train %d, val %d points", polyline_points(svg, PLOT_TRAIN_COLOR),
          polyline_points(svg, PLOT_VAL_COLOR));
    free(svg);
    char long_title[300];
    memset(long_title, 'x', sizeof(long_title) - 1);
    long_title[sizeof(long_title) - 1] = '\0';
    memcpy(long_title + 200, "\xc3\xa9", 2); // a two-byte character where the cut might fall
    svg = draw("long_title", &r, long_title);
    check(strstr(svg, ">...x") != NULL, "plot_svg_long_title_keeps_end", "the title was not cut");
    free(svg);
    run_free(&r);
}

// ----------------------------------------------------------------------------------------------------------
// metrics records

static void test_metrics_records(void) {
    char path[] = "/tmp/test_plot_metrics_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w+");
    Logger lg;
    memset(&lg, 0, sizeof(lg));
    lg.metrics = f;
    StepStats s = {7, 10, NAN, 6e-4f, INFINITY, 12.5, 1000.0, -1.0, -1.0};
    metrics_train(&lg, &s);
    rewind(f);
    char line[512] = "";
    if (!fgets(line, sizeof(line), f)) { line[0] = '\0'; }
    line[strcspn(line, "\n")] = '\0';
    MetricsRecord r;
    int parsed = metrics_parse(line, &r);
    check(strcmp(line, "{\"step\":7,\"train_loss\":null,\"lr\":0.000600000028,\"norm\":null,\"ms\":12.5,"
                       "\"tokens_per_s\":1000}") == 0 && parsed && r.step == 7 && r.is_train && !r.is_val &&
              isnan(r.train_loss) && (float)r.lr == 6e-4f && lg.train.n == 1 && lg.lr.n == 1,
          "metrics_non_finite_is_null", "line '%s'", line);
    MetricsRecord v;
    check(metrics_parse("{\"step\":20,\"val_loss\":3.25}", &v) && v.is_val && !v.is_train && v.val_loss == 3.25 &&
              !metrics_parse("{\"step\":21,\"train_loss\":3.2", &v) && !metrics_parse("", &v) &&
              !metrics_parse("{\"train_loss\":3}", &v),
          "metrics_parse_records", "a record was misread or a torn line accepted");
    fclose(f);
    unlink(path);
    plot_series_free(&lg.train);
    plot_series_free(&lg.lr);
}

int main(void) {
    test_ticks();
    test_decimation();
    test_svg();
    test_metrics_records();
    return test_exit();
}
