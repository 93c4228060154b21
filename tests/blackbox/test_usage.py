"""The usage record of a run (the result JSON's "usage", MCP's
_meta["dev.airlock/usage"]) and `airlock mcp --audit FILE`, through the
built binary, a real sandbox, a real host tool and a real HTTP server on
loopback (tests/helpers/httpd.py)."""
import json
import os
import subprocess
import sys

import harness
from harness import mcp, run, run_json

HTTPD = os.path.join(os.path.dirname(__file__), "..", "helpers", "httpd.py")
TOOL = r'''
import json, sys
a = json.load(sys.stdin)
if a.get("fail"):
    sys.exit(3)
print(json.dumps({"ok": True}))
'''


def tools():
    return harness.tools_file("probe", "Answers, or fails when asked.",
                              {"fail": {"type": "boolean"}}, [], TOOL, 10,
                              python="/usr/bin/python3")


def start_server():
    p = subprocess.Popen([sys.executable, HTTPD, "127.0.0.1"], stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def test_the_record_of_a_busy_run():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = f"""
import resource, time
x = bytearray(96 << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
t = time.process_time()
while time.process_time() - t < 0.2:
    pass
open('/output/out.bin', 'wb').write(b'z' * 12345)
call_tool('probe')
try:
    call_tool('probe', fail=True)
except RuntimeError:
    pass
r = http_post('{L}/echo?token=very-private-query', body='abcdef')
try:
    http_get('http://localhost:1/refused?x=1')
except PermissionError:
    pass
u = resource.getrusage(resource.RUSAGE_SELF)
print((u.ru_utime + u.ru_stime) * 1000)
"""
        rc, r = run_json(code, "-t", tools(), "-a", f"localhost:{port}")
        assert rc == 0, r
        u = r["usage"]
        own_cpu = float(r["stdout"])
        assert u["wall_ms"] == r["duration_ms"], u
        assert u["cpu_source"] in ("cgroup", "schedstat", "proc"), u
        # The copy's own CPU time is part of what is counted (the cgroup
        # and the reaped children may add a little, never take away).
        assert u["cpu_ms"] >= own_cpu * 0.9 - 20, (u, own_cpu)
        assert u["memory_source"] in ("cgroup", "smaps_rollup"), u
        assert (96 << 20) <= u["peak_private_bytes"] < (96 << 20) + (200 << 20), u
        assert u["output_bytes"] == 12345, u
        assert [(t["name"], t["ok"]) for t in u["tool_calls"]] == [("probe", True),
                                                                  ("probe", False)], u
        assert all(t["duration_ms"] > 0 for t in u["tool_calls"]), u
        h = u["http_requests"]
        assert len(h) == 2, h
        assert h[0]["method"] == "POST" and h[0]["url"] == f"http://localhost:{port}/echo", h
        assert h[0]["status"] == 200 and h[0]["allowed"] is True, h
        assert h[0]["bytes_sent"] == 6 and h[0]["bytes_received"] > 6, h
        assert h[1]["url"] == "http://localhost:1/refused" and h[1]["allowed"] is False, h
        assert h[1]["status"] == 0, h
        assert "very-private-query" not in json.dumps(u), u
        assert u["tool_calls_omitted"] == 0 and u["http_requests_omitted"] == 0, u
    finally:
        srv.kill()
        srv.wait()


def test_cpu_time_of_a_short_run_is_finer_than_clock_ticks():
    # /proc/PID/stat counts in clock ticks (10 ms): a short run read 0.0, or
    # 10.0. The finest source gives what the run used, to the microsecond.
    figures = []
    for _ in range(3):
        rc, r = run_json("x = sum(range(300000))")
        assert rc == 0, r
        u = r["usage"]
        assert u["cpu_source"] in ("cgroup", "schedstat"), u
        figures.append(u["cpu_ms"])
    assert all(f > 0 for f in figures), figures
    assert any(round(f * 1000) % 10000 for f in figures), figures
    # Figures are rounded to microseconds: 3 decimals at most.
    text = harness.airlock("run", "--json", "-c", "pass").stdout
    import re
    for key in ("duration_ms", "wall_ms", "cpu_ms"):
        m = re.search(r'"%s":\s*([0-9.e+-]+)' % key, text)
        assert m and len(m.group(1).partition(".")[2]) <= 3, (key, text[-400:])


def test_private_memory_is_not_rss():
    # A copy shares the template's pages (the interpreter, its modules):
    # they are in its RSS, not in what the run used.
    code = ("import re\n"
            "print(int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1]) * 1024)")
    rc, r = run_json(code)
    assert rc == 0, r
    rss = int(r["stdout"])
    u = r["usage"]
    assert 0 < u["peak_private_bytes"] < rss, (u, rss)


def test_caps_count_what_is_left_out():
    code = ("for i in range(130):\n    call_tool('probe')\n"
            "for i in range(105):\n"
            "    try:\n        http_get('http://localhost:1/x')\n"
            "    except PermissionError:\n        pass\n")
    # 130 tool calls start python3 130 times: at a load of 15 on 2 cores
    # that took longer than the default 30 s; the caps, not the time, are
    # what this test is about.
    rc, r = run_json(code, "-t", tools(), "--timeout", "600")
    assert rc == 0, r
    u = r["usage"]
    assert len(u["tool_calls"]) == 100 and u["tool_calls_omitted"] == 30, u["tool_calls_omitted"]
    assert len(u["http_requests"]) == 100 and u["http_requests_omitted"] == 5, u


def test_mcp_meta_on_request_and_the_audit_file():
    os.environ["S19_AUDIT_TOKEN"] = "audit-secret-value-42"
    audit = os.path.join(harness.tmpdir(), "audit.jsonl")
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        with mcp("--audit", audit, "-t", tools(), "-a", f"localhost:{port}", "--secret",
                 f"TOK=env:S19_AUDIT_TOKEN@{L}") as m:
            code = ("import airlock\n"
                    f"http_get('{L}/echo?q=zz', headers={{'A': airlock.secret('TOK')}})\n"
                    "call_tool('probe')\nprint('MARKER-OUTPUT-' + 'XYZ')\n")
            plain = m.request("tools/call", {"name": "execute_code",
                                             "arguments": {"code": "print(1)"}})["result"]
            assert "dev.airlock/usage" not in plain.get("_meta", {}), plain
            asked = m.request("tools/call", {"name": "execute_code", "arguments": {"code": code},
                                             "_meta": {"dev.airlock/usage": True}})["result"]
            u = asked["_meta"]["dev.airlock/usage"]
            assert [t["name"] for t in u["tool_calls"]] == ["probe"], u
            assert u["http_requests"][0]["url"] == f"{L}/echo", u
            # The run record asks for it too.
            rec = m.call("print(2)")
            assert "dev.airlock/usage" in rec["_meta"] and "dev.airlock/run" in rec["_meta"], rec
            m.call("raise SystemExit(3)")
        with open(audit) as f:
            text = f.read()
        lines = [json.loads(x) for x in text.splitlines()]
        assert len(lines) == 4, lines
        assert [x["status"] for x in lines] == ["ok", "ok", "ok", "error"], lines
        assert lines[3]["exit_code"] == 3, lines
        assert all(x["transport"] == "mcp" and len(x["call"]) == 32 and x["time"].endswith("Z")
                   for x in lines), lines
        assert lines[1]["usage"]["tool_calls"][0]["name"] == "probe", lines
        # No code, no output, no secret, no query string.
        for bad in ("http_get", "MARKER-OUTPUT", "audit-secret-value-42", "q=zz",
                    "airlock-secret-TOK"):
            assert bad not in text, bad
        assert oct(os.stat(audit).st_mode & 0o777) == "0o600", oct(os.stat(audit).st_mode)
        # Appended to, never truncated: a second server adds its lines.
        with mcp("--audit", audit) as m:
            m.call("print(3)")
        with open(audit) as f:
            assert len(f.read().splitlines()) == 5
    finally:
        srv.kill()
        srv.wait()


def test_audit_is_for_mcp_and_serve_and_must_open():
    p = harness.airlock("run", "--audit", "/tmp/x", "-c", "1")
    assert p.returncode == 2, p.stderr
    assert "--audit is not an option of airlock run (it is one of: mcp, serve)" in p.stderr, \
        p.stderr
    p = subprocess.run([harness.AIRLOCK, "mcp", "--audit", "/nonexistent-dir/a.log"],
                       input="", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "/nonexistent-dir/a.log" in p.stderr, p.stderr


if __name__ == "__main__":
    run()
