/* The hang-up watcher of airlock serve: while a call runs on its
 * connection's thread, nobody polls its socket, so one thread watches those
 * sockets and cancels the call of a client that hangs up. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

/* While a call runs on its connection's thread, nobody polls its socket:
 * one thread of the server watches those sockets in one epoll set (two
 * system calls a call, no thread per call) and cancels the call of a client
 * that hangs up. A registration is a slot of a table (one per connection),
 * named in the event with a generation, so that an event that comes after
 * its call ended is recognised and dropped. */
#define HUP_STOP UINT64_MAX

static void *hup_main(void *arg)
{
        http_server *s = arg;
        struct epoll_event ev[16];
        for (;;) {
                int n = epoll_wait(s->hup_ep, ev, (int)ARRAY_SIZE(ev), -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return NULL;
                pthread_mutex_lock(&s->hup_lock);
                for (int i = 0; i < n; i++) {
                        if (ev[i].data.u64 == HUP_STOP) {
                                pthread_mutex_unlock(&s->hup_lock);
                                return NULL;
                        }
                        uint32_t slot = (uint32_t)ev[i].data.u64;
                        uint32_t gen = (uint32_t)(ev[i].data.u64 >> 32);
                        if (slot < s->n_hup && s->hup[slot].sink && s->hup[slot].gen == gen)
                                mcp_core_cancel_sink(s->core, &s->hup[slot].sink->base);
                }
                pthread_mutex_unlock(&s->hup_lock);
        }
}

int http_hup_init(http_server *s)
{
        s->n_hup = s->opt.max_connections + 4;
        s->hup = calloc(s->n_hup, sizeof(*s->hup));
        s->hup_free = calloc(s->n_hup, sizeof(*s->hup_free));
        s->hup_ep = epoll_create1(EPOLL_CLOEXEC);
        s->hup_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (!s->hup || !s->hup_free || s->hup_ep < 0 || s->hup_stop < 0)
                return -ENOMEM;
        for (unsigned i = 0; i < s->n_hup; i++)
                s->hup_free[s->n_free++] = s->n_hup - 1 - i;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HUP_STOP};
        if (epoll_ctl(s->hup_ep, EPOLL_CTL_ADD, s->hup_stop, &ev) < 0)
                return -errno;
        int r = pthread_create(&s->hup_thread, NULL, hup_main, s);
        if (r != 0)
                return -r;
        s->hup_started = true;
        return 0;
}

void http_hup_fini(http_server *s)
{
        if (s->hup_started) {
                uint64_t one = 1;
                ssize_t n = write(s->hup_stop, &one, sizeof(one));
                (void)n;
                pthread_join(s->hup_thread, NULL);
                s->hup_started = false;
        }
        if (s->hup_ep >= 0)
                close(s->hup_ep);
        if (s->hup_stop >= 0)
                close(s->hup_stop);
        s->hup_ep = s->hup_stop = -1;
        free(s->hup);
        free(s->hup_free);
        s->hup = NULL;
        s->hup_free = NULL;
}

/* Watches rq's socket for a hang-up; returns the slot, or -1 (the call
 * then runs unwatched: its client's leaving is seen once it ends). */
static int hup_watch(http_request *rq)
{
        http_server *s = rq->srv;
        if (rq->sock < 0 || !s->hup_started)
                return -1;
        pthread_mutex_lock(&s->hup_lock);
        if (!s->n_free) {
                pthread_mutex_unlock(&s->hup_lock);
                return -1;
        }
        uint32_t slot = s->hup_free[--s->n_free];
        s->hup[slot].sink = rq->sink;
        uint32_t gen = ++s->hup[slot].gen;
        pthread_mutex_unlock(&s->hup_lock);
        /* One event is enough: the call is cancelled once. */
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
                                 .data.u64 = ((uint64_t)gen << 32) | slot};
        if (epoll_ctl(s->hup_ep, EPOLL_CTL_ADD, rq->sock, &ev) == 0)
                return (int)slot;
        pthread_mutex_lock(&s->hup_lock);
        s->hup[slot].sink = NULL;
        s->hup_free[s->n_free++] = slot;
        pthread_mutex_unlock(&s->hup_lock);
        return -1;
}

static void hup_unwatch(http_request *rq, int slot)
{
        http_server *s = rq->srv;
        if (slot < 0)
                return;
        (void)epoll_ctl(s->hup_ep, EPOLL_CTL_DEL, rq->sock, NULL);
        /* Under the lock: the watcher is not using the sink, and a late
         * event finds the slot empty or of another generation. */
        pthread_mutex_lock(&s->hup_lock);
        s->hup[slot].sink = NULL;
        s->hup[slot].gen++;
        s->hup_free[s->n_free++] = (uint32_t)slot;
        pthread_mutex_unlock(&s->hup_lock);
}

/* Runs the call left for this thread, its socket watched meanwhile. */
void http_run_here(http_request *rq)
{
        int slot = hup_watch(rq);
        mcp_core_run_here(rq->srv->core, &rq->sink->base, -1, NULL, NULL);
        hup_unwatch(rq, slot);
}
