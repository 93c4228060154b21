"""airlock: run an AI agent's Python code in the airlock sandbox.

    import airlock

    def get_weather(city: str) -> dict:
        "The weather in a city."
        return {"city": city, "temp_c": 21}

    with airlock.Sandbox(workspace="data", tools=[get_weather]) as sb:
        r = sb.run('print(call_tool("get_weather", city="Oslo"))')
        print(r.status, r.stdout)

The package is a CPython extension over the C library (``airlock._airlock``
over include/airlock.h) and this layer. A Sandbox is configured like the
Hyperlight ``execute_code`` tool of Microsoft Agent Framework: a workspace,
file mounts, allowed domains with methods, tools, an approval mode, limits
and preloads, changed at run time with add/remove/clear and read back
normalised. Every change builds a new configuration of the C library; the
library's cache of sandboxes (keyed by the configuration's fingerprint)
starts a sandbox for a configuration it has not seen, and keeps the last few.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from . import _airlock
from ._airlock import Error, InputError, RunError, SandboxError
from ._tools import Tool, _RunTools, _set_caller_loop, as_tool, schema_from_callable, tool

__all__ = [
    "AllowedDomain", "Error", "File", "FileMount", "InputChange", "InputError", "Refusal",
    "Result", "RunError", "Sandbox", "SandboxError", "Session", "Tool", "limit_options",
    "schema_from_callable", "tool",
]
__version__ = _airlock.VERSION
LIBRARY_VERSION = _airlock.LIBRARY_VERSION

APPROVAL_MODES = ("never_require", "always_require")
# The configurations a Sandbox keeps for the workspace= of its calls.
_MAX_WORKSPACES = 1024


class FileMount(NamedTuple):
    """A file or folder of the host staged under /input."""
    host_path: Path
    mount_path: str


class AllowedDomain(NamedTuple):
    """An allow-list entry: a target, and its HTTP methods (None: all)."""
    target: str
    methods: tuple[str, ...] | None = None


class File(NamedTuple):
    path: str         # "/output/rel/name"
    media_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


class Refusal(NamedTuple):
    path: str
    reason: str


class InputChange(NamedTuple):
    path: str                 # "/input/rel/name"
    change: str               # "created", "modified" or "deleted"
    media_type: str | None
    data: bytes | None


def limit_options() -> list[tuple[str, str, str]]:
    """The limits a Sandbox takes in ``limits={...}``: (name, unit, help),
    the names of the command line's --NAME options."""
    return _airlock.limit_options()


# ---- normalisation, as the reference does it --------------------------------

def _normalize_mount_path(mount_path: str) -> str:
    """The path under /input of a sandbox path: a relative one is taken
    under /input (the reference's shorthand, "input/x" too); an absolute one
    must be /input/... (docs/python.md): anything else is ValueError, never
    moved under /input in silence."""
    raw = str(mount_path).strip().replace("\\", "/")
    if not raw:
        raise ValueError("mount_path must not be empty.")
    parts = [p for p in PurePosixPath(raw).parts if p not in {"", "/", "."}]
    if raw.startswith("/") and (not parts or parts[0] != "input"):
        raise ValueError(f"mount path {mount_path!r} is outside /input: a file mount's sandbox "
                         "path is /input/... or relative to /input")
    if parts and parts[0] == "input":
        parts = parts[1:]
    if any(p == ".." for p in parts):
        raise ValueError("mount_path must stay within /input.")
    if not parts:
        raise ValueError("mount_path must point to a concrete path under /input.")
    return "/".join(parts)


def _resolve_existing(value) -> Path:
    # strict: a missing path is FileNotFoundError naming it.
    return Path(value).expanduser().resolve(strict=True)


def _mount_of(item) -> tuple[str, Path]:
    """(normalised sandbox path, host path) of one mount: a string
    ("path" for the same relative path on both sides, as the reference's
    shorthand, or "host:/input/path" as the command line's -m), or a
    (host, sandbox) pair, or a FileMount."""
    if isinstance(item, str):
        host, sep, path = item.rpartition(":")
        if not sep:
            host = path = item
    elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (str, os.PathLike)) \
            and isinstance(item[1], str):
        host, path = item
    else:
        raise TypeError("a file mount is a string ('path' or 'host:/input/path'), a (host, "
                        f"sandbox) pair or a FileMount, not {item!r}")
    return _normalize_mount_path(path), _resolve_existing(host)


