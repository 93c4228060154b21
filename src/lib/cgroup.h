/* The sandbox's cgroup: a memory and a process limit on everything the
 * sandbox runs, where the host may create cgroups (as root, with cgroup v1
 * memory and pids controllers, or cgroup v2). The template is moved into it
 * once, at start; copies are born in it, so a run costs no cgroup migration
 * (which waits for an RCU grace period: milliseconds). Without cgroups, runs
 * fall back to per-process rlimits. */
#ifndef AIRLOCK_CGROUP_H
#define AIRLOCK_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock.h"

/* Room for the template and a pre-started copy on top of a run's limits,
 * and for the copies that have ended and are still being torn down (at
 * idle priority, a preloaded numpy's interpreter takes milliseconds): with
 * a room of 4, --pids 1 --preload numpy failed to start a copy (EAGAIN) in
 * about half the runs of test_blas_in_preloaded_copies. A run's own tasks
 * stay bounded by RLIMIT_NPROC (template.c, copy_main). */
#define CG_MEMORY_SLACK (64ull << 20)
#define CG_PIDS_SLACK   8

typedef struct cg_sandbox {
        bool enabled;
        bool v2;
        int n;           /* hierarchies in use: 1 (v2) or 2 (v1 memory, pids) */
        int dirfd[2];    /* the sandbox's cgroup in each hierarchy */
        int parentfd[2]; /* its parent, for removal */
        int oomfd;       /* its OOM kill count, read at every run */
        char name[64];   /* its name there */
} cg_sandbox;

/* Creates the sandbox's cgroups with limits from lim. Never fails: where
 * cgroups are not available, enabled is false. */
void cg_sandbox_init(cg_sandbox *cg, const airlock_limits *lim);
/* Moves pid (the template, before it starts any copy) into the cgroups. */
int cg_sandbox_attach(const cg_sandbox *cg, pid_t pid);
/* How many times the kernel's OOM killer acted in the sandbox so far. */
uint64_t cg_sandbox_oom_kills(const cg_sandbox *cg);
/* Removes the cgroups; every process in them must be gone. */
void cg_sandbox_destroy(cg_sandbox *cg);

#endif
