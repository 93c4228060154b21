"""The airlock guest runtime: the functions a guest's code can call, and the
runner that executes its code as a script.

This module is compiled into the library and executed once inside the
sandbox's template interpreter, before the snapshot. Every run is a fresh
copy of that interpreter, so nothing defined by one run's code survives into
the next. The host side of every call is untrusted-input-proof; this side
only has to be convenient and honest.

The names it exchanges with the host (_OP_*, _KEY_*, _STATUS_*, _KINDS,
_REQUESTS, _GUEST_*) are not defined here: scripts/embed_runtime.sh appends the
constants that src/guest/gen_wire.c writes from the host's tables
(src/lib/core/wire_table.h) to this file, after it so that its line numbers
stay those of this file. Only functions use them.
"""
import _io
import atexit as _atexit
import builtins as _builtins
import gc as _gc
import sys as _sys
import types as _types

import _airlock  # the native channel to the host (see guest.c)

__all__ = ["call_tool", "http_get", "http_post", "http_request"]

# The host names the built-in exception to raise for a refusal, one of
# _KINDS (WIRE_ERRORS in src/lib/core/wire_table.h is the one table from an
# errno to it); anything else becomes RuntimeError.
def _host_exception(kind):
    exc = getattr(_builtins, kind, None) if isinstance(kind, str) and kind in _KINDS else None
    return exc if isinstance(exc, type) and issubclass(exc, Exception) else RuntimeError


def _refusal(reply):
    """The exception for a refusal of the host. It is marked as the host's:
    a MemoryError of the host's (it ran out of memory for the request) is
    not the run exceeding its own memory limit (see _run)."""
    exc = _host_exception(reply.get(_KEY_KIND))(
        reply.get(_KEY_ERROR, "the host refused the request"))
    exc._airlock_host = True
    return exc


_codec = None


def _json_codec():
    """The encoder and decoder of the channel's frames, made once per copy:
    json.dumps(msg, ensure_ascii=False) builds a new encoder at each call,
    which is a tenth of a tool call's round trip."""
    global _codec
    if _codec is None:
        # Imported here, not at the top: the template's first copy is made
        # before the warm-up imports, so that a new sandbox's first run does
        # not wait for modules it may not need (json alone takes 15 ms here).
        import json as _json
        _codec = (_json.JSONEncoder(ensure_ascii=False).encode, _json.JSONDecoder().decode)
    return _codec


def _exchange(msg):
    """One request to the host and its reply, as Python values. The host
    writes UTF-8 (jansson), which is what json.loads would detect."""
    encode, decode = _codec or _json_codec()
    return decode(_airlock.call(encode(msg).encode("utf-8")).decode("utf-8", "surrogatepass"))


def _ask(op, fields):
    """One request of a row of the host's table (WIRE_REQUESTS, which the
    host serves from the same row) with its fields, and its reply frame: a
    guest API function that needs the host is its row and a call of this."""
    if op not in _REQUESTS:
        raise RuntimeError(f"airlock: {op!r} is not a request the host serves")
    fields[_KEY_OP] = op
    return _exchange(fields)


def _request(op, fields):
    """_ask, then the reply's result, or its refusal raised."""
    reply = _ask(op, fields)
    if reply.get(_KEY_OK):
        return reply.get(_KEY_RESULT)
    raise _refusal(reply)


def call_tool(name, /, *args, **kwargs):
    """Calls the host tool `name` with keyword arguments; returns its JSON
    result as Python values. A tool failure raises RuntimeError. The name is
    positional-only, so that a tool may have an argument called `name`."""
    if args:
        raise TypeError(
            f"call_tool({name!r}, ...) takes keyword arguments only: "
            f"call_tool({name!r}, key=value, ...)")
    if not isinstance(name, str):
        raise TypeError("call_tool: the tool name must be a string")
    reply = _ask(_OP_TOOL, {_KEY_NAME: name, _KEY_ARGS: kwargs})
    if reply.get(_KEY_OK):
        return reply.get(_KEY_RESULT)
    exc = _refusal(reply)
    # A tool's failure says which type of error the tool raised, when the
    # host knows it (a Python tool of the airlock package): None otherwise.
    if isinstance(exc, RuntimeError):
        etype = reply.get(_KEY_ERROR_TYPE)
        exc.tool_error_type = etype if isinstance(etype, str) else None
    raise exc


