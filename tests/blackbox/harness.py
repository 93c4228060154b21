"""A small harness for black-box tests that drive the built airlock binary.

Each test module defines functions named test_*; run() calls each in order,
prints one line per test and a closing line "NAME: N passed, N failed".
"""
import atexit
import contextlib
import base64
import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback

AIRLOCK = os.environ.get("AIRLOCK") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "airlock")


def airlock(*args, input=None, timeout=120, env=None):
    """Runs the airlock binary; returns CompletedProcess with text output."""
    return subprocess.run([AIRLOCK, *args], input=input, capture_output=True,
                          timeout=timeout, text=True, env=env)


def run_json(code, *args, timeout=120):
    """airlock run --json -c CODE ARGS...; returns (exit status, result dict)."""
    p = airlock("run", "--json", "-c", code, *args, timeout=timeout)
    try:
        return p.returncode, json.loads(p.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc {p.returncode}): {p.stdout[:500]!r} {p.stderr[:500]!r}")


# A tools/call asks for the run record in the result's _meta this way (see
# README, "What the client sees").
MCP_RUN = "dev.airlock/run"


def mcp_call_params(code):
    """The params of a tools/call of execute_code(code) with the run record."""
    return {"name": "execute_code", "arguments": {"code": code}, "_meta": {MCP_RUN: True}}


def mcp_result_json(result):
    """The result JSON of `airlock run --json`, as far as a CallToolResult
    asked for with mcp_call_params carries it: its content items told apart
    by the record's "parts". stdout and stderr are the model's text (CRLF as
    LF); on failure stderr is the error item (stderr and how the run ended)."""
    # A tool error that is no run's (the sandbox unavailable, a workspace
    # refused) has no record: its text is the failure to show.
    assert MCP_RUN in result.get("_meta", {}), f"not a run's result: {result}"
    rec = result["_meta"][MCP_RUN]
    out = {"success": not result["isError"], "status": rec["status"],
           "exit_code": rec["exit_code"], "stdout": "", "stderr": "",
           "stdout_truncated": rec["stdout_truncated"],
           "stderr_truncated": rec["stderr_truncated"], "files": [],
           "refused": rec["refused"], "duration_ms": rec["duration_ms"]}
    # A session cell's outcome and handle, when the call had one.
    for key in ("state", "session"):
        if key in rec:
            out[key] = rec[key]
    files = iter(rec["files"])
    for kind, item in zip(rec["parts"], result["content"]):
        if kind == "stdout":
            out["stdout"] = item["text"]
        elif kind in ("stderr", "error"):
            out["stderr"] = item["text"]
        elif kind == "file":
            f = dict(next(files))
            if item["type"] == "image":
                f["data_base64"] = item["data"]
            elif "blob" in item["resource"]:
                f["data_base64"] = item["resource"]["blob"]
            else:
                f["data_base64"] = base64.b64encode(item["resource"]["text"].encode()).decode()
            out["files"].append(f)
    return out


_made = []
atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _made])


def tmpdir():
    """A temporary folder, removed when the test module ends."""
    d = tempfile.mkdtemp(prefix="airlock-test-")
    _made.append(d)
    return d