def _is_single_mount(x) -> bool:
    return isinstance(x, str) or (isinstance(x, tuple) and len(x) == 2 and
                                  isinstance(x[1], str) and isinstance(x[0], (str, os.PathLike)))


def _normalize_domain(target: str) -> str:
    """Trim, lower-case the scheme and host, drop a trailing '/'; a URL
    keeps its scheme and path (the C library allows exactly those)."""
    candidate = str(target).strip()
    if not candidate:
        raise ValueError("Allowed domain entries must not be empty.")
    if "://" in candidate:
        u = urlsplit(candidate)
        if not u.netloc:
            raise ValueError(f"Could not normalize allowed domain entry: {target!r}.")
        normalized = f"{u.scheme.lower()}://{u.netloc.lower()}{u.path}".rstrip("/")
    else:
        normalized = candidate.rstrip("/").lower()
    if not normalized:
        raise ValueError(f"Could not normalize allowed domain entry: {target!r}.")
    return normalized


def _normalize_methods(methods) -> tuple[str, ...] | None:
    if methods is None:
        return None
    items = [methods] if isinstance(methods, str) else list(methods)
    out = set()
    for m in items:
        m = str(m).strip().upper()
        if not m:
            raise ValueError("HTTP method entries must not be empty.")
        out.add(m)
    if not out:
        raise ValueError("Allowed domain methods must not be empty when provided.")
    return tuple(sorted(out))


def _domain_of(item) -> AllowedDomain:
    if isinstance(item, AllowedDomain):
        d = AllowedDomain(_normalize_domain(item.target), _normalize_methods(item.methods))
    elif isinstance(item, str):
        d = AllowedDomain(_normalize_domain(item), None)
    elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        d = AllowedDomain(_normalize_domain(item[0]), _normalize_methods(item[1]))
    else:
        raise TypeError("an allowed domain is a string, a (target, methods) pair or an "
                        f"AllowedDomain, not {item!r}")
    return _library_domain(d)


def _library_domain(d: AllowedDomain) -> AllowedDomain:
    """The entry as the C library normalises it (airlock_config_to_json of a
    configuration that holds it alone): its key is the library's, so that
    two spellings the library takes for one target are one entry here too.
    A target or method the library refuses is its InputError, now."""
    import json
    probe = _airlock.Config()
    probe.allow(d.target, ",".join(d.methods) if d.methods else None)
    e = json.loads(probe.to_json())["allowed_domains"][0]
    return AllowedDomain(e["target"], tuple(e["methods"]) if e["methods"] is not None else None)


def _domain_key(domain: str) -> str:
    """The key of an entry, as add stores it: the library's normal form
    (default ports dropped, IPv6 literals bracketed as the library writes
    them). A target the library refuses was never added: its own normal
    form then, for the KeyError."""
    target = _normalize_domain(domain)
    try:
        return _library_domain(AllowedDomain(target, None)).target
    except (InputError, ValueError):
        return target


def _is_single_domain(x) -> bool:
    return isinstance(x, (str, AllowedDomain)) or (
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) and
        (isinstance(x[1], str) or x[1] is None or isinstance(x[1], Sequence)))


# ---- results ----------------------------------------------------------------

