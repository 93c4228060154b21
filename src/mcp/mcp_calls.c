/* The tools/call workers: a call is queued for a worker thread (started on
 * demand, kept for the next call), left for the transport to run on its own
 * thread (mcp_core_run_here), or run by the stdio reader itself, which then
 * hands its role on (see mcp_stdio.c). Cancellation (a call's eventfd) and
 * the warm-up run are here too. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"
#include "audit.h"
#include "tenant_workspace.h"

void mcp_call_free(mcp_call *c)
{
        if (!c)
                return;
        json_decref(c->id);
        json_decref(c->progress);
        free(c->code);
        if (c->session) /* never run: the session is free again */
                json_decref(mcp_sessions_end(c->session, NULL, NULL));
        if (c->ver)
                mcp_cfg_drop(c->srv, c->ver);
        if (c->cancel_fd >= 0 && c->srv && !c->cancelled) {
                mcp_server *srv = c->srv;
                pthread_mutex_lock(&srv->lock);
                if (srv->n_spare < ARRAY_SIZE(srv->spare_fds)) {
                        srv->spare_fds[srv->n_spare++] = c->cancel_fd;
                        c->cancel_fd = -1;
                }
                pthread_mutex_unlock(&srv->lock);
        }
        if (c->cancel_fd >= 0)
                close(c->cancel_fd);
        free(c);
}

/* Takes c off the list of calls in progress. Returns whether it had been
 * cancelled: a cancelled request gets no response. */
static bool call_unlist(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call **p = &srv->calls; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        bool cancelled = c->cancelled;
        pthread_mutex_unlock(&srv->lock);
        return cancelled;
}

/* The call is over: the server may stop once no call is left. */
static void call_done(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->n_calls--;
        pthread_cond_broadcast(&srv->calls_done);
        pthread_mutex_unlock(&srv->lock);
}

static void hand_off_reader(mcp_server *srv);

/* After a run of a tenant's workspace failed to open it (missing, not a
 * folder): on shared storage the folder is looked up at most once a second
 * (mcp_workspace_recheck), so an operator may have removed or replaced it
 * since; it is looked up now. 1: made again, run once more; < 0: *err says
 * why the folder cannot be used (a link, never followed); 0: as it was. */
static int folder_gone(mcp_server *srv, mcp_call *c, int r, airlock_error *err)
{
        if (!srv->workspaces || !c->cfg || c->cfg == c->ver->cfg ||
            (r != -ENOENT && r != -ENOTDIR && r != -ELOOP))
                return 0;
        airlock_error e = {0};
        int k = mcp_workspace_recheck(srv->workspaces,
                                      tenant_of(srv, c->sink ? c->sink->owner : NULL), &e);
        if (k < 0)
                *err = e;
        return k;
}

void mcp_on_input(void *arg)
{
        reader_watch *w = arg;
        w->handed_off = true;
        hand_off_reader(w->srv);
}

