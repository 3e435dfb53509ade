/*
 * plot.h: the run's loss curve as a self-contained SVG (out_dir/loss.svg), in plain C.
 *
 * Two panels over the same step axis: the training loss (thin line) and the validation loss (line with points)
 * above, the learning rate below. Ticks fall on "nice" numbers (1, 2 or 5 times a power of ten). A long run is
 * decimated to the smallest and the largest value of each pixel column, so the file stays small (two points a
 * column at most) and every spike still shows. The picture is plain SVG: no scripts, no fonts or files from
 * elsewhere, a white background; any browser or image viewer shows it. Non-finite values are left out.
 * plot_svg_save() writes it atomically (utils.h's AtomicFile), so a viewer never reads half a picture.
 */
#ifndef LLMC_PLOT_H
#define LLMC_PLOT_H

#include <limits.h>
#include <math.h>

#include "utils.h"

// ----------------------------------------------------------------------------------------------------------
// a growing text buffer (the SVG is built in memory, then written in one atomic write)

typedef struct {
    char *s;
    size_t len, cap;
} TextBuf;

LLMC_PRINTF(2, 3) static void text_printf(TextBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) { fail("formatting the loss plot failed"); }
    if (b->len + (size_t)need + 1 > b->cap) {
        b->cap = 2 * (b->len + (size_t)need + 1);
        b->s = (char *)realloc_check(b->s, b->cap, "the loss plot");
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

// s as XML character data: markup characters escaped, control bytes (not allowed in XML 1.0) as '?'.
static inline void text_escaped(TextBuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': text_printf(b, "&amp;"); break;
        case '<': text_printf(b, "&lt;"); break;
        case '>': text_printf(b, "&gt;"); break;
        case '"': text_printf(b, "&quot;"); break;
        default: text_printf(b, "%c", c < 0x20 ? '?' : (char)c);
        }
    }
}

// ----------------------------------------------------------------------------------------------------------
// series: (step, value) points in step order

typedef struct {
    int *step;
    float *value;
    int n, cap;
} PlotSeries;

#define PLOT_SERIES_FIRST_CAP 1024

static inline void plot_series_push(PlotSeries *s, int step, float value) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : PLOT_SERIES_FIRST_CAP;
        s->step = (int *)realloc_check(s->step, (size_t)s->cap * sizeof(int), "a plot series");
        s->value = (float *)realloc_check(s->value, (size_t)s->cap * sizeof(float), "a plot series");
    }
    s->step[s->n] = step;
    s->value[s->n] = value;
    s->n++;
}

static inline void plot_series_free(PlotSeries *s) {
    free(s->step);
    free(s->value);
    memset(s, 0, sizeof(*s));
}

// The smallest and largest of the finite values seen so far.
typedef struct {
    double lo, hi;
    int n; // how many values; lo and hi are meaningless while 0
} PlotRange;

// Adds the finite values of the points of s after step `after` to r.
static inline void plot_range_add(PlotRange *r, const PlotSeries *s, int after) {
    for (int i = 0; i < s->n; i++) {
        double v = s->value[i];
        if (s->step[i] <= after || !isfinite(v)) { continue; }
        if (r->n == 0 || v < r->lo) { r->lo = v; }
        if (r->n == 0 || v > r->hi) { r->hi = v; }
        r->n++;
    }
}

// The index of the last finite point, or -1.
static inline int plot_series_last(const PlotSeries *s) {
    for (int i = s->n - 1; i >= 0; i--) {
        if (isfinite(s->value[i])) { return i; }
    }
    return -1;
}

// ----------------------------------------------------------------------------------------------------------
// axes with nice ticks

#define PLOT_EPS 1e-6        // slack in tick arithmetic, in steps: data in float (6e-4f is 6.00000028e-4)
#define PLOT_FLAT_PAD 0.05   // a range of one value is widened by this fraction of it (by 1 around zero)
#define PLOT_SCALED_EXP (-3) // tick values below 10^this are labelled in units of a power of ten ("x1e-4")

