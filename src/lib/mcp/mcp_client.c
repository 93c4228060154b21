/* The MCP client of one upstream server, over stdio (the process, its
 * supervision, JSON-RPC 2.0 in newline-delimited messages) or Streamable
 * HTTP (through the gateway).
 *
 * The server runs on the host, outside the sandbox, with an environment
 * of its own: a few variables of the host's (HOME, LOGNAME, PATH, SHELL,
 * TERM, USER, LANG), then its "env", where "${secret:NAME}" stands for the
 * value of an airlock secret. It is never trusted: every read is bounded
 * (a line, a result, the time of a request), and a server that dies, floods
 * or sends what is not JSON-RPC is killed (its whole process group) and
 * started afresh at the next call, after a backoff that grows with the
 * failures in a row. Calls to one server may be in flight at once: over
 * stdio each waits for its own reply, and one of them at a time reads the
 * server's output for all (stdio_call), so no reader thread is needed;
 * over HTTP each makes its own request in the session (http_call). */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/wire.h"
#include "host/allowlist.h"
#include "host/gateway.h"
#include "jsonrpc.h"
#include "trace.h"
#include "mcp/mcp.h"

extern char **environ;

#define READ_CHUNK     65536
#define LIST_PAGES_MAX 64
#define BACKOFF_MAX_NS (10ull * 1000000000ull)
#define STOP_GRACE_MS  300

struct mcp_upstream {
        pthread_mutex_t lock;
        char *name;
        char *exe;   /* the command, resolved */
        char **argv; /* NULL-terminated */
        char **envp; /* NULL-terminated; entries may hold secrets: wiped when freed */
        char *cwd;
        pid_t pid; /* 0 when not running */
        int in_fd, out_fd, err_fd;
        char *buf; /* stdout read and not yet consumed */
        size_t len, cap;
        char ring[MCP_STDERR_RING]; /* the last bytes of stderr */
        size_t ring_at;
        bool ring_full;
        json_int_t next_id;
        unsigned failures; /* in a row */
        uint64_t retry_at; /* no restart before this (CLOCK_MONOTONIC) */
        char proto[32];    /* the protocol revision agreed */
        bool initialized;
        /* A server at a "url" (Streamable HTTP): no process; each message
         * is a POST through the gateway, with its allow-list of the one
         * URL (so its address rules apply). */
        char *url;
        json_t *headers;      /* the server's "headers", secrets put in: wiped when freed */
        net_allowlist *allow; /* the URL alone, POST and DELETE */
        char *session;        /* Mcp-Session-Id, once the server gave one */
        /* Calls of a stdio server in flight at once (stdio_call): each
         * waits for its reply under lock; one of them at a time reads the
         * server's output (reading) and hands the others their replies
         * (cv). gen counts the processes: a waiter whose process is gone
         * gets fail_code and fail_msg. */
        pthread_cond_t cv;
        struct pending *waiting;
        bool reading;
        bool starting;
        unsigned gen;
        int fail_code;
        char fail_msg[AIRLOCK_MESSAGE_MAX];
        /* The server said notifications/tools/list_changed since its tool
         * list was taken (the stubs were made): read without the lock. */
        _Atomic bool list_changed;
        /* A line past the cap of every call waiting (a result over
         * maxResultBytes), being read and dropped (read_some): only the
         * reader touches it. */
        struct line_skip {
                bool on;
                size_t len; /* its bytes so far */
                /* Its top-level "id", found by a scan that keeps no byte:
                 * depth, string and escape state, the key being read. */
                int depth;
                bool in_str, esc, expect_key, is_key, key_is_id, in_id, neg;
                char key[4];
                unsigned key_len, digits;
                json_int_t id;
                bool has_id;
        } skip;
        /* While the tool list is read (mcp_upstream_start, before any
         * call): what parsing its pages may still cost (list_charge). */
        bool listing;
        uint64_t list_cost_left;
        uint64_t list_values; /* the JSON values of the pages so far */
};

/* A call waiting for its reply. */
typedef struct pending {
        json_int_t id;
        json_t *reply;   /* set by the reader */
        size_t dropped;  /* or this: the size of its reply, read and dropped as too large */
        size_t max_line; /* the longest reply this call takes */
        struct pending *next;
} pending;

/* ---- the process ---------------------------------------------------- */

static void ring_put(mcp_upstream *u, const char *d, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                u->ring[u->ring_at++] = d[i];
                if (u->ring_at == sizeof(u->ring)) {
                        u->ring_at = 0;
                        u->ring_full = true;
                }
        }
}

/* The last lines of the server's stderr, at most max bytes, for a message;
 * "" when there are none. Malloc'd (NULL when out of memory). */