/* Runs a call; with w, on the reader's thread, watching for input. */
void mcp_run_call(mcp_call *c, reader_watch *w)
{
        mcp_server *srv = c->srv;
        airlock_run_options opts = AIRLOCK_RUN_OPTIONS_INIT;
        opts.cancel_fd = c->cancel_fd;
        al_span *span = TAKE_PTR(c->span), *outer = al_span_push(span);
        /* The server's own run (the warm-up: airlock mcp's has no request,
         * serve's an internal one) is no client's, so no trace. */
        bool own = !c->id || (c->sink && c->sink->internal);
        bool was_untraced = own ? al_trace_untraced(true) : false;
        if (w) {
                opts.watch_fd = srv->input_watch;
                opts.on_watch = mcp_on_input;
                opts.watch_arg = w;
        } else if (c->on_watch) {
                opts.watch_fd = c->watch_fd;
                opts.on_watch = c->on_watch;
                opts.watch_arg = c->watch_arg;
        }
        airlock_result *res = NULL;
        airlock_error err = {0};
        /* Only a call with a progress token pays for watching the output. */
        bool live = c->progress && mcp_progress_add(srv, c);
        if (live) {
                opts.on_output = mcp_on_output;
                opts.output_arg = c;
        }
        int r = c->session ? mcp_sessions_run(c->session, c->code, c->len, &opts, &res, &err)
                           : airlock_cache_run(srv->cache, c->cfg ? c->cfg : c->ver->cfg, c->code,
                                               c->len, &opts, &res, &err);
        if (r < 0 && !c->session && folder_gone(srv, c, r, &err) > 0)
                r = airlock_cache_run(srv->cache, c->cfg, c->code, c->len, &opts, &res, &err);
        if (live)
                mcp_progress_remove(srv, c);
        json_t *result = NULL;
        char run_id[MCP_RUN_ID_MAX + 1];
        if (c->id && r >= 0 && mcp_run_id(srv->store, run_id) < 0) {
                airlock_result_free(res);
                res = NULL;
                r = al_error(&err, -EIO, NULL, "no random bytes for the run's id");
        }
        if (c->id) {
                if (r < 0) {
                        char msg[AIRLOCK_MESSAGE_MAX + 64];
                        snprintf(msg, sizeof(msg), "airlock could not run the code: %s",
                                 err.message[0] ? err.message : strerror(-r));
                        result = mcp_tool_error(msg);
                } else {
                        result = mcp_tool_result(res, run_id, c->ver->max_stdout, c->run_record);
                        if (c->usage_record)
                                mcp_result_add_usage(result, res);
                        if (!result)
                                result = mcp_tool_error("airlock could not encode the result");
                }
        } else if (r < 0) {
                /* The warm-up failed; the first call reports why. */
                fprintf(stderr, "%s: could not prepare the sandbox: %s\n", mcp_server_name(srv),
                        err.message);
        }
        if (c->id && !(c->sink && c->sink->internal))
                audit_write(srv->audit_fd, srv->transport ? srv->transport : "mcp",
                            r >= 0 ? run_id : NULL, NULL, r >= 0 ? res : NULL);
        if (c->session) {
                /* Taken off c under srv->lock, so that mcp_cancel_locked never
                 * sees a session use that has ended. */
                pthread_mutex_lock(&srv->lock);
                mcp_session_use *use = c->session;
                c->session = NULL;
                pthread_mutex_unlock(&srv->lock);
                result = mcp_sessions_end(use, result, r < 0 ? NULL : res);
        }
        const char *status = r < 0 ? "not run" : airlock_status_name(res->status);
        /* Decide and answer under the list lock's verdict: once the call is off
         * the list a cancellation can no longer find it. */
        json_t *id = c->id ? json_incref(c->id) : NULL;
        bool cancelled = call_unlist(srv, c);
        if (id && !cancelled) {
                /* The files stay readable by the URIs the result names, from
                 * before the client can have read them. */
                if (r >= 0) {
                        mcp_store_keep(srv->store, run_id, c->sink ? c->sink->owner : NULL, res);
                        res = NULL;
                }
                mcp_send_result(srv, c->sink, id,
                                c->modern ? mcp_modern_result(result, false) : result);
        } else {
                json_decref(result);
                /* A cancelled request gets no response; the log says how its
                 * run ended (stderr is the server's log on stdio). */
                if (id) {
                        _cleanup_free_ char *idtext = json_dumps(id, JSON_ENCODE_ANY);
                        fprintf(stderr, "%s: request %s cancelled; the run ended as %s\n",
                                mcp_server_name(srv), idtext ? idtext : "?", status);
                }
        }
        airlock_result_free(res);
        json_decref(id);
        al_span_pop(outer);
        if (own)
                (void)al_trace_untraced(was_untraced);
        else
                mcp_trace_end(span, "tools/call", c->t0);
        mcp_sink *sink = c->sink;
        mcp_call_free(c);
        /* The transport may free the sink from here on. */
        if (sink && sink->call_done)
                sink->call_done(sink);
        call_done(srv);
}

static bool reader_wanted_locked(const mcp_server *srv)
{
        return srv->reader && srv->reader_free && !srv->input_done;
}

/* Does one piece of work, with srv->lock held on entry and on return: a
 * queued call, or the reader role if it is free. Returns false when there
 * is neither. */
