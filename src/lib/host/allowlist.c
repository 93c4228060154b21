/* The network allow-list: entries, URL parsing and request matching.
 *
 * Everything here is pure string work. The gateway (gateway.c) adds the
 * address checks that need the resolver. The rules are those of docs/design.md,
 * "Network allow-list": deny by default, never CONNECT or TRACE, exact
 * case-insensitive host names, path prefixes on a segment boundary. */
#include "host/allowlist.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <string.h>

#include "core/util.h"

#define ALLOWLIST_MAX_ENTRIES 1024
#define ALLOW_TARGET_MAX      2048
#define METHODS_MAX           32
#define METHOD_MAX_LEN        32
#define URL_MAX               8192
#define HOST_MAX              253

struct net_allowlist {
        allow_entry *entries;
        size_t n;
};

/* ---- small helpers ------------------------------------------------------ */

static int default_port(const char *scheme)
{
        return strcmp(scheme, "https") == 0 ? 443 : 80;
}

/* RFC 7230 "tchar": the characters of a method or header name. */
static bool is_tchar(unsigned char c)
{
        return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_hex(unsigned char c)
{
        return isxdigit(c) != 0;
}

static int hex_value(unsigned char c)
{
        return isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10);
}

static void str_lower(char *s)
{
        for (; *s; s++)
                *s = (char)tolower((unsigned char)*s);
}

static void free_strv(char **v)
{
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

static void entry_clear(allow_entry *e)
{
        free(e->target);
        free(e->scheme);
        free(e->host);
        free(e->path);
        free_strv(e->methods);
        *e = (allow_entry){0};
}

/* ---- hosts -------------------------------------------------------------- */

/* True when the label is something an IPv4 parser would read as a number:
 * all decimal digits, or "0x" and hex digits. inet_aton() and URL parsers
 * such as WHATWG's accept hosts ending in such a label as addresses
 * ("2130706433", "0x7f.1", "0177.0.0.1"), so they never count as names. */
static bool label_is_numeric(const char *l, size_t n)
{
        if (n == 0)
                return false;
        size_t i = 0;
        bool hex = false;
        if (n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
                hex = true;
                i = 2;
        }
        for (; i < n; i++)
                if (!(hex ? is_hex((unsigned char)l[i]) : isdigit((unsigned char)l[i])))
                        return false;
        return true;
}

/* Parses the host part of an authority (brackets already removed for IPv6)
 * into lower-case text. what names the whole input for messages. */
static int host_parse(const char *s, size_t n, bool bracketed, const char *what, char **ret,
                      bool *ret_is_ip, airlock_error *err)
{
        if (n == 0)
                return al_error(err, -EINVAL, NULL, "%s: the host is empty", what);
        if (n > HOST_MAX)
                return al_error(err, -EINVAL, NULL, "%s: the host is longer than %d characters",
                                what, HOST_MAX);
        _cleanup_free_ char *h = strndup(s, n);
        if (!h)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        str_lower(h);
        if (bracketed) {
                struct in6_addr a6;
                if (inet_pton(AF_INET6, h, &a6) != 1)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: '[%s]' is not an IPv6 address (zone ids are not "
                                        "supported)",
                                        what, h);
                /* The canonical form, so that "::1" and "0::1" are one host. */
                char buf[INET6_ADDRSTRLEN];
                inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
                char *c = strdup(buf);
                if (!c)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                free(h);
                h = c;
                *ret_is_ip = true;
                *ret = TAKE_PTR(h);
                return 0;
        }
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)h[i];
                if (!(isalnum(c) || c == '-' || c == '.' || c == '_'))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the host '%s' contains '%c'; a host is a DNS name, a "
                                        "dotted-quad IPv4 address or an IPv6 address in brackets",
                                        what, h, c);
        }
        struct in_addr a4;
        if (inet_pton(AF_INET, h, &a4) == 1) {
                *ret_is_ip = true;
                *ret = TAKE_PTR(h);
                return 0;
        }
        const char *label = h;
        for (;;) {
                const char *dot = strchr(label, '.');
                size_t len = dot ? (size_t)(dot - label) : strlen(label);
                if (len == 0 || len > 63)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the host '%s' has an empty or over-long label", what,
                                        h);
                if (!dot) {
                        if (label_is_numeric(label, len))
                                return al_error(err, -EINVAL, NULL,
                                                "%s: the host '%s' looks like an IPv4 address in "
                                                "a non-standard form; write addresses as four "
                                                "decimal numbers (a.b.c.d) without leading zeros",
                                                what, h);
                        break;
                }
                label = dot + 1;
        }
        *ret_is_ip = false;
        *ret = TAKE_PTR(h);
        return 0;
}