def tools_file(name, description, properties, required, script, timeout, folder=None,
               python=sys.executable):
    """A tools file declaring one command tool, `python script` (the source
    given, saved as tool.py beside it); returns the tools file's path."""
    d = folder or tmpdir()
    with open(os.path.join(d, "tool.py"), "w") as f:
        f.write(script)
    spec = {"tools": [{"name": name, "description": description,
                       "parameters": {"type": "object", "properties": properties,
                                      "required": required, "additionalProperties": False},
                       "command": [python, "tool.py"], "timeout": timeout}]}
    path = os.path.join(d, "tools.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


class Mcp:
    """One `airlock mcp` server spoken to over its stdio, initialized. Requests
    may be in flight in parallel: start() sends one, wait() takes its reply."""

    def __init__(self, *args, client="test", prefix=()):
        # prefix: a command the server runs under (strace, for one).
        self.p = subprocess.Popen([*prefix, AIRLOCK, "mcp", *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.replies = {}
        self.ended = False
        self.errors = []
        self.cv = threading.Condition()
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()
        # stderr is drained too, so that a chatty server never blocks on it.
        threading.Thread(target=lambda: self.errors.extend(self.p.stderr), daemon=True).start()
        init = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": client, "version": "1"}})
        assert "result" in init, init
        self.init = init["result"]
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self):
        for line in self.p.stdout:
            msg = json.loads(line)
            if "id" in msg:
                with self.cv:
                    self.replies[msg["id"]] = msg
                    self.cv.notify_all()
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def start(self, method, params):
        with self.cv:
            i = self.next_id
            self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        return i

    def wait(self, i, timeout=120):
        with self.cv:
            ok = self.cv.wait_for(lambda: i in self.replies or self.ended, timeout)
            assert i in self.replies, (f"airlock mcp ended: {''.join(self.errors)[:2000]}"
                                       if ok else f"no reply to request {i}")
            return self.replies.pop(i)

    def request(self, method, params):
        return self.wait(self.start(method, params))

    def start_call(self, code):
        """Sends execute_code(code); returns the request's id for result()."""
        return self.start("tools/call", mcp_call_params(code))

    def result(self, i):
        """The CallToolResult of the call started as request i."""
        r = self.wait(i)
        assert "result" in r, r
        return r["result"]

    def call(self, code):
        """The CallToolResult of execute_code(code)."""
        return self.result(self.start_call(code))

    def run(self, code):
        """The result JSON of execute_code(code), from the run record."""
        return mcp_result_json(self.call(code))

    def close(self):
        """Ends the server's input; returns its exit status."""
        self.p.stdin.close()
        status = self.p.wait(timeout=60)
        self.p.stdout.close()
        return status


@contextlib.contextmanager
def mcp(*args, prefix=()):
    """An Mcp for a with block: it must exit 0 when its input ends."""
    m = Mcp(*args, prefix=prefix)
    try:
        yield m
    finally:
        if m.p.poll() is None:
            try:
                assert m.close() == 0
            except Exception:
                m.p.kill()
                m.p.wait()


# The machine's configuration, which several checkouts of this suite may
# share at once: its BLAS alternative (OpenBLAS, or Debian's netlib BLAS,
# which test_guest_python switches to and back) and the links in
# /etc/alternatives (test_guest_python plants some). A test that changes it
# holds this lock exclusively; a test whose scenario rests on it as
# configured holds it shared, so that no other checkout's change lands in
# the middle. Held by the writers alone, it let a product meant to be
# refused OpenBLAS's 128 MiB buffer (test_isolation) run under netlib's BLAS,
# which reserves none, and end as `ok`.
MACHINE_LOCK = "/tmp/airlock-test-machine.lock"


@contextlib.contextmanager
def environ(env):
    """os.environ with env's variables set for a with block (for a child
    started there to inherit), and as it was after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


@contextlib.contextmanager
def machine_lock(exclusive=False):
    """Holds the machine lock (MACHINE_LOCK): exclusive to change the
    machine, shared to rely on it as configured. A process that may not
    open the lock file (made by root before it was readable by all) holds
    nothing: it is not root, and cannot change the machine itself."""
    try:
        fd = os.open(MACHINE_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = os.open(MACHINE_LOCK, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError:
        fd = -1
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        if fd >= 0:
            os.close(fd)


class Skip(Exception):
    """Raised by a test that cannot run here; its message says why and how
    to make it run. It is counted apart, never as a pass."""


def on_openblas(test):
    """A test whose scenario is OpenBLAS's (its buffer, its thread pool):
    run with the machine lock held shared, so that the machine's BLAS is
    the one it is configured with throughout, and skipped where that is
    not OpenBLAS (numpy in the guest would load Debian's netlib BLAS)."""
    @functools.wraps(test)
    def wrapper():
        with machine_lock():
            code = "import numpy\nprint('openblas' in open('/proc/self/maps').read())"
            rc, r = run_json(code)
            assert rc == 0, r["stderr"]
            if r["stdout"] != "True\n":
                raise Skip("numpy loads Debian's netlib BLAS here, not OpenBLAS: select it with "
                           "update-alternatives --auto libblas.so.3-x86_64-linux-gnu "
                           "(libopenblas0-pthread installed)")
            test()
    return wrapper


def built_helper(name):
    """The path of the helper program tests/helpers/NAME.c as the build made
    it (make tests), or Skip with that hint when it is not built."""
    path = os.path.join(os.environ.get("AIRLOCK_BUILD", os.path.dirname(AIRLOCK)), "tests", name)
    if not os.access(path, os.X_OK):
        raise Skip(f"{path} is not built: run make tests (tests/helpers/{name}.c)")
    return path


def rendezvous():
    """A loopback server of the test's own: the guest's GET /ready sets
    `ready`, and its GET /go is answered once the test sets `go`. So the test
    acts while the guest waits at a known point, however slow the machine."""
    import http.server
    import threading
    ready, go = threading.Event(), threading.Event()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/ready":
                ready.set()
            elif self.path == "/go":
                go.wait(120)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, ready, go


def next_run_works():
    """After a hostile scenario, a plain run must still succeed."""
    rc, r = run_json("print(6 * 7)")
    assert rc == 0 and r["status"] == "ok" and r["stdout"] == "42\n", (rc, r)


def run(name=None):
    name = name or os.path.splitext(os.path.basename(sys.modules["__main__"].__file__))[0]
    tests = [(n, f) for n, f in vars(sys.modules["__main__"]).items()
             if n.startswith("test_") and callable(f)]
    only = os.environ.get("ONLY")
    passed = failed = skipped = 0
    for n, f in tests:
        if only and only not in n:
            continue
        try:
            f()
            passed += 1
            print(f"ok {n}", flush=True)
        except Skip as e:
            skipped += 1
            print(f"skip {n}: {e}", flush=True)
        except Exception:
            failed += 1
            print(f"not ok {n}", flush=True)
            traceback.print_exc()
    print(f"{name}: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)