static char *ring_tail(const mcp_upstream *u, size_t max)
{
        char tmp[MCP_STDERR_RING];
        size_t n = 0;
        if (u->ring_full) {
                memcpy(tmp, u->ring + u->ring_at, sizeof(u->ring) - u->ring_at);
                n = sizeof(u->ring) - u->ring_at;
        }
        memcpy(tmp + n, u->ring, u->ring_at);
        n += u->ring_at;
        while (n && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r' || tmp[n - 1] == ' '))
                n--;
        size_t from = n > max ? n - max : 0;
        char *s = al_utf8_sanitize(tmp + from, n - from);
        for (char *p = s; p && *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                        *p = ' ';
        return s;
}

static void drain_stderr(mcp_upstream *u)
{
        char chunk[4096];
        for (int i = 0; u->err_fd >= 0 && i < 64; i++) {
                ssize_t n = read(u->err_fd, chunk, sizeof(chunk));
                if (n > 0) {
                        ring_put(u, chunk, (size_t)n);
                        continue;
                }
                if (n == 0 || (errno != EINTR && errno != EAGAIN))
                        close_fd(&u->err_fd);
                break;
        }
}

/* Kills the server's process group at once and reaps it. */
static void kill_now(mcp_upstream *u, int *ret_status)
{
        close_fd(&u->in_fd);
        close_fd(&u->out_fd);
        if (u->err_fd >= 0)
                drain_stderr(u);
        close_fd(&u->err_fd);
        if (u->pid > 0) {
                kill(-u->pid, SIGKILL);
                kill(u->pid, SIGKILL);
                int st = 0;
                while (waitpid(u->pid, &st, 0) < 0 && errno == EINTR)
                        ;
                if (ret_status)
                        *ret_status = st;
        }
        u->pid = 0;
        u->len = 0;
        u->initialized = false;
        u->gen++;
}

/* Records a failure of the process: it is killed, and the next start waits
 * a backoff of 0 s after the first failure in a row, then 0.25 s doubling
 * up to 10 s. */
static void fail_process(mcp_upstream *u)
{
        kill_now(u, NULL);
        u->failures++;
        uint64_t d = 0;
        if (u->failures > 1) {
                d = 250000000ull << (u->failures - 2 < 6 ? u->failures - 2 : 6);
                if (d > BACKOFF_MAX_NS)
                        d = BACKOFF_MAX_NS;
        }
        u->retry_at = al_now_ns() + d;
}

/* The steps of the child in spawn_isolated, for the message of the one
 * that failed. */
static const char *const spawn_steps[] = {
    "setpgid",
    "the user namespace's setgroups",
    "the user namespace's uid_map",
    "its gid_map",
    "making / a slave mount",
    "mounting its own /proc",
    "dropping capabilities",
    "its standard streams",
    "chdir to its \"cwd\"",
    "execve",
};

/* Writes text to the file path, from the child of spawn_isolated: system
 * calls only. */
static int child_write(const char *path, const char *text, size_t n)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t w = write(fd, text, n);
        int e = errno;
        close(fd);
        errno = e;
        return w == (ssize_t)n ? 0 : -1;
}

/* Makes fd the descriptor to (0, 1, 2), open across execve. */
static int child_dup(int fd, int to)
{
        if (fd == to)
                return fcntl(fd, F_SETFD, 0);
        return dup2(fd, to) < 0 ? -1 : 0;
}

/* Contract: starts the server as al_spawn_piped would (its own process
 * group, stdin a socket, stdout and stderr pipes, signals at their
 * defaults, no other descriptor), but in a user, PID and mount namespace
 * of its own, with a procfs of that PID namespace on /proc, so that it
 * can see no other process: not a sibling server, whose /proc/PID/environ
 * holds that server's secrets, and not airlock, whose memory holds them
 * all. The same uid and gid on the host (mapped to themselves) reach
 * exactly what they reached before; it cannot even name another process
 * for ptrace, process_vm_readv or pidfd_open. What does not hold instead:
 * the same uid on the host makes every other kind of isolation moot
 * (PR_SET_DUMPABLE is reset by execve; hidepid= hides only other users'
 * processes). It has no capability, also when airlock runs as root
 * (SECBIT_NOROOT, an empty bounding set), so it cannot unmount its /proc
 * to uncover the host's. The child runs only system calls between clone
 * and execve (the parent may have threads), and reports the step that
 * failed, with its errno, on a pipe that execve closes. */
static int spawn_isolated(mcp_upstream *u, al_child *ret, airlock_error *err)
{
        int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1};
        char uid_map[64], gid_map[64];
        int ul = snprintf(uid_map, sizeof(uid_map), "%u %u 1\n", (unsigned)geteuid(),
                          (unsigned)geteuid());
        int gl = snprintf(gid_map, sizeof(gid_map), "%u %u 1\n", (unsigned)getegid(),
                          (unsigned)getegid());
        int r = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) < 0 ||
            pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
                r = -errno;
        sigset_t all, old;
        sigfillset(&all);
        pid_t pid = -1;
        if (r >= 0) {
                /* No handler of ours may run in the child. */
                pthread_sigmask(SIG_SETMASK, &all, &old);
                pid =
                    (pid_t)syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | SIGCHLD,
                                   NULL, NULL, NULL, 0);
                if (pid == 0) {
                        int step = 0;
                        if (setpgid(0, 0) < 0)
                                goto fail;
                        step++;
                        if (child_write("/proc/self/setgroups", "deny", 4) < 0)
                                goto fail;
                        step++;
                        if (child_write("/proc/self/uid_map", uid_map, (size_t)ul) < 0)
                                goto fail;
                        step++;
                        if (child_write("/proc/self/gid_map", gid_map, (size_t)gl) < 0)
                                goto fail;
                        step++;
                        if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
                                goto fail;
                        step++;
                        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
                            0)
                                goto fail;
                        step++;
                        for (int cap = 0; cap < 64; cap++)
                                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                                        goto fail;
                        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
                            prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0,
                                  0) < 0)
                                goto fail;
                        step++;
                        if (child_dup(in[1], 0) < 0 || child_dup(out[1], 1) < 0 ||
                            child_dup(errp[1], 2) < 0)
                                goto fail;
                        step++;
                        if (chdir(u->cwd) < 0)
                                goto fail;
                        step++;
                        /* Everything else closes at execve, the report
                         * pipe with it. */
                        syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
                        struct sigaction dfl = {.sa_handler = SIG_DFL};
                        for (int sig = 1; sig < NSIG; sig++)
                                (void)sigaction(sig, &dfl, NULL);
                        sigset_t none;
                        sigemptyset(&none);
                        sigprocmask(SIG_SETMASK, &none, NULL);
                        execve(u->exe, u->argv, u->envp);
                fail:;
                        int rec[2] = {step, errno};
                        (void)!write(rep[1], rec, sizeof(rec));
                        _exit(127);
                }
                if (pid < 0)
                        r = -errno;
                pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
        close_fd(&in[1]);
        close_fd(&out[1]);
        close_fd(&errp[1]);
        close_fd(&rep[1]);
        if (r < 0) {
                r = al_error(err, r, NULL,
                             "server '%s': cannot start it in namespaces of its own: %s%s", u->name,
                             strerror(-r),
                             pid < 0 && r != -ENOMEM && r != -EAGAIN
                                 ? " (is kernel.unprivileged_userns_clone or "
                                   "user.max_user_namespaces 0?)"
                                 : "");
        } else {
                int rec[2];
                ssize_t n;
                while ((n = read(rep[0], rec, sizeof(rec))) < 0 && errno == EINTR)
                        ;
                if (n == (ssize_t)sizeof(rec)) {
                        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                        int step =
                            rec[0] >= 0 && rec[0] < (int)ARRAY_SIZE(spawn_steps) ? rec[0] : 0;
                        r = al_error(err, -rec[1], NULL, "server '%s': cannot start %s: %s: %s",
                                     u->name, u->exe, spawn_steps[step], strerror(rec[1]));
                }
        }
        close_fd(&rep[0]);
        if (r < 0) {
                close_fd(&in[0]);
                close_fd(&out[0]);
                close_fd(&errp[0]);
                return r;
        }
        *ret = (al_child){pid, in[0], out[0], errp[0]};
        return 0;
}

static int spawn(mcp_upstream *u, airlock_error *err)
{
        al_child ch;
        int r = spawn_isolated(u, &ch, err);
        if (r < 0)
                return r;
        u->pid = ch.pid;
        u->in_fd = ch.in_fd;
        u->out_fd = ch.out_fd;
        u->err_fd = ch.err_fd;
        u->skip = (struct line_skip){0};
        fcntl(u->out_fd, F_SETFL, O_NONBLOCK);
        fcntl(u->err_fd, F_SETFL, O_NONBLOCK);
        u->len = 0;
        u->ring_at = 0;
        u->ring_full = false;
        return 0;
}

/* ---- messages ------------------------------------------------------- */

/* The time left until the earlier of deadline and now + timeout_s, in ms
 * for poll (at least 0). */
static int ms_left(uint64_t deadline)
{
        uint64_t now = al_now_ns();
        if (now >= deadline)
                return 0;
        uint64_t ms = (deadline - now + 999999) / 1000000;
        return ms > INT_MAX ? INT_MAX : (int)ms;
}

static uint64_t deadline_of(const mcp_bounds *b, double timeout_s)
{
        uint64_t d = al_now_ns() + (uint64_t)(timeout_s * 1e9);
        if (b && b->deadline_ns && b->deadline_ns < d)
                d = b->deadline_ns;
        return d;
}

static bool cancelled(const mcp_bounds *b)
{
        if (!b || b->cancel_fd < 0)
                return false;
        struct pollfd p = {b->cancel_fd, POLLIN, 0};
        return poll(&p, 1, 0) == 1;
}

/* Writes msg and a newline to the server, within deadline. */
static int http_message(mcp_upstream *u, json_t *msg, json_int_t id, uint64_t deadline,
                        const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err);

static int send_msg(mcp_upstream *u, json_t *msg, uint64_t deadline, airlock_error *err)
{
        if (u->url)
                return http_message(u, msg, 0, deadline, NULL, 1u << 20, NULL, err);
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        size_t n = strlen(text);
        text[n] = '\n'; /* json_dumps leaves room for the NUL only: put it back below */
        size_t off = 0;
        int r = 0;
        while (off < n + 1) {
                ssize_t w = send(u->in_fd, text + off, n + 1 - off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                        off += (size_t)w;
                        continue;
                }
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0 && errno == EAGAIN) {
                        struct pollfd p = {u->in_fd, POLLOUT, 0};
                        int t = ms_left(deadline);
                        if (t == 0 || poll(&p, 1, t) == 0) {
                                r = al_error(err, -ETIMEDOUT, NULL,
                                             "server '%s' does not read its input", u->name);
                                break;
                        }
                        drain_stderr(u);
                        continue;
                }
                r = al_error(err, -EPIPE, NULL, "server '%s' closed its input", u->name);
                break;
        }
        text[n] = '\0';
        return r;
}

/* Notes a notification the client acts on: notifications/tools/list_changed
 * (the stubs are those of the build; mcp_upstream_list_changed). The rest
 * are dropped. */
static void notified(mcp_upstream *u, const json_t *msg)
{
        const char *m = json_string_value(json_object_get(msg, "method"));
        if (m && !json_object_get(msg, "id") && strcmp(m, "notifications/tools/list_changed") == 0)
                u->list_changed = true;
}

bool mcp_upstream_list_changed(const mcp_upstream *u)
{
        return u && u->list_changed;
}

/* The reply to a request the server makes of us: "ping" is answered, the
 * rest (sampling, elicitation, roots) this client does not offer. */
static void answer_request(mcp_upstream *u, json_t *msg, uint64_t deadline)
{
        const char *m = json_string_value(json_object_get(msg, "method"));
        json_t *id = json_object_get(msg, "id");
        _cleanup_json_ json_t *reply = m && strcmp(m, "ping") == 0
                                           ? jsonrpc_result(id, json_object())
                                           : jsonrpc_error(id, RPC_METHOD_NOT_FOUND, NULL,
                                                           "airlock's client does not offer this");
        airlock_error e;
        if (reply)
                (void)send_msg(u, reply, deadline, &e);
}

