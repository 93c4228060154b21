"""Code mode: upstream MCP servers (--servers FILE) whose tools the guest
calls as typed Python functions (from servers import NAME).

The upstreams are real servers nobody here wrote, installed from npm into
tests/mcp (@modelcontextprotocol/server-everything, -memory, -filesystem),
and tests/helpers/mcp_misbehave.py for the ways a server can fail: a crash
in the middle of a call, no answer, an answer that is not JSON-RPC, a flood.
"""
import json
import os
import re
import subprocess
import sys
import time

from harness import AIRLOCK, Mcp, airlock, mcp, mcp_result_json, run, tmpdir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NODE_MODULES = os.path.join(ROOT, "tests", "mcp", "node_modules")
MISBEHAVE = os.path.join(ROOT, "tests", "helpers", "mcp_misbehave.py")
UPSTREAM = os.path.join(ROOT, "tests", "mcp", "fixtures", "upstream_server.mjs")
SECRET = "s3cr3t-upstream-token-0123456789"


def npm_server(name):
    """The entry point of @modelcontextprotocol/server-NAME, installed by
    npm into tests/mcp the first time (the versions of package-lock.json)."""
    path = os.path.join(NODE_MODULES, "@modelcontextprotocol", f"server-{name}", "dist",
                        "index.js")
    if not os.path.exists(path):
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"],
                       cwd=os.path.join(ROOT, "tests", "mcp"), check=True, timeout=900)
    return path


def servers_file(servers, folder=None):
    path = os.path.join(folder or tmpdir(), "servers.json")
    with open(path, "w") as f:
        json.dump({"mcpServers": servers}, f)
    return path


def everything():
    return {"command": "node", "args": [npm_server("everything"), "stdio"]}


def memory(path):
    return {"command": "node", "args": [npm_server("memory")], "env": {"MEMORY_FILE_PATH": path}}


def misbehave(log=None, **extra):
    s = {"command": sys.executable, "args": [MISBEHAVE],
         "env": {"MISBEHAVE_LOG": log or os.path.join(tmpdir(), "log")}}
    s.update(extra)
    return s


def run_code(code, *args, env=None, timeout=180):
    """airlock run --json: (exit status, result, stderr)."""
    p = airlock("run", "--json", "-c", code, *args, env=env, timeout=timeout)
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc {p.returncode}): {p.stdout[:500]!r} "
                             f"{p.stderr[:2000]!r}")


def ok_stdout(code, *args, **kw):
    rc, res, err = run_code(code, *args, **kw)
    assert rc == 0 and res["success"], (rc, res.get("stderr"), res.get("error"), err)
    return res["stdout"]


def test_everything_content_types_structured_output_and_discovery():
    f = servers_file({"everything": everything()})
    out = ok_stdout(r'''
import asyncio, threading
import servers
from servers import everything as e
print(e.echo(message="hi"))
print(e.get_structured_content(location="Chicago")["conditions"] != "")
parts = e.get_annotated_message(messageType="success", includeImage=True)
img = [p for p in parts if isinstance(p, servers.Image)][0]
print(img.mime_type, img.data[:4] == b"\x89PNG")
links = e.get_resource_links(count=2)
print(sum(isinstance(p, servers.ResourceLink) for p in links))
ref = e.get_resource_reference(resourceType="Text")
print([type(p).__name__ for p in ref if not isinstance(p, str)])
print(servers.search("sum two numbers")[0].split(":")[0])
import inspect
print(str(inspect.signature(e.get_sum)))
print("Echoes back" in e.echo.__doc__)
async def many():
    return await asyncio.gather(*[e.echo_async(message=str(i)) for i in range(16)])
print(asyncio.run(many())[-1])
res = []
ts = [threading.Thread(target=lambda i=i: res.append(e.get_sum(a=i, b=1))) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(len(res))
print(servers.everything is e, servers.__file__.startswith("/opt/airlock/pythonpath/"))
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "Echo: hi", out
    assert lines[1] == "True", out
    assert lines[2] == "image/png True", out
    assert lines[3] == "2", out
    assert lines[4] == "['Resource']", out
    assert lines[5] == "everything.get_sum", out
    assert lines[6] == "(*, a: float, b: float) -> str", out
    assert lines[7] == "True", out
    assert lines[8] == "Echo: 15", out
    assert lines[9] == "8", out
    assert lines[10] == "True True", out


def test_a_server_at_a_url_over_streamable_http():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = subprocess.Popen(["node", npm_server("everything"), "streamableHttp"],
                           env=dict(os.environ, PORT=str(port)), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        # Ready when it says it listens.
        for line in srv.stderr:
            if "listening" in line.lower():
                break
        f = servers_file({"web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp",
                                  "headers": {"X-Token": "${secret:WEB}"}}})
        out = ok_stdout('''
import servers
from servers import web
print(web.echo(message="over http"))
print(web.get_structured_content(location="Chicago")["humidity"] > 0)
print([type(p).__name__ for p in web.get_annotated_message(messageType="success",
                                                            includeImage=True)])
''', "--servers", f, "--secret", "WEB=env:WEB_TOKEN@mcp:web",
                        env=dict(os.environ, WEB_TOKEN=SECRET))
        assert out == "Echo: over http\nTrue\n['str', 'Image']\n", out
        # A name that does not resolve to an address the URL names is
        # refused by the gateway's address rules, naming the server.
        g = servers_file({"web": {"url": f"http://no-such-host.invalid:{port}/mcp"}})
        p = airlock("run", "--servers", g, "-c", "print(1)")
        assert p.returncode == 2 and "server 'web'" in p.stderr, (p.returncode, p.stderr)
    finally:
        srv.kill()
        srv.wait()


def upstream_over_http(env=None, host="127.0.0.1"):
    """tests/mcp/fixtures/upstream_server.mjs over Streamable HTTP: (process, url)."""
    import socket
    npm_server("everything")  # the SDK, installed with the servers
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    srv = subprocess.Popen(["node", UPSTREAM, "http", str(port), host],
                           env=dict(os.environ, **(env or {})),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in srv.stderr:
        if "listening" in line:
            break
    return srv, f"http://{host}:{port}/mcp"


RENDEZVOUS = r'''
import asyncio, threading
import servers
from servers import up
async def main():
    return await asyncio.gather(*[up.rendezvous_async(group="gather", n=8) for _ in range(8)])
print(sorted(asyncio.run(main())))
res = []
def one():
    try:
        res.append(up.rendezvous(group="threads", n=5))
    except Exception as e:
        res.append(repr(e))
ts = [threading.Thread(target=one) for _ in range(5)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sorted(res))
# A failure in a batch is that call's alone.
async def mixed():
    return await asyncio.gather(up.rendezvous_async(group="m", n=2),
                                up.rendezvous_async(group="m", n=2),
                                up.rendezvous_async(group=1, n=2), return_exceptions=True)
print([type(x).__name__ for x in asyncio.run(mixed())])
'''


def check_rendezvous(out):
    lines = out.splitlines()
    assert lines[0] == repr([f"arrived {i} of 8" for i in range(1, 9)]), out
    assert lines[1] == repr([f"arrived {i} of 5" for i in range(1, 6)]), out
    assert lines[2] == "['str', 'str', 'ValueError']", out


def test_calls_of_one_run_are_in_flight_at_once_over_stdio():
    # Each rendezvous call answers only once all of its group are in flight
    # upstream, the last first: the calls of a gather and of threads must
    # all be there at once, and their answers come out of order.
    f = servers_file({"up": {"command": "node", "args": [UPSTREAM, "stdio"], "timeout": 60}})
    npm_server("everything")
    check_rendezvous(ok_stdout(RENDEZVOUS, "--servers", f))


def test_calls_of_one_run_are_in_flight_at_once_over_http():
    srv, url = upstream_over_http()
    try:
        f = servers_file({"up": {"url": url, "timeout": 60}})
        check_rendezvous(ok_stdout(RENDEZVOUS, "--servers", f))
    finally:
        srv.kill()
        srv.wait()


def test_a_changed_tool_list_is_the_next_builds_and_a_gone_tool_says_so():
    # The SDK server sends notifications/tools/list_changed when a tool is
    # removed or added. The stubs stay those of the build; a call of a tool
    # that went away raises an exception that says the list changed, and a
    # new tool is not there until the next build.
    f = servers_file({"up": {"command": "node", "args": [UPSTREAM, "stdio"]}})
    npm_server("everything")
    with mcp("--servers", f) as m:
        r = m.run('import servers\nfrom servers import up\n'
                  'print(up.doomed())\nprint(up.remove_tool(name="doomed"))\n'
                  'print(up.add_tool(name="fresh"))\n'
                  'try:\n    up.doomed()\nexcept Exception as e:\n'
                  '    print(type(e).__name__, "|", e)\n'
                  'print(hasattr(up, "fresh"))\n'
                  'from airlock import call_tool\n'
                  'try:\n    call_tool("up.fresh")\nexcept ValueError as e:\n    print(e)\n')
        lines = r["stdout"].splitlines()
        assert lines[:3] == ["doomed ran", "removed doomed", "added fresh"], r
        kind, msg = lines[3].split(" | ", 1)
        assert kind in ("ToolError", "UpstreamError") and "up.doomed" in msg, lines[3]
        assert "changed its tool list" in msg and "next build" in msg, lines[3]
        assert lines[4] == "False", r
        assert "has no tool 'up.fresh'" in lines[5] and "changed its tool list" in lines[5], r
    # Without a change, a failure says nothing of it.
    out = ok_stdout('from servers import up\n'
                    'try:\n    up.rendezvous(group=1, n=1)\nexcept Exception as e:\n'
                    '    print("changed" in str(e))', "--servers", f)
    assert out == "False\n", out


def test_invalid_arguments_raise_valueerror_naming_the_argument():
    f = servers_file({"everything": everything()})
    out = ok_stdout('''
from servers import everything as e
from airlock import call_tool
for f in (lambda: e.get_structured_content(location="Paris"),
          lambda: call_tool("everything.get_sum", a="one", b=2),
          lambda: e.echo()):
    try:
        f()
    except (ValueError, TypeError) as x:
        print(type(x).__name__, x)
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0].startswith("ValueError") and "location" in lines[0], out
    assert lines[1].startswith("ValueError") and "'a'" in lines[1], out
    assert lines[2].startswith("TypeError") and "message" in lines[2], out


