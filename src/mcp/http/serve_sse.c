/* The answer to a POST that carried a request: the response as JSON, or,
 * when notifications come first and the client accepts it, an SSE stream
 * of every message, the response last. The client's socket is watched
 * meanwhile: a client that leaves cancels its call. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

/* Waits for the next message of k or its end, watching the client's
 * socket. Returns the message (NULL at the end); *gone when the client went
 * away (its call is then cancelled and over). */
static http_msg *wait_message(http_request *rq, bool *gone)
{
        http_sink *k = rq->sink;
        *gone = false;
        for (;;) {
                pthread_mutex_lock(&k->lock);
                http_msg *e = http_sink_pop_locked(k);
                bool done = k->done || !k->pending;
                pthread_mutex_unlock(&k->lock);
                if (e || done)
                        return e;
                struct pollfd p[2] = {{.fd = k->efd, .events = POLLIN},
                                      {.fd = rq->sock, .events = POLLRDHUP}};
                int n = poll(p, rq->sock >= 0 ? 2 : 1, -1);
                if (n < 0 && errno != EINTR)
                        return NULL;
                if (p[0].revents & POLLIN) {
                        uint64_t v;
                        ssize_t r = read(k->efd, &v, sizeof(v));
                        (void)r;
                }
                if (rq->sock >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                        *gone = true;
                        http_sink_cancel(k);
                        return NULL;
                }
        }
}

/* Formats e as one SSE event into rq->out (and frees e). */
static int sse_event(http_request *rq, http_msg *e)
{
        size_t n = strlen(e->text) + 32;
        free(rq->out);
        rq->out = malloc(n);
        rq->out_len = rq->out_off = 0;
        if (rq->out)
                rq->out_len = (size_t)snprintf(rq->out, n, "event: message\ndata: %s\n\n", e->text);
        if (e->response)
                rq->resp_sent = true;
        http_msg_free(e);
        return rq->out ? 0 : -ENOMEM;
}

/* The SSE stream: one event per message, the response last, then the end.
 * Blocks on the connection's thread. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        (void)pos;
        http_request *rq = cls;
        while (rq->out_off >= rq->out_len) {
                if (rq->resp_sent) {
                        http_json_log(rq); /* before the client sees the stream end */
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                bool gone = false;
                http_msg *e = wait_message(rq, &gone);
                if (gone) {
                        rq->status = ST_CANCELLED;
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (!e) {
                        rq->status = ST_CANCELLED;
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                if (e->response) {
                        pthread_mutex_lock(&rq->sink->lock);
                        rq->status = rq->sink->status;
                        pthread_mutex_unlock(&rq->sink->lock);
                }
                if (sse_event(rq, e) < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        size_t n = rq->out_len - rq->out_off;
        if (n > max)
                n = max;
        memcpy(buf, rq->out + rq->out_off, n);
        rq->out_off += n;
        return (ssize_t)n;
}

static enum MHD_Result start_sse(struct MHD_Connection *c, http_request *rq, http_msg *first)
{
        /* The first message goes first. */
        if (sse_event(rq, first) < 0)
                return MHD_NO;
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, sse_read, rq, NULL);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        MHD_add_response_header(r, "Airlock-Instance", rq->srv->opt.instance);
        rq->streaming = true;
        rq->http_status = MHD_HTTP_OK;
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
}

/* Answers with the response of the request (the last message): JSON, or
 * SSE when notifications came first and the client accepts it. */
enum MHD_Result http_answer(struct MHD_Connection *c, http_request *rq)
{
        http_sink *k = rq->sink;
        for (;;) {
                bool gone = false;
                http_msg *e = wait_message(rq, &gone);
                if (gone) {
                        rq->status = ST_CANCELLED;
                        rq->http_status = 499; /* the log's name for "client went away" */
                        return MHD_NO;
                }
                if (!e) {
                        /* Over without a response: cancelled. The answer
                         * names the request's id, so that an instance that
                         * forwarded the call takes it as this call's. */
                        rq->status = ST_CANCELLED;
                        return http_queue_rpc_error_to(c, rq, rq->id, MHD_HTTP_OK,
                                                       RPC_INTERNAL_ERROR, "request cancelled");
                }
                if (e->response) {
                        pthread_mutex_lock(&k->lock);
                        rq->status = k->status;
                        pthread_mutex_unlock(&k->lock);
                        enum MHD_Result r = http_queue(c, rq, MHD_HTTP_OK, "application/json",
                                                       e->text, strlen(e->text));
                        http_msg_free(e);
                        return r;
                }
                if (rq->sse)
                        return start_sse(c, rq, e);
                http_msg_free(e); /* a JSON response carries no notification */
        }
}
