/* The loss curve of `tg train --plot`: a greyscale PNG or an SVG of
 * EX_PLOT_W x EX_PLOT_H pixels, both with numbered ticks on the step and loss
 * axes and the axes' names. The loss axis is logarithmic when the losses span
 * two decades or more; the eval points, on their own linear scale (min..max
 * of the metric, numbered on the right), are drawn as squares, a second
 * metric's (where an example measures two) as hollow squares on the same
 * scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define ML 60 /* margins: left, right, top, bottom */
#define MR 60
#define MT 20
#define MB 40

typedef struct {
    double x0, x1, y0, y1; /* data ranges: steps, loss (log10 when logy) */
    bool logy;
} axes;

static double px_x(const axes *a, double step) {
    return ML + (step - a->x0) / (a->x1 - a->x0) * (EX_PLOT_W - ML - MR);
}
static double px_y(const axes *a, double loss) {
    double v = a->logy ? log10(loss > 1e-30 ? loss : 1e-30) : loss;
    return EX_PLOT_H - MB - (v - a->y0) / (a->y1 - a->y0) * (EX_PLOT_H - MT - MB);
}
/* eval values on the right-hand scale [lo, hi] */
static double px_e(double v, double lo, double hi) {
    return EX_PLOT_H - MB - (hi > lo ? (v - lo) / (hi - lo) : 0.5) * (EX_PLOT_H - MT - MB);
}

static axes make_axes(const ex_curve *c) {
    axes a = {(double)c->step[0], (double)c->step[c->n - 1], INFINITY, -INFINITY, false};
    if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < c->n; i++)
        if (isfinite(c->loss[i])) lo = fmin(lo, c->loss[i]), hi = fmax(hi, c->loss[i]);
    if (!isfinite(lo)) lo = 0, hi = 1;
    a.logy = lo > 0 && hi / lo >= 100;
    if (a.logy) a.y0 = floor(log10(lo)), a.y1 = ceil(log10(hi));
    else a.y0 = fmin(lo, 0), a.y1 = hi;
    if (a.y1 <= a.y0) a.y1 = a.y0 + 1;
    return a;
}

/* Ticks at the multiples of a round step (1, 2 or 5 times a power of ten)
 * that gives about 5 of them in [lo, hi]; returns how many (at most max). */
static int nice_ticks(double lo, double hi, double *t, int max) {
    double raw = (hi - lo) / 5, p = pow(10, floor(log10(raw))), step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : 5 * p;
    int n = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && n < max; v += step)
        t[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

/* The loss axis's ticks, in data units: each decade on a log axis. */
static int loss_ticks(const axes *a, double *t, int max) {
    if (!a->logy) return nice_ticks(a->y0, a->y1, t, max);
    int n = 0;
    for (double d = a->y0; d <= a->y1 + 1e-9 && n < max; d++) t[n++] = pow(10, d);
    return n;
}

/* The range of the eval metrics, both on one scale. */
static void eval_range(const ex_curve *c, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < c->n_eval; i++) *lo = fmin(*lo, c->eval[i]), *hi = fmax(*hi, c->eval[i]);
    for (int i = 0; c->metric2 && i < c->n_eval; i++)
        if (isfinite(c->eval2[i])) *lo = fmin(*lo, c->eval2[i]), *hi = fmax(*hi, c->eval2[i]);
}

/* ---- PNG ---- */

static void dot_px(uint8_t *img, int x, int y, uint8_t v) {
    if (x >= 0 && x < EX_PLOT_W && y >= 0 && y < EX_PLOT_H) img[y * EX_PLOT_W + x] = v;
}

static void line_px(uint8_t *img, double x0, double y0, double x1, double y1, uint8_t v) {
    int n = (int)fmax(fabs(x1 - x0), fabs(y1 - y0)) + 1;
    for (int i = 0; i <= n; i++) {
        double t = (double)i / n;
        dot_px(img, (int)lround(x0 + t * (x1 - x0)), (int)lround(y0 + t * (y1 - y0)), v);
    }
}

/* A 5x7 font for the labels: each glyph is 7 rows of 5 bits, the top row
 * first, the leftmost pixel the highest bit. */
