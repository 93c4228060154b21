/* The MCP server without its transport (mcp_core.h): the server's
 * making and unmaking, and the functions `airlock serve` (serve*.c) drives
 * the dispatcher, the workers, the progress thread and the sessions with,
 * a sink per HTTP request and no handshake state. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"
#include "audit.h"
#include "tenant_workspace.h"

int mcp_server_init(mcp_server *srv, airlock_config *cfg, const mcp_session_caps *caps,
                    bool in_background, airlock_error *err)
{
        pthread_mutex_init(&srv->cfg_lock, NULL);
        int r = airlock_cache_new(0, 0, &srv->cache, err);
        if (r < 0)
                return r;
        if (mcp_sessions_new(srv->cache, cfg, caps, &srv->sessions) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        mcp_version_source_sessions(srv);
        if (!in_background) {
                r = mcp_version_new(srv, cfg, false, &srv->cur, err);
                if (r < 0)
                        return r;
        }
        if (mcp_store_new(&srv->store) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        pthread_mutex_init(&srv->out_lock, NULL);
        pthread_mutex_init(&srv->lock, NULL);
        pthread_cond_init(&srv->calls_done, NULL);
        pthread_cond_init(&srv->work, NULL);
        pthread_mutex_init(&srv->prog_lock, NULL);
        pthread_mutex_init(&srv->live_lock, NULL);
        /* The progress thread's waits are timed on the monotonic clock. */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&srv->prog_wake, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&srv->built, NULL);
        srv->queue_end = &srv->queue;
        srv->locks_ready = true;
        return in_background ? mcp_version_build_start(srv, cfg, err) : 0;
}

/* Frees everything mcp_server_init made, once no call is left. */
void mcp_server_teardown(mcp_server *srv)
{
        /* The build uses the cache and may start the warm-up: over first. */
        airlock_error ignored;
        (void)mcp_version_build_join(srv, &ignored);
        if (srv->locks_ready) {
                mcp_stop_workers(srv);
                mcp_stop_progress(srv);
        }
        if (srv->input_watch >= 0)
                close(srv->input_watch);
        if (srv->audit_fd >= 0)
                close(srv->audit_fd);
        if (srv->build_failed_fd >= 0)
                close(srv->build_failed_fd);
        free(srv->first_instructions);
        for (unsigned i = 0; i < srv->n_spare; i++)
                close(srv->spare_fds[i]);
        dynbuf_free(&srv->line);
        free(srv->chunk);
        /* Every session closed cleanly before the sandboxes they run in. */
        mcp_sessions_free(srv->sessions);
        airlock_cache_close(srv->cache);
        mcp_store_free(srv->store);
        /* Every call is over: the server's own reference is the last. */
        mcp_cfg_drop(srv, srv->cur);
        srv->cur = NULL;
        if (srv->locks_ready) {
                pthread_cond_destroy(&srv->work);
                pthread_cond_destroy(&srv->calls_done);
                pthread_cond_destroy(&srv->prog_wake);
                pthread_cond_destroy(&srv->built);
                pthread_mutex_destroy(&srv->prog_lock);
                pthread_mutex_destroy(&srv->live_lock);
                pthread_mutex_destroy(&srv->lock);
                pthread_mutex_destroy(&srv->out_lock);
        }
}

