"""Configuration: mounts, allowed domains, tools, limits, approval, as the
reference (agent_framework_hyperlight's execute_code tool) has them."""
import os
from pathlib import Path

import pytest

import airlock


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_mount_forms_normalised(tree):
    sb = airlock.Sandbox(mounts=["notes.txt", ("data", "/input/tables/"),
                                 f"{tree}/data/a.csv:csv/a.csv"])
    got = sb.get_file_mounts()
    assert got == [
        airlock.FileMount(tree / "notes.txt", "/input/notes.txt"),
        airlock.FileMount(tree / "data", "/input/tables"),
        airlock.FileMount(tree / "data" / "a.csv", "/input/csv/a.csv"),
    ]
    r = sb.run("import os; print(sorted(os.listdir('/input')), open('/input/tables/a.csv').read())")
    assert r.success, r.stderr
    assert r.stdout == "['csv', 'notes.txt', 'tables'] x,y\n1,2\n\n"
    sb.close()


def test_mount_replace_remove_clear(tree):
    sb = airlock.Sandbox(mounts=("notes.txt", "n.txt"))
    sb.add_file_mounts(("data/a.csv", "/input/n.txt"))  # the same sandbox path: replaced
    assert sb.get_file_mounts() == [airlock.FileMount(tree / "data" / "a.csv", "/input/n.txt")]
    assert sb.run("print(open('/input/n.txt').read())").stdout.startswith("x,y")
    with pytest.raises(KeyError) as e:
        sb.remove_file_mount("/input/missing")
    assert e.value.args[0] == "No file mount exists for '/input/missing'."
    sb.remove_file_mount("input/n.txt")
    assert sb.get_file_mounts() == []
    assert sb.run("import os; print(os.path.exists('/input/n.txt'))").stdout == "False\n"
    sb.add_file_mounts(["notes.txt", "data"])
    sb.clear_file_mounts()
    assert sb.get_file_mounts() == []
    sb.close()


def test_mount_errors(tree):
    with pytest.raises(FileNotFoundError):
        airlock.Sandbox(mounts="no-such-file")
    with pytest.raises(ValueError, match=r"^mount_path must stay within /input\.$"):
        airlock.Sandbox(mounts=("notes.txt", "../etc/passwd"))
    with pytest.raises(ValueError, match=r"^mount_path must point to a concrete path under /input\.$"):
        airlock.Sandbox(mounts=("notes.txt", "/input/"))
    with pytest.raises(ValueError, match=r"^mount_path must not be empty\.$"):
        airlock.Sandbox(mounts=("notes.txt", " "))
    # The package's own word for it (workspace=), not the reference's
    # workspace_root, which this package has no parameter for.
    with pytest.raises(ValueError, match=r"^workspace 'notes.txt' is not a folder: workspace= ") as e:
        airlock.Sandbox(workspace="notes.txt")
    assert "workspace_root" not in str(e.value)
    with pytest.raises(TypeError):
        airlock.Sandbox(mounts=[42])


def test_a_mount_path_outside_input_is_a_valueerror(tree):
    """docs/python.md: "a mount path outside /input ValueError", not the
    path moved under /input in silence."""
    for bad in [("notes.txt", "/etc/x"), "notes.txt:/etc/x", ("notes.txt", "/inputs/x"),
                ("notes.txt", "/")]:
        with pytest.raises(ValueError, match="is outside /input") as e:
            airlock.Sandbox(mounts=[bad])
        assert "/input/etc" not in str(e.value)
    sb = airlock.Sandbox()
    with pytest.raises(ValueError, match="'/etc/x' is outside /input"):
        sb.add_file_mounts(("notes.txt", "/etc/x"))
    assert sb.get_file_mounts() == []
    # Relative paths stay under /input, as the reference's shorthand.
    sb.add_file_mounts([("notes.txt", "etc/x"), ("notes.txt", "/input/y")])
    assert [m.mount_path for m in sb.get_file_mounts()] == ["/input/etc/x", "/input/y"]
    sb.close()


def test_run_of_something_not_a_string_says_a_string_is_needed(sb):
    for code in (None, 42, ["print(1)"]):
        with pytest.raises(TypeError, match=r"^run\(code\): code must be a string of Python "
                                            "source, not " + type(code).__name__):
            sb.run(code)
    with sb.session() as s:
        with pytest.raises(TypeError, match="code must be a string of Python source, not NoneType"):
            s.run(None)
        assert s.run("print(1)").stdout == "1\n"


