/* Floor (b) of bench_runcost.py: a fork that makes the isolation a copy of
 * airlock needs, and nothing else. A shared object that the floor's own
 * interpreter (python3 after the template's imports and gc.freeze) loads
 * with ctypes, so that the fork is of the same interpreter as the bare
 * floor's and the difference between the two is the isolation alone.
 *
 * iso_fork() does what the template and a copy do for isolation, with the
 * same calls and in the same order (src/lib/template/tpl_cgroup.c,
 * template.c spawn_copy, tpl_copy.c tpl_copy_main, tpl_ns.c, tpl_proc.c):
 *   - the parent makes the copy's cgroup in the memory, pids and cpuacct
 *     hierarchies (v1; v2's one directory) with its limits and opens the files the
 *     child joins it through (v1: tasks; v2: cgroup.procs);
 *   - clone3 with a new PID, mount, user, IPC and network namespace;
 *   - the child joins the cgroup, makes its cgroup namespace, maps its ids
 *     in its user namespace and caps that namespace's counters, mounts
 *     /output (here /mnt), /tmp, /dev/shm, devpts and its own /proc with a
 *     read-only cover over every system-wide entry, sets the run's rlimits,
 *     drops its capabilities, sets no_new_privs, makes its Landlock scope
 *     and loads airlock's own guest filter (given by the caller, as
 *     `bench_runcost --filter` exported it); then it exits.
 * iso_reap() waits for the child and removes its cgroup, as the template
 * does once the host has read the run's end.
 * Not done: anything of the guest runtime (no Python code runs in the
 * child), the channel, the output pipes and the populate. Needs root.
 * Bench code: on any failure the child exits with the step's number. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_CG 3
static struct sock_fprog filter;
static char cg_parent[N_CG][256];
static unsigned seq;
/* Floor (c)'s child keeps this fd (iso_fork_keep); -1: floor (b)'s. */
static int keep_fd = -1;

struct ll_attr {
        uint64_t handled_access_fs, handled_access_net, scoped;
};

int iso_setup(const void *prog, unsigned len, const char *mem, const char *pids, const char *cpu)
{
        filter.len = (unsigned short)(len / sizeof(struct sock_filter));
        filter.filter = malloc(len);
        if (!filter.filter)
                return -ENOMEM;
        memcpy(filter.filter, prog, len);
        const char *p[N_CG] = {mem, pids, cpu};
        for (int i = 0; i < N_CG; i++) {
                snprintf(cg_parent[i], sizeof(cg_parent[i]), "%s", p[i]);
                if (p[i][0] && mkdir(p[i], 0755) < 0 && errno != EEXIST)
                        return -errno;
        }
        return 0;
}

void iso_teardown(void)
{
        for (int i = 0; i < N_CG; i++)
                if (cg_parent[i][0])
                        rmdir(cg_parent[i]);
}

static int write_at(const char *dir, const char *file, const char *text)
{
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t n = write(fd, text, strlen(text));
        close(fd);
        return n < 0 ? -1 : 0;
}

static void fail(int step)
{
        _exit(step);
}

static void user_namespace(void)
{
        static const char *const f[] = {"/proc/self/setgroups", "/proc/self/uid_map",
                                        "/proc/self/gid_map"};
        static const char *const t[] = {"deny\n", "0 0 1\n", "0 0 1\n"};
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        for (int i = 0; i < 3; i++)
                if (write_at("/", f[i] + 1, t[i]) < 0)
                        fail(10 + i);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        static const char *const caps[][2] = {
            {"proc/sys/user/max_inotify_instances", "32\n"},
            {"proc/sys/user/max_inotify_watches", "4096\n"},
            {"proc/sys/user/max_fanotify_groups", "0\n"},
            {"proc/sys/user/max_fanotify_marks", "0\n"},
            {"proc/sys/kernel/msgmni", "32\n"},
            {"proc/sys/kernel/msgmnb", "65536\n"},
            {"proc/sys/kernel/shmmni", "32\n"},
            {"proc/sys/kernel/sem", "250 8000 32 32\n"},
        };
        for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
                if (write_at("/", caps[i][0], caps[i][1]) < 0 && !strstr(caps[i][0], "fanotify"))
                        fail(13);
}

/* tpl_proc_mount's calls: a small tmpfs with the copy's own files, a
 * read-only clone of it, both attached on /proc, the procfs over them, and
 * a read-only cover bound over every top-level entry that is neither a
 * process nor a link into the reader's own process. */