void mcp_raise_fd_limit(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
        if (want > ((rlim_t)1 << 20))
                want = (rlim_t)1 << 20;
        if (rl.rlim_cur < want) {
                rl.rlim_cur = want;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
}

/* ---- the core, for other transports (mcp_core.h) ------------------------ */

int mcp_core_new(airlock_config *cfg, const mcp_session_caps *caps, const mcp_core_options *o,
                 mcp_server **ret, airlock_error *err)
{
        mcp_server *srv = calloc(1, sizeof(*srv));
        *ret = srv;
        if (!srv)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        srv->input_watch = -1;
        srv->audit_fd = -1;
        srv->build_failed_fd = -1;
        srv->transport = "http";
        srv->name = "airlock serve";
        srv->stateless = o && o->stateless;
        if (o && o->audit) {
                int fd = audit_open(o->audit, err);
                if (fd < 0)
                        return fd;
                srv->audit_fd = fd;
        }
        /* No reader thread: nothing may run on one. */
        srv->input_done = true;
        srv->workspaces = o ? o->workspaces : NULL;
        snprintf(srv->tenant, sizeof(srv->tenant), "%s", o && o->tenant ? o->tenant : "default");
        /* serve.c holds every request until the core is made: nothing could
         * be answered during a build in the background. */
        int r = mcp_server_init(srv, cfg, caps, false, err);
        if (r >= 0 && o && o->instance)
                mcp_sessions_set_instance(srv->sessions, o->instance);
        if (r >= 0 && o && o->instance && o->name_runs)
                mcp_store_name_runs(srv->store, o->instance);
        if (r >= 0 && o && o->quotas)
                mcp_sessions_set_quotas(srv->sessions, o->quotas);
        return r;
}

int mcp_core_reload(mcp_server *srv, airlock_config *cfg, airlock_error *err)
{
        cfg_version *v;
        int r = mcp_version_new(srv, cfg, true, &v, err);
        if (r < 0)
                return r;
        /* Calls that start from now on take the new version; those in
         * flight keep theirs, and the last of them frees the old one. */
        pthread_mutex_lock(&srv->cfg_lock);
        cfg_version *old = srv->cur;
        srv->cur = v;
        pthread_mutex_unlock(&srv->cfg_lock);
        mcp_cfg_drop(srv, old);
        return 0;
}

int mcp_core_handle(mcp_server *srv, mcp_sink *sink, const jsonrpc_message *m)
{
        if (m->method && m->id)
                return mcp_handle_request(srv, sink, m->method, m->id, m->params) ? 1 : 0;
        if (m->method)
                mcp_handle_notification(srv, sink, m->method, m->params);
        return 0;
}

void mcp_core_run_here(mcp_server *srv, mcp_sink *sink, int watch_fd, void (*on_watch)(void *),
                       void *watch_arg)
{
        (void)srv;
        mcp_call *c = sink->here;
        if (!c)
                return;
        sink->here = NULL;
        c->watch_fd = watch_fd;
        c->on_watch = on_watch;
        c->watch_arg = watch_arg;
        mcp_run_call(c, NULL);
}

void mcp_core_cancel_sink(mcp_server *srv, mcp_sink *sink)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->sink == sink)
                        mcp_cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        /* As mcp_cancel_request: no progress notification for it after this. */
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
}

void mcp_core_forget_owner(mcp_server *srv, const char *owner)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->id && mcp_same_owner(c, owner))
                        mcp_cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
        mcp_sessions_close_owner(srv->sessions, owner,
                                 "closed: its tenant was removed from this server");
        mcp_store_forget(srv->store, owner);
        /* The tenant's staged copies of its workspace (a copy on disk each,
         * and a mount and its files while hot) go now, or, those a call or
         * session still ending holds, with it: a removed tenant's files
         * must not stay on the server until it stops. */
        char path[64 + TENANT_NAME_MAX];
        if (srv->workspaces && srv->cache &&
            mcp_workspace_name(srv->workspaces, owner, path, sizeof(path)) == 0)
                airlock_cache_forget_workspace(srv->cache, path);
}

void mcp_core_cancel_all(mcp_server *srv)
{
        mcp_cancel_all_and_wait(srv);
}

double mcp_core_run_timeout(mcp_server *srv)
{
        airlock_limits l;
        airlock_limits_init(&l, sizeof(l));
        pthread_mutex_lock(&srv->cfg_lock);
        if (srv->cur)
                airlock_config_get_limits(srv->cur->cfg, &l);
        pthread_mutex_unlock(&srv->cfg_lock);
        return l.timeout_s;
}

bool mcp_core_wait_calls(mcp_server *srv, double timeout_s)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                      (uint64_t)(timeout_s * 1e9);
        ts.tv_sec = (time_t)(at / 1000000000ull);
        ts.tv_nsec = (long)(at % 1000000000ull);
        pthread_mutex_lock(&srv->lock);
        int r = 0;
        while (srv->n_calls > 0 && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&srv->calls_done, &srv->lock, &ts);
        bool none = srv->n_calls == 0;
        pthread_mutex_unlock(&srv->lock);
        return none;
}

unsigned mcp_core_calls(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        unsigned n = srv->n_calls;
        pthread_mutex_unlock(&srv->lock);
        return n;
}

unsigned mcp_core_sessions(mcp_server *srv)
{
        return mcp_sessions_count(srv->sessions);
}

void mcp_core_free(mcp_server *srv)
{
        if (!srv)
                return;
        mcp_server_teardown(srv);
        free(srv);
}