/* The message for a server that is gone: its exit status and the end of
 * its stderr. */
static int gone(mcp_upstream *u, const char *what, airlock_error *err)
{
        int st = 0;
        kill_now(u, &st);
        _cleanup_free_ char *tail = ring_tail(u, 600);
        char how[64];
        if (WIFEXITED(st))
                snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
                snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(st));
        else
                snprintf(how, sizeof(how), "stopped");
        return al_error(err, -EPIPE, NULL, "server '%s' %s%s%s%s%s%s", u->name, how,
                        *what ? " " : "", what, tail && *tail ? " (its stderr: " : "",
                        tail && *tail ? tail : "", tail && *tail ? ")" : "");
}

/* Reads what the server wrote into u->buf, which grows by READ_CHUNK as
 * needed. Returns the bytes read, 0 when there was nothing after all
 * (EINTR, EAGAIN), -EPIPE at the end of its output (its stderr read for
 * why first) or -ENOMEM with err filled. */
static ssize_t read_more(mcp_upstream *u, airlock_error *err)
{
        if (u->cap - u->len < READ_CHUNK) {
                size_t cap = u->cap ? u->cap * 2 : 2 * READ_CHUNK;
                if (cap < u->len + READ_CHUNK)
                        cap = u->len + READ_CHUNK;
                char *nb = realloc(u->buf, cap);
                if (!nb)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                u->buf = nb;
                u->cap = cap;
        }
        ssize_t n = read(u->out_fd, u->buf + u->len, READ_CHUNK);
        if (n > 0) {
                u->len += (size_t)n;
                return n;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return 0;
        /* Its stderr may still hold why. */
        struct pollfd pe = {u->err_fd, POLLIN, 0};
        if (u->err_fd >= 0 && poll(&pe, 1, 100) > 0)
                drain_stderr(u);
        return -EPIPE;
}

/* The notification that cancels request id upstream, after r (-ETIMEDOUT
 * or -ECANCELED) ended the wait for its reply. NULL when out of memory. */
static json_t *cancel_notice(json_int_t id, int r)
{
        json_t *params =
            json_pack("{s:I, s:s}", "requestId", id, "reason",
                      r == -ETIMEDOUT ? "airlock: the call timed out" : "airlock: the run ended");
        return params ? jsonrpc_notification("notifications/cancelled", params) : NULL;
}

/* Charges what parsing n bytes of a tools/list page would hold (its JSON
 * values, counted by a pass that builds nothing, times JSONRPC_VALUE_COST,
 * plus the bytes) against what the list may still take, before the page
 * is parsed: a page of "[0,0,0,..." parses into twenty times its size.
 * -EFBIG names the cap; 0 when no list is being read. */
static int list_charge(mcp_upstream *u, const char *d, size_t n, airlock_error *err)
{
        if (!u->listing)
                return 0;
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(d, n, &values, &depth);
        uint64_t cost = values * JSONRPC_VALUE_COST + n;
        u->list_values += values;
        if (cost > u->list_cost_left)
                return al_error(err, -EFBIG, NULL,
                                "its tool list would take more than %u MiB once parsed (%llu JSON "
                                "values so far), airlock's cap of one server's tool list",
                                MCP_LIST_COST >> 20, (unsigned long long)u->list_values);
        u->list_cost_left -= cost;
        return 0;
}

/* Reads until the reply to request id: answers the server's own requests,
 * drops notifications and replies to other (cancelled) ids. A line longer
 * than max_line, or one that is not a JSON-RPC message, is -EPROTO. */
static int read_reply(mcp_upstream *u, json_int_t id, uint64_t deadline, const mcp_bounds *b,
                      size_t max_line, json_t **ret, airlock_error *err)
{
        for (;;) {
                char *nl = u->len ? memchr(u->buf, '\n', u->len) : NULL;
                if (nl) {
                        size_t n = (size_t)(nl - u->buf);
                        int rc = list_charge(u, u->buf, n, err);
                        if (rc < 0)
                                return rc;
                        json_error_t jerr;
                        json_t *msg = n ? json_loadb(u->buf, n, 0, &jerr) : NULL;
                        memmove(u->buf, nl + 1, u->len - n - 1);
                        u->len -= n + 1;
                        if (n == 0 || (n == 1 && u->buf[0] == '\r'))
                                continue;
                        jsonrpc_kind kind = jsonrpc_kind_of(msg);
                        if (kind == JSONRPC_INVALID) {
                                json_decref(msg);
                                return al_error(err, -EPROTO, NULL,
                                                "server '%s' sent a line that is not a JSON-RPC "
                                                "2.0 message%s%s",
                                                u->name, msg ? "" : ": ", msg ? "" : jerr.text);
                        }
                        if (kind == JSONRPC_REQUEST) {
                                answer_request(u, msg, deadline);
                        } else if (kind == JSONRPC_NOTIFICATION) {
                                notified(u, msg);
                        } else if (jsonrpc_is_response_to(msg, id)) {
                                *ret = msg;
                                return 0;
                        }
                        json_decref(msg);
                        continue;
                }
                if (u->len > max_line)
                        return al_error(err, -E2BIG, NULL,
                                        "server '%s' sent a message larger than %zu bytes", u->name,
                                        max_line);
                if (cancelled(b))
                        return al_error(err, -ECANCELED, NULL, "the run was cancelled");
                int t = ms_left(deadline);
                if (t == 0)
                        return al_error(err, -ETIMEDOUT, NULL, "timed out");
                struct pollfd p[3] = {{u->out_fd, POLLIN, 0},
                                      {u->err_fd, POLLIN, 0},
                                      {b ? b->cancel_fd : -1, POLLIN, 0}};
                int pr = poll(p, 3, t);
                if (pr < 0 && errno != EINTR)
                        return al_error(err, -errno, NULL, "poll: %m");
                if (p[1].revents)
                        drain_stderr(u);
                if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                ssize_t n = read_more(u, err);
                if (n == -EPIPE)
                        return gone(u, "", err);
                if (n < 0)
                        return (int)n;
        }
}

/* ---- Streamable HTTP ------------------------------------------------- */

/* POSTs msg (or DELETEs the session when msg is NULL) and returns the
 * response {"status", "headers", "body_base64"} of the gateway. */
static int http_exchange_as(mcp_upstream *u, const char *session, const char *proto, json_t *msg,
                            uint64_t deadline, const mcp_bounds *b, size_t max_body, json_t **ret,
                            airlock_error *err)
{
        _cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : strdup("");
        _cleanup_free_ char *body =
            text ? al_base64_encode((const unsigned char *)text, strlen(text), NULL) : NULL;
        json_t *h = json_deep_copy(u->headers);
        if (!body || !h) {
                json_decref(h);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        json_object_set_new(h, "Content-Type", json_string("application/json"));
        json_object_set_new(h, "Accept", json_string("application/json, text/event-stream"));
        if (session)
                json_object_set_new(h, "Mcp-Session-Id", json_string(session));
        if (proto && proto[0])
                json_object_set_new(h, "MCP-Protocol-Version", json_string(proto));
        _cleanup_json_ json_t *req =
            json_pack("{s:s, s:s, s:o, s:s}", WIRE_KEY_METHOD, msg ? "POST" : "DELETE",
                      WIRE_KEY_URL, u->url, WIRE_KEY_HEADERS, h, WIRE_KEY_BODY_BASE64, body);
        if (!req)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        airlock_limits lim;
        airlock_limits_default(&lim);
        lim.http_max_response = max_body;
        lim.http_max_request = (16u << 20) + 4096;
        uint64_t now = al_now_ns();
        lim.http_timeout_s = deadline > now ? (double)(deadline - now) / 1e9 + 1 : 1;
        airlock_error e;
        airlock_error_clear(&e);
        int r = gateway_request_ex(u->allow, &lim, req, deadline, b ? b->cancel_fd : -1, ret, &e);
        if (r == -ETIMEDOUT || r == -ECANCELED)
                return al_error(err, r, NULL, "%s",
                                r == -ETIMEDOUT ? "timed out" : "the run was cancelled");
        if (r < 0)
                return al_error(err, r == -E2BIG ? -E2BIG : -EPIPE, NULL, "server '%s': %s",
                                u->name, e.message);
        return 0;
}

/* http_exchange_as with u's own session: only while nobody else uses it
 * (the session's start, the DELETE at the end). */
static int http_exchange(mcp_upstream *u, json_t *msg, uint64_t deadline, const mcp_bounds *b,
                         size_t max_body, json_t **ret, airlock_error *err)
{
        return http_exchange_as(u, u->session, u->initialized || msg ? u->proto : NULL, msg,
                                deadline, b, max_body, ret, err);
}

/* Finds the reply to id among the messages of a response body: one JSON
 * value (a message or a batch) or a stream of server-sent events, each
 * event's data lines one message. */
static int http_find_reply(mcp_upstream *u, const char *ctype, const unsigned char *body,
                           size_t len, json_int_t id, json_t **ret, airlock_error *err)
{
        bool sse = ctype && strncmp(ctype, "text/event-stream", 17) == 0;
        dynbuf data;
        dynbuf_init(&data, len + 1);
        size_t at = 0;
        int r = 0;
        while (at <= len && r >= 0) {
                const unsigned char *nl = at < len ? memchr(body + at, '\n', len - at) : NULL;
                size_t end = nl ? (size_t)(nl - body) : len;
                size_t n = end - at;
                const char *line = (const char *)body + at;
                if (n && line[n - 1] == '\r')
                        n--;
                bool dispatch = !sse ? end == len : n == 0;
                if (sse && n >= 5 && strncmp(line, "data:", 5) == 0) {
                        size_t off = n > 5 && line[5] == ' ' ? 6 : 5;
                        if (data.len)
                                r = dynbuf_append(&data, "\n", 1);
                        if (r >= 0)
                                r = dynbuf_append(&data, line + off, n - off);
                } else if (!sse) {
                        r = dynbuf_append(&data, line, end - at);
                        if (r >= 0 && nl)
                                r = dynbuf_append(&data, "\n", 1);
                }
                if ((dispatch || end == len) && data.len && r >= 0) {
                        json_error_t jerr;
                        json_t *v = json_loadb(data.data, data.len, 0, &jerr);
                        data.len = 0;
                        if (!v) {
                                r = al_error(err, -EPROTO, NULL,
                                             "server '%s' sent a message that is not JSON: %s",
                                             u->name, jerr.text);
                                break;
                        }
                        json_t *list = json_is_array(v) ? v : NULL;
                        size_t i, m = list ? json_array_size(list) : 1;
                        for (i = 0; i < m && !*ret; i++) {
                                json_t *x = list ? json_array_get(list, i) : v;
                                notified(u, x);
                                if (jsonrpc_is_response_to(x, id))
                                        *ret = json_incref(x);
                        }
                        json_decref(v);
                        if (*ret)
                                break;
                }
                if (!nl)
                        break;
                at = end + 1;
        }
        dynbuf_free(&data);
        if (r < 0)
                return r;
        if (!*ret)
                return al_error(err, -EPROTO, NULL,
                                "server '%s' answered without the reply to the request", u->name);
        return 0;
}

/* One message over HTTP with the session and protocol given: a
 * notification (id 0: 202 Accepted expected) or a request and its reply.
 * It changes nothing of u: *ret_status is the HTTP status and *ret_sid
 * (malloc'd, or NULL) the session id the server gave, for the caller to
 * take under the lock (http_apply). Calls of several threads at once. */
static int http_post(mcp_upstream *u, const char *session, const char *proto, json_t *msg,
                     json_int_t id, uint64_t deadline, const mcp_bounds *b, size_t max_line,
                     json_t **ret, int *ret_status, char **ret_sid, airlock_error *err)
{
        _cleanup_json_ json_t *resp = NULL;
        *ret_status = 0;
        *ret_sid = NULL;
        int r = http_exchange_as(u, session, proto, msg, deadline, b, max_line, &resp, err);
        if (r < 0)
                return r;
        int status = (int)json_integer_value(json_object_get(resp, WIRE_KEY_STATUS));
        json_t *hdrs = json_object_get(resp, WIRE_KEY_HEADERS);
        *ret_status = status;
        const char *sid = json_string_value(json_object_get(hdrs, "mcp-session-id"));
        if (sid && !(*ret_sid = strdup(sid)))
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (status == 404 && session)
                return al_error(err, -EPIPE, NULL, "server '%s' ended its session (HTTP 404)",
                                u->name);
        if (status < 200 || status > 299)
                return al_error(err, -EPROTO, NULL, "server '%s' answered HTTP %d", u->name,
                                status);
        if (id == 0)
                return 0;
        const char *b64 = json_string_value(json_object_get(resp, WIRE_KEY_BODY_BASE64));
        _cleanup_free_ unsigned char *body = NULL;
        size_t len = 0;
        if (!b64 || al_base64_decode(b64, strlen(b64), &body, &len) < 0)
                return al_error(err, -EPROTO, NULL, "server '%s' sent no body", u->name);
        r = list_charge(u, (const char *)body, len, err);
        if (r < 0)
                return r;
        return http_find_reply(u, json_string_value(json_object_get(hdrs, "content-type")), body,
                               len, id, ret, err);
}

/* What an answer says of the session, taken into u: a 404 to a request
 * that had a session is its end (the next call starts a new one), a new
 * Mcp-Session-Id replaces the old. sid is freed. */
static void http_apply(mcp_upstream *u, const char *session, int status, char *sid)
{
        if (status == 404 && session && u->session && strcmp(session, u->session) == 0) {
                free(u->session);
                u->session = NULL;
                u->initialized = false;
                u->gen++;
        } else if (sid && status >= 200 && status <= 299 &&
                   (!u->session || strcmp(sid, u->session) != 0)) {
                free(u->session);
                u->session = TAKE_PTR(sid);
        }
        free(sid);
}

/* One message over HTTP in u's own session (the session's start). */
static int http_message(mcp_upstream *u, json_t *msg, json_int_t id, uint64_t deadline,
                        const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err)
{
        int status = 0;
        char *sid = NULL;
        const char *proto = u->initialized || u->proto[0] ? u->proto : NULL;
        int r = http_post(u, u->session, proto, msg, id, deadline, b, max_line, ret, &status, &sid,
                          err);
        http_apply(u, u->session, status, sid);
        return r;
}

/* The result of a reply, or its error as -EREMOTEIO. */
static int reply_result(mcp_upstream *u, json_t *reply, json_t **ret, airlock_error *err)
{
        json_t *e = json_object_get(reply, "error");
        if (e) {
                const char *m = json_string_value(json_object_get(e, "message"));
                _cleanup_free_ char *clean = al_utf8_sanitize(m ? m : "", m ? strlen(m) : 0);
                return al_error(err, -EREMOTEIO, NULL, "%.600s (JSON-RPC error %lld)",
                                clean && *clean ? clean : "no message",
                                (long long)json_integer_value(json_object_get(e, "code")));
        }
        json_t *res = json_object_get(reply, "result");
        if (!json_is_object(res))
                return al_error(err, -EPROTO, NULL, "server '%s' sent a reply without a result",
                                u->name);
        *ret = json_incref(res);
        return 0;
}

/* One request: method with params, its reply's "result" in *ret (or the
 * error reply as -EREMOTEIO with its message). A request that times out or
 * is cancelled is cancelled upstream too (notifications/cancelled). */
static int request(mcp_upstream *u, const char *method, json_t *params, uint64_t deadline,
                   const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err)
{
        json_int_t id = ++u->next_id;
        _cleanup_json_ json_t *msg = jsonrpc_request(id, method, params);
        if (!msg)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        _cleanup_json_ json_t *reply = NULL;
        int r;
        if (u->url) {
                r = http_message(u, msg, id, deadline, b, max_line, &reply, err);
        } else {
                r = send_msg(u, msg, deadline, err);
                if (r == -EPIPE)
                        return gone(u, "before the request could be sent", err);
                if (r < 0)
                        return r;
                r = read_reply(u, id, deadline, b, max_line, &reply, err);
        }
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                _cleanup_json_ json_t *c = cancel_notice(id, r);
                airlock_error e;
                if (c && (u->in_fd >= 0 || u->url))
                        (void)send_msg(u, c, al_now_ns() + (u->url ? 1000000000ull : 100000000ull),
                                       &e);
        }
        if (r < 0)
                return r;
        return reply_result(u, reply, ret, err);
}

/* Starts the process and the session: initialize, then the initialized
 * notification. The protocol revision asked for is the newest this client
 * speaks; a server that offers an older one this client knows is fine. */
static int start_session(mcp_upstream *u, const mcp_bounds *b, airlock_error *err)
{
        uint64_t now = al_now_ns();
        if (now < u->retry_at) {
                uint64_t bound = b && b->deadline_ns ? b->deadline_ns : UINT64_MAX;
                if (u->retry_at > bound)
                        return al_error(err, -EAGAIN, NULL,
                                        "server '%s' failed %u times in a row; the next restart "
                                        "is in %.1f s",
                                        u->name, u->failures, (double)(u->retry_at - now) / 1e9);
                struct timespec ts = {(time_t)((u->retry_at - now) / 1000000000ull),
                                      (long)((u->retry_at - now) % 1000000000ull)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        int r = u->url ? 0 : spawn(u, err);
        if (r < 0) {
                fail_process(u);
                return r;
        }
        free(u->session);
        u->session = NULL;
        u->proto[0] = '\0';
        uint64_t deadline = deadline_of(b, MCP_START_TIMEOUT_S);
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_LATEST,
                      "capabilities", "clientInfo", "name", "airlock", "version", AIRLOCK_VERSION);
        _cleanup_json_ json_t *res = NULL;
        airlock_error e;
        airlock_error_clear(&e);
        r = params ? request(u, "initialize", params, deadline, b, 1u << 20, &res, &e) : -ENOMEM;
        const char *v = json_string_value(json_object_get(res, "protocolVersion"));
        static const char *const known[] = {MCP_PROTOCOL_NEXT, MCP_PROTOCOL_LATEST, "2025-06-18",
                                            "2025-03-26"};
        bool ok = false;
        for (size_t i = 0; r >= 0 && v && i < ARRAY_SIZE(known); i++)
                ok |= strcmp(v, known[i]) == 0;
        if (r >= 0 && !ok)
                r = al_error(&e, -EPROTO, NULL,
                             "it offers protocol revision %.40s, which airlock "
                             "does not speak (%s or older to 2025-03-26)",
                             v ? v : "(none)", MCP_PROTOCOL_LATEST);
        if (r >= 0) {
                snprintf(u->proto, sizeof(u->proto), "%s", v);
                _cleanup_json_ json_t *n = jsonrpc_notification("notifications/initialized", NULL);
                r = n ? send_msg(u, n, deadline, &e) : -ENOMEM;
        }
        if (r < 0) {
                bool dead = u->pid == 0 && !u->url;
                fail_process(u);
                if (dead || r == -EPIPE)
                        return al_error(err, r, NULL, "%s", e.message);
                return al_error(err, r, NULL, "server '%s' did not start: %s", u->name, e.message);
        }
        u->initialized = true;
        return 0;
}

/* ---- the object ------------------------------------------------------ */

static void strv_free_wipe(char **v)
{
        for (char **p = v; p && *p; p++)
                secrets_wipe_free(*p, strlen(*p));
        free(v);
}

static void upstream_free(mcp_upstream *u)
{
        free(u->name);
        free(u->exe);
        for (char **p = u->argv; p && *p; p++)
                free(*p);
        free(u->argv);
        strv_free_wipe(u->envp);
        free(u->cwd);
        free(u->buf);
        free(u->url);
        free(u->session);
        allowlist_free(u->allow);
        if (u->headers) {
                const char *k;
                json_t *v;
                json_object_foreach (u->headers, k, v) {
                        size_t n = json_string_length(v);
                        if (n)
                                explicit_bzero((char *)json_string_value(v), n);
                }
                json_decref(u->headers);
        }
        pthread_mutex_destroy(&u->lock);
        pthread_cond_destroy(&u->cv);
        free(u);
}

/* "${secret:NAME}" in v replaced by the values (malloc'd, for the server's
 * environment or headers only), for the server named server at url (NULL
 * for one started on the host). An unknown secret is -ENOENT naming it; a
 * secret whose own targets do not name the server is -EACCES naming the
 * server, the secret and its targets (secrets_value_for_server). */
static int expand(const char *server, const char *url, const char *key, const char *v,
                  const secret_store *secrets, char **ret, airlock_error *err)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        const char *p = v;
        int r = 0;
        for (const char *s; r >= 0 && (s = strstr(p, "${secret:"));) {
                const char *e = strchr(s + 9, '}');
                char name[SECRET_NAME_MAX + 1];
                size_t n = (size_t)(e - (s + 9));
                memcpy(name, s + 9, n);
                name[n] = '\0';
                const unsigned char *val;
                size_t len;
                airlock_error why;
                airlock_error_clear(&why);
                r = secrets_value_for_server(secrets, name, server, url, &val, &len, &why);
                if (r < 0) {
                        al_error(err, r, NULL, "server '%s': \"%s\" names ${secret:%s}: %s", server,
                                 key, name, why.message);
                        break;
                }
                r = dynbuf_append(&b, p, (size_t)(s - p));
                if (r >= 0)
                        r = dynbuf_append(&b, val, len);
                p = e + 1;
        }
        if (r >= 0)
                r = dynbuf_append(&b, p, strlen(p) + 1);
        if (r < 0) {
                if (b.data)
                        explicit_bzero(b.data, b.len);
                dynbuf_free(&b);
                return r == -ENOENT || r == -EACCES ? r : al_error(err, r, NULL, "out of memory");
        }
        *ret = dynbuf_take(&b, NULL);
        return 0;
}

/* Resolves the command as check_server did: against cwd or on PATH. */
static char *resolve_exe(const char *cmd, const char *cwd, const char *path)
{
        char buf[PATH_MAX];
        if (strchr(cmd, '/')) {
                snprintf(buf, sizeof(buf), "%s%s%s", cmd[0] == '/' ? "" : cwd,
                         cmd[0] == '/' ? "" : "/", cmd);
                return access(buf, X_OK) == 0 ? strdup(buf) : NULL;
        }
        if (!path)
                path = "/usr/local/bin:/usr/bin:/bin";
        for (const char *p = path;;) {
                size_t n = strcspn(p, ":");
                if (n && snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, cmd) < (int)sizeof(buf)) {
                        struct stat st;
                        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
                                return strdup(buf);
                }
                if (!p[n])
                        return NULL;
                p += n + 1;
        }
}

