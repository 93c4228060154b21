/* A copy's /proc: its own procfs, whose system-wide files are covered, each
 * by an empty read-only file or folder, or by one that airlock writes with
 * what the run may know of its machine: its memory limit and use
 * (meminfo), the CPUs it may use (cpuinfo, stat), its own uptime and CPU
 * time (uptime, stat).
 *
 * The kernel shows a procfs without its system-wide files (subset=pid), but
 * nothing can be added to one: a mount needs a name to cover. So the copy
 * mounts a whole procfs and covers every top-level entry that is not a
 * process, a link into one (self, thread-self, mounts, net) or a file it
 * writes. The files it writes live on a tmpfs of the copy's own that no
 * path reaches (a detached mount); each is bound read-only over its name.
 * The guest's runtime asks for them to be written again each time Python
 * opens one (tpl_proc_opened, from an audit hook), so they are as fresh as
 * the kernel's own; a program that reads them without Python's open (C
 * code) sees them as of the last such open or the copy's start. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "template/template.h"
#include "template/template_internal.h"

/* The most of the host's cpuinfo kept for the guest's CPUs. */
#define CPUINFO_MAX (256u << 10)

enum { P_MEMINFO, P_STAT, P_UPTIME, P_N };

/* Per copy (a copy is a fork of the template, which has none of them):
 * the fds the files are written through, and what the figures are made
 * from. */
static int proc_fd[P_N] = {-1, -1, -1};
static bool per_run; /* the memory limit is the run's (a cgroup), not each process's */
static uint64_t mem_limit;
static unsigned n_cpus = 1;
static struct timespec started; /* CLOCK_BOOTTIME when the copy started */

