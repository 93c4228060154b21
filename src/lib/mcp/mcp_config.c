/* The servers files: the "mcpServers" object that MCP clients already
 * write (Claude Desktop, Cursor; VS Code's "servers"), with airlock's own
 * keys for what a server's tools may do. Every server is checked when it is
 * added, so that a mistake is one clear error naming the server and the
 * key, before any sandbox is built. */
#include <fcntl.h>
#include <fnmatch.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mcp/mcp.h"

/* The keys of a server's object: the clients' own, then airlock's. */
static const char *const server_keys[] = {
    "type",     "command",        "args",           "env",       "cwd",
    "url",      "headers",        "allowTools",     "denyTools", "timeout",
    "approval", "maxResultBytes", "maxCallsPerRun", "tools",
};
static const char *const tool_keys[] = {"timeout", "approval", "maxResultBytes", "maxCallsPerRun"};

/* Python keywords and the names the stubs' package uses for itself: a
 * server or tool of such a name gets '_' after it. */
static const char *const reserved[] = {
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "search",
    "ToolError",
    "ApprovalRequired",
    "Image",
    "Blob",
    "Resource",
    "ResourceLink",
    "Audio",
    "servers",
    /* Every other name the stubs use: the typing names a server's module
     * imports, its helpers, the builtins its annotations and bodies
     * name, the package's own names and files. A tool of such a name
     * would rebind it, and break its whole module. */
    "Any",
    "Literal",
    "Required",
    "TypedDict",
    "_call",
    "_acall",
    "locals",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "UpstreamError",
    "CallLimitError",
    "__all__",
    "__init__",
    "_index",
    "__getattr__",
    "__dir__",
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__path__",
    "__builtins__",
    "_base64",
    "_importlib",
    "_call_tool",
    "_MODULES",
    "_TOOLS",
    "_ERRORS",
    "_Binary",
    "_part",
    "_result",
    "_raise",
    "_outcome",
    "_SLICE_MS",
    "_start",
    "_collect",
    "_send",
    "_batches",
    "_flush",
    "_words",
};

void mcp_identifier(const char *name, char *buf, size_t size)
{
        size_t k = 0;
        if (size == 0)
                return;
        if ((name[0] >= '0' && name[0] <= '9') || name[0] == '\0')
                if (k + 1 < size)
                        buf[k++] = '_';
        for (const char *p = name; *p && k + 1 < size; p++) {
                char c = *p;
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '_';
                buf[k++] = ok ? c : '_';
        }
        buf[k] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
                if (strcmp(buf, reserved[i]) == 0 && k + 1 < size) {
                        buf[k++] = '_';
                        buf[k] = '\0';
                        break;
                }
}

void mcp_specs_free(mcp_specs *s)
{
        for (size_t i = 0; s && i < s->n; i++) {
                free(s->v[i].name);
                free(s->v[i].module);
                free(s->v[i].file);
                free(s->v[i].dir);
                json_decref(s->v[i].json);
        }
        if (s) {
                free(s->v);
                s->v = NULL;
                s->n = 0;
        }
}

int mcp_specs_clone(const mcp_specs *src, mcp_specs *dst, airlock_error *err)
{
        *dst = (mcp_specs){0};
        if (!src->n)
                return 0;
        dst->v = calloc(src->n, sizeof(*dst->v));
        if (!dst->v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; i < src->n; i++) {
                const mcp_spec *a = &src->v[i];
                mcp_spec *b = &dst->v[i];
                dst->n++;
                b->name = strdup(a->name);
                b->module = strdup(a->module);
                b->file = a->file ? strdup(a->file) : NULL;
                b->dir = strdup(a->dir);
                b->json = json_deep_copy(a->json);
                if (!b->name || !b->module || (a->file && !b->file) || !b->dir || !b->json) {
                        mcp_specs_free(dst);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
        }
        return 0;
}

json_t *mcp_specs_to_json(const mcp_specs *s)
{
        json_t *o = json_object();
        for (size_t i = 0; o && i < s->n; i++)
                json_object_set(o, s->v[i].name, s->v[i].json);
        return o;
}

/* The prefix of every message about one server: where it was declared. */
static void where(char *buf, size_t size, const char *file, const char *name)
{
        if (file)
                snprintf(buf, size, "%s: server '%.64s'", file, name);
        else
                snprintf(buf, size, "server '%.64s'", name);
}

static bool in_list(const char *key, const char *const *list, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(key, list[i]) == 0)
                        return true;
        return false;
}

