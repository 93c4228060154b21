/* A copy's setup, from its first instruction to the first byte it reads
 * from the host: the cgroup it joins, its own user namespace, its private
 * /output, /tmp and /proc, its limits, the privileges it drops and the
 * seccomp filter it loads. Everything here runs before any guest code.
 *
 * Copies of one template must never meet: a copy gets its own user, IPC,
 * mount, PID and network namespace (spawn_copy's clone flags, template.c:
 * the names of Unix sockets are a network namespace's), its own cgroup
 * where the host has cgroups, and a Landlock domain that scopes abstract
 * Unix sockets and signals to it where the kernel has Landlock scopes. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/channel.h"
#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif

/* Caps on what a run may hold, as the rlimits of its own user namespace:
 * the signals it may queue and the memory it may lock (counted per user
 * namespace, so per run), and its main stack. */
#define COPY_MAX_SIGPENDING 256
#define COPY_MAX_MEMLOCK    (64u << 10)
#define COPY_MAX_STACK      (8u << 20)
/* The write end of the template's pipe while the copy is prepared. */
#define COPY_PREP_FD (COPY_CHANNEL_FD + 1)
/* A run's pseudo-terminals: its own instance, 16 at most, the owner's
 * ids those of the guest. */
#define COPY_DEVPTS_OPTS "newinstance,ptmxmode=0666,mode=0620,max=16"

static void set_limit(int resource, rlim_t value)
{
        struct rlimit rl = {value, value};
        if (setrlimit(resource, &rl) < 0) {
                /* Never raise past the hard limit we were given. */
                struct rlimit cur;
                if (getrlimit(resource, &cur) == 0 && cur.rlim_max < value) {
                        rl.rlim_cur = rl.rlim_max = cur.rlim_max;
                        setrlimit(resource, &rl);
                }
        }
}

/* Drops every capability for good: the bounding set (so no execve can
 * regain any, even as uid 0 of the namespace), the ambient set, and the
 * effective, permitted and inheritable sets. */
/* The bounding set and the ambient set: what no later execve can gain.
 * The capabilities the copy holds now stay (clear_capabilities). */
static int drop_bounding_set(void)
{
        /* EINVAL marks the first capability this kernel does not know:
         * every one below it has been dropped. */
        for (int cap = 0; cap <= 63; cap++) {
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
                        continue;
                if (errno == EINVAL && cap > 0)
                        break;
                return -errno;
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        return 0;
}

/* The effective, permitted and inheritable sets: one system call. */
static int clear_capabilities(void)
{
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];
        memset(data, 0, sizeof(data));
        if (syscall(SYS_capset, &hdr, data) < 0)
                return -errno;
        return 0;
}

static int drop_capabilities(void)
{
        int r = drop_bounding_set();
        return r < 0 ? r : clear_capabilities();
}

_Noreturn static void copy_fail(int chan, const char *fmt, ...) _printf_(2, 3);
_Noreturn static void copy_fail(int chan, const char *fmt, ...)
{
        char buf[512];
        buf[0] = COPY_ERROR;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf + 1, sizeof(buf) - 1, fmt, ap);
        va_end(ap);
        if (n > 0)
                (void)!send(chan, buf, 1 + (size_t)MIN(n, (int)sizeof(buf) - 2), MSG_NOSIGNAL);
        _exit(126);
}

/* Makes this copy's /input a private writable overlay
 * (airlock_config_set_input_writable) and returns fds of its upper dir and
 * of its lower layer for the host, which lists the run's changes from them
 * after the run (fsx_capture_changes).
 *
 * Contract: the lower layer is the template's read-only /input (the staged
 * copy), which nothing here can write: overlay writes only to its upper
 * layer, and the staged tree itself stays read-only below the template's
 * mount. The upper and work dirs are on a tmpfs of this copy alone, mounted
 * over /input with /output's options (size and inode caps), so a run's
 * writes to /input are bounded as its writes to /output are, are gone with
 * the copy, and the next copy sees the staged /input again. userxattr: the
 * overlay keeps its own attributes (opaque dirs) in user.overlay.*, which a
 * user namespace may write and which the overlay hides from the guest and
 * refuses to let it set; redirect_dir=nofollow: no attribute can send a
 * lookup elsewhere (renaming a directory that came from the staged copy
 * fails with EXDEV, which mv and shutil.move handle by copying). The guest
 * never holds a fd of the tmpfs's root, and without capabilities cannot
 * unmount the overlay to reach it. */