def test_mount_collision_is_library_error(tree):
    # A file mount where another mount needs a directory: the C library's
    # check, as InputError (a ValueError), and the configuration unchanged.
    sb = airlock.Sandbox(mounts=("notes.txt", "d"))
    with pytest.raises(airlock.InputError) as e:
        sb.add_file_mounts(("data/a.csv", "d/a.csv"))
        sb.run("pass")
    assert isinstance(e.value, ValueError)
    assert "/input/d" in str(e.value)
    sb.close()


def test_allowed_domains():
    sb = airlock.Sandbox(allowed_domains=[" API.Example.com/ ", ("https://Data.Example.org/v1/", ["post", "get", "GET"])])
    assert sb.get_allowed_domains() == [
        airlock.AllowedDomain("api.example.com", None),
        airlock.AllowedDomain("https://data.example.org/v1", ("GET", "POST")),
    ]
    sb.add_allowed_domains(("api.example.com", "get"))  # replaces the methods
    assert sb.get_allowed_domains()[0] == airlock.AllowedDomain("api.example.com", ("GET",))
    with pytest.raises(KeyError) as e:
        sb.remove_allowed_domain("other.example.com")
    assert e.value.args[0] == "No allowed domain exists for 'other.example.com'."
    sb.remove_allowed_domain("API.example.com")
    assert [d.target for d in sb.get_allowed_domains()] == ["https://data.example.org/v1"]
    with pytest.raises(ValueError, match="must not be empty"):
        sb.add_allowed_domains("  ")
    with pytest.raises(ValueError, match="HTTP method entries must not be empty"):
        sb.add_allowed_domains(("x.example.com", [" "]))
    with pytest.raises(ValueError, match="must not be empty when provided"):
        sb.add_allowed_domains(("x.example.com", []))
    sb.clear_allowed_domains()
    assert sb.get_allowed_domains() == []
    r = sb.run("try:\n  http_get('http://api.example.com/')\nexcept PermissionError as e: print('refused')")
    assert r.stdout == "refused\n"
    sb.close()


def test_allowed_domain_removed_by_the_string_it_was_added_with():
    # The library drops a default port and lower-cases: the entry added as
    # "HTTPS://EX.com:443" is stored as "https://ex.com" and removed by
    # either spelling.
    for spelling in ("HTTPS://EX.com:443", "http://[::1]:80/", "Api.Example.com:443"):
        sb = airlock.Sandbox(allowed_domains=[spelling])
        assert len(sb.get_allowed_domains()) == 1
        sb.remove_allowed_domain(spelling)
        assert sb.get_allowed_domains() == [], spelling
        sb.add_allowed_domains(spelling)
        sb.remove_allowed_domain(sb.get_allowed_domains()[0].target)
        assert sb.get_allowed_domains() == [], spelling
        sb.close()


def test_mount_replaced_in_its_place(tree):
    sb = airlock.Sandbox(mounts=[("notes.txt", "/input/a.txt"), ("data", "/input/b")])
    sb.add_file_mounts(("data/a.csv", "/input/a.txt"))
    assert sb.get_file_mounts() == [airlock.FileMount(tree / "data" / "a.csv", "/input/a.txt"),
                                    airlock.FileMount(tree / "data", "/input/b")]
    sb.close()


def test_tools_add_replace_remove():
    def a(x: int) -> int:
        "First."
        return x

    def a2(x: int) -> int:
        return -x

    sb = airlock.Sandbox(tools=[a])
    assert [t.name for t in sb.get_tools()] == ["a"]
    sb.add_tools(airlock.Tool(a2, name="a", description="Second."))
    assert sb.get_tools()[0].description == "Second."
    assert sb.run('print(call_tool("a", x=3))').stdout == "-3\n"
    with pytest.raises(KeyError) as e:
        sb.remove_tool("b")
    assert e.value.args[0] == "No managed tool named 'b' is registered."
    sb.remove_tool("a")
    r = sb.run('call_tool("a", x=1)')
    assert not r.success and "ValueError: unknown tool 'a'" in r.stderr
    sb.add_tools([a, a2])
    sb.clear_tools()
    assert sb.get_tools() == []
    with pytest.raises(ValueError):
        airlock.Tool(a, name="execute_code")
    sb.close()


