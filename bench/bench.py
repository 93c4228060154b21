#!/usr/bin/python3
"""Measures airlock against the alternatives on this machine, side by side.

Called by bench/run.sh (`make bench`, `make bench QUICK=1`) after it has built
the library-level helpers and installed the npm peers. Every system is timed
the same way from here (a new process per run for the command-line peers,
calls spaced 10 ms apart); a system that cannot be installed or run is listed
with the reason it was skipped. Writes bench/results/latest.{md,json,svg}.
Standard library only.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
FIREJAIL = ["firejail", "--quiet", "--noprofile", "--net=none"]
RUNSC = ["runsc", "--network=none", "do"]

# Published figures of the Hyperlight sandbox (Python guest); no hardware stated.
HYPERLIGHT = [("cold start", 143.9), ("restore", 11.4), ("restore+run", 1.5),
              ("warm tool dispatch", 0.4)]

CSV_CODE = """import csv
total = 0
with open('{inp}/data.csv', newline='') as f:
    rows = csv.reader(f)
    next(rows)
    for row in rows:
        total += int(row[1])
with open('{out}/out.bin', 'wb') as f:
    f.write(b'x' * 1048576)
print(total)
"""

SYSTEMS = {
    "airlock": "airlock (library, in-process)",
    "airlock-run": "`airlock run` (CLI, whole command)",
    "airlock-mcp": "`airlock mcp` (stdio round trip)",
    "python3": "python3, no isolation (floor)",
    "bwrap": "bubblewrap + python3",
    "firejail": "firejail + python3",
    "gvisor": "gVisor `runsc do` + python3",
    "srt": "sandbox-runtime `srt` + python3",
    "pyodide": "Pyodide in Node (no OS isolation)",
}
OS_ISOLATED = ["bwrap", "firejail", "gvisor", "srt"]
WORKLOADS = {
    "fresh": "1. fresh isolated run of print(1)",
    "cold": "2. cold start: new sandbox + first run",
    "csv": "3. 10 MB CSV in, sum, 1 MB file out",
    "tools": "4. 100 host tool calls in one run",
}


T0 = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))] if s else None


def summary(samples, **extra):
    d = {"median_ms": pct(samples, 0.5), "p90_ms": pct(samples, 0.9),
         "min_ms": min(samples), "n": len(samples), "samples_ms": samples}
    d.update(extra)
    return d


def die_with_parent():
    """For Popen's preexec_fn: the child gets SIGKILL when this process ends,
    however it ends (a watchdog's exit, a crash), so nothing outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_ready(port, proc, what, deadline):
    """Waits until the `airlock serve` at port says ready on /readyz (what:
    the name its errors give it); an error when proc exits first or
    deadline (time.monotonic()) passes."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready")
        time.sleep(0.1)


def pss_tree(root):
    """(PSS in KiB, number of processes) of a process and all its
    descendants, from smaps_rollup; a process gone meanwhile, or a zombie,
    counts for nothing."""
    import bench_loaded  # noqa: E402 - a sibling script: its table of /proc
    children = bench_loaded.children_of(bench_loaded.proc_times())
    total = procs = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            continue
        procs += 1
    return total, procs


def pss_tree_kib(root):
    """PSS of a process and all its descendants, in KiB."""
    return pss_tree(root)[0]


class Bench:
    def __init__(self, build, quick, tmp):
        self.build, self.quick, self.tmp = build, quick, tmp
        self.n_fast = 30 if quick else 100
        self.res = {w: {} for w in list(WORKLOADS) + ["memory", "throughput"]}
        self.skipped = {}
        self.extra = {}

    def runs_for(self, first_ms):
        """>= 100 runs (30 quick) where a run is under 100 ms; fewer for slow ones."""
        if first_ms < 100:
            return self.n_fast
        if first_ms < 1000:
            return 6 if self.quick else 30
        return 3 if self.quick else 8

    def skip(self, system, reason):
        self.skipped[system] = reason
        log(f"  skip {system}: {reason}")

    # ---- command-line peers -------------------------------------------

    def time_cmd(self, argv, want=b"1\n", timeout=120, env=None):
        # A binary being relinked (a build in the same tree) cannot be executed
        # for a moment: such an attempt is retried and not timed.
        for attempt in range(10):
            t = time.perf_counter()
            try:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, timeout=timeout, env=env)
                break
            except (PermissionError, FileNotFoundError, OSError) as e:
                if attempt == 9 or isinstance(e, subprocess.SubprocessError):
                    raise
                time.sleep(1)
        ms = (time.perf_counter() - t) * 1e3
        if p.returncode != 0 or (want is not None and p.stdout.strip() != want.strip()):
            raise RuntimeError(f"{argv[0]} exited {p.returncode}: "
                               f"{(p.stderr or p.stdout).decode(errors='replace').strip()[:300]}")
        return ms, p.stdout

    def sample_cmd(self, make_argv, want=b"1\n", before=None, after=None, n=None):
        """Times a fresh process per run, calls spaced 10 ms apart. One untimed
        run first warms the page cache and decides the number of runs."""
        if before:
            before()
        first, _ = self.time_cmd(make_argv(), want)
        if after:
            after()
        n = n or self.runs_for(first)
        out = []
        for _ in range(n):
            time.sleep(0.01)
            if before:
                before()
            ms, _ = self.time_cmd(make_argv(), want)
            if after:
                after()
            out.append(ms)
        return out

    def idle_pss(self, argv):
        """PSS of a sandbox whose python3 is up and waiting on its stdin."""
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        try:
            # "ready" once python3 is up; a sandbox that never starts is skipped.
            if not select.select([p.stdout], [], [], 60)[0] or not p.stdout.readline():
                raise RuntimeError("the sandbox did not start within 60 s")
            time.sleep(0.2)
            return pss_tree_kib(p.pid)
        finally:
            p.stdin.close()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def throughput_cmd(self, argv, workers, total):
        """Runs per second with `workers` concurrent callers, each starting a
        new process per run."""
        left = [total]
        lock = threading.Lock()
        errors = []

        def worker():
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                try:
                    self.time_cmd(argv)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(str(e))
                    return

        t = time.perf_counter()
        ts = [threading.Thread(target=worker) for _ in range(workers)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        if errors:
            raise RuntimeError(errors[0])
        return total / (time.perf_counter() - t)

    def peer(self, name, prefix, csv_argv=None, csv_dirs=None, idle=True, throughput=True):
        """Fresh run, cold start (the same thing for a process per run), CSV,
        idle memory and throughput of a command-line sandbox."""
        if name not in self.res["fresh"]:
            return  # skipped (reason recorded) or failed in the interleaved runs
        log(f"- {name}")
        if csv_argv:
            try:
                self.res["csv"][name] = summary(self.csv_peer(csv_argv, csv_dirs))
            except Exception as e:  # noqa: BLE001
                self.res["csv"][name] = {"skipped": str(e)[:200]}
        if idle:
            try:
                self.res["memory"][name] = {"pss_kib": self.idle_pss(
                    prefix + [PY, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"])}
            except Exception as e:  # noqa: BLE001
                self.res["memory"][name] = {"skipped": str(e)[:200]}
        if throughput and self.res["fresh"][name]["median_ms"] < 1000:
            tp = {}
            for w in (1, 2, 8):
                budget_ms = 1000 if self.quick else 4000
                total = max((2 if self.quick else 4) * w,
                            int(budget_ms / self.res["fresh"][name]["median_ms"]))
                tp[str(w)] = self.throughput_cmd(prefix + [PY, "-c", "print(1)"], w, total)
            self.res["throughput"][name] = tp

    def csv_peer(self, make_argv, dirs):
        inp, out = dirs

        def clear():
            for f in os.listdir(out):
                os.unlink(os.path.join(out, f))

        def check():
            size = os.path.getsize(os.path.join(out, "out.bin"))
            if size != 1048576:
                raise RuntimeError(f"the output came back with {size} bytes")

        clear()
        return self.sample_cmd(make_argv, want=self.csv_sum, before=clear, after=check)

    # ---- the workloads' data ------------------------------------------

    def make_csv(self):
        self.csv_in = os.path.join(self.tmp, "in")
        self.csv_out = os.path.join(self.tmp, "out")
        os.makedirs(self.csv_in)
        os.makedirs(self.csv_out)
        os.chmod(self.csv_out, 0o777)
        total, rows = 0, ["id,value,label"]
        size, i = 0, 0
        while size < 10 * 1024 * 1024:
            v = (i * 7919) % 100003
            line = f"{i},{v},item-{i % 977}-abcdefghijklmnop"
            rows.append(line)
            size += len(line) + 1
            total += v
            i += 1
        with open(os.path.join(self.csv_in, "data.csv"), "w") as f:
            f.write("\n".join(rows) + "\n")
        self.csv_sum = f"{total}\n".encode()
        self.extra["csv_rows"] = i
        self.extra["csv_bytes"] = os.path.getsize(os.path.join(self.csv_in, "data.csv"))

    def code_file(self, name, inp, out):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(CSV_CODE.format(inp=inp, out=out))
        return path

    # ---- airlock --------------------------------------------------------

    def tool(self, *args):
        p = subprocess.run([os.path.join(self.build, "bench_workloads"), *map(str, args)],
                           stdout=subprocess.PIPE, timeout=600, check=True)
        return json.loads(p.stdout)

    def airlock_lib(self):
        log("- airlock library")
        n = self.n_fast
        self.res["cold"]["airlock"] = summary(self.tool("cold", 10 if self.quick else 30)["samples_ms"])
        code = self.code_file("csv_airlock.py", "/input", "/output")
        r = self.tool("csv", self.csv_in, 10 if self.quick else 30, code)
        if r["stdout"].encode() != self.csv_sum:
            raise RuntimeError(f"airlock CSV sum {r['stdout']!r} != {self.csv_sum!r}")
        self.res["csv"]["airlock"] = summary(r["samples_ms"], staging_ms=r["setup_ms"],
                                             note="workspace staged once")
        self.res["tools"]["airlock"] = summary(self.tool("tools", 10 if self.quick else 30, 100)["samples_ms"],
                                               note="C callback via airlock_config_add_tool")
        tp = {}
        for w in (1, 2, 8):
            tp[str(w)] = self.tool("throughput", w, 40 if self.quick else 200)["runs_per_s"]
        self.res["throughput"]["airlock"] = tp
        # The lead's benchmark: cold start, restore+run, idle PSS, soak growth.
        p = subprocess.run([os.path.join(self.build, "bench_sandbox"), str(n),
                            "100" if self.quick else "1000"],
                           stdout=subprocess.PIPE, timeout=600, check=True)
        bs = json.loads(p.stdout)
        self.extra["bench_sandbox"] = bs
        self.res["memory"]["airlock"] = {"pss_kib": bs["idle_pss_kib"],
                                         "note": "template + pre-started copy"}

    def airlock_run(self):
        log("- airlock run")
        exe = os.path.join(self.build, "airlock")
        code = CSV_CODE.format(inp="/input", out="/output")
        outdir = os.path.join(self.tmp, "cli-out")

        def clear():
            shutil.rmtree(outdir, ignore_errors=True)

        def check():
            if os.path.getsize(os.path.join(outdir, "out.bin")) != 1048576:
                raise RuntimeError("airlock run: the output did not come back")

        s = self.sample_cmd(lambda: [exe, "run", "-w", self.csv_in, "--output-dir", outdir,
                                     "-c", code], want=self.csv_sum, before=clear, after=check)
        self.res["csv"]["airlock-run"] = summary(s, note="stages the workspace every command")
        tools = os.path.join(self.tmp, "tools.json")
        with open(tools, "w") as f:
            json.dump({"tools": [{"name": "add", "description": "Add two integers.",
                                  "parameters": {"type": "object", "properties": {
                                      "a": {"type": "integer"}, "b": {"type": "integer"}},
                                      "required": ["a", "b"]},
                                  "command": [PY, "-c", "import json,sys; a=json.load(sys.stdin); "
                                              "print(json.dumps({'sum': a['a'] + a['b']}))"],
                                  "approval_mode": "never_require"}]}, f)
        code = "s = 0\nfor i in range(100):\n    s += call_tool('add', a=i, b=1)['sum']\nprint(s)\n"
        if self.quick:
            self.res["tools"]["airlock-run"] = {"skipped": "QUICK mode (a python3 per call: seconds)"}
            return
        try:
            s = self.sample_cmd(lambda: [exe, "run", "-t", tools, "-c", code], want=b"5050\n", n=3)
            self.res["tools"]["airlock-run"] = summary(s, note="command tool: a python3 per call")
        except Exception as e:  # noqa: BLE001
            self.res["tools"]["airlock-run"] = {"skipped": str(e)[:200]}

    def mcp_start(self):
        """Starts `airlock mcp`, initialises it and makes the first call; the
        time until that call has returned is its cold start."""
        exe = os.path.join(self.build, "airlock")
        t0 = time.perf_counter()
        self.mcp = subprocess.Popen([exe, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        self.mcp_ids = iter(range(1, 1 << 30))
        self.mcp_rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "airlock-bench", "version": "1"}})
        self.mcp_rpc("notifications/initialized", {}, notify=True)
        self.mcp_call()
        self.res["cold"]["airlock-mcp"] = summary([(time.perf_counter() - t0) * 1e3],
                                                  note="spawn, initialize, first call")

    def mcp_rpc(self, method, params, notify=False):
        p = self.mcp
        # The client's own JSON work, kept apart: it is this client's cost of
        # the protocol, not the server's (see fresh_interleaved).
        t0 = time.perf_counter()
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            msg["id"] = next(self.mcp_ids)
        data = (json.dumps(msg) + "\n").encode()
        self.mcp_json_s = time.perf_counter() - t0
        p.stdin.write(data)
        p.stdin.flush()
        if notify:
            return None
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("airlock mcp closed its output")
            t0 = time.perf_counter()
            r = json.loads(line)
            self.mcp_json_s += time.perf_counter() - t0
            if r.get("id") == msg["id"]:
                if "error" in r:
                    raise RuntimeError(f"airlock mcp: {r['error']}")
                return r["result"]

    def mcp_call(self):
        t = time.perf_counter()
        r = self.mcp_rpc("tools/call", {"name": "execute_code", "arguments": {"code": "print(1)"}})
        ms = (time.perf_counter() - t) * 1e3
        if r.get("isError") or r["content"] != [{"type": "text", "text": "1\n"}]:
            raise RuntimeError(f"airlock mcp: unexpected result {str(r)[:200]}")
        return ms

    def airlock_mcp(self):
        """Idle memory of the MCP server started for the interleaved runs."""
        if not getattr(self, "mcp", None):
            return
        try:
            time.sleep(0.1)
            self.res["memory"]["airlock-mcp"] = {"pss_kib": pss_tree_kib(self.mcp.pid),
                                                 "note": "server + its sandbox"}
            # The transport's own round trip, from the same client: ping,
            # which the server answers on its reading thread.
            pings = []
            for _ in range(20 if self.quick else 100):
                time.sleep(0.01)
                t = time.perf_counter()
                self.mcp_rpc("ping", {})
                pings.append((time.perf_counter() - t) * 1e3)
            self.extra["mcp_ping"] = summary(pings)
            self.mcp_sizes()
        finally:
            self.mcp.stdin.close()
            self.mcp.wait(timeout=30)
            self.mcp = None

    # The payloads of the response-size figures: a 1 MiB PNG written to
    # /output (random bytes after the signature, so nothing compresses) and
    # 100 KB of stdout.
    MCP_SIZE_RUNS = (
        ("png_1mib", "import os\nopen('/output/big.png', 'wb').write("
                     "b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom((1 << 20) - 8))",
         (1 << 20) // 3 * 4 + 4, "its base64"),
        ("stdout_100kb", "import sys\nsys.stdout.write('0123456789' * 10240)", 102400,
         "its size"),
    )

    def mcp_sizes(self):
        """The bytes of the tools/call response line for each payload of
        MCP_SIZE_RUNS, against the payload's own size on the wire."""
        out = {}
        for name, code, base, what in self.MCP_SIZE_RUNS:
            p = self.mcp
            msg = {"jsonrpc": "2.0", "id": next(self.mcp_ids), "method": "tools/call",
                   "params": {"name": "execute_code", "arguments": {"code": code}}}
            p.stdin.write((json.dumps(msg) + "\n").encode())
            p.stdin.flush()
            while True:
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError("airlock mcp closed its output")
                r = json.loads(line)
                if r.get("id") == msg["id"]:
                    break
            if "error" in r or r["result"].get("isError"):
                raise RuntimeError(f"airlock mcp: {str(r)[:300]}")
            out[name] = {"response_bytes": len(line) - 1, "payload_bytes": base, "payload": what}
        self.extra["mcp_sizes"] = out

    def srt_base(self):
        srt = os.path.join(HERE, "node_modules", ".bin", "srt")
        if not os.path.exists(srt):
            return None
        settings = os.path.join(self.tmp, "srt-settings.json")
        with open(settings, "w") as f:
            json.dump({"filesystem": {"denyRead": [], "allowWrite": [self.csv_out],
                                      "denyWrite": []},
                       "network": {"allowedDomains": [], "deniedDomains": []}}, f)
        return [srt, "--settings", settings, "-c"]

    def serve_start(self):
        """A process that holds one ready sandbox and runs print(1) for each
        line it reads (bench_workloads serve)."""
        self.srv = subprocess.Popen([os.path.join(self.build, "bench_workloads"), "serve"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.srv.stdout.readline() != b"ready\n":
            self.srv.wait()
            raise RuntimeError("bench_workloads serve did not start")

    def serve_line(self, line):
        t = time.perf_counter()
        self.srv.stdin.write(line)
        self.srv.stdin.flush()
        answer = self.srv.stdout.readline()
        if not answer:
            raise RuntimeError("bench_workloads serve stopped")
        return (time.perf_counter() - t) * 1e3, answer

    def piped_run(self):
        """One restore+run behind the bare pipe: the client's round trip and
        the run's time inside the serving process, in ms."""
        client_ms, answer = self.serve_line(b"run\n")
        return client_ms, float(answer)

    def pipe_echo(self):
        """A line through the same pipes, answered with no run: the floor of
        any process boundary for this client."""
        client_ms, answer = self.serve_line(b"echo\n")
        if answer != b"0\n":
            raise RuntimeError("bench_workloads serve did not echo")
        return client_ms

    def mcp_overhead(self):
        """The protocol's cost as the issue states it: 1,000 tools/call round
        trips of print(1), each round also timing the same run behind a bare
        pipe (with its time inside the serving process, the in-process run)
        and an echo through that pipe, in a new random order each round and
        10 ms apart, with nothing else running between them."""
        try:
            if not getattr(self, "mcp", None) or not getattr(self, "srv", None):
                return
            n = 100 if self.quick else 1000
            log(f"- airlock mcp: {n} tools/call round trips against the same run in process, "
                "behind a bare pipe, and an echo")
            S = {k: [] for k in ("mcp", "client_json", "piped", "in_process", "echo")}
            order = random.Random(2)
            kinds = ["mcp", "piped", "echo"]
            for _ in range(n):
                order.shuffle(kinds)
                for kind in kinds:
                    time.sleep(0.01)
                    if kind == "mcp":
                        S["mcp"].append(self.mcp_call())
                        S["client_json"].append(self.mcp_json_s * 1e3)
                    elif kind == "piped":
                        client_ms, run_ms = self.piped_run()
                        S["piped"].append(client_ms)
                        S["in_process"].append(run_ms)
                    else:
                        S["echo"].append(self.pipe_echo())
            out = {k: summary(v) for k, v in S.items()}
            out["mcp_without_client_json"] = summary(
                [m - j for m, j in zip(S["mcp"], S["client_json"])])
            out["rounds"] = n
            self.extra["mcp_overhead"] = out
        finally:
            if getattr(self, "srv", None):
                self.srv.stdin.close()
                self.srv.wait(timeout=60)
                self.srv = None

    def fresh_interleaved(self):
        """Workload 1 for every system at once: round after round, one sample
        of each system in turn, calls 10 ms apart, so that load that comes and
        goes on the machine hits every system alike and the ratios hold. A
        system slower than 100 ms is sampled every 3rd round, slower than 1 s
        every 10th."""
        log("- fresh runs of print(1), all systems interleaved")
        exe = os.path.join(self.build, "airlock")
        f = {}
        self.serve_start()
        # The same run behind a bare pipe, timed by this client: what any
        # process boundary costs, against which the MCP round trip shows
        # what the protocol itself adds.
        piped = []

        def lib():
            client_ms, run_ms = self.piped_run()
            piped.append(client_ms)
            return run_ms

        f["airlock"] = lib
        mcp_json = []

        def mcp():
            ms = self.mcp_call()
            mcp_json.append(self.mcp_json_s * 1e3)
            return ms

        try:
            self.mcp_start()
            f["airlock-mcp"] = mcp
        except Exception as e:  # noqa: BLE001
            self.skip("airlock-mcp", f"failed: {str(e)[:300]}")
        f["airlock-run"] = lambda: self.time_cmd([exe, "run", "-c", "print(1)"])[0]
        f["python3"] = lambda: self.time_cmd([PY, "-c", "print(1)"])[0]
        for name, prefix, pkg in (("bwrap", BWRAP, "bubblewrap"), ("firejail", FIREJAIL, "firejail"),
                                  ("gvisor", RUNSC, "runsc")):
            if name == "gvisor" and self.quick:
                self.skip("gvisor", "skipped in QUICK mode (a second or more per run)")
            elif shutil.which(prefix[0]):
                f[name] = lambda p=prefix: self.time_cmd(p + [PY, "-c", "print(1)"])[0]
            else:
                self.skip(name, f"{prefix[0]} is not installed (Debian package {pkg})")
        base = self.srt_base()
        if base:
            f["srt"] = lambda: self.time_cmd(base + [f"{PY} -c 'print(1)'"])[0]
        else:
            self.skip("srt", "npm @anthropic-ai/sandbox-runtime is not installed")
        period, samples = {}, {}
        for name, fn in list(f.items()):
            try:
                # Untimed: warms caches; the fastest of three sets the sampling period.
                first = min(fn(), fn(), fn())
                period[name] = 1 if first < 100 else 3 if first < 1000 else 10
                samples[name] = []
            except Exception as e:  # noqa: BLE001
                self.skip(name, str(e)[:300])
                del f[name]
        # Each round visits the systems in a new order: a fixed order gives
        # each system the same neighbour every time (airlock-mcp always came
        # 10 ms after the library's run, while that sandbox prepared its
        # next copy on the same two CPUs).
        order = random.Random(1)
        for r in range(self.n_fast):
            names = list(f)
            order.shuffle(names)
            for name in names:
                fn = f.get(name)
                if fn is None or r % period[name]:
                    continue
                time.sleep(0.01)
                try:
                    samples[name].append(fn())
                except Exception as e:  # noqa: BLE001
                    self.skip(name, str(e)[:300])
                    del f[name]
        # The first three calls were untimed warm-ups.
        if len(piped) > 3:
            self.extra["airlock_piped"] = summary(piped[3:])
        if len(mcp_json) > 3 and len(mcp_json) - 3 == len(samples.get("airlock-mcp", [])):
            self.extra["mcp_client_json"] = summary(mcp_json[3:])
            self.extra["mcp_without_client_json"] = summary(
                [m - j for m, j in zip(samples["airlock-mcp"], mcp_json[3:])])
        notes = {"airlock": "restore+run of a ready sandbox",
                 "airlock-mcp": "tools/call round trip", "airlock-run": "new sandbox per command"}
        for name in f:
            self.res["fresh"][name] = summary(samples[name], note=notes.get(name, ""))
            if name not in ("airlock", "airlock-mcp"):
                self.res["cold"][name] = summary(
                    samples[name], note="whole command" if name == "airlock-run"
                    else "same as a fresh run: new sandbox per run")

    # ---- other peers ----------------------------------------------------

    def peers(self):
        inp, out = self.csv_in, self.csv_out
        code_host = self.code_file("csv_host.py", inp, out)
        code_box = self.code_file("csv_box.py", "/input", "/output")
        self.peer("python3", [], csv_argv=lambda: [PY, code_host], csv_dirs=(inp, out))
        cb = BWRAP + ["--ro-bind", inp, "/input", "--bind", out, "/output",
                      "--ro-bind", code_box, "/code.py"]
        self.peer("bwrap", BWRAP, csv_argv=lambda: cb + [PY, "/code.py"], csv_dirs=(inp, out))
        self.peer("firejail", FIREJAIL, csv_argv=lambda: FIREJAIL + [PY, code_host],
                  csv_dirs=(inp, out))
        # `runsc do` keeps writes in a tmpfs overlay; only without it does the
        # output file come back (the host tree is then writable: noted).
        rw = ["runsc", "--network=none", "do", "--force-overlay=false"]
        self.peer("gvisor", RUNSC, csv_argv=lambda: rw + [PY, code_host],
                  csv_dirs=(inp, out), throughput=False)
        if "median_ms" in self.res["csv"].get("gvisor", {}):
            self.res["csv"]["gvisor"]["note"] = "--force-overlay=false, so /output comes back"
        if "srt" in self.res["fresh"]:
            self.peer_srt(self.srt_base(), code_host)
        self.pyodide()

    def peer_srt(self, base, code_host):
        log("- srt")
        mk = lambda cmd: base + [cmd]  # noqa: E731 - srt takes one shell command string
        if self.quick:
            self.res["csv"]["srt"] = {"skipped": "QUICK mode (seconds per run)"}
            return
        try:
            self.res["csv"]["srt"] = summary(self.csv_peer(lambda: mk(f"{PY} {code_host}"),
                                                           (self.csv_in, self.csv_out)))
        except Exception as e:  # noqa: BLE001
            self.res["csv"]["srt"] = {"skipped": str(e)[:200]}

    def pyodide(self):
        log("- pyodide")
        if not os.path.isdir(os.path.join(HERE, "node_modules", "pyodide")):
            return self.skip("pyodide", "npm pyodide is not installed")
        code = self.code_file("csv_pyodide.py", "/input", "/output")
        try:
            p = subprocess.run(["node", os.path.join(HERE, "pyodide_bench.mjs"), str(self.n_fast),
                                str(5 if self.quick else 30), self.csv_in, code],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                               cwd=HERE)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.decode(errors="replace").strip()[-300:])
            r = json.loads(p.stdout)
        except Exception as e:  # noqa: BLE001
            return self.skip("pyodide", str(e)[:300])
        note = "same interpreter reused: state persists, no OS isolation"
        self.res["fresh"]["pyodide"] = summary(r["samples_ms"], note=note)
        self.res["cold"]["pyodide"] = summary([r["cold_ms"]], note="loadPyodide + first run")
        if r["csv_stdout"].encode() != self.csv_sum:
            self.res["csv"]["pyodide"] = {"skipped": f"wrong sum {r['csv_stdout']!r}"}
        else:
            self.res["csv"]["pyodide"] = summary(r["csv_samples_ms"], staging_ms=r["csv_stage_ms"],
                                                 note="input copied into MEMFS once")
        self.res["memory"]["pyodide"] = {"pss_kib": r["pss_kib"], "note": "node process after load"}
        self.extra["pyodide_version"] = r["version"]


def others(b):
    """The project's other benchmarks: the sandbox cache from 1, 2 and 8
    threads, and the file transfer core against cp -a (when present)."""
    q = ["--quick"] if b.quick else []
    exe = os.path.join(b.build, "bench_cache")
    if os.path.exists(exe):
        log("- bench_cache")
        try:
            p = subprocess.run([exe, "60" if b.quick else "300"], stdout=subprocess.PIPE,
                               timeout=300, check=True)
            b.extra["bench_cache"] = json.loads(p.stdout)
        except Exception as e:  # noqa: BLE001
            b.extra["bench_cache"] = {"skipped": str(e)[:200]}
    ws = os.path.join(HERE, "bench_workspace.py")
    if os.path.exists(ws):
        log("- workspace of 10,000 files (bench_workspace)")
        try:
            p = subprocess.run([sys.executable, ws, b.build, *q], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=900)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.decode(errors="replace").strip()[-300:])
            b.extra["bench_workspace_md"] = p.stdout.decode(errors="replace").strip()
        except Exception as e:  # noqa: BLE001
            b.extra["bench_workspace_md"] = f"bench_workspace failed: {str(e)[:300]}"
    exe = os.path.join(b.build, "bench_fsx")
    script = os.path.join(HERE, "bench_fsx.sh")
    argv = ([exe, *q, "--dir", b.tmp] if os.path.exists(exe)
            else ["bash", script, b.build, *q] if os.path.exists(script) else None)
    if argv and b.quick:
        b.extra["bench_fsx_md"] = "Skipped in QUICK mode; `make bench` runs it."
    elif argv:
        log("- file transfer (bench_fsx)")
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=600)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.decode(errors="replace").strip()[-300:])
            b.extra["bench_fsx_md"] = p.stdout.decode(errors="replace").strip()
        except Exception as e:  # noqa: BLE001
            b.extra["bench_fsx_md"] = f"bench_fsx failed: {str(e)[:300]}"


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "loadavg_at_start": os.getloadavg()}


