/* Secrets (host/secrets.h) without a network: placeholders, which requests
 * get the value and where, the encodings scrubbed from responses and error
 * texts, rotation, copies and the caps. The same paths end to end, with a
 * real server and sandbox, are in tests/blackbox/test_secrets.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/util.h"
#include "host/secrets.h"

#define VALUE "tok/3+Zq\"w\\e=9%\xc3\xa9~end"

static secret_store *store_with(const char *name, const char *value, unsigned flags,
                                const char *const *targets)
{
        secret_store *s = NULL;
        airlock_error e;
        assert_int_equal(secrets_new(&s, &e), 0);
        int r = secrets_add(s, name, value, strlen(value), flags, targets, &e);
        if (r < 0)
                fail_msg("secrets_add: %s", e.message);
        return s;
}

static url_parts url(const char *text)
{
        url_parts u = {0};
        airlock_error e;
        if (allowlist_parse_url(text, &u, &e) < 0)
                fail_msg("%s: %s", text, e.message);
        return u;
}

/* The text data after substitution for (method, url) at place. */
static char *subst(const secret_store *s, const char *method, const char *u_text,
                   secret_place place, const char *data)
{
        url_parts u = url(u_text);
        char *out = NULL;
        size_t n = 0;
        int r = secrets_substitute(s, method, &u, place, data, strlen(data), &out, &n);
        allowlist_url_free(&u);
        assert_true(r >= 0);
        return r ? out : strdup(data);
}

static void test_placeholders(void **state)
{
        (void)state;
        char a[SECRET_PLACEHOLDER_SIZE], b[SECRET_PLACEHOLDER_SIZE], c[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("API_KEY", a);
        secrets_placeholder("API_KEY", b);
        secrets_placeholder("API_KEZ", c);
        assert_string_equal(a, b);
        assert_string_not_equal(a, c);
        assert_int_equal(strncmp(a, "airlock-secret-API_KEY-", 23), 0);
        assert_int_equal(strlen(a), 23 + 32);
        /* The placeholder does not depend on the value or the store: a
         * rotated value and a rebuilt sandbox keep it. */
        const char *t[] = {"https://api.example.com", NULL};
        secret_store *s1 = store_with("API_KEY", "first-value-1", 0, t);
        secret_store *s2 = store_with("API_KEY", "second-value-2", 0, t);
        char p1[SECRET_PLACEHOLDER_SIZE], p2[SECRET_PLACEHOLDER_SIZE];
        assert_int_equal(secrets_lookup(s1, "API_KEY", p1), 0);
        assert_int_equal(secrets_lookup(s2, "API_KEY", p2), 0);
        assert_string_equal(p1, a);
        assert_string_equal(p2, a);
        assert_int_equal(secrets_lookup(s1, "OTHER", p1), -ENOENT);
        char pub[128];
        assert_int_equal(airlock_secret_placeholder("API_KEY", pub, sizeof(pub)), 0);
        assert_string_equal(pub, a);
        assert_int_equal(airlock_secret_placeholder("bad name", pub, sizeof(pub)), -EINVAL);
        assert_int_equal(airlock_secret_placeholder("API_KEY", pub, 10), -ERANGE);
        secrets_free(s1);
        secrets_free(s2);
}

static void test_substitution_targets_methods_places(void **state)
{
        (void)state;
        const char *t[] = {"https://api.example.com/v1=GET,POST", "http://localhost:8080", NULL};
        secret_store *s = store_with("K", VALUE, AIRLOCK_SECRET_IN_QUERY, t);
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);
        char hdr[200];
        snprintf(hdr, sizeof(hdr), "Bearer %s", ph);
        char want[200];
        snprintf(want, sizeof(want), "Bearer %s", VALUE);
        struct {
                const char *method, *url;
                bool value;
        } cases[] = {
            {"GET", "https://api.example.com/v1/models", true},
            {"POST", "https://api.example.com/v1", true},
            {"DELETE", "https://api.example.com/v1/x", false}, /* a method it does not name */
            {"GET", "https://api.example.com/v2", false},      /* outside the path prefix */
            {"GET", "https://api.example.com/v1x", false},     /* a prefix, not a string prefix */
            {"GET", "http://api.example.com/v1", false},       /* another scheme */
            {"GET", "https://api.example.com:444/v1", false},  /* another port */
            {"GET", "https://evil.example.com/v1", false},     /* another host */
            {"GET", "https://api.example.com.evil.com/v1", false},
            {"PUT", "http://localhost:8080/anything", true},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_free_ char *out =
                    subst(s, cases[i].method, cases[i].url, SECRET_IN_HEADER, hdr);
                if (strcmp(out, cases[i].value ? want : hdr) != 0)
                        fail_msg("%s %s: got '%s'", cases[i].method, cases[i].url, out);
        }
        /* Query with the flag, body without: the body keeps the placeholder. */
        _cleanup_free_ char *q = subst(s, "GET", "https://api.example.com/v1", SECRET_IN_QUERY, ph);
        assert_string_equal(q, VALUE);
        _cleanup_free_ char *b = subst(s, "GET", "https://api.example.com/v1", SECRET_IN_BODY, ph);
        assert_string_equal(b, ph);
        /* Every occurrence, and text around it kept. */
        char two[300], two_want[300];
        snprintf(two, sizeof(two), "a%sb%sc", ph, ph);
        snprintf(two_want, sizeof(two_want), "a%sb%sc", VALUE, VALUE);
        _cleanup_free_ char *t2 = subst(s, "GET", "http://localhost:8080/", SECRET_IN_HEADER, two);
        assert_string_equal(t2, two_want);
        /* Text without a placeholder is not copied. */
        url_parts u = url("http://localhost:8080/");
        char *none = NULL;
        size_t n = 0;
        assert_int_equal(secrets_substitute(s, "GET", &u, SECRET_IN_HEADER, "plain", 5, &none, &n),
                         0);
        assert_null(none);
        allowlist_url_free(&u);
        secrets_free(s);
}

