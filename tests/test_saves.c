/* Checkpoints that load must be sound, and saves must never leave a mixed
 * or partial file: values out of range (step, schedule, NaN or negative
 * second moments), even in a file whose checksum was recomputed, and a
 * damaged data section are refused with nothing changed; two threads saving
 * one path leave, at every moment, a complete file from one of them; a
 * temporary left by a killed save is removed by the next save. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "io/safetensors.h"

static tg_linear lin;
static tg_tensor loss_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_mse(tg_linear_fwd(g, &lin, tg_input(g, "x")), tg_input(g, "y"));
}

static tg_session *make(tg_model **m, uint64_t seed) {
    *m = tg_model_new();
    lin = tg_linear_new(*m, "l", 4, 4, true);
    static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"y", TG_F32, TG_SHAPE(8, 4)}};
    tg_train_spec spec = {.model = *m, .loss = loss_fn, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_linear(1e-2f, 1e-3f, 100)), .seed = seed};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    float x[32], loss;
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 7) / 7;
    tg_feed f[] = {TG_FEED("x", x, 32), TG_FEED("y", x, 32)};
    for (int i = 0; i < 3 && s; i++) CHECK_OK(tg_session_step(s, f, 2, &loss));
    return s;
}

static char dir[64];
static char *at(const char *name) {
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Rewrites the checkpoint at src into dst with one metadata value or one
 * tensor element replaced. */
static void rewrite(const char *src, const char *dst, const char *key, const char *value, const char *tensor,
                    float v) {
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(src, &f));
    if (!f) return;
    int n = tg_safetensors_count(f);
    tg_st_tensor *t = calloc((size_t)n, sizeof *t);
    float *copy = NULL;
    for (int i = 0; i < n; i++) {
        t[i] = f->t[i];
        if (tensor && strcmp(t[i].name, tensor) == 0) {
            int64_t c = tg_shape_numel(t[i].shape);
            copy = malloc((size_t)c * 4);
            memcpy(copy, t[i].data, (size_t)c * 4);
            copy[c - 1] = v;
            t[i].data = copy;
        }
    }
    const char *meta[32];
    int nm = 0;
    for (int i = 0; i < f->n_meta && nm < 16; i++, nm++) {
        meta[2 * nm] = f->meta[i].key;
        meta[2 * nm + 1] = key && strcmp(key, f->meta[i].key) == 0 ? value : f->meta[i].value;
    }
    CHECK_OK(tg_safetensors_write(dst, t, n, meta, nm));
    free(copy);
    free(t);
    tg_safetensors_free(f);
}

static void bad_values(void) {
    tg_model *m;
    tg_session *s = make(&m, 1);
    if (!s) return;
    const char *good = at("good.safetensors"), *bad = at("bad.safetensors");
    CHECK_OK(tg_session_save(s, good));
    float before[16], after[16];
    CHECK_OK(tg_session_get_param(s, "l.W", before, 16));
    struct {
        const char *key, *value, *tensor;
        float v;
        const char *want;
    } cases[] = {
        {"step", "9223372036854775807", NULL, 0, "metadata 'step' is '9223372036854775807', not a non-negative"},
        {"lr", "linear peak=nan final=0.001 gamma=0 steps=100 every=0 milestones=", NULL, 0, "metadata 'lr'"},
        {"lr", "linear peak=0.01 final=0.001 gamma=0 steps=-5 every=0 milestones=", NULL, 0, "metadata 'lr'"},
        {NULL, NULL, "opt.l.W.v", NAN, "tensor 'opt.l.W.v' holds NaN at element 15"},
        {NULL, NULL, "opt.l.b.m", INFINITY, "tensor 'opt.l.b.m' holds Inf at element 3"},
        {"lr", "linear peak=0.01 final=0.001 gamma=0 steps=99999999999999999999 every=0 milestones=", NULL, 0,
         "link 0's steps is '99999999999999999999' (not an integer of int64's range)"},
        {"lr", "multistep peak=0.01 final=0 gamma=0.5 steps=0 every=0 milestones=3,9223372036854775808", NULL, 0,
         "link 0's milestones is '9223372036854775808'"},
        {"lr", "linear peak=1e39 final=0.001 gamma=0 steps=100 every=0 milestones=", NULL, 0,
         "link 0's peak is '1e39' (not a finite float)"},
        {"lr", "linear peak=0.01x final=0.001 gamma=0 steps=100 every=0 milestones=", NULL, 0, "link 0's peak is '0.01x'"},
        {"lr", "linear peak= 0.01 final=0.001 gamma=0 steps=100 every=0 milestones=", NULL, 0, "link 0's peak is ''"},
        {"lr", "linear peak=0x1p3 final=0.001 gamma=0 steps=100 every=0 milestones=", NULL, 0, "link 0's peak is '0x1p3'"},
        {"lr", "linear peak=0.01 final=0.001 gamma=0 steps=+100 every=0 milestones=", NULL, 0, "link 0's steps is '+100'"},
        {"step", "3 ", NULL, 0, "metadata 'step' is '3 ', not a non-negative integer"},
        {"seed", "18446744073709551616", NULL, 0, "metadata 'seed' is '18446744073709551616'"},
        {NULL, NULL, "opt.l.W.v", -1.0f, "tensor 'opt.l.W.v' holds -1 at element 15, but it is Adam's second moment"},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        rewrite(good, bad, cases[k].key, cases[k].value, cases[k].tensor, cases[k].v);
        CHECK_ERR(tg_session_load(s, bad), TG_ERR_FORMAT, cases[k].want);
        CHECK(tg_session_step_count(s) == 3, "case %d: the refused load changed the step count", k);
    }
    /* A flipped bit in the data: the checksum catches it (NaN checks cannot). */
    FILE *fp = fopen(good, "r+b");
    CHECK(fp != NULL, "cannot open %s", good);
    if (fp) {
        fseek(fp, -3, SEEK_END);
        int c = fgetc(fp);
        fseek(fp, -3, SEEK_END);
        fputc(c ^ 0x10, fp);
        fclose(fp);
    }
    CHECK_ERR(tg_session_load(s, good), TG_ERR_FORMAT, "does not match its checksum");
    CHECK_OK(tg_session_get_param(s, "l.W", after, 16));
    CHECK(memcmp(before, after, sizeof before) == 0, "a refused load changed the params");
    tg_session_free(s);
    tg_model_free(m);
}