def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class Result:
    """What a run did: as the C library's airlock_result. ``to_dict()``,
    ``usage`` and ``contents`` come from the library's own result JSON
    (airlock_result_to_json, docs/design.md), so they never drift from it."""

    __slots__ = ("success", "status", "exit_code", "stdout_bytes", "stderr_bytes",
                 "stdout_truncated", "stderr_truncated", "files", "refused", "input_changes",
                 "error_message", "duration_ms", "cell_state", "_json", "_dict")

    def __init__(self, d: dict):
        self.success: bool = d["success"]
        self.status: str = d["status"]
        self.exit_code: int = d["exit_code"]
        self.stdout_bytes: bytes = d["stdout"]
        self.stderr_bytes: bytes = d["stderr"]
        self.stdout_truncated: bool = d["stdout_truncated"]
        self.stderr_truncated: bool = d["stderr_truncated"]
        self.files = [File(*f) for f in d["files"]]
        self.refused = [Refusal(*r) for r in d["refused"]]
        self.input_changes = [InputChange(*c) for c in d["input_changes"]]
        self.error_message: str | None = d["error_message"]
        self.duration_ms: float = d["duration_ms"]
        #: "kept" or "rolled_back" for a session's cell, None for a run.
        self.cell_state: str | None = None if d["cell_state"] == "none" else d["cell_state"]
        self._json: str = d["json"]
        self._dict: dict | None = None

    @property
    def stdout(self) -> str:
        return _text(self.stdout_bytes)

    @property
    def stderr(self) -> str:
        return _text(self.stderr_bytes)

    @property
    def duration(self) -> float:
        """Seconds."""
        return self.duration_ms / 1000.0

    def _library_dict(self) -> dict:
        if self._dict is None:
            import json
            self._dict = json.loads(self._json)
        return self._dict

    @property
    def usage(self) -> dict:
        """What the run used: the result JSON's "usage" (wall_ms, cpu_ms,
        cpu_source, peak_private_bytes, memory_source, output_bytes,
        tool_calls, http_requests, ...)."""
        import copy
        return copy.deepcopy(self._library_dict()["usage"])

    @property
    def contents(self) -> list[dict]:
        """The ordered items an agent framework hands to the model, as the
        result JSON's "contents": stdout text, the files (and a writable
        /input's changes), then stderr on success or one error item. A data
        item carries its bytes as "data" (the JSON's "data_base64" decoded)."""
        out: list[dict] = []
        for c in self._library_dict()["contents"]:
            c = dict(c)
            if "data_base64" in c:
                c["data"] = base64.b64decode(c.pop("data_base64"))
            out.append(c)
        return out

    def to_dict(self) -> dict:
        """The result JSON of docs/design.md (files as base64): the library's
        own (airlock_result_to_json), parsed."""
        import copy
        return copy.deepcopy(self._library_dict())

    def __repr__(self):
        return (f"Result(status={self.status!r}, exit_code={self.exit_code}, "
                f"stdout={self.stdout[:60]!r}, files={[f.path for f in self.files]!r})")


# ---- the sandbox --------------------------------------------------------------

