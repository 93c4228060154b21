/* airlock mcp: the execute_code tool served over the Model Context Protocol
 * on stdio (JSON-RPC 2.0, one message per line).
 *
 * The main thread reads standard input and answers every request but
 * tools/call itself. Each tools/call runs on a worker thread (mcp_calls.c),
 * so the reader keeps reading and a notifications/cancelled can stop the run
 * it names (through the run's cancel eventfd). A call that carries a progress
 * token is reported on by one progress thread while it runs. Writes to
 * standard output are serialised by one mutex, one whole line at a time. The
 * server keeps serving after every error. End of input lets the calls in
 * progress finish and answers them, as long as someone still reads standard
 * output; SIGTERM, SIGINT or SIGHUP, or the loss of the reader of standard
 * output (the client went away), cancels them. Either way the sandbox cache
 * is closed and the server exits 0. The reader starts at once, while the
 * sandbox is built on a thread of its own (mcp_version_build_start): ping and
 * server/discover are answered during the build, every other request waits
 * for it (mcp_handle_request). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"
#include "audit.h"
#include "mcp_service.h"
#include "tenant_workspace.h"

#define MCP_MAX_LINE (32u << 20) /* one message; longer lines are discarded */

#define MCP_CHUNK (64u << 10)

static void handle_line(mcp_server *srv, const char *line, size_t len)
{
        jsonrpc_message m;
        airlock_error err;
        int code = jsonrpc_parse(line, len, &m, &err);
        if (code != 0)
                mcp_send_error(srv, NULL, m.id, code, "%s", err.message);
        else if (m.method && m.id)
                (void)mcp_handle_request(srv, NULL, m.method, m.id, m.params);
        else if (m.method)
                mcp_handle_notification(srv, NULL, m.method, m.params);
        /* else: a response from the client; this server sends no requests,
         * so there is nothing to match it with. */
        json_decref(m.root);
}

/* ---- shutdown on signals ----------------------------------------------- */

/* SIGTERM, SIGINT and SIGHUP end the server as end of input does: runs are
 * stopped and every sandbox is closed, so nothing is left behind. The handler
 * only writes a byte to a pipe (cli_signal_pipe) whose reading end, or -1,
 * the reader polls beside standard input. */
static int stop_fd = -1;

/* True when nobody reads standard output any more: the client went away
 * (a pipe whose reading end is closed reports POLLERR, a terminal that hung
 * up POLLHUP), or a write to it failed. Standard output that cannot tell
 * (a regular file) is never gone. */
static bool output_gone(mcp_server *srv)
{
        if (srv->output_broken)
                return true;
        struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

typedef enum wait_outcome {
        INPUT_READY,
        INPUT_STOP,         /* a stop signal came */
        INPUT_CLIENT_GONE,  /* standard output lost its reader */
        INPUT_BUILD_FAILED, /* the build of the first version failed */
} wait_outcome;

/* Waits until standard input is readable, a stop signal comes, standard
 * output loses its reader or the build of the first version fails,
 * whichever is first. */
static wait_outcome wait_input(mcp_server *srv)
{
        struct pollfd fds[4] = {
            {.fd = STDIN_FILENO, .events = POLLIN},
            /* No events asked: only its errors and hang-up are reported. */
            {.fd = STDOUT_FILENO, .events = 0},
            /* Negative descriptors are left out by poll. */
            {.fd = srv->build_failed_fd, .events = POLLIN},
            {.fd = stop_fd, .events = POLLIN},
        };
        for (;;) {
                if (srv->output_broken)
                        return INPUT_CLIENT_GONE;
                int n = poll(fds, 4, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return INPUT_READY; /* let read() report the problem */
                if (fds[3].revents & POLLIN)
                        return INPUT_STOP;
                if (fds[2].revents & POLLIN)
                        return INPUT_BUILD_FAILED;
                if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL))
                        return INPUT_CLIENT_GONE;
                if (fds[0].revents)
                        return INPUT_READY;
        }
}

