/* The upstream servers of one sandbox: started when it is built, their
 * tools named for Python and written as stubs, the guest's calls checked
 * (arguments, approval, per-run caps) and forwarded, stopped when the
 * sandbox closes. */
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsx/fsx.h"
#include "jsonrpc.h"
#include "mcp/mcp.h"

#define TOOL_NAME_UP_MAX 128  /* an upstream tool's name */
#define ERROR_TEXT_MAX   4000 /* the text of a tool's isError result, in the exception */

/* A call started by MCP_OP_START: it runs upstream on a thread of its own
 * while the run goes on, and its outcome waits for MCP_OP_WAIT of the
 * same run. It belongs to its run by the run's identity (run_id, given by
 * the hub and never reused), not by an address a later run may reuse; its
 * ticket is random besides, so that no run can guess another's. A job
 * whose run has ended has run_id 0: its thread drops what it brings back.
 * The result is kept as the bytes of its JSON, parsed only when collected:
 * parsed, small values cost jansson some 10 times their text. */
typedef struct hub_job {
        bool used, done;
        uint64_t ticket;
        uint64_t run_id;
        uint64_t budget; /* the run's host budget (mcp_run_counts.budget) */
        mcp_tool *tool;
        json_t *args;
        uint64_t deadline_ns;
        int efd;       /* an eventfd: the hub's close, the run's end, or a wait that saw it end */
        int run_fd;    /* a copy of the run's cancel_fd, or -1 */
        int cancel_fd; /* what the call watches: an epoll fd of both */
        tool_fail f;
        char *raw; /* the result, compact JSON, once done and ok */
        size_t raw_len;
        uint64_t parse_cost; /* what parsing raw will hold (JSONRPC_VALUE_COST a value) */
        char *message, *type;
        struct mcp_hub *hub;
} hub_job;

typedef struct hub_server {
        char *name;
        char *module;
        mcp_upstream *up;
        size_t n_tools;
        uint32_t max_calls;
} hub_server;

struct mcp_hub {
        hub_server srv[MCP_MAX_SERVERS];
        size_t n_srv;
        mcp_tool *tools;
        size_t n_tools;
        char *dir; /* the stubs' folder on the host */
        /* The calls in flight of the runs' jobs (MCP_OP_START). */
        pthread_mutex_t jlock;
        pthread_cond_t jcv;
        bool jinit;
        unsigned jrunning;
        hub_job *jobs;
        uint64_t next_run_id;
        uint64_t gen_ns; /* the stubs' making: naming the tools, writing the files */
};

static const char *const json_types[] = {"string", "number", "integer", "boolean",
                                         "object", "array",  "null"};

static bool known_type(const json_t *t)
{
        for (size_t i = 0; json_is_string(t) && i < ARRAY_SIZE(json_types); i++)
                if (strcmp(json_string_value(t), json_types[i]) == 0)
                        return true;
        return false;
}

/* The part of one value's schema that tools_validate checks, made safe for
 * it: "type" when it is one tools_validate knows (a name or a list of
 * names), "enum" when it is a non-empty array, and for an array "items"
 * the same way (a list's items are checked before the call, as the host
 * tools' validation checks them: value_check in host/tools.c), to
 * TOOLS_MAX_SCHEMA_DEPTH levels. NULL when out of memory. */
static json_t *value_schema(const json_t *p, int depth)
{
        json_t *q = json_object();
        if (!q)
                return NULL;
        const json_t *t = json_object_get(p, "type");
        bool ok = known_type(t);
        if (json_is_array(t) && json_array_size(t)) {
                ok = true;
                size_t i;
                const json_t *x;
                json_array_foreach ((json_t *)t, i, x) {
                        ok &= known_type(x);
                }
        }
        if (ok)
                json_object_set(q, "type", (json_t *)t);
        const json_t *e = json_object_get(p, "enum");
        if (json_is_array(e) && json_array_size(e))
                json_object_set(q, "enum", (json_t *)e);
        const json_t *items = json_object_get(p, "items");
        if (json_is_object(items) && depth < TOOLS_MAX_SCHEMA_DEPTH) {
                json_t *in = value_schema(items, depth + 1);
                if (!in || json_object_set_new(q, "items", in) < 0) {
                        json_decref(q);
                        return NULL;
                }
        }
        return q;
}

/* The part of a tool's inputSchema that tools_validate checks, made safe
 * for it: each property's value_schema, "required" names,
 * additionalProperties as given. The server checks the rest itself. */
static json_t *validation_schema(const json_t *in)
{
        json_t *s = json_pack("{s:s, s:{}}", "type", "object", "properties");
        if (!s)
                return NULL;
        json_t *props = json_object_get(s, "properties");
        const char *key;
        const json_t *p;
        json_object_foreach (json_object_get(in, "properties"), key, p) {
                json_t *q = value_schema(p, 0);
                if (!q)
                        goto fail;
                json_object_set_new(props, key, q);
        }
        json_t *req = json_array();
        size_t i;
        const json_t *r;
        json_array_foreach (json_object_get(in, "required"), i, r) {
                if (json_is_string(r))
                        json_array_append(req, (json_t *)r);
        }
        json_object_set_new(s, "required", req);
        const json_t *ap = json_object_get(in, "additionalProperties");
        /* JSON Schema allows what it does not name unless it says
         * otherwise; tools_validate refuses it unless told. */
        json_object_set_new(s, "additionalProperties",
                            json_is_false(ap) ? json_false() : json_true());
        return s;
fail:
        json_decref(s);
        return NULL;
}

static void tool_free(mcp_tool *t)
{
        free(t->server);
        free(t->module);
        free(t->name);
        free(t->ident);
        free(t->host_name);
        free(t->description);
        json_decref(t->input_schema);
        json_decref(t->output_schema);
        json_decref(t->params_map);
        json_decref(t->info.parameters);
}

static void jobs_stop(mcp_hub *h);

