/* The Python stubs of the upstream tools: the package "servers", one module
 * per server, one function per tool, written once when the sandbox is
 * built and read by the guest from a read-only folder.
 *
 * Everything that comes from a server (names, descriptions, schemas, enum
 * values, defaults) reaches the source only as a string literal, a comment
 * free docstring with every quote and backslash escaped, or an identifier
 * made by mcp_identifier: a server cannot put code into a stub. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "mcp/mcp.h"

#define MODULE_MAX   (32u << 20)
#define SCHEMA_DEPTH 6
#define SEARCH_DESC  300

/* The package's own module: the helpers every stub calls. */
static const char init_py[] =
    "\"\"\"The MCP servers of this sandbox, as Python modules.\n"
    "\n"
    "    from servers import NAME        # then NAME.TOOL(arg=...)\n"
    "    servers.search(\"words\")          # find tools by words of their names and descriptions\n"
    "    help(servers.NAME.TOOL)          # parameters and description\n"
    "\n"
    "Each tool is a function with keyword arguments, and TOOL_async is the same\n"
    "call for asyncio (await it; gather many at once). A tool that declares an\n"
    "output schema returns its structured result (a dict); otherwise its text as\n"
    "str. Images, audio and embedded resources come back as Image, Audio and\n"
    "Resource objects (.data, .mime_type), resource links as ResourceLink; a\n"
    "result of several parts is a list of them. A tool's own failure raises\n"
    "ToolError; a server that fails (crashes, hangs, answers nonsense) raises\n"
    "UpstreamError; a call that needs approval where nobody can give it raises\n"
    "ApprovalRequired; one past the per-run cap of calls raises CallLimitError.\n"
    "The servers run on the host, outside this sandbox, and keep their state\n"
    "between runs of the same configuration.\n"
    "\"\"\"\n"
    "import base64 as _base64\n"
    "import importlib as _importlib\n"
    "\n"
    "from airlock import call_tool as _call_tool\n"
    "\n"
    "from ._index import MODULES as _MODULES, TOOLS as _TOOLS\n"
    "\n"
    "__all__ = [\"search\", \"ToolError\", \"UpstreamError\", \"ApprovalRequired\",\n"
    "           \"CallLimitError\", \"Image\", \"Audio\", \"Resource\", \"ResourceLink\"] + "
    "list(_MODULES)\n"
    "\n"
    "\n"
    "class ToolError(RuntimeError):\n"
    "    \"\"\"The tool ran and reported a failure (isError): the server's message.\"\"\"\n"
    "\n"
    "    def __init__(self, message, tool=None):\n"
    "        super().__init__(message)\n"
    "        self.tool = tool\n"
    "\n"
    "\n"
    "class UpstreamError(RuntimeError):\n"
    "    \"\"\"The server failed: it crashed, timed out or broke the protocol.\"\"\"\n"
    "\n"
    "    def __init__(self, message, tool=None):\n"
    "        super().__init__(message)\n"
    "        self.tool = tool\n"
    "\n"
    "\n"
    "class ApprovalRequired(PermissionError):\n"
    "    \"\"\"The call needs a person's approval, and nobody can be asked here.\"\"\"\n"
    "\n"
    "    def __init__(self, message, tool=None):\n"
    "        super().__init__(message)\n"
    "        self.tool = tool\n"
    "\n"
    "\n"
    "class CallLimitError(RuntimeError):\n"
    "    \"\"\"The run made as many calls of the tool or server as it may.\"\"\"\n"
    "\n"
    "    def __init__(self, message, tool=None):\n"
    "        super().__init__(message)\n"
    "        self.tool = tool\n"
    "\n"
    "\n"
    "_ERRORS = {\"ToolError\": ToolError, \"UpstreamError\": UpstreamError,\n"
    "           \"ApprovalRequired\": ApprovalRequired, \"CallLimitError\": CallLimitError}\n"
    "\n"
    "\n"
    "class _Binary:\n"
    "    def __init__(self, data, mime_type):\n"
    "        self.data = data\n"
    "        self.mime_type = mime_type\n"
    "\n"
    "    def __repr__(self):\n"
    "        return f\"{type(self).__name__}(mime_type={self.mime_type!r}, {len(self.data)} "
    "bytes)\"\n"
    "\n"
    "\n"
    "class Image(_Binary):\n"
    "    \"\"\"An image: .data (bytes) and .mime_type.\"\"\"\n"
    "\n"
    "\n"
    "class Audio(_Binary):\n"
    "    \"\"\"Audio: .data (bytes) and .mime_type.\"\"\"\n"
    "\n"
    "\n"
    "class Resource:\n"
    "    \"\"\"An embedded resource: .uri, .mime_type, and .text or .data (bytes).\"\"\"\n"
    "\n"
    "    def __init__(self, uri, mime_type=None, text=None, data=None):\n"
    "        self.uri, self.mime_type, self.text, self.data = uri, mime_type, text, data\n"
    "\n"
    "    def __repr__(self):\n"
    "        return f\"Resource({self.uri!r}, mime_type={self.mime_type!r})\"\n"
    "\n"
    "\n"
    "class ResourceLink:\n"
    "    \"\"\"A link to a resource of the server: .uri, .name, .description, .mime_type.\"\"\"\n"
    "\n"
    "    def __init__(self, uri, name=None, description=None, mime_type=None):\n"
    "        self.uri, self.name = uri, name\n"
    "        self.description, self.mime_type = description, mime_type\n"
    "\n"
    "    def __repr__(self):\n"
    "        return f\"ResourceLink({self.uri!r}, name={self.name!r})\"\n"
    "\n"
    "\n"
    "def _part(c):\n"
    "    t = c.get(\"type\")\n"
    "    if t == \"text\":\n"
    "        return c.get(\"text\", \"\")\n"
    "    if t in (\"image\", \"audio\"):\n"
    "        cls = Image if t == \"image\" else Audio\n"
    "        return cls(_base64.b64decode(c.get(\"data\", \"\")), c.get(\"mimeType\"))\n"
    "    if t == \"resource_link\":\n"
    "        return ResourceLink(c.get(\"uri\"), c.get(\"name\"), c.get(\"description\"),\n"
    "                            c.get(\"mimeType\"))\n"
    "    if t == \"resource\":\n"
    "        r = c.get(\"resource\") or {}\n"
    "        blob = r.get(\"blob\")\n"
    "        return Resource(r.get(\"uri\"), r.get(\"mimeType\"), r.get(\"text\"),\n"
    "                        _base64.b64decode(blob) if blob is not None else None)\n"
    "    return c\n"
    "\n"
    "\n"
    "def _result(r, structured):\n"
    "    if not isinstance(r, dict):\n"
    "        return r\n"
    "    if structured and \"structuredContent\" in r:\n"
    "        return r[\"structuredContent\"]\n"
    "    parts = [_part(c) for c in r.get(\"content\") or [] if isinstance(c, dict)]\n"
    "    if not parts:\n"
    "        return r.get(\"structuredContent\")\n"
    "    if all(isinstance(p, str) for p in parts):\n"
    "        return \"\\n\".join(parts)\n"
    "    return parts[0] if len(parts) == 1 else parts\n"
    "\n"
    "\n"
    "def _raise(e, tool):\n"
    "    cls = _ERRORS.get(getattr(e, \"tool_error_type\", None))\n"
    "    if cls is None:\n"
    "        raise e\n"
    "    raise cls(str(e), tool) from None\n"
    "\n"
    "\n"
    "def _outcome(o, tool, structured):\n"
    "    \"\"\"The value of a call's outcome from servers._wait, or its exception\n"
    "    (the same as the call made alone would raise).\"\"\"\n"
    "    if o.get(\"ok\"):\n"
    "        return _result(o.get(\"result\"), structured)\n"
    "    msg = o.get(\"error\", \"the tool failed\")\n"
    "    if o.get(\"invalid\"):\n"
    "        raise ValueError(msg)\n"
    "    cls = _ERRORS.get(o.get(\"type\"))\n"
    "    if cls is None:\n"
    "        raise RuntimeError(msg)\n"
    "    raise cls(msg, tool)\n"
    "\n"
    "\n"
    "# Calls in flight at once (the asyncio variant, threads): servers._start\n"
    "# starts calls on the host and answers at once with their tickets;\n"
    "# servers._wait collects what is done. The host serves a run's requests one\n"
    "# at a time, so a wait is bounded by a slice while other threads may want\n"
    "# to start theirs: a call that waits for another one started later (a\n"
    "# rendezvous of threads) is not held up by it.\n"
    "_SLICE_MS = 20\n"
    "\n"
    "\n"
    "def _start(calls):\n"
    "    return _call_tool(\"servers._start\", calls=calls)\n"
    "\n"
    "\n"
    "def _collect(tickets):\n"
    "    \"\"\"{ticket: outcome} once every ticket is done.\"\"\"\n"
    "    import threading\n"
    "    out = {}\n"
    "    pending = list(tickets)\n"
    "    while pending:\n"
    "        alone = threading.active_count() <= 1\n"
    "        r = _call_tool(\"servers._wait\", tickets=pending, slice_ms=0 if alone else "
    "_SLICE_MS)\n"
    "        for d in r[\"done\"]:\n"
    "            out[d[\"ticket\"]] = d[\"outcome\"]\n"
    "        pending = [t for t in pending if t not in out]\n"
    "    return out\n"
    "\n"
    "\n"
    "def _send(args, names):\n"
    "    return {names.get(k, k): v for k, v in args.items() if v is not None}\n"
    "\n"
    "\n"
    "def _call(tool, args, names, structured):\n"
    "    import threading\n"
    "    sent = _send(args, names)\n"
    "    if threading.active_count() > 1:\n"
    "        # Other threads may call too: in flight at once on the host.\n"
    "        s = _start([[tool, sent]])[0]\n"
    "        if \"ticket\" not in s:\n"
    "            return _outcome(s, tool, structured)\n"
    "        return _outcome(_collect([s[\"ticket\"]])[s[\"ticket\"]], tool, structured)\n"
    "    try:\n"
    "        r = _call_tool(tool, **sent)\n"
    "    except RuntimeError as e:\n"
    "        _raise(e, tool)\n"
    "    return _result(r, structured)\n"
    "\n"
    "\n"
    "_batches = {}\n"
    "\n"
    "\n"
    "def _flush(loop):\n"
    "    \"\"\"Starts the calls the loop's coroutines asked for in this turn of the\n"
    "    loop, at once, and hands each its outcome when it comes.\"\"\"\n"
    "    batch = _batches.pop(loop, [])\n"
    "    if not batch:\n"
    "        return\n"
    "\n"
    "    def work():\n"
    "        starts = _start([[tool, sent] for tool, sent, _, _ in batch])\n"
    "        tickets = [s[\"ticket\"] for s in starts if \"ticket\" in s]\n"
    "        done = _collect(tickets) if tickets else {}\n"
    "        return [done[s[\"ticket\"]] if \"ticket\" in s else s for s in starts]\n"
    "\n"
    "    def deliver(f):\n"
    "        try:\n"
    "            outs = f.result()\n"
    "        except BaseException as e:  # noqa: BLE001 - every waiting call gets it\n"
    "            for _, _, _, fut in batch:\n"
    "                if not fut.done():\n"
    "                    fut.set_exception(e)\n"
    "            return\n"
    "        for (tool, _, structured, fut), o in zip(batch, outs):\n"
    "            if fut.done():\n"
    "                continue\n"
    "            try:\n"
    "                fut.set_result(_outcome(o, tool, structured))\n"
    "            except BaseException as e:  # noqa: BLE001\n"
    "                fut.set_exception(e)\n"
    "\n"
    "    loop.run_in_executor(None, work).add_done_callback(deliver)\n"
    "\n"
    "\n"
    "async def _acall(tool, args, names, structured):\n"
    "    import asyncio\n"
    "    loop = asyncio.get_running_loop()\n"
    "    fut = loop.create_future()\n"
    "    batch = _batches.get(loop)\n"
    "    if batch is None:\n"
    "        # Flushed once the coroutines that are ready have run: a gather's\n"
    "        # calls all go in one batch.\n"
    "        batch = _batches[loop] = []\n"
    "        loop.call_soon(_flush, loop)\n"
    "    batch.append((tool, _send(args, names), structured, fut))\n"
    "    return await fut\n"
    "\n"
    "\n"
    "def _words(text):\n"
    "    text = text.lower()\n"
    "    for c in \"_-.\":\n"
    "        text = text.replace(c, \" \")\n"
    "    return text.split()\n"
    "\n"
    "\n"
    "def search(words, limit=20):\n"
    "    \"\"\"The tools whose names or descriptions have the most of these words, as\n"
    "    'server.tool: first line of its description' (best first). A tool's own\n"
    "    name (git_log, or server.git_log) finds it first.\"\"\"\n"
    "    if isinstance(words, str):\n"
    "        words = [words]\n"
    "    whole = \" \".join(w for w in words if w).strip().lower()\n"
    "    # Words split as the names are: git_log is the words git and log.\n"
    "    words = [w for x in words if x for w in _words(x)]\n"
    "    scored = []\n"
    "    for module, ident, name, desc in _TOOLS:\n"
    "        names = {ident.lower(), name.lower(), f\"{module}.{ident}\".lower(),\n"
    "                 f\"{module}.{name}\".lower()}\n"
    "        parts = _words(ident) + _words(name)\n"
    "        text = f\"{module} {ident} {name} {desc}\".lower().replace(\"_\", \" \")\n"
    "        # A word that is a whole word of the name counts most, a part of\n"
    "        # one less (log in changelog), the description least; an exact\n"
    "        # name first, then fewer other words in the name.\n"
    "        score = sum(4 if w in parts else 2 if w in ident.lower() else 1\n"
    "                    for w in words if w in text)\n"
    "        exact = whole in names or \"_\".join(words) in names\n"
    "        if exact:\n"
    "            score += 1000\n"
    "        if score or not words:\n"
    "            first = desc.split(\"\\n\")[0]\n"
    "            scored.append((-score, len(parts), f\"{module}.{ident}\", first))\n"
    "    scored.sort()\n"
    "    return [f\"{n}: {d}\" if d else n for _, _, n, d in scored[:limit]]\n"
    "\n"
    "\n"
    "def __getattr__(name):\n"
    "    if name in _MODULES:\n"
    "        return _importlib.import_module(f\"{__name__}.{name}\")\n"
    "    raise AttributeError(f\"module 'servers' has no attribute {name!r} (the servers: \"\n"
    "                         f\"{', '.join(_MODULES) or 'none'})\")\n"
    "\n"
    "\n"
    "def __dir__():\n"
    "    return sorted(set(globals()) | set(_MODULES))\n";

