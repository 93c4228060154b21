/* The execute_code tool description and the agent instructions, written from
 * the live configuration. These texts are read by models: they say exactly
 * what the sandbox offers (tools and their arguments, files, network,
 * limits) and nothing it does not. */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
/* The version of the embedded interpreter, from the headers it was built
 * against (the guest runs the same libpython). */
#include <patchlevel.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "config/limits.h"
#include "host/allowlist.h"
#include "config/pypath.h"
#include "sandbox/sandbox.h"
#include "host/tools.h"
#include "core/util.h"
#include "trace.h"

#define DESCRIBE_CAP         (8u << 20)
#define DESCRIBE_MAX_ENTRIES 50 /* workspace entries named in the description */
#define DESCRIBE_MAX_SCAN    100000

/* Appends s, replacing bytes that are not valid UTF-8 with U+FFFD and
 * indenting every continuation line, so that one description is one item. */
static int put_text(dynbuf *b, const char *s, const char *indent)
{
        _cleanup_free_ char *clean = al_utf8_sanitize(s, strlen(s));
        if (!clean)
                return -ENOMEM;
        int r = 0;
        for (const char *p = clean; r >= 0 && *p; p++) {
                if (*p == '\r')
                        continue;
                r = dynbuf_append(b, p, 1);
                if (r >= 0 && *p == '\n' && p[1])
                        r = dynbuf_append(b, indent, strlen(indent));
        }
        return r;
}

static const char *type_text(const json_t *type, char *buf, size_t size)
{
        if (json_is_string(type))
                return json_string_value(type);
        if (json_is_array(type) && json_array_size(type) > 0) {
                size_t off = 0;
                size_t i;
                const json_t *t;
                buf[0] = '\0';
                json_array_foreach (type, i, t) {
                        if (!json_is_string(t))
                                continue;
                        int n = snprintf(buf + off, size - off, "%s%s", off ? " or " : "",
                                         json_string_value(t));
                        if (n < 0 || (size_t)n >= size - off)
                                break;
                        off += (size_t)n;
                }
                if (off)
                        return buf;
        }
        return "any type";
}

static bool is_required(const json_t *schema, const char *name)
{
        const json_t *req = json_object_get(schema, "required");
        size_t i;
        const json_t *v;
        json_array_foreach (req, i, v)
                if (json_is_string(v) && strcmp(json_string_value(v), name) == 0)
                        return true;
        return false;
}

/* One tool: its name, description and each argument with its JSON type,
 * whether it is required, and its own description when the schema has one. */
