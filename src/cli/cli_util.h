/* Small helpers of the command line. The command line is built on the
 * public API alone (airlock.h, not the library's internals), as any other
 * program that embeds airlock would be, so it keeps its own few. */
#ifndef AIRLOCK_CLI_UTIL_H
#define AIRLOCK_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "airlock.h"

#define ARRAY_SIZE(a)  (sizeof(a) / sizeof((a)[0]))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

static inline void cli_freep(void *p)
{
        free(*(void **)p);
}
#define _cleanup_free_ __attribute__((cleanup(cli_freep)))

/* Fills err (when not NULL) as the library does: code (a negative errno),
 * the message formatted like printf, and path (NULL for none). Returns
 * code. */
int cli_error(airlock_error *err, int code, const char *path, const char *fmt, ...) _printf_(4, 5);

/* Writes all of len bytes, retrying on EINTR and short writes: 0 or -errno. */
int cli_write_full(int fd, const void *buf, size_t len);

/* Copies s[0..len) replacing every invalid UTF-8 sequence with U+FFFD (JSON
 * text must be UTF-8): malloc'd and NUL-terminated, or NULL. */
char *cli_utf8_sanitize(const char *s, size_t len);

/* A growable byte buffer with a hard cap, always NUL-terminated. Appending
 * past the cap fails with -E2BIG and leaves the buffer as it was. */
typedef struct cli_buf {
        char *data;
        size_t len;
        size_t alloc;
        size_t cap;
} cli_buf;

void cli_buf_init(cli_buf *b, size_t cap);
int cli_buf_append(cli_buf *b, const void *data, size_t len);
int cli_buf_appendf(cli_buf *b, const char *fmt, ...) _printf_(2, 3);
/* Gives the data to the caller (never NULL on success) and resets b. */
char *cli_buf_take(cli_buf *b, size_t *ret_len);
void cli_buf_free(cli_buf *b);

#endif