/* A server at a "url": its headers with the secrets put in, and an
 * allow-list of its URL alone, so that the gateway's address rules (a
 * private or loopback address only when the URL names it) hold for it as
 * for the guest's own requests. */
static int http_new(mcp_upstream *u, const mcp_spec *spec, const secret_store *secrets,
                    airlock_error *err)
{
        const json_t *o = spec->json;
        u->url = strdup(json_string_value(json_object_get(o, "url")));
        u->headers = json_object();
        if (!u->url || !u->headers)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        const char *key;
        const json_t *v;
        json_object_foreach (json_object_get(o, "headers"), key, v) {
                char *val = NULL;
                int r =
                    expand(spec->name, u->url, "headers", json_string_value(v), secrets, &val, err);
                if (r < 0)
                        return r;
                json_object_set_new(u->headers, key, json_string(val));
                secrets_wipe_free(val, strlen(val));
        }
        int r = allowlist_new(&u->allow, err);
        if (r >= 0)
                r = allowlist_add(u->allow, u->url, "POST,DELETE", err);
        if (r < 0)
                return al_error(err, r, spec->file, "server '%s': \"url\": %s", spec->name,
                                err ? err->message : "not a URL the gateway takes");
        return 0;
}

static int upstream_new(const mcp_spec *spec, const secret_store *secrets, mcp_upstream **ret,
                        airlock_error *err)
{
        mcp_upstream *u = calloc(1, sizeof(*u));
        if (!u)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        pthread_mutex_init(&u->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&u->cv, &ca);
        pthread_condattr_destroy(&ca);
        u->in_fd = u->out_fd = u->err_fd = -1;
        const json_t *o = spec->json;
        if (json_object_get(o, "url")) {
                u->name = strdup(spec->name);
                int r = u->name ? http_new(u, spec, secrets, err)
                                : al_error(err, -ENOMEM, NULL, "out of memory");
                if (r < 0) {
                        upstream_free(u);
                        return r;
                }
                *ret = u;
                return 0;
        }
        const json_t *args = json_object_get(o, "args"), *env = json_object_get(o, "env");
        const char *cwd = json_string_value(json_object_get(o, "cwd"));
        char cwdbuf[PATH_MAX];
        if (cwd && cwd[0] != '/') {
                snprintf(cwdbuf, sizeof(cwdbuf), "%s/%s", spec->dir, cwd);
                cwd = cwdbuf;
        }
        u->name = strdup(spec->name);
        u->cwd = strdup(cwd ? cwd : spec->dir);
        size_t na = json_array_size(args);
        u->argv = calloc(na + 2, sizeof(char *));
        int r = u->name && u->cwd && u->argv ? 0 : -ENOMEM;
        const char *cmd = json_string_value(json_object_get(o, "command"));
        if (r >= 0)
                r = (u->argv[0] = strdup(cmd)) ? 0 : -ENOMEM;
        for (size_t i = 0; r >= 0 && i < na; i++)
                r = (u->argv[i + 1] = strdup(json_string_value(json_array_get(args, i)))) ? 0
                                                                                          : -ENOMEM;
        /* The environment: the few variables a program expects of its
         * user, from the host, then the server's own "env". */
        static const char *const inherit[] = {"HOME", "LOGNAME", "PATH", "SHELL",
                                              "TERM", "USER",    "LANG"};
        size_t ne = json_object_size(env) + ARRAY_SIZE(inherit) + 1, k = 0;
        u->envp = calloc(ne, sizeof(char *));
        if (r >= 0 && !u->envp)
                r = -ENOMEM;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(inherit); i++) {
                const char *v = getenv(inherit[i]);
                if (!v || json_object_get(env, inherit[i]))
                        continue;
                if (asprintf(&u->envp[k], "%s=%s", inherit[i], v) < 0) {
                        u->envp[k] = NULL;
                        r = -ENOMEM;
                } else {
                        k++;
                }
        }
        if (r < 0) {
                upstream_free(u);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)env, key, v) {
                _cleanup_free_ char *val = NULL;
                r = expand(spec->name, NULL, "env", json_string_value(v), secrets, &val, err);
                if (r < 0) {
                        upstream_free(u);
                        return r;
                }
                size_t len = strlen(key) + 1 + strlen(val) + 1;
                char *e = malloc(len);
                if (e)
                        snprintf(e, len, "%s=%s", key, val);
                secrets_wipe_free(TAKE_PTR(val), strlen(val));
                if (!e) {
                        upstream_free(u);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                u->envp[k++] = e;
        }
        const char *path = json_string_value(json_object_get(env, "PATH"));
        u->exe = resolve_exe(cmd, u->cwd, path ? path : getenv("PATH"));
        if (!u->exe) {
                al_error(err, -ENOENT, spec->file,
                         "server '%s': \"command\" '%.200s' is not an "
                         "executable file%s",
                         spec->name, cmd, strchr(cmd, '/') ? "" : " on PATH");
                upstream_free(u);
                return -ENOENT;
        }
        *ret = u;
        return 0;
}

