/* The HTTP gateway: a guest's request, checked and performed on the host.
 *
 * Order of checks: the request's shape, the URL (strict parser), the
 * allow-list, headers and body caps, then the addresses the host name
 * resolves to. curl is then pinned to exactly those addresses
 * (CURLOPT_RESOLVE) and an open-socket callback refuses any other, so no
 * second resolution can move the request somewhere that was not checked. */
#include "host/gateway.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "curl_dl.h"
#include "core/wire_table.h"
#include "host/secrets.h"

#define GW_MAX_ADDRS         16
#define GW_MAX_REQ_HEADERS   100
#define GW_MAX_REQ_HEADER    8192        /* name and value of one request header */
#define GW_MAX_REQ_HDR_TOTAL (64u << 10) /* all request headers */
#define GW_MAX_RESP_HEADERS  (256u << 10)
#define GW_MAX_RESP_HDR_N    500
#define GW_METHOD_MAX        32

/* ---- address classes ---------------------------------------------------- */

static const char *ipv4_kind(uint32_t a)
{
        if (a == 0xa9fea9feu) /* 169.254.169.254 */
                return "metadata";
        if ((a >> 24) == 127)
                return "loopback";
        if ((a >> 24) == 0)
                return "unspecified";
        if ((a >> 24) == 10 || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8)
                return "private";
        if ((a >> 22) == (100u << 2 | 1)) /* 100.64.0.0/10 */
                return "shared (CGNAT)";
        if ((a >> 16) == 0xa9fe)
                return "link-local";
        if ((a >> 8) == 0xc00000) /* 192.0.0.0/24: protocol assignments, e.g. 192.0.0.192 */
                return "reserved";
        if ((a >> 17) == (0xc612u >> 1)) /* 198.18.0.0/15 */
                return "benchmarking";
        if (a == 0xffffffffu)
                return "broadcast";
        if ((a >> 28) == 0xe)
                return "multicast";
        if ((a >> 28) == 0xf)
                return "reserved";
        return NULL;
}

const char *gateway_guest_exception(int r)
{
#define GATEWAY_EXCEPTION_CASE(code, when, kind)                                                   \
        case -code:                                                                                \
                return WIRE_KIND_##kind;
        switch (r) {
                WIRE_ERRORS(GATEWAY_EXCEPTION_CASE)
        default:
                return WIRE_KIND_OS;
        }
#undef GATEWAY_EXCEPTION_CASE
}

const char *gateway_address_kind(const struct sockaddr *sa)
{
        if (sa->sa_family == AF_INET)
                return ipv4_kind(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
        if (sa->sa_family != AF_INET6)
                return "not an internet address";
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const uint8_t zero[16] = {0};
        static const uint8_t ec2_metadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0,    0,
                                                 0,    0,    0,    0,    0, 0, 0x02, 0x54};
        uint32_t v4;
        if (memcmp(b, zero, 16) == 0)
                return "unspecified";
        if (memcmp(b, zero, 15) == 0 && b[15] == 1)
                return "loopback";
        if (memcmp(b, ec2_metadata, 16) == 0)
                return "metadata";
        /* IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d. */
        if (memcmp(b, zero, 10) == 0 &&
            ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0))) {
                memcpy(&v4, b + 12, 4);
                const char *k = ipv4_kind(ntohl(v4));
                return k ? k : (b[10] ? NULL : "reserved (IPv4-compatible)");
        }
        /* NAT64 64:ff9b::a.b.c.d reaches the IPv4 address it carries. */
        static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
        if (memcmp(b, nat64, 12) == 0) {
                memcpy(&v4, b + 12, 4);
                return ipv4_kind(ntohl(v4));
        }
        /* 6to4 2002:a.b.c.d::/48 likewise. */
        if (b[0] == 0x20 && b[1] == 0x02) {
                memcpy(&v4, b + 2, 4);
                const char *k = ipv4_kind(ntohl(v4));
                if (k)
                        return k;
        }
        if (b[0] == 0xff)
                return "multicast";
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
                return "link-local";
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
                return "site-local";
        if ((b[0] & 0xfe) == 0xfc)
                return "unique-local";
        return NULL;
}

static bool address_is_loopback(const struct sockaddr *sa)
{
        const char *k = gateway_address_kind(sa);
        return k && strcmp(k, "loopback") == 0;
}

static void address_text(const struct sockaddr *sa, char *buf, size_t size)
{
        const void *a = sa->sa_family == AF_INET
                            ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                            : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)size))
                snprintf(buf, size, "?");
}

static bool address_equal(const struct sockaddr *a, const struct sockaddr *b)
{
        if (a->sa_family != b->sa_family)
                return false;
        if (a->sa_family == AF_INET)
                return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
                       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* ---- resolution --------------------------------------------------------- */

static int resolve_getaddrinfo(const char *host, struct sockaddr_storage *addrs, size_t max)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int r = getaddrinfo(host, NULL, &hints, &res);
        if (r != 0)
                return r == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
        size_t n = 0;
        for (struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
                if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
                    ai->ai_addrlen > sizeof(*addrs))
                        continue;
                bool dup = false;
                for (size_t i = 0; i < n; i++)
                        dup |= address_equal((struct sockaddr *)&addrs[i], ai->ai_addr);
                if (dup)
                        continue;
                memset(&addrs[n], 0, sizeof(addrs[n]));
                memcpy(&addrs[n], ai->ai_addr, ai->ai_addrlen);
                n++;
        }
        freeaddrinfo(res);
        return n ? (int)n : -EHOSTUNREACH;
}

static gateway_resolver_fn resolver = resolve_getaddrinfo;