/* Parses "host", "host:port", "[v6]" or "[v6]:port". *ret_port is 0 when
 * no port is given. */
static int authority_parse(const char *a, size_t n, const char *what, char **ret_host,
                           int *ret_port, bool *ret_is_ip, airlock_error *err)
{
        const char *host = a, *port = NULL;
        size_t host_len, port_len = 0;
        bool bracketed = false;
        if (memchr(a, '@', n))
                return al_error(err, -EINVAL, NULL,
                                "%s: user names and passwords in URLs are not supported", what);
        if (n > 0 && a[0] == '[') {
                const char *close = memchr(a, ']', n);
                if (!close)
                        return al_error(err, -EINVAL, NULL, "%s: '[' without ']'", what);
                host = a + 1;
                host_len = (size_t)(close - host);
                bracketed = true;
                const char *rest = close + 1;
                size_t rest_len = n - (size_t)(rest - a);
                if (rest_len > 0) {
                        if (rest[0] != ':')
                                return al_error(err, -EINVAL, NULL, "%s: unexpected text after ']'",
                                                what);
                        port = rest + 1;
                        port_len = rest_len - 1;
                }
        } else {
                const char *colon = memchr(a, ':', n);
                if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - a)))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: IPv6 addresses must be written in brackets, like "
                                        "[::1]",
                                        what);
                host_len = colon ? (size_t)(colon - a) : n;
                if (colon) {
                        port = colon + 1;
                        port_len = n - host_len - 1;
                }
        }
        int p = 0;
        if (port) {
                if (port_len == 0 || port_len > 5)
                        return al_error(err, -EINVAL, NULL, "%s: the port is %s", what,
                                        port_len ? "out of range 1-65535" : "empty");
                for (size_t i = 0; i < port_len; i++) {
                        if (!isdigit((unsigned char)port[i]))
                                return al_error(err, -EINVAL, NULL,
                                                "%s: the port '%.*s' is not a number", what,
                                                (int)port_len, port);
                        p = p * 10 + (port[i] - '0');
                }
                if (p < 1 || p > 65535)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the port %d is out of range 1-65535", what, p);
        }
        int r = host_parse(host, host_len, bracketed, what, ret_host, ret_is_ip, err);
        if (r < 0)
                return r;
        *ret_port = p;
        return 0;
}

/* ---- paths -------------------------------------------------------------- */

/* Checks the characters of a path or query: printable ASCII but space and
 * backslash, and well-formed percent-escapes. */
static int text_check(const char *s, size_t n, const char *part, const char *what,
                      airlock_error *err)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c <= 0x20 || c >= 0x7f)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the %s contains a space, control or non-ASCII "
                                        "character (percent-encode it)",
                                        what, part);
                if (c == '\\')
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the %s contains a backslash (percent-encode it as "
                                        "%%5C)",
                                        what, part);
                if (c == '%' && !(i + 2 < n && is_hex((unsigned char)s[i + 1]) &&
                                  is_hex((unsigned char)s[i + 2])))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: the %s has a '%%' that is not followed by two hex "
                                        "digits",
                                        what, part);
        }
        return 0;
}

/* How many times a path is percent-decoded in search of a hidden '.', '/'
 * or '\'. Every level but the last is an encoding of '%' itself ("%25"),
 * which no real client nests this deep. */
#define PATH_DECODE_LEVELS 8

/* True when seg[0..len) is "." or "..": the segment a server resolves as
 * "here" or "up", once its path parameters (";..." as in RFC 2396, which
 * Tomcat, Jetty and Spring drop before they resolve dot segments) are gone. */
