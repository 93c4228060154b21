/* Progress of the tools/call that carry _meta.progressToken: the runs'
 * output hook keeps each call's latest line, and one thread sends
 * notifications/progress for every such call while it runs. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"

/* Progress of a tools/call that carries _meta.progressToken: a notification
 * at least every PROGRESS_EVERY_NS while it runs, and one within
 * PROGRESS_TICK_NS of new output, never two closer than that. */
#define PROGRESS_EVERY_NS (2000ull * 1000000)
#define PROGRESS_TICK_NS  (250ull * 1000000)
#define PROGRESS_LINE_MAX 200 /* bytes of the latest output line in "message" */

/* The run's output hook (airlock_run_options.on_output), on the run's thread: keeps
 * the latest line of output, stdout and stderr alike, for the progress
 * thread. A line ends at "\n" or "\r" (a progress bar redraws its line after
 * "\r"); blank lines are skipped; a line longer than PROGRESS_LINE_MAX keeps
 * its start; control characters become spaces. */
void mcp_on_output(void *arg, int stream, const char *data, size_t len)
{
        (void)stream;
        mcp_call *c = arg;
        pthread_mutex_lock(&c->srv->live_lock);
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)data[i];
                if (ch == '\n' || ch == '\r') {
                        bool blank = true;
                        for (size_t k = 0; k < c->live.cur_len && blank; k++)
                                blank = c->live.cur[k] == ' ';
                        if (!blank) {
                                memcpy(c->live.last, c->live.cur, c->live.cur_len);
                                c->live.last_len = c->live.cur_len;
                        }
                        c->live.cur_len = 0;
                } else if (c->live.cur_len < sizeof(c->live.cur)) {
                        c->live.cur[c->live.cur_len++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
                }
        }
        c->live.seq++;
        pthread_mutex_unlock(&c->srv->live_lock);
}

/* Sends c's next notifications/progress if one is due at now: on new output
 * (at most one per PROGRESS_TICK_NS) and at least every PROGRESS_EVERY_NS.
 * "progress" is the seconds the call has run, which only grows; "message" the
 * latest line of output (the line being written when it has not ended), or
 * how long the code has run while it has printed nothing. Caller holds
 * prog_lock. */
static void progress_tick(mcp_server *srv, mcp_call *c, uint64_t now)
{
        if (atomic_load(&c->silenced))
                return;
        char text[PROGRESS_LINE_MAX + 1];
        size_t n;
        pthread_mutex_lock(&srv->live_lock);
        unsigned long seq = c->live.seq;
        if (c->live.cur_len) {
                n = c->live.cur_len;
                memcpy(text, c->live.cur, n);
        } else {
                n = c->live.last_len;
                memcpy(text, c->live.last, n);
        }
        pthread_mutex_unlock(&srv->live_lock);
        uint64_t since = now - c->sent_ns;
        if (since < PROGRESS_EVERY_NS && (seq == c->sent_seq || since < PROGRESS_TICK_NS))
                return;
        /* Trimmed; a character cut at the end becomes U+FFFD. */
        size_t start = 0;
        while (start < n && text[start] == ' ')
                start++;
        while (n > start && text[n - 1] == ' ')
                n--;
        text[n] = '\0';
        double elapsed = (double)(now - c->started_ns) / 1e9;
        double progress = (double)(uint64_t)(elapsed * 1000) / 1000;
        if (progress <= c->sent_progress)
                progress = c->sent_progress + 0.001;
        char status[64];
        snprintf(status, sizeof(status), "running for %.0f s", elapsed);
        _cleanup_free_ char *line = n > start ? al_utf8_sanitize(text + start, n - start) : NULL;
        c->sent_ns = now;
        c->sent_seq = seq;
        c->sent_progress = progress;
        json_t *params = json_pack("{s:O, s:f, s:s}", "progressToken", c->progress, "progress",
                                   progress, "message", line ? line : status);
        if (params)
                mcp_send_message(srv, c->sink,
                                 jsonrpc_notification("notifications/progress", params));
}

/* The progress thread: wakes every PROGRESS_TICK_NS while some call with a
 * progress token runs, sleeps otherwise. */
static void *progress_main(void *arg)
{
        mcp_server *srv = arg;
        pthread_mutex_lock(&srv->prog_lock);
        while (!srv->prog_stop) {
                if (!srv->prog_calls) {
                        pthread_cond_wait(&srv->prog_wake, &srv->prog_lock);
                        continue;
                }
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t at =
                    (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + PROGRESS_TICK_NS;
                ts.tv_sec = (time_t)(at / 1000000000ull);
                ts.tv_nsec = (long)(at % 1000000000ull);
                pthread_cond_timedwait(&srv->prog_wake, &srv->prog_lock, &ts);
                uint64_t now = al_now_ns();
                for (mcp_call *c = srv->prog_calls; c && !srv->prog_stop; c = c->pnext)
                        progress_tick(srv, c, now);
        }
        pthread_mutex_unlock(&srv->prog_lock);
        return NULL;
}

/* c's run starts: the progress thread reports on it from now on (starting
 * the thread with the first such call). Returns false when there is no
 * progress thread; the call then runs without progress. */
bool mcp_progress_add(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->prog_lock);
        if (!srv->prog_started) {
                int r = pthread_create(&srv->prog_thread, NULL, progress_main, srv);
                if (r != 0) {
                        pthread_mutex_unlock(&srv->prog_lock);
                        fprintf(stderr, "%s: no progress notifications: %s\n", mcp_server_name(srv),
                                strerror(r));
                        return false;
                }
                srv->prog_started = true;
        }
        c->started_ns = c->sent_ns = al_now_ns();
        c->pnext = srv->prog_calls;
        srv->prog_calls = c;
        pthread_cond_signal(&srv->prog_wake);
        pthread_mutex_unlock(&srv->prog_lock);
        return true;
}

/* c's run is over: after this no notification for it is sent, so its
 * response may go out. */
void mcp_progress_remove(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->prog_lock);
        for (mcp_call **p = &srv->prog_calls; *p; p = &(*p)->pnext)
                if (*p == c) {
                        *p = c->pnext;
                        break;
                }
        pthread_mutex_unlock(&srv->prog_lock);
}

/* Ends the progress thread (every call is over by now). */
void mcp_stop_progress(mcp_server *srv)
{
        pthread_mutex_lock(&srv->prog_lock);
        srv->prog_stop = true;
        bool started = srv->prog_started;
        pthread_cond_signal(&srv->prog_wake);
        pthread_mutex_unlock(&srv->prog_lock);
        if (started)
                pthread_join(srv->prog_thread, NULL);
}