/* True when name is an executable file in a directory of path. */
static bool on_path(const char *name, const char *path)
{
        if (!path)
                path = "/usr/local/bin:/usr/bin:/bin";
        for (const char *p = path;;) {
                size_t n = strcspn(p, ":");
                char buf[PATH_MAX];
                if (n &&
                    snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, name) < (int)sizeof(buf) &&
                    access(buf, X_OK) == 0)
                        return true;
                if (!p[n])
                        return false;
                p += n + 1;
        }
}

/* Checks the secret references "${secret:NAME}" in a string value: each
 * closed and naming a valid secret name (its existence is checked when the
 * server starts: secrets may be declared after the servers). */
static int check_refs(const char *v, const char *at, const char *key, const char *sub,
                      airlock_error *err)
{
        for (const char *p = strstr(v, "${secret:"); p; p = strstr(p + 1, "${secret:")) {
                const char *s = p + 9, *e = strchr(s, '}');
                char name[SECRET_NAME_MAX + 1];
                size_t n = e ? (size_t)(e - s) : 0;
                if (!e || n == 0 || n > SECRET_NAME_MAX)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: \"%s\".\"%s\": a secret reference must be "
                                        "${secret:NAME}",
                                        at, key, sub);
                memcpy(name, s, n);
                name[n] = '\0';
                if (secrets_add_check_name(name) < 0)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: \"%s\".\"%s\": '%s' is not a secret name", at, key,
                                        sub, name);
        }
        return 0;
}

static int check_string_map(const json_t *m, const char *at, const char *key, bool refs,
                            airlock_error *err)
{
        if (!json_is_object(m))
                return al_error(err, -EINVAL, NULL, "%s: \"%s\" must be an object of strings", at,
                                key);
        const char *k;
        const json_t *v;
        json_object_foreach ((json_t *)m, k, v) {
                if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
                    !*k || strchr(k, '=') || strchr(k, '\n'))
                        return al_error(err, -EINVAL, NULL,
                                        "%s: \"%s\".\"%.64s\" must be a string without NUL (and "
                                        "the name without '=')",
                                        at, key, k);
                if (refs && check_refs(json_string_value(v), at, key, k, err) < 0)
                        return -EINVAL;
        }
        return 0;
}

static int check_number(const json_t *o, const char *key, double lo, double hi, const char *at,
                        airlock_error *err)
{
        const json_t *v = json_object_get(o, key);
        if (!v)
                return 0;
        if (!json_is_number(v) || !(json_number_value(v) >= lo) || json_number_value(v) > hi)
                return al_error(err, -EINVAL, NULL, "%s: \"%s\" must be a number in [%g, %g]", at,
                                key, lo, hi);
        return 0;
}

static int check_approval(const json_t *o, const char *at, airlock_error *err)
{
        const json_t *v = json_object_get(o, "approval");
        const char *s = json_string_value(v);
        if (v &&
            !(s && (strcmp(s, "auto") == 0 || strcmp(s, "never") == 0 || strcmp(s, "always") == 0)))
                return al_error(err, -EINVAL, NULL,
                                "%s: \"approval\" must be \"auto\" (from the tool's annotations), "
                                "\"never\" or \"always\"",
                                at);
        return 0;
}

/* The limits that a server and each of its tools may set. */
static int check_limits(const json_t *o, const char *at, airlock_error *err)
{
        int r = check_number(o, "timeout", 0.001, 86400, at, err);
        if (r >= 0)
                r = check_number(o, "maxResultBytes", 1, MCP_MAX_RESULT, at, err);
        if (r >= 0)
                r = check_number(o, "maxCallsPerRun", 0, 1000000, at, err);
        if (r >= 0)
                r = check_approval(o, at, err);
        return r;
}

static int check_patterns(const json_t *o, const char *key, const char *at, airlock_error *err)
{
        const json_t *v = json_object_get(o, key);
        if (!v)
                return 0;
        size_t i;
        const json_t *p;
        if (!json_is_array(v))
                return al_error(err, -EINVAL, NULL,
                                "%s: \"%s\" must be an array of tool names (shell wildcards "
                                "allowed)",
                                at, key);
        json_array_foreach ((json_t *)v, i, p) {
                if (!json_is_string(p) || json_string_length(p) == 0 || json_string_length(p) > 256)
                        return al_error(err, -EINVAL, NULL,
                                        "%s: \"%s\" element %zu must be a non-empty tool name", at,
                                        key, i);
        }
        return 0;
}

