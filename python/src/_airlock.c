/* airlock._airlock: the CPython extension over libairlock (include/airlock.h).
 *
 * It is deliberately thin: three types (Config, Cache, Session) that own the
 * library's objects, a result converter, the exceptions and the trampoline
 * through which the library calls a Python host tool. Policy (mounts
 * shorthand, normalisation, schemas, asyncio) lives in the pure-Python
 * layer, python/airlock/__init__.py.
 *
 * It follows CPython's conventions for extensions (Modules/xxlimited.c):
 * multi-phase initialisation, heap types, and the exceptions and types in
 * the module's state rather than in C globals, so that a module object can
 * be created more than once in one interpreter (importlib). The one piece of
 * process-wide state is the library's own: the template program, which
 * airlock_set_template_program sets once for the process.
 *
 * Interpreters: the main interpreter only. The trampolines take the GIL with
 * PyGILState_Ensure, which always enters the main interpreter: a tool or an
 * approver made in a subinterpreter would run its objects under another
 * interpreter's state. So module_exec refuses any other interpreter with
 * ImportError (and, from Python 3.12, the slot says so to the import system)
 * until the trampolines keep the interpreter their callable came from.
 *
 * Threads: every run releases the GIL for its whole length, and so does
 * closing a cache (it waits for the template processes to end); the
 * library's cache is thread-safe and its configuration is shared read-only
 * once built (the Python layer builds a new Config for every change and
 * never changes one that a run may hold). A tool callback comes on the
 * running thread without the GIL and takes it for the call. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "airlock.h"

typedef struct {
        PyObject *Error, *InputError, *SandboxError, *RunError;
        PyTypeObject *ConfigType, *CacheType, *SessionType;
} module_state;

static struct PyModuleDef module_def;

static module_state *state_of_type(PyTypeObject *t)
{
        PyObject *m = PyType_GetModuleByDef(t, &module_def);
        return m ? PyModule_GetState(m) : NULL;
}

/* The template program (airlock_set_template_program): Python is not
 * linked with libairlock, so a template cannot be a copy of it. The airlock
 * command of the build this module was built against is: setup.py names it
 * as AIRLOCK_TEMPLATE_PROGRAM, and the environment variable of that name
 * overrides it. Set by the first module object of the process (the library
 * takes it once); a failure is reported by the first Cache. */
#ifndef AIRLOCK_TEMPLATE_PROGRAM
#define AIRLOCK_TEMPLATE_PROGRAM "/usr/local/bin/airlock"
#endif
static pthread_once_t template_once = PTHREAD_ONCE_INIT;
static int template_r;
static airlock_error template_err;
static const char *template_prog;

static void template_set(void)
{
        const char *prog = getenv("AIRLOCK_TEMPLATE_PROGRAM");
        template_prog = prog && *prog ? prog : AIRLOCK_TEMPLATE_PROGRAM;
        template_r = airlock_set_template_program(template_prog, &template_err);
        if (template_r < 0) {
                /* Say what to do about it, in the message the first Cache raises. */
                char m[AIRLOCK_MESSAGE_MAX];
                snprintf(m, sizeof(m),
                         "%.700s (the airlock command of the same build runs the sandbox's "
                         "template; set AIRLOCK_TEMPLATE_PROGRAM)",
                         template_err.message);
                memcpy(template_err.message, m, sizeof(m));
                template_err.kind = AIRLOCK_ERROR_SANDBOX;
        }
}

/* Raises the exception of an error record: InputError, SandboxError or
 * RunError by its kind, with errno, kind and path as attributes. */
static PyObject *raise_error(module_state *st, int r, const airlock_error *e)
{
        if (!st)
                return NULL;
        PyObject *cls = e->kind == AIRLOCK_ERROR_SANDBOX ? st->SandboxError
                        : e->kind == AIRLOCK_ERROR_RUN   ? st->RunError
                                                         : st->InputError;
        const char *msg = e->message[0] ? e->message : strerror(r < 0 ? -r : r);
        PyObject *exc = PyObject_CallFunction(cls, "s", msg);
        if (!exc)
                return NULL;
        PyObject *en = PyLong_FromLong(r < 0 ? -r : r);
        PyObject *kind = PyUnicode_FromString(e->kind == AIRLOCK_ERROR_SANDBOX ? "sandbox"
                                              : e->kind == AIRLOCK_ERROR_RUN   ? "run"
                                                                               : "input");
        PyObject *path = e->path[0] ? PyUnicode_DecodeFSDefault(e->path) : Py_NewRef(Py_None);
        if (en && kind && path) {
                PyObject_SetAttrString(exc, "errno", en);
                PyObject_SetAttrString(exc, "kind", kind);
                PyObject_SetAttrString(exc, "path", path);
                PyErr_SetObject(cls, exc);
        }
        Py_XDECREF(en);
        Py_XDECREF(kind);
        Py_XDECREF(path);
        Py_DECREF(exc);
        return NULL;
}

/* raise_error for a method of one of the module's objects. */
#define RAISE(self, r, e) raise_error(state_of_type(Py_TYPE(self)), (r), (e))

/* ---- host tools ---------------------------------------------------------- */

/* Calls a Python tool: userdata is a callable taking the arguments' JSON
 * text and returning the result's JSON text (python/airlock/_tools.py).
 * Runs on the library's run thread without the GIL, so it takes it. A
 * raised exception (any BaseException, so that a KeyboardInterrupt in a
 * tool cannot unwind through C) becomes the tool's failure: the message
 * "Type: text" and the type name on its own. */
