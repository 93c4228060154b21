/* The stdio transport of the MCP client (mcp_client.c): the server's
 * process, started on the host in namespaces of its own and supervised
 * (its stderr kept in a ring for messages, its whole group killed), and
 * JSON-RPC in newline-delimited messages on its standard streams, with
 * calls in flight at once (upstream_stdio_call).
 *
 * The process has an environment of its own: a few variables of the
 * host's (HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG), then its "env",
 * where "${secret:NAME}" stands for the value of an airlock secret. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

#include "jsonrpc.h"
#include "mcp/mcp_client.h"

#define READ_CHUNK 65536

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
void upstream_kill(mcp_upstream *u, int *ret_status)
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

int upstream_spawn(mcp_upstream *u, airlock_error *err)
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

/* A server started on the host: its command resolved, its arguments, and
 * its environment with the secrets put in (wiped when u is freed). */
int upstream_stdio_new(mcp_upstream *u, const mcp_spec *spec, const secret_store *secrets,
                       airlock_error *err)
{
        const json_t *o = spec->json;
        const json_t *args = json_object_get(o, "args"), *env = json_object_get(o, "env");
        const char *cwd = json_string_value(json_object_get(o, "cwd"));
        char cwdbuf[PATH_MAX];
        if (cwd && cwd[0] != '/') {
                snprintf(cwdbuf, sizeof(cwdbuf), "%s/%s", spec->dir, cwd);
                cwd = cwdbuf;
        }
        u->cwd = strdup(cwd ? cwd : spec->dir);
        size_t na = json_array_size(args);
        u->argv = calloc(na + 2, sizeof(char *));
        int r = u->cwd && u->argv ? 0 : -ENOMEM;
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
        if (r < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)env, key, v) {
                _cleanup_free_ char *val = NULL;
                r = upstream_expand(spec->name, NULL, "env", json_string_value(v), secrets, &val,
                                    err);
                if (r < 0)
                        return r;
                size_t len = strlen(key) + 1 + strlen(val) + 1;
                char *e = malloc(len);
                if (e)
                        snprintf(e, len, "%s=%s", key, val);
                secrets_wipe_free(TAKE_PTR(val), strlen(val));
                if (!e)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                u->envp[k++] = e;
        }
        const char *path = json_string_value(json_object_get(env, "PATH"));
        u->exe = resolve_exe(cmd, u->cwd, path ? path : getenv("PATH"));
        if (!u->exe) {
                al_error(err, -ENOENT, spec->file,
                         "server '%s': \"command\" '%.200s' is not an "
                         "executable file%s",
                         spec->name, cmd, strchr(cmd, '/') ? "" : " on PATH");
                return -ENOENT;
        }
        return 0;
}

/* ---- messages ------------------------------------------------------- */

