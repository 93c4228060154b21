"""`airlock serve` over HTTP, side by side in one run:
- latency: a tools/call of execute_code `print(1)` over stdio (`airlock mcp`),
  over HTTP from a keep-alive client straight to `airlock serve`, and through
  HAProxy (deploy/haproxy.cfg) to the same instance; rounds alternate between
  the three, calls 10 ms apart (docs/performance.md, "How speed is measured"), and
  the figures are medians, with the median of the paired differences;
- throughput: back-to-back calls from several keep-alive clients at once, to
  one instance alone and to three instances behind HAProxy.
Both clients are the same few lines of Python over a raw socket (one JSON
line on stdio; one HTTP/1.1 request with Content-Length on HTTP), so that
the difference is the transport's and the server's, not a client library's.
Prints one table and one JSON line.

Usage: bench_serve.py BUILD_DIR [ROUNDS]"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench import die_with_parent, free_ports, wait_ready  # noqa: E402 - a sibling script

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
AIRLOCK = os.path.abspath(os.path.join(build, "airlock"))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TOKEN = "bench-" + os.urandom(8).hex()
MODERN = "2026-07-28"
GAP_S = 0.010
THROUGHPUT_S = 4.0
THROUGHPUT_CLIENTS = 8
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}


def call_body(i):
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": "execute_code", "arguments": {"code": "print(1)"},
                                  "_meta": ENVELOPE}}).encode()


def check(msg):
    r = msg.get("result")
    assert r and not r["isError"] and r["content"][0]["text"] == "1\n", msg


class Stdio:
    def __init__(self):
        self.p = subprocess.Popen([AIRLOCK, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  preexec_fn=die_with_parent)
        self.n = 0

    def call(self):
        self.n += 1
        self.p.stdin.write(call_body(self.n) + b"\n")
        self.p.stdin.flush()
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.n:
                return m

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


class Http:
    """One keep-alive connection; requests with Content-Length, responses
    read by their Content-Length (airlock serve answers a call without a
    progress token with application/json)."""

    def __init__(self, port):
        self.port = port
        self.s = None
        self.n = 0

    def connect(self):
        self.s = socket.create_connection(("127.0.0.1", self.port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self):
        if self.s is None:
            self.connect()
        self.n += 1
        body = call_body(self.n)
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: {MODERN}\r\nContent-Length: {len(body)}\r\n\r\n")
        self.s.sendall(head.encode() + body)
        while b"\r\n\r\n" not in self.buf:
            self.recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = dict(line.split(": ", 1) for line in lines[1:])
        hdrs = {k.lower(): v for k, v in hdrs.items()}
        n = int(hdrs["content-length"])
        while len(self.buf) < n:
            self.recv()
        data, self.buf = self.buf[:n], self.buf[n:]
        assert status == 200, (status, data[:300])
        if hdrs.get("connection", "").lower() == "close":
            self.close()
        return json.loads(data)

    def recv(self):
        d = self.s.recv(65536)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def close(self):
        if self.s:
            self.s.close()
            self.s = None



class Fleet:
    """airlock serve instances and an HAProxy in front of them, started
    from deploy/haproxy.cfg; its three servers are the given instances in
    turn (one instance named three times for the latency figures)."""

    def __init__(self, work, n, lb_servers):
        self.procs = []
        try:
            self.start(work, n, lb_servers)
        except BaseException:
            self.close()
            raise

    def start(self, work, n, lb_servers):
        ports = free_ports(n + 2)
        self.ports, self.lb, stats = ports[:n], ports[n], ports[n + 1]
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w") as f:
            f.write(TOKEN + "\n")
        for i, port in enumerate(self.ports):
            self.procs.append(subprocess.Popen(
                [AIRLOCK, "serve", "--listen", f"127.0.0.1:{port}", "--instance", f"a{i + 1}",
                 "--tokens", tokens], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=die_with_parent))
        deadline = time.monotonic() + 60
        for p, port in zip(self.procs, self.ports):
            wait_ready(port, p, "airlock serve", deadline)
        if not lb_servers:
            return
        servers = [self.ports[i % n] for i in range(3)]
        env = dict(os.environ, AIRLOCK_LB_BIND=f"127.0.0.1:{self.lb}",
                   AIRLOCK_LB_STATS=f"127.0.0.1:{stats}",
                   **{f"AIRLOCK_A{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(servers)})
        cfg = os.environ.get("AIRLOCK_HAPROXY_CFG") or os.path.join(ROOT, "deploy", "haproxy.cfg")
        self.procs.append(subprocess.Popen([HAPROXY, "-db", "-f", cfg], env=env,
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL,
                                           preexec_fn=die_with_parent))
        # HAProxy marks a server up after two good checks (1 s apart): wait
        # until a call goes through, then for every server to be up.
        c = Http(self.lb)
        while True:
            try:
                check(c.call())
                break
            except (OSError, AssertionError):
                c.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        c.close()
        time.sleep(2.5)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def timed(f):
    t = time.perf_counter()
    m = f()
    dt = time.perf_counter() - t
    check(m)
    return dt


def throughput(port, seconds):
    """Calls per second from THROUGHPUT_CLIENTS keep-alive clients, back to
    back, for `seconds` after a short warm-up."""
    count = [0] * THROUGHPUT_CLIENTS
    errors = []
    start = threading.Barrier(THROUGHPUT_CLIENTS + 1)
    stop = [0.0]

    def client(k):
        c = Http(port)
        try:
            for _ in range(3):
                check(c.call())
            start.wait()
            while time.perf_counter() < stop[0]:
                check(c.call())
                count[k] += 1
        except Exception as e:
            errors.append(repr(e))
            try:
                start.wait(timeout=1)
            except threading.BrokenBarrierError:
                pass
        finally:
            c.close()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(THROUGHPUT_CLIENTS)]
    for t in threads:
        t.start()
    stop[0] = time.perf_counter() + 3600
    start.wait(timeout=120)
    t0 = time.perf_counter()
    stop[0] = t0 + seconds
    for t in threads:
        t.join(timeout=120)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors[0])
    return sum(count) / elapsed


def med(xs):
    return statistics.median(xs) * 1000


def p90(xs):
    return sorted(xs)[int(len(xs) * 0.9)] * 1000


def main():
    work = tempfile.mkdtemp(prefix="airlock-bench-serve-")
    out = {"rounds": rounds}
    fleet = stdio = None
    try:
        # Latency: one instance, reached directly and through HAProxy.
        fleet = Fleet(work, 1, lb_servers=True)
        stdio = Stdio()
        direct, via = Http(fleet.ports[0]), Http(fleet.lb)
        for _ in range(20):  # warm-up
            for f in (stdio.call, direct.call, via.call):
                check(f())
        t_stdio, t_http, t_lb = [], [], []
        for _ in range(rounds):
            for f, xs in ((stdio.call, t_stdio), (direct.call, t_http), (via.call, t_lb)):
                time.sleep(GAP_S)
                xs.append(timed(f))
        stdio.close()
        direct.close()
        via.close()
        fleet.close()
        d_http = [h - s for h, s in zip(t_http, t_stdio)]
        d_lb = [v - h for v, h in zip(t_lb, t_http)]
        out.update({"stdio_median_ms": med(t_stdio), "http_median_ms": med(t_http),
                    "haproxy_median_ms": med(t_lb), "stdio_p90_ms": p90(t_stdio),
                    "http_p90_ms": p90(t_http), "haproxy_p90_ms": p90(t_lb),
                    "http_minus_stdio_ms": med(t_http) - med(t_stdio),
                    "http_minus_stdio_paired_ms": med(d_http),
                    "haproxy_minus_http_ms": med(t_lb) - med(t_http),
                    "haproxy_minus_http_paired_ms": med(d_lb)})

        # Throughput: one instance alone, then three behind HAProxy.
        secs = THROUGHPUT_S if rounds >= 300 else THROUGHPUT_S / 2
        fleet = Fleet(work, 1, lb_servers=False)
        out["one_instance_calls_per_s"] = throughput(fleet.ports[0], secs)
        fleet.close()
        fleet = Fleet(work, 3, lb_servers=True)
        out["three_behind_haproxy_calls_per_s"] = throughput(fleet.lb, secs)
        fleet.close()
    finally:
        # Nothing started here outlives the benchmark, whatever failed.
        if stdio and stdio.p.poll() is None:
            stdio.p.kill()
            stdio.p.wait()
        if fleet:
            fleet.close()
        shutil.rmtree(work, ignore_errors=True)

    def line(name, key, note=""):
        p = out[key.replace("median", "p90")]
        print(f"  {name:<36} median {out[key]:.3f} ms (p90 {p:.3f}){note}")
    print(f"airlock serve, tools/call of print(1), {rounds} rounds, calls {GAP_S * 1000:.0f} ms "
          "apart, one instance:")
    line("stdio (airlock mcp)", "stdio_median_ms")
    line("HTTP keep-alive, direct", "http_median_ms",
         f"  (+{out['http_minus_stdio_ms']:.3f} ms; paired +{out['http_minus_stdio_paired_ms']:.3f}"
         " ms; target < 0.3)")
    line("HTTP keep-alive, through HAProxy", "haproxy_median_ms",
         f"  (+{out['haproxy_minus_http_ms']:.3f} ms; paired "
         f"+{out['haproxy_minus_http_paired_ms']:.3f} ms; target < 0.1)")
    ratio = out["three_behind_haproxy_calls_per_s"] / out["one_instance_calls_per_s"]
    print(f"Throughput, {THROUGHPUT_CLIENTS} keep-alive clients back to back, "
          f"{os.cpu_count()} CPUs:")
    print(f"  one instance alone                           {out['one_instance_calls_per_s']:.0f}"
          " calls/s")
    print(f"  three instances behind HAProxy               "
          f"{out['three_behind_haproxy_calls_per_s']:.0f} calls/s  ({ratio:.2f}x)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