static void test_scrub_every_encoding(void **state)
{
        (void)state;
        const char *t[] = {"api.example.com", NULL};
        secret_store *s = store_with("K", VALUE, 0, t);
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);
        const unsigned char *v = (const unsigned char *)VALUE;
        size_t vl = strlen(VALUE);
        /* Each form embedded in other text: none may survive. */
        const char *forms[] = {
            VALUE,
            "dG9rLzMrWnEid1xlPTklw6l+ZW5k",            /* base64 */
            "dG9rLzMrWnEid1xlPTklw6l-ZW5k",            /* base64url */
            "tok%2F3%2BZq%22w%5Ce%3D9%25%C3%A9~end",   /* percent */
            "tok%2f3%2bZq%22w%5ce%3d9%25%c3%a9~end",   /* percent, lower case */
            "tok/3+Zq\\\"w\\\\e=9%\\u00e9~end",        /* JSON, ensure_ascii */
            "tok\\/3+Zq\\\"w\\\\e=9%\\u00E9~end",      /* JSON, '\/', upper hex */
            "tok/3+Zq\\\"w\\\\e=9%\\u00c3\\u00a9~end", /* JSON of the Latin-1 reading */
            "tok/3+Zq\\\"w\\\\e=9%\xc3\xa9~end",       /* JSON, UTF-8 kept */
        };
        for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
                char text[400];
                int tn = snprintf(text, sizeof(text), "before[%s]after", forms[i]);
                char *out = NULL;
                size_t n = 0;
                assert_int_equal(secrets_scrub(s, text, (size_t)tn, &out, &n), 1);
                char want[400];
                snprintf(want, sizeof(want), "before[%s]after", ph);
                if (strcmp(out, want) != 0)
                        fail_msg("form %zu: got '%s'", i, out);
                free(out);
        }
        /* base64 of the value at each offset inside a longer input: only
         * the characters that mix a value byte with a neighbour remain. */
        for (size_t k = 0; k < 3; k++) {
                unsigned char in[64] = "xyz";
                memcpy(in + k, v, vl);
                memcpy(in + k + vl, "QRS", 3);
                size_t el = 0;
                _cleanup_free_ char *enc = al_base64_encode(in, k + vl + 3, &el);
                char *out = NULL;
                size_t n = 0;
                assert_int_equal(secrets_scrub(s, enc, el, &out, &n), 1);
                assert_non_null(strstr(out, ph));
                /* The neighbours' own characters (up to 3 and 4) and one
                 * character at each end that mixes them with the value. */
                if (n - strlen(ph) > 9)
                        fail_msg("offset %zu: '%s'", k, out);
                free(out);
        }
        /* A response full of the value cannot multiply the host's memory,
         * nor a request full of placeholders. */
        {
                size_t big = 200000 * vl;
                char *many = malloc(big);
                for (size_t i = 0; i < big; i += vl)
                        memcpy(many + i, VALUE, vl);
                char *o = NULL;
                size_t on = 0;
                assert_int_equal(secrets_scrub(s, many, big, &o, &on), -E2BIG);
                assert_null(o);
                free(many);
                size_t pl = strlen(ph), pbig = 100000 * pl;
                char *phs = malloc(pbig);
                for (size_t i = 0; i < pbig; i += pl)
                        memcpy(phs + i, ph, pl);
                url_parts u = url("http://x/");
                const char *tt[] = {"http://x", NULL};
                secret_store *long_v = NULL;
                char lv[4096];
                memset(lv, 'v', sizeof(lv));
                airlock_error e;
                assert_int_equal(secrets_new(&long_v, &e), 0);
                assert_int_equal(secrets_add(long_v, "K", lv, sizeof(lv), 0, tt, &e), 0);
                assert_int_equal(
                    secrets_substitute(long_v, "GET", &u, SECRET_IN_HEADER, phs, pbig, &o, &on),
                    -E2BIG);
                allowlist_url_free(&u);
                secrets_free(long_v);
                free(phs);
        }
        /* Nothing to scrub: no copy. */
        char *out = NULL;
        size_t n = 0;
        assert_int_equal(secrets_scrub(s, "nothing here", 12, &out, &n), 0);
        /* An error text in its fixed buffer. */
        char msg[256];
        snprintf(msg, sizeof(msg), "GET https://h/?k=%s failed: %s", VALUE, VALUE);
        secrets_scrub_text(s, msg, sizeof(msg));
        assert_null(strstr(msg, "tok/3"));
        assert_non_null(strstr(msg, ph));
        secrets_free(s);
}