/* Writes msg and a newline to the server, within deadline. */
int upstream_stdio_send(mcp_upstream *u, json_t *msg, uint64_t deadline, airlock_error *err)
{
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
                        int t = upstream_ms_left(deadline);
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

/* The message for a server that is gone: its exit status and the end of
 * its stderr. */
int upstream_gone(mcp_upstream *u, const char *what, airlock_error *err)
{
        int st = 0;
        upstream_kill(u, &st);
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

/* Reads until the reply to request id: answers the server's own requests,
 * drops notifications and replies to other (upstream_cancelled) ids. A line longer
 * than max_line, or one that is not a JSON-RPC message, is -EPROTO. */
int upstream_stdio_read_reply(mcp_upstream *u, json_int_t id, uint64_t deadline,
                              const mcp_bounds *b, size_t max_line, json_t **ret,
                              airlock_error *err)
{
        for (;;) {
                char *nl = u->len ? memchr(u->buf, '\n', u->len) : NULL;
                if (nl) {
                        size_t n = (size_t)(nl - u->buf);
                        int rc = upstream_list_charge(u, u->buf, n, err);
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
                                upstream_answer_request(u, msg, deadline);
                        } else if (kind == JSONRPC_NOTIFICATION) {
                                upstream_notified(u, msg);
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
                if (upstream_cancelled(b))
                        return al_error(err, -ECANCELED, NULL, "the run was cancelled");
                int t = upstream_ms_left(deadline);
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
                        return upstream_gone(u, "", err);
                if (n < 0)
                        return (int)n;
        }
}

/* ---- calls in flight at once ------------------------------------------- */

/* What read_some read and dropped: a whole line longer than the cap of
 * every call waiting, or whose parse would hold more than the cost cap of
 * every call waiting, and the id it answers, when it has one. */
typedef struct line_dropped {
        bool done, has_id;
        json_int_t id;
        size_t len;
        uint64_t cost, values; /* set when it was dropped for its parse's cost */
} line_dropped;

static void skip_scan(struct line_skip *k, const char *d, size_t n);

/* Drops the line of n bytes at the start of u->buf unparsed, since its
 * parse would hold cost bytes, more than max_cost: *drop says which call
 * it answered (the id found by skip_scan, which keeps nothing). */
static void drop_costly(mcp_upstream *u, size_t n, uint64_t cost, uint64_t values,
                        line_dropped *drop)
{
        struct line_skip k = {0};
        skip_scan(&k, u->buf, n);
        skip_scan(&k, ",", 1); /* a final '}' also ends a trailing id */
        *drop = (line_dropped){.done = true,
                               .has_id = k.has_id && k.depth <= 0,
                               .id = k.id,
                               .len = n,
                               .cost = cost,
                               .values = values};
        memmove(u->buf, u->buf + n + 1, u->len - n - 1);
        u->len -= n + 1;
}

/* Takes the complete lines of u->buf as messages into msgs. A line that is
 * not a JSON-RPC 2.0 message is -EPROTO. A line whose parse would hold
 * more than max_cost (0: no cap) is charged before it is parsed, and
 * dropped unparsed (drop_costly): the taking stops there, so that *drop
 * names it. Only the reader calls it. */
static int take_lines(mcp_upstream *u, json_t *msgs, uint64_t max_cost, line_dropped *drop,
                      airlock_error *err)
{
        char *nl;
        while (u->len && (nl = memchr(u->buf, '\n', u->len))) {
                size_t n = (size_t)(nl - u->buf);
                uint64_t values = 0, cost = max_cost ? upstream_parse_cost(u->buf, n, &values) : 0;
                if (cost > max_cost) {
                        drop_costly(u, n, cost, values, drop);
                        return 0;
                }
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
                     uint64_t max_cost, json_t *msgs, line_dropped *drop, airlock_error *err)
{
        *drop = (line_dropped){0};
        int r = u->skip.on ? 0 : take_lines(u, msgs, max_cost, drop, err);
        if (r < 0 || json_array_size(msgs) || drop->done)
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
        int pr = poll(p, 3, upstream_ms_left(until_ns));
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
        r = take_lines(u, msgs, max_cost, drop, err);
        if (r >= 0 && !json_array_size(msgs) && !drop->done && u->len > max_line) {
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
                r = upstream_gone(u, "", &msg); /* kills and reaps it, and says how it ended */
        upstream_fail(u);
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
                        upstream_answer_request(u, m, deadline);
                        continue;
                }
                if (kind == JSONRPC_NOTIFICATION) {
                        upstream_notified(u, m);
                        continue;
                }
                for (pending *p = u->waiting; p; p = p->next)
                        if (!p->reply && jsonrpc_is_response_to(m, p->id))
                                p->reply = json_incref(m);
        }
        pthread_cond_broadcast(&u->cv);
}

int upstream_stdio_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                        size_t max_line, json_t **ret, airlock_error *err)
{
        struct timespec ts;
        int r0 = upstream_ensure_session(u, deadline, b, err);
        if (r0 < 0)
                return r0;
        unsigned gen = u->gen;
        pending me = {.id = ++u->next_id,
                      .max_line = max_line,
                      .max_cost = b ? b->max_cost : 0,
                      .next = u->waiting};
        _cleanup_json_ json_t *msg = jsonrpc_request(me.id, "tools/call", params);
        if (!msg)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        int r = upstream_send(u, msg, deadline, err);
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
                if (upstream_cancelled(b)) {
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
                        uint64_t cost_cap = 0; /* 0 when a call waiting has none */
                        bool uncapped = false;
                        for (pending *p = u->waiting; p; p = p->next) {
                                cap = p->max_line > cap ? p->max_line : cap;
                                cost_cap = p->max_cost > cost_cap ? p->max_cost : cost_cap;
                                uncapped |= !p->max_cost;
                        }
                        if (uncapped)
                                cost_cap = 0;
                        u->reading = true;
                        pthread_mutex_unlock(&u->lock);
                        _cleanup_json_ json_t *msgs = json_array();
                        airlock_error e;
                        airlock_error_clear(&e);
                        line_dropped drop;
                        int rr = msgs ? read_some(u, slice, b ? b->cancel_fd : -1, cap, cost_cap,
                                                  msgs, &drop, &e)
                                      : -ENOMEM;
                        pthread_mutex_lock(&u->lock);
                        u->reading = false;
                        for (pending *p = u->waiting; rr >= 0 && drop.has_id && p; p = p->next)
                                if (p->id == drop.id && !p->reply)
                                        p->dropped = drop.len, p->dropped_cost = drop.cost,
                                        p->dropped_values = drop.values;
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
                r = upstream_reply_result(u, me.reply, ret, err);
                json_decref(me.reply);
                if (r >= 0 || r == -EREMOTEIO)
                        u->failures = 0;
                return r;
        }
        if (me.dropped && me.dropped_cost) {
                u->failures = 0;
                return upstream_cost_error(u, me.dropped, me.dropped_cost, me.dropped_values,
                                           me.max_cost, err);
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
                _cleanup_json_ json_t *c = upstream_cancel_notice(me.id, r);
                airlock_error e;
                if (c)
                        (void)upstream_send(u, c, al_now_ns() + 100000000ull, &e);
        }
        return r;
}