typedef struct {
    tg_session *s;
    const char *path;
    int n, failed;
} saver;

static void *save_loop(void *arg) {
    saver *v = arg;
    for (int i = 0; i < v->n; i++) v->failed += tg_session_save(v->s, v->path) != TG_OK;
    return NULL;
}

static int count_temps(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void concurrent_saves(void) {
    tg_model *ma, *mb, *mc;
    tg_session *a = make(&ma, 1), *b = make(&mb, 2), *c = make(&mc, 3);
    if (!a || !b || !c) return;
    float pa[16], pb[16], pc[16];
    CHECK_OK(tg_session_get_param(a, "l.W", pa, 16));
    CHECK_OK(tg_session_get_param(b, "l.W", pb, 16));
    CHECK(memcmp(pa, pb, sizeof pa) != 0, "the two states are the same");
    const char *path = at("shared.safetensors");
    CHECK_OK(tg_session_save(a, path));
    saver va = {a, path, 1000, 0}, vb = {b, path, 1000, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, save_loop, &va);
    pthread_create(&tb, NULL, save_loop, &vb);
    int loads = 0, bad = 0, mixed = 0;
    for (int i = 0; i < 300; i++, loads++) {
        if (tg_session_load(c, path) != TG_OK) {
            if (bad++ == 0) fprintf(stderr, "load: %s\n", tg_last_error());
            continue;
        }
        CHECK_OK(tg_session_get_param(c, "l.W", pc, 16));
        mixed += memcmp(pc, pa, sizeof pc) != 0 && memcmp(pc, pb, sizeof pc) != 0;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(va.failed == 0 && vb.failed == 0, "%d and %d of 1000 saves failed", va.failed, vb.failed);
    CHECK(bad == 0 && mixed == 0, "%d of %d loads failed, %d gave neither state", bad, loads, mixed);
    CHECK(count_temps() == 0, "%d temporaries left behind", count_temps());
    tg_session_free(a), tg_session_free(b), tg_session_free(c);
    tg_model_free(ma), tg_model_free(mb), tg_model_free(mc);
}

/* A save killed before its rename leaves "<path>.tmp.<pid>.<n>": the next
 * save removes it once that process is gone, never a live one's. */
static void stale_temps(void) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    const char *path = at("stale.safetensors");
    char dead[160], mine[160];
    snprintf(dead, sizeof dead, "%s.tmp.%ld.0", path, (long)child);
    snprintf(mine, sizeof mine, "%s.tmp.%ld.999999", path, (long)getpid());
    FILE *f1 = fopen(dead, "w"), *f2 = fopen(mine, "w");
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    tg_model *m;
    tg_session *s = make(&m, 1);
    if (s) CHECK_OK(tg_session_save(s, path));
    CHECK(access(dead, F_OK) != 0, "the dead process's temporary is still there");
    CHECK(access(mine, F_OK) == 0, "a live process's temporary was removed");
    unlink(mine);
    unlink(path);
    tg_session_free(s);
    tg_model_free(m);
}

/* A schedule longer than 0.6 could keep (a chain of 10, 12 milestones, a
 * start_step) goes through a full checkpoint: the resumed run gives the
 * uninterrupted run's losses bitwise. */
static void long_schedule(void) {
    int64_t ms[12];
    for (int k = 0; k < 12; k++) ms[k] = 2 * k + 3;
    tg_lr tail = tg_lr_multistep(1e-2f, 0.7f, 12, ms), chain[9];
    tail.start_step = 1;
    for (int k = 8; k >= 0; k--) chain[k] = tg_lr_warmup(1e-2f * (1 + k % 3), 1, k == 8 ? &tail : &chain[k + 1]);
    float x[32], a[30], b[30];
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 7) / 7;
    tg_feed f[] = {TG_FEED("x", x, 32), TG_FEED("y", x, 32)};
    tg_session *s[2] = {NULL, NULL};
    tg_model *m[2];
    for (int k = 0; k < 2; k++) {
        m[k] = tg_model_new();
        lin = tg_linear_new(m[k], "l", 4, 4, true);
        static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"y", TG_F32, TG_SHAPE(8, 4)}};
        tg_train_spec spec = {.model = m[k], .loss = loss_fn, .inputs = in, .n_inputs = 2,
                              .optim = tg_adam(k ? tg_lr_constant(1) : chain[0]), .seed = 4};
        CHECK_OK(tg_session_new(&spec, &s[k]));
    }
    for (int i = 0; i < 30 && s[0]; i++) CHECK_OK(tg_session_step(s[0], f, 2, &a[i]));
    tg_session_free(s[0]);
    CHECK_OK(tg_session_new(&(tg_train_spec){.model = m[0], .loss = loss_fn, .inputs = (tg_input_decl[]){{"x", TG_F32, TG_SHAPE(8, 4)}, {"y", TG_F32, TG_SHAPE(8, 4)}},
                                             .n_inputs = 2, .optim = tg_adam(chain[0]), .seed = 4},
                            &s[0]));
    for (int i = 0; i < 12 && s[0]; i++) CHECK_OK(tg_session_step(s[0], f, 2, &b[i]));
    CHECK_OK(tg_session_save(s[0], at("long_lr.safetensors")));
    CHECK_OK(tg_session_load(s[1], at("long_lr.safetensors"))); /* s[1] was made with a constant schedule */
    for (int i = 12; i < 30 && s[1]; i++) CHECK_OK(tg_session_step(s[1], f, 2, &b[i]));
    CHECK(memcmp(a, b, sizeof a) == 0, "a long schedule did not survive a checkpoint (step 30: %.9g vs %.9g)", b[29],
          a[29]);
    tg_safetensors *cf = NULL;
    CHECK_OK(tg_safetensors_read(at("long_lr.safetensors"), &cf));
    const char *text = tg_safetensors_meta(cf, "lr");
    CHECK(text && strstr(text, "milestones=3,5,7,9,11,13,15,17,19,21,23,25 start=1"), "the lr metadata: %s",
          text ? text : "(none)");
    tg_safetensors_free(cf);
    for (int k = 0; k < 2; k++) {
        tg_session_free(s[k]);
        tg_model_free(m[k]);
    }
}