void mcp_hub_free(mcp_hub *h)
{
        if (!h)
                return;
        /* The jobs first: their calls use the servers. */
        jobs_stop(h);
        free(h->jobs);
        mcp_upstream *ups[MCP_MAX_SERVERS];
        for (size_t i = 0; i < h->n_srv; i++)
                ups[i] = h->srv[i].up;
        mcp_upstream_stop_all(ups, h->n_srv);
        for (size_t i = 0; i < h->n_srv; i++) {
                free(h->srv[i].name);
                free(h->srv[i].module);
        }
        for (size_t i = 0; i < h->n_tools; i++)
                tool_free(&h->tools[i]);
        free(h->tools);
        if (h->dir) {
                _cleanup_close_ int fd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0) {
                        _cleanup_close_ int pkg =
                            openat(fd, "servers", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (pkg >= 0)
                                fsx_clear_dir(pkg, NULL);
                        unlinkat(fd, "servers", AT_REMOVEDIR);
                }
                rmdir(h->dir);
                free(h->dir);
        }
        free(h);
}

static bool matches(const json_t *patterns, const char *name)
{
        size_t i;
        const json_t *p;
        json_array_foreach ((json_t *)patterns, i, p) {
                if (fnmatch(json_string_value(p), name, 0) == 0)
                        return true;
        }
        return false;
}

/* A setting of the tool, else of the server, else NULL. */
static const json_t *setting(const json_t *server, const char *tool, const char *key)
{
        const json_t *v =
            json_object_get(json_object_get(json_object_get(server, "tools"), tool), key);
        return v ? v : json_object_get(server, key);
}

/* Whether a call of the tool needs approval: its "approval" setting, or
 * with "auto" (the default) its annotations, read strictly: a tool needs
 * approval unless it says it is read-only or not destructive, and one that
 * says it is destructive needs it whatever else it says. */
static bool needs_approval(const json_t *server, const char *tool, const json_t *annotations,
                           const char **ret_why)
{
        const char *a = json_string_value(setting(server, tool, "approval"));
        *ret_why = NULL;
        if (a && strcmp(a, "never") == 0)
                return false;
        if (a && strcmp(a, "always") == 0) {
                *ret_why = "the servers file sets \"approval\": \"always\"";
                return true;
        }
        const json_t *ro = json_object_get(annotations, "readOnlyHint");
        const json_t *de = json_object_get(annotations, "destructiveHint");
        if (json_is_true(de)) {
                *ret_why = "its annotations say it is destructive";
                return true;
        }
        if (!json_is_true(ro) && !json_is_false(de)) {
                *ret_why = annotations ? "its annotations do not say it is read-only or "
                                         "not destructive"
                                       : "it has no annotations that say it is read-only";
                return true;
        }
        return false;
}

static int cmp_names(const void *a, const void *b)
{
        const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        return strcmp(json_string_value(json_object_get(x, "name")),
                      json_string_value(json_object_get(y, "name")));
}

/* Makes ident unique among taken[0..n) and also[0..n_also): ident, then
 * ident_2, ident_3... */
static void unique_with(char *ident, size_t size, char *const *taken, size_t n, char *const *also,
                        size_t n_also)
{
        char base[160];
        snprintf(base, sizeof(base), "%s", ident);
        for (unsigned k = 2;; k++) {
                bool clash = false;
                for (size_t i = 0; i < n && !clash; i++)
                        clash = strcmp(taken[i], ident) == 0;
                for (size_t i = 0; i < n_also && !clash; i++)
                        clash = strcmp(also[i], ident) == 0;
                if (!clash)
                        return;
                snprintf(ident, size, "%.140s_%u", base, k);
        }
}

/* The tools of server si, from its tools/list: filtered, sorted by name,
 * named for Python, appended to h->tools. */
/* Fills the tool m of the server spec (the si-th) from its entry t of the
 * server's list: its names (ident, the Python name made for it), schemas,
 * the settings of the servers file, and the Python names of its
 * parameters, unique within the tool. -ENOMEM with m partly filled, for
 * tool_free. */
static int tool_fill(mcp_tool *m, const mcp_spec *spec, size_t si, const json_t *t,
                     const char *name, const char *ident)
{
        const json_t *o = spec->json;
        const json_t *in = json_object_get(t, "inputSchema");
        const json_t *out = json_object_get(t, "outputSchema");
        const char *desc = json_string_value(json_object_get(t, "description"));
        m->server = strdup(spec->name);
        m->module = strdup(spec->module);
        m->name = strdup(name);
        m->ident = strdup(ident);
        m->description = strdup(desc ? desc : "");
        m->input_schema = json_is_object(in) ? json_deep_copy(in) : json_object();
        m->output_schema = json_is_object(out) ? json_deep_copy(out) : NULL;
        m->params_map = json_object();
        m->server_index = si;
        if (asprintf(&m->host_name, "%s.%s", spec->module, ident) < 0)
                m->host_name = NULL;
        m->info = (tool_info){.cwd_fd = -1};
        m->info.name = m->host_name;
        m->info.description = m->description;
        m->info.parameters = validation_schema(m->input_schema);
        const json_t *to = setting(o, name, "timeout");
        m->timeout_s = to ? json_number_value(to) : MCP_DEFAULT_TIMEOUT;
        const json_t *mr = setting(o, name, "maxResultBytes");
        m->max_result = mr ? (size_t)json_number_value(mr) : MCP_DEFAULT_RESULT;
        const json_t *mc =
            json_object_get(json_object_get(json_object_get(o, "tools"), name), "maxCallsPerRun");
        m->max_calls = mc ? (uint32_t)json_number_value(mc) : UINT32_MAX;
        m->needs_approval =
            needs_approval(o, name, json_object_get(t, "annotations"), &m->approval_why);
        bool oom = !m->server || !m->module || !m->name || !m->ident || !m->description ||
                   !m->input_schema || (out && json_is_object(out) && !m->output_schema) ||
                   !m->params_map || !m->host_name || !m->info.parameters;
        /* The parameters' Python names, unique within the tool. */
        const char *key;
        const json_t *p;
        size_t np = json_object_size(json_object_get(m->input_schema, "properties"));
        _cleanup_free_ char **ptaken = calloc(np + 1, sizeof(char *));
        size_t pk = 0;
        oom |= !ptaken;
        json_object_foreach (json_object_get(m->input_schema, "properties"), key, p) {
                if (oom)
                        break;
                char pid[160];
                mcp_identifier(key, pid, sizeof(pid));
                unique_with(pid, sizeof(pid), ptaken, pk, NULL, 0);
                json_object_set_new(m->params_map, key, json_string(pid));
                ptaken[pk++] = (char *)json_string_value(json_object_get(m->params_map, key));
        }
        return oom ? -ENOMEM : 0;
}

