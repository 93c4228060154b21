#!/usr/bin/python3
"""A warm call's path: where the wall time of a warm print(1) through
`airlock mcp` goes, from the request's arrival to the response, split at
the system calls of the server and of the copy (docs/performance.md, "A
warm call's path").

    /usr/bin/python3 bench/warm_path.py BUILD... [--calls N] [--gap MS] [--plain R]

One `airlock mcp` per build, each warmed up by 5 calls; then N calls of
each, GAP ms apart (100 by default: the copy is ready), the builds in
turn, under `perf record -a` of the system calls and the scheduler's
switches and wake-ups (CLOCK_MONOTONIC, the client's clock). Prints, per
build, the median of each step over the calls, and how often the server
and the copies were woken and waited for a CPU. Needs root and perf;
perf's own cost inflates every step that makes system calls. With --plain
R, no perf: R rounds of new servers, the calls timed by the client alone,
and the median of each round and of all; and the server's own CPU a call
(all its threads, from schedstat), per round.
"""
import argparse
import bisect
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_stdio import McpStdio  # noqa: E402

EVENTS = ("raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_switch,"
          "sched:sched_wakeup")
CODE = "print(1)"
RUN_FRAME = len(json.dumps({"op": "run", "code": CODE}, separators=(",", ":")))
SYSCALLS = {"read": 0, "write": 1, "getpid": 39, "sendmsg": 46, "recvfrom": 45,
            "recvmsg": 47, "wait4": 61, "getrandom": 318}
EVENT = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[\d+\]\s+(\d+)\.(\d+):\s+(\S+):\s*(.*)$")

# The steps, in the order of the call, each from one marker to the next on
# the answer's path: (name, from marker, to marker); markers() finds them.
STEPS = [
    ("client's write to the server's read", "t0", "req"),
    ("server: request to the copy's first frame", "req", "first"),
    ("server: first frame to the code sent", "first", "sent"),
    ("code sent to the copy's read of it", "sent", "code"),
    ("copy: the code read to print's write", "code", "print"),
    ("copy: print's write to the end of the script", "print", "ended"),
    ("copy: the end of the script to its end frame", "ended", "end"),
    ("end frame to the server's read of it", "end", "got"),
    ("server: end frame to the run id", "got", "runid"),
    ("server: run id to the response", "runid", "resp"),
    ("response to the client's read", "resp", "t1"),
]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--gap", type=float, default=100.0, help="ms between calls")
    ap.add_argument("--plain", type=int, default=0, metavar="R",
                    help="R rounds timed by the client alone, no perf")
    return ap.parse_args()


