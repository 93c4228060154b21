/* Normalisation of the sandbox-side path of a mount (--mount HOST:PATH). */
#include "fsx/fsx.h"
#include "core/util.h"

#include <string.h>

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Contract: *ret is only set on success, to a relative path of one or more
 * components, none of them empty, "." or "..", joined by single '/'. Every
 * way of failing has its own message, so the user knows what to change. */
int fsx_normalize_mount_path(const char *in, char **ret, airlock_error *err)
{
        if (!in)
                return al_error(err, -EINVAL, NULL, "mount path is missing");

        const char *b = in, *e = in + strlen(in);
        while (b < e && is_space(*b))
                b++;
        while (e > b && is_space(e[-1]))
                e--;
        if (b == e)
                return al_error(err, -EINVAL, in,
                                "mount path is empty: give a path below /input, like data/x.csv");

        dynbuf out;
        dynbuf_init(&out, (size_t)(e - b) + 1);
        bool first = true;
        for (const char *s = b; s < e;) {
                const char *t = s;
                while (t < e && *t != '/' && *t != '\\')
                        t++;
                size_t len = (size_t)(t - s);
                bool skip = len == 0 || (len == 1 && s[0] == '.');
                if (len == 2 && s[0] == '.' && s[1] == '.') {
                        dynbuf_free(&out);
                        return al_error(err, -EINVAL, in,
                                        "mount path \"%s\" contains \"..\": mount paths must stay "
                                        "inside /input",
                                        in);
                }
                /* "input/x" and "/input/x" both mean /input/x: drop one
                 * leading "input" part. */
                if (!skip && first && len == 5 && memcmp(s, "input", 5) == 0) {
                        first = false;
                        skip = true;
                }
                if (!skip) {
                        first = false;
                        if ((out.len && dynbuf_append(&out, "/", 1) < 0) ||
                            dynbuf_append(&out, s, len) < 0) {
                                dynbuf_free(&out);
                                return al_error(err, -ENOMEM, in, "out of memory");
                        }
                }
                s = t < e ? t + 1 : t;
        }
        if (out.len == 0) {
                dynbuf_free(&out);
                return al_error(err, -EINVAL, in,
                                "mount path \"%s\" names /input itself: give a path below it, "
                                "like data/x.csv",
                                in);
        }
        *ret = dynbuf_take(&out, NULL);
        return 0;
}