static void mount_writable_input(const struct template_state *tpl, int chan, int *ret_upper,
                                 int *ret_lower)
{
        int lower = open("/input", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lower < 0)
                copy_fail(chan, "cannot open /input: %m");
        const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
        if (mount("tmpfs", "/input", "tmpfs", flags, tpl->out_opts) < 0)
                copy_fail(chan, "cannot mount the tmpfs of a writable /input: %m");
        /* "wd", the overlay's work dir: no string of the program may look
         * like a host path ("/work"; test_attacks.py reads the binary). */
        if (mkdir("/input/upper", 0755) < 0 || mkdir("/input/wd", 0700) < 0)
                copy_fail(chan, "cannot make the layers of a writable /input: %m");
        int upper = open("/input/upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int work = open("/input/wd", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (upper < 0 || work < 0)
                copy_fail(chan, "cannot open the layers of a writable /input: %m");
        char opts[256];
        snprintf(opts, sizeof(opts),
                 "lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d,"
                 "userxattr,redirect_dir=nofollow",
                 lower, upper, work);
        if (mount("airlock-input", "/input", "overlay", flags | MS_NOSYMFOLLOW, opts) < 0 &&
            mount("airlock-input", "/input", "overlay", flags, opts) < 0)
                copy_fail(chan,
                          "cannot mount a writable /input (overlayfs in a user namespace needs "
                          "Linux 5.11, user xattrs on tmpfs 6.6): %m");
        close(work);
        *ret_upper = upper;
        *ret_lower = lower;
}

/* Loads filter, with SECCOMP_FILTER_FLAG_SPEC_ALLOW: where the kernel's
 * Spectre mitigations follow seccomp (spec_store_bypass_disable=seccomp,
 * the default before Linux 5.16, and spectre_v2_user=seccomp), a filter
 * would also turn on speculative store bypass disable (and STIBP) for the
 * guest, which slows every load after a store. They protect a process's
 * own secrets from code speculating inside it; the guest's process holds
 * nothing the guest may not read anyway, and the guest's own code is what
 * it would be protected from. Kernels before 4.17 do not know the flag:
 * the filter alone. */
static void load_filter(int chan, const struct sock_fprog *filter)
{
        long sr = syscall(SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */,
                          4 /* SECCOMP_FILTER_FLAG_SPEC_ALLOW */, filter);
        if (sr < 0 && errno == EINVAL)
                sr = syscall(SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, filter);
        if (sr < 0)
                copy_fail(chan, "cannot load the seccomp filter: %m");
}

/* Contract: the last step before a copy may run guest code, and nothing
 * the copy does after it can undo it: every capability dropped (in the
 * copy's own user namespace, the only ones it has), no_new_privs, the
 * Landlock scope of abstract sockets and signals, and the guest's seccomp
 * filter. A late-input copy does it in two steps (lock_early, then
 * lock_late once its /input is attached: await_input), since attaching
 * needs the capability and the guest filter refuses mount calls. */
static void lock_down(const struct template_state *tpl, int chan)
{
        int r = drop_capabilities();
        if (r < 0)
                copy_fail(chan, "cannot drop capabilities: %s", strerror(-r));
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                copy_fail(chan, "cannot set no_new_privs: %m");
        r = tpl_scope_copy(tpl, false, -1, NULL);
        if (r < 0)
                copy_fail(chan, "cannot scope the run with Landlock: %s", strerror(-r));
        load_filter(chan, &tpl->guest_filter);
}

/* A late-input copy's Landlock ruleset, made before the copy is ready
 * (lock_early) and put in force by lock_late, which closes it: no guest
 * code runs while it is open. -EOPNOTSUPP where Landlock cannot scope. */
static int late_ruleset = -1;

/* A late-input copy before it is ready: no_new_privs, the bounding set
 * and the guest filter (built with allow_mount), whose loading is the slow
 * part of a lock-down (a filter is compiled to machine code when loaded:
 * 100 to 300 us of CPU here, even for a filter of ten instructions), off
 * the critical path; and the Landlock ruleset, so that lock_late only puts
 * it in force (its making and closing are two system calls less on the
 * call's path). The copy keeps its capabilities, and mount and move_mount,
 * for its /input; only airlock's code runs until lock_late. */
static void lock_early(const struct template_state *tpl, int chan)
{
        int r = drop_bounding_set();
        if (r < 0)
                copy_fail(chan, "cannot drop capabilities: %s", strerror(-r));
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                copy_fail(chan, "cannot set no_new_privs: %m");
        load_filter(chan, &tpl->guest_filter);
        late_ruleset = tpl_scope_ruleset(tpl, true);
        if (late_ruleset < 0 && late_ruleset != -EOPNOTSUPP)
                copy_fail(chan, "cannot scope the run with Landlock: %s", strerror(-late_ruleset));
}

/* The rest, once /input is attached: the capabilities, and the Landlock
 * scope, which also refuses every change of mounts from then on; where
 * Landlock cannot (a kernel without scopes), the mount filter, which
 * refuses mount and move_mount as the guest filter would have. Either
 * way a late-input copy ends as locked as any other. */
static void lock_late(const struct template_state *tpl, int chan)
{
        int r = clear_capabilities();
        if (r < 0)
                copy_fail(chan, "cannot drop capabilities: %s", strerror(-r));
        bool no_mounts = false;
        r = tpl_scope_copy(tpl, true, late_ruleset, &no_mounts);
        late_ruleset = -1;
        if (r < 0)
                copy_fail(chan, "cannot scope the run with Landlock: %s", strerror(-r));
        if (!no_mounts)
                load_filter(chan, &tpl->mount_filter);
}

/* Whether the host has sent anything on the channel yet: before it has
 * the copy's ready message, only a "hurry" frame, which says a caller
 * waits for this copy; tpl_serve_host reads and ignores it later. */
static bool host_waits(int chan)
{
        struct pollfd p = {chan, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0)
                return false;
        /* Waited for: the rest wakes as the caller's own work would. */
        tpl_set_preparing(false);
        return true;
}

/* The largest frame a late-input copy reads before its input: "hurry" and
 * "input" are a few bytes. */
#define AWAIT_FRAME_MAX 256

/* Reads one frame before the copy's input, with room for the one fd that
 * may come with its first byte: the detached tree of the run's staged
 * input comes with the message that starts with the "input" frame
 * (copy_send_input in sandbox/sandbox.c), and a read without room for it
 * would drop it. *ret_fd keeps the fd. 1 and the frame, or -errno. */
static int await_frame(int chan, json_t **ret, int *ret_fd)
{
        unsigned char hdr[4];
        size_t got = 0;
        /* Asleep in poll, not in the read: a read asleep on the socket is
         * woken whenever the host reads from it (the wake-up of writers
         * waiting for room), so the host's read of COPY_READY, when its
         * call takes this copy, woke it for nothing, and it took the CPU
         * from the host there; a poll for input is woken by input alone. */
        struct pollfd p = {chan, POLLIN, 0};
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
                ;
        while (got < sizeof(hdr)) {
                int fd = -1;
                size_t nfd = 0;
                ssize_t n = al_recv_fds(chan, hdr + got, sizeof(hdr) - got, &fd, 1, &nfd, 0);
                if (n <= 0)
                        return n == 0 ? -EPIPE : (int)n;
                if (nfd > 1 || (fd >= 0 && *ret_fd >= 0)) {
                        closep(&fd);
                        return -EPROTO;
                }
                if (fd >= 0)
                        *ret_fd = fd;
                got += (size_t)n;
        }
        uint32_t len = channel_frame_len(hdr);
        char body[AWAIT_FRAME_MAX];
        if (len > sizeof(body))
                return -EMSGSIZE;
        if (al_read_full(chan, body, len) != (ssize_t)len)
                return -EPROTO;
        int r = channel_frame_parse(body, len, ret);
        return r < 0 ? r : 1;
}

/* Receives the byte COPY_INPUT that follows an "input" frame. The
 * detached tree of the run's staged input came with the message's first
 * byte (*ret_tree, await_frame), or comes with this one; -1 for an empty
 * /input. */
static int recv_input_tree(int chan, int *ret_tree)
{
        char tag;
        int tree = -1;
        size_t nfd = 0;
        ssize_t n = al_recv_fds(chan, &tag, 1, &tree, 1, &nfd, 0);
        if (n != 1)
                return n == 0 ? -EPIPE : -EPROTO;
        if (tag != COPY_INPUT || nfd > 1 || (tree >= 0 && *ret_tree >= 0)) {
                closep(&tree);
                return -EPROTO;
        }
        if (tree >= 0)
                *ret_tree = tree;
        return 0;
}

/* Contract: puts the run's staged input at /input: a clone of the
 * read-only overlay the host made over the staged tree (sandbox/input.c),
 * a file system of its own, whose root the guest's mountinfo shows as "/"
 * and whose options name its layers only as /proc/self/fd links of the
 * process that made it. Read-only, nosuid, nodev and noexec from its
 * making; moved onto the template's empty /input in this copy's own mount
 * namespace, before the copy drops the capability to change mounts. A
 * failure ends the copy with a message for the host. */
static void attach_input(int chan, int tree)
{
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, "/input", MOVE_MOUNT_F_EMPTY_PATH) < 0)
                copy_fail(chan, "cannot attach the run's staged input: %m");
}

