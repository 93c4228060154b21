"""airlock serve: MCP over Streamable HTTP, driven with raw HTTP (http.client
and plain sockets) on loopback: authentication, Origin, the caps and their
refusals, slow clients, cancel on disconnect, metrics, readiness, the drain
on SIGTERM and session handles that name their instance."""
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from harness import AIRLOCK, run, tmpdir

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {}}


OPERATOR = "operator-metrics-token-0123456789"


class Serve:
    """One `airlock serve` on 127.0.0.1 and a port the kernel picks. With
    --tokens it gets the operator's --metrics-token too (OPERATOR), which
    metrics() reads /metrics with: /metrics is the operator's, no tenant's
    (operator=False: none, a server started as the operator would without)."""

    def __init__(self, *args, listen="127.0.0.1:0", wait_ready=True, operator=True):
        self.operator = None
        if operator and "--tokens" in args and "--metrics-token" not in args:
            path = os.path.join(tmpdir(), "metrics-token")
            with open(path, "w") as f:
                f.write(OPERATOR + "\n")
            args = (*args, "--metrics-token", path)
            self.operator = {"Authorization": "Bearer " + OPERATOR}
        self.p = subprocess.Popen([AIRLOCK, "serve", "--listen", listen, *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        self.ready = threading.Event()
        self.started = threading.Event()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        if not (self.ready if wait_ready else self.started).wait(120):
            self.p.kill()
            raise AssertionError("serve did not become ready: " + "".join(self.lines))
        self.host = "[::1]" if listen.startswith("[") else "127.0.0.1"

    def _read(self):
        for line in self.p.stderr:
            self.lines.append(line)
            m = re.search(r"\(port (\d+)\)", line)
            if m:
                self.port = int(m.group(1))
                self.started.set()
            if line.strip() == "airlock serve: ready":
                self.ready.set()

    def conn(self, timeout=120):
        host = "::1" if self.host == "[::1]" else self.host
        return http.client.HTTPConnection(host, self.port, timeout=timeout)

    def post(self, body, headers=None, conn=None, path="/mcp"):
        """POSTs body (a dict, or bytes as is); returns (status, headers, body bytes)."""
        c = conn or self.conn()
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path, body=data, headers=h)
        r = c.getresponse()
        out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        if not conn:
            c.close()
        return out

    def get(self, path, headers=None):
        c = self.conn()
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        c.close()
        return out

    def call(self, code, headers=None, rid=1, **meta):
        status, h, body = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                     "params": {"name": "execute_code", "arguments": {"code": code},
                                                "_meta": dict(MODERN, **meta)}}, headers)
        return status, h, body

    def metrics(self, headers=None):
        status, _, body = self.get("/metrics", headers or self.operator)
        assert status == 200, (status, body)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def log(self, method=None, count=0):
        """The JSON log lines (of method), waiting until there are count of
        them: a line is written before its answer, but read from the pipe
        by a thread of this test."""
        for _ in range(400):
            out = [json.loads(l) for l in list(self.lines) if l.startswith("{")]
            out = [l for l in out if method is None or l["method"] == method]
            if len(out) >= count:
                break
            time.sleep(0.025)
        return out

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.t.join(10)


@contextlib.contextmanager
def serve(*args, **kw):
    s = Serve(*args, **kw)
    try:
        yield s
    finally:
        s.stop()
    # Every server drains and exits 0 on SIGTERM (and a sanitizer's
    # report would make it fail).
    assert s.p.returncode == 0, (s.p.returncode, "".join(s.lines)[-3000:])


def tools_list(s, headers=None):
    return s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                   "params": {"_meta": MODERN}}, headers)


def result_of(body):
    m = json.loads(body)
    assert "result" in m, m
    return m["result"]


def test_calls_answer_json_with_the_instance_header():
    with serve("--instance", "alpha") as s:
        status, h, body = s.call("print(6 * 7)")
        assert status == 200 and h["content-type"] == "application/json", (status, h, body)
        assert h["airlock-instance"] == "alpha", h
        r = result_of(body)
        assert r["content"][0]["text"] == "42\n" and not r["isError"], r
        # The handshake era works too, without a protocol session: each POST
        # stands alone, so initialize may come any number of times.
        for _ in range(2):
            status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                      "params": {"protocolVersion": "2025-11-25",
                                                 "capabilities": {},
                                                 "clientInfo": {"name": "t", "version": "1"}}})
            assert status == 200 and result_of(body)["protocolVersion"] == "2025-11-25", body
        status, _, body = s.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                                 {"MCP-Protocol-Version": "2025-11-25"})
        names = [t["name"] for t in result_of(body)["tools"]]
        assert status == 200 and "execute_code" in names, body
        assert s.get("/healthz")[0] == 200 and s.get("/readyz")[0] == 200


