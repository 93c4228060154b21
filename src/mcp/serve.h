/* airlock serve: the MCP server over Streamable HTTP (serve*.c) and its
 * options and caps (set by the option table, options.c). */
#ifndef AIRLOCK_CLI_SERVE_H
#define AIRLOCK_CLI_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp_session.h"

typedef struct serve_options {
        const char *listen;      /* ADDR:PORT, [V6ADDR]:PORT (default 127.0.0.1:8080) */
        const char *tokens_file; /* --tokens FILE, or NULL */
        /* --metrics-token FILE: the operator's token, the one /metrics
         * takes, or NULL. */
        const char *metrics_token_file;
        const char *auth_server;  /* --authorization-server URL, or NULL */
        const char *resource_url; /* --resource-url URL (this server's public /mcp URL) */
        const char *origins[16];  /* --allow-origin, repeatable */
        unsigned n_origins;
        bool insecure_no_auth; /* --insecure-no-auth: serve a non-loopback address without tokens */
        /* --shared-servers: with --tokens and --servers but no
         * --tenants-dir, the tenants may share the upstream servers. */
        bool shared_servers;
        char instance[MCP_INSTANCE_MAX + 1];
        uint64_t max_body;        /* --max-body BYTES (413 past it) */
        uint64_t max_body_total;  /* --max-body-total BYTES: all bodies held at once (503) */
        unsigned max_runs;        /* --max-runs N: tools/call running at once */
        unsigned max_queue;       /* --max-queue N: tools/call waiting for a run slot */
        double queue_wait_s;      /* --queue-wait SEC: longest wait for a slot (then 503) */
        unsigned max_connections; /* --max-connections N */
        unsigned http_timeout_s;  /* --http-timeout SEC: idle connection closed */
        double grace_s;           /* --grace SEC: SIGTERM lets calls finish this long */
        /* Each token's own quotas below the caps above (quota.h); 0 until
         * serve_quota_defaults fills what was not given. */
        unsigned max_sessions_per_token; /* --max-sessions-per-token N */
        unsigned max_runs_per_token;     /* --max-runs-per-token N */
        unsigned max_queue_per_token;    /* --max-queue-per-token N */
        bool sessions_per_token_set, runs_per_token_set, queue_per_token_set;
        /* Peers (http/serve_peer.c): --peer-listen ADDR:PORT, the internal
         * listener for calls other instances forward (or NULL), --peers
         * FILE (INSTANCE ADDR:PORT lines, or NULL), --peer-dns DOMAIN
         * (INSTANCE.DOMAIN at --peer-listen's port, or NULL), and
         * --peer-timeout SEC, the longest wait for a forwarded answer. */
        const char *peer_listen;
        const char *peers_file;
        const char *peer_dns;
        double peer_timeout_s;
} serve_options;

/* --peer-dns's domain: letters, digits, '-' and '.', not starting with '.'. */
#define SERVE_PEER_DOMAIN_MAX 200
static inline bool serve_peer_domain_valid(const char *d)
{
        size_t n = 0;
        for (; d[n]; n++)
                if (!((d[n] >= 'a' && d[n] <= 'z') || (d[n] >= 'A' && d[n] <= 'Z') ||
                      (d[n] >= '0' && d[n] <= '9') || d[n] == '-' || d[n] == '.'))
                        return false;
        return n > 0 && n <= SERVE_PEER_DOMAIN_MAX && d[0] != '.';
}

/* Fills the per-token quotas not given: with --tokens half the server-wide
 * cap (rounded up), without (one client) the whole cap; a quota above its
 * cap is the cap. */
void serve_quota_defaults(serve_options *o, unsigned max_sessions);

#endif
