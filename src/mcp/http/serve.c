/* airlock serve: the execute_code tool served over MCP's Streamable HTTP
 * transport (revisions 2025-11-25 and 2026-07-28) at /mcp, with GNU
 * libmicrohttpd parsing HTTP.
 *
 * Threading: libmicrohttpd's thread per connection. A tools/call blocks its
 * request until the run ends (seconds), so the run simply happens on its
 * connection's thread (mcp_core_run_here: no wake-up of another thread
 * either way), while one thread watches those sockets for a client that
 * leaves (hup_main); the number of connection threads is bounded by
 * --max-connections. A call that streams progress over SSE runs on the MCP
 * core's workers (mcp_calls.c) while its thread writes the stream. A request takes
 * one of --max-runs run slots only once its whole body is in: a slow or
 * stalled client holds its own connection (closed after --http-timeout idle
 * seconds), never a run slot. Past the slots, at most --max-queue calls wait
 * for one (at most --queue-wait seconds, then 503); past that, 429 with
 * Retry-After.
 *
 * A POST carries one JSON-RPC message. A request is answered with
 * application/json; a tools/call that streams progress (its _meta has a
 * progressToken, and the client accepts text/event-stream) switches to an
 * SSE stream when its first notification comes, and the stream ends with the
 * response. Notifications and the client's responses get 202. A client that
 * disconnects cancels its run. The main thread handles the signals: SIGHUP
 * reloads the tokens and the configuration (reload_config), SIGTERM and
 * SIGINT drain (stop accepting, let calls finish for --grace seconds, cancel
 * the rest, close every session and sandbox).
 *
 * This file holds the transport's run (mcp_service_run_http, called by
 * the command line's cmd_serve): the listening address, the warm-up, the
 * signals the front-end forwards, reload and drain. The rest is a file per job, sharing
 * serve_internal.h: serve_router.c (the route table and /mcp's POST), serve_checks.c (what a
 * request must pass), serve_answer.c (answers and the access log),
 * serve_sink.c and serve_sse.c (a request's messages and their stream),
 * serve_slots.c (run slots and the queue), serve_tokens.c (tokens and
 * tenants), serve_hangup.c (the hang-up watcher), serve_metrics.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

/* ---- reload ------------------------------------------------------------- */

/* Asks the front-end for a new configuration (the same configuration
 * options read again, as at start: tools files, allow-list, limits,
 * secrets: a file: secret is read again, an env: one cannot change in a
 * running process), and makes it the configuration of the calls that start
 * from now on (mcp_core_reload). A configuration that does not parse or
 * load leaves the old one in place, with one line on stderr naming why: the
 * library's errors never contain a secret's value. The serve and session
 * options (--listen, caps, --audit) are not reloaded. */
static void reload_config(http_server *s, char *said, size_t n_said, char *peers, size_t n_peers)
{
        airlock_config *cfg = NULL;
        airlock_error err = {0};
        int r = s->reload(s->reload_arg, &cfg, &err);
        /* The cluster secret rotates with the configuration it is part of,
         * and the peers file is read again. */
        http_peers_reload(s, r >= 0 ? cfg : NULL, peers, n_peers);
        if (r >= 0)
                r = mcp_core_reload(s->core, cfg, &err);
        if (r < 0)
                snprintf(said, n_said, "keeping the old configuration: %s",
                         err.message[0] ? err.message : strerror(-r));
        else
                snprintf(said, n_said, "configuration reloaded");
}

/* SIGHUP: the tokens, the operator's token and the configuration again,
 * told in one line on stderr, the configuration's clause first: "airlock
 * serve: SIGHUP: configuration reloaded; 2 tokens of 2 tenants loaded from
 * F (0 tenants removed)", or "keeping the old ...: WHY" for each part that
 * did not load. */