def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def ratio(v, base):
    if not v or not base:
        return "-"
    r = v / base
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def report(data):
    res, m = data["results"], data["machine"]
    L = [f"# airlock benchmark ({'QUICK' if data['quick'] else 'full'} run)", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; {m['date']}; "
         f"load average at start {m['loadavg_at_start'][0]:.2f}, at the end "
         f"{data['loadavg_at_end'][0]:.2f}."
         + (" **The machine was busy with other work: every figure is inflated and noisy; "
            "compare ratios, and rerun on an idle machine for absolute numbers.**"
            if max(m["loadavg_at_start"][0], data["loadavg_at_end"][0]) > m["cores"] else ""),
         "",
         "Median and p90 in milliseconds over n runs, calls spaced 10 ms apart. "
         "Ratio = the system's median / airlock library's median (higher is slower than airlock).",
         ""]
    for w, title in WORKLOADS.items():
        rows = res.get(w, {})
        if not rows:
            continue
        base = (rows.get("airlock") or {}).get("median_ms")
        L += [f"## {title}", "", "| system | median ms | p90 ms | n | vs airlock | note |",
              "|---|---:|---:|---:|---:|---|"]
        for sysname, r in sorted(rows.items(), key=lambda kv: list(SYSTEMS).index(kv[0])):
            label = SYSTEMS[sysname]
            if "skipped" in r:
                L.append(f"| {label} | - | - | - | - | not measured: {r['skipped']} |")
                continue
            note = r.get("note", "")
            if "staging_ms" in r:
                note += f" (staging {fmt_ms(r['staging_ms'])} ms)"
            L.append(f"| {label} | {fmt_ms(r['median_ms'])} | {fmt_ms(r['p90_ms'])} | {r['n']} | "
                     f"{ratio(r['median_ms'], base)} | {note} |")
        L.append("")
    L += ["## 5. memory of one idle, ready sandbox (PSS)", "",
          "| system | PSS MiB | vs airlock | note |", "|---|---:|---:|---|"]
    base = (res["memory"].get("airlock") or {}).get("pss_kib")
    for sysname, r in res["memory"].items():
        if "skipped" in r:
            L.append(f"| {SYSTEMS[sysname]} | - | - | not measured: {r['skipped']} |")
            continue
        L.append(f"| {SYSTEMS[sysname]} | {r['pss_kib'] / 1024:.1f} | {ratio(r['pss_kib'], base)} | "
                 f"{r.get('note', 'process tree, python3 waiting on stdin')} |")
    L += ["", "## 6. throughput: print(1) runs per second by concurrent callers", "",
          "| system | 1 caller | 2 callers | 8 callers | 8 callers vs airlock |",
          "|---|---:|---:|---:|---:|"]
    tb = res["throughput"].get("airlock", {}).get("8")
    for sysname, r in res["throughput"].items():
        L.append(f"| {SYSTEMS[sysname]} | {r['1']:.0f} | {r['2']:.0f} | {r['8']:.0f} | "
                 f"{ratio(tb, r['8']) if sysname != 'airlock' else '1.00x'} |")
    L += ["", "airlock: threads calling airlock_sandbox_run on one sandbox; others: parallel "
          "processes. The last column is airlock's rate / the system's (higher: airlock does more).",
          ""]
    if data["skipped"]:
        L += ["## Not measured", ""]
        L += [f"- {SYSTEMS[k]}: {v}" for k, v in data["skipped"].items()]
        L.append("")
    bc = data["extra"].get("bench_cache")
    if bc and "rps_1" in bc:
        L += ["Through the sandbox cache (airlock_cache_run, bench_cache): "
              f"{bc['rps_1']:.0f} / {bc['rps_2']:.0f} / {bc['rps_8']:.0f} runs/s from 1 / 2 / 8 "
              f"threads ({bc['failures']} failures).", ""]
    if data["extra"].get("bench_workspace_md"):
        L += ["## Workspaces of 10,000 files (bench_workspace)", "",
              data["extra"]["bench_workspace_md"], ""]
    if data["extra"].get("bench_fsx_md"):
        L += ["## File transfer (bench_fsx): airlock staging and capture vs cp -a", "",
              data["extra"]["bench_fsx_md"], ""]
    L += ["## Targets (reported, not asserted)", ""]
    L += [f"- {t['what']}: {t['figure']} -- **{t['verdict']}**" for t in data["targets"]]
    L += ["", "## Hyperlight sandbox: published figures, not measured here", "",
          "Hyperlight cannot be installed on this machine. Its project publishes these figures "
          "for its Python guest, with no hardware stated; they are not comparable to the "
          "measurements above and are shown only for orientation.", "",
          "| Hyperlight (published) | ms |", "|---|---:|"]
    L += [f"| {k} | {v} |" for k, v in HYPERLIGHT]
    bs = data["extra"].get("bench_sandbox")
    if bs:
        L += ["", f"bench_sandbox (library): cold start {bs['cold_start_ms']:.1f} ms, restore+run "
              f"median {bs['run_median_ms']:.2f} ms / p90 {bs['run_p90_ms']:.2f} ms, idle PSS "
              f"{bs['idle_pss_kib'] / 1024:.1f} MiB; soak {bs['soak_runs']} runs at "
              f"{bs['soak_runs_per_s']:.0f}/s: fds {bs['fds_before']} -> {bs['fds_after']}, RSS "
              f"{bs['rss_before_kib']} -> {bs['rss_after_kib']} KiB."]
        if bs.get("run_gap10_median_ms", -1) >= 0:
            ready = bs["run_gap10_median_ms"] <= 1.25 * bs["run_median_ms"]
            L[-1] += (f" With 10 ms between runs, docs/design.md's closest spacing, restore+run "
                      f"takes {bs['run_gap10_median_ms']:.2f} ms (p90 "
                      f"{bs['run_gap10_p90_ms']:.2f} ms): the next copy is "
                      f"{'' if ready else 'not always '}ready by then.")
        mo, mp = data["extra"].get("mcp_overhead"), data["extra"].get("mcp_ping")
        if mo:
            L += ["", f"`airlock mcp` from a Python client, {mo['rounds']} rounds, each timing "
                  f"three things in a new random order, 10 ms apart: a tools/call of print(1) "
                  f"takes {mo['mcp']['median_ms']:.2f} ms (p90 {mo['mcp']['p90_ms']:.2f} ms); "
                  f"the same run behind a bare pipe {mo['piped']['median_ms']:.2f} ms, of which "
                  f"{mo['in_process']['median_ms']:.2f} ms is the run itself, timed in the "
                  f"serving process; a line echoed through that pipe with no run "
                  f"{mo['echo']['median_ms']:.2f} ms (p90 {mo['echo']['p90_ms']:.2f} ms), the "
                  f"floor of any process boundary for this client on this machine. The client's "
                  f"own json.dumps and json.loads take {mo['client_json']['median_ms']:.2f} ms "
                  f"a call; without them a call takes "
                  f"{mo['mcp_without_client_json']['median_ms']:.2f} ms."]
            if mp:
                L[-1] += (f" A ping round trip through the same pipes takes "
                          f"{mp['median_ms']:.2f} ms (p90 {mp['p90_ms']:.2f} ms).")
        ms = data["extra"].get("mcp_sizes")
        if ms:
            L += ["", "Each payload crosses the wire once: the tools/call response for a "
                  f"1 MiB PNG is {ms['png_1mib']['response_bytes']:,} bytes (its base64 "
                  f"{ms['png_1mib']['payload_bytes']:,}), for 100 KB of stdout "
                  f"{ms['stdout_100kb']['response_bytes']:,} bytes."]
        fr, pp = res.get("fresh", {}), data["extra"].get("airlock_piped")
        if pp and "median_ms" in fr.get("airlock-mcp", {}) and "median_ms" in fr.get("airlock", {}):
            L += ["", f"In the interleaved rounds of table 1, with the peers running between "
                  f"calls, tools/call adds "
                  f"{fr['airlock-mcp']['median_ms'] - fr['airlock']['median_ms']:.2f} ms to the "
                  f"in-process run and "
                  f"{fr['airlock-mcp']['median_ms'] - pp['median_ms']:.2f} ms to the same run "
                  f"behind a bare pipe ({pp['median_ms']:.2f} ms)."]
            cj = data["extra"].get("mcp_client_json")
            if cj:
                L[-1] += (f" There the client's own JSON work takes {cj['median_ms']:.2f} ms "
                          f"a call.")
        if bs.get("session_run_median_ms", -1) >= 0:
            L += ["", f"The same print(1) run again in one existing process (a session): median "
                  f"{bs['session_run_median_ms']:.2f} ms spaced like the fresh runs above, "
                  f"{bs['session_back_to_back_median_ms']:.2f} ms back to back. A fresh run's "
                  f"extra time over the first figure is the cost of a new process."]
        if bs.get("tool_call_median_us", -1) >= 0:
            L += ["", f"Tool call round trip (guest -> C callback -> guest), 10,000 calls in one run: "
                  f"median {bs['tool_call_median_us']:.1f} us, p90 {bs['tool_call_p90_us']:.1f} us; "
                  f"Hyperlight publishes 0.4 ms warm tool dispatch "
                  f"({400 / bs['tool_call_median_us']:.0f}x the airlock median)."]
    return "\n".join(L) + "\n"


