"""Tracing's cost (docs/tracing.md), side by side in one run: two `airlock mcp`
servers, one with tracing off (no OTEL_* variable) and one exporting to a
local OTLP receiver (an HTTP server of this script's own that reads each body
and answers 200), both with the same upstream MCP server (mcp_misbehave.py).
Calls alternate between the two, so that a busy moment of the machine falls
on both: execute_code of `print(1)`, and of a run that calls the upstream's
tool 100 times (100 client spans, each with its context in the upstream
request's _meta). Prints one table of medians and one JSON line.

Targets (docs/tracing.md, "Cost"): print(1) at most +50 us at the median, the
100 tool calls at most 1.1 times untraced.

Usage: bench_tracing.py BUILD_DIR [ROUNDS]"""
import http.server
import json
import os
import socketserver
import statistics
import sys
import threading
import time

from mcp_stdio import McpStdio

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MISBEHAVE = os.path.join(ROOT, "tests", "helpers", "mcp_misbehave.py")
# The guest times its own 100 calls too: the host's work per call, without
# the server's and the client's.
TOOLS_CODE = ("import time\nfrom servers import up\nt = time.perf_counter()\n"
              "for i in range(100):\n    up.ok()\nprint(time.perf_counter() - t)\n")


class Receiver(http.server.BaseHTTPRequestHandler):
    """Reads each body and counts its spans by their "spanId" keys, without
    decoding it: the receiver shares this process (and its GIL) with the
    client whose calls are timed."""
    spans = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.spans += body.count(b'"spanId"')
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


class Mcp(McpStdio):
    def __init__(self, env, servers):
        super().__init__([os.path.join(build, "airlock"), "mcp", "--servers", servers],
                         client="bench", env=env)

    def call(self, code):
        t0 = time.perf_counter()
        r = self.request("tools/call", {"name": "execute_code", "arguments": {"code": code}})
        dt = time.perf_counter() - t0
        assert not r["result"]["isError"], r
        self.text = r["result"]["content"][0].get("text", "") if r["result"]["content"] else ""
        return dt


def main():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Receiver)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    servers = os.path.join(build, "bench_tracing_servers.json")
    with open(servers, "w") as f:
        json.dump({"mcpServers": {"up": {"command": sys.executable, "args": [MISBEHAVE],
                                         "env": {"MISBEHAVE_LOG": "/dev/null"}}}}, f)
    off_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    on_env = dict(off_env, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{srv.server_address[1]}",
                  OTEL_BSP_SCHEDULE_DELAY="200")
    off, on = Mcp(off_env, servers), Mcp(on_env, servers)
    try:
        for m in (off, on):  # the sandboxes built, the upstream started
            m.call("print(1)")
            m.call(TOOLS_CODE)
        t = {"off": [], "on": [], "off100": [], "on100": [], "offin": [], "onin": []}
        for i in range(rounds):
            pair = [("off", off), ("on", on)] if i % 2 else [("on", on), ("off", off)]
            for name, m in pair:
                t[name].append(m.call("print(1)"))
            if i % 10 == 0:
                # Its own alternation: i is even here.
                order = pair if (i // 10) % 2 else pair[::-1]
                for name, m in order:
                    t[name + "100"].append(m.call(TOOLS_CODE))
                    t[name + "in"].append(float(m.text))
    finally:
        off.close()
        on.close()
        srv.shutdown()
    med = {k: statistics.median(v) for k, v in t.items()}
    load = os.getloadavg()[0]
    print(f"tracing: {rounds} rounds of print(1), {len(t['on100'])} of 100 tool calls, "
          f"interleaved, load average {load:.1f}")
    print(f"  print(1)          off {med['off'] * 1e3:8.3f} ms   on {med['on'] * 1e3:8.3f} ms"
          f"   +{(med['on'] - med['off']) * 1e6:7.1f} us")
    print(f"  100 tool calls    off {med['off100'] * 1e3:8.3f} ms   on {med['on100'] * 1e3:8.3f} ms"
          f"   x{med['on100'] / med['off100']:.3f}")
    print(f"  ... in the guest  off {med['offin'] * 1e3:8.3f} ms   on {med['onin'] * 1e3:8.3f} ms"
          f"   x{med['onin'] / med['offin']:.3f}")
    print(f"  spans received: {Receiver.spans}")
    print(json.dumps({"bench": "tracing", "rounds": rounds, "load": load,
                      "print1_off_ms": med["off"] * 1e3, "print1_on_ms": med["on"] * 1e3,
                      "tools100_off_ms": med["off100"] * 1e3,
                      "tools100_on_ms": med["on100"] * 1e3,
                      "tools100_guest_off_ms": med["offin"] * 1e3,
                      "tools100_guest_on_ms": med["onin"] * 1e3, "spans": Receiver.spans}))


main()