/* A JSON value as a Python literal, when it is a scalar: strings as JSON
 * writes them (jansson escapes controls as \\uXXXX, which Python reads the
 * same, and does not escape '/'), numbers as they are. */
static int py_literal(dynbuf *b, const json_t *v)
{
        if (json_is_true(v))
                return dynbuf_appendf(b, "True");
        if (json_is_false(v))
                return dynbuf_appendf(b, "False");
        if (json_is_null(v))
                return dynbuf_appendf(b, "None");
        if (json_is_string(v) || json_is_number(v)) {
                _cleanup_free_ char *s = json_dumps(v, JSON_ENCODE_ANY);
                if (!s)
                        return -ENOMEM;
                /* A real written as "1e+300" or "inf" stays valid Python;
                 * jansson writes no NaN. */
                return dynbuf_appendf(b, "%s", s);
        }
        return dynbuf_appendf(b, "None");
}

static bool scalar(const json_t *v)
{
        return json_is_string(v) || json_is_number(v) || json_is_boolean(v) || json_is_null(v);
}

/* Text from a server inside a triple-quoted docstring: backslashes and
 * quotes escaped, control characters other than newline dropped, so that
 * the string cannot end early; indented by indent. */
static int py_doc_text(dynbuf *b, const char *s, const char *indent)
{
        int r = 0;
        for (const char *p = s; r >= 0 && p && *p; p++) {
                unsigned char c = (unsigned char)*p;
                if (c == '\\' || c == '"')
                        r = dynbuf_appendf(b, "\\%c", c);
                else if (c == '\n')
                        r = dynbuf_appendf(b, "\n%s", indent);
                else if (c < 0x20 || c == 0x7f)
                        r = dynbuf_append(b, " ", 1);
                else
                        r = dynbuf_append(b, p, 1);
        }
        return r;
}