/* Scrubs text and checks that the result is want with "PH" standing for
 * the placeholder. */
static void expect_scrub(const secret_store *s, const char *ph, const char *text, size_t tn,
                         unsigned cut, const char *want)
{
        char *out = NULL;
        size_t n = 0;
        int r = secrets_scrub_cut(s, text, tn, cut, &out, &n);
        char expect[4096];
        const char *at = strstr(want, "PH");
        if (at)
                snprintf(expect, sizeof(expect), "%.*s%s%s", (int)(at - want), want, ph, at + 2);
        else
                snprintf(expect, sizeof(expect), "%s", want);
        const char *got = r > 0 ? out : r == 0 ? text : "(error)";
        if (r < 0 || strlen(got) != strlen(expect) || strncmp(got, expect, strlen(expect)) != 0)
                fail_msg("'%.*s' (cut %u): got '%s', want '%s'", (int)tn, text, cut, got, expect);
        free(out);
}

/* The forms that servers write and a list of fixed forms missed: each
 * decoder of secrets_scrub() and the cut edges of secrets_scrub_cut(). */
static void test_scrub_decoders_and_cut_edges(void **state)
{
        (void)state;
        const char *t[] = {"api.example.com", NULL};
        secret_store *s = store_with("K", VALUE, 0, t);
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);
        const char *forms[] = {
            /* urllib.parse.quote() keeps '/'; quoted twice */
            "tok/3%2BZq%22w%5Ce%3D9%25%C3%A9~end",
            "tok%252F3%252BZq%2522w%255Ce%253D9%2525%25C3%25A9~end",
            /* JSON with HTML-safe escapes (Go, Gson) */
            "tok/3+Zq\\\"w\\\\e\\u003d9%\\u00e9~end",
            /* JSON with every character escaped, lower and upper hex */
            "\\u0074\\u006f\\u006b\\u002f\\u0033\\u002b\\u005a\\u0071\\u0022\\u0077\\u005c"
            "\\u0065\\u003d\\u0039\\u0025\\u00e9\\u007e\\u0065\\u006e\\u0064",
            "\\u0074\\u006F\\u006B\\u002F\\u0033\\u002B\\u005A\\u0071\\u0022\\u0077\\u005C"
            "\\u0065\\u003D\\u0039\\u0025\\u00E9\\u007E\\u0065\\u006E\\u0064",
            /* HTML: named, decimal and hex references */
            "tok&#x2F;3+Zq&quot;w\\e&#61;9&percnt;\xc3\xa9~end",
            "&#116;&#111;&#107;&#47;&#51;&#43;&#90;&#113;&#34;&#119;&#92;&#101;&#61;&#57;&#37;"
            "&#233;&#126;&#101;&#110;&#100;",
            /* ASCII case folded */
            "TOK/3+ZQ\"W\\E=9%\xc3\xa9~END",
        };
        for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
                char text[600];
                int tn = snprintf(text, sizeof(text), "before[%s]after", forms[i]);
                expect_scrub(s, ph, text, (size_t)tn, 0, "before[PH]after");
        }
        /* base64 wrapped at every column (MIME's 76, PEM's 64), with CRLF,
         * LF or JSON's \n, at each offset of the value in the data. */
        const unsigned char *v = (const unsigned char *)VALUE;
        size_t vl = strlen(VALUE);
        const char *breaks[] = {"\r\n", "\n", "\\n"};
        for (size_t k = 0; k < 3; k++)
                for (size_t col = 1; col < 12; col++)
                        for (size_t br = 0; br < ARRAY_SIZE(breaks); br++) {
                                unsigned char in[64] = "xyz";
                                memcpy(in + k, v, vl);
                                size_t el = 0;
                                _cleanup_free_ char *enc = al_base64_encode(in, k + vl, &el);
                                char wrapped[400];
                                size_t w = 0;
                                for (size_t i = 0; i < el; i++) {
                                        if (i && i % col == 0)
                                                w += (size_t)sprintf(wrapped + w, "%s", breaks[br]);
                                        wrapped[w++] = enc[i];
                                }
                                char *out = NULL;
                                size_t n = 0;
                                assert_int_equal(secrets_scrub(s, wrapped, w, &out, &n), 1);
                                if (!strstr(out, ph) || n - strlen(ph) > 12)
                                        fail_msg("offset %zu, column %zu: '%s'", k, col, out);
                                free(out);
                        }
        /* Cut edges: what is left of the value (4 bytes or more) where the
         * text was cut is the value; 3 bytes are not. */
        expect_scrub(s, ph, "error: tok/3+Z", 14, SECRETS_CUT_TAIL, "error: PH");
        expect_scrub(s, ph, "error: tok/", 11, SECRETS_CUT_TAIL, "error: PH");
        expect_scrub(s, ph, "error: tok", 10, SECRETS_CUT_TAIL, "error: tok");
        expect_scrub(s, ph, "error: tok/3+Z", 14, 0, "error: tok/3+Z");
        expect_scrub(s, ph, "error: tok%2F3%2", 16, SECRETS_CUT_TAIL, "error: PH");
        expect_scrub(s, ph, "9%\xc3\xa9~end was refused", 21, SECRETS_CUT_HEAD, "PH was refused");
        expect_scrub(s, ph, "end was refused", 15, SECRETS_CUT_HEAD, "end was refused");
        expect_scrub(s, ph, "u003d9%\\u00e9~end\"}", 20, SECRETS_CUT_HEAD, "PH\"}");
        expect_scrub(s, ph, "Zq\"w\\e=9", 8, SECRETS_CUT_HEAD | SECRETS_CUT_TAIL, "PH");
        /* base64 cut at both ends: the middle of the value is found at
         * whichever alignment the cut left. */
        {
                unsigned char in[64] = "";
                memcpy(in, v, vl);
                size_t el = 0;
                _cleanup_free_ char *enc = al_base64_encode(in, vl, &el);
                for (size_t a = 1; a < 4; a++) {
                        char *out = NULL;
                        size_t n = 0;
                        int r = secrets_scrub_cut(s, enc + a, el - 2 * a, 3, &out, &n);
                        if (r != 1 || strcmp(out, ph) != 0)
                                fail_msg("base64 cut at %zu: %d '%s'", a, r, r > 0 ? out : "");
                        free(out);
                }
        }
        /* A message that fills its buffer was cut at its end. */
        {
                char msg[16];
                memcpy(msg, "refused: tok/3+", 16);
                secrets_scrub_text(s, msg, sizeof(msg));
                if (strstr(msg, "tok/"))
                        fail_msg("a full message kept the value's start: '%s'", msg);
                char room[64] = "refused: tok/3+";
                secrets_scrub_text(s, room, sizeof(room));
                assert_string_equal(room, "refused: tok/3+");
        }
        /* A long base64 run, decoded in overlapping windows: the value
         * is found wherever it falls, also across a window's end. */
        for (size_t at = 12000; at < 12400; at += 37) {
                size_t len = 40000;
                unsigned char *in = malloc(len);
                for (size_t i = 0; i < len; i++)
                        in[i] = (unsigned char)(i * 7 + 3);
                memcpy(in + at, v, vl);
                size_t el = 0;
                char *enc = al_base64_encode(in, len, &el);
                char *out = NULL;
                size_t n = 0;
                assert_int_equal(secrets_scrub(s, enc, el, &out, &n), 1);
                assert_non_null(strstr(out, ph));
                free(out);
                free(enc);
                free(in);
        }
        secrets_free(s);
}

