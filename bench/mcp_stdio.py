"""The benches' client of `airlock mcp` on stdio, one request at a time
(bench_tracing.py, bench_shared.py, bench_session.py, bench_workspace.py and
bench_ws_edit.py, bench_loaded.py and bench_runcost.py, bench_packages.py,
bench_tenants.py). It starts the server, initialises the session, and
matches each response to its request by id, skipping any other line (a
notification, a progress message). A bench subclasses it for its own
command line and its own timed call."""
import itertools
import json
import subprocess
import time

PROTOCOL = "2025-06-18"


class McpStdio:
    """`argv` (an `airlock mcp` command line) on stdio, initialised as
    client `client`; with `initialized`, the notifications/initialized
    follows. Other keyword arguments go to subprocess.Popen (stderr is
    dropped unless given)."""

    def __init__(self, argv, client="airlock-bench", initialized=False, **popen):
        popen.setdefault("stderr", subprocess.DEVNULL)
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **popen)
        self.ids = itertools.count(1)
        self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                    "clientInfo": {"name": client, "version": "1"}})
        if initialized:
            self.notify("notifications/initialized", {})

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params):
        """The whole response message to one request."""
        msg = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        self.send(msg)
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("airlock mcp closed its output")
            r = json.loads(line)
            if r.get("id") == msg["id"]:
                return r

    def rpc(self, method, params, notify=False):
        """A request's result (RuntimeError for an error response), or
        None for a notification."""
        if notify:
            self.notify(method, params)
            return None
        r = self.request(method, params)
        if "error" in r:
            raise RuntimeError(f"airlock mcp: {r['error']}")
        return r["result"]

    def tool(self, name, args, meta=None):
        """A tools/call's result; RuntimeError when it is an error."""
        params = {"name": name, "arguments": args}
        if meta:
            params["_meta"] = meta
        res = self.rpc("tools/call", params)
        if res.get("isError"):
            raise RuntimeError(f"{name} failed: {str(res)[:300]}")
        return res

    def call(self, code):
        """execute_code of code: (its ms, its text)."""
        t = time.perf_counter()
        res = self.tool("execute_code", {"code": code})
        dt = (time.perf_counter() - t) * 1e3
        return dt, "".join(c.get("text", "") for c in res["content"] if c["type"] == "text")

    def close(self, timeout=60):
        """The end of its input, then its exit (killed after timeout s)."""
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
