/* A copy as a session: its pid 1, which reaps; the active process, which
 * holds the interpreter; the snapshots, frozen forks of it that a restore
 * wakes to make the next active process; and the waits that make sure an
 * old state's processes are gone before a new one speaks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/rseq.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/channel.h"
#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

/* The link between an active process and its cell base (a snapshot taken
 * with "base"), over which a fork hands the base its fds (tpl_session_fork,
 * base_become_fork). In an active process: base_link is the sending end and
 * base_pid the base's pid, -1 without a base, with base_ino the link's
 * inode, checked before each use since guest code may close or replace any
 * fd of its process. In a cell base: link_in is the receiving end; it keeps
 * base_link too, for the active processes that a rollback makes from it.
 * Per process, as every process of a session inherits them. */
static int base_link = -1;
static pid_t base_pid = -1;
static ino_t base_ino;
static int link_in = -1;
/* Set in an active process whose cell base became a fork, until it takes
 * the next (tpl_session_gave_base). */
static bool gave_base;
/* The cell base that a "drop" ended the use of, still alive until the next
 * base is taken (tpl_session_drop), or -1; then killed there, and reaped
 * before the next op (base_killed). */
static pid_t base_dropped = -1;
static pid_t base_killed = -1;

/* Closes *fd, if open, and marks it closed. */
static void drop_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

/* Whether base_link is still the link made with the base. */
static bool link_is_ours(void)
{
        struct stat st;
        return base_link >= 0 && fstat(base_link, &st) == 0 && S_ISSOCK(st.st_mode) &&
               st.st_ino == base_ino;
}

/* Forgets the link to the cell base in a process that guest code ran in:
 * it is closed only while it is still the link, since the guest may have
 * put a file of its own at that number. */
static void link_forget(void)
{
        if (link_is_ours())
                close(base_link);
        base_link = -1;
        base_pid = -1;
}

/* Contract: a clone of the calling process that shares its memory
 * (CLONE_VM) and its stack, while the caller ends at once: returns 0 in the
 * clone, -errno in the caller when there is none, and never in the caller
 * otherwise. Between the clone and its exit the caller touches no memory
 * (the two steps are one block of assembly, and the caller has every
 * signal blocked, so no signal frame is pushed on the shared stack), so the
 * clone owns the memory and the stack from the start. The clone is a child
 * of the caller until the caller is gone, then of pid 1. A cell base that
 * becomes a fork passes itself on this way: no page table is copied, and
 * the fork is pid 1's child (which reaps it) rather than the child of the
 * handle that took the base. */
#if defined(__x86_64__)
#define HAVE_BASE_HOP 1
static long base_hop(void)
{
        long ret;
        register long r10 __asm__("r10") = 0;
        register long r8 __asm__("r8") = 0;
        __asm__ volatile("syscall\n\t"
                         "test %%rax, %%rax\n\t"
                         "jle 1f\n\t"
                         "mov %[sys_exit], %%eax\n\t"
                         "xor %%edi, %%edi\n\t"
                         "syscall\n\t"
                         "1:"
                         : "=a"(ret)
                         : "0"((long)SYS_clone), "D"((long)(CLONE_VM | SIGCHLD)), "S"(0L), "d"(0L),
                           "r"(r10), "r"(r8), [sys_exit] "i"(SYS_exit_group)
                         : "rcx", "r11", "memory");
        return ret;
}
#else
/* Elsewhere a fork clones the active process (tpl_session_fork). */
#define HAVE_BASE_HOP 0
#endif

/* Registers or leaves glibc's restartable-sequences area of this thread,
 * with the size glibc registered it with (the original 32 bytes, which the
 * kernel requires; __rseq_size is that of the fields in use). */
#if HAVE_BASE_HOP
static void rseq_register(bool on)
{
        if (__rseq_size > 0)
                (void)syscall(SYS_rseq, (char *)__builtin_thread_pointer() + __rseq_offset,
                              sizeof(struct rseq), on ? 0 : RSEQ_FLAG_UNREGISTER, RSEQ_SIG);
}
#endif

/* Whether this thread runs on an x86 shadow stack (glibc 2.39 and later
 * may enable one): a CLONE_VM clone gets a new, empty one, on which the
 * hop's clone could not return, so forks clone instead. */
static bool shadow_stack_on(void)
{
#if defined(__x86_64__)
        unsigned long features = 0;
        /* ARCH_SHSTK_STATUS, refused by kernels without shadow stacks;
         * bit 0 is ARCH_SHSTK_SHSTK. */
        return syscall(SYS_arch_prctl, 0x5005, &features) == 0 && (features & 1);
#else
        return false;
#endif
}

