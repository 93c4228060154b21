# The Python side of `airlock kernel` (src/kernel/kernel.c), loaded into the
# session once, before its first cell, as the module _airlock_kernel. Each
# notebook cell runs as a one-line session cell that calls run() here with
# the notebook's code: run() executes it in the session's __main__ as
# IPython does (the value of a final expression becomes the execute_result),
# and reports what a notebook shows beside the streams as records on the
# real stdout, one line each:
#     "\x1eairlock-kernel:" JSON "\n"
# which the kernel takes out of the stream (every other byte is the cell's
# stdout). A cell that raised reports its error as a record and ends with
# SystemExit(1), so that the session rolls it back without printing a
# second traceback. The records are the kernel's display protocol only:
# MCP sessions and `airlock repl` keep design.md's (a final expression's
# repr on stdout, figures as files).
import base64 as _base64
import builtins as _builtins
import json as _json
import sys as _sys
import traceback as _traceback

_REC = "\x1eairlock-kernel:"
# The longest text/plain of a value, as a session's repr is capped.
_PLAIN_MAX = 20000


class StdinNotImplementedError(NotImplementedError):
    """input() or getpass in a cell whose execute_request had allow_stdin
    false: the front-end cannot answer input requests (IPython's class of
    the same name, which ipykernel raises)."""


def _emit(kind, **fields):
    fields["type"] = kind
    line = _REC + _json.dumps(fields, ensure_ascii=True, default=str) + "\n"
    # What the cell printed before the record comes first.
    for s in (_sys.stdout, _sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    out = _sys.__stdout__
    out.write(line)
    out.flush()


def _main():
    return _sys.modules["__main__"].__dict__


def _plain(value):
    try:
        text = repr(value)
    except Exception as e:
        text = f"<repr failed: {type(e).__name__}: {e}>"
    if len(text) > _PLAIN_MAX:
        text = text[:_PLAIN_MAX] + f"... ({len(text) - _PLAIN_MAX} more characters not shown)"
    return text


_REPRS = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
          ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
          ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
          ("_repr_json_", "application/json"), ("_repr_javascript_", "application/javascript"))


def _figure_png(fig):
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _pyplot_figure(fig):
    helpers = _sys.modules.get("matplotlib._pylab_helpers")
    return helpers is not None and any(
        m.canvas.figure is fig for m in helpers.Gcf.get_all_fig_managers())


def bundle(value, result=False):
    """The display protocol's mime bundle of value: (data, metadata). With
    result (a cell's final expression), a figure of pyplot's is text only:
    the session returns it with the cell's other figures, so it is shown
    once, as a notebook's inline backend shows it."""
    data, metadata = {}, {}
    figure = _sys.modules.get("matplotlib.figure")
    if figure is not None and isinstance(value, figure.Figure):
        if not (result and _pyplot_figure(value)
                and not getattr(value, "_airlock_returned", False)):
            # savefig marks the figure: not returned again after the cell.
            data["image/png"] = _base64.b64encode(_figure_png(value)).decode()
        data["text/plain"] = _plain(value)
        return data, metadata
    mb = getattr(type(value), "_repr_mimebundle_", None)
    if callable(mb):
        try:
            got = value._repr_mimebundle_(include=None, exclude=None)
            if isinstance(got, tuple):
                got, md = got
                metadata.update(md or {})
            for k, v in (got or {}).items():
                if isinstance(v, (bytes, bytearray)):
                    v = _base64.b64encode(v).decode()
                data[k] = v
        except Exception:
            pass
    for method, mime in _REPRS:
        if mime in data or not callable(getattr(type(value), method, None)):
            continue
        try:
            got = getattr(value, method)()
        except Exception:
            continue
        if isinstance(got, tuple) and len(got) == 2:
            got, md = got
            metadata[mime] = md
        if got is None:
            continue
        if isinstance(got, (bytes, bytearray)):
            got = _base64.b64encode(got).decode()
        data[mime] = got
    if "text/plain" not in data:
        data["text/plain"] = _plain(value)
    return data, metadata