def test_tokens_401_and_protected_resource_metadata():
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("# comment\n  secret-one-0123456789  \nsecret-two-0123456789\n")
    with serve("--tokens", tokens, "--authorization-server", "https://auth.example") as s:
        status, h, body = tools_list(s)
        assert status == 401, (status, body)
        www = h["www-authenticate"]
        assert www.startswith("Bearer resource_metadata=\"http://") and \
            www.endswith("/.well-known/oauth-protected-resource/mcp\""), www
        status, h, _ = tools_list(s, {"Authorization": "Bearer secret-one-012345678"})
        assert status == 401 and 'error="invalid_token"' in h["www-authenticate"], h
        assert tools_list(s, {"Authorization": "Basic c2VjcmV0LW9uZS0wMTIzNDU2Nzg5"})[0] == 401
        assert tools_list(s, {"Authorization": "Bearer secret-one-0123456789"})[0] == 200
        assert tools_list(s, {"Authorization": "bearer secret-two-0123456789"})[0] == 200
        for path in ("/.well-known/oauth-protected-resource",
                     "/.well-known/oauth-protected-resource/mcp"):
            status, h, body = s.get(path)
            meta = json.loads(body)
            assert status == 200 and meta["authorization_servers"] == ["https://auth.example"], meta
            assert meta["resource"].endswith("/mcp"), meta
        # Metrics sit behind the tokens too, and count the failures.
        assert s.get("/metrics")[0] == 401
        # A token of the tokens file is a tenant's, not the operator's.
        assert s.get("/metrics", {"Authorization": "Bearer secret-two-0123456789"})[0] == 403
        m = s.metrics()
        assert m['airlock_auth_failures_total{reason="missing"}'] == 2, m
        assert m['airlock_auth_failures_total{reason="invalid"}'] == 2, m
        assert "secret" not in "".join(s.lines), s.lines


def test_tokens_reload_on_sighup():
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("old-token-0123456789abcdef\n")
    with serve("--tokens", tokens) as s:
        assert tools_list(s, {"Authorization": "Bearer old-token-0123456789abcdef"})[0] == 200
        with open(tokens + ".new", "w") as f:
            f.write("new-token-0123456789abcdef\n")
        os.rename(tokens + ".new", tokens)
        s.p.send_signal(signal.SIGHUP)
        for _ in range(200):
            if any("token loaded" in l or "tokens loaded" in l for l in s.lines):
                break
            time.sleep(0.05)
        assert tools_list(s, {"Authorization": "Bearer new-token-0123456789abcdef"})[0] == 200
        assert tools_list(s, {"Authorization": "Bearer old-token-0123456789abcdef"})[0] == 401
        # A file that cannot be read keeps the tokens in force.
        os.unlink(tokens)
        s.p.send_signal(signal.SIGHUP)
        for _ in range(200):
            if any("keeping the old tokens" in l for l in s.lines):
                break
            time.sleep(0.05)
        assert tools_list(s, {"Authorization": "Bearer new-token-0123456789abcdef"})[0] == 200
        assert s.p.poll() is None


def test_origin_is_checked():
    with serve("--allow-origin", "https://app.example") as s:
        status, _, body = tools_list(s, {"Origin": "http://evil.example"})
        assert status == 403, (status, body)
        # A rebinding page's origin names the Host it reached: still refused.
        status, _, _ = tools_list(s, {"Origin": f"http://127.0.0.1:{s.port}"})
        assert status == 403
        assert tools_list(s, {"Origin": "https://app.example"})[0] == 200
        assert tools_list(s)[0] == 200
        assert s.metrics()['airlock_refusals_total{reason="bad_origin"}'] == 2


