/* The caller's watch of a run (util.h). */
#include "core/util.h"

#include <string.h>

/* One per thread: a run holds its caller's thread from start to end. */
static _Thread_local struct {
        bool active;
        int fd;
        void (*fn)(void *);
        void *arg;
} watch;

bool al_watch_begin(const airlock_run_options *opts)
{
        if (watch.active)
                return false;
        watch.active = true;
        watch.fn = opts ? opts->on_watch : NULL;
        watch.fd = watch.fn ? opts->watch_fd : -1;
        watch.arg = watch.fn ? opts->watch_arg : NULL;
        return true;
}

void al_watch_end(bool began)
{
        if (began)
                memset(&watch, 0, sizeof(watch));
}

void al_watch_fire(void)
{
        void (*fn)(void *) = watch.fn;
        watch.fn = NULL;
        watch.fd = -1;
        if (fn)
                fn(watch.arg);
}

int al_watch_fd(void)
{
        return watch.fn ? watch.fd : -1;
}
