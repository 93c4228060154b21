/* Host tools: the registry, the tools file, argument validation and dispatch.
 *
 * A registry is built once (single-threaded) and then only read, so calls
 * from several threads at once need no lock. Command tools are run by
 * tools_command.c. */
#include "host/tools.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"
#include "host/secrets.h"

#define TOOL_NAME_MAX    64
#define TOOL_ARGV_MAX    256
#define TOOL_ARG_MAX_LEN 4096
#define TOOL_TIMEOUT_MAX 86400.0

struct tool_registry {
        tool_info *tools;
        size_t n;
};

static const char *const json_types[] = {"string", "number", "integer", "boolean",
                                         "object", "array",  "null"};

/* ---- tool records ------------------------------------------------------- */

static void tool_clear(tool_info *t)
{
        free(t->name);
        free(t->description);
        json_decref(t->parameters);
        if (t->argv) {
                for (char **p = t->argv; *p; p++)
                        free(*p);
                free(t->argv);
        }
        if (t->cwd_fd >= 0)
                close(t->cwd_fd);
        free(t->dir);
        free(t->file);
        *t = (tool_info){.cwd_fd = -1};
}

static int tool_copy(const tool_info *src, tool_info *dst)
{
        *dst = (tool_info){.cwd_fd = -1};
        dst->approval = src->approval;
        dst->fn = src->fn;
        dst->typed_fn = src->typed_fn;
        dst->userdata = src->userdata;
        dst->timeout_s = src->timeout_s;
        dst->name = strdup(src->name);
        dst->description = strdup(src->description);
        dst->parameters = json_deep_copy(src->parameters);
        bool oom = !dst->name || !dst->description || !dst->parameters;
        if (!oom && src->dir && !(dst->dir = strdup(src->dir)))
                oom = true;
        if (!oom && src->file && !(dst->file = strdup(src->file)))
                oom = true;
        if (!oom && src->argv) {
                size_t n = 0;
                while (src->argv[n])
                        n++;
                dst->argv = calloc(n + 1, sizeof(char *));
                oom = !dst->argv;
                for (size_t i = 0; !oom && i < n; i++)
                        oom = !(dst->argv[i] = strdup(src->argv[i]));
        }
        if (!oom && src->cwd_fd >= 0 &&
            (dst->cwd_fd = fcntl(src->cwd_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                int r = -errno;
                tool_clear(dst);
                return r;
        }
        if (oom) {
                tool_clear(dst);
                return -ENOMEM;
        }
        return 0;
}

/* ---- the registry ------------------------------------------------------- */

int tools_new(tool_registry **ret, airlock_error *err)
{
        tool_registry *reg = calloc(1, sizeof(*reg));
        if (!reg)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        *ret = reg;
        return 0;
}

void tools_free(tool_registry *reg)
{
        if (!reg)
                return;
        for (size_t i = 0; i < reg->n; i++)
                tool_clear(&reg->tools[i]);
        free(reg->tools);
        free(reg);
}

int tools_clone(const tool_registry *reg, tool_registry **ret, airlock_error *err)
{
        tool_registry *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (reg->n && !(c->tools = calloc(reg->n, sizeof(*c->tools)))) {
                free(c);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        for (size_t i = 0; i < reg->n; i++) {
                int r = tool_copy(&reg->tools[i], &c->tools[i]);
                if (r < 0) {
                        tools_free(c);
                        return al_error(err, r, NULL, "cannot copy tool '%s': %s",
                                        reg->tools[i].name, strerror(-r));
                }
                c->n++;
        }
        *ret = c;
        return 0;
}

size_t tools_count(const tool_registry *reg)
{
        return reg ? reg->n : 0;
}

const tool_info *tools_get(const tool_registry *reg, size_t i)
{
        return reg && i < reg->n ? &reg->tools[i] : NULL;
}

const tool_info *tools_find(const tool_registry *reg, const char *name)
{
        for (size_t i = 0; name && reg && i < reg->n; i++)
                if (strcmp(reg->tools[i].name, name) == 0)
                        return &reg->tools[i];
        return NULL;
}

bool tools_any_requires_approval(const tool_registry *reg)
{
        for (size_t i = 0; reg && i < reg->n; i++)
                if (reg->tools[i].approval == AIRLOCK_APPROVAL_ALWAYS)
                        return true;
        return false;
}

/* Names reach the guest as call_tool("name") and the model as text, so they
 * are kept to a small, unambiguous alphabet. */
static int name_check(const char *name, const char *where, const char *path, airlock_error *err)
{
        if (!name || !*name)
                return al_error(err, -EINVAL, path, "%s%sa tool name is empty", where ? where : "",
                                where ? ": " : "");
        size_t n = strlen(name);
        bool ok = n <= TOOL_NAME_MAX;
        for (size_t i = 0; ok && i < n; i++) {
                char c = name[i];
                ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '.' || c == '-';
        }
        if (!ok)
                return al_error(err, -EINVAL, path,
                                "%s%stool name '%.80s' is not 1-%d characters of A-Z a-z 0-9 _ . -",
                                where ? where : "", where ? ": " : "", name, TOOL_NAME_MAX);
        if (strcmp(name, "execute_code") == 0)
                return al_error(err, -EINVAL, path,
                                "%s%stool name 'execute_code' is reserved for airlock itself",
                                where ? where : "", where ? ": " : "");
        return 0;
}

static bool type_known(const char *t)
{
        for (size_t i = 0; i < ARRAY_SIZE(json_types); i++)
                if (strcmp(json_types[i], t) == 0)
                        return true;
        return false;
}

/* A property's "type": a known type name or a non-empty list of them. */
static bool type_spec_valid(const json_t *type)
{
        if (json_is_string(type))
                return type_known(json_string_value(type));
        if (!json_is_array(type) || json_array_size(type) == 0)
                return false;
        size_t i;
        json_t *v;
        json_array_foreach (type, i, v) {
                if (!json_is_string(v) || !type_known(json_string_value(v)))
                        return false;
        }
        return true;
}

/* Whether arguments the schema does not name are accepted. As in JSON
 * Schema, a schema without "additionalProperties" accepts them: only an
 * explicit false refuses them (the Python package writes false for a
 * callable without **kwargs, and leaves the key out for one with it). */
static bool additional_allowed(const json_t *schema)
{
        const json_t *ap = json_object_get(schema, "additionalProperties");
        return !json_is_false(ap);
}

/* Checks the parts of a parameters schema that validation relies on, so a
 * mistake in a schema shows up when the tool is registered, not as a
 * puzzling refusal of every call. prefix names the tool (and file). */
static int schema_check(const json_t *schema, const char *prefix, const char *path,
                        airlock_error *err)
{
        if (!json_is_object(schema))
                return al_error(err, -EINVAL, path, "%s: \"parameters\" must be a JSON object",
                                prefix);
        const json_t *type = json_object_get(schema, "type");
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "object") == 0))
                return al_error(err, -EINVAL, path,
                                "%s: \"parameters\".\"type\" must be \"object\" (the arguments "
                                "are an object)",
                                prefix);
        const json_t *props = json_object_get(schema, "properties");
        if (props && !json_is_object(props))
                return al_error(err, -EINVAL, path,
                                "%s: \"parameters\".\"properties\" must be an object", prefix);
        const char *key;
        const json_t *p;
        json_object_foreach ((json_t *)props, key, p) {
                if (!json_is_object(p))
                        return al_error(err, -EINVAL, path,
                                        "%s: the schema of argument '%s' must be an object", prefix,
                                        key);
                const json_t *t = json_object_get(p, "type");
                if (t && !type_spec_valid(t))
                        return al_error(err, -EINVAL, path,
                                        "%s: argument '%s' has an unknown \"type\" (one of string, "
                                        "number, integer, boolean, object, array, null, or a list "
                                        "of them)",
                                        prefix, key);
                const json_t *e = json_object_get(p, "enum");
                if (e && (!json_is_array(e) || json_array_size(e) == 0))
                        return al_error(err, -EINVAL, path,
                                        "%s: \"enum\" of argument '%s' must be a non-empty array",
                                        prefix, key);
                /* The item schemas validation follows: their types too. */
                const json_t *items = json_object_get(p, "items");
                for (int d = 0; json_is_object(items) && d < TOOLS_MAX_SCHEMA_DEPTH; d++) {
                        const json_t *it = json_object_get(items, "type");
                        if (it && !type_spec_valid(it))
                                return al_error(err, -EINVAL, path,
                                                "%s: the items of argument '%s' have an unknown "
                                                "\"type\"",
                                                prefix, key);
                        items = json_object_get(items, "items");
                }
        }
        const json_t *req = json_object_get(schema, "required");
        if (req && !json_is_array(req))
                return al_error(err, -EINVAL, path,
                                "%s: \"parameters\".\"required\" must be an array of names",
                                prefix);
        size_t i;
        const json_t *r;
        json_array_foreach ((json_t *)req, i, r) {
                if (!json_is_string(r))
                        return al_error(err, -EINVAL, path,
                                        "%s: \"parameters\".\"required\" must be an array of names",
                                        prefix);
                if (!additional_allowed(schema) && !json_object_get(props, json_string_value(r)))
                        return al_error(err, -EINVAL, path,
                                        "%s: required argument '%s' is not in "
                                        "\"parameters\".\"properties\"",
                                        prefix, json_string_value(r));
        }
        return 0;
}

