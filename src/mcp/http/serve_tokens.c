/* airlock serve's bearer tokens and their tenants: the check of a token
 * (constant time), the tenants' own quotas and workspace caps, and the
 * reload of the tokens file on SIGHUP. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"
#include "quota.h"
#include "tenant_workspace.h"

static bool is_tenant_token(const tenant_table *t, const char *tok, size_t len);

/* Compares a and b in time that depends on their lengths only, never on
 * where they differ. */
static bool same_secret(const char *a, size_t alen, const char *b, size_t blen)
{
        unsigned char diff = alen != blen;
        for (size_t i = 0; i < alen; i++)
                diff |= (unsigned char)a[i] ^ (unsigned char)(i < blen ? b[i] : 0);
        return diff == 0;
}

/* Checks a presented token against every configured one, each compared in
 * constant time and all of them always compared, so that the time tells
 * neither which token nor how much of one matched; a token is in the file
 * once (tenants_load). With a match, copies its tenant's name to owner (the
 * owner of the request's calls, sessions, runs' files and quotas: a tenant,
 * never the token or its line, so that a reload that drops, moves or adds
 * lines hands no tenant another's). Returns whether one matched. */
bool http_check_token(http_server *s, const char *tok, size_t len, char *owner, size_t size)
{
        size_t found = 0;
        pthread_rwlock_rdlock(&s->tokens_lock);
        for (size_t i = 0; i < s->tt.n_tokens; i++) {
                bool eq = same_secret(tok, len, s->tt.tokens[i].token, s->tt.tokens[i].len);
                found |= ((size_t)0 - (size_t)eq) & (i + 1);
        }
        if (found)
                snprintf(owner, size, "%s", s->tt.tenants[s->tt.tokens[found - 1].tenant].name);
        pthread_rwlock_unlock(&s->tokens_lock);
        return found != 0;
}

/* Whether owner (a tenant name, or NULL without tokens) is still a tenant
 * of the tokens file: a call queued when its tenant is removed is refused. */
bool http_tenant_exists(http_server *s, const char *owner)
{
        if (!owner || !s->opt.tokens_file)
                return true;
        pthread_rwlock_rdlock(&s->tokens_lock);
        bool found = tenants_find(&s->tt, owner) != NULL;
        pthread_rwlock_unlock(&s->tokens_lock);
        return found;
}

static unsigned clamp_u(uint64_t v, unsigned cap)
{
        return v < cap ? (unsigned)v : cap;
}

/* Hands the tenants' own limits of t to the quota table and the
 * workspaces: each quota clamped to its server-wide cap, as the
 * --max-...-per-token options are. Returns 0 or -ENOMEM. */
int http_apply_overrides(http_server *s, const tenant_table *t)
{
        size_t n = t->n_tenants;
        const char **names = calloc(n + 1, sizeof(*names));
        unsigned(*q)[QUOTA_KINDS] = calloc(n + 1, sizeof(*q));
        uint64_t(*w)[2] = calloc(n + 1, sizeof(*w));
        int r = names && q && w ? 0 : -ENOMEM;
        for (size_t i = 0; r == 0 && i < n; i++) {
                const tenant_def *td = &t->tenants[i];
                names[i] = td->name;
                q[i][QUOTA_SESSIONS] =
                    td->set[TENANT_MAX_SESSIONS]
                        ? clamp_u(td->value[TENANT_MAX_SESSIONS], s->max_sessions)
                        : QUOTA_UNSET;
                q[i][QUOTA_RUNS] = td->set[TENANT_MAX_RUNS]
                                       ? clamp_u(td->value[TENANT_MAX_RUNS], s->opt.max_runs)
                                       : QUOTA_UNSET;
                q[i][QUOTA_QUEUED] = td->set[TENANT_MAX_QUEUE]
                                         ? clamp_u(td->value[TENANT_MAX_QUEUE], s->opt.max_queue)
                                         : QUOTA_UNSET;
                w[i][0] = td->set[TENANT_MAX_FILES] ? td->value[TENANT_MAX_FILES] : WS_UNSET;
                w[i][1] = td->set[TENANT_MAX_BYTES] ? td->value[TENANT_MAX_BYTES] : WS_UNSET;
        }
        if (r == 0)
                r = quota_set_overrides(s->quotas, names, (const unsigned(*)[QUOTA_KINDS])q, n);
        if (r == 0 && s->workspaces)
                r = mcp_workspaces_set_overrides(s->workspaces, names, (const uint64_t(*)[2])w, n);
        free(names);
        free(q);
        free(w);
        return r;
}

/* SIGHUP: the tokens file again. A file that does not load keeps the old
 * table; what happened is written into said (n bytes), a clause of the
 * reload's one line on stderr. Tenants the new file no longer names are
 * removed: their calls in progress are cancelled, their queued calls
 * refused, their sessions closed and their runs' files dropped; their
 * workspace folders stay on disk (the operator's data). */