def server_cpu_ns(pid):
    """The CPU time of every thread of the server so far, ns (schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended: its time is gone with it
    return total


def servers(builds):
    """An `airlock mcp` of each build, warmed up by 5 calls, then left a
    second: past a burst, so the calls timed next find their copy ready."""
    ms = [McpStdio([os.path.join(b, "airlock"), "mcp"], initialized=True) for b in builds]
    try:
        for m in ms:
            for _ in range(5):
                m.call(CODE)
    except BaseException:
        for m in ms:
            m.close()
        raise
    time.sleep(1.0)
    return ms


def plain(builds, calls, gap_s, rounds):
    """The client's wall time of the calls, ms: {build: [[a round's]]}, and
    the server's own CPU a call, us: {build: [a round's]} (its threads, not
    the template or the copies: the host's share of a call, which the wall
    time of a loaded machine hides)."""
    out = {b: [] for b in builds}
    cpu = {b: [] for b in builds}
    for r in range(rounds):
        ms = servers(builds)
        try:
            got = [[] for _ in builds]
            c0 = [server_cpu_ns(m.p.pid) for m in ms]
            for i in range(calls):
                for j in (range(len(ms)) if (i + r) % 2 == 0 else reversed(range(len(ms)))):
                    time.sleep(gap_s)
                    got[j].append(ms[j].call(CODE)[0])
            for b, m, c in zip(builds, ms, c0):
                cpu[b].append((server_cpu_ns(m.p.pid) - c) / calls / 1e3)
        finally:
            for m in ms:
                m.close()
        for b, g in zip(builds, got):
            out[b].append(g)
    return out, cpu


def record(builds, calls, gap_s, data):
    """Runs the calls under perf; returns per build (server pid, [(t0, t1)])."""
    ms = servers(builds)
    try:
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-e",
                                 EVENTS, "-o", data], stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        spans = [[] for _ in builds]
        for i in range(calls):
            for j in (range(len(ms)) if i % 2 == 0 else reversed(range(len(ms)))):
                time.sleep(gap_s)
                t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                ms[j].call(CODE)
                spans[j].append((t0, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
        time.sleep(0.2)
        perf.send_signal(signal.SIGINT)
        perf.wait()
        return [(m.p.pid, s) for m, s in zip(ms, spans)]
    finally:
        for m in ms:
            m.close()


def events(data):
    """The airlock processes' system calls and every scheduler event:
    [(ns, comm, pid, tid, event, text)]."""
    p = subprocess.Popen(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace",
                          "--ns"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = []
    for line in p.stdout:
        m = EVENT.match(line)
        if not m:
            continue
        comm, pid, tid, sec, frac, ev, text = m.groups()
        if ev.startswith("raw_") and comm not in ("airlock", "memfd:airlock"):
            continue
        t = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9])
        out.append((t, comm, int(pid), int(tid), ev, text))
    p.wait()
    return out


def syscall(e):
    """(enter?, number, first argument or return value) of a system call event."""
    m = re.match(r"NR (\d+) (?:\(([0-9a-f]+)|= (-?\d+))", e[5])
    if not m:
        return None
    if m.group(2) is not None:
        return True, int(m.group(1)), int(m.group(2), 16)
    return False, int(m.group(1)), int(m.group(3))


def markers(evs, server, t0, t1):
    """The markers of one call, or None when one is missing."""
    sy = [(e, syscall(e)) for e in evs if t0 <= e[0] <= t1 and e[4].startswith("raw_")]
    sy = [(e, s) for e, s in sy if s]

    def first(pred, after):
        return next((e[0] for e, s in sy if e[0] >= after and pred(e, s)), None)

    srv = lambda e: e[2] == server  # noqa: E731
    mk = {"t0": t0, "t1": t1}
    mk["req"] = first(lambda e, s: srv(e) and not s[0] and s[1] == SYSCALLS["read"] and s[2] > 100,
                      t0)
    if mk["req"] is None:
        return None
    mk["first"] = first(lambda e, s: srv(e) and s[0] and s[1] == SYSCALLS["sendmsg"], mk["req"])
    # The code's frame: with a late-input copy's input (one message) or alone.
    sizes = (RUN_FRAME + 4, RUN_FRAME + 4 + 4 + len('{"op":"input"}') + 1)
    mk["sent"] = first(lambda e, s: srv(e) and not s[0] and s[1] == SYSCALLS["sendmsg"] and
                       s[2] in sizes, mk["first"] or t0)
    if mk["sent"] is None:
        return None
    pr = next(((e, s) for e, s in sy if e[0] > mk["sent"] and not srv(e) and s[0] and
               s[1] == SYSCALLS["write"] and s[2] == 1), None)
    if pr is None:
        return None
    copy = pr[0][2]
    mine = lambda e: e[2] == copy  # noqa: E731
    mk["print"] = pr[0][0]
    mk["copy"] = copy
    mk["code"] = first(lambda e, s: mine(e) and not s[0] and s[1] == SYSCALLS["read"] and
                       s[2] == RUN_FRAME, mk["sent"])
    mk["ended"] = first(lambda e, s: mine(e) and s[0] and s[1] == SYSCALLS["wait4"], mk["print"])
    mk["resp"] = first(lambda e, s: srv(e) and s[0] and s[1] == SYSCALLS["write"] and s[2] == 1,
                       mk["print"])
    if mk["resp"] is None:
        return None
    ends = [e[0] for e, s in sy if mine(e) and s[0] and s[1] == SYSCALLS["sendmsg"] and
            e[0] < mk["resp"]]
    mk["end"] = ends[-1] if ends else None
    mk["got"] = first(lambda e, s: srv(e) and not s[0] and s[1] in
                      (SYSCALLS["recvfrom"], SYSCALLS["recvmsg"], SYSCALLS["read"]),
                      mk["end"] or t1)
    mk["runid"] = first(lambda e, s: srv(e) and s[0] and s[1] == SYSCALLS["getrandom"],
                        mk["got"] or t1)
    return None if None in mk.values() else mk


def wakeups(evs, server_tids, copies, spans):
    """{who: [waits from a wake-up to running, ns]} within the calls: the
    server's threads, the calls' copies, and the template with the copies
    it prepares."""
    starts = [s[0] for s in spans]

    def within(t):
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t <= spans[i][1]
    woken, waits = {}, {"server": [], "the call's copy": [], "template, other copies": []}
    for t, _, _, _, ev, text in evs:
        if ev == "sched:sched_wakeup":
            m = re.search(r"comm=(\S+) pid=(\d+)", text)
            if m and m.group(1) in ("airlock", "memfd:airlock"):
                woken[int(m.group(2))] = t
        elif ev == "sched:sched_switch":
            m = re.search(r"next_comm=(\S+) next_pid=(\d+)", text)
            pid = int(m.group(2)) if m else -1
            if pid in woken:
                w = woken.pop(pid)
                if not within(w):
                    continue
                if pid in server_tids:
                    waits["server"].append(t - w)
                elif pid in copies:
                    waits["the call's copy"].append(t - w)
                elif m.group(1) == "memfd:airlock":
                    waits["template, other copies"].append(t - w)
    return waits


def main():
    a = parse_args()
    load0 = os.getloadavg()
    if a.plain:
        got, cpu = plain(a.builds, a.calls, a.gap / 1e3, a.plain)
        load1 = os.getloadavg()
        print(f"warm print(1) through airlock mcp, {a.plain} rounds of {a.calls} calls {a.gap:g} "
              f"ms apart a build, builds in turn; load average {load0[0]:.2f} to "
              f"{load1[0]:.2f}; the client's wall time, ms")
        for b, rounds in got.items():
            every = [x for r in rounds for x in r]
            print(f"{b}: median {statistics.median(every):.3f} (rounds: " +
                  ", ".join(f"{statistics.median(r):.3f}" for r in rounds) + ")")
        print("the server's own CPU a call (its threads), us")
        for b, rounds in cpu.items():
            print(f"{b}: median {statistics.median(rounds):.1f} (rounds: " +
                  ", ".join(f"{r:.1f}" for r in rounds) + ")")
        return
    with tempfile.TemporaryDirectory(prefix="airlock-warm-path-") as d:
        data = os.path.join(d, "perf.data")
        runs = record(a.builds, a.calls, a.gap / 1e3, data)
        evs = events(data)
    load1 = os.getloadavg()
    print(f"warm print(1) through airlock mcp, {a.calls} calls {a.gap:g} ms apart a build, "
          f"builds in turn; load average {load0[0]:.2f} to {load1[0]:.2f}; medians in us")
    cols = []
    for build, (server, spans) in zip(a.builds, runs):
        marks = [mk for mk in (markers(evs, server, t0, t1) for t0, t1 in spans) if mk]
        tids = {e[3] for e in evs if e[2] == server}
        copies = {mk["copy"] for mk in marks}
        cols.append((build, marks, wakeups(evs, tids, copies, spans), len(spans)))
    width = max(len(s[0]) for s in STEPS) + 2
    print(f"{'step':{width}}" + "".join(f"{os.path.basename(b.rstrip('/')):>16}"
                                        for b, *_ in cols))
    for name, frm, to in STEPS + [("server: request to response", "req", "resp"),
                                     ("whole call (client)", "t0", "t1")]:
        row = [statistics.median(mk[to] - mk[frm] for mk in marks) / 1e3 if marks else float("nan")
               for _, marks, _, _ in cols]
        print(f"{name:{width}}" + "".join(f"{v:16.1f}" for v in row))
    print(f"{'calls split / made':{width}}" + "".join(f"{len(m):>13}/{n:<2}" for _, m, _, n in cols))
    for who in ("server", "the call's copy", "template, other copies"):
        row = []
        for _, _, w, n in cols:
            v = w[who]
            row.append(f"{len(v) / n:4.1f} x {statistics.median(v) / 1e3 if v else 0:6.1f}")
        print(f"{'wake-ups x median wait (us), ' + who:{width}}" + "".join(f"{r:>16}" for r in row))


if __name__ == "__main__":
    main()