typedef struct {
    double lo, hi, step; // the range: multiples of step around the data
    int intervals;       // ticks at lo, lo + step, ..., hi
} Axis;

// The smallest of 1, 2 or 5 times a power of ten that is at least x (> 0).
static inline double nice_at_least(double x) {
    double mag = pow(10.0, floor(log10(x)));
    double f = x / mag;
    double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nice * mag;
}

// An axis over [lo, hi] snapped outwards to multiples of a nice step of at least min_step, with at most
// max_intervals intervals (a range of one value is widened first: one point, a constant learning rate).
static inline Axis nice_axis(double lo, double hi, int max_intervals, double min_step) { // max_intervals >= 2
    if (!(hi > lo)) {
        double pad = lo != 0 ? fabs(lo) * PLOT_FLAT_PAD : 1.0;
        lo -= pad;
        hi += pad;
    }
    Axis a;
    a.step = nice_at_least((hi - lo) / max_intervals * (1 - PLOT_EPS));
    for (;;) { // snapping outwards may add an interval at each end: take the next nice step until it fits
        if (a.step < min_step) { a.step = min_step; }
        a.lo = floor(lo / a.step + PLOT_EPS) * a.step;
        a.hi = ceil(hi / a.step - PLOT_EPS) * a.step;
        a.intervals = (int)llround((a.hi - a.lo) / a.step);
        if (a.intervals <= max_intervals) { return a; }
        a.step = nice_at_least(a.step * (1 + 2 * PLOT_EPS));
    }
}

static inline double axis_tick(const Axis *a, int i) { return a->lo + i * a->step; }

// The power of ten the axis's labels are in units of: 0, or for tiny values (learning rates) that of the largest.
static inline int axis_exponent(const Axis *a) {
    double top = fmax(fabs(a->lo), fabs(a->hi));
    if (top == 0 || top >= pow(10.0, PLOT_SCALED_EXP)) { return 0; }
    return (int)floor(log10(top) + PLOT_EPS);
}

// Tick i's label: as many decimals as the step needs, in units of 10^exp10.
static inline void axis_label(const Axis *a, int i, int exp10, char *out, size_t cap) {
    double unit = pow(10.0, exp10), v = axis_tick(a, i) / unit, step = a->step / unit;
    if (fabs(v) < step * PLOT_EPS) { v = 0; } // no "-0.0"
    int decimals = (int)-floor(log10(step) + PLOT_EPS);
    snprintf(out, cap, "%.*f", decimals > 0 ? decimals : 0, v);
}

// ----------------------------------------------------------------------------------------------------------
// decimation

static inline int plot_keep_column(int *keep, int n, int lo, int hi) {
    keep[n++] = lo < hi ? lo : hi;
    if (lo != hi) { keep[n++] = lo < hi ? hi : lo; }
    return n;
}

/*
 * The indices (into keep, room for s->n) of the points to draw, in order: every finite point where there are at
 * most two a pixel column, else per column (of `columns` over steps [x0, x1]) the smallest and the largest, so
 * the outline of the curve, spikes included, is what all the points would draw. Returns how many.
 */
static inline int plot_decimate(const PlotSeries *s, double x0, double x1, int columns, int *keep) {
    int finite = 0;
    for (int i = 0; i < s->n; i++) {
        if (isfinite(s->value[i])) { keep[finite++] = i; }
    }
    if (finite <= 2 * columns) { return finite; }
    int n = 0, col = -1, lo = -1, hi = -1;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->value[i])) { continue; }
        int c = (int)((s->step[i] - x0) / (x1 - x0) * columns);
        c = c < 0 ? 0 : c >= columns ? columns - 1 : c;
        if (c != col) {
            if (col >= 0) { n = plot_keep_column(keep, n, lo, hi); }
            col = c;
            lo = hi = i;
        }
        if (s->value[i] < s->value[lo]) { lo = i; }
        if (s->value[i] > s->value[hi]) { hi = i; }
    }
    return col >= 0 ? plot_keep_column(keep, n, lo, hi) : n;
}

// ----------------------------------------------------------------------------------------------------------
// the picture

