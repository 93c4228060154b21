/* The host side of the namespace sandbox: staging, starting the template,
 * keeping a pre-started copy ready, running code in a copy, serving its tool
 * and HTTP requests, enforcing the wall-clock limit, and capturing /output.
 *
 * Nothing a guest sends is trusted: frames are capped and parsed with
 * jansson, /output is read through the fd the copy handed over (never a
 * path), and the run's status comes from how the process ended, not from
 * what it claimed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/cgroup.h"
#include "config/config.h"
#include "config/limits.h"
#include "fsx/fsx.h"
#include "config/pypath.h"
#include "sandbox/sandbox.h"
#include "sandbox/run_trace.h"
#include "template/template.h"
#include "sandbox/selfexe.h"
#include "core/channel.h"
#include "core/util.h"
#include "core/wire.h"
#include "sandbox/input.h"

#define MAX_CODE_BYTES   (16u << 20)
#define TEMPLATE_START_S 120.0
#define COPY_START_S     30.0
/* A pause between two runs longer than this ends a burst: the host keeps
 * one copy coming again (see want_ready). */
#define BURST_PAUSE_NS (500ull * 1000 * 1000)
/* Ready copies together may hold at most this share of the machine's
 * available memory (1/BURST_MEMORY_SHARE), over the first. */
#define BURST_MEMORY_SHARE 4
#define SANDBOX_MIN_FDS    32
#define MAX_DYING          16
/* How long the closer waits for a retired copy to exit before it closes
 * it anyway and leaves its reaping to reap_dying_locked. */
#define RETIRED_EXIT_MS 1000

struct airlock_sandbox {
        airlock_config *cfg;
        fsx_staging staging; /* the staged /input, removed at close */
        /* The staged tree (a fd of the staging area's "input", not the
         * detached clone the template attaches) and its manifest, kept for
         * the next sandbox of this configuration to reuse (-1 and NULL
         * when nothing was staged). Read-only after staging. */
        int staged_fd;
        fsx_manifest *manifest;
        bool yielded; /* sbx_sandbox_yield_staging: the next build takes the tree */
        /* One template, many workspaces (sbx_sandbox_new_late): nothing is
         * staged with the sandbox, each copy gets its run's input when it
         * is handed out; without root, through the mounter. */
        bool late_input;
        /* airlock_sandbox_new_oneshot: the template prepares nothing for a
         * run after the first (template_params.single_run). */
        bool oneshot;
        sbx_mounter mounter;
        pid_t tpl_pid;
        int ctl;
        /* The request socket: copies asked for once a run's copy has ended
         * its run (sbx_run_ended) or exited. */
        int req_w;
        /* Requests wait in the request socket that no CTL_NUDGE has
         * served yet (request_copy_later_locked, sbx_run_ended). */
        bool later_asked;
        uid_t guest_uid;
        gid_t guest_gid;
        pthread_mutex_t lock; /* ctl, ready list, pending count */
        copy *ready[8];
        size_t n_ready;
        unsigned pending;
        /* Bursts: the copies the host keeps coming, started or ready, from
         * 1 up to the ready_copies limit. Each run that finds its copy not
         * ready yet (calls come faster than one copy is prepared) adds
         * one, while the ready copies fit in memory (adjust_ready), and each
         * run that finds it ready takes one off; a pause of BURST_PAUSE_NS
         * between two runs takes it back to 1 and ends the copies over it
         * (sbx_take_copy, sbx_sandbox_trim). last_take_ns: when the last
         * copy was taken. */
        unsigned want_ready;
        uint64_t last_take_ns;
        /* The last run found its copy not ready: the copies asked for now
         * skip their warming (CTL_SPAWN_BURST). */
        bool last_late;
        bool broken;
        /* Pids of copies killed and closed, whose exit (the teardown of
         * a whole interpreter, milliseconds here) nobody waits for: reaped
         * by the closer after each copy it closes, without one while the
         * next run's code runs (sbx_reap_dying), when half of the slots
         * are taken, and at close. A zombie's pid cannot be reused, so no
         * fd is held for them. */
        struct {
                pid_t pid;
                unsigned cg; /* its cgroup, removed once it is reaped */
        } dying[MAX_DYING];
        size_t n_dying;
        /* The closer (sbx_copy_retire): a thread of the sandbox's own,
         * started at the first single run's end, that closes and reaps each
         * run's copy once it has exited, while the caller has the run's
         * result. retired: the copies it has yet to close, killed already;
         * closer_wake: signalled when one is added and to stop it. */
        pthread_t closer;
        pthread_cond_t closer_wake;
        bool closer_started;
        bool closer_stop;
        copy *retired[MAX_DYING];
        size_t n_retired;
        /* Copies' cgroups whose removal failed (EBUSY for a moment after
         * the last task went), retried at the next reaping. */
        unsigned stale_cg[MAX_DYING];
        size_t n_stale_cg;
        cg_sandbox cg; /* memory and process limits on the sandbox, where available */
        /* --python-path: the guest's sys.path entries, warnings about the
         * folders (one line each, or NULL), detached mounts of the folders
         * for the template (-1: bound by path), and what the guest can
         * import, learned from a run on the first describe. */
        json_t *sys_path;
        char *warnings;
        int pypath_fd[PYPATH_MAX];
        /* The upstream MCP servers (mcp/), started when the sandbox is
         * built, stopped when it closes; their stubs' folder is the last
         * entry of cfg->python_paths. NULL without servers. */
        mcp_hub *mcp;
        char *mcp_warnings;
        json_t *inventory;
};

/* Reaps the dying copies: all of them with block, else those already
 * gone. Caller holds sb->lock. */
/* Removes the cgroup of a copy that is gone, or keeps it for a retry.
 * Caller holds sb->lock. */
static void remove_copy_cgroup_locked(airlock_sandbox *sb, unsigned cg)
{
        if (!cg || cg_sandbox_remove_copy(&sb->cg, cg) == 0)
                return;
        if (sb->n_stale_cg < MAX_DYING)
                sb->stale_cg[sb->n_stale_cg++] = cg;
}

static void reap_dying_locked(airlock_sandbox *sb, bool block)
{
        size_t kept = 0;
        size_t stale = sb->n_stale_cg;
        sb->n_stale_cg = 0;
        for (size_t i = 0; i < stale; i++)
                remove_copy_cgroup_locked(sb, sb->stale_cg[i]);
        for (size_t i = 0; i < sb->n_dying; i++) {
                /* The copy is our child (CLONE_PARENT): reap it. */
                pid_t w;
                while ((w = waitpid(sb->dying[i].pid, NULL, __WALL | (block ? 0 : WNOHANG))) < 0 &&
                       errno == EINTR)
                        ;
                if (w == 0)
                        sb->dying[kept++] = sb->dying[i];
                else
                        remove_copy_cgroup_locked(sb, sb->dying[i].cg);
        }
        sb->n_dying = kept;
}

/* Tells the template that the host is done with a copy's cgroup (it has
 * read the copy's OOM counter), which the template then removes, off every
 * run's path. False when the request socket is full: the host then removes
 * the cgroup itself once the copy is reaped. Caller holds sb->lock. */