/* Appends t (taking ownership) under the registry's rules: the same name
 * replaces the old tool and moves last. */
static int registry_put(tool_registry *reg, tool_info *t, airlock_error *err)
{
        for (size_t i = 0; i < reg->n; i++) {
                if (strcmp(reg->tools[i].name, t->name) == 0) {
                        tool_clear(&reg->tools[i]);
                        memmove(&reg->tools[i], &reg->tools[i + 1],
                                (reg->n - i - 1) * sizeof(*reg->tools));
                        reg->tools[reg->n - 1] = *t;
                        *t = (tool_info){.cwd_fd = -1};
                        return 0;
                }
        }
        if (reg->n >= TOOLS_MAX_TOOLS)
                return al_error(err, -E2BIG, NULL, "too many tools (at most %d); '%s' not added",
                                TOOLS_MAX_TOOLS, t->name);
        tool_info *v = realloc(reg->tools, (reg->n + 1) * sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        reg->tools = v;
        v[reg->n++] = *t;
        *t = (tool_info){.cwd_fd = -1};
        return 0;
}

/* Registers a callback tool: def->fn, or typed_fn in its place when it is
 * set (a tool that also names the type of its failures). */
static int add_callback(tool_registry *reg, const airlock_tool_def *def,
                        airlock_tool_typed_fn typed_fn, airlock_error *err)
{
        if (!def)
                return al_error(err, -EINVAL, NULL, "tool definition is NULL");
        int r = name_check(def->name, NULL, NULL, err);
        if (r < 0)
                return r;
        char prefix[TOOL_NAME_MAX + 16];
        snprintf(prefix, sizeof(prefix), "tool '%s'", def->name);
        if (!def->fn && !typed_fn)
                return al_error(err, -EINVAL, NULL, "%s: no function given", prefix);
        if (def->approval != AIRLOCK_APPROVAL_NEVER && def->approval != AIRLOCK_APPROVAL_ALWAYS)
                return al_error(err, -EINVAL, NULL, "%s: approval mode %d is not valid", prefix,
                                (int)def->approval);
        json_t *params;
        if (def->parameters_json) {
                json_error_t jerr;
                params = json_loads(def->parameters_json, JSON_REJECT_DUPLICATES, &jerr);
                if (!params)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: parameters are not valid JSON: %s (line %d, column "
                                        "%d)",
                                        prefix, jerr.text, jerr.line, jerr.column);
        } else {
                params = json_pack("{s:s}", "type", "object");
                if (!params)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        r = schema_check(params, prefix, NULL, err);
        if (r < 0) {
                json_decref(params);
                return r;
        }
        tool_info t = {.cwd_fd = -1};
        t.name = strdup(def->name);
        t.description = strdup(def->description ? def->description : "");
        t.parameters = params;
        t.approval = def->approval;
        t.fn = typed_fn ? NULL : def->fn;
        t.typed_fn = typed_fn;
        t.userdata = def->userdata;
        if (!t.name || !t.description) {
                tool_clear(&t);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        r = registry_put(reg, &t, err);
        tool_clear(&t);
        return r;
}

int tools_add_callback(tool_registry *reg, const airlock_tool_def *def, airlock_error *err)
{
        return add_callback(reg, def, NULL, err);
}

int tools_add_typed_callback(tool_registry *reg, const airlock_tool_def *def,
                             airlock_tool_typed_fn fn, airlock_error *err)
{
        if (!fn)
                return al_error(err, -EINVAL, NULL, "tool '%s': no function given",
                                def && def->name ? def->name : "");
        return add_callback(reg, def, fn, err);
}

int tools_remove(tool_registry *reg, const char *name, airlock_error *err)
{
        for (size_t i = 0; name && i < reg->n; i++) {
                if (strcmp(reg->tools[i].name, name) == 0) {
                        tool_clear(&reg->tools[i]);
                        memmove(&reg->tools[i], &reg->tools[i + 1],
                                (reg->n - i - 1) * sizeof(*reg->tools));
                        reg->n--;
                        return 0;
                }
        }
        return al_error(err, -ENOENT, NULL, "no tool named '%.80s' to remove",
                        name ? name : "(null)");
}

/* ---- the tools file ----------------------------------------------------- */

/* True when name is an executable file in a directory of $PATH, the way
 * posix_spawnp() will look for it. */
static bool on_path(const char *name)
{
        const char *path = getenv("PATH");
        if (!path)
                path = "/usr/local/bin:/usr/bin:/bin";
        for (const char *p = path;;) {
                size_t n = strcspn(p, ":");
                char buf[PATH_MAX];
                if (snprintf(buf, sizeof(buf), "%.*s%s%s", (int)n, p, n ? "/" : "./", name) <
                        (int)sizeof(buf) &&
                    access(buf, X_OK) == 0)
                        return true;
                if (!p[n])
                        return false;
                p += n + 1;
        }
}

/* Parses one element of "tools" into t. prefix names the file. */
static int tool_parse(const json_t *o, size_t index, const char *file, int dir_fd, const char *dir,
                      double default_timeout_s, tool_info *t, airlock_error *err)
{
        if (!json_is_object(o))
                return al_error(err, -EINVAL, file, "%s: tool #%zu is not an object", file,
                                index + 1);
        const json_t *name = json_object_get(o, "name");
        if (!json_is_string(name))
                return al_error(err, -EINVAL, file, "%s: tool #%zu has no \"name\" string", file,
                                index + 1);
        char where[AIRLOCK_PATH_MAX + 32];
        snprintf(where, sizeof(where), "%s: tool #%zu", file, index + 1);
        int r = name_check(json_string_value(name), where, file, err);
        if (r < 0)
                return r;
        char prefix[AIRLOCK_PATH_MAX + TOOL_NAME_MAX + 16];
        snprintf(prefix, sizeof(prefix), "%s: tool '%s'", file, json_string_value(name));

        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)o, key, v) {
                static const char *const known[] = {"name",    "description", "parameters",
                                                    "command", "timeout",     "approval_mode"};
                bool ok = false;
                for (size_t i = 0; i < ARRAY_SIZE(known); i++)
                        ok |= strcmp(known[i], key) == 0;
                if (!ok)
                        return al_error(err, -EINVAL, file,
                                        "%s: unknown field \"%s\" (known: name, description, "
                                        "parameters, command, timeout, approval_mode)",
                                        prefix, key);
        }
        const json_t *desc = json_object_get(o, "description");
        if (desc && !json_is_string(desc))
                return al_error(err, -EINVAL, file, "%s: \"description\" must be a string", prefix);
        const json_t *params = json_object_get(o, "parameters");
        if (params) {
                r = schema_check(params, prefix, file, err);
                if (r < 0)
                        return r;
        }
        const json_t *cmd = json_object_get(o, "command");
        size_t argc = json_array_size(cmd);
        if (!json_is_array(cmd) || argc == 0)
                return al_error(err, -EINVAL, file,
                                "%s: \"command\" must be a non-empty array of strings, like "
                                "[\"python3\", \"tool.py\"]",
                                prefix);
        if (argc > TOOL_ARGV_MAX)
                return al_error(err, -E2BIG, file, "%s: \"command\" has more than %d elements",
                                prefix, TOOL_ARGV_MAX);
        for (size_t i = 0; i < argc; i++) {
                const json_t *a = json_array_get(cmd, i);
                if (!json_is_string(a) || json_string_length(a) == 0 ||
                    json_string_length(a) > TOOL_ARG_MAX_LEN ||
                    strlen(json_string_value(a)) != json_string_length(a))
                        return al_error(err, -EINVAL, file,
                                        "%s: \"command\" element %zu must be a non-empty string "
                                        "(no NUL, at most %d bytes)",
                                        prefix, i, TOOL_ARG_MAX_LEN);
        }
        const char *argv0 = json_string_value(json_array_get(cmd, 0));
        if (strchr(argv0, '/') ? faccessat(dir_fd, argv0, X_OK, 0) < 0 : !on_path(argv0))
                return al_error(err, -ENOENT, file,
                                "%s: command '%s' is not an executable file %s%s", prefix, argv0,
                                strchr(argv0, '/') ? "relative to " : "on PATH",
                                strchr(argv0, '/') ? dir : "");
        double timeout = default_timeout_s;
        const json_t *to = json_object_get(o, "timeout");
        if (to) {
                if (!json_is_number(to) || !(json_number_value(to) > 0) ||
                    json_number_value(to) > TOOL_TIMEOUT_MAX)
                        return al_error(err, -EINVAL, file,
                                        "%s: \"timeout\" must be a number of seconds in (0, %g]",
                                        prefix, TOOL_TIMEOUT_MAX);
                timeout = json_number_value(to);
        }
        airlock_approval approval = AIRLOCK_APPROVAL_NEVER;
        const json_t *am = json_object_get(o, "approval_mode");
        if (am) {
                const char *s = json_string_value(am);
                if (s && strcmp(s, "never_require") == 0)
                        approval = AIRLOCK_APPROVAL_NEVER;
                else if (s && strcmp(s, "always_require") == 0)
                        approval = AIRLOCK_APPROVAL_ALWAYS;
                else
                        return al_error(err, -EINVAL, file,
                                        "%s: \"approval_mode\" must be \"never_require\" or "
                                        "\"always_require\"",
                                        prefix);
        }

        *t = (tool_info){.cwd_fd = -1, .approval = approval, .timeout_s = timeout};
        t->name = strdup(json_string_value(name));
        t->description = strdup(desc ? json_string_value(desc) : "");
        t->parameters = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        t->dir = strdup(dir);
        t->argv = calloc(argc + 1, sizeof(char *));
        bool oom = !t->name || !t->description || !t->parameters || !t->dir || !t->argv;
        for (size_t i = 0; !oom && i < argc; i++)
                oom = !(t->argv[i] = strdup(json_string_value(json_array_get(cmd, i))));
        if (!oom)
                t->cwd_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
        if (oom || t->cwd_fd < 0) {
                r = oom ? -ENOMEM : -errno;
                tool_clear(t);
                return al_error(err, r, file, "%s: %s", prefix, strerror(-r));
        }
        return 0;
}

/* Reads the whole file at path, refusing anything but a regular file of at
 * most TOOLS_MAX_FILE bytes. */
static int file_read_capped(const char *path, char **ret, size_t *ret_len, airlock_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return al_error(err, -errno, path, "cannot open tools file %s: %s", path,
                                strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return al_error(err, -errno, path, "cannot stat tools file %s: %s", path,
                                strerror(errno));
        if (!S_ISREG(st.st_mode))
                return al_error(err, -EINVAL, path, "tools file %s is not a regular file", path);
        if (st.st_size > (off_t)TOOLS_MAX_FILE)
                return al_error(err, -EFBIG, path, "tools file %s is larger than %u bytes", path,
                                TOOLS_MAX_FILE);
        /* Room for what fstat() saw plus one byte, so a file that grew since
         * is noticed without allocating the whole cap for every load. */
        size_t want = (size_t)st.st_size + 1;
        _cleanup_free_ char *buf = malloc(want + 1);
        if (!buf)
                return al_error(err, -ENOMEM, path, "out of memory");
        ssize_t n = al_read_full(fd, buf, want);
        if (n < 0)
                return al_error(err, (int)n, path, "cannot read tools file %s: %s", path,
                                strerror((int)-n));
        if ((size_t)n > (size_t)st.st_size)
                return al_error(err, -EBUSY, path, "tools file %s changed while being read", path);
        *ret_len = (size_t)n;
        *ret = TAKE_PTR(buf);
        return 0;
}

int tools_load_file(tool_registry *reg, const char *path, double default_timeout_s,
                    airlock_error *err)
{
        if (!path || !*path)
                return al_error(err, -EINVAL, NULL, "tools file path is empty");
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = file_read_capped(path, &text, &len, err);
        if (r < 0)
                return r;
        json_error_t jerr;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return al_error(err, -EINVAL, path, "%s: not valid JSON: %s (line %d, column %d)",
                                path, jerr.text, jerr.line, jerr.column);
        tool_info *parsed = NULL;
        size_t n_parsed = 0;
        _cleanup_close_ int dir_fd = -1;
        _cleanup_free_ char *dir_copy = strdup(path);
        _cleanup_free_ char *dir_abs = NULL;
        _cleanup_free_ char *base_copy = NULL;
        _cleanup_free_ char *file_abs = NULL;
        const json_t *tools = json_object_get(root, "tools");
        if (!json_is_object(root) || !json_is_array(tools) || json_object_size(root) != 1) {
                r = al_error(err, -EINVAL, path,
                             "%s: must be an object with one key, \"tools\", an array of tools",
                             path);
                goto out;
        }
        if (json_array_size(tools) > TOOLS_MAX_TOOLS) {
                r = al_error(err, -E2BIG, path, "%s: more than %d tools", path, TOOLS_MAX_TOOLS);
                goto out;
        }
        if (!dir_copy) {
                r = al_error(err, -ENOMEM, path, "out of memory");
                goto out;
        }
        /* The tools file is the host user's own configuration, so its folder
         * is resolved as a path once, then held open: commands run there. */
        const char *dir = dirname(dir_copy);
        dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dir_abs = realpath(dir, NULL);
        if (dir_fd < 0 || !dir_abs) {
                r = al_error(err, -errno, path, "%s: cannot open its folder %s: %s", path, dir,
                             strerror(errno));
                goto out;
        }
        parsed = calloc(json_array_size(tools) + 1, sizeof(*parsed));
        base_copy = strdup(path);
        if (!parsed || !base_copy ||
            asprintf(&file_abs, "%s/%s", strcmp(dir_abs, "/") ? dir_abs : "", basename(base_copy)) <
                0) {
                file_abs = NULL;
                r = al_error(err, -ENOMEM, path, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < json_array_size(tools); i++) {
                r = tool_parse(json_array_get(tools, i), i, path, dir_fd, dir_abs,
                               default_timeout_s, &parsed[i], err);
                if (r < 0)
                        goto out;
                n_parsed++;
                if (!(parsed[i].file = strdup(file_abs))) {
                        r = al_error(err, -ENOMEM, path, "out of memory");
                        goto out;
                }
                for (size_t j = 0; j < i; j++)
                        if (strcmp(parsed[j].name, parsed[i].name) == 0) {
                                r = al_error(err, -EINVAL, path, "%s: tool '%s' is declared twice",
                                             path, parsed[i].name);
                                goto out;
                        }
        }
        /* All or nothing: check the names and the count cap before changing
         * the registry. Tools files add up (several --tools); a name that
         * another tools file declared already is an error, since which of the
         * two the agent would get is a guess. The same file loaded again
         * replaces its own tools, and so would a callback tool's name. */
        size_t fresh = 0;
        for (size_t i = 0; i < n_parsed; i++) {
                const tool_info *old = tools_find(reg, parsed[i].name);
                if (old && old->file && strcmp(old->file, file_abs) != 0) {
                        r = al_error(err, -EEXIST, path,
                                     "tool '%s' is declared in both %s and %s; rename one of "
                                     "them",
                                     parsed[i].name, old->file, file_abs);
                        goto out;
                }
                fresh += old == NULL;
        }
        if (reg->n + fresh > TOOLS_MAX_TOOLS) {
                r = al_error(err, -E2BIG, path, "%s: too many tools in all (at most %d)", path,
                             TOOLS_MAX_TOOLS);
                goto out;
        }
        for (size_t i = 0; i < n_parsed; i++) {
                r = registry_put(reg, &parsed[i], err);
                if (r < 0)
                        goto out;
        }
        r = 0;
out:
        for (size_t i = 0; i < n_parsed; i++)
                tool_clear(&parsed[i]);
        free(parsed);
        json_decref(root);
        return r;
}

/* ---- validation --------------------------------------------------------- */

static const char *value_type(const json_t *v)
{
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return "object";
        case JSON_ARRAY:
                return "array";
        case JSON_STRING:
                return "string";
        case JSON_INTEGER:
                return "integer";
        case JSON_REAL:
                return "number";
        case JSON_TRUE:
        case JSON_FALSE:
                return "boolean";
        default:
                return "null";
        }
}

static bool value_has_type(const json_t *v, const char *type)
{
        if (strcmp(type, "string") == 0)
                return json_is_string(v);
        if (strcmp(type, "number") == 0)
                return json_is_number(v);
        if (strcmp(type, "integer") == 0)
                return json_is_integer(v);
        if (strcmp(type, "boolean") == 0)
                return json_is_boolean(v);
        if (strcmp(type, "object") == 0)
                return json_is_object(v);
        if (strcmp(type, "array") == 0)
                return json_is_array(v);
        if (strcmp(type, "null") == 0)
                return json_is_null(v);
        return false;
}

static const char *type_phrase(const char *t)
{
        if (strcmp(t, "integer") == 0 || strcmp(t, "object") == 0 || strcmp(t, "array") == 0)
                return strcmp(t, "integer") == 0  ? "an integer"
                       : strcmp(t, "object") == 0 ? "an object"
                                                  : "an array";
        if (strcmp(t, "null") == 0)
                return "null";
        return strcmp(t, "string") == 0    ? "a string"
               : strcmp(t, "number") == 0  ? "a number"
               : strcmp(t, "boolean") == 0 ? "a boolean"
                                           : t;
}

/* "a number", "a string or null", for the expected type of an argument. */
static void type_describe(const json_t *type, char *buf, size_t size)
{
        if (json_is_string(type)) {
                snprintf(buf, size, "%s", type_phrase(json_string_value(type)));
                return;
        }
        size_t k = 0, n = json_array_size(type);
        buf[0] = '\0';
        for (size_t i = 0; i < n && k < size; i++)
                k += (size_t)snprintf(buf + k, size - k, "%s%s",
                                      i == 0 ? "" : (i + 1 == n ? " or " : ", "),
                                      type_phrase(json_string_value(json_array_get(type, i))));
}

static bool type_matches(const json_t *v, const json_t *type)
{
        if (json_is_string(type))
                return value_has_type(v, json_string_value(type));
        size_t i;
        const json_t *t;
        json_array_foreach ((json_t *)type, i, t) {
                if (value_has_type(v, json_string_value(t)))
                        return true;
        }
        return false;
}

/* The known argument names, for a message about an unknown one. */
static void names_describe(const json_t *props, char *buf, size_t size)
{
        size_t k = 0;
        const char *key;
        const json_t *v;
        buf[0] = '\0';
        json_object_foreach ((json_t *)props, key, v) {
                if (k >= size)
                        break;
                k += (size_t)snprintf(buf + k, size - k, "%s%s", k ? ", " : "", key);
        }
        if (k == 0)
                snprintf(buf, size, "none");
}

/* Checks one value against its schema: "type", "enum", and for an array
 * each item against "items" (when that is a schema object), to a bounded
 * depth, so that list[str] refuses [1] as str refuses 1. where names the
 * value in the message ("argument 'tags' item 2"). */
static int value_check(const char *name, const char *where, const json_t *p, const json_t *v,
                       int depth, airlock_error *err)
{
        if (!json_is_object(p))
                return 0;
        const json_t *t = json_object_get(p, "type");
        if (t && !type_matches(v, t)) {
                char want[160];
                type_describe(t, want, sizeof(want));
                return al_error(err, -EINVAL, NULL, "tool '%s': %s must be %s, got %s", name, where,
                                want, value_type(v));
        }
        const json_t *e = json_object_get(p, "enum");
        if (e) {
                bool found = false;
                size_t j;
                const json_t *c;
                json_array_foreach ((json_t *)e, j, c) {
                        found |= json_equal((json_t *)c, (json_t *)v);
                }
                if (!found) {
                        _cleanup_free_ char *choices =
                            json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);
                        return al_error(err, -EINVAL, NULL, "tool '%s': %s must be one of %.300s",
                                        name, where, choices ? choices : "the enum");
                }
        }
        const json_t *items = json_object_get(p, "items");
        if (json_is_array(v) && json_is_object(items) && depth < TOOLS_MAX_SCHEMA_DEPTH) {
                size_t i;
                const json_t *item;
                json_array_foreach ((json_t *)v, i, item) {
                        char inner[256];
                        snprintf(inner, sizeof(inner), "%.200s item %zu", where, i);
                        int r = value_check(name, inner, items, item, depth + 1, err);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int tools_validate(const tool_info *tool, const json_t *args, airlock_error *err)
{
        const char *name = tool->name;
        if (!json_is_object(args))
                return al_error(err, -EINVAL, NULL,
                                "tool '%s': the arguments must be an object of named arguments, "
                                "got %s",
                                name, args ? value_type(args) : "nothing");
        size_t size = json_dumpb(args, NULL, 0, JSON_COMPACT);
        if (size > TOOLS_MAX_PAYLOAD)
                return al_error(err, -E2BIG, NULL,
                                "tool '%s': the arguments are %zu bytes as JSON, more than the "
                                "limit of %u",
                                name, size, TOOLS_MAX_PAYLOAD);
        const json_t *schema = tool->parameters;
        const json_t *props = json_object_get(schema, "properties");
        const json_t *req = json_object_get(schema, "required");
        size_t i;
        const json_t *r;
        json_array_foreach ((json_t *)req, i, r) {
                const char *key = json_string_value(r);
                if (!json_object_get(args, key)) {
                        const json_t *t = json_object_get(json_object_get(props, key), "type");
                        char want[160] = "";
                        if (t)
                                type_describe(t, want, sizeof(want));
                        return al_error(err, -EINVAL, NULL,
                                        "tool '%s': missing required argument '%s'%s%s%s", name,
                                        key, t ? " (" : "", want, t ? ")" : "");
                }
        }
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)args, key, v) {
                if (json_object_iter_key_len(json_object_key_to_iter(key)) != strlen(key))
                        return al_error(err, -EINVAL, NULL,
                                        "tool '%s': an argument name contains a NUL character",
                                        name);
                const json_t *p = json_object_get(props, key);
                if (!p) {
                        if (additional_allowed(schema))
                                continue;
                        char known[512];
                        names_describe(props, known, sizeof(known));
                        return al_error(err, -EINVAL, NULL,
                                        "tool '%s': unknown argument '%.100s' (expected: %s)", name,
                                        key, known);
                }
                char where[160];
                snprintf(where, sizeof(where), "argument '%.100s'", key);
                int rc = value_check(name, where, p, v, 0, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

/* ---- calls -------------------------------------------------------------- */

tool_fail tools_vfail(tool_fail kind, char **ret_message, const char *fmt, va_list ap)
{
        char *s = NULL;
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        *ret_message = s ? s : strdup("out of memory");
        return kind;
}

tool_fail tools_fail(tool_fail kind, char **ret_message, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        tool_fail f = tools_vfail(kind, ret_message, fmt, ap);
        va_end(ap);
        return f;
}

/* The name a failing typed tool gave for the type of its failure, kept
 * only when it looks like a Python identifier (letters, digits, '_' and
 * dots, at most TOOL_NAME_MAX bytes): it is shown to the guest as data,
 * and a name is all it may be. */
static char *error_type_clean(char *type)
{
        size_t n = type ? strlen(type) : 0;
        bool ok = n > 0 && n <= TOOL_NAME_MAX;
        for (size_t i = 0; ok && i < n; i++) {
                char c = type[i];
                ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
                     (i > 0 && c >= '0' && c <= '9');
        }
        if (ok)
                return type;
        free(type);
        return NULL;
}

static tool_fail call_callback(const tool_info *t, const char *input, const secret_store *ss,
                               json_t **ret_result, char **ret_message, char **ret_type)
{
        char *out = NULL, *msg = NULL, *type = NULL;
        int r = t->typed_fn ? t->typed_fn(t->userdata, input, &out, &msg, &type)
                            : t->fn(t->userdata, input, &out, &msg);
        if (r < 0) {
                tool_fail f;
                /* Scrubbed as the bytes came, before the ones that are not
                 * UTF-8 are replaced (which would change a value that has
                 * some); withheld when that cannot be done. */
                if (msg && secrets_scrub_string(ss, &msg) < 0) {
                        free(msg);
                        msg = strdup("the tool's message was withheld: it could not be checked "
                                     "for the secrets' values");
                }
                if (msg) {
                        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
                        f = tools_fail(TOOL_FAIL_RUNTIME, ret_message, "%s",
                                       clean ? clean : "tool failed");
                } else {
                        f = tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                       "tool '%s' failed (error %d) without a message", t->name, r);
                }
                type = error_type_clean(type);
                if (ret_type)
                        *ret_type = TAKE_PTR(type);
                free(type);
                free(out);
                free(msg);
                return f;
        }
        free(type);
        free(msg);
        if (!out)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "tool '%s' returned no result",
                                  t->name);
        size_t len = strlen(out);
        if (len > TOOLS_MAX_RESULT) {
                free(out);
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                  "tool '%s' returned more than %u bytes", t->name,
                                  TOOLS_MAX_RESULT);
        }
        json_error_t jerr;
        json_t *v = json_loadb(out, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        free(out);
        /* jansson's text quotes the input near the error, cut at its own
         * buffer's size before any scrub could see it: not passed on. */
        char *near = strstr(jerr.text, " near ");
        if (near)
                *near = '\0';
        if (!v)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                  "tool '%s' returned something that is not one JSON value: %s "
                                  "(line %d, column %d)",
                                  t->name, jerr.text, jerr.line, jerr.column);
        *ret_result = v;
        return TOOL_OK;
}

tool_fail tools_call(const tool_registry *reg, const char *name, const json_t *args,
                     json_t **ret_result, char **ret_message)
{
        return tools_call_ex(reg, name, args, NULL, ret_result, ret_message);
}

tool_fail tools_call_ex(const tool_registry *reg, const char *name, const json_t *args,
                        const tool_call_bounds *bounds, json_t **ret_result, char **ret_message)
{
        return tools_call_typed(reg, name, args, bounds, ret_result, ret_message, NULL);
}

tool_fail tools_call_typed(const tool_registry *reg, const char *name, const json_t *args,
                           const tool_call_bounds *bounds, json_t **ret_result, char **ret_message,
                           char **ret_error_type)
{
        const tool_info *t = tools_find(reg, name);
        if (!t) {
                char known[512] = "";
                size_t k = 0;
                for (size_t i = 0; reg && i < reg->n && k < sizeof(known); i++)
                        k += (size_t)snprintf(known + k, sizeof(known) - k, "%s%s", i ? ", " : "",
                                              reg->tools[i].name);
                return tools_fail(TOOL_FAIL_INVALID, ret_message, "unknown tool '%.100s' (%s%s)",
                                  name ? name : "", k ? "available: " : "no tools are registered",
                                  known);
        }
        airlock_error err = {0};
        if (tools_validate(t, args, &err) < 0)
                return tools_fail(TOOL_FAIL_INVALID, ret_message, "%s", err.message);
        _cleanup_free_ char *input = json_dumps(args, JSON_COMPACT);
        if (!input)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
        if (t->fn || t->typed_fn)
                return call_callback(t, input, bounds ? bounds->secrets : NULL, ret_result,
                                     ret_message, ret_error_type);
        return tools_run_command(t, input, strlen(input), bounds, ret_result, ret_message);
}

/* ---- fingerprints ------------------------------------------------------- */

char *tools_fingerprint_text(const tool_registry *reg)
{
        json_t *arr = json_array();
        if (!arr)
                return NULL;
        for (size_t i = 0; reg && i < reg->n; i++) {
                const tool_info *t = &reg->tools[i];
                json_t *o = json_pack("{s:s,s:s,s:O,s:s}", "name", t->name, "description",
                                      t->description, "parameters", t->parameters, "approval",
                                      t->approval == AIRLOCK_APPROVAL_ALWAYS ? "always_require"
                                                                             : "never_require");
                if (!o)
                        goto fail;
                json_array_append_new(arr, o);
                if (t->argv) {
                        json_t *cmd = json_array();
                        for (char **p = t->argv; cmd && *p; p++)
                                json_array_append_new(cmd, json_string(*p));
                        json_object_set_new(o, "command", cmd);
                        json_object_set_new(o, "dir", json_string(t->dir ? t->dir : ""));
                        json_object_set_new(o, "timeout", json_real(t->timeout_s));
                } else {
                        /* A callback is identified by its code and data addresses:
                         * the same function with other data is another tool. */
                        char buf[2 * sizeof(void *) * 2 + 8];
                        union {
                                airlock_tool_fn fn;
                                void *p;
                        } u = {.fn = t->fn};
                        union {
                                airlock_tool_typed_fn fn;
                                void *p;
                        } ut = {.fn = t->typed_fn};
                        if (t->typed_fn)
                                u.p = ut.p;
                        snprintf(buf, sizeof(buf), "%p", u.p);
                        json_object_set_new(o, "fn", json_string(buf));
                        snprintf(buf, sizeof(buf), "%p", t->userdata);
                        json_object_set_new(o, "userdata", json_string(buf));
                }
        }
        char *s = json_dumps(arr, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(arr);
        return s;
fail:
        json_decref(arr);
        return NULL;
}
