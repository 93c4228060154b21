/* From a run's result to an MCP CallToolResult, each payload once.
 *
 * The content items are what every client hands its model: stdout as text,
 * each file of /output as an image item (PNG, JPEG, GIF, WebP), a text
 * resource (text files) or a blob resource (the rest), stderr or the error
 * as one text item, and a short line for anything cut or refused. Nothing
 * is repeated beside them: the small record for programs (status, exit
 * code, duration, file names, sizes, media types, URIs, refusals) travels in
 * the result's _meta under "dev.airlock/run" when the call asks for it (a
 * result's _meta reaches the model in LangChain's and Mastra's adapters),
 * and there is no structuredContent (see README, "What the client sees",
 * for why). Only the public API is used here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "mcp.h"

/* Media types a model accepts as an image (the ones the major model APIs
 * take); other image types (SVG, BMP, TIFF) come back as resources. */
static bool is_model_image(const char *mt)
{
        static const char *const types[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                if (strcmp(mt, types[i]) == 0)
                        return true;
        return false;
}

/* "%XX" for every byte of s outside the unreserved set and '/', appended to
 * out (which has room for 3 * strlen(s) + 1 more bytes). Returns the end. */
static char *percent_encode(char *out, const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
                        *out++ = (char)*p;
                } else {
                        *out++ = '%';
                        *out++ = hex[*p >> 4];
                        *out++ = hex[*p & 15];
                }
        }
        *out = '\0';
        return out;
}

char *mcp_resource_uri(const char *run_id, const char *path)
{
        size_t n = strlen(MCP_URI_PREFIX) + strlen(run_id) + 3 * strlen(path) + 1;
        char *out = malloc(n);
        if (!out)
                return NULL;
        char *p = stpcpy(stpcpy(out, MCP_URI_PREFIX), run_id);
        percent_encode(p, path);
        return out;
}

json_t *mcp_tool_error(const char *message)
{
        return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", message,
                         "isError", 1);
}

json_t *mcp_tool_refusal(const char *fmt, ...)
{
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
        return mcp_tool_error(clean ? clean : msg);
}

/* A growing byte buffer for texts that may hold U+0000 (the guest's
 * output): joined by length, never through a C string. */
typedef struct text_buf {
        char *data;
        size_t len, cap;
        bool failed;
} text_buf;

static void tb_add(text_buf *b, const char *s, size_t n)
{
        if (b->failed || n == 0)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *d = realloc(b->data, cap);
                if (!d) {
                        b->failed = true;
                        return;
                }
                b->data = d;
                b->cap = cap;
        }
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = '\0';
}

static void tb_str(text_buf *b, const char *s)
{
        tb_add(b, s, strlen(s));
}

/* The guest's bytes as text for the model: bad UTF-8 sequences become
 * U+FFFD and CRLF becomes LF, appended to b. */
static void tb_guest_text(text_buf *b, const char *s, size_t len)
{
        size_t n;
        char *clean = al_utf8_sanitize_n(s ? s : "", len, &n);
        if (!clean) {
                b->failed = true;
                return;
        }
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
                if (clean[i] == '\r' && i + 1 < n && clean[i + 1] == '\n')
                        continue;
                clean[w++] = clean[i];
        }
        tb_add(b, clean, w);
        free(clean);
}

/* A text content item that takes b's text; NULL when b failed. */
static json_t *tb_item(text_buf *b)
{
        json_t *o = b->failed ? NULL
                              : json_pack("{s:s, s:s%}", "type", "text", "text",
                                          b->data ? b->data : "", b->len);
        free(b->data);
        *b = (text_buf){0};
        return o;
}

/* "1 MiB", "64 KiB" or "1000 bytes". */
static void size_text(char *out, size_t n, uint64_t bytes)
{
        if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
                snprintf(out, n, "%llu MiB", (unsigned long long)(bytes >> 20));
        else if (bytes >= 1024 && bytes % 1024 == 0)
                snprintf(out, n, "%llu KiB", (unsigned long long)(bytes >> 10));
        else
                snprintf(out, n, "%llu bytes", (unsigned long long)bytes);
}

/* The short line that tells the model a stream was cut. */
static json_t *truncated_item(const char *stream, uint64_t max_bytes)
{
        char size[32], line[200];
        size_text(size, sizeof(size), max_bytes);
        snprintf(line, sizeof(line),
                 "[%s truncated: a run keeps only its first %s; write large results to a file "
                 "in /output]",
                 stream, size);
        return json_pack("{s:s, s:s}", "type", "text", "text", line);
}