typedef struct {
    const char *title;                  // the run (its folder)
    const char *description;            // the model, under the title
    const PlotSeries *train, *val, *lr; // by step; val may be empty (no validation)
} LossPlot;

// Layout, in pixels: rows of title, description, latest values and legend, the loss panel, the learning-rate
// panel, the step axis.
#define PLOT_WIDTH 800
#define PLOT_HEIGHT 560
#define PLOT_LEFT 70  // the loss axis's tick labels and its name, left of the panels
#define PLOT_RIGHT 24 // the last step's tick label, right of them
#define PLOT_TITLE_Y 24
#define PLOT_DESCRIPTION_Y 44
#define PLOT_VALUES_Y 62
#define PLOT_LEGEND_Y 84
#define PLOT_LOSS_TOP 98
#define PLOT_LOSS_HEIGHT 300
#define PLOT_PANEL_GAP 24
#define PLOT_LR_HEIGHT 88
#define PLOT_STEP_LABELS_DY 17 // the step tick labels, below the lower panel
#define PLOT_STEP_NAME_DY 36   // "step", below them
#define PLOT_AXIS_NAME_X 16    // the panels' rotated axis names
#define PLOT_TICK_GAP 6        // between a tick label and its panel
#define PLOT_FONT_SIZE 12
#define PLOT_TITLE_FONT_SIZE 15
#define PLOT_CHAR_WIDTH 7.0 // a rough width of one character at PLOT_FONT_SIZE, to space the legend
#define PLOT_LEGEND_LINE 22 // the sample line in front of a legend entry
#define PLOT_LEGEND_SPACE 26
#define PLOT_CLAMP 4.0 // points far outside a panel are drawn at this many panel heights from it (bounded numbers)

#define PLOT_LOSS_INTERVALS 8
#define PLOT_LR_INTERVALS 4
#define PLOT_LR_HEADROOM 1.05 // the learning-rate axis reaches this much beyond the peak (not on the frame)
#define PLOT_STEP_INTERVALS 10
#define PLOT_LOSS_PAD 0.03       // the loss axis reaches this fraction of the data's range beyond it
#define PLOT_SKIP_FRACTION 0.05  // the loss axis's top ignores the first 5% of the steps (plot_loss_axis)
#define PLOT_MAX_MARKERS 60      // validation points are dotted while there are at most this many
#define PLOT_MARKER_RADIUS 3.0
#define PLOT_TITLE_MAX_BYTES 64 // a longer title keeps its end (a folder's own name), so it stays inside the picture

#define PLOT_TRAIN_COLOR "#1f77b4"
#define PLOT_VAL_COLOR "#d62728"
#define PLOT_LR_COLOR "#2ca02c"
#define PLOT_GRID_COLOR "#e6e6e6"
#define PLOT_FRAME_COLOR "#999999"
#define PLOT_MUTED_COLOR "#555555"

typedef struct {
    double left, top, width, height;
    Axis x, y;
    const char *clip_id; // the clipPath that keeps its lines inside it
} Panel;

static inline double panel_px(const Panel *p, double x) {
    return p->left + (x - p->x.lo) / (p->x.hi - p->x.lo) * p->width;
}

static inline double panel_py(const Panel *p, double y) {
    double py = p->top + (p->y.hi - y) / (p->y.hi - p->y.lo) * p->height;
    double lo = p->top - PLOT_CLAMP * p->height, hi = p->top + (1 + PLOT_CLAMP) * p->height;
    return py < lo ? lo : py > hi ? hi : py;
}

// What the loss axis cuts off the top: the largest value, and the last step above the axis (0: none is).
typedef struct {
    double max;
    int until;
} PlotClip;

static inline void plot_clip_add(PlotClip *c, const PlotSeries *s, double top) {
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->value[i]) || s->value[i] <= top) { continue; }
        if (c->until == 0 || s->value[i] > c->max) { c->max = s->value[i]; }
        if (s->step[i] > c->until) { c->until = s->step[i]; }
    }
}