static int tool_trampoline(void *userdata, const char *args_json, char **ret_result,
                           char **ret_error, char **ret_error_type)
{
        PyGILState_STATE g = PyGILState_Ensure();
        int r = 0;
        PyObject *out = PyObject_CallFunction((PyObject *)userdata, "s", args_json);
        if (out && PyUnicode_Check(out)) {
                Py_ssize_t n;
                const char *s = PyUnicode_AsUTF8AndSize(out, &n);
                if (s && (*ret_result = malloc((size_t)n + 1))) {
                        memcpy(*ret_result, s, (size_t)n + 1);
                } else {
                        r = -ENOMEM;
                        *ret_error = strdup("the tool's result could not be encoded");
                }
        } else if (out) {
                r = -EINVAL;
                *ret_error = strdup("the tool's wrapper returned no JSON text");
        } else {
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                PyErr_NormalizeException(&et, &ev, &tb);
                PyObject *tname =
                    et && PyType_Check(et) ? PyType_GetName((PyTypeObject *)et) : NULL;
                PyErr_Clear();
                PyObject *text = ev ? PyObject_Str(ev) : NULL;
                PyErr_Clear();
                const char *tn = tname ? PyUnicode_AsUTF8(tname) : NULL;
                PyErr_Clear();
                const char *tx = text ? PyUnicode_AsUTF8(text) : NULL;
                PyErr_Clear();
                tn = tn ? tn : "Exception";
                char *msg = NULL;
                int n = tx && *tx ? asprintf(&msg, "%s: %s", tn, tx) : asprintf(&msg, "%s", tn);
                *ret_error = n < 0 ? NULL : msg;
                *ret_error_type = strdup(tn);
                Py_XDECREF(tname);
                Py_XDECREF(text);
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                r = -EIO;
        }
        Py_XDECREF(out);
        PyGILState_Release(g);
        return r;
}

/* ---- Config -------------------------------------------------------------- */

typedef struct {
        PyObject_HEAD airlock_config *cfg;
        PyObject *tools; /* list: the callables the library's tools point to */
} ConfigObject;

static int config_init(ConfigObject *self, PyObject *args, PyObject *kw)
{
        if (!PyArg_ParseTuple(args, ":Config"))
                return -1;
        if (self->cfg)
                return 0;
        airlock_error e = {0};
        int r = airlock_config_new(&self->cfg, &e);
        if (r < 0) {
                RAISE(self, r, &e);
                return -1;
        }
        self->tools = PyList_New(0);
        return self->tools ? 0 : -1;
}

static int config_traverse(ConfigObject *self, visitproc visit, void *arg)
{
        Py_VISIT(Py_TYPE(self));
        Py_VISIT(self->tools);
        return 0;
}

static int config_clear(ConfigObject *self)
{
        Py_CLEAR(self->tools);
        return 0;
}

static void config_dealloc(ConfigObject *self)
{
        PyTypeObject *tp = Py_TYPE(self);
        PyObject_GC_UnTrack(self);
        airlock_config_free(self->cfg);
        config_clear(self);
        tp->tp_free((PyObject *)self);
        Py_DECREF(tp);
}

/* Calls the library and returns None, or raises its error; st is the
 * module's state, for the exception classes. */
#define STATE_CALL(st, expr)                                                                       \
        do {                                                                                       \
                airlock_error e = {0};                                                             \
                int r_ = (expr);                                                                   \
                if (r_ < 0)                                                                        \
                        return raise_error((st), r_, &e);                                          \
                Py_RETURN_NONE;                                                                    \
        } while (0)
#define CFG_CALL(expr) STATE_CALL(state_of_type(Py_TYPE(self)), expr)

static PyObject *config_set_workspace(ConfigObject *self, PyObject *args)
{
        const char *dir;
        if (!PyArg_ParseTuple(args, "s:set_workspace", &dir))
                return NULL;
        CFG_CALL(airlock_config_set_workspace(self->cfg, dir, &e));
}

static PyObject *config_add_mount(ConfigObject *self, PyObject *args)
{
        const char *host, *path = NULL;
        if (!PyArg_ParseTuple(args, "s|z:add_mount", &host, &path))
                return NULL;
        CFG_CALL(airlock_config_add_mount(self->cfg, host, path, &e));
}

static PyObject *config_allow(ConfigObject *self, PyObject *args)
{
        const char *target, *methods = NULL;
        if (!PyArg_ParseTuple(args, "s|z:allow", &target, &methods))
                return NULL;
        CFG_CALL(airlock_config_allow(self->cfg, target, methods, &e));
}

static PyObject *config_load_tools(ConfigObject *self, PyObject *args)
{
        const char *file;
        if (!PyArg_ParseTuple(args, "s:load_tools", &file))
                return NULL;
        CFG_CALL(airlock_config_load_tools(self->cfg, file, &e));
}

static PyObject *config_add_servers_file(ConfigObject *self, PyObject *args)
{
        PyObject *path;
        if (!PyArg_ParseTuple(args, "O&:add_servers_file", PyUnicode_FSConverter, &path))
                return NULL;
        airlock_error e = {0};
        int r = airlock_config_add_servers_file(self->cfg, PyBytes_AS_STRING(path), &e);
        Py_DECREF(path);
        if (r < 0)
                return RAISE(self, r, &e);
        Py_RETURN_NONE;
}