def test_schema_from_hints_and_docstring():
    from typing import Literal, Optional

    def f(city: str, days: int = 3, unit: Literal["C", "F"] = "C", tags: list[str] | None = None,
          ratio: Optional[float] = None, *, verbose: bool = False) -> dict:
        """Forecast for a city.

        Args:
            city: The city's name.
            days: How many days
                ahead.
        """
        return {}

    t = airlock.Tool(f)
    assert t.description == "Forecast for a city."
    p = t.parameters
    assert p["required"] == ["city"]
    assert p["properties"]["city"] == {"type": "string", "description": "The city's name."}
    assert p["properties"]["days"] == {"type": "integer", "description": "How many days ahead.",
                                       "default": 3}
    assert p["properties"]["unit"]["enum"] == ["C", "F"]
    assert p["properties"]["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}},
                                                {"type": "null"}]
    assert p["properties"]["ratio"]["type"] == ["number", "null"]
    assert p["properties"]["verbose"]["type"] == "boolean"
    # The library validates with it: a wrong type is the guest's ValueError.
    sb = airlock.Sandbox(tools=[t])
    r = sb.run('call_tool("f", city=3)')
    assert "ValueError: tool 'f': argument 'city' must be a string, got integer" in r.stderr
    sb.close()


def test_explicit_schema():
    sb = airlock.Sandbox(tools=[airlock.Tool(lambda **kw: sorted(kw), name="keys",
                                             description="d",
                                             parameters={"type": "object",
                                                         "properties": {"q": {"type": "string"}},
                                                         "required": ["q"]})])
    assert sb.run('print(call_tool("keys", q="x"))').stdout == "['q']\n"
    assert "required" in sb.run('call_tool("keys")').stderr
    sb.close()


def test_limits():
    sb = airlock.Sandbox(limits={"timeout": 1.5, "memory": 256})
    lim = sb.get_limits()
    assert lim["timeout"] == "1.5" and lim["memory"] == "256"
    with pytest.raises(airlock.InputError, match="--timeout"):
        sb.set_limits({"timeout": -1})
    # An unknown name is named, with every name the package takes.
    with pytest.raises(airlock.InputError) as e:
        sb.set_limits({"bogus": 1})
    names = [n for n, _, _ in airlock.limit_options()]
    assert str(e.value).startswith("unknown limit 'bogus' in limits=; the limits are "), e.value
    assert all(f"'{n}'" in str(e.value) for n in names), e.value
    with pytest.raises(airlock.InputError, match="unknown limit 'time-out'"):
        airlock.Sandbox(limits={"time-out": 10})
    assert sb.get_limits()["timeout"] == "1.5"
    r = sb.run("while True: pass")
    assert r.status == "timeout"
    names = [n for n, _, _ in airlock.limit_options()]
    assert "timeout" in names and "memory" in names
    sb.close()


def test_approval_mode():
    def risky():
        return 1

    sb = airlock.Sandbox()
    assert sb.approval_mode == "never_require"
    sb.add_tools(airlock.Tool(risky, approval_mode="always_require"))
    assert sb.approval_mode == "always_require"
    sb.clear_tools()
    sb.approval_mode = "always_require"
    assert sb.tool_definition()["approval_mode"] == "always_require"
    with pytest.raises(ValueError):
        airlock.Sandbox(approval_mode="sometimes")
    sb.close()


def test_preloads():
    sb = airlock.Sandbox(preloads=["json"])
    assert sb.get_preloads() == ["json"]
    assert sb.run("import sys; print('json' in sys.modules)").stdout == "True\n"
    with pytest.raises(airlock.InputError):
        sb.add_preload("not a module")
    sb.close()


def test_settings_are_the_librarys(tree):
    def t1(x: int) -> int:
        return x

    sb = airlock.Sandbox(workspace="data", mounts=[("notes.txt", "n/notes.txt")],
                         allowed_domains=[("HTTPS://API.example.com:8443/v1/", "get, post"),
                                          "Plain.example.com"],
                         tools=[t1], limits={"timeout": 7}, preloads=["json"])
    s = sb.settings()
    assert s["workspace"] == str(tree / "data")
    assert s["mounts"] == [{"host": str(tree / "notes.txt"), "path": "/input/n/notes.txt"}]
    assert s["allowed_domains"] == [
        {"target": "https://api.example.com:8443/v1", "methods": ["GET", "POST"]},
        {"target": "plain.example.com", "methods": None}]
    assert [(d.target, d.methods) for d in sb.get_allowed_domains()] == [
        ("https://api.example.com:8443/v1", ("GET", "POST")), ("plain.example.com", None)]
    assert [t["name"] for t in s["tools"]] == ["t1"] and s["tools"][0]["kind"] == "callback"
    assert s["limits"]["timeout"] == "7" and s["preloads"] == ["json"]
    assert s["approval_mode"] == "never_require" and s["auto_figures"] is True
    # A method the library refuses is refused when added, naming it.
    with pytest.raises(airlock.InputError, match="CONNECT"):
        sb.add_allowed_domains(("x.example.com", "CONNECT"))
    sb.close()
