"""The airlock guest runtime: the functions a guest's code can call, and the
runner that executes its code as a script.

This module is compiled into the library and executed once inside the
sandbox's template interpreter, before the snapshot. Every run is a fresh
copy of that interpreter, so nothing defined by one run's code survives into
the next. The host side of every call is untrusted-input-proof; this side
only has to be convenient and honest.
"""
import builtins as _builtins
import sys as _sys
import types as _types

import _airlock  # the native channel to the host (see guestpy.c)

__all__ = ["call_tool", "http_get", "http_post", "http_request"]

_EXCEPTIONS = {
    "permission": PermissionError,
    "invalid": ValueError,
    "runtime": RuntimeError,
    "os": OSError,
    "timeout": TimeoutError,
    "refused": ConnectionRefusedError,
    "reset": ConnectionResetError,
    "connection": ConnectionError,
}


def _request(msg):
    # Imported here, not at the top: the template's first copy is made
    # before the warm-up imports, so that a new sandbox's first run does not
    # wait for modules it may not need (json alone takes 15 ms here).
    import json as _json
    reply = _json.loads(_airlock.call(_json.dumps(msg, ensure_ascii=False).encode("utf-8")))
    if reply.get("ok"):
        return reply.get("result")
    exc = _EXCEPTIONS.get(reply.get("kind"), RuntimeError)
    raise exc(reply.get("error", "the host refused the request"))


def call_tool(name, *args, **kwargs):
    """Calls the host tool `name` with keyword arguments; returns its JSON
    result as Python values. A tool failure raises RuntimeError."""
    if args:
        raise TypeError(
            f"call_tool({name!r}, ...) takes keyword arguments only: "
            f"call_tool({name!r}, key=value, ...)")
    if not isinstance(name, str):
        raise TypeError("call_tool: the tool name must be a string")
    return _request({"op": "tool", "name": name, "args": kwargs})


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
    res = _request({"op": "http", "method": method.upper(), "url": url, "headers": hdrs,
                    "body_base64": _base64.b64encode(raw).decode("ascii")})
    data = _base64.b64decode(res.get("body_base64", ""))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data
    return {"status": res.get("status"), "headers": res.get("headers", {}), "body": text}


def http_get(url, headers=None):
    return http_request("GET", url, headers=headers)


def http_post(url, body="", content_type="application/json", headers=None):
    h = dict(headers or {})
    if not any(k.lower() == "content-type" for k in h):
        h["Content-Type"] = content_type
    return http_request("POST", url, headers=h, body=body)


_session_main = None


def _run(code, keep=False, last=False):
    """Runs code as the __main__ script. Returns (status, exit_code), where
    status is "ok", "error" or "memory". With keep (a session), every run
    shares one __main__, so names defined by one run are seen by the next.
    With last (the agent's run in a single-run copy), the run ends as a
    Python program does: after the threads that are not daemons."""
    global _session_main
    main = _session_main if keep else None
    if main is None:
        main = _types.ModuleType("__main__")
        main.__dict__.update({"__builtins__": _builtins, "call_tool": call_tool,
                              "http_get": http_get, "http_post": http_post,
                              "http_request": http_request})
        if keep:
            _session_main = main
    _sys.modules["__main__"] = main
    status, exit_code = "ok", 0
    try:
        compiled = compile(code, "<code>", "exec", dont_inherit=True)
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
        status = "ok" if exit_code == 0 else "error"
    except MemoryError:
        status, exit_code = "memory", 1
        try:
            _sys.stderr.write("MemoryError: the run exceeded its memory limit\n")
        except Exception:
            pass
    except BaseException:
        status, exit_code = "error", 1
        try:
            import traceback
            etype, value, tb = _sys.exc_info()
            # Drop the runner's own frame so the traceback starts at the code.
            traceback.print_exception(etype, value, tb.tb_next if tb else None)
        except MemoryError:
            status = "memory"
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
    for stream in (_sys.stdout, _sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return status, exit_code


def _after_fork():
    """Reseeds every per-process secret of a fresh copy. Modules not yet
    imported need nothing: they seed themselves when a run imports them."""
    random = _sys.modules.get("random")
    if random is not None:
        random.seed()
    tempfile = _sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile._name_sequence = None


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


def _install(python_paths=()):
    # The --python-path folders (and the .pth entries inside them) come
    # before the system's site folders, as a virtualenv's site-packages
    # comes before the system's, and after the standard library.
    if python_paths:
        at = next((i for i, p in enumerate(_sys.path) if p.endswith("-packages")), len(_sys.path))
        _sys.path[at:at] = list(python_paths)
    mod = _types.ModuleType("airlock")
    mod.__doc__ = "Host functions of the airlock sandbox."
    for name in __all__:
        setattr(mod, name, globals()[name])
    _sys.modules["airlock"] = mod
    # Make the functions available to code that does not import them.
    for name in __all__:
        setattr(_builtins, name, globals()[name])