static void reload_all(http_server *s)
{
        char tokens[AIRLOCK_MESSAGE_MAX + 64] = "", metrics[AIRLOCK_MESSAGE_MAX + 64] = "";
        char config[AIRLOCK_MESSAGE_MAX + 64] = "", peers[AIRLOCK_MESSAGE_MAX + 64] = "";
        http_reload_tokens(s, tokens, sizeof(tokens));
        airlock_error err = {0};
        if (http_load_metrics_token(s, &err) < 0)
                snprintf(metrics, sizeof(metrics), "keeping the old metrics token: %s",
                         err.message);
        reload_config(s, config, sizeof(config), peers, sizeof(peers));
        fprintf(stderr, "airlock serve: SIGHUP: %s%s%s%s%s%s%s\n", config, *tokens ? "; " : "",
                tokens, *metrics ? "; " : "", metrics, *peers ? "; " : "", peers);
}

/* ---- listening ---------------------------------------------------------- */

/* ADDR:PORT or [V6ADDR]:PORT into ss; *loopback tells whether only this
 * machine can connect. */
int http_parse_listen(const char *text, struct sockaddr_storage *ss, socklen_t *sl, bool *loopback,
                      airlock_error *err)
{
        char host[INET6_ADDRSTRLEN + 2];
        const char *colon;
        if (text[0] == '[') {
                const char *end = strchr(text, ']');
                if (!end || end[1] != ':' || (size_t)(end - text - 1) >= sizeof(host))
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(end - text - 1), text + 1);
                colon = end + 1;
        } else {
                colon = strrchr(text, ':');
                if (!colon || (size_t)(colon - text) >= sizeof(host))
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(colon - text), text);
        }
        char *end = NULL;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (!colon[1] || *end || port > 65535)
                goto bad;
        memset(ss, 0, sizeof(*ss));
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)port);
                *sl = sizeof(*in);
                *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
                return 0;
        }
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                *sl = sizeof(*in6);
                *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
                return 0;
        }
bad:
        return al_error(err, -EINVAL, NULL,
                        "--listen: '%.100s' is not ADDR:PORT or [V6ADDR]:PORT with a numeric "
                        "address",
                        text);
}

/* How often a server whose warm-up failed tries again. */
#define WARM_UP_RETRY_S 5

/* Runs the warm-up call (the first copy of the sandbox) through the core
 * before /readyz says ready. Returns whether the run succeeded: a server
 * whose sandbox cannot start (a masked /proc in a container, no user
 * namespaces) must not say it is ready, or a load balancer sends it
 * traffic that can only fail. */
static bool warm_up(http_server *s)
{
        http_sink *k = http_sink_new(s, "airlock-warm-up");
        if (!k)
                return false;
        k->base.internal = true;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:{s:s}}", "name", "execute_code", "arguments", "code", "pass");
        json_t *root = params ? jsonrpc_request(0, "tools/call", params) : NULL;
        jsonrpc_message m = {.root = root,
                             .id = json_object_get(root, "id"),
                             .method = "tools/call",
                             .params = json_object_get(root, "params")};
        pthread_mutex_lock(&s->slot_lock);
        s->running++;
        pthread_mutex_unlock(&s->slot_lock);
        if (root && mcp_core_handle(s->core, &k->base, &m) == 1) {
                k->pending = true;
                http_sink_wait_done(k);
                k->pending = false;
        } else {
                http_slot_give(s, NULL, true);
        }
        bool ok = k->got_resp && k->status == ST_OK;
        json_decref(root);
        http_sink_free(k);
        return ok;
}

/* ---- the run ------------------------------------------------------------ */