def test_oversized_body_is_413():
    with serve("--max-body", "4096") as s:
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "execute_code", "arguments": {"code": "#" + "x" * 8000},
                          "_meta": MODERN}}
        status, _, body = s.post(big)
        assert status == 413, (status, body)
        # Without Content-Length (chunked), the cap holds while reading.
        c = s.conn()
        c.putrequest("POST", "/mcp")
        c.putheader("Content-Type", "application/json")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        data = json.dumps(big).encode()
        try:
            for i in range(0, len(data), 1000):
                part = data[i:i + 1000]
                c.send(b"%x\r\n%s\r\n" % (len(part), part))
            c.send(b"0\r\n\r\n")
            status = c.getresponse().status
        except (ConnectionError, http.client.HTTPException):
            status = "closed"
        assert status in (413, "closed"), status
        c.close()
        assert s.call("print('small')")[0] == 200
        assert s.metrics()['airlock_refusals_total{reason="body_too_large"}'] >= 1
    # All the bodies held at once have a budget too: past it 503, not 413.
    with serve("--max-body", "1048576", "--max-body-total", "65536") as s:
        status, h, body = s.call("#" + "x" * 100000)
        assert status == 503 and h["retry-after"] == "1", (status, body)
        assert s.call("print('small')")[0] == 200
        assert s.metrics()['airlock_refusals_total{reason="body_memory"}'] == 1


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_parsed_requests_stay_within_the_body_budget():
    """What a body becomes once parsed is bounded, not only its bytes: 4 MiB
    of "[0,0,..." is 2 million JSON values, some 100 MB in jansson. Sixteen
    such pings at once took the server from a few MB to 1.2 GB; with the
    parse charged to --max-body-total (64 MiB) the server's peak RSS stays
    near that budget (the bound here is generous)."""
    with serve() as s:
        before = vm_hwm_kib(s.p.pid)
        pad = b"0," * ((4 << 20) // 2 - 64)
        body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":[' + pad + b'0]}}'
        assert len(body) <= 4 << 20
        statuses = []
        barrier = threading.Barrier(16)

        def one():
            barrier.wait()
            statuses.append(s.post(body)[0])
        threads = [threading.Thread(target=one) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        peak = vm_hwm_kib(s.p.pid)
        print(f"serve peak RSS (VmHWM) {before} KiB before, {peak} KiB after", flush=True)
        assert peak - before < 400 << 10, (before, peak)
        assert len(statuses) == 16 and set(statuses) <= {413, 503}, statuses
        # A ping of ordinary size is still answered.
        status, _, out = s.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert status == 200 and json.loads(out)["result"] == {}, (status, out)
        # Deep nesting is refused before jansson recurses into it.
        status, _, out = s.post(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":' +
                                b"[" * 100 + b"]" * 100 + b"}}")
        assert status == 400 and "nested" in json.loads(out)["error"]["message"], (status, out)


def test_malformed_requests():
    with serve() as s:
        status, h, body = s.post(b"{not json")
        assert status == 400 and json.loads(body)["error"]["code"] == -32700, (status, body)
        status, _, body = s.post(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
        assert status == 400, (status, body)
        status, _, body = s.post(b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                 {"MCP-Protocol-Version": "1999-01-01"})
        assert status == 400 and "MCP-Protocol-Version" in json.loads(body)["error"]["message"]
        # Notifications and the client's responses: 202, no body.
        status, _, body = s.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202 and body == b"", (status, body)
        status, _, _ = s.post({"jsonrpc": "2.0", "id": 9, "result": {}})
        assert status == 202
        # No standalone stream: GET /mcp is 405 with Allow.
        status, h, _ = s.get("/mcp")
        assert status == 405 and h["allow"] == "POST", (status, h)
        assert s.get("/nothing")[0] == 404
        # A JSON-RPC error of the protocol is still HTTP 200.
        status, _, body = s.post({"jsonrpc": "2.0", "id": 3, "method": "no/such",
                                  "params": {"_meta": MODERN}})
        assert status == 200 and json.loads(body)["error"]["code"] == -32601, body
        assert s.call("print(1)")[0] == 200


def test_too_many_concurrent_calls_are_429_or_503_with_retry_after():
    with serve("--max-runs", "1", "--max-queue", "1", "--queue-wait", "60") as s:
        results = {}

        def slow(name):
            results[name] = s.call("import time; time.sleep(3); print('done')")

        t1 = threading.Thread(target=slow, args=("a",))
        t1.start()
        for _ in range(400):
            if s.metrics()["airlock_runs_in_flight"] == 1:
                break
            time.sleep(0.02)
        t2 = threading.Thread(target=slow, args=("b",))
        t2.start()
        for _ in range(400):
            if s.metrics()["airlock_queue_depth"] == 1:
                break
            time.sleep(0.02)
        status, h, body = s.call("print(3)")
        assert status == 429 and h["retry-after"] == "1", (status, h, body)
        t1.join()
        t2.join()
        for k in ("a", "b"):
            assert results[k][0] == 200 and b"done" in results[k][2], results[k]
        m = s.metrics()
        assert m['airlock_refusals_total{reason="queue_full"}'] == 1, m
    with serve("--max-runs", "1", "--max-queue", "4", "--queue-wait", "0.3") as s:
        t = threading.Thread(target=lambda: s.call("import time; time.sleep(3)"))
        t.start()
        for _ in range(400):
            if s.metrics()["airlock_runs_in_flight"] == 1:
                break
            time.sleep(0.02)
        status, h, _ = s.call("print(3)")
        assert status == 503 and h["retry-after"] == "1", (status, h)
        t.join()


def test_slow_clients_hold_no_run():
    with serve("--http-timeout", "2", "--max-runs", "1") as s:
        # Slowloris: headers that never end, and a body that never comes.
        socks = []
        for i in range(4):
            k = socket.create_connection(("127.0.0.1", s.port))
            k.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * i)
            socks.append(k)
        k = socket.create_connection(("127.0.0.1", s.port))
        k.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{\"jsonrpc\"")
        socks.append(k)
        # A body that trickles in, a byte within each idle timeout, is cut
        # off at twice the timeout.
        trickle = socket.create_connection(("127.0.0.1", s.port))
        trickle.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n{")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 40 and not closed:
            time.sleep(1)
            try:
                trickle.sendall(b" ")
            except OSError:
                closed = True
        assert closed, "a trickling body is cut off"
        trickle.close()
        # The only run slot is free for a real client meanwhile.
        status, _, body = s.call("print('through')")
        assert status == 200 and b"through" in body, (status, body)
        # The stalled connections are closed by the server once idle.
        for k in socks:
            k.settimeout(30)
            try:
                data = k.recv(65536)
                while data and b"HTTP/1.1" not in data:
                    data = k.recv(65536)
            except ConnectionResetError:
                data = b""
            assert data == b"" or data.startswith(b"HTTP/1.1"), data
            k.close()
        # A client that does not read its (large) answer does not hold a
        # run either: the run slot is free once the run is over.
        k = socket.create_connection(("127.0.0.1", s.port))
        k.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "execute_code",
                                      "arguments": {"code": "print('y' * 4000000)"},
                                      "_meta": MODERN}}).encode()
        k.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        for _ in range(600):
            if s.metrics()["airlock_calls_total{status=\"ok\"}"] >= 2:
                break
            time.sleep(0.05)
        status, _, body = s.call("print('still')")
        assert status == 200 and b"still" in body
        k.close()


def test_client_disconnect_cancels_the_run():
    # A call run on its connection's thread, and one streaming progress (run
    # by a worker while the connection's thread writes the stream).
    with serve() as s:
        for n, meta in ((1, MODERN), (2, dict(MODERN, progressToken="p"))):
            k = socket.create_connection(("127.0.0.1", s.port))
            body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                               "params": {"name": "execute_code",
                                          "arguments": {"code": "import time; time.sleep(60)"},
                                          "_meta": meta}}).encode()
            k.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Accept: application/json, text/event-stream\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            for _ in range(400):
                if s.metrics()["airlock_runs_in_flight"] == 1:
                    break
                time.sleep(0.02)
            time.sleep(0.5)
            k.close()
            # The gauges change one after the other (the run slot is given
            # back, then the call leaves the server's count): wait for all.
            for _ in range(600):
                m = s.metrics()
                if m['airlock_calls_total{status="cancelled"}'] == n and \
                        m["airlock_runs_in_flight"] == 0 and m["airlock_sandbox_runs"] == 0:
                    break
                time.sleep(0.05)
            assert m['airlock_calls_total{status="cancelled"}'] == n, m
        assert m["airlock_runs_in_flight"] == 0 and m["airlock_sandbox_runs"] == 0, m
        status, _, body = s.call("print('next')")
        assert status == 200 and b"next" in body
        log = s.log("tools/call", 2)
        assert [l["status"] for l in log if l["tool"] == "execute_code"][:2] == \
            ["cancelled", "cancelled"], log