def targets(res, extra=None):
    out = []
    a = (res["fresh"].get("airlock") or {}).get("median_ms")
    for peer in OS_ISOLATED:
        r = res["fresh"].get(peer)
        if not a or not r or "median_ms" not in r:
            continue
        x = r["median_ms"] / a
        out.append({"what": f"fresh run: airlock >= 40x faster than {SYSTEMS[peer]}",
                    "figure": f"{x:.1f}x", "verdict": "met" if x >= 40 else "missed"})
    c = (res["cold"].get("airlock") or {}).get("median_ms")
    b = (res["fresh"].get("bwrap") or {}).get("median_ms")
    if c and b:
        out.append({"what": "cold start <= 2x one bwrap+python3 run",
                    "figure": f"{c:.1f} ms vs 2 x {b:.1f} ms ({c / b:.2f}x)",
                    "verdict": "met" if c <= 2 * b else "missed"})
    p = (res["memory"].get("airlock") or {}).get("pss_kib")
    if p:
        out.append({"what": "idle sandbox < 15 MiB PSS", "figure": f"{p / 1024:.1f} MiB",
                    "verdict": "met" if p < 15 * 1024 else "missed"})
    # docs/design.md measures latency with 10 ms or more between calls, so the
    # next copy must be ready within 10 ms: runs that close are no slower.
    bs = (extra or {}).get("bench_sandbox") or {}
    g10, g50 = bs.get("run_gap10_median_ms", -1), bs.get("run_median_ms", -1)
    if g10 >= 0 and g50 > 0:
        out.append({"what": "next copy ready within 10 ms: restore+run 10 ms apart within 1.25x "
                            "of 50 ms apart (bench_sandbox)",
                    "figure": f"{g10:.2f} ms vs {g50:.2f} ms ({g10 / g50:.2f}x)",
                    "verdict": "met" if g10 <= 1.25 * g50 else "missed"})
    # Back to back on one sandbox, and through the cache from 8 threads.
    if bs.get("soak_runs_per_s"):
        x = bs["soak_runs_per_s"]
        out.append({"what": "restore+run back to back >= 500 runs/s (bench_sandbox soak)",
                    "figure": f"{x:.0f} runs/s", "verdict": "met" if x >= 500 else "missed"})
    bc = (extra or {}).get("bench_cache") or {}
    if bc.get("rps_8"):
        x = bc["rps_8"]
        out.append({"what": "through the cache from 8 threads >= 300 runs/s (bench_cache)",
                    "figure": f"{x:.0f} runs/s", "verdict": "met" if x >= 300 else "missed"})
    # The MCP round trip of the 1,000 rounds against three baselines timed
    # in the same rounds: the run in process, the same run behind a bare
    # pipe, and that pipe with the client's own JSON work taken out.
    mo = (extra or {}).get("mcp_overhead")
    if mo:
        med = {k: v.get("median_ms") for k, v in mo.items() if isinstance(v, dict)}
        for what, x, base, floor in (
                ("MCP tools/call adds < 0.2 ms to the in-process run", med["mcp"],
                 med["in_process"], True),
                ("MCP protocol overhead < 0.2 ms: tools/call against the same run behind a "
                 "bare pipe, both timed by one client", med["mcp"], med["piped"], False),
                ("MCP protocol overhead < 0.2 ms, as above without the client's own JSON "
                 "encoding and decoding", med["mcp_without_client_json"], med["piped"], False)):
            fig = (f"{x - base:.2f} ms ({x:.2f} ms vs {base:.2f} ms, {x / base:.2f}x, "
                   f"{mo['rounds']} calls)")
            if floor:
                fig += f"; an echo through a bare pipe alone takes {med['echo']:.2f} ms"
            out.append({"what": what, "figure": fig,
                        "verdict": "met" if x - base < 0.2 else "missed"})
    # The response sizes: each payload once, plus a little JSON around it.
    for name, what in (("png_1mib", "MCP response for a 1 MiB PNG"),
                       ("stdout_100kb", "MCP response for 100 KB of stdout")):
        m = ((extra or {}).get("mcp_sizes") or {}).get(name)
        if m:
            limit = 1.05 * m["payload_bytes"] + 2048
            out.append({"what": f"{what} <= 1.05 x {m['payload']} + 2 KB",
                        "figure": f"{m['response_bytes']:,} bytes ({m['payload']} "
                                  f"{m['payload_bytes']:,} bytes, "
                                  f"{m['response_bytes'] / m['payload_bytes']:.3f}x; "
                                  f"limit {limit:,.0f})",
                        "verdict": "met" if m["response_bytes"] <= limit else "missed"})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--only", choices=["loaded", "cold", "tenants", "runcost"],
                    help="run one scenario alone and print its table (nothing is written)")
    ap.add_argument("--against", help="with --only cold: another build's `airlock run` in the "
                                      "same rounds")
    args = ap.parse_args()
    if args.only == "cold":
        sys.path.insert(0, HERE)
        import bench_cold  # noqa: E402 - a sibling script

        r = bench_cold.run(os.path.abspath(args.build), args.quick, log,
                           os.path.abspath(args.against) if args.against else None)
        print("\n".join(bench_cold.report_lines(r)) + "\n")
        print("\n".join(f"- {t['what']}: {t['figure']} -- **{t['verdict']}**"
                         for t in bench_cold.targets(r)))
        return
    if args.only:
        sys.path.insert(0, HERE)
        mod = __import__("bench_" + args.only)  # a sibling script

        r = mod.run(os.path.abspath(args.build), args.quick, log)
        print("\n".join(mod.report_lines(r)) + "\n")
        print("\n".join(f"- {t['what']}: {t['figure']} -- **{t['verdict']}**"
                         for t in mod.targets(r)))
        return
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="airlock-bench.")
    try:
        b = Bench(os.path.abspath(args.build), args.quick, tmp)
        mach = machine()
        b.make_csv()
        # A system that fails midway is listed as not measured; the rest go on.
        for name, step in (("airlock", b.fresh_interleaved), ("airlock-mcp", b.mcp_overhead),
                           ("airlock", b.airlock_lib), ("airlock-run", b.airlock_run),
                           ("airlock-mcp", b.airlock_mcp), (None, b.peers),
                           (None, lambda: others(b))):
            try:
                step()
            except Exception as e:  # noqa: BLE001
                if name is None:
                    raise
                b.skip(name, f"failed: {str(e)[:300]}")
        # Section 7: the scientific stack preloaded (bench_packages.py).
        sys.path.insert(0, HERE)
        import bench_packages  # noqa: E402 - a sibling script

        try:
            b.extra["packages"] = bench_packages.run(b.build, b.quick, log)
        except Exception as e:  # noqa: BLE001
            b.extra["packages"] = {"skipped": f"failed: {str(e)[:300]}"}
            log(f"  skip packages: {str(e)[:300]}")
        # Section 8: a busy machine (bench_loaded.py), last, since it loads
        # every core for a while.
        import bench_loaded  # noqa: E402 - a sibling script

        try:
            b.extra["loaded"] = bench_loaded.run(b.build, b.quick, log)
        except Exception as e:  # noqa: BLE001
            b.extra["loaded"] = {"skipped": f"failed: {str(e)[:300]}"}
            log(f"  skip loaded: {str(e)[:300]}")
        # Section 9: CPU-bound pure Python, guest vs host (bench_cpu.py).
        import bench_cpu  # noqa: E402 - a sibling script

        try:
            b.extra["cpu"] = bench_cpu.run(b.build, b.quick, log)
        except Exception as e:  # noqa: BLE001
            b.extra["cpu"] = {"skipped": f"failed: {str(e)[:300]}"}
        # Section 10: many tenants on one server (bench_tenants.py): one
        # airlock serve with a workspace per tenant, against a template per
        # workspace.
        import bench_tenants  # noqa: E402 - a sibling script

        try:
            b.extra["tenants"] = bench_tenants.run(b.build, b.quick, log)
        except Exception as e:  # noqa: BLE001
            b.extra["tenants"] = {"skipped": f"failed: {str(e)[:300]}"}
            log(f"  skip tenants: {str(e)[:300]}")
        # Section 11: the cost of a run, CPU per call against the floor of
        # a fork (bench_runcost.py).
        import bench_runcost  # noqa: E402 - a sibling script

        try:
            b.extra["runcost"] = bench_runcost.run(b.build, b.quick, log)
        except Exception as e:  # noqa: BLE001
            b.extra["runcost"] = {"skipped": f"failed: {str(e)[:300]}"}
            log(f"  skip runcost: {str(e)[:300]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    data = {"quick": args.quick, "machine": mach, "results": b.res, "skipped": b.skipped,
            "extra": b.extra, "hyperlight_published_ms": dict(HYPERLIGHT),
            "elapsed_s": time.perf_counter() - t_start, "loadavg_at_end": os.getloadavg()}
    data["targets"] = targets(b.res, b.extra)
    pk = b.extra.get("packages") or {}
    if "skipped" not in pk:
        data["targets"] += bench_packages.targets(pk)
    ld = b.extra.get("loaded") or {}
    if "skipped" not in ld:
        data["targets"] += bench_loaded.targets(ld)
    tn = b.extra.get("tenants") or {}
    if "skipped" not in tn:
        data["targets"] += bench_tenants.targets(tn)
    rc = b.extra.get("runcost") or {}
    if "skipped" not in rc:
        data["targets"] += bench_runcost.targets(rc)
    os.makedirs(args.out, exist_ok=True)
    md = report(data)
    md += "\n" + ("\n".join(bench_packages.report_lines(pk)) if "skipped" not in pk else
                  f"## 7. the scientific stack preloaded\n\nnot measured: {pk['skipped']}") + "\n"
    md += "\n" + ("\n".join(bench_loaded.report_lines(ld)) if "skipped" not in ld else
                  f"## 8. a busy machine\n\nnot measured: {ld['skipped']}") + "\n"
    md += "\n" + "\n".join(bench_cpu.report_lines(b.extra["cpu"])) + "\n"
    md += "\n" + ("\n".join(bench_tenants.report_lines(tn)) if "skipped" not in tn else
                  f"## 10. many tenants\n\nnot measured: {tn['skipped']}") + "\n"
    md += "\n" + ("\n".join(bench_runcost.report_lines(rc)) if "skipped" not in rc else
                  f"## 11. the cost of a run\n\nnot measured: {rc['skipped']}") + "\n"
    md += f"\nWhole benchmark: {data['elapsed_s']:.0f} s.\n"
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    sys.path.insert(0, HERE)
    import chart  # noqa: E402 - a sibling script

    with open(os.path.join(args.out, "latest.svg"), "w") as f:
        f.write(chart.svg(data))
    print(md)
    print(f"wrote {args.out}/latest.md, latest.json, latest.svg")


if __name__ == "__main__":
    main()