/* Save paths: "" is refused before anything is created; a symbolic link
 * is written through (its target replaced, the link kept), as editors and
 * SQLite do: a relative link from the link's folder, a chain of links, a
 * link to a file not made yet; a loop of links is an error. */
static void save_paths(void) {
    tg_model *m;
    tg_session *s = make(&m, 5);
    if (!s) return;
    char cwd[4096], sub[128];
    CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    snprintf(sub, sizeof sub, "%s/empty", dir);
    CHECK(mkdir(sub, 0755) == 0 && chdir(sub) == 0, "cannot enter %s", sub);
    CHECK_ERR(tg_session_save(s, ""), TG_ERR_ARG, "tg_session_save: the path is empty");
    CHECK_ERR(tg_session_save_params(s, ""), TG_ERR_ARG, "tg_session_save_params: the path is empty");
    CHECK_ERR(tg_safetensors_write("", NULL, 0, NULL, 0), TG_ERR_ARG, "the path is empty");
    DIR *d = opendir(".");
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK(entries == 0, "a refused save of \"\" left %d files in the working directory", entries);
    CHECK(chdir(cwd) == 0, "cannot go back to %s", cwd);
    rmdir(sub);

    const char *target = at("target.safetensors"), *link = at("link.safetensors"), *chain = at("chain.safetensors");
    FILE *f = fopen(target, "w");
    if (f) fputs("not yet a checkpoint", f), fclose(f);
    CHECK(symlink("target.safetensors", link) == 0 && symlink("link.safetensors", chain) == 0, "symlink");
    CHECK_OK(tg_session_save(s, chain));
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && lstat(chain, &sb) == 0 && S_ISLNK(sb.st_mode),
          "a save through links replaced a link");
    CHECK(lstat(target, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 100, "the link's target was not written");
    CHECK_OK(tg_session_load(s, target));
    CHECK(count_temps() == 0, "a save through a link left %d temporaries", count_temps());
    const char *dangling = at("dangling.safetensors"), *later = at("later.safetensors");
    CHECK(symlink(later, dangling) == 0, "symlink"); /* absolute, to a file not made yet */
    CHECK_OK(tg_session_save_params(s, dangling));
    CHECK(lstat(dangling, &sb) == 0 && S_ISLNK(sb.st_mode) && stat(later, &sb) == 0 && S_ISREG(sb.st_mode),
          "a save through a dangling link did not make its target");
    const char *loop = at("loop.safetensors");
    CHECK(symlink("loop.safetensors", loop) == 0, "symlink");
    CHECK_ERR(tg_session_save(s, loop), TG_ERR_IO, "too many levels of symbolic links");
    unlink(link), unlink(chain), unlink(target), unlink(dangling), unlink(later), unlink(loop);
    tg_session_free(s);
    tg_model_free(m);
}

