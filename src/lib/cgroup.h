/* Per-run cgroups: a memory and a process limit on the whole run (every
 * process and thread of it together), where the host may create cgroups.
 * Elsewhere runs fall back to per-process rlimits, and say so. */
#ifndef AIRLOCK_CGROUP_H
#define AIRLOCK_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock.h"

typedef struct cg_sandbox {
        bool enabled;
        bool v2;
        int n;           /* controllers in use: 1 (v2) or 2 (v1 memory, pids) */
        int dirfd[2];    /* the sandbox's cgroup in each hierarchy */
        char name[64];   /* its name in the parent */
        int parentfd[2]; /* the parent, for removal */
        uint64_t memory;
        uint32_t pids;
        unsigned next_id;
} cg_sandbox;

typedef struct cg_copy {
        int dirfd[2];
        char name[32];
} cg_copy;

/* Creates the sandbox's cgroups when cgroup v1 memory and pids controllers,
 * or a cgroup v2 hierarchy with both, are writable. Never fails: without
 * them, enabled is false. */
void cg_sandbox_init(cg_sandbox *cg, const airlock_limits *lim);
void cg_sandbox_destroy(cg_sandbox *cg);

/* Creates a cgroup for one copy with the run's limits. */
int cg_copy_create(cg_sandbox *cg, cg_copy *ret);
/* Moves the process into it (before any guest code runs). */
int cg_copy_attach(const cg_sandbox *cg, const cg_copy *c, pid_t pid);
/* True when the kernel's OOM killer acted inside the copy's cgroup. */
bool cg_copy_oom_killed(const cg_sandbox *cg, const cg_copy *c);
/* Removes it; every process in it must be gone. */
void cg_copy_destroy(cg_sandbox *cg, cg_copy *c);

#endif
