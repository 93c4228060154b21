#!/usr/bin/python3
"""The cost of a run: the CPU one call costs, against the floor of a fork,
side by side in one run (issue 40's method).

  - the floor: /usr/bin/python3 after the same imports as the template and
    gc.freeze(), forking a child that exits at once (os.fork, os._exit(0),
    waitpid), the best of 3 rounds of 200; without preloads and with
    numpy,pandas preloaded;
  - airlock's CPU per call for print(1) without preloads, print(1) with
    numpy,pandas preloaded, and the pandas run with them preloaded: through
    the library (bench_runcost.c, one sandbox) and through `airlock mcp`;
  - the same code under `bwrap ... python3 -c` (a fresh process a call, as
    bwrap is used);
  - beside them, issue 40's other targets in the same run: print(1) back to
    back from one client (runs/s, through `airlock mcp` and the library,
    with the floor's own forks per second measured right before each), a
    warm call's latency through `airlock mcp` against a bwrap run's (print(1)
    and the preloaded pandas run, in interleaved rounds), the cold start of
    `airlock run -c 'print(1)'` against bwrap's (bench_cold.py, interleaved
    rounds), and the pages a ready copy has written since its fork;
  - what each call must cost on this machine, by the floor's interpreter in
    rounds timed in turn with airlock's calls (FLOORS, FloorsProc,
    interleaved()): a chunk of calls through the library and one through
    `airlock mcp`, the order alternating, then a round of the floors, so
    that the machine's speed of the moment, which moves by half within
    minutes on this kind of machine, weighs on all alike; airlock's CPU
    over what it must cost is the median of the rounds' own ratios. The
    floors of a round: the bare floor (os.fork, which runs
    CPython's after-fork work in the child as a copy does) and the bare
    fork from C (which runs none); floor (a), an os.fork that runs the code
    with its stdout captured and writes a result to a pipe, no isolation;
    floor (b), a fork from C that makes the isolation a copy makes, with the
    same calls (bench_runcost_iso.c); floor (c), what a call must cost:
    one fork as os.fork makes it whose child makes floor (b)'s isolation
    and runs the code as floor (a)'s does ((a) + (b) - the bare fork from C
    beside it, its parts); each timed back to back and paced as the calls
    are (a fork 20 ms after the last: what the calls are judged against,
    since a fork after a pause finds cold caches as a call does);
    and the bare floor again with as many anonymous pages as the template
    holds, beside both's page tables;
  - where one call's CPU goes, phase by phase, from `perf record`
    (runcost_phases.py), with the share of each;
  - issue 40's CPU targets judged against those floors: which no fork-based
    sandbox could meet on this machine, and proposed forms that can be
    judged here.

CPU per call is the CPU of the caller's whole process tree, read from a
cgroup of the measurement's own (cgroup v1 cpuacct or v2 cpu.stat), so that
the copies the server reaped, the template and every helper count: over N
calls 20 ms apart, minus what the same tree uses idle over as long. The
client that sends the calls is outside the cgroup. Each figure is then a
ratio to the floor measured in the same run.

Called by bench.py (`make bench`, and `bench.py BUILD --only runcost`);
alone: /usr/bin/python3 bench/bench_runcost.py BUILD [--quick]; with --written
instead, the pages a ready copy has written since its fork; with --b2b
instead (BUILD [BUILD...] --b2b [--quick]), print(1) back to back only, for
each build in interleaved rounds, beside the floors' runs/s. Needs root
(or a delegated cgroup) to make its cgroups. Standard library only.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_cold  # noqa: E402 - a sibling script: the cold start beside bwrap
import bench_loaded  # noqa: E402 - a sibling script: its MCP client and bwrap line
import runcost_phases  # noqa: E402 - a sibling module: the per-phase table from perf

PY = "/usr/bin/python3"
PRELOAD = "numpy,pandas"
PANDAS = bench_loaded.CODES["pandas"][0]
# (key, label, code, preloads): the calls measured.
CALLS = [
    ("print1", "print(1), no preload", "print(1)", None),
    ("print1_pre", "print(1), numpy,pandas preloaded", "print(1)", PRELOAD),
    ("pandas_pre", "the pandas run, numpy,pandas preloaded", PANDAS, PRELOAD),
]
GAP_S = 0.02
# Issue 40's targets, printed beside what each run measures.
TARGET_RPS = 500
TARGET_WARM_X = {"print1": 40, "pandas_pre": 100}
# How far apart the warm calls against bwrap are: a warm call is one that
# finds its copy ready. The pandas run costs about 40 ms of CPU a call, so
# 20 ms apart it asks for two CPUs, more than this kind of machine has to
# give: calls then queue behind the making of their copies and time the
# machine's throughput, not a warm call. 200 ms apart it asks for a fifth
# of a CPU, and an agent's calls come seconds apart.
WARM_GAP_S = {"print1": GAP_S, "pandas_pre": 0.2}
TARGET_COLD_X = 2.0
# Proposed: a warm call at most this much above the warm floor measured in
# the same rounds (warm_floor.py: the same client and code, a child forked
# ahead and warmed, no isolation). The ratio to bwrap is the floor's ratio
# to bwrap over this one, and bwrap's cold start moves with the machine
# apart from a warm call's few wake-ups.
TARGET_WARM_X_FLOOR = 1.25

# The floor: fork and exit of the template's interpreter after the same
# imports, timed by the cgroup it runs in (argv[1], its usage file).
FLOOR = r'''
import gc, os, sys
if sys.argv[2] != "-":
    for m in sys.argv[2].split(","):
        __import__(m)
gc.freeze()
usage_file, rounds, n = sys.argv[1], int(sys.argv[3]), int(sys.argv[4])
def usage():
    with open(usage_file) as f:
        text = f.read()
    if usage_file.endswith("cpu.stat"):
        return int(text.split("usage_usec")[1].split()[0]) * 1000
    return int(text)
import time
best = wall = None
for _ in range(rounds):
    u, w = usage(), time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    d, w = usage() - u, time.perf_counter() - w
    best = d if best is None else min(best, d)
    wall = w if wall is None else min(wall, w)
print(best / n / 1e6, n / wall)
'''


# The three floors of one call, in one interpreter after the same imports
# and gc.freeze(), in interleaved rounds (argv[1]: JSON arguments):
#   - bare: fork, os._exit(0), waitpid (the floor above);
#   - run, floor (a): the child compiles and executes the call's code with
#     its stdout captured, as the guest runtime minimally must, writes a
#     small JSON result to a pipe the parent reads, and exits; no isolation
#     (the parent ran the code once before gc.freeze(), as a warm template
#     has);
#   - iso, floor (b): the child makes the isolation a copy needs, the same
#     calls as airlock's copy (bench_runcost_iso.c), and exits;
# each timed back to back, and, with "gap" (seconds), paced as airlock's
# calls are timed: a sleep of gap before each fork, after which the fork
# and the run find the machine's caches and TLB as a call does;
# then, with "pad_to_anon_kib" above its own RssAnon, the bare floor again
# after the interpreter wrote as many more anonymous pages, so that it maps
# as many as the template: fork and exit cost follow the pages mapped.
FLOORS = r"""
import ctypes, gc, io, json, os, sys, time
a = json.loads(sys.argv[1])
for m in a["preload"]:
    __import__(m)