static PyObject *config_add_servers_json(ConfigObject *self, PyObject *args)
{
        const char *text;
        if (!PyArg_ParseTuple(args, "s:add_servers_json", &text))
                return NULL;
        CFG_CALL(airlock_config_add_servers_json(self->cfg, text, &e));
}

/* The approver of upstream tool calls: userdata is a callable taking the
 * tool's name ("SERVER.TOOL") and its arguments' JSON text. Runs on the
 * run's thread without the GIL, so it takes it. Anything but a true
 * answer refuses the call, a raised exception too (it is printed as
 * unraisable: a KeyboardInterrupt cannot unwind through C). */
static bool approver_trampoline(void *userdata, const char *tool, const char *args_json)
{
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *out = PyObject_CallFunction((PyObject *)userdata, "ss", tool, args_json);
        int yes = out ? PyObject_IsTrue(out) : 0;
        if (yes < 0 || !out)
                PyErr_WriteUnraisable((PyObject *)userdata);
        Py_XDECREF(out);
        PyGILState_Release(g);
        return yes == 1;
}

/* set_tool_approver(callable): kept alive by the Config, like a tool. */
static PyObject *config_set_tool_approver(ConfigObject *self, PyObject *args)
{
        PyObject *fn;
        if (!PyArg_ParseTuple(args, "O:set_tool_approver", &fn))
                return NULL;
        if (!PyCallable_Check(fn)) {
                PyErr_SetString(PyExc_TypeError,
                                "set_tool_approver: the approver must be callable");
                return NULL;
        }
        if (PyList_Append(self->tools, fn) < 0)
                return NULL;
        airlock_config_set_tool_approver(self->cfg, approver_trampoline, fn);
        Py_RETURN_NONE;
}

/* add_tool(name, description, parameters_json, always, callable): the
 * callable is kept alive by the Config (and by the caller's registry, since
 * a cached sandbox's copy of the configuration points to it too). */
static PyObject *config_add_tool(ConfigObject *self, PyObject *args)
{
        const char *name, *desc, *params = NULL;
        int always;
        PyObject *fn;
        if (!PyArg_ParseTuple(args, "sszpO:add_tool", &name, &desc, &params, &always, &fn))
                return NULL;
        if (!PyCallable_Check(fn)) {
                PyErr_SetString(PyExc_TypeError, "add_tool: the tool must be callable");
                return NULL;
        }
        if (PyList_Append(self->tools, fn) < 0)
                return NULL;
        airlock_tool_def def = {
            .size = sizeof(airlock_tool_def),
            .name = name,
            .description = desc,
            .parameters_json = params,
            .approval = always ? AIRLOCK_APPROVAL_ALWAYS : AIRLOCK_APPROVAL_NEVER,
            .userdata = fn,
        };
        CFG_CALL(airlock_config_add_typed_tool(self->cfg, &def, tool_trampoline, &e));
}

static PyObject *config_remove_tool(ConfigObject *self, PyObject *args)
{
        const char *name;
        if (!PyArg_ParseTuple(args, "s:remove_tool", &name))
                return NULL;
        CFG_CALL(airlock_config_remove_tool(self->cfg, name, &e));
}

/* The message for a limit the package does not know: in the package's
 * terms (limits={...}), with every name it takes, so that a misspelt name
 * needs no look-up in the documentation. */
static void unknown_limit(const char *name, airlock_error *e)
{
        size_t n = (size_t)snprintf(e->message, sizeof(e->message),
                                    "unknown limit '%.64s' in limits=; the limits are", name);
        const airlock_limit_option *o;
        for (size_t i = 0; n < sizeof(e->message) && (o = airlock_limit_option_at(i)); i++)
                n += (size_t)snprintf(e->message + n, sizeof(e->message) - n, "%s '%s'",
                                      i ? "," : "", o->name);
}

/* set_limits({name: text}): every name as airlock_limit_option_at lists it,
 * all or nothing. */
static PyObject *config_set_limits(ConfigObject *self, PyObject *args)
{
        PyObject *d, *k, *v;
        if (!PyArg_ParseTuple(args, "O!:set_limits", &PyDict_Type, &d))
                return NULL;
        airlock_limits l;
        airlock_config_get_limits(self->cfg, &l);
        Py_ssize_t pos = 0;
        airlock_error e = {0};
        while (PyDict_Next(d, &pos, &k, &v)) {
                const char *name = PyUnicode_AsUTF8(k);
                const char *text = PyUnicode_AsUTF8(v);
                if (!name || !text)
                        return NULL;
                int r = airlock_limits_set_option(&l, name, text, &e);
                if (r == -ENOENT)
                        unknown_limit(name, &e);
                if (r < 0)
                        return RAISE(self, r, &e);
        }
        CFG_CALL(airlock_config_set_limits(self->cfg, &l, &e));
}

static PyObject *config_get_limits(ConfigObject *self, PyObject *noargs)
{
        airlock_limits l;
        airlock_config_get_limits(self->cfg, &l);
        PyObject *d = PyDict_New();
        const airlock_limit_option *o;
        for (size_t i = 0; d && (o = airlock_limit_option_at(i)); i++) {
                char buf[64];
                if (airlock_limits_format_option(&l, o->name, buf, sizeof(buf)) < 0)
                        continue;
                PyObject *v = PyUnicode_FromString(buf);
                if (!v || PyDict_SetItemString(d, o->name, v) < 0) {
                        Py_XDECREF(v);
                        Py_CLEAR(d);
                        break;
                }
                Py_DECREF(v);
        }
        return d;
}

