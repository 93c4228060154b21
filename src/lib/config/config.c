/* Building and copying configurations. */
#include "config/config.h"

#include <string.h>

#include "fsx/fsx.h"
#include "config/limits.h"
#include "config/pypath.h"
#include "core/util.h"

#define CONFIG_MAX_MOUNTS   256
#define CONFIG_MAX_PRELOADS 64

int airlock_config_new(airlock_config **ret, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_config *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        airlock_limits_default(&c->limits);
        int r = allowlist_new(&c->allow, err);
        if (r >= 0)
                r = tools_new(&c->tools, err);
        if (r >= 0)
                r = secrets_new(&c->secrets, err);
        if (r < 0) {
                airlock_config_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

void config_changed(airlock_config *c)
{
        free(atomic_exchange(&c->fp_memo, NULL));
}

void airlock_config_free(airlock_config *c)
{
        if (!c)
                return;
        config_changed(c);
        free(c->workspace);
        for (size_t i = 0; i < c->n_mounts; i++) {
                free(c->mounts[i].host);
                free(c->mounts[i].dest);
        }
        free(c->mounts);
        allowlist_free(c->allow);
        tools_free(c->tools);
        secrets_free(c->secrets);
        for (size_t i = 0; i < c->n_preloads; i++)
                free(c->preloads[i]);
        free(c->preloads);
        for (size_t i = 0; i < c->n_python_paths; i++)
                free(c->python_paths[i]);
        free(c->python_paths);
        mcp_specs_free(&c->servers);
        free(c);
}

int airlock_config_set_workspace(airlock_config *c, const char *dir, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        if (!dir || !*dir)
                return al_error(err, -EINVAL, NULL, "workspace path is empty");
        char *copy = strdup(dir);
        if (!copy)
                return al_error(err, -ENOMEM, dir, "out of memory");
        free(c->workspace);
        c->workspace = copy;
        return 0;
}

int airlock_config_add_mount(airlock_config *c, const char *host, const char *path,
                             airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        if (!host || !*host)
                return al_error(err, -EINVAL, NULL, "mount host path is empty");
        _cleanup_free_ char *dest = NULL;
        int r = fsx_normalize_mount_path(path ? path : host, &dest, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *h = strdup(host);
        if (!h)
                return al_error(err, -ENOMEM, host, "out of memory");
        /* Two mounts at one destination are a collision (docs/design.md): the
         * second would silently hide the first. The same mount given twice
         * asks for nothing new and is kept once. A file mount that another
         * mount needs as a directory is only known when the sources are
         * opened, and staging refuses it then. */
        for (size_t i = 0; i < c->n_mounts; i++) {
                if (strcmp(c->mounts[i].dest, dest) != 0)
                        continue;
                if (strcmp(c->mounts[i].host, host) == 0)
                        return 0;
                return al_error(err, -EEXIST, host,
                                "collision: mounts %s and %s both go to /input/%s; give one of "
                                "them another path (HOST:PATH)",
                                c->mounts[i].host, host, dest);
        }
        if (c->n_mounts >= CONFIG_MAX_MOUNTS)
                return al_error(err, -E2BIG, host, "too many mounts (at most %d)",
                                CONFIG_MAX_MOUNTS);
        config_mount *m = realloc(c->mounts, (c->n_mounts + 1) * sizeof(*m));
        if (!m)
                return al_error(err, -ENOMEM, host, "out of memory");
        c->mounts = m;
        m[c->n_mounts].host = TAKE_PTR(h);
        m[c->n_mounts].dest = TAKE_PTR(dest);
        c->n_mounts++;
        return 0;
}

int airlock_config_allow(airlock_config *c, const char *target, const char *methods,
                         airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        return allowlist_add(c->allow, target, methods, err);
}

int airlock_config_load_tools(airlock_config *c, const char *file, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        return tools_load_file(c->tools, file, c->limits.tool_timeout_s, err);
}

/* The caller's tool definition in the library's layout (airlock.h,
 * "Growable structs"). */
static int tool_def_in(const airlock_tool_def *def, airlock_tool_def *out, airlock_error *err)
{
        *out = (airlock_tool_def)AIRLOCK_TOOL_DEF_INIT;
        if (!def)
                return al_error(err, -EINVAL, NULL, "add tool: no tool definition");
        return al_struct_in(out, sizeof(*out), def, AIRLOCK_TOOL_DEF_SIZE_V1, "airlock_tool_def",
                            "AIRLOCK_TOOL_DEF_INIT", err);
}

int airlock_config_add_tool(airlock_config *c, const airlock_tool_def *def, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_tool_def d;
        int r = tool_def_in(def, &d, err);
        if (r < 0)
                return r;
        config_changed(c);
        return tools_add_callback(c->tools, &d, err);
}

int airlock_config_add_typed_tool(airlock_config *c, const airlock_tool_def *def,
                                  airlock_tool_typed_fn fn, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_tool_def d;
        int r = tool_def_in(def, &d, err);
        if (r < 0)
                return r;
        config_changed(c);
        return tools_add_typed_callback(c->tools, &d, fn, err);
}

int airlock_config_remove_tool(airlock_config *c, const char *name, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        return tools_remove(c->tools, name, err);
}

int airlock_config_set_limits(airlock_config *c, const airlock_limits *l, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        airlock_limits full;
        int r = limits_from_caller(l, &full, err);
        if (r < 0)
                return r;
        r = limits_check(&full, err);
        if (r < 0)
                return r;
        c->limits = full;
        return 0;
}

void airlock_config_read_limits(const airlock_config *c, airlock_limits *ret, size_t size)
{
        /* As many bytes as the caller's struct has, never more: a caller
         * built with an older airlock.h has a smaller one. */
        if (size < AIRLOCK_LIMITS_SIZE_V1)
                return;
        airlock_limits_init(ret, size);
        memcpy(ret, &c->limits, size < sizeof(c->limits) ? size : sizeof(c->limits));
        ret->size = size;
}

/* A preload is a dotted module name; anything else could smuggle code. */
static bool module_name_valid(const char *m)
{
        size_t n = strlen(m);
        if (n == 0 || n > 128 || m[0] == '.' || m[n - 1] == '.')
                return false;
        for (const char *p = m; *p; p++) {
                bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                          (*p >= '0' && *p <= '9') || *p == '_' || (*p == '.' && p[1] != '.');
                if (!ok)
                        return false;
        }
        return !(m[0] >= '0' && m[0] <= '9');
}

int airlock_config_add_preload(airlock_config *c, const char *module, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        if (!module || !module_name_valid(module))
                return al_error(err, -EINVAL, NULL, "preload '%s' is not a module name",
                                module ? module : "");
        for (size_t i = 0; i < c->n_preloads; i++)
                if (strcmp(c->preloads[i], module) == 0)
                        return 0;
        if (c->n_preloads >= CONFIG_MAX_PRELOADS)
                return al_error(err, -E2BIG, NULL, "too many preloads (at most %d)",
                                CONFIG_MAX_PRELOADS);
        char **p = realloc(c->preloads, (c->n_preloads + 1) * sizeof(*p));
        if (!p)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        c->preloads = p;
        if (!(p[c->n_preloads] = strdup(module)))
                return al_error(err, -ENOMEM, NULL, "out of memory");
        c->n_preloads++;
        return 0;
}

int airlock_config_add_python_path(airlock_config *c, const char *dir, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        _cleanup_free_ char *abs = NULL;
        int r = pypath_normalize(dir, &abs, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < c->n_python_paths; i++)
                if (strcmp(c->python_paths[i], abs) == 0)
                        return 0;
        if (c->n_python_paths >= PYPATH_MAX)
                return al_error(err, -E2BIG, dir, "--python-path %s: too many folders (at most %d)",
                                dir, PYPATH_MAX);
        char **p = realloc(c->python_paths, (c->n_python_paths + 1) * sizeof(*p));
        if (!p)
                return al_error(err, -ENOMEM, dir, "out of memory");
        c->python_paths = p;
        p[c->n_python_paths++] = TAKE_PTR(abs);
        return 0;
}

void airlock_config_set_approval(airlock_config *c, airlock_approval mode)
{
        config_changed(c);
        c->approval = mode;
}

void airlock_config_set_auto_figures(airlock_config *c, bool on)
{
        config_changed(c);
        c->no_auto_figures = !on;
}

void airlock_config_set_input_writable(airlock_config *c, bool on)
{
        config_changed(c);
        c->input_writable = on;
}

size_t airlock_config_allow_count(const airlock_config *c)
{
        return allowlist_count(c->allow);
}

airlock_approval airlock_config_effective_approval(const airlock_config *c)
{
        if (c->approval == AIRLOCK_APPROVAL_ALWAYS || tools_any_requires_approval(c->tools))
                return AIRLOCK_APPROVAL_ALWAYS;
        return AIRLOCK_APPROVAL_NEVER;
}

/* Copies n strings into a new array in *ret (NULL for none), counting in
 * *ret_n those copied, so that a partial copy is freed like a whole one. */
static int strv_copy(char *const *src, size_t n, char ***ret, size_t *ret_n)
{
        if (!n)
                return 0;
        *ret = calloc(n, sizeof(**ret));
        if (!*ret)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (!((*ret)[i] = strdup(src[i])))
                        return -ENOMEM;
                (*ret_n)++;
        }
        return 0;
}

int config_clone(const airlock_config *src, airlock_config **ret, airlock_error *err)
{
        airlock_config *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        c->limits = src->limits;
        c->approval = src->approval;
        c->no_auto_figures = src->no_auto_figures;
        c->input_writable = src->input_writable;
        c->approver = src->approver;
        c->approver_data = src->approver_data;
        int r = 0;
        if (src->workspace && !(c->workspace = strdup(src->workspace)))
                r = -ENOMEM;
        if (r >= 0 && src->n_mounts) {
                c->mounts = calloc(src->n_mounts, sizeof(*c->mounts));
                if (!c->mounts)
                        r = -ENOMEM;
                for (size_t i = 0; r >= 0 && i < src->n_mounts; i++) {
                        c->mounts[i].host = strdup(src->mounts[i].host);
                        c->mounts[i].dest = strdup(src->mounts[i].dest);
                        c->n_mounts++;
                        if (!c->mounts[i].host || !c->mounts[i].dest)
                                r = -ENOMEM;
                }
        }
        if (r >= 0)
                r = strv_copy(src->preloads, src->n_preloads, &c->preloads, &c->n_preloads);
        if (r >= 0)
                r = strv_copy(src->python_paths, src->n_python_paths, &c->python_paths,
                              &c->n_python_paths);
        if (r < 0) {
                airlock_config_free(c);
                return al_error(err, r, NULL, "out of memory");
        }
        r = allowlist_clone(src->allow, &c->allow, err);
        if (r >= 0)
                r = tools_clone(src->tools, &c->tools, err);
        if (r >= 0)
                r = secrets_clone(src->secrets, &c->secrets, err);
        if (r >= 0)
                r = mcp_specs_clone(&src->servers, &c->servers, err);
        if (r < 0) {
                airlock_config_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

int airlock_config_copy(const airlock_config *cfg, airlock_config **ret, airlock_error *err)
{
        airlock_error_clear(err);
        if (!cfg || !ret)
                return al_error(err, -EINVAL, NULL, "no configuration to copy");
        return config_clone(cfg, ret, err);
}

int airlock_config_add_secret(airlock_config *c, const char *name, const void *value, size_t len,
                              unsigned flags, const char *const *targets, airlock_error *err)
{
        airlock_error_clear(err);
        config_changed(c);
        return secrets_add(c->secrets, name, value, len, flags, targets, err);
}

int airlock_secret_placeholder(const char *name, char *buf, size_t size)
{
        /* A name secrets_add() would refuse has no placeholder. */
        char probe[SECRET_PLACEHOLDER_SIZE];
        if (!name || !buf || secrets_add_check_name(name) < 0)
                return -EINVAL;
        secrets_placeholder(name, probe);
        if (strlen(probe) >= size)
                return -ERANGE;
        memcpy(buf, probe, strlen(probe) + 1);
        return 0;
}

size_t airlock_config_secret_count(const airlock_config *c)
{
        return secrets_count(c->secrets);
}

const char *airlock_config_secret_name(const airlock_config *c, size_t i)
{
        return secrets_name(c->secrets, i);
}

int airlock_config_peer_secret(const airlock_config *c, void *buf, size_t size, size_t *len,
                               airlock_error *err)
{
        airlock_error_clear(err);
        const unsigned char *v;
        size_t n;
        if (!c || !buf || !len)
                return al_error(err, -EINVAL, NULL, "no configuration or buffer");
        if (secrets_peer_value(c->secrets, &v, &n) < 0)
                return al_error(err, -ENOENT, NULL,
                                "no cluster secret: declare one whose target is peer "
                                "(--secret NAME=file:PATH@peer)");
        if (n > size)
                return al_error(err, -ERANGE, NULL, "the cluster secret is longer than %zu bytes",
                                size);
        memcpy(buf, v, n);
        *len = n;
        return 0;
}

/* ---- the configuration read back (the Python package) ------------------- */

/* The configuration as data, every entry as the library normalised it: what
 * a binding reads back instead of keeping its own idea of the normal form.
 * NULL with err filled when out of memory. */
char *airlock_config_to_json(const airlock_config *c, airlock_error *err)
{
        airlock_error_clear(err);
        _cleanup_json_ json_t *root = json_object();
        json_t *mounts = json_array(), *allow = json_array(), *tools = json_array();
        json_t *pre = json_array(), *paths = json_array(), *limits = json_object();
        if (!root || !mounts || !allow || !tools || !pre || !paths || !limits) {
                json_decref(mounts);
                json_decref(allow);
                json_decref(tools);
                json_decref(pre);
                json_decref(paths);
                json_decref(limits);
                al_error(err, -ENOMEM, NULL, "out of memory");
                return NULL;
        }
        json_object_set_new(root, "workspace",
                            c->workspace ? json_string(c->workspace) : json_null());
        json_object_set_new(root, "mounts", mounts);
        json_object_set_new(root, "allowed_domains", allow);
        json_object_set_new(root, "tools", tools);
        json_object_set_new(root, "preloads", pre);
        json_object_set_new(root, "python_paths", paths);
        json_object_set_new(root, "limits", limits);
        for (size_t i = 0; i < c->n_mounts; i++) {
                char *dest = NULL;
                if (asprintf(&dest, "/input/%s", c->mounts[i].dest) < 0)
                        dest = NULL;
                json_array_append_new(mounts, json_pack("{s:s, s:s}", "host", c->mounts[i].host,
                                                        "path", dest ? dest : ""));
                free(dest);
        }
        for (size_t i = 0; i < allowlist_count(c->allow); i++) {
                const allow_entry *e = allowlist_get(c->allow, i);
                json_t *m = json_array();
                bool all = e->n_methods == 1 && strcmp(e->methods[0], "*") == 0;
                for (size_t j = 0; m && !all && j < e->n_methods; j++)
                        json_array_append_new(m, json_string(e->methods[j]));
                if (all) {
                        json_decref(m);
                        m = json_null();
                }
                json_array_append_new(allow, json_pack("{s:s, s:o}", "target", e->target, "methods",
                                                       m ? m : json_null()));
        }
        for (size_t i = 0; i < tools_count(c->tools); i++) {
                const tool_info *t = tools_get(c->tools, i);
                json_array_append_new(
                    tools, json_pack("{s:s, s:s, s:O, s:s, s:s}", "name", t->name, "description",
                                     t->description, "parameters", t->parameters, "approval_mode",
                                     t->approval == AIRLOCK_APPROVAL_ALWAYS ? "always_require"
                                                                            : "never_require",
                                     "kind", t->argv ? "command" : "callback"));
        }
        for (size_t i = 0; i < c->n_preloads; i++)
                json_array_append_new(pre, json_string(c->preloads[i]));
        for (size_t i = 0; i < c->n_python_paths; i++)
                json_array_append_new(paths, json_string(c->python_paths[i]));
        const airlock_limit_option *o;
        for (size_t i = 0; (o = airlock_limit_option_at(i)); i++) {
                char buf[64];
                if (airlock_limits_format_option(&c->limits, o->name, buf, sizeof(buf)) >= 0)
                        json_object_set_new(limits, o->name, json_string(buf));
        }
        json_object_set_new(root, "approval_mode",
                            json_string(c->approval == AIRLOCK_APPROVAL_ALWAYS ? "always_require"
                                                                               : "never_require"));
        json_object_set_new(root, "auto_figures", json_boolean(!c->no_auto_figures));
        json_object_set_new(root, "input_writable", json_boolean(c->input_writable));
        json_object_set_new(root, "servers", mcp_specs_to_json(&c->servers));
        char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!s)
                al_error(err, -ENOMEM, NULL, "out of memory");
        return s;
}