so = ctypes.CDLL(a["so"])
filt = open(a["filter"], "rb").read()
if so.iso_setup(filt, len(filt), *(p.encode() for p in a["cg"])) < 0:
    sys.exit("iso_setup failed")
code = a["code"]
# Run once in the parent first, as airlock's template warms itself with
# the run's code: a warm template is what any fork-based sandbox can have.
buf, sys.stdout = io.StringIO(), io.StringIO()
exec(compile(code, "<run>", "exec"), {"__name__": "__main__"})
sys.stdout = sys.__stdout__
gc.freeze()
def usage():
    with open(a["usage"]) as f:
        text = f.read()
    if a["usage"].endswith("cpu.stat"):
        return int(text.split("usage_usec")[1].split()[0]) * 1000
    return int(text)
def bare():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
def child_run(w):
    buf, ok = io.StringIO(), True
    sys.stdout = buf
    try:
        exec(compile(code, "<run>", "exec"), {"__name__": "__main__"})
    except BaseException:
        ok = False
    sys.stdout = sys.__stdout__
    os.write(w, json.dumps({"ok": ok, "stdout": buf.getvalue()}).encode())
    os._exit(0)
# Whether the child's code ran: its JSON result, read to the end.
def result(r, w):
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    return bool(data) and json.loads(data)["ok"]
def run():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child_run(w)
    ok = result(r, w)
    os.waitpid(pid, 0)
    if not ok:
        sys.exit("floor (a): the code failed in the child")
# Floor (c) forks as os.fork() does (the GIL held, CPython's before- and
# after-fork work), through iso_fork_keep, whose child comes back here with
# the isolation made and w kept (every other fd closed), then locks itself
# down and runs the code, as a copy does.
keep = ctypes.PyDLL(a["so"])
api = ctypes.pythonapi
def whole():
    r, w = os.pipe()
    api.PyOS_BeforeFork()
    pid = keep.iso_fork_keep(w)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        keep.iso_lock_down()
        child_run(w)
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        sys.exit(f"floor (c): iso_fork_keep: {os.strerror(-pid)}")
    ok = result(r, w)
    # A step of the isolation that failed ends the child before its code.
    st = so.iso_reap(pid)
    if st != 0:
        sys.exit(f"floor (c): the child failed at step {st}")
    if not ok:
        sys.exit("floor (c): the code failed in the child")
def bare_c():
    if so.bare_c_fork() < 0:
        sys.exit("the bare floor from C: clone3 failed")
def iso():
    pid = so.iso_fork()
    if pid < 0:
        sys.exit(f"floor (b): iso_fork: {os.strerror(-pid)}")
    st = so.iso_reap(pid)
    if st != 0:
        sys.exit(f"floor (b): the child failed at step {st}")
def tables():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("VmPTE", "RssAnon", "VmRSS"):
                out[k] = int(line.split()[1])
    return out
def best(fn, rounds, n, gap=0):
    b = None
    for _ in range(rounds):
        u = usage()
        for _ in range(n):
            if gap:
                time.sleep(gap)
            fn()
        d = (usage() - u) / n / 1e6
        b = d if b is None else min(b, d)
    return b
KINDS = (("bare", bare, a["n_bare"]), ("bare_c", bare_c, a["n_bare"]), ("run", run, a["n"]),
         ("iso", iso, a["n"]), ("whole", whole, a["n"]))
res = {k: [] for k, _, _ in KINDS}
res.update({"paced_" + k: [] for k, _, _ in KINDS} if a["gap"] else {})
res["tables"] = tables()
def one_round():
    for k, fn, n in KINDS:
        res[k].append(best(fn, 1, n))
    for k, fn, _ in KINDS if a["gap"] else ():
        res["paced_" + k].append(best(fn, 1, a["n"], a["gap"]))
if a["rounds"]:
    for _ in range(a["rounds"]):
        one_round()
else:
    # Driven: a round for each line read, answered by a line, until the
    # end of the input (FloorsProc).
    print("ready", flush=True)
    for line in sys.stdin:
        one_round()
        print("done", flush=True)