static void test_rotation_copies_and_fingerprint(void **state)
{
        (void)state;
        airlock_config *cfg = NULL;
        airlock_error e;
        assert_int_equal(airlock_config_new(&cfg, &e), 0);
        const char *t[] = {"https://api.example.com=GET", NULL};
        assert_int_equal(airlock_config_add_secret(cfg, "K", "value-one-1", 11, 0, t, &e), 0);
        assert_int_equal(airlock_config_secret_count(cfg), 1);
        assert_string_equal(airlock_config_secret_name(cfg, 0), "K");
        _cleanup_free_ char *fp1 = secrets_fingerprint_text(cfg->secrets);
        assert_null(strstr(fp1, "value-one"));
        airlock_config *copy = NULL;
        assert_int_equal(config_clone(cfg, &copy, &e), 0);
        /* Rotation: the same name again replaces value and targets. */
        assert_int_equal(airlock_config_add_secret(cfg, "K", "value-two-2", 11, 0, t, &e), 0);
        assert_int_equal(airlock_config_secret_count(cfg), 1);
        _cleanup_free_ char *fp2 = secrets_fingerprint_text(cfg->secrets);
        assert_string_not_equal(fp1, fp2);
        /* The copy (a sandbox's) keeps the value it was made with. */
        _cleanup_free_ char *fpc = secrets_fingerprint_text(copy->secrets);
        assert_string_equal(fpc, fp1);
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);
        _cleanup_free_ char *now = subst(cfg->secrets, "GET", "https://api.example.com/", 0, ph);
        _cleanup_free_ char *old = subst(copy->secrets, "GET", "https://api.example.com/", 0, ph);
        assert_string_equal(now, "value-two-2");
        assert_string_equal(old, "value-one-1");
        airlock_config_free(copy);
        airlock_config_free(cfg);
}

