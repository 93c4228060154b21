/* The caller's watch of a run (util.h). */
#include "core/util.h"

#include <errno.h>
#include <string.h>

/* A caller's struct larger than this many bytes is garbage in its size
 * field, not a newer version: no struct of airlock.h comes near it. */
#define STRUCT_SIZE_MAX 4096

int al_struct_in(void *dst, size_t dst_size, const void *src, size_t min_size, const char *what,
                 const char *init, airlock_error *err)
{
        size_t n;
        memcpy(&n, src, sizeof(n));
        if (n < min_size || n > STRUCT_SIZE_MAX)
                return al_error(err, -EINVAL, NULL,
                                "%s: size is %zu, not a size this library knows (%zu): initialise "
                                "it with %s",
                                what, n, dst_size, init);
        /* A newer caller's fields that this library does not know may only
         * be at their zero defaults: anything else asks for behaviour that
         * this library cannot give. */
        for (size_t i = dst_size; i < n; i++)
                if (((const unsigned char *)src)[i])
                        return al_error(err, -E2BIG, NULL,
                                        "%s: sets a field at byte %zu that this library (%s) "
                                        "does not know",
                                        what, i, AIRLOCK_VERSION);
        memcpy(dst, src, n < dst_size ? n : dst_size);
        memcpy(dst, &dst_size, sizeof(dst_size));
        return 0;
}

int al_run_options_in(const airlock_run_options *opts, airlock_run_options *out, airlock_error *err)
{
        *out = (airlock_run_options)AIRLOCK_RUN_OPTIONS_INIT;
        if (!opts)
                return 0;
        return al_struct_in(out, sizeof(*out), opts, sizeof(airlock_run_options),
                            "airlock_run_options", "AIRLOCK_RUN_OPTIONS_INIT", err);
}

/* One per thread: a run holds its caller's thread from start to end. */
static _Thread_local struct {
        bool active;
        int fd;
        void (*fn)(void *);
        void *arg;
        airlock_output_fn out;
        void *out_arg;
} watch;

bool al_watch_begin(const airlock_run_options *opts)
{
        if (watch.active)
                return false;
        watch.active = true;
        watch.fn = opts ? opts->on_watch : NULL;
        watch.fd = watch.fn ? opts->watch_fd : -1;
        watch.arg = watch.fn ? opts->watch_arg : NULL;
        watch.out = opts ? opts->on_output : NULL;
        watch.out_arg = watch.out ? opts->output_arg : NULL;
        return true;
}

airlock_output_fn al_watch_output(void **ret_arg)
{
        *ret_arg = watch.out_arg;
        return watch.out;
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

const char *airlock_version(void)
{
        return AIRLOCK_VERSION;
}