def test_progress_streams_as_sse():
    with serve() as s:
        status, h, body = s.call("import time\nfor i in range(3):\n print(i, flush=True)\n"
                                 " time.sleep(0.7)", progressToken="tok")
        assert status == 200 and h["content-type"] == "text/event-stream", (status, h)
        events = [json.loads(l[6:]) for l in body.decode().splitlines() if l.startswith("data: ")]
        assert events[-1]["id"] == 1 and events[-1]["result"]["content"][0]["text"] == "0\n1\n2\n"
        progress = [e for e in events[:-1] if e["method"] == "notifications/progress"]
        assert progress and all(e["params"]["progressToken"] == "tok" for e in progress), events
        # A client that accepts JSON only gets JSON, progress dropped.
        status, h, body = s.call("import time; time.sleep(0.7); print(5)",
                                 {"Accept": "application/json"}, progressToken="t2")
        assert status == 200 and h["content-type"] == "application/json", h
        assert result_of(body)["content"][0]["text"] == "5\n"


def test_a_progress_token_is_capped():
    """Every progress notification carries the call's progressToken, four a
    second while the run prints: a token of --max-body's 4 MiB made one
    request 16 MiB a second of answer for as long as the run lasted (480
    MiB at the default --timeout of 30 s), held in the server's memory for
    a client that reads slowly. A token over PROGRESS_TOKEN_MAX (256 bytes
    as JSON) is refused as invalid params, naming the cap; one at the cap
    streams as any other. Before, the long token's call ran and its stream
    carried the token in every notification."""
    printing = "import time\nfor i in range(3):\n print(i, flush=True)\n time.sleep(0.4)"
    with serve() as s:
        long = "p" * 100000
        status, h, body = s.call(printing, progressToken=long)
        assert status == 200 and len(body) < 4096, (status, h, len(body))
        m = json.loads(body)
        assert m["error"]["code"] == -32602 and "PROGRESS_TOKEN_MAX" in m["error"]["message"], m
        # At the cap, as JSON (the quotes count): streamed, each
        # notification carrying it.
        at = "q" * 254
        status, h, body = s.call(printing, progressToken=at)
        assert status == 200 and h["content-type"] == "text/event-stream", (status, h)
        events = [json.loads(l[6:]) for l in body.decode().splitlines() if l.startswith("data: ")]
        assert events[-1]["result"]["content"][0]["text"] == "0\n1\n2\n", events[-1]
        assert all(e["params"]["progressToken"] == at for e in events[:-1]), events
        status, _, body = s.call("print(1)", progressToken="q" * 255)
        assert "PROGRESS_TOKEN_MAX" in json.loads(body)["error"]["message"], body


def test_the_peer_listener_reads_no_body_before_its_signature():
    """--peer-listen takes no token, and the bodies it holds count in the
    one --max-body-total that the clients' listener shares. A request
    without the cluster secret's signature is refused on its headers (401)
    before a byte of its body is read: before, its body was read and held
    first (a body may take twice --http-timeout to come), so that anyone who
    could reach the peer port held the budget with a few unsigned bodies,
    and every client's call on --listen was 503 "too many request bodies
    held at once" meanwhile."""
    d = tmpdir()
    key = os.path.join(d, "cluster")
    with open(key, "w") as f:
        f.write("0123456789abcdef0123456789abcdef\n")
    with serve("--peer-listen", "127.0.0.1:0", "--secret", f"K=file:{key}@peer",
               "--max-body", "65536", "--max-body-total", "131072", "--http-timeout", "5") as s:
        port = next(int(re.search(r"\(port (\d+)\)", l).group(1)) for l in s.lines
                    if "takes peers' calls on" in l)
        held = []
        for _ in range(3):
            k = socket.create_connection(("127.0.0.1", port), timeout=60)
            k.sendall(b"POST /peer/mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Airlock-Peer-From: x\r\nAirlock-Peer-Tenant: -\r\n"
                      b"Content-Length: 65536\r\n\r\n" + b" " * 60000)
            held.append(k)
        for k in held:
            got = k.recv(4096)
            assert got.startswith(b"HTTP/1.1 401"), got
        status, _, body = s.call("print(6 * 7)")
        assert status == 200 and result_of(body)["content"][0]["text"] == "42\n", (status, body)
        for k in held:
            k.close()


def test_metrics_and_log_lines_add_up():
    with serve() as s:
        assert s.call("print(1)")[0] == 200
        assert s.call("raise SystemExit(3)")[0] == 200
        assert s.call("print(2)", {"Accept": "application/json",
                                   "X-Forwarded-For": "203.0.113.7\x7f"})[0] == 200
        assert s.post(b"nope")[0] == 400
        tools_list(s)
        m = s.metrics()
        assert m['airlock_calls_total{status="ok"}'] == 3, m  # two calls and tools/list
        assert m['airlock_calls_total{status="tool_error"}'] == 1, m
        assert m['airlock_calls_total{status="refused"}'] == 1, m
        assert m['airlock_refusals_total{reason="bad_request"}'] == 1, m
        assert m["airlock_run_duration_seconds_count"] == 3, m
        assert m['airlock_run_duration_seconds_bucket{le="+Inf"}'] == 3, m
        assert m["airlock_runs_in_flight"] == 0 and m["airlock_queue_depth"] == 0, m
        calls = s.log("tools/call", 3)
        log = s.log()
        assert len(calls) == 3 and all(l["tool"] == "execute_code" for l in calls), log
        assert sorted(l["status"] for l in calls) == ["ok", "ok", "tool_error"], calls
        for l in log:
            assert set(l) >= {"ts", "method", "status", "http", "duration_ms", "session",
                              "client", "instance"}, l
            assert "code" not in l and "print" not in json.dumps(l), l
        assert [l.get("forwarded_for") for l in calls].count("203.0.113.7?") == 1, calls