/* The Python type of a schema (at most SCHEMA_DEPTH deep). Object schemas
 * with properties become TypedDicts, defined before the function in
 * defs, named prefix (then prefix_KEY for the nested ones). */
static int py_type(dynbuf *b, dynbuf *defs, const json_t *s, const char *prefix, int depth);

static int py_typed_dict(dynbuf *defs, const json_t *s, const char *name, int depth)
{
        dynbuf d;
        dynbuf_init(&d, MODULE_MAX);
        /* The name is an identifier made here: it needs no escaping. */
        int r = dynbuf_appendf(&d, "%s = TypedDict(\"%s\", {", name, name);
        const json_t *props = json_object_get(s, "properties");
        const json_t *req = json_object_get(s, "required");
        const char *key;
        const json_t *p;
        bool first = true;
        json_object_foreach ((json_t *)props, key, p) {
                bool required = false;
                size_t i;
                const json_t *x;
                json_array_foreach ((json_t *)req, i, x) {
                        required |= json_is_string(x) && strcmp(json_string_value(x), key) == 0;
                }
                _cleanup_json_ json_t *k = json_string(key);
                if (r >= 0)
                        r = dynbuf_appendf(&d, "%s", first ? "" : ", ");
                first = false;
                if (r >= 0)
                        r = k ? py_literal(&d, k) : -ENOMEM;
                if (r >= 0)
                        r = dynbuf_appendf(&d, ": %s", required ? "Required[" : "");
                char sub[256];
                char kid[128];
                mcp_identifier(key, kid, sizeof(kid));
                snprintf(sub, sizeof(sub), "%s_%s", name, kid);
                if (r >= 0)
                        r = py_type(&d, defs, p, sub, depth + 1);
                if (r >= 0 && required)
                        r = dynbuf_appendf(&d, "]");
        }
        if (r >= 0)
                r = dynbuf_appendf(&d, "}, total=False)\n");
        if (r >= 0)
                r = dynbuf_append(defs, d.data, d.len);
        dynbuf_free(&d);
        return r;
}

