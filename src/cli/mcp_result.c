/* From a run's result to an MCP CallToolResult. The result JSON of docs/design.md
 * is the single source: its "contents" list gives the items and their order,
 * and the whole object is the structuredContent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "base.h"

char *mcp_file_uri(const char *path)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(path);
        char *out = malloc(sizeof("file://") + 3 * n);
        if (!out)
                return NULL;
        char *p = stpcpy(out, "file://");
        for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
                if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                    (*s >= '0' && *s <= '9') || strchr("-._~/", *s)) {
                        *p++ = (char)*s;
                } else {
                        *p++ = '%';
                        *p++ = hex[*s >> 4];
                        *p++ = hex[*s & 15];
                }
        }
        *p = '\0';
        return out;
}

json_t *mcp_output_schema(void)
{
        return json_pack(
            "{s:s, s:{s:{s:s}, s:{s:s, s:[s,s,s,s,s]}, s:{s:[s,s]}, s:{s:s}, s:{s:s}, "
            "s:{s:s}, s:{s:s}, s:{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}, "
            "s:[s,s]}}, s:{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}}, s:[s,s]}}, s:{s:s, s:{s:s, "
            "s:{s:{s:s}}, s:[s]}}, s:{s:s}}, s:[s,s,s,s,s,s,s,s,s]}",
            "type", "object", "properties",
            /* success */ "success", "type", "boolean",
            /* status */ "status", "type", "string", "enum", "ok", "error", "timeout", "memory",
            "killed",
            /* exit_code: -1 when the guest did not exit by itself (null is never sent) */
            "exit_code", "type", "integer", "null",
            /* streams */ "stdout", "type", "string", "stderr", "type", "string",
            "stdout_truncated", "type", "boolean", "stderr_truncated", "type", "boolean",
            /* files */ "files", "type", "array", "items", "type", "object", "properties", "path",
            "type", "string", "media_type", "type", "string", "size", "type", "integer",
            "data_base64", "type", "string", "required", "path", "data_base64",
            /* refused */ "refused", "type", "array", "items", "type", "object", "properties",
            "path", "type", "string", "reason", "type", "string", "required", "path", "reason",
            /* contents */ "contents", "type", "array", "items", "type", "object", "properties",
            "type", "type", "string", "required", "type",
            /* duration */ "duration_ms", "type", "number",
            /* required */ "required", "success", "status", "exit_code", "stdout", "stderr",
            "files", "refused", "contents", "duration_ms");
}

json_t *mcp_tool_error(const char *message)
{
        return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", message,
                         "isError", 1);
}

/* One item of "contents" as an MCP content item: text as text; a file as an
 * image item when its media type is an image type, else as an embedded resource
 * with the file's URI; an error as text. NULL for an item of unknown type. */
static json_t *content_item(const json_t *item)
{
        const char *type = json_string_value(json_object_get(item, "type"));
        if (!type)
                return NULL;
        if (strcmp(type, "text") == 0) {
                const json_t *text = json_object_get(item, "text");
                if (!json_is_string(text))
                        return NULL;
                return json_pack("{s:s, s:O}", "type", "text", "text", text);
        }
        if (strcmp(type, "data") == 0) {
                const char *mt = json_string_value(json_object_get(item, "media_type"));
                const char *path = json_string_value(json_object_get(item, "path"));
                const json_t *data = json_object_get(item, "data_base64");
                if (!mt || !path || !json_is_string(data))
                        return NULL;
                if (strncmp(mt, "image/", 6) == 0)
                        return json_pack("{s:s, s:O, s:s}", "type", "image", "data", data,
                                         "mimeType", mt);
                _cleanup_free_ char *uri = mcp_file_uri(path);
                if (!uri)
                        return NULL;
                return json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "resource", "resource", "uri",
                                 uri, "mimeType", mt, "blob", data);
        }
        if (strcmp(type, "error") == 0) {
                /* The details are the guest's stderr and may hold U+0000:
                 * joined by length, never through a C string. */
                const char *msg = json_string_value(json_object_get(item, "message"));
                const json_t *jd = json_object_get(item, "details");
                const char *details = json_string_value(jd);
                size_t details_len = details ? json_string_length(jd) : 0;
                dynbuf b;
                dynbuf_init(&b, 1u << 30);
                int r = dynbuf_appendf(&b, "Error: %s%s", msg ? msg : "the code failed",
                                       details_len ? "\n" : "");
                if (r >= 0 && details_len)
                        r = dynbuf_append(&b, details, details_len);
                json_t *o =
                    r >= 0 ? json_pack("{s:s, s:s%}", "type", "text", "text", b.data, b.len) : NULL;
                dynbuf_free(&b);
                return o;
        }
        return NULL;
}

/* The agent is told what /output held that did not come back and why, in
 * one text item; the reference dropped such entries silently. */
static json_t *refused_item(const json_t *refused)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        int r = dynbuf_appendf(&b, "Not returned from /output:");
        size_t i;
        const json_t *e;
        json_array_foreach (refused, i, e) {
                const char *path = json_string_value(json_object_get(e, "path"));
                const char *reason = json_string_value(json_object_get(e, "reason"));
                if (r >= 0)
                        r = dynbuf_appendf(&b, "\n- %s (%s)", path ? path : "?",
                                           reason ? reason : "refused");
        }
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        json_t *o = json_pack("{s:s, s:s}", "type", "text", "text", b.data);
        dynbuf_free(&b);
        return o;
}

json_t *mcp_tool_result(const airlock_result *res)
{
        json_t *structured = airlock_result_to_jansson(res);
        if (!structured)
                return NULL;
        json_t *content = json_array();
        const json_t *contents = json_object_get(structured, "contents");
        size_t i;
        const json_t *item;
        json_array_foreach (contents, i, item) {
                json_t *c = content_item(item);
                if (c)
                        json_array_append_new(content, c);
        }
        const json_t *refused = json_object_get(structured, "refused");
        if (json_array_size(refused) > 0) {
                json_t *c = refused_item(refused);
                if (c)
                        json_array_append_new(content, c);
        }
        /* A client shows the content; it must never be empty. */
        if (json_array_size(content) == 0)
                json_array_append_new(
                    content,
                    json_pack("{s:s, s:s}", "type", "text", "text",
                              res->success ? "The code ran without output." : "The code failed."));
        return json_pack("{s:o, s:b, s:o}", "content", content, "isError", !res->success,
                         "structuredContent", structured);
}