const char *mcp_text_type(const airlock_file *f)
{
        const char *data = (const char *)f->data;
        size_t size = (size_t)f->size;
        if (airlock_media_type_is_text(f->media_type) && al_utf8_valid(data, size))
                return f->media_type;
        if (strcmp(f->media_type, "application/octet-stream") == 0 &&
            (size == 0 || !memchr(data, '\0', size)) && al_utf8_valid(data, size))
                return "text/plain";
        return NULL;
}

json_t *mcp_resource_contents(const airlock_file *f, const char *uri)
{
        const char *data = (const char *)f->data;
        size_t size = (size_t)f->size;
        const char *text_type = mcp_text_type(f);
        if (text_type)
                return json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType", text_type, "text",
                                 size ? data : "", size);
        char *b64 = al_base64_encode(f->data, size, NULL);
        json_t *o =
            b64 ? json_pack("{s:s, s:s, s:s}", "uri", uri, "mimeType", f->media_type, "blob", b64)
                : NULL;
        free(b64);
        return o;
}

/* One file of /output as a content item: an image item for the image types
 * a model takes, else an embedded resource. */
static json_t *file_item(const airlock_file *f, const char *uri)
{
        if (is_model_image(f->media_type)) {
                char *b64 = al_base64_encode(f->data, (size_t)f->size, NULL);
                json_t *o = b64 ? json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64,
                                            "mimeType", f->media_type)
                                : NULL;
                free(b64);
                return o;
        }
        json_t *c = mcp_resource_contents(f, uri);
        return c ? json_pack("{s:s, s:o}", "type", "resource", "resource", c) : NULL;
}

/* The failure as one text item: the guest's stderr (the traceback), then
 * one line saying how the run ended ("Timeout: the run exceeded its time
 * limit of 1 s"), each once. */
static json_t *error_item(const airlock_result *res)
{
        text_buf b = {0};
        if (res->stderr_len) {
                tb_guest_text(&b, res->stderr_data, res->stderr_len);
                if (b.len && b.data[b.len - 1] != '\n')
                        tb_str(&b, "\n");
        }
        const char *msg = res->error_message ? res->error_message : "error: the code failed";
        /* The library's message starts with the status name ("timeout: ...");
         * the line starts with it capitalised, so no "Error: error:". */
        char first = msg[0] >= 'a' && msg[0] <= 'z' ? (char)(msg[0] - 'a' + 'A') : msg[0];
        tb_add(&b, &first, first ? 1 : 0);
        if (first)
                tb_str(&b, msg + 1);
        return tb_item(&b);
}

/* What /output held that did not come back, and why, in one text item. */
static json_t *refused_item(const airlock_result *res)
{
        text_buf b = {0};
        bool input = false;
        for (size_t i = 0; i < res->n_refused; i++)
                input |= res->refused[i].path && strncmp(res->refused[i].path, "/input", 6) == 0;
        tb_str(&b, input ? "Not returned from /output or /input:" : "Not returned from /output:");
        for (size_t i = 0; i < res->n_refused; i++) {
                tb_str(&b, "\n- ");
                tb_str(&b, res->refused[i].path ? res->refused[i].path : "?");
                tb_str(&b, " (");
                tb_str(&b, res->refused[i].reason ? res->refused[i].reason : "refused");
                tb_str(&b, ")");
        }
        return tb_item(&b);
}

/* What the run changed under a writable /input, one line each, in one text
 * item: the agent's host decides what to apply. */
static json_t *changes_item(const airlock_result *res)
{
        text_buf b = {0};
        tb_str(&b, "Changes under /input (not applied to the host):");
        for (size_t i = 0; i < res->n_input_changes; i++) {
                tb_str(&b, "\n- ");
                tb_str(&b, airlock_change_name(res->input_changes[i].change));
                tb_str(&b, " ");
                tb_str(&b, res->input_changes[i].path);
        }
        return tb_item(&b);
}

/* Appends item to content and its kind to parts; false when out of memory. */
static bool add_part(json_t *content, json_t *parts, const char *kind, json_t *item)
{
        if (!item)
                return false;
        return json_array_append_new(content, item) == 0 &&
               json_array_append_new(parts, json_string(kind)) == 0;
}