static uint64_t ns_of(struct timespec t)
{
        return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One top-level entry of /proc and what a copy does with it: covers it
 * with the file or folder named src of its tmpfs, or leaves it (src NULL).
 * The most entries planned: PROC_PLAN_MAX (a kernel has about 60). */
#define PROC_PLAN_MAX 256
struct proc_plan {
        char name[32];
        unsigned char type; /* the entry's d_type, which must match */
        const char *src;
};

static bool kept(int procdir, const struct dirent *de);

/* What entry de of the procfs open at procdir needs: *ret_src is the
 * file or folder of the copy's tmpfs that covers it, or NULL when it stays
 * the kernel's (a process, a link into the reader's own, or a file the
 * guest may neither read nor write). -ELOOP for a link this code does not
 * know: the caller fails closed. */
static int cover_source(int procdir, const struct dirent *de, const char **ret_src)
{
        *ret_src = NULL;
        if (kept(procdir, de))
                return 0;
        /* A file the guest can neither read nor write (kmsg, slabinfo,
         * kpage*: root's of the host, mode 0400) needs no cover, which
         * would cost the copy's setup time. The copy's capabilities, those
         * of its own user namespace, do not reach files of ids it does not
         * map, so this is the guest's access; the template's, in the user
         * namespace the copy's is made in and with the same ids, is the
         * same. */
        if (de->d_type == DT_REG && faccessat(procdir, de->d_name, R_OK, AT_EACCESS) < 0 &&
            errno == EACCES && faccessat(procdir, de->d_name, W_OK, AT_EACCESS) < 0 &&
            errno == EACCES)
                return 0;
        if (de->d_type == DT_LNK)
                return -ELOOP;
        static const char *const own[] = {"cpuinfo", "vmstat", "meminfo", "stat", "uptime"};
        *ret_src = de->d_type == DT_DIR ? "d" : "e";
        for (size_t i = 0; i < ARRAY_SIZE(own); i++)
                if (strcmp(de->d_name, own[i]) == 0)
                        *ret_src = own[i];
        return 0;
}

/* Decides, once, in the template, what each global entry of /proc needs
 * (cover_source), from the template's /proc: a full procfs, whose global
 * entries every copy's own procfs has too. Processes are left out (a
 * copy's are its own); so is whatever a copy could not use (a name too
 * long, entries past PROC_PLAN_MAX), and every entry that something is
 * mounted on: what the template would see there is the mount's, not
 * procfs's, and a file of its that the guest could not read might stand
 * for a procfs file it can. (The kernel refuses a copy its procfs while
 * anything but an empty folder of /proc is mounted on, as container
 * runtimes' masks are, so this only keeps the plan right should that
 * change.) A copy decides those itself, as it does any entry it finds
 * that the plan lacks. No plan at all (out of memory, /proc unreadable)
 * only costs each copy the asking. */
static void make_proc_plan(struct template_state *tpl)
{
        int procdir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = procdir < 0 ? NULL : fdopendir(dup(procdir));
        struct proc_plan *plan = d ? calloc(PROC_PLAN_MAX, sizeof(*plan)) : NULL;
        size_t n = 0;
        struct stat root, st;
        if (plan && fstat(procdir, &root) < 0) {
                free(plan);
                plan = NULL;
        }
        struct dirent *de;
        while (plan && n < PROC_PLAN_MAX && (de = readdir(d))) {
                if (isdigit((unsigned char)de->d_name[0]) ||
                    strlen(de->d_name) >= sizeof(plan[n].name) || de->d_type == DT_UNKNOWN)
                        continue;
                /* The entry itself, not a mount on it (lookups cross into
                 * a mount whatever AT_SYMLINK_NOFOLLOW says). */
                if (fstatat(procdir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    st.st_dev != root.st_dev)
                        continue;
                const char *src;
                if (cover_source(procdir, de, &src) < 0)
                        continue; /* an unknown link: each copy fails on it */
                snprintf(plan[n].name, sizeof(plan[n].name), "%s", de->d_name);
                plan[n].type = de->d_type;
                plan[n].src = src;
                n++;
        }
        if (d)
                closedir(d);
        if (procdir >= 0)
                close(procdir);
        tpl->proc_plan = plan;
        tpl->n_proc_plan = plan ? n : 0;
}

/* The plan's entry for de, or NULL. Copies read /proc in the order the
 * template did, so the entry after the last one found is tried first. */
static const struct proc_plan *planned(const struct template_state *tpl, const struct dirent *de,
                                       size_t *cursor)
{
        for (size_t k = 0; k < tpl->n_proc_plan; k++) {
                size_t i = (*cursor + k) % tpl->n_proc_plan;
                const struct proc_plan *p = &tpl->proc_plan[i];
                if (p->type == de->d_type && strcmp(p->name, de->d_name) == 0) {
                        *cursor = i + 1;
                        return p;
                }
        }
        return NULL;
}

/* The host's cpuinfo, as the template reads it once: only the blocks of
 * the CPUs the sandbox may use, numbered from 0 as the guest counts them.
 * NULL when it cannot be read (the guest then gets an empty file). */
void tpl_proc_prepare(struct template_state *tpl)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        bool have_set = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0;
        tpl->proc_cpus = have_set ? (unsigned)CPU_COUNT(&set) : 1;
        make_proc_plan(tpl);
        FILE *f = fopen("/proc/cpuinfo", "re");
        if (!f)
                return;
        char *out = malloc(CPUINFO_MAX);
        size_t n = 0;
        char line[1024];
        bool keep = false;
        unsigned next = 0;
        while (out && fgets(line, sizeof(line), f)) {
                unsigned cpu;
                if (sscanf(line, "processor : %u", &cpu) == 1) {
                        keep = !have_set || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set));
                        if (keep)
                                snprintf(line, sizeof(line), "processor\t: %u\n", next++);
                }
                size_t len = strlen(line);
                if (keep && n + len < CPUINFO_MAX) {
                        memcpy(out + n, line, len);
                        n += len;
                }
        }
        fclose(f);
        if (out)
                out[n] = '\0';
        tpl->proc_cpuinfo = out;
}

static void put(int fd, const char *buf, int n)
{
        if (fd < 0 || n < 0)
                return;
        if (pwrite(fd, buf, (size_t)n, 0) == n)
                (void)!ftruncate(fd, n);
}

/* The sum of the "KEY: N kB" lines of a /proc file named by PATH. */
static uint64_t sum_kb(const char *path, const char *const keys[], size_t n_keys)
{
        FILE *f = fopen(path, "re");
        uint64_t kb = 0;
        char line[256];
        while (f && fgets(line, sizeof(line), f)) {
                for (size_t i = 0; i < n_keys; i++) {
                        size_t len = strlen(keys[i]);
                        unsigned long v;
                        if (strncmp(line, keys[i], len) == 0 &&
                            sscanf(line + len, ": %lu kB", &v) == 1)
                                kb += v;
                }
        }
        if (f)
                fclose(f);
        return kb << 10;
}