static PyObject *config_add_preload(ConfigObject *self, PyObject *args)
{
        const char *m;
        if (!PyArg_ParseTuple(args, "s:add_preload", &m))
                return NULL;
        CFG_CALL(airlock_config_add_preload(self->cfg, m, &e));
}

static PyObject *config_add_python_path(ConfigObject *self, PyObject *args)
{
        const char *d;
        if (!PyArg_ParseTuple(args, "s:add_python_path", &d))
                return NULL;
        CFG_CALL(airlock_config_add_python_path(self->cfg, d, &e));
}

static PyObject *config_set_flags(ConfigObject *self, PyObject *args, PyObject *kw)
{
        static char *names[] = {"approval_always", "auto_figures", "input_writable", NULL};
        int always = 0, figures = 1, writable = 0;
        if (!PyArg_ParseTupleAndKeywords(args, kw, "|$ppp:set_flags", names, &always, &figures,
                                         &writable))
                return NULL;
        airlock_config_set_approval(self->cfg,
                                    always ? AIRLOCK_APPROVAL_ALWAYS : AIRLOCK_APPROVAL_NEVER);
        airlock_config_set_auto_figures(self->cfg, figures);
        airlock_config_set_input_writable(self->cfg, writable);
        Py_RETURN_NONE;
}

static PyObject *config_effective_approval(ConfigObject *self, PyObject *noargs)
{
        return PyUnicode_FromString(airlock_config_effective_approval(self->cfg) ==
                                            AIRLOCK_APPROVAL_ALWAYS
                                        ? "always_require"
                                        : "never_require");
}

static PyObject *take_text(char *s)
{
        PyObject *o = PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
        free(s);
        return o;
}

static PyObject *config_describe(ConfigObject *self, PyObject *noargs)
{
        char *d = NULL, *i = NULL;
        airlock_error e = {0};
        int r = airlock_describe(self->cfg, &d, &i, &e);
        if (r < 0)
                return RAISE(self, r, &e);
        PyObject *dd = take_text(d), *ii = take_text(i);
        if (!dd || !ii) {
                Py_XDECREF(dd);
                Py_XDECREF(ii);
                return NULL;
        }
        return Py_BuildValue("(NN)", dd, ii);
}

static PyObject *config_describe_json(ConfigObject *self, PyObject *noargs)
{
        airlock_error e = {0};
        char *s = airlock_describe_json(self->cfg, &e);
        if (!s)
                return RAISE(self, -ENOMEM, &e);
        return take_text(s);
}

static PyObject *config_to_json(ConfigObject *self, PyObject *noargs)
{
        airlock_error e = {0};
        char *s = airlock_config_to_json(self->cfg, &e);
        if (!s)
                return RAISE(self, -ENOMEM, &e);
        return take_text(s);
}

static PyMethodDef config_methods[] = {
    {"to_json", (PyCFunction)config_to_json, METH_NOARGS,
     PyDoc_STR("to_json() -> str: the configuration as the library normalised it "
               "(airlock_config_to_json).")},
    {"set_workspace", (PyCFunction)config_set_workspace, METH_VARARGS,
     PyDoc_STR("set_workspace(dir): stage the contents of dir under /input.")},
    {"add_mount", (PyCFunction)config_add_mount, METH_VARARGS,
     PyDoc_STR("add_mount(host, path=None): stage host at /input/path.")},
    {"allow", (PyCFunction)config_allow, METH_VARARGS,
     PyDoc_STR("allow(target, methods=None): allow outbound HTTP to target.")},
    {"load_tools", (PyCFunction)config_load_tools, METH_VARARGS,
     PyDoc_STR("load_tools(file): add the command tools of a JSON tools file.")},
    {"add_servers_file", (PyCFunction)config_add_servers_file, METH_VARARGS,
     PyDoc_STR("add_servers_file(path): the MCP servers of a servers file "
               "(airlock_config_add_servers_file).")},
    {"add_servers_json", (PyCFunction)config_add_servers_json, METH_VARARGS,
     PyDoc_STR("add_servers_json(text): the MCP servers of a servers file's JSON text "
               "(airlock_config_add_servers_json).")},
    {"set_tool_approver", (PyCFunction)config_set_tool_approver, METH_VARARGS,
     PyDoc_STR("set_tool_approver(fn): fn(tool, args_json) -> bool decides the upstream "
               "calls that need approval (airlock_config_set_tool_approver).")},
    {"add_tool", (PyCFunction)config_add_tool, METH_VARARGS,
     PyDoc_STR("add_tool(name, description, parameters_json, always, callable): a Python host "
               "tool; callable takes the arguments' JSON text and returns the result's.")},
    {"remove_tool", (PyCFunction)config_remove_tool, METH_VARARGS,
     PyDoc_STR("remove_tool(name): forget a host tool.")},
    {"set_limits", (PyCFunction)config_set_limits, METH_VARARGS,
     PyDoc_STR("set_limits({name: text}): set limits by option name, all or nothing.")},
    {"get_limits", (PyCFunction)config_get_limits, METH_NOARGS,
     PyDoc_STR("get_limits() -> {name: text}: every limit in its option's unit.")},
    {"add_preload", (PyCFunction)config_add_preload, METH_VARARGS,
     PyDoc_STR("add_preload(module): import module once, in the template.")},
    {"add_python_path", (PyCFunction)config_add_python_path, METH_VARARGS,
     PyDoc_STR("add_python_path(dir): make a host folder of packages importable, read-only.")},
    {"set_flags", (PyCFunction)(void (*)(void))config_set_flags, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("set_flags(*, approval_always=False, auto_figures=True, input_writable=False).")},
    {"effective_approval", (PyCFunction)config_effective_approval, METH_NOARGS,
     PyDoc_STR("effective_approval() -> 'always_require' | 'never_require'.")},
    {"describe", (PyCFunction)config_describe, METH_NOARGS,
     PyDoc_STR("describe() -> (description, instructions) from the configuration alone.")},
    {"describe_json", (PyCFunction)config_describe_json, METH_NOARGS,
     PyDoc_STR("describe_json() -> str: the tool's texts and schema as JSON.")},
    {NULL},
};

