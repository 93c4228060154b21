"""Black-box tests of the guest's ways out, through a real sandbox: host tools
declared in a tools file, and the HTTP gateway against a local server."""
import http.server
import json
import os
import socketserver
import threading

import harness
from harness import run, run_json

TOOL = r'''
import json, sys, time
a = json.load(sys.stdin)
op = a["operation"]
if op == "add":
    print(json.dumps({"sum": a["a"] + a["b"], "nested": {"list": [1, "\u00e9", None]},
                      "nul": "a\u0000b"}))
elif op == "crash":
    import os; os.kill(os.getpid(), 9)
elif op == "hang":
    time.sleep(60)
elif op == "hang_marked":
    import os
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hanging"), "w").close()
    time.sleep(3600)
elif op == "garbage":
    print("this is not json")
elif op == "flood":
    sys.stdout.write("x" * (100 << 20))
else:
    print("no such operation: " + op, file=sys.stderr); sys.exit(3)
'''


def tools_file(timeout=2):
    return harness.tools_file("compute", "Does arithmetic and misbehaves.",
                              {"operation": {"type": "string"}, "a": {"type": "number"},
                               "b": {"type": "number"}}, ["operation"],
                              TOOL, timeout, python="/usr/bin/python3")


def test_tool_round_trip_nested_unicode_nul():
    code = ("r = call_tool('compute', operation='add', a=2, b=3.5)\n"
            "print(r['sum'], r['nested']['list'], repr(r['nul']))\n")
    rc, r = run_json(code, "-t", tools_file())
    assert rc == 0, r
    assert r["stdout"] == "5.5 [1, 'é', None] 'a\\x00b'\n"


def test_tool_failures_are_clean_errors():
    code = ("for op in ['crash', 'hang', 'garbage', 'flood', 'other']:\n"
            "    try:\n        call_tool('compute', operation=op)\n        print(op, 'returned')\n"
            "    except RuntimeError as e:\n        print(op, 'RuntimeError')\n")
    rc, r = run_json(code, "-t", tools_file(timeout=1), "--timeout", "60")
    assert rc == 0, r
    assert r["stdout"].split("\n")[:-1] == [f"{op} RuntimeError" for op in
                                            ["crash", "hang", "garbage", "flood", "other"]]


def test_tool_validation_errors():
    code = ("import airlock\n"
            "for kw in [dict(), dict(operation=1), dict(operation='add', c=1)]:\n"
            "    try:\n        airlock.call_tool('compute', **kw)\n"
            "    except ValueError as e:\n        print(e)\n"
            "try:\n    call_tool('missing')\nexcept ValueError as e:\n    print(e)\n"
            "try:\n    call_tool('compute', 'add')\nexcept TypeError as e:\n    print('TypeError')\n")
    rc, r = run_json(code, "-t", tools_file())
    lines = r["stdout"].splitlines()
    assert len(lines) == 5, r
    assert "operation" in lines[0] and "compute" in lines[0]
    assert "operation" in lines[1] and "string" in lines[1]
    assert "'c'" in lines[2] or " c " in lines[2] or "c" in lines[2]
    assert "missing" in lines[3]
    assert lines[4] == "TypeError"


def test_tool_argument_called_name():
    # call_tool's own first parameter is positional-only: a tool may have an
    # argument called "name" (it was "got multiple values for argument").
    path = harness.tools_file("greet", "Greets.", {"name": {"type": "string"}}, ["name"],
                              "import json, sys\nprint(json.dumps('hi ' + json.load(sys.stdin)"
                              "['name']))\n", 5, python="/usr/bin/python3")
    rc, r = run_json("print(call_tool('greet', name='Ada'))", "-t", path)
    assert rc == 0 and r["stdout"] == "hi Ada\n", r