def http_request(method, url, headers=None, body=None):
    """Sends an HTTP request through the host's allow-list; returns
    {"status", "headers", "body"} (body is str when it is UTF-8, else bytes).
    A request outside the allow-list raises PermissionError."""
    if not isinstance(method, str) or not isinstance(url, str):
        raise TypeError("http_request(method, url): method and url must be strings")
    import base64 as _base64
    import json as _json
    if body is None:
        raw = b""
    elif isinstance(body, str):
        raw = body.encode("utf-8")
    elif isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
    else:
        raw = _json.dumps(body).encode("utf-8")
    hdrs = {}
    for k, v in (headers or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("http headers must map strings to strings")
        hdrs[k] = v
    res = _request(_OP_HTTP, {_KEY_METHOD: method.upper(), _KEY_URL: url, _KEY_HEADERS: hdrs,
                              _KEY_BODY_BASE64: _base64.b64encode(raw).decode("ascii")})
    data = _base64.b64decode(res.get(_KEY_BODY_BASE64, ""))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data
    return {"status": res.get(_KEY_STATUS), "headers": res.get(_KEY_HEADERS, {}), "body": text}


def secret(name):
    """The placeholder of the host's secret `name`: put it where the value
    goes (a header, say); the host's gateway puts the value in its place on
    requests to the secret's targets, and the placeholder back in responses.
    The value itself never enters the sandbox. An unknown name raises
    ValueError."""
    if not isinstance(name, str):
        raise TypeError("airlock.secret(name): the name must be a string")
    return _request(_OP_SECRET, {_KEY_NAME: name})


# ---- standard input read from the host (airlock_run_options.stdin_mode) ----

# What a run without a stdin_mode has: sys.stdin over fd 0 (/dev/null, or
# the run's stdin_data), the built-in input(), getpass's own getpass.
_std_stdin = None
_std_input = _builtins.input
_std_getpass = None
_stdin_mode = ""
_STDIN_CHUNK = 65536


def _stdin_read(size, prompt=None, password=False):
    """Up to size bytes of the standard input the host reads for the run,
    b"" at its end. The host reads only when asked: a run that never reads
    takes nothing from its caller. prompt (a new line asked by input() or
    getpass in prompt mode) goes to the caller, who shows it."""
    import binascii
    fields = {_KEY_SIZE: int(size)}
    if prompt is not None:
        fields[_KEY_PROMPT] = prompt
        fields[_KEY_PASSWORD] = bool(password)
    return binascii.a2b_base64(_request(_OP_STDIN, fields))


def _host_stdin_class():
    import io

    class HostStdin(io.RawIOBase):
        """The run's standard input, read from the host on demand, as a
        pipe's is read: sys.stdin's buffer reads it in 64 KiB blocks."""

        def readable(self):
            return True

        def readinto(self, b):
            data = _stdin_read(min(len(b), _STDIN_CHUNK))
            b[:len(data)] = data
            return len(data)

    return HostStdin


def _prompt_line(prompt, password):
    """input() in prompt mode (a notebook's): the caller asks someone with
    prompt and sends back one line, which is returned without its newline;
    an end of file is EOFError, as input() raises."""
    _flush_std()
    buf = bytearray()
    ask = str(prompt)
    while b"\n" not in buf:
        chunk = _stdin_read(_STDIN_CHUNK, ask, password)
        ask = None
        if not chunk:
            break
        buf += chunk
    line = bytes(buf).split(b"\n", 1)[0]
    # A front-end's end of file is an empty read or, as ipykernel takes it,
    # the line "\x04" (Ctrl-D).
    if not buf or line == b"\x04":
        raise EOFError("EOF when reading a line")
    return line.decode("utf-8", "replace")


def _prompt_input(prompt=""):
    return _prompt_line(prompt, False)


def _prompt_getpass(prompt="Password: ", stream=None):
    return _prompt_line(prompt, True)


def _set_stdin(mode):
    """Before each run (guest.c): where its standard input comes from. In
    stream mode sys.stdin (and input(), which writes its prompt to stdout
    and reads a line of it) reads the host; in prompt mode input() and
    getpass.getpass ask the host for a line with their prompt and sys.stdin
    is fd 0's; otherwise everything is fd 0's, as a run without input has."""
    global _std_stdin, _std_getpass, _stdin_mode
    if mode == _stdin_mode and not mode:
        return
    if _std_stdin is None:
        _std_stdin = _sys.stdin
    if mode == _GUEST_STDIN_STREAM:
        import io
        _sys.stdin = io.TextIOWrapper(io.BufferedReader(_host_stdin_class()(), _STDIN_CHUNK),
                                      encoding=getattr(_std_stdin, "encoding", None) or "utf-8",
                                      errors=getattr(_std_stdin, "errors", None) or "strict")
    else:
        _sys.stdin = _std_stdin
    getpass = _sys.modules.get("getpass")
    if mode == _GUEST_STDIN_PROMPT:
        _builtins.input = _prompt_input
        import getpass
        if _std_getpass is None:
            _std_getpass = getpass.getpass
        getpass.getpass = _prompt_getpass
    else:
        _builtins.input = _std_input
        if getpass is not None and _std_getpass is not None:
            getpass.getpass = _std_getpass
    _stdin_mode = mode


def http_get(url, headers=None):
    return http_request("GET", url, headers=headers)


def http_post(url, body="", content_type="application/json", headers=None):
    h = dict(headers or {})
    if not any(k.lower() == "content-type" for k in h):
        h["Content-Type"] = content_type
    return http_request("POST", url, headers=h, body=body)


_session_main = None

# Whether figures come back without being asked (airlock_config_set_auto_figures).
_auto_figures = True
# Figures saved in this run: /output/figure-N.png takes the next N.
_figures_saved = 0
_mpl_prepared = False


def _note_shared_memory(exc, tb, code):
    """A session refuses shared memory (the seccomp filter it adds, and a
    read-only /dev/shm): the PermissionError that the code gets says why,
    when it came from shared memory (a /dev/shm path, multiprocessing's
    locks and shared memory, or a line that asks for it)."""
    if not isinstance(exc, PermissionError) or not hasattr(exc, "add_note"):
        return
    fn = exc.filename if isinstance(exc.filename, str) else ""
    hit = fn.startswith("/dev/shm")
    while tb is not None and not hit:
        co = tb.tb_frame.f_code
        hit = "multiprocessing" in co.co_filename
        # The run's code is "<code>", a session's cell "<cell-N>" (_run).
        if tb.tb_next is None and (co.co_filename == "<code>" or
                                   co.co_filename.startswith("<cell-")):
            lines = code.splitlines()
            line = lines[tb.tb_lineno - 1] if 0 < tb.tb_lineno <= len(lines) else ""
            hit = any(w in line for w in ("mmap", "memfd", "shm"))
        tb = tb.tb_next
    if hit:
        exc.add_note("airlock: sessions refuse shared memory (anonymous shared mmap, memfd, "
                     "SysV and /dev/shm): a rollback or a fork could not give each state its "
                     "own copy. A run without a session has it.")


def _run(code, keep=False, last=False):
    """Runs code as the __main__ script. Returns (status, exit_code), where
    status is _STATUS_OK, _STATUS_ERROR or _STATUS_MEMORY (the run's own
    MemoryError). With keep (a session), every run shares one __main__, so
    names defined by one run are seen by the next.
    With last (the agent's run in a single-run copy), the run ends as a
    Python program does: after the threads that are not daemons."""
    global _session_main, _figures_saved, _next_main
    _figures_saved = 0
    main = _session_main if keep else None
    if main is None:
        main = _next_main or _new_main()
        _next_main = None
        if keep:
            _session_main = main
    _sys.modules["__main__"] = main
    status, exit_code = _STATUS_OK, 0
    name = _register_source(code, keep)
    main.__dict__["__file__"] = name
    try:
        if keep:
            # A session's cell is a notebook cell: the value of a final
            # expression is displayed (_display). Inline, so that a
            # traceback starts at the code as in a single run.
            import ast
            tree = compile(code, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            final = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                final = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, "exec", dont_inherit=True), main.__dict__)
            if final is not None:
                _display(eval(compile(final, name, "eval", dont_inherit=True),
                              main.__dict__), main)
        else:
            compiled = compile(code, name, "exec", dont_inherit=True)
            exec(compiled, main.__dict__)
    except SystemExit as e:
        c = e.code
        if c is None:
            exit_code = 0
        elif isinstance(c, int):
            exit_code = c & 0xff if c else 0
            if c and not exit_code:
                exit_code = 1
        else:
            try:
                print(c, file=_sys.stderr)
            except Exception:
                pass
            exit_code = 1
        status = _STATUS_OK if exit_code == 0 else _STATUS_ERROR
    except BaseException as e:
        status, exit_code = _STATUS_ERROR, 1
        if isinstance(e, MemoryError) and not getattr(e, "_airlock_host", False):
            # The run's own memory. A MemoryError of the host's (it ran out
            # of memory for a request, _refusal) is an ordinary exception.
            status = _STATUS_MEMORY
            try:
                _sys.stderr.write("MemoryError: the run exceeded its memory limit\n")
            except Exception:
                pass
        else:
            try:
                etype, value, tb = _sys.exc_info()
                if keep:
                    _note_shared_memory(value, tb, code)
                # Drop the runner's own frame so the traceback starts at the code.
                import traceback
                traceback.print_exception(etype, value, tb.tb_next if tb else None)
            except MemoryError:
                status = _STATUS_MEMORY
    if last:
        # As at the end of a Python program, wait for the threads the code
        # started and did not mark as daemons: their work is part of the
        # run. The run's time limit still bounds the wait. Only in the
        # process's last run: it marks the main thread as stopped.
        threading = _sys.modules.get("threading")
        try:
            if threading is not None:
                threading._shutdown()
        except BaseException:
            pass
    # Figures are the run's display, as a notebook shows them after a
    # cell: in every run, a session's cells included, whether the code
    # failed or not.
    if _auto_figures and _PYLAB_HELPERS in _sys.modules:
        try:
            _return_figures()
        except BaseException:
            pass
    if last or not keep:
        # A run that is neither the last nor a session's is a pre-warm run
        # (template.c): it rehearses the end of a run, all but the atexit
        # handlers, so that the agent's run finds those pages its own.
        try:
            _end_like_a_script(main, rehearsal=not last)
        except BaseException:
            pass
    _flush_std()
    if not last and not keep:
        # What the next run would otherwise do first, done now, off the
        # path of that run: its __main__ made, and put in sys.modules in
        # place of this one, which is freed here rather than there; this
        # run's source dropped, so that the next run's does not free it
        # either (as _settle_template does in the template). No code runs
        # in the new __main__ before the run that takes it.
        _next_main = _new_main()
        _sys.modules["__main__"] = _next_main
        _drop_source()
    return status, exit_code


