/* The network allow-list: entry parsing and normalisation, URL parsing, and
 * request matching, as tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "host/allowlist.h"
#include "core/util.h"

/* ---- entries ------------------------------------------------------------ */

typedef struct entry_case {
        const char *target;
        const char *methods;
        int code;             /* expected return */
        const char *norm;     /* normalised target on success */
        const char *meths;    /* methods joined by ',' on success */
        const char *msg_part; /* part of the message on failure */
} entry_case;

static const entry_case entry_cases[] = {
    {"api.example.com", NULL, 0, "api.example.com", "*", NULL},
    {"  API.Example.COM  ", "get", 0, "api.example.com", "GET", NULL},
    {"api.example.com/", NULL, 0, "api.example.com", "*", NULL},
    {"api.example.com:8443", "post, get ,GET", 0, "api.example.com:8443", "GET,POST", NULL},
    {"HTTPS://Api.Example.com/v1/", "GET", 0, "https://api.example.com/v1", "GET", NULL},
    {"https://h.example:443/api", NULL, 0, "https://h.example/api", "*", NULL},
    {"http://h.example:80", NULL, 0, "http://h.example", "*", NULL},
    {"http://h.example:8080/", NULL, 0, "http://h.example:8080", "*", NULL},
    {"https://h.example/a/b//", NULL, 0, "https://h.example/a/b", "*", NULL},
    {"[::1]:8080", NULL, 0, "[::1]:8080", "*", NULL},
    {"[0:0::1]", NULL, 0, "[::1]", "*", NULL},
    {"https://[FE80::1]/x", NULL, 0, "https://[fe80::1]/x", "*", NULL},
    {"127.0.0.1:9", "delete,PATCH,put", 0, "127.0.0.1:9", "DELETE,PATCH,PUT", NULL},
    {"h.example", "*", 0, "h.example", "*", NULL},
    {"h.example", "GET,*", 0, "h.example", "*", NULL},
    {"", NULL, -EINVAL, NULL, NULL, "empty"},
    {"   ", NULL, -EINVAL, NULL, NULL, "empty"},
    {"h.example", "", -EINVAL, NULL, NULL, "method list is empty"},
    {"h.example", "  ", -EINVAL, NULL, NULL, "method list is empty"},
    {"h.example", "GET,,POST", -EINVAL, NULL, NULL, "method is empty"},
    {"h.example", "GET,", -EINVAL, NULL, NULL, "method is empty"},
    {"h.example", "CONNECT", -EINVAL, NULL, NULL, "never allowed"},
    {"h.example", "get,trace", -EINVAL, NULL, NULL, "never allowed"},
    {"h.example", "GE T", -EINVAL, NULL, NULL, "not an HTTP method"},
    {"h.example", "GET\r\n", -EINVAL, NULL, NULL, "not an HTTP method"},
    {"ftp://h.example", NULL, -EINVAL, NULL, NULL, "scheme 'ftp'"},
    {"h.example/api", NULL, -EINVAL, NULL, NULL, "needs a scheme"},
    {"h.example:0", NULL, -EINVAL, NULL, NULL, "out of range"},
    {"h.example:65536", NULL, -EINVAL, NULL, NULL, "out of range"},
    {"h.example:", NULL, -EINVAL, NULL, NULL, "port is empty"},
    {"h.example:8x", NULL, -EINVAL, NULL, NULL, "not a number"},
    {"::1", NULL, -EINVAL, NULL, NULL, "brackets"},
    {"[::g]", NULL, -EINVAL, NULL, NULL, "not an IPv6"},
    {"user@h.example", NULL, -EINVAL, NULL, NULL, "user names"},
    {"https://h.example/a?b", NULL, -EINVAL, NULL, NULL, "query"},
    {"https://h.example/a/../b", NULL, -EINVAL, NULL, NULL, "'..'"},
    {"https://h.example/a/..;/b", NULL, -EINVAL, NULL, NULL, "';' parameters"},
    {"https://h.example/a%252e%252e/b", NULL, -EINVAL, NULL, NULL, "encoded again"},
    {"https://", NULL, -EINVAL, NULL, NULL, "host is empty"},
    {"h ex", NULL, -EINVAL, NULL, NULL, "space"},
    {"h..example", NULL, -EINVAL, NULL, NULL, "label"},
    {"2130706433", NULL, -EINVAL, NULL, NULL, "non-standard"},
    {"0x7f.1", NULL, -EINVAL, NULL, NULL, "non-standard"},
    {"0177.0.0.1", NULL, -EINVAL, NULL, NULL, "non-standard"},
    {"h.exa%6dple", NULL, -EINVAL, NULL, NULL, "contains '%'"},
};

