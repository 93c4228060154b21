/* The guest's seccomp filter. It is built once in the template with
 * libseccomp, exported as BPF, and loaded by every copy with one syscall, so
 * the per-copy cost is a few microseconds. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "template/template.h"
#include "core/util.h"

/* Calls that let a process reach outside its sandbox, read another
 * process, widen its privileges or attack the kernel's less-tested paths.
 * Each fails with EPERM; denying instead of killing keeps Python's own
 * feature probes (which try some of these) working. */
static const char *const denied_calls[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "chroot",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "vhangup",
    "iopl",
    "ioperm",
    "uselib",
    "sysfs",
    "fanotify_init",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    "process_mrelease",
    "vmsplice",
    "memfd_secret",
    "nfsservctl",
    "_sysctl",
    "set_mempolicy_home_node",
    "move_pages",
    "migrate_pages",
    "set_mempolicy", /* and mbind, refused with a rule of its own below */
    /* The mount API's newer calls: with capabilities cleared they could
     * change nothing today, but listmount and statmount describe every
     * mount of the namespace (what mountinfo hides is its job to hide),
     * and open_tree_attr clones mounts as open_tree does. */
    "open_tree_attr",
    "listmount",
    "statmount",
};

/* Calls of denied_calls newer than the libseccomp of Debian 12 (2.5.4),
 * which cannot resolve their names: their numbers, the same on x86_64 and
 * aarch64, whose tables share every number from 424 on (Linux's
 * asm-generic/unistd.h and syscall_64.tbl). On another architecture an
 * unresolved name is skipped, as for any call that architecture lacks. */
static const struct {
        const char *name;
        int nr;
} new_calls[] = {
    {"statmount", 457},
    {"listmount", 458},
    {"open_tree_attr", 467},
};

/* The number of a denied call on this architecture, or __NR_SCMP_ERROR
 * when it has none. */
static int resolve_call(const char *name)
{
        int nr = seccomp_syscall_resolve_name(name);
#if defined(__x86_64__) || defined(__aarch64__)
        for (size_t i = 0; nr == __NR_SCMP_ERROR && i < ARRAY_SIZE(new_calls); i++)
                if (strcmp(name, new_calls[i].name) == 0)
                        nr = new_calls[i].nr;
#endif
        return nr;
}

/* Exports the rules of ctx (r: the result of adding them) as a BPF program
 * in *ret, and releases ctx. */
static int export_filter(scmp_filter_ctx ctx, int r, struct sock_fprog *ret, char *errbuf,
                         size_t errlen)
{
        if (r < 0) {
                snprintf(errbuf, errlen, "seccomp: cannot add a rule: %s", strerror(-r));
                seccomp_release(ctx);
                return r;
        }

        /* Export through a memfd: libseccomp 2.5 has no export-to-memory call. */
        int fd = memfd_create("airlock-bpf", MFD_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                seccomp_release(ctx);
                snprintf(errbuf, errlen, "seccomp: memfd_create: %s", strerror(-r));
                return r;
        }
        r = seccomp_export_bpf(ctx, fd);
        seccomp_release(ctx);
        off_t len = lseek(fd, 0, SEEK_END);
        if (r < 0 || len <= 0 || len % (off_t)sizeof(struct sock_filter)) {
                close(fd);
                snprintf(errbuf, errlen, "seccomp: cannot export the filter");
                return r < 0 ? r : -EIO;
        }
        struct sock_filter *prog = malloc((size_t)len);
        if (!prog || pread(fd, prog, (size_t)len, 0) != len) {
                free(prog);
                close(fd);
                snprintf(errbuf, errlen, "seccomp: cannot read the exported filter");
                return -EIO;
        }
        close(fd);
        ret->len = (unsigned short)(len / (off_t)sizeof(struct sock_filter));
        ret->filter = prog;
        return 0;
}

/* A filter that allows what no rule refuses and kills a process that calls
 * in the ABI of another architecture. */
static int filter_new(scmp_filter_ctx *ret, char *errbuf, size_t errlen)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx) {
                snprintf(errbuf, errlen, "seccomp: cannot create a filter (libseccomp)");
                return -ENOMEM;
        }
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r < 0) {
                seccomp_release(ctx);
                snprintf(errbuf, errlen, "seccomp: cannot set the filter's action: %s",
                         strerror(-r));
                return r;
        }
        *ret = ctx;
        return 0;
}

/* The calls a late-input copy still needs after its guest filter is
 * loaded, to attach its run's /input; the mount filter refuses them. */
static bool mount_call(const char *name)
{
        return strcmp(name, "mount") == 0 || strcmp(name, "move_mount") == 0;
}