/*
 * The loss axis: from the smallest loss to the largest after the first PLOT_SKIP_FRACTION of the steps (the
 * largest of all where no point comes after them). A GPT's loss falls from ~11 (the log of the vocabulary) to
 * ~3 early in a run; an axis up to 11 would squeeze everything after that into the bottom of the panel, where
 * the differences that matter late in a run (hundredths) do not show. So the first steps may run off the top;
 * *clip says how far (the subtitle tells). Linear, not log: equal differences look equal.
 */
static inline Axis plot_loss_axis(const LossPlot *p, int last_step, PlotClip *clip) {
    int skip = (int)(PLOT_SKIP_FRACTION * last_step);
    PlotRange late = {0, 0, 0}, all = {0, 0, 0};
    plot_range_add(&late, p->train, skip);
    plot_range_add(&late, p->val, skip);
    plot_range_add(&all, p->train, INT_MIN);
    plot_range_add(&all, p->val, INT_MIN);
    if (all.n == 0) { return nice_axis(0, 1, PLOT_LOSS_INTERVALS, 0); }
    double lo = all.lo, hi = late.n > 0 ? late.hi : all.hi; // the lowest point always shows
    double pad = (hi - lo) * PLOT_LOSS_PAD;
    Axis a = nice_axis(lo - pad, hi + pad, PLOT_LOSS_INTERVALS, 0);
    plot_clip_add(clip, p->train, a.hi);
    plot_clip_add(clip, p->val, a.hi);
    return a;
}

static inline void svg_text(TextBuf *b, double x, double y, const char *anchor, const char *extra, const char *s) {
    text_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
    text_escaped(b, s);
    text_printf(b, "</text>\n");
}

// A panel's grid and tick labels (the step labels under the lower panel only) and its axis name.
static inline void draw_grid(TextBuf *b, const Panel *p, const char *name, int step_labels) {
    char label[64];
    text_printf(b, "<g stroke=\"%s\" stroke-width=\"1\">\n", PLOT_GRID_COLOR);
    for (int i = 0; i <= p->y.intervals; i++) {
        double y = panel_py(p, axis_tick(&p->y, i));
        text_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", p->left, y, p->left + p->width, y);
    }
    for (int i = 0; i <= p->x.intervals; i++) {
        double x = panel_px(p, axis_tick(&p->x, i));
        text_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, p->top, x, p->top + p->height);
    }
    text_printf(b, "</g>\n");
    int exp10 = axis_exponent(&p->y);
    for (int i = 0; i <= p->y.intervals; i++) {
        axis_label(&p->y, i, exp10, label, sizeof(label));
        svg_text(b, p->left - PLOT_TICK_GAP, panel_py(p, axis_tick(&p->y, i)) + PLOT_FONT_SIZE / 3.0, "end", "", label);
    }
    for (int i = 0; step_labels && i <= p->x.intervals; i++) {
        axis_label(&p->x, i, 0, label, sizeof(label));
        svg_text(b, panel_px(p, axis_tick(&p->x, i)), p->top + p->height + PLOT_STEP_LABELS_DY, "middle", "", label);
    }
    // the name, with the labels' unit where they are scaled: "lr (x1e-4)", the x being U+00D7 in UTF-8
    snprintf(label, sizeof(label), "%s", name);
    if (exp10 != 0) { snprintf(label, sizeof(label), "%s (\xc3\x97" "1e%d)", name, exp10); }
    double mid = p->top + p->height / 2;
    char rotate[64];
    snprintf(rotate, sizeof(rotate), " transform=\"rotate(-90 %d %.1f)\"", PLOT_AXIS_NAME_X, mid);
    svg_text(b, PLOT_AXIS_NAME_X, mid, "middle", rotate, label);
}

static inline void draw_frame(TextBuf *b, const Panel *p) {
    text_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"%s\"/>\n",
                p->left, p->top, p->width, p->height, PLOT_FRAME_COLOR);
}