static bool segment_is_dots(const char *seg, size_t len)
{
        const char *semi = memchr(seg, ';', len);
        if (semi)
                len = (size_t)(semi - seg);
        return (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.');
}

/* Decodes every well-formed %XX of s[0..n) into d (room for n bytes);
 * returns the new length. A '%' without two hex digits stays as it is. */
static size_t percent_decode(const char *s, size_t n, char *d)
{
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '%' && i + 2 < n && is_hex((unsigned char)s[i + 1]) &&
                    is_hex((unsigned char)s[i + 2])) {
                        d[k++] = (char)(hex_value((unsigned char)s[i + 1]) * 16 +
                                        hex_value((unsigned char)s[i + 2]));
                        i += 2;
                        continue;
                }
                d[k++] = s[i];
        }
        return k;
}

/* Contract: returns 0 only when no spelling of the path p[0..n) can lead a
 * server outside the folder the allow-list compared it with; else code
 * (-EACCES for a request, -EINVAL for an entry) and a message saying why.
 *
 * Servers disagree on what a path means: some decode %2F into a separator,
 * some treat '\' as one (IIS, and Tomcat or Spring behind a proxy), some
 * drop ";parameters" before resolving "..", some decode twice (a proxy, then
 * the application). The allow-list compares the path as sent, so each of
 * those readings must lead where the text says. The path is therefore
 * refused when, at any level of percent-decoding (as sent, decoded once,
 * twice, ...), it holds a '\' or an encoded '.', '/' or '\' (%2E, %2F, %5C,
 * so also %252E and deeper), or a segment that is "." or ".." once its
 * ";" parameters are dropped. No client needs these: '.' is unreserved and
 * never needs encoding (RFC 3986, section 2.3), and "." and ".." segments
 * are resolved by the client before sending (section 5.2.4). Other escapes
 * ("%20", "%25", "%3B" in a name) pass unchanged. Like Apache's default
 * (AllowEncodedSlashes Off) and Tomcat's, an encoded '/' is refused even
 * where it would be harmless, because the allow-list cannot know which
 * reading the server takes. */
static int path_check_smuggling(const char *p, size_t n, int code, const char *what,
                                airlock_error *err)
{
        _cleanup_free_ char *a = malloc(n + 1), *b = malloc(n + 1);
        if (!a || !b)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        memcpy(a, p, n);
        size_t len = n;
        for (int level = 0;; level++) {
                if (memchr(a, '\\', len))
                        return al_error(err, code, NULL,
                                        "%s: the path contains a backslash%s, which some servers "
                                        "read as '/'",
                                        what, level ? " (percent-encoded)" : "");
                for (size_t i = 0; i + 2 < len; i++) {
                        if (a[i] != '%' || !is_hex((unsigned char)a[i + 1]) ||
                            !is_hex((unsigned char)a[i + 2]))
                                continue;
                        int v = hex_value((unsigned char)a[i + 1]) * 16 +
                                hex_value((unsigned char)a[i + 2]);
                        if (v == '.' || v == '/' || v == '\\')
                                return al_error(err, code, NULL,
                                                "%s: the path contains an encoded '%c' (%s%%%02X), "
                                                "which servers decode differently, so the "
                                                "allow-list cannot tell where it leads; write "
                                                "the path without it",
                                                what, v, level ? "encoded again as " : "", v);
                }
                for (size_t i = 0; i <= len;) {
                        const char *seg = a + i;
                        const char *slash = memchr(seg, '/', len - i);
                        size_t seg_len = slash ? (size_t)(slash - seg) : len - i;
                        if (segment_is_dots(seg, seg_len))
                                return al_error(err, code, NULL,
                                                "%s: the path has a '.' or '..' segment%s, which "
                                                "a server may resolve outside the allowed path; "
                                                "write the path without it",
                                                what,
                                                level ? " once percent-decoded"
                                                : memchr(seg, ';', seg_len)
                                                    ? " once its ';' parameters are dropped"
                                                    : "");
                        i += seg_len + 1;
                }
                if (!memchr(a, '%', len))
                        return 0;
                if (level + 1 >= PATH_DECODE_LEVELS)
                        return al_error(err, code, NULL,
                                        "%s: the path is still percent-encoded after %d rounds "
                                        "of decoding",
                                        what, PATH_DECODE_LEVELS);
                size_t next = percent_decode(a, len, b);
                if (next == len)
                        return 0; /* only stray '%' left: nothing decodes any more */
                char *t = a;
                a = b;
                b = t;
                len = next;
        }
}

