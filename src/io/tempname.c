/* Temporary names for atomic saves. Each save writes "<path>.tmp.<pid>.<n>"
 * (n counts this process's saves, so two threads saving one path never share
 * a file) and renames it over path: concurrent saves to one path are
 * last-writer-wins, and every file at path is some save's complete output.
 * A save killed before its rename leaves its temporary behind; the next
 * successful save of the same path removes those whose process is gone. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"

static atomic_uint_fast64_t saves;

char *tg_st_temp_name(const char *path) {
    size_t n = strlen(path) + 64;
    char *tmp = malloc(n);
    if (tmp)
        snprintf(tmp, n, "%s.tmp.%ld.%llu", path, (long)getpid(),
                 (unsigned long long)atomic_fetch_add(&saves, 1));
    return tmp;
}

/* The pid in "<base>.tmp.<pid>[.<n>]", or -1 when name is not one of path's temporaries. */
static long temp_pid(const char *name, const char *base) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return -1;
    char *end;
    long pid = strtol(name + bl + 5, &end, 10);
    return pid > 0 && (*end == 0 || *end == '.') ? pid : -1;
}

void tg_st_remove_stale(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dl = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(dl + 2);
    if (!dir) return;
    if (slash) memcpy(dir, path, dl ? dl : 1), dir[dl ? dl : 1] = 0;
    else strcpy(dir, ".");
    DIR *d = opendir(dir);
    long self = (long)getpid();
    for (struct dirent *e; d && (e = readdir(d));) {
        long pid = temp_pid(e->d_name, base);
        /* Our own and live processes' temporaries may be saves in progress. */
        if (pid < 0 || pid == self || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t fl = strlen(dir) + strlen(e->d_name) + 2;
        char *full = malloc(fl);
        if (full) {
            snprintf(full, fl, "%s/%s", dir, e->d_name);
            unlink(full);
        }
        free(full);
    }
    if (d) closedir(d);
    free(dir);
}