static PyType_Slot config_slots[] = {
    {Py_tp_doc,
     (void *)PyDoc_STR("A configuration of the C library (airlock_config); built once, then "
                       "shared read-only by runs.")},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, config_init},
    {Py_tp_dealloc, config_dealloc},
    {Py_tp_traverse, config_traverse},
    {Py_tp_clear, config_clear},
    {Py_tp_methods, config_methods},
    {0, NULL},
};

static PyType_Spec config_spec = {
    .name = "airlock._airlock.Config",
    .basicsize = sizeof(ConfigObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = config_slots,
};

/* ---- results ------------------------------------------------------------- */

static PyObject *bytes_or_empty(const void *p, size_t n)
{
        return PyBytes_FromStringAndSize(p ? p : "", (Py_ssize_t)(p ? n : 0));
}

/* The result as a dict of plain values; stdout and stderr stay bytes (the
 * Python layer decodes them). Frees the result. */
static PyObject *result_to_dict(airlock_result *res)
{
        PyObject *files = PyList_New((Py_ssize_t)res->n_files);
        PyObject *refused = PyList_New((Py_ssize_t)res->n_refused);
        PyObject *changes = PyList_New((Py_ssize_t)res->n_input_changes);
        PyObject *d = NULL;
        if (!files || !refused || !changes)
                goto out;
        for (size_t i = 0; i < res->n_files; i++) {
                const airlock_file *f = &res->files[i];
                PyObject *t = Py_BuildValue("(s s N)", f->path, f->media_type,
                                            bytes_or_empty(f->data, f->size));
                if (!t)
                        goto out;
                PyList_SET_ITEM(files, (Py_ssize_t)i, t);
        }
        for (size_t i = 0; i < res->n_refused; i++) {
                PyObject *t = Py_BuildValue("(s s)", res->refused[i].path, res->refused[i].reason);
                if (!t)
                        goto out;
                PyList_SET_ITEM(refused, (Py_ssize_t)i, t);
        }
        for (size_t i = 0; i < res->n_input_changes; i++) {
                const airlock_input_change *c = &res->input_changes[i];
                PyObject *t =
                    c->change == AIRLOCK_CHANGE_DELETED
                        ? Py_BuildValue("(s s O O)", c->path, airlock_change_name(c->change),
                                        Py_None, Py_None)
                        : Py_BuildValue("(s s s N)", c->path, airlock_change_name(c->change),
                                        c->media_type, bytes_or_empty(c->data, c->size));
                if (!t)
                        goto out;
                PyList_SET_ITEM(changes, (Py_ssize_t)i, t);
        }
        /* The library's own result JSON, from which the Python layer builds
         * to_dict(), usage and contents: one source, so the two never drift. */
        char *json_text = airlock_result_to_json(res);
        if (!json_text) {
                PyErr_NoMemory();
                goto out;
        }
        PyObject *json_obj = PyUnicode_FromString(json_text);
        free(json_text);
        if (!json_obj)
                goto out;
        d = Py_BuildValue("{s:O, s:s, s:i, s:N, s:O, s:N, s:O, s:O, s:O, s:O, s:z, s:d, s:s, s:N}",
                          "success", res->success ? Py_True : Py_False, "status",
                          airlock_status_name(res->status), "exit_code", res->exit_code, "stdout",
                          bytes_or_empty(res->stdout_data, res->stdout_len), "stdout_truncated",
                          res->stdout_truncated ? Py_True : Py_False, "stderr",
                          bytes_or_empty(res->stderr_data, res->stderr_len), "stderr_truncated",
                          res->stderr_truncated ? Py_True : Py_False, "files", files, "refused",
                          refused, "input_changes", changes, "error_message", res->error_message,
                          "duration_ms", res->duration_ms, "cell_state",
                          res->cell_state == AIRLOCK_CELL_KEPT          ? "kept"
                          : res->cell_state == AIRLOCK_CELL_ROLLED_BACK ? "rolled_back"
                                                                        : "none",
                          "json", json_obj);
out:
        Py_XDECREF(files);
        Py_XDECREF(refused);
        Py_XDECREF(changes);
        airlock_result_free(res);
        return d;
}

/* ---- Cache --------------------------------------------------------------- */

typedef struct {
        PyObject_HEAD airlock_cache *cache;
        atomic_int users; /* runs in flight and open sessions: close waits for none */
} CacheObject;

static int cache_init(CacheObject *self, PyObject *args, PyObject *kw)
{
        static char *names[] = {"max_sandboxes", "idle_timeout", NULL};
        unsigned max = 2;
        double idle = 0;
        if (!PyArg_ParseTupleAndKeywords(args, kw, "|Id:Cache", names, &max, &idle))
                return -1;
        if (self->cache)
                return 0;
        if (template_r < 0) {
                RAISE(self, template_r, &template_err);
                return -1;
        }
        airlock_error e = {0};
        int r = airlock_cache_new(max, idle, &self->cache, &e);
        if (r < 0) {
                RAISE(self, r, &e);
                return -1;
        }
        return 0;
}

static int cache_traverse(CacheObject *self, visitproc visit, void *arg)
{
        Py_VISIT(Py_TYPE(self));
        return 0;
}

static void cache_dealloc(CacheObject *self)
{
        /* Sessions hold a reference, and a run holds one through its
         * arguments: nothing uses the cache any more. Closing it waits for
         * its template processes to end: without the GIL, so that other
         * threads go on meanwhile (no Python object is touched). */
        PyTypeObject *tp = Py_TYPE(self);
        PyObject_GC_UnTrack(self);
        airlock_cache *c = self->cache;
        self->cache = NULL;
        if (c) {
                Py_BEGIN_ALLOW_THREADS airlock_cache_close(c);
                Py_END_ALLOW_THREADS
        }
        tp->tp_free((PyObject *)self);
        Py_DECREF(tp);
}

static bool cache_live(CacheObject *self)
{
        if (self->cache)
                return true;
        PyErr_SetString(PyExc_ValueError, "the sandbox is closed");
        return false;
}

/* close(): frees the cached sandboxes now; refused while a run or a session
 * of this cache is live (the library requires sessions closed first). */
static PyObject *cache_close(CacheObject *self, PyObject *noargs)
{
        if (atomic_load(&self->users) > 0) {
                PyErr_SetString(PyExc_RuntimeError,
                                "the sandbox has a run or an open session: close them first");
                return NULL;
        }
        airlock_cache *c = self->cache;
        self->cache = NULL;
        if (c) {
                Py_BEGIN_ALLOW_THREADS airlock_cache_close(c);
                Py_END_ALLOW_THREADS
        }
        Py_RETURN_NONE;
}

/* run(config, code, cancel_fd=-1, traceparent=None, tracestate=None,
 * baggage=None) -> dict, the GIL released meanwhile. The trace context is
 * the parent of the run's span (docs/tracing.md). */
static PyObject *cache_run(CacheObject *self, PyObject *args, PyObject *kw)
{
        static char *names[] = {"config",     "code",    "cancel_fd", "traceparent",
                                "tracestate", "baggage", NULL};
        ConfigObject *cfg;
        const char *code;
        Py_ssize_t len;
        int cancel_fd = -1;
        const char *tp = NULL, *ts = NULL, *bg = NULL;
        module_state *st = state_of_type(Py_TYPE(self));
        if (!st || !PyArg_ParseTupleAndKeywords(args, kw, "O!s#|izzz:run", names, st->ConfigType,
                                                &cfg, &code, &len, &cancel_fd, &tp, &ts, &bg))
                return NULL;
        if (!cache_live(self))
                return NULL;
        airlock_run_options o = {.size = sizeof(airlock_run_options),
                                 .cancel_fd = cancel_fd,
                                 .watch_fd = -1,
                                 .traceparent = tp,
                                 .tracestate = ts,
                                 .baggage = bg};
        airlock_result *res = NULL;
        airlock_error e = {0};
        int r;
        atomic_fetch_add(&self->users, 1);
        Py_BEGIN_ALLOW_THREADS r =
            airlock_cache_run(self->cache, cfg->cfg, code, (size_t)len, &o, &res, &e);
        Py_END_ALLOW_THREADS atomic_fetch_sub(&self->users, 1);
        if (r < 0)
                return RAISE(self, r, &e);
        return result_to_dict(res);
}

static PyObject *cache_describe_json(CacheObject *self, PyObject *args)
{
        ConfigObject *cfg;
        module_state *st = state_of_type(Py_TYPE(self));
        if (!st || !PyArg_ParseTuple(args, "O!:describe_json", st->ConfigType, &cfg))
                return NULL;
        if (!cache_live(self))
                return NULL;
        airlock_error e = {0};
        char *s;
        atomic_fetch_add(&self->users, 1);
        Py_BEGIN_ALLOW_THREADS s = airlock_cache_describe_json(self->cache, cfg->cfg, &e);
        Py_END_ALLOW_THREADS atomic_fetch_sub(&self->users, 1);
        if (!s)
                return RAISE(self, e.code ? e.code : -ENOMEM, &e);
        return take_text(s);
}

/* ---- Session ------------------------------------------------------------- */

typedef struct {
        PyObject_HEAD airlock_session *s;
        CacheObject *cache;   /* kept alive: the cache must outlive its sessions */
        ConfigObject *config; /* the tools its cells call */
        pthread_mutex_t lock; /* one cell at a time, as the library requires */
} SessionObject;

static PyObject *cache_session(CacheObject *self, PyObject *args)
{
        ConfigObject *cfg;
        module_state *st = state_of_type(Py_TYPE(self));
        if (!st || !PyArg_ParseTuple(args, "O!:session", st->ConfigType, &cfg))
                return NULL;
        if (!cache_live(self))
                return NULL;
        SessionObject *so = PyObject_GC_New(SessionObject, st->SessionType);
        if (!so)
                return NULL;
        so->s = NULL;
        so->cache = (CacheObject *)Py_NewRef(self);
        so->config = (ConfigObject *)Py_NewRef(cfg);
        pthread_mutex_init(&so->lock, NULL);
        PyObject_GC_Track(so);
        airlock_error e = {0};
        int r;
        atomic_fetch_add(&self->users, 1);
        Py_BEGIN_ALLOW_THREADS r = airlock_cache_session_open(self->cache, cfg->cfg, &so->s, &e);
        Py_END_ALLOW_THREADS if (r < 0)
        {
                atomic_fetch_sub(&self->users, 1);
                Py_DECREF(so);
                return raise_error(st, r, &e);
        }
        return (PyObject *)so;
}

static void session_end(SessionObject *self)
{
        airlock_session *s = self->s;
        if (!s)
                return;
        self->s = NULL;
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
        airlock_session_close(s);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS atomic_fetch_sub(&self->cache->users, 1);
}

static int session_traverse(SessionObject *self, visitproc visit, void *arg)
{
        Py_VISIT(Py_TYPE(self));
        Py_VISIT(self->cache);
        Py_VISIT(self->config);
        return 0;
}

static void session_dealloc(SessionObject *self)
{
        PyTypeObject *tp = Py_TYPE(self);
        PyObject_GC_UnTrack(self);
        session_end(self);
        pthread_mutex_destroy(&self->lock);
        Py_XDECREF(self->cache);
        Py_XDECREF(self->config);
        PyObject_GC_Del(self);
        Py_DECREF(tp);
}

static PyObject *session_close(SessionObject *self, PyObject *noargs)
{
        session_end(self);
        Py_RETURN_NONE;
}

static PyObject *session_run(SessionObject *self, PyObject *args, PyObject *kw)
{
        static char *names[] = {"code", "cancel_fd", "traceparent", "tracestate", "baggage", NULL};
        const char *code;
        Py_ssize_t len;
        int cancel_fd = -1;
        const char *tp = NULL, *ts = NULL, *bg = NULL;
        if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|izzz:run", names, &code, &len, &cancel_fd,
                                         &tp, &ts, &bg))
                return NULL;
        if (!self->s) {
                PyErr_SetString(PyExc_ValueError, "the session is closed");
                return NULL;
        }
        airlock_run_options o = {.size = sizeof(airlock_run_options),
                                 .cancel_fd = cancel_fd,
                                 .watch_fd = -1,
                                 .traceparent = tp,
                                 .tracestate = ts,
                                 .baggage = bg};
        airlock_result *res = NULL;
        airlock_error e = {0};
        int r = -ESRCH;
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
        if (self->s)
                r = airlock_session_run(self->s, code, (size_t)len, &o, &res, &e);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS if (r < 0)
        {
                if (!e.message[0])
                        snprintf(e.message, sizeof(e.message), "the session is closed");
                e.kind = AIRLOCK_ERROR_RUN;
                return RAISE(self, r, &e);
        }
        return result_to_dict(res);
}

