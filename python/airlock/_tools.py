"""Python callables as airlock host tools: their JSON Schema, and the wrapper
the C library calls (with the arguments' JSON text, for the result's)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# One encoder for every result: json.dumps with options builds a new one
# per call, which is most of a fast tool's cost.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_decode = json.JSONDecoder().decode

# The loop of the run in progress on this thread, when the run came from
# Sandbox.arun (the awaiting task's loop): an async tool runs there.
_local = threading.local()


class _RunTools:
    """The async tool calls of one arun in flight, so that cancelling the
    arun cancels the coroutine a tool awaits: the library cannot interrupt
    Python code, and the run would otherwise wait for the tool to end."""

    __slots__ = ("lock", "futures", "cancelled")

    def __init__(self):
        self.lock = threading.Lock()
        self.futures = set()
        self.cancelled = False

    def cancel(self):
        with self.lock:
            self.cancelled = True
            futures = list(self.futures)
        for f in futures:
            f.cancel()


def _set_caller_loop(loop, calls=None):
    _local.loop = loop
    _local.calls = calls


def _caller_loop():
    return getattr(_local, "loop", None)


_private = {"loop": None, "thread": None}
_private_lock = threading.Lock()


def _private_loop():
    """A loop of our own on a daemon thread, for async tools of runs that
    did not come from arun (a sync run, from any thread)."""
    with _private_lock:
        if _private["loop"] is None:
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="airlock-tools", daemon=True)
            t.start()
            _private["loop"], _private["thread"] = loop, t
        return _private["loop"]


def _schema_of(annotation) -> dict:
    """The JSON Schema of one annotation, as far as JSON can say it."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        s = _schema_of(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                s["description"] = extra
        return s
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        parts = [_schema_of(a) for a in non_none]
        if all(set(p) == {"type"} for p in parts):
            ts = []
            for p in parts:
                ts.extend(p["type"] if isinstance(p["type"], list) else [p["type"]])
            if len(non_none) != len(args):
                ts.append("null")
            return {"type": ts if len(ts) > 1 else ts[0]}
        return {"anyOf": parts + ([{"type": "null"}] if len(non_none) != len(args) else [])}
    if origin is typing.Literal:
        s = {"enum": list(args)}
        kinds = {type(a) for a in args}
        if len(kinds) == 1:
            s.update(_schema_of(kinds.pop()))
        return s
    if origin in (list, tuple, set, frozenset, Sequence, typing.List):
        s = {"type": "array"}
        if args and args[-1] is not Ellipsis and origin is not tuple:
            s["items"] = _schema_of(args[0])
        return s
    if origin in (dict, Mapping, typing.Dict):
        return {"type": "object"}
    if annotation is type(None):
        return {"type": "null"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return {"type": "string"}
    if annotation in (list, tuple, set, frozenset):
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
        return {"type": "object"}
    return {}


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the docstring before its argument section) and each
    argument's description from a Google-style "Args:" or a Sphinx-style
    ":param name:" section."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    params: dict[str, str] = {}
    for m in re.finditer(r"^:param\s+(?:\w+\s+)?(\w+):\s*(.+)$", doc, re.M):
        params[m.group(1)] = m.group(2).strip()
    lines = doc.splitlines()
    desc_lines = []
    i = 0
    while i < len(lines):
        if re.match(r"^(Args|Arguments|Parameters|Returns|Raises|Yields):\s*$", lines[i].strip()) \
                or lines[i].lstrip().startswith(":"):
            break
        desc_lines.append(lines[i])
        i += 1
    section = None
    current = None
    for line in lines[i:]:
        head = line.strip()
        if re.match(r"^(Args|Arguments|Parameters):\s*$", head):
            section, current = "args", None
            continue
        if re.match(r"^\w+:\s*$", head) and not line.startswith((" ", "\t")):
            section, current = None, None
            continue
        if section == "args" and head:
            m = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", head)
            if m and line.startswith((" ", "\t")) and (len(line) - len(line.lstrip())) <= 4:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current:
                params[current] = (params[current] + " " + head).strip()
    return "\n".join(desc_lines).strip(), params