void gateway_set_resolver(gateway_resolver_fn fn)
{
        resolver = fn ? fn : resolve_getaddrinfo;
}

/* The addresses a request may connect to: the literal address of an IP
 * host, or every address of a name, each of which must be an ordinary
 * public address, except that "localhost" may be loopback. The allow-list
 * entry matched the host exactly, so a literal address or "localhost" in
 * the URL is one the entry names itself. */
static int addresses_check(const url_parts *u, const char *method, const char *shown,
                           struct sockaddr_storage *addrs, size_t *ret_n, airlock_error *err)
{
        size_t n = 0;
        if (u->host_is_ip) {
                memset(&addrs[0], 0, sizeof(addrs[0]));
                if (strchr(u->host, ':')) {
                        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&addrs[0];
                        s6->sin6_family = AF_INET6;
                        if (inet_pton(AF_INET6, u->host, &s6->sin6_addr) != 1)
                                return al_error(err, -EINVAL, NULL, "%s %s: bad address", method,
                                                shown);
                } else {
                        struct sockaddr_in *s4 = (struct sockaddr_in *)&addrs[0];
                        s4->sin_family = AF_INET;
                        if (inet_pton(AF_INET, u->host, &s4->sin_addr) != 1)
                                return al_error(err, -EINVAL, NULL, "%s %s: bad address", method,
                                                shown);
                }
                *ret_n = 1;
                return 0;
        }
        int r = resolver(u->host, addrs, GW_MAX_ADDRS);
        if (r < 0)
                return al_error(err, r == -ENOMEM ? -ENOMEM : -EHOSTUNREACH, NULL,
                                "%s %s failed: the host name %s does not resolve", method, shown,
                                u->host);
        n = (size_t)r;
        bool is_localhost = strcmp(u->host, "localhost") == 0;
        for (size_t i = 0; i < n; i++) {
                const struct sockaddr *sa = (const struct sockaddr *)&addrs[i];
                const char *kind = gateway_address_kind(sa);
                if (!kind || (is_localhost && address_is_loopback(sa)))
                        continue;
                char text[INET6_ADDRSTRLEN];
                address_text(sa, text, sizeof(text));
                return al_error(err, -EACCES, NULL,
                                "%s %s is not allowed: %s resolves to %s, a %s address; only an "
                                "allow-list entry naming that address itself (or localhost for "
                                "loopback) may reach it",
                                method, shown, u->host, text, kind);
        }
        *ret_n = n;
        return 0;
}

/* ---- the transfer ------------------------------------------------------- */

typedef struct transfer {
        dynbuf body;
        json_t *headers;
        size_t header_bytes;
        size_t header_count;
        bool body_too_big;
        bool headers_too_big;
        bool bad_socket;
        bool cancelled;
        bool run_limit;    /* the run's deadline, not the HTTP timeout, bounds it */
        bool headers_done; /* the blank line that ends the headers came */
        const secret_store *ss;
        const struct sockaddr_storage *addrs;
        size_t n_addrs;
        uint16_t port;
} transfer;

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
        transfer *t = userdata;
        size_t n = size * nmemb;
        if (dynbuf_append(&t->body, data, n) < 0) {
                t->body_too_big = true;
                return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
        return n;
}

/* One response header line. A status line starts a new header block (after
 * a 1xx interim response). Names are lower-cased; repeats are joined with
 * ", "; bytes that are not UTF-8 become U+FFFD, since JSON needs UTF-8. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata)
{
        transfer *t = userdata;
        size_t n = size * nmemb;
        t->header_bytes += n;
        if (t->header_bytes > GW_MAX_RESP_HEADERS || t->header_count >= GW_MAX_RESP_HDR_N) {
                t->headers_too_big = true;
                return 0;
        }
        if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
                json_object_clear(t->headers);
                t->header_count = 0;
                t->headers_done = false;
                return n;
        }
        if ((n == 2 && data[0] == '\r') || (n == 1 && data[0] == '\n')) {
                t->headers_done = true;
                return n;
        }
        const char *colon = memchr(data, ':', n);
        if (!colon || colon == data)
                return n; /* the blank line, or an obsolete folded line */
        size_t name_len = (size_t)(colon - data);
        /* "Content-Encoding : gzip" is refused by a strict parser and is
         * Content-Encoding to a lax one, such as the guest's code: the name
         * loses that whitespace, so that the checks below see the field. */
        while (name_len && (data[name_len - 1] == ' ' || data[name_len - 1] == '\t'))
                name_len--;
        if (!name_len)
                return n;
        const char *v = colon + 1, *end = data + n;
        while (v < end && (*v == ' ' || *v == '\t'))
                v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
                end--;
        /* The scrub sees the bytes as they came: replacing the bytes that
         * are not UTF-8 first would change a value that has some. */
        char *raw_name = NULL, *raw_value = NULL;
        size_t rn = 0, rv = 0;
        int a = secrets_scrub(t->ss, data, name_len, &raw_name, &rn);
        int b = secrets_scrub(t->ss, v, (size_t)(end - v), &raw_value, &rv);
        if (a < 0 || b < 0) {
                free(raw_name);
                free(raw_value);
                return 0;
        }
        _cleanup_free_ char *name =
            a ? al_utf8_sanitize(raw_name, rn) : al_utf8_sanitize(data, name_len);
        _cleanup_free_ char *value =
            b ? al_utf8_sanitize(raw_value, rv) : al_utf8_sanitize(v, (size_t)(end - v));
        free(raw_name);
        free(raw_value);
        if (!name || !value)
                return 0;
        for (char *c = name; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        json_t *old = json_object_get(t->headers, name);
        if (old) {
                _cleanup_free_ char *joined = NULL;
                if (asprintf(&joined, "%s, %s", json_string_value(old), value) < 0)
                        return 0;
                json_object_set_new(t->headers, name, json_string(joined));
        } else {
                json_object_set_new(t->headers, name, json_string(value));
                t->header_count++;
        }
        return n;
}