/* ---- URLs --------------------------------------------------------------- */

void allowlist_url_free(url_parts *u)
{
        if (!u)
                return;
        free(u->scheme);
        free(u->host);
        free(u->path);
        free(u->query);
        *u = (url_parts){0};
}

/* Splits "http(s)://rest" into a scheme and the rest; what names the input. */
static int scheme_split(const char *s, const char *what, char **ret_scheme, const char **ret_rest,
                        airlock_error *err)
{
        const char *sep = strstr(s, "://");
        if (!sep)
                return al_error(err, -EINVAL, NULL, "%s: not an absolute http:// or https:// URL",
                                what);
        size_t n = (size_t)(sep - s);
        char *scheme = strndup(s, n);
        if (!scheme)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        str_lower(scheme);
        if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
                int r = al_error(err, -EINVAL, NULL,
                                 "%s: the scheme '%.32s' is not allowed (only http and https)",
                                 what, scheme);
                free(scheme);
                return r;
        }
        *ret_scheme = scheme;
        *ret_rest = sep + 3;
        return 0;
}

int allowlist_parse_url(const char *url, url_parts *ret, airlock_error *err)
{
        if (!url || !*url)
                return al_error(err, -EINVAL, NULL, "the URL is empty");
        size_t len = strlen(url);
        if (len > URL_MAX)
                return al_error(err, -EINVAL, NULL, "the URL is longer than %d bytes", URL_MAX);
        /* The message quotes the URL; keep it short enough to stay readable. */
        char what[160];
        snprintf(what, sizeof(what), "URL '%.120s%s'", url, len > 120 ? "..." : "");
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)url[i];
                if (c <= 0x20 || c >= 0x7f)
                        return al_error(err, -EINVAL, NULL,
                                        "%s contains a space, control or non-ASCII character at "
                                        "offset %zu (percent-encode it)",
                                        what, i);
        }
        url_parts u = {0};
        const char *rest;
        int r = scheme_split(url, what, &u.scheme, &rest, err);
        if (r < 0)
                return r;
        size_t auth_len = strcspn(rest, "/?#");
        /* WHATWG parsers read '\\' as '/' in http URLs, so a backslash in
         * the authority would end the host for them and not for us. */
        if (memchr(rest, '\\', auth_len)) {
                r = al_error(err, -EINVAL, NULL, "%s contains a backslash in the host part", what);
                goto fail;
        }
        int port = 0;
        r = authority_parse(rest, auth_len, what, &u.host, &port, &u.host_is_ip, err);
        if (r < 0)
                goto fail;
        u.port = port ? port : default_port(u.scheme);
        const char *p = rest + auth_len;
        size_t path_len = strcspn(p, "?#");
        /* A path that could be read as leaving the allowed folder is a
         * refusal of the allow-list (PermissionError), not a malformed URL;
         * it is judged before the character check so that a backslash gets
         * the reason that matters. */
        r = path_check_smuggling(p, path_len, -EACCES, what, err);
        if (r >= 0)
                r = text_check(p, path_len, "path", what, err);
        if (r < 0)
                goto fail;
        u.path = path_len ? strndup(p, path_len) : strdup("/");
        if (!u.path) {
                r = al_error(err, -ENOMEM, NULL, "out of memory");
                goto fail;
        }
        if (p[path_len] == '?') {
                const char *q = p + path_len + 1;
                size_t q_len = strcspn(q, "#");
                r = text_check(q, q_len, "query", what, err);
                if (r < 0)
                        goto fail;
                if (!(u.query = strndup(q, q_len))) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        goto fail;
                }
        }
        *ret = u;
        return 0;