static int add_tools(mcp_hub *h, size_t si, const mcp_spec *spec, json_t *list, dynbuf *warnings,
                     airlock_error *err)
{
        const json_t *o = spec->json;
        size_t n = json_array_size(list);
        _cleanup_free_ json_t **v = calloc(n ? n : 1, sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *t = json_array_get(list, i);
                const char *name = json_string_value(json_object_get(t, "name"));
                if (!json_is_object(t) || !name || !*name || strlen(name) > TOOL_NAME_UP_MAX ||
                    !al_utf8_valid(name, strlen(name))) {
                        dynbuf_appendf(warnings,
                                       "server '%s': a tool without a valid name (1 to %d "
                                       "characters) is left out\n",
                                       spec->name, TOOL_NAME_UP_MAX);
                        continue;
                }
                const json_t *allow = json_object_get(o, "allowTools");
                if ((allow && !matches(allow, name)) ||
                    matches(json_object_get(o, "denyTools"), name))
                        continue;
                bool dup = false;
                for (size_t j = 0; j < k && !dup; j++)
                        dup = strcmp(json_string_value(json_object_get(v[j], "name")), name) == 0;
                if (dup) {
                        dynbuf_appendf(warnings,
                                       "server '%s': tool '%.128s' is listed twice; the second "
                                       "is left out\n",
                                       spec->name, name);
                        continue;
                }
                v[k++] = t;
        }
        qsort(v, k, sizeof(*v), cmp_names);
        if (h->n_tools + k > MCP_MAX_TOOLS)
                return al_error(err, -E2BIG, spec->file,
                                "server '%s': the servers have more than %d tools in all; leave "
                                "some out with \"allowTools\" or \"denyTools\"",
                                spec->name, MCP_MAX_TOOLS);
        mcp_tool *nt = realloc(h->tools, (h->n_tools + k + 1) * sizeof(*nt));
        if (!nt)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        h->tools = nt;
        _cleanup_free_ char **taken = calloc(k + 1, sizeof(char *));
        _cleanup_free_ char **exact = calloc(k + 1, sizeof(char *));
        size_t taken_n = 0;
        if (!taken || !exact)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; i < k; i++) {
                const json_t *t = v[i];
                const char *name = json_string_value(json_object_get(t, "name"));
                mcp_tool *m = &h->tools[h->n_tools];
                *m = (mcp_tool){0};
                char ident[160];
                /* A name that is an identifier already keeps it; the others
                 * take theirs, in byte order of their names, with _2, _3...
                 * after one that is taken: the same list of tools gives the
                 * same names. */
                mcp_identifier(name, ident, sizeof(ident));
                if (strcmp(ident, name) != 0) {
                        for (size_t j = 0; j < k; j++) {
                                const char *o2 = json_string_value(json_object_get(v[j], "name"));
                                char id2[160];
                                mcp_identifier(o2, id2, sizeof(id2));
                                if (strcmp(id2, o2) == 0 && taken_n < k + 1)
                                        exact[taken_n++] = (char *)o2;
                        }
                        unique_with(ident, sizeof(ident), taken, i, exact, taken_n);
                        taken_n = 0;
                }
                bool oom = tool_fill(m, spec, si, t, name, ident) < 0;
                h->n_tools++;
                if (oom)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                taken[i] = m->ident;
        }
        h->srv[si].n_tools = k;
        return 0;
}

int mcp_hub_start(const mcp_specs *specs, const secret_store *secrets, mcp_hub **ret,
                  char **ret_dir, dynbuf *warnings, airlock_error *err)
{
        mcp_hub *h = calloc(1, sizeof(*h));
        if (!h)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        h->jobs = calloc(MCP_MAX_JOBS, sizeof(*h->jobs));
        if (!h->jobs) {
                free(h);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        for (size_t i = 0; i < MCP_MAX_JOBS; i++)
                h->jobs[i] = (hub_job){.cancel_fd = -1, .efd = -1, .run_fd = -1};
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&h->jlock, NULL);
        pthread_cond_init(&h->jcv, &ca);
        pthread_condattr_destroy(&ca);
        h->jinit = true;
        int r = 0;
        for (size_t i = 0; r >= 0 && i < specs->n; i++) {
                const mcp_spec *sp = &specs->v[i];
                hub_server *s = &h->srv[h->n_srv];
                s->name = strdup(sp->name);
                s->module = strdup(sp->module);
                const json_t *mc = json_object_get(sp->json, "maxCallsPerRun");
                s->max_calls = mc ? (uint32_t)json_number_value(mc) : MCP_DEFAULT_CALLS;
                h->n_srv++;
                if (!s->name || !s->module) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                        break;
                }
                json_t *tools = NULL;
                r = mcp_upstream_start(sp, secrets, &s->up, &tools, err);
                if (r < 0)
                        break;
                /* The stubs and the description are seen by the guest and
                 * the model: a server that writes a secret's value into
                 * its tool list (its environment, say) must not leak it. */
                if (secrets_scrub_json(secrets, &tools) < 0) {
                        json_decref(tools);
                        r = al_error(err, -ENOMEM, NULL,
                                     "server '%s': cannot check its tool "
                                     "list for the secrets' values",
                                     sp->name);
                        break;
                }
                uint64_t t0 = al_now_ns();
                r = add_tools(h, i, sp, tools, warnings, err);
                h->gen_ns += al_now_ns() - t0;
                json_decref(tools);
        }
        uint64_t t_write = al_now_ns();
        if (r >= 0) {
                const char *tmp = getenv("TMPDIR");
                if (!tmp || tmp[0] != '/')
                        tmp = "/tmp";
                if (asprintf(&h->dir, "%s/airlock-servers-XXXXXX", tmp) < 0) {
                        h->dir = NULL;
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                } else if (!mkdtemp(h->dir)) {
                        r = al_error(err, -errno, h->dir, "stubs: cannot make %s: %m", h->dir);
                        free(h->dir);
                        h->dir = NULL;
                } else {
                        /* Read by the guest's user, which as root is not
                         * ours; nothing in it is secret. */
                        chmod(h->dir, 0755);
                }
        }
        if (r >= 0) {
                _cleanup_close_ int fd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                const char *modules[MCP_MAX_SERVERS], *names[MCP_MAX_SERVERS];
                for (size_t i = 0; i < h->n_srv; i++) {
                        modules[i] = h->srv[i].module;
                        names[i] = h->srv[i].name;
                }
                r = fd < 0
                        ? al_error(err, -errno, h->dir, "stubs: %s: %m", h->dir)
                        : mcp_stubs_write(fd, h->tools, h->n_tools, modules, names, h->n_srv, err);
        }
        h->gen_ns += al_now_ns() - t_write;
        if (r < 0) {
                /* The message may hold the end of a server's stderr, and
                 * reaches whoever asked for the sandbox (under airlock mcp,
                 * the model): no secret's value goes with it. */
                if (err)
                        secrets_scrub_text(secrets, err->message, sizeof(err->message));
                mcp_hub_free(h);
                return r;
        }
        *ret_dir = strdup(h->dir);
        if (!*ret_dir) {
                mcp_hub_free(h);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = h;
        return 0;
}