static int put_tool(dynbuf *b, const tool_info *t)
{
        int r = dynbuf_appendf(b, "- %s: ", t->name);
        if (r >= 0)
                r = put_text(
                    b, t->description && *t->description ? t->description : "(no description)",
                    "    ");
        if (r < 0)
                return r;
        const json_t *props = json_object_get(t->parameters, "properties");
        if (!json_is_object(props) || json_object_size(props) == 0)
                return dynbuf_appendf(b, "\n    arguments: none\n");
        r = dynbuf_appendf(b, "\n    arguments:");
        const char *key;
        const json_t *prop;
        json_object_foreach ((json_t *)props, key, prop) {
                char tbuf[128];
                const char *type = type_text(json_object_get(prop, "type"), tbuf, sizeof(tbuf));
                if (r >= 0)
                        r = dynbuf_appendf(b, "\n      %s (%s, %s)", key, type,
                                           is_required(t->parameters, key) ? "required"
                                                                           : "optional");
                const json_t *d = json_object_get(prop, "description");
                if (r >= 0 && json_is_string(d) && *json_string_value(d)) {
                        r = dynbuf_append(b, ": ", 2);
                        if (r >= 0)
                                r = put_text(b, json_string_value(d), "        ");
                }
        }
        if (r >= 0)
                r = dynbuf_append(b, "\n", 1);
        return r;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names the regular files and directories at the top of the workspace, as
 * staging will copy them (links fail staging, special files are skipped).
 * Only names are read; nothing is opened below the top directory. */
static int put_workspace(dynbuf *b, const char *dir, airlock_error *err)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return al_error(err, -errno, dir, "workspace '%s' cannot be opened: %s", dir,
                                strerror(errno));
        DIR *d = fdopendir(fd);
        if (!d) {
                int e = errno;
                close(fd);
                return al_error(err, -e, dir, "workspace '%s' cannot be read: %s", dir,
                                strerror(e));
        }
        char **names = NULL;
        size_t n = 0, alloc = 0, scanned = 0;
        int r = 0;
        struct dirent *de;
        while (r >= 0 && (de = readdir(d)) && scanned++ < DESCRIBE_MAX_SCAN) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
                        continue;
                if (n == alloc) {
                        size_t na = alloc ? alloc * 2 : 16;
                        char **p = realloc(names, na * sizeof(*p));
                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        names = p;
                        alloc = na;
                }
                _cleanup_free_ char *clean = al_utf8_sanitize(de->d_name, strlen(de->d_name));
                if (!clean ||
                    asprintf(&names[n], "%s%s", clean, S_ISDIR(st.st_mode) ? "/" : "") < 0) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        closedir(d);
        if (r >= 0 && n)
                qsort(names, n, sizeof(*names), cmp_str);
        if (r >= 0) {
                if (n == 0)
                        r = dynbuf_appendf(b, "  The workspace is empty.\n");
                else
                        r = dynbuf_appendf(b, "  Workspace entries:");
        }
        for (size_t i = 0; r >= 0 && i < n && i < DESCRIBE_MAX_ENTRIES; i++)
                r = dynbuf_appendf(b, " /input/%s%s", names[i],
                                   i + 1 < n && i + 1 < DESCRIBE_MAX_ENTRIES ? "," : "");
        if (r >= 0 && n > DESCRIBE_MAX_ENTRIES)
                r = dynbuf_appendf(b, " and %zu more", n - DESCRIBE_MAX_ENTRIES);
        if (r >= 0 && n)
                r = dynbuf_append(b, "\n", 1);
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        if (r < 0)
                return al_error(err, r, dir, "describing the workspace: %s", strerror(-r));
        return 0;
}

static int put_files(dynbuf *b, const airlock_config *cfg, airlock_error *err)
{
        int r = dynbuf_appendf(b, "\nFiles:\n");
        if (r < 0)
                return r;
        if (!cfg->workspace && cfg->n_mounts == 0) {
                r = dynbuf_appendf(b, "- There is no /input: no host files are available to "
                                      "the code.\n");
        } else if (cfg->input_writable) {
                r = dynbuf_appendf(b, "- /input holds the host files, copied when the sandbox "
                                      "was created. The code may change them: each run starts "
                                      "from that copy again, and what a run created, modified "
                                      "and deleted there is returned with its result (the host "
                                      "files themselves are not changed).\n");
        } else {
                r = dynbuf_appendf(b, "- /input (read-only) holds the host files, copied when "
                                      "the sandbox was created.\n");
        }
        if (cfg->workspace || cfg->n_mounts) {
                if (r >= 0 && cfg->workspace)
                        r = put_workspace(b, cfg->workspace, err);
                if (r < 0)
                        return r;
                for (size_t i = 0; r >= 0 && i < cfg->n_mounts; i++) {
                        struct stat st;
                        bool dir = stat(cfg->mounts[i].host, &st) == 0 && S_ISDIR(st.st_mode);
                        if (i == 0)
                                r = dynbuf_appendf(b, "  Mounted:");
                        if (r >= 0)
                                r = dynbuf_appendf(b, " ");
                        if (r >= 0)
                                r = put_text(b, "/input/", "");
                        if (r >= 0)
                                r = put_text(b, cfg->mounts[i].dest, "");
                        if (r >= 0)
                                r = dynbuf_appendf(b, "%s%s", dir ? "/" : "",
                                                   i + 1 < cfg->n_mounts ? "," : "\n");
                }
        }
        if (r >= 0)
                r = dynbuf_appendf(
                    b,
                    "- /output starts empty on every call and is the working directory. Files your "
                    "code writes there (relative paths too, subdirectories too) are returned with "
                    "the result: images are shown, "
                    "other files are attached. Links and special files are not returned.\n"
                    "- /tmp is private scratch space, emptied between calls.\n");
        /* What a notebook user expects, and what saves the model a savefig. */
        if (r >= 0 && !cfg->no_auto_figures)
                r = dynbuf_appendf(b, "- matplotlib figures shown with plt.show() or left open "
                                      "come back as PNG images by themselves "
                                      "(/output/figure-N.png); no need to save them.\n");
        return r;
}

