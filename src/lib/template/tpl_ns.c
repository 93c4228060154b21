/* Namespaces and the ids in them: the template's own (its user, mount,
 * network, IPC and UTS namespaces, made once, and the ids it takes in
 * them), each copy's own user namespace with its id maps and the caps on
 * its per-user counters, and the Landlock domain that scopes a copy's
 * abstract Unix sockets and signals. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/util.h"
#include "template/template_internal.h"

/* Per-run caps on counters the kernel keeps per user namespace, and on
 * the SysV objects of the copy's own IPC namespace. */
#define COPY_MAX_INOTIFY         32
#define COPY_MAX_INOTIFY_WATCHES 4096
#define COPY_MAX_FANOTIFY        0
#define COPY_MAX_SYSV_IDS        32
#define COPY_MAX_MSGQUEUE_BYTES  65536
/* SEMMSL SEMMNS SEMOPM SEMMNI: at most 32 sets, 8000 semaphores in all. */
#define COPY_SEM_LIMITS "250 8000 32 32\n"

/* The staged input fd came from the host's mount namespace, and the kernel
 * binds only mounts of the caller's own namespace. Open the same directory
 * again in ours, while we still have the host's ids (the staging directory
 * is private to them), and keep it only if it is the very same inode. */
static void reopen_input(const struct template_state *tpl)
{
        char link[64], path[4096];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", TEMPLATE_INPUT_FD);
        ssize_t n = readlink(link, path, sizeof(path) - 1);
        if (n <= 0 || path[0] != '/')
                tpl_fail(tpl, -EINVAL, "bind mount", "cannot locate the staged input");
        path[n] = '\0';
        struct stat a, b;
        _cleanup_close_ int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &a) < 0 || fstat(TEMPLATE_INPUT_FD, &b) < 0)
                tpl_fail(tpl, -errno, "bind mount", "cannot reopen the staged input %s: %m", path);
        if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
                tpl_fail(tpl, -EXDEV, "bind mount", "the staged input %s was replaced", path);
        if (dup2(fd, TEMPLATE_INPUT_FD) < 0)
                tpl_fail(tpl, -errno, "bind mount", "cannot reopen the staged input: %m");
}

/* Contract: started by root, the template becomes the unprivileged guest
 * ids in the host's user namespace BEFORE it creates the sandbox's user
 * namespace. The kernel charges what a user namespace's processes own
 * (inotify instances and watches, queued signals, message queue bytes,
 * processes) to the namespace's creator at every level above it; created
 * by root, a guest could exhaust root's own quotas. Created by the guest
 * ids, the charges above the sandbox fall on those ids. */
static void drop_to_guest_ids(const struct template_state *tpl)
{
        if (geteuid() != 0 || tpl->params.guest_uid == 0)
                return;
        if (setgroups(0, NULL) < 0 ||
            setresgid(tpl->params.guest_gid, tpl->params.guest_gid, tpl->params.guest_gid) < 0 ||
            setresuid(tpl->params.guest_uid, tpl->params.guest_uid, tpl->params.guest_uid) < 0)
                tpl_fail(tpl, -errno, "user namespaces", "cannot switch to the guest ids %u:%u: %m",
                         (unsigned)tpl->params.guest_uid, (unsigned)tpl->params.guest_gid);
}

/* Contract: in the template, once, before anything else of the sandbox:
 * the guest ids (as root, drop_to_guest_ids), then a user namespace whose
 * id maps the host writes while this waits (CTL_USERNS, CTL_GO), then the
 * mount namespace, where the staged input is reopened by path while the
 * host's ids still reach it, then uid and gid 0 of the new user namespace,
 * then the network, IPC and UTS namespaces, then the guest's root
 * (tpl_build_root). Each step needs the one before; a failure is reported
 * to the host and ends the template. */
void tpl_setup_namespaces(const struct template_state *tpl)
{
        drop_to_guest_ids(tpl);
        if (unshare(CLONE_NEWUSER) < 0)
                tpl_fail(
                    tpl, -errno, "user namespaces",
                    "cannot create a user namespace: %m (is kernel.unprivileged_userns_clone or "
                    "user.max_user_namespaces 0?)");
        tpl_ctl_send(tpl, CTL_USERNS);
        if (tpl_ctl_recv(tpl) != CTL_GO)
                _exit(127);
        if (unshare(CLONE_NEWNS) < 0)
                tpl_fail(tpl, -errno, "mount namespaces", "cannot create a mount namespace: %m");
        if (tpl->params.has_input && !tpl->params.input_tree)
                reopen_input(tpl);
        /* The host mapped uid and gid 0 to an unprivileged host id; become it. */
        if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
                tpl_fail(tpl, -errno, "user namespaces", "cannot switch to the mapped ids: %m");
        if (unshare(CLONE_NEWNET) < 0)
                tpl_fail(tpl, -errno, "network namespaces",
                         "cannot create a network namespace: %m");
        if (unshare(CLONE_NEWIPC) < 0)
                tpl_fail(tpl, -errno, "IPC namespaces", "cannot create an IPC namespace: %m");
        if (unshare(CLONE_NEWUTS) < 0)
                tpl_fail(tpl, -errno, "UTS namespaces", "cannot create a UTS namespace: %m");
        /* The cgroup namespace is each copy's own, made once the copy is in
         * its own cgroup (tpl_copy_main), so that it sees only that. */
        if (sethostname("airlock", 7) < 0)
                tpl_fail(tpl, -errno, "UTS namespaces", "cannot set the host name: %m");
        tpl_build_root(tpl);
}

#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1u << 0)
#endif
#define AL_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0)
#define AL_LANDLOCK_SCOPE_SIGNAL               (1ull << 1)