class Sandbox:
    """A configured sandbox: ``run(code)``, ``await arun(code)``, ``session()``.

    workspace: a folder staged as /input (read-only in the guest).
    mounts: file mounts under /input: "path" (the same relative path on the
        host and under /input, as the reference's shorthand), "host:/input/path"
        (as the command line's -m), a (host, sandbox) pair or a FileMount.
    allowed_domains: outbound HTTP: "host", "https://host/path", or
        (target, methods) with methods a string or a list ("GET", ["GET", "POST"]).
    tools: Python callables (sync or async def) or Tool objects.
    approval_mode: "never_require" or "always_require" (the execute_code
        tool's; any tool's "always_require" makes it so too).
    limits: {name: value} with the command line's names and units
        (``limit_options()``): {"timeout": 10, "memory": 256}.
    preloads: modules imported once into the template ("numpy", "pandas").
    python_path: folders of Python packages made importable in the guest.
    tools_files: JSON tools files (command tools), as ``airlock run -t``.
    servers: MCP servers whose tools the code calls as typed Python (``from
        servers import NAME``; docs/code-mode.md): the path of a servers file
        (``{"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"url",
        "headers"}}}``, as Claude Desktop, Cursor and VS Code write it), a dict
        in that format, or a list of them; checked now, with the command line's
        errors (``--servers FILE``) as InputError. The servers start on the
        host when a sandbox is built for the configuration, and stop with it.
    approve_server_call: ``fn(tool, args) -> bool``, asked (on the run's
        thread, while the run waits) for each call of an upstream tool that
        needs approval (by its annotations or the servers file); without it
        such a call raises ``servers.ApprovalRequired`` in the guest.

    Thread-safe: runs from many threads at once, and configuration changes
    between them (a run uses the configuration it started with).

    Many workspaces, one template: ``run``, ``arun`` and ``session`` take
    ``workspace=`` (a folder), which replaces the sandbox's own workspace for
    that call only. Calls with different workspaces share the sandbox's
    template (the same interpreter, preloads and settings); each sees only
    its own folder under /input, staged once per version of its files (a
    server with a folder per user or per agent). At most 1,024 folders'
    configurations are kept, the least recently used going first.
    """

    def __init__(self, *, workspace: str | os.PathLike | None = None,
                 mounts: Any = None, allowed_domains: Any = None,
                 tools: Any = None, approval_mode: str | None = None,
                 limits: Mapping[str, Any] | None = None, preloads: Iterable[str] = (),
                 python_path: Iterable[str | os.PathLike] = (),
                 tools_files: Iterable[str | os.PathLike] = (),
                 auto_figures: bool = True, input_writable: bool = False,
                 max_sandboxes: int = 2, servers: Any = None,
                 approve_server_call: Callable[[str, dict], bool] | None = None):
        self._lock = threading.RLock()
        self._workspace = self._check_workspace(workspace)
        self._mounts: dict[str, Path] = {}
        self._domains: dict[str, AllowedDomain] = {}
        self._tools: dict[str, Tool] = {}
        self._retired: dict[int, Tool] = {}  # every tool a configuration held (see _config)
        if approval_mode is None:
            approval_mode = "never_require"
        if approval_mode not in APPROVAL_MODES:
            raise ValueError(f"approval_mode must be one of {APPROVAL_MODES}, not "
                             f"{approval_mode!r}")
        self._approval = approval_mode
        self._limits: dict[str, str] = {}
        self._preloads = [str(m) for m in preloads]
        self._python_path = [str(Path(p)) for p in python_path]
        self._tools_files = [str(Path(p).resolve()) for p in tools_files]
        self._auto_figures = bool(auto_figures)
        self._input_writable = bool(input_writable)
        self._servers: list[tuple[str, str]] = []  # ("file", path) or ("json", text)
        if approve_server_call is not None and not callable(approve_server_call):
            raise TypeError("approve_server_call must be callable: fn(tool, args) -> bool")
        self._approver = None
        if approve_server_call is not None:
            def approve(tool, args_json, fn=approve_server_call):
                import json
                try:
                    return bool(fn(tool, json.loads(args_json)))
                except Exception as e:
                    # Refused, and said in the package's terms: the C
                    # trampoline would print an anonymous "Exception
                    # ignored in <function approve>".
                    import warnings
                    warnings.warn(f"approve_server_call raised {type(e).__name__}: {e}; "
                                  f"the call of {tool} is refused", RuntimeWarning,
                                  stacklevel=2)
                    return False
            # Made once and held as long as the sandbox: a cached sandbox's
            # copy of a configuration points to it.
            self._approver = approve
        self._cfg = None
        # Configurations for the workspace= of a call, by folder: rebuilt
        # with self._cfg (the settings changed), at most _MAX_WORKSPACES.
        self._ws_cfgs: dict[Path, Any] = {}
        self._cache = _airlock.Cache(max_sandboxes=max_sandboxes)
        if limits:
            self.set_limits(limits)
        if mounts is not None:
            self.add_file_mounts(mounts)
        if allowed_domains is not None:
            self.add_allowed_domains(allowed_domains)
        if tools is not None:
            self.add_tools(tools)
        if servers is not None:
            self.add_servers(servers)
        self._config()  # every value checked by the library now, not at the first run

    # -- lifecycle

    def close(self) -> None:
        """Stops the sandboxes (refused while a run or a session is live)."""
        self._cache.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- configuration

    @staticmethod
    def _check_workspace(workspace) -> Path | None:
        if workspace is None:
            return None
        p = _resolve_existing(workspace)
        if not p.is_dir():
            raise ValueError(f"workspace {str(workspace)!r} is not a folder: workspace= "
                             "names a folder to stage as /input (a file goes in mounts=)")
        return p

    @property
    def workspace(self) -> Path | None:
        return self._workspace

    def _changed(self):
        self._cfg = None

    def add_file_mounts(self, file_mounts) -> None:
        """Adds one mount or a list of them; a mount at an existing sandbox
        path replaces it in its place. All or nothing."""
        items = [file_mounts] if _is_single_mount(file_mounts) else list(file_mounts)
        normalized = [_mount_of(m) for m in items]
        with self._lock:
            old = dict(self._mounts)
            for path, host in normalized:
                # As the reference: a mount at an existing path is replaced
                # where it stands (a dict keeps a key's place on assignment).
                self._mounts[path] = host
            self._changed()
            try:
                self._config()
            except BaseException:
                self._mounts = old
                self._changed()
                raise

    add_file_mount = add_file_mounts

    def get_file_mounts(self) -> list[FileMount]:
        with self._lock:
            return [FileMount(h, f"/input/{p}") for p, h in self._mounts.items()]

    def remove_file_mount(self, mount_path: str) -> None:
        path = _normalize_mount_path(mount_path)
        with self._lock:
            if path not in self._mounts:
                raise KeyError(f"No file mount exists for {mount_path!r}.")
            del self._mounts[path]
            self._changed()

    def clear_file_mounts(self) -> None:
        with self._lock:
            self._mounts.clear()
            self._changed()

    def add_allowed_domains(self, domains) -> None:
        """Adds one entry or a list of them; an entry for an existing target
        replaces its methods."""
        items = [domains] if _is_single_domain(domains) else list(domains)
        normalized = [_domain_of(d) for d in items]
        with self._lock:
            old = dict(self._domains)
            for d in normalized:
                self._domains[d.target] = d
            self._changed()
            try:
                self._config()
            except BaseException:
                self._domains = old
                self._changed()
                raise

    add_allowed_domain = add_allowed_domains

    def get_allowed_domains(self) -> list[AllowedDomain]:
        with self._lock:
            return sorted(self._domains.values(), key=lambda d: d.target)

    def remove_allowed_domain(self, domain: str) -> None:
        """Removes the entry for domain, in any spelling add took for it."""
        target = _domain_key(domain)
        with self._lock:
            if target not in self._domains:
                raise KeyError(f"No allowed domain exists for {domain!r}.")
            del self._domains[target]
            self._changed()

    def clear_allowed_domains(self) -> None:
        with self._lock:
            self._domains.clear()
            self._changed()

    def add_tools(self, tools) -> None:
        """Adds a callable, a Tool, or a list of them; a tool whose name
        exists replaces it (and moves last)."""
        items = [tools] if callable(tools) or isinstance(tools, Tool) else list(tools)
        new = [as_tool(t) for t in items]
        with self._lock:
            old = dict(self._tools)
            for t in new:
                self._tools.pop(t.name, None)
                self._tools[t.name] = t
            self._changed()
            try:
                self._config()
            except BaseException:
                self._tools = old
                self._changed()
                raise

    add_tool = add_tools

    def get_tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    def remove_tool(self, name: str) -> None:
        with self._lock:
            if name not in self._tools:
                raise KeyError(f"No managed tool named {name!r} is registered.")
            del self._tools[name]
            self._changed()

    def clear_tools(self) -> None:
        with self._lock:
            self._tools.clear()
            self._changed()

    def add_servers(self, servers) -> None:
        """Adds MCP servers: a servers file's path, a dict in that format, or
        a list of them. All or nothing: a mistake is the library's
        InputError naming the server and the key (as ``--servers``), and
        nothing is added."""
        if isinstance(servers, (str, os.PathLike, Mapping)):
            items = [servers]
        elif isinstance(servers, Iterable):
            items = list(servers)
        else:
            raise TypeError("servers is a servers file's path, a dict "
                            "{\"mcpServers\": {...}}, or a list of them, not "
                            f"{type(servers).__name__}")
        new: list[tuple[str, str]] = []
        for s in items:
            if isinstance(s, (str, os.PathLike)):
                # Resolved now: a later chdir does not change which file.
                new.append(("file", str(Path(s).expanduser().absolute())))
            elif isinstance(s, Mapping):
                new.append(("json", _json_dumps(s)))  # a copy: a later change of the dict is not seen
            else:
                raise TypeError("a servers entry is a servers file's path or a dict "
                                f"{{\"mcpServers\": {{...}}}}, not {type(s).__name__}")
        with self._lock:
            old = list(self._servers)
            self._servers.extend(new)
            self._changed()
            try:
                self._config()
            except BaseException:
                self._servers = old
                self._changed()
                raise

    def clear_servers(self) -> None:
        with self._lock:
            self._servers.clear()
            self._changed()

    @property
    def approval_mode(self) -> str:
        """The execute_code tool's: always_require when the base mode or any
        tool requires approval (airlock_config_effective_approval)."""
        return self._config().effective_approval()

    @approval_mode.setter
    def approval_mode(self, mode: str) -> None:
        if mode not in APPROVAL_MODES:
            raise ValueError(f"approval_mode must be one of {APPROVAL_MODES}, not {mode!r}")
        with self._lock:
            self._approval = mode
            self._changed()

    def set_limits(self, limits: Mapping[str, Any]) -> None:
        """Sets limits by the command line's names and units; all or nothing."""
        text = {str(k): (repr(v) if isinstance(v, float) else str(v)) for k, v in limits.items()}
        probe = _airlock.Config()
        probe.set_limits({**self._limits, **text})  # InputError naming --NAME and the range
        with self._lock:
            self._limits.update(text)
            self._changed()

    def settings(self) -> dict:
        """The configuration as the C library holds it (airlock_config_to_json):
        workspace, mounts, allowed_domains, tools, preloads, python_paths,
        limits, approval_mode, auto_figures, input_writable."""
        import json
        return json.loads(self._config().to_json())

    def get_limits(self) -> dict[str, str]:
        """Every limit, as text in its unit ("30", "512")."""
        return self._config().get_limits()

    def add_preload(self, module: str) -> None:
        with self._lock:
            if module not in self._preloads:
                self._preloads.append(module)
            self._changed()
            self._config()

    def get_preloads(self) -> list[str]:
        return list(self._preloads)

    def _config(self, workspace=None):
        """The C library's configuration for the current settings, built once
        per change. A run holds the one it started with; the callables of a
        replaced configuration stay referenced (self._retired) as long as the
        sandbox, because a cached sandbox keeps a copy that points to them.
        With workspace, the same settings with that folder as /input."""
        if workspace is not None:
            return self._workspace_config(workspace)
        with self._lock:
            if self._cfg is not None:
                return self._cfg
            self._ws_cfgs.clear()
            c = self._build_config(self._workspace)
            self._cfg = c
            return c

    def _workspace_config(self, workspace):
        ws = self._check_workspace(workspace)
        with self._lock:
            if self._cfg is None:
                self._config()
            c = self._ws_cfgs.pop(ws, None)
            if c is None:
                c = self._build_config(ws)
                while len(self._ws_cfgs) >= _MAX_WORKSPACES:
                    self._ws_cfgs.pop(next(iter(self._ws_cfgs)))
            self._ws_cfgs[ws] = c  # the most recently used last
            return c

    def _build_config(self, workspace):
        with self._lock:
            c = _airlock.Config()
            if workspace is not None:
                c.set_workspace(str(workspace))
            for path, host in self._mounts.items():
                c.add_mount(str(host), path)
            for d in self._domains.values():
                c.allow(d.target, ",".join(d.methods) if d.methods else None)
            for f in self._tools_files:
                c.load_tools(f)
            for t in self._tools.values():
                self._retired[id(t)] = t
                c.add_tool(t.name, t.description or "", _json_dumps(t.parameters),
                           t.approval_mode == "always_require", t.entry)
            if self._limits:
                c.set_limits(self._limits)
            for m in self._preloads:
                c.add_preload(m)
            for kind, s in self._servers:
                if kind == "json":
                    c.add_servers_json(s)
                else:
                    c.add_servers_file(s)
            if self._approver is not None:
                c.set_tool_approver(self._approver)
            for p in self._python_path:
                c.add_python_path(p)
            c.set_flags(approval_always=self._approval == "always_require",
                        auto_figures=self._auto_figures, input_writable=self._input_writable)
            return c

    # -- runs

    def run(self, code: str, *, cancel_fd: int = -1,
            workspace: str | os.PathLike | None = None, traceparent: str | None = None,
            tracestate: str | None = None, baggage: str | None = None) -> Result:
        """Runs code in a fresh copy of the sandbox's template; the GIL is
        released meanwhile. A failing run is a Result with success False;
        an exception only when nothing could run (InputError, SandboxError,
        RunError). workspace: this run's /input instead of the sandbox's
        (see the class). traceparent, tracestate, baggage: the caller's W3C
        trace context, the parent of the run's span when tracing is
        configured by the OTEL_* environment variables (docs/tracing.md)."""
        _check_code(code)
        cfg = self._config(workspace)
        return Result(self._cache.run(cfg, code, cancel_fd=cancel_fd, traceparent=traceparent,
                                      tracestate=tracestate, baggage=baggage))

    async def arun(self, code: str, *, workspace: str | os.PathLike | None = None) -> Result:
        """``run`` for asyncio: in a thread, an ``async def`` tool running on
        this task's loop. Cancelling the awaiting task stops the run (it ends
        as "killed") and then raises CancelledError."""
        _check_code(code)
        loop = asyncio.get_running_loop()
        cfg = self._config(workspace)
        return await _arun(loop, lambda fd: self._cache.run(cfg, code, cancel_fd=fd))

    def session(self, *, workspace: str | os.PathLike | None = None) -> Session:
        """A session (a notebook-style kernel) in the sandbox for the current
        configuration; use it as a context manager or close() it. It keeps
        the workspace (this one's, or workspace=) as it was when it opened."""
        cfg = self._config(workspace)
        return Session(self._cache.session(cfg))

    # -- descriptions

    def describe(self) -> dict:
        """The execute_code tool as the C library describes the running
        sandbox (airlock_sandbox_describe_json): name, description,
        input_schema, instructions, approval_mode, packages, ..."""
        import json
        return json.loads(self._cache.describe_json(self._config()))

    @property
    def description(self) -> str:
        """The execute_code tool's description from the configuration
        (airlock_describe)."""
        return self._config().describe()[0]

    def build_instructions(self) -> str:
        """The agent instructions from the configuration (airlock_describe)."""
        return self._config().describe()[1]

    def tool_definition(self) -> dict:
        """{"name", "description", "input_schema", "instructions",
        "approval_mode"}: what to hand a model, from ``describe()`` (the
        running sandbox's, so the description names its notable packages
        as the command line's does)."""
        d = self.describe()
        return {k: d[k] for k in ("name", "description", "input_schema", "instructions",
                                  "approval_mode")}