static mcp_tool *find(const mcp_hub *h, const char *name)
{
        for (size_t i = 0; h && name && i < h->n_tools; i++)
                if (strcmp(h->tools[i].host_name, name) == 0)
                        return &h->tools[i];
        return NULL;
}

/* The server whose module name is the part of name before its first
 * '.', or NULL. */
static const hub_server *server_of(const mcp_hub *h, const char *name)
{
        const char *dot = name ? strchr(name, '.') : NULL;
        for (size_t i = 0; dot && h && i < h->n_srv; i++)
                if (strlen(h->srv[i].module) == (size_t)(dot - name) &&
                    strncmp(h->srv[i].module, name, (size_t)(dot - name)) == 0)
                        return &h->srv[i];
        return NULL;
}

bool mcp_hub_owns(const mcp_hub *h, const char *name)
{
        if (h && name && (strcmp(name, MCP_OP_START) == 0 || strcmp(name, MCP_OP_WAIT) == 0))
                return true;
        return find(h, name) != NULL || server_of(h, name) != NULL;
}

uint64_t mcp_hub_stubs_ns(const mcp_hub *h)
{
        return h ? h->gen_ns : 0;
}

size_t mcp_hub_servers(const mcp_hub *h)
{
        return h ? h->n_srv : 0;
}

const char *mcp_hub_server_module(const mcp_hub *h, size_t i)
{
        return h && i < h->n_srv ? h->srv[i].module : NULL;
}

const char *mcp_hub_server_name(const mcp_hub *h, size_t i)
{
        return h && i < h->n_srv ? h->srv[i].name : NULL;
}

size_t mcp_hub_server_tools(const mcp_hub *h, size_t i)
{
        return h && i < h->n_srv ? h->srv[i].n_tools : 0;
}

static tool_fail fail_typed(char **ret_type, const char *type, char **ret_message, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));

static tool_fail fail_typed(char **ret_type, const char *type, char **ret_message, const char *fmt,
                            ...)
{
        va_list ap;
        va_start(ap, fmt);
        tool_fail f = tools_vfail(TOOL_FAIL_RUNTIME, ret_message, fmt, ap);
        va_end(ap);
        if (ret_type)
                *ret_type = strdup(type);
        return f;
}

/* The text parts of an isError result, for the exception's message. */
static char *error_text(const json_t *res)
{
        dynbuf b;
        dynbuf_init(&b, ERROR_TEXT_MAX);
        size_t i;
        const json_t *c;
        json_array_foreach (json_object_get(res, "content"), i, c) {
                const char *t = json_string_value(json_object_get(c, "text"));
                if (t && dynbuf_appendf(&b, "%s%s", b.len ? "\n" : "", t) < 0)
                        break;
        }
        if (!b.len)
                dynbuf_appendf(&b, "(no message)");
        return dynbuf_take(&b, NULL);
}

/* What a failure adds when the server has changed its tool list since the
 * stubs were made: the tool may be gone, or a new one not there yet. */
static const char *changed_note(const hub_server *s)
{
        return s && mcp_upstream_list_changed(s->up)
                   ? " (the server changed its tool list after this sandbox was built "
                     "(notifications/tools/list_changed): the stubs are those of the build; "
                     "the next build of the configuration, a new sandbox, has the new list)"
                   : "";
}

/* The checks of a call before it goes upstream: the tool, its arguments,
 * approval and the per-run caps (counted here). TOOL_OK with *ret_tool. */
static tool_fail hub_check(mcp_hub *h, const char *name, const json_t *args, mcp_run_counts *counts,
                           airlock_tool_approver_fn approver, void *approver_data,
                           mcp_tool **ret_tool, char **ret_message, char **ret_type)
{
        mcp_tool *t = find(h, name);
        if (!t) {
                const hub_server *sv = server_of(h, name);
                return tools_fail(TOOL_FAIL_INVALID, ret_message,
                                  "server '%s' has no tool '%.100s' (servers.search(\"words\") "
                                  "finds its tools)%s",
                                  sv ? sv->name : "?", name, changed_note(sv));
        }
        airlock_error e;
        airlock_error_clear(&e);
        if (tools_validate(&t->info, args, &e) < 0)
                return tools_fail(TOOL_FAIL_INVALID, ret_message, "%s", e.message);
        hub_server *s = &h->srv[t->server_index];
        if (t->needs_approval) {
                _cleanup_free_ char *text = json_dumps(args, JSON_COMPACT);
                /* Two cases, told apart: nobody can be asked here, or the
                 * approver (a person at the terminal, a program's callback)
                 * was asked and said no. */
                if (!approver || !approver(approver_data, t->host_name, text ? text : "{}"))
                        return fail_typed(
                            ret_type, "ApprovalRequired", ret_message,
                            "%s: tool '%s' of server '%s' needs approval (%s), and %s; to let "
                            "it run without approval, set \"approval\": \"never\" for it in the "
                            "servers file (\"tools\": {\"%s\": {\"approval\": \"never\"}}, or "
                            "for the whole server)",
                            t->host_name, t->name, s->name, t->approval_why,
                            approver ? "the approver refused this call"
                                     : "nobody can approve it here",
                            t->name);
        }
        size_t ti = (size_t)(t - h->tools);
        if (counts) {
                if (counts->server[t->server_index] >= s->max_calls)
                        return fail_typed(ret_type, "CallLimitError", ret_message,
                                          "%s: this run made its %u calls of server '%s' "
                                          "(\"maxCallsPerRun\" in the servers file)",
                                          t->host_name, s->max_calls, s->name);
                if (counts->tool && counts->tool[ti] >= t->max_calls)
                        return fail_typed(ret_type, "CallLimitError", ret_message,
                                          "%s: this run made its %u calls of tool '%s' "
                                          "(\"maxCallsPerRun\" of the tool in the servers file)",
                                          t->host_name, t->max_calls, t->name);
                counts->server[t->server_index]++;
                if (counts->tool)
                        counts->tool[ti]++;
        }
        *ret_tool = t;
        return TOOL_OK;
}