/* The last line of defence: whatever curl decided, a socket may only go to
 * an address that was checked. */
static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *address)
{
        transfer *t = clientp;
        bool ok = false;
        for (size_t i = 0; i < t->n_addrs && !ok; i++)
                ok = address->addrlen >= sizeof(struct sockaddr_in) &&
                     address_equal(&address->addr, (const struct sockaddr *)&t->addrs[i]);
        if (ok && address->family == AF_INET)
                ok = ntohs(((struct sockaddr_in *)&address->addr)->sin_port) == t->port;
        else if (ok && address->family == AF_INET6)
                ok = ntohs(((struct sockaddr_in6 *)&address->addr)->sin6_port) == t->port;
        if (!ok) {
                t->bad_socket = true;
                return CURL_SOCKET_BAD;
        }
        int fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

/* Request headers a guest may not set: the gateway decides the target and
 * the framing. A guest-chosen Host would reach another virtual host on the
 * checked address than the one the allow-list names. */
static const char *const reserved_headers[] = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-connection",
    "proxy-authorization",
};

static bool is_tchar(unsigned char c)
{
        return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Frees a header list whose lines may hold a secret's value, zeroing
 * them first. */
static void headers_wipe_free(struct curl_slist *list)
{
        for (struct curl_slist *l = list; l; l = l->next)
                explicit_bzero(l->data, strlen(l->data));
        al_cu->slist_free_all(list);
}

/* Builds the curl header list from the guest's {"name": "value"} object.
 * Names must be tokens; values may not hold CR, LF, NUL or other control
 * characters but tab, which is what header injection needs. A value with
 * the placeholder of a secret whose targets match (method, u) carries the
 * secret's value instead (secrets_substitute); the caps apply to what the
 * guest sent. */
static int headers_build(const json_t *headers, const char *method, const char *shown,
                         const secret_store *ss, const url_parts *u, struct curl_slist **ret,
                         bool *ret_has_ctype, airlock_error *err)
{
        struct curl_slist *list = NULL;
        bool has_ctype = false;
        size_t total = 0;
        if (headers && !json_is_null(headers) && !json_is_object(headers))
                return al_error(err, -EINVAL, NULL, "%s %s: \"headers\" must be an object", method,
                                shown);
        if (json_object_size(headers) > GW_MAX_REQ_HEADERS)
                return al_error(err, -E2BIG, NULL, "%s %s: more than %d headers", method, shown,
                                GW_MAX_REQ_HEADERS);
        const char *name;
        const json_t *v;
        json_object_foreach ((json_t *)headers, name, v) {
                /* Declared before any jump to fail: the cleanup must never
                 * see an uninitialised pointer. */
                _cleanup_free_ char *line = NULL;
                int r = 0;
                size_t nlen = strlen(name);
                if (!json_is_string(v)) {
                        r = al_error(err, -EINVAL, NULL,
                                     "%s %s: the value of header '%.64s' must be a string", method,
                                     shown, name);
                        goto fail;
                }
                const char *val = json_string_value(v);
                size_t vlen = json_string_length(v);
                /* A NUL inside a key would hide the rest of it from strlen(). */
                bool name_ok =
                    nlen > 0 && json_object_iter_key_len(json_object_key_to_iter(name)) == nlen;
                for (size_t i = 0; i < nlen; i++)
                        name_ok &= is_tchar((unsigned char)name[i]);
                if (!name_ok) {
                        r = al_error(err, -EINVAL, NULL,
                                     "%s %s: '%.64s' is not a valid header name", method, shown,
                                     name);
                        goto fail;
                }
                for (size_t i = 0; i < vlen; i++) {
                        unsigned char c = (unsigned char)val[i];
                        if ((c < 0x20 && c != '\t') || c == 0x7f) {
                                r = al_error(err, -EINVAL, NULL,
                                             "%s %s: the value of header '%.64s' contains a "
                                             "control character (CR, LF and NUL are refused)",
                                             method, shown, name);
                                goto fail;
                        }
                }
                for (size_t i = 0; i < ARRAY_SIZE(reserved_headers); i++)
                        if (strcasecmp(name, reserved_headers[i]) == 0) {
                                r = al_error(err, -EINVAL, NULL,
                                             "%s %s: the header '%s' is set by the gateway and "
                                             "cannot be given",
                                             method, shown, name);
                                goto fail;
                        }
                if (nlen + vlen > GW_MAX_REQ_HEADER ||
                    (total += nlen + vlen + 4) > GW_MAX_REQ_HDR_TOTAL) {
                        r = al_error(err, -E2BIG, NULL, "%s %s: the headers are too large", method,
                                     shown);
                        goto fail;
                }
                has_ctype |= strcasecmp(name, "content-type") == 0;
                /* With secrets, responses must come as they are, so that
                 * the scrub sees the bytes the guest gets: the guest's
                 * Accept-Encoding gives way to identity (below). */
                if (secrets_count(ss) && strcasecmp(name, "accept-encoding") == 0)
                        continue;
                char *real = NULL;
                size_t real_len = 0;
                int sr = secrets_substitute(ss, method, u, SECRET_IN_HEADER, val, vlen, &real,
                                            &real_len);
                if (sr < 0) {
                        r = sr == -E2BIG ? al_error(err, -E2BIG, NULL,
                                                    "%s %s: the header '%.64s' grows past %u "
                                                    "bytes with the secrets' values",
                                                    method, shown, name, SECRETS_GROWTH_MAX)
                                         : al_error(err, -ENOMEM, NULL, "out of memory");
                        goto fail;
                }
                /* "Name;" is curl's way to send a header with an empty value;
                 * "Name:" would remove it. */
                int lr = asprintf(&line, vlen ? "%s: %s" : "%s;", name, sr > 0 ? real : val);
                secrets_wipe_free(real, real_len);
                if (lr < 0) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        goto fail;
                }
                struct curl_slist *l = al_cu->slist_append(list, line);
                explicit_bzero(line, (size_t)lr);
                if (!l) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        goto fail;
                }
                list = l;
                continue;
        fail:
                headers_wipe_free(list);
                return r;
        }
        /* No "Expect: 100-continue" round trip for large bodies. */
        struct curl_slist *l = al_cu->slist_append(list, "Expect:");
        if (l && secrets_count(ss))
                l = al_cu->slist_append(l, "Accept-Encoding: identity");
        if (!l) {
                headers_wipe_free(list);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = l;
        *ret_has_ctype = has_ctype;
        return 0;
}

