/* Media types by file extension, from the system table /etc/mime.types
 * (Debian's media-types package), read once per process; and which media
 * types are text a model reads as text (airlock_media_type_is_text). */
#include "fsx/fsx.h"
#include "core/util.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#define MIME_FILE     "/etc/mime.types"
#define MIME_FILE_MAX (4u << 20) /* far above the ~60 KiB Debian ships */
#define MIME_EXT_MAX  32
#define FALLBACK_TYPE "application/octet-stream"

typedef struct mime_entry {
        const char *ext; /* lower case, points into mime_text */
        const char *type;
} mime_entry;

static pthread_once_t mime_once = PTHREAD_ONCE_INIT;
static char *mime_text;
static mime_entry *mime_table; /* open addressing, power-of-two size */
static size_t mime_mask;

static uint64_t hash_ext(const char *s)
{
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return h;
}

static char lower(char c)
{
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static void mime_insert(const char *ext, const char *type)
{
        for (size_t i = hash_ext(ext) & mime_mask;; i = (i + 1) & mime_mask) {
                if (!mime_table[i].ext) {
                        mime_table[i] = (mime_entry){ext, type};
                        return;
                }
                /* The first line that names an extension wins. */
                if (strcmp(mime_table[i].ext, ext) == 0)
                        return;
        }
}

/* Parses "type ext ext ..." lines in place; '#' starts a comment. Any
 * failure leaves an empty table, so every lookup gives the fallback. */
static void mime_load(void)
{
        _cleanup_close_ int fd = open(MIME_FILE, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return;
        dynbuf b;
        dynbuf_init(&b, MIME_FILE_MAX);
        char chunk[16384];
        for (;;) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || dynbuf_append(&b, chunk, (size_t)n) < 0)
                        break;
        }
        size_t len = 0;
        char *text = dynbuf_take(&b, &len);
        if (!text)
                return;

        /* Count words to size the table: at most one entry per word. */
        size_t words = 0;
        for (size_t i = 0; i < len; i++)
                if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' &&
                    (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n'))
                        words++;
        size_t size = 64;
        while (size < words * 2)
                size *= 2;
        mime_table = calloc(size, sizeof(*mime_table));
        if (!mime_table) {
                free(text);
                return;
        }
        mime_mask = size - 1;

        for (char *line = text; line < text + len;) {
                char *end = memchr(line, '\n', (size_t)(text + len - line));
                if (!end)
                        end = text + len;
                *end = '\0';
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = '\0';
                char *save = NULL;
                char *type = strtok_r(line, " \t\r", &save);
                if (type && strchr(type, '/')) {
                        for (char *ext; (ext = strtok_r(NULL, " \t\r", &save));) {
                                if (strlen(ext) > MIME_EXT_MAX)
                                        continue;
                                for (char *p = ext; *p; p++)
                                        *p = lower(*p);
                                mime_insert(ext, type);
                        }
                }
                line = end + 1;
        }
        mime_text = text;
}

const char *fsx_media_type(const char *name)
{
        if (!name)
                return FALLBACK_TYPE;
        pthread_once(&mime_once, mime_load);
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        const char *dot = strrchr(base, '.');
        /* No extension, or a leading dot only (".bashrc"), as Python's
         * mimetypes sees it. */
        if (!dot || dot == base || !dot[1] || !mime_table)
                return FALLBACK_TYPE;
        char ext[MIME_EXT_MAX + 1];
        size_t n = strlen(dot + 1);
        if (n > MIME_EXT_MAX)
                return FALLBACK_TYPE;
        for (size_t i = 0; i <= n; i++)
                ext[i] = lower(dot[1 + i]);
        for (size_t i = hash_ext(ext) & mime_mask; mime_table[i].ext; i = (i + 1) & mime_mask)
                if (strcmp(mime_table[i].ext, ext) == 0)
                        return mime_table[i].type;
        return FALLBACK_TYPE;
}

/* ---- which media types are text (airlock_media_type_is_text) ---- */

/* application/ subtypes that are text although they are not text/ types:
 * the ones /etc/mime.types gives to data and source files an agent writes,
 * and the usual names of the formats it has no entry for. */
static const char *const text_application_types[] = {
    "json",     "xml",    "javascript",    "ecmascript",  "x-javascript", "x-sh",
    "x-csh",    "sql",    "x-python",      "yaml",        "x-yaml",       "toml",
    "x-toml",   "csv",    "x-ndjson",      "ndjson",      "jsonl",        "x-tex",
    "x-latex",  "x-perl", "x-ruby",        "x-httpd-php", "graphql",      "x-ipynb+json",
    "x-subrip", "rtf",    "x-wais-source",
};

static bool has_suffix(const char *s, size_t n, const char *suffix)
{
        size_t k = strlen(suffix);
        return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

bool airlock_media_type_is_text(const char *media_type)
{
        if (!media_type)
                return false;
        /* Parameters ("; charset=utf-8") do not change the answer. */
        size_t n = strcspn(media_type, "; \t");
        if (n > 5 && strncmp(media_type, "text/", 5) == 0)
                return true;
        if (has_suffix(media_type, n, "+json") || has_suffix(media_type, n, "+xml"))
                return true;
        if (n <= 12 || strncmp(media_type, "application/", 12) != 0)
                return false;
        const char *sub = media_type + 12;
        size_t sub_len = n - 12;
        for (size_t i = 0; i < ARRAY_SIZE(text_application_types); i++)
                if (strlen(text_application_types[i]) == sub_len &&
                    memcmp(text_application_types[i], sub, sub_len) == 0)
                        return true;
        return false;
}
