/* The tokens file and its tenants (see tenants.h). */
#include "tenants.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sha256.h"

/* A line holds a token, a tenant and a few KEY=VALUE fields. */
#define LINE_MAX_BYTES (TENANT_TOKEN_MAX + 1024)

static const struct {
        const char *name;
        uint64_t lo, hi;
} keys[TENANT_KEYS] = {
    [TENANT_MAX_SESSIONS] = {"max-sessions", 0, 1024},
    [TENANT_MAX_RUNS] = {"max-runs", 1, 32},
    [TENANT_MAX_QUEUE] = {"max-queue", 0, 4096},
    [TENANT_MAX_FILES] = {"max-files", 0, 1000000},
    [TENANT_MAX_BYTES] = {"max-bytes", 0, 1ull << 40},
};

const char *tenant_key_name(enum tenant_key k)
{
        return k < TENANT_KEYS ? keys[k].name : "?";
}

bool tenant_name_valid(const char *s, size_t n)
{
        if (n < 1 || n > TENANT_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool alnum =
                    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
                        return false;
        }
        return true;
}

void tenant_name_of_token(const char *tok, size_t n, char out[TENANT_NAME_MAX + 1])
{
        static const char domain[] = "airlock tenant"; /* and its NUL */
        char buf[sizeof(domain) + TENANT_TOKEN_MAX];
        uint8_t d[32];
        if (n > TENANT_TOKEN_MAX)
                n = TENANT_TOKEN_MAX; /* the loader refuses longer tokens */
        memcpy(buf, domain, sizeof(domain));
        memcpy(buf + sizeof(domain), tok, n);
        mcp_sha256(buf, sizeof(domain) + n, d);
        explicit_bzero(buf, sizeof(buf));
        out[0] = 't';
        for (int i = 0; i < 8; i++)
                snprintf(out + 1 + 2 * i, 3, "%02x", d[i]);
        explicit_bzero(d, sizeof(d));
}

bool tenant_name_is_derived(const char *name)
{
        if (name[0] != 't' || strlen(name) != 17)
                return false;
        for (int i = 1; i < 17; i++)
                if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
                        return false;
        return true;
}

void tenants_free(tenant_table *t)
{
        if (!t)
                return;
        for (size_t i = 0; i < t->n_tokens; i++) {
                explicit_bzero(t->tokens[i].token, t->tokens[i].len);
                free(t->tokens[i].token);
        }
        free(t->tokens);
        free(t->tenants);
        memset(t, 0, sizeof(*t));
}

const tenant_def *tenants_find(const tenant_table *t, const char *name)
{
        for (size_t i = 0; name && i < t->n_tenants; i++)
                if (strcmp(t->tenants[i].name, name) == 0)
                        return &t->tenants[i];
        return NULL;
}

/* The next blank-separated field of *p, NUL-terminated in place, or NULL. */
static char *field(char **p)
{
        char *s = *p;
        while (*s == ' ' || *s == '\t')
                s++;
        if (!*s)
                return NULL;
        char *e = s;
        while (*e && *e != ' ' && *e != '\t')
                e++;
        if (*e)
                *e++ = '\0';
        *p = e;
        return s;
}

/* One KEY=VALUE of a tenant, checked against its range. */
static int parse_key(tenant_def *td, const char *kv, const char *path, unsigned lineno,
                     airlock_error *err)
{
        const char *eq = strchr(kv, '=');
        size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
        for (int k = 0; k < TENANT_KEYS; k++) {
                if (strlen(keys[k].name) != klen || strncmp(keys[k].name, kv, klen) != 0)
                        continue;
                const char *v = eq ? eq + 1 : "";
                char *end = NULL;
                errno = 0;
                unsigned long long n = strtoull(v, &end, 10);
                if (!eq || !*v || *end || errno || v[0] == '-' || n < keys[k].lo ||
                    n > keys[k].hi) {
                        (void)al_error(err, -EINVAL, NULL,
                                       "--tokens %s:%u: %s needs a whole number from %llu to %llu "
                                       "(got '%.40s')",
                                       path, lineno, keys[k].name, (unsigned long long)keys[k].lo,
                                       (unsigned long long)keys[k].hi, v);
                        return -EINVAL;
                }
                if (td->set[k] && td->value[k] != n) {
                        (void)al_error(
                            err, -EINVAL, NULL,
                            "--tokens %s:%u: tenant %s has %s=%llu on an earlier line and "
                            "%s=%llu here: give it one value",
                            path, lineno, td->name, keys[k].name, (unsigned long long)td->value[k],
                            keys[k].name, n);
                        return -EINVAL;
                }
                td->set[k] = true;
                td->value[k] = n;
                return 0;
        }
        (void)al_error(
            err, -EINVAL, NULL,
            "--tokens %s:%u: unknown setting '%.*s' (a tenant takes max-sessions, max-runs, "
            "max-queue, max-files and max-bytes)",
            path, lineno, (int)(klen > 40 ? 40 : klen), kv);
        return -EINVAL;
}

