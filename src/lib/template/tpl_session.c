/* A copy as a session: its pid 1, which reaps; the active process, which
 * holds the interpreter; the snapshots, frozen forks of it that a restore
 * wakes to make the next active process; and the waits that make sure an
 * old state's processes are gone before a new one speaks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/channel.h"
#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

/* A new active session process announces itself with a pidfd of itself, so
 * the host notices at once when the state it talks to has died. */
static void announce_active(int chan, const char *op)
{
        int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (self < 0 || tpl_send_fds(chan, COPY_ACTIVE, NULL, &self, 1) < 0)
                _exit(0);
        close(self);
        tpl_reply(chan, json_pack("{s:s}", WIRE_KEY_OP, op));
}

static pid_t fork_interpreter(void)
{
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0)
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
 * nothing of it is left even in /proc. It sleeps between checks until pid
 * 1 reaps something or a child of this process exits, never on a timer;
 * -ETIMEDOUT after SESSION_GONE_S if something will not go. */
#define SESSION_GONE_S 10
static int wait_until_gone(const struct template_state *tpl, json_t *keep, pid_t only,
                           bool kill_them)
{
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
        if (!op || strcmp(op, WIRE_OP_RESTORE) != 0 || !json_is_array(keep) ||
            wait_until_gone(tpl, keep, 0, true) < 0)
                _exit(0);
        json_decref(msg);
}

/* A snapshot: a frozen copy of the interpreter at the moment it was taken.
 * It sleeps until a restore wakes it (SIGUSR1, blocked since before the
 * fork), then starts the new active process and sleeps again, so the same
 * snapshot can be restored any number of times. Returns in the new active
 * process, once the old active process (the sender of SIGUSR1) is gone.
 *
 * The new active process is made with CLONE_PARENT: a child of the
 * snapshot's parent, never of the snapshot, which never reaps. So every
 * process a session ends is reaped by pid 1 in the end, and none lingers
 * as a zombie of a sleeping snapshot. */
static void snapshot_wait(const struct template_state *tpl, int chan)
{
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        for (;;) {
                siginfo_t si;
                if (sigwaitinfo(&set, &si) < 0)
                        continue;
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
                        guest_after_fork_child(COPY_CHANNEL_FD);
                        sigprocmask(SIG_UNBLOCK, &set, NULL);
                        if (from_host) {
                                host_rollback(tpl, chan);
                                return;
                        }
                        if (wait_until_gone(tpl, NULL, si.si_pid, false) < 0)
                                _exit(0); /* the host sees the session end */
                        return;
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
        int rp[2];
        if (pipe2(rp, O_NONBLOCK | O_CLOEXEC) < 0)
                _exit(1);
        tpl->reap_wait = rp[0];
        tpl->reap_notify = rp[1];
        pid_t pid = fork_interpreter();
        if (pid < 0)
                _exit(1);
        if (pid > 0)
                session_root(tpl, chan);
        close(tpl->reap_notify);
        tpl->reap_notify = -1;
        guest_set_session();
        announce_active(chan, WIRE_OP_SESSION);
}

/* "snapshot": forks a frozen copy of the interpreter and tells the host
 * its id, after a pidfd of it (so that the host can wake it when this
 * process is dead: a rollback). Returns in the active process, true when it
 * took the snapshot, and, each time the snapshot is restored, in a new
 * active process made from it (snapshot_wait), which has announced itself,
 * false. */
bool tpl_session_snapshot(const struct template_state *tpl, int chan)
{
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigprocmask(SIG_BLOCK, &set, &old);
        pid_t pid = fork_interpreter();
        if (pid == 0) {
                snapshot_wait(tpl, chan);
                announce_active(chan, WIRE_OP_RESTORED);
                return false;
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        int e = errno;
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
                return false;
        }
        close(sfd);
        tpl_reply(chan,
                  json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT, WIRE_KEY_ID, (int)pid));
        return true;
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
        if (id > 1 && kept_pid(id, keep) && wait_until_gone(tpl, keep, 0, true) == 0 &&
            kill(id, SIGUSR1) == 0)
                _exit(0);
        tpl_reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR, WIRE_KEY_ERROR,
                                  "the snapshot is gone"));
}

/* "drop": the snapshot msg names is no longer wanted. */
void tpl_session_drop(const struct template_state *tpl, json_t *msg)
{
        pid_t id = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_ID));
        if (id > 1 && id != getpid() && kill(id, SIGKILL) == 0)
                wait_reaped(tpl, id);
}
