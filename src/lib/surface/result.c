/* Run results: freeing them and the result JSON of docs/design.md, including the
 * ordered "contents" list an agent framework hands to the model. */
#include <jansson.h>
#include <string.h>

#include "fsx/fsx.h"
#include "surface/result.h"
#include "airlock-jansson.h"
#include "core/util.h"

static const char *const change_names[] = {
    [AIRLOCK_CHANGE_CREATED] = "created",
    [AIRLOCK_CHANGE_MODIFIED] = "modified",
    [AIRLOCK_CHANGE_DELETED] = "deleted",
};

const char *airlock_change_name(airlock_change c)
{
        if ((size_t)c < ARRAY_SIZE(change_names) && change_names[c])
                return change_names[c];
        return "modified";
}

static char *result_changes_text(const airlock_result *r)
{
        dynbuf b;
        dynbuf_init(&b, SIZE_MAX);
        int k = dynbuf_appendf(&b, "Changes under /input (not applied to the host):");
        for (size_t i = 0; k >= 0 && i < r->n_input_changes; i++)
                k = dynbuf_appendf(&b, "\n%s %s", airlock_change_name(r->input_changes[i].change),
                                   r->input_changes[i].path);
        if (k < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        size_t len;
        return dynbuf_take(&b, &len);
}

void airlock_result_free(airlock_result *r)
{
        if (!r)
                return;
        free(r->stdout_data);
        free(r->stderr_data);
        fsx_files_free(r->files, r->n_files);
        fsx_refused_free(r->refused, r->n_refused);
        fsx_changes_free(r->input_changes, r->n_input_changes);
        free(r->error_message);
        for (size_t i = 0; i < r->usage.n_tool_calls; i++)
                free(r->usage.tool_calls[i].name);
        free(r->usage.tool_calls);
        for (size_t i = 0; i < r->usage.n_http; i++) {
                free(r->usage.http[i].method);
                free(r->usage.http[i].url);
        }
        free(r->usage.http);
        free(r);
}

/* Text a guest printed is bytes; JSON needs UTF-8, so bad sequences become
 * U+FFFD. CRLF becomes LF when asked (the "contents" text items). Every byte
 * is kept, U+0000 included: a JSON string can hold it (jansson writes
 * \u0000), so the text is handled by its length, never as a C string, and a
 * NUL the guest wrote cannot cut the output short. */
static json_t *text_value(const char *s, size_t len, bool crlf_to_lf)
{
        size_t n;
        char *clean = al_utf8_sanitize_n(s ? s : "", s ? len : 0, &n);
        if (!clean)
                return NULL;
        if (crlf_to_lf) {
                size_t w = 0;
                for (size_t i = 0; i < n; i++) {
                        if (clean[i] == '\r' && i + 1 < n && clean[i + 1] == '\n')
                                continue;
                        clean[w++] = clean[i];
                }
                n = w;
        }
        json_t *j = json_stringn(clean, n);
        free(clean);
        return j;
}

/* Appends "\n" and message to the JSON string details, by length (details
 * may hold U+0000). Returns the new string, or details itself when out of
 * memory. */
static json_t *text_append_line(json_t *details, const char *message)
{
        const char *d = json_string_value(details);
        if (!d)
                return details;
        size_t dn = json_string_length(details), mn = strlen(message);
        char *both = malloc(dn + 1 + mn);
        if (!both)
                return details;
        memcpy(both, d, dn);
        both[dn] = '\n';
        memcpy(both + dn + 1, message, mn);
        json_t *j = json_stringn(both, dn + 1 + mn);
        free(both);
        if (!j)
                return details;
        json_decref(details);
        return j;
}

json_t *result_usage_json(const airlock_usage *u)
{
        json_t *tools = json_array(), *http = json_array();
        json_t *o = json_object();
        if (!tools || !http || !o) {
                json_decref(tools);
                json_decref(http);
                json_decref(o);
                return NULL;
        }
        for (size_t i = 0; i < u->n_tool_calls; i++)
                json_array_append_new(tools,
                                      json_pack("{s:s, s:f, s:b}", "name", u->tool_calls[i].name,
                                                "duration_ms", u->tool_calls[i].duration_ms, "ok",
                                                u->tool_calls[i].ok));
        for (size_t i = 0; i < u->n_http; i++) {
                const airlock_http_record *h = &u->http[i];
                json_array_append_new(http, json_pack("{s:s, s:s, s:i, s:I, s:I, s:b, s:f}",
                                                      "method", h->method, "url", h->url, "status",
                                                      h->status, "bytes_sent",
                                                      (json_int_t)h->bytes_sent, "bytes_received",
                                                      (json_int_t)h->bytes_received, "allowed",
                                                      h->allowed, "duration_ms", h->duration_ms));
        }
        json_object_set_new(o, "wall_ms", json_real(u->wall_ms));
        json_object_set_new(o, "cpu_ms", u->cpu_ms >= 0 ? json_real(u->cpu_ms) : json_null());
        json_object_set_new(o, "cpu_source",
                            u->cpu_source ? json_string(u->cpu_source) : json_null());
        json_object_set_new(o, "peak_private_bytes",
                            u->peak_private_bytes != UINT64_MAX
                                ? json_integer((json_int_t)u->peak_private_bytes)
                                : json_null());
        json_object_set_new(o, "memory_source",
                            u->memory_source ? json_string(u->memory_source) : json_null());
        json_object_set_new(o, "output_bytes", json_integer((json_int_t)u->output_bytes));
        json_object_set_new(o, "tool_calls", tools);
        json_object_set_new(o, "tool_calls_omitted",
                            json_integer((json_int_t)u->tool_calls_omitted));
        json_object_set_new(o, "http_requests", http);
        json_object_set_new(o, "http_requests_omitted", json_integer((json_int_t)u->http_omitted));
        return o;
}

char *airlock_usage_to_json(const airlock_result *r)
{
        json_t *o = r ? result_usage_json(&r->usage) : NULL;
        char *s = o ? json_dumps(o, JSON_COMPACT | AL_JSON_REALS) : NULL;
        json_decref(o);
        return s;
}

json_t *result_json(const airlock_result *r)
{
        json_t *root = json_object();
        json_t *files = json_array(), *refused = json_array(), *contents = json_array();
        if (!root || !files || !refused || !contents) {
                json_decref(root);
                json_decref(files);
                json_decref(refused);
                json_decref(contents);
                return NULL;
        }
        json_object_set_new(root, "success", json_boolean(r->success));
        json_object_set_new(root, "status", json_string(airlock_status_name(r->status)));
        json_object_set_new(root, "exit_code", json_integer(r->exit_code));
        json_object_set_new(root, "stdout", text_value(r->stdout_data, r->stdout_len, false));
        json_object_set_new(root, "stderr", text_value(r->stderr_data, r->stderr_len, false));
        json_object_set_new(root, "stdout_truncated", json_boolean(r->stdout_truncated));
        json_object_set_new(root, "stderr_truncated", json_boolean(r->stderr_truncated));

        if (r->stdout_len)
                json_array_append_new(contents,
                                      json_pack("{s:s, s:o}", "type", "text", "text",
                                                text_value(r->stdout_data, r->stdout_len, true)));
        for (size_t i = 0; i < r->n_files; i++) {
                const airlock_file *f = &r->files[i];
                char *b64 = al_base64_encode(f->data, f->size, NULL);
                json_array_append_new(files, json_pack("{s:s, s:s, s:I, s:s}", "path", f->path,
                                                       "media_type", f->media_type, "size",
                                                       (json_int_t)f->size, "data_base64",
                                                       b64 ? b64 : ""));
                json_array_append_new(contents, json_pack("{s:s, s:s, s:s, s:s}", "type", "data",
                                                          "media_type", f->media_type, "path",
                                                          f->path, "data_base64", b64 ? b64 : ""));
                free(b64);
        }
        /* With a writable /input, what the run changed there: the key only
         * when something changed, so that results without the option keep
         * their exact shape. */
        json_t *changes = r->n_input_changes ? json_array() : NULL;
        if (changes) {
                char *text = result_changes_text(r);
                json_array_append_new(
                    contents, json_pack("{s:s, s:s}", "type", "text", "text", text ? text : ""));
                free(text);
        }
        for (size_t i = 0; changes && i < r->n_input_changes; i++) {
                const airlock_input_change *ch = &r->input_changes[i];
                json_t *e = json_pack("{s:s, s:s}", "path", ch->path, "change",
                                      airlock_change_name(ch->change));
                if (e && ch->change != AIRLOCK_CHANGE_DELETED) {
                        char *b64 = al_base64_encode(ch->data, ch->size, NULL);
                        json_object_set_new(e, "media_type", json_string(ch->media_type));
                        json_object_set_new(e, "size", json_integer((json_int_t)ch->size));
                        json_object_set_new(e, "data_base64", json_string(b64 ? b64 : ""));
                        json_array_append_new(contents,
                                              json_pack("{s:s, s:s, s:s, s:s}", "type", "data",
                                                        "media_type", ch->media_type, "path",
                                                        ch->path, "data_base64", b64 ? b64 : ""));
                        free(b64);
                }
                json_array_append_new(changes, e);
        }
        if (changes)
                json_object_set_new(root, "input_changes", changes);
        for (size_t i = 0; i < r->n_refused; i++)
                json_array_append_new(refused, json_pack("{s:s, s:s}", "path", r->refused[i].path,
                                                         "reason", r->refused[i].reason));
        if (r->success) {
                if (r->stderr_len)
                        json_array_append_new(
                            contents, json_pack("{s:s, s:o}", "type", "text", "text",
                                                text_value(r->stderr_data, r->stderr_len, true)));
                if (json_array_size(contents) == 0)
                        json_array_append_new(
                            contents, json_pack("{s:s, s:s}", "type", "text", "text",
                                                "The code ran successfully without output."));
        } else {
                json_t *details = r->stderr_len ? text_value(r->stderr_data, r->stderr_len, true)
                                                : json_string(r->error_message ? r->error_message
                                                                               : "The code failed "
                                                                                 "without an error "
                                                                                 "message.");
                /* On a limit, the details say which limit and its value even
                 * when the code printed something to stderr. */
                if (r->stderr_len && r->error_message && r->status != AIRLOCK_STATUS_ERROR)
                        details = text_append_line(details, r->error_message);
                json_array_append_new(
                    contents, json_pack("{s:s, s:s, s:o}", "type", "error", "message",
                                        r->error_message ? r->error_message : "The code failed.",
                                        "details", details));
        }
        json_object_set_new(root, "files", files);
        json_object_set_new(root, "refused", refused);
        json_object_set_new(root, "contents", contents);
        json_object_set_new(root, "duration_ms", json_real(r->duration_ms));
        json_object_set_new(root, "usage", result_usage_json(&r->usage));
        /* A session's cell says what became of the session's state. */
        if (r->cell_state != AIRLOCK_CELL_NONE)
                json_object_set_new(
                    root, "state",
                    json_string(r->cell_state == AIRLOCK_CELL_KEPT ? "kept" : "rolled_back"));
        return root;
}

json_t *airlock_result_to_jansson(const airlock_result *r)
{
        return result_json(r);
}

char *airlock_result_to_json(const airlock_result *r)
{
        json_t *root = result_json(r);
        if (!root)
                return NULL;
        char *s = json_dumps(root, JSON_COMPACT | AL_JSON_REALS);
        json_decref(root);
        return s;
}