/* The secrets by name and target, never by value (docs/design.md,
 * "Secrets"): the agent needs the names to ask for the placeholders. */
static int put_secrets(dynbuf *b, const airlock_config *cfg)
{
        size_t n = secrets_count(cfg->secrets), shown = 0;
        /* The cluster secret (target "peer") is airlock serve's, not the
         * code's: it is not named to the agent. */
        for (size_t i = 0; i < n; i++)
                shown += !secrets_is_peer(cfg->secrets, i);
        int r =
            shown ? dynbuf_appendf(b, "Secrets: airlock.secret('NAME') gives a placeholder to use "
                                      "where the secret goes, e.g. headers={'Authorization': "
                                      "'Bearer ' + airlock.secret('NAME')}; the host puts the "
                                      "real value in on requests to its targets and never lets "
                                      "the code see it:\n")
                  : 0;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                if (secrets_is_peer(cfg->secrets, i))
                        continue;
                const net_allowlist *t = secrets_targets(cfg->secrets, i);
                r = dynbuf_appendf(b, "- %s:", secrets_name(cfg->secrets, i));
                for (size_t j = 0; r >= 0 && j < allowlist_count(t); j++)
                        r = dynbuf_appendf(b, "%s %s", j ? "," : "", allowlist_get(t, j)->target);
                if (r >= 0)
                        r = dynbuf_append(b, "\n", 1);
        }
        return r;
}

static int put_network(dynbuf *b, const airlock_config *cfg)
{
        size_t n = allowlist_count(cfg->allow);
        if (n == 0)
                return dynbuf_appendf(b,
                                      "\nNetwork: none. The code has no network access; http_get, "
                                      "http_post and http_request raise PermissionError.\n");
        int r =
            dynbuf_appendf(b, "\nNetwork: HTTP only through these functions, and only to "
                              "the targets below (anything else raises PermissionError):\n"
                              "  http_get(url, headers=None)\n"
                              "  http_post(url, body=\"\", "
                              "content_type=\"application/json\", headers=None)\n"
                              "  http_request(method, url, headers=None, body=None)\n"
                              "  Each returns a dict with \"status\" (int), \"headers\" (dict) and "
                              "\"body\" (str when it is UTF-8, else bytes); a body that is "
                              "not str or bytes is sent as JSON. Redirects are returned, "
                              "not followed.\n"
                              "Allowed:\n");
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const allow_entry *e = allowlist_get(cfg->allow, i);
                r = dynbuf_appendf(b, "- %s", e->target);
                if (r >= 0)
                        r = dynbuf_appendf(b, e->scheme ? " (and paths below it)"
                                                        : " (http and https, any path)");
                if (r >= 0)
                        r = dynbuf_appendf(b, ": ");
                /* "*" stands for every method but CONNECT and TRACE. */
                if (r >= 0 && e->n_methods == 1 && strcmp(e->methods[0], "*") == 0)
                        r = dynbuf_appendf(b, "any method but CONNECT and TRACE");
                else
                        for (size_t m = 0; r >= 0 && m < e->n_methods; m++)
                                r = dynbuf_appendf(b, "%s%s", m ? ", " : "", e->methods[m]);
                if (r >= 0)
                        r = dynbuf_append(b, "\n", 1);
        }
        return r >= 0 ? put_secrets(b, cfg) : r;
}

/* The sentence comes from the limits table (config/limits.h). */
static int put_limits(dynbuf *b, const airlock_limits *l)
{
        _cleanup_free_ char *text = limits_description_text(l);
        return text ? dynbuf_append(b, text, strlen(text)) : -ENOMEM;
}