so.iso_teardown()
pad_kib = res["pad_kib"] = a["pad_to_anon_kib"] - res["tables"].get("RssAnon", 0)
if pad_kib > 0:
    pad = bytearray(b"\x01") * (pad_kib * 1024)
    for i in range(0, len(pad), 4096):
        pad[i] = 2
    res["padded_tables"] = tables()
    pr = sorted(best(bare, 1, a["n_bare"]) for _ in range(max(3, a["rounds"])))
    res["bare_padded"] = pr[len(pr) // 2]
print(json.dumps(res))
"""


class Cgroup:
    """A cgroup of the measurement's own, removed on exit: v1's cpuacct
    where it is mounted (a hybrid host), else v2's cpu.stat."""
    seq = 0

    def __init__(self):
        Cgroup.seq += 1
        name = f"airlock-runcost-{os.getpid()}-{Cgroup.seq}"
        if os.path.exists("/sys/fs/cgroup/cpuacct/cpuacct.usage"):
            base, self.file = "/sys/fs/cgroup/cpuacct", "cpuacct.usage"
        else:
            base, self.file = "/sys/fs/cgroup", "cpu.stat"
        with open("/proc/self/cgroup") as f:
            own = ""
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if (self.file == "cpuacct.usage" and "cpuacct" in ctrls.split(",")) or \
                        (self.file == "cpu.stat" and ctrls == ""):
                    own = path
        self.path = os.path.join(base + own, name)
        os.mkdir(self.path)
        self.usage_file = os.path.join(self.path, self.file)

    def usage_ms(self):
        with open(self.usage_file) as f:
            text = f.read()
        if self.file == "cpu.stat":
            return int(text.split("usage_usec")[1].split()[0]) / 1e3
        return int(text) / 1e6

    def enter(self):
        """For preexec_fn: the child joins before it execs anything."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def close(self):
        # airlock removes the cgroups it made under this one; wait for it.
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)


class Lib:
    """bench_runcost: the library, one sandbox, a run per line."""

    def __init__(self, build, code, preload, cg):
        self.p = subprocess.Popen([os.path.join(build, "bench_runcost"), preload or "-", code],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, preexec_fn=cg.enter)

    def call(self):
        self.p.stdin.write(b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().decode()
        if line != "ok\n":
            raise RuntimeError(f"bench_runcost: {line.strip() or self.p.stderr.read()[-300:]}")

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


class Mcp(bench_loaded.Mcp):
    """`airlock mcp`, started in the cgroup; with argv, another MCP server on
    stdio (WarmFloor)."""

    def __init__(self, build, code, preload, cg, argv=None):
        self.code = code
        argv = argv or [os.path.join(build, "airlock"), "mcp"] + (["--preload", preload]
                                                                  if preload else [])
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, preexec_fn=cg.enter)
        self.ids = iter(range(1, 1 << 30))
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "airlock-bench", "version": "1"}})
        self.rpc("notifications/initialized", {}, notify=True)

    def call(self):
        r = self.rpc("tools/call", {"name": "execute_code", "arguments": {"code": self.code}})
        if r.get("isError"):
            raise RuntimeError(f"airlock mcp: {str(r)[:300]}")


class WarmFloor(Mcp):
    """A warm call's floor (warm_floor.py): the same client and code, an MCP
    server with no isolation whose child is forked ahead and warmed by two
    passes of the call's own code; in the cgroup."""

    def __init__(self, code, preload, cg):
        super().__init__(None, code, preload, cg, bench_loaded.warm_floor_argv(code, preload))


def timed_calls(t, n, gap_s):
    """The wall time, ms, of n calls of t (Lib, Mcp or WarmFloor), gap_s
    apart."""
    lat = []
    for _ in range(n):
        time.sleep(gap_s)
        c0 = time.perf_counter()
        t.call()
        lat.append((time.perf_counter() - c0) * 1e3)
    return lat


def idle_rate(cg, seconds):
    """The tree's CPU ms per second while no call is made."""
    u0, w0 = cg.usage_ms(), time.perf_counter()
    time.sleep(seconds)
    return (cg.usage_ms() - u0) / (time.perf_counter() - w0)


class CpuMeter:
    """The CPU per call of the tree of kind (Lib or Mcp), minus its idle
    use, over calls made a chunk at a time (chunk()), so that other
    measurements can come between the chunks; result() gives the CPU ms a
    call over all chunks, the idle use taken off, and each chunk's own."""

    def __init__(self, kind, build, code, preload):
        self.kind, self.cg, self.t = kind, Cgroup(), None
        try:
            self.t = kind(build, code, preload, self.cg)
        except BaseException:
            self.cg.close()
            raise
        self.chunks, self.lat, self.idle, self.tables = [], [], [], None

    def start(self, idle_s):
        for _ in range(5):  # untimed: the first copies, the imports' pages
            self.t.call()
        # The template warms itself up and learns a copy's pages after its
        # first runs: not idle use, and over before the calls are timed.
        time.sleep(1.0)
        self.tables = template_tables(self.t.p.pid) if self.kind is Lib else None
        self.idle.append(idle_rate(self.cg, idle_s))

    def chunk(self, n):
        """n calls GAP_S apart, and the work they leave (the last copy's
        exit, its successor's making) until GAP_S after the last."""
        u0, w0 = self.cg.usage_ms(), time.perf_counter()
        self.lat += timed_calls(self.t, n, GAP_S)
        time.sleep(GAP_S)
        self.chunks.append((self.cg.usage_ms() - u0, time.perf_counter() - w0, n))

    def result(self, idle_s):
        self.idle.append(idle_rate(self.cg, idle_s))
        # Idle use measured before and after: the smaller (a neighbour's
        # burst on a shared machine only adds).
        rate = min(self.idle)
        used, wall, n = (sum(c[i] for c in self.chunks) for i in range(3))
        return {"cpu_ms": (used - rate * wall) / n, "idle_cpus": rate / 1e3,
                "idle_cpus_seen": [r / 1e3 for r in self.idle], "calls": n,
                "chunk_cpu_ms": [(u - rate * w) / k for u, w, k in self.chunks],
                "median_ms": median(self.lat), "template": self.tables}

    def close(self):
        if self.t:
            self.t.close()
        self.cg.close()


def median(samples):
    s = sorted(samples)
    return s[len(s) // 2] if s else None


def idle_cpu_s():
    """The machine's idle and iowait CPU seconds so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def back_to_back(kind, build, n):
    """print(1) calls one after the other from one client (kind: Lib or
    Mcp), after 5 untimed ones and the template's warm-up: runs per second,
    and over the same calls the CPU ms a call of the tree (its cgroup), the
    CPUs the tree used and the CPUs the machine left idle. Where the
    machine has no idle CPU the rate is the CPU the tree got over its CPU a
    call: on a shared machine, the other load's share, not the calls'
    critical path."""
    cg = Cgroup()
    t = None
    try:
        t = kind(build, "print(1)", None, cg)
        for _ in range(5):
            t.call()
        time.sleep(1.0)
        i0, u0, w0 = idle_cpu_s(), cg.usage_ms(), time.perf_counter()
        for _ in range(n):
            t.call()
        wall = time.perf_counter() - w0
        used = cg.usage_ms() - u0
        return {"rps": n / wall, "cpu_ms": used / n, "tree_cpus": used / 1e3 / wall,
                "idle_cpus": (idle_cpu_s() - i0) / wall, "loadavg": os.getloadavg()[0]}
    finally:
        if t:
            t.close()
        cg.close()


def warm_vs_bwrap(build, code, preload, rounds, gap_s, warm_calls=5):
    """A warm call through `airlock mcp`, the same call through the warm
    floor (WarmFloor), and a `bwrap ... python3 -c` run of the same code,
    timed in interleaved rounds (as the cold start is, bench_cold.py), so
    that all three see the same moments of a shared machine: each round runs
    bwrap once (its CPU from a cgroup of its own, its wall time), then
    warm_calls calls gap_s apart of airlock and of the floor, in turns that
    alternate which goes first. Returns bwrap's CPU ms (mean), the medians
    of bwrap's wall time, of airlock's warm calls and of the floor's, and
    the medians of the rounds' ratios: bwrap's wall time over the round's
    median warm call (ratio), the warm call over the floor's (floor_x), and
    bwrap's over the floor's (bwrap_floor_x)."""
    srv_cg, bw_cg, fl_cg = Cgroup(), Cgroup(), Cgroup()
    m = f = None
    try:
        m = Mcp(build, code, preload, srv_cg)
        f = WarmFloor(code, preload, fl_cg)
        for _ in range(5):
            m.call()
            f.call()
        time.sleep(1.0)
        bw, warm, floor, ratios, floor_x, bwrap_floor_x = [], [], [], [], [], []

        u0 = bw_cg.usage_ms()
        for i in range(rounds):
            w0 = time.perf_counter()
            p = subprocess.run(bench_loaded.BWRAP + [PY, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120,
                               preexec_fn=bw_cg.enter)
            bw.append((time.perf_counter() - w0) * 1e3)
            if p.returncode != 0:
                raise RuntimeError(f"bwrap exited {p.returncode}: {p.stderr.decode()[:300]}")
            if i % 2:
                fl_lat = timed_calls(f, warm_calls, gap_s)
                lat = timed_calls(m, warm_calls, gap_s)
            else:
                lat = timed_calls(m, warm_calls, gap_s)
                fl_lat = timed_calls(f, warm_calls, gap_s)
            warm += lat
            floor += fl_lat
            ratios.append(bw[-1] / median(lat))
            floor_x.append(median(lat) / median(fl_lat))
            bwrap_floor_x.append(bw[-1] / median(fl_lat))
            time.sleep(gap_s)
        return {"bwrap_ms": (bw_cg.usage_ms() - u0) / rounds, "bwrap_wall_ms": median(bw),
                "warm_ms": median(warm), "floor_ms": median(floor), "ratio": median(ratios),
                "floor_x": median(floor_x), "bwrap_floor_x": median(bwrap_floor_x),
                "rounds": rounds, "gap_ms": gap_s * 1e3}
    finally:
        for t in (m, f):
            if t:
                t.close()
        for cg in (srv_cg, bw_cg, fl_cg):
            cg.close()


def floor_cost(preload, rounds=3, n=200):
    """The floor's CPU ms per fork and exit, the best of rounds."""
    return floor_run(preload, rounds, n)[0]


def floor_run(preload, rounds=3, n=200):
    """(CPU ms per fork and exit, forks per second of wall time), each the
    best of rounds of n."""
    cg = Cgroup()
    try:
        p = subprocess.run([PY, "-c", FLOOR, cg.usage_file, preload or "-", str(rounds), str(n)],
                           capture_output=True, text=True, timeout=600, preexec_fn=cg.enter)
        if p.returncode != 0:
            raise RuntimeError(f"the floor's python3 failed: {p.stderr[-300:]}")
        cpu, rate = p.stdout.split()
        return float(cpu), float(rate)
    finally:
        cg.close()


def iso_cgroups(cg):
    """Where floor (b) makes its copies' cgroups, for iso_setup: v1's
    memory and pids hierarchies beside cg and cpuacct below it (so that cg
    counts their CPU), or v2's one directory below cg."""
    if cg.file != "cpuacct.usage":
        return [os.path.join(cg.path, "iso"), "", ""]
    name = os.path.basename(cg.path)
    return [f"/sys/fs/cgroup/memory/{name}", f"/sys/fs/cgroup/pids/{name}",
            os.path.join(cg.path, "iso")]


def floors_args(build, code, preload, quick, cg, iso_cg, pad_to_anon_kib, rounds, gap_s=0):
    return {"preload": preload.split(",") if preload else [], "code": code, "gap": gap_s,
            "so": os.path.join(build, "bench_runcost_iso.so"),
            "filter": os.path.join(build, "bench_runcost.filter"), "cg": iso_cg,
            "usage": cg.usage_file, "rounds": rounds, "n": 10 if quick else 30,
            "n_bare": 40 if quick else 100, "pad_to_anon_kib": pad_to_anon_kib}


def floors_result(r):
    """The medians of the floors' rounds, and what a call must cost in each
    round and their median: floor (c), one fork that does all a call must
    (its parts, (a) + (b) - the bare fork from C, beside it as a check); of
    the paced floors where the rounds timed them (FLOORS' gap), since
    airlock's calls are timed as far apart; back to back always in
    must_b2b_ms and bare_b2b_ms."""
    kinds = ("bare", "bare_c", "run", "iso", "whole")
    r["must_b2b_ms"] = median(r["whole"])
    r["bare_b2b_ms"] = median(r["bare"])
    if r.get("paced_bare"):
        # A fork 20 ms after the last one costs more than the next of a
        # burst: the run and the isolation find cold caches and TLB, as
        # airlock's calls do (docs/performance.md, "What a call must cost
        # here").
        for k in kinds:
            r[k] = r.pop("paced_" + k)
    for k in kinds:
        r[k + "_ms"] = median(r[k])
    r["must_rounds"] = r["whole"]
    r["must_ms"] = r["whole_ms"]
    # Floor (a) forks with os.fork(), so it holds CPython's after-fork
    # work (PyOS_AfterFork_Child and the modules' at-fork handlers),
    # which a copy runs too; floor (b) forks from C. The fork is counted
    # once by taking off the bare fork from C, so that the after-fork
    # work stays in. From each round's own figures, so that a moment of
    # the shared machine weighs on all three alike.
    r["parts_ms"] = median([a + b - c for a, b, c in zip(r["run"], r["iso"], r["bare_c"])])
    r["atfork_ms"] = median([a - c for a, c in zip(r["bare"], r["bare_c"])])
    return r


def remove_iso_cgroups(iso_cg):
    # iso_teardown's work, where the floors' python3 failed before it.
    for d in iso_cg:
        if d and os.path.isdir(d):
            try:
                os.rmdir(d)
            except OSError:
                pass


def floors(build, code, preload, quick, pad_to_anon_kib=0):
    """The bare floor, floor (a) and floor (b) of one call (FLOORS), CPU ms
    per fork of each (the medians of interleaved rounds), the
    floor's page tables, and the bare floor again with as many anonymous
    pages as pad_to_anon_kib (the template's RssAnon)."""
    cg = Cgroup()
    iso_cg = iso_cgroups(cg)
    args = floors_args(build, code, preload, quick, cg, iso_cg, pad_to_anon_kib,
                       5 if quick else 9)
    try:
        p = subprocess.run([PY, "-c", FLOORS, json.dumps(args)], capture_output=True, text=True,
                           timeout=900, preexec_fn=cg.enter)
        if p.returncode != 0:
            raise RuntimeError(f"the floors' python3 failed: {p.stderr[-300:]}")
        return floors_result(json.loads(p.stdout))
    finally:
        remove_iso_cgroups(iso_cg)
        cg.close()


class FloorsProc:
    """The floors of one call, a round at a time (round()), in one
    interpreter kept between the rounds, so that they can be timed in turn
    with airlock's own calls; finish() gives what floors() gives."""

    def __init__(self, build, code, preload, quick, pad_to_anon_kib=0):
        self.cg = Cgroup()
        self.iso_cg = iso_cgroups(self.cg)
        args = floors_args(build, code, preload, quick, self.cg, self.iso_cg, pad_to_anon_kib, 0,
                           GAP_S)
        self.p = subprocess.Popen([PY, "-c", FLOORS, json.dumps(args)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=self.cg.enter)
        self.expect("ready")

    def expect(self, word):
        line = self.p.stdout.readline().strip()
        if line != word:
            self.p.kill()
            raise RuntimeError(f"the floors' python3 failed: {self.p.stderr.read()[-300:]}")

    def round(self):
        self.p.stdin.write("round\n")
        self.p.stdin.flush()
        self.expect("done")

    def finish(self):
        try:
            out, err = self.p.communicate(timeout=900)
            if self.p.returncode != 0:
                raise RuntimeError(f"the floors' python3 failed: {err[-300:]}")
            return floors_result(json.loads(out))
        finally:
            remove_iso_cgroups(self.iso_cg)
            self.cg.close()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        remove_iso_cgroups(self.iso_cg)
        self.cg.close()


def template_tables(driver_pid):
    """The page tables of the template that driver_pid (a bench_runcost)
    started: its VmPTE, RssAnon and VmRSS (KiB). The template is the
    driver's child that is not a copy (pid 1 of a PID namespace of its
    own) and has the most resident memory."""
    best = None
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                st = f.read()
        except OSError:
            continue
        fields = dict((line.split(":")[0], line.split(":", 1)[1].split())
                      for line in st.splitlines() if ":" in line)
        if int(fields["PPid"][0]) != driver_pid or fields.get("NSpid", ["0"])[-1] == "1":
            continue
        t = {k: int(fields[k][0]) for k in ("VmPTE", "RssAnon", "VmRSS") if k in fields}
        if t and (best is None or t.get("VmRSS", 0) > best.get("VmRSS", 0)):
            best = t
    return best or {}


def build_driver(build):
    libs = subprocess.run(["pkg-config", "--libs", "libseccomp", "jansson"],
                          capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(HERE, "..",
                                                                                "include"),
                    "-I" + os.path.join(HERE, "..", "src", "lib"),
                    "-o", os.path.join(build, "bench_runcost"),
                    os.path.join(HERE, "bench_runcost.c"), os.path.join(build, "libairlock.a"),
                    *libs, "-lpthread"], check=True)
    # Floor (b): the isolation alone, loaded by the floor's interpreter.
    subprocess.run(["cc", "-O2", "-std=gnu11", "-shared", "-fPIC", "-o",
                    os.path.join(build, "bench_runcost_iso.so"),
                    os.path.join(HERE, "bench_runcost_iso.c")], check=True)
    subprocess.run([os.path.join(build, "bench_runcost"), "--filter",
                    os.path.join(build, "bench_runcost.filter")], check=True)


def interleaved(build, code, preload, n, idle_s, quick):
    """The CPU per call of code through the library and `airlock mcp`, and
    its floors (FloorsProc), in rounds: a chunk of calls of each, in turn,
    then a round of the floors, so that the machine's speed of the moment
    weighs on all alike. Each chunk's CPU per call over its round's
    must-cost gives x_must_rounds, and x_must is their median."""
    rounds = 5 if quick else 9
    meters, fp = {}, None
    try:
        for name, kind in (("library", Lib), ("mcp", Mcp)):
            meters[name] = CpuMeter(kind, build, code, preload)
            meters[name].start(idle_s)
        tt = meters["library"].tables or {}
        fp = FloorsProc(build, code, preload, quick, tt.get("RssAnon", 0))
        names = list(meters)
        for i in range(rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                meters[name].chunk(max(1, n // rounds))
            fp.round()
        out = {name: m.result(idle_s) for name, m in meters.items()}
        out["floors"], fp = fp.finish(), None
    finally:
        if fp:
            fp.close()
        for m in meters.values():
            m.close()
    musts = out["floors"]["must_rounds"]
    for name in meters:
        xs = [c / m for c, m in zip(out[name]["chunk_cpu_ms"], musts)]
        out[name]["x_must_rounds"], out[name]["x_must"] = xs, median(xs)
    return out


def run(build, quick, log=lambda m: None):
    n = 40 if quick else 150
    n_bwrap = 3 if quick else 10
    idle_s = 0.5 if quick else 1.0
    build_driver(build)
    res = {"calls": n, "gap_ms": GAP_S * 1e3, "loadavg_start": os.getloadavg(),
           "cores": os.cpu_count()}
    log(f"- cost of a run: CPU per call ({n} calls {GAP_S * 1e3:.0f} ms apart) against the "
        "floor of a fork")
    res["floor"] = {"none": floor_cost(None), "preload": floor_cost(PRELOAD)}
    have_bwrap = subprocess.run(["sh", "-c", "command -v bwrap"],
                                stdout=subprocess.DEVNULL).returncode == 0
    log("  with the floors of each call, (a) fork and the run, (b) fork and the isolation, "
        "(c) fork, isolation and run, "
        "timed in turn with its calls")
    res["floors"] = {}
    for key, _, code, preload in CALLS:
        r = res[key] = interleaved(build, code, preload, n, idle_s, quick)
        res["floors"][key] = r.pop("floors")
        for name in ("library", "mcp"):
            r[name]["ratio"] = r[name]["cpu_ms"] / res["floor"]["preload" if preload else "none"]
        if have_bwrap and key != "print1_pre":
            r["warm_vs_bwrap"] = warm_vs_bwrap(build, code, preload, n_bwrap, WARM_GAP_S[key])
            r["bwrap_ms"] = r["warm_vs_bwrap"]["bwrap_ms"]
            r["bwrap_wall_ms"] = r["warm_vs_bwrap"]["bwrap_wall_ms"]
    res["print1_pre"]["bwrap_ms"] = res["print1"].get("bwrap_ms")
    log("- where one copy's CPU goes, by phase (perf)")
    res["phases"] = {}
    for key, _, code, preload in CALLS:
        if key != "print1_pre":
            res["phases"][key] = runcost_phases.measure(Lib, Cgroup, build, code, preload,
                                                        n, GAP_S)
    log("- back to back: print(1) from one client, beside the floor's own forks per second")
    n_b2b = 100 if quick else 400
    res["b2b_rps"], res["b2b_floor_forks_s"], res["b2b"] = {}, {}, {}
    for name, kind in (("library", Lib), ("mcp", Mcp)):
        # The floor's rate right before, so that both see the same load.
        res["b2b_floor_forks_s"][name] = floor_run(None, 2, 100)[1]
        res["b2b"][name] = back_to_back(kind, build, n_b2b)
        res["b2b_rps"][name] = res["b2b"][name]["rps"]
    log("- pages a ready copy has written since its fork")
    res["written_pages"] = {"none": ready_copy_written(build, None),
                            "preload": ready_copy_written(build, PRELOAD)}
    if have_bwrap:
        res["cold"] = bench_cold.run(build, quick, log)
    res["loadavg_end"] = os.getloadavg()
    return res


def fmt(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"


def side_by_side(res):
    """Issue 40's targets beside what this run measured: (what, measured,
    target, met)."""
    rows = []
    for key, label, _, preload in CALLS:
        limit = 2.0 if preload else 2.5
        for name in ("library", "mcp"):
            r = res[key][name]
            rows.append((f"CPU per call, {label}, {name} / floor",
                         f"{r['ratio']:.1f}x ({r['cpu_ms']:.2f} ms)", f"<= {limit}x",
                         r["ratio"] <= limit))
    # The bare floor's own rate, measured right before each, is printed
    # beside; the proposed target is against the floors' runs per second
    # on all cores (proposals).
    for name, rps in res.get("b2b_rps", {}).items():
        fork_rate = res["b2b_floor_forks_s"][name]
        rows.append((f"print(1) back to back from one client, {name}",
                     f"{rps:.0f} runs/s (the floor: {fork_rate:.0f} forks/s)",
                     f">= {TARGET_RPS} runs/s", rps >= TARGET_RPS))
    for key, x in TARGET_WARM_X.items():
        r, label = res[key], dict((k, lb) for k, lb, _, _ in CALLS)[key]
        wb = r.get("warm_vs_bwrap")
        if wb:
            rows.append((f"warm call through `airlock mcp` against bwrap, {label} "
                         f"({wb['rounds']} interleaved rounds, calls {wb['gap_ms']:.0f} ms apart)",
                         f"{wb['ratio']:.1f}x ({wb['warm_ms']:.2f} ms vs {wb['bwrap_wall_ms']:.1f} ms)",
                         f">= {x}x", wb["ratio"] >= x))
            rows.append((f"the warm floor (warm_floor.py, no isolation) against bwrap, {label}, "
                         f"where issue 40 asks >= {x}x of airlock",
                         f"{wb['bwrap_floor_x']:.1f}x ({wb['floor_ms']:.2f} ms)", f">= {x}x",
                         True if wb["bwrap_floor_x"] >= x else BEYOND))
            rows.append((f"warm call through `airlock mcp` against the warm floor, {label} "
                         "(proposed)", f"{wb['floor_x']:.2f}x", f"<= {TARGET_WARM_X_FLOOR}x",
                         wb["floor_x"] <= TARGET_WARM_X_FLOOR))
    rows += proposals(res)
    cold = res.get("cold")
    if cold:
        c, b = cold["airlock-run"]["median_ms"], cold["bwrap"]["median_ms"]
        rows.append(("cold start, `airlock run -c 'print(1)'` / `bwrap ... python3 -c`",
                     f"{c / b:.2f}x ({c:.1f} ms vs {b:.1f} ms)", f"<= {TARGET_COLD_X}x",
                     c <= TARGET_COLD_X * b))
    return rows


# Proposed: CPU per call at most this much above what a call must cost on
# the machine it runs on, floor (c): one fork with CPython's after-fork
# work, the isolation and the run.
TARGET_X_MUST = 1.25
# Proposed: what airlock spends outside the run itself (the phase table)
# at most this much above floor (b), a fork that makes the same isolation,
# plus CPython's after-fork work (the bare floor less the bare fork from
# C), which a copy runs as any fork of an interpreter that goes on running
# Python must.
TARGET_OWN_X_ISO = 1.5
# The CPUs one CPU-bound loop per core leaves the sandbox (issue 40's
# premise of its busy-machine target), and the spacing of its calls.
LOADED_SHARE_CPUS = 0.6
LOADED_GAP_MS = 10.0
BEYOND = "beyond the floor here"


def x_must(res, key, name):
    """airlock's CPU per call over what it must cost: the median of the
    interleaved rounds' own ratios (interleaved)."""
    return res[key][name]["x_must"]


def proposals(res):
    """Issue 40's CPU targets judged against what a call must cost here
    (res["floors"]): (what, measured, target, met), where met is True,
    False or BEYOND (the floors themselves miss it: no fork-based sandbox
    could meet it on this machine)."""
    fl = res.get("floors")
    if not fl:
        return []
    rows = []
    for key, label, _, preload in CALLS:
        f = fl[key]
        must, bare = f["must_ms"], f["bare_ms"]
        limit = 2.0 if preload else 2.5
        rows.append((f"floor (c) of {label}, what it must cost, against the bare floor, where "
                     f"issue 40 asks <= {limit}x of airlock",
                     f"{must / bare:.1f}x ({must:.2f} ms vs {bare:.2f} ms)", f"<= {limit}x",
                     True if must / bare <= limit else BEYOND))
        for name in ("library", "mcp"):
            cpu, x = res[key][name]["cpu_ms"], x_must(res, key, name)
            rows.append((f"CPU per call, {label}, {name} / floor (c), what it must cost "
                         "(proposed; the median of the rounds' own)",
                         f"{x:.2f}x ({cpu:.2f} ms vs {must:.2f} ms)",
                         f"<= {TARGET_X_MUST}x", x <= TARGET_X_MUST))
    for key, label, _, _ in CALLS:
        ph = (res.get("phases") or {}).get(key)
        if not ph or "skipped" in ph:
            continue
        run_ms = sum(r[1] for r in ph["rows"] if r[0] in runcost_phases.THE_RUN)
        # perf's own sampling is counted in the calls it samples (its
        # total runs 10 to 50 % above the same calls' cost without it),
        # while the floors run without it: the share of airlock's own
        # work, of what the calls cost without perf.
        own = (1 - run_ms / ph["tree_ms"]) * res[key]["library"]["cpu_ms"]
        iso = fl[key]["iso_ms"] + fl[key]["atfork_ms"]
        rows.append((f"{label}: airlock's own CPU (the share of all but the run's phases, perf, "
                     "of the library's CPU per call) / floor (b) "
                     "and CPython's after-fork work, fork and the isolation (proposed)",
                     f"{own / iso:.2f}x ({own:.2f} ms vs {iso:.2f} ms)",
                     f"<= {TARGET_OWN_X_ISO}x", own / iso <= TARGET_OWN_X_ISO))
    budget = LOADED_SHARE_CPUS * LOADED_GAP_MS
    for key in ("print1", "pandas_pre"):
        label = dict((k, lb) for k, lb, _, _ in CALLS)[key]
        cpu, must = res[key]["mcp"]["cpu_ms"], fl[key]["must_ms"]
        rows.append((f"busy machine, {label}, calls {LOADED_GAP_MS:.0f} ms apart: CPUs they ask "
                     f"for, airlock mcp / the floors (the load leaves about "
                     f"{LOADED_SHARE_CPUS} of {res['cores']})",
                     f"{cpu / LOADED_GAP_MS:.2f} / {must / LOADED_GAP_MS:.2f} CPUs",
                     f"<= {LOADED_SHARE_CPUS} CPUs (<= {budget:.0f} ms a call)",
                     True if cpu <= budget else (BEYOND if must > budget else False)))
        rows.append((f"busy machine, {label} (proposed instead): calls spaced by what the "
                     "load leaves, at least the floors' cost / "
                     f"{LOADED_SHARE_CPUS} CPUs apart (bench_loaded.py's paced rows)",
                     f"{must / LOADED_SHARE_CPUS:.0f} ms apart", "median <= 2.5x idle", None))
    # Back to back, against the floors timed back to back.
    must = fl["print1"]["must_b2b_ms"]
    cap = res["cores"] * 1000 / must
    rows.append(("print(1) back to back: the most the floors allow on all cores, "
                 "cores x 1000 / floor (c) back to back",
                 f"{cap:.0f} runs/s", f">= {TARGET_RPS} runs/s",
                 True if cap >= TARGET_RPS else BEYOND))
    for name, rps in res.get("b2b_rps", {}).items():
        b = (res.get("b2b") or {}).get(name)
        seen = (f" ({b['cpu_ms']:.2f} ms of CPU a call; the tree used {b['tree_cpus']:.2f} "
                f"CPUs, the machine left {b['idle_cpus']:.2f} idle)" if b else "")
        rows.append((f"print(1) back to back, {name} / the floors' runs/s on all cores "
                     "(proposed)", f"{rps / cap:.2f}x{seen}", ">= 0.5x", rps / cap >= 0.5))
    return rows


def verdict(met):
    return {True: "met", False: "not met", BEYOND: "not met: " + BEYOND,
            None: "to judge with bench_loaded.py"}[met]


def floors_lines(res):
    """What each call must cost here, beside what airlock's costs."""
    fl = res.get("floors")
    if not fl:
        return []
    L = ["", "What a call must cost on this machine, measured in the same run by the floor's "
         "interpreter (the same imports, `gc.freeze()`), CPU ms a fork, the median of "
         "interleaved rounds (what it must cost: the median of each round's own), each round "
         "timed right after a chunk of airlock's calls through the library and mcp (so that "
         "airlock / must is the median of each round's own ratio): the bare floor (`os.fork()`, `os._exit`, `waitpid`), "
         "which runs CPython's after-fork work in the child as a copy does; the bare fork "
         "from C (`clone3`, `_exit`, `waitpid`, through ctypes), which runs none; floor (a), `os.fork()` "
         "and the run: the child compiles and runs the code with its stdout captured and "
         "writes a small JSON result to a pipe, no isolation; floor (b), fork and the "
         "isolation: the child makes the cgroup, namespaces, mounts, `/proc` covers, rlimits, "
         "Landlock scope and airlock's own seccomp filter that a copy makes, with the same "
         "calls, forked from C, and exits (`bench/bench_runcost_iso.c`); floor (c), what a "
         "call must cost: one fork as `os.fork()` makes it (CPython's work before and after "
         "it), whose child makes floor (b)'s isolation, locks itself down and runs the code as "
         "floor (a)'s does. (a) + (b) - the bare fork from C is (c) from its parts, a check. "
         f"Each floor forks {res['gap_ms']:.0f} ms after the last, as airlock's calls come (a "
         "fork after a pause finds the caches and TLB cold, as a call does); (c) back to back "
         "is what the back-to-back rows are judged against.", "",
         "| call | bare | bare from C | (a) fork + run | (b) fork + isolation "
         "| (a) + (b) - bare from C | must: (c) fork, isolation and run | (c) back to back "
         "| airlock library | library / must | airlock mcp | mcp / must |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, label, _, _ in CALLS:
        f, r = fl[key], res[key]
        L.append(f"| {label} | {f['bare_ms']:.2f} | {f['bare_c_ms']:.2f} | {f['run_ms']:.2f} | "
                 f"{f['iso_ms']:.2f} | {f['parts_ms']:.2f} | "
                 f"{f['must_ms']:.2f} | {f['must_b2b_ms']:.2f} | {r['library']['cpu_ms']:.2f} | "
                 f"{x_must(res, key, 'library'):.2f}x | {r['mcp']['cpu_ms']:.2f} | "
                 f"{x_must(res, key, 'mcp'):.2f}x |")
    L += ["", "Fork and exit cost follow the page tables: the template's against the floor's "
              "interpreter (`/proc/PID/status`, KiB), and the bare floor again after the floor "
              "wrote as many anonymous pages as the template holds:", "",
          "| call | template VmPTE / RssAnon | floor VmPTE / RssAnon | bare floor | "
          "bare floor at the template's RssAnon |", "|---|---:|---:|---:|---:|"]
    for key, label, _, _ in CALLS:
        f, tt = fl[key], res[key]["library"].get("template") or {}
        ft = f.get("padded_tables") or f["tables"]
        L.append(f"| {label} | {tt.get('VmPTE', '-')} / {tt.get('RssAnon', '-')} | "
                 f"{f['tables'].get('VmPTE')} / {f['tables'].get('RssAnon')} | "
                 f"{f['bare_b2b_ms']:.2f} ms | "
                 + (f"{f['bare_padded']:.2f} ms ({ft.get('VmPTE')} / {ft.get('RssAnon')})"
                    if f.get("bare_padded") is not None else "- (the template holds fewer)")
                 + " |")
    return L


def phases_lines(res):
    """The per-phase table of one copy's CPU (runcost_phases.py)."""
    ph = res.get("phases")
    if not ph:
        return []
    keys = [k for k in ("print1", "pandas_pre") if k in ph]
    skipped = [f"{k}: {ph[k]['skipped']}" for k in keys if "skipped" in ph[k]]
    keys = [k for k in keys if "skipped" not in ph[k]]
    L = ["", "Where one call's CPU goes, by phase (`perf record -a -g`, cpu-clock every "
         f"{runcost_phases.PERIOD_NS // 1000} us, library driver, calls {res['gap_ms']:.0f} ms "
         "apart; bench/runcost_phases.py says how a sample is given to a phase): ms of CPU "
         "per call and share of the driver's tree (the host, its template, its copies; the "
         "teardown also in kernel workers)."] + [f"Skipped: {x}" for x in skipped]
    if not keys:
        return L
    labels = dict((k, lb) for k, lb, _, _ in CALLS)
    L += ["", "| phase | " + " | ".join(f"{labels[k]} ms | share" for k in keys) + " |",
          "|---|" + "---:|---:|" * len(keys)]
    phases = []
    for k in keys:
        phases += [row[0] for row in ph[k]["rows"] if row[0] not in phases]
    for phase in phases:
        cells = []
        for k in keys:
            ms, share = next(((r[1], r[2]) for r in ph[k]["rows"] if r[0] == phase), (0, 0))
            cells.append(f"{ms:.2f} | {share * 100:.1f} %")
        L.append(f"| {phase} | " + " | ".join(cells) + " |")
    L.append("| total (perf) / the tree's cgroup over the same calls | " + " | ".join(
        f"{ph[k]['tree_ms']:.2f} / {ph[k]['cgroup_ms']:.2f} | 100 %" for k in keys) + " |")
    L += ["", "perf's own sampling is counted in the calls it samples: the same calls cost "
              + ", ".join(f"{res[k]['library']['cpu_ms']:.2f} ms ({labels[k]})" for k in keys)
              + " without it, above. The shares are what to read."]
    return L


def report_lines(res):
    fl = res["floor"]
    la = lambda t: ", ".join(f"{x:.2f}" for x in t)  # noqa: E731
    L = ["## 11. the cost of a run: CPU per call against the floor of a fork", "",
         f"CPU of the caller's whole process tree (a cgroup of the measurement's own, so that "
         f"reaped copies count) over {res['calls']} calls {res['gap_ms']:.0f} ms apart, minus its "
         "idle use; the floor is `/usr/bin/python3` after the same imports and `gc.freeze()` "
         "forking a child that exits at once (best of 3 rounds of 200); bwrap is "
         "`bwrap ... python3 -c CODE`, a fresh process a call. "
         f"Load average at the start {la(res['loadavg_start'])}, at the end "
         f"{la(res['loadavg_end'])} ({res['cores']} cores). "
         "`bench/bench_runcost.py BUILD [--quick]`.", "",
         f"Floor: {fl['none']:.3f} ms without preloads, {fl['preload']:.3f} ms with "
         f"{PRELOAD} preloaded.", "",
         "| call | floor ms | library ms | library / floor | `airlock mcp` ms | mcp / floor "
         "| bwrap ms | bwrap / mcp | mcp median ms | bwrap median ms |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, label, _, preload in CALLS:
        r = res[key]
        f = fl["preload" if preload else "none"]
        bw = r.get("bwrap_ms")
        L.append(f"| {label} | {f:.3f} | {r['library']['cpu_ms']:.2f} | "
                 f"{r['library']['ratio']:.1f}x | {r['mcp']['cpu_ms']:.2f} | "
                 f"{r['mcp']['ratio']:.1f}x | {fmt(bw, 1)} | "
                 f"{fmt(bw / r['mcp']['cpu_ms'] if bw else None, 1)}x | "
                 f"{fmt(r['mcp'].get('median_ms'))} | {fmt(r.get('bwrap_wall_ms'), 1)} |")
    wp = res.get("written_pages")
    if wp:
        L += ["", "Pages a ready copy has written since its fork, before any run (its "
                  "`Private_Dirty`; `bench_runcost.py BUILD --written`): "
                  f"{', '.join(str(k // 4) for k in wp['none']) or '-'} without preloads, "
                  f"{', '.join(str(k // 4) for k in wp['preload']) or '-'} with {PRELOAD}."]
    L += floors_lines(res) + phases_lines(res)
    L += ["", "CPU and wall time are of the same calls; the medians are the client's wall "
              "time of one call; bwrap's median and the warm calls against it come from "
              "interleaved rounds (one bwrap run, then 5 warm calls, a round; the warm "
              "calls " + " and ".join(f"{g * 1e3:.0f} ms apart for {k}" for k, g in WARM_GAP_S.items())
              + ", so that each finds its copy ready, then as many to the warm floor, "
              "`bench/warm_floor.py`, the order alternating). "
              "Issue 40's targets, side by side in this run:", "",
          "| what | measured | target | |", "|---|---:|---:|---|"]
    for what, got, want, met in side_by_side(res):
        L.append(f"| {what} | {got} | {want} | {verdict(met)} |")
    if res.get("cold"):
        L += ["", "The cold start, round after round beside bwrap (bench_cold.py):", ""] + \
            bench_cold.report_lines(res["cold"])[2:]
    return L + [""]


def targets(res):
    return [{"what": f"{what} ({want})", "figure": got, "verdict": verdict(met)}
            for what, got, want, met in side_by_side(res)]


def ready_copy_written(build, preload):
    """The pages a ready copy of `airlock mcp` has written since its fork
    (Private_Dirty of its smaps_rollup, KiB): its copies of the template's
    pages and its new ones, before any run. After a few calls and a pause,
    so that the copy is one of a warm template."""
    cg = Cgroup()
    m = Mcp(build, "print(1)", preload, cg)
    try:
        for _ in range(5):
            m.call()
        time.sleep(2)
        out = []
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/status") as f:
                    st = f.read()
            except OSError:
                continue
            ppid = int(st.split("PPid:")[1].split()[0])
            nspid = st.split("NSpid:")[1].split("\n")[0].split()
            # A copy: the server's child (CLONE_PARENT), pid 1 of its own
            # PID namespace.
            if ppid == m.p.pid and nspid[-1] == "1" and len(nspid) > 1:
                try:
                    with open(f"/proc/{d}/smaps_rollup") as f:
                        for line in f:
                            if line.startswith("Private_Dirty:"):
                                out.append(int(line.split()[1]))
                except OSError:
                    pass  # a copy that ended meanwhile
        return out
    finally:
        m.close()
        cg.close()


def b2b_main(builds, quick):
    """--b2b: print(1) back to back only, through the library and `airlock
    mcp`, for each build in interleaved rounds (the first build first in
    even rounds, last in odd ones), beside what the floors allow on all
    cores, measured once before the rounds with the first build's driver."""
    for b in builds:
        build_driver(b)
    rounds, n = (3, 100) if quick else (5, 300)
    must = floors(builds[0], "print(1)", None, quick)["must_b2b_ms"]
    cap = os.cpu_count() * 1000 / must
    print(f"floor (c) back to back: {must:.2f} ms a call, so at most {cap:.0f} runs/s on "
          f"{os.cpu_count()} cores; {rounds} rounds of {n} calls")
    print("| round | build | call | runs/s | / the floors' | CPU ms a call | tree CPUs | idle CPUs "
          "| load |\n|---:|---|---|---:|---:|---:|---:|---:|---:|")
    got = {}
    for r in range(rounds):
        for b in builds if r % 2 == 0 else builds[::-1]:
            for name, kind in (("library", Lib), ("mcp", Mcp)):
                x = back_to_back(kind, b, n)
                got.setdefault((b, name), []).append(x)
                print(f"| {r} | {b} | {name} | {x['rps']:.1f} | {x['rps'] / cap:.2f}x | "
                      f"{x['cpu_ms']:.2f} | {x['tree_cpus']:.2f} | {x['idle_cpus']:.2f} | "
                      f"{x['loadavg']:.1f} |", flush=True)
    print("\nmedians of the rounds:")
    for (b, name), xs in got.items():
        rps = median([x["rps"] for x in xs])
        print(f"- {b} {name}: {rps:.1f} runs/s ({rps / cap:.2f}x the floors'), "
              f"{median([x['cpu_ms'] for x in xs]):.2f} ms of CPU a call, the tree used "
              f"{median([x['tree_cpus'] for x in xs]):.2f} CPUs, the machine left "
              f"{median([x['idle_cpus'] for x in xs]):.2f} idle")


if __name__ == "__main__":
    builds = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not builds or not all(os.path.isfile(os.path.join(b, "libairlock.a")) for b in builds):
        sys.exit("usage: bench_runcost.py BUILD [--quick] | BUILD --written | "
                 "BUILD [BUILD...] --b2b [--quick]\n(BUILD: a build folder, with libairlock.a)")
    if "--b2b" in sys.argv:
        b2b_main([os.path.abspath(a) for a in sys.argv[1:] if not a.startswith("--")],
                 "--quick" in sys.argv)
        sys.exit(0)
    if "--written" in sys.argv:
        for pre in (None, PRELOAD):
            kib = ready_copy_written(os.path.abspath(sys.argv[1]), pre)
            print(f"ready copies, {pre or 'no preload'}: "
                  + ", ".join(f"{k} KiB ({k // 4} pages) written since the fork" for k in kib))
        sys.exit(0)
    r = run(os.path.abspath(sys.argv[1]), "--quick" in sys.argv,
            log=lambda m: print(m, file=sys.stderr))
    print("\n".join(report_lines(r)))
    print("\n".join(f"- {t['what']}: {t['figure']} -- **{t['verdict']}**" for t in targets(r)))
    print(json.dumps(r), file=sys.stderr)