# A fresh __main__ that no code has run in yet (_run): a copy makes one
# when it is forked (_after_fork), and each warming run, in the template or
# in a copy being prepared, leaves one for the next run.
_next_main = None


def _new_main():
    """A new __main__ module, as a script's starts: the builtins and the
    guest API functions."""
    main = _types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": _builtins, "call_tool": call_tool,
                          "http_get": http_get, "http_post": http_post,
                          "http_request": http_request})
    return main


# The cells a session has run in this interpreter, for their names.
_cells = 0
# A single run's code, the script that multiprocessing's spawned children
# run again (_patch_mp_spawn): linecache's entry may be cleared by the code.
_code = None


def _register_source(code, keep):
    """Names the code and puts its lines in linecache, so that tracebacks
    show them and inspect.getsource() finds them, as for `python3 script.py`.
    A single run is "<code>"; a session's cells are "<cell-1>", "<cell-2>"...
    (numbered in the interpreter: a rolled-back cell's number is given again,
    with its interpreter gone), so that a function defined by one cell shows
    that cell's lines wherever it fails. The entry has no modification time,
    which linecache takes for source that no file backs: checkcache() keeps
    it, whatever files /tmp holds."""
    global _cells, _code
    if keep:
        _cells += 1
        name = f"<cell-{_cells}>"
    else:
        name = "<code>"
        _code = code
    entry = (len(code), None, code.splitlines(True), name)
    linecache = _sys.modules.get("linecache")
    if linecache is not None:
        linecache.cache[name] = entry
    else:
        # A one-shot sandbox's template imports neither traceback nor
        # linecache (_install): with tokenize and re, some 9 ms of a cold
        # start that a run which raises nothing never needs. The entry
        # waits here until linecache is imported (_Finder), which anything
        # that reads it (traceback, inspect, warnings) does first.
        _pending_sources[name] = entry
    return name


# Sources named while linecache was not imported yet (_register_source).
_pending_sources = {}


def _drop_source():
    """Drops a single run's source (_register_source), once its run is over."""
    global _code
    _code = None
    linecache = _sys.modules.get("linecache")
    if linecache is not None:
        linecache.cache.pop("<code>", None)
    _pending_sources.pop("<code>", None)


def _add_pending_sources(linecache):
    linecache.cache.update(_pending_sources)
    _pending_sources.clear()


# The longest repr of a final expression that a cell prints, in characters.
_DISPLAY_MAX = 20000


def _display(value, main):
    """Shows the value of a session cell's final expression as a notebook
    does: nothing for None; a matplotlib figure comes back as the cell's
    figures do; an object with _repr_png_ as /output/display-N.png (an
    image); anything else as its repr on stdout, cut at _DISPLAY_MAX
    characters. The value is kept as _, as IPython keeps it."""
    if value is None:
        return
    main.__dict__["_"] = value
    figure = _sys.modules.get("matplotlib.figure")
    if figure is not None and isinstance(value, figure.Figure):
        if _auto_figures and not getattr(value, "_airlock_returned", False):
            helpers = _sys.modules.get("matplotlib._pylab_helpers")
            managed = helpers is not None and any(
                m.canvas.figure is value for m in helpers.Gcf.get_all_fig_managers())
            if not managed:
                _save_figure(value)
            return
    png = getattr(type(value), "_repr_png_", None)
    if callable(png):
        data = value._repr_png_()
        if isinstance(data, (bytes, bytearray)) and data:
            import os
            fd, _, _ = _create_numbered("display", 0)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return
    text = repr(value)
    if len(text) > _DISPLAY_MAX:
        text = (text[:_DISPLAY_MAX] +
                f"... ({len(text) - _DISPLAY_MAX} more characters not shown)")
    print(text)


def _flush_std():
    """Flushes sys.stdout and sys.stderr, then sys.__stdout__ and
    sys.__stderr__ where the code replaced them: each stream once, since
    they are the same objects unless the code replaced them."""
    out, err = _sys.stdout, _sys.stderr
    try:
        out.flush()
    except Exception:
        pass
    if err is not out:
        try:
            err.flush()
        except Exception:
            pass
    for stream in (_sys.__stdout__, _sys.__stderr__):
        if stream is not out and stream is not err:
            try:
                stream.flush()
            except Exception:
                pass


def _print_unraisable(obj):
    """Reports an exception that a shutdown step swallows, in the words
    CPython uses for the same case ("Exception ignored in: ...")."""
    try:
        _sys.stderr.write(f"Exception ignored in: {obj!r}\n")
        import traceback
        traceback.print_exc()
    except Exception:
        pass