/* The call upstream of a checked call, and its result made what the stubs
 * expect. Thread-safe: the calls of a run's jobs run it at once. */
static tool_fail hub_perform(mcp_hub *h, mcp_tool *t, const json_t *args, uint64_t deadline_ns,
                             int cancel_fd, uint64_t budget, json_t **ret_result,
                             char **ret_message, char **ret_type)
{
        hub_server *s = &h->srv[t->server_index];
        airlock_error e;
        airlock_error_clear(&e);
        /* The reply's parse is charged to the run's host budget before it
         * is parsed (upstream_reply_charge). */
        mcp_bounds b = {deadline_ns, cancel_fd, t->max_result, budget};
        json_t *res = NULL;
        int r = mcp_upstream_call(s->up, t->name, args, t->timeout_s, &b, &res, &e);
        if (r == -ETIMEDOUT)
                return fail_typed(ret_type, "UpstreamError", ret_message,
                                  "%s: server '%s' gave no answer in time (%s); the call was "
                                  "cancelled upstream",
                                  t->host_name, s->name, e.message);
        if (r == -ECANCELED)
                return fail_typed(ret_type, "UpstreamError", ret_message,
                                  "%s: the run ended during the call; it was cancelled upstream",
                                  t->host_name);
        if (r == -EREMOTEIO)
                return fail_typed(ret_type, "UpstreamError", ret_message,
                                  "%s: server '%s' refused the call: %s%s", t->host_name, s->name,
                                  e.message, changed_note(s));
        if (r == -EMSGSIZE) /* over maxResultBytes or the budget, dropped: the server stays */
                return fail_typed(ret_type, "UpstreamError", ret_message, "%s: %s", t->host_name,
                                  e.message);
        if (r < 0)
                return fail_typed(ret_type, "UpstreamError", ret_message,
                                  "%s: %s; the next call starts the server afresh", t->host_name,
                                  e.message);
        size_t size = json_dumpb(res, NULL, 0, JSON_COMPACT);
        if (size > t->max_result) {
                json_decref(res);
                return fail_typed(ret_type, "UpstreamError", ret_message,
                                  "%s: the result is %zu bytes, more than the %zu of "
                                  "\"maxResultBytes\"",
                                  t->host_name, size, t->max_result);
        }
        if (json_is_true(json_object_get(res, "isError"))) {
                _cleanup_free_ char *text = error_text(res);
                json_decref(res);
                return fail_typed(ret_type, "ToolError", ret_message, "%s: %s%s", t->host_name,
                                  text ? text : "(no message)", changed_note(s));
        }
        /* What the stubs read: the content and the structured result. */
        json_t *out = json_object();
        if (out) {
                json_t *c = json_object_get(res, "content");
                if (json_is_array(c))
                        json_object_set(out, "content", c);
                else
                        json_object_set_new(out, "content", json_array());
                json_t *sc = json_object_get(res, "structuredContent");
                if (sc)
                        json_object_set(out, "structuredContent", sc);
        }
        json_decref(res);
        if (!out)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
        *ret_result = out;
        return TOOL_OK;
}

/* ---- calls in flight at once within one run (the stubs' jobs) ---------- */

static void job_clear(hub_job *j)
{
        json_decref(j->args);
        free(j->raw);
        free(j->message);
        free(j->type);
        close_fd(&j->cancel_fd);
        close_fd(&j->efd);
        close_fd(&j->run_fd);
        *j = (hub_job){.cancel_fd = -1, .efd = -1, .run_fd = -1};
}

/* What the hub holds (under jlock): *ret_used, the slots of all runs;
 * *ret_mine, those of run id, running or done and not collected; and
 * *ret_held, the bytes of run id's results that wait to be collected. */
static void run_holds(const mcp_hub *h, uint64_t id, size_t *ret_used, size_t *ret_mine,
                      uint64_t *ret_held)
{
        size_t used = 0, mine = 0;
        uint64_t held = 0;
        for (size_t k = 0; k < MCP_MAX_JOBS; k++) {
                const hub_job *j = &h->jobs[k];
                if (!j->used)
                        continue;
                used++;
                if (id && j->run_id == id) {
                        mine++;
                        held += j->raw_len;
                }
        }
        if (ret_used)
                *ret_used = used;
        if (ret_mine)
                *ret_mine = mine;
        if (ret_held)
                *ret_held = held;
}

/* The call of a job, on its own thread. The result becomes the bytes of
 * its JSON at once (the tree, some 10 times bigger for small values, is
 * freed here), and is kept only within the run's host budget: a result
 * that would take the run's uncollected results past it is dropped, and
 * the outcome says so. A job whose run ended meanwhile (run_id 0) is
 * dropped whole: nobody will collect it. */