static int py_simple(dynbuf *b, dynbuf *defs, const json_t *s, const char *t, const char *prefix,
                     int depth)
{
        if (strcmp(t, "string") == 0)
                return dynbuf_appendf(b, "str");
        if (strcmp(t, "integer") == 0)
                return dynbuf_appendf(b, "int");
        if (strcmp(t, "number") == 0)
                return dynbuf_appendf(b, "float");
        if (strcmp(t, "boolean") == 0)
                return dynbuf_appendf(b, "bool");
        if (strcmp(t, "null") == 0)
                return dynbuf_appendf(b, "None");
        if (strcmp(t, "array") == 0) {
                const json_t *items = json_object_get(s, "items");
                if (!json_is_object(items))
                        return dynbuf_appendf(b, "list");
                int r = dynbuf_appendf(b, "list[");
                if (r >= 0)
                        r = py_type(b, defs, items, prefix, depth + 1);
                return r >= 0 ? dynbuf_appendf(b, "]") : r;
        }
        if (strcmp(t, "object") == 0) {
                const json_t *props = json_object_get(s, "properties");
                if (json_is_object(props) && json_object_size(props) > 0 && depth < SCHEMA_DEPTH) {
                        int r = py_typed_dict(defs, s, prefix, depth);
                        return r >= 0 ? dynbuf_appendf(b, "%s", prefix) : r;
                }
                return dynbuf_appendf(b, "dict");
        }
        return dynbuf_appendf(b, "Any");
}