static int curl_failure(CURLcode c, const transfer *t, const char *errbuf, const char *method,
                        const char *shown, const airlock_limits *lim, airlock_error *err)
{
        const char *detail = errbuf[0] ? errbuf : al_cu->easy_strerror(c);
        if (t->bad_socket)
                return al_error(err, -EACCES, NULL,
                                "%s %s is not allowed: a connection to an address that was not "
                                "checked was refused",
                                method, shown);
        if (t->body_too_big || c == CURLE_FILESIZE_EXCEEDED)
                return al_error(err, -E2BIG, NULL, "%s %s failed: response body exceeds %llu bytes",
                                method, shown, (unsigned long long)lim->http_max_response);
        if (t->headers_too_big)
                return al_error(err, -E2BIG, NULL,
                                "%s %s failed: response headers exceed %u bytes or %d lines",
                                method, shown, GW_MAX_RESP_HEADERS, GW_MAX_RESP_HDR_N);
        /* libcurl keeps one header line in a buffer capped at
         * CURL_MAX_HTTP_HEADER and reports a longer one as out of memory:
         * it is a cap, not the host's memory (nor the run's). */
        if (c == CURLE_OUT_OF_MEMORY && !t->headers_done)
                return al_error(err, -E2BIG, NULL,
                                "%s %s failed: a response header line exceeds %d bytes (the "
                                "cap on one header)",
                                method, shown, CURL_MAX_HTTP_HEADER);
        if (c == CURLE_RECV_ERROR && strstr(detail, "Too large response headers"))
                return al_error(err, -E2BIG, NULL,
                                "%s %s failed: response headers exceed %u bytes or %d lines",
                                method, shown, GW_MAX_RESP_HEADERS, GW_MAX_RESP_HDR_N);
        if (t->cancelled)
                return al_error(err, -ECANCELED, NULL, "%s %s was stopped: the run was cancelled",
                                method, shown);
        if (c == CURLE_OPERATION_TIMEDOUT && t->run_limit)
                return al_error(err, -ETIMEDOUT, NULL,
                                "%s %s failed: no complete response before the run's time limit",
                                method, shown);
        switch (c) {
        case CURLE_OPERATION_TIMEDOUT:
                return al_error(err, -ETIMEDOUT, NULL,
                                "%s %s failed: no complete response within %g s", method, shown,
                                lim->http_timeout_s);
        case CURLE_COULDNT_CONNECT:
                return al_error(err, -ECONNREFUSED, NULL, "%s %s failed: cannot connect: %s",
                                method, shown, detail);
        case CURLE_COULDNT_RESOLVE_HOST:
                return al_error(err, -EHOSTUNREACH, NULL, "%s %s failed: %s", method, shown,
                                detail);
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
                return al_error(err, -ECONNRESET, NULL, "%s %s failed: %s", method, shown, detail);
        case CURLE_OUT_OF_MEMORY:
                return al_error(err, -ENOMEM, NULL, "%s %s failed: out of memory", method, shown);
        default:
                return al_error(err, -EIO, NULL, "%s %s failed: %s", method, shown, detail);
        }
}

/* Methods that carry a body by nature get "Content-Length: 0" even when it
 * is empty; servers may refuse them without (411 Length Required). */
static bool sends_length(const char *method)
{
        return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0;
}

/* Runs the transfer; with a cancel fd through a multi handle, whose poll
 * watches that fd too, so that cancelling takes effect at once. */
static CURLcode perform(CURL *h, int cancel_fd, bool *ret_cancelled)
{
        if (cancel_fd < 0)
                return al_cu->easy_perform(h);
        CURLM *m = al_cu->multi_init();
        if (!m)
                return CURLE_OUT_OF_MEMORY;
        if (al_cu->multi_add_handle(m, h) != CURLM_OK) {
                al_cu->multi_cleanup(m);
                return CURLE_FAILED_INIT;
        }
        CURLcode result = CURLE_FAILED_INIT;
        int running = 1;
        while (running) {
                if (al_cu->multi_perform(m, &running) != CURLM_OK)
                        break;
                if (!running) {
                        int left;
                        CURLMsg *msg;
                        while ((msg = al_cu->multi_info_read(m, &left)))
                                if (msg->msg == CURLMSG_DONE)
                                        result = msg->data.result;
                        break;
                }
                struct curl_waitfd w = {.fd = cancel_fd, .events = CURL_WAIT_POLLIN};
                if (al_cu->multi_poll(m, &w, 1, 1000, NULL) != CURLM_OK)
                        break;
                if (w.revents) {
                        *ret_cancelled = true;
                        result = CURLE_ABORTED_BY_CALLBACK;
                        break;
                }
        }
        al_cu->multi_remove_handle(m, h);
        al_cu->multi_cleanup(m);
        return result;
}