fail:
        allowlist_url_free(&u);
        return r;
}

/* Appends scheme://host[:port] to b. */
static int origin_append(dynbuf *b, const char *scheme, const char *host, bool is_v6, int port)
{
        int r = dynbuf_appendf(b, "%s%s%s%s%s", scheme ? scheme : "", scheme ? "://" : "",
                               is_v6 ? "[" : "", host, is_v6 ? "]" : "");
        if (r >= 0 && port)
                r = dynbuf_appendf(b, ":%d", port);
        return r;
}

char *allowlist_format_url(const url_parts *u, bool with_query, bool always_port)
{
        dynbuf b;
        dynbuf_init(&b, URL_MAX + 64);
        bool v6 = strchr(u->host, ':') != NULL;
        int port = (always_port || u->port != default_port(u->scheme)) ? u->port : 0;
        int r = origin_append(&b, u->scheme, u->host, v6, port);
        if (r >= 0)
                r = dynbuf_append(&b, u->path, strlen(u->path));
        if (r >= 0 && with_query && u->query)
                r = dynbuf_appendf(&b, "?%s", u->query);
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        return dynbuf_take(&b, NULL);
}

/* ---- methods ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Checks one method token; what names the context for messages. */
static int method_check(const char *m, size_t n, const char *what, airlock_error *err)
{
        if (n == 0)
                return al_error(err, -EINVAL, NULL, "%s: a method is empty", what);
        if (n > METHOD_MAX_LEN)
                return al_error(err, -EINVAL, NULL, "%s: the method '%.*s...' is too long", what,
                                METHOD_MAX_LEN, m);
        for (size_t i = 0; i < n; i++)
                if (!is_tchar((unsigned char)m[i]))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: '%.*s' is not an HTTP method (letters, digits and "
                                        "!#$%%&'*+-.^_`|~ only)",
                                        what, (int)n, m);
        if ((n == 7 && strncasecmp(m, "CONNECT", 7) == 0) ||
            (n == 5 && strncasecmp(m, "TRACE", 5) == 0))
                return al_error(err, -EINVAL, NULL, "%s: %.*s is never allowed", what, (int)n, m);
        return 0;
}

/* Parses a comma-separated method list into a sorted, unique, upper-case,
 * NULL-terminated vector. NULL means every method ("*"). */
static int methods_parse(const char *methods, const char *what, char ***ret, size_t *ret_n,
                         airlock_error *err)
{
        char **v = calloc(METHODS_MAX + 1, sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        size_t n = 0;
        int r = 0;
        bool all = methods == NULL;
        if (methods) {
                const char *s = methods;
                while (*s == ' ' || *s == '\t')
                        s++;
                if (*s == '\0') {
                        r = al_error(err, -EINVAL, NULL, "%s: the method list is empty", what);
                        goto fail;
                }
                for (const char *p = methods;;) {
                        size_t tok = strcspn(p, ",");
                        const char *a = p, *b = p + tok;
                        while (a < b && (*a == ' ' || *a == '\t'))
                                a++;
                        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                                b--;
                        if (b - a == 1 && *a == '*') {
                                all = true;
                        } else {
                                r = method_check(a, (size_t)(b - a), what, err);
                                if (r < 0)
                                        goto fail;
                                char *m = strndup(a, (size_t)(b - a));
                                if (!m) {
                                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                                        goto fail;
                                }
                                for (char *c = m; *c; c++)
                                        *c = (char)toupper((unsigned char)*c);
                                bool dup = false;
                                for (size_t i = 0; i < n; i++)
                                        dup |= strcmp(v[i], m) == 0;
                                if (dup) {
                                        free(m);
                                } else if (n == METHODS_MAX) {
                                        free(m);
                                        r = al_error(err, -E2BIG, NULL, "%s: more than %d methods",
                                                     what, METHODS_MAX);
                                        goto fail;
                                } else {
                                        v[n++] = m;
                                }
                        }
                        if (p[tok] == '\0')
                                break;
                        p += tok + 1;
                }
        }
        if (all) {
                for (size_t i = 0; i < n; i++)
                        free(v[i]);
                memset(v, 0, (METHODS_MAX + 1) * sizeof(*v));
                if (!(v[0] = strdup("*"))) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        goto fail;
                }
                n = 1;
        }
        qsort(v, n, sizeof(*v), cmp_str);
        *ret = v;
        *ret_n = n;
        return 0;
fail:
        free_strv(v);
        return r;
}