def test_sigterm_drains():
    with serve("--grace", "30") as s:
        keep = s.conn()
        status, _, _ = s.post({"jsonrpc": "2.0", "id": 1, "method": "ping",
                               "params": {"_meta": MODERN}}, conn=keep)
        assert status == 200
        out = {}
        t = threading.Thread(target=lambda: out.setdefault(
            "r", s.call("import time; time.sleep(2); print('finished')")))
        t.start()
        for _ in range(400):
            if s.metrics()["airlock_runs_in_flight"] == 1:
                break
            time.sleep(0.02)
        s.p.send_signal(signal.SIGTERM)
        for _ in range(200):
            if any("draining" in l for l in s.lines):
                break
            time.sleep(0.02)
        # Not ready any more, and no new call on a kept connection.
        keep.request("GET", "/readyz")
        r = keep.getresponse()
        assert r.status == 503 and r.read() == b"draining\n", r.status
        keep.close()
        t.join(60)
        status, _, body = out["r"]
        assert status == 200 and b"finished" in body, out
        assert s.p.wait(60) == 0
        # The process is gone, but the thread reading its stderr may not
        # have read the last lines yet: it ends at the pipe's end.
        s.t.join(10)
        assert any("stopped" in l for l in s.lines), s.lines
    # Past the grace period the calls are cancelled, and the server still
    # closes everything and exits 0.
    with serve("--grace", "0.5") as s:
        t = threading.Thread(target=lambda: s.call("import time; time.sleep(60)"))
        t.start()
        for _ in range(400):
            if s.metrics()["airlock_runs_in_flight"] == 1:
                break
            time.sleep(0.02)
        # The call sleeps 60 s: the server ends within the wait below only
        # because the grace period cancelled it.
        s.p.send_signal(signal.SIGTERM)
        assert s.p.wait(45) == 0
        t.join(60)
        s.t.join(10)
        assert any("cancelling 1 call" in l for l in s.lines), s.lines


def test_session_handles_name_their_instance():
    with serve("--instance", "alpha") as s:
        status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "session_open", "arguments": {},
                                             "_meta": MODERN}})
        h = result_of(body)["_meta"]["dev.airlock/session"]
        assert re.fullmatch(r"sess_alpha_[a-z2-7]{26}", h), h
        status, _, body = s.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "execute_code",
                                             "arguments": {"code": "x = 5", "session": h},
                                             "_meta": MODERN}})
        assert not result_of(body)["isError"], body
        status, _, body = s.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": "execute_code",
                                             "arguments": {"code": "print(x)", "session": h},
                                             "_meta": MODERN}})
        assert result_of(body)["content"][0]["text"] == "5\n", body
        assert s.metrics()["airlock_sessions_open"] == 1
        other = "sess_beta-2_" + "a" * 26
        status, _, body = s.post({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                  "params": {"name": "execute_code",
                                             "arguments": {"code": "1", "session": other},
                                             "_meta": MODERN}})
        r = result_of(body)
        assert r["isError"] and "belongs to instance beta-2; this is alpha" in \
            r["content"][0]["text"], r
        log = s.log("tools/call", 4)
        assert [l["session"] for l in log] == [False, True, True, True], log