static uint64_t fs_used(const char *path)
{
        struct statvfs sv;
        if (statvfs(path, &sv) < 0 || sv.f_blocks < sv.f_bfree)
                return 0;
        return (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
}

/* What counts against the limit now. With a cgroup, the run's: the pages
 * its processes hold of their own (not the template's pages they share)
 * and its files in /tmp and /output, all of which its cgroup charges:
 * this process's exactly (the private dirty pages of smaps_rollup), the
 * others' as their anonymous resident pages (status), since a copy's
 * processes are not dumpable and may not read each other's smaps_rollup;
 * pages a fork still shares with its parent are then counted twice. Clean
 * private pages are left out: they are pages of files (a module's .so)
 * that only this process maps at the moment, and become shared, or
 * private again, whenever the template or another copy maps or unmaps the
 * same file, so counting them moved "used" by megabytes while the run
 * itself changed nothing. Without a cgroup, this process's data
 * size, which its limit counts (RLIMIT_DATA). Read from the run's own
 * /proc and mounts, never from a host file (the cgroup's own files would
 * name the host's cgroup path). */
static uint64_t memory_used(void)
{
        static const char *const data[] = {"VmData"};
        if (!per_run)
                return sum_kb("/proc/self/status", data, 1);
        static const char *const priv[] = {"Private_Dirty"};
        static const char *const anon[] = {"RssAnon"};
        uint64_t used =
            fs_used("/tmp") + fs_used("/output") + sum_kb("/proc/self/smaps_rollup", priv, 1);
        char self[16];
        snprintf(self, sizeof(self), "%d", (int)getpid());
        DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (!isdigit((unsigned char)de->d_name[0]) || strcmp(de->d_name, self) == 0)
                        continue;
                char path[sizeof(de->d_name) + 32];
                snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
                used += sum_kb(path, anon, 1);
        }
        if (d)
                closedir(d);
        return used;
}

/* At the copy's start (initial), before it has run anything, the run
 * holds nothing yet: its processes are not walked then, which would cost
 * more than the rest of /proc's setup. */
static void write_meminfo(bool initial)
{
        uint64_t used = initial ? 0 : memory_used(), total = mem_limit >> 10;
        uint64_t free = used >> 10 < total ? total - (used >> 10) : 0;
        char buf[512];
        int n = snprintf(buf, sizeof(buf),
                         "MemTotal:       %8lu kB\nMemFree:        %8lu kB\n"
                         "MemAvailable:   %8lu kB\nBuffers:               0 kB\n"
                         "Cached:                0 kB\nSwapCached:            0 kB\n"
                         "Active:         %8lu kB\nInactive:              0 kB\n"
                         "SwapTotal:             0 kB\nSwapFree:              0 kB\n"
                         "Shmem:                 0 kB\nSlab:                  0 kB\n"
                         "SReclaimable:          0 kB\nSUnreclaim:            0 kB\n",
                         (unsigned long)total, (unsigned long)free, (unsigned long)free,
                         (unsigned long)(total - free));
        put(proc_fd[P_MEMINFO], buf, n);
}

/* The copy's uptime, and the CPU time of this process and of the children
 * it reaped, in clock ticks; idle is the rest of the time of its CPUs. */
static void times_now(uint64_t *up_ns, uint64_t *user, uint64_t *sys, uint64_t *idle)
{
        struct timespec now;
        clock_gettime(CLOCK_BOOTTIME, &now);
        *up_ns = ns_of(now) - ns_of(started);
        long hz = sysconf(_SC_CLK_TCK);
        if (hz <= 0)
                hz = 100;
        struct rusage self, kids;
        getrusage(RUSAGE_SELF, &self);
        getrusage(RUSAGE_CHILDREN, &kids);
        uint64_t u_us = (uint64_t)(self.ru_utime.tv_sec + kids.ru_utime.tv_sec) * 1000000u +
                        (uint64_t)(self.ru_utime.tv_usec + kids.ru_utime.tv_usec);
        uint64_t s_us = (uint64_t)(self.ru_stime.tv_sec + kids.ru_stime.tv_sec) * 1000000u +
                        (uint64_t)(self.ru_stime.tv_usec + kids.ru_stime.tv_usec);
        *user = u_us * (uint64_t)hz / 1000000u;
        *sys = s_us * (uint64_t)hz / 1000000u;
        uint64_t all = *up_ns / 1000u * n_cpus * (uint64_t)hz / 1000000u;
        *idle = all > *user + *sys ? all - *user - *sys : 0;
}

