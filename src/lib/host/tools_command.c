/* Running a command tool: spawn, feed the arguments, collect one JSON value.
 *
 * The child gets its own process group, so a timeout or an over-long output
 * can kill everything it started. The parent never blocks: stdin, stdout,
 * stderr and the child's exit are all multiplexed with poll() against one
 * deadline, so a tool that hangs, floods or never reads its input ends in a
 * clean failure. */
#include "host/tools.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "core/util.h"
#include "host/secrets.h"

extern char **environ;

#define READ_CHUNK     65536
#define MESSAGE_STDERR 4000 /* bytes of stderr quoted in a failure message */

typedef struct command_run {
        pid_t pid;
        int pidfd;
        int in_fd; /* our end of the child's stdin, -1 once closed */
        int out_fd;
        int err_fd;
        dynbuf out;
        dynbuf err;
        bool out_too_big;
        bool err_too_big; /* stderr went past TOOLS_MAX_STDERR: what is kept was cut */
        bool timed_out;
        bool cancelled;
        bool exited;
} command_run;

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
        return (int)syscall(SYS_pidfd_open, pid, 0);
#else
        errno = ENOSYS;
        return -1;
#endif
}

/* Spawns the tool with stdin a socket (so that writing to a child that quit
 * gives EPIPE through MSG_NOSIGNAL instead of a SIGPIPE to the host process),
 * stdout and stderr pipes, its own process group, default signal handling,
 * an empty signal mask, the tools file's folder as working directory, and no
 * other descriptor. Returns 0 or an errno value. */
static int command_spawn(const tool_info *t, command_run *run)
{
        extern char **environ;
        al_child ch;
        int r = al_spawn_piped(NULL, t->argv, environ, t->cwd_fd, NULL, &ch);
        if (r)
                return r;
        run->pid = ch.pid;
        run->in_fd = ch.in_fd;
        run->out_fd = ch.out_fd;
        run->err_fd = ch.err_fd;
        fcntl(run->in_fd, F_SETFL, O_NONBLOCK);
        run->pidfd = pidfd_open_compat(run->pid);
        return 0;
}

/* Reads what is available on *fd into b. Past the cap of b the data is
 * dropped and *overflow set. Closes *fd at end of file or on an error.
 * Returns false when nothing could be read now (EAGAIN, EINTR, closed). */
static bool drain(int *fd, dynbuf *b, bool *overflow)
{
        char chunk[READ_CHUNK];
        ssize_t n = read(*fd, chunk, sizeof(chunk));
        if (n < 0) {
                if (errno != EINTR && errno != EAGAIN)
                        close_fd(fd);
                return false;
        }
        if (n == 0) {
                close_fd(fd);
                return false;
        }
        if (dynbuf_append(b, chunk, (size_t)n) < 0) {
                /* Keep what fits, so a message can still quote it. */
                size_t room = b->cap - b->len;
                if (room)
                        dynbuf_append(b, chunk, MIN(room, (size_t)n));
                *overflow = true;
        }
        return true;
}

/* Once the tool itself has exited: kills what it left running in its group
 * and takes what is already in the pipes, without waiting for end of file.
 * Everything the tool wrote is in the pipe by now (it could not have exited
 * while blocked on a full pipe), so a process that escaped the group (by
 * setsid()) and holds stdout open cannot stall the call. */
static void finish_after_exit(command_run *run)
{
        kill(-run->pid, SIGKILL);
        if (run->out_fd >= 0)
                fcntl(run->out_fd, F_SETFL, O_NONBLOCK);
        if (run->err_fd >= 0)
                fcntl(run->err_fd, F_SETFL, O_NONBLOCK);
        while (run->out_fd >= 0 && !run->out_too_big &&
               drain(&run->out_fd, &run->out, &run->out_too_big))
                ;
        while (run->err_fd >= 0 && drain(&run->err_fd, &run->err, &run->err_too_big))
                ;
}

/* True once the child has exited (not yet reaped). Used when pidfds are
 * not available. */