/* Work done for a later call (a cell base, a fork's after-fork work: a
 * millisecond or two of CPU each, for a large interpreter) waits until the
 * host has had BACKGROUND_GRACE_US to finish the call at hand: on a small
 * machine it would otherwise hold the CPUs that the host and its client
 * need to deliver the answer. A frame from the host ends the wait at once,
 * since the next call needs the work done. */
#define BACKGROUND_GRACE_US 1000
void tpl_session_grace(int chan)
{
        struct pollfd p = {chan, POLLIN, 0};
        struct timespec ts = {0, BACKGROUND_GRACE_US * 1000};
        (void)ppoll(&p, 1, &ts, NULL);
}

/* A new active session process announces itself with a pidfd of itself, so
 * the host notices at once when the state it talks to has died. */
static void announce_active(int chan, const char *op)
{
        int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (self < 0 || tpl_send_fds(chan, COPY_ACTIVE, NULL, &self, 1) < 0)
                _exit(0);
        close(self);
        /* The handle's session id (see proc_sid): the host names it in the
         * "spare" list of a sibling's restore. */
        tpl_reply(chan, json_pack("{s:s, s:i}", WIRE_KEY_OP, op, WIRE_KEY_SID, (int)getsid(0)));
}

/* Forks the interpreter: the child is an active process (reseeded, ready
 * to run guest code) or, with snapshot, a frozen snapshot, which runs no
 * guest code and so skips the reseeding (guest_after_fork_snapshot). */
static pid_t fork_interpreter(bool snapshot)
{
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0 && snapshot)
                guest_after_fork_snapshot(COPY_CHANNEL_FD);
        else if (pid == 0)
                guest_after_fork_child(COPY_CHANNEL_FD);
        else
                guest_after_fork_parent();
        return pid;
}

/* The session's pid 1 after it has handed the interpreter to its first
 * active process: it reaps, and it watches the channel without reading it.
 * When the host closes its end (session closed, or the host died), pid 1
 * exits, and with it every process of the session's PID namespace, the
 * frozen snapshots included. */
static void on_sigchld(int sig)
{
        (void)sig;
}