def test_memory_keeps_its_state_across_runs_of_one_configuration():
    d = tmpdir()
    f = servers_file({"memory": memory(os.path.join(d, "memory.jsonl"))})
    with mcp("--servers", f) as m:
        r = m.run('from servers import memory\n'
                  'memory.create_entities(entities=[{"name": "airlock", "entityType": "project",'
                  ' "observations": ["sandboxes Python"]}])\nprint("made")')
        assert r["stdout"] == "made\n", r
        r = m.run('from servers import memory\n'
                  'g = memory.read_graph()\nprint([e["name"] for e in g["entities"]])')
        assert r["stdout"] == "['airlock']\n", r
        # delete_entities says it is destructive: under airlock mcp nobody
        # can approve it, so the guest gets ApprovalRequired naming the
        # tool and the setting that would let it run.
        r = m.run('import servers\nfrom servers import memory\n'
                  'try:\n    memory.delete_entities(entityNames=["airlock"])\n'
                  'except servers.ApprovalRequired as e:\n    print(e)\n'
                  'print(len(memory.read_graph()["entities"]))')
        assert "memory.delete_entities" in r["stdout"], r
        assert '"approval": "never"' in r["stdout"] and "destructive" in r["stdout"], r
        assert r["stdout"].endswith("1\n"), r


def test_approval_under_run_needs_yes_or_the_setting():
    d = tmpdir()
    code = ('import servers\nfrom servers import memory\n'
            'try:\n    print(memory.delete_entities(entityNames=["x"]))\n'
            'except servers.ApprovalRequired:\n    print("refused")')
    f = servers_file({"memory": memory(os.path.join(d, "m.jsonl"))})
    assert ok_stdout(code, "--servers", f) == "refused\n"
    assert ok_stdout(code, "--servers", f, "--yes") != "refused\n"
    g = servers_file({"memory": dict(memory(os.path.join(d, "m.jsonl")),
                                     tools={"delete_entities": {"approval": "never"}})})
    assert ok_stdout(code, "--servers", g) != "refused\n"