def test_listen_rules():
    p = subprocess.run([AIRLOCK, "serve", "--listen", "0.0.0.0:0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--tokens" in p.stderr, (p.returncode, p.stderr)
    for bad in ("nothing", "127.0.0.1:99999", "[::1]8080", "localhost:80"):
        p = subprocess.run([AIRLOCK, "serve", "--listen", bad], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and "--listen" in p.stderr, (bad, p.stderr)
    for bad in ("--instance=UPPER", "--instance=" + "a" * 33, "--max-runs=0"):
        p = subprocess.run([AIRLOCK, "serve", bad], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (bad, p.stderr)
    p = subprocess.run([AIRLOCK, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "SIGHUP" in p.stdout, p.stdout
    if socket.has_ipv6:
        try:
            with socket.socket(socket.AF_INET6) as k:
                k.bind(("::1", 0))
        except OSError:
            return
        with serve(listen="[::1]:0") as s:
            assert s.call("print('v6')")[0] == 200


def test_audit_file_has_one_line_per_client_call():
    """--audit works for serve as for mcp: a line per client call (the
    server's own warm-up run is not one), naming the HTTP transport, with the
    usage record and never the code or its output."""
    d = tmpdir()
    path = os.path.join(d, "audit.jsonl")
    with serve("--audit", path) as s:
        for i in range(3):
            status, _, body = s.call(f"print('secret-output-{i}')", rid=i + 1)
            assert status == 200, body
        s.log("tools/call", 3)
    with open(path) as f:
        text = f.read()
    lines = [json.loads(l) for l in text.splitlines()]
    assert len(lines) == 3, text
    assert all(l["transport"] == "http" and l["status"] == "ok" for l in lines), lines
    assert all("wall_ms" in l["usage"] for l in lines), lines
    assert "secret-output" not in text and "print(" not in text, text
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_not_ready_while_the_sandbox_cannot_run():
    """A server whose sandbox cannot run a call (here a preload that does not
    exist; in a pod, a masked /proc) stays alive (/healthz) but never says
    ready, so a load balancer sends it nothing; a call still gets the
    sandbox's own error, and SIGTERM still drains."""
    p = subprocess.Popen([AIRLOCK, "serve", "--listen", "127.0.0.1:0", "--preload",
                          "no_such_module_for_airlock"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    lines, port = [], None
    try:
        for line in p.stderr:
            lines.append(line)
            m = re.search(r"\(port (\d+)\)", line)
            if m:
                port = int(m.group(1))
            if "not ready" in line or line.strip() == "airlock serve: ready":
                break
        assert any("not ready" in l for l in lines), "".join(lines)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/readyz")
        r = c.getresponse()
        assert (r.status, r.read()) == (503, b"sandbox unavailable\n")
        c.request("GET", "/healthz")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"ok\n")
        c.request("POST", "/mcp", body=json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "execute_code", "arguments": {"code": "print(1)"},
                        "_meta": MODERN}}),
            headers={"Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream"})
        r = c.getresponse()
        body = json.loads(r.read())
        assert r.status == 200 and body["result"]["isError"] is True, body
        assert "no_such_module_for_airlock" in json.dumps(body), body
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode == 0, (p.returncode, "".join(lines))


def test_a_call_right_after_start_is_held_until_the_server_is_built():
    """A client that connects as soon as the port is open (before /readyz
    says ready) gets its answer, not 503 warming_up: its call is held until
    the sandbox and the tool description are built. The build is kept
    waiting here by a preload that returns only once the test creates a
    file, so the call is sure to arrive first."""
    d = tmpdir()
    with open(os.path.join(d, "airlock_slow_start.py"), "w") as f:
        f.write("import os, time\n"
                "go = os.path.join(os.path.dirname(__file__), 'go')\n"
                "while not os.path.exists(go):\n"
                "    time.sleep(0.01)\n")
    with serve("--python-path", d, "--preload", "airlock_slow_start",
               wait_ready=False) as s:
        out = []
        t = threading.Thread(target=lambda: out.append(s.call("print(6 * 7)")))
        t.start()
        held = 0
        for _ in range(2000):
            held = s.metrics().get("airlock_requests_held", 0)
            if held == 1 or out:
                break
            time.sleep(0.01)
        # Answered before the server could be built: refused.
        assert not out, out
        assert held == 1, "".join(s.lines)
        assert s.get("/readyz")[0] == 503
        open(os.path.join(d, "go"), "w").close()
        t.join(120)
        status, _, body = out[0]
        assert status == 200, (status, body)
        r = result_of(body)
        assert r["content"][0]["text"] == "42\n" and not r["isError"], r
        assert s.ready.wait(120), "".join(s.lines)
        assert s.metrics()['airlock_refusals_total{reason="warming_up"}'] == 0


def test_sessions_are_bound_to_the_token_that_opened_them():
    """A handle is not a capability by itself: it shows in log lines and in
    the text every client hands its model. Another token's client that
    learns it can neither run code in the session (and read its variables),
    nor close it, nor learn that it exists; a cancel names only its own
    token's calls."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-alice-0123456789abcdef\ntoken-mallory-0123456789abcdef\n")
    alice = {"Authorization": "Bearer token-alice-0123456789abcdef"}
    mallory = {"Authorization": "Bearer token-mallory-0123456789abcdef"}

    def tool(name, args, headers, rid=1):
        status, _, body = s.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                  "params": {"name": name, "arguments": args,
                                             "_meta": MODERN}}, headers)
        assert status == 200, (status, body)
        return result_of(body)

    with serve("--tokens", tokens, "--instance", "alpha") as s:
        h = tool("session_open", {}, alice)["_meta"]["dev.airlock/session"]
        assert not tool("execute_code", {"code": "key = 'alice-private'", "session": h},
                        alice)["isError"]
        r = tool("execute_code", {"code": "print(key)", "session": h}, mallory)
        text = json.dumps(r)
        assert r["isError"] and "alice-private" not in text, r
        # The same answer as for a handle never opened: no oracle.
        fake = h[:-4] + ("aaaa" if not h.endswith("aaaa") else "bbbb")
        r2 = tool("execute_code", {"code": "1", "session": fake}, mallory)
        assert r2["content"][0]["text"].replace(fake, "H") == \
            r["content"][0]["text"].replace(h, "H"), (r, r2)
        assert tool("session_close", {"session": h}, mallory)["isError"]
        # A fork would copy alice's variables into a session of mallory's.
        assert tool("session_fork", {"session": h}, mallory)["isError"]
        assert s.metrics()["airlock_sessions_open"] == 1
        # Alice's session is intact, and her own fork is hers.
        f = tool("session_fork", {"session": h}, alice)["_meta"]["dev.airlock/session"]
        r = tool("execute_code", {"code": "print(key)", "session": f}, alice)
        assert r["content"][0]["text"] == "alice-private\n", r
        assert tool("execute_code", {"code": "1", "session": f}, mallory)["isError"]
        assert not tool("session_close", {"session": f}, alice)["isError"]
        r = tool("execute_code", {"code": "print(key)", "session": h}, alice)
        assert r["content"][0]["text"] == "alice-private\n", r
        assert not tool("session_close", {"session": h}, alice)["isError"]


def test_another_tokens_handle_looks_never_opened_live_or_dead():
    """Whether another token's session is open, was closed, or was closed
    over its memory cap (and how much it held) is no business of a token:
    every session tool answers it, byte for byte, as it answers a handle
    never opened. Its own token still learns how the session ended."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-alice-0123456789abcdef\ntoken-mallory-0123456789abcdef\n")
    alice = {"Authorization": "Bearer token-alice-0123456789abcdef"}
    mallory = {"Authorization": "Bearer token-mallory-0123456789abcdef"}
    with serve("--tokens", tokens, "--instance", "alpha", "--session-memory", "1") as s:
        def tool(name, args, headers):
            status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                      "params": {"name": name, "arguments": args,
                                                 "_meta": MODERN}}, headers)
            assert status == 200, (status, body)
            return result_of(body)

        def handle(headers):
            return tool("session_open", {}, headers)["_meta"]["dev.airlock/session"]
        live = handle(alice)
        closed = handle(alice)
        assert not tool("session_close", {"session": closed}, alice)["isError"]
        over = handle(alice)
        tool("execute_code", {"code": "x = 1", "session": over}, alice)
        # The cell's memory is measured after it: past 1 MiB, closed.
        r = tool("execute_code", {"code": "x", "session": over}, alice)
        assert r["isError"] and "MiB" in r["content"][0]["text"], r
        r = tool("execute_code", {"code": "1", "session": closed}, alice)
        assert r["isError"] and "closed" in r["content"][0]["text"], r
        never = live[:-4] + ("aaaa" if not live.endswith("aaaa") else "bbbb")
        status, _, body = tools_list(s, mallory)
        takes_session = [t["name"] for t in result_of(body)["tools"]
                         if "session" in t["inputSchema"].get("properties", {})]
        assert {"execute_code", "session_close", "session_fork"} <= set(takes_session), \
            takes_session
        for name in takes_session:
            args = {"code": "print(1)"} if name == "execute_code" else {}
            answers = {}
            for h in (never, live, closed, over):
                r = tool(name, dict(args, session=h), mallory)
                assert r["isError"], (name, h, r)
                answers[h] = json.dumps(r, sort_keys=True).replace(h, "HANDLE")
            assert len(set(answers.values())) == 1, (name, answers)
        assert s.metrics()["airlock_sessions_open"] == 1


def test_each_token_has_its_own_quotas_below_the_server_caps():
    """One token cannot take every session, run slot or place in the queue:
    each has its own quota (half of each cap by default), and a refusal
    names only the caller's own usage and limit, never what other tokens
    hold."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-alice-0123456789abcdef\ntoken-bob-0123456789abcdef\n")
    alice = {"Authorization": "Bearer token-alice-0123456789abcdef"}
    bob = {"Authorization": "Bearer token-bob-0123456789abcdef"}

    def tool(s, name, args, headers):
        status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": name, "arguments": args,
                                             "_meta": MODERN}}, headers)
        assert status == 200, (status, body)
        return result_of(body)

    with serve("--tokens", tokens, "--max-sessions", "4") as s:
        for _ in range(2):
            assert not tool(s, "session_open", {}, alice)["isError"]
        r = tool(s, "session_open", {}, alice)
        text = r["content"][0]["text"]
        assert r["isError"] and "you have 2 open" in text and \
            "--max-sessions-per-token 2" in text, r
        # Bob still has his own.
        for _ in range(2):
            assert not tool(s, "session_open", {}, bob)["isError"]
        assert s.metrics()["airlock_sessions_open"] == 4
    # Past the server-wide cap, the refusal tells no other token's count.
    with serve("--tokens", tokens, "--max-sessions", "4",
               "--max-sessions-per-token", "3") as s:
        for _ in range(3):
            assert not tool(s, "session_open", {}, alice)["isError"]
        assert not tool(s, "session_open", {}, bob)["isError"]
        r = tool(s, "session_open", {}, bob)
        text = r["content"][0]["text"]
        assert r["isError"] and "you have 1 open" in text, r
        assert re.findall(r"\d+", text) == ["1"], text
    with serve("--tokens", tokens, "--max-runs", "2", "--max-queue", "2") as s:
        out = {}

        def call(name, code, headers):
            out[name] = s.call(code, headers, rid=name)
        long = threading.Thread(target=call, args=(
            "long", "import time\nfor _ in range(1200): time.sleep(0.05)", alice))
        long.start()
        for _ in range(2000):
            if s.metrics()["airlock_runs_in_flight"] == 1:
                break
            time.sleep(0.01)
        # Alice's second call waits for her own run, though a slot is free.
        queued = threading.Thread(target=call, args=("queued", "print('queued')", alice))
        queued.start()
        for _ in range(2000):
            if s.metrics()["airlock_queue_depth"] == 1 or "queued" in out:
                break
            time.sleep(0.01)
        assert "queued" not in out, out
        status, h, body = s.call("print(3)", alice, rid="third")
        message = json.loads(body)["error"]["message"]
        assert status == 429 and h["retry-after"] == "1", (status, body)
        assert "you have 1 running and 1 waiting" in message, message
        # Bob's call runs at once in the free slot.
        status, _, body = s.call("print('bob')", bob)
        assert status == 200 and result_of(body)["content"][0]["text"] == "bob\n", body
        status, _, _ = s.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": "long"}}, alice)
        assert status == 202
        long.join(120)
        queued.join(120)
        assert "cancelled" in json.loads(out["long"][2])["error"]["message"], out
        status, _, body = out["queued"]
        assert status == 200 and result_of(body)["content"][0]["text"] == "queued\n", body


def test_a_session_stays_with_its_token_across_a_reload():
    """Revoking a token (SIGHUP with its line gone) must not hand its
    sessions to whichever token takes its place in the file."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-revoked-0123456789abcdef\ntoken-other-0123456789abcdef\n")
    with serve("--tokens", tokens) as s:
        def tool(name, args, token):
            status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                      "params": {"name": name, "arguments": args,
                                                 "_meta": MODERN}},
                                     {"Authorization": "Bearer " + token})
            assert status == 200, (status, body)
            return result_of(body)
        h = tool("session_open", {}, "token-revoked-0123456789abcdef")["_meta"]["dev.airlock/session"]
        assert not tool("execute_code", {"code": "k = 'private'", "session": h},
                        "token-revoked-0123456789abcdef")["isError"]
        with open(tokens + ".new", "w") as f:
            f.write("token-other-0123456789abcdef\n")
        os.rename(tokens + ".new", tokens)
        s.p.send_signal(signal.SIGHUP)
        for _ in range(200):
            if any("token loaded" in l for l in s.lines):
                break
            time.sleep(0.05)
        r = tool("execute_code", {"code": "print(k)", "session": h}, "token-other-0123456789abcdef")
        assert r["isError"] and "private" not in json.dumps(r), r