/* The ruleset attribute of Landlock ABI 6, which Debian 12's headers
 * predate. */
struct al_landlock_ruleset_attr {
        uint64_t handled_access_fs;
        uint64_t handled_access_net;
        uint64_t scoped;
};

/* Finds, once, in the template, whether this kernel's Landlock can scope
 * abstract Unix sockets and signals. */
void tpl_probe_landlock(struct template_state *tpl)
{
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        tpl->landlock_scopes = abi >= 6;
}

/* Landlock ABI 1's right to make block devices: handled (and so refused
 * everywhere), it makes the domain one that restricts the file system,
 * which Landlock's own rule then forbids to change any mount. */
#define AL_LANDLOCK_ACCESS_FS_MAKE_BLOCK (1ull << 11)

/* The Landlock ruleset of tpl_scope_copy, made ahead of its use: its fd
 * (close-on-exec, as Landlock makes every ruleset's), -EOPNOTSUPP where
 * Landlock cannot scope, or -errno. */
int tpl_scope_ruleset(const struct template_state *tpl, bool no_mounts)
{
        if (!tpl->landlock_scopes)
                return -EOPNOTSUPP;
        struct al_landlock_ruleset_attr attr = {
            .handled_access_fs = no_mounts ? AL_LANDLOCK_ACCESS_FS_MAKE_BLOCK : 0,
            .scoped = AL_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | AL_LANDLOCK_SCOPE_SIGNAL,
        };
        int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
        return fd < 0 ? -errno : fd;
}

/* Contract: in a copy, after no_new_privs and before any guest code. From
 * then on the copy and everything it starts can connect only to abstract
 * Unix sockets, and signal only processes, of its own domain: another
 * copy's (or the template's) are out of reach (a second wall: each copy
 * has its own network and PID namespaces too). With no_mounts, the domain
 * also refuses every change of mounts (mount, umount, move_mount,
 * pivot_root, remount: Landlock refuses them to any domain that restricts
 * the file system, here by refusing to make block devices, which a copy
 * cannot do anyway); *ret_no_mounts says whether it does (not without
 * scopes, where the mount filter refuses them instead). Restricts nothing
 * else. ruleset: one that tpl_scope_ruleset made with the same no_mounts,
 * which this closes, or a negative value for one made here. */
int tpl_scope_copy(const struct template_state *tpl, bool no_mounts, int ruleset,
                   bool *ret_no_mounts)
{
        if (ret_no_mounts)
                *ret_no_mounts = false;
        _cleanup_close_ int fd = ruleset >= 0 ? ruleset : tpl_scope_ruleset(tpl, no_mounts);
        if (fd == -EOPNOTSUPP)
                return 0; /* the namespaces alone, and the mount filter */
        if (fd < 0)
                return fd;
        if (syscall(SYS_landlock_restrict_self, fd, 0) < 0)
                return -errno;
        if (ret_no_mounts)
                *ret_no_mounts = no_mounts;
        return 0;
}

static int write_proc_file(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int r = al_write_full(fd, text, strlen(text));
        return r < 0 ? r : 0;
}

/* In a new copy, cloned into its own user namespace: maps its uid and gid
 * 0 to the template's own (so its files are owned by the guest ids, as
 * before), then caps the per-user counters of that namespace. The kernel
 * counts them at every level up to the host, so a copy can spend neither
 * another copy's share nor (see drop_to_guest_ids) the host user's.
 *
 * A process may map only its own ids, and only through its own /proc
 * files, which the kernel gives to root while the process is not dumpable
 * (as every copy of a template that changed its ids is). So the copy is
 * dumpable for the few calls that write the maps: in that time it holds
 * nothing but the template's memory and runs no guest code. */
int tpl_enter_own_user_namespace(void)
{
        static const char *const files[] = {"/proc/self/setgroups", "/proc/self/uid_map",
                                            "/proc/self/gid_map"};
        static const char *const texts[] = {"deny\n", "0 0 1\n", "0 0 1\n"};
        if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
                return -errno;
        int r = 0;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(files); i++)
                r = write_proc_file(files[i], texts[i]);
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 && r >= 0)
                r = -errno;
        if (r < 0)
                return r;
        /* These files still belong to the host's procfs here, which
         * answers for the caller's own user namespace. */
        static const struct {
                const char *name;
                unsigned value;
        } caps[] = {
            {"/proc/sys/user/max_inotify_instances", COPY_MAX_INOTIFY},
            {"/proc/sys/user/max_inotify_watches", COPY_MAX_INOTIFY_WATCHES},
            {"/proc/sys/user/max_fanotify_groups", COPY_MAX_FANOTIFY},
            {"/proc/sys/user/max_fanotify_marks", COPY_MAX_FANOTIFY},
            /* The copy's own IPC namespace: few SysV queues and segments,
             * and small queues. With a cgroup what they hold is charged
             * to the run; without one, queues are kernel memory that no
             * rlimit counts. */
            {"/proc/sys/kernel/msgmni", COPY_MAX_SYSV_IDS},
            {"/proc/sys/kernel/msgmnb", COPY_MAX_MSGQUEUE_BYTES},
            {"/proc/sys/kernel/shmmni", COPY_MAX_SYSV_IDS},
        };
        for (size_t i = 0; i < ARRAY_SIZE(caps); i++) {
                char text[16];
                snprintf(text, sizeof(text), "%u\n", caps[i].value);
                r = write_proc_file(caps[i].name, text);
                /* A kernel without fanotify has no such file. */
                if (r < 0 && !(r == -ENOENT && strstr(caps[i].name, "fanotify")))
                        return r;
        }
        return write_proc_file("/proc/sys/kernel/sem", COPY_SEM_LIMITS);
}
