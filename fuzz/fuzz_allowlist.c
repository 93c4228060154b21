/* Fuzzes the allow-list and the URL parser: the input is split at newlines
 * into an allow-list target, its methods, a request method and a URL. Every
 * parsed URL must format again and parse to the same URL; a request is only
 * allowed when an entry with the request's host says so; and no accepted
 * path, read the way the most lenient server reads it (escapes decoded again
 * and again, '\\' as '/', ";" parameters dropped), holds a dot segment or
 * leaves the allowed prefix. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host/allowlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *next_line(const uint8_t **p, const uint8_t *end)
{
        const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
        const uint8_t *stop = nl ? nl : end;
        char *s = strndup((const char *)*p, (size_t)(stop - *p));
        *p = nl ? nl + 1 : end;
        return s;
}

static int hexval(int c)
{
        return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* The path as a lenient server sees it, before dot segments are resolved:
 * decoded until nothing changes, '\\' turned into '/', ";..." cut from every
 * segment. Aborts when a segment is then "." or "..". Malloc'd, its length
 * in *ret_len; NULL when out of memory. */
static char *lenient_form(const char *path, size_t *ret_len)
{
        size_t n = strlen(path);
        char *a = strdup(path);
        if (!a)
                return NULL;
        for (;;) {
                size_t k = 0;
                for (size_t i = 0; i < n; i++) {
                        if (a[i] == '%' && i + 2 < n &&
                            strchr("0123456789abcdefABCDEF", a[i + 1]) &&
                            strchr("0123456789abcdefABCDEF", a[i + 2]) && a[i + 1] && a[i + 2]) {
                                a[k++] = (char)(hexval(a[i + 1]) * 16 + hexval(a[i + 2]));
                                i += 2;
                        } else {
                                a[k++] = a[i];
                        }
                }
                if (k == n)
                        break;
                n = k;
        }
        size_t w = 0;
        for (size_t i = 0; i < n;) {
                if (a[i] == '\\')
                        a[i] = '/';
                if (a[i] == ';') {
                        while (i < n && a[i] != '/' && a[i] != '\\')
                                i++;
                        continue;
                }
                a[w++] = a[i++];
        }
        for (size_t i = 0; i <= w;) {
                size_t j = i;
                while (j < w && a[j] != '/')
                        j++;
                size_t len = j - i;
                if ((len == 1 && a[i] == '.') || (len == 2 && a[i] == '.' && a[i + 1] == '.'))
                        abort();
                i = j + 1;
        }
        *ret_len = w;
        return a;
}

/* Aborts unless the lenient form of path is free of dot segments and starts
 * with the lenient form of the allowed prefix on a segment boundary. */
static void lenient_check(const char *path, const char *prefix)
{
        size_t n = 0, pl = 0;
        char *a = lenient_form(path, &n);
        char *p = lenient_form(prefix, &pl);
        if (a && p && pl && (n < pl || memcmp(a, p, pl) != 0 || (n > pl && a[pl] != '/')))
                abort();
        free(a);
        free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint8_t *p = data, *end = data + size;
        char *target = next_line(&p, end);
        char *methods = next_line(&p, end);
        char *method = next_line(&p, end);
        char *url = next_line(&p, end);
        net_allowlist *al = NULL;
        airlock_error err = {0};
        if (!target || !methods || !method || !url || allowlist_new(&al, &err) < 0)
                goto out;

        /* An empty methods line means "every method" (NULL). */
        (void)allowlist_add(al, target, methods[0] ? methods : NULL, &err);
        (void)allowlist_add(al, "127.0.0.1:8080", "GET", &err);
        char *fp = allowlist_fingerprint_text(al);
        free(fp);

        url_parts u = {0};
        if (allowlist_parse_url(url, &u, &err) >= 0) {
                if (!u.scheme || !u.host || !u.host[0] || !u.path || u.path[0] != '/' ||
                    u.port < 1 || u.port > 65535)
                        abort();
                char *again = allowlist_format_url(&u, true, false);
                if (again) {
                        url_parts v = {0};
                        /* The normalised form must parse and be stable. */
                        if (allowlist_parse_url(again, &v, &err) < 0)
                                abort();
                        char *twice = allowlist_format_url(&v, true, false);
                        if (twice && strcmp(again, twice) != 0)
                                abort();
                        free(twice);
                        allowlist_url_free(&v);
                        free(again);
                }
                const allow_entry *e = NULL;
                lenient_check(u.path, "");
                if (allowlist_check(al, method, &u, &e, &err) >= 0) {
                        if (!e || strcmp(e->host, u.host) != 0)
                                abort();
                        lenient_check(u.path, e->path);
                }
                allowlist_url_free(&u);
        }
out:
        allowlist_free(al);
        free(target);
        free(methods);
        free(method);
        free(url);
        return 0;
}