static const struct {
    char c;
    uint8_t rows[7];
} font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},                {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},       {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},          {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'a', {0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},       {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0, 0, 0x0E, 0x10, 0x10, 0x11, 0x0E}},       {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},       {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E}},    {'j', {0x02, 0, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11}},       {'n', {0, 0, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E}},       {'p', {0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0, 0, 0x0D, 0x13, 0x0F, 0x01, 0x01}},       {'r', {0, 0, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},       {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0, 0, 0x11, 0x11, 0x11, 0x13, 0x0D}},       {'v', {0, 0, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0, 0, 0x11, 0x11, 0x15, 0x15, 0x0A}},       {'x', {0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0, 0, 0x11, 0x11, 0x0F, 0x01, 0x0E}},       {'z', {0, 0, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
};
#define GLYPH_W 6 /* 5 pixels and a space */

/* Draws s with its top-left corner at (x, y); align -1 left, 0 centred, 1
 * right of x. A character the font lacks is a space. */
static void text_px(uint8_t *img, int x, int y, const char *s, int align, uint8_t v) {
    int w = (int)strlen(s) * GLYPH_W - 1;
    x -= align == 0 ? w / 2 : align > 0 ? w : 0;
    for (; *s; s++, x += GLYPH_W) {
        char ch = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        for (size_t g = 0; g < sizeof font / sizeof font[0]; g++) {
            if (font[g].c != ch) continue;
            for (int r = 0; r < 7; r++)
                for (int col = 0; col < 5; col++)
                    if (font[g].rows[r] >> (4 - col) & 1) dot_px(img, x + col, y + r, v);
            break;
        }
    }
}

static int write_png(const char *path, const ex_curve *c, const axes *a) {
    uint8_t *img = malloc((size_t)EX_PLOT_W * EX_PLOT_H);
    if (!img) return 1;
    memset(img, 255, (size_t)EX_PLOT_W * EX_PLOT_H);
    double left = ML, right = EX_PLOT_W - MR, top = MT, bottom = EX_PLOT_H - MB, t[16];
    char label[96];
    int n = loss_ticks(a, t, 16);
    for (int i = 0; i < n; i++) { /* the loss axis: grid lines and their values */
        double y = px_y(a, t[i]);
        line_px(img, left, y, right, y, 215);
        line_px(img, left - 4, y, left, y, 0);
        snprintf(label, sizeof label, "%.3g", t[i]);
        text_px(img, (int)left - 7, (int)lround(y) - 3, label, 1, 0);
    }
    n = nice_ticks(a->x0, a->x1, t, 16);
    for (int i = 0; i < n; i++) { /* the step axis */
        double x = px_x(a, t[i]);
        line_px(img, x, bottom, x, bottom + 4, 0);
        snprintf(label, sizeof label, "%.0f", t[i]);
        text_px(img, (int)lround(x), (int)bottom + 8, label, 0, 0);
    }
    text_px(img, (int)((left + right) / 2), (int)bottom + 24, "step", 0, 0);
    text_px(img, (int)left - 7, (int)top - 14, a->logy ? "loss (log)" : "loss", -1, 0);
    line_px(img, left, top, left, bottom, 0);
    line_px(img, left, bottom, right, bottom, 0);
    for (int i = 1; i < c->n; i++)
        line_px(img, px_x(a, (double)c->step[i - 1]), px_y(a, c->loss[i - 1]), px_x(a, (double)c->step[i]),
                px_y(a, c->loss[i]), 0);
    double lo, hi;
    eval_range(c, &lo, &hi);
    for (int i = 0; i < c->n_eval; i++) {
        int x = (int)lround(px_x(a, (double)c->eval_step[i])), y = (int)lround(px_e(c->eval[i], lo, hi));
        for (int dy = -3; dy <= 3; dy++)
            for (int dx = -3; dx <= 3; dx++) dot_px(img, x + dx, y + dy, 110);
        if (!c->metric2 || !isfinite(c->eval2[i])) continue;
        y = (int)lround(px_e(c->eval2[i], lo, hi)); /* the second metric: hollow squares */
        for (int d = -3; d <= 3; d++) {
            dot_px(img, x + d, y - 3, 60), dot_px(img, x + d, y + 3, 60);
            dot_px(img, x - 3, y + d, 60), dot_px(img, x + 3, y + d, 60);
        }
    }
    if (c->n_eval && c->metric2) { /* which squares are which */
        snprintf(label, sizeof label, "%s (filled)  %s (hollow)", c->metric ? c->metric : "eval", c->metric2);
        text_px(img, (int)right, (int)top - 14, label, 1, 60);
    } else if (c->n_eval) {
        text_px(img, (int)right, (int)top - 14, c->metric ? c->metric : "eval", 1, 110);
    }
    if (c->n_eval) { /* the eval metric's scale, on the right, in the squares' grey */
        snprintf(label, sizeof label, "%.4g", hi);
        text_px(img, (int)right + 7, (int)lround(px_e(hi, lo, hi)) - 3, label, -1, 110);
        snprintf(label, sizeof label, "%.4g", lo);
        text_px(img, (int)right + 7, (int)lround(px_e(lo, lo, hi)) - 3, label, -1, 110);
    }
    int rc = ex_write_png_gray(path, img, EX_PLOT_W, EX_PLOT_H);
    free(img);
    return rc;
}

/* ---- SVG ---- */

static int write_svg(const char *path, const ex_curve *c, const axes *a) {
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    double left = ML, right = EX_PLOT_W - MR, top = MT, bottom = EX_PLOT_H - MB;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", EX_PLOT_W, EX_PLOT_H);
    double t[16];
    int n = loss_ticks(a, t, 16);
    for (int i = 0; i < n; i++) {
        double y = px_y(a, t[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, y, right, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", left - 6, y + 4, t[i]);
    }
    fprintf(f, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"black\"/>\n", left, top, bottom, right);
    n = nice_ticks(a->x0, a->x1, t, 16);
    for (int i = 0; i < n; i++) {
        double x = px_x(a, t[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, bottom, x, bottom + 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x, bottom + 16, t[i]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", (left + right) / 2, bottom + 30);
    fprintf(f, "<text x=\"12\" y=\"%.1f\" transform=\"rotate(-90 12 %.1f)\" text-anchor=\"middle\">loss%s</text>\n",
            (top + bottom) / 2, (top + bottom) / 2, a->logy ? " (log scale)" : "");
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"");
    for (int i = 0; i < c->n; i++) fprintf(f, "%.1f,%.1f ", px_x(a, (double)c->step[i]), px_y(a, c->loss[i]));
    fprintf(f, "\"/>\n");
    if (c->n_eval) {
        double lo, hi;
        eval_range(c, &lo, &hi);
        for (int i = 0; i < c->n_eval; i++)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" fill=\"#d9480f\"/>\n",
                    px_x(a, (double)c->eval_step[i]) - 3, px_e(c->eval[i], lo, hi) - 3);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d9480f\">%.4g</text>\n", right + 4, px_e(hi, lo, hi) + 4, hi);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d9480f\">%.4g</text>\n", right + 4, px_e(lo, lo, hi) + 4, lo);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d9480f\" text-anchor=\"end\">&#9632; %s</text>\n", right,
                top + 12, c->metric ? c->metric : "eval");
        for (int i = 0; c->metric2 && i < c->n_eval; i++)
            if (isfinite(c->eval2[i]))
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" fill=\"none\" stroke=\"#2b8a3e\"/>\n",
                        px_x(a, (double)c->eval_step[i]) - 3, px_e(c->eval2[i], lo, hi) - 3);
        if (c->metric2)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#2b8a3e\" text-anchor=\"end\">&#9633; %s</text>\n", right,
                    top + 26, c->metric2);
    }
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : 1;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

bool ex_plot_format_ok(const char *path) { return ends_with(path, ".png") || ends_with(path, ".svg"); }

int ex_plot_write(const char *path, const ex_curve *c) {
    if (c->n < 1) {
        fprintf(stderr, "tg: no losses to plot\n");
        return 1;
    }
    axes a = make_axes(c);
    int rc = ends_with(path, ".svg") ? write_svg(path, c, &a) : write_png(path, c, &a);
    if (rc) fprintf(stderr, "tg: cannot write %s\n", path);
    return rc;
}