static bool entry_allows_method(const allow_entry *e, const char *method)
{
        for (size_t i = 0; i < e->n_methods; i++)
                if (strcmp(e->methods[i], "*") == 0 || strcmp(e->methods[i], method) == 0)
                        return true;
        return false;
}

/* ---- the list ----------------------------------------------------------- */

int allowlist_new(net_allowlist **ret, airlock_error *err)
{
        net_allowlist *al = calloc(1, sizeof(*al));
        if (!al)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        *ret = al;
        return 0;
}

void allowlist_free(net_allowlist *al)
{
        if (!al)
                return;
        for (size_t i = 0; i < al->n; i++)
                entry_clear(&al->entries[i]);
        free(al->entries);
        free(al);
}

static char *strdup_or_null(const char *s, bool *oom)
{
        if (!s)
                return NULL;
        char *c = strdup(s);
        if (!c)
                *oom = true;
        return c;
}

static int entry_copy(const allow_entry *src, allow_entry *dst)
{
        bool oom = false;
        *dst = (allow_entry){0};
        dst->target = strdup_or_null(src->target, &oom);
        dst->scheme = strdup_or_null(src->scheme, &oom);
        dst->host = strdup_or_null(src->host, &oom);
        dst->path = strdup_or_null(src->path, &oom);
        dst->port = src->port;
        dst->methods = calloc(src->n_methods + 1, sizeof(char *));
        if (!dst->methods)
                oom = true;
        for (size_t i = 0; !oom && i < src->n_methods; i++) {
                dst->methods[i] = strdup_or_null(src->methods[i], &oom);
                dst->n_methods = i + 1;
        }
        if (oom) {
                entry_clear(dst);
                return -ENOMEM;
        }
        return 0;
}

