/* The library's own helpers on top of the shared base (common/base.h):
 * the caller's watch of a run. Nothing here is part of the public API. */
#ifndef AIRLOCK_UTIL_H
#define AIRLOCK_UTIL_H

#include <stdbool.h>

#include "airlock.h"
#include "base.h"

/* The caller's watch of this thread's run (airlock_run_options.on_watch).
 * al_watch_begin arms it from opts unless an outer call on this thread has
 * (the cache runs through the sandbox) and returns whether it did, which
 * is then passed to al_watch_end. */
bool al_watch_begin(const airlock_run_options *opts);
void al_watch_end(bool began);
/* Hands the caller's input on now, before a step that may take long. */
void al_watch_fire(void);
/* The fd to poll while the code runs, or -1 when there is none (left). */
int al_watch_fd(void);

#endif
