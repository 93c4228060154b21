#!/usr/bin/python3
"""Many tenants on one server (issue 31's targets), side by side in one run:

  1. memory: N tenants (1,000; --quick 100), each with its own workspace of
     20 small files already on the server's disk, served by one
     `airlock serve --preload numpy,pandas,matplotlib --tokens F
     --tenants-dir D`, each making one call that reads its files into a
     pandas DataFrame; then the PSS of the server's whole process tree (the
     sum of /proc/PID/smaps_rollup Pss over the server and all its
     descendants). Against it the old design, one template per workspace:
     K (20; --quick 5) `airlock mcp --workspace W --preload ...` processes,
     one call each, whose summed PSS is extrapolated to N;
  2. latency, through the same server once it holds N tenants: a new
     tenant's first call (its files already on disk) against a warm call of
     a tenant that has called before, in interleaved pairs (30; --quick 15),
     and a tenant's call right after one of its files changed (through the
     workspace_write tool, untimed) against an unchanged call of the same
     tenant; medians and the median of the paired differences;
  3. sessions: S (200; --quick 40) sessions open at once across S/2
     tenants, each holding a 1,000,000-byte DataFrame; the PSS the server's
     tree gained, per session.

The table also states the published figures of two peers (claims, not
measured here). Every process and folder started here is removed at the end
(the servers get SIGKILL if this process dies: PR_SET_PDEATHSIG).

Called by bench.py (`make bench`, section 10, and `bench.py BUILD --only
tenants`); alone: /usr/bin/python3 bench/bench_tenants.py BUILD [--quick].
Standard library only.
"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import die_with_parent, free_ports, pss_tree, wait_ready  # noqa: E402 - a sibling script
from mcp_stdio import McpStdio  # noqa: E402

PRELOAD = "numpy,pandas,matplotlib"
MODERN = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "airlock-bench-tenants", "version": "1"}}
FILES = 20
# Each file: a header, one row "TENANT,V" and a comment that pads it to
# about 200 bytes. The call reads every file and puts the rows in a
# DataFrame, so its answer names the tenant whose files it saw.
PAD = "# " + "x" * 160 + "\n"
CALL_CODE = ("import os, pandas as pd\n"
             "rows = [open('/input/' + f).read().split('\\n')[1].split(',')\n"
             "        for f in sorted(os.listdir('/input'))]\n"
             "df = pd.DataFrame({'tenant': [r[0] for r in rows], 'v': [int(r[1]) for r in rows]})\n"
             "print(len(df), df.tenant.nunique(), df.tenant.iloc[0], int(df.v.sum()))\n")
# Part 2's call: the same reading without pandas, whose first use of a
# DataFrame in a fresh copy costs some milliseconds of page faults that vary
# with the machine's load far more than the 2 or 3 ms the targets allow.
READ_CODE = ("import os\n"
             "rows = [open('/input/' + f).read().split('\\n')[1].split(',')\n"
             "        for f in sorted(os.listdir('/input'))]\n"
             "print(len(rows), len({r[0] for r in rows}), rows[0][0], sum(int(r[1]) for r in rows))\n")
DF_BYTES = 1_000_000
SESSION_CODE = ("import numpy as np, pandas as pd\n"
                f"df = pd.DataFrame({{'a': np.arange({DF_BYTES // 8}, dtype='float64')}})\n"
                "print(int(df.memory_usage(index=False).sum()))\n")
GAP_S = 0.05  # between timed calls of part 2: each finds its copy ready
# Published claims of peers, stated as such (issue 31): not measured here.
PEERS = [
    ("E2B, self-hosted (e2b-dev/infra #3640)",
     "about 120 sandboxes per node before running out of memory"),
    ("the open-source Firecracker-based system issue 31 cites",
     "about 3 MiB of extra memory per forked sandbox"),
]


def med(xs):
    return statistics.median(xs) if xs else None


def p90(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * 0.9))] if s else None


def settle():
    """Lets the server end the ready copies a burst left (trimmed after a
    500 ms pause) and the copies of finished runs exit."""
    time.sleep(2.0)


# ---- workspaces -----------------------------------------------------------

def tenant_name(i):
    return f"t{i:04d}"


def file_text(name, v):
    return f"tenant,v\n{name},{v}\n{PAD}"


def make_workspace(folder, name):
    os.mkdir(folder, 0o700)
    for k in range(FILES):
        with open(os.path.join(folder, f"f{k:02d}.csv"), "w") as f:
            f.write(file_text(name, k))


def expected(name, values):
    return f"{len(values)} 1 {name} {sum(values)}\n"


# ---- airlock serve over HTTP -----------------------------------------------

class Http:
    """One keep-alive connection to airlock serve; each request carries the
    token of the tenant it is for. Requests with Content-Length, responses
    read by their Content-Length (a call without a progress token is
    answered with application/json)."""

    def __init__(self, port):
        self.port, self.s, self.n, self.buf = port, None, 0, b""

    def connect(self):
        self.s = socket.create_connection(("127.0.0.1", self.port), timeout=300)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def recv(self):
        d = self.s.recv(1 << 16)
        if not d:
            raise ConnectionError("airlock serve closed the connection")
        self.buf += d

    def tool(self, token, name, args):
        """The result of tools/call name(args) for the tenant of token; a
        tool error raises."""
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                           "params": {"name": name, "arguments": args,
                                      "_meta": ENVELOPE}}).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: {MODERN}\r\nContent-Length: {len(body)}\r\n\r\n")
        for attempt in (0, 1):
            if self.s is None:
                self.connect()
            try:
                self.s.sendall(head.encode() + body)
                while b"\r\n\r\n" not in self.buf:
                    self.recv()
                break
            except (ConnectionError, BrokenPipeError):
                # The server closed an idle keep-alive connection
                # (--http-timeout): once more on a new one.
                self.close()
                if attempt:
                    raise
        head_b, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head_b.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
        n = int(hdrs["content-length"])
        while len(self.buf) < n:
            self.recv()
        data, self.buf = self.buf[:n], self.buf[n:]
        if hdrs.get("connection", "").lower() == "close":
            self.close()
        if status != 200:
            raise RuntimeError(f"airlock serve answered {status}: {data[:300]!r}")
        msg = json.loads(data)
        r = msg.get("result")
        if not r or r.get("isError"):
            raise RuntimeError(f"airlock serve: {name} failed: {str(msg)[:400]}")
        return r

    def run(self, token, code, want, session=None):
        """Times one execute_code call (ms) and checks its output."""
        args = {"code": code}
        if session:
            args["session"] = session
        t = time.perf_counter()
        r = self.tool(token, "execute_code", args)
        ms = (time.perf_counter() - t) * 1e3
        if r["content"][0]["text"] != want:
            raise RuntimeError(f"unexpected output {r['content'][0]['text']!r}, "
                               f"wanted {want!r}")
        return ms

    def close(self):
        if self.s:
            self.s.close()
            self.s = None


def stop(proc, timeout=60):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the old design: a template per workspace --------------------------------

class Mcp(McpStdio):
    """`airlock mcp --workspace W --preload ...` over stdio (one template of
    its own for W)."""

    def __init__(self, exe, workspace, env):
        super().__init__([exe, "mcp", "--workspace", workspace, "--preload", PRELOAD],
                         initialized=True, env=env, preexec_fn=die_with_parent)

    def run(self, code, want):
        r = self.tool("execute_code", {"code": code})
        if r["content"][0]["text"] != want:
            raise RuntimeError(f"airlock mcp: unexpected output {r['content'][0]['text']!r}")

    def close(self):
        super().close(timeout=30)


def old_design(exe, tmp, k, env, log):
    """PSS of k `airlock mcp` processes, one workspace each, after one call
    each: (total KiB, processes), and the total after the first k/2."""
    ws = os.path.join(tmp, "old")
    os.mkdir(ws)
    servers = []
    half = None
    try:
        for i in range(k):
            name = f"o{i:04d}"
            folder = os.path.join(ws, name)
            make_workspace(folder, name)
            m = Mcp(exe, folder, env)
            servers.append(m)
            m.run(CALL_CODE, expected(name, list(range(FILES))))
            if i + 1 == k // 2:
                settle()
                half = sum(pss_tree(s.p.pid)[0] for s in servers)
        settle()
        trees = [pss_tree(s.p.pid) for s in servers]
        return {"servers": k, "pss_kib": sum(t[0] for t in trees),
                "processes": sum(t[1] for t in trees),
                "half_servers": k // 2, "half_pss_kib": half}
    finally:
        for m in servers:
            m.close()
        log(f"  old design: {k} airlock mcp processes stopped")


# ---- the run ------------------------------------------------------------

def run(build, quick, log=lambda m: None):
    exe = os.path.join(build, "airlock")
    n_tenants = 100 if quick else 1000
    n_new = 15 if quick else 30           # part 2: new tenants (the last ones)
    n_sessions = 40 if quick else 200     # part 3, two a tenant
    k_old = 5 if quick else 20
    res = {"tenants": n_tenants, "files": FILES, "preload": PRELOAD, "pairs": n_new,
           "sessions": n_sessions, "session_tenants": n_sessions // 2, "df_bytes": DF_BYTES,
           "old_servers": k_old, "peers": PEERS, "cores": os.cpu_count(),
           "loadavg_start": os.getloadavg()[0]}
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="airlock-bench-tenants.")
    proc = None
    try:
        # Staging areas go under tmp (owned by the guest's ids: a sticky
        # folder everyone may write, as /tmp), so that what they hold on
        # disk can be counted and their removal checked.
        stage = os.path.join(tmp, "stage")
        os.mkdir(stage)
        os.chmod(stage, 0o1777)
        env = dict(os.environ, TMPDIR=stage)
        tdir = os.path.join(tmp, "tenants")
        os.mkdir(tdir, 0o700)
        names = [tenant_name(i) for i in range(n_tenants)]
        tokens = {nm: "tok-" + os.urandom(12).hex() for nm in names}
        values = {nm: list(range(FILES)) for nm in names}
        log(f"- many tenants: {n_tenants} workspaces of {FILES} files, one airlock serve "
            f"--preload {PRELOAD}")
        t = time.perf_counter()
        for nm in names:
            make_workspace(os.path.join(tdir, nm), nm)
        res["write_files_s"] = time.perf_counter() - t
        tok_file = os.path.join(tmp, "tokens")
        with open(tok_file, "w") as f:
            f.write("".join(f"{tokens[nm]} {nm}\n" for nm in names))
        port = free_ports(1)[0]
        proc = subprocess.Popen(
            [exe, "serve", "--listen", f"127.0.0.1:{port}", "--instance", "bench",
             "--tokens", tok_file, "--tenants-dir", tdir, "--preload", PRELOAD,
             "--max-sessions", str(max(8, n_sessions + 16)), "--max-sessions-per-token", "4",
             "--grace", "5"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, preexec_fn=die_with_parent)
        wait_ready(port, proc, "airlock serve", time.monotonic() + 120)
        http = Http(port)
        # The first call builds the template (untimed); the tree's PSS
        # then is the server with one tenant served.
        http.run(tokens[names[0]], CALL_CODE, expected(names[0], values[names[0]]))
        settle()
        res["pss_one_kib"], res["procs_one"] = pss_tree(proc.pid)

        # 1. One call each, back to back, but for the last n_new tenants,
        # whose first call is part 2's.
        t = time.perf_counter()
        first = []
        for nm in names[1:n_tenants - n_new]:
            first.append(http.run(tokens[nm], CALL_CODE, expected(nm, values[nm])))
        res["first_calls_s"] = time.perf_counter() - t
        res["first_calls"] = {"median_ms": med(first), "p90_ms": p90(first), "n": len(first)}
        log(f"  {len(first) + 1} tenants called once in {res['first_calls_s']:.1f} s "
            f"(median {med(first):.1f} ms)")

        # 2a. A new tenant's first call against a warm call of an existing
        # tenant (one that has called before, unchanged), interleaved, the
        # order swapped every pair.
        new, warm = [], []
        for i in range(n_new):
            nw, old = names[n_tenants - n_new + i], names[1 + i]
            pair = [(new, nw), (warm, old)] if i % 2 else [(warm, old), (new, nw)]
            for out, nm in pair:
                time.sleep(GAP_S)
                out.append(http.run(tokens[nm], READ_CODE, expected(nm, values[nm])))
        res["new_vs_warm"] = {"new": new, "warm": warm,
                              "diff": [a - b for a, b in zip(new, warm)]}
        # 2b. A call right after one of the tenant's files changed (through
        # workspace_write, untimed, GAP_S before the call) against an
        # unchanged call of the same tenant, the order swapped every pair.
        changed, same = [], []
        for i in range(n_new):
            nm = names[1 + n_new + i]
            tok = tokens[nm]

            def change(nm=nm, tok=tok, i=i):
                k = i % FILES
                values[nm][k] += 1000
                http.tool(tok, "workspace_write",
                          {"files": [{"path": f"f{k:02d}.csv",
                                      "text": file_text(nm, values[nm][k])}]})

            steps = ([("same", None), ("changed", change)] if i % 2 else
                     [("changed", change), ("same", None)])
            for what, before in steps:
                if before:
                    before()
                time.sleep(GAP_S)
                ms = http.run(tok, READ_CODE, expected(nm, values[nm]))
                (changed if what == "changed" else same).append(ms)
        res["changed_vs_same"] = {"changed": changed, "same": same,
                                  "diff": [a - b for a, b in zip(changed, same)]}
        log(f"  new tenant {med(new):.2f} ms vs warm {med(warm):.2f} ms; changed file "
            f"{med(changed):.2f} ms vs unchanged {med(same):.2f} ms")

        # Every tenant has now made at least one call: the tree's PSS.
        settle()
        res["pss_all_kib"], res["procs_all"] = pss_tree(proc.pid)
        res["stage_bytes"] = sum(os.lstat(os.path.join(d, f)).st_blocks * 512
                                 for d, ds, fs in os.walk(stage) for f in fs + ds)
        res["stage_entries"] = sum(len(fs) + len(ds) for _, ds, fs in os.walk(stage))
        log(f"  {n_tenants} tenants: PSS {res['pss_all_kib'] / 1024:.0f} MiB in "
            f"{res['procs_all']} processes")

        # 3. Sessions: two per tenant; the tree's PSS with every session
        # open and empty, then once each holds its DataFrame.
        handles = []
        t = time.perf_counter()
        for i in range(n_sessions):
            nm = names[i // 2]
            r = http.tool(tokens[nm], "session_open", {})
            h = (r.get("_meta") or {}).get("dev.airlock/session")
            if not h:
                raise RuntimeError(f"session_open returned no handle: {str(r)[:300]}")
            handles.append((nm, h))
        res["sessions_open_s"] = time.perf_counter() - t
        settle()
        res["pss_empty_kib"], res["procs_empty"] = pss_tree(proc.pid)
        t = time.perf_counter()
        for nm, h in handles:
            http.run(tokens[nm], SESSION_CODE, f"{DF_BYTES}\n", session=h)
        res["sessions_cells_s"] = time.perf_counter() - t
        # Each session still holds its DataFrame.
        nm, h = handles[-1]
        http.run(tokens[nm], "print(len(df))", f"{DF_BYTES // 8}\n", session=h)
        settle()
        res["pss_sessions_kib"], res["procs_sessions"] = pss_tree(proc.pid)
        log(f"  {n_sessions} sessions: PSS {res['pss_sessions_kib'] / 1024:.0f} MiB in "
            f"{res['procs_sessions']} processes")
        for nm, h in handles:
            http.tool(tokens[nm], "session_close", {"session": h})
        http.close()
        # The server removes every tenant's staged workspace as it stops:
        # how long that takes is a figure of its own.
        t = time.perf_counter()
        stop(proc, timeout=300)
        res["stop_s"] = time.perf_counter() - t
        res["server_exit"] = proc.returncode
        proc = None
        # What the server left behind in its staging folder.
        res["stage_left"] = sum(len(fs) + len(ds) for _, ds, fs in os.walk(stage))

        # The old design, measured after the server is gone.
        log(f"  old design: {k_old} airlock mcp --workspace W --preload {PRELOAD}")
        res["old"] = old_design(exe, tmp, k_old, env, log)
    finally:
        if proc is not None:
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_end"] = os.getloadavg()[0]
    return res


# ---- the report -----------------------------------------------------------

def mib(kib):
    return kib / 1024


def derived(res):
    """The figures the table and targets quote."""
    o = res["old"]
    per_old = o["pss_kib"] / o["servers"]
    d = {"new_total_mib": mib(res["pss_all_kib"]),
         "new_per_tenant_kib": (res["pss_all_kib"] - res["pss_one_kib"]) / (res["tenants"] - 1),
         "old_per_tenant_mib": mib(per_old),
         "old_extrapolated_gib": per_old * res["tenants"] / (1 << 20),
         "old_1000_gib": per_old * 1000 / (1 << 20)}
    if o.get("half_pss_kib"):
        slope = (o["pss_kib"] - o["half_pss_kib"]) / (o["servers"] - o["half_servers"])
        d["old_slope_mib"] = mib(slope)
        d["old_slope_1000_gib"] = (o["pss_kib"] + slope * (1000 - o["servers"])) / (1 << 20)
    # A quick run's figure for 1,000: what it measured, and its tenants'
    # marginal cost for the rest (none when the noise made it negative).
    d["new_1000_gib"] = (res["pss_all_kib"] + max(0.0, d["new_per_tenant_kib"])
                         * max(0, 1000 - res["tenants"])) / (1 << 20)
    nw = res["new_vs_warm"]
    d["new_ms"], d["warm_ms"] = med(nw["new"]), med(nw["warm"])
    d["new_diff_ms"], d["new_pair_ms"] = d["new_ms"] - d["warm_ms"], med(nw["diff"])
    cs = res["changed_vs_same"]
    d["changed_ms"], d["same_ms"] = med(cs["changed"]), med(cs["same"])
    d["changed_diff_ms"], d["changed_pair_ms"] = d["changed_ms"] - d["same_ms"], med(cs["diff"])
    d["session_mib"] = mib((res["pss_sessions_kib"] - res["pss_all_kib"]) / res["sessions"])
    d["empty_mib"] = mib((res["pss_empty_kib"] - res["pss_all_kib"]) / res["sessions"])
    d["session_limit_mib"] = 3 + res["df_bytes"] / (1 << 20)
    return d


def report_lines(res):
    d = derived(res)
    o, n = res["old"], res["tenants"]
    L = ["## 10. many tenants: one template, a workspace each", "",
         f"One `airlock serve --preload {res['preload']} --tokens F --tenants-dir D` (one token "
         f"a tenant); {n} tenants, each with a workspace of {res['files']} files of about 200 "
         "bytes written to `D/TENANT` before the server starts, each making one `tools/call` "
         "that reads its files into a pandas DataFrame (its answer names the tenant whose "
         "files it saw, and is checked). PSS: the sum of `/proc/PID/smaps_rollup` Pss over the "
         "server and all its descendants, 2 s after the last call. The old design (a template "
         f"per workspace): {o['servers']} `airlock mcp --workspace W --preload "
         f"{res['preload']}`, one call each, their trees' PSS summed and extrapolated "
         "(bench/bench_tenants.py; alone: `bench.py BUILD --only tenants`).", "",
         "| | figure | note |", "|---|---:|---|",
         f"| PSS of the server's tree, 1 tenant served | {mib(res['pss_one_kib']):.0f} MiB | "
         f"{res['procs_one']} processes |",
         f"| PSS of the server's tree, {n} tenants served | {d['new_total_mib']:.0f} MiB | "
         f"{res['procs_all']} processes; {d['new_per_tenant_kib']:.0f} KiB a tenant more |",
         f"| their staged workspaces on disk | {res['stage_bytes'] / (1 << 20):.1f} MiB | "
         f"{res['stage_entries']} entries |",
         f"| old design: {o['servers']} templates, PSS summed | {mib(o['pss_kib']):.0f} MiB | "
         f"{o['processes']} processes; {d['old_per_tenant_mib']:.1f} MiB a workspace |",
         f"| old design extrapolated to {n} tenants | {d['old_extrapolated_gib']:.1f} GiB | "
         f"{d['old_per_tenant_mib']:.1f} MiB x {n} |"]
    if "old_slope_mib" in d:
        L.append(f"| old design, the marginal template | {d['old_slope_mib']:.1f} MiB | "
                 f"PSS of {o['servers']} trees less {o['half_servers']}, per template; "
                 f"{d['old_slope_1000_gib']:.1f} GiB at 1,000 |")
    L += [f"| first call of each tenant, back to back | {res['first_calls']['median_ms']:.1f} "
          f"ms median | p90 {res['first_calls']['p90_ms']:.1f} ms, "
          f"{res['first_calls']['n']} tenants in {res['first_calls_s']:.1f} s |",
          f"| a new tenant's first call | {d['new_ms']:.2f} ms | median of {res['pairs']}, "
          f"{GAP_S * 1e3:.0f} ms apart, with {n - res['pairs']} tenants already served |",
          f"| a warm call of an existing tenant | {d['warm_ms']:.2f} ms | interleaved with "
          f"the above; median of paired differences {d['new_pair_ms']:+.2f} ms |",
          f"| a call right after one of its files changed | {d['changed_ms']:.2f} ms | "
          "workspace_write of one file (untimed) before it |",
          f"| an unchanged call of the same tenant | {d['same_ms']:.2f} ms | interleaved; "
          f"median of paired differences {d['changed_pair_ms']:+.2f} ms |",
          f"| {res['sessions']} sessions across {res['session_tenants']} tenants, each holding "
          f"a {res['df_bytes']:,}-byte DataFrame | {d['session_mib']:.2f} MiB a session | "
          f"tree PSS {mib(res['pss_all_kib']):.0f} -> {mib(res['pss_sessions_kib']):.0f} MiB, "
          f"{res['procs_all']} -> {res['procs_sessions']} processes |",
          f"| the same sessions open, before their first cell | {d['empty_mib']:.2f} MiB a "
          f"session | tree PSS {mib(res['pss_empty_kib']):.0f} MiB, {res['procs_empty']} "
          "processes |",
          "", "Published figures of peers (their claims, not measured here):", "",
          "| peer | published |", "|---|---|"]
    L += [f"| {p} | {c} |" for p, c in res["peers"]]
    L += ["", f"Against them: at the PSS measured above, {n} tenants of one server hold "
          f"{d['new_total_mib']:.0f} MiB, and a held session {d['session_mib']:.2f} MiB "
          f"(its {res['df_bytes']:,}-byte DataFrame included). On SIGTERM the server took "
          f"{res['stop_s']:.1f} s to stop (exit status {res['server_exit']}; -9: killed after "
          f"300 s) and left {res['stage_left']} entries in its staging folder. "
          f"Section time {res['elapsed_s']:.0f} s; load average {res['loadavg_start']:.1f} at "
          f"its start, {res['loadavg_end']:.1f} at its end, on {res['cores']} cores"
          + (": **the machine was busy with other work; the latencies are inflated and "
             "noisy, and their differences say little**." if max(res["loadavg_start"],
                                                                  res["loadavg_end"])
             > res["cores"] else ".")]
    return L


def targets(res):
    d = derived(res)
    n = res["tenants"]
    out = []
    if n >= 1000:
        out.append({"what": f"{n} tenants with a workspace of {res['files']} files each, one "
                            f"call each, one airlock serve --preload {res['preload']}: PSS of "
                            "the whole process tree <= 1.5 GiB (old design: a template each)",
                    "figure": f"{d['new_total_mib'] / 1024:.2f} GiB (old design "
                              f"{d['old_extrapolated_gib']:.1f} GiB, from "
                              f"{res['old']['servers']} templates)",
                    "verdict": "met" if d["new_total_mib"] <= 1.5 * 1024 else "missed"})
    else:
        out.append({"what": "1,000 tenants, one call each: PSS of the whole tree <= 1.5 GiB "
                            f"(extrapolated from {n} tenants in this quick run)",
                    "figure": f"{d['new_1000_gib']:.2f} GiB ({d['new_total_mib']:.0f} MiB for "
                              f"{n}; old design {d['old_1000_gib']:.1f} GiB)",
                    "verdict": "met" if d["new_1000_gib"] <= 1.5 else "missed"})
    out.append({"what": "a new tenant's first call (files already on disk) within 3 ms of a "
                        "warm call of an existing tenant (medians)",
                "figure": f"{d['new_ms']:.2f} ms vs {d['warm_ms']:.2f} ms "
                          f"({d['new_diff_ms']:+.2f} ms; paired {d['new_pair_ms']:+.2f} ms, "
                          f"{res['pairs']} pairs)",
                "verdict": "met" if d["new_diff_ms"] <= 3 else "missed"})
    out.append({"what": "a tenant's call after one of its files changed within 2 ms of an "
                        "unchanged call (medians)",
                "figure": f"{d['changed_ms']:.2f} ms vs {d['same_ms']:.2f} ms "
                          f"({d['changed_diff_ms']:+.2f} ms; paired "
                          f"{d['changed_pair_ms']:+.2f} ms, {res['pairs']} pairs)",
                "verdict": "met" if d["changed_diff_ms"] <= 2 else "missed"})
    out.append({"what": f"{res['sessions']} sessions across {res['session_tenants']} tenants, "
                        f"each holding a {res['df_bytes']:,}-byte DataFrame: PSS per session <= "
                        "3 MiB + the data it holds",
                "figure": f"{d['session_mib']:.2f} MiB (limit {d['session_limit_mib']:.2f} MiB)",
                "verdict": "met" if d["session_mib"] <= d["session_limit_mib"] else "missed"})
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench_tenants.py BUILD [--quick]")
    r = run(os.path.abspath(sys.argv[1]), "--quick" in sys.argv[2:],
            lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(r), file=sys.stderr)
    print("\n".join(report_lines(r)))
    print("\n".join(f"- {t['what']}: {t['figure']} -- **{t['verdict']}**" for t in targets(r)))
