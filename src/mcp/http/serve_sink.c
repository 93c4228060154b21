/* The sink of one HTTP request (mcp_core.h): the messages the core
 * produces for it, queued for the request's thread, which writes them as
 * one JSON response or as an SSE stream (serve_sse.c). */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

static void sink_wake(http_sink *k)
{
        uint64_t one = 1;
        ssize_t n = write(k->efd, &one, sizeof(one));
        (void)n; /* an eventfd full of wake-ups is still readable */
}

enum call_status http_message_status(const json_t *m)
{
        if (json_object_get(m, "error"))
                return ST_RPC_ERROR;
        if (json_is_true(json_object_get(json_object_get(m, "result"), "isError")))
                return ST_TOOL_ERROR;
        return ST_OK;
}

void http_sink_push(http_sink *k, char *text, bool response, enum call_status st)
{
        http_msg *e = text ? malloc(sizeof(*e)) : NULL;
        if (!e) {
                free(text);
                return;
        }
        *e = (http_msg){.text = text, .response = response};
        pthread_mutex_lock(&k->lock);
        *k->tail = e;
        k->tail = &e->next;
        if (response) {
                k->got_resp = true;
                k->status = st;
        }
        pthread_mutex_unlock(&k->lock);
        sink_wake(k);
}

static void sink_send(mcp_sink *base, json_t *m)
{
        http_sink *k = (http_sink *)base;
        bool response = json_object_get(m, "id") && !json_object_get(m, "method");
        enum call_status st = response ? http_message_status(m) : ST_OK;
        char *text = json_dumps(m, JSON_COMPACT | AL_JSON_REALS);
        json_decref(m);
        http_sink_push(k, text, response, st);
}

void http_sink_finish(http_sink *k)
{
        pthread_mutex_lock(&k->lock);
        k->done = true;
        sink_wake(k);
        pthread_mutex_unlock(&k->lock);
}

static void sink_call_done(mcp_sink *base)
{
        http_sink *k = (http_sink *)base;
        /* The run slot is free as soon as the run is over, before the
         * response is written to a client that may read it slowly. */
        http_slot_give(k->srv, k->base.owner, k->base.internal);
        /* Woken under the lock: the request's thread may free the sink as
         * soon as it sees done, which it reads under the lock. */
        pthread_mutex_lock(&k->lock);
        k->done = true;
        sink_wake(k);
        pthread_mutex_unlock(&k->lock);
}

http_sink *http_sink_new(http_server *s, const char *owner)
{
        http_sink *k = calloc(1, sizeof(*k));
        if (!k)
                return NULL;
        k->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (k->efd < 0) {
                free(k);
                return NULL;
        }
        k->base.send = sink_send;
        k->base.call_done = sink_call_done;
        k->base.owner = owner;
        k->srv = s;
        k->tail = &k->head;
        pthread_mutex_init(&k->lock, NULL);
        return k;
}

http_msg *http_sink_pop_locked(http_sink *k)
{
        http_msg *e = k->head;
        if (e) {
                k->head = e->next;
                if (!k->head)
                        k->tail = &k->head;
        }
        return e;
}

void http_msg_free(http_msg *e)
{
        if (e) {
                free(e->text);
                free(e);
        }
}

/* Waits until the call started for k is over (after a cancel). */
void http_sink_wait_done(http_sink *k)
{
        for (;;) {
                pthread_mutex_lock(&k->lock);
                bool done = k->done;
                pthread_mutex_unlock(&k->lock);
                if (done)
                        return;
                struct pollfd p = {.fd = k->efd, .events = POLLIN};
                (void)poll(&p, 1, 1000);
                uint64_t v;
                ssize_t n = read(k->efd, &v, sizeof(v));
                (void)n;
        }
}

void http_sink_cancel(http_sink *k)
{
        atomic_store(&k->cancel, true);
        if (!k->forwarded)
                mcp_core_cancel_sink(k->srv->core, &k->base);
        http_sink_wait_done(k);
}

void http_sink_free(http_sink *k)
{
        if (!k)
                return;
        if (k->pending)
                http_sink_cancel(k);
        http_msg *e;
        while ((e = http_sink_pop_locked(k)))
                http_msg_free(e);
        close(k->efd);
        pthread_mutex_destroy(&k->lock);
        free(k);
}