static void test_refusals_name_no_value(void **state)
{
        (void)state;
        secret_store *s = NULL;
        airlock_error e;
        assert_int_equal(secrets_new(&s, &e), 0);
        const char *t[] = {"https://api.example.com", NULL};
        const char *bad_t[] = {"ftp://api.example.com", NULL};
        const char *none[] = {NULL};
        assert_int_equal(secrets_add(s, "1BAD", "long-enough-1", 13, 0, t, &e), -EINVAL);
        assert_int_equal(secrets_add(s, "bad-name", "long-enough-1", 13, 0, t, &e), -EINVAL);
        assert_int_equal(secrets_add(s, "K", "short", 5, 0, t, &e), -EINVAL);
        assert_null(strstr(e.message, "short"));
        assert_int_equal(secrets_add(s, "K", "has\nXYZQW-12", 13, 0, t, &e), -EINVAL);
        assert_null(strstr(e.message, "XYZQW"));
        assert_int_equal(secrets_add(s, "K", "long-enough-1", 13, 0, none, &e), -EINVAL);
        assert_int_equal(secrets_add(s, "K", "long-enough-1", 13, 0, bad_t, &e), -EINVAL);
        assert_non_null(strstr(e.message, "secret K"));
        assert_null(strstr(e.message, "long-enough"));
        assert_int_equal(secrets_add(s, "K", "long-enough-1", 13, 1u << 7, t, &e), -EINVAL);
        assert_int_equal(secrets_count(s), 0);
        for (int i = 0; i < SECRETS_MAX; i++) {
                char name[16];
                snprintf(name, sizeof(name), "S%d", i);
                assert_int_equal(secrets_add(s, name, "long-enough-1", 13, 0, t, &e), 0);
        }
        assert_int_equal(secrets_add(s, "ONE_MORE", "long-enough-1", 13, 0, t, &e), -E2BIG);
        secrets_free(s);
}