/* A placeholder value of a JSON type, written as Python. */
static const char *example_value(const json_t *type)
{
        const char *t = json_is_string(type)  ? json_string_value(type)
                        : json_is_array(type) ? json_string_value(json_array_get(type, 0))
                                              : NULL;
        if (!t)
                return "...";
        if (strcmp(t, "string") == 0)
                return "\"...\"";
        if (strcmp(t, "number") == 0)
                return "1.5";
        if (strcmp(t, "integer") == 0)
                return "1";
        if (strcmp(t, "boolean") == 0)
                return "True";
        if (strcmp(t, "array") == 0)
                return "[]";
        if (strcmp(t, "object") == 0)
                return "{}";
        if (strcmp(t, "null") == 0)
                return "None";
        return "...";
}

/* An example call of a tool with its required arguments (all of them when
 * none is required), e.g. call_tool("compute", operation="...", a=1.5). */
static int put_example(dynbuf *b, const tool_info *t)
{
        const json_t *props = json_object_get(t->parameters, "properties");
        bool any_required = false;
        const char *key;
        const json_t *prop;
        json_object_foreach ((json_t *)props, key, prop)
                any_required |= is_required(t->parameters, key);
        int r = dynbuf_appendf(b, "call_tool(\"%s\"", t->name);
        json_object_foreach ((json_t *)props, key, prop) {
                if (r < 0)
                        break;
                if (any_required && !is_required(t->parameters, key))
                        continue;
                r = dynbuf_appendf(b, ", %s=%s", key, example_value(json_object_get(prop, "type")));
        }
        if (r >= 0)
                r = dynbuf_append(b, ")", 1);
        return r;
}

/* A package as "numpy 1.24.2", or "Pillow 9.4.0 (import PIL)" when the
 * import name differs from the distribution's. */
static int put_package(dynbuf *b, const json_t *p, bool first)
{
        const char *imp = json_string_value(json_object_get(p, "import"));
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *ver = json_string_value(json_object_get(p, "version"));
        int r = dynbuf_appendf(b, "%s%s", first ? "" : ", ", name ? name : imp);
        if (r >= 0 && ver)
                r = dynbuf_appendf(b, " %s", ver);
        if (r >= 0 && name && strcmp(name, imp) != 0)
                r = dynbuf_appendf(b, " (import %s)", imp);
        return r;
}

#define DESCRIBE_MAX_FOLDER_PACKAGES 30

/* What the guest can import, as found inside it (inv, see
 * clean_inventory): short, since a model reads it at every turn. */
static int put_packages(dynbuf *b, const json_t *inv, size_t skip_folder)
{
        const json_t *pkgs = json_object_get(inv, "packages");
        int r = 0;
        size_t i;
        const json_t *p;
        json_array_foreach (pkgs, i, p) {
                if (r >= 0 && i == 0)
                        r = dynbuf_appendf(b, "Notable packages: ");
                if (r >= 0)
                        r = put_package(b, p, i == 0);
        }
        if (r >= 0 && json_array_size(pkgs))
                r = dynbuf_appendf(b, ".\n");
        const json_t *folders = json_object_get(inv, "python_path");
        size_t f;
        const json_t *folder;
        json_array_foreach (folders, f, folder) {
                size_t n = json_array_size(folder);
                if (f == skip_folder)
                        continue; /* the servers' stubs: put_servers says what they are */
                if (r >= 0)
                        r = dynbuf_appendf(b, "Packages from " PYPATH_GUEST_DIR "/%zu: ", f);
                json_array_foreach (folder, i, p) {
                        if (r < 0 || i >= DESCRIBE_MAX_FOLDER_PACKAGES)
                                break;
                        r = put_package(b, p, i == 0);
                }
                if (r >= 0 && n > DESCRIBE_MAX_FOLDER_PACKAGES)
                        r = dynbuf_appendf(b, ", and %zu more", n - DESCRIBE_MAX_FOLDER_PACKAGES);
                if (r >= 0)
                        r = dynbuf_appendf(b, n ? ".\n" : "none.\n");
        }
        return r;
}

