"""Code mode from the Python package: Sandbox(servers=...) takes a servers
file's path or a dict in its format (docs/code-mode.md), with the command
line's checks and messages, and approve_server_call decides the upstream
calls that need approval."""
import json
import os
import subprocess
import sys

import pytest

import airlock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("AIRLOCK_BUILD", os.path.join(ROOT, "build"))
AIRLOCK = os.environ.get("AIRLOCK", os.path.join(BUILD, "airlock"))
MISBEHAVE = os.path.join(ROOT, "tests", "helpers", "mcp_misbehave.py")
NODE_MODULES = os.path.join(ROOT, "tests", "mcp", "node_modules")


def npm_server(name):
    """@modelcontextprotocol/server-NAME, installed into tests/mcp by npm the
    first time (the versions of its package-lock.json)."""
    path = os.path.join(NODE_MODULES, "@modelcontextprotocol", f"server-{name}", "dist",
                        "index.js")
    if not os.path.exists(path):
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"],
                       cwd=os.path.join(ROOT, "tests", "mcp"), check=True, timeout=900)
    return path


def misbehave(tmp_path):
    return {"command": sys.executable, "args": [MISBEHAVE],
            "env": {"MISBEHAVE_LOG": str(tmp_path / "log")}}


def test_servers_as_a_dict_and_as_a_file(tmp_path):
    with airlock.Sandbox(servers={"mcpServers": {"bad": misbehave(tmp_path)}}) as sb:
        r = sb.run("from servers import bad\nprint(bad.ok().split()[0])")
        assert r.success and r.stdout == "ok\n", (r.stdout, r.stderr)
        assert list(sb.settings()["servers"]) == ["bad"]
    f = tmp_path / "servers.json"
    f.write_text(json.dumps({"mcpServers": {
        "memory": {"command": "node", "args": [npm_server("memory")],
                   "env": {"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}}}}))
    # A file and a dict together, the file given as a Path.
    with airlock.Sandbox(servers=[f, {"servers": {"b": misbehave(tmp_path)}}]) as sb:
        r = sb.run('from servers import memory\n'
                   'memory.create_entities(entities=[{"name": "airlock", "entityType": "p",'
                   ' "observations": []}])')
        assert r.success, r.stderr
        # The server keeps its state between the runs of one configuration.
        r = sb.run("import servers\nprint([e['name'] for e in "
                   "servers.memory.read_graph()['entities']], servers.b.ok()[:2])")
        assert r.stdout == "['airlock'] ok\n", (r.stdout, r.stderr)


BAD = [
    ({"servers": {}, "other": 1}, "unknown key \"other\""),
    ({"tools": []}, "not a servers file"),
    ({"mcpServers": {"a": {"command": "node", "colour": "red"}}}, "server 'a': unknown key "
                                                                    "\"colour\""),
    ({"mcpServers": {"a": {"command": "no-such-command-here"}}}, "server 'a': \"command\""),
    ({"mcpServers": {"a": {"url": "ftp://example.com/mcp"}}}, "server 'a': \"url\" must be"),
    ({"mcpServers": {"a": {"type": "sse", "url": "https://example.com/sse"}}},
     "old HTTP+SSE transport"),
    ({"mcpServers": {"a": {"command": "node", "env": {"T": "${secret:}"}}}},
     "server 'a': \"env\".\"T\""),
    ({"mcpServers": {"a-b": {"command": "node"}, "a_b": {"command": "node"}}},
     "Python name 'a_b'"),
]


@pytest.mark.parametrize("spec,want", BAD)
def test_bad_servers_are_the_command_lines_errors(tmp_path, spec, want):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    p = subprocess.run([AIRLOCK, "run", "--servers", str(path), "-c", "print(1)"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and want in p.stderr, p.stderr
    cli = p.stderr.strip().removeprefix("airlock: ")
    # The file: the very message of the command line.
    with pytest.raises(airlock.InputError) as e:
        airlock.Sandbox(servers=str(path))
    assert str(e.value) == cli
    # The dict: the same message, without the file's path.
    with pytest.raises(airlock.InputError) as e:
        airlock.Sandbox(servers=spec)
    assert want in str(e.value) and str(path) not in str(e.value), str(e.value)
    # Nothing is kept of a refused change.
    sb = airlock.Sandbox(servers={"mcpServers": {}})
    with pytest.raises(airlock.InputError):
        sb.add_servers(spec)
    assert sb.settings()["servers"] == {}
    sb.close()


def test_servers_that_are_not_a_path_or_a_dict_are_a_typeerror(tmp_path):
    with pytest.raises(TypeError, match="servers"):
        airlock.Sandbox(servers=3)
    with pytest.raises(airlock.InputError, match="servers JSON: not a servers file"):
        airlock.Sandbox(servers={"mcpServers": []})
    with pytest.raises(airlock.InputError, match="servers file .*no-such.json"):
        airlock.Sandbox(servers=str(tmp_path / "no-such.json"))


def test_an_approver_decides_the_calls_that_need_approval(tmp_path):
    servers = {"mcpServers": {"memory": {
        "command": "node", "args": [npm_server("memory")],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}}}}
    code = ('import servers\nfrom servers import memory\n'
            'memory.create_entities(entities=[{"name": "x", "entityType": "p",'
            ' "observations": []}])\n'
            'try:\n    memory.delete_entities(entityNames=["x"])\n    print("RAN")\n'
            'except servers.ApprovalRequired as e:\n    print("REFUSED", e)\n')
    # Without an approver nobody can be asked: the guest gets the exception.
    with airlock.Sandbox(servers=servers) as sb:
        r = sb.run(code)
        assert r.stdout.startswith("REFUSED memory.delete_entities"), (r.stdout, r.stderr)
    asked = []

    def approve(tool, args):
        asked.append((tool, args))
        return len(asked) > 1

    with airlock.Sandbox(servers=servers, approve_server_call=approve) as sb:
        r = sb.run(code)
        assert r.stdout.startswith("REFUSED") and "the approver refused this call" in r.stdout, \
            r.stdout
        assert "nobody can approve" not in r.stdout, r.stdout
        r = sb.run(code)
        assert r.stdout == "RAN\n", (r.stdout, r.stderr)
    # create_entities says it is not destructive: only delete_entities was asked.
    assert asked == [("memory.delete_entities", {"entityNames": ["x"]})] * 2, asked


def test_an_approver_that_raises_refuses_in_the_packages_words(tmp_path):
    """A refusal by approve_server_call is said to be the callback's: the
    guest's ApprovalRequired says it was refused, and an exception of the
    callback is a RuntimeWarning naming approve_server_call and the call
    (not an anonymous "Exception ignored in <function approve>")."""
    servers = {"mcpServers": {"memory": {
        "command": "node", "args": [npm_server("memory")],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}}}}
    code = ('import servers\nfrom servers import memory\n'
            'try:\n    memory.delete_entities(entityNames=["x"])\n    print("RAN")\n'
            'except servers.ApprovalRequired as e:\n    print("REFUSED", e)\n')

    def approve(tool, args):
        raise LookupError("no policy for " + tool)

    with airlock.Sandbox(servers=servers, approve_server_call=approve) as sb:
        with pytest.warns(RuntimeWarning) as w:
            r = sb.run(code)
    assert r.stdout.startswith("REFUSED memory.delete_entities") and "refused" in r.stdout, \
        (r.stdout, r.stderr)
    msgs = [str(x.message) for x in w]
    assert ("approve_server_call raised LookupError: no policy for memory.delete_entities; "
            "the call of memory.delete_entities is refused") in msgs, msgs