/* The listening address, and the options that must go with it. */
static int check_listen(const mcp_service_options *o, struct sockaddr_storage *ss, socklen_t *sl,
                        airlock_error *err)
{
        const serve_options *so = &o->http;
        bool loopback = false;
        int r = http_parse_listen(so->listen, ss, sl, &loopback, err);
        if (r < 0)
                return r;
        if (!loopback && !so->tokens_file && !so->insecure_no_auth)
                return al_error(err, -EINVAL, NULL,
                                "--listen %s is reachable from other machines: give --tokens "
                                "FILE (or --insecure-no-auth to serve without authentication)",
                                so->listen);
        /* Upstream servers are the sandbox's, and without --tenants-dir
         * every tenant runs in one sandbox: what one tenant's run puts in a
         * server (a memory server's notes, a browser's pages), the next
         * tenant's run reads. Each tenant gets server processes of its own
         * only with --tenants-dir (a configuration, so a sandbox, per
         * tenant); sharing them is the operator's choice, said with
         * --shared-servers, never a default. */
        if (so->tokens_file && o->has_servers && !o->tenants_dir && !so->shared_servers)
                return al_error(err, -EINVAL, NULL,
                                "--servers with --tokens: every tenant would share the upstream "
                                "servers' processes and their state (what one tenant's run puts "
                                "in a server, another's reads); give --tenants-dir DIR (each "
                                "tenant gets server processes of its own) or --shared-servers "
                                "(the tenants may share them)");
        return 0;
}

/* The server's state before it listens: its locks, the quotas, the
 * hang-up watcher, the tenants' workspaces, the tokens and the metrics
 * token. Returns 0 or -errno with err filled; server_release undoes it. */
static int server_setup(http_server *s, const mcp_service_options *o, airlock_error *err)
{
        s->opt = o->http;
        s->sig_fd = o->signal_fd;
        pthread_rwlock_init(&s->tokens_lock, NULL);
        pthread_mutex_init(&s->slot_lock, NULL);
        pthread_mutex_init(&s->m.hist_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->slot_free, &ca);
        pthread_cond_init(&s->built, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&s->hup_lock, NULL);
        s->max_sessions = o->caps.max_sessions;
        unsigned limits[QUOTA_KINDS] = {[QUOTA_SESSIONS] = s->opt.max_sessions_per_token,
                                        [QUOTA_RUNS] = s->opt.max_runs_per_token,
                                        [QUOTA_QUEUED] = s->opt.max_queue_per_token};
        if (!(s->quotas = quota_new(limits)))
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        if (http_hup_init(s) < 0) {
                int e = errno;
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -e, NULL,
                                     "cannot watch connections: %s", strerror(e));
        }
        int r;
        if (o->tenants_dir && (r = mcp_workspaces_open(o->tenants_dir, o->ws_max_files,
                                                       o->ws_max_bytes, &s->workspaces, err)) < 0) {
                err->kind = AIRLOCK_ERROR_INPUT;
                return r;
        }
        if (s->opt.tokens_file) {
                if ((r = tenants_load(s->opt.tokens_file, &s->tt, err)) < 0)
                        return r;
                if (http_apply_overrides(s, &s->tt) < 0)
                        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL,
                                             "out of memory");
        }
        if ((r = http_load_metrics_token(s, err)) < 0)
                return r;
        return 0;
}

/* Starts libmicrohttpd on ss; /healthz answers from now on. */
static int server_listen(http_server *s, const struct sockaddr_storage *ss, airlock_error *err)
{
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
        if (ss->ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        s->d =
            MHD_start_daemon(flags, 0, NULL, NULL, http_on_request, s, MHD_OPTION_SOCK_ADDR,
                             (const struct sockaddr *)ss, MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)s->opt.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                             (unsigned)s->opt.http_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                             (size_t)MAX_HEADER_MEM, MHD_OPTION_THREAD_STACK_SIZE,
                             (size_t)(512u << 10), MHD_OPTION_NOTIFY_COMPLETED, http_on_completed,
                             s, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
        if (!s->d) {
                int e = errno;
                return al_error(err, -e, NULL, "cannot listen on %s: %s", s->opt.listen,
                                strerror(e));
        }
        /* The port actually bound (--listen ...:0 picks one). */
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "airlock serve: instance %s listening on %s (port %u)%s\n", s->opt.instance,
                s->opt.listen, di ? (unsigned)di->port : 0,
                s->opt.tokens_file ? "" : ", without authentication");
        return 0;
}