static int py_type(dynbuf *b, dynbuf *defs, const json_t *s, const char *prefix, int depth)
{
        if (!json_is_object(s) || depth > SCHEMA_DEPTH)
                return dynbuf_appendf(b, "Any");
        const json_t *e = json_object_get(s, "enum");
        if (!json_is_array(e) && json_object_get(s, "const")) {
                const json_t *c = json_object_get(s, "const");
                if (scalar(c)) {
                        int r = dynbuf_appendf(b, "Literal[");
                        if (r >= 0)
                                r = py_literal(b, c);
                        return r >= 0 ? dynbuf_appendf(b, "]") : r;
                }
        }
        if (json_is_array(e) && json_array_size(e) > 0 && json_array_size(e) <= 64) {
                size_t i;
                const json_t *v;
                bool ok = true;
                json_array_foreach ((json_t *)e, i, v) {
                        ok &= scalar(v);
                }
                if (ok) {
                        int r = dynbuf_appendf(b, "Literal[");
                        json_array_foreach ((json_t *)e, i, v) {
                                if (r >= 0 && i)
                                        r = dynbuf_appendf(b, ", ");
                                if (r >= 0)
                                        r = py_literal(b, v);
                        }
                        return r >= 0 ? dynbuf_appendf(b, "]") : r;
                }
        }
        const json_t *t = json_object_get(s, "type");
        if (json_is_string(t))
                return py_simple(b, defs, s, json_string_value(t), prefix, depth);
        const json_t *alts = json_is_array(t) ? t : NULL;
        const char *comb = NULL;
        if (!alts && json_is_array(json_object_get(s, "anyOf")))
                alts = json_object_get(s, "anyOf"), comb = "anyOf";
        if (!alts && json_is_array(json_object_get(s, "oneOf")))
                alts = json_object_get(s, "oneOf"), comb = "oneOf";
        if (!alts || json_array_size(alts) == 0 || json_array_size(alts) > 16)
                return dynbuf_appendf(b, "Any");
        int r = 0;
        size_t i;
        const json_t *v;
        json_array_foreach ((json_t *)alts, i, v) {
                char sub[256];
                snprintf(sub, sizeof(sub), "%s_%zu", prefix, i + 1);
                if (r >= 0 && i)
                        r = dynbuf_appendf(b, " | ");
                if (r >= 0)
                        r = comb ? py_type(b, defs, v, sub, depth + 1)
                                 : (json_is_string(v)
                                        ? py_simple(b, defs, s, json_string_value(v), prefix, depth)
                                        : dynbuf_appendf(b, "Any"));
        }
        return r;
}