_Noreturn static void session_root(const struct template_state *tpl, int chan)
{
        /* SIGCHLD stays blocked except inside ppoll, so a child's exit
         * interrupts the wait at once and no zombie lingers in /proc. */
        struct sigaction sa = {.sa_handler = on_sigchld};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, NULL);
        sigset_t chld, open_mask;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &open_mask);
        sigdelset(&open_mask, SIGCHLD);
        for (;;) {
                bool reaped = false;
                while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                        reaped = true;
                if (reaped)
                        (void)!write(tpl->reap_notify, "r", 1);
                struct pollfd p = {chan, POLLRDHUP, 0};
                if (ppoll(&p, 1, NULL, &open_mask) > 0 &&
                    (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        _exit(0);
        }
}

/* The state letter of process pid, from /proc/<pid>/stat (after the last
 * ')', which ends the command name), and its session id in *ret_sid; 0
 * when it is gone or unreadable. */
static char proc_state(pid_t pid, pid_t *ret_sid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        char *p = strrchr(buf, ')');
        int ppid, pgrp, sid;
        char state;
        if (!p || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
                return 0;
        if (ret_sid)
                *ret_sid = (pid_t)sid;
        return state;
}

/* The session id of process pid, from /proc/<pid>/stat (the fourth field
 * after the command name, which may hold any byte but ends at the last
 * ')'); -1 when it is gone or unreadable. Every handle of a copy (the
 * session and each of its forks) runs in a session id of its own, so that
 * a restore of one ends that handle's processes and no sibling's. */
static pid_t proc_sid(pid_t pid)
{
        pid_t sid = -1;
        return proc_state(pid, &sid) ? sid : -1;
}

/* Whether sid is in the array spare (the session ids of sibling handles). */
static bool spared_sid(pid_t sid, json_t *spare)
{
        size_t i;
        json_t *v;
        json_array_foreach (spare, i, v)
                if (json_integer_value(v) == sid)
                        return true;
        return false;
}

/* Whether pid is one of the session's processes that a restore keeps. */
static bool kept_pid(pid_t pid, json_t *keep)
{
        size_t i;
        json_t *v;
        if (pid <= 1 || pid == getpid())
                return true;
        json_array_foreach (keep, i, v)
                if (json_integer_value(v) == pid)
                        return true;
        return false;
}

/* Contract: returns 0 once no process of the session is left but pid 1,
 * this one, and those in keep (NULL: only `only` is waited for, if > 0),
 * every other one having been killed with kill_them and REAPED, so that
 * nothing of it is left even in /proc. Processes whose session id is in
 * spare (the sibling handles of a forked session) are left alone, and with
 * own_sid > 0 only the processes of that session id count. It sleeps
 * between checks until pid 1 reaps something or a child of this process
 * exits, never on a timer; -ETIMEDOUT after SESSION_GONE_S if something
 * will not go. */
#define SESSION_GONE_S 10
static int wait_until_gone(const struct template_state *tpl, json_t *keep, json_t *spare,
                           pid_t only, bool kill_them, pid_t own_sid)
{
        bool by_sid = json_array_size(spare) > 0 || own_sid > 0;
        struct sigaction sa = {.sa_handler = on_sigchld}, old_sa;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, &old_sa);
        sigset_t chld, old_mask, open_mask;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old_mask);
        open_mask = old_mask;
        sigdelset(&open_mask, SIGCHLD);
        uint64_t deadline = al_now_ns() + SESSION_GONE_S * 1000000000ull;
        int r = -ETIMEDOUT;
        while (al_now_ns() < deadline) {
                /* Our own killed children are ours to reap. */
                while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                        ;
                char buf[64];
                while (read(tpl->reap_wait, buf, sizeof(buf)) > 0)
                        ;
                int left = 0;
                if (only > 0) {
                        left = kill(only, 0) == 0 || errno != ESRCH;
                } else {
                        _cleanup_closedir_ DIR *d = opendir("/proc");
                        if (!d) {
                                r = -errno;
                                break;
                        }
                        struct dirent *de;
                        while ((de = readdir(d))) {
                                pid_t pid = (pid_t)atoi(de->d_name);
                                if (pid <= 0 || kept_pid(pid, keep))
                                        continue;
                                if (by_sid) {
                                        /* A process gone meanwhile reads
                                         * -1 and counts until the next
                                         * pass sees it gone. */
                                        pid_t sid = proc_sid(pid);
                                        if (sid >= 0 && (spared_sid(sid, spare) ||
                                                         (own_sid > 0 && sid != own_sid)))
                                                continue;
                                }
                                left++;
                                if (kill_them)
                                        kill(pid, SIGKILL);
                        }
                }
                if (!left) {
                        r = 0;
                        break;
                }
                uint64_t now = al_now_ns();
                struct timespec ts = {.tv_sec = (time_t)((deadline - now) / 1000000000ull),
                                      .tv_nsec = (long)((deadline - now) % 1000000000ull)};
                struct pollfd p = {tpl->reap_wait, POLLIN, 0};
                if (ppoll(&p, 1, &ts, &open_mask) > 0 && (p.revents & (POLLERR | POLLNVAL))) {
                        r = -EBADF;
                        break;
                }
        }
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        sigaction(SIGCHLD, &old_sa, NULL);
        return r;
}

/* Waits until the killed process pid is reaped (by this process when it is
 * its child, else by pid 1), so that a dropped snapshot is gone from /proc
 * before the next request is served, for at most SESSION_GONE_S. Reaps
 * nothing else: the guest's own children stay the guest's. */
static void wait_reaped(const struct template_state *tpl, pid_t pid)
{
        /* Our own child (the base this process forked): reaped here. */
        pid_t w;
        while ((w = waitpid(pid, NULL, __WALL)) < 0 && errno == EINTR)
                ;
        if (w == pid)
                return;
        uint64_t deadline = al_now_ns() + SESSION_GONE_S * 1000000000ull;
        while (al_now_ns() < deadline) {
                /* The pipe is emptied before the check, so that a reap
                 * after the check still wakes the poll. */
                char buf[64];
                while (read(tpl->reap_wait, buf, sizeof(buf)) > 0)
                        ;
                if (kill(pid, 0) < 0 && errno == ESRCH)
                        return;
                struct pollfd p = {tpl->reap_wait, POLLIN, 0};
                if (poll(&p, 1, 10) > 0 && (p.revents & (POLLERR | POLLNVAL | POLLHUP)))
                        return;
        }
}

/* Reaps the cell base that kill_dropped killed, if any. */
static void reap_killed(const struct template_state *tpl)
{
        pid_t id = base_killed;
        base_killed = -1;
        if (id > 1)
                wait_reaped(tpl, id);
}

/* Kills the cell base that a "drop" left alive, if any, for reap_killed. */
static void kill_dropped(void)
{
        if (base_dropped > 1 && base_dropped != getpid() && kill(base_dropped, SIGKILL) == 0)
                base_killed = base_dropped;
        base_dropped = -1;
}

/* Contract: runs in the new active process of a rollback that the host
 * started (the old active process is dead, killed by the host after a
 * failed, timed-out or cancelled cell). Whatever the dead process left
 * unread on the channel is discarded, which leaves the stream at a frame
 * boundary even if the host stopped in the middle of a reply; then it asks
 * the host which snapshots to keep, ends and reaps every other process of
 * the session (the old state's children), and returns. Ends this process
 * (the host sees the session end) when any step fails. */
