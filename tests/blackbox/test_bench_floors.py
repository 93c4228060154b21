#!/usr/bin/python3
"""Black-box tests: the floors that `make bench` measures a run's cost
against (bench/bench_runcost.py, "cost of a run").

Floor (b), a fork that makes the isolation a copy needs and exits
(bench/bench_runcost_iso.c), is an honest floor only while it makes the
same calls as airlock's copies: the same namespaces, the same mounts (one
per /proc cover), the same limits, Landlock scope and seccomp filter. This
test traces a real copy's setup (the library driver bench_runcost, one
run) and floor (b)'s child, and compares the calls that build the
isolation, so that a change to a copy's setup shows here until the floor
follows it. Floor (c), what a call must cost, forks once as os.fork()
does and its child makes floor (b)'s isolation, then runs the code: it is
traced likewise, through the floors' own program. Needs root, strace and
a C compiler, as the bench does.

The warm floor (bench/warm_floor.py), a warm call without isolation, is an
honest floor only while it runs the code it is given, forks its children
from a process other than the server (a server that forks pays a
copy-on-write fault on each page it writes afterwards, on the answer's
path), and has its next child forked ahead of the call.
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import AIRLOCK, run  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_runcost  # noqa: E402

BUILD = os.environ.get("AIRLOCK_BUILD") or os.path.dirname(AIRLOCK)
# The calls that build a copy's isolation, after its clone3.
CALLS = ["mount", "fsopen", "fsconfig", "fsmount", "open_tree", "mount_setattr", "move_mount",
         "seccomp", "landlock_create_ruleset", "landlock_restrict_self", "unshare", "prlimit64",
         "capset"]
NEW = re.compile(r"CLONE_NEW\w+")

# Floor (b) once, as bench_runcost.floors' interpreter does it.
ONE_ISO = r"""
import ctypes, json, sys
a = json.loads(sys.argv[1])
so = ctypes.CDLL(a["so"])
filt = open(a["filter"], "rb").read()
assert so.iso_setup(filt, len(filt), *(p.encode() for p in a["cg"])) == 0
pid = so.iso_fork()
assert pid > 0, pid
st = so.iso_reap(pid)
so.iso_teardown()
sys.exit(st)
"""


def traced(argv, stdin=None):
    """Runs argv under strace -f; returns [(namespace flags, Counter of
    CALLS)] for each child that clone3 made in a new PID namespace."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log")
        p = subprocess.run(["strace", "-f", "-qq", "-o", log, "-e",
                            "trace=clone3," + ",".join(CALLS)] + argv, input=stdin,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (p.returncode, p.stdout[-300:], p.stderr[-300:])
        with open(log) as f:
            lines = f.read().splitlines()
    children, calls = [], collections.defaultdict(collections.Counter)
    flags = {}
    for line in lines:
        m = re.match(r"^(\d+)\s+(\w+)\(", line)
        if m:
            pid, name = int(m.group(1)), m.group(2)
            if name == "clone3":
                flags[pid] = frozenset(NEW.findall(line))
            else:
                calls[pid][name] += 1
        m = re.match(r"^(\d+)\s+(?:<\.\.\. clone3 resumed>|clone3\().*= (\d+)$", line)
        if m and "CLONE_NEWPID" in flags.get(int(m.group(1)), ()):
            children.append((flags[int(m.group(1))], int(m.group(2))))
    return [(f, calls[c]) for f, c in children]


def a_copys_calls():
    """The namespaces and isolation calls of a real copy (traced())."""
    bench_runcost.build_driver(BUILD)
    copies = traced([os.path.join(BUILD, "bench_runcost"), "-", "print(1)"], stdin="\n")
    # A copy that got as far as its seccomp filter: one whose setup is whole
    # (the last ready copies may be killed at the end mid-setup).
    done = [c for c in copies if c[1]["seccomp"] == 1]
    assert done, copies
    return done


def test_the_isolation_floor_makes_the_calls_a_copy_makes():
    done = a_copys_calls()
    cg = bench_runcost.Cgroup()
    try:
        args = {"so": os.path.join(BUILD, "bench_runcost_iso.so"),
                "filter": os.path.join(BUILD, "bench_runcost.filter"),
                "cg": bench_runcost.iso_cgroups(cg)}
        floor = traced(["/usr/bin/python3", "-c", ONE_ISO, json.dumps(args)])
    finally:
        for d in bench_runcost.iso_cgroups(cg):
            if d and os.path.isdir(d):
                os.rmdir(d)
        cg.close()
    assert len(floor) == 1, floor
    (ff, fc), (cf, cc) = floor[0], done[0]
    assert ff == cf, f"namespaces: floor (b) {sorted(ff)}, a copy {sorted(cf)}"
    assert fc == cc, f"calls: floor (b) {dict(fc)}, a copy {dict(cc)}"
    assert cc["mount"] > 10, cc  # the /proc covers are there


def test_the_whole_floor_runs_the_code_after_the_calls_a_copy_makes():
    done = a_copys_calls()
    cg = bench_runcost.Cgroup()
    iso_cg = bench_runcost.iso_cgroups(cg)
    # One round of the floors, one fork of each: floor (b)'s child, then
    # floor (c)'s. The code fails unless it runs as a copy's does: pid 1
    # of its own PID namespace, no_new_privs, the seccomp filter on; the
    # floors' program exits non-zero when the code fails in the child.
    code = ("import os\n"
            "s = open('/proc/self/status').read()\n"
            "if os.getpid() > 1: print('the parent')\n"
            "else: assert 'NoNewPrivs:\\t1' in s and 'Seccomp:\\t2' in s, s\n")
    args = bench_runcost.floors_args(BUILD, code, None, True, cg, iso_cg, 0, 1)
    args.update(n=1, n_bare=1)
    try:
        floor = traced(["/usr/bin/python3", "-c", bench_runcost.FLOORS, json.dumps(args)])
    finally:
        bench_runcost.remove_iso_cgroups(iso_cg)
        cg.close()
    assert len(floor) == 2, floor
    (bf, bc), (wf, wc), (cf, cc) = floor[0], floor[1], done[0]
    assert bf == wf == cf, f"namespaces: floor (c) {sorted(wf)}, a copy {sorted(cf)}"
    assert wc == bc == cc, f"calls: floor (c) {dict(wc)}, a copy {dict(cc)}"


def test_the_warm_floor_runs_the_code_in_a_child_forked_ahead_by_another_process():
    cg = bench_runcost.Cgroup()
    f = None
    try:
        f = bench_runcost.WarmFloor("print(1)", None, cg)
        code = "import os; print(os.getppid(), os.getpid())"
        seen = []
        for _ in range(3):
            f.code = code
            r = f.rpc("tools/call", {"name": "execute_code", "arguments": {"code": code}})
            ppid, pid = map(int, r["content"][0]["text"].split())
            seen.append((ppid, pid))
        server = f.p.pid
        zygotes = {ppid for ppid, _ in seen}
        assert len(zygotes) == 1 and server not in zygotes, (server, seen)
        assert len({pid for _, pid in seen}) == 3, seen  # a child a call
        # The zygote is the server's only child, and the next call's child
        # is there before the call.
        kids = open(f"/proc/{server}/task/{server}/children").read().split()
        assert kids == [str(zygotes.pop())], kids
        # Asked for once the response was written, it comes at once; the
        # last call's child may still be exiting beside it.
        ran = {str(p) for _, p in seen}
        for _ in range(1000):
            waiting = open(f"/proc/{kids[0]}/task/{kids[0]}/children").read().split()
            if set(waiting) - ran:
                break
            time.sleep(0.01)
        assert len(set(waiting) - ran) == 1, (waiting, ran)
        f.code = "print(1)"
        f.call()
    finally:
        if f:
            f.close()
        cg.close()


if __name__ == "__main__":
    run()