/* The keys of a server that say what its tools may do. */
static int check_limits_and_tools(const json_t *o, const char *at, const char *file,
                                  airlock_error *err)
{
        int r;
        if ((r = check_patterns(o, "allowTools", at, err)) < 0 ||
            (r = check_patterns(o, "denyTools", at, err)) < 0 || (r = check_limits(o, at, err)) < 0)
                return r;
        const json_t *tools = json_object_get(o, "tools");
        if (tools) {
                if (!json_is_object(tools))
                        return al_error(err, -EINVAL, file,
                                        "%s: \"tools\" must be an object {TOOL: {settings}}", at);
                const char *tn;
                const json_t *t;
                json_object_foreach ((json_t *)tools, tn, t) {
                        char tat[AIRLOCK_PATH_MAX + 256];
                        snprintf(tat, sizeof(tat), "%s, tool '%.64s'", at, tn);
                        if (!json_is_object(t))
                                return al_error(err, -EINVAL, file, "%s: must be an object", tat);
                        const char *k;
                        const json_t *tv;
                        json_object_foreach ((json_t *)t, k, tv) {
                                if (!in_list(k, tool_keys, ARRAY_SIZE(tool_keys)))
                                        return al_error(err, -EINVAL, file,
                                                        "%s: unknown key \"%.64s\" (known: "
                                                        "timeout, approval, maxResultBytes, "
                                                        "maxCallsPerRun)",
                                                        tat, k);
                        }
                        if ((r = check_limits(t, tat, err)) < 0)
                                return r;
                }
        }
        return 0;
}

/* Checks one server's object; dir is where relative paths resolve. */
/* The settings of a server at a URL (o, with "url" url and "type" type,
 * NULL when not given), named at in messages. */
static int check_url_server(const json_t *o, const json_t *url, const char *type, const char *at,
                            const char *file, airlock_error *err)
{
        int r;
        const char *u = json_string_value(url);
        if (!u || !(strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0))
                return al_error(err, -EINVAL, file,
                                "%s: \"url\" must be an http:// or https:// URL", at);
        const json_t *h = json_object_get(o, "headers");
        if (h && (r = check_string_map(h, at, "headers", true, err)) < 0)
                return r;
        for (const char *const *k = (const char *const[]){"command", "args", "env", "cwd", NULL};
             *k; k++)
                if (json_object_get(o, *k))
                        return al_error(err, -EINVAL, file,
                                        "%s: \"%s\" is for a server started on the host, "
                                        "not one at a \"url\"",
                                        at, *k);
        if (type && strcmp(type, "sse") == 0)
                return al_error(err, -EOPNOTSUPP, file,
                                "%s: \"type\" \"sse\" (the old HTTP+SSE transport) is "
                                "not supported; the server's Streamable HTTP endpoint is "
                                "(\"type\": \"http\")",
                                at);
        return check_limits_and_tools(o, at, file, err);
}

/* Contract: the command c of a server started on the host is an
 * executable file, looked up as the server will be started (cwd and env
 * its settings, dir the servers file's folder), so that a typo fails the
 * load, not the first call. */
static int check_command(const char *c, const json_t *cwd, const json_t *env, const char *dir,
                         const char *at, const char *file, airlock_error *err)
{
        /* The command is looked up as the server will be started: a path
         * with a '/' against the working folder, a bare name on the PATH of
         * the server's environment (the host's, unless "env" sets one). */
        const char *path = json_string_value(json_object_get(env, "PATH"));
        if (!path)
                path = getenv("PATH");
        if (strchr(c, '/')) {
                char full[PATH_MAX];
                const char *base = dir;
                char cwdbuf[PATH_MAX];
                if (cwd && json_string_value(cwd)[0] == '/')
                        base = json_string_value(cwd);
                else if (cwd) {
                        snprintf(cwdbuf, sizeof(cwdbuf), "%s/%s", dir, json_string_value(cwd));
                        base = cwdbuf;
                }
                struct stat st;
                if (snprintf(full, sizeof(full), "%s%s%s", c[0] == '/' ? "" : base,
                             c[0] == '/' ? "" : "/", c) >= (int)sizeof(full))
                        return al_error(err, -ENAMETOOLONG, file, "%s: \"command\" is too long",
                                        at);
                if (stat(full, &st) < 0 || !S_ISREG(st.st_mode) || access(full, X_OK) < 0)
                        return al_error(err, -ENOENT, file,
                                        "%s: \"command\" %s is not an executable file", at, full);
        } else if (!on_path(c, path)) {
                return al_error(err, -ENOENT, file,
                                "%s: \"command\" '%.200s' is not an executable file on PATH", at,
                                c);
        }
        return 0;
}