static void host_rollback(const struct template_state *tpl, int chan)
{
        char junk[4096];
        while (recv(chan, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                ;
        tpl_reply(chan, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_RESTORE));
        frame_reader fr;
        channel_reader_init(&fr, CHANNEL_MAX_FRAME);
        json_t *msg = NULL;
        if (channel_reader_feed(&fr, chan, &msg) != 1)
                _exit(0);
        channel_reader_free(&fr);
        const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
        json_t *keep = json_object_get(msg, WIRE_KEY_KEEP);
        json_t *spare = json_object_get(msg, WIRE_KEY_SPARE);
        if (!op || strcmp(op, WIRE_OP_RESTORE) != 0 || !json_is_array(keep) ||
            wait_until_gone(tpl, keep, spare, 0, true, 0) < 0)
                _exit(0);
        json_decref(msg);
}

/* Receives the fds of a fork: the tag byte COPY_FORK with exactly three
 * fds, its channel and the write ends of its stdout and stderr. The host
 * sends them right after the "fork" frame; an active process hands them on
 * to its cell base the same way. */
static int recv_fork_fds(int sock, int fds[3], int flags)
{
        char tag;
        int got[3];
        size_t nfd = 0;
        ssize_t n = al_recv_fds(sock, &tag, 1, got, 3, &nfd, flags);
        if (n <= 0)
                return n == 0 ? -EPIPE : n == -EAGAIN ? -EAGAIN : -EPROTO;
        if (n != 1 || nfd != 3 || tag != COPY_FORK) {
                for (size_t i = 0; i < 3; i++)
                        closep(&got[i]);
                return -EPROTO;
        }
        memcpy(fds, got, sizeof(got));
        return 0;
}

/* Makes the calling process a fork's active process: fds become its
 * channel, stdout and stderr, it gets a session id of its own and
 * announces itself on its own channel. Announced first, in C alone: the
 * interpreter's own after-fork work (a millisecond of copy-on-write faults)
 * then overlaps with the host's answer, and is done before the first frame
 * of the host is read. Ends the process when the fds cannot be put in
 * place (the host sees the fork fail). */
static void become_fork(const int fds[3])
{
        if (dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0 ||
            dup3(fds[0], COPY_CHANNEL_FD, O_CLOEXEC) < 0)
                _exit(0);
        for (int i = 0; i < 3; i++)
                if (fds[i] > COPY_CHANNEL_FD)
                        close(fds[i]);
        setsid();
        announce_active(COPY_CHANNEL_FD, WIRE_OP_FORK);
        tpl_session_grace(COPY_CHANNEL_FD);
}

/* Contract: in a cell base that its handle's "fork" woke (SIGUSR2, with
 * the fork's fds on link_in): the base becomes the fork. It passes itself
 * on to a clone that shares its memory (base_hop) and ends, so that no page
 * table is copied and the fork is pid 1's child; the clone says 'y' on the
 * link and returns 0 as the fork's active process, announced on its own
 * channel. Without a clone (a limit on processes) the base says 'n',
 * closes the fds and returns -1, still a base. */
static int base_become_fork(const int fds[3])
{
#if HAVE_BASE_HOP
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &old);
        /* The base's exit must not write to the memory the clone owns by
         * then: no clearing of its thread id, no robust-futex walk. The
         * base runs no code of its own, so neither is missed if it stays. */
        syscall(SYS_set_tid_address, NULL);
        syscall(SYS_set_robust_list, NULL, sizeof(struct robust_list_head));
        /* Nor may the kernel update the base's restartable-sequences area
         * (the same address as the clone's) should the base be preempted in
         * the clone: it leaves it first. A clone that shares its parent's
         * memory starts without one (the kernel's rule for CLONE_VM), so the
         * fork registers glibc's again, and so does a base left a base. */
        rseq_register(false);
        if (base_hop() == 0) {
                rseq_register(true);
                (void)!send(link_in, "y", 1, MSG_NOSIGNAL);
                drop_fd(&link_in);
                drop_fd(&base_link);
                base_pid = -1;
                become_fork(fds);
                sigprocmask(SIG_SETMASK, &old, NULL);
                sigset_t usr;
                sigemptyset(&usr);
                sigaddset(&usr, SIGUSR1);
                sigaddset(&usr, SIGUSR2);
                sigprocmask(SIG_UNBLOCK, &usr, NULL);
                /* The base skipped the interpreter's after-fork work in the
                 * child (guest_after_fork_snapshot); the fork does it now. */
                guest_before_fork();
                guest_after_fork_child(COPY_CHANNEL_FD);
                return 0;
        }
        rseq_register(true);
        sigprocmask(SIG_SETMASK, &old, NULL);
#endif
        (void)!send(link_in, "n", 1, MSG_NOSIGNAL);
        for (int i = 0; i < 3; i++)
                close(fds[i]);
        return -1;
}