static void proc_mount(void)
{
        int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
        if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "1m", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", "16", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0555", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                fail(30);
        int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (mnt < 0)
                fail(31);
        close(fs);
        static const char *const files[] = {"meminfo", "stat", "uptime", "cpuinfo", "e", "vmstat"};
        for (int i = 0; i < 6; i++) {
                int fd = openat(mnt, files[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
                if (fd < 0)
                        fail(32);
                if (write(fd, "x 0\n", 4) < 0)
                        fail(32);
                close(fd);
        }
        if (mkdirat(mnt, "d", 0555) < 0)
                fail(33);
        int ro = (int)syscall(SYS_open_tree, mnt, "",
                              OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        struct mount_attr attr = {
            .attr_set =
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        };
        if (ro < 0 || syscall(SYS_mount_setattr, ro, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0 ||
            syscall(SYS_move_mount, mnt, "", AT_FDCWD, "/proc", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
            syscall(SYS_move_mount, ro, "", AT_FDCWD, "/proc", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                fail(34);
        DIR *d = opendir("/proc");
        if (!d)
                fail(35);
        struct dirent *de;
        while ((de = readdir(d))) {
                const char *s = de->d_name;
                if (isdigit((unsigned char)s[0]) || s[0] == '.')
                        continue;
                if (de->d_type == DT_LNK) {
                        char target[64];
                        ssize_t n = readlinkat(dirfd(d), s, target, sizeof(target) - 1);
                        if (n > 0 && (target[n] = '\0', strcmp(s, "self") == 0 ||
                                                            strcmp(s, "thread-self") == 0 ||
                                                            strncmp(target, "self/", 5) == 0))
                                continue;
                }
                /* A file only root may read or write (kmsg, slabinfo):
                 * the copy, whose ids are not root's, covers none. */
                struct stat st;
                if (de->d_type == DT_REG && fstatat(dirfd(d), s, &st, 0) == 0 &&
                    (st.st_mode & 0066) == 0)
                        continue;
                char src[64], dst[300];
                snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", ro,
                         de->d_type == DT_DIR ? "d" : "e");
                snprintf(dst, sizeof(dst), "/proc/%s", s);
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        fail(36);
        }
        closedir(d);
        close(ro);
        close(mnt);
}

static void limit(int res, rlim_t v)
{
        struct rlimit rl = {v, v};
        setrlimit(res, &rl);
}

static void lock_down(void)
{
        for (int cap = 0; cap <= 63; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                        break;
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];
        memset(data, 0, sizeof(data));
        if (syscall(SYS_capset, &hdr, data) < 0)
                fail(50);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                fail(51);
        struct ll_attr attr = {0, 0, 3 /* abstract Unix sockets, signals */};
        int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
        if (fd >= 0) {
                if (syscall(SYS_landlock_restrict_self, fd, 0) < 0)
                        fail(52);
                close(fd);
        }
        if (syscall(SYS_seccomp, 1, 4 /* SPEC_ALLOW */, &filter) < 0 &&
            syscall(SYS_seccomp, 1, 0, &filter) < 0)
                fail(53);
}

static void child(int procs[N_CG])
{
        for (int i = 0; i < N_CG; i++)
                if (procs[i] >= 0 && write(procs[i], "0", 1) != 1)
                        fail(2);
        if (unshare(CLONE_NEWCGROUP) < 0)
                fail(3);
        if (keep_fd > 3)
                syscall(SYS_close_range, 3, keep_fd - 1, 0);
        syscall(SYS_close_range, keep_fd >= 3 ? keep_fd + 1 : 3, ~0u, 0);
        user_namespace();
        const unsigned long fl = MS_NOSUID | MS_NODEV | MS_NOEXEC | 256 /* MS_NOSYMFOLLOW */;
        if (mount("tmpfs", "/mnt", "tmpfs", fl, "size=104857600,nr_inodes=10000,mode=0755") < 0 ||
            mount("tmpfs", "/tmp", "tmpfs", fl, "size=104857600,nr_inodes=10000,mode=01777") < 0 ||
            mount("tmpfs", "/dev/shm", "tmpfs", fl, "size=67108864,nr_inodes=1000,mode=01777") <
                0 ||
            mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620,max=16") < 0)
                fail(20);
        proc_mount();
        /* A copy of a template whose cache is still filled makes its
         * /cache read-only (tpl_make_readonly): the same call, here on a
         * mount of this copy's own (/tmp; the host's tree below /usr holds
         * mounts a user namespace may not change). */
        struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                            MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC};
        if (syscall(SYS_mount_setattr, AT_FDCWD, "/tmp", AT_RECURSIVE, &ro, sizeof(ro)) < 0)
                fail(37);
        int out = open("/mnt", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (out < 0 || chdir("/mnt") < 0)
                fail(40);
        limit(RLIMIT_CPU, 31);
        limit(RLIMIT_FSIZE, 100 << 20);
        limit(RLIMIT_NOFILE, 256);
        limit(RLIMIT_CORE, 0);
        limit(RLIMIT_MSGQUEUE, 0);
        limit(RLIMIT_NPROC, 68);
        limit(RLIMIT_SIGPENDING, 256);
        limit(RLIMIT_MEMLOCK, 64 << 10);
        limit(RLIMIT_STACK, 8 << 20);
        if (keep_fd >= 0)
                return;
        lock_down();
        _exit(0);
}

/* Returns the child's pid, or -errno. */
int iso_fork(void)
{
        char name[32];
        snprintf(name, sizeof(name), "c%u", ++seq);
        int procs[N_CG] = {-1, -1, -1};
        for (int i = 0; i < N_CG; i++) {
                char dir[300];
                if (!cg_parent[i][0])
                        continue; /* cgroup v2: one hierarchy */
                snprintf(dir, sizeof(dir), "%s/%s", cg_parent[i], name);
                if (mkdir(dir, 0755) < 0)
                        return -errno;
                if (i == 0) {
                        /* v1's names, then v2's (the other fails). */
                        write_at(dir, "memory.limit_in_bytes", "536870912");
                        write_at(dir, "memory.max", "536870912");
                        write_at(dir, "pids.max", "72");
                        write_at(dir, "memory.memsw.limit_in_bytes", "536870912");
                        char oom[320];
                        snprintf(oom, sizeof(oom), "%s/memory.oom_control", dir);
                        close(open(oom, O_RDONLY | O_CLOEXEC));
                } else if (i == 1) {
                        write_at(dir, "pids.max", "72");
                }
                /* v1 (a pids hierarchy of its own): "tasks", as a copy joins
                 * (tpl_cgroup.c, cgroup_open). */
                char p[320];
                snprintf(p, sizeof(p), "%s/%s", dir, cg_parent[1][0] ? "tasks" : "cgroup.procs");
                procs[i] = open(p, O_WRONLY | O_CLOEXEC);
        }
        struct clone_args args = {
            .flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWNET,
            .exit_signal = SIGCHLD,
        };
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                child(procs);
                return 0; /* floor (c)'s child: its caller goes on */
        }
        int saved = errno;
        for (int i = 0; i < N_CG; i++)
                if (procs[i] >= 0)
                        close(procs[i]);
        return pid < 0 ? -saved : (int)pid;
}

/* Floor (c) of bench_runcost.py, one fork that does all a call must: the
 * child makes iso_fork's isolation but keeps fd keep (beside 0 to 2) and
 * returns 0 to its caller, the floor's interpreter, before its lock-down.
 * There the interpreter runs CPython's after-fork work
 * (PyOS_AfterFork_Child), then iso_lock_down(), then the run, as a copy
 * does. Called with the GIL held (ctypes.PyDLL), as os.fork() forks. */
int iso_fork_keep(int keep)
{
        keep_fd = keep;
        int pid = iso_fork();
        if (pid != 0)
                keep_fd = -1;
        return pid;
}

void iso_lock_down(void)
{
        lock_down();
}

/* The bare floor forked from C: the same clone3 as iso_fork's, without
 * namespaces, and a child that exits at once. Against the bare floor's
 * os.fork() (bench_runcost.py), which runs CPython's own after-fork work
 * in the child (PyOS_AfterFork_Child and the modules' at-fork handlers:
 * random's reseed, threading's, logging's), it tells that work apart from
 * the fork, so that what a call must cost can hold it: any sandbox that
 * forks a Python interpreter and runs Python in the child runs it.
 * Returns 0, or -errno. */
int bare_c_fork(void)
{
        struct clone_args args = {.exit_signal = SIGCHLD};
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
                _exit(0);
        if (pid < 0)
                return -errno;
        int st;
        return waitpid((pid_t)pid, &st, 0) < 0 ? -errno : 0;
}

/* Waits for pid and removes the cgroup of the last iso_fork. Returns the
 * child's exit status (0: every step done), or -errno. */
int iso_reap(int pid)
{
        int st;
        if (waitpid(pid, &st, 0) < 0)
                return -errno;
        char name[32];
        snprintf(name, sizeof(name), "c%u", seq);
        for (int i = 0; i < N_CG; i++) {
                char dir[300];
                snprintf(dir, sizeof(dir), "%s/%s", cg_parent[i], name);
                if (cg_parent[i][0])
                        rmdir(dir);
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