static bool cgroup_done_locked(airlock_sandbox *sb, unsigned cg)
{
        if (!cg)
                return true;
        unsigned char rec[5] = {REQ_DONE, (unsigned char)cg, (unsigned char)(cg >> 8),
                                (unsigned char)(cg >> 16), (unsigned char)(cg >> 24)};
        return send(sb->req_w, rec, sizeof(rec), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(rec);
}

/* Closes the fds of copy c that are its own, all but its pidfd, and
 * marks them closed: no lock needed. */
static void copy_close_fds(copy *c)
{
        close_fd(&c->chan);
        close_fd(&c->out_r);
        close_fd(&c->err_r);
        close_fd(&c->oomfd);
        close_fd(&c->cpufd);
        close_fd(&c->peakfd);
        close_fd(&c->input_upper);
        close_fd(&c->input_lower);
        close_fd(&c->input_tree);
}

/* Closes copy c, killing it first with kill_it; its reaping is left to
 * reap_dying_locked. Caller holds sb->lock. */
static void copy_close_locked(airlock_sandbox *sb, copy *c, bool kill_it)
{
        if (!c)
                return;
        if (c->pidfd >= 0) {
                if (kill_it)
                        syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
                if (sb->n_dying == MAX_DYING)
                        reap_dying_locked(sb, true);
                sb->dying[sb->n_dying].pid = c->pid;
                sb->dying[sb->n_dying++].cg = cgroup_done_locked(sb, c->cg) ? 0 : c->cg;
                close(c->pidfd);
        } else if (!cgroup_done_locked(sb, c->cg)) {
                /* Reaped already (sbx_copy_end). */
                remove_copy_cgroup_locked(sb, c->cg);
        }
        copy_close_fds(c);
        free(c);
}

void sbx_copy_close(airlock_sandbox *sb, copy *c, bool kill_it)
{
        pthread_mutex_lock(&sb->lock);
        copy_close_locked(sb, c, kill_it);
        pthread_mutex_unlock(&sb->lock);
}

void sbx_copy_end(airlock_sandbox *sb, copy *c)
{
        if (!c)
                return;
        /* Killing pid 1 of the copy's PID namespace ends every process in
         * it, and pid 1 exits only after all of them have: once reaped,
         * nothing of the copy is left. */
        if (c->pidfd >= 0) {
                syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
                siginfo_t si;
                while (waitid((idtype_t)3 /* P_PIDFD */, (id_t)c->pidfd, &si, WEXITED | __WALL) <
                           0 &&
                       errno == EINTR)
                        ;
                close(c->pidfd);
                c->pidfd = -1;
        }
        sbx_copy_close(sb, c, false);
}

/* The closer's work on one retired copy: it waits for the copy's exit
 * (its kill was sent when it was retired) unless the sandbox is closing,
 * reaps it through its pidfd, then closes it. A copy that has not exited
 * within RETIRED_EXIT_MS is closed all the same and left to
 * reap_dying_locked, as a copy closed on a run's path is. Called without
 * sb->lock, which it takes for the sandbox's part of the close. */
static void closer_close(airlock_sandbox *sb, copy *c, bool wait)
{
        if (c->pidfd >= 0) {
                struct pollfd p = {c->pidfd, POLLIN, 0};
                siginfo_t si = {0};
                int n;
                while ((n = poll(&p, 1, wait ? RETIRED_EXIT_MS : 0)) < 0 && errno == EINTR)
                        ;
                /* Reaped here only once it has exited: WNOHANG never waits
                 * on a copy whose exit is stuck. */
                if (n > 0 &&
                    waitid((idtype_t)3 /* P_PIDFD */, (id_t)c->pidfd, &si,
                           WEXITED | WNOHANG | __WALL) == 0 &&
                    si.si_pid != 0) {
                        close(c->pidfd);
                        c->pidfd = -1;
                }
        }
        copy_close_fds(c);
        pthread_mutex_lock(&sb->lock);
        copy_close_locked(sb, c, false);
        reap_dying_locked(sb, false);
        pthread_mutex_unlock(&sb->lock);
}

static void *closer_main(void *arg)
{
        airlock_sandbox *sb = arg;
        pthread_mutex_lock(&sb->lock);
        for (;;) {
                while (!sb->n_retired && !sb->closer_stop)
                        pthread_cond_wait(&sb->closer_wake, &sb->lock);
                if (!sb->n_retired)
                        break;
                copy *c = sb->retired[0];
                memmove(sb->retired, sb->retired + 1, --sb->n_retired * sizeof(*sb->retired));
                bool wait = !sb->closer_stop;
                pthread_mutex_unlock(&sb->lock);
                closer_close(sb, c, wait);
                pthread_mutex_lock(&sb->lock);
        }
        pthread_mutex_unlock(&sb->lock);
        return NULL;
}

/* Starts the closer unless it runs: false when it cannot. The thread takes
 * no signal, so that the caller's handlers keep running where they did.
 * Caller holds sb->lock. */
static bool closer_start_locked(airlock_sandbox *sb)
{
        if (sb->closer_started)
                return true;
        if (sb->closer_stop)
                return false;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        sb->closer_started = pthread_create(&sb->closer, NULL, closer_main, sb) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        /* Not started (out of threads): copies are closed on the run's
         * path, as they are for a one-shot sandbox. */
        if (!sb->closer_started)
                sb->closer_stop = true;
        return sb->closer_started;
}

/* Contract: ends a single run's copy c once the run has its result: the
 * copy is killed here, at once, as sbx_copy_close(sb, c, true) would, so
 * that nothing of the run goes on after it; its fds are closed, the
 * template told that its cgroup is free, and the copy reaped by the closer
 * once it has exited, off the run's path (some 60 us of system calls on
 * the 2-core test machine, which a run's own copy, woken on the host's
 * CPU, would otherwise delay until after its run). A one-shot sandbox has
 * no closer (its one run would pay for a thread), nor does one whose
 * closer has MAX_DYING copies waiting: the copy is then closed here. */
void sbx_copy_retire(airlock_sandbox *sb, copy *c)
{
        if (!c)
                return;
        if (c->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
        pthread_mutex_lock(&sb->lock);
        bool queued = !sb->oneshot && sb->n_retired < MAX_DYING && closer_start_locked(sb);
        if (queued)
                sb->retired[sb->n_retired++] = c;
        else
                copy_close_locked(sb, c, false);
        pthread_mutex_unlock(&sb->lock);
        if (queued)
                pthread_cond_signal(&sb->closer_wake);
}

/* Waits until fd has one of events (poll) or the deadline (monotonic ns)
 * passes. */
static int wait_events(int fd, short events, uint64_t deadline)
{
        for (;;) {
                uint64_t now = al_now_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                struct pollfd p = {fd, events, 0};
                int ms = (int)MIN((deadline - now) / 1000000 + 1, (uint64_t)INT32_MAX);
                int r = poll(&p, 1, ms);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r > 0)
                        return 0;
        }
}

/* Waits until fd is readable or the deadline (monotonic ns) passes. */
static int wait_readable(int fd, uint64_t deadline)
{
        return wait_events(fd, POLLIN, deadline);
}

/* Turns a template's "E<errno> <feature>|<message>" into an error record. */
static int template_error(const char *msg, size_t len, airlock_error *err)
{
        char buf[1100];
        snprintf(buf, sizeof(buf), "%.*s", (int)MIN(len, sizeof(buf) - 1), msg);
        int code = atoi(buf + 1);
        char *sp = strchr(buf, ' ');
        char *bar = sp ? strchr(sp, '|') : NULL;
        const char *feature = "sandbox", *text = buf + 1;
        if (sp && bar) {
                *bar = '\0';
                feature = sp + 1;
                text = bar + 1;
        }
        if (code <= 0)
                code = EIO;
        /* A preload that fails and a --python-path folder the guest
         * cannot read are the configuration's fault, not the kernel's. */
        if (strcmp(feature, "preload") == 0 || strcmp(feature, "python-path") == 0) {
                al_error(err, -code, NULL, "%s", text);
                return -code;
        }
        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -code, NULL,
                             "sandbox unavailable (%s): %s", feature, text);
}

static int write_id_map(pid_t pid, const char *file, const char *map)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return al_write_full(fd, map, strlen(map));
}

/* The template's parameters (template_params in core/wire.h) as JSON text:
 * the limits the template needs, from the limits table, and the rest of
 * what it cannot learn by itself. NULL when out of memory. */
static char *params_json(const airlock_sandbox *sb, bool has_input, bool input_tree)
{
        /* The sizes of /output and /tmp and of the largest file are
         * resolved here: the template does not get max_output_total. */
        airlock_limits l = sb->cfg->limits;
        limits_resolve_sizes(&l);
        json_t *pre = json_array();
        for (size_t i = 0; i < sb->cfg->n_preloads; i++)
                json_array_append_new(pre, json_string(sb->cfg->preloads[i]));
        json_t *paths = json_array(), *fds = json_array();
        for (size_t i = 0; i < sb->cfg->n_python_paths; i++) {
                json_array_append_new(paths, json_string(sb->cfg->python_paths[i]));
                json_array_append_new(fds, json_boolean(sb->pypath_fd[i] >= 0));
        }
        _cleanup_json_ json_t *j =
            json_pack("{s:b, s:b, s:b, s:b, s:b, s:I, s:I, s:i, s:b, s:b, s:o, s:o, s:o, s:O}",
                      "has_input", has_input, "late_input", sb->late_input, "single_run",
                      sb->oneshot, "input_writable", sb->cfg->input_writable, "input_tree",
                      input_tree, "guest_uid", (json_int_t)sb->guest_uid, "guest_gid",
                      (json_int_t)sb->guest_gid, "cgroup", sb->cg.enabled ? (sb->cg.v2 ? 2 : 1) : 0,
                      "cgroup_cpu", sb->cg.enabled && !sb->cg.v2 && sb->cg.n > 2, "auto_figures",
                      !sb->cfg->no_auto_figures, "preloads", pre, "python_paths", paths,
                      "python_path_fds", fds, "sys_path", sb->sys_path);
        if (!j || limits_to_json(&l, j) < 0)
                return NULL;
        return json_dumps(j, JSON_COMPACT);
}

/* Reaps a template that closed its control socket during setup and
 * explains why, when its status says so (selfexe_exit_error); returns 0 when
 * it does not. The socket closes when the process exits, so its exit status
 * is set by then; SIGKILL first only bounds the wait, should the template
 * somehow live on without it (a signal does not change the status of a
 * process that is exiting). *pid is 0 afterwards. */
static int template_setup_exit(pid_t *pid, airlock_error *err)
{
        int status;
        pid_t r;
        (void)kill(*pid, SIGKILL);
        while ((r = waitpid(*pid, &status, 0)) < 0 && errno == EINTR)
                ;
        if (r != *pid)
                return 0;
        *pid = 0;
        return selfexe_exit_error(status, err);
}

/* In the child of start_template, async-signal-safe: tells the host that
 * the template could not join its cgroup, in the template's own error
 * message (CTL_ERROR), and exits. */
