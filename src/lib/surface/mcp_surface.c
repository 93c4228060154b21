/* Which media types are text a model reads as text, for callers of the
 * public API (the MCP server in src/cli) that present a run's output to a
 * model. */
#include <string.h>

#include "airlock.h"
#include "core/util.h"

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