static void write_stat(void)
{
        uint64_t up, user, sys, idle;
        times_now(&up, &user, &sys, &idle);
        struct timespec real, boot;
        clock_gettime(CLOCK_REALTIME, &real);
        clock_gettime(CLOCK_BOOTTIME, &boot);
        struct rusage self;
        getrusage(RUSAGE_SELF, &self);
        char buf[4096];
        int n = snprintf(buf, sizeof(buf), "cpu  %lu 0 %lu %lu 0 0 0 0 0 0\n", (unsigned long)user,
                         (unsigned long)sys, (unsigned long)idle);
        for (unsigned i = 0; i < n_cpus && n > 0 && n < (int)sizeof(buf) - 128; i++) {
                /* The run's time is not kept per CPU: it is shared out. */
                uint64_t r = i == 0;
                n += snprintf(buf + n, sizeof(buf) - (size_t)n, "cpu%u %lu 0 %lu %lu 0 0 0 0 0 0\n",
                              i, (unsigned long)(user / n_cpus + (r ? user % n_cpus : 0)),
                              (unsigned long)(sys / n_cpus + (r ? sys % n_cpus : 0)),
                              (unsigned long)(idle / n_cpus + (r ? idle % n_cpus : 0)));
        }
        /* btime is the host's boot, as the start times in /proc/PID/stat
         * count from it (and CLOCK_BOOTTIME tells it anyway). */
        if (n > 0 && n < (int)sizeof(buf))
                n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                              "intr 0\nctxt %lu\nbtime %lld\nprocesses %d\nprocs_running 1\n"
                              "procs_blocked 0\nsoftirq 0\n",
                              (unsigned long)(self.ru_nvcsw + self.ru_nivcsw),
                              (long long)(real.tv_sec - boot.tv_sec), (int)getpid());
        if (n > 0 && n < (int)sizeof(buf))
                put(proc_fd[P_STAT], buf, n);
}

static void write_uptime(void)
{
        uint64_t up, user, sys, idle;
        times_now(&up, &user, &sys, &idle);
        long hz = sysconf(_SC_CLK_TCK);
        char buf[64];
        int n = snprintf(buf, sizeof(buf), "%lu.%02lu %lu.%02lu\n",
                         (unsigned long)(up / 1000000000u), (unsigned long)(up / 10000000u % 100),
                         (unsigned long)(idle / (uint64_t)(hz > 0 ? hz : 100)),
                         (unsigned long)(idle % (uint64_t)(hz > 0 ? hz : 100)));
        put(proc_fd[P_UPTIME], buf, n);
}

void tpl_proc_opened(const char *path)
{
        if (proc_fd[0] < 0 || strncmp(path, "/proc/", 6) != 0)
                return;
        if (strcmp(path + 6, "meminfo") == 0)
                write_meminfo(false);
        else if (strcmp(path + 6, "stat") == 0)
                write_stat();
        else if (strcmp(path + 6, "uptime") == 0)
                write_uptime();
}

/* Binds NAME of the read-only clone of the copy's tmpfs, whose fd is ro,
 * over ENTRY of /proc: a bind keeps the flags of the mount it was made
 * from, so each cover is read-only from the start. The source is named
 * through the fd's /proc/self/fd link, which the copy's own procfs
 * resolves to that mount (attached below the procfs, so the kernel binds
 * from it): one call per cover, where a detached source took three
 * (open_tree, move_mount, close). ENTRY is a name that readdir gave for
 * /proc, never a link (cover_source fails closed on those). */
static int cover(int ro, const char *name, const char *entry)
{
        char src[64], dst[sizeof(((struct dirent *)0)->d_name) + 8];
        snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", ro, name);
        snprintf(dst, sizeof(dst), "/proc/%s", entry);
        return mount(src, dst, NULL, MS_BIND, NULL) < 0 ? -errno : 0;
}

/* A top-level entry that stays the kernel's: a process, or a link into
 * the reader's own process (self, thread-self, mounts, net), which shows
 * only what the run's own namespaces hold. */