int allowlist_clone(const net_allowlist *al, net_allowlist **ret, airlock_error *err)
{
        net_allowlist *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (al->n) {
                c->entries = calloc(al->n, sizeof(*c->entries));
                if (!c->entries) {
                        free(c);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
        }
        for (size_t i = 0; i < al->n; i++) {
                if (entry_copy(&al->entries[i], &c->entries[i]) < 0) {
                        allowlist_free(c);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                c->n++;
        }
        *ret = c;
        return 0;
}

/* Parses a target into e (methods left empty). */
static int target_parse(const char *t, size_t n, const char *what, allow_entry *e,
                        airlock_error *err)
{
        _cleanup_free_ char *s = strndup(t, n);
        if (!s)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c <= 0x20 || c >= 0x7f || c == '\\')
                        return al_error(err, -EINVAL, NULL,
                                        "%s: contains a space, backslash, control or non-ASCII "
                                        "character",
                                        what);
        }
        bool is_ip = false;
        int port = 0;
        int r;
        if (strstr(s, "://")) {
                const char *rest;
                r = scheme_split(s, what, &e->scheme, &rest, err);
                if (r < 0)
                        return r;
                size_t auth_len = strcspn(rest, "/?#");
                r = authority_parse(rest, auth_len, what, &e->host, &port, &is_ip, err);
                if (r < 0)
                        return r;
                const char *p = rest + auth_len;
                size_t path_len = strlen(p);
                if (strpbrk(p, "?#"))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: an entry cannot have a query or a fragment", what);
                r = text_check(p, path_len, "path", what, err);
                if (r >= 0)
                        r = path_check_smuggling(p, path_len, -EINVAL, what, err);
                if (r < 0)
                        return r;
                while (path_len > 0 && p[path_len - 1] == '/')
                        path_len--;
                if (!(e->path = strndup(p, path_len)))
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                /* The default port written out is the same rule as no port. */
                if (port == default_port(e->scheme))
                        port = 0;
        } else {
                /* A bare entry may end in '/', which normalisation drops. */
                while (n > 0 && s[n - 1] == '/')
                        s[--n] = '\0';
                if (strpbrk(s, "/?#"))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: a path needs a scheme (write "
                                        "https://host/path)",
                                        what);
                r = authority_parse(s, n, what, &e->host, &port, &is_ip, err);
                if (r < 0)
                        return r;
                if (!(e->path = strdup("")))
                        return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        e->port = port;
        dynbuf b;
        dynbuf_init(&b, ALLOW_TARGET_MAX * 2);
        r = origin_append(&b, e->scheme, e->host, strchr(e->host, ':') != NULL, port);
        if (r >= 0)
                r = dynbuf_append(&b, e->path, strlen(e->path));
        if (r < 0 || !(e->target = dynbuf_take(&b, NULL))) {
                dynbuf_free(&b);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        return 0;
}

int allowlist_add(net_allowlist *al, const char *target, const char *methods, airlock_error *err)
{
        if (!target)
                return al_error(err, -EINVAL, NULL, "allow-list entry is empty");
        const char *a = target, *b = target + strlen(target);
        while (a < b && isspace((unsigned char)*a))
                a++;
        while (b > a && isspace((unsigned char)b[-1]))
                b--;
        if (a == b)
                return al_error(err, -EINVAL, NULL, "allow-list entry is empty");
        if (b - a > ALLOW_TARGET_MAX)
                return al_error(err, -EINVAL, NULL,
                                "allow-list entry '%.64s...' is longer than %d characters", a,
                                ALLOW_TARGET_MAX);
        char what[ALLOW_TARGET_MAX + 32];
        snprintf(what, sizeof(what), "allow-list entry '%.*s'", (int)(b - a), a);
        allow_entry e = {0};
        int r = target_parse(a, (size_t)(b - a), what, &e, err);
        if (r >= 0)
                r = methods_parse(methods, what, &e.methods, &e.n_methods, err);
        if (r < 0) {
                entry_clear(&e);
                return r;
        }
        for (size_t i = 0; i < al->n; i++) {
                if (strcmp(al->entries[i].target, e.target) == 0) {
                        free_strv(al->entries[i].methods);
                        al->entries[i].methods = TAKE_PTR(e.methods);
                        al->entries[i].n_methods = e.n_methods;
                        entry_clear(&e);
                        return 0;
                }
        }
        if (al->n >= ALLOWLIST_MAX_ENTRIES) {
                entry_clear(&e);
                return al_error(err, -E2BIG, NULL, "too many allow-list entries (at most %d)",
                                ALLOWLIST_MAX_ENTRIES);
        }
        allow_entry *v = realloc(al->entries, (al->n + 1) * sizeof(*v));
        if (!v) {
                entry_clear(&e);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        al->entries = v;
        v[al->n++] = e;
        return 0;
}

size_t allowlist_count(const net_allowlist *al)
{
        return al ? al->n : 0;
}

const allow_entry *allowlist_get(const net_allowlist *al, size_t i)
{
        return al && i < al->n ? &al->entries[i] : NULL;
}

/* ---- matching ----------------------------------------------------------- */

static bool entry_matches_origin(const allow_entry *e, const url_parts *u)
{
        if (e->scheme && strcmp(e->scheme, u->scheme) != 0)
                return false;
        if (strcmp(e->host, u->host) != 0)
                return false;
        int want = e->port ? e->port : default_port(u->scheme);
        return u->port == want;
}

/* A prefix matches on a segment boundary: "/api" covers "/api" and "/api/x"
 * but not "/apiary". The query is not part of the path. */
static bool entry_matches_path(const allow_entry *e, const url_parts *u)
{
        size_t n = strlen(e->path);
        if (n == 0)
                return true;
        return strncmp(u->path, e->path, n) == 0 && (u->path[n] == '\0' || u->path[n] == '/');
}

static void methods_join(const allow_entry *e, const char *extra, char *buf, size_t size)
{
        size_t k = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < e->n_methods; i++)
                k += (size_t)snprintf(buf + MIN(k, size), k < size ? size - k : 0, "%s%s",
                                      i ? "," : "", e->methods[i]);
        if (extra)
                snprintf(buf + MIN(k, size), k < size ? size - k : 0, ",%s", extra);
}

int allowlist_check(const net_allowlist *al, const char *method, const url_parts *url,
                    const allow_entry **ret_entry, airlock_error *err)
{
        _cleanup_free_ char *shown = allowlist_format_url(url, true, false);
        if (!shown)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (!method || method_check(method, strlen(method), "request", NULL) < 0) {
                if (method &&
                    (strcasecmp(method, "CONNECT") == 0 || strcasecmp(method, "TRACE") == 0))
                        return al_error(err, -EACCES, NULL,
                                        "%s %.200s is not allowed: %s is never allowed", method,
                                        shown, method);
                return al_error(err, -EINVAL, NULL, "'%.40s' is not an HTTP method",
                                method ? method : "");
        }
        const allow_entry *path_miss = NULL, *method_miss = NULL;
        for (size_t i = 0; al && i < al->n; i++) {
                const allow_entry *e = &al->entries[i];
                if (!entry_matches_origin(e, url))
                        continue;
                if (!entry_matches_path(e, url)) {
                        path_miss = path_miss ? path_miss : e;
                        continue;
                }
                if (!entry_allows_method(e, method)) {
                        method_miss = method_miss ? method_miss : e;
                        continue;
                }
                if (ret_entry)
                        *ret_entry = e;
                return 0;
        }
        if (method_miss) {
                char have[512], want[600];
                methods_join(method_miss, NULL, have, sizeof(have));
                methods_join(method_miss, method, want, sizeof(want));
                return al_error(err, -EACCES, NULL,
                                "%s %.200s is not allowed: the allow-list entry %s allows only "
                                "%s (add --allow-domain %s=%s)",
                                method, shown, method_miss->target, have, method_miss->target,
                                want);
        }
        if (path_miss)
                return al_error(err, -EACCES, NULL,
                                "%s %.200s is not allowed: the allow-list entry %s covers only "
                                "paths under %s",
                                method, shown, path_miss->target, path_miss->path);
        /* Suggest the smallest entry that would allow the request. */
        bool v6 = strchr(url->host, ':') != NULL;
        int port = url->port != default_port(url->scheme) ? url->port : 0;
        return al_error(err, -EACCES, NULL,
                        "%s %.200s is not allowed: no allow-list entry for %s://%s%s%s%s%.0d "
                        "(add --allow-domain %s%s%s%s%.0d=%s)",
                        method, shown, url->scheme, v6 ? "[" : "", url->host, v6 ? "]" : "",
                        port ? ":" : "", port, v6 ? "[" : "", url->host, v6 ? "]" : "",
                        port ? ":" : "", port, method);
}

/* ---- fingerprints ------------------------------------------------------- */

static int cmp_entry(const void *a, const void *b)
{
        return strcmp((*(allow_entry *const *)a)->target, (*(allow_entry *const *)b)->target);
}

char *allowlist_fingerprint_text(const net_allowlist *al)
{
        size_t n = allowlist_count(al);
        _cleanup_free_ const allow_entry **sorted = calloc(n + 1, sizeof(*sorted));
        json_t *arr = json_array();
        if (!sorted || !arr) {
                json_decref(arr);
                return NULL;
        }
        for (size_t i = 0; i < n; i++)
                sorted[i] = &al->entries[i];
        /* Order does not change what is allowed, so it does not change the print. */
        qsort(sorted, n, sizeof(*sorted), cmp_entry);
        for (size_t i = 0; i < n; i++) {
                json_t *m = json_array();
                for (size_t j = 0; m && j < sorted[i]->n_methods; j++)
                        json_array_append_new(m, json_string(sorted[i]->methods[j]));
                json_array_append_new(
                    arr, json_pack("{s:s,s:o*}", "target", sorted[i]->target, "methods", m));
        }
        char *s = json_dumps(arr, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(arr);
        return s;
}