/* Runs the checked request. The RESOLVE list pins curl to addrs. */
/* Puts the placeholder in place of every secret's value, raw or encoded,
 * in the response's header names and values and its body, before the guest
 * sees them: a server that echoes the request echoes the value. */
static int response_scrub(const secret_store *ss, transfer *t)
{
        if (!secrets_count(ss))
                return 0;
        char *clean = NULL;
        size_t n = 0;
        int r = secrets_scrub(ss, t->body.data ? t->body.data : "", t->body.len, &clean, &n);
        if (r < 0)
                return r;
        if (r > 0) {
                explicit_bzero(t->body.data, t->body.len);
                dynbuf_free(&t->body);
                dynbuf_init(&t->body, n + 1);
                r = dynbuf_append(&t->body, clean, n);
                free(clean);
                if (r < 0)
                        return r;
                /* The length the server gave would tell the guest the
                 * value's length: the header describes the body it gets. */
                if (json_object_get(t->headers, "content-length")) {
                        char len_text[32];
                        snprintf(len_text, sizeof(len_text), "%zu", n);
                        if (json_object_set_new(t->headers, "content-length",
                                                json_string(len_text)) < 0)
                                return -ENOMEM;
                }
        }
        /* Values in place (a key that exists is replaced without a rehash,
         * so the iteration stays valid); a name that needs it (rare) makes
         * a new object. */
        const char *name;
        json_t *v;
        bool names = false;
        json_object_foreach (t->headers, name, v) {
                char *cv = NULL;
                size_t nv = 0;
                if (!names && secrets_scrub(ss, name, strlen(name), &cv, &nv) != 0) {
                        free(cv);
                        names = true;
                        cv = NULL;
                }
                r = secrets_scrub(ss, json_string_value(v), json_string_length(v), &cv, &nv);
                if (r < 0)
                        return r;
                if (r > 0) {
                        r = json_object_set_new(t->headers, name, json_stringn(cv, nv));
                        free(cv);
                        if (r < 0)
                                return -ENOMEM;
                }
        }
        if (!names)
                return 0;
        json_t *out = json_object();
        if (!out)
                return -ENOMEM;
        json_object_foreach (t->headers, name, v) {
                char *cn = NULL;
                size_t nn = 0;
                int a = secrets_scrub(ss, name, strlen(name), &cn, &nn);
                int set = a < 0 ? -1 : json_object_set(out, a > 0 ? cn : name, v);
                free(cn);
                if (set < 0) {
                        json_decref(out);
                        return -ENOMEM;
                }
        }
        json_decref(t->headers);
        t->headers = out;
        return 0;
}

/* curl's --resolve line that pins host:port to the addresses the checks
 * allowed, so that curl connects to nothing else (NULL and 0 for an IP
 * literal, which needs none); -ENOMEM. */
static int resolve_list(const url_parts *u, const struct sockaddr_storage *addrs, size_t n_addrs,
                        struct curl_slist **ret)
{
        *ret = NULL;
        if (u->host_is_ip)
                return 0;
        dynbuf b;
        dynbuf_init(&b, 4096);
        int r = dynbuf_appendf(&b, "%s:%d:", u->host, u->port);
        for (size_t i = 0; r >= 0 && i < n_addrs; i++) {
                char text[INET6_ADDRSTRLEN];
                const struct sockaddr *sa = (const struct sockaddr *)&addrs[i];
                address_text(sa, text, sizeof(text));
                r = dynbuf_appendf(&b, sa->sa_family == AF_INET6 ? "%s[%s]" : "%s%s", i ? "," : "",
                                   text);
        }
        _cleanup_free_ char *line = r >= 0 ? dynbuf_take(&b, NULL) : NULL;
        dynbuf_free(&b);
        if (!line || !(*ret = al_cu->slist_append(NULL, line)))
                return -ENOMEM;
        return 0;
}

/* The transfer's time: the gateway's timeout, or what is left of the run
 * when that is shorter (t->run_limit then says so), clamped to [1 ms,
 * 30 days] so that no limit value overflows a long. */
static long transfer_timeout_ms(const airlock_limits *lim, uint64_t deadline_ns, transfer *t)
{
        double t_ms = lim->http_timeout_s * 1000.0;
        long timeout_ms = !(t_ms >= 1) ? 1 : t_ms > 2592000000.0 ? 2592000000L : (long)t_ms;
        if (deadline_ns) {
                uint64_t now = al_now_ns();
                long left_ms = now >= deadline_ns
                                   ? 1
                                   : (long)MIN((deadline_ns - now) / 1000000 + 1, 2592000000ull);
                if (left_ms < timeout_ms) {
                        timeout_ms = left_ms;
                        t->run_limit = true;
                }
        }
        return timeout_ms;
}

/* Sets every option of the transfer h: one request to the pinned
 * addresses, no redirect, no proxy, the caps of the limits. */