int mcp_upstream_start(const mcp_spec *spec, const secret_store *secrets, mcp_upstream **ret,
                       json_t **ret_tools, airlock_error *err)
{
        mcp_upstream *u = NULL;
        int r = upstream_new(spec, secrets, &u, err);
        if (r < 0)
                return r;
        mcp_bounds b = {al_now_ns() + (uint64_t)(MCP_START_TIMEOUT_S * 1e9), -1, 0};
        r = start_session(u, &b, err);
        json_t *tools = r >= 0 ? json_array() : NULL;
        if (r >= 0 && !tools)
                r = al_error(err, -ENOMEM, NULL, "out of memory");
        /* Every page of tools/list, within the start's time, and within
         * the list's caps (docs/design.md, "Upstream MCP servers"): its
         * bytes over all pages (each page's line may be no longer than
         * what is left of them), what parsing them costs (list_charge,
         * before each page is parsed), its tools, and each description,
         * checked as each page comes, so that a hostile list fails the
         * build at the first page past a cap. */
        _cleanup_json_ json_t *cursor = NULL;
        size_t bytes_left = MCP_LIST_BYTES;
        u->listing = true;
        u->list_cost_left = MCP_LIST_COST;
        u->list_values = 0;
        for (int page = 0; r >= 0; page++) {
                if (page == LIST_PAGES_MAX) {
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list has more than %d pages", u->name,
                                     LIST_PAGES_MAX);
                        break;
                }
                _cleanup_json_ json_t *params =
                    cursor ? json_pack("{s:O}", "cursor", cursor) : json_object();
                _cleanup_json_ json_t *res = NULL;
                airlock_error e;
                airlock_error_clear(&e);
                r = request(u, "tools/list", params, b.deadline_ns, &b, bytes_left, &res, &e);
                if (r == -E2BIG) {
                        r = al_error(err, r, NULL,
                                     "server '%s': tools/list: its tool list is more than %u MiB "
                                     "over its pages, airlock's cap of one server's tool list "
                                     "(leave tools out in the server's own settings, or split it)",
                                     u->name, MCP_LIST_BYTES >> 20);
                        break;
                }
                if (r < 0) {
                        r = al_error(err, r, NULL, "server '%s': tools/list: %s", u->name,
                                     e.message);
                        break;
                }
                /* The page's bytes: its line and what came before it. */
                size_t took = json_dumpb(res, NULL, 0, JSON_COMPACT);
                bytes_left = took < bytes_left ? bytes_left - took : 0;
                json_t *list = json_object_get(res, "tools");
                if (!json_is_array(list)) {
                        r = al_error(err, -EPROTO, NULL,
                                     "server '%s': tools/list: the result has no \"tools\" array",
                                     u->name);
                        break;
                }
                if (json_array_size(tools) + json_array_size(list) > MCP_LIST_TOOLS) {
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list: more than %d tools, airlock's cap "
                                     "of one server's tool list",
                                     u->name, MCP_LIST_TOOLS);
                        break;
                }
                size_t i;
                json_t *t;
                json_array_foreach (list, i, t) {
                        const json_t *d = json_object_get(t, "description");
                        if (json_string_length(d) <= MCP_DESC_MAX)
                                continue;
                        const char *name = json_string_value(json_object_get(t, "name"));
                        _cleanup_free_ char *clean =
                            al_utf8_sanitize(name ? name : "?", name ? strlen(name) : 1);
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list: the description of tool '%.100s' "
                                     "is %zu bytes, more than %u KiB, airlock's cap of a tool's "
                                     "description",
                                     u->name, clean ? clean : "?", json_string_length(d),
                                     MCP_DESC_MAX >> 10);
                        break;
                }
                if (r < 0)
                        break;
                json_array_extend(tools, list);
                json_decref(cursor);
                cursor = json_incref(json_object_get(res, "nextCursor"));
                if (!json_is_string(cursor))
                        break;
        }
        u->listing = false;
        if (r < 0) {
                json_decref(tools);
                mcp_upstream_stop(u);
                return r;
        }
        u->failures = 0;
        *ret = u;
        *ret_tools = tools;
        return 0;
}

