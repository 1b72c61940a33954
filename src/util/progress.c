/* The training progress line: step, loss, throughput and ETA. On a terminal
 * one line is redrawn in place; elsewhere (a log, a pipe) a line is printed
 * every `every` steps, so logs stay short and greppable. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static FILE *out_of(const tg_progress *p) { return p->file ? (FILE *)p->file : stdout; }

void tg_progress_start(tg_progress *p) {
    if (!p) return;
    FILE *f = out_of(p);
    p->live_ = isatty(fileno(f)) == 1;
    if (p->every <= 0) p->every = p->total >= 10 ? p->total / 10 : 1;
    p->t0_ = now_s();
    p->drawn_ = false;
}

bool tg_progress_due(const tg_progress *p, int64_t step) {
    if (!p) return false;
    /* A live line is redrawn ten times as often as lines are printed. */
    int64_t every = p->live_ && p->every >= 10 ? p->every / 10 : p->every;
    return step == p->start + 1 || step == p->total || (every > 0 && step % every == 0);
}

/* "1:05" or "1:02:03". An ETA past a billion seconds (a huge total at a
 * slow rate) is shown as that: converting a double beyond long's range is
 * undefined (it printed a negative ETA). */
static void fmt_duration(char *buf, size_t n, double s) {
    long t = s > 0 ? (s < 1e9 ? (long)(s + 0.5) : 1000000000L) : 0;
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void tg_progress_update(tg_progress *p, int64_t step, float loss, const char *extra) {
    if (!p) return;
    FILE *f = out_of(p);
    double el = now_s() - p->t0_;
    double rate = el > 0 ? (double)(step - p->start) / el : 0; /* steps/s of this run */
    char line[256], eta[32];
    int k = p->total > 0 ? snprintf(line, sizeof line, "step %lld/%lld  loss %.6g", (long long)step,
                                    (long long)p->total, loss)
                         : snprintf(line, sizeof line, "step %lld  loss %.6g", (long long)step, loss);
    if (k < 0 || (size_t)k >= sizeof line) k = (int)sizeof line - 1;
    if (p->batch > 0) k += snprintf(line + k, sizeof line - (size_t)k, "  %.0f ex/s", rate * (double)p->batch);
    else k += snprintf(line + k, sizeof line - (size_t)k, "  %.1f steps/s", rate);
    if ((size_t)k < sizeof line && p->total > 0 && rate > 0) {
        fmt_duration(eta, sizeof eta, (double)(p->total - step) / rate);
        k += snprintf(line + k, sizeof line - (size_t)k, "  ETA %s", eta);
    }
    if ((size_t)k < sizeof line && extra && *extra) snprintf(line + k, sizeof line - (size_t)k, "  %s", extra);
    if (p->live_) {
        fprintf(f, "\r%s\033[K", line); /* clear what a longer earlier line left */
        p->drawn_ = true;
        /* Keep a line for each interval (and any eval result) on screen. */
        if (step == p->total || (p->every > 0 && step % p->every == 0) || (extra && *extra)) {
            fputc('\n', f);
            p->drawn_ = false;
        }
    } else {
        fprintf(f, "%s\n", line);
    }
    fflush(f);
}

void tg_progress_end(tg_progress *p) {
    if (!p) return;
    if (p->live_ && p->drawn_) fputc('\n', out_of(p));
    p->drawn_ = false;
    fflush(out_of(p));
}

/* ---- compile progress: the sessions' default (tg_set_default_compile_progress) ---- */

static tg_compile_progress_fn g_compile_progress;
static void *g_compile_progress_user;

void tg_set_default_compile_progress(tg_compile_progress_fn fn, void *user) {
    g_compile_progress = fn;
    g_compile_progress_user = fn ? user : NULL;
}

tg_compile_progress_fn tg_compile_progress_or_default(tg_compile_progress_fn fn, void *user, void **user_out) {
    *user_out = fn ? user : g_compile_progress_user;
    return fn ? fn : g_compile_progress;
}