/* One line's token, tenant and settings into t. */
static int add_line(tenant_table *t, char *line, const char *path, unsigned lineno,
                    airlock_error *err)
{
        char *p = line;
        char *tok = field(&p);
        if (!tok)
                return 0;
        size_t tlen = strlen(tok);
        if (tlen > TENANT_TOKEN_MAX) {
                (void)al_error(err, -EINVAL, NULL, "--tokens %s:%u: a token longer than %d bytes",
                               path, lineno, TENANT_TOKEN_MAX);
                return -E2BIG;
        }
        /* A short token can be guessed, and an example's placeholder is
         * public: either would let anyone in as a tenant. */
        if (strncmp(tok, TENANT_TOKEN_PLACEHOLDER, strlen(TENANT_TOKEN_PLACEHOLDER)) == 0)
                return al_error(err, -EINVAL, NULL,
                                "--tokens %s:%u: '%.40s' is the placeholder of an example "
                                "(deploy/k8s/secret.yaml): make a token of your own, e.g. "
                                "openssl rand -hex 24",
                                path, lineno, tok);
        if (tlen < TENANT_TOKEN_MIN)
                return al_error(err, -EINVAL, NULL,
                                "--tokens %s:%u: a token of %zu bytes is too short to be a secret "
                                "(at least %d; e.g. openssl rand -hex 24)",
                                path, lineno, tlen, TENANT_TOKEN_MIN);
        char *name = field(&p);
        char derived[TENANT_NAME_MAX + 1];
        if (!name) {
                tenant_name_of_token(tok, tlen, derived);
                name = derived;
        } else if (!tenant_name_valid(name, strlen(name))) {
                (void)al_error(err, -EINVAL, NULL,
                               "--tokens %s:%u: '%.80s' is not a tenant name (1 to %d of A-Z, a-z, "
                               "0-9, '.', '_' and '-', starting with a letter or digit)",
                               path, lineno, name, TENANT_NAME_MAX);
                return -EINVAL;
        }
        /* A name given on a line must not be one a token alone could
         * derive: the tenant t2073c6a81939a955 would otherwise share the
         * workspace, sessions and quotas of the token whose digest that
         * is, and neither line would say so. */
        if (name != derived && tenant_name_is_derived(name)) {
                (void)al_error(
                    err, -EINVAL, NULL,
                    "--tokens %s:%u: '%s' has the form of the name of a token given alone "
                    "(t and 16 hex digits, a digest of the token): give the tenant another "
                    "name",
                    path, lineno, name);
                return -EINVAL;
        }
        size_t ti = 0;
        while (ti < t->n_tenants && strcmp(t->tenants[ti].name, name) != 0)
                ti++;
        if (ti == t->n_tenants) {
                tenant_def *td = &t->tenants[t->n_tenants++];
                memset(td, 0, sizeof(*td));
                snprintf(td->name, sizeof(td->name), "%s", name);
        }
        for (char *kv; (kv = field(&p));) {
                int r = parse_key(&t->tenants[ti], kv, path, lineno, err);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < t->n_tokens; i++) {
                if (t->tokens[i].len != tlen || memcmp(t->tokens[i].token, tok, tlen) != 0)
                        continue;
                if (t->tokens[i].tenant == ti)
                        return 0; /* the same token for the same tenant: once */
                (void)al_error(
                    err, -EINVAL, NULL,
                    "--tokens %s:%u: this token is given to tenant %s on an earlier line "
                    "and to %s here: a token names one tenant",
                    path, lineno, t->tenants[t->tokens[i].tenant].name, name);
                return -EINVAL;
        }
        if (t->n_tokens >= TENANT_MAX_LINES) {
                (void)al_error(err, -EINVAL, NULL, "--tokens %s: more than %d tokens", path,
                               TENANT_MAX_LINES);
                return -E2BIG;
        }
        token_def *td = &t->tokens[t->n_tokens];
        if (!(td->token = malloc(tlen + 1)))
                return -ENOMEM;
        memcpy(td->token, tok, tlen + 1);
        td->len = tlen;
        td->tenant = ti;
        t->n_tokens++;
        return 0;
}

int tenants_load(const char *path, tenant_table *ret, airlock_error *err)
{
        memset(ret, 0, sizeof(*ret));
        FILE *f = fopen(path, "re");
        if (!f) {
                int e = errno;
                (void)al_error(err, -EINVAL, NULL, "--tokens %s: %s", path, strerror(e));
                return -e;
        }
        tenant_table t = {0};
        t.tokens = calloc(TENANT_MAX_LINES, sizeof(*t.tokens));
        /* One more tenant than tokens: a line may add its tenant before
         * its token is found to be one too many. */
        t.tenants = calloc(TENANT_MAX_LINES + 1, sizeof(*t.tenants));
        char *line = malloc(LINE_MAX_BYTES + 2);
        int r = t.tokens && t.tenants && line ? 0 : -ENOMEM;
        unsigned lineno = 0;
        while (r == 0 && fgets(line, LINE_MAX_BYTES + 2, f)) {
                lineno++;
                size_t len = strlen(line);
                if (len == LINE_MAX_BYTES + 1 && line[len - 1] != '\n') {
                        (void)al_error(err, -EINVAL, NULL, "--tokens %s:%u: longer than %d bytes",
                                       path, lineno, LINE_MAX_BYTES);
                        r = -E2BIG;
                        break;
                }
                while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                        line[--len] = '\0';
                char *p = line;
                while (*p == ' ' || *p == '\t')
                        p++;
                if (!*p || *p == '#')
                        continue;
                /* A '#' after a blank starts a comment, at the end of a line
                 * too: no token, name or setting holds a blank. */
                for (char *q = p; *q; q++)
                        if (*q == '#' && (q[-1] == ' ' || q[-1] == '\t')) {
                                *q = '\0';
                                break;
                        }
                r = add_line(&t, p, path, lineno, err);
        }
        if (line) {
                explicit_bzero(line, LINE_MAX_BYTES + 2);
                free(line);
        }
        fclose(f);
        if (r == 0 && t.n_tokens == 0) {
                (void)al_error(err, -EINVAL, NULL, "--tokens %s: no token in the file", path);
                r = -EINVAL;
        }
        if (r < 0) {
                if (r == -ENOMEM)
                        (void)al_error(err, -EINVAL, NULL, "out of memory");
                tenants_free(&t);
                return r;
        }
        *ret = t;
        return (int)t.n_tokens;
}