void http_reload_tokens(http_server *s, char *said, size_t n_said)
{
        if (!s->opt.tokens_file)
                return;
        tenant_table t;
        airlock_error err = {0};
        int n = tenants_load(s->opt.tokens_file, &t, &err);
        if (n < 0) {
                snprintf(said, n_said, "keeping the old tokens: %s", err.message);
                return;
        }
        pthread_rwlock_rdlock(&s->tokens_lock);
        bool op = s->metrics_token && is_tenant_token(&t, s->metrics_token, s->metrics_token_len);
        pthread_rwlock_unlock(&s->tokens_lock);
        if (op) {
                snprintf(said, n_said,
                         "keeping the old tokens: --tokens %s gives a tenant the token of "
                         "--metrics-token, the operator's",
                         s->opt.tokens_file);
                tenants_free(&t);
                return;
        }
        if (http_apply_overrides(s, &t) < 0) {
                snprintf(said, n_said, "keeping the old tokens: out of memory");
                tenants_free(&t);
                return;
        }
        pthread_rwlock_wrlock(&s->tokens_lock);
        tenant_table old = s->tt;
        s->tt = t;
        pthread_rwlock_unlock(&s->tokens_lock);
        unsigned removed = 0;
        for (size_t i = 0; i < old.n_tenants; i++) {
                if (tenants_find(&t, old.tenants[i].name))
                        continue;
                removed++;
                if (atomic_load(&s->core_ready))
                        mcp_core_forget_owner(s->core, old.tenants[i].name);
        }
        tenants_free(&old);
        /* Calls queued for a removed tenant wake up and are refused. */
        pthread_mutex_lock(&s->slot_lock);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
        snprintf(said, n_said, "%d token%s of %zu tenant%s loaded from %s (%u tenant%s removed)", n,
                 n == 1 ? "" : "s", t.n_tenants, t.n_tenants == 1 ? "" : "s", s->opt.tokens_file,
                 removed, removed == 1 ? "" : "s");
}

/* Whether tok is one of the tenants' tokens of t (constant time, all of
 * them compared). */
static bool is_tenant_token(const tenant_table *t, const char *tok, size_t len)
{
        bool any = false;
        for (size_t i = 0; i < t->n_tokens; i++)
                any |= same_secret(tok, len, t->tokens[i].token, t->tokens[i].len);
        return any;
}

/* The operator's token for /metrics: the first line of the file, blanks
 * around it dropped. /metrics tells every tenant's load, so it is not read
 * with a tenant's token; and the operator's token must be no tenant's, or
 * that tenant would read it. */
int http_load_metrics_token(http_server *s, airlock_error *err)
{
        const char *path = s->opt.metrics_token_file;
        if (!path)
                return 0;
        FILE *f = fopen(path, "re");
        if (!f) {
                int e = errno;
                (void)al_error(err, -EINVAL, NULL, "--metrics-token %s: %s", path, strerror(e));
                return -e;
        }
        char line[TENANT_TOKEN_MAX + 4];
        bool got = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        size_t n = got ? strlen(line) : 0;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                     line[n - 1] == '\t'))
                n--;
        size_t start = 0;
        while (start < n && (line[start] == ' ' || line[start] == '\t'))
                start++;
        int r = 0;
        if (n == start) {
                (void)al_error(err, -EINVAL, NULL, "--metrics-token %s: no token on its first line",
                               path);
                r = -EINVAL;
        } else if (n - start > TENANT_TOKEN_MAX || memchr(line + start, ' ', n - start) ||
                   memchr(line + start, '\t', n - start)) {
                (void)al_error(err, -EINVAL, NULL,
                               "--metrics-token %s: the token must be one word of at most %d bytes",
                               path, TENANT_TOKEN_MAX);
                r = -EINVAL;
        } else if (n - start < TENANT_TOKEN_MIN || strncmp(line + start, TENANT_TOKEN_PLACEHOLDER,
                                                           strlen(TENANT_TOKEN_PLACEHOLDER)) == 0) {
                /* As for the tokens file: short or an example's. */
                (void)al_error(err, -EINVAL, NULL,
                               "--metrics-token %s: the token is %s (at least %d bytes of your "
                               "own; e.g. openssl rand -hex 24)",
                               path, n - start < TENANT_TOKEN_MIN ? "too short" : "a placeholder",
                               TENANT_TOKEN_MIN);
                r = -EINVAL;
        }
        char *tok = r == 0 ? strndup(line + start, n - start) : NULL;
        if (r == 0 && !tok)
                r = -ENOMEM;
        explicit_bzero(line, sizeof(line));
        if (r < 0) {
                if (r == -ENOMEM)
                        (void)al_error(err, -EINVAL, NULL, "out of memory");
                return r;
        }
        pthread_rwlock_wrlock(&s->tokens_lock);
        if (is_tenant_token(&s->tt, tok, n - start)) {
                pthread_rwlock_unlock(&s->tokens_lock);
                explicit_bzero(tok, n - start);
                free(tok);
                (void)al_error(
                    err, -EINVAL, NULL,
                    "--metrics-token %s: this token is also a tenant's in --tokens %s: give "
                    "the operator a token of its own",
                    path, s->opt.tokens_file);
                return -EINVAL;
        }
        char *old = s->metrics_token;
        size_t old_len = s->metrics_token_len;
        s->metrics_token = tok;
        s->metrics_token_len = n - start;
        pthread_rwlock_unlock(&s->tokens_lock);
        if (old) {
                explicit_bzero(old, old_len);
                free(old);
        }
        return 0;
}

int http_metrics_access(http_server *s, struct MHD_Connection *c)
{
        if (!s->opt.metrics_token_file && !s->opt.tokens_file)
                return 1; /* one tenant, who is the operator */
        const char *tok;
        size_t n;
        int r = http_bearer(c, &tok, &n);
        if (r <= 0)
                return r;
        pthread_rwlock_rdlock(&s->tokens_lock);
        bool op = s->metrics_token && same_secret(tok, n, s->metrics_token, s->metrics_token_len);
        bool tenant = is_tenant_token(&s->tt, tok, n);
        pthread_rwlock_unlock(&s->tokens_lock);
        return op ? 1 : tenant ? -2 : -1;
}