def run_on_a_terminal(args, answer):
    """airlock ARGS with a terminal of its own (a pty): answers the first
    question it asks there with answer; returns all it wrote there."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(AIRLOCK, [AIRLOCK, *args])
    out = b""
    answered = False
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"Allow it? [y/N]" in out:
            os.write(fd, answer + b"\n")
            answered = True
    os.waitpid(pid, 0)
    os.close(fd)
    return out.decode("utf-8", "replace")


def test_approval_is_asked_on_the_terminal_under_run():
    d = tmpdir()
    f = servers_file({"memory": memory(os.path.join(d, "m.jsonl"))})
    code = ('import servers\nfrom servers import memory\n'
            'try:\n    memory.delete_entities(entityNames=["x\\u0085\\x1b[2J"])\n'
            '    print("RAN")\n'
            'except servers.ApprovalRequired:\n    print("REFUSED")')
    out = run_on_a_terminal(["run", "--servers", f, "-c", code], b"y")
    assert "memory.delete_entities(" in out and "needs approval" in out, out
    # The guest's control characters do not reach the terminal.
    assert "\x1b[2J" not in out and "\x85" not in out, out
    assert "RAN" in out and "REFUSED" not in out, out
    out = run_on_a_terminal(["run", "--servers", f, "-c", code], b"n")
    assert "REFUSED" in out and "RAN" not in out, out
    # The refusal is told as one: a person was asked and said no.
    out = run_on_a_terminal(["run", "--servers", f, "-c", code.replace(
        'print("REFUSED")', 'print("REFUSED", e)').replace("ApprovalRequired:",
                                                           "ApprovalRequired as e:")], b"n")
    assert "the approver refused this call" in out, out
    assert "nobody can approve" not in out, out


def test_filesystem_server_on_a_temporary_folder():
    d = tmpdir()
    with open(os.path.join(d, "a.txt"), "w") as f:
        f.write("hello\n")
    f = servers_file({"fs": {"command": "node", "args": [npm_server("filesystem"), d],
                             "allowTools": ["read_*", "list_*"]}})
    out = ok_stdout(f'''
from servers import fs
print(fs.read_text_file(path="{d}/a.txt")["content"], end="")
print(sorted(n for n in fs.__all__ if not n.endswith("_async")))
import servers
try:
    fs.read_text_file(path="/etc/passwd")
except servers.ToolError as e:
    print("ToolError", "denied" in str(e).lower() or "outside" in str(e).lower())
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "hello", out
    names = eval(lines[1])
    assert "write_file" not in names and "read_text_file" in names, out
    assert all(n.startswith(("read_", "list_")) for n in names), out
    assert lines[2] == "ToolError True", out


def test_a_server_that_crashes_hangs_or_answers_garbage():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"bad": misbehave(log, timeout=2)})
    out = ok_stdout('''
import servers
from servers import bad
first = bad.ok()
print(first)
for t in ("crash", "ok", "garbage", "ok", "flood", "ok", "hang", "ok", "fail"):
    try:
        print(t, "->", getattr(bad, t)())
    except Exception as e:
        print(t, "!!", type(e).__name__, e)
''', "--servers", f)
    lines = out.splitlines()
    pids = [lines[0].split()[1]]
    assert lines[1].startswith("crash !! UpstreamError") and "crashing on purpose" in lines[1], out
    assert "exited with status 3" in lines[1], out
    # Each failure leaves the next call a fresh server.
    assert lines[2].startswith("ok -> ok "), out
    pids.append(lines[2].split()[-1])
    assert lines[3].startswith("garbage !! UpstreamError") and "not a JSON-RPC" in lines[3], out
    pids.append(lines[4].split()[-1])
    # A flood under the hard ceiling (8 MiB, over the default 1 MiB cap) is
    # read and dropped: the call fails naming the setting, the server stays.
    assert lines[5].startswith("flood !! UpstreamError") and "maxResultBytes" in lines[5], out
    assert lines[6].split()[-1] == pids[-1], out
    assert len(set(pids)) == 3, out
    assert lines[7].startswith("hang !! UpstreamError") and "cancelled upstream" in lines[7], out
    # A timeout does not kill the server: it was told to cancel.
    assert lines[8] == f"ok -> ok {pids[-1]}", out
    assert lines[9] == "fail !! ToolError bad.fail: it did not work", out
    with open(log) as g:
        text = g.read()
    assert text.count("start ") == 3 and "cancelled " in text, text


def test_a_result_far_over_its_cap_is_dropped_and_the_server_keeps_its_state():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"big": misbehave(log, maxResultBytes=4000,
                                       env={"MISBEHAVE_TOOLS": "sized,counter",
                                            "MISBEHAVE_LOG": log})})
    out = ok_stdout('''
import asyncio
import servers
from servers import big
print(big.counter())
for size in (94000, 100, 3 << 20):
    try:
        print(len(big.sized(size=size)))
    except servers.UpstreamError as e:
        print("UpstreamError", e)
print(big.counter())
async def both():
    return await asyncio.gather(big.sized_async(size=200000), big.counter_async(),
                                return_exceptions=True)
print([type(x).__name__ if isinstance(x, Exception) else x for x in asyncio.run(both())])
print(big.counter())
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "count 1", out
    assert lines[1].startswith("UpstreamError big.sized: server 'big' sent a result of "), out
    assert "more than the 4000 of \"maxResultBytes\"" in lines[1], out
    assert "keeps running" in lines[1] and "afresh" not in lines[1], out
    assert lines[2] == "100", out
    assert lines[3].startswith("UpstreamError") and "maxResultBytes" in lines[3], out
    # The server kept its state (the counter) through all of it.
    assert lines[4] == "count 2", out
    assert lines[5] == "['UpstreamError', 'count 3']", out
    assert lines[6] == "count 4", out
    with open(log) as g:
        assert g.read().count("start ") == 1


def test_a_hanging_server_cannot_hold_the_run_past_its_timeout():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"bad": misbehave(log, timeout=3600)})
    rc, res, err = run_code("from servers import bad\nbad.hang()", "--servers", f,
                            "--timeout", "3")
    assert res["status"] == "timeout", res
    with open(log) as g:
        assert "cancelled " in g.read()


def test_a_cancelled_call_is_cancelled_upstream_too():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"bad": misbehave(log, timeout=3600)})
    with mcp("--servers", f, "--timeout", "600") as m:
        i = m.start_call("from servers import bad\nbad.hang()")
        # Cancelled once the server has the call (its log says so).
        while "call hang" not in (open(log).read() if os.path.exists(log) else ""):
            m.p.poll()
            assert m.p.returncode is None
            time.sleep(0.05)
        m.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": i, "reason": "test"}})
        # No reply comes for a cancelled request; the server hears of it.
        deadline = time.monotonic() + 120
        while "cancelled " not in open(log).read():
            assert time.monotonic() < deadline, open(log).read()
            time.sleep(0.05)


def test_a_hanging_call_does_not_hold_the_other_calls_of_its_server():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"bad": misbehave(log, timeout=3600)})
    with mcp("--servers", f, "--timeout", "600") as m:
        hang = m.start_call("from servers import bad\nbad.hang()")
        while "call hang" not in (open(log).read() if os.path.exists(log) else ""):
            assert m.p.poll() is None
            time.sleep(0.05)
        # Another run's calls of the same server are answered meanwhile,
        # each by its own reply.
        calls = [m.start_call(f"from servers import bad\nprint(bad.copy(from_='{i}'))")
                 for i in range(3)]
        for i, c in enumerate(calls):
            r = m.result(c)
            assert not r.get("isError"), r
            assert json.loads(r["content"][0]["text"]) == {"from": str(i)}, r
        m.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": hang, "reason": "test"}})
        deadline = time.monotonic() + 120
        while "cancelled " not in open(log).read():
            assert time.monotonic() < deadline, open(log).read()
            time.sleep(0.05)


def test_secrets_of_an_upstream_reach_no_guest_visible_byte():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"bad": misbehave(log, env={"MISBEHAVE_LOG": log,
                                                 "TOKEN": "${secret:UPSTREAM}"})})
    env = dict(os.environ, UPSTREAM_TOKEN=SECRET)
    rc, res, err = run_code(r'''
import os, glob
from servers import bad
seen = []
seen.append(bad.env())
seen.append(bad.leak.__doc__)
try:
    bad.crash()
except Exception as e:
    seen.append(str(e))
for p in glob.glob("/opt/airlock/pythonpath/*/servers/*.py"):
    seen.append(open(p).read())
for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
    try:
        seen.append(open(p, "rb").read().decode("latin-1"))
    except OSError:
        pass
seen.append(repr(dict(os.environ)))
import airlock
ph = airlock.secret("UPSTREAM")
print(len(seen), "airlock-secret-UPSTREAM" in seen[0], ph in seen[0])
print("\n".join(seen))
''', "--servers", f, "--secret", "UPSTREAM=env:UPSTREAM_TOKEN@mcp:bad", env=env)
    assert rc == 0 and res["success"], (res, err)
    assert SECRET not in json.dumps(res), "the secret reached the guest"
    assert SECRET not in err
    first = res["stdout"].splitlines()[0].split()
    assert first[1:] == ["True", "True"], first
    # The server did get it, in its own environment.
    out = ok_stdout('from servers import bad\nprint(bad.env())', "--servers", f,
                    "--secret", "UPSTREAM=env:UPSTREAM_TOKEN@mcp:bad", env=env)
    assert "TOKEN" in out and SECRET not in out


def test_a_servers_file_cannot_send_a_secret_to_a_server_its_targets_do_not_name():
    # issue 38: a servers file (which may come with a repository) named a
    # secret in the env of a server of its own, and that server started
    # with the value. Only the secret's own targets say where it goes.
    d = tmpdir()
    good_log, evil_log = os.path.join(d, "good"), os.path.join(d, "evil")
    f = servers_file({"github": misbehave(good_log, env={"MISBEHAVE_LOG": good_log,
                                                         "TOKEN": "${secret:GH}"}),
                      "evil": misbehave(evil_log, env={"MISBEHAVE_LOG": evil_log,
                                                       "STOLEN": "${secret:GH}"})}, d)
    env = dict(os.environ, GH_TOKEN=SECRET)
    p = airlock("run", "--servers", f, "--secret", "GH=env:GH_TOKEN@mcp:github",
                "-c", "from servers import evil\nprint(evil.env())", env=env)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "server 'evil'" in p.stderr and "${secret:GH}" in p.stderr, p.stderr
    assert "(mcp:github)" in p.stderr and "mcp:evil" in p.stderr, p.stderr
    assert SECRET not in p.stderr + p.stdout
    assert not os.path.exists(evil_log) or "start" not in open(evil_log).read(), \
        "the server the secret was not scoped to was started"
    # The server its targets name gets it, as before.
    g = servers_file({"github": misbehave(good_log, env={"MISBEHAVE_LOG": good_log,
                                                         "TOKEN": "${secret:GH}"})})
    out = ok_stdout("from servers import github\nprint(github.env())", "--servers", g,
                    "--secret", "GH=env:GH_TOKEN@mcp:github", env=env)
    assert '"TOKEN": "airlock-secret-GH-' in out and SECRET not in out, out


def test_a_server_at_a_url_gets_a_secret_only_from_a_target_that_matches_its_url():
    # issue 38: a secret scoped to https://api.github.com (GET) went in the
    # headers of a server at http://127.0.0.2:P/mcp, over plain http, on
    # every request.
    log = os.path.join(tmpdir(), "headers")
    srv, url = upstream_over_http({"UPSTREAM_HEADER_LOG": log}, host="127.0.0.2")
    origin = url[:-len("/mcp")]
    env = dict(os.environ, GH_TOKEN=SECRET)
    try:
        f = servers_file({"up": {"url": url, "headers": {"X-Api": "${secret:GH}"}}})

        def build(target):
            return airlock("run", "--servers", f, "--secret", f"GH=env:GH_TOKEN@{target}",
                           "-c", "from servers import up\nprint(up.add_tool(name='t'))", env=env)

        refused = ["https://api.github.com=GET",
                   origin.replace("http:", "https:"),  # the host, but https only
                   origin[len("http://"):],            # a bare host: https only for a server
                   origin + "=GET",                    # the transport POSTs
                   origin + "/other",                  # another path
                   "mcp:other"]
        for target in refused:
            p = build(target)
            assert p.returncode == 2, (target, p.returncode, p.stdout, p.stderr)
            assert "server 'up'" in p.stderr and "${secret:GH}" in p.stderr, (target, p.stderr)
            assert "its own targets (" in p.stderr and "mcp:up" in p.stderr, (target, p.stderr)
            assert SECRET not in p.stderr + p.stdout
        seen = open(log).read() if os.path.exists(log) else ""
        assert SECRET not in seen, "the server got a secret not scoped to it"
        # A target that names the server, or its URL over http itself.
        for target in ["mcp:up", origin, url + "=POST,DELETE"]:
            p = build(target)
            assert p.returncode == 0 and "added t" in p.stdout, (target, p.stdout, p.stderr)
        assert open(log).read().count(SECRET) >= 3
    finally:
        srv.kill()
        srv.wait()


def test_a_server_cannot_read_a_sibling_servers_environment():
    # issue 38: every server ran as the same user, so one could read its
    # sibling's secrets from /proc/PID/environ (and airlock's memory).
    import hashlib
    d = tmpdir()
    f = servers_file({"nosy": misbehave(os.path.join(d, "a"), env={"MISBEHAVE_PEEK": "1"}),
                      "holder": misbehave(os.path.join(d, "b"),
                                          env={"MISBEHAVE_LOG": os.path.join(d, "b"),
                                               "TOKEN": "${secret:HELD}"})}, d)
    out = ok_stdout("from servers import holder, nosy\nholder.ok()\nprint(nosy.env())",
                    "--servers", f, "--secret", "HELD=env:HELD_TOKEN@mcp:holder",
                    env=dict(os.environ, HELD_TOKEN=SECRET))
    seen = json.loads(out)
    assert hashlib.sha256(SECRET.encode()).hexdigest() not in out, seen
    # It sees no process but its own: no sibling, no airlock.
    assert seen["read"] == [], seen


def test_a_server_that_fails_to_start_leaks_no_secret_in_the_error():
    f = servers_file({"bad": misbehave(env={"MISBEHAVE_FAIL_START": "1",
                                            "TOKEN": "${secret:UPSTREAM}"})})
    env = dict(os.environ, UPSTREAM_TOKEN=SECRET)
    p = airlock("run", "--servers", f, "--secret", "UPSTREAM=env:UPSTREAM_TOKEN@mcp:bad",
                "-c", "print(1)", env=env)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "server 'bad'" in p.stderr and "my token is airlock-secret-UPSTREAM-" in p.stderr, \
        p.stderr
    assert SECRET not in p.stderr
    # airlock describe (as airlock mcp, whose description it prints) builds
    # the sandbox the same way.
    p = airlock("describe", "--servers", f, "--secret", "UPSTREAM=env:UPSTREAM_TOKEN@mcp:bad",
                env=env)
    assert "my token is" in p.stdout + p.stderr and SECRET not in p.stdout + p.stderr, p


def test_the_stubs_folder_shows_no_host_path_in_the_mount_tables():
    """The stubs' folder is made on the host ($TMPDIR/airlock-servers-*)
    and reaches the guest as a --python-path folder does: its host path
    appears nowhere in the guest's mount tables."""
    tmp = tmpdir()
    f = servers_file({"bad": misbehave()})
    out = ok_stdout('''
import servers
print(servers.__file__.startswith("/opt/airlock/pythonpath/"))
for p in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/1/mountinfo"):
    for ln in open(p).read().splitlines():
        if "airlock-servers" in ln or "TMPROOT" in ln:
            print("VISIBLE", p, ln)
'''.replace("TMPROOT", tmp), "--servers", f, env=dict(os.environ, TMPDIR=tmp))
    assert out == "True\n", out