def _end_like_a_script(main, rehearsal=False):
    """Ends the run's copy as `python3 script.py` ends, as far as the
    program or its files can tell, without a full Py_Finalize (tens of
    milliseconds with the scientific stack, for teardown nobody sees):

    1. stdout and stderr flushed, then the atexit handlers, last
       registered first; an exception in one is
       printed to stderr ("Exception ignored in atexit callback") and the
       exit status is unchanged, as in CPython;
    2. stdout and stderr flushed;
    3. __main__'s globals cleared, underscore names first, as CPython's
       module teardown does, so that objects only they hold are finalised
       (a zipfile.ZipFile writes its directory, a file closes); then a
       collection for the cycles among them. Skipped while daemon threads
       still run: CPython stops them first, and they may be using those
       globals;
    4. every Python file object still open flushed and closed, wrappers
       before what they wrap, and sqlite3 connections closed.

    What is left out is what CPython does not promise at exit either:
    __del__ of objects that are still alive after this (other modules'
    globals), and the freeing of memory. The process exits right after,
    before the host captures /output. The run's time limit bounds all of
    it: an atexit handler that never returns ends as a timeout."""
    # Flushed first too, so that what the code printed is not lost with
    # the process when a handler runs into the time limit. Without a
    # handler nothing can have written in between: one flush is both.
    _flush_std()
    if _atexit._ncallbacks() and not rehearsal:
        _atexit._run_exitfuncs()
        _flush_std()
    threading = _sys.modules.get("threading")
    alone = threading is None or threading.active_count() <= 1
    if alone:
        # A Python loop, not dict.update in C: a copy's caches are cold
        # when its run ends, and the interpreter's loop is the code that
        # is warm (dict.fromkeys and update took 21 us against 16).
        d = main.__dict__
        for names in ([k for k in d if k.startswith("_") and k != "__builtins__"],
                      [k for k in d if k != "__builtins__"]):
            for k in names:
                try:
                    d[k] = None
                except Exception:
                    pass
        _gc.collect()
    _close_open_files()


def _close_open_files():
    """Flushes and closes every open file object of the run, and closes
    every sqlite3 connection (which rolls back what was not committed and
    removes its journal, as its finaliser would). The template's own
    objects are frozen out of the collector's lists (guest.c), so only
    objects made in this copy are seen; stdin, stdout and stderr are
    among the template's. Wrappers close first: Python-level file classes
    (gzip, zipfile's), then text files, then buffered ones, then raw."""
    objects = _gc.get_objects()
    # The file objects picked out in C (filter calls isinstance's own
    # check), not by a Python loop over every object of the run.
    files = [f for f in filter(_is_file_object, objects) if not isinstance(f, _IN_MEMORY)]
    sqlite3 = _sys.modules.get("sqlite3")
    connection = getattr(sqlite3, "Connection", None)
    conns = [] if connection is None else [o for o in objects if isinstance(o, connection)]
    del objects
    files.sort(key=_close_rank)
    for f in files:
        try:
            if f.closed:
                continue
        except Exception:
            continue
        try:
            f.close()
        except Exception:
            _print_unraisable(f)
    for c in conns:
        try:
            c.close()
        except Exception:
            _print_unraisable(c)


_is_file_object = _io._IOBase.__instancecheck__
_IN_MEMORY = (_io.BytesIO, _io.StringIO)


def _close_rank(f):
    """The order in which _close_open_files closes files: wrappers first."""
    t = type(f)
    if t.__module__ not in ("_io", "io"):
        return 0
    if isinstance(f, _io._TextIOBase):
        return 1
    if isinstance(f, _io._BufferedIOBase):
        return 2
    return 3


# ---- matplotlib ---------------------------------------------------------
#
# matplotlib is never imported for a run that does not use it. The import
# hook below (_Finder, first on sys.meta_path) acts when a run imports it:
#
# - the first import of matplotlib in a copy copies the font list that the
#   template built once (_build_caches) into matplotlib's cache directory
#   under HOME, so the run does not spend a second rebuilding it;
# - matplotlib.backend_bases gets a print_figure that marks each figure it
#   writes, so a figure the code saved itself is not returned again;
# - the backend module named by MPLBACKEND (guest.c), Agg with a show()
#   that returns the figures.


def _build_caches():
    """Runs in a process forked from the template for this alone, while the
    cache is writable: builds matplotlib's font list in it."""
    global _mpl_prepared
    import os
    _mpl_prepared = True
    os.environ["MPLCONFIGDIR"] = _GUEST_CACHE_DIR + "/matplotlib"
    if "matplotlib" in _sys.modules:
        return  # preloaded: the preload wrote the font list already
    try:
        import matplotlib.font_manager  # noqa: F401 (it writes the cache)
    except Exception:
        pass


def _after_preloads():
    import os
    os.environ.pop("MPLCONFIGDIR", None)


def _prepare_matplotlib():
    global _mpl_prepared
    if _mpl_prepared:
        return
    _mpl_prepared = True
    import os
    env = os.environ
    target = env.get("MPLCONFIGDIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "matplotlib")
    src = _GUEST_CACHE_DIR + "/matplotlib"
    try:
        names = [n for n in os.listdir(src) if n.startswith("fontlist-") and n.endswith(".json")]
    except OSError:
        return
    for name in names:
        dst = os.path.join(target, name)
        try:
            if os.path.exists(dst):
                continue
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(src, name), "rb") as f:
                data = f.read()
            with open(dst, "xb") as f:
                f.write(data)
        except OSError:
            pass


class _WrappingLoader:
    """The loader of a module, with `after(module)` run once it is loaded."""

    def __init__(self, inner, after):
        self._inner, self._after = inner, after

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _in_output(target):
    """Whether savefig's target (a path, or a file object with a name) is
    a file in /output."""
    import os
    name = getattr(target, "name", target)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if not isinstance(name, (str, os.PathLike)):
        return False
    try:
        return os.path.realpath(os.path.abspath(name)).startswith("/output/")
    except (OSError, ValueError, TypeError):
        return False


def _patch_backend_bases(module):
    canvas = module.FigureCanvasBase
    original = canvas.print_figure

    def print_figure(self, *args, **kwargs):
        # A savefig into /output (a relative name lands there: it is the
        # working directory) already returns the figure: it is not
        # returned again at the end. One to a buffer or to another folder
        # returns nothing, so the figure still comes back by itself.
        try:
            return original(self, *args, **kwargs)
        finally:
            fig = getattr(self, "figure", None)
            target = args[0] if args else kwargs.get("filename")
            if fig is not None and _in_output(target):
                fig._airlock_returned = True
    print_figure.__doc__ = original.__doc__
    print_figure.__wrapped__ = original
    canvas.print_figure = print_figure


class _BackendLoader:
    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        from matplotlib.backend_bases import _Backend
        from matplotlib.backends.backend_agg import _BackendAgg

        class _BackendAirlock(_BackendAgg):
            """Agg, whose show() returns the figures: each one not saved
            yet goes to /output as a PNG, and all are closed, as after
            the windows of a script's plt.show() are closed."""

            @classmethod
            def show(cls, *args, **kwargs):
                _return_figures()

        _BackendAirlock.__module__ = module.__name__
        module.__doc__ = "matplotlib's Agg backend, whose show() returns the figures."
        _Backend.export(_BackendAirlock)


