/* Live output of a run: the hook of airlock_cache_run_live. A run holds its
 * caller's thread from start to end (as the watch of airlock_run_options
 * does), so the hook is kept per thread and needs no lock. */
#include <errno.h>

#include "airlock.h"
#include "core/util.h"
#include "surface/live.h"

static _Thread_local struct {
        airlock_output_fn fn;
        void *arg;
        int out_fd, err_fd;
} live = {.out_fd = -1, .err_fd = -1};

void live_streams(int out_fd, int err_fd)
{
        if (!live.fn)
                return;
        live.out_fd = out_fd;
        live.err_fd = err_fd;
}

void live_output(int fd, const char *data, size_t len)
{
        if (!live.fn || len == 0 || fd < 0)
                return;
        if (fd == live.out_fd)
                live.fn(live.arg, 1, data, len);
        else if (fd == live.err_fd)
                live.fn(live.arg, 2, data, len);
}

int airlock_cache_run_live(airlock_cache *cache, const airlock_config *cfg, const char *code,
                           size_t len, const airlock_run_options *opts, airlock_output_fn on_output,
                           void *output_arg, airlock_result **ret, airlock_error *err)
{
        /* A hook inside a hook would report the inner run as the outer one:
         * there is no such caller, so refuse it rather than mix them. */
        if (live.fn)
                return al_error(err, -EBUSY, NULL,
                                "cache run: a live run is already in progress "
                                "on this thread");
        live.fn = on_output;
        live.arg = output_arg;
        int r = airlock_cache_run_ex(cache, cfg, code, len, opts, ret, err);
        live.fn = NULL;
        live.arg = NULL;
        live.out_fd = live.err_fd = -1;
        return r;
}

int airlock_session_run_live(airlock_session *s, const char *code, size_t len,
                             const airlock_run_options *opts, airlock_output_fn on_output,
                             void *output_arg, airlock_result **ret, airlock_error *err)
{
        if (live.fn)
                return al_error(err, -EBUSY, NULL,
                                "session run: a live run is already in progress on this thread");
        live.fn = on_output;
        live.arg = output_arg;
        int r = airlock_session_run(s, code, len, opts, ret, err);
        live.fn = NULL;
        live.arg = NULL;
        live.out_fd = live.err_fd = -1;
        return r;
}