/* issue 38: a run of 12 bytes or more of a value (or half of it, if that is
 * fewer), in any form the scrub reads, counts as the value. */
static void test_scrub_runs_of_a_value(void **state)
{
        (void)state;
        const char *t[] = {"api.example.com", NULL};
        const char *v = "ghp_0123456789abcdefghijklmnopqrstuv"; /* 36 bytes */
        secret_store *s = store_with("K", v, 0, t);
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);
        const char *whole[] = {
            "ghp_0123456789abcdefghijklmnopqrstu", /* all but the last */
            "hp_0123456789abcdefghijklmnopqrstuv", /* all but the first */
            "ghp_0123456",                         /* a prefix of 11: kept */
            "ghp_01234567",                        /* a prefix of 12 */
            "opqrstuv",                            /* a suffix of 8: kept */
            "klmnopqrstuv",                        /* a suffix of 12 */
            "3456789abcdefgh",                     /* a middle */
            "GHP_0123456789ABCDEFGHIJ",            /* case folded */
            "ghp%5F0123456789abcdefghij",          /* percent */
            "\\u0067hp_0123456789abcdef",          /* JSON */
            "Z2hwXzAxMjM0NTY3ODlhYmNkZWZnaA==",    /* base64 of a prefix of 21 */
        };
        const bool scrubbed[] = {true, true, false, true, false, true,
                                 true, true, true,  true, true};
        for (size_t i = 0; i < ARRAY_SIZE(whole); i++) {
                char text[200], *out = NULL;
                size_t n = 0;
                int tn = snprintf(text, sizeof(text), "<%s>", whole[i]);
                int r = secrets_scrub(s, text, (size_t)tn, &out, &n);
                if (scrubbed[i] != (r == 1))
                        fail_msg("'%s': scrubbed %d", whole[i], r);
                if (r == 1 &&
                    (strncmp(out, "<", 1) != 0 || !strstr(out, ph) || strlen(out) > strlen(ph) + 8))
                        fail_msg("'%s': got '%s'", whole[i], out);
                free(out);
        }
        /* A short value: half of it. */
        secret_store *s8 = store_with("S", "Zq7!xw9K", 0, t);
        char *out = NULL;
        size_t n = 0;
        assert_int_equal(secrets_scrub(s8, "a Zq7 b", 7, &out, &n), 0);
        assert_int_equal(secrets_scrub(s8, "a Zq7! b", 8, &out, &n), 1);
        free(out);
        secrets_free(s8);
        secrets_free(s);
}