class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "matplotlib":
            _prepare_matplotlib()
        elif name == _GUEST_FIGURES_BACKEND and _auto_figures:
            import importlib.util
            return importlib.util.spec_from_loader(name, _BackendLoader)
        elif name == "matplotlib.backend_bases" and _auto_figures:
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader, _patch_backend_bases)
            return spec
        elif name == "multiprocessing.spawn":
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader, _patch_mp_spawn)
            return spec
        elif name == "signal" and _signal_unwrapped:
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader, _wrap_signal_kills)
            return spec
        elif name == "linecache" and _pending_sources:
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader, _add_pending_sources)
            return spec
        elif name == "tarfile":
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader, _patch_tarfile)
            return spec
        return None


def _patch_mp_spawn(module):
    """multiprocessing's "spawn" and "forkserver" start methods run each
    child as a new /usr/bin/python3, which runs the parent's main script
    again, as __mp_main__, from the path its __file__ names, so that the
    functions it defines can be found there. A single run's code is
    "<code>" in the working directory (_run), a file that did not exist:
    every child ended on a FileNotFoundError, and a pool started new ones
    until the time limit. The code is written to that file when a child is
    prepared, as `python3 script.py` has its script on disk. A session's
    cells are not one script to run again: the children run none of them,
    as a notebook's do (a function a cell defined cannot reach them)."""
    import functools
    original = module.get_preparation_data

    @functools.wraps(original)
    def get_preparation_data(name):
        d = original(name)
        main = _sys.modules.get("__main__")
        path = d.get("init_main_from_path")
        mfile = getattr(main, "__file__", None)
        if path is None or not isinstance(mfile, str):
            return d
        if mfile.rpartition("/")[2] == "<code>" and _code is not None:
            # The code's own working directory, whatever the code's
            # current one is (ORIGINAL_DIR is the one multiprocessing was
            # imported in) and whatever folder it put before the name
            # (CPython's regrtest makes __main__.__file__ absolute).
            # In /tmp, not in the working directory (/output), whose files
            # come back as the run's results.
            path = "/tmp/<code>"
            d["init_main_from_path"] = path
            _write_main_script(path, _code)
        elif mfile.startswith("<cell-"):
            del d["init_main_from_path"]
        return d
    get_preparation_data.__module__ = module.__name__
    module.get_preparation_data = get_preparation_data