/* A late-input copy, ready and waiting: reads the host's "input" frame
 * (after any "hurry"), attaches the staged input that follows it, makes a
 * writable /input where the configuration asks for one, locks down, and
 * answers COPY_INPUT with the writable /input's upper dir and lower layer.
 * Until then no guest code can run: the "run" or "session" frame that
 * tpl_serve_host reads comes after. */
static void await_input(struct template_state *tpl, int chan)
{
        int tree = -1;
        for (;;) {
                json_t *msg = NULL;
                int r = await_frame(chan, &msg, &tree);
                if (r == -EPIPE)
                        _exit(0); /* the host is gone or closed this copy */
                if (r < 0)
                        copy_fail(chan, "cannot read the run's input: %s", strerror(-r));
                tpl_set_preparing(false);
                const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
                bool input = op && strcmp(op, WIRE_OP_INPUT) == 0;
                bool hurry = op && strcmp(op, WIRE_OP_HURRY) == 0;
                json_decref(msg);
                if (input)
                        break;
                if (!hurry)
                        copy_fail(chan, "expected the run's input, got \"%s\"", op ? op : "");
        }
        int r = recv_input_tree(chan, &tree);
        if (r < 0)
                copy_fail(chan, "cannot receive the run's input: %s", strerror(-r));
        if (tree >= 0) {
                attach_input(chan, tree);
                close(tree);
        }
        int fds[2] = {-1, -1};
        size_t n = 0;
        if (tpl->params.input_writable) {
                mount_writable_input(tpl, chan, &fds[0], &fds[1]);
                n = 2;
        }
        lock_late(tpl, chan);
        if (tpl_send_fds(chan, COPY_INPUT, NULL, fds, n) < 0)
                _exit(126);
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
}