/* issue 38: only a secret's own targets say which upstream MCP servers get
 * it; a servers file that names it adds no target. */
static void test_servers_get_a_secret_only_from_its_targets(void **state)
{
        (void)state;
        const char *t[] = {"mcp:github", "https://api.github.com=GET,POST",
                           "http://10.0.0.7:8080/mcp", "plain.example.com", NULL};
        secret_store *s = store_with("GH", "value-of-gh-1", 0, t);
        secret_store *c = NULL;
        airlock_error e;
        assert_int_equal(secrets_clone(s, &c, &e), 0);
        const unsigned char *v = NULL;
        size_t n = 0;
        for (int k = 0; k < 2; k++) {
                const secret_store *x = k ? c : s;
                assert_int_equal(secrets_value_for_server(x, "GH", "github", NULL, &v, &n, &e), 0);
                assert_int_equal(n, 13);
                assert_int_equal(
                    secrets_value_for_server(x, "GH", "github", "http://evil.example/", &v, &n, &e),
                    0);
                assert_int_equal(secrets_value_for_server(x, "GH", "evil", NULL, &v, &n, &e),
                                 -EACCES);
                assert_non_null(strstr(e.message, "'GH'"));
                assert_non_null(strstr(e.message, "mcp:github, https://api.github.com (GET,POST)"));
                assert_non_null(strstr(e.message, "mcp:evil"));
                assert_null(strstr(e.message, "value-of"));
                assert_int_equal(secrets_value_for_server(x, "NOPE", "github", NULL, &v, &n, &e),
                                 -ENOENT);
                /* At a URL: an HTTP target that allows its POST. */
                assert_int_equal(secrets_value_for_server(x, "GH", "gh",
                                                          "https://api.github.com/mcp", &v, &n, &e),
                                 0);
                assert_int_equal(secrets_value_for_server(x, "GH", "gh",
                                                          "http://api.github.com/mcp", &v, &n, &e),
                                 -EACCES);
                assert_int_equal(
                    secrets_value_for_server(x, "GH", "gh", "http://10.0.0.7:8080/mcp", &v, &n, &e),
                    0);
                assert_int_equal(secrets_value_for_server(x, "GH", "gh",
                                                          "http://10.0.0.7:8080/other", &v, &n, &e),
                                 -EACCES);
                assert_int_equal(
                    secrets_value_for_server(x, "GH", "gh", "http://10.0.0.7/mcp", &v, &n, &e),
                    -EACCES);
                /* A bare host allows http to the guest, but only https to a server. */
                assert_int_equal(secrets_value_for_server(
                                     x, "GH", "p", "https://plain.example.com/m", &v, &n, &e),
                                 0);
                assert_int_equal(secrets_value_for_server(x, "GH", "p",
                                                          "http://plain.example.com/m", &v, &n, &e),
                                 -EACCES);
                assert_int_equal(
                    secrets_value_for_server(x, "GH", "p", "http://127.0.0.2:9/mcp", &v, &n, &e),
                    -EACCES);
        }
        /* The servers it may go to are part of the configuration. */
        const char *t2[] = {"mcp:gitlab", "https://api.github.com=GET,POST",
                            "http://10.0.0.7:8080/mcp", "plain.example.com", NULL};
        secret_store *s2 = store_with("GH", "value-of-gh-1", 0, t2);
        _cleanup_free_ char *f1 = secrets_fingerprint_text(s);
        _cleanup_free_ char *f2 = secrets_fingerprint_text(s2);
        assert_string_not_equal(f1, f2);
        secrets_free(s2);
        secrets_free(c);
        secrets_free(s);
}