/* A snapshot: a frozen copy of the interpreter at the moment it was taken.
 * It sleeps until a restore wakes it (SIGUSR1, blocked since before the
 * fork), then starts the new active process and sleeps again, so the same
 * snapshot can be restored any number of times; returns SNAPSHOT_RESTORED in
 * the new active process, once the old active process (the sender of
 * SIGUSR1) is gone. A cell base also wakes on SIGUSR2, when its handle
 * forks (tpl_session_fork): it becomes the fork and returns
 * SNAPSHOT_FORKED in it (base_become_fork).
 *
 * The new active process is made with CLONE_PARENT: a child of the
 * snapshot's parent, never of the snapshot, which never reaps. So every
 * process a session ends is reaped by pid 1 in the end, and none lingers
 * as a zombie of a sleeping snapshot. */
static enum snapshot_end snapshot_wait(const struct template_state *tpl, int chan)
{
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGUSR2);
        pid_t self = getpid();
        for (;;) {
                siginfo_t si;
                if (sigwaitinfo(&set, &si) < 0)
                        continue;
                if (si.si_signo == SIGUSR2) {
                        /* Anything but a well-formed hand-over (a stray
                         * signal from guest code) is ignored. */
                        /* Guest code may have queued junk on the link
                         * before a rollback made its process from this
                         * base: it is read past, up to the hand-over. */
                        int fds[3], k = -EAGAIN;
                        while (link_in >= 0 &&
                               (k = recv_fork_fds(link_in, fds, MSG_DONTWAIT)) == -EPROTO)
                                ;
                        if (k == 0 && base_become_fork(fds) == 0)
                                return SNAPSHOT_FORKED;
                        continue;
                }
                /* A signal from outside the session's PID namespace (si_pid
                 * 0) is the host rolling a failed cell back: the old active
                 * process is already dead, so the new one ends the rest of
                 * the old state itself (see host_rollback). */
                bool from_host = si.si_pid == 0;
                /* Plain clone: the guest's seccomp filter, in force here,
                 * refuses clone3. With CLONE_PARENT the child's exit signal
                 * is the snapshot's own, SIGCHLD. */
                guest_before_fork();
                long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
                if (pid == 0) {
                        /* Made from a cell base, the new active process
                         * keeps the link to it; from any other snapshot it
                         * has no base (the restore ends the old one). */
                        if (link_in >= 0) {
                                drop_fd(&link_in);
                                base_pid = self;
                        } else {
                                link_forget();
                        }
                        guest_after_fork_child(COPY_CHANNEL_FD);
                        sigprocmask(SIG_UNBLOCK, &set, NULL);
                        if (from_host) {
                                host_rollback(tpl, chan);
                                return SNAPSHOT_RESTORED;
                        }
                        if (wait_until_gone(tpl, NULL, NULL, si.si_pid, false, 0) < 0)
                                _exit(0); /* the host sees the session end */
                        return SNAPSHOT_RESTORED;
                }
                guest_after_fork_parent();
        }
}

/* "session": the copy becomes a session. This process forks; the parent
 * stays as the session's pid 1 (session_root, never returns) and the child
 * returns as its first active process, which holds the interpreter from
 * now on and has told the host so. */
void tpl_session_open(struct template_state *tpl, int chan)
{
        /* No shared memory in a session (seccomp_build_session_filter):
         * every process of it inherits the filter, and /dev/shm, the copy's
         * own tmpfs, becomes read-only to them (the guest's uid owns it but
         * has no capability: only a mode it set back itself would let it
         * share files there, as it shares /tmp). */
        if (syscall(SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, &tpl->session_filter) < 0 ||
            chmod("/dev/shm", 0555) < 0)
                _exit(1);
        int rp[2];
        if (pipe2(rp, O_NONBLOCK | O_CLOEXEC) < 0)
                _exit(1);
        tpl->reap_wait = rp[0];
        tpl->reap_notify = rp[1];
        /* The session's pid 1 runs no guest code: it ignores the signals
         * the guest sends it, and the session's interpreters, which are
         * not pid 1, take signals as any process does. */
        guest_init_signals(false);
        pid_t pid = fork_interpreter(false);
        if (pid < 0)
                _exit(1);
        if (pid > 0)
                session_root(tpl, chan);
        close(tpl->reap_notify);
        tpl->reap_notify = -1;
        /* The session's processes get a session id of their own, which
         * its forks' do not share (proc_sid). */
        setsid();
        guest_set_session();
        announce_active(chan, WIRE_OP_SESSION);
}

