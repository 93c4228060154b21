/* Run results: freeing them and the result JSON of DESIGN.md, including the
 * ordered "contents" list an agent framework hands to the model. */
#include <jansson.h>
#include <string.h>

#include "fsx.h"
#include "result.h"
#include "util.h"

static const char *const status_names[] = {
    [AIRLOCK_STATUS_OK] = "ok",           [AIRLOCK_STATUS_ERROR] = "error",
    [AIRLOCK_STATUS_TIMEOUT] = "timeout", [AIRLOCK_STATUS_MEMORY] = "memory",
    [AIRLOCK_STATUS_KILLED] = "killed",
};

const char *airlock_status_name(airlock_status s)
{
        if ((size_t)s < ARRAY_SIZE(status_names) && status_names[s])
                return status_names[s];
        return "error";
}

void airlock_result_free(airlock_result *r)
{
        if (!r)
                return;
        free(r->stdout_data);
        free(r->stderr_data);
        fsx_files_free(r->files, r->n_files);
        fsx_refused_free(r->refused, r->n_refused);
        free(r->error_message);
        free(r);
}

/* Text a guest printed is bytes; JSON needs UTF-8, so bad sequences become
 * U+FFFD. CRLF becomes LF when asked (the "contents" text items). */
static json_t *text_value(const char *s, size_t len, bool crlf_to_lf)
{
        char *clean = al_utf8_sanitize(s ? s : "", s ? len : 0);
        if (!clean)
                return NULL;
        if (crlf_to_lf) {
                char *w = clean;
                for (const char *p = clean; *p; p++) {
                        if (p[0] == '\r' && p[1] == '\n')
                                continue;
                        *w++ = *p;
                }
                *w = '\0';
        }
        json_t *j = json_string(clean);
        free(clean);
        return j;
}

json_t *al_result_json(const airlock_result *r)
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
                if (r->stderr_len && r->error_message && r->status != AIRLOCK_STATUS_ERROR) {
                        const char *d = json_string_value(details);
                        char *both = NULL;
                        if (d && asprintf(&both, "%s\n%s", d, r->error_message) >= 0) {
                                json_decref(details);
                                details = json_string(both);
                                free(both);
                        }
                }
                json_array_append_new(
                    contents, json_pack("{s:s, s:s, s:o}", "type", "error", "message",
                                        r->error_message ? r->error_message : "The code failed.",
                                        "details", details));
        }
        json_object_set_new(root, "files", files);
        json_object_set_new(root, "refused", refused);
        json_object_set_new(root, "contents", contents);
        json_object_set_new(root, "duration_ms", json_real(r->duration_ms));
        return root;
}

char *airlock_result_to_json(const airlock_result *r)
{
        json_t *root = al_result_json(r);
        if (!root)
                return NULL;
        char *s = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        return s;
}