/* True once a stop signal has come. */
static bool stop_requested(void)
{
        if (stop_fd < 0)
                return false;
        struct pollfd p = {.fd = stop_fd, .events = POLLIN};
        return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* The client went away: nobody can read the answers, so the calls in
 * progress are cancelled as a stop signal cancels them. */
static void client_gone(mcp_server *srv)
{
        srv->output_broken = true;
        fprintf(stderr, "airlock mcp: the client closed its end of standard output; stopping "
                        "the calls in progress\n");
        mcp_finish_input(srv, true);
}

/* After the end of input, while calls still run: a client that closes its
 * two ends one after the other (input first) has gone all the same, and so
 * its calls are stopped when standard output loses its reader, as at once
 * (client_gone), or at a stop signal. The thread that read the end of input
 * watches, holding no call: the main thread may be running one itself, and
 * the run watches the input only until it has handed the reader role on. */
static void watch_output_while_calls(mcp_server *srv)
{
        for (;;) {
                pthread_mutex_lock(&srv->lock);
                unsigned left = srv->n_calls;
                pthread_mutex_unlock(&srv->lock);
                if (!left)
                        return;
                struct pollfd fds[2] = {{.fd = STDOUT_FILENO, .events = 0},
                                        {.fd = stop_fd, .events = POLLIN}};
                int n = poll(fds, stop_fd >= 0 ? 2 : 1, 200);
                if (n > 0 && (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL))) {
                        client_gone(srv);
                        return;
                }
                if (n > 0 && stop_fd >= 0 && (fds[1].revents & POLLIN)) {
                        mcp_finish_input(srv, true);
                        return;
                }
        }
}

/* Holds the reader role: handles messages until end of input, a stop
 * signal or the loss of standard output (then marks the input done), or
 * until it hands the role on to run a call on this thread. */
static void reader_loop(mcp_server *srv)
{
        dynbuf *line = &srv->line;
        for (;;) {
                wait_outcome waited = wait_input(srv);
                if (waited == INPUT_STOP || waited == INPUT_BUILD_FAILED) {
                        mcp_finish_input(srv, true);
                        return;
                }
                if (waited == INPUT_CLIENT_GONE) {
                        client_gone(srv);
                        return;
                }
                ssize_t n = read(STDIN_FILENO, srv->chunk, MCP_CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                const char *p = srv->chunk, *end = srv->chunk + n;
                while (p < end) {
                        const char *nl = memchr(p, '\n', (size_t)(end - p));
                        const char *stop = nl ? nl : end;
                        if (!srv->discarding && dynbuf_append(line, p, (size_t)(stop - p)) < 0) {
                                dynbuf_free(line);
                                dynbuf_init(line, MCP_MAX_LINE);
                                srv->discarding = true;
                        }
                        p = stop;
                        if (!nl)
                                break;
                        p++;
                        if (srv->discarding) {
                                mcp_send_error(srv, NULL, NULL, RPC_INVALID_REQUEST,
                                               "message longer than %u MiB: discarded",
                                               MCP_MAX_LINE >> 20);
                                srv->discarding = false;
                                continue;
                        }
                        size_t len = line->len;
                        while (len && (line->data[len - 1] == '\r' || line->data[len - 1] == ' ' ||
                                       line->data[len - 1] == '\t'))
                                len--;
                        /* Only a call with nothing read after it may run on
                         * this thread: anything after it is still to be
                         * handled by the next reader, from this chunk. */
                        srv->may_inline = p == end;
                        if (len)
                                handle_line(srv, line->data, len);
                        srv->may_inline = false;
                        line->len = 0;
                        if (atomic_load(&srv->build_failed)) {
                                /* Nothing more is answered: the server ends
                                 * with the build's error (cmd_mcp). */
                                mcp_finish_input(srv, true);
                                return;
                        }
                        mcp_call *c = srv->inline_call;
                        if (c) {
                                srv->inline_call = NULL;
                                /* Waking another thread to read costs the
                                 * waker about 0.1 ms here: do it only once
                                 * input comes or the run has to wait, or
                                 * at once when nothing can watch the input. */
                                reader_watch w = {.srv = srv};
                                if (srv->input_watch < 0)
                                        mcp_on_input(&w);
                                mcp_run_call(c, w.handed_off ? NULL : &w);
                                if (w.handed_off)
                                        return;
                        }
                }
                if (srv->output_broken) {
                        client_gone(srv);
                        return;
                }
        }
        /* A last message without a newline still counts. */
        if (!srv->discarding && line->len && !srv->output_broken)
                handle_line(srv, line->data, line->len);
        /* End of input with nobody reading the answers either: a client
         * that died closes both at once. */
        if (output_gone(srv)) {
                client_gone(srv);
                return;
        }
        mcp_finish_input(srv, false);
        watch_output_while_calls(srv);
}

/* An epoll set that is readable when standard input or the stop pipe is,
 * or standard output lost its reader, for a run to watch while the reader
 * runs a call (-1 when standard input cannot be watched that way, a regular
 * file say). Standard output joins only where it can (a pipe, a socket, a
 * terminal); with no events asked, only its errors and hang-up wake. */
static int make_input_watch(void)
{
        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
                return -1;
        struct epoll_event in = {.events = EPOLLIN, .data.fd = STDIN_FILENO};
        struct epoll_event out = {.events = 0, .data.fd = STDOUT_FILENO};
        struct epoll_event stop = {.events = EPOLLIN, .data.fd = stop_fd};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, STDIN_FILENO, &in) < 0 ||
            (stop_fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd, &stop) < 0)) {
                close(ep);
                return -1;
        }
        (void)epoll_ctl(ep, EPOLL_CTL_ADD, STDOUT_FILENO, &out);
        return ep;
}