/* The upstream MCP servers (code mode), in at most MCP_DESCRIBE_MAX bytes
 * whatever their number: their names and tool counts, and how to discover
 * the tools. Naming the servers is a deliberate exception to the rule that
 * the description lists no tools (docs/design.md, "Upstream MCP servers"):
 * a model that does not know a server is there would not look for it. */
#define MCP_DESCRIBE_MAX 2048
static int put_servers(dynbuf *out, const airlock_config *cfg, const mcp_hub *hub)
{
        size_t n = hub ? mcp_hub_servers(hub) : cfg->servers.n;
        if (n == 0)
                return 0;
        dynbuf b;
        dynbuf_init(&b, MCP_DESCRIBE_MAX);
        int r = dynbuf_appendf(&b, "\nMCP servers: the tools of ");
        size_t shown = 0;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const char *m = hub ? mcp_hub_server_module(hub, i) : cfg->servers.v[i].module;
                if (b.len > 900)
                        break;
                r = hub ? dynbuf_appendf(&b, "%s%s (%zu tool%s)", i ? ", " : "", m,
                                         mcp_hub_server_tools(hub, i),
                                         mcp_hub_server_tools(hub, i) == 1 ? "" : "s")
                        : dynbuf_appendf(&b, "%s%s", i ? ", " : "", m);
                shown++;
        }
        if (r >= 0 && shown < n)
                r = dynbuf_appendf(&b, ", and %zu more server%s", n - shown,
                                   n - shown == 1 ? "" : "s");
        if (r >= 0)
                r = dynbuf_appendf(
                    &b,
                    " are Python functions in the package servers: `from servers import NAME`, "
                    "then `NAME.TOOL(arg=value)` (keyword arguments; TOOL_async to await many "
                    "at once). Find tools with `print(servers.search(\"words\"))`, read one "
                    "with `help(servers.NAME.TOOL)`; the stubs' source is under %s/%zu/servers. "
                    "A tool returns its structured result or its text; its failure raises "
                    "servers.ToolError. Prefer one program that calls many tools and prints "
                    "only what you need. The servers run outside the sandbox and keep their "
                    "state from call to call (a session's forks share it).\n",
                    PYPATH_GUEST_DIR, hub ? cfg->n_python_paths - 1 : cfg->n_python_paths);
        if (r >= 0)
                r = dynbuf_append(out, b.data, b.len);
        dynbuf_free(&b);
        return r;
}

static int build_description(const airlock_config *cfg, const json_t *inv, const mcp_hub *hub,
                             char **ret, airlock_error *err)
{
        dynbuf b;
        dynbuf_init(&b, DESCRIBE_CAP);
        int r = dynbuf_appendf(
            &b,
            "Run Python 3 code in an isolated sandbox and return what it prints. A call "
            "without a session starts from a fresh interpreter: variables, imports and "
            "files do not survive from one such call to the next, and the code runs as a "
            "script, so the value of the last expression is not returned: print() what "
            "you need. Output files "
            "go to /output. The interpreter is Python %d.%d with its standard library and "
            "the Python packages installed on the host; nothing can be installed at run "
            "time.\n",
            PY_MAJOR_VERSION, PY_MINOR_VERSION);
        if (r >= 0 && inv)
                r = put_packages(&b, inv, hub ? cfg->n_python_paths - 1 : SIZE_MAX);
        /* Preloaded modules cost nothing to import: worth knowing. */
        for (size_t i = 0; r >= 0 && i < cfg->n_preloads; i++)
                r = dynbuf_appendf(&b, "%s%s%s",
                                   i ? ", " : "Already loaded (importing is instant): ",
                                   cfg->preloads[i], i + 1 == cfg->n_preloads ? ".\n" : "");
        size_t n = tools_count(cfg->tools);
        if (r >= 0 && n == 0)
                r = dynbuf_appendf(&b, "\nHost tools: none are configured.\n");
        if (r >= 0 && n > 0)
                r = dynbuf_appendf(
                    &b, "\nHost tools: call them from the code with call_tool(name, **kwargs): "
                        "the tool name first, then keyword arguments only, e.g. ");
        if (r >= 0 && n > 0)
                r = put_example(&b, tools_get(cfg->tools, 0));
        if (r >= 0 && n > 0)
                r = dynbuf_appendf(
                    &b, ". Positional arguments after the name raise TypeError. call_tool "
                        "returns the tool's JSON result as Python values; a failing tool "
                        "raises RuntimeError, invalid arguments raise ValueError. It can also "
                        "be imported: from airlock import call_tool.\n"
                        "Tools:\n");
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = put_tool(&b, tools_get(cfg->tools, i));
        if (r >= 0)
                r = put_servers(&b, cfg, hub);
        if (r >= 0)
                r = put_files(&b, cfg, err);
        if (r >= 0)
                r = put_network(&b, cfg);
        if (r >= 0)
                r = put_limits(&b, &cfg->limits);
        if (r < 0) {
                dynbuf_free(&b);
                if (err && err->code == r)
                        return r;
                return al_error(err, r, NULL, "tool description: %s", strerror(-r));
        }
        *ret = dynbuf_take(&b, NULL);
        return 0;
}