// The panel's clip: its height exactly (a curve runs off the top, not over the title), and a dot's room on either
// side (a validation point on the last step shows whole).
static inline void draw_clip(TextBuf *b, const Panel *p) {
    double r = PLOT_MARKER_RADIUS + 1;
    text_printf(b, "<clipPath id=\"%s\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
                p->clip_id, p->left - r, p->top, p->width + 2 * r, p->height);
}

// The series as a polyline of its decimated points, and a dot on each where `dots` (or where there is only one).
static inline void draw_series(TextBuf *b, const Panel *p, const PlotSeries *s, const char *color, double width,
                               int dots) {
    int *keep = (int *)malloc_check((size_t)s->n * sizeof(int), "the loss plot's points");
    int n = plot_decimate(s, p->x.lo, p->x.hi, (int)p->width, keep);
    text_printf(b, "<g clip-path=\"url(#%s)\">\n", p->clip_id);
    if (n > 1) {
        text_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-linejoin=\"round\" "
                    "points=\"", color, width);
        for (int i = 0; i < n; i++) {
            text_printf(b, "%s%.1f,%.1f", i ? " " : "", panel_px(p, s->step[keep[i]]), panel_py(p, s->value[keep[i]]));
        }
        text_printf(b, "\"/>\n");
    }
    for (int i = 0; (dots || n == 1) && i < n; i++) {
        text_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"white\"/>\n",
                    panel_px(p, s->step[keep[i]]), panel_py(p, s->value[keep[i]]), PLOT_MARKER_RADIUS, color);
    }
    text_printf(b, "</g>\n");
    free(keep);
}

// One legend entry at *x: a short line (with a dot where `dot`) in the series' color, then its name.
static inline void draw_legend_entry(TextBuf *b, double *x, const char *color, int dot, const char *name) {
    double y = PLOT_LEGEND_Y - PLOT_FONT_SIZE / 3.0;
    text_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", *x, y,
                *x + PLOT_LEGEND_LINE, y, color);
    if (dot) {
        text_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"white\"/>\n",
                    *x + PLOT_LEGEND_LINE / 2.0, y, PLOT_MARKER_RADIUS, color);
    }
    svg_text(b, *x + PLOT_LEGEND_LINE + PLOT_TICK_GAP, PLOT_LEGEND_Y, "start", "", name);
    *x += PLOT_LEGEND_LINE + PLOT_TICK_GAP + PLOT_CHAR_WIDTH * (double)strlen(name) + PLOT_LEGEND_SPACE;
}

// The title: the end of a long one, from a whole UTF-8 character on.
static inline void draw_title(TextBuf *b, const char *title) {
    char text[PLOT_TITLE_MAX_BYTES + 8] = "";
    size_t len = strlen(title);
    if (len > PLOT_TITLE_MAX_BYTES) {
        title += len - PLOT_TITLE_MAX_BYTES;
        while ((*title & 0xC0) == 0x80) { title++; } // a UTF-8 continuation byte
        strcpy(text, "...");
    }
    strcat(text, title);
    char style[64];
    snprintf(style, sizeof(style), " font-size=\"%d\" font-weight=\"bold\"", PLOT_TITLE_FONT_SIZE);
    svg_text(b, PLOT_LEFT, PLOT_TITLE_Y, "start", style, text);
}

// The title and the model, then the latest values and what the loss axis cuts off.
static inline void draw_titles(TextBuf *b, const LossPlot *p, const PlotClip *clip) {
    char line[256] = "no steps yet", part[128];
    draw_title(b, p->title);
    svg_text(b, PLOT_LEFT, PLOT_DESCRIPTION_Y, "start", "", p->description);
    int t = plot_series_last(p->train), v = plot_series_last(p->val);
    if (t >= 0) { snprintf(line, sizeof(line), "step %d: train loss %.4f", p->train->step[t], p->train->value[t]); }
    if (v >= 0) {
        snprintf(part, sizeof(part), ", validation loss %.4f", p->val->value[v]);
        strncat(line, part, sizeof(line) - strlen(line) - 1);
        if (t < 0 || p->val->step[v] != p->train->step[t]) { // validated less often than trained
            snprintf(part, sizeof(part), " (step %d)", p->val->step[v]);
            strncat(line, part, sizeof(line) - strlen(line) - 1);
        }
    }
    if (clip->until > 0) {
        snprintf(part, sizeof(part), "; up to step %d the loss runs off the top (to %.2f)", clip->until, clip->max);
        strncat(line, part, sizeof(line) - strlen(line) - 1);
    }
    svg_text(b, PLOT_LEFT, PLOT_VALUES_Y, "start", " fill=\"" PLOT_MUTED_COLOR "\"", line);
}

