/* The memory this process can have: the smallest of the machine's
 * physical memory, the memory limit of its cgroup (v2 memory.max, v1
 * memory.limit_in_bytes, the tightest of its own and its ancestors') and
 * what RLIMIT_AS leaves beside the address space already mapped. A session
 * checks its plan against it before allocating (session_base.c): under
 * Linux's overcommit a plan larger than the machine is not refused by
 * malloc but killed by the out-of-memory killer as its pages are first
 * written. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memory.h"

/* A whole file's first line as a byte count: digits only ("max" and
 * anything else: none, -1). */
static int64_t read_bytes(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[64];
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    line[strcspn(line, "\n")] = 0;
    if (!*line || strspn(line, "0123456789") != strlen(line) || strlen(line) > 18) return -1;
    return (int64_t)strtoll(line, NULL, 10);
}

/* The smallest limit in dir and its ancestors up to the mount point (a
 * limit the machine could not reach, as v1 writes "no limit", counts as
 * none). */
static int64_t tightest(const char *mount, const char *path, const char *file) {
    char p[4096];
    int64_t best = -1;
    size_t n = strlen(path);
    for (;;) {
        snprintf(p, sizeof p, "%s%.*s/%s", mount, (int)n, path, file);
        int64_t v = read_bytes(p);
        if (v >= 0 && v < ((int64_t)1 << 60) && (best < 0 || v < best)) best = v;
        if (n <= 1) break;
        while (n > 0 && path[n - 1] != '/') n--; /* up one folder */
        if (n > 1) n--;
        else n = 0;
    }
    return best;
}

int64_t tg_cgroup_memory_limit(const char *proc_cgroup, const char *mount) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return -1;
    char line[4096], v1[4096] = "", v2[4096] = "";
    bool has_v1 = false, has_v2 = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* "N:controllers:path" */
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *a = 0, *b = 0;
        const char *ctl = a + 1, *path = b + 1;
        if (strcmp(line, "0") == 0 && !*ctl) {
            snprintf(v2, sizeof v2, "%s", path);
            has_v2 = true;
        }
        for (const char *c = ctl; *c;) { /* v1: the memory controller among a comma list */
            size_t k = strcspn(c, ",");
            if (k == 6 && strncmp(c, "memory", 6) == 0) {
                snprintf(v1, sizeof v1, "%s", path);
                has_v1 = true;
            }
            c += k + (c[k] == ',');
        }
    }
    fclose(f);
    char m[4096];
    int64_t best = -1, v;
    if (has_v1) {
        snprintf(m, sizeof m, "%s/memory", mount);
        if ((v = tightest(m, v1, "memory.limit_in_bytes")) >= 0 && (best < 0 || v < best)) best = v;
    }
    if (has_v2) {
        snprintf(m, sizeof m, "%s", mount);
        if ((v = tightest(m, v2, "memory.max")) >= 0 && (best < 0 || v < best)) best = v;
        snprintf(m, sizeof m, "%s/unified", mount); /* the hybrid layout's v2 tree */
        if ((v = tightest(m, v2, "memory.max")) >= 0 && (best < 0 || v < best)) best = v;
    }
    return best;
}

/* The address space already mapped (/proc/self/statm's first field, in pages). */
static int64_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = -1;
    if (f) {
        if (fscanf(f, "%lld", &pages) != 1) pages = -1;
        fclose(f);
    }
    return pages < 0 ? 0 : (int64_t)pages * (int64_t)sysconf(_SC_PAGESIZE);
}

tg_memory_cap tg_memory_available(void) {
    tg_memory_cap c = {-1, "no limit known"};
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) c = (tg_memory_cap){(int64_t)pages * page, "the machine's physical memory"};
    int64_t cg = tg_cgroup_memory_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    if (cg >= 0 && (c.bytes < 0 || cg < c.bytes)) c = (tg_memory_cap){cg, "the memory limit of this process's cgroup"};
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        int64_t lim = rl.rlim_cur > (rlim_t)INT64_MAX ? INT64_MAX : (int64_t)rl.rlim_cur, used = mapped_bytes();
        int64_t left = lim > used ? lim - used : 0;
        if (c.bytes < 0 || left < c.bytes) c = (tg_memory_cap){left, "what RLIMIT_AS leaves beside the address space already mapped"};
    }
    return c;
}