/* "snapshot": forks a frozen copy of the interpreter and tells the host
 * its id, after a pidfd of it (so that the host can wake it when this
 * process is dead: a rollback). With base, the snapshot is the handle's
 * cell base, which replaces the last one, and gets a link to this process
 * over which a fork may take it over. Returns SNAPSHOT_TAKEN in the active
 * process, SNAPSHOT_NONE there when the fork failed, and, each time the
 * snapshot is restored or becomes a fork, in the process made from it
 * (snapshot_wait), which has announced itself. */
enum snapshot_end tpl_session_snapshot(const struct template_state *tpl, int chan, bool base)
{
        int link[2] = {-1, -1};
        if (base) {
                tpl_session_grace(chan);
                /* While the last base still shares every page this process
                 * did not write since it was forked: the pages the next
                 * cell is likely to write (tpl_prefault.c), copied once the
                 * new base is forked. Not when the host's next frame is
                 * already here (cells back to back): the scan would delay
                 * it, and the copying would stop at once. Then the last
                 * base goes; its exit overlaps with the fork, and it is
                 * reaped before the next op (tpl_session_finish_drop). */
                reap_killed(tpl);
                struct pollfd p = {chan, POLLIN, 0};
                if (base_dropped > 1 && poll(&p, 1, 0) == 0)
                        tpl_precopy_learn();
                kill_dropped();
                /* The base this one replaces was dropped, or died (the
                 * host forgets a dead one): reaped here if it was this
                 * process's child, which no other process's pid can be. */
                if (base_pid > 1)
                        (void)waitpid(base_pid, NULL, WNOHANG | __WALL);
                link_forget();
                struct stat st;
                if (HAVE_BASE_HOP && !shadow_stack_on() &&
                    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, link) ==
                        0)
                        base_ino = fstat(link[0], &st) == 0 ? st.st_ino : 0;
        } else {
                tpl_session_finish_drop(tpl);
        }
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGUSR2);
        sigprocmask(SIG_BLOCK, &set, &old);
        pid_t pid = fork_interpreter(true);
        if (pid == 0) {
                /* The last base is this process's parent's to reap. */
                base_killed = -1;
                if (link[0] >= 0) {
                        base_link = link[0];
                        link_in = link[1];
                        base_pid = getpid();
                }
                enum snapshot_end e = snapshot_wait(tpl, chan);
                if (e == SNAPSHOT_RESTORED)
                        announce_active(chan, WIRE_OP_RESTORED);
                return e;
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        int e = errno;
        drop_fd(&link[1]);
        if (pid > 0 && link[0] >= 0) {
                base_link = link[0];
                base_pid = pid;
        } else {
                drop_fd(&link[0]);
        }
        int sfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
        if (pid > 0 && sfd < 0) {
                e = errno;
                kill(pid, SIGKILL);
        }
        if (tpl_send_fds(chan, COPY_SNAPSHOT, NULL, &sfd, sfd >= 0) < 0)
                _exit(0);
        if (sfd < 0) {
                tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                          strerror(e)));
                return SNAPSHOT_NONE;
        }
        close(sfd);
        tpl_reply(chan,
                  json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT, WIRE_KEY_ID, (int)pid));
        return SNAPSHOT_TAKEN;
}

bool tpl_session_gave_base(void)
{
        bool r = gave_base;
        gave_base = false;
        return r;
}

/* "restore": the active process ends, and the snapshot msg names wakes up
 * to make the next one; returns only when it cannot, having told the host. */
void tpl_session_restore(const struct template_state *tpl, int chan, json_t *msg)
{
        pid_t id = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_ID));
        /* The old state's processes are ended and reaped before the
         * snapshot is woken, and the new active process waits for this one
         * to be gone before it announces itself: the host's restore returns
         * only then. */
        json_t *keep = json_object_get(msg, WIRE_KEY_KEEP);
        json_t *spare = json_object_get(msg, WIRE_KEY_SPARE);
        /* The snapshot was stopped with the rest at the end of a cell
         * (tpl_session_freeze), or by guest code: continued first, or the
         * wake-up would wait for a SIGCONT that nothing sends. */
        if (id > 1 && kept_pid(id, keep) && wait_until_gone(tpl, keep, spare, 0, true, 0) == 0 &&
            kill(id, SIGCONT) == 0 && kill(id, SIGUSR1) == 0)
                _exit(0);
        tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                  "the snapshot is gone"));
}