static int build_instructions(const airlock_config *cfg, char **ret, airlock_error *err)
{
        dynbuf b;
        dynbuf_init(&b, DESCRIBE_CAP);
        int r = dynbuf_appendf(
            &b, "This server offers one tool, execute_code, which runs Python 3 in an isolated "
                "sandbox.\n"
                "- Prefer one execute_code call per request: read the inputs, call the tools, "
                "compute and write the results in a single program rather than in many small "
                "calls. Without a session, nothing survives from one call to the next.\n"
                "- print() every result you need: without a session, the value of the last "
                "expression is not returned.\n"
                "- Write large results (tables, images, reports) to files in /output instead "
                "of printing them; they are returned as attachments.\n");
        if (r >= 0 && (cfg->workspace || cfg->n_mounts))
                r = dynbuf_appendf(&b, cfg->input_writable
                                           ? "- The host files are under /input (writable: "
                                             "the changes are returned, not applied).\n"
                                           : "- The host files are under /input (read-only).\n");
        size_t n = tools_count(cfg->tools);
        if (r >= 0 && n > 0) {
                r = dynbuf_appendf(&b, "- The host tools (");
                for (size_t i = 0; r >= 0 && i < n && i < 20; i++)
                        r = dynbuf_appendf(&b, "%s%s", i ? ", " : "",
                                           tools_get(cfg->tools, i)->name);
                if (r >= 0 && n > 20)
                        r = dynbuf_appendf(&b, ", and %zu more", n - 20);
                if (r >= 0)
                        r = dynbuf_appendf(
                            &b, ") are not separate tools here: they are reachable only "
                                "from code inside execute_code, with call_tool(\"name\", "
                                "key=value) (keyword arguments only).\n");
        }
        if (r >= 0 && cfg->servers.n)
                r = dynbuf_appendf(&b,
                                   "- The tools of %zu MCP server%s (named in the "
                                   "execute_code description) are Python functions inside "
                                   "execute_code: from servers import NAME; "
                                   "servers.search(\"words\") finds them.\n",
                                   cfg->servers.n, cfg->servers.n == 1 ? "" : "s");
        if (r >= 0)
                r = dynbuf_appendf(&b, allowlist_count(cfg->allow)
                                           ? "- HTTP is allowed only to the targets listed "
                                             "in the execute_code description, through "
                                             "http_get/http_post/http_request.\n"
                                           : "- The sandbox has no network access.\n");
        if (r >= 0 && airlock_config_effective_approval(cfg) == AIRLOCK_APPROVAL_ALWAYS)
                r = dynbuf_appendf(&b, "- Every execute_code call needs the user's approval: "
                                       "make each call count.\n");
        if (r < 0) {
                dynbuf_free(&b);
                return al_error(err, r, NULL, "agent instructions: %s", strerror(-r));
        }
        *ret = dynbuf_take(&b, NULL);
        return 0;
}

