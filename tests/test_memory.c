/* Models larger than the memory a session may have are refused before
 * anything is allocated, with TG_ERR_NOMEM naming both figures and the
 * largest part: params of twice the machine's physical memory (which
 * Linux's overcommit would have let malloc take, and its out-of-memory
 * killer end the process as they were written); a plan over the limit the
 * test sets in the spec, for a training session, a lone forward session
 * and a forward's larger batch; a plan over what RLIMIT_AS leaves, in a
 * child process, and past it TG_MEMORY_UNCHECKED, which skips the check.
 * Then the cgroup limits read from trees of the test's own (v1, v2 and
 * the hybrid layout). */
#define _POSIX_C_SOURCE 200809L
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/memory.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1 /* their shadow memory fills the address space: no RLIMIT_AS */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

static tg_linear l1;
static tg_tensor loss_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_mse(tg_linear_fwd(g, &l1, tg_input(g, "x")), tg_input(g, "y"));
}
static tg_tensor fwd_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_linear_fwd(g, &l1, tg_input(g, "x"));
}

/* A session of Linear(in, out) over a batch of `rows`. */
static tg_status make(int64_t in, int64_t out, int64_t rows, int64_t limit, tg_session **s, tg_model **m) {
    *m = tg_model_new();
    l1 = tg_linear_new(*m, "l1", in, out, true);
    tg_input_decl decl[] = {{"x", TG_F32, TG_SHAPE(rows, in)}, {"y", TG_F32, TG_SHAPE(rows, out)}};
    tg_train_spec spec = {.model = *m, .loss = loss_fn, .inputs = decl, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-3f)), .threads = 1, .memory_limit = limit};
    *s = NULL;
    return tg_session_new(&spec, s);
}

static void larger_than_the_machine(void) {
    int64_t phys = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    int64_t rows = 2 * phys / 4 / 4096 + 1; /* params of twice the physical memory */
    tg_session *s;
    tg_model *m;
    CHECK_ERR(make(rows, 4096, 8, 0, &s, &m), TG_ERR_NOMEM, "tg_session_new: the session plans ");
    const char *msg = tg_last_error();
    CHECK(strstr(msg, "the largest: params") && strstr(msg, "GB this process can have") && strstr(msg, "nothing was allocated") &&
              strstr(msg, "TG_MEMORY_UNCHECKED"),
          "the message: %s", msg);
    CHECK(s == NULL, "a refused session was returned");
    tg_model_free(m);
    m = tg_model_new();
    l1 = tg_linear_new(m, "l1", rows, 4096, true);
    tg_forward *f = NULL;
    tg_input_decl decl[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, rows)}};
    CHECK_ERR(tg_forward_new(&(tg_forward_spec){.fn = fwd_fn, .inputs = decl, .n_inputs = 1, .model = m, .threads = 1}, &f),
              TG_ERR_NOMEM, "tg_forward_new: the session plans ");
    tg_model_free(m);
}

static void over_the_spec_limit(void) {
    tg_session *s;
    tg_model *m;
    /* about 2 MB of activations and their gradients, 0.1 MB of params and state */
    CHECK_ERR(make(64, 64, 4096, 1000000, &s, &m), TG_ERR_NOMEM, "tg_session_new: the session plans ");
    const char *msg = tg_last_error();
    CHECK(strstr(msg, "the largest: activations and gradients") && strstr(msg, "more than the 1.0 MB this process can "
          "have (spec.memory_limit)"), "the message: %s", msg);
    tg_model_free(m);
    CHECK_OK(make(64, 64, 4096, 100000000, &s, &m));
    tg_session_free(s);
    tg_model_free(m);
    CHECK_ERR(make(64, 64, 8, -5, &s, &m), TG_ERR_ARG, "spec.memory_limit is -5");
    tg_model_free(m);
    /* a forward session: its first batch fits, a larger one does not, and
     * the session runs on at the first */
    m = tg_model_new();
    l1 = tg_linear_new(m, "l1", 64, 64, true);
    tg_input_decl decl[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 64)}};
    tg_forward *f = NULL;
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = fwd_fn, .inputs = decl, .n_inputs = 1, .model = m, .threads = 1,
                                               .memory_limit = 200000}, &f));
    float x[64 * 2] = {0};
    if (f) {
        float *big = calloc(64 * 4096, sizeof(float));
        CHECK_ERR(tg_forward_run(f, 4096, (tg_feed[]){TG_FEED("x", big, 64 * 4096)}, 1), TG_ERR_NOMEM,
                  "tg_forward_run: the session plans ");
        free(big);
        CHECK_OK(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", x, 64 * 2)}, 1));
    }
    tg_forward_free(f);
    tg_model_free(m);
}