def test_slow_tool_cannot_hold_the_run_past_its_limit():
    # The tool would hang for an hour: only the run's 2 s limit can end the
    # command before run_json's own 120 s guard fails the test.
    rc, r = run_json("call_tool('compute', operation='hang')\nwhile True: pass",
                     "-t", tools_file(timeout=3600), "--timeout", "2")
    assert r["status"] == "timeout", r


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if "redirect" in self.path:
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.end_headers()
            return
        if "huge" in self.path:
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"x" * (1 << 20))
            except OSError:
                pass
            return
        body = json.dumps({"path": self.path, "ua": self.headers.get("X-Test")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        self.send_response(201)
        self.end_headers()
        self.wfile.write(body[::-1])


def server():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def test_http_allowed_denied_paths_methods_redirects():
    srv, port = server()
    try:
        base = f"http://127.0.0.1:{port}"
        code = (f"B = '{base}'\n"
                "import json\n"
                "r = http_get(B + '/api/x', headers={'X-Test': 'yes'})\n"
                "print(r['status'], json.loads(r['body']))\n"
                "r = http_post(B + '/api/echo', body='abc')\n"
                "print(r['status'], r['body'])\n"
                "for m, u in [('GET', B + '/apiary'), ('DELETE', B + '/api/x'),\n"
                "             ('GET', 'http://127.0.0.1:1/api'), ('GET', 'https://127.0.0.1:%d/api' % " + str(port) + ")]:\n"
                "    try:\n        http_request(m, u)\n        print('allowed', m, u)\n"
                "    except PermissionError as e:\n        print('denied', m)\n"
                "r = http_get(B + '/api/redirect')\n"
                "print(r['status'], r['headers'].get('location'))\n"
                "try:\n    http_get(B + '/api/huge')\nexcept Exception as e:\n    print('huge', type(e).__name__)\n")
        rc, r = run_json(code, "-a", f"{base}/api=GET,POST")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        assert lines[0] == "200 {'path': '/api/x', 'ua': 'yes'}", lines
        assert lines[1] == "201 cba", lines
        assert lines[2:6] == ["denied GET", "denied DELETE", "denied GET", "denied GET"], lines
        assert lines[6] == "302 http://169.254.169.254/latest/meta-data", lines
        assert lines[7].startswith("huge "), lines
    finally:
        srv.shutdown()


def test_loopback_name_needs_an_entry_naming_it():
    srv, port = server()
    try:
        # localhost resolves to 127.0.0.1; an entry naming 127.0.0.1 does not
        # allow the name, and no entry allows the address behind a name.
        code = ("try:\n    http_get('http://localhost:%d/')\n    print('allowed')\n"
                "except PermissionError:\n    print('denied')\n" % port)
        rc, r = run_json(code, "-a", f"127.0.0.1:{port}")
        assert r["stdout"] == "denied\n", r
        rc, r = run_json(code.replace("print('allowed')", "print('ok')"), "-a",
                         f"localhost:{port}")
        assert r["stdout"] == "ok\n", r
    finally:
        srv.shutdown()


def test_a_cancel_reaches_a_run_that_waits_in_a_host_tool():
    """airlock mcp runs a call on the thread that reads its input, which it
    hands to another thread before any step that may take long. A host
    tool's call is one: a cancel that arrives while the run waits in it must
    stop the run, and the server must go on answering (before, nothing read
    the input meanwhile, and the cancel waited for the tool's hour)."""
    import time
    d = harness.tmpdir()
    f = harness.tools_file("compute", "Does arithmetic and misbehaves.",
                           {"operation": {"type": "string"}}, ["operation"], TOOL, 3600,
                           folder=d, python="/usr/bin/python3")
    with harness.mcp("-t", f, "--timeout", "600") as m:
        i = m.start_call("call_tool('compute', operation='hang_marked')")
        while not os.path.exists(os.path.join(d, "hanging")):
            assert m.p.poll() is None
            time.sleep(0.05)
        m.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": i, "reason": "test"}})
        r = m.call("print('after')")
        assert r["content"][0]["text"] == "after\n", r


if __name__ == "__main__":
    run()