static CURLcode transfer_setup(CURL *h, transfer *t, const char *url, char *errbuf,
                               const char *method, struct curl_slist *headers,
                               struct curl_slist *resolve, const unsigned char *body,
                               size_t body_len, bool has_body, long timeout_ms,
                               const airlock_limits *lim)
{
        CURLcode c = CURLE_OK;
#define SET(opt, val)                                                                              \
        do {                                                                                       \
                if (c == CURLE_OK)                                                                 \
                        c = al_cu->easy_setopt(h, opt, val);                                       \
        } while (0)
        SET(CURLOPT_URL, url);
        SET(CURLOPT_ERRORBUFFER, errbuf);
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
        SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        SET(CURLOPT_FOLLOWLOCATION, 0L);
        SET(CURLOPT_PROXY, "");
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_TIMEOUT_MS, timeout_ms);
        SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
        SET(CURLOPT_PATH_AS_IS, 1L);
        SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)lim->http_max_response);
        SET(CURLOPT_WRITEFUNCTION, on_body);
        SET(CURLOPT_WRITEDATA, t);
        SET(CURLOPT_HEADERFUNCTION, on_header);
        SET(CURLOPT_HEADERDATA, t);
        SET(CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
        SET(CURLOPT_OPENSOCKETDATA, t);
        SET(CURLOPT_HTTPHEADER, headers);
        if (resolve)
                SET(CURLOPT_RESOLVE, resolve);
        if (strcmp(method, "HEAD") == 0) {
                SET(CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "GET") == 0 && !has_body) {
                SET(CURLOPT_HTTPGET, 1L);
        } else {
                if (has_body || sends_length(method)) {
                        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
                        SET(CURLOPT_POSTFIELDS, body ? (const char *)body : "");
                }
                SET(CURLOPT_CUSTOMREQUEST, method);
        }
#undef SET
        return c;
}

/* The guest's answer of a finished transfer: refused when secrets are
 * declared and the body is encoded (the scrub could not see a value in
 * it), else the body scrubbed of the secrets' values, with the status and
 * headers. */
static int transfer_answer(CURL *h, transfer *t, const secret_store *ss, const char *method,
                           const char *shown, json_t **ret_response, airlock_error *err)
{
        /* A compressed body would hide a value from the scrub: with secrets
         * none is passed on (identity was asked for). */
        const char *enc = json_string_value(json_object_get(t->headers, "content-encoding"));
        if (secrets_count(ss) && enc && strcasecmp(enc, "identity") != 0) {
                /* The server chose the header: scrubbed whole, then cut. */
                char *clean = NULL;
                size_t clean_len = 0;
                int er = secrets_scrub(ss, enc, strlen(enc), &clean, &clean_len);
                const char *shown_enc = er > 0 ? clean : er == 0 ? enc : "(withheld)";
                int r = al_error(err, -EPROTO, NULL,
                                 "%s %s failed: the response is encoded (Content-Encoding: "
                                 "%.40s%s) although identity was asked for; with secrets "
                                 "declared the gateway passes on only bodies it can check",
                                 method, shown, shown_enc, strlen(shown_enc) > 40 ? "..." : "");
                free(clean);
                return r;
        }
        int sr = response_scrub(ss, t);
        if (sr == -E2BIG)
                return al_error(err, -E2BIG, NULL,
                                "%s %s failed: the response grows past the cap with the secrets' "
                                "placeholders in place of their values",
                                method, shown);
        if (sr < 0)
                return al_error(err, -ENOMEM, NULL, "%s %s: out of memory", method, shown);
        long status = 0;
        al_cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        size_t b64_len = 0;
        _cleanup_free_ char *b64 = al_base64_encode(
            (const unsigned char *)(t->body.data ? t->body.data : ""), t->body.len, &b64_len);
        json_t *resp =
            b64 ? json_pack("{s:i,s:O,s:s%}", WIRE_KEY_STATUS, (json_int_t)status, WIRE_KEY_HEADERS,
                            t->headers, WIRE_KEY_BODY_BASE64, b64, b64_len)
                : NULL;
        if (!resp)
                return al_error(err, -ENOMEM, NULL, "%s %s: out of memory", method, shown);
        *ret_response = resp;
        return 0;
}

