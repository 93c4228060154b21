/* Secrets at the egress (host/secrets.h).
 *
 * A store is built once, single-threaded, with the configuration, and only
 * read afterwards (a sandbox keeps a deep copy), so the gateway's threads
 * need no lock. Rotation is a new value in the configuration: its
 * fingerprint changes, so the cache makes a new sandbox with the new value,
 * and the placeholder, which depends on the name alone, stays. */
#include "host/secrets.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/util.h"

#define PLACEHOLDER_PREFIX "airlock-secret-"

/* One text that stands for the value in a response: the value itself or an
 * encoding of it. */
typedef struct secret_form {
        char *s;
        size_t n;
        /* The form is UTF-16 (1 little-, 2 big-endian): the placeholder
         * that replaces it is too, so that the text stays readable. */
        unsigned char wide;
} secret_form;

typedef struct secret {
        char *name;
        unsigned char *value;
        size_t len;
        unsigned flags;
        net_allowlist *targets;
        /* The servers of its "mcp:SERVER" targets, in the order given. */
        char *mcp[SECRET_TARGETS_MAX];
        size_t n_mcp;
        /* Its one target is "peer": airlock serve's cluster secret, which
         * signs the requests its peers forward to each other and reaches
         * nothing else (no request, no server, no guest). */
        bool peer;
        char placeholder[SECRET_PLACEHOLDER_SIZE];
        size_t ph_len;
        secret_form *forms; /* longest first, so a longer form wins over a part of it */
        size_t n_forms;
} secret;

struct secret_store {
        secret *v;
        size_t n;
};

void secrets_wipe_free(void *p, size_t len)
{
        if (!p)
                return;
        explicit_bzero(p, len);
        free(p);
}

/* ---- the per-process key and SipHash-2-4 -------------------------------- */

static uint8_t process_key[16];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void key_init(void)
{
        size_t got = 0;
        while (got < sizeof(process_key)) {
                ssize_t n = getrandom(process_key + got, sizeof(process_key) - got, 0);
                if (n > 0)
                        got += (size_t)n;
                else if (n < 0 && errno != EINTR)
                        abort(); /* no randomness: a guessable placeholder key is worse */
        }
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
        do {                                                                                       \
                v0 += v1;                                                                          \
                v1 = ROTL(v1, 13);                                                                 \
                v1 ^= v0;                                                                          \
                v0 = ROTL(v0, 32);                                                                 \
                v2 += v3;                                                                          \
                v3 = ROTL(v3, 16);                                                                 \
                v3 ^= v2;                                                                          \
                v0 += v3;                                                                          \
                v3 = ROTL(v3, 21);                                                                 \
                v3 ^= v0;                                                                          \
                v2 += v1;                                                                          \
                v1 = ROTL(v1, 17);                                                                 \
                v1 ^= v2;                                                                          \
                v2 = ROTL(v2, 32);                                                                 \
        } while (0)

static uint64_t load64(const uint8_t *p)
{
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

/* SipHash-2-4 of data under the process key, with tweak mixed into the
 * key so that the two halves of a placeholder and the value digests are
 * independent functions. */
static uint64_t siphash(uint64_t tweak, const void *data, size_t len)
{
        pthread_once(&key_once, key_init);
        uint64_t k0 = load64(process_key) ^ tweak, k1 = load64(process_key + 8);
        uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
        uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
        const uint8_t *p = data;
        size_t left = len;
        for (; left >= 8; p += 8, left -= 8) {
                uint64_t m = load64(p);
                v3 ^= m;
                SIPROUND;
                SIPROUND;
                v0 ^= m;
        }
        uint64_t b = (uint64_t)len << 56;
        for (size_t i = 0; i < left; i++)
                b |= (uint64_t)p[i] << (8 * i);
        v3 ^= b;
        SIPROUND;
        SIPROUND;
        v0 ^= b;
        v2 ^= 0xff;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        return v0 ^ v1 ^ v2 ^ v3;
}

void secrets_placeholder(const char *name, char *buf)
{
        size_t n = strnlen(name, SECRET_NAME_MAX);
        uint64_t a = siphash(1, name, n), b = siphash(2, name, n);
        snprintf(buf, SECRET_PLACEHOLDER_SIZE, PLACEHOLDER_PREFIX "%.*s-%016llx%016llx", (int)n,
                 name, (unsigned long long)a, (unsigned long long)b);
}

/* ---- encoded forms of a value ------------------------------------------- */

static int form_add_wide(secret *s, char *text, size_t n, unsigned char wide)
{
        if (!text)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_forms; i++)
                if (s->forms[i].n == n && memcmp(s->forms[i].s, text, n) == 0) {
                        secrets_wipe_free(text, n);
                        return 0;
                }
        /* A form shorter than the shortest value would match ordinary text. */
        if (n < SECRET_VALUE_MIN) {
                secrets_wipe_free(text, n);
                return 0;
        }
        secret_form *f = realloc(s->forms, (s->n_forms + 1) * sizeof(*f));
        if (!f) {
                secrets_wipe_free(text, n);
                return -ENOMEM;
        }
        s->forms = f;
        size_t at = 0;
        while (at < s->n_forms && s->forms[at].n >= n)
                at++;
        memmove(&s->forms[at + 1], &s->forms[at], (s->n_forms - at) * sizeof(*f));
        s->forms[at] = (secret_form){text, n, wide};
        s->n_forms++;
        return 0;
}

static int form_add(secret *s, char *text, size_t n)
{
        return form_add_wide(s, text, n, 0);
}

static char *dup_n(const void *p, size_t n)
{
        char *c = malloc(n + 1);
        if (c) {
                memcpy(c, p, n);
                c[n] = '\0';
        }
        return c;
}

/* Decodes the UTF-8 sequence of s->value at *i into *cp and moves *i past
 * it. Returns false at a byte that starts no sequence, or one cut short by
 * the end: the value is not UTF-8 (the callers then make no form of it). */
static bool value_utf8_next(const secret *s, size_t *i, uint32_t *cp)
{
        unsigned char c = s->value[*i];
        size_t len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
        if (!len || *i + len > s->len)
                return false;
        *cp = len == 1 ? c : c & (0x3f >> (len - 1));
        for (size_t j = 1; j < len; j++)
                *cp = *cp << 6 | (s->value[*i + j] & 0x3f);
        *i += len;
        return true;
}

/* The value's bytes in hex, lower- or upper-case (a debug dump). */
static int form_hex(secret *s, bool upper)
{
        const char *hex = upper ? "0123456789ABCDEF" : "0123456789abcdef";
        char *out = malloc(s->len * 2 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < s->len; i++) {
                out[2 * i] = hex[s->value[i] >> 4];
                out[2 * i + 1] = hex[s->value[i] & 15];
        }
        out[2 * s->len] = '\0';
        return form_add(s, out, s->len * 2);
}

static size_t put16(char *out, uint32_t u, bool big)
{
        out[big ? 1 : 0] = (char)(u & 0xff);
        out[big ? 0 : 1] = (char)(u >> 8);
        return 2;
}

/* The value read as UTF-8 and written as UTF-16 (a service that answers in
 * UTF-16), little- or big-endian. A value that is not UTF-8 has none. */
static int form_utf16(secret *s, bool big)
{
        size_t cap = s->len * 4 + 1, n = 0;
        char *out = malloc(cap);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < s->len;) {
                uint32_t cp;
                if (!value_utf8_next(s, &i, &cp)) {
                        secrets_wipe_free(out, cap);
                        return 0;
                }
                if (cp >= 0x10000) {
                        cp -= 0x10000;
                        n += put16(out + n, 0xd800 + (cp >> 10), big);
                        n += put16(out + n, 0xdc00 + (cp & 0x3ff), big);
                } else {
                        n += put16(out + n, cp, big);
                }
        }
        char *fit = dup_n(out, n);
        secrets_wipe_free(out, cap);
        return form_add_wide(s, fit, n, big ? 2 : 1);
}