int seccomp_build_guest_filter(struct sock_fprog *ret, bool no_shared_memory, bool allow_mount,
                               char *errbuf, size_t errlen)
{
        scmp_filter_ctx ctx = NULL;
        int r = filter_new(&ctx, errbuf, errlen);
        if (r < 0)
                return r;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(denied_calls); i++) {
                int nr = resolve_call(denied_calls[i]);
                if (nr == __NR_SCMP_ERROR || (allow_mount && mount_call(denied_calls[i])))
                        continue; /* not on this architecture, or in the mount filter */
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        }
        /* mbind is refused like the other NUMA calls, but for one call
         * that marks a refused reservation of OpenBLAS: its alloc_mmap
         * binds the buffer it mapped without looking whether the mapping
         * failed, so mbind on MAP_FAILED follows every refusal, and
         * OpenBLAS then retries for ever (blas_memory_alloc). That call
         * raises SIGSYS instead, whose handler ends the run as over its
         * memory limit (guest.c, on_sigsys). */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mbind), 1,
                                     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)(uintptr_t)MAP_FAILED));
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mbind), 1,
                                     SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)(uintptr_t)MAP_FAILED));
        /* sysinfo answers for the whole machine: its RAM and free
         * memory, load, uptime and the number of processes on it, which
         * every run could read and change (a channel between runs and
         * tenants), where the guest's /proc tells the run its own. No
         * filter can rewrite its answer, so it is refused, ENOSYS as from
         * a kernel without it. glibc 2.36 builds sysconf(_SC_PHYS_PAGES)
         * and (_SC_AVPHYS_PAGES) on it without looking whether it failed,
         * so their answer in C code is undefined (design.md says so); the
         * guest runtime answers those for Python from /proc/meminfo. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(sysinfo), 0);
        /* clone3 passes its flags in memory, where a filter cannot look;
         * ENOSYS makes glibc fall back to clone, whose flags it can check. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        /* One rule per namespace flag: a filter argument test can only ask
         * "masked value equals", so "any of these bits" takes one rule each. */
        const unsigned long ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                       CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                       0x00000080 /* CLONE_NEWTIME */;
        for (int bit = 0; r >= 0 && bit < 64; bit++) {
                unsigned long f = 1ul << bit;
                if (ns_flags & f)
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                             SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        }
        /* Only Unix sockets: no IP, raw, netlink or packet sockets at all,
         * so the host gateway is the only way out. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                     SCMP_A0(SCMP_CMP_NE, AF_UNIX));
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                                     SCMP_A0(SCMP_CMP_NE, AF_UNIX));
        /* TIOCSTI would let a guest type into a terminal it shares. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0x5412));
        /* personality() flags such as READ_IMPLIES_EXEC weaken the address space. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                     SCMP_A0(SCMP_CMP_NE, 0));
        /* A stack-like mapping that grows down on its own is counted by
         * no rlimit; nothing a guest runs needs one (thread stacks are
         * plain mappings). */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mmap), 1,
                                     SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_GROWSDOWN, MAP_GROWSDOWN));
        /* Without a cgroup, RLIMIT_DATA is the memory limit, and it counts
         * only private memory. Shared anonymous mappings, memfds and SysV
         * segments would hold memory that nothing counts, so they are
         * refused (ENOMEM, as from a limit); files in /tmp and /output are
         * capped by their mounts' sizes. With a cgroup every kind is
         * charged to the run, and all of them work. */
        if (r >= 0 && no_shared_memory) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOMEM), SCMP_SYS(mmap), 1,
                                     SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED | MAP_ANONYMOUS,
                                             MAP_SHARED | MAP_ANONYMOUS));
                if (r >= 0)
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOMEM), SCMP_SYS(memfd_create),
                                             0);
                if (r >= 0)
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOMEM), SCMP_SYS(shmget), 0);
        }
        return export_filter(ctx, r, ret, errbuf, errlen);
}

int seccomp_build_mount_filter(struct sock_fprog *ret, char *errbuf, size_t errlen)
{
        scmp_filter_ctx ctx = NULL;
        int r = filter_new(&ctx, errbuf, errlen);
        if (r < 0)
                return r;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(denied_calls); i++) {
                int nr = resolve_call(denied_calls[i]);
                if (nr != __NR_SCMP_ERROR && mount_call(denied_calls[i]))
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        }
        return export_filter(ctx, r, ret, errbuf, errlen);
}

int seccomp_build_session_filter(struct sock_fprog *ret, char *errbuf, size_t errlen)
{
        scmp_filter_ctx ctx = NULL;
        int r = filter_new(&ctx, errbuf, errlen);
        if (r < 0)
                return r;
        /* Shared memory outlives the state it was written in: a fork
         * shares it with its session, and a rolled-back cell's writes stay.
         * A session refuses every kind, so that its states stay its own:
         * shared anonymous mappings, memfds, SysV segments here; /dev/shm
         * is made read-only when the copy becomes a session
         * (tpl_session_open). EPERM, not ENOMEM: no limit was hit. */
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mmap), 1,
                                     SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED | MAP_ANONYMOUS,
                                             MAP_SHARED | MAP_ANONYMOUS));
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(memfd_create), 0);
        if (r >= 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(shmget), 0);
        return export_filter(ctx, r, ret, errbuf, errlen);
}