/* "Create_issue_Labels": a type name from a tool's and a key's identifiers. */
static void type_name(char *buf, size_t size, const char *ident, const char *what)
{
        snprintf(buf, size, "_%s_%s", ident, what);
}

/* The parameters of the tool t's stub into sig (", name: type = default"
 * each), the types they need defined into defs: required parameters first,
 * then the optional ones, each group in the schema's order; all
 * keyword-only, so that a call that lacks or misnames one is Python's own
 * TypeError. */
static int write_signature(dynbuf *sig, dynbuf *defs, const mcp_tool *t)
{
        const json_t *props = json_object_get(t->input_schema, "properties");
        const json_t *req = json_object_get(t->input_schema, "required");
        int r = 0;
        for (int pass = 0; pass < 2 && r >= 0; pass++) {
                const char *key;
                const json_t *p;
                json_object_foreach ((json_t *)props, key, p) {
                        bool required = false;
                        size_t i;
                        const json_t *x;
                        json_array_foreach ((json_t *)req, i, x) {
                                required |=
                                    json_is_string(x) && strcmp(json_string_value(x), key) == 0;
                        }
                        if (required != (pass == 0))
                                continue;
                        const char *py = json_string_value(json_object_get(t->params_map, key));
                        if (!py)
                                continue;
                        char tn[256];
                        type_name(tn, sizeof(tn), t->ident, py);
                        if (r >= 0)
                                r = dynbuf_appendf(sig, ", %s: ", py);
                        if (r >= 0)
                                r = py_type(sig, defs, p, tn, 0);
                        if (r >= 0 && !required) {
                                const json_t *d = json_object_get(p, "default");
                                r = dynbuf_appendf(sig, " | None = ");
                                if (r >= 0)
                                        r = d && scalar(d) ? py_literal(sig, d)
                                                           : dynbuf_appendf(sig, "None");
                        }
                }
        }
        return r;
}

