/* Per-copy cgroups.
 *
 * As root, the host makes the sandbox's cgroup, owned by the guest ids, and
 * hands its directories to the template. The template makes one child
 * cgroup c<N> per copy, with the run's memory and process limits, and the
 * copy moves itself there before it does anything else, so parallel runs
 * of one sandbox never share a limit and one run's memory hog ends only
 * itself. The move is in the copy's preparation, off a run's path. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "template/template_internal.h"

/* The hierarchies the copies' cgroups are made in: v2's one directory, or
 * v1's memory, pids and (where the host found it) cpuacct, whose
 * cpuacct.usage gives the run's CPU time in ns. */
static int cg_dirs(const struct template_state *tpl, int dirs[CG_HIERARCHIES])
{
        dirs[0] = tpl->params.cgroup ? TEMPLATE_CG_FD : -1;
        dirs[1] = tpl->params.cgroup == 1 ? TEMPLATE_CG2_FD : -1;
        dirs[2] = tpl->params.cgroup_cpu ? TEMPLATE_CG3_FD : -1;
        return tpl->params.cgroup == 1   ? (tpl->params.cgroup_cpu ? 3 : 2)
               : tpl->params.cgroup == 2 ? 1
                                         : 0;
}

static int cg_write(int dirfd, const char *file, const char *text)
{
        _cleanup_close_ int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int r = al_write_full(fd, text, strlen(text));
        return r < 0 ? r : 0;
}