static bool child_exited(pid_t pid)
{
        siginfo_t si = {0};
        return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/* Feeds input, collects output, and waits for the child's exit, all until
 * the deadline. The child is left unreaped (a zombie at worst), so its
 * process group id cannot be reused before the caller kills the group. */
static void command_pump(command_run *run, const char *input, size_t input_len, uint64_t deadline,
                         int cancel_fd)
{
        size_t sent = 0;
        if (input_len == 0)
                close_fd(&run->in_fd);
        for (;;) {
                if (!run->exited && run->pidfd < 0 && child_exited(run->pid))
                        run->exited = true;
                if (run->exited) {
                        finish_after_exit(run);
                        return;
                }
                uint64_t now = al_now_ns();
                if (now >= deadline) {
                        run->timed_out = true;
                        return;
                }
                struct pollfd p[5];
                int n = 0, i_in = -1, i_out = -1, i_err = -1, i_pid = -1, i_cancel = -1;
                if (cancel_fd >= 0) {
                        i_cancel = n;
                        p[n++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
                }
                if (run->in_fd >= 0) {
                        i_in = n;
                        p[n++] = (struct pollfd){.fd = run->in_fd, .events = POLLOUT};
                }
                if (run->out_fd >= 0) {
                        i_out = n;
                        p[n++] = (struct pollfd){.fd = run->out_fd, .events = POLLIN};
                }
                if (run->err_fd >= 0) {
                        i_err = n;
                        p[n++] = (struct pollfd){.fd = run->err_fd, .events = POLLIN};
                }
                if (!run->exited && run->pidfd >= 0) {
                        i_pid = n;
                        p[n++] = (struct pollfd){.fd = run->pidfd, .events = POLLIN};
                }
                uint64_t left_ms = (deadline - now + 999999) / 1000000;
                /* Without a pidfd the exit is noticed by polling now and then. */
                int wait_ms = (int)MIN(left_ms, run->pidfd < 0 ? 20u : 1000u);
                int k = poll(p, (nfds_t)n, wait_ms);
                if (k < 0 && errno != EINTR)
                        return;
                if (k <= 0)
                        continue;
                if (i_cancel >= 0 && p[i_cancel].revents) {
                        run->cancelled = true;
                        return;
                }
                if (i_in >= 0 && p[i_in].revents) {
                        ssize_t w = send(run->in_fd, input + sent, input_len - sent,
                                         MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w > 0)
                                sent += (size_t)w;
                        /* A tool that quits without reading its input is fine. */
                        if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == input_len)
                                close_fd(&run->in_fd);
                }
                if (i_out >= 0 && p[i_out].revents) {
                        drain(&run->out_fd, &run->out, &run->out_too_big);
                        if (run->out_too_big)
                                return;
                }
                if (i_err >= 0 && p[i_err].revents)
                        drain(&run->err_fd, &run->err, &run->err_too_big);
                if (i_pid >= 0 && p[i_pid].revents)
                        run->exited = true;
        }
}

/* A malloc'd, NUL-terminated copy of the n bytes at s with the secrets'
 * values scrubbed (cut: SECRETS_CUT_*, how s was cut from what the tool
 * wrote), into *ret and *ret_len. Returns false when out of memory or when
 * the scrub failed: then nothing of s may be quoted. */
static bool scrubbed_copy(const secret_store *ss, const char *s, size_t n, unsigned cut, char **ret,
                          size_t *ret_len)
{
        char *clean = NULL;
        size_t len = 0;
        int r = secrets_scrub_cut(ss, s, n, cut, &clean, &len);
        if (r < 0)
                return false;
        if (r == 0) {
                clean = malloc(n + 1);
                if (!clean)
                        return false;
                memcpy(clean, s, n);
                clean[n] = '\0';
                len = n;
        }
        *ret = clean;
        *ret_len = len;
        return true;
}

/* The tail of stderr, valid UTF-8 and trimmed, for a failure message. The
 * guest chooses the length of what a tool echoes, so it could place the
 * cut inside a value: stderr is scrubbed first, whole, and cut after. */
static char *stderr_text(const dynbuf *b, const secret_store *ss, bool cut)
{
        char *all = NULL;
        size_t n = 0;
        if (!scrubbed_copy(ss, b->data ? b->data : "", b->len, cut ? SECRETS_CUT_TAIL : 0, &all,
                           &n))
                return strdup("(the message was withheld: it could not be checked for the "
                              "secrets' values)");
        const char *s = all;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
                n--;
        size_t start = n > MESSAGE_STDERR ? n - MESSAGE_STDERR : 0;
        char *clean = al_utf8_sanitize(s + start, n - start);
        free(all);
        if (!clean || start == 0)
                return clean;
        char *withdots = NULL;
        if (asprintf(&withdots, "...%s", clean) < 0)
                withdots = NULL;
        free(clean);
        return withdots;
}

/* jansson's error text without the part of the input it quotes (" near
 * '...'", cut at its own buffer's size, before any scrub could see it). */
static void json_error_bare(char *text)
{
        char *near = strstr(text, " near ");
        if (near)
                *near = '\0';
}

tool_fail tools_run_command(const tool_info *t, const char *input, size_t input_len,
                            const tool_call_bounds *bounds, json_t **ret_result, char **ret_message)
{
        command_run run = {.pid = -1, .pidfd = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
        uint64_t deadline = al_now_ns() + (uint64_t)(t->timeout_s * 1e9);
        /* The run's own limit, when it comes first, is the one that counts. */
        bool run_limit = bounds && bounds->deadline_ns && bounds->deadline_ns < deadline;
        if (run_limit)
                deadline = bounds->deadline_ns;
        int cancel_fd = bounds ? bounds->cancel_fd : -1;
        if (run_limit && al_now_ns() >= deadline)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                  "tool '%s' was not started: the run's time limit was reached",
                                  t->name);
        dynbuf_init(&run.out, TOOLS_MAX_RESULT);
        dynbuf_init(&run.err, TOOLS_MAX_STDERR);
        int r = command_spawn(t, &run);
        if (r)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "tool '%s': cannot run '%s': %s",
                                  t->name, t->argv[0], strerror(r));
        command_pump(&run, input, input_len, deadline, cancel_fd);
        /* Whatever happened, nothing of the tool may outlive the call. The
         * leader is not reaped yet, so its group id still names its group. */
        kill(-run.pid, SIGKILL);
        int status = 0;
        while (waitpid(run.pid, &status, 0) < 0 && errno == EINTR)
                ;
        close_fd(&run.pidfd);
        close_fd(&run.in_fd);
        close_fd(&run.out_fd);
        close_fd(&run.err_fd);

        tool_fail f = TOOL_OK;
        const secret_store *ss = bounds ? bounds->secrets : NULL;
        _cleanup_free_ char *errtext = stderr_text(&run.err, ss, run.err_too_big);
        const char *e = errtext ? errtext : "";
        if (run.cancelled) {
                f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                               "tool '%s' was stopped: the run was cancelled", t->name);
        } else if (run.timed_out && run_limit) {
                f = tools_fail(
                    TOOL_FAIL_RUNTIME, ret_message,
                    "tool '%s' was stopped: the run's time limit was reached while it ran",
                    t->name);
        } else if (run.timed_out) {
                f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                               "tool '%s' did not finish within its timeout of %g s and "
                               "was killed",
                               t->name, t->timeout_s);
        } else if (run.out_too_big) {
                f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                               "tool '%s' printed more than %u bytes on stdout (the limit) and was "
                               "killed",
                               t->name, TOOLS_MAX_RESULT);
        } else if (WIFSIGNALED(status)) {
                f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                               "tool '%s' was killed by signal %d (%s)%s%s", t->name,
                               WTERMSIG(status), strsignal(WTERMSIG(status)), *e ? ": " : "", e);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                if (*e)
                        f = tools_fail(TOOL_FAIL_RUNTIME, ret_message, "%s", e);
                else
                        f = tools_fail(
                            TOOL_FAIL_RUNTIME, ret_message,
                            "tool '%s' failed with exit status %d and no message on stderr",
                            t->name, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        } else {
                const char *o = run.out.data ? run.out.data : "";
                size_t n = run.out.len, ws = strspn(o, " \t\r\n");
                json_error_t jerr;
                json_t *v = NULL;
                if (ws == n)
                        f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                       "tool '%s' printed nothing on stdout; a tool must print one "
                                       "JSON value",
                                       t->name);
                else if (!(v = json_loadb(o, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr))) {
                        /* The head is quoted from the scrubbed output. */
                        char *all = NULL;
                        size_t an = 0;
                        bool ok = scrubbed_copy(ss, o, n, 0, &all, &an);
                        _cleanup_free_ char *head = ok ? al_utf8_sanitize(all, MIN(an, 80u)) : NULL;
                        free(all);
                        json_error_bare(jerr.text);
                        f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                       "tool '%s' printed output that is not one JSON value (%s, "
                                       "line %d): %s%s",
                                       t->name, jerr.text, jerr.line, head ? head : "",
                                       ok && an > 80 ? "..." : "");
                } else {
                        *ret_result = v;
                }
        }
        dynbuf_free(&run.out);
        dynbuf_free(&run.err);
        return f;
}