/* A fresh copy: pid 1 of its own PID namespace, in its own mount namespace.
 * It mounts its private /output, /tmp and /proc, hands the host its /output
 * fd, drops every privilege, loads the seccomp filter, and waits for code.
 * Everything here runs before any guest code. */
/* The run's rlimits: CPU, data where no cgroup counts memory, file size,
 * files, cores, message queues, processes of its user, queued signals,
 * locked memory and the stack. */
static void set_run_limits(const struct template_state *tpl)
{
        const airlock_limits *lim = &tpl->params.limits;
        rlim_t cpu = (rlim_t)(lim->cpu_s > 0 ? lim->cpu_s : lim->timeout_s) + 1;
        set_limit(RLIMIT_CPU, cpu);
#if !defined(__SANITIZE_ADDRESS__)
        /* RLIMIT_DATA counts the private writable address space a process
         * reserves, touched or not: OpenBLAS alone reserves 128 MiB per
         * thread and touches a few, and cannot go on when a reservation
         * is refused (the run then ends as "memory", guest.c, on_sigsys).
         * With a cgroup, which charges the pages a run really
         * holds, the memory limit is the cgroup's alone; RLIMIT_DATA is
         * the limit only where there is none. Not under AddressSanitizer,
         * whose shadow mappings count as data and exceed any sensible
         * limit. */
        if (!tpl->params.cgroup)
                set_limit(RLIMIT_DATA, lim->memory_bytes);
#endif
        set_limit(RLIMIT_FSIZE, lim->max_file_bytes);
        set_limit(RLIMIT_NOFILE, lim->open_files);
        set_limit(RLIMIT_CORE, 0);
        set_limit(RLIMIT_MSGQUEUE, 0);
        /* Tasks of this user in the copy's own user namespace: the run's
         * process limit (the host adds a cgroup limit where it can). */
        set_limit(RLIMIT_NPROC, lim->pids + 4);
        /* Counted per user namespace, so per run: signals a run may queue
         * and memory it may lock. */
        set_limit(RLIMIT_SIGPENDING, COPY_MAX_SIGPENDING);
        set_limit(RLIMIT_MEMLOCK, COPY_MAX_MEMLOCK);
        /* The main stack is not data: without this a host started with an
         * unlimited stack would give the guest unlimited memory there. */
        set_limit(RLIMIT_STACK, COPY_MAX_STACK);
}