static int write_tool(dynbuf *b, const mcp_tool *t, const char *async_name)
{
        dynbuf defs, sig;
        dynbuf_init(&defs, MODULE_MAX);
        dynbuf_init(&sig, MODULE_MAX);
        const json_t *props = json_object_get(t->input_schema, "properties");
        int r = write_signature(&sig, &defs, t);
        char rt[256];
        type_name(rt, sizeof(rt), t->ident, "Result");
        dynbuf ret;
        dynbuf_init(&ret, MODULE_MAX);
        if (r >= 0)
                r = t->output_schema ? py_type(&ret, &defs, t->output_schema, rt, 0)
                                     : dynbuf_appendf(&ret, "str");
        if (r >= 0 && defs.len)
                r = dynbuf_append(b, defs.data, defs.len);
        /* The names map: Python parameter -> argument upstream, only where
         * they differ. */
        _cleanup_free_ char *names = NULL;
        {
                json_t *m = json_object();
                const char *k;
                json_t *v;
                json_object_foreach (t->params_map, k, v) {
                        if (strcmp(k, json_string_value(v)) != 0)
                                json_object_set_new(m, json_string_value(v), json_string(k));
                }
                names = m ? json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
                json_decref(m);
                if (!names && r >= 0)
                        r = -ENOMEM;
        }
        for (int as = 0; as < 2 && r >= 0; as++) {
                if (as && !async_name)
                        break;
                r = dynbuf_appendf(b, "\n\n%sdef %s(%s%s) -> %s:\n    \"\"\"", as ? "async " : "",
                                   as ? async_name : t->ident, sig.len ? "*" : "",
                                   sig.len ? sig.data : "", ret.data ? ret.data : "str");
                if (r >= 0 && as)
                        r = dynbuf_appendf(
                            b, "asyncio variant of %s(): the same call, awaitable.\n\n    ",
                            t->ident);
                if (r >= 0)
                        r = py_doc_text(b, *t->description ? t->description : "(no description)",
                                        "    ");
                if (r >= 0 && json_object_size(props)) {
                        r = dynbuf_appendf(b, "\n\n    Args:");
                        const char *key;
                        const json_t *p;
                        json_object_foreach ((json_t *)props, key, p) {
                                const char *py =
                                    json_string_value(json_object_get(t->params_map, key));
                                const char *d =
                                    json_string_value(json_object_get(p, "description"));
                                if (!py || r < 0)
                                        continue;
                                r = dynbuf_appendf(b, "\n        %s: ", py);
                                if (r >= 0)
                                        r = py_doc_text(b, d ? d : "", "            ");
                                if (r >= 0 && strcmp(py, key) != 0) {
                                        r = dynbuf_appendf(b, " (upstream: ");
                                        if (r >= 0)
                                                r = py_doc_text(b, key, "");
                                        if (r >= 0)
                                                r = dynbuf_appendf(b, ")");
                                }
                        }
                }
                if (r >= 0)
                        r = dynbuf_appendf(b, "\n\n    MCP tool ");
                if (r >= 0)
                        r = py_doc_text(b, t->name, "");
                if (r >= 0)
                        r = dynbuf_appendf(b, " of server ");
                if (r >= 0)
                        r = py_doc_text(b, t->server, "");
                if (r >= 0)
                        r = dynbuf_appendf(b,
                                           "%s.\n    \"\"\"\n    return %s(\"%s\", "
                                           "locals(), %s, %s)\n",
                                           t->needs_approval ? " (needs approval)" : "",
                                           as ? "await _acall" : "_call", t->host_name, names,
                                           t->output_schema ? "True" : "False");
        }
        dynbuf_free(&defs);
        dynbuf_free(&sig);
        dynbuf_free(&ret);
        return r;
}

static int write_file(int dir_fd, const char *name, const char *data, size_t len,
                      airlock_error *err)
{
        _cleanup_close_ int fd =
            openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return al_error(err, -errno, NULL, "stubs: cannot create %s: %m", name);
        int r = al_write_full(fd, data, len);
        if (r < 0)
                return al_error(err, r, NULL, "stubs: cannot write %s: %s", name, strerror(-r));
        return 0;
}

