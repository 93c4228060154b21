#!/usr/bin/python3
"""The MCP half of the soak (tests/soak.sh): N execute_code calls through one
`airlock mcp` process spoken to raw over its stdio, mixing successes,
exceptions, a command tool (which sometimes fails), HTTP to a server on
127.0.0.1 and file output; every result checked exactly. Measures the server's
resident memory and open descriptors after the warm-up calls and at the end,
then ends its input and checks it exits 0 leaving no process behind.

Usage: soak_mcp.py AIRLOCK_BINARY RUNS [WARMUP]
Environment: SOAK_RSS_SLACK_KIB (default 1024). The server's stderr goes to
ours, so sanitizer reports land in the soak log. Exit status 0 when every
check passed."""
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# The result JSON as a tools/call result carries it (tests/blackbox/harness.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "blackbox"))
from harness import mcp_call_params, mcp_result_json  # noqa: E402

TOOL = r'''
import json, sys
a = json.load(sys.stdin)
if a["n"] < 0:
    sys.stderr.write("negative numbers are refused")
    sys.exit(1)
print(json.dumps(a))
'''

failures = 0
shown = 0


def fail(msg):
    global failures, shown
    failures += 1
    if shown < 10:
        print(f"soak-mcp: FAILED: {msg}", file=sys.stderr, flush=True)
    shown += 1


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read()
    fields = st[st.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


def descendants(pid):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid, start, _ = proc_stat(int(p))
            except (OSError, ValueError):
                continue
            kids.setdefault(ppid, []).append((int(p), start))
    out, todo = set(), [pid]
    while todo:
        for c, start in kids.get(todo.pop(), []):
            out.add((c, start))
            todo.append(c)
    return out


def alive(procs):
    left = set()
    for p, start in procs:
        try:
            _, s, state = proc_stat(p)
        except (OSError, ValueError):
            continue
        if s == start and state not in ("Z", "X"):
            left.add((p, start))
    return left


def measure(pid):
    # Between calls the server is starting the next copy of the sandbox on
    # its own: let it settle so the figures compare like with like.
    time.sleep(1)
    rss = -1
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def call_for(i, port):
    """(code, check) for call i; check(result JSON) returns an error or None."""
    kind = i % 6
    if kind == 0:
        code = f"print(open('/input/a.txt').read(), {i})"
        want = f"workspace {i}\n"
        return "ok", code, lambda r: None if r["success"] and r["stdout"] == want else "stdout"
    if kind == 1:
        code = f"raise ValueError('soak {i}')"
        return "exception", code, lambda r: (
            None if not r["success"] and r["status"] == "error"
            and f"ValueError: soak {i}" in r["stderr"] else "exception")
    if kind == 2:
        code = f"print(call_tool('echo', n={i})['n'])"
        return "tool", code, lambda r: None if r["success"] and r["stdout"] == f"{i}\n" else "tool"
    if kind == 3:
        code = (f"try:\n    call_tool('echo', n=-{i})\n"
                "except RuntimeError as e:\n    print('RuntimeError', e)")
        want = "RuntimeError negative numbers are refused\n"
        return "tool fail", code, lambda r: None if r["success"] and r["stdout"] == want else "tf"
    if kind == 4:
        code = f"r = http_get('http://127.0.0.1:{port}/p{i}')\nprint(r['status'], r['body'])"
        want = f"200 /p{i}\n"
        return "http", code, lambda r: None if r["success"] and r["stdout"] == want else "http"
    code = f"import os\nos.makedirs('/output/d')\nopen('/output/d/f{i}.txt', 'w').write('{i}' * 100)"

    def check(r):
        f = r["files"]
        if not r["success"] or len(f) != 1 or f[0]["path"] != f"/output/d/f{i}.txt" \
                or f[0]["size"] != len(str(i)) * 100:
            return "files"
        return None
    return "file", code, check


def main():
    airlock, runs = sys.argv[1], int(sys.argv[2])
    warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    warmup = min(warmup, runs // 3)
    slack = int(os.environ.get("SOAK_RSS_SLACK_KIB", "1024"))
    d = tempfile.mkdtemp(prefix="soak-mcp-")
    ws = os.path.join(d, "ws")
    os.mkdir(ws)
    with open(os.path.join(ws, "a.txt"), "w") as f:
        f.write("workspace")
    with open(os.path.join(d, "tool.py"), "w") as f:
        f.write(TOOL)
    with open(os.path.join(d, "tools.json"), "w") as f:
        json.dump({"tools": [{"name": "echo", "description": "Returns its arguments.",
                              "parameters": {"type": "object",
                                             "properties": {"n": {"type": "integer"}},
                                             "required": ["n"]},
                              "command": ["/usr/bin/python3", "tool.py"],
                              "approval_mode": "never_require"}]}, f)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]

    p = subprocess.Popen([airlock, "mcp", "-w", ws, "-t", os.path.join(d, "tools.json"),
                          "-a", f"127.0.0.1:{port}=GET"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(msg):
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()

    def receive(want_id):
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"the server closed its output (exit {p.poll()})")
            msg = json.loads(line)
            if msg.get("id") == want_id:
                return msg

    counts = {}
    warm = end = None
    t0 = time.monotonic()
    try:
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "soak", "version": "1"}}})
        r = receive(0)
        if "result" not in r:
            fail(f"initialize: {r}")
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i in range(runs):
            if i == warmup:
                warm = measure(p.pid)
            kind, code, check = call_for(i, port)
            send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                  "params": mcp_call_params(code)})
            r = receive(i + 1)
            res = mcp_result_json(r["result"]) if "_meta" in r.get("result", {}) else None
            if res is None:
                fail(f"call {i} ({kind}): no result: {str(r)[:300]}")
                continue
            why = check(res)
            if why:
                fail(f"call {i} ({kind}): {why}: {json.dumps(res)[:400]}")
            for text in (res.get("stdout", ""), res.get("stderr", "")):
                if "Sanitizer" in text or "runtime error:" in text:
                    fail(f"call {i} ({kind}): a sanitizer report in the guest's output")
            counts[kind] = counts.get(kind, 0) + 1
            if (i + 1) % 500 == 0:
                rss, fds = measure(p.pid)
                print(f"soak-mcp: {i + 1} calls: server rss {rss} KiB, fds {fds}", flush=True)
        end = measure(p.pid)
        procs = descendants(p.pid)
    finally:
        p.stdin.close()
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            rc = p.wait()
            fail("the server did not exit within 120 s of the end of its input")
        srv.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    secs = time.monotonic() - t0
    print(f"soak-mcp: {runs} calls in {secs:.1f} s ({runs / secs:.1f} calls/s): "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"soak-mcp: after {warmup} warm-up calls: server rss {warm[0]} KiB, fds {warm[1]}")
    print(f"soak-mcp: after {runs} calls:         server rss {end[0]} KiB, fds {end[1]}")
    print(f"soak-mcp: growth: rss {end[0] - warm[0]:+d} KiB (allowed {slack}), "
          f"fds {end[1] - warm[1]:+d}")
    if end[0] - warm[0] > slack:
        fail(f"server resident memory grew by {end[0] - warm[0]} KiB")
    if end[1] > warm[1]:
        fail(f"server descriptors grew from {warm[1]} to {end[1]}")
    if rc != 0:
        fail(f"the server exited with {rc}")
    left = alive(procs)
    print(f"soak-mcp: server exit status {rc}; processes left behind: {len(left)}")
    if left:
        fail(f"processes left behind: {sorted(left)}")
    print(f"soak-mcp: {'FAILED' if failures else 'passed'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
