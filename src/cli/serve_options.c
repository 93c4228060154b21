/* The options of `airlock serve` beside the configuration options it shares
 * with `airlock mcp` (see serve.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base.h"
#include "serve.h"

void serve_options_default(serve_options *o)
{
        *o = (serve_options){
            .listen = "127.0.0.1:8080",
            .max_body = 4u << 20,
            .max_body_total = 64u << 20,
            .max_runs = 4,
            .max_queue = 16,
            .queue_wait_s = 30,
            .max_connections = 256,
            .http_timeout_s = 30,
            .grace_s = 30,
        };
        /* A random short name, so that two instances started without
         * --instance never share one. */
        unsigned char rnd[4];
        static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                memset(rnd, 0, sizeof(rnd));
        size_t n = 0;
        o->instance[n++] = 'i';
        for (size_t i = 0; i < sizeof(rnd); i++) {
                o->instance[n++] = digits[rnd[i] % 36];
                o->instance[n++] = digits[(rnd[i] / 36) % 36];
        }
        o->instance[n] = '\0';
}

void serve_usage(FILE *f)
{
        fputs("airlock serve [OPTIONS]: execute_code over MCP Streamable HTTP at /mcp\n"
              "  (and every configuration option of airlock mcp, sessions included)\n"
              "      --listen ADDR:PORT         address to listen on (127.0.0.1:8080;\n"
              "                                 [::1]:PORT for IPv6)\n"
              "      --tokens FILE              bearer tokens, one per line; reloaded on SIGHUP\n"
              "                                 (airlock serve reloads on SIGHUP; airlock mcp\n"
              "                                 stops on it)\n"
              "  SIGHUP also re-reads the configuration options (tools files, allow-list,\n"
              "  limits, --secret file:PATH; an env:VAR secret cannot change in a running\n"
              "  process) for the calls that start afterwards; one that does not load keeps\n"
              "  the old. Calls in flight and open sessions keep theirs; the options above,\n"
              "  the session options and --audit are not reloaded.\n"
              "      --authorization-server URL named in the protected-resource metadata\n"
              "      --resource-url URL         this server's public URL of /mcp\n"
              "      --allow-origin ORIGIN      a browser Origin allowed (repeatable; others\n"
              "                                 are refused, 403)\n"
              "      --insecure-no-auth         serve a non-loopback address without --tokens\n"
              "      --instance ID              [a-z0-9-]{1,32}, named in session handles\n"
              "                                 (default: random)\n"
              "      --max-body BYTES           largest request body (4194304)\n"
              "      --max-body-total BYTES     request bodies held at once (67108864)\n"
              "      --max-runs N               tools/call running at once (4)\n"
              "      --max-queue N              tools/call waiting for a run (16)\n"
              "      --max-sessions-per-token N sessions one token may hold (half of\n"
              "                                 --max-sessions with --tokens, else all)\n"
              "      --max-runs-per-token N     tools/call of one token running at once\n"
              "                                 (half of --max-runs with --tokens, else all)\n"
              "      --max-queue-per-token N    tools/call of one token waiting for a run\n"
              "                                 (half of --max-queue with --tokens, else all)\n"
              "      --queue-wait SEC           longest wait for a run (30)\n"
              "      --max-connections N        open connections (256)\n"
              "      --http-timeout SEC         idle connection closed after (30)\n"
              "      --grace SEC                on SIGTERM, calls may finish this long (30)\n",
              f);
}

/* A quota not given: half the cap with tokens (several clients), rounded
 * up; the whole cap without (one client). Never above the cap. */
static unsigned quota_default(bool set, unsigned given, unsigned cap, bool tokens)
{
        unsigned q = set ? given : tokens ? (cap + 1) / 2 : cap;
        return q < cap ? q : cap;
}

void serve_quota_defaults(serve_options *o, unsigned max_sessions)
{
        bool tokens = o->tokens_file != NULL;
        o->max_sessions_per_token = quota_default(o->sessions_per_token_set,
                                                  o->max_sessions_per_token, max_sessions, tokens);
        o->max_runs_per_token =
            quota_default(o->runs_per_token_set, o->max_runs_per_token, o->max_runs, tokens);
        o->max_queue_per_token =
            quota_default(o->queue_per_token_set, o->max_queue_per_token, o->max_queue, tokens);
}