static PyObject *session_alive(SessionObject *self, PyObject *noargs)
{
        return PyBool_FromLong(self->s && airlock_session_alive(self->s));
}

static PyObject *session_memory(SessionObject *self, PyObject *noargs)
{
        if (!self->s) {
                PyErr_SetString(PyExc_ValueError, "the session is closed");
                return NULL;
        }
        uint64_t b = 0;
        airlock_error e = {0};
        int r;
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
        r = airlock_session_memory(self->s, &b, &e);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS if (r < 0) return RAISE(self, r, &e);
        return PyLong_FromUnsignedLongLong(b);
}

static PyMethodDef session_methods[] = {
    {"run", (PyCFunction)(void (*)(void))session_run, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("run(code, cancel_fd=-1, traceparent=None, tracestate=None, baggage=None) -> "
               "dict: run a cell in the session, the GIL released.")},
    {"close", (PyCFunction)session_close, METH_NOARGS,
     PyDoc_STR("close(): end the session's processes (waits for a cell in progress).")},
    {"alive", (PyCFunction)session_alive, METH_NOARGS,
     PyDoc_STR("alive() -> bool: whether the session can still run cells.")},
    {"memory", (PyCFunction)session_memory, METH_NOARGS,
     PyDoc_STR("memory() -> int: the bytes the session holds of its own.")},
    {NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_doc, (void *)PyDoc_STR("A session of the C library (airlock_session).")},
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_traverse, session_traverse},
    {Py_tp_methods, session_methods},
    {0, NULL},
};

