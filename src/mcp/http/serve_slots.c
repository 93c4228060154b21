/* airlock serve's run slots: --max-runs calls run at once, at most
 * --max-queue wait for a slot (each tenant within its quotas), and the
 * POSTs that come before the core is built wait for it. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"
#include "quota.h"

/* When a wait for a run slot, or for the core to be built, gives up:
 * --queue-wait seconds from now, on the monotonic clock of slot_free and
 * built (cmd_serve makes them so). */
static struct timespec queue_deadline(const http_server *s)
{
        uint64_t at = al_now_ns() + (uint64_t)(s->opt.queue_wait_s * 1e9);
        return (struct timespec){.tv_sec = (time_t)(at / 1000000000ull),
                                 .tv_nsec = (long)(at % 1000000000ull)};
}

/* Under slot_lock: a run slot is free, and owner holds fewer runs than its
 * quota; then both are taken. */
static bool slot_fits_locked(http_server *s, const char *owner)
{
        return s->running < s->opt.max_runs &&
               quota_take(s->quotas, owner, QUOTA_RUNS, NULL, NULL) == 0;
}

/* Takes a run slot for owner, waiting in the queue when every slot is busy
 * or owner runs its quota already: at most max_queue requests wait (each
 * owner at most its own quota of them), each at most queue_wait_s seconds.
 * A refusal for the owner's own quota says, in err, only what that owner
 * holds and may hold. */
http_admit http_slot_take(http_server *s, const char *owner, airlock_error *err)
{
        pthread_mutex_lock(&s->slot_lock);
        if (!http_tenant_exists(s, owner)) {
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_GONE;
        }
        /* Not behind the calls that wait: those may wait for their own
         * owner's quota, which is no reason for another owner to. */
        if (slot_fits_locked(s, owner)) {
                s->running++;
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_OK;
        }
        unsigned queued = 0, queue_limit = 0;
        int q = quota_take(s->quotas, owner, QUOTA_QUEUED, &queued, &queue_limit);
        if (q < 0) {
                unsigned runs = quota_held(s->quotas, owner, QUOTA_RUNS);
                bool own_runs = false, own_queue = false;
                unsigned run_limit = quota_limit(s->quotas, owner, QUOTA_RUNS, &own_runs);
                (void)quota_limit(s->quotas, owner, QUOTA_QUEUED, &own_queue);
                pthread_mutex_unlock(&s->slot_lock);
                (void)al_error(
                    err, -EAGAIN, NULL,
                    "too many calls: you have %u running and %u waiting, your limits "
                    "(%s %u, %s %u); retry when one of yours has finished",
                    runs, queued, own_runs ? "max-runs of your tenant" : "--max-runs-per-token",
                    run_limit, own_queue ? "max-queue of your tenant" : "--max-queue-per-token",
                    queue_limit);
                return ADMIT_OWN_QUEUE_FULL;
        }
        if (s->waiting >= s->opt.max_queue) {
                quota_give(s->quotas, owner, QUOTA_QUEUED);
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_QUEUE_FULL;
        }
        s->waiting++;
        struct timespec ts = queue_deadline(s);
        http_admit a = ADMIT_OK;
        int r = 0;
        /* The tenant is asked first: removing it cancels its running call,
         * whose slot then frees, and a queued call of it must not take
         * that slot. */
        for (;;) {
                if (!http_tenant_exists(s, owner)) {
                        a = ADMIT_GONE;
                        break;
                }
                if (slot_fits_locked(s, owner))
                        break;
                if (atomic_load(&s->draining)) {
                        a = ADMIT_DRAINING;
                        break;
                }
                if (r == ETIMEDOUT) {
                        a = ADMIT_TIMEOUT;
                        break;
                }
                r = pthread_cond_timedwait(&s->slot_free, &s->slot_lock, &ts);
        }
        s->waiting--;
        quota_give(s->quotas, owner, QUOTA_QUEUED);
        if (a == ADMIT_OK)
                s->running++;
        pthread_mutex_unlock(&s->slot_lock);
        return a;
}

/* Gives back a run slot that http_slot_take took for owner (internal: the
 * warm-up run's, which took no quota). */
void http_slot_give(http_server *s, const char *owner, bool internal)
{
        pthread_mutex_lock(&s->slot_lock);
        s->running--;
        if (!internal)
                quota_give(s->quotas, owner, QUOTA_RUNS);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
}

/* Holds a request that came before the core (the sandbox and the tool
 * description) is built, at most --queue-wait seconds, so that a client
 * that connects right after the server starts is served rather than told
 * to retry. Returns 0 once the core is built, -ETIMEDOUT when the wait
 * ran out, -ECANCELED when the build failed (the server then stops). The
 * request holds only its connection meanwhile (its body is in, within
 * --max-body-total), as a slow client does. */
int http_hold_until_built(http_server *s)
{
        if (atomic_load(&s->core_ready))
                return 0;
        struct timespec ts = queue_deadline(s);
        int r = 0;
        pthread_mutex_lock(&s->slot_lock);
        s->held++;
        while (!atomic_load(&s->core_ready) && !atomic_load(&s->core_failed) && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&s->built, &s->slot_lock, &ts);
        s->held--;
        pthread_mutex_unlock(&s->slot_lock);
        if (atomic_load(&s->core_ready))
                return 0;
        return atomic_load(&s->core_failed) ? -ECANCELED : -ETIMEDOUT;
}

/* Wakes the requests held by http_hold_until_built: the core is built, or
 * failed to be. */
void http_announce_built(http_server *s, bool ok)
{
        pthread_mutex_lock(&s->slot_lock);
        atomic_store(ok ? &s->core_ready : &s->core_failed, true);
        pthread_cond_broadcast(&s->built);
        pthread_mutex_unlock(&s->slot_lock);
}