/* ---- calls in flight at once (stdio) ----------------------------------- */

/* Takes the complete lines of u->buf as messages into msgs. A line that is
 * not a JSON-RPC 2.0 message is -EPROTO. Only the reader calls it. */
static int take_lines(mcp_upstream *u, json_t *msgs, airlock_error *err)
{
        char *nl;
        while (u->len && (nl = memchr(u->buf, '\n', u->len))) {
                size_t n = (size_t)(nl - u->buf);
                json_error_t jerr;
                json_t *msg = n && !(n == 1 && u->buf[0] == '\r') ? json_loadb(u->buf, n, 0, &jerr)
                                                                  : json_object();
                bool blank = n == 0 || (n == 1 && u->buf[0] == '\r');
                memmove(u->buf, nl + 1, u->len - n - 1);
                u->len -= n + 1;
                if (blank) {
                        json_decref(msg);
                        continue;
                }
                if (jsonrpc_kind_of(msg) == JSONRPC_INVALID) {
                        json_decref(msg);
                        return al_error(err, -EPROTO, NULL,
                                        "server '%s' sent a line that is not a JSON-RPC 2.0 "
                                        "message%s%s",
                                        u->name, msg ? "" : ": ", msg ? "" : jerr.text);
                }
                json_array_append_new(msgs, msg);
        }
        return 0;
}

/* Feeds n bytes of a line being dropped to the scan that finds its
 * top-level "id" (an integer: airlock's requests have such ids), keeping
 * none of them. Whatever the bytes are, the scan is bounded and ends in
 * some state: a line that is not JSON finds no id, and is dropped all the
 * same. */