static int check_server(const char *name, const json_t *o, const char *file, const char *dir,
                        airlock_error *err)
{
        char at[AIRLOCK_PATH_MAX + 128];
        where(at, sizeof(at), file, name);
        if (!json_is_object(o))
                return al_error(err, -EINVAL, file, "%s: must be an object", at);
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)o, key, v) {
                if (!in_list(key, server_keys, ARRAY_SIZE(server_keys)))
                        return al_error(err, -EINVAL, file,
                                        "%s: unknown key \"%.64s\" (known: type, command, args, "
                                        "env, cwd, url, headers, allowTools, denyTools, timeout, "
                                        "approval, maxResultBytes, maxCallsPerRun, tools)",
                                        at, key);
        }
        const json_t *cmd = json_object_get(o, "command"), *url = json_object_get(o, "url");
        const char *type = json_string_value(json_object_get(o, "type"));
        if (json_object_get(o, "type") &&
            !(type && (strcmp(type, "stdio") == 0 || strcmp(type, "http") == 0 ||
                       strcmp(type, "streamable-http") == 0 || strcmp(type, "sse") == 0)))
                return al_error(err, -EINVAL, file,
                                "%s: \"type\" must be \"stdio\", \"http\" or \"sse\"", at);
        if (!!cmd == !!url)
                return al_error(err, -EINVAL, file,
                                "%s: exactly one of \"command\" (a server started on the host) "
                                "and \"url\" (a remote server) is needed",
                                at);
        int r = 0;
        if (url)
                return check_url_server(o, url, type, at, file, err);
        if (type && strcmp(type, "stdio") != 0)
                return al_error(err, -EINVAL, file,
                                "%s: \"type\" \"%s\" needs a \"url\", not a \"command\"", at, type);
        if (json_object_get(o, "headers"))
                return al_error(err, -EINVAL, file, "%s: \"headers\" is for a server at a \"url\"",
                                at);
        const char *c = json_string_value(cmd);
        if (!c || !*c || strlen(c) != json_string_length(cmd))
                return al_error(err, -EINVAL, file, "%s: \"command\" must be a non-empty string",
                                at);
        const json_t *args = json_object_get(o, "args");
        if (args) {
                size_t i;
                const json_t *a;
                if (!json_is_array(args) || json_array_size(args) > 1024)
                        return al_error(err, -EINVAL, file,
                                        "%s: \"args\" must be an array of strings", at);
                json_array_foreach ((json_t *)args, i, a) {
                        if (!json_is_string(a) ||
                            strlen(json_string_value(a)) != json_string_length(a))
                                return al_error(err, -EINVAL, file,
                                                "%s: \"args\" element %zu must be a string "
                                                "without NUL",
                                                at, i);
                }
        }
        const json_t *env = json_object_get(o, "env");
        if (env && (r = check_string_map(env, at, "env", true, err)) < 0)
                return r;
        const json_t *cwd = json_object_get(o, "cwd");
        if (cwd) {
                const char *d = json_string_value(cwd);
                struct stat st;
                char full[PATH_MAX];
                if (!d || !*d)
                        return al_error(err, -EINVAL, file, "%s: \"cwd\" must be a folder's path",
                                        at);
                snprintf(full, sizeof(full), "%s%s%s", d[0] == '/' ? "" : dir,
                         d[0] == '/' ? "" : "/", d);
                if (stat(full, &st) < 0 || !S_ISDIR(st.st_mode))
                        return al_error(err, -ENOENT, file, "%s: \"cwd\" %s is not a folder", at,
                                        full);
        }
        r = check_command(c, cwd, env, dir, at, file, err);
        if (r < 0)
                return r;
        return check_limits_and_tools(o, at, file, err);
}