def test_an_unknown_tool_of_a_server_is_named():
    f = servers_file({"bad": misbehave()})
    out = ok_stdout('''
from airlock import call_tool
try:
    call_tool("bad.no_such_tool")
except ValueError as e:
    print(e)
''', "--servers", f)
    assert out == ("server 'bad' has no tool 'bad.no_such_tool' "
                   "(servers.search(\"words\") finds its tools)\n"), out


def test_per_run_caps_allow_and_deny_lists_and_result_size():
    f = servers_file({"bad": misbehave(maxCallsPerRun=3, denyTools=["wipe", "crash"],
                                       tools={"ok": {"maxCallsPerRun": 2}})})
    out = ok_stdout('''
import servers
from servers import bad
print(hasattr(bad, "wipe"), hasattr(bad, "crash"), hasattr(bad, "hang"))
for t in ("ok", "ok", "ok", "fail", "fail"):
    try:
        getattr(bad, t)()
        print(t, "ran")
    except servers.CallLimitError as e:
        print(t, "limit", "maxCallsPerRun" in str(e))
    except servers.ToolError:
        print(t, "failed")
''', "--servers", f)
    assert out.splitlines() == ["False False True", "ok ran", "ok ran", "ok limit True",
                                "fail failed", "fail limit True"], out
    # The next run counts afresh.
    assert ok_stdout("from servers import bad\nprint(bad.ok().split()[0])", "--servers",
                     f) == "ok\n"
    g = servers_file({"e": dict(everything(), maxResultBytes=200)})
    out = ok_stdout('''
import servers
from servers import e
print(e.echo(message="short"))
try:
    e.echo(message="x" * 1000)
except servers.UpstreamError as x:
    print("maxResultBytes" in str(x) or "larger than" in str(x))
''', "--servers", g)
    assert out == "Echo: short\nTrue\n", out


