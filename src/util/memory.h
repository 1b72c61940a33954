/* How much memory this process can have (memory.c). */
#ifndef TG_MEMORY_H
#define TG_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t bytes;    /* -1 when nothing is known */
    const char *what; /* which limit it is, in words */
} tg_memory_cap;

/* The smallest of physical memory, the cgroup's limit and RLIMIT_AS's headroom. */
tg_memory_cap tg_memory_available(void);

/* The memory limit of the cgroup that proc_cgroup (a /proc/<pid>/cgroup
 * file) names, under the cgroup file system at mount (v1 and v2, the
 * tightest of the group's and its ancestors'); -1 for none. Parameters so
 * that tests can give a tree of their own. */
int64_t tg_cgroup_memory_limit(const char *proc_cgroup, const char *mount);
#endif