/* The fixed forms: the forms that the scrub's decoders (below) do not
 * read, found as they are. The value itself and its escaped and base64
 * forms are found by decoding the text instead, since their variants
 * (which characters an encoder escapes, where base64 is wrapped) are too
 * many to list. */
static int forms_make(secret *s)
{
        int r = 0;
        for (int j = 0; r >= 0 && j < 2; j++) {
                r = form_hex(s, j);
                if (r >= 0)
                        r = form_utf16(s, j);
        }
        return r;
}

/* ---- the store ---------------------------------------------------------- */

static void secret_clear(secret *s)
{
        free(s->name);
        secrets_wipe_free(s->value, s->len);
        for (size_t i = 0; i < s->n_forms; i++)
                secrets_wipe_free(s->forms[i].s, s->forms[i].n);
        free(s->forms);
        allowlist_free(s->targets);
        for (size_t i = 0; i < s->n_mcp; i++)
                free(s->mcp[i]);
        *s = (secret){0};
}

int secrets_new(secret_store **ret, airlock_error *err)
{
        secret_store *s = calloc(1, sizeof(*s));
        if (!s)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        *ret = s;
        return 0;
}

void secrets_free(secret_store *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n; i++)
                secret_clear(&s->v[i]);
        free(s->v);
        free(s);
}

/* Makes *d a complete copy of src, or returns -ENOMEM with *d cleared. */
static int secret_copy(const secret *src, secret *d)
{
        *d = (secret){
            .len = src->len, .flags = src->flags, .ph_len = src->ph_len, .peer = src->peer};
        memcpy(d->placeholder, src->placeholder, sizeof(d->placeholder));
        d->name = strdup(src->name);
        d->value = malloc(src->len);
        d->forms = calloc(src->n_forms, sizeof(*d->forms));
        int r = d->name && d->value && d->forms ? 0 : -ENOMEM;
        if (r >= 0)
                memcpy(d->value, src->value, src->len);
        for (size_t i = 0; r >= 0 && i < src->n_forms; i++) {
                d->forms[i].s = dup_n(src->forms[i].s, src->forms[i].n);
                d->forms[i].n = src->forms[i].n;
                d->forms[i].wide = src->forms[i].wide;
                if (!d->forms[i].s)
                        r = -ENOMEM;
                else
                        d->n_forms++;
        }
        if (r >= 0)
                r = allowlist_clone(src->targets, &d->targets, NULL);
        for (size_t i = 0; r >= 0 && i < src->n_mcp; i++) {
                if (!(d->mcp[i] = strdup(src->mcp[i])))
                        r = -ENOMEM;
                else
                        d->n_mcp++;
        }
        if (r < 0) {
                if (!d->value)
                        d->len = 0;
                secret_clear(d);
                return -ENOMEM;
        }
        return 0;
}