/* The cluster secret (target "peer") reaches nothing but airlock serve's
 * peer signatures: no request, no server, no placeholder; it takes no other
 * target, and there is one. */
static void test_peer_secret_reaches_nothing_else(void **state)
{
        (void)state;
        const char *t[] = {"peer", NULL};
        secret_store *s = store_with("CLUSTER", "cluster-secret-1", 0, t);
        airlock_error e;
        const unsigned char *v = NULL;
        size_t n = 0;
        assert_int_equal(secrets_peer_value(s, &v, &n), 0);
        assert_int_equal(n, 16);
        assert_memory_equal(v, "cluster-secret-1", 16);
        assert_true(secrets_is_peer(s, 0));
        char ph[SECRET_PLACEHOLDER_SIZE];
        assert_int_equal(secrets_lookup(s, "CLUSTER", ph), -ENOENT);
        assert_int_equal(secrets_value_for_server(s, "CLUSTER", "peer", NULL, &v, &n, &e), -EACCES);
        char ph2[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("CLUSTER", ph2);
        url_parts u = url("http://peer/x");
        char *out = NULL;
        assert_int_equal(
            secrets_substitute(s, "POST", &u, SECRET_IN_HEADER, ph2, strlen(ph2), &out, &n), 0);
        assert_null(out);
        allowlist_url_free(&u);
        /* Peer and anything else, or +body: refused, naming the rule. */
        const char *both[] = {"peer", "api.example.com", NULL};
        assert_int_equal(secrets_add(s, "OTHER", "other-value-1", 13, 0, both, &e), -EINVAL);
        assert_non_null(strstr(e.message, "reaches nothing else"));
        assert_int_equal(
            secrets_add(s, "OTHER", "other-value-1", 13, AIRLOCK_SECRET_IN_BODY, t, &e), -EINVAL);
        /* A second cluster secret is refused; the same name rotates. */
        assert_int_equal(secrets_add(s, "OTHER", "other-value-1", 13, 0, t, &e), -EINVAL);
        assert_non_null(strstr(e.message, "already targets peer"));
        assert_int_equal(secrets_add(s, "CLUSTER", "cluster-secret-2", 16, 0, t, &e), 0);
        assert_int_equal(secrets_peer_value(s, &v, &n), 0);
        assert_memory_equal(v, "cluster-secret-2", 16);
        /* No other secret is the cluster secret. */
        const char *web[] = {"api.example.com", NULL};
        secret_store *w = store_with("WEB", "web-value-12", 0, web);
        assert_int_equal(secrets_peer_value(w, &v, &n), -ENOENT);
        assert_false(secrets_is_peer(w, 0));
        secrets_free(w);
        secrets_free(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_placeholders),
            cmocka_unit_test(test_substitution_targets_methods_places),
            cmocka_unit_test(test_scrub_every_encoding),
            cmocka_unit_test(test_scrub_decoders_and_cut_edges),
            cmocka_unit_test(test_rotation_copies_and_fingerprint),
            cmocka_unit_test(test_refusals_name_no_value),
            cmocka_unit_test(test_servers_get_a_secret_only_from_its_targets),
            cmocka_unit_test(test_scrub_runs_of_a_value),
            cmocka_unit_test(test_peer_secret_reaches_nothing_else),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