/* Serves standard input on the calling (main) thread and on the workers
 * until end of input or a stop signal; returns true for a stop signal.
 * Standard input is read line by line; a line longer than MCP_MAX_LINE is
 * discarded up to its newline, without being held in memory, and answered
 * with an error. */
static bool serve(mcp_server *srv)
{
        srv->chunk = malloc(MCP_CHUNK);
        if (!srv->chunk)
                return false;
        dynbuf_init(&srv->line, MCP_MAX_LINE);
        srv->input_watch = make_input_watch();
        /* The core's workers take the reader role through this hook when
         * the reader hands it on to run a call (mcp_calls.c). */
        pthread_mutex_lock(&srv->lock);
        srv->reader = reader_loop;
        pthread_mutex_unlock(&srv->lock);
        reader_loop(srv);
        /* Between calls the main thread works as a worker until nobody
         * reads any more. */
        pthread_mutex_lock(&srv->lock);
        while (!srv->input_done) {
                if (!mcp_take_work_locked(srv))
                        pthread_cond_wait(&srv->work, &srv->lock);
        }
        bool stopped = srv->input_stopped;
        pthread_mutex_unlock(&srv->lock);
        return stopped;
}

/* After end of input: calls in progress finish and are answered (a script
 * may write its requests and close its end at once), unless a stop signal
 * comes while waiting or standard output loses its reader, which cancel
 * them. */
static void finish_calls(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        while (srv->n_calls > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 200 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&srv->calls_done, &srv->lock, &ts);
                if (srv->n_calls > 0 && (stop_requested() || output_gone(srv)))
                        for (mcp_call *c = srv->calls; c; c = c->next)
                                mcp_cancel_locked(c);
        }
        pthread_mutex_unlock(&srv->lock);
}

/* The error of a server that could not start or build its sandbox: the
 * options or the configuration are at fault (exit status 2, as it always
 * has been), whatever the library's record said. */
static int input_error(airlock_error *err, int r)
{
        err->kind = AIRLOCK_ERROR_INPUT;
        return r;
}

int mcp_service_run_stdio(mcp_service *svc, airlock_error *err)
{
        const mcp_service_options *o = mcp_service_opts(svc);
        stop_fd = o->signal_fd;
        mcp_server srv = {.input_watch = -1, .audit_fd = -1, .build_failed_fd = -1};
        int r;
        if (o->audit && (srv.audit_fd = audit_open(o->audit, err)) < 0)
                return input_error(err, srv.audit_fd);
        /* --tenants-dir: the one tenant's workspace is DIR/--tenant. */
        snprintf(srv.tenant, sizeof(srv.tenant), "%s", o->tenant);
        if (o->tenants_dir && (r = mcp_workspaces_open(o->tenants_dir, o->ws_max_files,
                                                       o->ws_max_bytes, &srv.workspaces, err)) < 0)
                return input_error(err, r);
        /* The sandbox is built while the server reads its input (see
         * mcp_handle_request): a client that gives up on server/discover after
         * a second (the Vercel AI SDK) must get its answer meanwhile. */
        r = mcp_server_init(&srv, mcp_service_config(svc), &o->caps, true, err);
        bool stopped = r >= 0 && serve(&srv);
        /* A configuration error the build found ends the server as it
         * always has, with the error and exit status 2: no request that
         * waited for the build was answered. */
        if (r >= 0)
                r = mcp_version_build_join(&srv, err);
        if (r >= 0) {
                if (stopped)
                        mcp_cancel_all_and_wait(&srv);
                else
                        finish_calls(&srv);
        }
        mcp_server_teardown(&srv);
        mcp_workspaces_free(srv.workspaces);
        return r < 0 ? input_error(err, r) : 0;
}