def display(*objs, raw=False, clear=False):
    """Shows each object in the notebook as a display_data, with its rich
    representations (_repr_html_, _repr_png_... or a matplotlib figure as
    PNG). raw: the object is a mime bundle already ({"text/html": ...})."""
    if clear:
        clear_output(wait=True)
    for obj in objs:
        if raw:
            _emit("display", data=dict(obj), metadata={})
        else:
            data, metadata = bundle(obj)
            _emit("display", data=data, metadata=metadata)


def clear_output(wait=False):
    """Clears the cell's output in the notebook (with wait, when the next
    output arrives)."""
    _emit("clear_output", wait=bool(wait))


def _refuse_input(prompt=""):
    raise StdinNotImplementedError(
        "raw_input was called, but this frontend does not support input requests.")


def _refuse_getpass(prompt="", stream=None):
    raise StdinNotImplementedError(
        "getpass was called, but this frontend does not support input requests.")


def _tb_from(tb, name):
    # The traceback from the cell's first frame: the driver's own are
    # nobody's business.
    t = tb
    while t is not None and t.tb_frame.f_code.co_filename != name:
        t = t.tb_next
    return t if t is not None else tb


def _error(e, name):
    tb = _tb_from(e.__traceback__, name)
    if isinstance(e, SyntaxError):
        tb = None
    lines = _traceback.format_exception(type(e), e, tb)
    _emit("error", ename=type(e).__name__, evalue=str(e),
          traceback=[line.rstrip("\n") for line in lines])