def test_ambiguous_framing_is_refused_and_closes_the_connection():
    """Request smuggling behind a proxy: when two parsers can disagree on
    where a body ends (two Content-Length values, Content-Length beside
    Transfer-Encoding, whitespace before a header's colon, a folded header
    line, RFC 9112 sections 5.1, 5.2, 6.1 and 6.3), the request is 400 and
    the connection closes, so that the bytes after it are never read as a
    request of their own."""
    with serve() as s:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        head = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        cases = {
            "two lengths": head + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" %
            (len(body), len(body) + len(smuggled)) + body + smuggled,
            "length and chunked": head + b"Content-Length: %d\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % (len(chunked) + len(smuggled)) +
            chunked + smuggled,
            "space before colon": head + b"Transfer-Encoding : chunked\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled,
            # Obsolete line folding (RFC 9112 5.2): libmicrohttpd joins the
            # folded line to the field's name ("Transfer-Encodingchunked"),
            # so the length alone framed the body, while a proxy that
            # unfolds it reads a chunked body that swallows what follows.
            "folded transfer-encoding": head + b"Content-Length: %d\r\n"
            b"Transfer-Encoding:\r\n chunked\r\n\r\n" % len(body) + body + smuggled,
            "folded with a tab": head + b"Transfer-Encoding:\r\n\tchunked\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled,
            "any folded field": head + b"X-Note: one\r\n two\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled,
        }
        for name, data in cases.items():
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            c.sendall(data)
            out = b""
            while True:
                d = c.recv(65536)
                if not d:
                    break
                out += d
            c.close()
            answers = re.findall(rb"HTTP/1.1 (\d+)", out)
            assert answers == [b"400"], (name, out[:600])
        # An ordinary pipelined pair is still served.
        c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        c.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body + smuggled)
        out = b""
        while out.count(b"HTTP/1.1 200") < 2:
            d = c.recv(65536)
            assert d, out
            out += d
        c.close()