static int add_checked(mcp_specs *s, const char *name, const json_t *server, const char *file,
                       const char *dir, airlock_error *err)
{
        char at[AIRLOCK_PATH_MAX + 128];
        where(at, sizeof(at), file, name);
        size_t n = strlen(name);
        if (n == 0 || n > MCP_NAME_MAX)
                return al_error(err, -EINVAL, file, "%s: a server name is 1 to %d bytes", at,
                                MCP_NAME_MAX);
        if (!al_utf8_valid(name, n))
                return al_error(err, -EILSEQ, file, "a server name is not valid UTF-8");
        char module[MCP_NAME_MAX + 8];
        mcp_identifier(name, module, sizeof(module));
        for (size_t i = 0; i < s->n; i++) {
                if (strcmp(s->v[i].name, name) == 0)
                        return al_error(err, -EEXIST, file, "%s: declared twice (also in %s)", at,
                                        s->v[i].file ? s->v[i].file : "the configuration");
                if (strcmp(s->v[i].module, module) == 0)
                        return al_error(err, -EEXIST, file,
                                        "%s: its Python name '%s' is that of server '%s' too; "
                                        "rename one of them",
                                        at, module, s->v[i].name);
        }
        if (s->n >= MCP_MAX_SERVERS)
                return al_error(err, -E2BIG, file, "%s: more than %d servers", at, MCP_MAX_SERVERS);
        int r = check_server(name, server, file, dir, err);
        if (r < 0)
                return r;
        mcp_spec *v = realloc(s->v, (s->n + 1) * sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        s->v = v;
        mcp_spec *sp = &v[s->n];
        *sp = (mcp_spec){0};
        sp->name = strdup(name);
        sp->module = strdup(module);
        sp->file = file ? strdup(file) : NULL;
        sp->dir = strdup(dir);
        sp->json = json_deep_copy(server);
        if (!sp->name || !sp->module || (file && !sp->file) || !sp->dir || !sp->json) {
                free(sp->name);
                free(sp->module);
                free(sp->file);
                free(sp->dir);
                json_decref(sp->json);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        s->n++;
        return 0;
}

int mcp_specs_add(mcp_specs *s, const char *name, const json_t *server, const char *file,
                  airlock_error *err)
{
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
                return al_error(err, -errno, NULL, "getcwd: %m");
        if (!name)
                return al_error(err, -EINVAL, NULL, "a server needs a name");
        return add_checked(s, name, server, file, cwd, err);
}

/* Adds every server of root, the parsed servers JSON, all or nothing: what
 * names it in messages (a file's path, or "servers JSON"), file the path
 * recorded in the specs (NULL for text), dir where relative paths
 * resolve. */
static int load_root(mcp_specs *s, const json_t *root, const char *what, const char *file,
                     const char *dir, airlock_error *err)
{
        const json_t *servers = json_object_get(root, "mcpServers");
        const char *top = "mcpServers";
        if (!servers) {
                servers = json_object_get(root, "servers");
                top = "servers";
        }
        if (!json_is_object(root) || !json_is_object(servers))
                return al_error(err, -EINVAL, file,
                                "%s: not a servers file: expected "
                                "{\"mcpServers\": {NAME: {\"command\", \"args\", \"env\", \"cwd\"} "
                                "| {\"url\", \"headers\"}}}",
                                what);
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)root, key, v) {
                /* VS Code's "inputs" prompt the user; airlock has no one
                 * to prompt, so they are refused like any unknown key. */
                if (strcmp(key, top) != 0)
                        return al_error(err, -EINVAL, file,
                                        "%s: unknown key \"%.64s\" at the top (only \"%s\")", what,
                                        key, top);
        }
        mcp_specs tmp;
        int r = mcp_specs_clone(s, &tmp, err);
        if (r < 0)
                return r;
        json_object_foreach ((json_t *)servers, key, v) {
                if ((r = add_checked(&tmp, key, v, file, dir, err)) < 0) {
                        mcp_specs_free(&tmp);
                        return r;
                }
        }
        mcp_specs_free(s);
        *s = tmp;
        return 0;
}

int mcp_specs_load_file(mcp_specs *s, const char *path, airlock_error *err)
{
        char full[PATH_MAX];
        if (!realpath(path, full))
                return al_error(err, -errno, path, "servers file %s: %m", path);
        _cleanup_close_ int fd = open(full, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return al_error(err, -errno, path, "servers file %s: %m", path);
        if (!S_ISREG(st.st_mode) || st.st_size > MCP_MAX_FILE)
                return al_error(err, -EINVAL, path,
                                "servers file %s: not a regular file of at most %u bytes", path,
                                MCP_MAX_FILE);
        json_error_t jerr;
        _cleanup_json_ json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return al_error(err, -EINVAL, path, "servers file %s: not JSON: %s (line %d)", full,
                                jerr.text, jerr.line);
        char what[PATH_MAX + 16];
        snprintf(what, sizeof(what), "servers file %s", full);
        char dirbuf[PATH_MAX];
        snprintf(dirbuf, sizeof(dirbuf), "%s", full);
        return load_root(s, root, what, full, dirname(dirbuf), err);
}

int mcp_specs_load_text(mcp_specs *s, const char *text, airlock_error *err)
{
        if (strlen(text) > MCP_MAX_FILE)
                return al_error(err, -E2BIG, NULL, "servers JSON: more than %u bytes",
                                MCP_MAX_FILE);
        json_error_t jerr;
        _cleanup_json_ json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return al_error(err, -EINVAL, NULL, "servers JSON: not JSON: %s (line %d)",
                                jerr.text, jerr.line);
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
                return al_error(err, -errno, NULL, "getcwd: %m");
        return load_root(s, root, "servers JSON", NULL, cwd, err);
}