static void join_methods(const allow_entry *e, char *buf, size_t size)
{
        buf[0] = '\0';
        for (size_t i = 0; i < e->n_methods; i++) {
                if (i)
                        strncat(buf, ",", size - strlen(buf) - 1);
                strncat(buf, e->methods[i], size - strlen(buf) - 1);
        }
}

static void test_entries(void **state)
{
        for (size_t i = 0; i < ARRAY_SIZE(entry_cases); i++) {
                const entry_case *c = &entry_cases[i];
                net_allowlist *al;
                assert_int_equal(allowlist_new(&al, NULL), 0);
                airlock_error err = {0};
                int r = allowlist_add(al, c->target, c->methods, &err);
                if (r != c->code)
                        fail_msg("entry '%s' methods '%s': got %d (%s), want %d", c->target,
                                 c->methods ? c->methods : "(null)", r, err.message, c->code);
                if (r == 0) {
                        assert_int_equal(allowlist_count(al), 1);
                        const allow_entry *e = allowlist_get(al, 0);
                        char m[256];
                        join_methods(e, m, sizeof(m));
                        if (strcmp(e->target, c->norm) != 0 || strcmp(m, c->meths) != 0)
                                fail_msg("entry '%s': got '%s' [%s], want '%s' [%s]", c->target,
                                         e->target, m, c->norm, c->meths);
                        assert_null(e->methods[e->n_methods]);
                } else {
                        assert_int_equal(err.code, r);
                        if (!strstr(err.message, c->msg_part))
                                fail_msg("entry '%s': message '%s' lacks '%s'", c->target,
                                         err.message, c->msg_part);
                        assert_int_equal(allowlist_count(al), 0);
                }
                allowlist_free(al);
        }
}

static void test_replace_and_clone(void **state)
{
        net_allowlist *al, *copy;
        assert_int_equal(allowlist_new(&al, NULL), 0);
        assert_int_equal(allowlist_add(al, "a.example", "GET", NULL), 0);
        assert_int_equal(allowlist_add(al, "b.example", NULL, NULL), 0);
        /* The same target again, spelt differently, replaces the methods. */
        assert_int_equal(allowlist_add(al, " A.EXAMPLE/ ", "post,put", NULL), 0);
        assert_int_equal(allowlist_count(al), 2);
        char m[64];
        join_methods(allowlist_get(al, 0), m, sizeof(m));
        assert_string_equal(m, "POST,PUT");
        /* A failed add leaves the list as it was. */
        assert_int_equal(allowlist_add(al, "a.example", "GET,,", NULL), -EINVAL);
        join_methods(allowlist_get(al, 0), m, sizeof(m));
        assert_string_equal(m, "POST,PUT");

        assert_int_equal(allowlist_clone(al, &copy, NULL), 0);
        _cleanup_free_ char *f1 = allowlist_fingerprint_text(al);
        _cleanup_free_ char *f2 = allowlist_fingerprint_text(copy);
        assert_non_null(f1);
        assert_string_equal(f1, f2);
        assert_non_null(strstr(f1, "\"a.example\""));
        allowlist_free(al);
        assert_string_equal(allowlist_get(copy, 1)->target, "b.example");

        /* The print does not depend on the order of entries. */
        net_allowlist *rev;
        assert_int_equal(allowlist_new(&rev, NULL), 0);
        assert_int_equal(allowlist_add(rev, "b.example", NULL, NULL), 0);
        assert_int_equal(allowlist_add(rev, "a.example", "PUT,POST", NULL), 0);
        _cleanup_free_ char *f3 = allowlist_fingerprint_text(rev);
        assert_string_equal(f2, f3);
        allowlist_free(rev);
        allowlist_free(copy);
}

/* ---- URLs --------------------------------------------------------------- */

typedef struct url_case {
        const char *url;
        int code;
        const char *scheme, *host;
        int port;
        const char *path, *query;
        bool is_ip;
        const char *msg_part;
} url_case;