static void skip_scan(struct line_skip *k, const char *d, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                char c = d[i];
                if (k->in_str) {
                        if (k->esc)
                                k->esc = false, k->key_len = 5; /* an escape: not "id" */
                        else if (c == '\\')
                                k->esc = true;
                        else if (c == '"') {
                                k->in_str = false;
                                if (k->is_key)
                                        k->key_is_id =
                                            k->key_len == 2 && k->key[0] == 'i' && k->key[1] == 'd';
                        } else if (k->is_key && k->key_len < sizeof(k->key))
                                k->key[k->key_len++] = c;
                        else
                                k->key_len = 5;
                        continue;
                }
                if (k->in_id) {
                        if (c >= '0' && c <= '9' && k->digits < 18) {
                                k->id = k->id * 10 + (c - '0');
                                k->digits++;
                                continue;
                        }
                        if (c == '-' && !k->digits && !k->neg) {
                                k->neg = true;
                                continue;
                        }
                        if ((c == ' ' || c == '\t' || c == '\r') && !k->digits)
                                continue;
                        k->in_id = false;
                        if (k->digits &&
                            (c == ',' || c == '}' || c == ' ' || c == '\t' || c == '\r')) {
                                k->has_id = true;
                                k->id = k->neg ? -k->id : k->id;
                        }
                }
                switch (c) {
                case '"':
                        k->in_str = true;
                        k->is_key = k->depth == 1 && k->expect_key;
                        k->key_len = 0;
                        k->expect_key = false;
                        break;
                case '{':
                case '[':
                        k->depth++;
                        k->expect_key = k->depth == 1 && c == '{';
                        break;
                case '}':
                case ']':
                        k->depth--;
                        break;
                case ',':
                        k->expect_key = k->depth == 1;
                        break;
                case ':':
                        if (k->depth == 1 && k->key_is_id) {
                                k->in_id = true;
                                k->id = 0;
                                k->digits = 0;
                                k->neg = false;
                        }
                        k->key_is_id = false;
                        break;
                default:
                        break;
                }
        }
}

/* What read_some read and dropped: a whole line longer than the cap of
 * every call waiting, and the id it answers, when it has one. */
typedef struct line_dropped {
        bool done, has_id;
        json_int_t id;
        size_t len;
} line_dropped;

/* Drops what u->buf holds of the line being skipped, to its end if it is
 * there: then *drop says so and the bytes after it stay. Past
 * MCP_DISCARD_MAX the line is -E2BIG (the caller kills the server). */
static int skip_more(mcp_upstream *u, line_dropped *drop, airlock_error *err)
{
        char *nl = u->len ? memchr(u->buf, '\n', u->len) : NULL;
        size_t n = nl ? (size_t)(nl - u->buf) : u->len;
        skip_scan(&u->skip, u->buf, n);
        u->skip.len += n;
        if (u->skip.len > MCP_DISCARD_MAX)
                return al_error(err, -E2BIG, NULL,
                                "server '%s' sent a message larger than %u MiB, the most airlock "
                                "reads and drops",
                                u->name, MCP_DISCARD_MAX >> 20);
        if (!nl) {
                u->len = 0;
                return 0;
        }
        /* A final '}' that ended the object also ends a trailing id. */
        skip_scan(&u->skip, ",", 1);
        *drop = (line_dropped){.done = true,
                               .has_id = u->skip.has_id && u->skip.depth <= 0,
                               .id = u->skip.id,
                               .len = u->skip.len};
        memmove(u->buf, nl + 1, u->len - n - 1);
        u->len -= n + 1;
        u->skip = (struct line_skip){0};
        return 0;
}

/* Reads what the server writes until until_ns, a cancel, or a message:
 * the messages go into msgs. The end of its output is -EPIPE (the caller
 * reaps it, under the lock). A line longer than max_line (the largest cap
 * of the calls waiting) is read on and dropped, never held, up to
 * MCP_DISCARD_MAX: *drop then says which call it answered, so that that
 * call fails naming its maxResultBytes while the server, and its state,
 * stay; past that it is -E2BIG. Only the reader calls it, without the
 * lock. */
