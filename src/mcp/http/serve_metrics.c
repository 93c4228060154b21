/* airlock serve's metrics: the counters of answers and refusals, the
 * latency histogram of tools/call, and the Prometheus text of /metrics. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

const char *const http_status_names[ST_N] = {"ok", "tool_error", "rpc_error", "cancelled",
                                             "refused"};

static const char *const refusal_names[RF_N] = {
    "body_too_large",       "queue_full", "queue_timeout", "draining",  "bad_origin", "bad_request",
    "bad_protocol_version", "warming_up", "body_memory",   "slow_body", "peer_auth"};
static const double latency_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                         1,     2.5,  5,     10,   30,  60,   300};
_Static_assert(ARRAY_SIZE(latency_buckets) == N_BUCKETS,
               "N_BUCKETS is the count of latency_buckets");

void http_observe_latency(http_server *s, double sec)
{
        pthread_mutex_lock(&s->m.hist_lock);
        size_t i = 0;
        while (i < N_BUCKETS && sec > latency_buckets[i])
                i++;
        s->m.hist[i]++;
        s->m.hist_sum += sec;
        s->m.hist_count++;
        pthread_mutex_unlock(&s->m.hist_lock);
}

void http_refuse(http_request *rq, enum refusal why)
{
        atomic_fetch_add(&rq->srv->m.refusals[why], 1);
        rq->status = ST_REFUSED;
}

/* ---- metrics text ------------------------------------------------------- */

static void put(dynbuf *b, const char *fmt, ...) _printf_(2, 3);
static void put(dynbuf *b, const char *fmt, ...)
{
        char line[2048];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (n > 0)
                (void)dynbuf_append(b, line,
                                    (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void http_format_metrics(http_server *s, dynbuf *b)
{
        bool core = atomic_load(&s->core_ready);
        put(b, "# HELP airlock_calls_total MCP requests answered, by outcome.\n"
               "# TYPE airlock_calls_total counter\n");
        for (int i = 0; i < ST_N; i++)
                put(b, "airlock_calls_total{status=\"%s\"} %lu\n", http_status_names[i],
                    atomic_load(&s->m.calls[i]));
        put(b, "# HELP airlock_refusals_total Requests refused before they ran, by reason.\n"
               "# TYPE airlock_refusals_total counter\n");
        for (int i = 0; i < RF_N; i++)
                put(b, "airlock_refusals_total{reason=\"%s\"} %lu\n", refusal_names[i],
                    atomic_load(&s->m.refusals[i]));
        put(b,
            "# HELP airlock_auth_failures_total Requests without a valid bearer token.\n"
            "# TYPE airlock_auth_failures_total counter\n"
            "airlock_auth_failures_total{reason=\"missing\"} %lu\n"
            "airlock_auth_failures_total{reason=\"invalid\"} %lu\n",
            atomic_load(&s->m.auth_missing), atomic_load(&s->m.auth_invalid));
        put(b,
            "# HELP airlock_http_requests_total HTTP requests received.\n"
            "# TYPE airlock_http_requests_total counter\n"
            "airlock_http_requests_total %lu\n",
            atomic_load(&s->m.http_requests));
        pthread_mutex_lock(&s->m.hist_lock);
        put(b, "# HELP airlock_run_duration_seconds tools/call latency, admission to response.\n"
               "# TYPE airlock_run_duration_seconds histogram\n");
        unsigned long cum = 0;
        for (size_t i = 0; i < N_BUCKETS; i++) {
                cum += s->m.hist[i];
                put(b, "airlock_run_duration_seconds_bucket{le=\"%g\"} %lu\n", latency_buckets[i],
                    cum);
        }
        cum += s->m.hist[N_BUCKETS];
        put(b,
            "airlock_run_duration_seconds_bucket{le=\"+Inf\"} %lu\n"
            "airlock_run_duration_seconds_sum %.6f\n"
            "airlock_run_duration_seconds_count %lu\n",
            cum, s->m.hist_sum, s->m.hist_count);
        pthread_mutex_unlock(&s->m.hist_lock);
        pthread_mutex_lock(&s->slot_lock);
        unsigned running = s->running, waiting = s->waiting, held = s->held;
        pthread_mutex_unlock(&s->slot_lock);
        put(b,
            "# HELP airlock_runs_in_flight tools/call holding a run slot.\n"
            "# TYPE airlock_runs_in_flight gauge\n"
            "airlock_runs_in_flight %u\n"
            "# HELP airlock_queue_depth tools/call waiting for a run slot.\n"
            "# TYPE airlock_queue_depth gauge\n"
            "airlock_queue_depth %u\n"
            "# HELP airlock_requests_held POSTs held until the server is built.\n"
            "# TYPE airlock_requests_held gauge\n"
            "airlock_requests_held %u\n"
            "# HELP airlock_run_slots Run slots (--max-runs).\n"
            "# TYPE airlock_run_slots gauge\n"
            "airlock_run_slots %u\n",
            running, waiting, held, s->opt.max_runs);
        put(b,
            "# HELP airlock_sandbox_runs Runs in progress in sandboxes (warm-up included).\n"
            "# TYPE airlock_sandbox_runs gauge\n"
            "airlock_sandbox_runs %u\n"
            "# HELP airlock_sessions_open Sessions open on this instance.\n"
            "# TYPE airlock_sessions_open gauge\n"
            "airlock_sessions_open %u\n"
            "# HELP airlock_ready 1 when ready for calls.\n"
            "# TYPE airlock_ready gauge\n"
            "airlock_ready %d\n",
            core ? mcp_core_calls(s->core) : 0, core ? mcp_core_sessions(s->core) : 0,
            atomic_load(&s->ready) && !atomic_load(&s->draining));
        const union MHD_DaemonInfo *di =
            s->d ? MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
        put(b,
            "# HELP airlock_http_connections Open HTTP connections.\n"
            "# TYPE airlock_http_connections gauge\n"
            "airlock_http_connections %u\n"
            "# HELP airlock_http_connections_max The cap (--max-connections).\n"
            "# TYPE airlock_http_connections_max gauge\n"
            "airlock_http_connections_max %u\n",
            di ? di->num_connections : 0, s->opt.max_connections);
        put(b,
            "# HELP airlock_instance_info This instance's name.\n"
            "# TYPE airlock_instance_info gauge\n"
            "airlock_instance_info{instance=\"%s\",version=\"%s\"} 1\n",
            s->opt.instance, AIRLOCK_VERSION);
        (void)mcp_trace_metrics(b);
}