static int describe(const airlock_config *cfg, const json_t *inv, const mcp_hub *hub,
                    char **ret_description, char **ret_instructions, airlock_error *err)
{
        if (!cfg)
                return al_error(err, -EINVAL, NULL, "describe: no configuration");
        _cleanup_free_ char *desc = NULL;
        _cleanup_free_ char *instr = NULL;
        int r = build_description(cfg, inv, hub, &desc, err);
        if (r >= 0)
                r = build_instructions(cfg, &instr, err);
        if (r < 0)
                return r;
        if (ret_description)
                *ret_description = TAKE_PTR(desc);
        if (ret_instructions)
                *ret_instructions = TAKE_PTR(instr);
        return 0;
}

int airlock_describe(const airlock_config *cfg, char **ret_description, char **ret_instructions,
                     airlock_error *err)
{
        airlock_error_clear(err);
        return describe(cfg, NULL, NULL, ret_description, ret_instructions, err);
}

/* A name or version from the guest, kept only when it is short and made of
 * the characters package names and versions use: the guest's output is
 * not trusted, even from a run of airlock's own code. */
static json_t *clean_token(const json_t *v, size_t max)
{
        const char *s = json_string_value(v);
        if (!s || !*s || strlen(s) > max)
                return json_null();
        for (const char *p = s; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || strchr("._-+!", *p)))
                        return json_null();
        return json_string(s);
}

static json_t *clean_packages(const json_t *list, size_t max)
{
        json_t *out = json_array();
        size_t i;
        const json_t *p;
        json_array_foreach (list, i, p) {
                if (!out || i >= max)
                        break;
                json_t *imp = clean_token(json_object_get(p, "import"), 100);
                if (json_is_null(imp)) {
                        json_decref(imp);
                        continue;
                }
                json_array_append_new(
                    out, json_pack("{s:o, s:o, s:o}", "import", imp, "name",
                                   clean_token(json_object_get(p, "name"), 100), "version",
                                   clean_token(json_object_get(p, "version"), 64)));
        }
        return out;
}

/* The inventory a guest printed, re-made from its parts that pass the
 * checks: {"packages": [...], "python_path": [[...] per folder]}. */
static json_t *clean_inventory(const char *text, size_t len, size_t folders)
{
        json_t *j = json_loadb(text, len, 0, NULL);
        if (!j)
                return NULL;
        json_t *pp = json_array();
        const json_t *in = json_object_get(j, "python_path");
        for (size_t i = 0; pp && i < folders; i++)
                json_array_append_new(pp, clean_packages(json_array_get(in, i), 1000));
        json_t *out =
            json_pack("{s:o, s:o}", "packages", clean_packages(json_object_get(j, "packages"), 64),
                      "python_path", pp ? pp : json_array());
        json_decref(j);
        return out;
}

/* Runs the guest's inventory in a fresh copy of sb, once per sandbox. */
static const json_t *sandbox_inventory(airlock_sandbox *sb, airlock_error *err)
{
        const json_t *have = sbx_inventory(sb, NULL);
        if (have)
                return have;
        const airlock_config *cfg = sbx_config(sb);
        char code[128];
        snprintf(code, sizeof(code),
                 "import sys\nsys.modules['_airlock_runtime']._inventory(%zu)\n",
                 cfg->n_python_paths);
        airlock_result *res = NULL;
        /* The inventory is airlock's own work, no caller's run: no trace
         * (a server builds its version with it before any client). */
        bool was = al_trace_untraced(true);
        int r = airlock_sandbox_run(sb, code, strlen(code), NULL, &res, err);
        (void)al_trace_untraced(was);
        if (r < 0)
                return NULL;
        json_t *inv = res->success && res->stdout_data
                          ? clean_inventory(res->stdout_data, res->stdout_len, cfg->n_python_paths)
                          : NULL;
        airlock_result_free(res);
        if (!inv) {
                al_error(err, -EIO, NULL, "describe: the guest did not list its packages");
                return NULL;
        }
        return sbx_inventory(sb, inv);
}