/* Saves that fail leave the previous file and no temporary: a path that is
 * a folder, a process out of file descriptors. A save killed midway (SIGKILL
 * at some moment of a loop of saves in a child) leaves at the path a whole
 * file that loads; its temporary goes with the next save. */
static void failed_and_killed_saves(void) {
    tg_model *m;
    tg_set_default_threads(1); /* no pool threads at the fork */
    tg_session *s = make(&m, 6);
    tg_set_default_threads(0);
    if (!s) return;
    const char *folder = at("a_folder");
    CHECK(mkdir(folder, 0755) == 0, "mkdir");
    CHECK_ERR(tg_session_save(s, folder), TG_ERR_IO, "cannot rename");
    struct stat sb;
    CHECK(stat(folder, &sb) == 0 && S_ISDIR(sb.st_mode) && count_temps() == 0, "a save over a folder left %d temporaries",
          count_temps());
    rmdir(folder);
    const char *path = at("nofd.safetensors");
    CHECK_OK(tg_session_save(s, path));
    FILE *f = fopen(path, "rb");
    char before[64] = {0}, after[64] = {0};
    if (f) {
        CHECK(fread(before, 1, sizeof before, f) == sizeof before, "read");
        fclose(f);
    }
    struct rlimit old, none;
    getrlimit(RLIMIT_NOFILE, &old);
    none = old;
    none.rlim_cur = 3; /* stdin, stdout, stderr: no descriptor left */
    setrlimit(RLIMIT_NOFILE, &none);
    tg_status st = tg_session_save(s, path);
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK(st == TG_ERR_IO && strstr(tg_last_error(), "Too many open files"), "a save with no descriptors: %s %s",
          tg_status_name(st), tg_last_error());
    f = fopen(path, "rb");
    if (f) {
        CHECK(fread(after, 1, sizeof after, f) == sizeof after, "read");
        fclose(f);
    }
    CHECK(memcmp(before, after, sizeof before) == 0 && count_temps() == 0, "a save with no descriptors changed the file");

    const char *killed = at("killed.safetensors");
    CHECK_OK(tg_session_save(s, killed));
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        for (;;) tg_session_save(s, killed);
        _exit(0);
    }
    nanosleep(&(struct timespec){0, 20000000}, NULL); /* some saves in */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK_OK(tg_session_load(s, killed));
    CHECK_OK(tg_session_save(s, killed));
    CHECK(count_temps() == 0, "the killed save's temporary is still there after the next save");
    unlink(path);
    unlink(killed);
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tg_saves_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    bad_values();
    stale_temps();
    concurrent_saves();
    long_schedule();
    save_paths();
    failed_and_killed_saves();
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') unlink(at(e->d_name));
    if (d) closedir(d);
    rmdir(dir);
    return check_summary("test_saves");
}