json_t *mcp_tool_result(const airlock_result *res, const char *run_id, uint64_t max_stdout,
                        bool run_record)
{
        json_t *content = json_array(), *parts = json_array(), *files = json_array(),
               *refused = json_array();
        bool ok = content && parts && files && refused;
        if (ok && res->stdout_len) {
                text_buf b = {0};
                tb_guest_text(&b, res->stdout_data, res->stdout_len);
                ok = add_part(content, parts, "stdout", tb_item(&b));
        }
        if (ok && res->stdout_truncated)
                ok = add_part(content, parts, "notice", truncated_item("stdout", max_stdout));
        for (size_t i = 0; ok && i < res->n_files; i++) {
                const airlock_file *f = &res->files[i];
                char *uri = mcp_resource_uri(run_id, f->path);
                ok = uri && add_part(content, parts, "file", file_item(f, uri)) &&
                     json_array_append_new(files, json_pack("{s:s, s:s, s:s, s:I}", "path", f->path,
                                                            "uri", uri, "media_type", f->media_type,
                                                            "size", (json_int_t)f->size)) == 0;
                free(uri);
        }
        /* Each created or modified file of /input comes back as an /output
         * file does (its uri names the run and the /input path; the run
         * record lists the changes, not these files). */
        json_t *changes = res->n_input_changes ? json_array() : NULL;
        if (ok && changes)
                ok = add_part(content, parts, "input_changes", changes_item(res));
        for (size_t i = 0; ok && changes && i < res->n_input_changes; i++) {
                const airlock_input_change *ch = &res->input_changes[i];
                json_t *e = json_pack("{s:s, s:s}", "path", ch->path, "change",
                                      airlock_change_name(ch->change));
                ok = e && json_array_append_new(changes, e) == 0;
                if (!ok || ch->change == AIRLOCK_CHANGE_DELETED)
                        continue;
                airlock_file f = {.path = ch->path,
                                  .media_type = ch->media_type,
                                  .size = ch->size,
                                  .data = ch->data};
                char *uri = mcp_resource_uri(run_id, f.path);
                ok = uri && add_part(content, parts, "input_file", file_item(&f, uri));
                json_object_set_new(e, "media_type", json_string(ch->media_type));
                json_object_set_new(e, "size", json_integer((json_int_t)ch->size));
                free(uri);
        }
        if (ok && res->success && res->stderr_len) {
                text_buf b = {0};
                tb_guest_text(&b, res->stderr_data, res->stderr_len);
                ok = add_part(content, parts, "stderr", tb_item(&b));
        }
        if (ok && !res->success)
                ok = add_part(content, parts, "error", error_item(res));
        if (ok && res->stderr_truncated)
                ok = add_part(content, parts, "notice", truncated_item("stderr", max_stdout));
        if (ok && res->n_refused) {
                ok = add_part(content, parts, "refused", refused_item(res));
                for (size_t i = 0; ok && i < res->n_refused; i++)
                        ok = json_array_append_new(
                                 refused, json_pack("{s:s, s:s}", "path", res->refused[i].path,
                                                    "reason", res->refused[i].reason)) == 0;
        }
        /* A client shows the content; it must never be empty. */
        if (ok && json_array_size(content) == 0)
                ok = add_part(content, parts, "empty",
                              json_pack("{s:s, s:s}", "type", "text", "text",
                                        "The code ran successfully without output."));
        if (!ok) {
                json_decref(content);
                json_decref(parts);
                json_decref(files);
                json_decref(refused);
                json_decref(changes);
                return NULL;
        }
        json_t *run = json_pack(
            "{s:s, s:s, s:i, s:f, s:I, s:b, s:I, s:b, s:o, s:o, s:o}", "id", run_id, "status",
            airlock_status_name(res->status), "exit_code", res->exit_code, "duration_ms",
            res->duration_ms, "stdout_bytes", (json_int_t)res->stdout_len, "stdout_truncated",
            res->stdout_truncated, "stderr_bytes", (json_int_t)res->stderr_len, "stderr_truncated",
            res->stderr_truncated, "files", files, "refused", refused, "parts", parts);
        if (!run) {
                json_decref(content);
                json_decref(changes);
                return NULL;
        }
        if (changes)
                json_object_set_new(run, "input_changes", changes);
        /* A session cell's outcome for the interpreter's state. */
        if (res->cell_state != AIRLOCK_CELL_NONE)
                json_object_set_new(
                    run, "state",
                    json_string(res->cell_state == AIRLOCK_CELL_KEPT ? "kept" : "rolled_back"));
        if (!run_record) {
                json_decref(run);
                return json_pack("{s:o, s:b}", "content", content, "isError", !res->success);
        }
        return json_pack("{s:o, s:b, s:{s:o}}", "content", content, "isError", !res->success,
                         "_meta", MCP_META_RUN, run);
}

void mcp_result_add_usage(json_t *result, const airlock_result *res)
{
        char *text = result && res ? airlock_usage_to_json(res) : NULL;
        json_t *usage = text ? json_loads(text, 0, NULL) : NULL;
        free(text);
        if (!usage)
                return;
        json_t *meta = json_object_get(result, "_meta");
        if (!meta) {
                meta = json_object();
                if (!meta || json_object_set_new(result, "_meta", meta) < 0) {
                        json_decref(usage);
                        return;
                }
        }
        json_object_set_new(meta, MCP_META_USAGE, usage);
}
