/* Fuzzes the allow-list and the URL parser: the input is split at newlines
 * into an allow-list target, its methods, a request method and a URL. Every
 * parsed URL must format again and parse to the same URL; a request is only
 * allowed when an entry with the request's host says so. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *next_line(const uint8_t **p, const uint8_t *end)
{
        const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
        const uint8_t *stop = nl ? nl : end;
        char *s = strndup((const char *)*p, (size_t)(stop - *p));
        *p = nl ? nl + 1 : end;
        return s;
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
        if (url_parse(url, &u, &err) >= 0) {
                if (!u.scheme || !u.host || !u.host[0] || !u.path || u.path[0] != '/' ||
                    u.port < 1 || u.port > 65535)
                        abort();
                char *again = url_format(&u, true, false);
                if (again) {
                        url_parts v = {0};
                        /* The normalised form must parse and be stable. */
                        if (url_parse(again, &v, &err) < 0)
                                abort();
                        char *twice = url_format(&v, true, false);
                        if (twice && strcmp(again, twice) != 0)
                                abort();
                        free(twice);
                        url_parts_free(&v);
                        free(again);
                }
                const allow_entry *e = NULL;
                if (allowlist_check(al, method, &u, &e, &err) >= 0) {
                        if (!e || strcmp(e->host, u.host) != 0)
                                abort();
                }
                url_parts_free(&u);
        }
out:
        allowlist_free(al);
        free(target);
        free(methods);
        free(method);
        free(url);
        return 0;
}
