"""Traces (docs/tracing.md): the spans airlock exports over OTLP/HTTP, read by
the test's own OTLP receiver (an HTTP server on loopback that decodes the
OTLP JSON bodies). One execute_code call that calls a host tool twice (once
failing), makes one allowed HTTP request and calls one upstream MCP tool
(tests/helpers/mcp_misbehave.py's "meta", which answers with the _meta it
received) is checked as a whole tree: parents, names, attributes, error
statuses, and the trace context the upstream got. The same through
`airlock serve` with a traceparent in _meta; collectors that are down, slow
or failing; and no secret and no code in any exported byte by default."""
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

import harness
from harness import AIRLOCK, mcp_call_params, run, tmpdir
from test_serve import MODERN, Serve, result_of

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MISBEHAVE = os.path.join(ROOT, "tests", "helpers", "mcp_misbehave.py")

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
HEADER_SECRET = "otlp-header-secret-4711"   # an OTLP header's value
QUERY_SECRET = "query-secret-0815"          # in a request's query string
CODE_MARK = "CODE_MARK_31337"               # in the code only

TOOL = r'''
import json, sys
a = json.load(sys.stdin)
if a["operation"] == "add":
    print(json.dumps({"sum": a["a"] + a["b"]}))
else:
    print("no such operation", file=sys.stderr); sys.exit(3)
'''