bool mcp_take_work_locked(mcp_server *srv)
{
        mcp_call *c = srv->queue;
        if (c) {
                srv->queue = c->qnext;
                if (!srv->queue)
                        srv->queue_end = &srv->queue;
                srv->n_queued--;
                pthread_mutex_unlock(&srv->lock);
                mcp_run_call(c, NULL);
                pthread_mutex_lock(&srv->lock);
                return true;
        }
        if (reader_wanted_locked(srv)) {
                srv->reader_free = false;
                pthread_mutex_unlock(&srv->lock);
                srv->reader(srv);
                pthread_mutex_lock(&srv->lock);
                return true;
        }
        return false;
}

/* A worker: takes queued calls and the reader role until the server stops.
 * Its last touch of the server is the unlock after it has counted itself
 * out, so that mcp_stop_workers may tear the server down after that. */
static void *worker_main(void *arg)
{
        mcp_server *srv = arg;
        pthread_mutex_lock(&srv->lock);
        for (;;) {
                if (mcp_take_work_locked(srv))
                        continue;
                if (srv->stopping)
                        break;
                srv->idle_workers++;
                pthread_cond_wait(&srv->work, &srv->lock);
                srv->idle_workers--;
        }
        srv->n_workers--;
        pthread_cond_broadcast(&srv->calls_done);
        pthread_mutex_unlock(&srv->lock);
        return NULL;
}

/* Wakes an idle worker for new work, or starts one. Caller holds
 * srv->lock. Returns 0 or a positive error number. */
static int wake_worker_locked(mcp_server *srv, unsigned wanted)
{
        if (srv->idle_workers >= wanted) {
                pthread_cond_signal(&srv->work);
                return 0;
        }
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        int r = pthread_create(&t, &attr, worker_main, srv);
        pthread_attr_destroy(&attr);
        if (r == 0)
                srv->n_workers++;
        return r;
}

/* The reader hands its role on, to run a call itself. */
static void hand_off_reader(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->reader_free = true;
        /* Without another thread, this one takes the role back after its
         * call (see mcp_take_work_locked). */
        (void)wake_worker_locked(srv, srv->n_queued + 1);
        pthread_mutex_unlock(&srv->lock);
}

/* Input ended, or a stop signal came or the client went away (stopped):
 * wakes whoever waits for it. When stopped, the calls in progress are
 * cancelled here and now, by the thread that saw it: the main thread may be
 * the one running a call (it lends itself to the calls it reads), and could
 * not cancel it before the run ends. */
void mcp_finish_input(mcp_server *srv, bool stopped)
{
        pthread_mutex_lock(&srv->lock);
        srv->input_done = true;
        srv->input_stopped = stopped;
        if (stopped)
                for (mcp_call *c = srv->calls; c; c = c->next)
                        mcp_cancel_locked(c);
        pthread_cond_broadcast(&srv->work);
        pthread_mutex_unlock(&srv->lock);
}