static bool kept(int procdir, const struct dirent *de)
{
        const char *s = de->d_name;
        bool digits = *s != '\0';
        for (const char *c = s; *c; c++)
                digits = digits && isdigit((unsigned char)*c);
        if (digits || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return true;
        if (de->d_type != DT_LNK)
                return false;
        char target[64];
        ssize_t n = readlinkat(procdir, s, target, sizeof(target) - 1);
        if (n <= 0)
                return false;
        target[n] = '\0';
        /* self and thread-self name the reader's pid; the others point
         * into self/. */
        return strcmp(s, "self") == 0 || strcmp(s, "thread-self") == 0 ||
               strncmp(target, "self/", 5) == 0;
}

/* Contract: mounts the copy's /proc, a procfs of its own PID namespace,
 * in which no system-wide file of the host's can be read: every top-level
 * entry but the processes, the links into the reader's own process and
 * the files the guest may neither read nor write is covered, read-only, by an empty file or folder,
 * or by a file this copy writes (meminfo, cpuinfo, stat, uptime; see the top of this file). The
 * guest, without capabilities and with mount calls refused by its filter,
 * cannot uncover them. Fails (never leaves a name uncovered) with -errno;
 * on a kernel without the new mount API (Linux 5.2), -ENOSYS, and then
 * the caller mounts a procfs of processes only. The copy keeps the fds of
 * the files it writes (meminfo, stat, uptime): files of its own, on a
 * tmpfs of 1 MiB, which hold nothing of the host's. That tmpfs and the
 * read-only clone the covers are bound from stay attached, below the
 * copy's procfs on /proc, for the copy's life: the guest cannot reach
 * them there (the procfs covers them, and it may neither unmount nor open
 * a mount's tree), and the copy never detaches a mount. Taking a mount
 * out of a namespace (umount2, or the close of a detached one) waits for
 * an RCU grace period, an expedited one on some kernels, which on a busy
 * machine took 4.7 ms of each copy's setup; the copy's exit tears them
 * down with its namespace, in the grace period it waits for anyway. */
int tpl_proc_mount(const struct template_state *tpl)
{
        const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
        int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
        if (fs < 0)
                return -errno;
        int r = 0, mnt = -1;
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "1m", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", "16", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0555", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
            (mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0)
                r = -errno;
        close(fs);
        if (r < 0)
                return r;
        mem_limit = tpl->params.limits.memory_bytes;
        n_cpus = tpl->proc_cpus ? tpl->proc_cpus : 1;
        per_run = tpl->params.cgroup != 0;
        clock_gettime(CLOCK_BOOTTIME, &started);
        static const char *const files[P_N + 3] = {"meminfo", "stat", "uptime",
                                                   "cpuinfo", "e",    "vmstat"};
        int fds[P_N + 3] = {-1, -1, -1, -1, -1, -1};
        for (int i = 0; i < P_N + 3 && r >= 0; i++)
                if ((fds[i] = openat(mnt, files[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444)) <
                    0)
                        r = -errno;
        if (r >= 0 && mkdirat(mnt, "d", 0555) < 0)
                r = -errno;
        if (r >= 0 && tpl->proc_cpuinfo)
                put(fds[P_N], tpl->proc_cpuinfo, (int)strlen(tpl->proc_cpuinfo));
        for (int i = 0; i < P_N; i++)
                proc_fd[i] = fds[i];
        /* No swap: nothing was swapped in or out. */
        if (r >= 0)
                put(fds[P_N + 2], "pswpin 0\npswpout 0\n", 19);
        for (int i = P_N; i < P_N + 3; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        if (r >= 0) {
                write_meminfo(true);
                write_stat();
                write_uptime();
        }
        /* The copy writes through the fds opened above, on the writable
         * mount; the binds are clones of a read-only clone of it. Both
         * are attached on /proc before the copy's procfs covers them, so
         * that neither is ever detached (see the contract above). */
        int ro = r < 0 ? -1
                       : (int)syscall(SYS_open_tree, mnt, "",
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        struct mount_attr attr = {
            .attr_set =
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        };
        if (r >= 0 &&
            (ro < 0 || syscall(SYS_mount_setattr, ro, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0 ||
             syscall(SYS_move_mount, mnt, "", AT_FDCWD, "/proc", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
             syscall(SYS_move_mount, ro, "", AT_FDCWD, "/proc", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
             mount("proc", "/proc", "proc", flags, NULL) < 0))
                r = -errno;
        int procdir = r < 0 ? -1 : open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = procdir < 0 ? NULL : fdopendir(dup(procdir));
        if (r >= 0 && !d)
                r = -errno;
        struct dirent *de;
        size_t cursor = 0;
        while (r >= 0 && (errno = 0, de = readdir(d))) {
                /* What the template decided for this name, or, for a name
                 * it did not see, what this copy decides itself. */
                const struct proc_plan *p =
                    isdigit((unsigned char)de->d_name[0]) ? NULL : planned(tpl, de, &cursor);
                const char *src = p ? p->src : NULL;
                if (!p)
                        r = cover_source(procdir, de, &src);
                if (r >= 0 && src)
                        r = cover(ro, src, de->d_name);
        }
        if (r >= 0 && errno)
                r = -errno;
        if (d)
                closedir(d);
        if (procdir >= 0)
                close(procdir);
        if (ro >= 0)
                close(ro);
        close(mnt);
        return r;
}
