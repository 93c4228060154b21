/* Live output of a run: the caller's hook (airlock_run_options.on_output),
 * which al_watch_begin arms on the thread that runs the code. A run holds
 * its caller's thread from start to end, so the pipes it serves are kept
 * per thread and need no lock. */
#include "sandbox/live.h"

#include "airlock.h"
#include "core/util.h"

static _Thread_local struct {
        int out_fd, err_fd;
} live = {.out_fd = -1, .err_fd = -1};

void live_streams(int out_fd, int err_fd)
{
        live.out_fd = out_fd;
        live.err_fd = err_fd;
}

void live_output(int fd, const char *data, size_t len)
{
        void *arg = NULL;
        airlock_output_fn fn = al_watch_output(&arg);
        if (!fn || len == 0 || fd < 0)
                return;
        if (fd == live.out_fd)
                fn(arg, 1, data, len);
        else if (fd == live.err_fd)
                fn(arg, 2, data, len);
}