int airlock_sandbox_describe(airlock_sandbox *sb, char **ret_description, char **ret_instructions,
                             airlock_error *err)
{
        airlock_error_clear(err);
        if (!sb)
                return al_error(err, -EINVAL, NULL, "describe: no sandbox");
        const json_t *inv = sandbox_inventory(sb, err);
        if (!inv)
                return err && err->code ? err->code : -EIO;
        return describe(sbx_config(sb), inv, sbx_mcp(sb), ret_description, ret_instructions, err);
}

static char *describe_json(const airlock_config *cfg, const json_t *inv, const mcp_hub *hub,
                           const char *warnings, airlock_error *err);

char *airlock_describe_json(const airlock_config *cfg, airlock_error *err)
{
        airlock_error_clear(err);
        return describe_json(cfg, NULL, NULL, NULL, err);
}

char *airlock_sandbox_describe_json(airlock_sandbox *sb, airlock_error *err)
{
        return sbx_describe_json_for(sb, NULL, err);
}

char *sbx_describe_json_for(airlock_sandbox *sb, const airlock_config *cfg, airlock_error *err)
{
        airlock_error_clear(err);
        if (!sb) {
                al_error(err, -EINVAL, NULL, "describe: no sandbox");
                return NULL;
        }
        const json_t *inv = sandbox_inventory(sb, err);
        if (!inv)
                return NULL;
        return describe_json(cfg ? cfg : sbx_config(sb), inv, sbx_mcp(sb),
                             airlock_sandbox_warnings(sb), err);
}

static char *describe_json(const airlock_config *cfg, const json_t *inv, const mcp_hub *hub,
                           const char *warnings, airlock_error *err)
{
        _cleanup_free_ char *desc = NULL;
        _cleanup_free_ char *instr = NULL;
        if (describe(cfg, inv, hub, &desc, &instr, err) < 0)
                return NULL;
        json_t *o = json_pack(
            "{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}, s:s, s:s}", "name", "execute_code",
            "description", desc, "input_schema", "type", "object", "properties", "code", "type",
            "string", "description",
            "Python 3 source to run as a script. print() the results you need; write "
            "files to /output.",
            "required", "code", "instructions", instr, "approval_mode",
            airlock_config_effective_approval(cfg) == AIRLOCK_APPROVAL_ALWAYS ? "always_require"
                                                                              : "never_require");
        if (o && inv) {
                json_object_set(o, "packages", json_object_get(inv, "packages"));
                json_t *folders = json_array();
                for (size_t i = 0; folders && i < cfg->n_python_paths; i++) {
                        char guest[64];
                        snprintf(guest, sizeof(guest), PYPATH_GUEST_DIR "/%zu", i);
                        json_array_append_new(
                            folders,
                            json_pack("{s:s, s:s, s:O}", "path", cfg->python_paths[i], "guest_path",
                                      guest, "packages",
                                      json_array_get(json_object_get(inv, "python_path"), i)));
                }
                json_object_set_new(o, "python_path", folders ? folders : json_array());
                /* The upstream MCP servers, as the sandbox started them. */
                json_t *sv = json_array();
                for (size_t i = 0; sv && i < mcp_hub_servers(hub); i++)
                        json_array_append_new(
                            sv, json_pack("{s:s, s:s, s:I}", "name", mcp_hub_server_name(hub, i),
                                          "module", mcp_hub_server_module(hub, i), "tools",
                                          (json_int_t)mcp_hub_server_tools(hub, i)));
                json_object_set_new(o, "servers", sv ? sv : json_array());
                json_t *w = json_array();
                for (const char *p = warnings; w && p && *p;) {
                        size_t n = strcspn(p, "\n");
                        json_array_append_new(w, json_stringn(p, n));
                        p += n + (p[n] == '\n');
                }
                json_object_set_new(o, "warnings", w ? w : json_array());
        }
        char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!text)
                al_error(err, -ENOMEM, NULL, "describe: cannot encode the JSON");
        return text;
}