static int transfer_run(const url_parts *u, const char *method, const char *shown,
                        struct curl_slist *headers, const unsigned char *body, size_t body_len,
                        bool has_body, const struct sockaddr_storage *addrs, size_t n_addrs,
                        const airlock_limits *lim, uint64_t deadline_ns, int cancel_fd,
                        const secret_store *ss, gateway_record *rec, json_t **ret_response,
                        airlock_error *err)
{
        /* The URL may carry a secret's value in its query: wiped below. */
        char *url = allowlist_format_url(u, true, true);
        if (!url)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        size_t url_len = strlen(url);
        struct curl_slist *resolve = NULL;
        if (resolve_list(u, addrs, n_addrs, &resolve) < 0) {
                secrets_wipe_free(url, url_len);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        transfer t = {.addrs = addrs, .n_addrs = n_addrs, .port = (uint16_t)u->port, .ss = ss};
        dynbuf_init(&t.body, lim->http_max_response);
        t.headers = json_object();
        CURL *h = al_cu->easy_init();
        if (!h || !t.headers) {
                al_cu->slist_free_all(resolve);
                json_decref(t.headers);
                if (h)
                        al_cu->easy_cleanup(h);
                secrets_wipe_free(url, url_len);
                return al_error(err, -ENOMEM, NULL, "%s %s: cannot set up the transfer", method,
                                shown);
        }
        char errbuf[CURL_ERROR_SIZE] = "";
        long timeout_ms = transfer_timeout_ms(lim, deadline_ns, &t);
        CURLcode c = transfer_setup(h, &t, url, errbuf, method, headers, resolve, body, body_len,
                                    has_body, timeout_ms, lim);
        int r = 0;
        if (c != CURLE_OK) {
                r = al_error(err, -EIO, NULL, "%s %s: cannot set up the transfer: %s", method,
                             shown, al_cu->easy_strerror(c));
        } else {
                c = perform(h, cancel_fd, &t.cancelled);
                /* curl's text may quote what the server sent, cut at its
                 * buffer's size: scrubbed before it goes into a message
                 * (a full buffer counts as cut). */
                if (c != CURLE_OK && secrets_count(ss))
                        secrets_scrub_text(ss, errbuf, sizeof(errbuf));
                if (c != CURLE_OK)
                        r = curl_failure(c, &t, errbuf, method, shown, lim, err);
        }
        if (rec) {
                long status = 0;
                al_cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
                rec->status = (int)status;
                rec->bytes_received = t.body.len;
        }
        if (r >= 0)
                r = transfer_answer(h, &t, ss, method, shown, ret_response, err);
        al_cu->easy_cleanup(h);
        al_cu->slist_free_all(resolve);
        json_decref(t.headers);
        dynbuf_free(&t.body);
        secrets_wipe_free(url, url_len);
        return r;
}

int gateway_request(const net_allowlist *al, const airlock_limits *lim, const json_t *request,
                    json_t **ret_response, airlock_error *err)
{
        return gateway_request_ex(al, lim, request, 0, -1, ret_response, err);
}

int gateway_request_ex(const net_allowlist *al, const airlock_limits *lim, const json_t *request,
                       uint64_t deadline_ns, int cancel_fd, json_t **ret_response,
                       airlock_error *err)
{
        return gateway_request_full(al, NULL, lim, request, deadline_ns, cancel_fd, NULL,
                                    ret_response, err);
}

static int request_checked(const net_allowlist *al, const secret_store *ss,
                           const airlock_limits *lim_in, const json_t *request,
                           uint64_t deadline_ns, int cancel_fd, gateway_record *rec,
                           json_t **ret_response, airlock_error *err);

int gateway_request_full(const net_allowlist *al, const secret_store *ss, const airlock_limits *lim,
                         const json_t *request, uint64_t deadline_ns, int cancel_fd,
                         gateway_record *rec, json_t **ret_response, airlock_error *err)
{
        if (rec)
                *rec = (gateway_record){0};
        int r =
            request_checked(al, ss, lim, request, deadline_ns, cancel_fd, rec, ret_response, err);
        /* A refusal of the address checks is a refusal too. */
        if (rec && r == -EACCES)
                rec->allowed = false;
        /* Whatever went wrong, the message the guest reads has no value:
         * curl's own text may quote what it sent. */
        if (r < 0 && err && secrets_count(ss))
                secrets_scrub_text(ss, err->message, sizeof(err->message));
        if (rec && rec->method[0] == '\0' && json_is_object(request)) {
                const char *m = json_string_value(json_object_get(request, WIRE_KEY_METHOD));
                snprintf(rec->method, sizeof(rec->method), "%s", m ? m : "");
        }
        return r;
}

/* The error of a failed secrets_substitute on a request (sr < 0). */
static int substitute_failed(airlock_error *err, int sr, const char *method, const char *shown)
{
        if (sr == -E2BIG)
                return al_error(err, -E2BIG, NULL,
                                "%s %s: the request grows past the cap with the secrets' values",
                                method, shown);
        return al_error(err, -ENOMEM, NULL, "out of memory");
}

/* The request's method, checked as an HTTP token and upper-cased into
 * method (GW_METHOD_MAX + 1 bytes). */
static int method_in(const json_t *jm, char *method, airlock_error *err)
{
        const char *m = json_string_value(jm);
        size_t mlen = json_string_length(jm);
        bool m_ok = mlen > 0 && mlen <= GW_METHOD_MAX && strlen(m) == mlen;
        for (size_t i = 0; m_ok && i < mlen; i++) {
                m_ok = is_tchar((unsigned char)m[i]);
                method[i] = (char)toupper((unsigned char)m[i]);
        }
        if (!m_ok)
                return al_error(err, -EINVAL, NULL, "'%.40s' is not an HTTP method", m);
        method[mlen] = '\0';
        return 0;
}

/* The request's body from its base64 (jb, NULL or null for none), capped
 * by the limits before and after decoding, with the secrets' placeholders
 * replaced by their values where the target may have them. *ret_body is
 * the caller's to wipe and free, also on failure; *ret_has_body is false
 * for an empty body, which the guest runtime sends for none. */
static int body_in(const json_t *jb, const char *method, const char *shown, const secret_store *ss,
                   const url_parts *u, const airlock_limits *lim, unsigned char **ret_body,
                   size_t *ret_len, bool *ret_has_body, airlock_error *err)
{
        if (!jb || json_is_null(jb))
                return 0;
        if (!json_is_string(jb))
                return al_error(err, -EINVAL, NULL,
                                "%s %s: \"body_base64\" must be a base64 string", method, shown);
        /* Refuse by the encoded size first, before decoding anything. */
        if (json_string_length(jb) / 4 * 3 > lim->http_max_request + 3)
                return al_error(err, -E2BIG, NULL, "%s %s: the request body exceeds %llu bytes",
                                method, shown, (unsigned long long)lim->http_max_request);
        if (al_base64_decode(json_string_value(jb), json_string_length(jb), ret_body, ret_len) < 0)
                return al_error(err, -EINVAL, NULL, "%s %s: \"body_base64\" is not valid base64",
                                method, shown);
        if (*ret_len > lim->http_max_request)
                return al_error(err, -E2BIG, NULL, "%s %s: the request body exceeds %llu bytes",
                                method, shown, (unsigned long long)lim->http_max_request);
        if (strcmp(method, "HEAD") == 0 && *ret_len)
                return al_error(err, -EINVAL, NULL, "HEAD %s: a HEAD request has no body", shown);
        /* An empty body on a GET would add a needless Content-Length. */
        *ret_has_body = *ret_len > 0;
        if (!*ret_has_body)
                return 0;
        char *real = NULL;
        size_t real_len = 0;
        int sr = secrets_substitute(ss, method, u, SECRET_IN_BODY, (const char *)*ret_body,
                                    *ret_len, &real, &real_len);
        if (sr < 0)
                return substitute_failed(err, sr, method, shown);
        if (sr > 0) {
                secrets_wipe_free(*ret_body, *ret_len);
                *ret_body = (unsigned char *)real;
                *ret_len = real_len;
        }
        return 0;
}

/* The query string with the secrets' placeholders replaced, in place in u. */
static int query_in(const secret_store *ss, const char *method, const char *shown, url_parts *u,
                    airlock_error *err)
{
        if (!u->query)
                return 0;
        char *real = NULL;
        size_t real_len = 0;
        int sr = secrets_substitute(ss, method, u, SECRET_IN_QUERY, u->query, strlen(u->query),
                                    &real, &real_len);
        if (sr < 0)
                return substitute_failed(err, sr, method, shown);
        if (sr > 0) {
                free(u->query);
                u->query = real;
        }
        return 0;
}

static int request_checked(const net_allowlist *al, const secret_store *ss,
                           const airlock_limits *lim_in, const json_t *request,
                           uint64_t deadline_ns, int cancel_fd, gateway_record *rec,
                           json_t **ret_response, airlock_error *err)
{
        /* The caller's limits (the run's, or those the MCP client sets):
         * the library's defaults live in the configuration, above this
         * folder. */
        if (!lim_in)
                return al_error(err, -EINVAL, NULL, "an HTTP request needs its limits");
        airlock_limits lim = *lim_in;
        const char *problem = NULL;
        if (!al_curl_load(&problem))
                return al_error(err, -EIO, NULL, "HTTP is unavailable: %s", problem);
        if (!json_is_object(request))
                return al_error(err, -EINVAL, NULL, "an HTTP request must be a JSON object");
        const json_t *jm = json_object_get(request, WIRE_KEY_METHOD);
        const json_t *ju = json_object_get(request, WIRE_KEY_URL);
        if (!json_is_string(jm) || !json_is_string(ju))
                return al_error(err, -EINVAL, NULL,
                                "an HTTP request needs \"method\" and \"url\" strings");
        char method[GW_METHOD_MAX + 1];
        int r = method_in(jm, method, err);
        if (r < 0)
                return r;
        if (rec)
                snprintf(rec->method, sizeof(rec->method), "%s", method);
        if (strlen(json_string_value(ju)) != json_string_length(ju))
                return al_error(err, -EINVAL, NULL, "the URL contains a NUL character");

        url_parts u = {0};
        r = allowlist_parse_url(json_string_value(ju), &u, err);
        if (r == -EACCES && err) {
                /* A path refused as a way out of the allowed one is a
                 * refusal like the allow-list's: it names the method too. */
                char why[sizeof(err->message)];
                snprintf(why, sizeof(why), "%s", err->message);
                return al_error(err, r, NULL, "%s %s", method, why);
        }
        if (r < 0)
                return r;
        _cleanup_free_ char *shown_full = allowlist_format_url(&u, true, false);
        char shown[240];
        snprintf(shown, sizeof(shown), "%.200s%s", shown_full ? shown_full : u.host,
                 shown_full && strlen(shown_full) > 200 ? "..." : "");
        struct curl_slist *headers = NULL;
        unsigned char *body = NULL;
        size_t body_len = 0;
        struct sockaddr_storage addrs[GW_MAX_ADDRS];
        size_t n_addrs = 0;
        bool has_ctype = false;

        if (rec) {
                _cleanup_free_ char *bare = allowlist_format_url(&u, false, false);
                snprintf(rec->url, sizeof(rec->url), "%s", bare ? bare : u.host);
        }
        r = allowlist_check(al, method, &u, NULL, err);
        if (r < 0)
                goto out;
        if (rec)
                rec->allowed = true;
        r = headers_build(json_object_get(request, WIRE_KEY_HEADERS), method, shown, ss, &u,
                          &headers, &has_ctype, err);
        if (r < 0)
                goto out;
        bool has_body = false;
        r = body_in(json_object_get(request, WIRE_KEY_BODY_BASE64), method, shown, ss, &u, &lim,
                    &body, &body_len, &has_body, err);
        if (r < 0)
                goto out;
        r = query_in(ss, method, shown, &u, err);
        if (r < 0)
                goto out;
        if (rec)
                rec->bytes_sent = body_len;
        /* curl would label a body without a type as a form; send none. */
        if ((has_body || sends_length(method)) && !has_ctype) {
                struct curl_slist *l = al_cu->slist_append(headers, "Content-Type:");
                if (!l) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        goto out;
                }
                headers = l;
        }
        r = addresses_check(&u, method, shown, addrs, &n_addrs, err);
        if (r < 0)
                goto out;
        if (rec)
                rec->start_ns = al_now_ns();
        r = transfer_run(&u, method, shown, headers, body, body_len, has_body, addrs, n_addrs, &lim,
                         deadline_ns, cancel_fd, ss, rec, ret_response, err);
        if (rec)
                rec->duration_ns = al_now_ns() - rec->start_ns;
out:
        headers_wipe_free(headers);
        secrets_wipe_free(body, body_len);
        if (u.query)
                explicit_bzero(u.query, strlen(u.query));
        allowlist_url_free(&u);
        return r;
}
