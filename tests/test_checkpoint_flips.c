/* A checkpoint cannot lie: every single-bit flip of a small full
 * checkpoint's header and metadata (every bit of them) and 1000 random bits
 * of its data is refused, and after each refusal the session is byte for
 * byte what it was (params, optimizer state, step, schedule position, seed
 * and schedule). Every bit of a weights file's header likewise, through a
 * forward session. The model is the one of tests/fixtures/checkpoint_v1.h. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "fixtures/checkpoint_v1.h"
#include "session.h"

static char dir[64];

/* Everything a load could change: the params and persistent arenas as
 * bytes, then the training position and the schedule's fields. */
static int unreadable; /* reads of the state that failed */

static size_t state_of(tg_session_base *b, const tg_session *s, uint8_t *out) {
    tg_engine *e = b->eng;
    int64_t pb = e->params_bytes, sb = b->prog->plan.arena_bytes[TG_ARENA_PERSIST];
    size_t o = 0;
    if (out && e->vt->read(e, b->prog, TG_ARENA_PARAMS, 0, out, pb) != TG_OK) unreadable++;
    o += (size_t)pb;
    if (out && e->vt->read(e, b->prog, TG_ARENA_PERSIST, 0, out + o, sb) != TG_OK) unreadable++;
    o += (size_t)sb;
    int64_t pos[3] = {s ? s->step : 0, s ? s->lr_start : 0, (int64_t)b->seed};
    if (out) memcpy(out + o, pos, sizeof pos);
    o += sizeof pos;
    for (const tg_lr *l = s ? s->lr : NULL; l; l = l->kind == TG_LR_WARMUP ? l->then : NULL) {
        float f[3] = {l->peak, l->final_lr, l->gamma};
        int64_t i[5] = {l->kind, l->steps, l->every, l->n_milestones, l->start_step};
        if (out) memcpy(out + o, f, sizeof f), memcpy(out + o + sizeof f, i, sizeof i);
        o += sizeof f + sizeof i;
        for (int k = 0; k < l->n_milestones; k++, o += 8)
            if (out) memcpy(out + o, &l->milestones[k], 8);
    }
    return o;
}

/* Flips each bit of img[from, to) (every one, or `samples` drawn at random),
 * writes the file and loads it: every load must fail and leave the state as
 * it was. */
static void flips(const char *what, tg_session_base *b, const tg_session *s, tg_status (*load)(void *, const char *),
                  void *target, uint8_t *img, size_t size, size_t from, size_t to, int samples) {
    char path[128];
    snprintf(path, sizeof path, "%s/flipped.safetensors", dir);
    size_t n = state_of(b, s, NULL);
    uint8_t *before = malloc(n), *after = malloc(n);
    state_of(b, s, before);
    long bits = samples ? samples : (long)(to - from) * 8, accepted = 0, changed = 0, first_bad = -1;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    for (long k = 0; k < bits; k++) {
        size_t bit;
        if (samples) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            bit = from * 8 + (size_t)((r >> 11) % ((to - from) * 8));
        } else {
            bit = from * 8 + (size_t)k;
        }
        /* the same file rewritten in place (a new file, or one cut to 0
         * first, costs the file system a flush of its blocks each time) */
        img[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        bool written = fd >= 0 && pwrite(fd, img, size, 0) == (ssize_t)size;
        tg_status st = written ? load(target, path) : TG_ERR_IO;
        img[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (!written) {
            CHECK(false, "%s: cannot write %s", what, path);
            break;
        }
        state_of(b, s, after);
        bool bad = st == TG_OK, moved = memcmp(before, after, n) != 0;
        accepted += bad;
        changed += moved;
        if ((bad || moved) && first_bad < 0) first_bad = (long)bit;
    }
    CHECK(unreadable == 0, "%s: the state could not be read %d times", what, unreadable);
    CHECK(accepted == 0 && changed == 0, "%s: of %ld flipped bits %ld loaded and %ld changed the session (the first at "
          "byte %ld, bit %ld)", what, bits, accepted, changed, first_bad / 8, first_bad % 8);
    if (fd >= 0) close(fd);
    /* and the file as written loads */
    write_whole_file(path, img, size);
    CHECK_OK(load(target, path));
    free(before);
    free(after);
}

static tg_status load_full(void *s, const char *path) { return tg_session_load(s, path); }
static tg_status load_forward(void *f, const char *path) { return tg_forward_load_params(f, path); }

static tg_tensor v1_fwd(tg_graph *g, void *u) {
    v1_net *n = u;
    return tg_linear_fwd(g, &n->l2, tg_tanh(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tg_flips_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char ck[128], wt[128];
    snprintf(ck, sizeof ck, "%s/full.safetensors", dir);
    snprintf(wt, sizeof wt, "%s/weights.safetensors", dir);
    v1_net a, b;
    tg_session *sa = v1_session(&a, 1), *sb = v1_session(&b, 2);
    CHECK(sa && sb, "sessions: %s", tg_last_error());
    if (!sa || !sb) return check_summary("test_checkpoint_flips");
    for (int64_t t = 1; t <= V1_STEPS; t++) {
        CHECK_OK(v1_step(sa, t));
        if (t == V1_SET_LR_AFTER) CHECK_OK(tg_session_set_lr(sa, v1_later_lr()));
    }
    CHECK_OK(tg_session_save(sa, ck));
    CHECK_OK(tg_session_save_params(sa, wt));
    CHECK_OK(v1_step(sb, 1)); /* b's state differs from the file's in every part */

    size_t size = 0;
    uint8_t *img = read_whole_file(ck, &size);
    uint64_t hl = 0;
    for (int i = 7; img && size >= 8 && i >= 0; i--) hl = hl << 8 | img[i];
    CHECK(img && hl > 0 && 8 + hl < size, "the checkpoint's header");
    if (img && 8 + hl < size) {
        flips("full checkpoint, header and metadata", &sb->b, sb, load_full, sb, img, size, 0, 8 + (size_t)hl, 0);
        flips("full checkpoint, data", &sb->b, sb, load_full, sb, img, size, 8 + (size_t)hl, size, 1000);
    }
    free(img);

    tg_input_decl fin[] = {{"x", TG_F32, {2, {TG_BATCH, V1_IN}}}};
    tg_forward *f = NULL;
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = v1_fwd, .user = &b, .inputs = fin, .n_inputs = 1, .model = b.m,
                                               .seed = 3}, &f));
    /* one run, so that its program is compiled and every arena state_of reads exists */
    float x1[V1_IN] = {0};
    CHECK_OK(tg_forward_run(f, 1, &(tg_feed){"x", x1, V1_IN, TG_F32}, 1));
    img = read_whole_file(wt, &size);
    hl = 0;
    for (int i = 7; img && size >= 8 && i >= 0; i--) hl = hl << 8 | img[i];
    if (f && img && 8 + hl < size)
        flips("weights file, header and metadata", &f->b, NULL, load_forward, f, img, size, 0, 8 + (size_t)hl, 0);
    free(img);
    tg_forward_free(f);
    tg_session_free(sa);
    tg_session_free(sb);
    tg_model_free(a.m);
    tg_model_free(b.m);
    unlink(ck);
    unlink(wt);
    char p[160];
    snprintf(p, sizeof p, "%s/flipped.safetensors", dir);
    unlink(p);
    rmdir(dir);
    return check_summary("test_checkpoint_flips");
}