/* "drop": the snapshot msg names is no longer wanted. The cell base, which
 * the host drops after a kept cell just before it asks for the next one,
 * stays until that one is taken (tpl_session_snapshot), as the mark of the
 * pages written since it was forked; any other op ends it first
 * (tpl_session_finish_drop), so that it is gone from /proc before that op
 * is served, as a dropped snapshot is. */
void tpl_session_drop(const struct template_state *tpl, json_t *msg)
{
        pid_t id = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_ID));
        tpl_session_finish_drop(tpl);
        if (id > 1 && id == base_pid) {
                link_forget();
                base_dropped = id;
                return;
        }
        if (id > 1 && id != getpid() && kill(id, SIGKILL) == 0)
                wait_reaped(tpl, id);
}

void tpl_session_finish_drop(const struct template_state *tpl)
{
        reap_killed(tpl);
        kill_dropped();
        reap_killed(tpl);
}

/* Waits up to SESSION_GONE_S for one byte on fd; 0 when none came. */
static char read_answer(int fd)
{
        uint64_t deadline = al_now_ns() + SESSION_GONE_S * 1000000000ull;
        char c = 0;
        for (;;) {
                uint64_t now = al_now_ns();
                if (now >= deadline)
                        return 0;
                struct pollfd p = {fd, POLLIN, 0};
                int k = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
                if (k > 0)
                        return recv(fd, &c, 1, MSG_DONTWAIT) == 1 ? c : 0;
                if (k < 0 && errno != EINTR)
                        return 0;
        }
}

/* "fork" {"base"}: the cell base becomes the fork (base_become_fork), with
 * fds handed to it over the link, and the host is told so with "base":
 * true. Returns false, having sent nothing, when the link is no longer the
 * one made with the base (guest code may close or replace any fd of its
 * process): the caller clones instead, and the base stays. A base that got
 * the fds but cannot become the fork, or does not answer in time (guest
 * code may have stopped or killed it), is ended, and the host told that the
 * fork failed: it then has no base, and takes a new one before the next
 * cell. */
static bool fork_from_base(const struct template_state *tpl, int chan, const int fds[3])
{
        pid_t pid = base_pid;
        if (!link_is_ours()) {
                link_forget();
                return false;
        }
        /* The link does not block (guest code may have filled the base's
         * queue before a rollback made this process from it): a full one
         * is a clone instead. */
        if (tpl_send_fds(base_link, COPY_FORK, NULL, fds, 3) < 0)
                return false;
        /* Even when the signal fails, a stray one may have woken the base:
         * its answer tells. A dead base's end of the link is closed, which
         * ends the wait at once. */
        (void)kill(pid, SIGCONT); /* stopped with the rest, or by guest code */
        (void)kill(pid, SIGUSR2);
        char answer = read_answer(base_link);
        drop_fd(&base_link);
        base_pid = -1;
        if (answer == 'y') {
                /* The base ends as soon as its clone runs; reaped here when
                 * this process made it, by pid 1 otherwise. One that guest
                 * code stopped on its way out is waited for a bounded time,
                 * then killed. */
                int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
                struct pollfd p = {pfd, POLLIN, 0};
                if (pfd >= 0 && poll(&p, 1, SESSION_GONE_S * 1000) <= 0)
                        syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
                if (pfd >= 0) {
                        while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
                                ;
                        close(pfd);
                }
                gave_base = true;
                tpl_reply(chan, json_pack("{s:s, s:i, s:b}", WIRE_KEY_OP, WIRE_OP_FORK, WIRE_KEY_ID,
                                          (int)pid, WIRE_KEY_BASE, 1));
                return true;
        }
        if (kill(pid, SIGKILL) == 0)
                wait_reaped(tpl, pid);
        tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                  "the cell base could not become the fork"));
        return true;
}

/* Contract: "fork", in the active process of a handle: a new handle with a
 * copy of this interpreter, in the same copy (namespaces, /tmp, /output,
 * /input overlay, cgroup). The host's fds follow the frame. When msg names
 * this process's cell base, the base, which holds this interpreter's state
 * as the last cell left it, becomes the fork (fork_from_base); otherwise
 * the new process is a clone with CLONE_PARENT (a child of pid 1, which
 * reaps it, like every active process). Either way it gets the three fds
 * as its channel, stdout and stderr, and a session id of its own, and
 * announces itself on its own channel. Returns true in a clone; here it
 * returns false, having told the host the new process's pid, or why there
 * is none. */
