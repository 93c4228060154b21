/* cgroup v1 (memory and pids hierarchies, and cpuacct for the CPU time where
 * it is mounted) and v2 support for per-run limits and usage.
 * Files are opened relative to directory fds of cgroups we created. */
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

/* How deep below a sandbox's cgroup removal looks. */
#define CG_MAX_DEPTH 8

static int write_at(int dirfd, const char *file, const char *value)
{
        _cleanup_close_ int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return al_write_full(fd, value, strlen(value));
}

/* Our own cgroup in the hierarchy named key ("memory", "pids", or "" for
 * the v2 line "0::"), from /proc/self/cgroup. */
static int own_cgroup(const char *key, char *ret, size_t len)
{
        FILE *f = fopen("/proc/self/cgroup", "re");
        if (!f)
                return -errno;
        char line[1024];
        int r = -ENOENT;
        while (fgets(line, sizeof(line), f)) {
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                char *ctrls = c1 + 1;
                bool match = key[0] ? false : ctrls[0] == '\0';
                for (char *save = NULL, *t = strtok_r(ctrls, ",", &save); t && key[0];
                     t = strtok_r(NULL, ",", &save))
                        if (strcmp(t, key) == 0)
                                match = true;
                if (!match)
                        continue;
                char *p = c2 + 1;
                p[strcspn(p, "\n")] = '\0';
                snprintf(ret, len, "%s", p);
                r = 0;
                break;
        }
        fclose(f);
        return r;
}

static int open_parent(const char *mount, const char *key)
{
        char own[512], path[1024];
        if (own_cgroup(key, own, sizeof(own)) < 0)
                return -1;
        snprintf(path, sizeof(path), "%s%s", mount, own);
        return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* The start time of a process (clock ticks after boot, /proc/PID/stat field
 * 22), or 0 when it does not exist. With the pid it names a process
 * uniquely, even after the pid is reused. */
static unsigned long long start_time(int pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = al_read_full(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned long long t = 0;
        if (p && sscanf(p + 2,
                        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                        "%*d %*d %*d %*d %llu",
                        &t) != 1)
                t = 0;
        return t;
}

/* Whether cgroup name below parentfd still holds a process: then no wait
 * will let it be removed (a stale sandbox's cgroup whose template lives
 * on, say, which made every new sandbox wait 2 s for each). */
static bool cgroup_has_tasks(int parentfd, const char *name)
{
        char path[64];
        snprintf(path, sizeof(path), "%s/cgroup.procs", name);
        int fd = openat(parentfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return false;
        char c;
        ssize_t n = read(fd, &c, 1);
        close(fd);
        return n > 0;
}

/* rmdir of a cgroup whose last task was just reaped, or whose children
 * were just removed, fails with EBUSY until the kernel has taken them
 * offline, which it does after an RCU grace period: milliseconds, and on a
 * busy machine sometimes over 100 ms (a CI run saw a sandbox's cgroup left
 * behind with a 100 ms bound). Nothing tells when; so wait for it, in 2 ms
 * steps, for at most 2 s; a stale sandbox's cgroup (stale) not while it
 * still holds a process, which no wait ends, where a process of our own
 * (the cache builder, say) may still be exiting. A cgroup still left then
 * is removed by the stale sweep of a later process. */
static void remove_cgroup(int parentfd, const char *name, bool stale)
{
        for (int i = 0; i < 1000; i++) {
                if (unlinkat(parentfd, name, AT_REMOVEDIR) == 0 || errno != EBUSY ||
                    (stale && cgroup_has_tasks(parentfd, name)))
                        return;
                usleep(2000);
        }
}

/* A directory stream of the directory open as dirfd, which stays open;
 * NULL on failure. */
static DIR *dir_stream(int dirfd)
{
        int fd = dup(dirfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d && fd >= 0)
                close(fd);
        return d;
}

/* Removes every cgroup below the one open as dirfd (the template's and
 * the copies', and anything made below them), depth first: a cgroup's only
 * subdirectories are its children. depth bounds the walk. */
static void remove_children(int dirfd, int depth, bool stale)
{
        DIR *d = dir_stream(dirfd);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
                    strcmp(de->d_name, "..") == 0)
                        continue;
                int sub =
                    openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0 && depth > 0)
                        remove_children(sub, depth - 1, stale);
                if (sub >= 0)
                        close(sub);
                remove_cgroup(dirfd, de->d_name, stale);
        }
        closedir(d);
}