/* A copy's warming, before it reports ready: the preloads' set populated
 * (the pages the probe saw numpy's and pandas' common paths write and
 * read, runtime._prewarm), so that a run that uses them does not take
 * them at its start (tpl_populate_for): a pandas run took 5.09 ms against
 * 2.17 without them. Nothing else: a plain print(1) run here, to make the
 * run's own path the copy's, cost CPU and saved the run almost no time
 * once the base set is populated (tpl_copy_main). Against it, in
 * interleaved rounds of 30 to 40 calls of the library driver 20 ms apart,
 * a print(1) cost 5 to 12 % less CPU and a preloaded pandas run 8 to 10 %
 * less; a warm call through airlock mcp 50 ms apart took 0.02 ms longer
 * (print(1), 0.76 against 0.74 ms), 200 ms apart as long (a pandas run,
 * 2.02 against 2.05 ms).
 *
 * No warming in the first copy, made before the template's own warm-up
 * for a new sandbox's first run, which is waited for: warming would only
 * move the same work ahead of it. Nor in a copy that the host already
 * waits for (it sent "hurry", see sbx_copy_wait_ready), nor in a copy of
 * a burst (skip_warming), where calls come faster than copies are
 * prepared: there the populate is the next copy's CPU, and a run whose
 * code names a preload populates the set itself. */
static void warm_copy(struct template_state *tpl, int chan)
{
        /* Nothing to warm (no preloads, or not learned yet) asks the host
         * nothing: host_waits is a system call on every copy's path. */
        if (!tpl->warmed_up || tpl->skip_warming || !tpl->n_prefault_preloads ||
            tpl->preloads_populated || host_waits(chan))
                return;
        tpl_populate_preloads(tpl);
}

