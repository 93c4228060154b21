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

static void to_url_alphabet(char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                s[i] = s[i] == '+' ? '-' : s[i] == '/' ? '_' : s[i];
}

/* The base64 text of the value at offset k (0-2) into a larger input,
 * without the characters that also depend on the bytes around it, in the
 * standard and the URL alphabet; at k = 0 also the whole padded encoding. */
static int forms_base64(secret *s)
{
        for (size_t k = 0; k < 3; k++) {
                size_t L = k + s->len, enc_len = 0;
                unsigned char *in = calloc(1, L);
                if (!in)
                        return -ENOMEM;
                memcpy(in + k, s->value, s->len);
                char *enc = al_base64_encode(in, L, &enc_len);
                secrets_wipe_free(in, L);
                if (!enc)
                        return -ENOMEM;
                int r = 0;
                /* The whole encoding, with and without its padding. */
                size_t bare = enc_len;
                while (bare && enc[bare - 1] == '=')
                        bare--;
                for (int pad = 0; k == 0 && r >= 0 && pad < 2; pad++) {
                        size_t n = pad ? enc_len : bare;
                        r = form_add(s, dup_n(enc, n), n);
                        char *u = dup_n(enc, n);
                        if (u)
                                to_url_alphabet(u, n);
                        if (r >= 0)
                                r = form_add(s, u, n);
                }
                size_t head = k == 0 ? 0 : k == 1 ? 2 : 3;
                size_t tail = L % 3 == 0 ? 0 : L % 3 == 1 ? 3 : 2;
                if (r >= 0 && enc_len > head + tail) {
                        size_t n = enc_len - head - tail;
                        r = form_add(s, dup_n(enc + head, n), n);
                        char *u = dup_n(enc + head, n);
                        if (u)
                                to_url_alphabet(u, n);
                        if (r >= 0)
                                r = form_add(s, u, n);
                }
                secrets_wipe_free(enc, enc_len);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Percent-encoding: mode 0 keeps the unreserved characters, mode 1 encodes
 * every byte, mode 2 is form encoding (a space is '+'). */
static int form_percent(secret *s, int mode, bool lower)
{
        const char *hex = lower ? "0123456789abcdef" : "0123456789ABCDEF";
        size_t cap = s->len * 3 + 1, n = 0;
        char *out = malloc(cap);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < s->len; i++) {
                unsigned char c = s->value[i];
                if (mode != 1 && (isalnum(c) || strchr("-._~", c)) && c)
                        out[n++] = (char)c;
                else if (mode == 2 && c == ' ')
                        out[n++] = '+';
                else {
                        out[n++] = '%';
                        out[n++] = hex[c >> 4];
                        out[n++] = hex[c & 15];
                }
        }
        out[n] = '\0';
        return form_add(s, out, n);
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

/* Writes \uXXXX at out, returning 6. */
static size_t json_u(char *out, uint32_t cp, bool upper)
{
        const char *hex = upper ? "0123456789ABCDEF" : "0123456789abcdef";
        out[0] = '\\';
        out[1] = 'u';
        for (int i = 0; i < 4; i++)
                out[2 + i] = hex[(cp >> (12 - 4 * i)) & 15];
        return 6;
}

/* JSON string escaping: '"' and '\\' always, '/' with slash, every
 * character beyond ASCII as \uXXXX (surrogate pairs beyond the BMP) with
 * ascii, in lower- or upper-case hex. A value that is not UTF-8 has no
 * ascii form. With latin1, each byte beyond ASCII is its own \u00XX: what a
 * server that reads header bytes as Latin-1 (as HTTP/1.1 once said, and
 * Python's http.server does) writes when it echoes them as JSON. */
static int form_json(secret *s, bool slash, bool ascii, bool upper, bool latin1)
{
        size_t cap = s->len * 12 + 1, n = 0;
        char *out = malloc(cap);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < s->len;) {
                unsigned char c = s->value[i];
                if (c == '"' || c == '\\' || (slash && c == '/')) {
                        out[n++] = '\\';
                        out[n++] = (char)c;
                        i++;
                } else if (c < 0x80 || !ascii) {
                        out[n++] = (char)c;
                        i++;
                } else if (latin1) {
                        n += json_u(out + n, c, upper);
                        i++;
                } else {
                        uint32_t cp;
                        if (!value_utf8_next(s, &i, &cp)) {
                                secrets_wipe_free(out, cap);
                                return 0;
                        }
                        if (cp >= 0x10000) {
                                cp -= 0x10000;
                                n += json_u(out + n, 0xd800 + (cp >> 10), upper);
                                n += json_u(out + n, 0xdc00 + (cp & 0x3ff), upper);
                        } else {
                                n += json_u(out + n, cp, upper);
                        }
                }
        }
        out[n] = '\0';
        char *fit = dup_n(out, n);
        secrets_wipe_free(out, cap);
        return form_add(s, fit, n);
}

/* The value with its ASCII letters upper- (upper) or lower-cased: what a
 * server that folds the case of a key it quotes writes. */
static int form_case(secret *s, bool upper)
{
        char *out = dup_n(s->value, s->len);
        for (size_t i = 0; out && i < s->len; i++)
                out[i] =
                    (char)(upper ? toupper((unsigned char)out[i]) : tolower((unsigned char)out[i]));
        return form_add(s, out, s->len);
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

static int forms_make(secret *s)
{
        int r = form_add(s, dup_n(s->value, s->len), s->len);
        if (r >= 0)
                r = forms_base64(s);
        for (int mode = 0; r >= 0 && mode < 3; mode++) {
                r = form_percent(s, mode, false);
                if (r >= 0)
                        r = form_percent(s, mode, true);
        }
        for (int j = 0; r >= 0 && j < 16; j++)
                r = form_json(s, j & 1, j & 2, j & 4, j & 8);
        for (int j = 0; r >= 0 && j < 2; j++) {
                r = form_case(s, j);
                if (r >= 0)
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
        *d = (secret){.len = src->len, .flags = src->flags, .ph_len = src->ph_len};
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
        size_t at = 0;
        while (at < st->n && strcmp(st->v[at].name, name) != 0)
                at++;
        if (at == st->n && st->n >= SECRETS_MAX)
                return al_error(err, -E2BIG, NULL, "too many secrets (at most %d)", SECRETS_MAX);

        secret s = {.len = len, .flags = flags};
        int r = allowlist_new(&s.targets, err);
        for (size_t i = 0; r >= 0 && i < nt; i++) {
                /* "mcp:SERVER": an upstream MCP server whose "env" or
                 * "headers" name the secret (mcp/); it allows no HTTP
                 * request. A server that names a secret is its target
                 * whether or not it is listed: this only lets a secret
                 * meant for servers alone be declared. */
                if (strncmp(targets[i], "mcp:", 4) == 0) {
                        if (!targets[i][4] || strlen(targets[i]) > 4 + 64)
                                r = al_error(err, -EINVAL, NULL,
                                             "secret %s: target 'mcp:' needs a server name", name);
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

int secrets_lookup(const secret_store *s, const char *name, char *buf)
{
        for (size_t i = 0; s && i < s->n; i++)
                if (strcmp(s->v[i].name, name) == 0) {
                        memcpy(buf, s->v[i].placeholder, s->v[i].ph_len + 1);
                        return 0;
                }
        return -ENOENT;
}

int secrets_value(const secret_store *s, const char *name, const unsigned char **ret,
                  size_t *ret_len)
{
        for (size_t i = 0; s && i < s->n; i++)
                if (strcmp(s->v[i].name, name) == 0) {
                        *ret = s->v[i].value;
                        *ret_len = s->v[i].len;
                        return 0;
                }
        return -ENOENT;
}

char *secrets_fingerprint_text(const secret_store *s)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        int r = 0;
        for (size_t i = 0; r >= 0 && s && i < s->n; i++) {
                _cleanup_free_ char *t = allowlist_fingerprint_text(s->v[i].targets);
                uint64_t d = siphash(3, s->v[i].value, s->v[i].len);
                r = t ? dynbuf_appendf(&b, "%s %u %016llx %s\n", s->v[i].name, s->v[i].flags,
                                       (unsigned long long)d, t)
                      : -ENOMEM;
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

int secrets_scrub(const secret_store *s, const char *data, size_t len, char **ret, size_t *ret_len)
{
        if (!s || !s->n)
                return 0;
        const char *cur = data;
        size_t cur_len = len;
        bool owned = false;
        for (size_t i = 0; i < s->n; i++) {
                const secret *x = &s->v[i];
                for (size_t f = 0; f < x->n_forms; f++) {
                        char wide[2 * SECRET_PLACEHOLDER_SIZE];
                        const char *ph = x->placeholder;
                        size_t ph_len = x->ph_len;
                        if (x->forms[f].wide) {
                                for (size_t k = 0; k < x->ph_len; k++)
                                        put16(wide + 2 * k, (unsigned char)x->placeholder[k],
                                              x->forms[f].wide == 2);
                                ph = wide;
                                ph_len = 2 * x->ph_len;
                        }
                        int r = replace_all(&cur, &cur_len, &owned, x->forms[f].s, x->forms[f].n,
                                            ph, ph_len, len + SECRETS_GROWTH_MAX);
                        if (r < 0) {
                                if (owned)
                                        free((char *)cur);
                                return r;
                        }
                }
        }
        if (!owned)
                return 0;
        *ret = (char *)cur;
        *ret_len = cur_len;
        return 1;
}

void secrets_scrub_text(const secret_store *s, char *text, size_t size)
{
        char *clean = NULL;
        size_t n = 0;
        int r = secrets_scrub(s, text, strlen(text), &clean, &n);
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