int secrets_clone(const secret_store *s, secret_store **ret, airlock_error *err)
{
        secret_store *c = calloc(1, sizeof(*c));
        if (!c || (s->n && !(c->v = calloc(s->n, sizeof(*c->v))))) {
                free(c);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        for (size_t i = 0; i < s->n; i++) {
                if (secret_copy(&s->v[i], &c->v[i]) < 0) {
                        secrets_free(c);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                c->n++;
        }
        *ret = c;
        return 0;
}

static bool name_ok(const char *name)
{
        size_t n = strlen(name);
        if (n == 0 || n > SECRET_NAME_MAX || isdigit((unsigned char)name[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)name[i]) && name[i] != '_')
                        return false;
        return true;
}

int secrets_add_check_name(const char *name)
{
        return name_ok(name) ? 0 : -EINVAL;
}

/* Contract: a secret whose targets name "peer" is the cluster secret of
 * airlock serve's peers, and has no other target and no +query or +body,
 * so that a value scoped to peers can never also be sent to an HTTP
 * target or an upstream server; and a store holds at most one such
 * secret (other than one of the same name, which a rotation replaces), so
 * that which value signs peer requests is never a matter of order. */
static int peer_target_check(const secret_store *st, const char *name, const char *const *targets,
                             size_t nt, unsigned flags, airlock_error *err)
{
        bool peer = false;
        for (size_t i = 0; i < nt; i++)
                peer |= strcmp(targets[i], "peer") == 0;
        if (!peer)
                return 0;
        if (nt > 1 || flags)
                return al_error(err, -EINVAL, NULL,
                                "secret %s: the target 'peer' (the cluster secret of airlock "
                                "serve's peers) takes no other target and no +query or +body: a "
                                "secret scoped to peer reaches nothing else",
                                name);
        for (size_t i = 0; i < st->n; i++)
                if (st->v[i].peer && strcmp(st->v[i].name, name) != 0)
                        return al_error(err, -EINVAL, NULL,
                                        "secret %s: secret %s already targets peer (there is one "
                                        "cluster secret)",
                                        name, st->v[i].name);
        return 0;
}

int secrets_add(secret_store *st, const char *name, const void *value, size_t len, unsigned flags,
                const char *const *targets, airlock_error *err)
{
        if (!name || !name_ok(name))
                return al_error(err, -EINVAL, NULL,
                                "secret name '%.64s' must be 1 to %d letters, digits or '_', not "
                                "starting with a digit",
                                name ? name : "", SECRET_NAME_MAX);
        if (!value || len < SECRET_VALUE_MIN || len > SECRET_VALUE_MAX)
                return al_error(err, -EINVAL, NULL,
                                "secret %s: the value must have %d to %d bytes (it has %zu)", name,
                                SECRET_VALUE_MIN, SECRET_VALUE_MAX, len);
        for (size_t i = 0; i < len; i++) {
                unsigned char c = ((const unsigned char *)value)[i];
                if (c < 0x20 || c == 0x7f)
                        return al_error(err, -EINVAL, NULL,
                                        "secret %s: the value contains a control character (a "
                                        "trailing newline?); it must fit in a header",
                                        name);
        }
        if (flags & ~(unsigned)(AIRLOCK_SECRET_IN_QUERY | AIRLOCK_SECRET_IN_BODY))
                return al_error(err, -EINVAL, NULL, "secret %s: unknown flags %#x", name, flags);
        size_t nt = 0;
        while (targets && targets[nt])
                nt++;
        if (nt == 0)
                return al_error(err, -EINVAL, NULL,
                                "secret %s has no target: name where it may go (TARGET[=METHODS])",
                                name);
        if (nt > SECRET_TARGETS_MAX)
                return al_error(err, -E2BIG, NULL, "secret %s: more than %d targets", name,
                                SECRET_TARGETS_MAX);
        int pr = peer_target_check(st, name, targets, nt, flags, err);
        if (pr < 0)
                return pr;
        size_t at = 0;
        while (at < st->n && strcmp(st->v[at].name, name) != 0)
                at++;
        if (at == st->n && st->n >= SECRETS_MAX)
                return al_error(err, -E2BIG, NULL, "too many secrets (at most %d)", SECRETS_MAX);

        secret s = {.len = len, .flags = flags};
        int r = allowlist_new(&s.targets, err);
        for (size_t i = 0; r >= 0 && i < nt; i++) {
                if (strcmp(targets[i], "peer") == 0) {
                        s.peer = true; /* alone: peer_target_check */
                        continue;
                }
                /* "mcp:SERVER": the upstream MCP server SERVER may get the
                 * value in its "env" or "headers" (mcp/); it allows no HTTP
                 * request. Only a secret's own targets say which servers
                 * get it: a servers file, which may come with a repository,
                 * names secrets but never adds a target. */
                if (strncmp(targets[i], "mcp:", 4) == 0) {
                        if (!targets[i][4] || strlen(targets[i]) > 4 + 64) {
                                r = al_error(err, -EINVAL, NULL,
                                             "secret %s: target 'mcp:' needs a server name of 1 "
                                             "to 64 bytes",
                                             name);
                                continue;
                        }
                        if (!(s.mcp[s.n_mcp] = strdup(targets[i] + 4)))
                                r = al_error(err, -ENOMEM, NULL, "out of memory");
                        else
                                s.n_mcp++;
                        continue;
                }
                const char *eq = strchr(targets[i], '=');
                _cleanup_free_ char *t =
                    eq ? strndup(targets[i], (size_t)(eq - targets[i])) : strdup(targets[i]);
                if (!t) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        break;
                }
                r = allowlist_add(s.targets, t, eq ? eq + 1 : NULL, err);
                if (r < 0 && err) {
                        char why[sizeof(err->message)];
                        snprintf(why, sizeof(why), "%s", err->message);
                        al_error(err, r, NULL, "secret %s: %s", name, why);
                }
        }
        if (r >= 0) {
                s.name = strdup(name);
                s.value = malloc(len);
                if (!s.name || !s.value)
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
        }
        if (r >= 0) {
                memcpy(s.value, value, len);
                secrets_placeholder(name, s.placeholder);
                s.ph_len = strlen(s.placeholder);
                if (forms_make(&s) < 0)
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
        }
        if (r < 0) {
                if (!s.value)
                        s.len = 0;
                secret_clear(&s);
                return r;
        }
        if (at < st->n) {
                secret_clear(&st->v[at]);
                st->v[at] = s;
                return 0;
        }
        secret *v = realloc(st->v, (st->n + 1) * sizeof(*v));
        if (!v) {
                secret_clear(&s);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        st->v = v;
        st->v[st->n++] = s;
        return 0;
}

size_t secrets_count(const secret_store *s)
{
        return s ? s->n : 0;
}

const char *secrets_name(const secret_store *s, size_t i)
{
        return s && i < s->n ? s->v[i].name : NULL;
}

const net_allowlist *secrets_targets(const secret_store *s, size_t i)
{
        return s && i < s->n ? s->v[i].targets : NULL;
}

bool secrets_is_peer(const secret_store *s, size_t i)
{
        return s && i < s->n && s->v[i].peer;
}

int secrets_peer_value(const secret_store *s, const unsigned char **ret, size_t *ret_len)
{
        for (size_t i = 0; s && i < s->n; i++)
                if (s->v[i].peer) {
                        *ret = s->v[i].value;
                        *ret_len = s->v[i].len;
                        return 0;
                }
        return -ENOENT;
}

int secrets_lookup(const secret_store *s, const char *name, char *buf)
{
        /* The cluster secret has no placeholder: the guest has nothing to
         * ask for, since no request of its may carry it. */
        for (size_t i = 0; s && i < s->n; i++)
                if (strcmp(s->v[i].name, name) == 0 && !s->v[i].peer) {
                        memcpy(buf, s->v[i].placeholder, s->v[i].ph_len + 1);
                        return 0;
                }
        return -ENOENT;
}

/* The targets of x as the command line writes them, for a message:
 * "mcp:github, https://api.github.com (GET)". */
static void targets_text(const secret *x, char *buf, size_t size)
{
        size_t o = 0;
        buf[0] = '\0';
        if (x->peer)
                o += (size_t)snprintf(buf, size, "peer");
        for (size_t i = 0; i < x->n_mcp && o < size; i++)
                o += (size_t)snprintf(buf + o, size - o, "%smcp:%s", o ? ", " : "", x->mcp[i]);
        for (size_t i = 0; i < allowlist_count(x->targets) && o < size; i++) {
                const allow_entry *e = allowlist_get(x->targets, i);
                o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", " : "", e->target);
                for (size_t m = 0; m < e->n_methods && o < size; m++)
                        o += (size_t)snprintf(buf + o, size - o, "%s%s%s", m ? "," : " (",
                                              e->methods[m], m + 1 == e->n_methods ? ")" : "");
        }
}

/* Whether one of x's HTTP targets allows the POST of a server at url (the
 * transport's method), and would over the scheme the URL says: a bare host
 * target allows http and https to the guest, but a server's headers are
 * sent as soon as it starts, by no code that could ask for https, so over
 * plain http only a target that says http:// itself counts. */
static bool url_target(const secret *x, const char *url)
{
        url_parts u = {0};
        if (allowlist_parse_url(url, &u, NULL) < 0)
                return false;
        const allow_entry *e = NULL;
        bool ok = allowlist_check(x->targets, "POST", &u, &e, NULL) >= 0 && e &&
                  (strcmp(u.scheme, "https") == 0 || (e->scheme && strcmp(e->scheme, "http") == 0));
        allowlist_url_free(&u);
        return ok;
}

int secrets_value_for_server(const secret_store *s, const char *name, const char *server,
                             const char *url, const unsigned char **ret, size_t *ret_len,
                             airlock_error *err)
{
        for (size_t i = 0; s && i < s->n; i++) {
                const secret *x = &s->v[i];
                if (strcmp(x->name, name) != 0)
                        continue;
                bool ok = false;
                for (size_t j = 0; !ok && j < x->n_mcp; j++)
                        ok = strcmp(x->mcp[j], server) == 0;
                if (!ok && url)
                        ok = url_target(x, url);
                if (!ok) {
                        char t[768];
                        targets_text(x, t, sizeof(t));
                        return al_error(err, -EACCES, NULL,
                                        "the secret '%s' goes only to its own targets (%s), and "
                                        "none of them is this server: add the target mcp:%s to "
                                        "--secret %s%s",
                                        name, t, server, name,
                                        url ? " (or an https:// target that allows POST to its URL)"
                                            : "");
                }
                *ret = x->value;
                *ret_len = x->len;
                return 0;
        }
        return al_error(err, -ENOENT, NULL, "the secret '%s' is not declared (--secret %s=...)",
                        name, name);
}

char *secrets_fingerprint_text(const secret_store *s)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        int r = 0;
        for (size_t i = 0; r >= 0 && s && i < s->n; i++) {
                _cleanup_free_ char *t = allowlist_fingerprint_text(s->v[i].targets);
                uint64_t d = siphash(3, s->v[i].value, s->v[i].len);
                r = t ? dynbuf_appendf(&b, "%s %u %016llx %s", s->v[i].name, s->v[i].flags,
                                       (unsigned long long)d, t)
                      : -ENOMEM;
                /* The servers it may go to change whether a build starts
                 * them with it, so they are the configuration too. */
                for (size_t j = 0; r >= 0 && j < s->v[i].n_mcp; j++)
                        r = dynbuf_appendf(&b, " mcp:%s", s->v[i].mcp[j]);
                if (r >= 0 && s->v[i].peer)
                        r = dynbuf_appendf(&b, " peer");
                if (r >= 0)
                        r = dynbuf_append(&b, "\n", 1);
        }
        if (r >= 0)
                r = dynbuf_append(&b, "", 0);
        char *text = r >= 0 ? dynbuf_take(&b, NULL) : NULL;
        dynbuf_free(&b);
        return text ? text : (r >= 0 ? strdup("") : NULL);
}

/* ---- rewriting ---------------------------------------------------------- */

/* Replaces every occurrence of needle in *buf (*len bytes; *owned says
 * whether *buf is a malloc'd copy of ours) by rep. The copy it drops is
 * zeroed: it may hold a value. */