static bool cg_remove_now(const struct template_state *tpl, uint32_t seq)
{
        char name[24];
        snprintf(name, sizeof(name), "c%u", (unsigned)seq);
        int dirs[CG_HIERARCHIES], n = cg_dirs(tpl, dirs);
        bool done = true;
        for (int i = 0; i < n; i++)
                if (unlinkat(dirs[i], name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        done = false;
        return done;
}

void tpl_cgroups_retry(struct template_state *tpl)
{
        size_t k = 0;
        for (size_t i = 0; i < tpl->n_pending_rm; i++)
                if (!cg_remove_now(tpl, tpl->pending_rm[i]))
                        tpl->pending_rm[k++] = tpl->pending_rm[i];
        tpl->n_pending_rm = k;
}

/* The host has read how the copy's run ended (its OOM counter): its cgroup
 * may go. The host tells this only after the run's result, so removing the
 * cgroup is never on a run's path. */
void tpl_cgroup_done(struct template_state *tpl, uint32_t seq)
{
        if (!seq || seq > tpl->copy_cgroup_seq || cg_remove_now(tpl, seq))
                return;
        if (tpl->n_pending_rm < MAX_PENDING_RM)
                tpl->pending_rm[tpl->n_pending_rm++] = seq;
}

/* Removes the cgroup of a copy that never reached the host. */
void tpl_cgroup_remove(const struct template_state *tpl, unsigned seq)
{
        if (seq)
                (void)cg_remove_now(tpl, seq);
}

/* Opens the files the host reads a copy's usage from (cg_copy_usage), in
 * the copy's cgroup folders cg: v2's cpu.stat and memory.peak, v1's
 * cpuacct.usage (where the host found a cpuacct hierarchy) and
 * memory.max_usage_in_bytes. Opened here, while the copy is prepared, the
 * host reads each with one pread on a run's path instead of opening a
 * folder and a file of the cgroup file system before and after the run:
 * the first lookup of a new cgroup's folder and files, which makes their
 * dentries and inodes, took some 40 us a read on the 2-core test machine.
 * A file that is not there (memory.peak before Linux 5.19) is -1: its
 * figure is unknown, as it was. */
static void usage_open(const struct template_state *tpl, const int cg[CG_HIERARCHIES],
                       int ret[TPL_USAGE_FILES])
{
        const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
        bool v1 = tpl->params.cgroup == 1;
        int cpu_dir = v1 ? cg[2] : cg[0];
        ret[TPL_USAGE_CPU] =
            cpu_dir >= 0 ? openat(cpu_dir, v1 ? "cpuacct.usage" : "cpu.stat", flags) : -1;
        ret[TPL_USAGE_PEAK] =
            openat(cg[0], v1 ? "memory.max_usage_in_bytes" : "memory.peak", flags);
}

/* Makes cgroup c<seq> in each of the n hierarchies of dirs, with the run's
 * limits, and opens what the copy and the host need of it (see
 * tpl_cgroup_make). On failure everything it opened is closed again, on
 * its return, so before the caller removes the cgroup; ret_procs, ret_oom
 * and ret_usage are then left untouched. */
static int cgroup_open(const struct template_state *tpl, const int dirs[CG_HIERARCHIES], int n,
                       unsigned seq, int ret_procs[CG_HIERARCHIES], int *ret_oom,
                       int ret_usage[TPL_USAGE_FILES])
{
        char name[24], mem[32], pids[32];
        snprintf(name, sizeof(name), "c%u", seq);
        snprintf(mem, sizeof(mem), "%llu", (unsigned long long)tpl->params.limits.memory_bytes);
        snprintf(pids, sizeof(pids), "%u", tpl->params.limits.pids + CG_PIDS_SLACK);
        _cleanup_close_cg_ int cg[CG_HIERARCHIES] = {-1, -1, -1};
        int r = 0;
        for (int i = 0; i < n && r >= 0; i++) {
                /* A cgroup of that name that is already there is not ours
                 * to use: it may have other limits, or other tasks. */
                if (mkdirat(dirs[i], name, 0755) < 0)
                        r = -errno;
                else if ((cg[i] = openat(dirs[i], name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                        r = -errno;
        }
        if (r >= 0 && tpl->params.cgroup == 1) {
                r = cg_write(cg[0], "memory.limit_in_bytes", mem);
                /* Swap would let a run exceed the limit; where swap is
                 * accounted, that door is closed too. */
                if (r >= 0)
                        (void)cg_write(cg[0], "memory.memsw.limit_in_bytes", mem);
                if (r >= 0)
                        r = cg_write(cg[1], "pids.max", pids);
        } else if (r >= 0) {
                r = cg_write(cg[0], "memory.max", mem);
                if (r >= 0)
                        (void)cg_write(cg[0], "memory.swap.max", "0");
                if (r >= 0)
                        r = cg_write(cg[0], "pids.max", pids);
        }
        _cleanup_close_ int oom = -1;
        if (r >= 0) {
                oom =
                    openat(cg[0], tpl->params.cgroup == 1 ? "memory.oom_control" : "memory.events",
                           O_RDONLY | O_CLOEXEC);
                if (oom < 0)
                        r = -errno;
        }
        /* On v1 the copy joins through "tasks", not "cgroup.procs": a
         * write of "0" there moves the writing thread alone, which in a
         * copy just forked is the whole process, and the kernel then takes
         * no global lock. Moving a thread group takes the write side of
         * cgroup_threadgroup_rwsem, which waits for an RCU grace period
         * whenever no other move came just before: 6.8 to 7.3 ms against
         * 0.02 ms for "tasks" (a throw-away C program, a forked child
         * writing "0" 100 ms apart, 2026-12-05). v2 has no such file
         * outside threaded cgroups. */
        const char *join = tpl->params.cgroup == 1 ? "tasks" : "cgroup.procs";
        _cleanup_close_cg_ int procs[CG_HIERARCHIES] = {-1, -1, -1};
        for (int i = 0; i < n && r >= 0; i++)
                if ((procs[i] = openat(cg[i], join, O_WRONLY | O_CLOEXEC)) < 0)
                        r = -errno;
        if (r < 0)
                return r;
        for (int i = 0; i < CG_HIERARCHIES; i++)
                ret_procs[i] = TAKE_FD(procs[i]);
        *ret_oom = TAKE_FD(oom);
        usage_open(tpl, cg, ret_usage);
        return 0;
}

/* Makes the next copy's cgroup with the run's limits. Returns in procs the
 * files the copy writes itself into (cgroup_open), in ret_oom the file
 * whose OOM kill count the host reads after the run, and in ret_usage
 * those of its usage (usage_open). Without cgroups, *ret_seq is 0 and
 * nothing is opened. On failure the cgroup is removed again and procs,
 * ret_oom and ret_usage are left untouched. */
int tpl_cgroup_make(struct template_state *tpl, unsigned *ret_seq, int procs[CG_HIERARCHIES],
                    int *ret_oom, int ret_usage[TPL_USAGE_FILES])
{
        int dirs[CG_HIERARCHIES], n = cg_dirs(tpl, dirs);
        if (n == 0)
                return 0;
        unsigned seq = ++tpl->copy_cgroup_seq;
        int r = cgroup_open(tpl, dirs, n, seq, procs, ret_oom, ret_usage);
        if (r < 0) {
                tpl_cgroup_remove(tpl, seq);
                return r;
        }
        *ret_seq = seq;
        return 0;
}

/* In a new copy, first of all: moves itself into its cgroup, then makes
 * its cgroup namespace, so that the guest sees that cgroup as its root.
 * The copy is one thread here (clone3 copies the calling thread alone),
 * so the "0" it writes to v1's tasks moves all of it (cgroup_open). */
int tpl_cgroup_join(const int procs[CG_HIERARCHIES])
{
        int r = 0;
        for (int i = 0; i < CG_HIERARCHIES; i++) {
                if (procs[i] < 0)
                        continue;
                if (r >= 0 && al_write_full(procs[i], "0", 1) < 0)
                        r = -errno;
                close(procs[i]);
        }
        if (r >= 0 && unshare(CLONE_NEWCGROUP) < 0)
                r = -errno;
        return r;
}
