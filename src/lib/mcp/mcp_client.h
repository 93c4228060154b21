/* What the MCP client's files share (mcp_client.c, the protocol and the
 * object; mcp_client_stdio.c and mcp_client_http.c, its transports): the
 * state of one upstream server, and the functions each file lends the
 * others. Private to src/lib/mcp. */
#ifndef AIRLOCK_MCP_CLIENT_H
#define AIRLOCK_MCP_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mcp/mcp.h"

struct mcp_upstream {
        pthread_mutex_t lock;
        char *name;
        char *exe;   /* the command, resolved */
        char **argv; /* NULL-terminated */
        char **envp; /* NULL-terminated; entries may hold secrets: wiped when freed */
        char *cwd;
        pid_t pid; /* 0 when not running */
        int in_fd, out_fd, err_fd;
        char *buf; /* stdout read and not yet consumed */
        size_t len, cap;
        char ring[MCP_STDERR_RING]; /* the last bytes of stderr */
        size_t ring_at;
        bool ring_full;
        json_int_t next_id;
        unsigned failures; /* in a row */
        uint64_t retry_at; /* no restart before this (CLOCK_MONOTONIC) */
        char proto[32];    /* the protocol revision agreed */
        bool initialized;
        /* A server at a "url" (Streamable HTTP): no process; each message
         * is a POST through the gateway, with its allow-list of the one
         * URL (so its address rules apply). */
        char *url;
        json_t *headers;      /* the server's "headers", secrets put in: wiped when freed */
        net_allowlist *allow; /* the URL alone, POST and DELETE */
        char *session;        /* Mcp-Session-Id, once the server gave one */
        /* Calls of a stdio server in flight at once (upstream_stdio_call): each
         * waits for its reply under lock; one of them at a time reads the
         * server's output (reading) and hands the others their replies
         * (cv). gen counts the processes: a waiter whose process is gone
         * gets fail_code and fail_msg. */
        pthread_cond_t cv;
        struct pending *waiting;
        bool reading;
        bool starting;
        unsigned gen;
        int fail_code;
        char fail_msg[AIRLOCK_MESSAGE_MAX];
        /* The server said notifications/tools/list_changed since its tool
         * list was taken (the stubs were made): read without the lock. */
        _Atomic bool list_changed;
        /* A line past the cap of every call waiting (a result over
         * maxResultBytes), being read and dropped (read_some): only the
         * reader touches it. */
        struct line_skip {
                bool on;
                size_t len; /* its bytes so far */
                /* Its top-level "id", found by a scan that keeps no byte:
                 * depth, string and escape state, the key being read. */
                int depth;
                bool in_str, esc, expect_key, is_key, key_is_id, in_id, neg;
                char key[4];
                unsigned key_len, digits;
                json_int_t id;
                bool has_id;
        } skip;
        /* While the tool list is read (mcp_upstream_start, before any
         * call): what parsing its pages may still cost (upstream_list_charge). */
        bool listing;
        uint64_t list_cost_left;
        uint64_t list_values; /* the JSON values of the pages so far */
};

/* A call waiting for its reply. */
typedef struct pending {
        json_int_t id;
        json_t *reply;  /* set by the reader */
        size_t dropped; /* or this: the size of its reply, read and dropped as too large */
        uint64_t dropped_cost, dropped_values; /* its reply dropped unparsed as too costly */
        size_t max_line;                       /* the longest reply this call takes */
        uint64_t max_cost; /* the most its reply's parse may hold, 0 for no cap */
        struct pending *next;
} pending;

/* ---- the protocol (mcp_client.c) ---- */

/* The time left until deadline (CLOCK_MONOTONIC), in ms for poll (at
 * least 0). */
int upstream_ms_left(uint64_t deadline);
/* Whether the run b bounds was cancelled (its cancel_fd is readable). */
bool upstream_cancelled(const mcp_bounds *b);
/* Writes msg to the server by its transport, within deadline. */
int upstream_send(mcp_upstream *u, json_t *msg, uint64_t deadline, airlock_error *err);
/* A notification from the server: notifications/tools/list_changed is
 * noted, the rest dropped. */
void upstream_notified(mcp_upstream *u, const json_t *msg);
/* Answers a request the server makes of the client (ping; the rest is
 * method not found). */
void upstream_answer_request(mcp_upstream *u, json_t *msg, uint64_t deadline);
/* notifications/cancelled for request id, after r (-ETIMEDOUT or
 * -ECANCELED); NULL when out of memory. */
