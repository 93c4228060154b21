"""The extension follows CPython's conventions for modules (multi-phase
initialisation, heap types, state per module object): it can be created
twice, every method documents itself, and its types and stub agree."""
import ast
import importlib.util
import inspect
import os
import sys

import pytest

import airlock
from airlock import _airlock

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "..", "python", "airlock")


def test_a_subinterpreter_is_refused():
    """The trampolines call back into the main interpreter, so the module
    refuses any other instead of running a subinterpreter's tools there."""
    subs = pytest.importorskip("_xxsubinterpreters")
    interp = subs.create()
    try:
        code = ("import sys; sys.path[:] = %r\n"
                "try:\n    import airlock._airlock\nexcept ImportError as e:\n"
                "    assert 'main interpreter' in str(e), e\n"
                "else:\n    raise AssertionError('imported in a subinterpreter')\n") % (sys.path,)
        subs.run_string(interp, code)
    finally:
        subs.destroy(interp)


def test_a_second_module_object_has_its_own_types_and_exceptions():
    spec = importlib.util.find_spec("airlock._airlock")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not _airlock
    assert other.Config is not _airlock.Config and other.InputError is not _airlock.InputError
    # Each module's objects raise that module's own exceptions.
    c = other.Config()
    try:
        c.set_workspace("/nonexistent/airlock-ext-test")
        c.add_mount("/nonexistent/airlock-ext-test-2")
        other.check_code("a\0b")
    except other.InputError as e:
        assert not isinstance(e, _airlock.InputError)
        assert e.kind == "input"
    else:
        raise AssertionError("no error")


def test_every_method_and_type_has_a_docstring():
    for t in (_airlock.Config, _airlock.Cache, _airlock.Session):
        assert t.__doc__, t
        for name, m in vars(t).items():
            if not name.startswith("_") and callable(m):
                assert m.__doc__, f"{t.__name__}.{name}"
    for f in (_airlock.limit_options, _airlock.check_code):
        assert f.__doc__, f


def test_types_are_immutable_and_sessions_come_from_a_cache():
    for t in (_airlock.Config, _airlock.Cache, _airlock.Session):
        try:
            t.extra = 1
        except TypeError:
            pass
        else:
            raise AssertionError(f"{t.__name__} is mutable")
    try:
        _airlock.Session()
    except TypeError:
        pass
    else:
        raise AssertionError("Session() made a session without a cache")


def test_the_stub_names_what_the_module_has():
    with open(os.path.join(PKG, "_airlock.pyi")) as f:
        tree = ast.parse(f.read())
    declared = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    declared |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(_airlock) if not n.startswith("_")}
    assert declared == public, declared ^ public
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name in ("Config", "Cache", "Session"):
            methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} - {"__init__"}
            real = {n for n, m in vars(getattr(_airlock, cls.name)).items()
                    if not n.startswith("_") and callable(m)}
            assert methods == real, (cls.name, methods ^ real)
    assert os.path.exists(os.path.join(PKG, "py.typed"))


def test_one_version():
    with open(os.path.join(HERE, "..", "..", "include", "airlock.h")) as f:
        header = [ln.split('"')[1] for ln in f if ln.startswith("#define AIRLOCK_VERSION ")][0]
    assert airlock.__version__ == _airlock.VERSION == header
    assert _airlock.LIBRARY_VERSION == header