static const url_case url_cases[] = {
    {"https://Api.Example.com/v1/x?q=1#frag", 0, "https", "api.example.com", 443, "/v1/x", "q=1",
     false, NULL},
    {"HTTP://h.example", 0, "http", "h.example", 80, "/", NULL, false, NULL},
    {"http://h.example?x", 0, "http", "h.example", 80, "/", "x", false, NULL},
    {"http://h.example:8080/a%20b", 0, "http", "h.example", 8080, "/a%20b", NULL, false, NULL},
    {"http://127.0.0.1:9/", 0, "http", "127.0.0.1", 9, "/", NULL, true, NULL},
    {"http://[::FFFF:127.0.0.1]/", 0, "http", "::ffff:127.0.0.1", 80, "/", NULL, true, NULL},
    {"http://h.example/.well-known/x", 0, "http", "h.example", 80, "/.well-known/x", NULL, false,
     NULL},
    {"http://h.example/a/...", 0, "http", "h.example", 80, "/a/...", NULL, false, NULL},
    /* Escapes that cannot move the path stay as they are. */
    {"http://h.example/a%3Bb%25c%2520d;v=1", 0, "http", "h.example", 80, "/a%3Bb%25c%2520d;v=1",
     NULL, false, NULL},
    {"http://h.example/a/...;x/b?q=%2e%2e%2f", 0, "http", "h.example", 80, "/a/...;x/b",
     "q=%2e%2e%2f", false, NULL},
    {"", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "empty"},
    {"h.example/x", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "absolute"},
    {"file:///etc/passwd", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "scheme 'file'"},
    {"gopher://h.example/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "scheme"},
    {"http://user:pw@h.example/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "user names"},
    {"http://h.example@evil.example/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "user names"},
    {"http://h.example /", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "space"},
    {"http://h.example/\r\nX: y", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "control"},
    {"http://h.exämple/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "non-ASCII"},
    {"http://h.example\\@evil/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "backslash"},
    {"http://h.example:0/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "out of range"},
    {"http://h.example:99999/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "out of range"},
    {"http://h.example:/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "port is empty"},
    {"http://:80/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "host is empty"},
    {"http:///x", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "host is empty"},
    {"http://2130706433/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "non-standard"},
    {"http://0177.0.0.1/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "non-standard"},
    {"http://0x7f000001/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "non-standard"},
    {"http://127.1/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "non-standard"},
    {"http://%31%32%37.0.0.1/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "contains '%'"},
    {"http://[::1%25lo]/", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "IPv6"},
    /* Every spelling a server may resolve outside the path is a refusal. */
    {"http://h.example/api/../admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'..'"},
    {"http://h.example/api/./x", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'..'"},
    {"http://h.example/api/..", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'..'"},
    {"http://h.example/api/..;/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "';' parameters"},
    {"http://h.example/api/..;jsessionid=1/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "';' parameters"},
    {"http://h.example/api/.;x/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'..'"},
    {"http://h.example/api/..%3b/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "percent-decoded"},
    {"http://h.example/api/%2e%2E/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'.' (%2E)"},
    {"http://h.example/api/.%2e/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'.' (%2E)"},
    {"http://h.example/api/..%2fadmin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'/' (%2F)"},
    {"http://h.example/a%2Fb", -EACCES, NULL, NULL, 0, NULL, NULL, false, "'/' (%2F)"},
    {"http://h.example/api%2F..%5Cadmin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "(%2F)"},
    {"http://h.example/api/..%5cadmin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "(%5C)"},
    {"http://h.example/api/..\\admin", -EACCES, NULL, NULL, 0, NULL, NULL, false, "backslash"},
    {"http://h.example/api/%252e%252e/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "encoded again as %2E"},
    {"http://h.example/api/..%252fadmin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "encoded again as %2F"},
    {"http://h.example/api/..%255cadmin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "encoded again as %5C"},
    {"http://h.example/api/%25252e%25252e/admin", -EACCES, NULL, NULL, 0, NULL, NULL, false,
     "encoded again as %2E"},
    {"http://h.example/%2525252525252525252e", -EACCES, NULL, NULL, 0, NULL, NULL, false, "rounds"},
    {"http://h.example/a%zz", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "two hex"},
    {"http://h.example/a%4", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "two hex"},
    {"http://h.example/?a=%", -EINVAL, NULL, NULL, 0, NULL, NULL, false, "two hex"},
};

static void test_urls(void **state)
{
        for (size_t i = 0; i < ARRAY_SIZE(url_cases); i++) {
                const url_case *c = &url_cases[i];
                url_parts u = {0};
                airlock_error err = {0};
                int r = allowlist_parse_url(c->url, &u, &err);
                if (r != c->code)
                        fail_msg("url '%s': got %d (%s), want %d", c->url, r, err.message, c->code);
                if (r == 0) {
                        assert_string_equal(u.scheme, c->scheme);
                        assert_string_equal(u.host, c->host);
                        assert_int_equal(u.port, c->port);
                        assert_string_equal(u.path, c->path);
                        if (c->query)
                                assert_string_equal(u.query, c->query);
                        else
                                assert_null(u.query);
                        assert_int_equal(u.host_is_ip, c->is_ip);
                } else if (!strstr(err.message, c->msg_part)) {
                        fail_msg("url '%s': message '%s' lacks '%s'", c->url, err.message,
                                 c->msg_part);
                }
                allowlist_url_free(&u);
        }
}

static void test_url_format(void **state)
{
        url_parts u = {0};
        assert_int_equal(allowlist_parse_url("HTTPS://[::1]:443/a?b=c#d", &u, NULL), 0);
        _cleanup_free_ char *a = allowlist_format_url(&u, true, false);
        _cleanup_free_ char *b = allowlist_format_url(&u, false, true);
        assert_string_equal(a, "https://[::1]/a?b=c");
        assert_string_equal(b, "https://[::1]:443/a");
        allowlist_url_free(&u);
}

/* ---- matching ----------------------------------------------------------- */

typedef struct match_case {
        const char *method;
        const char *url;
        int code;
        const char *entry;    /* target of the matching entry */
        const char *msg_part; /* on failure */
} match_case;

static const char *const match_entries[][2] = {
    {"api.example.com", NULL},
    {"get.example.com", "GET,HEAD"},
    {"port.example.com:8443", NULL},
    {"https://pinned.example.com/api", "GET,POST"},
    {"http://plain.example.com:8080", NULL},
    {"[2001:db8::1]:8080", "GET"},
    {"127.0.0.1:5000", NULL},
};

static const match_case match_cases[] = {
    {"GET", "https://api.example.com/anything?x=1", 0, "api.example.com", NULL},
    {"GET", "http://api.example.com/", 0, "api.example.com", NULL},
    {"DELETE", "https://API.EXAMPLE.COM/x", 0, "api.example.com", NULL},
    {"PROPFIND", "https://api.example.com/x", 0, "api.example.com", NULL},
    {"GET", "https://api.example.com:8443/", -EACCES, NULL,
     "no allow-list entry for https://api.example.com:8443"},
    {"GET", "https://sub.api.example.com/", -EACCES, NULL,
     "(add --allow-domain sub.api.example.com=GET)"},
    {"GET", "https://example.com/", -EACCES, NULL, "no allow-list entry"},
    {"GET", "https://api.example.com.evil.net/", -EACCES, NULL, "no allow-list entry"},
    {"GET", "https://evil.example/x", -EACCES, NULL,
     "GET https://evil.example/x is not allowed: no allow-list entry for "
     "https://evil.example (add --allow-domain evil.example=GET)"},
    {"CONNECT", "https://api.example.com/", -EACCES, NULL, "never allowed"},
    {"TRACE", "http://api.example.com/", -EACCES, NULL, "never allowed"},
    {"HEAD", "https://get.example.com/", 0, "get.example.com", NULL},
    {"POST", "https://get.example.com/", -EACCES, NULL,
     "entry get.example.com allows only GET,HEAD (add --allow-domain "
     "get.example.com=GET,HEAD,POST)"},
    {"GET", "http://port.example.com:8443/", 0, "port.example.com:8443", NULL},
    {"GET", "https://port.example.com:8443/", 0, "port.example.com:8443", NULL},
    {"GET", "https://port.example.com/", -EACCES, NULL, "no allow-list entry"},
    {"GET", "https://pinned.example.com/api", 0, "https://pinned.example.com/api", NULL},
    {"GET", "https://pinned.example.com/api/", 0, "https://pinned.example.com/api", NULL},
    {"GET", "https://pinned.example.com/api/v1/x", 0, "https://pinned.example.com/api", NULL},
    {"GET", "https://pinned.example.com/api?q=1", 0, "https://pinned.example.com/api", NULL},
    {"GET", "https://pinned.example.com:443/api", 0, "https://pinned.example.com/api", NULL},
    {"GET", "https://pinned.example.com/apiary", -EACCES, NULL, "covers only paths under /api"},
    {"GET", "https://pinned.example.com/", -EACCES, NULL, "covers only paths under /api"},
    {"GET", "https://pinned.example.com/API", -EACCES, NULL, "covers only"},
    {"GET", "http://pinned.example.com/api", -EACCES, NULL, "no allow-list entry"},
    {"GET", "https://pinned.example.com:8443/api", -EACCES, NULL, "no allow-list entry"},
    {"PUT", "https://pinned.example.com/api", -EACCES, NULL, "allows only GET,POST"},
    {"GET", "http://plain.example.com:8080/x", 0, "http://plain.example.com:8080", NULL},
    {"GET", "https://plain.example.com:8080/x", -EACCES, NULL, "no allow-list entry"},
    {"GET", "http://plain.example.com/x", -EACCES, NULL, "no allow-list entry"},
    {"GET", "http://[2001:db8::1]:8080/", 0, "[2001:db8::1]:8080", NULL},
    {"GET", "http://[2001:0db8:0::1]:8080/", 0, "[2001:db8::1]:8080", NULL},
    {"POST", "http://[2001:db8::1]:8080/", -EACCES, NULL, "allows only GET"},
    {"GET", "http://[2001:db8::2]:8080/", -EACCES, NULL,
     "no allow-list entry for http://[2001:db8::2]:8080"},
    {"GET", "http://127.0.0.1:5000/", 0, "127.0.0.1:5000", NULL},
    {"GET", "http://127.0.0.2:5000/", -EACCES, NULL, "no allow-list entry"},
    {"GET", "http://localhost:5000/", -EACCES, NULL, "no allow-list entry"},
    {"G ET", "http://127.0.0.1:5000/", -EINVAL, NULL, "not an HTTP method"},
};

static void test_matching(void **state)
{
        net_allowlist *al;
        assert_int_equal(allowlist_new(&al, NULL), 0);
        for (size_t i = 0; i < ARRAY_SIZE(match_entries); i++) {
                airlock_error err = {0};
                if (allowlist_add(al, match_entries[i][0], match_entries[i][1], &err) < 0)
                        fail_msg("entry %s: %s", match_entries[i][0], err.message);
        }
        for (size_t i = 0; i < ARRAY_SIZE(match_cases); i++) {
                const match_case *c = &match_cases[i];
                url_parts u = {0};
                airlock_error err = {0};
                if (allowlist_parse_url(c->url, &u, &err) < 0)
                        fail_msg("url %s: %s", c->url, err.message);
                const allow_entry *e = NULL;
                int r = allowlist_check(al, c->method, &u, &e, &err);
                if (r != c->code)
                        fail_msg("%s %s: got %d (%s), want %d", c->method, c->url, r, err.message,
                                 c->code);
                if (r == 0) {
                        assert_non_null(e);
                        if (strcmp(e->target, c->entry) != 0)
                                fail_msg("%s %s: matched %s, want %s", c->method, c->url, e->target,
                                         c->entry);
                } else if (!strstr(err.message, c->msg_part)) {
                        fail_msg("%s %s: message '%s' lacks '%s'", c->method, c->url, err.message,
                                 c->msg_part);
                }
                allowlist_url_free(&u);
        }
        allowlist_free(al);
}

static void test_empty_list_denies(void **state)
{
        net_allowlist *al;
        assert_int_equal(allowlist_new(&al, NULL), 0);
        url_parts u = {0};
        assert_int_equal(allowlist_parse_url("https://example.com/", &u, NULL), 0);
        airlock_error err = {0};
        assert_int_equal(allowlist_check(al, "GET", &u, NULL, &err), -EACCES);
        assert_int_equal(err.code, -EACCES);
        allowlist_url_free(&u);
        allowlist_free(al);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_entries),  cmocka_unit_test(test_replace_and_clone),
            cmocka_unit_test(test_urls),     cmocka_unit_test(test_url_format),
            cmocka_unit_test(test_matching), cmocka_unit_test(test_empty_list_denies),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
