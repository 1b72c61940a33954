/* The loss curve of `tg train --plot`: a PNG (greyscale, no text) or an SVG
 * (with axis labels) of EX_PLOT_W x EX_PLOT_H pixels. The loss axis is
 * logarithmic when the losses span two decades or more; the eval points, on
 * their own linear scale (min..max of the metric), are drawn as squares. */
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

static void eval_range(const ex_curve *c, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < c->n_eval; i++) *lo = fmin(*lo, c->eval[i]), *hi = fmax(*hi, c->eval[i]);
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

static int write_png(const char *path, const ex_curve *c, const axes *a) {
    uint8_t *img = malloc((size_t)EX_PLOT_W * EX_PLOT_H);
    if (!img) return 1;
    memset(img, 255, (size_t)EX_PLOT_W * EX_PLOT_H);
    double left = ML, right = EX_PLOT_W - MR, top = MT, bottom = EX_PLOT_H - MB;
    for (double d = a->y0; d <= a->y1 + 1e-9; d += a->logy ? 1 : (a->y1 - a->y0) / 5) /* grid */
        line_px(img, left, px_y(a, a->logy ? pow(10, d) : d), right, px_y(a, a->logy ? pow(10, d) : d), 215);
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
    for (double d = a->y0; d <= a->y1 + 1e-9; d += a->logy ? 1 : (a->y1 - a->y0) / 5) {
        double y = px_y(a, a->logy ? pow(10, d) : d);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, y, right, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", left - 4, y + 4,
                a->logy ? pow(10, d) : d);
    }
    fprintf(f, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"black\"/>\n", left, top, bottom, right);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%lld</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%lld</text>\n",
            left, bottom + 16, (long long)a->x0, right, bottom + 16, (long long)a->x1);
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