// The last step any series reaches (1 where there is none, so the step axis is never empty).
static inline int plot_last_step(const LossPlot *p) {
    int last = 1;
    const PlotSeries *all[3] = {p->train, p->val, p->lr};
    for (int i = 0; i < 3; i++) {
        if (all[i]->n > 0 && all[i]->step[all[i]->n - 1] > last) { last = all[i]->step[all[i]->n - 1]; }
    }
    return last;
}

// The SVG text of the plot (NUL-terminated, *len bytes; the caller frees it).
static inline char *plot_svg(const LossPlot *p, size_t *len) {
    int last = plot_last_step(p);
    Panel loss, lr;
    PlotClip clip = {0, 0};
    loss.left = lr.left = PLOT_LEFT;
    loss.width = lr.width = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT;
    loss.top = PLOT_LOSS_TOP;
    loss.height = PLOT_LOSS_HEIGHT;
    lr.top = loss.top + loss.height + PLOT_PANEL_GAP;
    lr.height = PLOT_LR_HEIGHT;
    loss.x = lr.x = nice_axis(0, last, PLOT_STEP_INTERVALS, 1); // whole steps
    loss.y = plot_loss_axis(p, last, &clip);
    PlotRange lr_range = {0, 0, 0};
    plot_range_add(&lr_range, p->lr, INT_MIN);
    lr.y = nice_axis(0, lr_range.n ? lr_range.hi * PLOT_LR_HEADROOM : 0, PLOT_LR_INTERVALS, 0); // from zero
    loss.clip_id = "loss-panel";
    lr.clip_id = "lr-panel";

    TextBuf b = {NULL, 0, 0};
    text_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"sans-serif\" font-size=\"%d\">\n", PLOT_WIDTH, PLOT_HEIGHT, PLOT_WIDTH, PLOT_HEIGHT,
                PLOT_FONT_SIZE);
    text_printf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n<defs>\n", PLOT_WIDTH, PLOT_HEIGHT);
    draw_clip(&b, &loss);
    draw_clip(&b, &lr);
    text_printf(&b, "</defs>\n");
    draw_titles(&b, p, &clip);
    double x = PLOT_LEFT;
    draw_legend_entry(&b, &x, PLOT_TRAIN_COLOR, 0, "train loss");
    if (p->val->n > 0) { draw_legend_entry(&b, &x, PLOT_VAL_COLOR, 1, "validation loss"); }
    draw_legend_entry(&b, &x, PLOT_LR_COLOR, 0, "learning rate");
    draw_grid(&b, &loss, "loss", 0);
    draw_grid(&b, &lr, "lr", 1);
    svg_text(&b, loss.left + loss.width / 2, lr.top + lr.height + PLOT_STEP_NAME_DY, "middle", "", "step");
    draw_series(&b, &loss, p->train, PLOT_TRAIN_COLOR, 1.0, 0);
    draw_series(&b, &loss, p->val, PLOT_VAL_COLOR, 2.0, p->val->n <= PLOT_MAX_MARKERS);
    draw_series(&b, &lr, p->lr, PLOT_LR_COLOR, 1.5, 0);
    draw_frame(&b, &loss);
    draw_frame(&b, &lr);
    text_printf(&b, "</svg>\n");
    *len = b.len;
    return b.s;
}

// Writes the plot to path atomically (a temporary file renamed over it).
static inline void plot_svg_save(const char *path, const LossPlot *p) {
    size_t len;
    char *svg = plot_svg(p, &len);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, svg, 1, len);
    atomic_commit(&af);
    free(svg);
}

#endif // LLMC_PLOT_H