int cg_sandbox_remove_copy(const cg_sandbox *cg, unsigned seq)
{
        char name[24];
        snprintf(name, sizeof(name), "c%u", seq);
        int r = 0;
        for (int i = 0; cg->enabled && i < cg->n; i++)
                if (unlinkat(cg->dirfd[i], name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        r = -errno;
        return r;
}

/* Removes the cgroups of sandboxes whose process died without closing them
 * (SIGKILL, a crash). Names are "airlock-PID-STARTTIME-N": a cgroup whose
 * process no longer exists, or whose pid now belongs to a later process, is
 * stale. One still in use cannot be removed anyway. */
static void sweep_stale(int parentfd)
{
        DIR *d = dir_stream(parentfd);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                int pid = 0;
                unsigned long long t = 0;
                int k = sscanf(de->d_name, "airlock-%d-%llu-", &pid, &t);
                if (k < 1 || pid <= 0)
                        continue;
                if (k == 2 ? start_time(pid) == t : kill(pid, 0) == 0 || errno != ESRCH)
                        continue;
                int dfd =
                    openat(parentfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd >= 0) {
                        remove_children(dfd, CG_MAX_DEPTH, true);
                        close(dfd);
                }
                unlinkat(parentfd, de->d_name, AT_REMOVEDIR);
        }
        closedir(d);
}

/* Makes the sandbox's cgroup in hierarchy i (its parent open), owned by
 * the guest ids, with the template's child "tpl". */
static int make_hierarchy(cg_sandbox *cg, int i, uid_t uid, gid_t gid)
{
        if (cg->parentfd[i] >= 0)
                sweep_stale(cg->parentfd[i]);
        if (cg->parentfd[i] < 0 || mkdirat(cg->parentfd[i], cg->name, 0755) < 0)
                return -1;
        cg->dirfd[i] =
            openat(cg->parentfd[i], cg->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cg->dirfd[i] < 0)
                return -1;
        /* The template makes the copies' cgroups here, as the guest ids; on
         * v2 it also moves copies between two children, which takes write
         * access to this cgroup's procs file. */
        if (fchown(cg->dirfd[i], uid, gid) < 0)
                return -1;
        if (cg->v2 && (write_at(cg->dirfd[i], "cgroup.subtree_control", "+memory +pids") < 0 ||
                       fchownat(cg->dirfd[i], "cgroup.procs", uid, gid, 0) < 0))
                return -1;
        if (mkdirat(cg->dirfd[i], "tpl", 0755) < 0)
                return -1;
        cg->tplfd[i] = openat(cg->dirfd[i], "tpl", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return cg->tplfd[i] < 0 ? -1 : 0;
}

/* Gives up the v1 cpuacct hierarchy (index 2), which only measures: the
 * limits hold without it. */
static void drop_cpuacct(cg_sandbox *cg)
{
        if (cg->tplfd[2] >= 0)
                close(cg->tplfd[2]);
        if (cg->dirfd[2] >= 0) {
                remove_cgroup(cg->dirfd[2], "tpl", false);
                close(cg->dirfd[2]);
        }
        if (cg->parentfd[2] >= 0) {
                remove_cgroup(cg->parentfd[2], cg->name, false);
                close(cg->parentfd[2]);
        }
        cg->dirfd[2] = cg->parentfd[2] = cg->tplfd[2] = -1;
        cg->n = 2;
}

void cg_sandbox_init(cg_sandbox *cg, const airlock_limits *lim, uid_t uid, gid_t gid)
{
        memset(cg, 0, sizeof(*cg));
        for (int i = 0; i < CG_HIERARCHIES; i++)
                cg->dirfd[i] = cg->parentfd[i] = cg->tplfd[i] = -1;
        if (geteuid() != 0)
                return;
        static atomic_uint seq;
        snprintf(cg->name, sizeof(cg->name), "airlock-%d-%llu-%u", (int)getpid(),
                 start_time(getpid()), atomic_fetch_add(&seq, 1));
        struct stat st;
        if (stat("/sys/fs/cgroup/memory/memory.limit_in_bytes", &st) == 0 &&
            stat("/sys/fs/cgroup/pids", &st) == 0) {
                cg->parentfd[0] = open_parent("/sys/fs/cgroup/memory", "memory");
                cg->parentfd[1] = open_parent("/sys/fs/cgroup/pids", "pids");
                cg->n = 2;
                /* cpuacct gives the run's CPU time in ns; it may be mounted
                 * alone or with cpu. */
                if (stat("/sys/fs/cgroup/cpuacct/cpuacct.usage", &st) == 0 &&
                    (cg->parentfd[2] = open_parent("/sys/fs/cgroup/cpuacct", "cpuacct")) >= 0)
                        cg->n = 3;
        } else if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) {
                cg->parentfd[0] = open_parent("/sys/fs/cgroup", "");
                cg->n = 1;
                cg->v2 = true;
        } else {
                return;
        }
        for (int i = 0; i < cg->n; i++) {
                if (make_hierarchy(cg, i, uid, gid) == 0)
                        continue;
                if (i == 2) {
                        drop_cpuacct(cg);
                        break;
                }
                goto fail;
        }
        /* The template: one interpreter and the copies it has just started,
         * before each moves itself into its own cgroup. */
        char mem[32], pids[32];
        snprintf(mem, sizeof(mem), "%llu",
                 (unsigned long long)(lim->memory_bytes + CG_MEMORY_SLACK));
        /* The template's own helpers (the page probe, the font cache
         * builder and its fc-list) and copies not yet in their own cgroup
         * count here too. */
        snprintf(pids, sizeof(pids), "%u", lim->pids + CG_PIDS_SLACK + 8);
        if (cg->v2) {
                if (write_at(cg->tplfd[0], "memory.max", mem) < 0 ||
                    write_at(cg->tplfd[0], "pids.max", pids) < 0)
                        goto fail;
                write_at(cg->tplfd[0], "memory.swap.max", "0");
        } else {
                if (write_at(cg->tplfd[0], "memory.limit_in_bytes", mem) < 0 ||
                    write_at(cg->tplfd[1], "pids.max", pids) < 0)
                        goto fail;
                /* Swap would let the template exceed the limit; where swap
                 * is accounted, close that door too. */
                write_at(cg->tplfd[0], "memory.memsw.limit_in_bytes", mem);
        }
        cg->enabled = true;
        return;
fail:
        cg_sandbox_destroy(cg);
}

void cg_sandbox_destroy(cg_sandbox *cg)
{
        for (int i = 0; i < CG_HIERARCHIES; i++) {
                if (cg->tplfd[i] >= 0)
                        close(cg->tplfd[i]);
                if (cg->dirfd[i] >= 0) {
                        /* By name first, which takes no file descriptor: a
                         * sandbox closed because the process ran out of
                         * them must still leave no cgroup behind. Then
                         * whatever else is there. */
                        char name[24];
                        remove_cgroup(cg->dirfd[i], "tpl", false);
                        for (unsigned k = 1; k <= cg->max_copy; k++) {
                                snprintf(name, sizeof(name), "c%u", k);
                                if (unlinkat(cg->dirfd[i], name, AT_REMOVEDIR) < 0 &&
                                    errno == EBUSY)
                                        remove_cgroup(cg->dirfd[i], name, false);
                        }
                        remove_children(cg->dirfd[i], CG_MAX_DEPTH, false);
                        close(cg->dirfd[i]);
                }
                if (cg->parentfd[i] >= 0) {
                        remove_cgroup(cg->parentfd[i], cg->name, false);
                        close(cg->parentfd[i]);
                }
                cg->dirfd[i] = cg->parentfd[i] = cg->tplfd[i] = -1;
        }
        cg->enabled = false;
}

int cg_sandbox_join_files(const cg_sandbox *cg, int ret[CG_HIERARCHIES])
{
        const char *file = cg->v2 ? "cgroup.procs" : "tasks";
        for (int i = 0; i < CG_HIERARCHIES; i++)
                ret[i] = -1;
        for (int i = 0; i < cg->n; i++) {
                ret[i] = openat(cg->tplfd[i], file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
                if (ret[i] < 0) {
                        int r = -errno;
                        for (int j = 0; j < i; j++) {
                                close(ret[j]);
                                ret[j] = -1;
                        }
                        return r;
                }
        }
        return 0;
}

uint64_t cg_oom_kills(int fd)
{
        char buf[1024];
        if (fd < 0)
                return 0;
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        const char *p = strstr(buf, "oom_kill ");
        return p ? strtoull(p + 9, NULL, 10) : 0;
}

/* The number after key (a line "key N") in the file open as fd, read from
 * its start, or UINT64_MAX; with key NULL, the file's first number. */
static uint64_t cg_read_number(int fd, const char *key)
{
        if (fd < 0)
                return UINT64_MAX;
        char buf[1024];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
                return UINT64_MAX;
        buf[n] = '\0';
        const char *p = buf;
        if (key) {
                size_t kl = strlen(key);
                for (p = buf; p && !(strncmp(p, key, kl) == 0 && p[kl] == ' ');) {
                        p = strchr(p, '\n');
                        p = p ? p + 1 : NULL;
                }
                if (!p)
                        return UINT64_MAX;
                p += kl + 1;
        }
        char *end = NULL;
        unsigned long long v = strtoull(p, &end, 10);
        return end == p ? UINT64_MAX : (uint64_t)v;
}

void cg_copy_usage(const cg_sandbox *cg, int cpufd, int peakfd, uint64_t *ret_cpu_us,
                   uint64_t *ret_mem_peak)
{
        *ret_cpu_us = UINT64_MAX;
        if (ret_mem_peak)
                *ret_mem_peak = UINT64_MAX;
        if (!cg->enabled)
                return;
        if (cg->v2) {
                *ret_cpu_us = cg_read_number(cpufd, "usage_usec");
        } else {
                uint64_t ns = cg_read_number(cpufd, NULL);
                *ret_cpu_us = ns != UINT64_MAX ? ns / 1000 : UINT64_MAX;
        }
        if (ret_mem_peak)
                *ret_mem_peak = cg_read_number(peakfd, NULL);
}
