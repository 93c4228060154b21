/* Sessions of `airlock mcp`: handles that a tool returns and the client
 * passes back as execute_code's "session" argument, since protocol revision
 * 2026-07-28 has no protocol sessions. The table of this server process's
 * sessions, their caps (number, idle time, lifetime, memory held between
 * cells) and the session tools' entries and calls. */
#ifndef AIRLOCK_CLI_MCP_SESSION_H
#define AIRLOCK_CLI_MCP_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"

typedef struct mcp_session_caps {
        unsigned max_sessions; /* open at once (default 8) */
        double idle_s;         /* a session unused this long is closed (default 1800) */
        double lifetime_s;     /* a session this old is closed (default 28800) */
        uint64_t max_memory;   /* held between cells (default 2 GiB) */
} mcp_session_caps;

typedef struct mcp_sessions mcp_sessions;

int mcp_sessions_new(airlock_cache *cache, const airlock_config *cfg, const mcp_session_caps *caps,
                     mcp_sessions **ret);
/* A server whose configuration can change (airlock serve on SIGHUP) or
 * depends on who calls (a tenant's workspace): session_open takes the
 * configuration for owner from get, which returns it with a reference in
 * *ref (or NULL with err filled), and gives the reference back with put
 * once the session is open. Without it, session_open uses the cfg given
 * to new. */
void mcp_sessions_set_config_source(mcp_sessions *m,
                                    const airlock_config *(*get)(void *arg, const char *owner,
                                                                 void **ref, airlock_error *err),
                                    void (*put)(void *arg, void *ref), void *arg);
/* Closes every session of owner (a tenant removed from the tokens file):
 * its handles then answer, to that owner, that they were closed for why;
 * a session running a cell closes when the cell ends. */
void mcp_sessions_close_owner(mcp_sessions *m, const char *owner, const char *why);
/* Closes every session (waiting for cells in progress, which the caller
 * has cancelled), then frees the table. Before the cache is closed. */
void mcp_sessions_free(mcp_sessions *m);

/* The description of session_open, which names the caps. */
json_t *mcp_sessions_open_description(const mcp_sessions *m);
/* The longest owner (mcp_sink.owner) a session or a stored run records. */
#ifndef MCP_OWNER_MAX
#define MCP_OWNER_MAX 64
#endif
/* The session tools (their rows in tools.c): the CallToolResult, once
 * args are checked against the tool's schema. owner (NULL on stdio) is who
 * calls: a session is found only by the owner that opened it. */
json_t *mcp_sessions_open(mcp_sessions *m, const json_t *args, const char *owner);
json_t *mcp_sessions_fork(mcp_sessions *m, const json_t *args, const char *owner);
json_t *mcp_sessions_close(mcp_sessions *m, const json_t *args, const char *owner);

/* execute_code with a session: begin resolves the handle and marks the
 * session busy (NULL and *ret set), or returns the tool error to answer
 * with. run runs the cell; end adds what became of the state to result
 * (the CallToolResult built from res, which may be NULL when the run
 * failed), measures the memory the session holds and closes it, saying so
 * in result, when that is over --session-memory, and releases the session. */
typedef struct mcp_session_use mcp_session_use;

json_t *mcp_sessions_begin(mcp_sessions *m, const json_t *handle, const char *owner,
                           mcp_session_use **ret);
int mcp_sessions_run(mcp_session_use *u, const char *code, size_t len,
                     const airlock_run_options *opts, airlock_result **ret, airlock_error *err);
json_t *mcp_sessions_end(mcp_session_use *u, json_t *result, const airlock_result *res);
/* The call using the session was cancelled: a next call of the session
 * waits for its cell to end (roll back) instead of being refused as busy.
 * The caller makes sure u is not ended meanwhile. */
void mcp_sessions_cancelled(mcp_session_use *u);

/* `airlock serve`: the instance's name, [a-z0-9-]{1,MCP_INSTANCE_MAX}, that
 * new handles carry (sess_<instance>_<random>); a handle naming another
 * instance is a tool error that names both. */
#define MCP_INSTANCE_MAX 32
static inline bool mcp_instance_valid(const char *id, size_t n)
{
        if (n < 1 || n > MCP_INSTANCE_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') ||
                      id[i] == '-'))
                        return false;
        return true;
}
void mcp_sessions_set_instance(mcp_sessions *m, const char *instance);
/* Copies the instance a handle names (sess_<instance>_<random>) to out;
 * false when it names none (the stdio form, or not a handle at all). The
 * instance is the host that holds the session: airlock serve forwards a
 * call naming another instance's handle to that peer (http/serve_peer.c). */
bool mcp_session_handle_instance(const char *handle, char out[MCP_INSTANCE_MAX + 1]);
/* Sessions open now. */
unsigned mcp_sessions_count(mcp_sessions *m);
/* `airlock serve`: each owner's sessions also count against its quota
 * (QUOTA_SESSIONS of quotas, which outlives m), below --max-sessions; a
 * refusal then names only the caller's own sessions and limit. */
struct quota_table;
void mcp_sessions_set_quotas(mcp_sessions *m, struct quota_table *quotas);

#endif