/* Ends the workers once no call is left. */
void mcp_stop_workers(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->stopping = true;
        pthread_cond_broadcast(&srv->work);
        while (srv->n_workers > 0)
                pthread_cond_wait(&srv->calls_done, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
}

/* Queues the call for an idle worker, or starts a worker for it. Returns
 * < 0 (and frees c) when the call cannot be started. */
int mcp_call_start(mcp_server *srv, mcp_call *c)
{
        c->srv = srv;
        c->cancel_fd = -1;
        /* The configuration is fixed for the whole call from here. */
        if (!c->ver && !(c->ver = mcp_cfg_take(srv))) {
                mcp_call_free(c);
                return -ENOMEM;
        }
        pthread_mutex_lock(&srv->lock);
        if (srv->n_spare)
                c->cancel_fd = srv->spare_fds[--srv->n_spare];
        pthread_mutex_unlock(&srv->lock);
        if (c->cancel_fd < 0)
                c->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->cancel_fd < 0) {
                int e = errno;
                mcp_call_free(c);
                return -e;
        }
        pthread_mutex_lock(&srv->lock);
        if (srv->n_calls >= MCP_MAX_CALLS) {
                pthread_mutex_unlock(&srv->lock);
                mcp_call_free(c);
                return -EBUSY;
        }
        c->next = srv->calls;
        srv->calls = c;
        srv->n_calls++;
        if (c->sink && c->sink->run_here && !c->sink->here) {
                /* The transport runs it on its own thread (mcp_core_run_here). */
                c->sink->here = c;
                pthread_mutex_unlock(&srv->lock);
                return 0;
        }
        if (!c->off_reader && srv->may_inline && !srv->inline_call) {
                /* The reader runs it on its own thread. */
                srv->inline_call = c;
                pthread_mutex_unlock(&srv->lock);
                return 0;
        }
        c->qnext = NULL;
        *srv->queue_end = c;
        srv->queue_end = &c->qnext;
        srv->n_queued++;
        /* Idle workers take queued calls in order: one more is needed only
         * when there are more queued calls than idle workers. */
        int r = wake_worker_locked(srv, srv->n_queued);
        if (r != 0 && srv->n_workers == 0) {
                /* Nobody could ever take it: take it back. */
                srv->queue = NULL;
                srv->queue_end = &srv->queue;
                srv->n_queued = 0;
                srv->calls = c->next;
                srv->n_calls--;
                pthread_mutex_unlock(&srv->lock);
                mcp_call_free(c);
                return -r;
        }
        /* Without a new worker, a busy one takes it when it is free. */
        pthread_mutex_unlock(&srv->lock);
        return 0;
}

void mcp_cancel_locked(mcp_call *c)
{
        if (c->cancelled)
                return;
        c->cancelled = true;
        atomic_store(&c->silenced, true);
        /* Under srv->lock, which the end of the call takes to clear
         * c->session: the session is still in use here. */
        if (c->session)
                mcp_sessions_cancelled(c->session);
        uint64_t one = 1;
        ssize_t n = write(c->cancel_fd, &one, sizeof(one));
        (void)n; /* an eventfd write fails only on overflow, which is still readable */
}

bool mcp_same_owner(const mcp_call *c, const char *owner)
{
        const char *o = c->sink ? c->sink->owner : NULL;
        return (!o && !owner) || (o && owner && strcmp(o, owner) == 0);
}

/* notifications/cancelled: stops the run of the request it names, among
 * the calls of the same owner (over HTTP, request ids are chosen by each
 * client: one client must not stop another's call). Unknown or finished
 * requests are ignored, as the protocol asks. */
void mcp_cancel_request(mcp_server *srv, const char *owner, const json_t *request_id)
{
        if (!request_id)
                return;
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->id && mcp_same_owner(c, owner) && json_equal(c->id, (json_t *)request_id))
                        mcp_cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        /* A notification for the call that the progress thread was sending
         * goes out before this returns; none after: the request is done with. */
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
}

void mcp_cancel_all_and_wait(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                mcp_cancel_locked(c);
        while (srv->n_calls > 0)
                pthread_cond_wait(&srv->calls_done, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
}

/* Builds the sandbox's next copy in the background once a client shows up
 * (initialize, or its first request of revision 2026-07-28), so that the
 * first call does not wait for staging and the interpreter start. */
static void start_warm_up(mcp_server *srv, bool off_reader)
{
        mcp_call *c = calloc(1, sizeof(*c));
        if (!c || !(c->code = strdup("pass"))) {
                free(c);
                return;
        }
        c->len = 4;
        c->off_reader = off_reader;
        mcp_call_start(srv, c);
}

void mcp_warm_up(mcp_server *srv)
{
        if (atomic_exchange(&srv->warmed_up, true))
                return;
        /* server/discover answered while the first version is built: the
         * run needs that version, and the build prepares the sandbox anyway,
         * so the build's thread starts the run once it is done. */
        pthread_mutex_lock(&srv->cfg_lock);
        bool later = srv->building;
        if (later)
                srv->warm_when_built = true;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (!later)
                start_warm_up(srv, false);
}

/* From the build's thread, which may not leave the call to the reader
 * (srv->may_inline is the reader's alone). */
void mcp_warm_up_after_build(mcp_server *srv)
{
        start_warm_up(srv, true);
}