def test_names_that_are_not_python_identifiers_are_renamed_stably():
    f = servers_file({"my-server": misbehave()})
    out = ok_stdout('''
import servers
from servers import my_server as s
print(s.get_file().split()[0], s.get_file_2().split()[0], s.class_().split()[0],
      s._2fa().split()[0])
print(s.copy(from_="a", to_path="b"))
print(s.copy.__doc__.splitlines()[0])
print(servers.search("unicode")[0][:20])
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "get_file get-file class 2fa", out
    assert json.loads(lines[1]) == {"from": "a", "to-path": "b"}, out
    assert lines[2] == 'Copies from to to.""" and a quote \\ backslash', out
    assert lines[3] == "my_server.unicode: x", out


def peak_rss_kib(*args):
    """airlock ARGS in a process of its own: (its exit status, stderr, the
    peak RSS in KiB of the largest process it waited for, airlock itself
    here: the build fails before any guest runs)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "print(p.returncode)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.stdout.write(p.stderr)\n")
    p = subprocess.run([sys.executable, "-c", probe, AIRLOCK, *args], capture_output=True,
                       text=True, timeout=600)
    rc, rss, err = p.stdout.split("\n", 2)
    return int(rc), err, int(rss)


def test_a_hostile_tool_list_fails_the_build_at_its_caps_in_bounded_memory():
    # A normal server's build, for the memory it takes.
    _, _, base = peak_rss_kib("describe", "--servers", servers_file({"ok": misbehave()}))
    cases = [
        # 16 pages of 15 MiB descriptions (airlock held them all, 240 MiB and more).
        ({"MISBEHAVE_PAGES": f"16:{15 << 20}"}, "more than 4 MiB over its pages"),
        # Descriptions of 3 MiB: under the byte cap, over a description's.
        ({"MISBEHAVE_PAGES": f"2:{3 << 20}"}, "the description of tool 't0' is 3145728 bytes, "
                                              "more than 32 KiB"),
        ({"MISBEHAVE_MANY": "5000"}, "more than 4096 tools"),
        # 3.8 MB of "0," is 1.9 million JSON values: some 180 MB parsed.
        ({"MISBEHAVE_ZEROS": str(1900000)}, "would take more than 64 MiB once parsed"),
    ]
    for env, want in cases:
        f = servers_file({"hostile": misbehave(env=env)})
        rc, err, rss = peak_rss_kib("describe", "--servers", f)
        assert rc != 0 and "server 'hostile'" in err and want in err, (env, rc, err)
        assert "airlock's cap of" in err, err
        assert err.count("\n") == 1, err
        # Bounded: the list's caps, not what the server sent (generous).
        assert rss < 3 * base + 96 * 1024, (env, rss, base)


def test_tools_named_as_the_stubs_own_names_are_renamed():
    names = ("Literal,Any,TypedDict,Required,_call,_acall,locals,str,int,list,dict,__all__,"
             "_index,ok,counter")
    f = servers_file({"n": misbehave(env={"MISBEHAVE_TOOLS": names}),
                      "_index": misbehave(env={"MISBEHAVE_TOOLS": "ok"})})
    out = ok_stdout('''
import servers
from servers import n
print(n.Literal_().split()[0], n.Any_().split()[0], n.TypedDict_().split()[0],
      n.Required_().split()[0], n._call_().split()[0], n._acall_().split()[0],
      n.locals_().split()[0], n.str_().split()[0], n.list_(ids=[1]).split()[0],
      n.__all___().split()[0], n._index_().split()[0])
print(n.ok(size=1).split()[0], n.counter())
import asyncio
print(asyncio.run(n.Literal__async()).split()[0])
print(servers._index_.ok().split()[0], len(servers.search("ok")) >= 2)
''', "--servers", f)
    assert out.splitlines() == [
        "Literal Any TypedDict Required _call _acall locals str list __all__ _index",
        "ok count 1", "Literal", "ok True"], out


def test_the_items_of_a_list_are_checked_before_the_call():
    log = os.path.join(tmpdir(), "log")
    f = servers_file({"n": misbehave(log, env={"MISBEHAVE_TOOLS": "ok", "MISBEHAVE_LOG": log})})
    out = ok_stdout('''
import servers
from servers import n
for ids in ([1, 2], [1, "two"], [1.5]):
    try:
        print(n.ok(ids=ids).split()[0])
    except ValueError as e:
        print("ValueError", e)
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "ok", out
    assert lines[1].startswith("ValueError tool 'n.ok': argument 'ids' item 1 must be an "
                               "integer, got "), out
    assert lines[2].startswith("ValueError tool 'n.ok': argument 'ids' item 0 must be an "
                               "integer"), out
    # Only the valid call reached the server.
    with open(log) as g:
        assert g.read().count("call ok ") == 1


def test_search_finds_a_tool_by_its_own_name_first():
    names = "git_changelog_analyze,git_log,git_log_graph,git_status,cron_parse,cron-next"
    f = servers_file({"git": misbehave(env={"MISBEHAVE_TOOLS": names})})
    out = ok_stdout('''
import servers
for q in ("git_log", "git log", "git.git_log", "cron_parse", "cron-next", ["git", "log"],
          "changelog"):
    print(repr(q), [r.split(":")[0] for r in servers.search(q)][:3])
''', "--servers", f)
    got = {}
    for line in out.splitlines():
        q, _, rest = line.partition(" [")
        got[q] = eval("[" + rest)
    assert got["'git_log'"][0] == "git.git_log", got
    assert got["'git log'"][0] == "git.git_log", got
    assert got["'git.git_log'"][0] == "git.git_log", got
    assert got["['git', 'log']"][0] == "git.git_log", got
    assert got["'cron_parse'"][0] == "git.cron_parse", got
    assert got["'cron-next'"][0] == "git.cron_next", got
    assert got["'changelog'"][0] == "git.git_changelog_analyze", got


HOSTILE_SERVER = r'''
import json, sys
NASTY = ['"""', "'" * 3, "\\", '"', "\n", "\r", "\t", "\u2028", "é€😀", "{x}", "#", "):\n    import os",
         "\\N{BULLET}", "\x7f", "\\u0041"]
def nasty(i):
    return "".join(NASTY[(i + k) % len(NASTY)] for k in range(5))
props = {nasty(i): {"type": t, "description": nasty(i + 1), "enum": e, "default": d}
         for i, (t, e, d) in enumerate([("string", [nasty(3), nasty(4)], nasty(3)),
                                         ("integer", None, 7), ("number", None, 1e300),
                                         ("boolean", None, True), ("string", None, None)])}
for p in props.values():
    for k in [k for k, v in p.items() if v is None]:
        del p[k]
props["nested"] = {"type": "object", "properties": {nasty(9): {"anyOf": [{"type": "string"},
                   {"const": nasty(2)}, {"type": "array", "items": {"type": "object",
                   "properties": {nasty(5): {"type": "null"}}}}]}}}
tools = [{"name": nasty(i) + str(i), "description": nasty(i + 2),
          "inputSchema": {"type": "object", "properties": props},
          "outputSchema": {"type": "object", "properties": {nasty(6): {"type": "string"}}},
          "annotations": {"readOnlyHint": True}} for i in range(12)]
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "hostile", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": tools}
    else:
        r = {"content": [], "structuredContent": {"name": m["params"]["name"],
                                                  "args": m["params"].get("arguments")}}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
'''


def test_a_hostile_tool_list_makes_stubs_that_import_and_call_right():
    d = tmpdir()
    script = os.path.join(d, "hostile.py")
    with open(script, "w") as f:
        f.write(HOSTILE_SERVER)
    f = servers_file({"h": {"command": sys.executable, "args": [script]}})
    out = ok_stdout(r'''
import inspect, json
import servers
from servers import h
names = [n for n in h.__all__ if not n.endswith("_async")]
print(len(names))
seen = []
for n in names:
    fn = getattr(h, n)
    r = fn()
    seen.append([r["name"], sorted(r["args"])])
print(json.dumps(seen))
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0] == "12", out
    # Every function reached its own tool, and the arguments it sent (the
    # defaults) went under the schema's own property names.
    ns = {}
    exec(HOSTILE_SERVER.split("props =")[0], ns)
    seen = json.loads(lines[1])
    assert sorted(n for n, _ in seen) == sorted(ns["nasty"](i) + str(i) for i in range(12)), seen
    want = sorted(ns["nasty"](i) for i in range(4))
    assert all(args == want for _, args in seen), (seen, want)


HOSTILE_CHECK = r'''
import ast, builtins, json, pydoc
import servers
from servers import h, _index
GEN = {"TypedDict", "Required", "Literal", "Any", "str", "int", "float", "bool", "dict", "list",
       "_call", "_acall", "locals"}
def check(path):
    """What the generated source may hold: imports, TypedDicts, functions
    whose bodies are a docstring and the return of _call/_acall, constants;
    no attribute, no call or name the generator does not write."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    defined = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name)}
    bad = []
    for fn in tree.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = fn.body
            ok = (len(body) == 2 and isinstance(body[0], ast.Expr) and
                  isinstance(body[0].value, ast.Constant) and isinstance(body[1], ast.Return))
            if not ok or fn.decorator_list:
                bad.append(("body", fn.name))
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            bad.append(("attribute", n.attr))
        elif isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in GEN):
            bad.append(("call", ast.dump(n.func)[:80]))
        elif isinstance(n, ast.Name) and n.id not in GEN | defined | ARGS and not isinstance(
                n.ctx, ast.Store):
            bad.append(("name", n.id))
        elif isinstance(n, (ast.Lambda, ast.Import, ast.Global, ast.Nonlocal, ast.Delete,
                            ast.With, ast.For, ast.While, ast.If, ast.Try, ast.ClassDef)):
            bad.append(("statement", type(n).__name__))
    return bad
import inspect
ARGS = set()
for fn in [getattr(h, n) for n in h.__all__]:
    ARGS |= set(inspect.signature(fn).parameters)
print(json.dumps([check(h.__file__), check(_index.__file__)]))
names = [n for n in h.__all__ if not n.endswith("_async")]
sent = []
for n in names:
    fn = getattr(h, n)
    req = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    r = fn(**{p.name: 1 for p in req})
    pydoc.render_doc(fn)
    sent.append([r["name"], sorted(r["args"])])
print(json.dumps(sent))
print(hasattr(builtins, "PWNED"), len(names))
'''


def test_a_hostile_sdk_servers_tool_list_cannot_put_code_in_the_stubs():
    # tests/mcp/fixtures/hostile.json, listed by a server made with the
    # official SDK: names, titles, descriptions, property names, defaults,
    # enums and consts meant to end a string, a docstring or a line of the
    # generated source and run code (they would set builtins.PWNED).
    with open(os.path.join(ROOT, "tests", "mcp", "fixtures", "hostile.json")) as f:
        tools = json.load(f)
    npm_server("everything")
    f = servers_file({"h": {"command": "node", "args": [UPSTREAM, "stdio"],
                            "env": {"UPSTREAM_HOSTILE": "1"}}})
    out = ok_stdout(HOSTILE_CHECK, "--servers", f)
    lines = out.splitlines()
    assert json.loads(lines[0]) == [[], []], lines[0]
    assert lines[2] == f"False {len(tools)}", out
    # Every function reached its own tool, with the schema's own names.
    seen = json.loads(lines[1])
    assert sorted(n for n, _ in seen) == sorted(t["name"] for t in tools), seen
    for name, args in seen:
        t = next(t for t in tools if t["name"] == name)
        want = sorted(k for k, p in t["inputSchema"]["properties"].items()
                      if "default" in p and not isinstance(p["default"], (dict, list))
                      or k in t["inputSchema"]["required"])
        assert args == want, (name, args, want)


def test_bad_servers_files_are_one_clear_error():
    d = tmpdir()
    cases = [
        ({"servers": {}, "other": 1}, "unknown key \"other\""),
        ({"tools": []}, "not a servers file"),
        ({"mcpServers": {"a": {"command": "node", "colour": "red"}}}, "server 'a': unknown key "
                                                                        "\"colour\""),
        ({"mcpServers": {"a": {"command": "no-such-command-here"}}}, "server 'a': \"command\""),
        ({"mcpServers": {"a": {"url": "ftp://example.com/mcp"}}}, "server 'a': \"url\" must be"),
        ({"mcpServers": {"a": {"type": "sse", "url": "https://example.com/sse"}}},
         "old HTTP+SSE transport"),
        ({"mcpServers": {"a": {"url": "https://example.com/mcp", "args": []}}},
         "\"args\" is for a server started on the host"),
        ({"mcpServers": {"a": {"command": "node", "env": {"T": "${secret:}"}}}},
         "server 'a': \"env\".\"T\""),
        ({"mcpServers": {"a": {"command": "node", "tools": {"t": {"timeout": -1}}}}},
         "tool 't': \"timeout\""),
        ({"mcpServers": {"a": {"command": "node", "approval": "sometimes"}}},
         "\"approval\" must be"),
        ({"mcpServers": {"a-b": {"command": "node"}, "a_b": {"command": "node"}}},
         "Python name 'a_b'"),
    ]
    for spec, want in cases:
        path = os.path.join(d, "s.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = airlock("run", "--servers", path, "-c", "print(1)")
        assert p.returncode == 2, (spec, p.returncode, p.stderr)
        assert want in p.stderr and path in p.stderr, (spec, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr
    a = servers_file({"x": {"command": "node"}})
    b = servers_file({"x": {"command": "node"}})
    p = airlock("run", "--servers", a, "--servers", b, "-c", "print(1)")
    assert p.returncode == 2 and "server 'x': declared twice" in p.stderr, p.stderr
    # An undeclared secret is named when the sandbox is built.
    c = servers_file({"x": dict(misbehave(), env={"T": "${secret:NOPE}"})})
    p = airlock("run", "--servers", c, "-c", "print(1)")
    assert p.returncode == 2 and "NOPE" in p.stderr, (p.returncode, p.stderr)


def test_the_description_names_the_servers_in_bounded_size():
    many = {f"server{i:02d}-with-a-rather-long-name-for-the-test": misbehave()
            for i in range(20)}
    f = servers_file(many)
    p = airlock("describe", "--servers", f)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    para = text[text.index("MCP servers:"):]
    para = para[:para.index("\n\n")]
    assert len(para.encode()) <= 2048, len(para)
    assert "server00_with_a_rather_long_name_for_the_test (15 tools)" in para, para
    assert "more servers" in para and "servers.search" in para, para
    # No tool of a server is listed by name.
    assert "garbage" not in text
    p = airlock("describe", "--json", "--servers", f)
    servers = json.loads(p.stdout)["servers"]
    assert len(servers) == 20 and servers[0] == {
        "name": "server00-with-a-rather-long-name-for-the-test",
        "module": "server00_with_a_rather_long_name_for_the_test", "tools": 15}, servers


def test_the_description_counts_one_tool_and_one_more_server_in_the_singular():
    many = {f"server{i:02d}-with-a-name-long-enough-to-fill-the-paragraph-of-":
            misbehave(allowTools=["ok"]) for i in range(14)}
    p = airlock("describe", "--servers", servers_file(many))
    assert p.returncode == 0, p.stderr
    para = p.stdout[p.stdout.index("MCP servers:"):]
    para = para[:para.index("\n\n")]
    assert "server00_with_a_name_long_enough_to_fill_the_paragraph_of_ (1 tool)," in para, \
        para
    assert "(1 tools)" not in para, para
    shown = para.count("(1 tool)")
    assert shown < 14, para
    more = 14 - shown
    assert more == 1 and ", and 1 more server are" in para, para


def test_session_cells_and_forks_share_the_servers():
    f = servers_file({"bad": misbehave()})
    cells = ("from servers import bad\nprint(bad.ok().split()[1])\n:fork\n"
             "print(bad.ok().split()[1])\n")
    p = airlock("repl", "--servers", f, input=cells, timeout=180)
    assert p.returncode == 0, p.stderr
    pids = [line for line in p.stdout.split() if line.isdigit()]
    assert len(pids) == 2 and pids[0] == pids[1], p.stdout


# ---- the host-side bounds of calls in flight (servers._start/_wait) ----

def extra(log=None):
    """mcp_misbehave.py with its big, note and seen tools, as server "b"."""
    srv = misbehave(log)
    srv["env"]["MISBEHAVE_EXTRA"] = "1"
    return servers_file({"b": srv})


def host_memory(pid):
    """The peak and current resident memory of a process, in MiB."""
    d = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmHWM", "VmRSS"):
                d[k] = int(v.split()[0]) // 1024
    return d


START_BIG_AND_LEAVE = r'''
import time
from airlock import call_tool
got = []
for i in range(4):
    r = call_tool("servers._start", calls=[["b.big", {}]] * 64)
    got.append(sum("ticket" in x for x in r))
    if i == 1:
        print([x["error"] for x in r if "ticket" not in x][0])
    time.sleep(1)
print(got)
'''


def test_results_nobody_collects_are_bounded_and_dropped_at_the_runs_end():
    # The issue's attack: a run starts 64 calls of ~1 MiB results four
    # times and never collects them. A started call holds its run's slot
    # until collected, so the second batch is refused naming the cap; what
    # is held is the raw bytes (not the parsed tree, ~10 times more), and
    # it is dropped when the run ends, so that the next run starts its 64
    # at once. Before, airlock mcp held 700 MiB after one such run and
    # 1.6 GiB after two (limit 512 MiB); now about 200 MiB at the peak.
    f = extra()
    m = Mcp("--servers", f, "--memory", "512")
    try:
        for _ in range(2):
            res = m.run(START_BIG_AND_LEAVE)
            assert res["status"] == "ok", res
            lines = res["stdout"].splitlines()
            assert "the most one run may have (64)" in lines[0], lines
            assert lines[1] == "[64, 0, 0, 0]", lines
        peak = host_memory(m.p.pid)["VmHWM"]
        # 64 raw results are 64 MiB; the rest is the server's own and the
        # transient parse of the result being read. Half of --memory is
        # the run's host budget: the peak stays well under --memory.
        assert peak < 400, (peak, "MiB: airlock mcp held more than the run's budget allows")
    finally:
        m.p.kill()
        m.p.wait()


def test_uncollected_results_count_against_the_runs_host_budget():
    # --memory 64: the run's host budget is its floor, 32 MiB. Results of
    # 1 MiB that would take the uncollected ones past it are dropped, the
    # outcome naming the budget; the rest are collected whole. Each is one
    # string, so that the test's work is the budget's bytes, not parsing.
    code = r'''
import time
from airlock import call_tool
r = call_tool("servers._start", calls=[["b.bigstr", {}]] * 48)
tickets = [x["ticket"] for x in r if "ticket" in x]
outs = {}
while len(outs) < len(tickets):
    w = call_tool("servers._wait", tickets=[t for t in tickets if t not in outs], slice_ms=0)
    for d in w["done"]:
        o = d["outcome"]
        # Only the size of each result is kept: 64 MiB is little room.
        outs[d["ticket"]] = (len(o["result"]["structuredContent"]["v"]) if o["ok"]
                             else o["error"])
    del w
ok = [o for o in outs.values() if isinstance(o, int)]
bad = [o for o in outs.values() if isinstance(o, str)]
print(len(tickets), len(ok), len(bad))
print(all(o == (1 << 20) - 4096 for o in ok))
print(bad[0] if bad else "")
'''
    f = extra()
    # 33 MiB and more moved through the host: on a loaded machine that is
    # more than the default 30 s of a run.
    with mcp("--servers", f, "--memory", "64", "--timeout", "300") as m:
        res = m.run(code)
    assert res["status"] == "ok", res
    lines = res["stdout"].splitlines()
    n, ok, bad = map(int, lines[0].split())
    assert n == 48 and ok + bad == 48 and 16 <= ok < 48, lines
    assert lines[1] == "True", lines
    assert "host budget of 33554432 bytes (half of --memory, at least 32 MiB)" in lines[2], lines


def test_a_result_whose_parse_would_pass_the_runs_host_budget_is_dropped_unparsed():
    # --memory 64: the run's host budget is its floor, 32 MiB. "big" sends
    # 1 MiB of half a million 0s, within maxResultBytes (16 MiB here) but
    # some 48 MiB once parsed. Before, the host parsed it all and only then
    # charged the result's bytes; a server could so make the host hold far
    # more than the run's budget (16 MiB of 0s parse into some 800 MiB). Now
    # its parse is charged before it is parsed: the call fails naming the
    # budget, and the server (its state, its process) stays.
    srv = misbehave(maxResultBytes=16 << 20)
    srv["env"]["MISBEHAVE_EXTRA"] = "1"
    f = servers_file({"b": srv})
    out = ok_stdout('''
import servers
from servers import b
print(b.ok())
try:
    print("parsed", len(str(b.big())))
except servers.UpstreamError as e:
    print("UpstreamError", e)
print(b.ok())
''', "--servers", f, "--memory", "64")
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert lines[1].startswith("UpstreamError b.big: server 'b' sent a result of "), out
    assert "more than the run's host budget of 33554432 bytes" in lines[1], out
    assert "dropped it unparsed" in lines[1] and "keeps running" in lines[1], out
    assert lines[2] == lines[0], out  # the same process answers


def test_a_costly_result_over_http_is_dropped_unparsed_and_the_session_stays():
    # The same over Streamable HTTP: a server of the test's own whose "big"
    # answers with 1 MiB of half a million 0s. The body is measured before
    # the reply is looked for in it; before, it was parsed whole.
    import http.server
    import threading
    zeros = json.dumps([0] * 500000, separators=(",", ":"))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "id" not in msg:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            m, params = msg["method"], msg.get("params") or {}
            if m == "initialize":
                res = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                       "serverInfo": {"name": "costly", "version": "1"}}
            elif m == "tools/list":
                res = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                 for n in ("big", "ok")]}
            elif params.get("name") == "big":
                res = None
            else:
                res = {"content": [{"type": "text", "text": "ok"}]}
            body = (json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) if res
                    else '{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text",'
                         '"text":"big"}],"structuredContent":{"v":%s}}}' % (msg["id"], zeros))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        f = servers_file({"web": {"url": f"http://127.0.0.1:{srv.server_port}/mcp",
                                  "maxResultBytes": 16 << 20, "approval": "never"}})
        out = ok_stdout('''
import servers
from servers import web
try:
    print("parsed", len(str(web.big())))
except servers.UpstreamError as e:
    print("UpstreamError", e)
print(web.ok())
''', "--servers", f, "--memory", "64")
    finally:
        srv.shutdown()
        srv.server_close()
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("UpstreamError web.big: server 'web' sent a result of "), out
    assert "more than the run's host budget of 33554432 bytes" in lines[0], out
    assert lines[1] == "ok", out


def test_one_run_holding_its_calls_leaves_room_for_another():
    # Run A starts as many calls as it may and keeps their outcomes
    # uncollected while run B, concurrent in the same sandbox, starts and
    # collects one. Before, A's done calls left the slots (only running
    # ones counted), so A filled all 256 and B failed with UpstreamError.
    log = os.path.join(tmpdir(), "log")
    f = extra(log)
    a = r'''
import time
from airlock import call_tool
got = [sum("ticket" in x for x in call_tool("servers._start", calls=[["b.ok", {}]] * 64))
       for _ in range(5)]
time.sleep(1)
got += [sum("ticket" in x for x in call_tool("servers._start", calls=[["b.ok", {}]] * 64))
        for _ in range(3)]
from servers import b
b.note(s="a-ready")
for _ in range(1200):
    if b.seen(s="b-done") == "True":
        break
    time.sleep(0.1)
print(got)
'''
    bcode = r'''
from airlock import call_tool
r = call_tool("servers._start", calls=[["b.ok", {}]] * 4)
print(["ticket" in x for x in r], [x.get("error") for x in r if "ticket" not in x][:1])
w = call_tool("servers._wait", tickets=[x["ticket"] for x in r if "ticket" in x], slice_ms=0)
print([d["outcome"]["ok"] for d in w["done"]])
from servers import b
b.note(s="b-done")
'''
    with mcp("--servers", f) as m:
        ia = m.start_call(a)
        for _ in range(1200):
            if os.path.exists(log) and "note a-ready" in open(log).read():
                break
            time.sleep(0.1)
        rb = m.run(bcode)
        ra = mcp_result_json(m.result(ia))
    assert rb["status"] == "ok", rb
    assert rb["stdout"].splitlines()[:2] == ["[True, True, True, True] []",
                                             "[True, True, True, True]"], rb["stdout"]
    assert ra["status"] == "ok", ra
    assert ra["stdout"].strip() == "[64, 0, 0, 0, 0, 0, 0, 0]", ra["stdout"]


def test_a_request_frame_is_charged_its_parse_cost():
    # A frame of 8 million small values (24 MB, under the 24 MiB frame
    # cap) would parse into about a gigabyte on the host: it is refused
    # unparsed, naming the run's host budget, and the run goes on. Before,
    # it was parsed (airlock's RSS went from 12 to 494 MB).
    code = r'''
from airlock import call_tool
try:
    call_tool("b.note", s="x", a=[0] * 8000000)
except ValueError as e:
    print(str(e))
from servers import b
print(b.note(s="after"))
'''
    f = extra()
    m = Mcp("--servers", f, "--memory", "512")
    try:
        res = m.run(code)
        peak = host_memory(m.p.pid)["VmHWM"]
    finally:
        m.p.kill()
        m.p.wait()
    assert res["status"] == "ok", res
    lines = res["stdout"].splitlines()
    assert "too large once parsed" in lines[0], lines
    assert re.search(r"with 8000\d{3} JSON values", lines[0]), lines
    assert "host budget of 268435456 bytes (half of --memory, at least 32 MiB)" in lines[0], lines
    assert lines[1] == "noted", lines
    assert peak < 200, (peak, "MiB: the frame was parsed after all")


def test_a_ticket_is_bound_to_its_run():
    # Two execute_code calls one after the other, on the same worker: the
    # second cannot collect the first's call. Before, the owner was the
    # address of the run's counters on the worker's stack, the same for
    # both.
    first = r'''
from airlock import call_tool
r = call_tool("servers._start", calls=[["b.ok", {}]])
print(r[0]["ticket"])
'''
    second = r'''
from airlock import call_tool
import servers
w = call_tool("servers._wait", tickets=[TICKET], slice_ms=0)
print(w["done"][0]["outcome"])
try:
    servers._outcome(w["done"][0]["outcome"], "b.ok", False)
except ValueError as e:
    print("ValueError", e)
'''
    f = extra()
    with mcp("--servers", f) as m:
        m.run("print(1)")  # the sandbox built: the runs below take one path
        ticket = int(m.run(first)["stdout"])
        # The calls are handed among airlock mcp's workers: several runs
        # after it, so that some run on the first one's worker.
        outs = [m.run(second.replace("TICKET", str(ticket))) for _ in range(4)]
    for res in outs:
        lines = res["stdout"].splitlines()
        assert "'ok': False" in lines[0] and "no such call of this run" in lines[0], res
        assert lines[1] == "ValueError servers: no such call of this run", res



def test_a_missing_argument_follows_python_through_a_stub_and_is_named_through_call_tool():
    """A stub is a Python function: a call that lacks a required argument
    or names one it does not take is TypeError before anything is sent, as
    for any function; call_tool, which has no signature, gets the host's
    check, ValueError naming the argument (design.md, "Arguments")."""
    f = servers_file({"e": everything()})
    out = ok_stdout('''
from servers import e
for call in (lambda: e.echo(), lambda: e.echo(message="x", nope=1), lambda: e.echo("x")):
    try:
        call()
    except TypeError as x:
        print("TypeError", x)
try:
    call_tool("e.echo")
except ValueError as x:
    print("ValueError", x)
print(e.echo(message="hi"))
''', "--servers", f)
    lines = out.splitlines()
    assert lines[0].startswith("TypeError echo() missing 1 required keyword-only argument: "
                               "'message'"), out
    assert lines[1].startswith("TypeError echo() got an unexpected keyword argument 'nope'"), out
    assert lines[2].startswith("TypeError echo() takes 0 positional arguments"), out
    assert lines[3].startswith("ValueError ") and "'message'" in lines[3], out
    assert "hi" in lines[4], out


if __name__ == "__main__":
    run()