class Receiver:
    """An OTLP/HTTP receiver: keeps every body and its spans. mode "ok"
    answers 200, "fail" 500, "hang" holds each request until released.
    It listens on host's loopback address (or "0.0.0.0": every address,
    for servers in other network namespaces)."""

    def __init__(self, mode="ok", host="127.0.0.1"):
        self.mode = mode
        self.bodies = []
        self.spans = []
        self.cv = threading.Condition()
        self.release = threading.Event()
        self.posts = 0
        self.headers = []
        rcv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with rcv.cv:
                    rcv.posts += 1
                    rcv.headers.append(dict(self.headers))
                    rcv.cv.notify_all()
                if rcv.mode == "hang":
                    rcv.release.wait(600)
                try:
                    self.answer(body)
                except OSError:
                    pass  # the exporter gave up on a held request

            def answer(self, body):
                if rcv.mode == "fail":
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.loads(body)
                with rcv.cv:
                    rcv.bodies.append(body)
                    for rs in data["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            rcv.spans.extend(ss["spans"])
                    rcv.cv.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.srv = socketserver.ThreadingTCPServer((host, 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def wait(self, pred, timeout=120):
        with self.cv:
            assert self.cv.wait_for(lambda: pred(self), timeout), self.spans

    def close(self):
        self.release.set()
        self.srv.shutdown()


def down_port():
    """A loopback port nobody listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def otel_env(port, **more):
    env = dict(os.environ)
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={HEADER_SECRET}",
                "OTEL_SERVICE_NAME": "airlock-test",
                "OTEL_BSP_SCHEDULE_DELAY": "50"})
    env.update(more)
    return env


def attrs(span):
    return {a["key"]: list(a["value"].values())[0] for a in span["attributes"]}


def by_name(spans, name):
    found = [s for s in spans if s["name"] == name]
    assert found, (name, sorted(s["name"] for s in spans))
    return found


class HttpTarget:
    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()


def setup():
    """The tools, servers and allow-list options of the whole-tree call."""
    tools = harness.tools_file("compute", "Adds.", {"operation": {"type": "string"},
                               "a": {"type": "number"}, "b": {"type": "number"}},
                               ["operation"], TOOL, 10, python="/usr/bin/python3")
    servers = os.path.join(tmpdir(), "servers.json")
    with open(servers, "w") as f:
        json.dump({"mcpServers": {"up": {
            "command": sys.executable, "args": [MISBEHAVE],
            "env": {"MISBEHAVE_META": "1", "MISBEHAVE_LOG": os.path.join(tmpdir(), "log")}}}}, f)
    target = HttpTarget()
    code = (f"# {CODE_MARK}\n"
            "import json\n"
            "print(call_tool('compute', operation='add', a=1, b=2))\n"
            "try:\n    call_tool('compute', operation='nope')\nexcept Exception as e:\n"
            "    print('failed', type(e).__name__)\n"
            f"print(http_get('http://127.0.0.1:{target.port}/api/x?token={QUERY_SECRET}')"
            "['status'])\n"
            "from servers import up\n"
            "print('META', up.meta())\n")
    args = ["--tools", tools, "--servers", servers, "-a", f"http://127.0.0.1:{target.port}/api=GET"]
    return code, args, target


def mcp_with(env, *args):
    m = harness.Mcp.__new__(harness.Mcp)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        m.__init__(*args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return m


def check_tree(spans, server, upstream_meta):
    """The run's tree under the server span."""
    sid = server["spanId"]
    tid = server["traceId"]
    assert all(s["traceId"] == tid for s in spans), spans
    run_span = by_name(spans, "airlock.run")[0]
    assert run_span["parentSpanId"] == sid, run_span
    ra = attrs(run_span)
    assert ra["airlock.status"] == "ok", ra
    assert float(ra["airlock.limits.timeout_s"]) > 0 and "airlock.cpu_ms" in ra, ra
    assert "airlock.peak_memory_bytes" in ra and ra["airlock.tool_calls"] == "3", ra
    assert float(ra["airlock.copy_wait_ms"]) >= 0, ra
    wait = by_name(spans, "airlock.copy_wait")[0]
    assert wait["parentSpanId"] == run_span["spanId"], wait
    tools = by_name(spans, "execute_tool compute")
    assert len(tools) == 2, tools
    assert all(t["parentSpanId"] == run_span["spanId"] for t in tools), tools
    assert all(attrs(t)["gen_ai.tool.name"] == "compute" for t in tools), tools
    failed = [t for t in tools if t.get("status", {}).get("code") == 2]
    assert len(failed) == 1, tools
    get = by_name(spans, "GET")[0]
    ga = attrs(get)
    assert get["parentSpanId"] == run_span["spanId"] and get["kind"] == 3, get
    assert ga["http.request.method"] == "GET" and ga["server.address"] == "127.0.0.1", ga
    assert ga["http.response.status_code"] == "200", ga
    assert "?" not in ga["url.full"] and ga["url.full"].endswith("/api/x"), ga
    up = [s for s in spans if s["name"].startswith("tools/call ") and s["kind"] == 3]
    assert len(up) == 1 and up[0]["parentSpanId"] == run_span["spanId"], up
    assert attrs(up[0])["mcp.method.name"] == "tools/call", up
    # The upstream server got the client span's context in its _meta.
    assert upstream_meta["traceparent"] == f"00-{tid}-{up[0]['spanId']}-01", upstream_meta


def no_secret_no_code(rcv):
    for body in rcv.bodies:
        for s in (HEADER_SECRET, QUERY_SECRET, CODE_MARK, "call_tool"):
            assert s.encode() not in body, (s, body[:3000])


def test_execute_code_tree_over_stdio():
    rcv = Receiver()
    code, args, target = setup()
    m = mcp_with(otel_env(rcv.port), *args)
    try:
        params = mcp_call_params(code)
        params["_meta"].update({"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
        r = m.call_result = m.result(m.start("tools/call", params))
        assert not r["isError"], r
        text = "".join(c.get("text", "") for c in r["content"])
        assert "failed" in text, text
        meta = json.loads(text.split("META ", 1)[1].splitlines()[0])
        # A failing call: the server span's status is an error.
        bad = m.result(m.start("tools/call", {"name": "execute_code",
                                              "arguments": {"code": "raise SystemExit(3)"}}))
        assert bad["isError"], bad
        assert m.close() == 0
        rcv.wait(lambda r: len([s for s in r.spans if s["name"] == "tools/call execute_code"]) >= 2)
        servers = by_name(rcv.spans, "tools/call execute_code")
        first = [s for s in servers if s["traceId"] == TRACE_ID]
        assert len(first) == 1, servers
        server = first[0]
        assert server["parentSpanId"] == PARENT_ID and server["kind"] == 2, server
        assert server.get("traceState") == "vendor=1", server
        sa = attrs(server)
        assert sa["mcp.method.name"] == "tools/call" and sa["gen_ai.tool.name"] == "execute_code"
        assert "jsonrpc.request.id" in sa, sa
        assert server.get("status", {}).get("code") != 2, server
        check_tree([s for s in rcv.spans if s["traceId"] == TRACE_ID], server, meta)
        other = [s for s in servers if s["traceId"] != TRACE_ID][0]
        assert "parentSpanId" not in other, other  # no _meta: a new trace
        assert other["status"]["code"] == 2, other
        no_secret_no_code(rcv)
    finally:
        if m.p.poll() is None:
            m.p.kill()
        rcv.close()
        target.srv.shutdown()


def test_a_name_cut_in_a_character_still_exports_its_span():
    """A client's tool name and method are its own, in any script: where a
    span's name is cut to its cap, it is cut between characters, so that
    the span is exported (valid UTF-8) rather than dropped, and a client
    cannot hide its calls from the trace with a long name."""
    rcv = Receiver()
    m = mcp_with(otel_env(rcv.port))
    tool = "a" * 99 + "\u00e9" * 20  # its 100th byte is inside an é
    method = "b" * 99 + "\u00e9" * 20  # so is the method's
    try:
        r = m.request("tools/call", {"name": tool, "arguments": {}})
        assert "error" in r or r["result"]["isError"], r
        r = m.request(method, {})
        assert "error" in r, r
        assert not m.call("print(1)")["isError"]
        assert m.close() == 0
        rcv.wait(lambda r: any(s["name"] == "tools/call execute_code" for s in r.spans))
        names = [s["name"] for s in rcv.spans]
        assert any(n.startswith("tools/call " + "a" * 99) for n in names), names
        assert any(n.startswith("b" * 99) for n in names), names
    finally:
        if m.p.poll() is None:
            m.p.kill()
        rcv.close()


def test_serve_joins_the_callers_trace_and_counts_drops():
    rcv = Receiver()
    saved = dict(os.environ)
    os.environ.update(otel_env(rcv.port))
    try:
        s = Serve()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        meta = dict(MODERN, traceparent=TRACEPARENT)
        st, _, body = s.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                              "params": {"name": "execute_code",
                                         "arguments": {"code": f"print(1) # {CODE_MARK}"},
                                         "_meta": meta}})
        assert st == 200 and not result_of(body)["isError"], body
        rcv.wait(lambda r: any(x["name"] == "airlock.run" and x["traceId"] == TRACE_ID
                               for x in r.spans))
        server = [x for x in rcv.spans if x["name"] == "tools/call execute_code"
                  and x["traceId"] == TRACE_ID][0]
        assert server["traceId"] == TRACE_ID and server["parentSpanId"] == PARENT_ID, server
        assert attrs(server)["jsonrpc.request.id"] == "7", server
        run_span = [x for x in by_name(rcv.spans, "airlock.run") if x["traceId"] == TRACE_ID][0]
        assert run_span["parentSpanId"] == server["spanId"], run_span
        c = s.conn()
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        assert 'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"} 1' \
            in text, text
        assert "airlock_trace_spans_dropped_total 0" in text, text
        assert "tenant" not in text.split("mcp_server_operation_duration", 1)[1], text
        no_secret_no_code(rcv)
    finally:
        s.stop()
        rcv.close()


def serve_with(env, *args):
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return Serve(*args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def call(s, code):
    st, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "execute_code", "arguments": {"code": code},
                                     "_meta": MODERN}})
    assert st == 200, body
    return result_of(body)


def dropped(s):
    c = s.conn()
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith("airlock_trace_spans_dropped_total "):
            return int(line.split()[1])
    raise AssertionError(text)


def test_collector_down_or_failing_drops_and_counts():
    for mode in ("down", "fail"):
        rcv = None if mode == "down" else Receiver(mode)
        port = down_port() if mode == "down" else rcv.port
        s = serve_with(otel_env(port, OTEL_BSP_SCHEDULE_DELAY="10"))
        try:
            for _ in range(3):
                assert not call(s, "print(1)")["isError"]
            # The exporter's next batches fail: the counter moves, and the
            # next request's end logs one line saying so.
            while dropped(s) == 0:
                assert not call(s, "print(1)")["isError"]
            assert not call(s, "print(1)")["isError"]
            deadline = time.monotonic() + 120
            while not any("spans dropped" in line for line in s.lines):
                assert time.monotonic() < deadline, s.lines
                time.sleep(0.05)  # the reader thread of Serve appends the line
            assert sum("spans dropped" in line for line in s.lines) == 1, s.lines
        finally:
            s.stop()
            if rcv:
                rcv.close()


def test_a_hanging_collector_blocks_neither_runs_nor_exit():
    rcv = Receiver("hang")
    # The export's own timeout is far past the exit's bound: only the bound
    # (2 s for run, --grace for serve) can let the process go.
    env = otel_env(rcv.port, OTEL_EXPORTER_OTLP_TIMEOUT="600000")
    try:
        p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and p.stdout == "1\n", p
        rcv.wait(lambda r: r.posts >= 1)  # the export was under way, and held
        s = serve_with(env, "--grace", "1")
        try:
            assert not call(s, "print(2)")["isError"]
            while dropped(s) == 0 and rcv.posts < 2:
                assert not call(s, "print(3)")["isError"]
        finally:
            s.p.send_signal(signal.SIGTERM)
            s.p.wait(timeout=120)  # exits while the collector still holds the export
            assert not rcv.release.is_set()
    finally:
        rcv.close()


def test_traceparent_env_of_airlock_run():
    rcv = Receiver()
    p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], capture_output=True, text=True,
                       env=otel_env(rcv.port, TRACEPARENT=TRACEPARENT), timeout=120)
    assert p.returncode == 0, p
    try:
        rcv.wait(lambda r: any(s["name"] == "airlock.run" for s in r.spans))
        run_span = by_name(rcv.spans, "airlock.run")[0]
        assert run_span["traceId"] == TRACE_ID and run_span["parentSpanId"] == PARENT_ID
        # A malformed one starts a new trace.
        p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], capture_output=True, text=True,
                           env=otel_env(rcv.port, TRACEPARENT="00-zz-bad-01"), timeout=120)
        assert p.returncode == 0, p
        rcv.wait(lambda r: len([s for s in r.spans if s["name"] == "airlock.run"]) == 2)
        new = [s for s in by_name(rcv.spans, "airlock.run") if s["traceId"] != TRACE_ID][0]
        assert "parentSpanId" not in new, new
    finally:
        rcv.close()