int mcp_stubs_write(int dir_fd, const mcp_tool *tools, size_t n, const char *const *modules,
                    const char *const *servers, size_t n_servers, airlock_error *err)
{
        if (mkdirat(dir_fd, "servers", 0755) < 0)
                return al_error(err, -errno, NULL, "stubs: cannot make the folder: %m");
        _cleanup_close_ int pkg =
            openat(dir_fd, "servers", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (pkg < 0)
                return al_error(err, -errno, NULL, "stubs: cannot open the folder: %m");
        int r = write_file(pkg, "__init__.py", init_py, sizeof(init_py) - 1, err);
        if (r < 0)
                return r;
        /* The index: module names and every tool's names and description,
         * for search(). */
        dynbuf idx;
        dynbuf_init(&idx, MODULE_MAX);
        r = dynbuf_appendf(&idx, "# The index of the servers' tools (written by airlock).\n"
                                 "MODULES = (");
        for (size_t i = 0; r >= 0 && i < n_servers; i++)
                r = dynbuf_appendf(&idx, "\"%s\", ", modules[i]);
        if (r >= 0)
                r = dynbuf_appendf(&idx, ")\nTOOLS = (\n");
        for (size_t i = 0; r >= 0 && i < n; i++) {
                json_t *nm = json_string(tools[i].name);
                /* Cut at a character's start: a cut inside one would make
                 * the index invalid UTF-8, and Python refuses such source. */
                size_t dl = strlen(tools[i].description);
                if (dl > SEARCH_DESC) {
                        dl = SEARCH_DESC;
                        while (dl > 0 && ((unsigned char)tools[i].description[dl] & 0xC0) == 0x80)
                                dl--;
                }
                json_t *ds = json_stringn(tools[i].description, dl);
                r = dynbuf_appendf(&idx, "    (\"%s\", \"%s\", ", tools[i].module, tools[i].ident);
                if (r >= 0)
                        r = nm ? py_literal(&idx, nm) : -ENOMEM;
                if (r >= 0)
                        r = dynbuf_appendf(&idx, ", ");
                if (r >= 0)
                        r = ds ? py_literal(&idx, ds) : -ENOMEM;
                if (r >= 0)
                        r = dynbuf_appendf(&idx, "),\n");
                json_decref(nm);
                json_decref(ds);
        }
        if (r >= 0)
                r = dynbuf_appendf(&idx, ")\n");
        if (r >= 0)
                r = write_file(pkg, "_index.py", idx.data, idx.len, err);
        else
                r = al_error(err, r, NULL, "stubs: the index: %s", strerror(-r));
        dynbuf_free(&idx);
        if (r < 0)
                return r;
        for (size_t s = 0; s < n_servers; s++) {
                dynbuf b;
                dynbuf_init(&b, MODULE_MAX);
                size_t count = 0;
                for (size_t i = 0; i < n; i++)
                        count += tools[i].server_index == s;
                r = dynbuf_appendf(&b, "\"\"\"The tools of the MCP server ");
                if (r >= 0)
                        r = py_doc_text(&b, servers[s], "");
                r = r >= 0 ? dynbuf_appendf(&b,
                                            " (%zu), as Python functions.\n\nWritten by airlock "
                                            "from the server's tool list when the sandbox was "
                                            "built.\n\"\"\"\n"
                                            "from typing import Any, Literal, Required, "
                                            "TypedDict\n\n"
                                            "from servers import _call, _acall\n",
                                            count)
                           : r;
                dynbuf all;
                dynbuf_init(&all, MODULE_MAX);
                /* The async names: TOOL_async, or TOOL_async_2... when a
                 * tool already has that name. */
                for (size_t i = 0; r >= 0 && i < n; i++) {
                        if (tools[i].server_index != s)
                                continue;
                        char an[160];
                        for (unsigned k = 1;; k++) {
                                if (k == 1)
                                        snprintf(an, sizeof(an), "%s_async", tools[i].ident);
                                else
                                        snprintf(an, sizeof(an), "%s_async_%u", tools[i].ident, k);
                                bool taken = false;
                                for (size_t j = 0; j < n; j++)
                                        taken |= tools[j].server_index == s &&
                                                 strcmp(tools[j].ident, an) == 0;
                                if (!taken)
                                        break;
                        }
                        r = write_tool(&b, &tools[i], an);
                        if (r >= 0)
                                r = dynbuf_appendf(&all, "\"%s\", \"%s\", ", tools[i].ident, an);
                }
                if (r >= 0)
                        r = dynbuf_appendf(&b, "\n\n__all__ = [%s]\n", all.data ? all.data : "");
                dynbuf_free(&all);
                char file[MCP_NAME_MAX + 16];
                snprintf(file, sizeof(file), "%s.py", modules[s]);
                if (r >= 0) {
                        r = write_file(pkg, file, b.data, b.len, err);
                } else {
                        r = al_error(err, r, NULL, "stubs: server '%s': %s", servers[s],
                                     strerror(-r));
                }
                dynbuf_free(&b);
                if (r < 0)
                        return r;
        }
        return 0;
}