def _write_main_script(path, code):
    """Writes code to path, unless the file holds it already."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            if f.read() == code:
                return
    except OSError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)


def _patch_tarfile(module):
    """The guest is uid 0 of a user namespace that maps its own ids alone,
    so chown to an archive's ids fails with EINVAL, and TarFile, which
    tries chown first as root, then skipped the mode and the times without
    a word. Such a member now keeps the guest's owner and gets its mode and
    times, as it does when a user who is not root extracts on the host."""
    import errno
    original = module.TarFile.chown

    def chown(self, tarinfo, targetpath, numeric_owner):
        try:
            original(self, tarinfo, targetpath, numeric_owner)
        except module.ExtractError as e:
            if getattr(e.__cause__, "errno", None) != errno.EINVAL:
                raise
    chown.__doc__ = original.__doc__
    chown.__wrapped__ = original
    module.TarFile.chown = chown


def _create_numbered(prefix, last):
    """Creates the first free /output/PREFIX-N.png with N above last, never
    one the code made itself (O_EXCL); returns its fd, its path and N. An
    error other than an existing name is raised, its filename the path."""
    import os
    n = last
    while True:
        n += 1
        path = f"/output/{prefix}-{n}.png"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), path, n
        except FileExistsError:
            continue


def _save_figure(fig):
    """Saves fig as the next free /output/figure-N.png (a file of the
    code's own of that name is never overwritten)."""
    global _figures_saved
    import os
    try:
        fd, path, _figures_saved = _create_numbered("figure", _figures_saved)
    except OSError as e:
        _sys.stderr.write(f"airlock: cannot save a figure as {e.filename}: {e}\n")
        return
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png")
    except Exception as e:
        _sys.stderr.write(f"airlock: cannot save a figure as {path}: "
                          f"{type(e).__name__}: {e}\n")
        try:
            os.unlink(path)
        except OSError:
            pass
    fig._airlock_returned = True


# The module of pyplot's figures: none open unless it was imported.
_PYLAB_HELPERS = "matplotlib._pylab_helpers"


def _return_figures():
    """Saves every open pyplot figure that was not written with savefig,
    in the order of their numbers, then closes them all."""
    helpers = _sys.modules.get(_PYLAB_HELPERS)
    if helpers is None:
        return
    gcf = helpers.Gcf
    for manager in gcf.get_all_fig_managers():
        fig = manager.canvas.figure
        if not getattr(fig, "_airlock_returned", False):
            _save_figure(fig)
    gcf.destroy_all()


def _after_fork(pid1):
    """Reseeds every per-process secret of a fresh copy. Modules not yet
    imported need nothing: they seed themselves when a run imports them. The
    random module reseeds itself (its own os.register_at_fork hook, run by
    PyOS_AfterFork_Child before this). pid1: whether this copy is pid 1 of
    its PID namespace (guest.c).

    This is the first Python code a copy runs, and each object it touches
    is a reference count written, a page copied: it touches only what it
    must change (it wrote 61 pages when it imported os, reset tempfile's
    names unasked and freed the template's import finders)."""
    # numpy's global RandomState (np.random.rand and friends) was seeded in
    # the template, once for every copy: each copy gets a state of its own,
    # 624 words from the kernel's generator, with no cached Gaussian (the
    # legacy state tuple). np.random.seed() would do the same through a
    # SeedSequence, which runs through many more of numpy's pages, and each
    # page a copy touches first is dear where the hypervisor keeps the page
    # tables (docs/performance.md, "A busy machine").
    # Generators made with np.random.default_rng() seed themselves from the
    # OS at creation.
    np_random = _sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            import numpy
            import os
            key = numpy.frombuffer(os.urandom(2496), dtype=numpy.uint32)
            np_random.set_state(("MT19937", key, 624, 0, 0.0))
        except Exception:
            try:
                np_random.seed()
            except Exception:
                pass
    # tempfile's random names, if the template drew any, are drawn anew.
    tempfile = _sys.modules.get("tempfile")
    if tempfile is not None and tempfile._name_sequence is not None:
        tempfile._name_sequence = None
    # The finders of the importable folders list another /output and /tmp:
    # a copy of the template has none (_settle_template), a session's
    # fork or restore those of its parent's cells.
    cache = _sys.path_importer_cache
    for path in _IMPORT_DIRS:
        if path in cache:
            del cache[path]
    # A single run's copy is pid 1 of its PID namespace: the orphans of the
    # run become its children (see "orphans" below). A session's
    # interpreter is not pid 1 (its pid 1 reaps them).
    global _reaping, _next_main
    _reaping = pid1
    if _forked:
        _forked.clear()
    # The first run's __main__, while the copy is prepared (_run): the
    # template keeps none (_settle_template).
    _next_main = _new_main()


def _settle_template():
    """Called by the template right before it freezes its heap (guest.c,
    freeze_heap), after every run of Python code it makes itself: drops or
    keeps what a copy's run would otherwise free. Each object a copy frees
    or touches is a page copied on write, and a copy's first steps freed a
    good deal of the template's last warming run (counted by stage in a
    debug build, print(1) in a copy made in a burst):
      - the finders of the working directory and /tmp (_IMPORT_DIRS) in
        sys.path_importer_cache, which list the template's own /output and
        /tmp, not a copy's: dropped (37 pages, when runtime._after_fork
        dropped them in each copy);
      - the last run's source in linecache and in _code: dropped (the run's
        _register_source wrote 19 pages, 9 after);
      - the last run's __main__, which the run's own replaces in
        sys.modules: kept (_template_main), so that a copy only counts one
        reference less (the new __main__ wrote 20 pages, 11 after);
      - the next run's __main__ (_run): dropped, see below."""
    global _template_main, _next_main
    for path in _IMPORT_DIRS:
        _sys.path_importer_cache.pop(path, None)
    _drop_source()
    # The next run's __main__ is made in each copy (_after_fork): one made
    # here would be frozen with the template's heap, where the collector
    # never looks, and the run's globals would be missing from
    # gc.get_objects() and gc.get_referrers().
    _next_main = None
    _template_main = _sys.modules.get("__main__")


# The template's last __main__ (_settle_template).
_template_main = None


# Packages worth naming to a model, as (import name, distribution name).
_NOTABLE = (
    ("numpy", "numpy"), ("pandas", "pandas"), ("matplotlib", "matplotlib"),
    ("scipy", "scipy"), ("PIL", "Pillow"), ("sklearn", "scikit-learn"),
    ("sympy", "sympy"), ("networkx", "networkx"), ("requests", "requests"),
    ("bs4", "beautifulsoup4"), ("statsmodels", "statsmodels"), ("seaborn", "seaborn"),
    ("polars", "polars"), ("pyarrow", "pyarrow"), ("openpyxl", "openpyxl"),
    ("lxml", "lxml"), ("yaml", "PyYAML"),
)


def _inventory(folders):
    """Prints, as one JSON line, what this interpreter can import: the
    notable packages with their versions, and the top-level packages of each
    --python-path folder. Run in a copy (not the template, whose memory it
    would grow), it reads package metadata and imports no package."""
    import importlib.machinery as machinery
    import importlib.metadata as metadata
    import importlib.util as util
    import json
    import os

    def version(dist):
        try:
            return metadata.version(dist)
        except Exception:
            return None

    notable = []
    for mod, dist in _NOTABLE:
        try:
            if util.find_spec(mod) is None:
                continue
        except Exception:
            continue
        notable.append({"import": mod, "name": dist, "version": version(dist)})

    suffixes = tuple(machinery.EXTENSION_SUFFIXES) + (".py",)
    out = []
    for i in range(folders):
        root = f"/opt/airlock/pythonpath/{i}"
        # Which distribution provides which top-level name, for versions.
        provides = {}
        try:
            for d in metadata.distributions(path=[root]):
                tops = (d.read_text("top_level.txt") or "").split()
                name = d.metadata["Name"] or ""
                for t in tops or [name.replace("-", "_")]:
                    provides.setdefault(t, (name, d.version))
        except Exception:
            pass
        names = []
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            entries = []
        for e in entries:
            full = os.path.join(root, e)
            if e.startswith((".", "_")) or e.endswith((".dist-info", ".egg-info")):
                continue
            if os.path.isdir(full):
                top = e
            else:
                top = next((e[:-len(x)] for x in suffixes if e.endswith(x)), None)
                if top is None:
                    continue
            if not top.isidentifier() or top in names:
                continue
            names.append(top)
        pkgs = []
        for top in names:
            name, ver = provides.get(top, (None, None))
            pkgs.append({"import": top, "name": name, "version": ver})
        out.append(pkgs)
    print(json.dumps({"packages": notable, "python_path": out}))


def _prewarm():
    """Goes once through the common paths of the preloaded numpy and pandas,
    in the template's probe (tpl_prefault.c, tpl_run.c's tpl_preloads_pass):
    it learns the pages they write (reference counts, caches, first
    allocations) and read, and every later copy populates them while it is
    prepared, instead of costing the agent's run a copy-on-write fault each
    (3 ms for a first DataFrame in a fresh copy on the 2-core test
    machine). The template also runs it a few times after its warm-up
    (guest.c, guest_warm_up), so that these paths' functions are quickened
    there once rather than in each copy. Nothing is imported: a sandbox
    without these preloads does nothing here."""
    np = _sys.modules.get("numpy")
    if np is not None:
        a = np.arange(16, dtype=float)
        # Not a matrix product: that would start BLAS, and OpenBLAS's
        # threads, in a copy that the agent's run may never need them in.
        (a * 2 + 1).sum(), a.mean()
    pd = _sys.modules.get("pandas")
    if pd is not None:
        df = pd.DataFrame({"a": [1, 2, 3], "b": [1.5, 2.5, 3.5]})
        df.a.sum(), df["b"].mean()


# The working directory of every run (its files come back as results),
# and /tmp (a session keeps its files from cell to cell): the last entries
# of sys.path, in this order.
_CWD = "/output"
_IMPORT_DIRS = (_CWD, "/tmp")


def _cwd_finder_hook(path):
    """The path hook of the working directory and /tmp (_IMPORT_DIRS): a
    FileFinder that lists the directory again when a name is not in its
    listing. A plain
    FileFinder lists a directory again only when its modification time
    changed, and a file written within the same clock tick as the last
    listing (tmpfs times are coarse) would not be found: code that writes
    a module and imports it at once must find it, wherever the listing was
    made (in the template, by an earlier import in this run)."""
    if path not in _IMPORT_DIRS:
        raise ImportError("not the working directory or /tmp")
    import importlib.machinery as machinery
    from importlib._bootstrap_external import _get_supported_file_loaders

    class _CwdFinder(machinery.FileFinder):
        def find_spec(self, fullname, target=None):
            spec = super().find_spec(fullname, target)
            if spec is None:
                self.invalidate_caches()
                spec = super().find_spec(fullname, target)
            return spec

    return _CwdFinder(path, *_get_supported_file_loaders())


def _wrap_kill(original, hits_self, module):
    """original (os.kill and the like), then, when it sent SIGKILL to this
    process, the end of the run by SIGKILL: a single run's interpreter is
    pid 1 of its namespace, which the kernel does not let kill itself, and
    SIGKILL has no handler to catch it (the other signals that end a
    process are caught in C: guest.c, guest_init_signals)."""
    import functools

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        try:
            if int(args[-1]) == 9 and hits_self(*args):
                _airlock.exit_by_signal(9)
        except (TypeError, ValueError, IndexError):
            pass
        return result
    # Named after the module that holds it, as its pure-Python functions
    # are (pydoc, and CPython's test_signal, look at __module__).
    wrapper.__module__ = module
    return wrapper


def _wrap_kills(single_run=False):
    import os
    os.kill = _wrap_kill(os.kill, lambda pid, sig: pid in (0, os.getpid(), -os.getpgrp()), "os")
    os.killpg = _wrap_kill(os.killpg, lambda pgid, sig: pgid in (0, os.getpgrp()), "os")
    # A one-shot sandbox's template leaves the signal module (and enum,
    # which it imports: some 3 ms of a cold start) to the run that imports
    # it, and _Finder wraps its functions then.
    if single_run and "signal" not in _sys.modules:
        global _signal_unwrapped
        _signal_unwrapped = True
        return
    import signal
    _wrap_signal_kills(signal)


# Whether the signal module is still to be wrapped once imported (_wrap_kills).
_signal_unwrapped = False


def _wrap_signal_kills(signal):
    global _signal_unwrapped
    _signal_unwrapped = False
    signal.raise_signal = _wrap_kill(signal.raise_signal, lambda sig: True, "signal")
    # SIGKILL to any thread of the process ends the whole process.
    signal.pthread_kill = _wrap_kill(signal.pthread_kill, lambda tid, sig: True, "signal")


# ---- orphans ------------------------------------------------------------
#
# A single run's interpreter is pid 1 of its PID namespace, so every
# orphan of the run (the `sleep` of `sh -c "sleep 1 &"`) becomes its
# child, and Python reaps only the children it waits for: each orphan
# stayed a zombie until the run ended, counted against --pids. A second
# process as pid 1 would cost every run a fork; instead the interpreter
# tells orphans from its own children by what it forked itself: each pid
# that Python starts (os.fork, os.forkpty, os.posix_spawn(p),
# _posixsubprocess.fork_exec, which subprocess and multiprocessing's spawn,
# forkserver and resource tracker use) is recorded with its start time,
# and before each such start the zombies among the interpreter's children
# that it did not record are reaped. A recorded pid is never reaped here:
# subprocess and os.waitpid get its real status. A child that C code
# started (a C extension's fork, ctypes) cannot be told from an orphan;
# os.system, the one C fork that Python code reaches, stops the reaping
# while it runs. No SIGCHLD handler is installed: the code sees SIGCHLD
# as it would on the host.

_reaping = False      # in a single run's copy, pid 1 (_after_fork)
_forked = {}          # pid -> start time (bytes) of what Python started
_reap_lock = None     # an RLock: held across a start and its record
_foreign = 0          # os.system calls running
_orig = {}            # the unwrapped os functions
_WALL = 0x40000000    # __WALL: Python does not name it
_FORKED_PRUNE = 64    # records past which those that ended are dropped


def _pid1():
    """Whether this process reaps orphans: a single run's copy, pid 1. A
    process the code forked inherits the flag and is not pid 1; neither is
    a session's interpreter, whose pid 1 reaps."""
    if not _reaping:
        return False
    import os
    return os.getpid() == 1


def _proc_stat(pid):
    """(state, start time) of pid from /proc/PID/stat, or None."""
    import os
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    rest = data[data.rfind(b")") + 2:].split()
    return (rest[0], rest[19]) if len(rest) > 19 else None


def _record(pid):
    st = _proc_stat(pid)
    if st is not None:
        _forked[pid] = st[1]
    if len(_forked) >= _FORKED_PRUNE:
        for p, start in list(_forked.items()):
            now = _proc_stat(p)
            if now is None or now[1] != start:
                _forked.pop(p, None)


def _reap_orphans():
    """Reaps the zombies among this process's children that Python did not
    start (orphans re-parented to pid 1), with waitpid on each such pid
    alone. Called with _reap_lock held, so that no start in another thread
    is between its fork and its record."""
    if _foreign or not _pid1():
        return
    import os
    waitpid = _orig["waitpid"]
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in tasks:
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            kids = b""
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                kids += chunk
        except OSError:
            continue
        finally:
            os.close(fd)
        for k in kids.split():
            pid = int(k)
            st = _proc_stat(pid)
            if st is None or st[0] != b"Z" or _forked.get(pid) == st[1]:
                continue
            try:
                waitpid(pid, os.WNOHANG | _WALL)
            except OSError:
                pass


def _wrap_start(original, pid_of, module, forks=False):
    """original (a function that starts a process), after reaping the
    orphans, with the pid it started recorded. forks: it returns in the
    child too (pid 0), whose children are its own and which is not pid 1."""
    import functools

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        global _reaping
        if not _pid1():
            return original(*args, **kwargs)
        with _reap_lock:
            _reap_orphans()
            result = original(*args, **kwargs)
            pid = pid_of(result)
            if pid == 0 and forks:
                _reaping = False
                _forked.clear()
            elif isinstance(pid, int) and pid > 0:
                _record(pid)
        return result
    wrapper.__module__ = module
    return wrapper


def _not_ours(pid):
    """Whether pid, which a wait of the code's returned, is an orphan the
    code never started (on the host it would never have been its child).
    Records stay until _record prunes those that ended: a wait may report
    a stopped child, which is still the code's."""
    if pid <= 0 or pid in _forked or not _pid1():
        return False
    return not _foreign


def _no_child_of_ours():
    """Whether none of the children Python started is left to wait for
    (orphans aside): a wait for any child then fails with ECHILD at once,
    as on the host, rather than wait for an orphan to end."""
    if _foreign or not _pid1():
        return False
    for pid, start in list(_forked.items()):
        st = _proc_stat(pid)
        if st is not None and st[1] == start:
            return False
    return True


def _wrap_waits():
    """os.wait, os.wait3, os.waitpid, os.wait4 and os.waitid for any child
    or a process group: an orphan they reap is passed over, and they go on
    waiting, so that the code's waits see its own children alone, as on
    the host. Waits for one pid are left as they are."""
    import errno
    import functools
    import os

    def refuse():
        raise ChildProcessError(errno.ECHILD, os.strerror(errno.ECHILD))

    def any_child(original, pid_at, options_at, result_pid):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            target = pid_at(args, kwargs)
            if target > 0 or not _pid1():
                return original(*args, **kwargs)
            options = options_at(args, kwargs)
            while True:
                if not options & os.WNOHANG and _no_child_of_ours():
                    refuse()
                result = original(*args, **kwargs)
                pid = result_pid(result)
                if not _not_ours(pid):
                    return result
                if options & getattr(os, "WNOWAIT", 0):
                    try:
                        _orig["waitpid"](pid, os.WNOHANG | _WALL)
                    except OSError:
                        pass
        wrapper.__module__ = "os"
        return wrapper

    def arg(i, name, default=None):
        def get(args, kwargs):
            return args[i] if len(args) > i else kwargs.get(name, default)
        return get

    os.wait = any_child(os.wait, lambda a, k: -1, lambda a, k: 0, lambda r: r[0])
    os.wait3 = any_child(os.wait3, lambda a, k: -1, arg(0, "options", 0), lambda r: r[0])
    os.waitpid = any_child(os.waitpid, arg(0, "pid", 0), arg(1, "options", 0), lambda r: r[0])
    os.wait4 = any_child(os.wait4, arg(0, "pid", 0), arg(1, "options", 0), lambda r: r[0])
    if hasattr(os, "waitid"):
        def waitid_target(args, kwargs):
            idtype = arg(0, "idtype")(args, kwargs)
            return -1 if idtype in (os.P_ALL, os.P_PGID) else 1
        os.waitid = any_child(os.waitid, waitid_target, arg(2, "options", 0),
                              lambda r: r.si_pid if r is not None else 0)


def _wrap_starts():
    global _reap_lock
    import _posixsubprocess
    import _thread
    import functools
    import os
    _reap_lock = _thread.RLock()
    _orig["waitpid"] = os.waitpid
    os.fork = _wrap_start(os.fork, lambda r: r, "os", forks=True)
    if hasattr(os, "forkpty"):
        os.forkpty = _wrap_start(os.forkpty, lambda r: r[0], "os", forks=True)
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            setattr(os, name, _wrap_start(getattr(os, name), lambda r: r, "os"))
    _posixsubprocess.fork_exec = _wrap_start(_posixsubprocess.fork_exec, lambda r: r,
                                             "_posixsubprocess")
    system = os.system

    @functools.wraps(system)
    def wrapped_system(command):
        global _foreign
        if not _pid1():
            return system(command)
        # system() forks and waits in C, for a pid Python never sees: no
        # reaping while it runs, so that its child is never taken.
        with _reap_lock:
            _reap_orphans()
            _foreign += 1
        try:
            return system(command)
        finally:
            with _reap_lock:
                _foreign -= 1
    wrapped_system.__module__ = "os"
    os.system = wrapped_system
    _wrap_waits()


def _wrap_sysconf():
    """sysinfo(2) is refused in the guest (it answers for the whole
    machine, docs/design.md, "Inside the sandbox"), and glibc builds
    sysconf(_SC_PHYS_PAGES) and sysconf(_SC_AVPHYS_PAGES) on it without
    looking whether it failed, so their figure is undefined, and code that
    sizes itself by the memory it has would size itself by garbage.
    os.sysconf answers those two from the
    run's /proc/meminfo instead (MemTotal, the memory limit, and MemFree),
    as psutil and `free` read the memory; every other name goes to the
    system's sysconf as before."""
    import functools
    import os
    sysconf = os.sysconf
    names = os.sysconf_names
    fields = {names[n]: f for n, f in (("SC_PHYS_PAGES", b"MemTotal:"),
                                       ("SC_AVPHYS_PAGES", b"MemFree:")) if n in names}

    @functools.wraps(sysconf)
    def wrapped_sysconf(name):
        field = fields.get(names.get(name) if isinstance(name, str) else name)
        if field is None:
            return sysconf(name)
        try:
            # Python's open: the audit hook has /proc/meminfo written afresh.
            with open("/proc/meminfo", "rb") as f:
                for line in f:
                    if line.startswith(field):
                        return int(line.split()[1]) * 1024 // sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
        return sysconf(name)
    wrapped_sysconf.__module__ = "os"
    os.sysconf = wrapped_sysconf

    # glibc's getloadavg is built on sysinfo too, and the guest's
    # /proc/loadavg is empty (the machine's load is not the run's to see):
    # os.getloadavg gives the run's own, the number of its processes that
    # are running now, for each of the three figures, since no average of
    # the run's alone is kept. Code that paces itself by the load (CPython's
    # own test runner) then sees the run, not an error.
    @functools.wraps(os.getloadavg)
    def getloadavg():
        running = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # The state follows the command's closing parenthesis.
            state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
            running += state == b"R"
        return (float(running),) * 3
    getloadavg.__module__ = "os"
    os.getloadavg = getloadavg


def _servers_first():
    """The folder of the upstream MCP servers' stubs (the package "servers",
    docs/design.md, "Upstream MCP servers") goes first on sys.path, before
    the working directory and every other folder, so that nothing the code
    or the workspace brings can shadow it."""
    import os
    for p in [p for p in _sys.path if p.startswith("/opt/airlock/pythonpath/")]:
        if os.path.isfile(p + "/servers/_index.py"):
            _sys.path.remove(p)
            _sys.path.insert(0, p)


def _install(auto_figures=True, python_paths=(), single_run=False):
    global _auto_figures
    _auto_figures = bool(auto_figures)
    if not single_run:
        # Here, in the template, for every copy: 7 ms in every failed run
        # otherwise. A one-shot sandbox's only run pays it if it fails
        # (_register_source).
        import traceback  # noqa: F401
    _sys.meta_path.insert(0, _Finder)
    # The working directory is importable, as the script's folder is for
    # `python3 script.py`, but last: after the standard library, the
    # --python-path folders and the site folders (and after the generated
    # `servers` package, which _servers_first puts before everything), so
    # that a file the code writes never shadows a module of theirs. /tmp
    # comes after it: a session empties /output after each cell, so a
    # module that later cells import is written to /tmp.
    _sys.path.extend(_IMPORT_DIRS)
    _sys.path_hooks.insert(0, _cwd_finder_hook)
    _wrap_kills(single_run)
    _wrap_starts()
    _wrap_sysconf()
    # The --python-path folders (and the .pth entries inside them) come
    # before the system's site folders, as a virtualenv's site-packages
    # comes before the system's, and after the standard library.
    if python_paths:
        at = next((i for i, p in enumerate(_sys.path) if p.endswith("-packages")), len(_sys.path))
        _sys.path[at:at] = list(python_paths)
    _servers_first()
    mod = _types.ModuleType("airlock")
    mod.__doc__ = "Host functions of the airlock sandbox."
    for name in __all__:
        setattr(mod, name, globals()[name])
    # In the module only, not a builtin: `secret` is too common a name.
    mod.secret = secret
    _sys.modules["airlock"] = mod
    # Make the functions available to code that does not import them.
    for name in __all__:
        setattr(_builtins, name, globals()[name])