/* In a child (the limit stays there): RLIMIT_AS at what is mapped + 256
 * MB, params of 512 MB. Exit 0 when the check refused them and, with
 * TG_MEMORY_UNCHECKED, the allocation itself failed cleanly. */
static void under_rlimit_as(void) {
#ifdef SANITIZED
    printf("test_memory: RLIMIT_AS skipped under a sanitizer\n");
#else
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen("/proc/self/statm", "r");
        long long pages = 0;
        if (!f || fscanf(f, "%lld", &pages) != 1) _exit(10);
        fclose(f);
        struct rlimit rl = {(rlim_t)(pages * sysconf(_SC_PAGESIZE) + ((int64_t)256 << 20)), RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(11);
        /* Where the limit does not hold (an emulator such as qemu-user maps
         * the guest's memory in a space reserved beforehand), say so. */
        void *probe = malloc((size_t)512 << 20); /* never touched */
        if (probe) _exit(77);
        tg_session *s;
        tg_model *m;
        tg_status st = make(128 << 10, 1024, 8, 0, &s, &m);
        if (st != TG_ERR_NOMEM || !strstr(tg_last_error(), "RLIMIT_AS")) {
            fprintf(stderr, "under RLIMIT_AS: %s %s\n", tg_status_name(st), tg_last_error());
            _exit(12);
        }
        st = make(128 << 10, 1024, 8, TG_MEMORY_UNCHECKED, &s, &m);
        if (st != TG_ERR_NOMEM || !strstr(tg_last_error(), "cannot allocate")) {
            fprintf(stderr, "unchecked under RLIMIT_AS: %s %s\n", tg_status_name(st), tg_last_error());
            _exit(13);
        }
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        printf("test_memory: RLIMIT_AS skipped: this process is not held to it (an emulator?)\n");
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the RLIMIT_AS child: %s %d",
              WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
#endif
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

/* v1 (memory controller among others, a limit on an ancestor), v2 (the
 * tightest of the group and its parents, "max" none), and v1's "no limit". */
static void cgroup_trees(void) {
    char dir[64], p[256], q[256];
    snprintf(dir, sizeof dir, "/tmp/tg_cgroup_XXXXXX");
    if (!mkdtemp(dir)) return;
    const char *mk[] = {"memory", "memory/a", "memory/a/b", "unified", "unified/a", "unified/a/b", "c", "c/d"};
    for (int i = 0; i < 8; i++) snprintf(p, sizeof p, "%s/%s", dir, mk[i]), mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/cg_v1", dir);
    put(p, "9:pids:/\n4:cpu,memory:/a/b\n0::/\n");
    snprintf(q, sizeof q, "%s/memory/a/memory.limit_in_bytes", dir), put(q, "3000000000\n");
    snprintf(q, sizeof q, "%s/memory/a/b/memory.limit_in_bytes", dir), put(q, "9223372036854771712\n");
    CHECK(tg_cgroup_memory_limit(p, dir) == 3000000000, "v1: %lld", (long long)tg_cgroup_memory_limit(p, dir));
    snprintf(p, sizeof p, "%s/cg_v2", dir);
    put(p, "0::/c/d\n");
    snprintf(q, sizeof q, "%s/c/d/memory.max", dir), put(q, "max\n");
    CHECK(tg_cgroup_memory_limit(p, dir) == -1, "v2 max: %lld", (long long)tg_cgroup_memory_limit(p, dir));
    snprintf(q, sizeof q, "%s/c/memory.max", dir), put(q, "2000000000\n");
    snprintf(q, sizeof q, "%s/c/d/memory.max", dir), put(q, "4000000000\n");
    CHECK(tg_cgroup_memory_limit(p, dir) == 2000000000, "v2 parent: %lld", (long long)tg_cgroup_memory_limit(p, dir));
    snprintf(p, sizeof p, "%s/cg_hybrid", dir); /* v1 without a limit, v2 under unified/ */
    put(p, "4:memory:/\n0::/a/b\n");
    snprintf(q, sizeof q, "%s/unified/a/b/memory.max", dir), put(q, "1500000000\n");
    CHECK(tg_cgroup_memory_limit(p, dir) == 1500000000, "hybrid: %lld", (long long)tg_cgroup_memory_limit(p, dir));
    CHECK(tg_cgroup_memory_limit("/nonexistent/cgroup", dir) == -1, "no file, no limit");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    larger_than_the_machine();
    over_the_spec_limit();
    under_rlimit_as();
    cgroup_trees();
    tg_memory_cap c = tg_memory_available();
    CHECK(c.bytes > 0, "this process can have %lld bytes (%s)", (long long)c.bytes, c.what);
    return check_summary("test_memory");
}