bool tpl_session_fork(const struct template_state *tpl, int chan, json_t *msg)
{
        int fds[3];
        if (recv_fork_fds(chan, fds, 0) < 0)
                _exit(0); /* the host broke the protocol: it sees the session end */
        json_int_t want = json_integer_value(json_object_get(msg, WIRE_KEY_BASE));
        if (want > 1 && want == base_pid && base_link >= 0 && fork_from_base(tpl, chan, fds)) {
                for (int i = 0; i < 3; i++)
                        close(fds[i]);
                return false;
        }
        guest_before_fork();
        long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0) {
                /* The parent's cell base is not the clone's. */
                link_forget();
                become_fork(fds);
                guest_after_fork_child(COPY_CHANNEL_FD);
                return true;
        }
        int e = errno;
        guest_after_fork_parent();
        for (int i = 0; i < 3; i++)
                close(fds[i]);
        if (pid < 0)
                tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                          strerror(e)));
        else
                tpl_reply(chan, json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_FORK, WIRE_KEY_ID,
                                          (int)pid));
        return false;
}

/* "leave" {"sid"}, in the active process of a sibling of the handle that
 * is closed: ends every process of that handle's session id and waits until
 * pid 1 has reaped them all (so that none is left even in /proc when the
 * host's close returns), then says so. Its own session id is refused. */
void tpl_session_leave(const struct template_state *tpl, int chan, json_t *msg)
{
        pid_t sid = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_SID));
        _cleanup_json_ json_t *none = json_array();
        if (sid > 1 && sid != getsid(0) && none &&
            wait_until_gone(tpl, none, NULL, 0, true, sid) == 0)
                tpl_reply(chan, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_LEAVE));
        else
                tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                          "the handle's processes did not end"));
}

/* Whether some process of the copy other than pid 1 and this one can still
 * run: one that is neither stopped nor dead. A process asleep in the kernel
 * without a way out ('D', such as the parent of a stopped vfork child) runs
 * no code either and does not count. */
static bool others_running(void)
{
        _cleanup_closedir_ DIR *d = opendir("/proc");
        if (!d)
                return false;
        pid_t self = getpid();
        struct dirent *de;
        while ((de = readdir(d))) {
                pid_t pid = (pid_t)atoi(de->d_name);
                if (pid <= 1 || pid == self)
                        continue;
                char st = proc_state(pid, NULL);
                if (st == 'R' || st == 'S')
                        return true;
        }
        return false;
}

/* Contract: at the end of a cell, in the handle's active process, before it
 * says the cell ended: every other process of the copy but pid 1 is
 * stopped, so that no process the guest left behind uses a CPU or memory
 * between cells, however it forks (tpl_session_thaw continues them before
 * the next cell). kill(-1) from a process other than pid 1 signals every
 * process of its PID namespace but pid 1 and the caller in one pass under
 * the kernel's task-list lock, which fork takes to add its child: a process
 * forking meanwhile either has its child in the list, or finds the stop
 * pending and restarts the fork once continued. So a chain of children,
 * each forking the next, cannot outrun the stop; the pass is repeated while
 * a process still runs (one continued by a process that the same pass
 * stopped an instant later), for at most SESSION_FREEZE_MS. No privilege is
 * needed: every process of the copy is the guest's uid.
 *
 * Stopped with the rest: the cell bases and snapshots, which sleep anyway
 * and are continued before they are woken (the host for a rollback,
 * tpl_session_restore, fork_from_base); and the active processes of the
 * sibling handles, which the host continues before it writes to them
 * (session.c). The guest's threads in this process are not stopped: they
 * wait for the interpreter's lock, which this thread holds between cells. */
#define SESSION_FREEZE_MS 200
void tpl_session_freeze(void)
{
        uint64_t deadline = al_now_ns() + SESSION_FREEZE_MS * 1000000ull;
        do {
                if (kill(-1, SIGSTOP) < 0 && errno == ESRCH)
                        return; /* nothing else in the copy */
                if (!others_running())
                        return;
                sched_yield();
        } while (al_now_ns() < deadline);
}

void tpl_session_thaw(json_t *msg)
{
        json_t *spare = json_object_get(msg, WIRE_KEY_SPARE);
        /* Without siblings every other process of the copy is this
         * handle's, and all were stopped when the last cell ended: one
         * kill(-1) continues them, with no /proc walk (nor a fd, which the
         * guest may have used up). */
        if (json_array_size(spare) == 0) {
                (void)kill(-1, SIGCONT);
                return;
        }
        _cleanup_closedir_ DIR *d = opendir("/proc");
        if (!d)
                return;
        pid_t self = getpid();
        struct dirent *de;
        while ((de = readdir(d))) {
                pid_t pid = (pid_t)atoi(de->d_name), sid = -1;
                if (pid <= 1 || pid == self)
                        continue;
                if (proc_state(pid, &sid) == 'T' && !spared_sid(sid, spare))
                        kill(pid, SIGCONT);
        }
}