static int replace_all(const char **buf, size_t *len, bool *owned, const char *needle, size_t nlen,
                       const char *rep, size_t rlen, size_t limit)
{
        const char *hit = memmem(*buf, *len, needle, nlen);
        if (!hit)
                return 0;
        size_t count = 0;
        for (const char *p = hit; p;
             p = memmem(p + nlen, (size_t)(*buf + *len - p - nlen), needle, nlen))
                count++;
        size_t out_len = *len - count * nlen + count * rlen;
        if (out_len > limit)
                return -E2BIG;
        char *out = malloc(out_len + 1);
        if (!out)
                return -ENOMEM;
        size_t o = 0;
        const char *from = *buf, *end = *buf + *len;
        for (const char *p = hit; p; p = memmem(from, (size_t)(end - from), needle, nlen)) {
                memcpy(out + o, from, (size_t)(p - from));
                o += (size_t)(p - from);
                memcpy(out + o, rep, rlen);
                o += rlen;
                from = p + nlen;
        }
        memcpy(out + o, from, (size_t)(end - from));
        o += (size_t)(end - from);
        out[o] = '\0';
        if (*owned)
                secrets_wipe_free((char *)*buf, *len);
        *buf = out;
        *len = o;
        *owned = true;
        return 1;
}

int secrets_substitute(const secret_store *s, const char *method, const url_parts *url,
                       secret_place place, const char *data, size_t len, char **ret,
                       size_t *ret_len)
{
        if (!s || !s->n || !memmem(data, len, PLACEHOLDER_PREFIX, sizeof(PLACEHOLDER_PREFIX) - 1))
                return 0;
        const char *cur = data;
        size_t cur_len = len;
        bool owned = false;
        for (size_t i = 0; i < s->n; i++) {
                const secret *x = &s->v[i];
                if (place != SECRET_IN_HEADER && !(x->flags & (unsigned)place))
                        continue;
                if (!memmem(cur, cur_len, x->placeholder, x->ph_len))
                        continue;
                /* Re-checked per request, so per redirect hop: the guest
                 * follows a redirect with a new request, which matches the
                 * secret's targets or keeps the placeholder. */
                if (allowlist_check(x->targets, method, url, NULL, NULL) < 0)
                        continue;
                int r = replace_all(&cur, &cur_len, &owned, x->placeholder, x->ph_len,
                                    (const char *)x->value, x->len, len + SECRETS_GROWTH_MAX);
                if (r < 0) {
                        if (owned)
                                secrets_wipe_free((char *)cur, cur_len);
                        return r;
                }
        }
        if (!owned)
                return 0;
        *ret = (char *)cur;
        *ret_len = cur_len;
        return 1;
}

/* ---- the scrub ---------------------------------------------------------- */

/* How many bytes of a value at a cut edge count as the value: a text cut
 * in the middle of a value must not pass on the part that is left. */
#define EDGE_MIN 4
/* The longest text that escapes one character ("\\ud83d\\ude00",
 * "&#x0001f600;"): a cut can fall inside it. */
#define UNIT_MAX 16
/* Steps one match may take (backtracking between two readings of one
 * character): past it the text is taken as a match, the safe side. */
#define MATCH_BUDGET_PER_BYTE 8
/* A run of this many bytes of a value (or of half the value, if that is
 * fewer), in any form the scrub reads, counts as the value: a target that
 * echoes all of a value but its last character must not pass the rest on. */
#define RUN_MIN 12
/* No more in a chain: a value of more repeated bytes. */
#define CHAIN_END 0xffffu

/* A stretch of the text that holds a value (or a part of it at a cut). */
typedef struct scrub_hit {
        size_t from, to;
        uint32_t secret;
        unsigned char wide;
} scrub_hit;

typedef struct scrub_ctx {
        const secret_store *s;
        const unsigned char *t;
        size_t n;
        bool cut_head, cut_tail;
        scrub_hit *hits;
        size_t n_hits, cap_hits;
        uint64_t first[256]; /* secrets whose value starts with this byte (folded) */
        struct mstate *stack;
        /* The base64 decoder's window (below). */
        unsigned char *sext, *ulen, *dec;
        size_t *pos;
        size_t cap_win;
        size_t min_run;
        /* Per secret: the first position in its value of each byte
         * (folded), and from each position the next of the same byte, so
         * that a run of the value can start anywhere in it. */
        uint16_t *heads, *chains;
        size_t *chain_at;
        /* Per secret: a bit for each hash of 4 bytes (folded) in its value.
         * A run is at least 4 bytes, so a start whose next 4 bytes read
         * only as themselves and hash to no bit is no start of a run. */
        uint64_t *grams;
        int err;
} scrub_ctx;