def test_a_cancel_stops_only_the_calls_of_its_own_token():
    """Request ids are each client's own: another token's
    notifications/cancelled naming the same id leaves the call running;
    the same token's stops it."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-alice-0123456789abcdef\ntoken-mallory-0123456789abcdef\n")
    alice = {"Authorization": "Bearer token-alice-0123456789abcdef"}
    mallory = {"Authorization": "Bearer token-mallory-0123456789abcdef"}
    with serve("--tokens", tokens) as s:
        def cancel(headers):
            status, _, _ = s.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": "long"}}, headers)
            assert status == 202, status

        def long_call(out):
            out.append(s.call("import time\nfor _ in range(60): time.sleep(0.05)\nprint('done')",
                              alice, rid="long"))
        for who, stopped in ((mallory, False), (alice, True)):
            out = []
            t = threading.Thread(target=long_call, args=(out,))
            t.start()
            for _ in range(400):
                if s.metrics()["airlock_runs_in_flight"] >= 1:
                    break
                time.sleep(0.01)
            cancel(who)
            t.join(120)
            status, _, body = out[0]
            m = json.loads(body)
            if stopped:
                assert "error" in m and "cancelled" in m["error"]["message"], m
            else:
                assert m["result"]["content"][0]["text"] == "done\n", m


def test_resources_are_bound_to_the_token_whose_run_made_them():
    """resources/list and resources/read serve the files of recent runs:
    another token's client must neither list nor read them."""
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("token-alice-0123456789abcdef\ntoken-mallory-0123456789abcdef\n")
    alice = {"Authorization": "Bearer token-alice-0123456789abcdef"}
    mallory = {"Authorization": "Bearer token-mallory-0123456789abcdef"}
    with serve("--tokens", tokens) as s:
        def rpc(method, params, headers):
            status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": method,
                                      "params": dict(params, _meta=MODERN)}, headers)
            assert status == 200, (status, body)
            return json.loads(body)
        status, _, body = s.call("open('/output/alice.txt', 'w').write('alice-private')", alice)
        assert status == 200 and not result_of(body)["isError"], body
        mine = rpc("resources/list", {}, alice)["result"]["resources"]
        assert [r["name"] for r in mine] == ["alice.txt"], mine
        uri = mine[0]["uri"]
        assert "alice-private" in json.dumps(rpc("resources/read", {"uri": uri}, alice))
        theirs = rpc("resources/list", {}, mallory)
        assert theirs["result"]["resources"] == [], theirs
        r = rpc("resources/read", {"uri": uri}, mallory)
        assert "error" in r and "alice-private" not in json.dumps(r), r


if __name__ == "__main__":
    run()