static void *job_main(void *arg)
{
        hub_job *j = arg;
        mcp_hub *h = j->hub;
        json_t *result = NULL;
        char *message = NULL, *type = NULL;
        tool_fail f = hub_perform(h, j->tool, j->args, j->deadline_ns, j->cancel_fd, j->budget,
                                  &result, &message, &type);
        char *raw = NULL;
        size_t len = 0;
        uint64_t cost = 0;
        if (f == TOOL_OK) {
                raw = json_dumps(result ? result : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
                json_decref(result);
                if (!raw) {
                        f = fail_typed(&type, "UpstreamError", &message, "%s: out of memory",
                                       j->tool->host_name);
                } else {
                        uint64_t values = 0;
                        unsigned depth = 0;
                        len = strlen(raw);
                        jsonrpc_measure(raw, len, &values, &depth);
                        cost = values * JSONRPC_VALUE_COST + len;
                }
        }
        pthread_mutex_lock(&h->jlock);
        if (raw && j->run_id) {
                uint64_t held = 0;
                run_holds(h, j->run_id, NULL, NULL, &held);
                if (held + len > j->budget) {
                        free(raw);
                        raw = NULL;
                        f = fail_typed(&type, "UpstreamError", &message,
                                       "%s: the result (%zu bytes) was dropped: with it, the "
                                       "results of this run's calls not yet collected would "
                                       "hold more than the run's host budget of %" PRIu64
                                       " bytes (%s); await the calls started before starting "
                                       "more",
                                       j->tool->host_name, len, j->budget, MCP_RUN_BUDGET_TEXT);
                        len = 0;
                }
        }
        j->f = f;
        j->raw = raw;
        j->raw_len = len;
        j->parse_cost = cost;
        j->message = message;
        j->type = type;
        j->done = true;
        h->jrunning--;
        if (!j->run_id)
                job_clear(j);
        pthread_cond_broadcast(&h->jcv);
        pthread_mutex_unlock(&h->jlock);
        return NULL;
}

static void job_cancel(hub_job *j)
{
        uint64_t one = 1;
        if (j->used && !j->done && j->efd >= 0)
                (void)!write(j->efd, &one, sizeof(one));
}

/* Ends the jobs of the hub (its close): each is cancelled upstream, and
 * the close waits for their threads. */
static void jobs_stop(mcp_hub *h)
{
        if (!h->jinit)
                return;
        pthread_mutex_lock(&h->jlock);
        for (size_t i = 0; i < MCP_MAX_JOBS; i++)
                job_cancel(&h->jobs[i]);
        while (h->jrunning)
                pthread_cond_wait(&h->jcv, &h->jlock);
        for (size_t i = 0; i < MCP_MAX_JOBS; i++)
                if (h->jobs[i].used)
                        job_clear(&h->jobs[i]);
        pthread_mutex_unlock(&h->jlock);
        pthread_mutex_destroy(&h->jlock);
        pthread_cond_destroy(&h->jcv);
}

/* Contract: called when a run ends, whatever the way (run.c's run_free),
 * before its counters go. Every job of the run is let go at once: one
 * running is cancelled upstream and marked as no run's (its thread drops
 * its outcome when the call returns, which the cancel makes soon), and one
 * done has its outcome dropped now. So a run's uncollected results never
 * outlive it, and no later run (which gets a new run_id) can name them. */
void mcp_hub_run_end(mcp_hub *h, mcp_run_counts *counts)
{
        if (!h || !counts || !counts->run_id || !h->jinit)
                return;
        pthread_mutex_lock(&h->jlock);
        for (size_t k = 0; k < MCP_MAX_JOBS; k++) {
                hub_job *j = &h->jobs[k];
                if (!j->used || j->run_id != counts->run_id)
                        continue;
                if (j->done) {
                        job_clear(j);
                } else {
                        job_cancel(j);
                        j->run_id = 0;
                }
        }
        pthread_mutex_unlock(&h->jlock);
        counts->run_id = 0;
}

uint64_t mcp_hub_run_held(mcp_hub *h, const mcp_run_counts *counts)
{
        if (!h || !counts || !counts->run_id || !h->jinit)
                return 0;
        uint64_t held = 0;
        pthread_mutex_lock(&h->jlock);
        run_holds(h, counts->run_id, NULL, NULL, &held);
        pthread_mutex_unlock(&h->jlock);
        return held;
}

/* An outcome as the stubs read it: {"ok": true, "result"} or {"ok": false,
 * "error", "type", "invalid"}. */
static json_t *outcome(tool_fail f, json_t *result, const char *message, const char *type)
{
        if (f == TOOL_OK)
                return json_pack("{s:b, s:O}", "ok", 1, "result", result ? result : json_null());
        json_t *o =
            json_pack("{s:b, s:s, s:b}", "ok", 0, "error", message ? message : "the tool failed",
                      "invalid", f == TOOL_FAIL_INVALID);
        if (o && type)
                json_object_set_new(o, "type", json_string(type));
        return o;
}

/* A free slot, or NULL. Under jlock. */
static hub_job *job_slot(mcp_hub *h)
{
        for (size_t i = 0; i < MCP_MAX_JOBS; i++)
                if (!h->jobs[i].used)
                        return &h->jobs[i];
        return NULL;
}

/* Why run id may not take another slot now, or NULL (under jlock). A slot
 * is held from the call's start until its outcome is collected or the run
 * ends: a run cannot keep slots by leaving its outcomes uncollected. */
static const char *no_slot_why(mcp_hub *h, const mcp_run_counts *counts, char *buf, size_t size)
{
        size_t used = 0, mine = 0;
        uint64_t held = 0;
        run_holds(h, counts->run_id, &used, &mine, &held);
        size_t free_n = MCP_MAX_JOBS - used;
        if (mine >= MCP_MAX_RUN_JOBS)
                snprintf(buf, size,
                         "this run has %zu calls started and not collected, the most one run may "
                         "have (%d); await some of them before starting more",
                         mine, MCP_MAX_RUN_JOBS);
        else if (held >= counts->budget)
                snprintf(buf, size,
                         "the results of this run's calls not yet collected hold %" PRIu64
                         " bytes, the run's host budget of %" PRIu64
                         " bytes (%s); await them before starting more",
                         held, counts->budget, MCP_RUN_BUDGET_TEXT);
        else if (!free_n || (mine >= MCP_RUN_JOBS_FAIR && free_n <= MCP_JOBS_RESERVE))
                snprintf(buf, size,
                         "too many calls of the servers are started and not collected in this "
                         "sandbox (%zu of at most %d of all runs; a run that has %d or more takes "
                         "another only while more than %d are free, so that other runs can "
                         "start theirs); this run has %zu",
                         used, MCP_MAX_JOBS, MCP_RUN_JOBS_FAIR, MCP_JOBS_RESERVE, mine);
        else
                return NULL;
        return buf;
}

/* Contract: MCP_OP_START {"calls": [[TOOL, ARGS], ...]}: each call checked
 * as a call of its own (so approval is asked here, on the run's thread),
 * then started on a thread; the reply lists, in order, {"ticket": N} or
 * the outcome of a call that could not start. A call takes a slot of the
 * hub that stays the run's until its outcome is collected or the run ends
 * (no_slot_why says when a run may take one), and its ticket names it for
 * this run alone (counts->run_id). */
static tool_fail op_start(mcp_hub *h, const json_t *args, const tool_call_bounds *bounds,
                          mcp_run_counts *counts, airlock_tool_approver_fn approver,
                          void *approver_data, json_t **ret_result, char **ret_message)
{
        const json_t *calls = json_object_get(args, "calls");
        if (!json_is_array(calls) || json_array_size(calls) > MCP_MAX_JOBS)
                return tools_fail(TOOL_FAIL_INVALID, ret_message,
                                  "servers: \"calls\" must be an array of at most %d [tool, "
                                  "arguments] pairs",
                                  MCP_MAX_JOBS);
        json_t *out = json_array();
        if (!out)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
        size_t i;
        const json_t *c;
        json_array_foreach ((json_t *)calls, i, c) {
                const char *name = json_string_value(json_array_get(c, 0));
                const json_t *a = json_array_get(c, 1);
                mcp_tool *t = NULL;
                char *message = NULL, *type = NULL;
                tool_fail f;
                if (!json_is_array(c) || json_array_size(c) != 2 || !name || !json_is_object(a))
                        f = tools_fail(TOOL_FAIL_INVALID, &message,
                                       "servers: each call is [tool name, {arguments}]");
                else
                        f = hub_check(h, name, a, counts, approver, approver_data, &t, &message,
                                      &type);
                hub_job *j = NULL;
                if (f == TOOL_OK) {
                        char why[512];
                        pthread_mutex_lock(&h->jlock);
                        const char *no = no_slot_why(h, counts, why, sizeof(why));
                        j = no ? NULL : job_slot(h);
                        if (j) {
                                j->used = true;
                                j->done = false;
                                j->run_id = counts->run_id;
                                j->budget = counts->budget;
                                j->tool = t;
                                j->args = json_deep_copy(a);
                                j->deadline_ns = bounds ? bounds->deadline_ns : 0;
                                j->hub = h;
                                /* The call stops at the hub's close, the
                                 * run's end or the run's cancel, whichever
                                 * comes first. */
                                j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                                j->run_fd = bounds && bounds->cancel_fd >= 0
                                                ? fcntl(bounds->cancel_fd, F_DUPFD_CLOEXEC, 3)
                                                : -1;
                                j->cancel_fd = epoll_create1(EPOLL_CLOEXEC);
                                struct epoll_event ev = {.events = EPOLLIN};
                                bool fds_ok =
                                    j->efd >= 0 && j->cancel_fd >= 0 &&
                                    epoll_ctl(j->cancel_fd, EPOLL_CTL_ADD, j->efd, &ev) == 0 &&
                                    (j->run_fd < 0 ||
                                     epoll_ctl(j->cancel_fd, EPOLL_CTL_ADD, j->run_fd, &ev) == 0);
                                do {
                                        if (getrandom(&j->ticket, sizeof(j->ticket), 0) !=
                                            sizeof(j->ticket))
                                                j->ticket = al_now_ns() ^ (uintptr_t)j;
                                        j->ticket &= (1ull << 53) - 1; /* exact in any JSON */
                                } while (j->ticket == 0);
                                pthread_attr_t at;
                                pthread_t th;
                                pthread_attr_init(&at);
                                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                                pthread_attr_setstacksize(&at, 512u << 10);
                                int pr = !j->args || !fds_ok
                                             ? ENOMEM
                                             : pthread_create(&th, &at, job_main, j);
                                pthread_attr_destroy(&at);
                                if (pr == 0) {
                                        h->jrunning++;
                                } else {
                                        job_clear(j);
                                        j = NULL;
                                        no = "out of memory";
                                }
                        }
                        uint64_t ticket = j ? j->ticket : 0;
                        pthread_mutex_unlock(&h->jlock);
                        if (j) {
                                json_array_append_new(
                                    out, json_pack("{s:I}", "ticket", (json_int_t)ticket));
                                continue;
                        }
                        f = fail_typed(&type, "UpstreamError", &message, "%s: %s", t->host_name,
                                       no ? no : "no slot is free");
                }
                json_array_append_new(out, outcome(f, NULL, message, type));
                free(message);
                free(type);
        }
        *ret_result = out;
        return TOOL_OK;
}

/* The job of run id with ticket tk, or NULL (under jlock). */
static hub_job *job_of(mcp_hub *h, uint64_t id, const json_t *tk)
{
        for (size_t k = 0; id && json_is_integer(tk) && k < MCP_MAX_JOBS; k++)
                if (h->jobs[k].used && h->jobs[k].run_id == id &&
                    h->jobs[k].ticket == (uint64_t)json_integer_value(tk))
                        return &h->jobs[k];
        return NULL;
}

/* An outcome taken from its job to be built outside the lock. */
typedef struct taken {
        bool any;   /* false: not ready, left for the next wait */
        bool found; /* false: no such call of this run */
        tool_fail f;
        char *raw;
        size_t raw_len;
        char *message, *type;
} taken;

/* Contract: MCP_OP_WAIT {"tickets": [N, ...], "slice_ms": MS}: waits until
 * every job named is done, or MS milliseconds (0: no such bound), or the
 * run's end (its deadline or cancel, which cancel the run's jobs too); the
 * reply {"done": [[N, OUTCOME], ...]} holds the outcomes ready, at most
 * MCP_WAIT_BYTES of them and at most the run's host budget once parsed (at
 * least one), each given once. A ticket that is not the run's (another
 * run's, an ended run's, a made-up one) is an outcome of its own: "no such
 * call", the stubs' ValueError. */
static tool_fail op_wait(mcp_hub *h, const json_t *args, const tool_call_bounds *bounds,
                         mcp_run_counts *counts, json_t **ret_result, char **ret_message)
{
        const json_t *tickets = json_object_get(args, "tickets");
        const json_t *sl = json_object_get(args, "slice_ms");
        if (!json_is_array(tickets) || json_array_size(tickets) > MCP_MAX_JOBS ||
            (sl && (!json_is_integer(sl) || json_integer_value(sl) < 0 ||
                    json_integer_value(sl) > 60000)))
                return tools_fail(TOOL_FAIL_INVALID, ret_message,
                                  "servers: wait takes \"tickets\" (at most %d) and "
                                  "\"slice_ms\" (0 to 60000)",
                                  MCP_MAX_JOBS);
        uint64_t until = sl && json_integer_value(sl) > 0
                             ? al_now_ns() + (uint64_t)json_integer_value(sl) * 1000000ull
                             : UINT64_MAX;
        uint64_t deadline = bounds && bounds->deadline_ns ? bounds->deadline_ns : UINT64_MAX;
        int cancel_fd = bounds ? bounds->cancel_fd : -1;
        uint64_t id = counts->run_id;
        size_t n = json_array_size(tickets);
        _cleanup_free_ taken *tv = calloc(n ? n : 1, sizeof(*tv));
        if (!tv)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
        pthread_mutex_lock(&h->jlock);
        bool ended = false;
        for (;;) {
                size_t pending = 0;
                size_t i;
                const json_t *tk;
                json_array_foreach ((json_t *)tickets, i, tk) {
                        hub_job *j = job_of(h, id, tk);
                        if (j && !j->done)
                                pending++;
                }
                struct pollfd p = {cancel_fd, POLLIN, 0};
                uint64_t now = al_now_ns();
                if (!pending || now >= until)
                        break;
                if (now >= deadline || (cancel_fd >= 0 && poll(&p, 1, 0) == 1)) {
                        ended = true;
                        break;
                }
                /* A slice at a time, so that a cancel is seen. */
                uint64_t t = now + 100000000ull;
                t = t < until ? t : until;
                t = t < deadline ? t : deadline;
                struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
                pthread_cond_clockwait(&h->jcv, &h->jlock, CLOCK_MONOTONIC, &ts);
        }
        if (ended) {
                for (size_t k = 0; k < MCP_MAX_JOBS; k++)
                        if (h->jobs[k].used && h->jobs[k].run_id == id)
                                job_cancel(&h->jobs[k]);
                pthread_mutex_unlock(&h->jlock);
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message,
                                  "servers: the run ended while its calls were in flight; they "
                                  "were cancelled upstream");
        }
        /* The outcomes leave their slots under the lock; their results are
         * parsed after it, so that a big one holds no other run's call. */
        size_t bytes = 0, any = 0, i;
        uint64_t cost = 0;
        const json_t *tk;
        json_array_foreach ((json_t *)tickets, i, tk) {
                hub_job *j = job_of(h, id, tk);
                if (!j) {
                        tv[i] = (taken){.any = true};
                        continue;
                }
                if (!j->done)
                        continue;
                if (any &&
                    (bytes + j->raw_len > MCP_WAIT_BYTES || cost + j->parse_cost > counts->budget))
                        continue; /* the next wait takes it */
                any++;
                bytes += j->raw_len;
                cost += j->parse_cost;
                tv[i] = (taken){.any = true,
                                .found = true,
                                .f = j->f,
                                .raw = TAKE_PTR(j->raw),
                                .raw_len = j->raw_len,
                                .message = TAKE_PTR(j->message),
                                .type = TAKE_PTR(j->type)};
                job_clear(j);
        }
        pthread_mutex_unlock(&h->jlock);
        json_t *done = json_array();
        json_array_foreach ((json_t *)tickets, i, tk) {
                taken *x = &tv[i];
                if (!x->any)
                        continue;
                json_t *o;
                if (!x->found) {
                        o = outcome(TOOL_FAIL_INVALID, NULL, "servers: no such call of this run",
                                    NULL);
                } else if (x->f == TOOL_OK) {
                        /* Bytes json_dumps made: parsed back, NUL and all. */
                        json_t *res = json_loadb(x->raw, x->raw_len, JSON_ALLOW_NUL, NULL);
                        o = res ? outcome(TOOL_OK, res, NULL, NULL)
                                : outcome(TOOL_FAIL_RUNTIME, NULL,
                                          "servers: out of memory reading the result",
                                          "UpstreamError");
                        json_decref(res);
                } else {
                        o = outcome(x->f, NULL, x->message, x->type);
                }
                free(x->raw);
                free(x->message);
                free(x->type);
                if (done && o)
                        json_array_append_new(done,
                                              json_pack("{s:O, s:o}", "ticket", tk, "outcome", o));
                else
                        json_decref(o);
        }
        if (!done)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
        *ret_result = json_pack("{s:o}", "done", done);
        return *ret_result ? TOOL_OK : tools_fail(TOOL_FAIL_RUNTIME, ret_message, "out of memory");
}

