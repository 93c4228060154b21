/* The sandbox's cgroups, where the host may create them (as root, with
 * cgroup v1 memory and pids controllers, or cgroup v2). The sandbox has a
 * cgroup of its own, owned by the guest ids and without limits of its
 * own; the template lives in its child "tpl", limited to a run's memory
 * plus slack; and each copy moves itself at its start into a child "c<N>"
 * that the template makes with the run's limits (see template.c), so
 * parallel runs never share a limit. Without cgroups, runs fall back to
 * per-process rlimits and the seccomp rules of seccomp.c. */
#ifndef AIRLOCK_CGROUP_H
#define AIRLOCK_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "airlock.h"
#include "core/wire.h"

typedef struct cg_sandbox {
        bool enabled;
        bool v2;
        int n; /* hierarchies in use: 1 (v2), 2 (v1 memory, pids) or 3 (and cpuacct) */
        int dirfd[CG_HIERARCHIES];    /* the sandbox's cgroup in each hierarchy */
        int parentfd[CG_HIERARCHIES]; /* its parent, for removal */
        int tplfd[CG_HIERARCHIES];    /* the template's cgroup "tpl" below it */
        unsigned max_copy;            /* the highest copy cgroup number c<N> the host saw */
        char name[64];                /* its name there */
} cg_sandbox;

/* Creates the sandbox's cgroups, with the template's limits from lim,
 * owned by uid and gid so that the template (running as them) can make
 * the copies' cgroups. Never fails: where cgroups are not available,
 * enabled is false. */
void cg_sandbox_init(cg_sandbox *cg, const airlock_limits *lim, uid_t uid, gid_t gid);
/* Opens, in ret (one per hierarchy in use, the rest -1, close-on-exec),
 * the files of "tpl" through which the template joins it: a process
 * writes "0" to each, single-threaded, to move itself in ("tasks" on v1,
 * "cgroup.procs" on v2; tpl_cgroup.c, cgroup_open, says why). On failure
 * nothing stays open. */
int cg_sandbox_join_files(const cg_sandbox *cg, int ret[CG_HIERARCHIES]);
/* For _cleanup_: closes the files cg_sandbox_join_files opened. */
static inline void cg_join_files_closep(int (*fds)[CG_HIERARCHIES])
{
        for (int i = 0; i < CG_HIERARCHIES; i++)
                if ((*fds)[i] >= 0)
                        close((*fds)[i]);
}
/* How many times the kernel's OOM killer acted in the cgroup whose
 * memory.oom_control (v1) or memory.events (v2) is open as fd; 0 for -1. */
uint64_t cg_oom_kills(int fd);
/* Removes the cgroup c<seq> of a copy that is gone (reaped). */
int cg_sandbox_remove_copy(const cg_sandbox *cg, unsigned seq);
/* What a copy's cgroup has used, read from its files that the template
 * opened (cpufd, peakfd: copy.cpufd and copy.peakfd, -1 for none): its CPU
 * time in microseconds (v2 cpu.stat usage_usec, v1 cpuacct.usage in ns)
 * and its peak memory in bytes (v2 memory.peak, v1
 * memory.max_usage_in_bytes). Pages the copy shares with the template are
 * charged to the template's cgroup, so the peak is the copy's own. Each is
 * UINT64_MAX where it cannot be read (no cgroups, v1 without a cpuacct
 * hierarchy, a kernel without memory.peak). ret_mem_peak may be NULL: a
 * run's start needs only the CPU time. */
void cg_copy_usage(const cg_sandbox *cg, int cpufd, int peakfd, uint64_t *ret_cpu_us,
                   uint64_t *ret_mem_peak);
/* Removes the cgroups, the copies' included; every process in them must
 * be gone. */
void cg_sandbox_destroy(cg_sandbox *cg);

#endif