def run(n, code_b64, expr_b64="", silent=False, allow_stdin=True):
    import ast
    import linecache
    code = _base64.b64decode(code_b64).decode("utf-8")
    name = f"<In [{n}]>" if n else "<silent cell>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    main = _main()
    # With allow_stdin, input() and getpass ask the notebook through the
    # kernel's stdin channel (the session's prompt mode, set for the cell by
    # the runtime); without, they raise as ipykernel's do.
    saved_input = _builtins.input
    getpass = _sys.modules.get("getpass") if allow_stdin else __import__("getpass")
    saved_getpass = getpass.getpass if getpass is not None else None
    if not allow_stdin:
        _builtins.input = _refuse_input
        getpass.getpass = _refuse_getpass
    ok = True
    try:
        tree = compile(code, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        final = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            final = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec", dont_inherit=True), main)
        if final is not None:
            value = eval(compile(final, name, "eval", dont_inherit=True), main)
            if value is not None and not silent:
                main["_"] = value
                data, metadata = bundle(value, result=True)
                _emit("result", data=data, metadata=metadata)
    except SystemExit:
        raise
    except BaseException as e:
        ok = False
        _error(e, name)
    finally:
        _builtins.input = saved_input
        if getpass is not None:
            getpass.getpass = saved_getpass
    if ok and expr_b64:
        exprs = _json.loads(_base64.b64decode(expr_b64).decode("utf-8"))
        out = {}
        for key, expr in exprs.items():
            try:
                data, metadata = bundle(eval(str(expr), main))
                out[key] = {"status": "ok", "data": data, "metadata": metadata}
            except Exception as e:
                out[key] = {"status": "error", "ename": type(e).__name__, "evalue": str(e),
                            "traceback": []}
        _emit("user_expressions", values=out)
    if not ok:
        # The session rolls a failed cell back; its traceback was reported.
        raise SystemExit(1)


# ---- helpers, run in a fork of the session that is closed after them ---------

def _token(code, pos, chars):
    start = pos
    while start > 0 and (code[start - 1].isalnum() or code[start - 1] in chars):
        start -= 1
    return start


def complete(code_b64, pos):
    import keyword
    import rlcompleter
    code = _base64.b64decode(code_b64).decode("utf-8")
    pos = max(0, min(pos, len(code)))
    start = _token(code, pos, "_.")
    text = code[start:pos]
    matches = []
    if text and not text[0].isdigit():
        completer = rlcompleter.Completer(_main())
        for i in range(1000):
            try:
                m = completer.complete(text, i)
            except Exception:
                break
            if m is None:
                break
            # rlcompleter's "(" or "()" after a callable and " " after a
            # keyword are not part of the name.
            m = m.rstrip(" ")
            m = m[:-2] if m.endswith("()") else m.rstrip("(")
            if m not in matches:
                matches.append(m)
        if "." not in text:
            for k in keyword.kwlist:
                if k.startswith(text) and k not in matches:
                    matches.append(k)
    # The cursor's token is what the matches replace.
    dot = text.rfind(".")
    _emit("complete", matches=matches, cursor_start=start, cursor_end=pos,
          metadata={}, status="ok", dot=dot)


def inspect_at(code_b64, pos, detail):
    import inspect
    code = _base64.b64decode(code_b64).decode("utf-8")
    pos = max(0, min(pos, len(code)))
    start = _token(code, pos, "_.")
    end = pos
    while end < len(code) and (code[end].isalnum() or code[end] == "_"):
        end += 1
    name = code[start:end].strip(".")
    if not name and start > 0 and code[start - 1] == "(":
        # The cursor just after "f(": inspect f.
        end = start - 1
        start = _token(code, end, "_.")
        name = code[start:end]
    found, text = False, ""
    if name and all(p.isidentifier() for p in name.split(".")):
        parts = name.split(".")
        main = _main()
        try:
            if parts[0] in main:
                obj = main[parts[0]]
            else:
                obj = getattr(_builtins, parts[0])
            for p in parts[1:]:
                obj = getattr(obj, p)
            found = True
        except Exception:
            found = False
        if found:
            lines = []
            try:
                lines.append(f"Signature: {name}{inspect.signature(obj)}")
            except (TypeError, ValueError):
                pass
            lines.append(f"Type:      {type(obj).__name__}")
            if not callable(obj) or isinstance(obj, (int, float, str, list, dict, tuple)):
                lines.append(f"Value:     {_plain(obj)[:2000]}")
            doc = inspect.getdoc(obj)
            if doc:
                lines.append("Docstring:\n" + doc)
            if detail:
                try:
                    lines.append("Source:\n" + inspect.getsource(obj))
                except (TypeError, OSError):
                    pass
            text = "\n".join(lines)
    _emit("inspect", found=found, data={"text/plain": text} if found else {}, metadata={},
          status="ok")


def is_complete(code_b64):
    import codeop
    code = _base64.b64decode(code_b64).decode("utf-8")
    status, indent = "complete", ""
    try:
        got = codeop.compile_command(code, "<input>", "exec")
        if got is None:
            status = "incomplete"
    except (SyntaxError, OverflowError, ValueError):
        status = "invalid"
    if status == "complete" and code.rstrip("\n").split("\n")[-1][:1] in (" ", "\t") \
            and not code.endswith("\n\n"):
        # The last line is indented: a block that may go on.
        status = "incomplete"
    if status == "incomplete":
        last = code.rstrip("\n").split("\n")[-1]
        indent = last[:len(last) - len(last.lstrip())]
        if last.rstrip().endswith(":"):
            indent += "    "
    fields = {"status": status}
    if status == "incomplete":
        fields["indent"] = indent
    _emit("is_complete", **fields)


def _install():
    mod = _sys.modules.get("airlock")
    if mod is not None:
        mod.display = display
        mod.clear_output = clear_output
    # The cell's prints reach the notebook as they happen, not when a
    # block-sized buffer fills.
    for s in (_sys.stdout, _sys.__stdout__):
        try:
            s.reconfigure(line_buffering=True)
        except Exception:
            pass