_Noreturn void tpl_copy_main(struct template_state *tpl, int chan, int out_w, int err_w,
                             const int procs[CG_HIERARCHIES], int prep_w)
{
        /* Into the copy's own cgroup before it allocates anything, so that
         * every page it writes from now on is charged to this run alone. */
        int r = tpl_cgroup_join(procs);
        if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0 || dup3(chan, COPY_CHANNEL_FD, O_CLOEXEC) < 0)
                _exit(126);
        chan = COPY_CHANNEL_FD;
        /* The template's pipe, closed when this copy is ready: fd 3 is the
         * template's control socket, so prep_w is never the channel. */
        if (prep_w != COPY_PREP_FD && dup3(prep_w, COPY_PREP_FD, O_CLOEXEC) < 0)
                _exit(126);
        /* Nothing of the template's may reach the guest: not the control
         * socket, not other copies' fds. */
        syscall(SYS_close_range, COPY_PREP_FD + 1, ~0u, 0);
        tpl->ctl_fd = -1;
        if (r < 0)
                copy_fail(chan, "cannot join the run's cgroup: %s", strerror(-r));
        r = tpl_enter_own_user_namespace();
        if (r < 0)
                copy_fail(chan, "cannot set up the run's user namespace: %s", strerror(-r));

        tpl_populate_learned(tpl);
        guest_after_fork_child(chan);
        /* pid 1 of the run's namespace: the signals the code sends itself
         * must end it as they would end python3 (guest.c). */
        guest_init_signals(true);

        const unsigned long tmpfs_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOSYMFOLLOW;
        if (mount("tmpfs", "/output", "tmpfs", tmpfs_flags, tpl->out_opts) < 0 &&
            mount("tmpfs", "/output", "tmpfs", tmpfs_flags & ~MS_NOSYMFOLLOW, tpl->out_opts) < 0)
                copy_fail(chan, "cannot mount /output: %m");
        if (mount("tmpfs", "/tmp", "tmpfs", tmpfs_flags, tpl->tmp_opts) < 0 &&
            mount("tmpfs", "/tmp", "tmpfs", tmpfs_flags & ~MS_NOSYMFOLLOW, tpl->tmp_opts) < 0)
                copy_fail(chan, "cannot mount /tmp: %m");
        if (mount("tmpfs", "/dev/shm", "tmpfs", tmpfs_flags, tpl->shm_opts) < 0 &&
            mount("tmpfs", "/dev/shm", "tmpfs", tmpfs_flags & ~MS_NOSYMFOLLOW, tpl->shm_opts) < 0)
                copy_fail(chan, "cannot mount /dev/shm: %m");
        /* Pseudo-terminals (os.openpty, pty.fork): a devpts instance of
         * the copy's own, so that no other copy or host terminal is seen
         * there, with at most 16 of them (COPY_DEVPTS_OPTS; the kernel's
         * kernel.pty.max bounds all instances together). Not nodev: its
         * nodes are the terminals. TIOCSTI is refused by the filter. */
        if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, COPY_DEVPTS_OPTS) < 0)
                copy_fail(chan, "cannot mount /dev/pts: %m");
        /* Before the copy's own /proc: the layers are named by
         * /proc/self/fd links, which the template's /proc resolves. */
        int ready_fds[3] = {-1, -1, -1};
        size_t n_ready = 1;
        if (tpl->params.input_writable && !tpl->params.late_input) {
                mount_writable_input(tpl, chan, &ready_fds[1], &ready_fds[2]);
                n_ready = 3;
        }
        /* Its own /proc, whose system-wide files are covered or written
         * by the copy (tpl_proc.c); a kernel without the new mount API
         * gets the processes alone. */
        r = tpl_proc_mount(tpl);
        if (r == -ENOSYS &&
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") < 0)
                copy_fail(chan, "cannot mount /proc: %m");
        else if (r < 0 && r != -ENOSYS)
                copy_fail(chan, "cannot mount /proc: %s", strerror(-r));
        /* The cache is still being filled for later copies: this one sees
         * it read-only all the same. */
        if (!tpl->cache_sealed && tpl_make_readonly(GUEST_CACHE_DIR, false, true) < 0)
                copy_fail(chan, "cannot make %s read-only: %m", GUEST_CACHE_DIR);
        ready_fds[0] = open("/output", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (ready_fds[0] < 0)
                copy_fail(chan, "cannot open /output: %m");
        /* The working directory is /output, so that a file the code
         * writes by a relative name (savefig("chart.png")) comes back as
         * the script's would land beside it (docs/design.md, "Inside the
         * sandbox"). */
        if (chdir("/output") < 0)
                copy_fail(chan, "cannot enter /output: %m");

        set_run_limits(tpl);
        /* Before the lock: the populate is one process_madvise for all the
         * ranges, a call the guest's filter refuses (al_advise). */
        warm_copy(tpl, chan);

        if (tpl->params.late_input)
                lock_early(tpl, chan);
        else
                lock_down(tpl, chan);

        /* Ready: the template may start the next copy. The host's frame
         * must wake this copy at once, preempting other work: a copy that
         * waited as SCHED_BATCH ran a busy machine's call up to a time
         * slice late. */
        close(COPY_PREP_FD);
        tpl_set_preparing(false);
        /* /output's fd, and with a writable /input its upper dir and
         * lower layer: the guest keeps none of them. */
        if (tpl_send_fds(chan, COPY_READY, NULL, ready_fds, n_ready) < 0)
                _exit(126);
        for (size_t i = 0; i < n_ready; i++)
                close(ready_fds[i]);
        if (tpl->params.late_input)
                await_input(tpl, chan);
        tpl_serve_host(tpl, chan);
}