json_t *upstream_cancel_notice(json_int_t id, int r);
/* Charges what parsing n bytes of a tools/list page would cost against the
 * list's cap, before it is parsed; 0 when no list is being read. */
int upstream_list_charge(mcp_upstream *u, const char *d, size_t n, airlock_error *err);
/* What parsing n bytes of JSON would hold (its values, counted by a pass
 * that builds nothing, times JSONRPC_VALUE_COST, plus the bytes);
 * *ret_values (when not NULL) the values. */
uint64_t upstream_parse_cost(const char *d, size_t n, uint64_t *ret_values);
/* -EMSGSIZE naming the run's host budget for a result of n bytes whose
 * parse would hold cost (values values), more than max_cost. */
int upstream_cost_error(const mcp_upstream *u, size_t n, uint64_t cost, uint64_t values,
                        uint64_t max_cost, airlock_error *err);
/* Charges what parsing the n bytes of a reply to a tools/call would hold
 * against b->max_cost, before it is parsed: a result of "[0,0,0,..."
 * parses into some fifty times its size, so that maxResultBytes alone does
 * not bound the host's memory. -EMSGSIZE (upstream_cost_error) past it;
 * 0 when within it or b sets no cap. */
int upstream_reply_charge(const mcp_upstream *u, const mcp_bounds *b, const char *d, size_t n,
                          airlock_error *err);
/* The result of a reply, or its error as -EREMOTEIO. */
int upstream_reply_result(mcp_upstream *u, json_t *reply, json_t **ret, airlock_error *err);
/* Starts the session unless it is started, or waits for the caller that
 * starts it. Called and returns with u->lock held. */
int upstream_ensure_session(mcp_upstream *u, uint64_t deadline, const mcp_bounds *b,
                            airlock_error *err);
/* Records a failure: the process is killed (the session forgotten), and
 * the next start waits a backoff. */
void upstream_fail(mcp_upstream *u);
/* v with each "${secret:NAME}" replaced by the secret's value (malloc'd;
 * wipe it), for the server named server (at url, or NULL); key names the
 * field for the message. */
int upstream_expand(const char *server, const char *url, const char *key, const char *v,
                    const secret_store *secrets, char **ret, airlock_error *err);

/* ---- stdio (mcp_client_stdio.c) ---- */

/* Fills u for a server started on the host: its command, arguments and
 * environment. */
int upstream_stdio_new(mcp_upstream *u, const mcp_spec *spec, const secret_store *secrets,
                       airlock_error *err);
/* Starts the server's process, isolated (spawn_isolated's contract). */
int upstream_spawn(mcp_upstream *u, airlock_error *err);
/* Kills the server's process group at once and reaps it (*ret_status its
 * status, when not NULL); the session is forgotten. */
void upstream_kill(mcp_upstream *u, int *ret_status);
/* The error for a server that is gone (-EPIPE): how it ended and the end
 * of its stderr; what says when. */
int upstream_gone(mcp_upstream *u, const char *what, airlock_error *err);
/* Writes msg and a newline to the server's input, within deadline. */
int upstream_stdio_send(mcp_upstream *u, json_t *msg, uint64_t deadline, airlock_error *err);
/* Reads until the reply to request id (the session's start, the tool
 * list: one caller at a time). */
int upstream_stdio_read_reply(mcp_upstream *u, json_int_t id, uint64_t deadline,
                              const mcp_bounds *b, size_t max_line, json_t **ret,
                              airlock_error *err);
/* tools/call with other calls in flight. Called and returns with the lock
 * held. */
int upstream_stdio_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                        size_t max_line, json_t **ret, airlock_error *err);

/* ---- Streamable HTTP (mcp_client_http.c) ---- */

/* Fills u for a server at a "url": its headers, its allow-list. */
int upstream_http_new(mcp_upstream *u, const mcp_spec *spec, const secret_store *secrets,
                      airlock_error *err);
/* One message in u's own session (the session's start): a notification
 * (id 0) or a request and its reply. */
int upstream_http_message(mcp_upstream *u, json_t *msg, json_int_t id, uint64_t deadline,
                          const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err);
/* tools/call with other calls in flight. Called and returns with the lock
 * held. */
int upstream_http_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                       size_t max_line, json_t **ret, airlock_error *err);
/* Ends u's session with a DELETE, when it has one. */
void upstream_http_end(mcp_upstream *u);

#endif