_Noreturn static void join_failed(int ctl, int e)
{
        static const char text[] = " cgroup|cannot place the sandbox's template in its cgroup";
        char msg[24 + sizeof(text)];
        char *p = msg;
        *p++ = CTL_ERROR;
        p = al_put_decimal(p, e > 0 ? e : EIO);
        memcpy(p, text, sizeof(text) - 1);
        p += sizeof(text) - 1;
        (void)!send(ctl, msg, (size_t)(p - msg), MSG_NOSIGNAL);
        _exit(125);
}

/* Contract: the child side of start_template, in a child forked from a
 * process that may have threads: async-signal-safe calls only until
 * execve. It first joins the template's cgroup through the files the host
 * opened (join), or tells the host why it could not and exits. It puts
 * the template's fds on their fixed numbers (the control and request
 * sockets, the staged input, the cgroups' folders, the --python-path
 * folders' mounts), closes every other one but the program's memfd
 * (close-on-exec), clears the signal mask and executes that memfd with a
 * fixed environment. Never returns. */
_Noreturn static void template_child(const airlock_sandbox *sb, int exe, int ctl_tpl, int req_tpl,
                                     int input_fd, const int join[CG_HIERARCHIES])
{
        /* Only async-signal-safe calls until execve. First into the
         * template's cgroup, before the program runs: the child of fork
         * is one thread, so "0" written to each join file moves all of
         * it, without the grace period a move of another process waits
         * for (cg_sandbox_join_files). */
        for (int i = 0; i < CG_HIERARCHIES; i++)
                if (join[i] >= 0 && write(join[i], "0", 1) != 1)
                        join_failed(ctl_tpl, errno);
        /* Each fd is first moved above the fixed numbers, where none of
         * them can overwrite another on its way. */
        const int top = TEMPLATE_PYPATH_FD + PYPATH_MAX;
        const size_t n_py = sb->cfg->n_python_paths;
        int ctl = fcntl(ctl_tpl, F_DUPFD, top);
        int in = input_fd >= 0 ? fcntl(input_fd, F_DUPFD, top) : -1;
        int rq = fcntl(req_tpl, F_DUPFD, top);
        int cg[CG_HIERARCHIES] = {-1, -1, -1};
        for (int i = 0; sb->cg.enabled && i < sb->cg.n; i++)
                if ((cg[i] = fcntl(sb->cg.dirfd[i], F_DUPFD, top)) < 0)
                        _exit(127);
        int py[PYPATH_MAX];
        for (size_t i = 0; i < n_py; i++) {
                py[i] = sb->pypath_fd[i] >= 0 ? fcntl(sb->pypath_fd[i], F_DUPFD, top) : -1;
                if (sb->pypath_fd[i] >= 0 && py[i] < 0)
                        _exit(127);
        }
        /* The program's memfd stays open, close-on-exec, for
         * execveat; every other fd above the fixed ones goes. */
        int ex = fcntl(exe, F_DUPFD_CLOEXEC, top);
        if (ctl < 0 || rq < 0 || ex < 0 || (input_fd >= 0 && in < 0) ||
            dup2(ctl, TEMPLATE_CTL_FD) < 0 || dup2(rq, TEMPLATE_REQ_FD) < 0)
                _exit(127);
        if (in >= 0) {
                if (dup2(in, TEMPLATE_INPUT_FD) < 0)
                        _exit(127);
        } else {
                close(TEMPLATE_INPUT_FD);
        }
        const int cg_fixed[CG_HIERARCHIES] = {TEMPLATE_CG_FD, TEMPLATE_CG2_FD, TEMPLATE_CG3_FD};
        for (int i = 0; i < CG_HIERARCHIES; i++) {
                if (cg[i] < 0)
                        close(cg_fixed[i]);
                else if (dup2(cg[i], cg_fixed[i]) < 0)
                        _exit(127);
        }
        /* The folders' mounts on TEMPLATE_PYPATH_FD + N; a folder
         * the template binds by its path leaves its number closed. */
        for (size_t i = 0; i < PYPATH_MAX; i++) {
                if (i < n_py && py[i] >= 0) {
                        if (dup2(py[i], TEMPLATE_PYPATH_FD + (int)i) < 0)
                                _exit(127);
                } else {
                        close(TEMPLATE_PYPATH_FD + (int)i);
                }
        }
        syscall(SYS_close_range, top, ex - 1, 0);
        syscall(SYS_close_range, ex + 1, ~0u, 0);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        char *argv[] = {TEMPLATE_ARGV0, NULL};
        /* Resolve every symbol once, in the template: with lazy
         * binding each copy would redo the lookups and fault in the
         * pages they write. Besides that, the guest sees a fixed
         * PATH, HOME and LANG: nothing of our environment goes in. */
        char *envp[] = {"LD_BIND_NOW=1", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                        "LANG=C.UTF-8", NULL};
        syscall(SYS_execveat, ex, "", argv, envp, AT_EMPTY_PATH);
        _exit(127);
}

/* Starts the template: fork, then exec this program afresh from its sealed
 * memfd copy (so no host memory and no host path reaches the sandbox) with
 * the control socket, the staged input and the cgroup directories on fixed
 * fds. Writes the id maps when the template has made its user namespace,
 * then waits until the interpreter is initialised. */
static int start_template(airlock_sandbox *sb, int input_fd, bool input_tree, airlock_error *err)
{
        /* The control socket and the request socket, each the host's end
         * and the template's. */
        _cleanup_close_ int ctl_host = -1, ctl_tpl = -1, req_tpl = -1, req_host = -1;
        int sv[2], req[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return al_error(err, -errno, NULL, "socketpair: %m");
        ctl_host = sv[0];
        ctl_tpl = sv[1];
        /* Non-blocking at both ends: the host never waits to ask, and the
         * template reads what is there. A socket rather than a pipe, so
         * that asking a dead template raises no SIGPIPE (MSG_NOSIGNAL). */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, req) < 0)
                return al_error(err, -errno, NULL, "socketpair: %m");
        req_tpl = req[0];
        req_host = req[1];
        /* A sealed memfd copy of this program, not /proc/self/exe: the
         * template's exe link and maps then name no host path (selfexe.c). */
        int exe = selfexe_fd(err);
        if (exe < 0)
                return exe;
        _cleanup_(cg_join_files_closep) int join[CG_HIERARCHIES] = {-1, -1, -1};
        if (sb->cg.enabled) {
                int r = cg_sandbox_join_files(&sb->cg, join);
                if (r < 0)
                        return al_error(err, r, NULL, "cannot place the sandbox in its cgroup: %s",
                                        strerror(-r));
        }
        _cleanup_free_ char *params = params_json(sb, input_fd >= 0, input_tree);
        /* Killed and reaped on every way out but success. */
        _cleanup_pid_ pid_t pid = params ? fork() : -1;
        if (pid < 0) {
                int e = params ? errno : ENOMEM;
                return al_error(err, -e, NULL, "fork: %s", strerror(e));
        }
        if (pid == 0) {
                template_child(sb, exe, ctl_tpl, req_tpl, input_fd, join);
        }
        /* The template's ends go now: a template that dies during setup
         * must show as the end of the control socket. */
        close(TAKE_FD(ctl_tpl));
        close(TAKE_FD(req_tpl));
        sb->ctl = TAKE_FD(ctl_host);
        sb->req_w = TAKE_FD(req_host);
        if (send(sb->ctl, params, strlen(params), MSG_NOSIGNAL) < 0) {
                int e = errno;
                if (e == EPIPE || e == ECONNRESET) {
                        int r = template_setup_exit(&pid, err);
                        if (r < 0)
                                return r;
                }
                return al_error(err, -e, NULL, "cannot talk to the sandbox template: %s",
                                strerror(e));
        }

        uint64_t deadline = al_now_ns() + (uint64_t)(TEMPLATE_START_S * 1e9);
        char buf[1100];
        for (;;) {
                int r = wait_readable(sb->ctl, deadline);
                if (r < 0)
                        return al_error(err, r, NULL,
                                        "the sandbox template did not start within %.0f s",
                                        TEMPLATE_START_S);
                ssize_t n = recv(sb->ctl, buf, sizeof(buf), 0);
                if (n <= 0) {
                        int dead = template_setup_exit(&pid, err);
                        if (dead < 0)
                                return dead;
                        return al_error_kind(
                            err, AIRLOCK_ERROR_SANDBOX, -ECHILD, NULL,
                            "sandbox unavailable: the template exited during setup "
                            "(could not execute the program's memfd copy?)");
                }
                if (buf[0] == CTL_ERROR)
                        return template_error(buf, (size_t)n, err);
                if (buf[0] == CTL_READY) {
                        sb->tpl_pid = TAKE_PID(pid);
                        return 0;
                }
                if (buf[0] != CTL_USERNS)
                        return al_error(err, -EPROTO, NULL, "sandbox template protocol error");
                char map[64];
                snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)sb->guest_uid);
                r = write_id_map(pid, "setgroups", "deny\n");
                if (r >= 0 || r == -ENOENT)
                        r = write_id_map(pid, "uid_map", map);
                if (r >= 0) {
                        snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)sb->guest_gid);
                        r = write_id_map(pid, "gid_map", map);
                }
                if (r < 0)
                        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, r, NULL,
                                             "sandbox unavailable (user namespaces): cannot "
                                             "write the id maps: %s",
                                             strerror(-r));
                char go = CTL_GO;
                if (send(sb->ctl, &go, 1, MSG_NOSIGNAL) != 1)
                        return al_error(err, -errno, NULL, "cannot talk to the template: %m");
        }
}

