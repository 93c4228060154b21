/* Helpers of the command line (cli_util.h). */
#include "cli_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cli_error(airlock_error *err, int code, const char *path, const char *fmt, ...)
{
        if (code >= 0)
                code = -EINVAL;
        if (!err)
                return code;
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        snprintf(err->path, sizeof(err->path), "%s", path ? path : "");
        va_end(ap);
        return code;
}

int cli_write_full(int fd, const void *buf, size_t len)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = write(fd, (const char *)buf + done, len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t)n;
        }
        return 0;
}

/* Length of the valid UTF-8 sequence at s (at most len bytes), or 0: no
 * overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
        unsigned c = s[0];
        size_t n;
        unsigned min;
        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
                min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                min = 0x10000;
        } else {
                return 0;
        }
        if (len < n)
                return 0;
        unsigned cp = c & (0xff >> (n + 1));
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

char *cli_utf8_sanitize(const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;
        /* Each bad byte becomes the three bytes of U+FFFD. */
        if (len > (SIZE_MAX - 1) / 3)
                return NULL;
        char *out = malloc(len * 3 + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len;) {
                size_t n = utf8_seq(p + i, len - i);
                if (n) {
                        memcpy(out + o, p + i, n);
                        o += n;
                        i += n;
                } else {
                        memcpy(out + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                }
        }
        out[o] = '\0';
        return out;
}

void cli_buf_init(cli_buf *b, size_t cap)
{
        *b = (cli_buf){.cap = cap};
}

/* Room for len more bytes and a NUL, within the cap. */
static int cli_buf_reserve(cli_buf *b, size_t len)
{
        if (len > b->cap || b->len > b->cap - len || b->len + len == SIZE_MAX)
                return -E2BIG;
        size_t need = b->len + len + 1;
        if (need <= b->alloc)
                return 0;
        size_t n = b->alloc ? b->alloc : 256;
        while (n < need)
                n = n > SIZE_MAX / 2 ? need : n * 2;
        if (b->cap < SIZE_MAX && n > b->cap + 1)
                n = b->cap + 1;
        char *p = realloc(b->data, n);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->alloc = n;
        return 0;
}

int cli_buf_append(cli_buf *b, const void *data, size_t len)
{
        int r = cli_buf_reserve(b, len);
        if (r < 0)
                return r;
        if (len)
                memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = '\0';
        return 0;
}

int cli_buf_appendf(cli_buf *b, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *text = NULL;
        int n = vasprintf(&text, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        int r = cli_buf_append(b, text, (size_t)n);
        free(text);
        return r;
}

char *cli_buf_take(cli_buf *b, size_t *ret_len)
{
        if (!b->data && cli_buf_append(b, "", 0) < 0)
                return NULL;
        char *p = b->data;
        if (ret_len)
                *ret_len = b->len;
        *b = (cli_buf){.cap = b->cap};
        return p;
}

void cli_buf_free(cli_buf *b)
{
        free(b->data);
        *b = (cli_buf){.cap = b->cap};
}