static PyType_Spec session_spec = {
    .name = "airlock._airlock.Session",
    .basicsize = sizeof(SessionObject),
    /* Made by Cache.session only. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = session_slots,
};

static PyMethodDef cache_methods[] = {
    {"run", (PyCFunction)(void (*)(void))cache_run, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("run(config, code, cancel_fd=-1, traceparent=None, tracestate=None, baggage=None) "
               "-> dict: run code in a fresh copy of the cached "
               "sandbox for config, the GIL released.")},
    {"session", (PyCFunction)cache_session, METH_VARARGS,
     PyDoc_STR("session(config) -> Session: open a session in the cached sandbox for config.")},
    {"describe_json", (PyCFunction)cache_describe_json, METH_VARARGS,
     PyDoc_STR("describe_json(config) -> str: the texts of the sandbox for config, as found "
               "inside the guest.")},
    {"close", (PyCFunction)cache_close, METH_NOARGS,
     PyDoc_STR("close(): free the cached sandboxes now; refused while a run or session is "
               "live.")},
    {NULL},
};

static PyType_Slot cache_slots[] = {
    {Py_tp_doc,
     (void *)PyDoc_STR("A cache of sandboxes of the C library (airlock_cache); thread-safe.")},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, cache_init},
    {Py_tp_dealloc, cache_dealloc},
    {Py_tp_traverse, cache_traverse},
    {Py_tp_methods, cache_methods},
    {0, NULL},
};

static PyType_Spec cache_spec = {
    .name = "airlock._airlock.Cache",
    .basicsize = sizeof(CacheObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = cache_slots,
};

/* ---- module -------------------------------------------------------------- */

static PyObject *mod_limit_options(PyObject *m, PyObject *noargs)
{
        PyObject *l = PyList_New(0);
        const airlock_limit_option *o;
        for (size_t i = 0; l && (o = airlock_limit_option_at(i)); i++) {
                PyObject *t = Py_BuildValue("(sss)", o->name, o->unit, o->help);
                if (!t || PyList_Append(l, t) < 0) {
                        Py_XDECREF(t);
                        Py_CLEAR(l);
                        break;
                }
                Py_DECREF(t);
        }
        return l;
}

static PyObject *mod_check_code(PyObject *m, PyObject *args)
{
        const char *code;
        Py_ssize_t len;
        if (!PyArg_ParseTuple(args, "s#:check_code", &code, &len))
                return NULL;
        STATE_CALL(PyModule_GetState(m), airlock_check_code(code, (size_t)len, &e));
}

static PyMethodDef module_methods[] = {
    {"limit_options", mod_limit_options, METH_NOARGS,
     PyDoc_STR("limit_options() -> [(name, unit, help)]: the limits set by name.")},
    {"check_code", mod_check_code, METH_VARARGS,
     PyDoc_STR("check_code(code): raise InputError for code that no run would take.")},
    {NULL},
};

static int add_exception(PyObject *m, PyObject **slot, const char *name, PyObject *bases,
                         const char *doc)
{
        char full[64];
        snprintf(full, sizeof(full), "airlock.%s", name);
        *slot = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
        return *slot ? PyModule_AddObjectRef(m, name, *slot) : -1;
}

static int add_type(PyObject *m, PyTypeObject **slot, PyType_Spec *spec)
{
        *slot = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
        return *slot ? PyModule_AddType(m, *slot) : -1;
}

static int module_exec(PyObject *m)
{
        /* See "Interpreters" at the top: the trampolines know one. */
        if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
                PyErr_SetString(PyExc_ImportError,
                                "airlock._airlock runs in the main interpreter only: its host "
                                "tools and approvers are called back there");
                return -1;
        }
        module_state *st = PyModule_GetState(m);
        if (add_exception(m, &st->Error, "Error", NULL, "An error of the airlock library.") < 0)
                return -1;
        PyObject *in_bases = PyTuple_Pack(2, st->Error, PyExc_ValueError);
        PyObject *run_bases = PyTuple_Pack(2, st->Error, PyExc_RuntimeError);
        int r =
            !in_bases || !run_bases ||
                    add_exception(m, &st->InputError, "InputError", in_bases,
                                  "Bad input, configuration or staging: nothing ran.") < 0 ||
                    add_exception(m, &st->SandboxError, "SandboxError", run_bases,
                                  "Isolation is unavailable: a kernel feature is missing.") < 0 ||
                    add_exception(m, &st->RunError, "RunError", run_bases,
                                  "A run could not be carried out (the sandbox broke).") < 0
                ? -1
                : 0;
        Py_XDECREF(in_bases);
        Py_XDECREF(run_bases);
        if (r < 0 || add_type(m, &st->ConfigType, &config_spec) < 0 ||
            add_type(m, &st->CacheType, &cache_spec) < 0 ||
            add_type(m, &st->SessionType, &session_spec) < 0)
                return -1;
        pthread_once(&template_once, template_set);
        /* VERSION is the one version of the project (AIRLOCK_VERSION in
         * airlock.h, which setup.py reads too); LIBRARY_VERSION is the
         * library's that is loaded, which may be newer. */
        if (PyModule_AddStringConstant(m, "TEMPLATE_PROGRAM", template_prog) < 0 ||
            PyModule_AddStringConstant(m, "VERSION", AIRLOCK_VERSION) < 0 ||
            PyModule_AddStringConstant(m, "LIBRARY_VERSION", airlock_version()) < 0)
                return -1;
        return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
        module_state *st = PyModule_GetState(m);
        Py_VISIT(st->Error);
        Py_VISIT(st->InputError);
        Py_VISIT(st->SandboxError);
        Py_VISIT(st->RunError);
        Py_VISIT(st->ConfigType);
        Py_VISIT(st->CacheType);
        Py_VISIT(st->SessionType);
        return 0;
}

static int module_clear(PyObject *m)
{
        module_state *st = PyModule_GetState(m);
        Py_CLEAR(st->Error);
        Py_CLEAR(st->InputError);
        Py_CLEAR(st->SandboxError);
        Py_CLEAR(st->RunError);
        Py_CLEAR(st->ConfigType);
        Py_CLEAR(st->CacheType);
        Py_CLEAR(st->SessionType);
        return 0;
}

static void module_free(void *m)
{
        module_clear(m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "airlock._airlock",
    .m_doc = "The C library airlock (include/airlock.h), thinly.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__airlock(void)
{
        return PyModuleDef_Init(&module_def);
}