static unsigned char fold(unsigned char c)
{
        return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

#define GRAM_BITS 16

static uint32_t gram_hash(const unsigned char *p)
{
        uint32_t g = (uint32_t)fold(p[0]) | (uint32_t)fold(p[1]) << 8 | (uint32_t)fold(p[2]) << 16 |
                     (uint32_t)fold(p[3]) << 24;
        return (g * 2654435761u) >> (32 - GRAM_BITS);
}

/* Whether the 4 bytes at p (folded) may be 4 bytes of secret i's value. */
static bool gram_may(const scrub_ctx *c, size_t i, const unsigned char *p)
{
        uint32_t h = gram_hash(p);
        return c->grams[(i << (GRAM_BITS - 6)) + (h >> 6)] >> (h & 63) & 1;
}

/* The shortest run of x's value that counts as the value. */
static size_t run_min(const secret *x)
{
        return MIN((size_t)RUN_MIN, (x->len + 1) / 2);
}

static int hit_add(scrub_ctx *c, size_t from, size_t to, size_t which, unsigned char wide)
{
        if (to <= from)
                return 0;
        if (c->n_hits == c->cap_hits) {
                size_t cap = c->cap_hits ? 2 * c->cap_hits : 16;
                scrub_hit *v = realloc(c->hits, cap * sizeof(*v));
                if (!v)
                        return c->err = -ENOMEM;
                c->hits = v;
                c->cap_hits = cap;
        }
        c->hits[c->n_hits++] = (scrub_hit){from, to, (uint32_t)which, wide};
        return 0;
}

static int hexval(unsigned char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* The number that the hex digits t[p..p+k) spell, or -1. */
static long hexn(const unsigned char *t, size_t n, size_t p, size_t k)
{
        if (p + k > n)
                return -1;
        long v = 0;
        for (size_t i = 0; i < k; i++) {
                int h = hexval(t[p + i]);
                if (h < 0)
                        return -1;
                v = v << 4 | h;
        }
        return v;
}

/* One reading of the character at a position of the text: the bytes it
 * stands for (b, blen) and the length of the text it takes (ulen). */
typedef struct reading {
        unsigned char b[4];
        unsigned char blen, ulen;
} reading;

#define READINGS_MAX 12

static size_t reading_byte(reading *r, size_t k, unsigned b, size_t ulen)
{
        if (k < READINGS_MAX)
                r[k] = (reading){{(unsigned char)b}, 1, (unsigned char)ulen};
        return k < READINGS_MAX ? k + 1 : k;
}

/* A code point read from an escape: its UTF-8 bytes, and, below 256, the
 * byte of that number too (a server that read the value as Latin-1). */
static size_t reading_code(reading *r, size_t k, uint32_t cp, size_t ulen)
{
        if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
                return k;
        if (cp < 0x100)
                k = reading_byte(r, k, cp, ulen);
        if (cp < 0x80 || k >= READINGS_MAX)
                return k;
        reading *x = &r[k];
        *x = (reading){.ulen = (unsigned char)ulen};
        if (cp < 0x800) {
                x->b[0] = (unsigned char)(0xc0 | cp >> 6);
                x->blen = 2;
        } else if (cp < 0x10000) {
                x->b[0] = (unsigned char)(0xe0 | cp >> 12);
                x->b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
                x->blen = 3;
        } else {
                x->b[0] = (unsigned char)(0xf0 | cp >> 18);
                x->b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
                x->b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
                x->blen = 4;
        }
        x->b[x->blen - 1] = (unsigned char)(0x80 | (cp & 0x3f));
        return k + 1;
}

/* Named HTML character references for ASCII punctuation (HTML5 has one for
 * each; encoders use some of them), looked up after "&". */
static const struct {
        const char *name;
        unsigned char c;
} html_names[] = {
    {"amp;", '&'},    {"lt;", '<'},     {"gt;", '>'},     {"quot;", '"'},   {"apos;", '\''},
    {"excl;", '!'},   {"num;", '#'},    {"dollar;", '$'}, {"percnt;", '%'}, {"lpar;", '('},
    {"rpar;", ')'},   {"ast;", '*'},    {"plus;", '+'},   {"comma;", ','},  {"period;", '.'},
    {"sol;", '/'},    {"colon;", ':'},  {"semi;", ';'},   {"equals;", '='}, {"quest;", '?'},
    {"commat;", '@'}, {"lsqb;", '['},   {"lbrack;", '['}, {"bsol;", '\\'},  {"rsqb;", ']'},
    {"rbrack;", ']'}, {"Hat;", '^'},    {"lowbar;", '_'}, {"grave;", '`'},  {"lcub;", '{'},
    {"lbrace;", '{'}, {"verbar;", '|'}, {"vert;", '|'},   {"rcub;", '}'},   {"rbrace;", '}'},
    {"tilde;", '~'},  {"AMP;", '&'},    {"LT;", '<'},     {"GT;", '>'},     {"QUOT;", '"'},
    {"nbsp;", 0xa0},  {"hyphen;", '-'}, {"dash;", '-'},
};

/* Every reading of the text at p: the character itself; '+' as a space
 * (form encoding); %XX, also percent-encoded again (%2541), and %uXXXX;
 * the escapes of JSON, JavaScript and Python (\" \\ \/ \' \uXXXX with
 * surrogate pairs, \xXX, \UXXXXXXXX); HTML character references (named,
 * &#DD; and &#xHH;); a two-byte UTF-8 character below 256 as that byte (a
 * server that read the value as Latin-1 and wrote it as UTF-8). */
static size_t readings(const unsigned char *t, size_t n, size_t p, reading *r)
{
        size_t k = reading_byte(r, 0, t[p], 1);
        unsigned char c = t[p];
        if (c == '+') {
                k = reading_byte(r, k, ' ', 1);
        } else if (c == '%') {
                long b = hexn(t, n, p + 1, 2);
                size_t ul = 3;
                while (b >= 0) {
                        k = reading_byte(r, k, (unsigned)b, ul);
                        if (b != '%')
                                break;
                        b = hexn(t, n, p + ul, 2);
                        ul += 2;
                }
                long u =
                    p + 1 < n && (t[p + 1] == 'u' || t[p + 1] == 'U') ? hexn(t, n, p + 2, 4) : -1;
                if (u >= 0)
                        k = reading_code(r, k, (uint32_t)u, 6);
        } else if (c == '\\' && p + 1 < n) {
                unsigned char d = t[p + 1];
                if (d == '"' || d == '\\' || d == '/' || d == '\'') {
                        k = reading_byte(r, k, d, 2);
                } else if (d == 'u') {
                        long u = hexn(t, n, p + 2, 4);
                        if (u >= 0xd800 && u < 0xdc00 && p + 7 < n && t[p + 6] == '\\' &&
                            t[p + 7] == 'u') {
                                long lo = hexn(t, n, p + 8, 4);
                                if (lo >= 0xdc00 && lo < 0xe000)
                                        k = reading_code(r, k,
                                                         0x10000 + ((uint32_t)(u - 0xd800) << 10) +
                                                             (uint32_t)(lo - 0xdc00),
                                                         12);
                        } else if (u >= 0) {
                                k = reading_code(r, k, (uint32_t)u, 6);
                        }
                } else if (d == 'x') {
                        long u = hexn(t, n, p + 2, 2);
                        if (u >= 0)
                                k = reading_code(r, k, (uint32_t)u, 4);
                } else if (d == 'U') {
                        long u = hexn(t, n, p + 2, 8);
                        if (u >= 0)
                                k = reading_code(r, k, (uint32_t)u, 10);
                }
        } else if (c == '&' && p + 2 < n) {
                if (t[p + 1] == '#') {
                        bool hex = t[p + 2] == 'x' || t[p + 2] == 'X';
                        size_t q = p + 2 + hex;
                        uint32_t v = 0;
                        size_t digits = 0;
                        while (q < n && digits < 8) {
                                int h = hex                            ? hexval(t[q])
                                        : (t[q] >= '0' && t[q] <= '9') ? t[q] - '0'
                                                                       : -1;
                                if (h < 0)
                                        break;
                                v = v * (hex ? 16 : 10) + (uint32_t)h;
                                q++;
                                digits++;
                        }
                        if (digits && q < n && t[q] == ';')
                                k = reading_code(r, k, v, q + 1 - p);
                } else {
                        for (size_t i = 0; i < ARRAY_SIZE(html_names); i++) {
                                size_t l = strlen(html_names[i].name);
                                if (p + 1 + l <= n && memcmp(t + p + 1, html_names[i].name, l) == 0)
                                        k = reading_code(r, k, html_names[i].c, l + 1);
                        }
                }
        } else if ((c == 0xc2 || c == 0xc3) && p + 1 < n && (t[p + 1] & 0xc0) == 0x80) {
                k = reading_byte(r, k, (unsigned)((c & 0x1f) << 6 | (t[p + 1] & 0x3f)), 2);
        }
        return k;
}

/* starts_escape() of each byte (filled once, by tables_init() below). */
static bool escape_table[256];

/* The bytes that start a reading other than the character itself. */
static bool starts_escape(unsigned char c)
{
        return c == '+' || c == '%' || c == '\\' || c == '&' || c == 0xc2 || c == 0xc3;
}

static bool bytes_match(const unsigned char *a, const unsigned char *v, size_t k)
{
        for (size_t i = 0; i < k; i++)
                if (fold(a[i]) != fold(v[i]))
                        return false;
        return true;
}

typedef struct mstate {
        size_t p, j;
        unsigned char a;
} mstate;

/* Whether the text at p0 reads as at least need bytes of x's value from
 * byte j0 on (ASCII case aside: a server may fold it), each character as
 * it is or escaped in any of the ways readings() knows, mixed as they come.
 * Returns the end of the longest such match, or 0. When the text ends (at a
 * cut) after at least EDGE_MIN bytes of the value, or within UNIT_MAX
 * characters of its end (a cut inside an escape), that is a match up to the
 * end. */
static size_t match_escaped(scrub_ctx *c, size_t p0, const secret *x, size_t j0, size_t need)
{
        const unsigned char *t = c->t, *v = x->value;
        size_t n = c->n, depth = 0, maxp = p0, best = 0;
        size_t budget = MATCH_BUDGET_PER_BYTE * (x->len + UNIT_MAX);
        mstate *st = c->stack;
        st[depth++] = (mstate){p0, j0, 0};
        while (depth) {
                mstate *m = &st[depth - 1];
                if (m->j - j0 >= need && m->p > best)
                        best = m->p;
                if (m->j == x->len)
                        return best;
                reading r[READINGS_MAX];
                size_t nr = m->p < n ? readings(t, n, m->p, r) : 0;
                bool pushed = false;
                while (m->a < nr) {
                        const reading *q = &r[m->a++];
                        if (q->blen <= x->len - m->j && bytes_match(q->b, v + m->j, q->blen)) {
                                st[depth++] = (mstate){m->p + q->ulen, m->j + q->blen, 0};
                                maxp = MAX(maxp, m->p + q->ulen);
                                pushed = true;
                                break;
                        }
                }
                if (pushed) {
                        if (--budget == 0)
                                return maxp; /* cannot tell: the safe side */
                        continue;
                }
                if (c->cut_tail && n - m->p < UNIT_MAX && m->j - j0 >= EDGE_MIN)
                        return n;
                depth--;
        }
        return best;
}

/* The end of the longest run of secret i's value (run_min() bytes or more)
 * that the text reads as from p, starting anywhere in the value, or 0.
 * Each byte that a reading of the text at p stands for is looked up in the
 * value's chain of that byte. A start (p, j0) is skipped when prev_scanned
 * (p - 1 was tried for this secret) and the character at p - 1 as it is
 * equals the value's byte j0 - 1: the run from (p - 1, j0 - 1) holds every
 * reading from (p, j0) and is one byte longer, so it was found there if
 * either is long enough. This keeps the cost to about one try per byte of
 * the text for a value whose bytes repeat. */
static size_t scan_runs_at(scrub_ctx *c, size_t p, size_t i, bool prev_scanned)
{
        const secret *x = &c->s->v[i];
        const uint16_t *head = c->heads + 256 * i, *chain = c->chains + c->chain_at[i];
        /* Text that reads only as itself: its next 4 bytes must be 4 of
         * the value's. */
        if (p + 4 <= c->n && !escape_table[c->t[p]] && !escape_table[c->t[p + 1]] &&
            !escape_table[c->t[p + 2]] && !escape_table[c->t[p + 3]] && !gram_may(c, i, c->t + p))
                return 0;
        reading r[READINGS_MAX];
        size_t nr = readings(c->t, c->n, p, r), best = 0, need = run_min(x);
        unsigned char before = prev_scanned ? fold(c->t[p - 1]) : 0;
        uint64_t seen[4] = {0};
        for (size_t k = 0; k < nr; k++) {
                unsigned char b = fold(r[k].b[0]);
                if (seen[b >> 6] & 1ull << (b & 63))
                        continue;
                seen[b >> 6] |= 1ull << (b & 63);
                for (uint16_t j0 = head[b]; j0 != CHAIN_END; j0 = chain[j0]) {
                        if (prev_scanned && j0 > 0 && fold(x->value[j0 - 1]) == before)
                                continue;
                        if (x->len - j0 < need)
                                break;
                        size_t e = match_escaped(c, p, x, j0, need);
                        best = MAX(best, e);
                        if (c->err)
                                return 0;
                }
        }
        return best;
}

/* Fills the chains of scrub_ctx: per secret, each folded byte's first
 * position in the value and each position's next of the same byte. */
static int chains_make(scrub_ctx *c)
{
        const secret_store *s = c->s;
        size_t total = 0;
        c->chain_at = malloc(s->n * sizeof(*c->chain_at));
        for (size_t i = 0; c->chain_at && i < s->n; i++) {
                c->chain_at[i] = total;
                total += s->v[i].len;
        }
        c->grams = calloc(s->n << (GRAM_BITS - 6), sizeof(*c->grams));
        if (!c->grams)
                return c->err = -ENOMEM;
        for (size_t i = 0; i < s->n; i++)
                for (size_t j = 0; j + 4 <= s->v[i].len; j++) {
                        uint32_t h = gram_hash(s->v[i].value + j);
                        c->grams[(i << (GRAM_BITS - 6)) + (h >> 6)] |= 1ull << (h & 63);
                }
        c->heads = malloc(s->n * 256 * sizeof(*c->heads));
        c->chains = malloc((total + 1) * sizeof(*c->chains));
        if (!c->chain_at || !c->heads || !c->chains)
                return c->err = -ENOMEM;
        for (size_t i = 0; i < s->n; i++) {
                const secret *x = &s->v[i];
                uint16_t *head = c->heads + 256 * i, *chain = c->chains + c->chain_at[i];
                for (size_t b = 0; b < 256; b++)
                        head[b] = CHAIN_END;
                for (size_t j = x->len; j-- > 0;) {
                        unsigned char b = fold(x->value[j]);
                        chain[j] = head[b];
                        head[b] = (uint16_t)j;
                }
        }
        return 0;
}

/* The escaped text and the value as it is: every position, and at a cut
 * head, what is left of a value whose start was cut off. */
static int scan_escaped(scrub_ctx *c)
{
        const secret_store *s = c->s;
        size_t next[SECRETS_MAX] = {0};
        if (c->cut_head) {
                for (size_t i = 0; i < s->n; i++) {
                        const secret *x = &s->v[i];
                        for (size_t p0 = 0; p0 < MIN(c->n, (size_t)UNIT_MAX); p0++) {
                                size_t e = 0;
                                for (size_t j0 = 1; !e && j0 + EDGE_MIN <= x->len; j0++)
                                        e = match_escaped(c, p0, x, j0, x->len - j0);
                                if (e) {
                                        if (hit_add(c, 0, e, i, 0) < 0)
                                                return c->err;
                                        next[i] = e;
                                        break;
                                }
                        }
                }
        }
        for (size_t p = 0; p < c->n; p++) {
                unsigned char ch = c->t[p];
                uint64_t want = c->first[ch];
                if (!want && !escape_table[ch])
                        continue;
                if (starts_escape(ch)) {
                        reading r[READINGS_MAX];
                        size_t nr = readings(c->t, c->n, p, r);
                        for (size_t k = 1; k < nr; k++)
                                want |= c->first[fold(r[k].b[0])];
                }
                while (want) {
                        size_t i = (size_t)__builtin_ctzll(want);
                        want &= want - 1;
                        if (p < next[i])
                                continue;
                        size_t e = scan_runs_at(c, p, i, p > 0 && p - 1 >= next[i]);
                        if (e) {
                                if (hit_add(c, p, e, i, 0) < 0)
                                        return c->err;
                                next[i] = e;
                        }
                }
        }
        return 0;
}

/* ---- base64, wrapped or escaped ---- */

#define B64_WINDOW 16384 /* sextets decoded at once */
/* Sextets a window keeps from the one before: the longest value's. */
#define B64_OVERLAP (4 * (SECRET_VALUE_MAX / 3 + 2) + 8)

static int b64_value(unsigned char c)
{
        return c >= 'A' && c <= 'Z'   ? c - 'A'
               : c >= 'a' && c <= 'z' ? c - 'a' + 26
               : c >= '0' && c <= '9' ? c - '0' + 52
               : c == '+' || c == '-' ? 62
               : c == '/' || c == '_' ? 63
                                      : -1;
}

/* b64_value() of each byte (below 64), B64_NONE for a byte that is neither
 * a base64 character nor the start of a line break or an escape. */
#define B64_NONE 255
static unsigned char b64_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void)
{
        for (int b = 0; b < 256; b++) {
                escape_table[b] = starts_escape((unsigned char)b);
                int v = b64_value((unsigned char)b);
                b64_table[b] =
                    v >= 0 ? (unsigned char)v
                    : b == '\n' || b == '\r' || (starts_escape((unsigned char)b) && b != '+')
                        ? 64
                        : B64_NONE;
        }
}

/* The base64 character at p (either alphabet), as it is or escaped
 * (readings()): 1 with *sext and *ulen; 2 for a line break, which MIME
 * and PEM put every 64 or 76 characters (also as JSON's \n and \r, and
 * %0A, %0D), skipped; 0 for anything else, which ends the run. */
static int b64_unit(const unsigned char *t, size_t n, size_t p, unsigned char *sext, size_t *ulen)
{
        int v = b64_table[t[p]];
        if (v < 64) {
                *sext = (unsigned char)v;
                *ulen = 1;
                return 1;
        }
        if (v == B64_NONE)
                return 0;
        v = b64_value(t[p]);
        if (v >= 0) {
                *sext = (unsigned char)v;
                *ulen = 1;
                return 1;
        }
        if (t[p] == '\n' || t[p] == '\r') {
                *ulen = 1;
                return 2;
        }
        if (t[p] == '\\' && p + 1 < n && (t[p + 1] == 'n' || t[p + 1] == 'r')) {
                *ulen = 2;
                return 2;
        }
        if (!starts_escape(t[p]) || t[p] == '+')
                return 0;
        reading r[READINGS_MAX];
        size_t nr = readings(t, n, p, r);
        for (size_t k = 1; k < nr; k++) {
                if (r[k].blen != 1)
                        continue;
                if (r[k].b[0] == '\n' || r[k].b[0] == '\r') {
                        *ulen = r[k].ulen;
                        return 2;
                }
                v = b64_value(r[k].b[0]);
                if (v >= 0) {
                        *sext = (unsigned char)v;
                        *ulen = r[k].ulen;
                        return 1;
                }
        }
        return 0;
}

/* The sextet index in a window of the k-th decoded byte at alignment a,
 * and the last sextet that byte uses. */
static size_t b64_first(size_t a, size_t k)
{
        return a + 4 * (k / 3) + k % 3;
}

static size_t b64_last(size_t a, size_t k)
{
        return a + 4 * (k / 3) + k % 3 + 1;
}

/* The length of the longest run of secret x's value (run_min() bytes or
 * more, ASCII case aside) at d[k], starting anywhere in the value, or 0.
 * As in scan_runs_at, a start whose byte before matches the value's byte
 * before was tried one byte earlier (prev_tried), and is skipped. */
static size_t bytes_run_at(scrub_ctx *c, const unsigned char *d, size_t nb, size_t k, size_t x,
                           bool prev_tried)
{
        const secret *sx = &c->s->v[x];
        const unsigned char *v = sx->value;
        const uint16_t *head = c->heads + 256 * x, *chain = c->chains + c->chain_at[x];
        size_t need = run_min(sx), best = 0;
        if (nb - k < need || !gram_may(c, x, d + k))
                return 0;
        for (uint16_t j0 = head[fold(d[k])]; j0 != CHAIN_END; j0 = chain[j0]) {
                if (sx->len - j0 < need)
                        break;
                if (prev_tried && j0 > 0 && fold(d[k - 1]) == fold(v[j0 - 1]))
                        continue;
                size_t m = 0;
                while (k + m < nb && j0 + m < sx->len && fold(d[k + m]) == fold(v[j0 + m]))
                        m++;
                if (m >= need)
                        best = MAX(best, m);
        }
        return best;
}

/* The window's m sextets decoded at each alignment; every value in them,
 * and at the run's ends, when they are cut edges of the text, what is left
 * of a value there. */
static int b64_window(scrub_ctx *c, size_t m, bool head, bool tail)
{
        const secret_store *s = c->s;
        for (size_t a = 0; a < 4 && a < m; a++) {
                size_t nb = 0, i = a;
                for (; i + 4 <= m; i += 4) {
                        uint32_t g = (uint32_t)c->sext[i] << 18 | (uint32_t)c->sext[i + 1] << 12 |
                                     (uint32_t)c->sext[i + 2] << 6 | c->sext[i + 3];
                        c->dec[nb++] = (unsigned char)(g >> 16);
                        c->dec[nb++] = (unsigned char)(g >> 8);
                        c->dec[nb++] = (unsigned char)g;
                }
                if (m - i >= 2)
                        c->dec[nb++] = (unsigned char)(c->sext[i] << 2 | c->sext[i + 1] >> 4);
                if (m - i >= 3)
                        c->dec[nb++] = (unsigned char)(c->sext[i + 1] << 4 | c->sext[i + 2] >> 2);
                const unsigned char *d = c->dec;
                for (size_t x = 0; x < s->n; x++) {
                        const unsigned char *v = s->v[x].value;
                        size_t L = s->v[x].len;
                        /* Every run of run_min() bytes or more of the value
                         * in the decoded bytes (bytes_runs). */
                        for (size_t k = 0, tried = 0; k < nb;) {
                                size_t len = bytes_run_at(c, d, nb, k, x, k > 0 && k - 1 >= tried);
                                if (!len) {
                                        k++;
                                        continue;
                                }
                                size_t l = b64_last(a, k + len - 1);
                                if (hit_add(c, c->pos[b64_first(a, k)], c->pos[l] + c->ulen[l], x,
                                            0) < 0)
                                        return c->err;
                                k += len;
                                tried = k;
                        }
                        /* The end of a value at the text's start. */
                        for (size_t j0 = 1; head && j0 + EDGE_MIN <= L; j0++) {
                                size_t k = MIN(L - j0, nb);
                                if (k >= EDGE_MIN && (k == L - j0 || tail) &&
                                    memcmp(d, v + j0, k) == 0) {
                                        size_t l = b64_last(a, k - 1);
                                        if (hit_add(c, 0,
                                                    tail && k == nb ? c->n : c->pos[l] + c->ulen[l],
                                                    x, 0) < 0)
                                                return c->err;
                                        break;
                                }
                        }
                        /* The start of a value at the text's end. */
                        for (size_t k = nb > L ? nb - L + 1 : 0; tail && k + EDGE_MIN <= nb; k++) {
                                if (d[k] == v[0] && memcmp(d + k, v, nb - k) == 0) {
                                        if (hit_add(c, c->pos[b64_first(a, k)], c->n, x, 0) < 0)
                                                return c->err;
                                        break;
                                }
                        }
                }
        }
        return 0;
}

static int b64_grow(scrub_ctx *c, size_t want)
{
        size_t cap = MIN(want, (size_t)(B64_WINDOW + B64_OVERLAP));
        if (cap <= c->cap_win)
                return 0;
        unsigned char *sext = realloc(c->sext, cap);
        if (sext)
                c->sext = sext;
        unsigned char *ulen = realloc(c->ulen, cap);
        if (ulen)
                c->ulen = ulen;
        /* dec holds decoded bytes, a value's among them: never left behind
         * by a realloc. */
        unsigned char *dec = malloc(cap);
        if (dec) {
                secrets_wipe_free(c->dec, c->cap_win);
                c->dec = dec;
        }
        size_t *pos = realloc(c->pos, cap * sizeof(*pos));
        if (pos)
                c->pos = pos;
        if (!sext || !ulen || !dec || !pos)
                return c->err = -ENOMEM;
        c->cap_win = cap;
        return 0;
}

/* Runs of base64 characters, decoded at each of the four alignments (the
 * start of the encoded data need not be the start of the run), in windows
 * that overlap by the longest value's length. A run too short to hold a
 * value is passed over without being stored. */
static int scan_base64(scrub_ctx *c)
{
        const unsigned char *t = c->t;
        size_t n = c->n, p = 0;
        while (p < n) {
                unsigned char sx;
                size_t ul;
                unsigned char tv = b64_table[t[p]];
                if (tv == B64_NONE) {
                        p++;
                        continue;
                }
                int u = tv < 64 ? 1 : b64_unit(t, n, p, &sx, &ul);
                if (u != 1) {
                        p += u ? ul : 1;
                        continue;
                }
                size_t q = p, count = 0;
                while (q < n) {
                        tv = b64_table[t[q]];
                        if (tv < 64) {
                                count++;
                                q++;
                                continue;
                        }
                        if (tv == B64_NONE || !(u = b64_unit(t, n, q, &sx, &ul)))
                                break;
                        count += u == 1;
                        q += ul;
                }
                bool head = c->cut_head && p < UNIT_MAX, tail = c->cut_tail && n - q < UNIT_MAX;
                if (count < (head || tail ? 6 : c->min_run)) {
                        p = q;
                        continue;
                }
                if (b64_grow(c, count) < 0)
                        return c->err;
                size_t m = 0;
                bool first_window = true;
                while (p < q) {
                        u = b64_unit(t, n, p, &sx, &ul);
                        if (u == 1) {
                                if (m == c->cap_win) {
                                        if (b64_window(c, m, head && first_window, false) < 0)
                                                return c->err;
                                        memmove(c->sext, c->sext + m - B64_OVERLAP, B64_OVERLAP);
                                        memmove(c->ulen, c->ulen + m - B64_OVERLAP, B64_OVERLAP);
                                        memmove(c->pos, c->pos + m - B64_OVERLAP,
                                                B64_OVERLAP * sizeof(*c->pos));
                                        m = B64_OVERLAP;
                                        first_window = false;
                                }
                                c->sext[m] = sx;
                                c->ulen[m] = (unsigned char)ul;
                                c->pos[m] = p;
                                m++;
                        }
                        p += ul;
                }
                if (b64_window(c, m, head && first_window, tail) < 0)
                        return c->err;
        }
        return 0;
}

/* ---- fixed forms, assembly ---- */

/* The hex and UTF-16 forms, as they are; at a cut edge, a part of one
 * that stands for at least EDGE_MIN bytes of the value. */
static int scan_fixed(scrub_ctx *c)
{
        const unsigned char *t = c->t;
        size_t n = c->n;
        for (size_t i = 0; i < c->s->n; i++) {
                const secret *x = &c->s->v[i];
                for (size_t f = 0; f < x->n_forms; f++) {
                        const unsigned char *fs = (const unsigned char *)x->forms[f].s;
                        size_t fn = x->forms[f].n, kmin = (EDGE_MIN * fn + x->len - 1) / x->len;
                        unsigned char w = x->forms[f].wide;
                        for (const unsigned char *h = memmem(t, n, fs, fn); h;
                             h = memmem(h + fn, n - (size_t)(h + fn - t), fs, fn))
                                if (hit_add(c, (size_t)(h - t), (size_t)(h - t) + fn, i, w) < 0)
                                        return c->err;
                        /* A suffix of the form at the start (after up to
                         * three characters of a cut unit), a prefix at the end. */
                        for (size_t s0 = 0; c->cut_head && s0 < 4 && s0 < n; s0++) {
                                size_t k = 0;
                                for (size_t j = 1; !k && j + kmin <= fn; j++) {
                                        size_t m = MIN(fn - j, n - s0);
                                        /* The form's end, or a middle part
                                         * of it that the text's end cuts too. */
                                        if (m >= kmin && fs[j] == t[s0] &&
                                            (m == fn - j || c->cut_tail) &&
                                            memcmp(fs + j, t + s0, m) == 0)
                                                k = m;
                                }
                                if (k) {
                                        if (hit_add(c, 0, s0 + k, i, w) < 0)
                                                return c->err;
                                        break;
                                }
                        }
                        for (size_t k = MIN(fn - 1, n); c->cut_tail && k >= kmin; k--)
                                if (memcmp(t + n - k, fs, k) == 0) {
                                        if (hit_add(c, n - k, n, i, w) < 0)
                                                return c->err;
                                        break;
                                }
                }
        }
        return 0;
}

static int hit_cmp(const void *a, const void *b)
{
        const scrub_hit *x = a, *y = b;
        return x->from < y->from ? -1 : x->from > y->from ? 1 : (x->to > y->to) - (x->to < y->to);
}

/* Three scans of the original text each collect the stretches that hold a
 * value (escaped text, base64, fixed forms); overlapping stretches are
 * merged and each is replaced by one placeholder, so that no scan sees
 * another's output and no reading of a value is missed for another's. */
int secrets_scrub_cut(const secret_store *s, const char *data, size_t len, unsigned cut, char **ret,
                      size_t *ret_len)
{
        if (!s || !s->n || !len)
                return 0;
        scrub_ctx c = {.s = s,
                       .t = (const unsigned char *)data,
                       .n = len,
                       .cut_head = cut & SECRETS_CUT_HEAD,
                       .cut_tail = cut & SECRETS_CUT_TAIL,
                       .min_run = SIZE_MAX};
        size_t longest = 0;
        for (size_t i = 0; i < s->n; i++) {
                const secret *x = &s->v[i];
                longest = MAX(longest, x->len);
                c.min_run = MIN(c.min_run, run_min(x) * 4 / 3);
                /* A run may start at any byte of the value. */
                for (size_t j = 0; j < x->len; j++) {
                        c.first[fold(x->value[j])] |= 1ull << i;
                        c.first[toupper(x->value[j])] |= 1ull << i;
                }
        }
        pthread_once(&tables_once, tables_init);
        c.stack = malloc((longest + 2) * sizeof(*c.stack));
        int r = c.stack ? chains_make(&c) : -ENOMEM;
        if (r >= 0)
                r = scan_escaped(&c);
        if (r >= 0)
                r = scan_base64(&c);
        if (r >= 0)
                r = scan_fixed(&c);
        free(c.stack);
        free(c.heads);
        free(c.grams);
        free(c.chains);
        free(c.chain_at);
        free(c.sext);
        free(c.ulen);
        free(c.pos);
        if (c.dec)
                secrets_wipe_free(c.dec, c.cap_win);
        if (r < 0 || !c.n_hits) {
                free(c.hits);
                return r;
        }
        qsort(c.hits, c.n_hits, sizeof(*c.hits), hit_cmp);
        /* Overlapping stretches (two readings of one value, or two values)
         * become one, named after the first. */
        size_t merged = 0, out_len = len;
        for (size_t h = 0; h < c.n_hits;) {
                scrub_hit u = c.hits[h++];
                for (; h < c.n_hits && c.hits[h].from < u.to; h++)
                        u.to = MAX(u.to, c.hits[h].to);
                c.hits[merged++] = u;
                out_len += s->v[u.secret].ph_len * (u.wide ? 2 : 1);
                out_len -= u.to - u.from;
        }
        if (out_len > len + SECRETS_GROWTH_MAX) {
                free(c.hits);
                return -E2BIG;
        }
        char *out = malloc(out_len + 1);
        if (!out) {
                free(c.hits);
                return -ENOMEM;
        }
        size_t at = 0, o = 0;
        for (size_t h = 0; h < merged; h++) {
                const scrub_hit *u = &c.hits[h];
                const secret *x = &s->v[u->secret];
                memcpy(out + o, data + at, u->from - at);
                o += u->from - at;
                if (u->wide) {
                        for (size_t k = 0; k < x->ph_len; k++)
                                o += put16(out + o, (unsigned char)x->placeholder[k], u->wide == 2);
                } else {
                        memcpy(out + o, x->placeholder, x->ph_len);
                        o += x->ph_len;
                }
                at = u->to;
        }
        memcpy(out + o, data + at, len - at);
        o += len - at;
        out[o] = '\0';
        free(c.hits);
        *ret = out;
        *ret_len = o;
        return 1;
}

int secrets_scrub(const secret_store *s, const char *data, size_t len, char **ret, size_t *ret_len)
{
        return secrets_scrub_cut(s, data, len, 0, ret, ret_len);
}

void secrets_scrub_text(const secret_store *s, char *text, size_t size)
{
        char *clean = NULL;
        size_t n = 0;
        size_t len = strlen(text);
        int r = secrets_scrub_cut(s, text, len, len + 1 >= size ? SECRETS_CUT_TAIL : 0, &clean, &n);
        if (r > 0)
                snprintf(text, size, "%s", clean);
        else if (r < 0) /* cannot tell what to keep: keep nothing */
                snprintf(text, size, "the request failed (the message was withheld)");
        free(clean);
}

int secrets_scrub_json(const secret_store *s, json_t **v)
{
        if (!s || !s->n || !*v)
                return 0;
        char *text = json_dumps(*v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text), n = 0;
        char *clean = NULL;
        int r = secrets_scrub(s, text, len, &clean, &n);
        secrets_wipe_free(text, len);
        if (r <= 0)
                return r;
        json_t *out = json_loadb(clean, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        secrets_wipe_free(clean, n);
        /* A raw value that spanned the JSON's own syntax leaves no valid
         * JSON: nothing of it may go on. */
        if (!out)
                return -EPROTO;
        json_decref(*v);
        *v = out;
        return 1;
}

int secrets_scrub_string(const secret_store *s, char **text)
{
        if (!s || !s->n || !*text)
                return 0;
        char *clean = NULL;
        size_t len = strlen(*text), n = 0;
        int r = secrets_scrub(s, *text, len, &clean, &n);
        if (r <= 0)
                return r;
        secrets_wipe_free(*text, len);
        *text = clean;
        return 1;
}