static int number(const char *opt, const char *text, double lo, double hi, bool whole, double *ret,
                  char *why, size_t why_len)
{
        char *end = NULL;
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno || v < lo || v > hi || (whole && v != (double)(uint64_t)v)) {
                snprintf(why, why_len, "%s: '%s' is not a %snumber from %g to %g", opt, text,
                         whole ? "whole " : "", lo, hi);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

int serve_take_options(int *argc, char **argv, serve_options *o, char *why, size_t why_len)
{
        static const char *const names[] = {
            "--listen",
            "--tokens",
            "--authorization-server",
            "--resource-url",
            "--allow-origin",
            "--insecure-no-auth",
            "--instance",
            "--max-body",
            "--max-runs",
            "--max-queue",
            "--queue-wait",
            "--max-connections",
            "--http-timeout",
            "--grace",
            "--max-body-total",
            "--max-sessions-per-token",
            "--max-runs-per-token",
            "--max-queue-per-token",
        };
        int out = 1;
        for (int i = 1; i < *argc; i++) {
                const char *a = argv[i];
                int k = -1;
                const char *val = NULL;
                for (int j = 0; j < (int)ARRAY_SIZE(names); j++) {
                        size_t n = strlen(names[j]);
                        if (strncmp(a, names[j], n) == 0 && (a[n] == '\0' || a[n] == '=')) {
                                k = j;
                                val = a[n] == '=' ? a + n + 1 : NULL;
                        }
                }
                if (k < 0) {
                        argv[out++] = argv[i];
                        continue;
                }
                if (k == 5) { /* --insecure-no-auth takes no value */
                        if (val) {
                                snprintf(why, why_len, "--insecure-no-auth takes no value");
                                return -EINVAL;
                        }
                        o->insecure_no_auth = true;
                        continue;
                }
                if (!val) {
                        if (i + 1 >= *argc) {
                                snprintf(why, why_len, "%s needs a value", names[k]);
                                return -EINVAL;
                        }
                        val = argv[++i];
                }
                double v = 0;
                int r = 0;
                switch (k) {
                case 0:
                        o->listen = val;
                        break;
                case 1:
                        o->tokens_file = val;
                        break;
                case 2:
                        o->auth_server = val;
                        break;
                case 3:
                        o->resource_url = val;
                        break;
                case 4:
                        if (o->n_origins >= ARRAY_SIZE(o->origins)) {
                                snprintf(why, why_len, "more than %zu --allow-origin",
                                         ARRAY_SIZE(o->origins));
                                return -EINVAL;
                        }
                        o->origins[o->n_origins++] = val;
                        break;
                case 6:
                        if (!mcp_instance_valid(val, strlen(val))) {
                                snprintf(why, why_len,
                                         "--instance: '%.64s' is not 1 to %d of a-z, 0-9 and '-'",
                                         val, MCP_INSTANCE_MAX);
                                return -EINVAL;
                        }
                        snprintf(o->instance, sizeof(o->instance), "%s", val);
                        break;
                case 7:
                        r = number(names[k], val, 1024, 1 << 30, true, &v, why, why_len);
                        o->max_body = (uint64_t)v;
                        break;
                case 8:
                        r = number(names[k], val, 1, 32, true, &v, why, why_len);
                        o->max_runs = (unsigned)v;
                        break;
                case 9:
                        r = number(names[k], val, 0, 4096, true, &v, why, why_len);
                        o->max_queue = (unsigned)v;
                        break;
                case 10:
                        r = number(names[k], val, 0, 3600, false, &v, why, why_len);
                        o->queue_wait_s = v;
                        break;
                case 11:
                        r = number(names[k], val, 1, 65536, true, &v, why, why_len);
                        o->max_connections = (unsigned)v;
                        break;
                case 12:
                        r = number(names[k], val, 1, 3600, true, &v, why, why_len);
                        o->http_timeout_s = (unsigned)v;
                        break;
                case 13:
                        r = number(names[k], val, 0, 86400, false, &v, why, why_len);
                        o->grace_s = v;
                        break;
                case 14:
                        r = number(names[k], val, 65536, 16.0 * (1u << 30), true, &v, why, why_len);
                        o->max_body_total = (uint64_t)v;
                        break;
                case 15:
                        r = number(names[k], val, 0, 1024, true, &v, why, why_len);
                        o->max_sessions_per_token = (unsigned)v;
                        o->sessions_per_token_set = true;
                        break;
                case 16:
                        r = number(names[k], val, 1, 32, true, &v, why, why_len);
                        o->max_runs_per_token = (unsigned)v;
                        o->runs_per_token_set = true;
                        break;
                default:
                        r = number(names[k], val, 0, 4096, true, &v, why, why_len);
                        o->max_queue_per_token = (unsigned)v;
                        o->queue_per_token_set = true;
                        break;
                }
                if (r < 0)
                        return r;
        }
        argv[out] = NULL;
        *argc = out;
        return 0;
}