/* Starts the internal listener of --peer-listen: the calls other
 * instances forward for sessions of this one, signed (serve_peer.c). */
static int server_listen_peers(http_server *s, airlock_error *err)
{
        struct sockaddr_storage ss;
        socklen_t sl;
        bool loopback;
        if (!s->opt.peer_listen)
                return 0;
        if (http_parse_listen(s->opt.peer_listen, &ss, &sl, &loopback, err) < 0)
                return al_error(err, -EINVAL, NULL,
                                "--peer-listen: '%.100s' is not ADDR:PORT or [V6ADDR]:PORT with a "
                                "numeric address",
                                s->opt.peer_listen);
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
        if (ss.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        s->peer_d =
            MHD_start_daemon(flags, 0, NULL, NULL, http_on_peer_request, s, MHD_OPTION_SOCK_ADDR,
                             (const struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)s->opt.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                             (unsigned)s->opt.http_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                             (size_t)MAX_HEADER_MEM, MHD_OPTION_THREAD_STACK_SIZE,
                             (size_t)(512u << 10), MHD_OPTION_NOTIFY_COMPLETED, http_on_completed,
                             s, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
        if (!s->peer_d) {
                int e = errno;
                return al_error(err, -e, NULL, "cannot listen on --peer-listen %s: %s",
                                s->opt.peer_listen, strerror(e));
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->peer_d, MHD_DAEMON_INFO_BIND_PORT);
        s->peer_port = di ? (unsigned)di->port : 0;
        fprintf(stderr, "airlock serve: instance %s takes peers' calls on %s (port %u)\n",
                s->opt.instance, s->opt.peer_listen, s->peer_port);
        return 0;
}

/* Waits up to a second more than until (al_now_ns) for the requests in
 * progress to be answered, then stops listening. */
static void server_stop_listening(http_server *s, uint64_t until)
{
        while (atomic_load(&s->requests) > 0 && al_now_ns() < until + 1000000000ull) {
                struct timespec pause = {0, 10 * 1000000L};
                nanosleep(&pause, NULL);
        }
        /* A call forwarded to a peer is not the core's, so no cancel of the
         * core's ends it: libcurl's progress callback does, within a
         * second, and so its connection's thread, which stopping waits for. */
        atomic_store(&s->forward_stop, true);
        MHD_stop_daemon(s->d);
        s->d = NULL;
        if (s->peer_d)
                MHD_stop_daemon(s->peer_d);
        s->peer_d = NULL;
}

/* Builds the core while /healthz already answers (and /readyz says warming
 * up): the sandbox and the tool description. */
static int server_build(http_server *s, mcp_service *svc, airlock_error *err)
{
        const mcp_service_options *o = mcp_service_opts(svc);
        mcp_core_options co = {.stateless = true,
                               .instance = s->opt.instance,
                               .name_runs = http_peers_on(s),
                               .audit = o->audit,
                               .quotas = s->quotas,
                               .workspaces = s->workspaces,
                               .tenant = o->tenant};
        int r = mcp_core_new(mcp_service_config(svc), &o->caps, &co, &s->core, err);
        if (r < 0) {
                /* The requests held meanwhile are answered 503 before the
                 * connections close (a second at most). */
                http_announce_built(s, false);
                server_stop_listening(s, al_now_ns());
                err->kind = AIRLOCK_ERROR_INPUT;
                return r;
        }
        http_announce_built(s, true);
        return 0;
}

/* Serves until SIGTERM or SIGINT. Until a warm-up run succeeds, /readyz
 * says why not and the warm-up is tried again every few seconds: calls
 * still reach the core meanwhile and report the sandbox's own error.
 * SIGHUP reloads the tokens, the metrics token and the configuration. */
static void server_wait_signals(http_server *s)
{
        bool said = false;
        for (;;) {
                if (!atomic_load(&s->ready)) {
                        if (warm_up(s)) {
                                atomic_store(&s->ready, true);
                                fprintf(stderr, "airlock serve: ready\n");
                        } else if (!said) {
                                said = true;
                                atomic_store(&s->unavailable, true);
                                fprintf(stderr,
                                        "airlock serve: the sandbox could not run a warm-up call "
                                        "(see the error above); not ready, trying again every "
                                        "%d s\n",
                                        WARM_UP_RETRY_S);
                        }
                }
                char c;
                struct pollfd p = {.fd = s->sig_fd, .events = POLLIN};
                int n = poll(&p, 1, atomic_load(&s->ready) ? -1 : WARM_UP_RETRY_S * 1000);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0)
                        continue;
                if (read(s->sig_fd, &c, 1) != 1)
                        continue;
                if (c == SIGHUP) {
                        reload_all(s);
                        continue;
                }
                break;
        }
}

/* Drain: stop accepting, let the calls finish for the grace period,
 * cancel the rest, then close every session and sandbox. */
static void server_drain(http_server *s)
{
        atomic_store(&s->draining, true);
        fprintf(stderr, "airlock serve: draining (grace %.0f s)\n", s->opt.grace_s);
        pthread_mutex_lock(&s->slot_lock);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
        int lfd = MHD_quiesce_daemon(s->d);
        if (lfd >= 0)
                close(lfd);
        uint64_t deadline = al_now_ns() + (uint64_t)(s->opt.grace_s * 1e9);
        if (!mcp_core_wait_calls(s->core, s->opt.grace_s)) {
                fprintf(stderr, "airlock serve: grace period over: cancelling %u call(s)\n",
                        mcp_core_calls(s->core));
                mcp_core_cancel_all(s->core);
        }
        /* The answers of the calls that finished are written before the
         * connections close (within the grace period, and a second more
         * for the cancelled ones' answers). */
        server_stop_listening(s, deadline);
        http_hup_fini(s);
}

/* Frees what server_setup and server_build made, once nothing listens. */
static void server_release(http_server *s)
{
        if (s->d)
                MHD_stop_daemon(s->d);
        if (s->peer_d)
                MHD_stop_daemon(s->peer_d);
        http_hup_fini(s);
        mcp_core_free(s->core);
        quota_free(s->quotas);
        tenants_free(&s->tt);
        if (s->metrics_token) {
                explicit_bzero(s->metrics_token, s->metrics_token_len);
                free(s->metrics_token);
        }
        mcp_workspaces_free(s->workspaces);
        http_peers_free(s);
        free(s);
}

static void server_releasep(http_server **s)
{
        if (*s)
                server_release(*s);
}

int mcp_service_run_http(mcp_service *svc, mcp_reload_fn reload, void *reload_arg,
                         airlock_error *err)
{
        const mcp_service_options *o = mcp_service_opts(svc);
        struct sockaddr_storage ss;
        socklen_t sl;
        int r = check_listen(o, &ss, &sl, err);
        if (r < 0)
                return r;
        _cleanup_(server_releasep) http_server *s = calloc(1, sizeof(*s));
        if (!s)
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        s->hup_ep = s->hup_stop = -1;
        s->reload = reload;
        s->reload_arg = reload_arg;
        if ((r = server_setup(s, o, err)) < 0 ||
            (r = http_peers_setup(s, mcp_service_config(svc), err)) < 0 ||
            (r = server_listen_peers(s, err)) < 0 || (r = server_listen(s, &ss, err)) < 0 ||
            (r = server_build(s, svc, err)) < 0)
                return r;
        server_wait_signals(s);
        server_drain(s);
        server_release(TAKE_PTR(s));
        fprintf(stderr, "airlock serve: stopped\n");
        return 0;
}
