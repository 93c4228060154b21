/* Fuzzes the secrets' rewrites (host/secrets.h) with what a guest and a
 * server control: the input's first line is a secret's value (a fixed one
 * when the line is not a valid value), the rest is a response to scrub and
 * a request text to substitute in. A scrub that changes nothing must have
 * found no raw value; a changed text has the placeholder; a substitution
 * puts the value in only where the placeholder was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host/secrets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint8_t *nl = memchr(data, '\n', size);
        size_t vlen = nl ? (size_t)(nl - data) : 0;
        const char *rest = nl ? (const char *)nl + 1 : (const char *)data;
        size_t rlen = nl ? size - vlen - 1 : size;
        secret_store *s = NULL;
        if (secrets_new(&s, NULL) < 0)
                return 0;
        const char *t[] = {"http://localhost/api", NULL};
        const char *value = (const char *)data;
        if (secrets_add(s, "K", data, vlen, 0, t, NULL) < 0) {
                value = "fallback-value-123";
                vlen = strlen(value);
                if (secrets_add(s, "K", value, vlen, 0, t, NULL) < 0)
                        abort();
        }
        char ph[SECRET_PLACEHOLDER_SIZE];
        secrets_placeholder("K", ph);

        char *out = NULL;
        size_t n = 0;
        int r = secrets_scrub(s, rest, rlen, &out, &n);
        if (r < 0)
                abort();
        if (r == 0 && memmem(rest, rlen, value, vlen))
                abort(); /* the raw value went through untouched */
        /* The placeholder, or for a UTF-16 reading only, the placeholder
         * in UTF-16 of either byte order. */
        char wide_le[2 * SECRET_PLACEHOLDER_SIZE], wide_be[2 * SECRET_PLACEHOLDER_SIZE];
        size_t pl = strlen(ph);
        for (size_t i = 0; i < pl; i++) {
                wide_le[2 * i] = wide_be[2 * i + 1] = ph[i];
                wide_le[2 * i + 1] = wide_be[2 * i] = 0;
        }
        if (r > 0 && !memmem(out, n, ph, pl) && !memmem(out, n, wide_le, 2 * pl) &&
            !memmem(out, n, wide_be, 2 * pl))
                abort();
        free(out);
        /* The same text taken as cut at both ends: the edge rules. */
        out = NULL;
        r = secrets_scrub_cut(s, rest, rlen, SECRETS_CUT_HEAD | SECRETS_CUT_TAIL, &out, &n);
        if (r < 0)
                abort();
        if (r == 0 && memmem(rest, rlen, value, vlen))
                abort();
        free(out);

        url_parts u = {0};
        if (allowlist_parse_url("http://localhost/api/x", &u, NULL) < 0)
                abort();
        out = NULL;
        r = secrets_substitute(s, "GET", &u, SECRET_IN_HEADER, rest, rlen, &out, &n);
        if (r < 0)
                abort();
        if (r > 0 && (!memmem(rest, rlen, ph, strlen(ph)) || !memmem(out, n, value, vlen)))
                abort();
        free(out);
        allowlist_url_free(&u);
        secrets_free(s);
        return 0;
}