tool_fail mcp_hub_call(mcp_hub *h, const char *name, const json_t *args,
                       const tool_call_bounds *bounds, mcp_run_counts *counts,
                       airlock_tool_approver_fn approver, void *approver_data, json_t **ret_result,
                       char **ret_message, char **ret_type)
{
        if (counts && !counts->run_id) {
                /* The run's identity for its tickets: never 0, never given
                 * twice by this hub. */
                pthread_mutex_lock(&h->jlock);
                counts->run_id = ++h->next_run_id;
                pthread_mutex_unlock(&h->jlock);
        }
        if (counts && !counts->budget)
                counts->budget = mcp_run_budget(0);
        if (name && (strcmp(name, MCP_OP_START) == 0 || strcmp(name, MCP_OP_WAIT) == 0) && !counts)
                return tools_fail(TOOL_FAIL_RUNTIME, ret_message, "servers: no run to start in");
        if (name && strcmp(name, MCP_OP_START) == 0)
                return op_start(h, args, bounds, counts, approver, approver_data, ret_result,
                                ret_message);
        if (name && strcmp(name, MCP_OP_WAIT) == 0)
                return op_wait(h, args, bounds, counts, ret_result, ret_message);
        mcp_tool *t = NULL;
        tool_fail f =
            hub_check(h, name, args, counts, approver, approver_data, &t, ret_message, ret_type);
        if (f != TOOL_OK)
                return f;
        return hub_perform(
            h, t, args, bounds ? bounds->deadline_ns : 0, bounds ? bounds->cancel_fd : -1,
            counts ? counts->budget : mcp_run_budget(0), ret_result, ret_message, ret_type);
}