def _check_code(code) -> None:
    """A run's code is Python source as a string (bytes in UTF-8 pass too);
    anything else is TypeError in the package's terms rather than the
    extension's "a bytes-like object is required"."""
    if not isinstance(code, (str, bytes)):
        raise TypeError(f"run(code): code must be a string of Python source, not "
                        f"{type(code).__name__}")


def _json_dumps(v) -> str:
    import json
    return json.dumps(v, ensure_ascii=False)


_pool = None
_pool_lock = threading.Lock()


def _executor():
    """The threads of arun: their own pool, not the loop's default one, and
    a large one, so that an async tool that awaits another arun never waits
    for a thread that runs its caller."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="airlock-run")
        return _pool


async def _arun(loop, call):
    """Runs call(cancel_fd) in a thread whose async tools use loop; a
    cancellation of the awaiting task writes to the eventfd (the library
    stops the run), waits for the run to end, and re-raises."""
    efd = os.eventfd(0, os.EFD_CLOEXEC)
    calls = _RunTools()

    def work():
        _set_caller_loop(loop, calls)
        try:
            return call(efd)
        finally:
            _set_caller_loop(None)

    fut = loop.run_in_executor(_executor(), work)
    try:
        try:
            d = await asyncio.shield(fut)
        except asyncio.CancelledError:
            os.eventfd_write(efd, 1)
            # An async tool the run awaits is cancelled too: the run cannot
            # end while its thread waits for the tool.
            calls.cancel()
            # The run ends promptly once cancelled; its async tools may need
            # this loop meanwhile, so wait on it rather than block it.
            while not fut.done():
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    continue
                except BaseException:
                    break
            raise
        return Result(d)
    finally:
        if fut.done():
            os.close(efd)
        else:
            fut.add_done_callback(lambda _f: os.close(efd))


class Session:
    """A session: cells share interpreter state; a failing cell rolls back
    (Result.cell_state "kept" or "rolled_back"). One cell at a time."""

    def __init__(self, native):
        self._s = native

    def run(self, code: str, *, cancel_fd: int = -1, traceparent: str | None = None,
            tracestate: str | None = None, baggage: str | None = None) -> Result:
        _check_code(code)
        return Result(self._s.run(code, cancel_fd=cancel_fd, traceparent=traceparent,
                                  tracestate=tracestate, baggage=baggage))

    async def arun(self, code: str) -> Result:
        _check_code(code)
        loop = asyncio.get_running_loop()
        return await _arun(loop, lambda fd: self._s.run(code, cancel_fd=fd))

    @property
    def alive(self) -> bool:
        return self._s.alive()

    def memory(self) -> int:
        """Bytes the session holds of its own (airlock_session_memory)."""
        return self._s.memory()

    def close(self) -> None:
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