/* sb keeps a fd of its own of the staged tree at fd, with its manifest,
 * for the sandbox that will replace it. Without the fd the manifest is
 * let go: only the next rebuild's reuse needs it, and it then copies. */
static void keep_staged(airlock_sandbox *sb, int fd)
{
        sb->staged_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (sb->staged_fd < 0) {
                fsx_manifest_free(sb->manifest);
                sb->manifest = NULL;
        }
}

/* Stages the workspace and mounts into a fresh staging area in $TMPDIR
 * (or /tmp), reusing the unchanged files of prev's staged copy when prev is
 * not NULL (see sbx_sandbox_new_from). *ret_fd is a fd of the staged tree,
 * or -1 when there is nothing to stage; sb keeps a fd of its own of the
 * tree and the manifest, for the sandbox that will replace it. */
static int stage_inputs(airlock_sandbox *sb, airlock_sandbox *prev, int *ret_fd, airlock_error *err)
{
        const airlock_config *cfg = sb->cfg;
        _cleanup_free_ fsx_source *src = NULL;
        size_t n = 0;
        if (sbx_stage_sources(cfg, &src, &n) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        fsx_limits lim = sbx_stage_limits(cfg);
        uid_t owner = geteuid() == 0 ? sb->guest_uid : (uid_t)-1;
        gid_t group = geteuid() == 0 ? sb->guest_gid : (gid_t)-1;
        int prev_fd = prev ? prev->staged_fd : -1;
        if (prev && prev->yielded && prev->manifest && n == 1 && cfg->workspace) {
                /* prev will never run again and nothing else reads its tree:
                 * it is updated where it stands (the guest ids are prev's,
                 * so kept files keep the right owner). */
                int r = fsx_staging_take(&prev->staging, src, &lim, owner, group, prev->manifest,
                                         &sb->staging, ret_fd, &sb->manifest, NULL, err);
                if (r < 0 || *ret_fd < 0)
                        return r;
                keep_staged(sb, *ret_fd);
                return 0;
        }
        int r = fsx_staging_create(sbx_stage_parent(), src, n, &lim, owner, group, prev_fd,
                                   prev_fd >= 0 ? prev->manifest : NULL, &sb->staging, ret_fd,
                                   &sb->manifest, err);
        if (r < 0 || *ret_fd < 0)
                return r;
        keep_staged(sb, *ret_fd);
        return 0;
}

/* Asks the template for one more copy (the reply is read later). Caller
 * holds sb->lock. */
static int request_copy_locked(airlock_sandbox *sb)
{
        char c = sb->last_late ? CTL_SPAWN_BURST : CTL_SPAWN;
        if (send(sb->ctl, &c, 1, MSG_NOSIGNAL) != 1)
                return -errno;
        sb->pending++;
        return 0;
}

/* Asks for one more copy without waking the template: the request waits
 * in the request socket until the template wakes, which it does when the
 * host has a single run's "end" frame (sbx_run_ended) or any copy exits.
 * For a run's copy, so that the wake-up of the template (tens of
 * microseconds here, more when it sleeps on the other CPU) is not on the
 * run's path before the code. Must come before the copy can exit; a
 * request that still finds the template asleep is served when a run waits
 * for it (CTL_NUDGE). Caller holds sb->lock. */
static int request_copy_later_locked(airlock_sandbox *sb)
{
        char c = sb->last_late ? CTL_SPAWN_BURST : CTL_SPAWN;
        if (send(sb->req_w, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
                return request_copy_locked(sb);
        sb->pending++;
        sb->later_asked = true;
        return 0;
}

/* The host has a single run's "end" frame: the template serves the
 * requests waiting in the request socket now, beside the copy's exit,
 * whose teardown of the copy's namespaces mostly waits for RCU grace
 * periods (docs/performance.md). The copy still counts where it did until
 * it exits (the template's live copies, its cgroup); only when the
 * requested copies start moves. A guest that sends "end" early only ends
 * its own run sooner: the template starts no copy the host did not ask
 * for. */
void sbx_run_ended(airlock_sandbox *sb)
{
        pthread_mutex_lock(&sb->lock);
        if (sb->later_asked && !sb->broken) {
                char c = CTL_NUDGE;
                (void)!send(sb->ctl, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                sb->later_asked = false;
        }
        pthread_mutex_unlock(&sb->lock);
}

/* Tells a copy that is still preparing that a caller waits for it: it
 * skips the warming it has not begun (tpl_copy_main), and reads
 * the frame as one it ignores once it serves. */
static void hurry_copy(int chan)
{
        json_t *msg = json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_HURRY);
        if (msg)
                (void)channel_send(chan, msg);
        json_decref(msg);
}

/* Receives the message that announces a copy on fd: from the template on
 * the control socket (nudge, the same socket, wakes it if the request is
 * still waiting in the request socket) or from the copy itself on its
 * channel (hurry). It is usually there already, so the first try does not
 * block; otherwise a run is waiting, which *ret_late tells (may be NULL).
 * The template and copies run at the host's own priority throughout: a
 * caller never waits for work that a busy machine could starve. */
static ssize_t receive_for_copy(int fd, int nudge, bool hurry, al_watch *w, char *buf, size_t len,
                                int *fds, size_t max_fds, size_t *ret_nfds, bool *ret_late)
{
        ssize_t n = al_recv_fds(fd, buf, len, fds, max_fds, ret_nfds, MSG_DONTWAIT);
        if (n != -EAGAIN)
                return n;
        if (ret_late)
                *ret_late = true;
        al_watch_fire(w);
        if (nudge >= 0) {
                char c = CTL_NUDGE;
                (void)!send(nudge, &c, 1, MSG_NOSIGNAL);
        }
        if (hurry)
                hurry_copy(fd);
        int r = wait_readable(fd, al_now_ns() + (uint64_t)(COPY_START_S * 1e9));
        if (r < 0)
                return r;
        return al_recv_fds(fd, buf, len, fds, max_fds, ret_nfds, 0);
}

/* The fds that came with a message: those not taken (TAKE_FD) are closed
 * when the scope is left. */
typedef struct received_fds {
        int fd[7];
        size_t n;
} received_fds;

static void received_fds_close(received_fds *got)
{
        /* al_recv_fds fills the slots it does not use with -1, and n counts
         * every fd that came, the ones it closed itself included. */
        for (size_t i = 0; i < ARRAY_SIZE(got->fd); i++)
                closep(&got->fd[i]);
}

/* Reads one pending copy from the template, firing w (may be NULL) before
 * it waits. Caller holds sb->lock. */
static int receive_copy_locked(airlock_sandbox *sb, al_watch *w, copy **ret, airlock_error *err)
{
        char buf[1100];
        _cleanup_(received_fds_close) received_fds got = {.fd = {-1, -1, -1, -1, -1, -1, -1}};
        ssize_t n = receive_for_copy(sb->ctl, sb->ctl, false, w, buf, sizeof(buf), got.fd,
                                     ARRAY_SIZE(got.fd), &got.n, NULL);
        if (n == -ETIMEDOUT)
                return al_error(err, -ETIMEDOUT, NULL, "the sandbox did not start a copy in time");
        sb->pending--;
        if (n <= 0) {
                sb->broken = true;
                return al_error(err, n < 0 ? (int)n : -ECHILD, NULL,
                                "the sandbox template is gone");
        }
        if (buf[0] == CTL_ERROR)
                return template_error(buf, (size_t)n, err);
        long pid = 0;
        unsigned cg_seq = 0;
        unsigned long usage = 0;
        if (buf[0] == CTL_COPY && (size_t)n < sizeof(buf)) {
                buf[n] = '\0';
                char *end = NULL;
                pid = strtol(buf + 1, &end, 10);
                unsigned long seq = end && *end == ' ' ? strtoul(end + 1, &end, 10) : 0;
                /* The mask of the usage files always comes (template.c,
                 * spawn_copy): a text without one is refused. */
                usage = end && *end == ' ' ? strtoul(end + 1, &end, 10) : 4;
                if (!end || *end || seq > UINT32_MAX || usage > 3)
                        pid = 0;
                cg_seq = (unsigned)seq;
        }
        /* With per-copy cgroups the copy's OOM counter comes too, and the
         * files of its usage that the template could open, which the mask
         * usage names (1: the CPU time, 2: the memory peak). */
        bool has_cpu = usage & 1, has_peak = usage & 2;
        size_t want = sb->cg.enabled ? 5 + has_cpu + has_peak : 4;
        if (!sb->cg.enabled && usage)
                pid = 0;
        if (buf[0] != CTL_COPY || got.n != want || pid <= 0) {
                sb->broken = true;
                return al_error(err, -EPROTO, NULL, "sandbox template protocol error");
        }
        copy *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        c->pid = (pid_t)pid;
        c->chan = TAKE_FD(got.fd[0]);
        c->pidfd = TAKE_FD(got.fd[1]);
        c->out_r = TAKE_FD(got.fd[2]);
        c->err_r = TAKE_FD(got.fd[3]);
        c->oomfd = got.n >= 5 ? TAKE_FD(got.fd[4]) : -1;
        c->cpufd = has_cpu ? TAKE_FD(got.fd[5]) : -1;
        c->peakfd = has_peak ? TAKE_FD(got.fd[5 + has_cpu]) : -1;
        c->input_upper = c->input_lower = c->input_tree = -1;
        c->cg = sb->cg.enabled ? cg_seq : 0;
        if (c->cg > sb->cg.max_copy)
                sb->cg.max_copy = c->cg;
        *ret = c;
        return 0;
}

/* After a burst: ends the copies that the template has announced over
 * want_ready, without waiting for one that it has not (those are taken
 * later). Their memory is the machine's again; their reaping is left to
 * reap_dying_locked. Caller holds sb->lock. */
static void trim_ready_locked(airlock_sandbox *sb)
{
        while (sb->pending > sb->want_ready) {
                struct pollfd p = {sb->ctl, POLLIN, 0};
                copy *c = NULL;
                if (poll(&p, 1, 0) <= 0 || receive_copy_locked(sb, NULL, &c, NULL) < 0)
                        return;
                copy_close_locked(sb, c, true);
        }
}

/* After a pause of BURST_PAUSE_NS since the last copy was taken: one copy
 * coming is enough again. Caller holds sb->lock. */
static void end_burst_locked(airlock_sandbox *sb)
{
        if (sb->want_ready <= 1 || al_now_ns() - sb->last_take_ns <= BURST_PAUSE_NS)
                return;
        sb->want_ready = 1;
        trim_ready_locked(sb);
}

void sbx_reap_dying(airlock_sandbox *sb)
{
        pthread_mutex_lock(&sb->lock);
        /* With a closer, it reaps, off the run's path. */
        if (!sb->closer_started)
                reap_dying_locked(sb, false);
        pthread_mutex_unlock(&sb->lock);
}

void sbx_sandbox_trim(airlock_sandbox *sb)
{
        pthread_mutex_lock(&sb->lock);
        end_burst_locked(sb);
        reap_dying_locked(sb, false);
        pthread_mutex_unlock(&sb->lock);
}

/* The memory a ready copy holds of its own: its cgroup's charge, or
 * without one its anonymous resident pages (an upper bound: some are still
 * shared with the template). 0 when unknown. */
static uint64_t copy_own_bytes(const airlock_sandbox *sb, const copy *c)
{
        uint64_t bytes = 0;
        if (sbx_copy_memory(sb, c, &bytes) == 0)
                return bytes;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/statm", (int)c->pid);
        FILE *f = fopen(path, "re");
        unsigned long long size, resident, shared;
        if (f && fscanf(f, "%llu %llu %llu", &size, &resident, &shared) == 3 && resident > shared)
                bytes = (resident - shared) * (uint64_t)sysconf(_SC_PAGESIZE);
        if (f)
                fclose(f);
        return bytes;
}

/* The machine's available memory (MemAvailable), or 0 when unknown. */
static uint64_t available_bytes(void)
{
        FILE *f = fopen("/proc/meminfo", "re");
        char line[128];
        unsigned long long kib = 0;
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
                        break;
        if (f)
                fclose(f);
        return (uint64_t)kib << 10;
}

/* Contract: called when a run has taken its copy c. When c was ready, one
 * copy less is kept coming (not under 1); when it was not (calls come
 * faster than one copy is prepared), one more copy is kept coming, up to the
 * ready_copies limit and while that many ready copies (each as big as c
 * was when it became ready) fit in 1/BURST_MEMORY_SHARE of the machine's
 * available memory. Each copy is capped by the run's limits as ever (its
 * own cgroup); this caps how many of them wait. */
static void adjust_ready(airlock_sandbox *sb, const copy *c)
{
        pthread_mutex_lock(&sb->lock);
        sb->last_late = c->late;
        if (!c->late && sb->want_ready > 1)
                sb->want_ready--;
        unsigned want = sb->want_ready + 1;
        pthread_mutex_unlock(&sb->lock);
        if (!c->late)
                return;
        if (want > sb->cfg->limits.ready_copies)
                return;
        /* Read without the lock: a file or two, off every other caller's
         * path. */
        uint64_t each = copy_own_bytes(sb, c), avail = available_bytes();
        if (!each || !avail || (uint64_t)want * each > avail / BURST_MEMORY_SHARE)
                return;
        pthread_mutex_lock(&sb->lock);
        if (sb->want_ready + 1 == want)
                sb->want_ready = want;
        pthread_mutex_unlock(&sb->lock);
}

/* Whether copy c has exited (its pidfd is readable then). */
static bool copy_exited(const copy *c)
{
        struct pollfd p = {c->pidfd, POLLIN, 0};
        return c->pidfd >= 0 && poll(&p, 1, 0) == 1;
}

/* The next copy the template announces, asked for first when none is
 * coming. A failure to ask marks the sandbox broken. Caller holds sb->lock. */
static int next_copy_locked(airlock_sandbox *sb, al_watch *w, copy **ret, airlock_error *err)
{
        int r = sb->pending == 0 ? request_copy_locked(sb) : 0;
        if (r < 0) {
                sb->broken = true;
                return r;
        }
        return receive_copy_locked(sb, w, ret, err);
}

/* Takes a ready copy (or waits for one) and asks for its successor, so the
 * next run finds a copy already started. A copy that died while it waited
 * (killed from outside the sandbox, or by the kernel) is given no run: it
 * is closed and the next one taken instead, up to MAX_DYING of them, after
 * which the run gets the last, and ends with the reason it died. */
int sbx_take_copy(airlock_sandbox *sb, al_watch *w, copy **ret, airlock_error *err)
{
        pthread_mutex_lock(&sb->lock);
        int r = 0;
        copy *c = NULL;
        /* The last run's copy is reaped while this run's code runs
         * (sbx_reap_dying): a zombie's reaping cost 30 to 45 us here, on
         * the call's path. Only a list half full is reaped now, so that
         * takes without runs (sessions) keep it bounded. */
        if (sb->n_dying > MAX_DYING / 2)
                reap_dying_locked(sb, false);
        if (sb->broken) {
                r = al_error(err, -ECHILD, NULL, "the sandbox template is gone");
                goto out;
        }
        r = next_copy_locked(sb, w, &c, err);
        for (int dead = 0; r >= 0 && dead < MAX_DYING && copy_exited(c); dead++) {
                copy_close_locked(sb, c, false);
                c = NULL;
                r = next_copy_locked(sb, w, &c, err);
        }
        if (r >= 0) {
                end_burst_locked(sb);
                sb->last_take_ns = al_now_ns();
        }
out:
        if (r < 0)
                r = al_error_as(err, AIRLOCK_ERROR_RUN, r);
        pthread_mutex_unlock(&sb->lock);
        if (r >= 0)
                *ret = c;
        return r;
}

/* As root, each sandbox's guest runs as host ids of its own, drawn at
 * random from a block that no account uses, and never as a shared one such
 * as nobody: the sandbox's user namespace, the copies' cgroups and the
 * per-user kernel quotas above the namespace belong to those ids, so no
 * other host process and no other sandbox may signal, trace or charge
 * anything of this one's. Two sandboxes draw the same ids with a chance of
 * about one in 65,536 per pair, and are then only as apart as two runs of
 * one sandbox are from the host's point of view of quotas. The one
 * exception is deliberate: a sandbox that replaces a stale version of its
 * configuration keeps that version's ids (sbx_sandbox_new_from says why). */
#define GUEST_ID_BASE  0x5a1a0000u
#define GUEST_ID_SLOTS 65536u

static void pick_guest_ids(uid_t *ret_uid, gid_t *ret_gid)
{
        /* A random start per process, then the next slot per sandbox: the
         * sandboxes of one process never share ids. */
        static atomic_uint next;
        static atomic_bool seeded;
        if (!atomic_exchange(&seeded, true)) {
                uint32_t start = 0;
                if (getrandom(&start, sizeof(start), 0) != sizeof(start))
                        start = (uint32_t)getpid() ^ (uint32_t)al_now_ns();
                atomic_fetch_add(&next, start);
        }
        uint32_t slot = atomic_fetch_add(&next, 1);
        *ret_uid = (uid_t)(GUEST_ID_BASE + slot % GUEST_ID_SLOTS);
        *ret_gid = (gid_t)*ret_uid;
}

/* Checks every --python-path folder again (it may have changed since it
 * was configured), reads its .pth files into the guest's sys.path and the
 * warnings, and, as root, opens its read-only mount for the template. */
static int prepare_python_paths(airlock_sandbox *sb, airlock_error *err)
{
        const airlock_config *cfg = sb->cfg;
        sb->sys_path = json_array();
        if (!sb->sys_path)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        dynbuf w;
        dynbuf_init(&w, 64u << 10);
        int r = 0;
        for (size_t i = 0; r >= 0 && i < cfg->n_python_paths; i++) {
                r = pypath_inspect(cfg->python_paths[i], i, sb->sys_path, &w, err);
                if (r >= 0)
                        r = pypath_open_tree(cfg->python_paths[i], sb->guest_uid, sb->guest_gid,
                                             &sb->pypath_fd[i], err);
        }
        if (r >= 0 && w.len)
                sb->warnings = dynbuf_take(&w, NULL);
        dynbuf_free(&w);
        return r;
}

/* Starts the configuration's upstream MCP servers and adds the folder of
 * their Python stubs to the sandbox's own copy of the configuration as
 * its last --python-path folder: bound read-only into the guest like the
 * others, and checked by prepare_python_paths like them. */
static int start_servers(airlock_sandbox *sb, airlock_error *err)
{
        airlock_config *cfg = sb->cfg;
        if (cfg->n_python_paths >= PYPATH_MAX)
                return al_error(err, -E2BIG, NULL,
                                "upstream MCP servers need one of the %d --python-path folders "
                                "for their stubs; %zu are in use",
                                PYPATH_MAX, cfg->n_python_paths);
        char **v = realloc(cfg->python_paths, (cfg->n_python_paths + 1) * sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        cfg->python_paths = v;
        dynbuf w;
        dynbuf_init(&w, 64u << 10);
        char *dir = NULL;
        int r = mcp_hub_start(&cfg->servers, cfg->secrets, &sb->mcp, &dir, &w, err);
        if (r >= 0) {
                v[cfg->n_python_paths++] = dir;
                if (w.len)
                        sb->mcp_warnings = dynbuf_take(&w, NULL);
        }
        dynbuf_free(&w);
        return r;
}

mcp_hub *sbx_mcp(const airlock_sandbox *sb)
{
        return sb->mcp;
}

static int sandbox_new(const airlock_config *cfg, airlock_sandbox *prev, bool late, bool oneshot,
                       airlock_sandbox **ret, airlock_error *err);

int airlock_sandbox_new(const airlock_config *cfg, airlock_sandbox **ret, airlock_error *err)
{
        return sbx_sandbox_new_from(cfg, NULL, ret, err);
}

int airlock_sandbox_new_oneshot(const airlock_config *cfg, airlock_sandbox **ret,
                                airlock_error *err)
{
        return sandbox_new(cfg, NULL, false, true, ret, err);
}

/* Contract: makes a sandbox for cfg as airlock_sandbox_new does; with prev
 * (the sandbox this one replaces, of the same configuration, alive and not
 * closed until this returns), the unchanged files of prev's staged copy are
 * hard links instead of copies, and as root the guest runs as prev's ids.
 *
 * Why a link into prev's copy is safe: see reuse_previous() (fsx_stage.c).
 * In short: the link is made from a name in prev's staging area (airlock's
 * own 0700 directory, never a source tree) into this one's; neither copy is
 * written after its staging, by the host or by any guest (the guest sees it
 * only through the read-only /input, and cannot reach the staging area by
 * any path); the source's identity and (under 64 KiB) bytes must match what
 * was recorded when prev's copy was made. So a linked inode always holds
 * what a fresh copy would.
 *
 * Why the ids are kept: a hard link shares the inode and so its owner, and
 * as root the staged files are owned by the guest's ids; with ids of its
 * own the new sandbox could reuse nothing. Keeping them does not open a
 * channel between the two: they are two versions of one configuration (the
 * same caller, code, tools and trees, one replacing the other), prev takes
 * no new run once the cache has replaced it (only runs that began on it
 * end there, within their time limit) and is closed after the new one is
 * built; and what the host id keys between two sandboxes is only the
 * per-user quotas above their user namespaces. Each sandbox still has its
 * own user, PID, network, IPC and mount namespaces and cgroup, so neither
 * can see, signal or trace the other's processes (no pid of one is visible
 * in the other), and they share no writable path (every writable mount is a
 * private tmpfs; the cgroup directories are reached by fd and moves between
 * them need the root-owned common parent). A sandbox made without prev
 * draws new ids, as pick_guest_ids says. */
int sbx_sandbox_new_from(const airlock_config *cfg, airlock_sandbox *prev, airlock_sandbox **ret,
                         airlock_error *err)
{
        return sandbox_new(cfg, prev, false, false, ret, err);
}

int sbx_sandbox_new_late(const airlock_config *cfg, airlock_sandbox **ret, airlock_error *err)
{
        return sandbox_new(cfg, NULL, true, false, ret, err);
}

static int sandbox_new(const airlock_config *cfg, airlock_sandbox *prev, bool late, bool oneshot,
                       airlock_sandbox **ret, airlock_error *err)
{
        airlock_error_clear(err);
        sbx_trace_secrets(cfg->secrets);
        /* Keep the template's constructor linked into every program. */
        static void (*volatile keep)(void) = template_main;
        (void)keep;

        /* The host side holds a handful of fds per sandbox and per run, the
         * template and each copy a dozen more: refuse a limit below that with
         * a message that says so, rather than failing half-way. */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < SANDBOX_MIN_FDS)
                return al_error(err, -EMFILE, NULL,
                                "%s: the open file limit is %llu, a sandbox needs at least %d "
                                "(raise it with ulimit -n)",
                                strerror(EMFILE), (unsigned long long)nofile.rlim_cur,
                                SANDBOX_MIN_FDS);

        airlock_sandbox *sb = calloc(1, sizeof(*sb));
        if (!sb)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        sb->staging.parent_fd = -1;
        sb->staged_fd = -1;
        sb->ctl = -1;
        sb->req_w = -1;
        sb->tpl_pid = -1;
        sb->want_ready = 1;
        sb->late_input = late;
        sb->oneshot = oneshot;
        sb->mounter.pid = -1;
        sb->mounter.sock = -1;
        for (int i = 0; i < CG_HIERARCHIES; i++)
                sb->cg.dirfd[i] = sb->cg.parentfd[i] = sb->cg.tplfd[i] = -1;
        pthread_mutex_init(&sb->lock, NULL);
        pthread_cond_init(&sb->closer_wake, NULL);
        /* The guest's ids map to an unprivileged host id: ourselves when we
         * are not root (the only id we may map), else an id of the
         * sandbox's own (pick_guest_ids). */
        sb->guest_uid = geteuid();
        sb->guest_gid = getegid();
        if (geteuid() == 0 && prev && prev->manifest) {
                sb->guest_uid = prev->guest_uid;
                sb->guest_gid = prev->guest_gid;
        } else if (geteuid() == 0) {
                pick_guest_ids(&sb->guest_uid, &sb->guest_gid);
        }

        int r = config_clone(cfg, &sb->cfg, err);
        if (r >= 0 && late) {
                /* Its runs bring their own inputs: nothing may use the paths
                 * of the configuration it happened to be built for. */
                free(sb->cfg->workspace);
                sb->cfg->workspace = NULL;
                for (size_t i = 0; i < sb->cfg->n_mounts; i++) {
                        free(sb->cfg->mounts[i].host);
                        free(sb->cfg->mounts[i].dest);
                }
                free(sb->cfg->mounts);
                sb->cfg->mounts = NULL;
                sb->cfg->n_mounts = 0;
        }
        if (r >= 0)
                cg_sandbox_init(&sb->cg, &sb->cfg->limits, sb->guest_uid, sb->guest_gid);
        for (size_t i = 0; i < PYPATH_MAX; i++)
                sb->pypath_fd[i] = -1;
        if (r >= 0 && sb->cfg->servers.n)
                r = start_servers(sb, err);
        if (r >= 0)
                r = prepare_python_paths(sb, err);
        if (r >= 0 && sb->mcp_warnings) {
                char *all = NULL;
                if (asprintf(&all, "%s%s", sb->warnings ? sb->warnings : "", sb->mcp_warnings) >=
                    0) {
                        free(sb->warnings);
                        sb->warnings = all;
                }
        }
        _cleanup_close_ int input_fd = -1;
        if (r >= 0 && !late)
                r = stage_inputs(sb, prev, &input_fd, err);
        if (r >= 0 && late && geteuid() != 0)
                r = sbx_mounter_start(&sb->mounter, err);
        /* As root, the template runs as the guest ids and cannot reach the
         * staging directory by path: it gets a detached copy of the staged
         * tree to attach (open_tree). */
        bool input_tree = false;
        if (r >= 0 && input_fd >= 0 && geteuid() == 0) {
                int tree = (int)syscall(SYS_open_tree, input_fd, "",
                                        AT_EMPTY_PATH | AT_RECURSIVE | OPEN_TREE_CLONE |
                                            OPEN_TREE_CLOEXEC);
                if (tree < 0) {
                        r = al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -errno, NULL,
                                          "sandbox unavailable (open_tree): cannot clone the "
                                          "staged input: %m");
                } else {
                        close(input_fd);
                        input_fd = tree;
                        input_tree = true;
                }
        }
        if (r >= 0)
                r = start_template(sb, input_fd, input_tree, err);
        if (r >= 0) {
                pthread_mutex_lock(&sb->lock);
                r = request_copy_locked(sb);
                pthread_mutex_unlock(&sb->lock);
                if (r < 0)
                        al_error(err, r, NULL, "cannot talk to the sandbox template: %s",
                                 strerror(-r));
        }
        if (r < 0) {
                airlock_sandbox_close(sb);
                return r;
        }
        *ret = sb;
        return 0;
}

void sbx_sandbox_yield_staging(airlock_sandbox *sb)
{
        if (sb)
                sb->yielded = true;
}

void airlock_sandbox_close(airlock_sandbox *sb)
{
        if (!sb)
                return;
        pthread_mutex_lock(&sb->lock);
        for (size_t i = 0; i < sb->n_ready; i++)
                copy_close_locked(sb, sb->ready[i], true);
        sb->n_ready = 0;
        /* Copies the template already started are our children: collect
         * them from the control socket so they can be killed and reaped. */
        while (sb->pending > 0) {
                copy *c = NULL;
                if (receive_copy_locked(sb, NULL, &c, NULL) < 0)
                        break;
                copy_close_locked(sb, c, true);
        }
        /* The template is told to end before the copies are waited for,
         * so that its exit (the teardown of the interpreter's whole
         * address space) overlaps with theirs instead of following it: 3
         * to 6 ms of `airlock run`'s end on the 2-core test machine. Every
         * copy it started is known by now, and it starts none unasked. */
        if (sb->tpl_pid > 0)
                (void)kill(sb->tpl_pid, SIGKILL);
        /* The closer closes the copies it holds without waiting for their
         * exit, and ends. */
        bool closer = sb->closer_started;
        sb->closer_stop = true;
        pthread_mutex_unlock(&sb->lock);
        if (closer) {
                pthread_cond_signal(&sb->closer_wake);
                pthread_join(sb->closer, NULL);
        }
        pthread_mutex_lock(&sb->lock);
        reap_dying_locked(sb, true);
        pthread_mutex_unlock(&sb->lock);
        if (sb->ctl >= 0)
                close(sb->ctl);
        if (sb->req_w >= 0)
                close(sb->req_w);
        pid_killp(&sb->tpl_pid);
        if (sb->late_input)
                sbx_mounter_stop(&sb->mounter);
        mcp_hub_free(sb->mcp);
        free(sb->mcp_warnings);
        if (sb->staged_fd >= 0)
                close(sb->staged_fd);
        fsx_manifest_free(sb->manifest);
        fsx_staging_remove(&sb->staging);
        for (size_t i = 0; i < PYPATH_MAX; i++)
                if (sb->pypath_fd[i] >= 0)
                        close(sb->pypath_fd[i]);
        json_decref(sb->sys_path);
        json_decref(sb->inventory);
        free(sb->warnings);
        cg_sandbox_destroy(&sb->cg);
        airlock_config_free(sb->cfg);
        pthread_cond_destroy(&sb->closer_wake);
        pthread_mutex_destroy(&sb->lock);
        free(sb);
}

int sbx_copy_wait_ready(copy *c, al_watch *w, int *ret_outdir, airlock_error *err)
{
        /* The copy's first byte: ready, with its /output fd, and with a
         * writable /input the upper dir and lower layer of its overlay. */
        char tag[512];
        int fds[3] = {-1, -1, -1};
        size_t nfds = 0;
        ssize_t n =
            receive_for_copy(c->chan, -1, true, w, tag, 1, fds, ARRAY_SIZE(fds), &nfds, &c->late);
        _cleanup_close_ int outdir = fds[0];
        _cleanup_close_ int upper = fds[1];
        _cleanup_close_ int lower = fds[2];
        if (n <= 0 || tag[0] != COPY_READY || (nfds != 1 && nfds != 3)) {
                int r;
                if (n > 0 && tag[0] == COPY_ERROR) {
                        ssize_t k = recv(c->chan, tag, sizeof(tag) - 1, MSG_DONTWAIT);
                        tag[k > 0 ? k : 0] = '\0';
                        r = al_error_kind(err, AIRLOCK_ERROR_RUN, -EIO, NULL,
                                          "sandbox copy failed to start: %s", tag);
                } else {
                        r = al_error_kind(err, AIRLOCK_ERROR_RUN, n < 0 ? (int)n : -ECHILD, NULL,
                                          "sandbox copy failed to start");
                }
                return r;
        }
        closep(&c->input_upper);
        closep(&c->input_lower);
        c->input_upper = TAKE_FD(upper);
        c->input_lower = TAKE_FD(lower);
        *ret_outdir = TAKE_FD(outdir);
        return 0;
}

/* A late-input copy that left no room for its input and its first frame
 * within COPY_START_S: it has not read them, so its answer is not waited
 * for again; the frame it holds is incomplete, so it can never run it,
 * and the caller's close ends it. */
static int copy_send_late(copy *c)
{
        c->input_pending = false;
        return -ETIMEDOUT;
}

/* Contract: sends a late-input copy the input handed to it
 * (sbx_copy_hand_input) and, when body is not NULL, the frame body after
 * it, in one message: the "input" frame, the byte COPY_INPUT with the
 * detached tree of the run's staged input (none for an empty /input), and
 * the frame. They are the first the copy reads after it said it was ready
 * (after any "hurry"); it attaches the tree, locks itself down (no
 * capability, no_new_privs, Landlock, seccomp), answers (copy_input_taken)
 * and only then reads the frame (tpl_copy.c, await_input). So no guest
 * code can run before its /input is in place, and the tree this host
 * cloned is the only one it can see there. One message wakes the copy
 * once: it goes from its input to the code without waiting for this host
 * again. The tree travels with the message's first byte, which the copy
 * reads with room for it. */
static int copy_send_input(copy *c, const char *body, size_t len)
{
        static const char input[] = "{\"" WIRE_KEY_OP "\":\"" WIRE_OP_INPUT "\"}";
        const size_t in_len = sizeof(input) - 1;
        unsigned char in_hdr[4], hdr[4];
        channel_frame_header(in_hdr, in_len);
        channel_frame_header(hdr, len);
        char tag = COPY_INPUT;
        struct iovec iov[5] = {{in_hdr, 4}, {(void *)input, in_len}, {&tag, 1}};
        size_t niov = 3, total = 4 + in_len + 1;
        if (body) {
                if (len > CHANNEL_MAX_FRAME)
                        return -EMSGSIZE;
                iov[niov++] = (struct iovec){hdr, 4};
                iov[niov++] = (struct iovec){(void *)body, len};
                total += 4 + len;
        }
        _cleanup_close_ int tree = TAKE_FD(c->input_tree);
        c->input_pending = true;
        /* A large frame may go in parts, which the copy reads only once it
         * has taken its input and locked down: a copy that never does
         * would hold this send for ever, so it waits for room at most
         * COPY_START_S, as for the copy's answer. */
        uint64_t deadline = al_now_ns() + (uint64_t)(COPY_START_S * 1e9);
        ssize_t w;
        while ((w = al_send_fdsv_part(c->chan, iov, niov, &tree, tree >= 0 ? 1 : 0,
                                      MSG_DONTWAIT)) == -EAGAIN)
                if (wait_events(c->chan, POLLOUT, deadline) < 0)
                        return copy_send_late(c);
        if (w < 0)
                return (int)w;
        /* The rest, without the tree, which came with the first byte. */
        size_t done = (size_t)w;
        int r;
        while ((r = al_send_rest(c->chan, iov, niov, &done, total, MSG_DONTWAIT)) == -EAGAIN)
                if (wait_events(c->chan, POLLOUT, deadline) < 0)
                        return copy_send_late(c);
        return r;
}

/* Waits for a late-input copy's answer to its input (copy_send_input):
 * COPY_INPUT, with a writable /input's upper dir and lower layer, or the
 * reason the copy failed, which then ends. Nothing when no input is
 * pending. -ETIMEDOUT when the copy did not answer within COPY_START_S:
 * it may still read the frame sent with its input (sbx_copy_send). */
static int copy_input_taken(copy *c, airlock_error *err)
{
        if (!c->input_pending)
                return 0;
        c->input_pending = false;
        char buf[512];
        int fds[2] = {-1, -1};
        size_t nfds = 0;
        /* One byte: the run's first frames may follow it already. */
        int r = wait_readable(c->chan, al_now_ns() + (uint64_t)(COPY_START_S * 1e9));
        ssize_t n = r < 0 ? r : al_recv_fds(c->chan, buf, 1, fds, 2, &nfds, 0);
        _cleanup_close_ int upper = fds[0];
        _cleanup_close_ int lower = fds[1];
        if (n <= 0 || buf[0] != COPY_INPUT || (nfds != 0 && nfds != 2)) {
                if (n > 0 && buf[0] == COPY_ERROR) {
                        /* The reason came in the same message, and the
                         * copy ends after it. */
                        ssize_t k = recv(c->chan, buf, sizeof(buf) - 1, MSG_DONTWAIT);
                        buf[k > 0 ? k : 0] = '\0';
                        return al_error_kind(err, AIRLOCK_ERROR_RUN, -EIO, NULL,
                                             "sandbox copy failed to take its input: %s", buf);
                }
                if (n == -ETIMEDOUT)
                        return al_error_kind(err, AIRLOCK_ERROR_RUN, -ETIMEDOUT, NULL,
                                             "sandbox copy did not take its input within %g s "
                                             "(COPY_START_S)",
                                             COPY_START_S);
                return al_error_kind(err, AIRLOCK_ERROR_RUN, n < 0 ? (int)n : -ECHILD, NULL,
                                     "sandbox copy failed to take its input");
        }
        closep(&c->input_upper);
        closep(&c->input_lower);
        c->input_upper = TAKE_FD(upper);
        c->input_lower = TAKE_FD(lower);
        return 0;
}

int sbx_copy_send(copy *c, const char *body, size_t len)
{
        if (!c->input_handed)
                return channel_send_raw(c->chan, body, len);
        c->input_handed = false;
        return copy_send_input(c, body, len);
}

int sbx_copy_input_taken(copy *c, airlock_error *err)
{
        return copy_input_taken(c, err);
}

int sbx_copy_hand_input(airlock_sandbox *sb, copy *c, sbx_input *in, al_watch *w, int *ret_outdir,
                        airlock_error *err)
{
        int r = sbx_copy_wait_ready(c, w, ret_outdir, err);
        if (r < 0 || !sb->late_input)
                return r;
        int tree = -1;
        r = sbx_input_tree(in, &sb->mounter, &tree, err);
        if (r < 0) {
                close_fd(ret_outdir);
                return r;
        }
        closep(&c->input_tree);
        c->input_tree = tree;
        c->input_handed = true;
        return 0;
}

int sbx_copy_prepare(airlock_sandbox *sb, copy *c, sbx_input *in, al_watch *w, int *ret_outdir,
                     airlock_error *err)
{
        int r = sbx_copy_hand_input(sb, c, in, w, ret_outdir, err);
        if (r < 0 || !c->input_handed)
                return r;
        c->input_handed = false;
        r = copy_send_input(c, NULL, 0);
        if (r < 0)
                r = al_error_kind(err, AIRLOCK_ERROR_RUN, r, NULL,
                                  "cannot hand the sandbox copy its input: %s", strerror(-r));
        else
                r = copy_input_taken(c, err);
        if (r < 0)
                close_fd(ret_outdir);
        return r;
}

sbx_mounter *sbx_sandbox_mounter(airlock_sandbox *sb)
{
        return sb->late_input && sb->mounter.sock >= 0 ? &sb->mounter : NULL;
}

void sbx_guest_ids(const airlock_sandbox *sb, uid_t *ret_uid, gid_t *ret_gid)
{
        *ret_uid = sb->guest_uid;
        *ret_gid = sb->guest_gid;
}

/* Asks for the next copy unless one is already coming: at once, or with
 * after_exit through the request socket, for a copy that is about to run
 * single code and exit (see request_copy_later_locked). */
static void replenish(airlock_sandbox *sb, bool after_exit)
{
        pthread_mutex_lock(&sb->lock);
        while (!sb->broken && sb->pending < sb->want_ready)
                if ((after_exit ? request_copy_later_locked(sb) : request_copy_locked(sb)) < 0)
                        sb->broken = true;
        pthread_mutex_unlock(&sb->lock);
}

void sbx_replenish(airlock_sandbox *sb)
{
        replenish(sb, false);
}

int sbx_check_code(const char *code, size_t len, airlock_error *err)
{
        if (!code)
                return al_error(err, -EINVAL, NULL, "no code to run");
        if (len > MAX_CODE_BYTES)
                return al_error(err, -E2BIG, NULL, "the code is %zu bytes, over the cap of %u MiB",
                                len, MAX_CODE_BYTES >> 20);
        if (memchr(code, '\0', len))
                return al_error(err, -EINVAL, NULL, "the code contains a NUL byte");
        if (!al_utf8_valid(code, len))
                return al_error(err, -EILSEQ, NULL, "the code is not valid UTF-8");
        return 0;
}

int airlock_check_code(const char *code, size_t len, airlock_error *err)
{
        return sbx_check_code(code, len, err);
}

static int run_fresh(airlock_sandbox *sb, sbx_input *in, const char *code, size_t len,
                     const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                     airlock_error *err);

int sbx_run_input(airlock_sandbox *sb, sbx_input *in, const char *code, size_t len,
                  const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                  airlock_error *err)
{
        return run_fresh(sb, in, code, len, opts, w, ret, err);
}

int sbx_run_watched(airlock_sandbox *sb, const char *code, size_t len,
                    const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                    airlock_error *err)
{
        return run_fresh(sb, NULL, code, len, opts, w, ret, err);
}

int airlock_sandbox_run(airlock_sandbox *sb, const char *code, size_t len,
                        const airlock_run_options *opts, airlock_result **ret, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_run_options o;
        int r = al_run_options_in(opts, &o, err);
        if (r < 0)
                return r;
        /* The outermost layer of this call: its watch starts here. */
        al_watch w = al_watch_from(&o);
        return run_fresh(sb, NULL, code, len, &o, &w, ret, err);
}

static int run_copy(airlock_sandbox *sb, sbx_input *in, const char *code, size_t len,
                    const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                    airlock_error *err);

/* The run under its span (run_trace.c): the span is the thread's current
 * one while the run lasts, so that the copy's wait and the host's services
 * to the code are its children. */
static int run_fresh(airlock_sandbox *sb, sbx_input *in, const char *code, size_t len,
                     const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                     airlock_error *err)
{
        al_span *span = sbx_trace_run_begin("airlock.run", opts, code, len, sb->cfg->secrets);
        if (!span)
                return run_copy(sb, in, code, len, opts, w, ret, err);
        al_span *outer = al_span_push(span);
        int r = run_copy(sb, in, code, len, opts, w, ret, err);
        al_span_pop(outer);
        sbx_trace_run_end(span, &sb->cfg->limits, r, r >= 0 ? *ret : NULL,
                          err ? err->message : NULL);
        return r;
}

static int run_copy(airlock_sandbox *sb, sbx_input *in, const char *code, size_t len,
                    const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                    airlock_error *err)
{
        int r = sbx_check_code(code, len, err);
        if (r < 0)
                return r;
        /* A copy that died before the code reached it (killed from
         * outside, say) ran nothing: take another one, once. */
        for (int attempt = 0;; attempt++) {
                copy *c = NULL;
                al_span *wait = sbx_trace_child("airlock.copy_wait");
                uint64_t t_wait = wait ? al_now_ns() : 0;
                r = sbx_take_copy(sb, w, &c, err);
                al_span_set_double(al_span_current(), "airlock.copy_wait_ms",
                                   wait ? (double)(al_now_ns() - t_wait) / 1e6 : 0);
                al_span_end(wait);
                if (r < 0)
                        return r;
                int outdir = -1;
                bool delivered = false, asked = false;
                /* The input goes with the run frame, in one message
                 * (sbx_copy_send), and the run waits for the copy's answer
                 * (sbx_run_single): the copy goes from its input to the
                 * code without a round trip through this host. */
                r = sbx_copy_hand_input(sb, c, in, w, &outdir, err);
                if (r >= 0) {
                        adjust_ready(sb, c);
                        if (!(opts && opts->last)) {
                                replenish(sb, true);
                                asked = true;
                        }
                        r = sbx_run_single(sb, c, outdir, code, len, opts, w, &delivered, ret, err);
                }
                if (outdir >= 0)
                        close(outdir);
                sbx_copy_retire(sb, c);
                if (!asked && (!(opts && opts->last) || (r < 0 && !delivered && attempt == 0)))
                        sbx_replenish(sb);
                if (r >= 0 || delivered || attempt > 0)
                        return r;
        }
}

const char *airlock_sandbox_warnings(const airlock_sandbox *sb)
{
        return sb ? sb->warnings : NULL;
}

const json_t *sbx_inventory(airlock_sandbox *sb, json_t *inv)
{
        pthread_mutex_lock(&sb->lock);
        if (!sb->inventory)
                sb->inventory = inv;
        else
                json_decref(inv);
        const json_t *have = sb->inventory;
        pthread_mutex_unlock(&sb->lock);
        return have;
}

const airlock_config *sbx_config(const airlock_sandbox *sb)
{
        return sb->cfg;
}

const cg_sandbox *sbx_cgroup(const airlock_sandbox *sb)
{
        return &sb->cg;
}

const airlock_limits *sbx_limits(const airlock_sandbox *sb)
{
        return &sb->cfg->limits;
}

int sbx_copy_memory(const airlock_sandbox *sb, const copy *c, uint64_t *ret)
{
        if (!sb->cg.enabled || !c->cg)
                return -ENOENT;
        char path[64];
        snprintf(path, sizeof(path), "c%u/%s", c->cg,
                 sb->cg.v2 ? "memory.current" : "memory.usage_in_bytes");
        int fd = openat(sb->cg.dirfd[0], path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        char buf[32];
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -EIO;
        buf[n] = '\0';
        *ret = strtoull(buf, NULL, 10);
        return 0;
}