def test_off_without_an_endpoint_and_sampler_off():
    rcv = Receiver()
    env = otel_env(rcv.port, OTEL_TRACES_SAMPLER="always_off")
    p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0 and rcv.posts == 0, (p, rcv.posts)
    # parentbased_traceidratio with ratio 0 still follows a sampled parent.
    env = otel_env(rcv.port, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                   OTEL_TRACES_SAMPLER_ARG="0", TRACEPARENT=TRACEPARENT)
    p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p
    rcv.wait(lambda r: any(s["name"] == "airlock.run" for s in r.spans))
    env["TRACEPARENT"] = TRACEPARENT[:-2] + "00"  # an unsampled parent
    n = len(rcv.spans)
    p = subprocess.run([AIRLOCK, "run", "-c", "print(1)"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0 and len(rcv.spans) == n, rcv.spans
    rcv.close()


def test_trace_content_exports_code_cut_and_scrubbed():
    rcv = Receiver()
    env = otel_env(rcv.port, MYSECRET="secret-value-7777")
    code = f"# secret-value-7777\nprint(1) # {CODE_MARK} " + "x" * 10000
    p = subprocess.run([AIRLOCK, "run", "--trace-content", "--secret",
                        "S=env:MYSECRET@127.0.0.1", "-c", code], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p
    try:
        rcv.wait(lambda r: any(s["name"] == "airlock.run" for s in r.spans))
        a = attrs(by_name(rcv.spans, "airlock.run")[0])
        assert CODE_MARK in a["airlock.code"] and len(a["airlock.code"]) <= 4096, a
        for body in rcv.bodies:
            assert b"secret-value-7777" not in body
    finally:
        rcv.close()


def test_session_cells_forks_and_closes_and_a_hashed_handle():
    rcv = Receiver()
    m = mcp_with(otel_env(rcv.port))
    meta = {"traceparent": TRACEPARENT}
    try:
        r = m.request("tools/call", {"name": "session_open", "arguments": {}, "_meta": meta})
        h = r["result"]["_meta"]["dev.airlock/session"]
        for code in ("x = 1", "x += 1", "raise ValueError"):
            r = m.request("tools/call", {"name": "execute_code",
                                         "arguments": {"code": code, "session": h},
                                         "_meta": meta})
            assert "result" in r, r
        r = m.request("tools/call", {"name": "session_fork", "arguments": {"session": h},
                                     "_meta": meta})
        h2 = r["result"]["_meta"]["dev.airlock/session"]
        for handle in (h2, h):
            r = m.request("tools/call", {"name": "session_close",
                                         "arguments": {"session": handle}, "_meta": meta})
            assert not r["result"]["isError"], r
        assert m.close() == 0
        rcv.wait(lambda r: len([s for s in r.spans
                                if s["name"] == "tools/call session_close"]) == 2)
        spans = [s for s in rcv.spans if s["traceId"] == TRACE_ID]
        cells = by_name(spans, "airlock.cell")
        assert len(cells) == 3, cells
        states = sorted(attrs(c).get("airlock.cell.state", "") for c in cells)
        assert states == ["kept", "kept", "rolled_back"], states
        assert [c.get("status", {}).get("code") for c in cells].count(2) == 1, cells
        servers = {s["spanId"]: s for s in spans if s["kind"] == 2}
        for name in ("airlock.session.fork", "airlock.session.close"):
            for s in by_name(spans, name):
                assert s["parentSpanId"] in servers, s
        assert len(by_name(spans, "airlock.session.close")) >= 1
        # mcp.session.id: a keyed hash, the same for one handle, never the handle.
        ids = {attrs(s).get("mcp.session.id") for s in servers.values()
               if attrs(s).get("gen_ai.tool.name") == "execute_code"}
        assert len(ids) == 1 and None not in ids, ids
        for body in rcv.bodies:
            assert h.encode() not in body and h2.encode() not in body
            assert h[5:].encode() not in body
    finally:
        if m.p.poll() is None:
            m.p.kill()
        rcv.close()


def test_an_unsampled_caller_is_followed_down_to_the_upstream():
    rcv = Receiver()
    _, args, target = setup()
    m = mcp_with(otel_env(rcv.port), *args)
    try:
        unsampled = TRACEPARENT[:-2] + "00"
        r = m.request("tools/call", {"name": "execute_code", "arguments": {
            "code": "from servers import up\nprint('META', up.meta())"},
            "_meta": {"traceparent": unsampled}})
        text = "".join(c.get("text", "") for c in r["result"]["content"])
        meta = json.loads(text.split("META ", 1)[1].splitlines()[0])
        # The upstream is told not to sample either, in the caller's trace.
        assert meta["traceparent"].startswith(f"00-{TRACE_ID}-"), meta
        assert meta["traceparent"].endswith("-00"), meta
        assert m.close() == 0
        assert not [s for s in rcv.spans if s["traceId"] == TRACE_ID], rcv.spans
    finally:
        if m.p.poll() is None:
            m.p.kill()
        rcv.close()
        target.srv.shutdown()


def test_an_airlock_secret_in_the_otlp_headers():
    rcv = Receiver()
    value = "otlp-key-from-a-secret-5150"
    env = otel_env(rcv.port, OTLPKEY=value,
                   OTEL_EXPORTER_OTLP_HEADERS="x-api-key=${secret:OTLP}")
    try:
        # Its target allows POST to the endpoint: the header goes, and the
        # value is in no attribute, even with the code exported.
        p = subprocess.run([AIRLOCK, "run", "--trace-content", "--secret",
                            f"OTLP=env:OTLPKEY@http://127.0.0.1:{rcv.port}", "-c",
                            f"# {value}\nprint(1)"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p
        rcv.wait(lambda r: r.posts >= 1)
        assert rcv.headers[-1].get("x-api-key") == value, rcv.headers
        code = attrs(by_name(rcv.spans, "airlock.run")[0])["airlock.code"]
        assert "print(1)" in code and value not in code, code
        # A secret scoped elsewhere never goes to the collector.
        n = rcv.posts
        p = subprocess.run([AIRLOCK, "run", "--secret",
                            "OTLP=env:OTLPKEY@https://elsewhere.example", "-c", "print(1)"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p
        rcv.wait(lambda r: r.posts > n)
        assert "x-api-key" not in {k.lower() for k in rcv.headers[-1]}, rcv.headers
        for body in rcv.bodies:
            assert value.encode() not in body
    finally:
        rcv.close()


def test_workspace_tools_under_serve_and_the_tenant_only_with_trace_tenants():
    from test_serve_tenants import TOK_A, tokens_file, tool
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme-tenant"])
    for flag in ([], ["--trace-tenants"]):
        rcv = Receiver()
        s = serve_with(otel_env(rcv.port), "--tokens", tok, "--tenants-dir",
                       os.path.join(d, "t"), *flag)
        try:
            r = tool(s, TOK_A, "workspace_write",
                     {"files": [{"path": "a.txt", "text": "file-content-6174"}]})
            assert not r["isError"], r
            r = tool(s, TOK_A, "workspace_list", {})
            assert not r["isError"], r
        finally:
            s.stop()
        rcv.wait(lambda r: any(x["name"] == "tools/call workspace_list" for x in r.spans))
        w = by_name(rcv.spans, "tools/call workspace_write")[0]
        assert w["kind"] == 2 and attrs(w)["gen_ai.tool.name"] == "workspace_write", w
        tenants = {attrs(x).get("airlock.tenant") for x in rcv.spans if x["kind"] == 2}
        assert tenants == ({"acme-tenant"} if flag else {None}), tenants
        for body in rcv.bodies:
            assert b"file-content-6174" not in body and b"a.txt" not in body
            assert flag or b"acme-tenant" not in body
        rcv.close()


def test_warm_up_runs_are_no_trace():
    """The warm-up run that `airlock mcp` starts at initialize, and the one
    `airlock serve` makes before it is ready, export no span: every run
    span (and copy wait) that reaches the collector is the client's call's,
    in its trace. Both processes end first, so that the export at exit has
    sent whatever they ended."""
    rcv = Receiver()
    m = mcp_with(otel_env(rcv.port))
    try:
        params = mcp_call_params("print(1)")
        params["_meta"]["traceparent"] = TRACEPARENT
        assert not m.result(m.start("tools/call", params))["isError"]
        assert m.close() == 0
        s = serve_with(otel_env(rcv.port))
        try:
            st, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "execute_code", "arguments": {"code": "1"},
                                             "_meta": dict(MODERN, traceparent=TRACEPARENT)}})
            assert st == 200 and not result_of(body)["isError"], body
        finally:
            s.stop()
        assert s.p.returncode == 0, s.p.returncode
        rcv.wait(lambda r: len([x for x in r.spans if x["name"] == "airlock.run"]) >= 2)
        with rcv.cv:
            runs = [x for x in rcv.spans if x["name"] in ("airlock.run", "airlock.copy_wait")]
        assert all(x["traceId"] == TRACE_ID for x in runs), [
            (x["name"], x["traceId"], x.get("parentSpanId"), attrs(x).get("airlock.code.bytes"))
            for x in runs]
        assert len([x for x in runs if x["name"] == "airlock.run"]) == 2, runs
    finally:
        if m.p.poll() is None:
            m.p.kill()
        rcv.close()


if __name__ == "__main__":
    run()