static int read_some(mcp_upstream *u, uint64_t until_ns, int cancel_fd, size_t max_line,
                     json_t *msgs, line_dropped *drop, airlock_error *err)
{
        *drop = (line_dropped){0};
        int r = u->skip.on ? 0 : take_lines(u, msgs, err);
        if (r < 0 || json_array_size(msgs))
                return r;
        if (!u->skip.on && u->len > max_line)
                u->skip = (struct line_skip){.on = true};
        if (u->skip.on) {
                r = skip_more(u, drop, err);
                if (r < 0 || drop->done)
                        return r;
        }
        struct pollfd p[3] = {
            {u->out_fd, POLLIN, 0}, {u->err_fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
        int pr = poll(p, 3, ms_left(until_ns));
        if (pr < 0 && errno != EINTR)
                return al_error(err, -errno, NULL, "poll: %m");
        if (p[1].revents)
                drain_stderr(u);
        if (pr <= 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
                return 0;
        ssize_t n = read_more(u, err);
        if (n <= 0)
                return (int)n;
        if (u->skip.on)
                return skip_more(u, drop, err);
        r = take_lines(u, msgs, err);
        if (r >= 0 && !json_array_size(msgs) && u->len > max_line) {
                u->skip = (struct line_skip){.on = true};
                r = skip_more(u, drop, err);
        }
        return r;
}

/* Ends the process of generation gen for every call waiting on it: the
 * message r/e is theirs. Under the lock, with nobody reading. */
static void fail_all(mcp_upstream *u, unsigned gen, int r, const airlock_error *e)
{
        if (gen != u->gen)
                return;
        airlock_error msg = *e;
        if (r == -EPIPE)
                r = gone(u, "", &msg); /* kills and reaps it, and says how it ended */
        fail_process(u);
        u->fail_code = r;
        snprintf(u->fail_msg, sizeof(u->fail_msg), "%s", msg.message);
        pthread_cond_broadcast(&u->cv);
}

/* Dispatches what the reader read: replies to their callers, the server's
 * requests answered. Under the lock. */
static void dispatch(mcp_upstream *u, json_t *msgs, uint64_t deadline)
{
        size_t i;
        json_t *m;
        json_array_foreach (msgs, i, m) {
                jsonrpc_kind kind = jsonrpc_kind_of(m);
                if (kind == JSONRPC_REQUEST) {
                        answer_request(u, m, deadline);
                        continue;
                }
                if (kind == JSONRPC_NOTIFICATION) {
                        notified(u, m);
                        continue;
                }
                for (pending *p = u->waiting; p; p = p->next)
                        if (!p->reply && jsonrpc_is_response_to(m, p->id))
                                p->reply = json_incref(m);
        }
        pthread_cond_broadcast(&u->cv);
}

/* tools/call on a stdio server, with other calls in flight: see the
 * fields of mcp_upstream. Called and returns with the lock held. */
/* The session of u started, by this caller or another: one caller starts
 * it (without the lock), the others wait for it. Called and returns with
 * the lock held. */
static int ensure_session(mcp_upstream *u, uint64_t deadline, const mcp_bounds *b,
                          airlock_error *err)
{
        struct timespec ts;
        while (!u->initialized) {
                if (u->starting) {
                        uint64_t t = deadline;
                        ts = (struct timespec){(time_t)(t / 1000000000ull),
                                               (long)(t % 1000000000ull)};
                        if (pthread_cond_clockwait(&u->cv, &u->lock, CLOCK_MONOTONIC, &ts) ==
                            ETIMEDOUT)
                                return al_error(err, -ETIMEDOUT, NULL,
                                                "server '%s' was still starting at the deadline",
                                                u->name);
                        continue;
                }
                u->starting = true;
                pthread_mutex_unlock(&u->lock);
                int r = start_session(u, b, err);
                pthread_mutex_lock(&u->lock);
                u->starting = false;
                pthread_cond_broadcast(&u->cv);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int stdio_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                      size_t max_line, json_t **ret, airlock_error *err)
{
        struct timespec ts;
        int r0 = ensure_session(u, deadline, b, err);
        if (r0 < 0)
                return r0;
        unsigned gen = u->gen;
        pending me = {.id = ++u->next_id, .max_line = max_line, .next = u->waiting};
        _cleanup_json_ json_t *msg = jsonrpc_request(me.id, "tools/call", params);
        if (!msg)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        int r = send_msg(u, msg, deadline, err);
        if (r < 0) {
                if (r == -EPIPE && !u->reading) {
                        airlock_error e = *err;
                        fail_all(u, gen, r, &e);
                        al_error(err, u->fail_code, NULL, "%s", u->fail_msg);
                        return u->fail_code;
                }
                return r;
        }
        u->waiting = &me;
        for (;;) {
                if (me.reply || me.dropped)
                        break;
                if (u->gen != gen) {
                        r = al_error(err, u->fail_code ? u->fail_code : -EPIPE, NULL, "%s",
                                     u->fail_msg);
                        break;
                }
                if (cancelled(b)) {
                        r = al_error(err, -ECANCELED, NULL, "the run was cancelled");
                        break;
                }
                if (al_now_ns() >= deadline) {
                        r = al_error(err, -ETIMEDOUT, NULL, "timed out");
                        break;
                }
                /* A slice at a time, so that a cancel is seen and the
                 * reading passes on when its reader's call is answered. */
                uint64_t slice = al_now_ns() + 100000000ull;
                if (slice > deadline)
                        slice = deadline;
                if (!u->reading) {
                        size_t cap = 0;
                        for (pending *p = u->waiting; p; p = p->next)
                                cap = p->max_line > cap ? p->max_line : cap;
                        u->reading = true;
                        pthread_mutex_unlock(&u->lock);
                        _cleanup_json_ json_t *msgs = json_array();
                        airlock_error e;
                        airlock_error_clear(&e);
                        line_dropped drop;
                        int rr =
                            msgs ? read_some(u, slice, b ? b->cancel_fd : -1, cap, msgs, &drop, &e)
                                 : -ENOMEM;
                        pthread_mutex_lock(&u->lock);
                        u->reading = false;
                        for (pending *p = u->waiting; rr >= 0 && drop.has_id && p; p = p->next)
                                if (p->id == drop.id && !p->reply)
                                        p->dropped = drop.len;
                        if (rr < 0)
                                fail_all(u, gen, rr, &e);
                        else
                                dispatch(u, msgs, deadline);
                        pthread_cond_broadcast(&u->cv);
                        continue;
                }
                ts = (struct timespec){(time_t)(slice / 1000000000ull),
                                       (long)(slice % 1000000000ull)};
                pthread_cond_clockwait(&u->cv, &u->lock, CLOCK_MONOTONIC, &ts);
        }
        for (pending **p = &u->waiting; *p; p = &(*p)->next)
                if (*p == &me) {
                        *p = me.next;
                        break;
                }
        if (me.reply) {
                r = reply_result(u, me.reply, ret, err);
                json_decref(me.reply);
                if (r >= 0 || r == -EREMOTEIO)
                        u->failures = 0;
                return r;
        }
        if (me.dropped) {
                u->failures = 0;
                return al_error(err, -EMSGSIZE, NULL,
                                "server '%s' sent a result of %zu bytes, more than the %zu of "
                                "\"maxResultBytes\" (and 4 KiB for the message around it); "
                                "airlock read and dropped it, and the server keeps running",
                                u->name, me.dropped, max_line - 4096);
        }
        if ((r == -ETIMEDOUT || r == -ECANCELED) && u->gen == gen && u->in_fd >= 0) {
                _cleanup_json_ json_t *c = cancel_notice(me.id, r);
                airlock_error e;
                if (c)
                        (void)send_msg(u, c, al_now_ns() + 100000000ull, &e);
        }
        return r;
}

/* tools/call on a server at a URL, with other calls in flight: the
 * session is started once (ensure_session); each call then POSTs with the
 * session it saw, without the lock, and takes what the answer says of the
 * session (http_apply) under it. A failure that leaves the session in an
 * unknown state ends it, unless a newer one was started meanwhile (gen).
 * Called and returns with the lock held. */
static int http_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                     size_t max_line, json_t **ret, airlock_error *err)
{
        int r = ensure_session(u, deadline, b, err);
        if (r < 0)
                return r;
        unsigned gen = u->gen;
        json_int_t id = ++u->next_id;
        _cleanup_free_ char *session = u->session ? strdup(u->session) : NULL;
        char proto[sizeof(u->proto)];
        memcpy(proto, u->proto, sizeof(proto));
        _cleanup_json_ json_t *msg = jsonrpc_request(id, "tools/call", params);
        if (!msg || (u->session && !session))
                return al_error(err, -ENOMEM, NULL, "out of memory");
        _cleanup_json_ json_t *reply = NULL;
        int status = 0;
        char *sid = NULL;
        pthread_mutex_unlock(&u->lock);
        r = http_post(u, session, proto, msg, id, deadline, b, max_line, &reply, &status, &sid,
                      err);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                _cleanup_json_ json_t *c = cancel_notice(id, r);
                int st2 = 0;
                char *sid2 = NULL;
                airlock_error e;
                if (c)
                        (void)http_post(u, session, proto, c, 0, al_now_ns() + 1000000000ull, NULL,
                                        1u << 16, NULL, &st2, &sid2, &e);
                free(sid2);
        }
        pthread_mutex_lock(&u->lock);
        if (gen == u->gen)
                http_apply(u, session, status, sid);
        else
                free(sid);
        if (r >= 0)
                r = reply_result(u, reply, ret, err);
        /* A response over the cap was refused by the gateway, which read
         * no more of it: the session is as sound as before, and stays. */
        if (r == -E2BIG)
                r = al_error(err, -EMSGSIZE, NULL,
                             "server '%s' sent a response larger than the %zu of "
                             "\"maxResultBytes\" (and 4 KiB for the message around it); "
                             "airlock dropped it, and the session goes on",
                             u->name, max_line - 4096);
        if ((r == -EPROTO || r == -ENOMEM || r == -EPIPE) && gen == u->gen)
                fail_process(u);
        else if (r >= 0 || r == -EREMOTEIO)
                u->failures = 0;
        return r;
}

int mcp_upstream_call(mcp_upstream *u, const char *tool, const json_t *args, double timeout_s,
                      const mcp_bounds *b, json_t **ret_result, airlock_error *err)
{
        /* The lock is held briefly (stdio calls wait for their replies
         * on the condition variable, calls at a URL make their requests
         * without it); its wait is bounded like the call all the same. */
        uint64_t deadline = deadline_of(b, timeout_s);
        struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
        if (pthread_mutex_clocklock(&u->lock, CLOCK_MONOTONIC, &ts) != 0)
                return al_error(err, -ETIMEDOUT, NULL,
                                "server '%s' was busy with another call until the deadline",
                                u->name);
        size_t max = (b && b->max_result ? b->max_result : MCP_DEFAULT_RESULT) + 4096;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:O}", "name", tool, "arguments", args);
        al_trace_inject_meta(params); /* the tool call's span, in _meta (trace.h) */
        int r = params ? 0 : al_error(err, -ENOMEM, NULL, "out of memory");
        if (r >= 0 && !u->url) {
                r = stdio_call(u, params, deadline, b, max, ret_result, err);
        } else if (r >= 0) {
                r = http_call(u, params, deadline, b, max, ret_result, err);
        }
        if (r == -ETIMEDOUT)
                al_error(err, r, NULL, "no answer within %.3g s", timeout_s);
        pthread_mutex_unlock(&u->lock);
        return r;
}

void mcp_upstream_stop_all(mcp_upstream *const *v, size_t n)
{
        /* The polite way first, for all at once: the end of their input,
         * as the protocol says; a grace period for them to exit; then
         * each whole process group is killed. */
        for (size_t i = 0; i < n; i++) {
                if (v[i])
                        close_fd(&v[i]->in_fd);
                /* A session at a URL is ended with a DELETE (best effort). */
                if (v[i] && v[i]->url && v[i]->session) {
                        json_t *resp = NULL;
                        airlock_error e;
                        (void)http_exchange(v[i], NULL, al_now_ns() + 1000000000ull, NULL, 1u << 16,
                                            &resp, &e);
                        json_decref(resp);
                }
        }
        uint64_t until = al_now_ns() + STOP_GRACE_MS * 1000000ull;
        for (size_t i = 0; i < n; i++) {
                mcp_upstream *u = v[i];
                if (!u || u->pid <= 0)
                        continue;
                int st;
                while (waitpid(u->pid, &st, WNOHANG) == 0 && al_now_ns() < until) {
                        struct pollfd p = {u->out_fd, POLLIN, 0};
                        char sink[4096];
                        if (poll(&p, 1, 20) > 0 && read(u->out_fd, sink, sizeof(sink)) <= 0)
                                close_fd(&u->out_fd);
                }
                if (waitpid(u->pid, &st, WNOHANG) == u->pid) {
                        /* Reaped: what is left of its group is killed. */
                        kill(-u->pid, SIGKILL);
                        u->pid = 0;
                }
        }
        for (size_t i = 0; i < n; i++) {
                if (!v[i])
                        continue;
                kill_now(v[i], NULL);
                upstream_free(v[i]);
        }
}

void mcp_upstream_stop(mcp_upstream *u)
{
        mcp_upstream_stop_all(&u, 1);
}