def schema_from_callable(fn: Callable) -> dict:
    """The JSON Schema of fn's keyword arguments, from its type hints and
    docstring: one property per parameter (not *args, **kwargs), required
    when it has no default."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    _, docs = _doc_parts(fn.__doc__)
    props: dict[str, dict] = {}
    required: list[str] = []
    extra = False
    for name, p in sig.parameters.items():
        if p.kind is p.VAR_KEYWORD:
            extra = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            continue
        s = _schema_of(hints.get(name, p.annotation))
        if name in docs and "description" not in s:
            s["description"] = docs[name]
        if p.default is not p.empty:
            try:
                json.dumps(p.default)
                s["default"] = p.default
            except (TypeError, ValueError):
                pass
        else:
            required.append(name)
        props[name] = s
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


_PLAIN = frozenset({int, float, str, bool, list, dict, type(None), tuple})


class Tool:
    """A host tool: a Python callable, sync or ``async def``, with its name,
    description, JSON Schema and approval mode.

    ``name`` defaults to the function's name, ``description`` to its
    docstring's first part, ``parameters`` to the schema of its type hints
    and docstring (``schema_from_callable``).
    """

    __slots__ = ("func", "name", "description", "parameters", "approval_mode", "_is_async",
                 "entry")

    def __init__(self, func: Callable, *, name: str | None = None, description: str | None = None,
                 parameters: Mapping | None = None, approval_mode: str = "never_require"):
        if not callable(func):
            raise TypeError(f"a tool must be callable, not {type(func).__name__}")
        self.func = func
        self.name = name or getattr(func, "__name__", None) or type(func).__name__
        if not _NAME_RE.match(self.name) or self.name == "execute_code":
            raise ValueError(f"tool name {self.name!r} is not valid: 1 to 64 of A-Z a-z 0-9 _ . -,"
                             " and not execute_code")
        if description is None:
            description, _ = _doc_parts(getattr(func, "__doc__", None))
        self.description = description
        self.parameters = dict(parameters) if parameters is not None else schema_from_callable(func)
        if approval_mode not in ("never_require", "always_require"):
            raise ValueError(f"approval_mode must be 'never_require' or 'always_require', not "
                             f"{approval_mode!r}")
        self.approval_mode = approval_mode
        target = func.__call__ if not inspect.isroutine(func) and hasattr(func, "__call__") else func
        self._is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(target)
        # One callable for the library per tool, for good: the library's
        # cache tells configurations apart by it, so the same tool in a new
        # configuration keeps its cached sandbox.
        self.entry = self._invoke

    def __repr__(self):
        return f"Tool({self.name!r}, approval_mode={self.approval_mode!r})"

    def _invoke(self, args_json: str) -> str:
        """What the C library calls, on the run's thread, with the GIL:
        the validated arguments' JSON in, the result's JSON out. A raised
        exception becomes the tool's failure (the guest's RuntimeError)."""
        kwargs = _decode(args_json)
        if self._is_async:
            result = self._await(self.func(**kwargs))
        else:
            result = self.func(**kwargs)
            if type(result) not in _PLAIN and inspect.isawaitable(result):
                result = self._await(result)
        return _encode(result)

    @staticmethod
    def _await(coro):
        loop = _caller_loop()
        if loop is None or loop.is_closed():
            loop = _private_loop()
        if not asyncio.iscoroutine(coro):
            async def wrap(aw=coro):
                return await aw
            coro = wrap()
        calls = getattr(_local, "calls", None)
        if calls is None:
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        with calls.lock:
            if calls.cancelled:
                coro.close()
                raise RuntimeError("the run was cancelled")
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
            calls.futures.add(fut)
        try:
            return fut.result()
        finally:
            with calls.lock:
                calls.futures.discard(fut)


def tool(func: Callable | None = None, **options):
    """Decorator: ``@tool`` or ``@tool(name=..., description=..., parameters=...,
    approval_mode=...)`` makes a Tool of a function."""
    if func is None:
        return lambda f: Tool(f, **options)
    return Tool(func, **options)


def as_tool(obj) -> Tool:
    if isinstance(obj, Tool):
        return obj
    return Tool(obj)
