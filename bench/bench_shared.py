#!/usr/bin/env python3
"""A call on a shared tenants folder (a GlusterFS volume over FUSE) against
the same call on a local one, side by side in one run (issue 42's targets:
at most +1 ms unchanged, at most +5 ms after a one-file change, for a
20-file tenant as in the tenants bench).

Two `airlock mcp --tenants-dir D --tenant T` servers: D on the local disk,
and D on a FUSE mount of a replicated volume of the bench's own
(tests/multihost/gluster.py: glusterd in a network namespace, bricks in a
temporary folder, every client cache off as docs/serving.md names). A third
server on a second mount of the volume stands in for another host. Rounds
interleave, 50 ms apart:

  - an unchanged call on each (the same read of every file);
  - a one-file change, untimed, then the timed call that must see it: on
    the local folder through the server's own workspace_write; on the
    shared one through the other host's workspace_write (the case inotify
    cannot see), and, in a row of its own, written on the other mount
    behind airlock's back.

Then the same for a 10,000-file tenant (100 folders of 100 files of 1 KiB),
fewer rounds: over the shared walk cap, its unchanged call relies on the
generation, and its call after a change walks the tree over FUSE.

Needs root, FUSE and network namespaces (as the multihost tier); prints a
Markdown table, or why it could not measure. Called by bench/run.sh (`make
bench`); alone: /usr/bin/python3 bench/bench_shared.py BUILD [--quick]
[--only=small or --only=big] [--safety-walk=S] [--json]

--syscalls instead counts what the 20-file tenant's calls ask of the mount:
strace -f of the serving process over 4 unchanged calls and 4 calls after
another host's one-file write, each system call on a file descriptor of the
mount (or a path through it) counted by name, per call. Each is at least
one round trip to the FUSE daemon (a lookup by name two: LOOKUP and
GETATTR, with the timeouts 0); compare with the proposed target's lookups.
"""
import re
import json
import os
import shutil
import subprocess
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))
import gluster  # noqa: E402 - the multihost tier's fixture
from mcp_stdio import McpStdio  # noqa: E402

FILES = 20
PAD = "# " + "x" * 160 + "\n"
READ_SMALL = ("import os\n"
              "rows = [open('/input/' + f).read().split('\\n')[1] for f in sorted(os.listdir("
              "'/input')) if f.endswith('.csv')]\n"
              "print(len(rows), rows[0])\n")
READ_BIG = "print(open('/input/d042/f04200.txt').read(), end='')"


class Mcp(McpStdio):
    """airlock mcp --tenants-dir D --tenant T on stdio, one request at a time."""

    def __init__(self, exe, tenants_dir, tenant, tmp, **extra_env):
        env = dict(os.environ, TMPDIR=tmp, **extra_env)
        # The 10,000-file tenant holds 10,100 entries: over the default cap.
        super().__init__([exe, "mcp", "--tenants-dir", tenants_dir, "--tenant", tenant,
                          "--workspace-max-files", "20000"], client="bench_shared", env=env)

    def write(self, path, text):
        self.tool("workspace_write", {"files": [{"path": path, "text": text}]})

    def close(self):
        super().close(timeout=300)


def small_tenant(d):
    os.makedirs(d, exist_ok=True)
    for i in range(FILES):
        with open(os.path.join(d, f"f{i:02d}.csv"), "w") as f:
            f.write(f"tenant,v\nbench,{i}\n{PAD}")


def big_tenant(d):
    data = b"x" * 1023 + b"\n"
    for i in range(10000):
        sub = os.path.join(d, f"d{i // 100:03d}")
        if i % 100 == 0:
            os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i:05d}.txt"), "wb") as f:
            f.write(data)


def proposed(size, lookup_ms):
    """The proposed targets in lookups (the measured lstat through the
    mount standing for one round trip), whatever the tenant's size, since
    the walk for changes behind airlock's back runs apart from the calls:
    an unchanged call at most 2 (the generation's fstatat, and the tenant
    folder's check once a second and the FUSE daemon's share), a call after
    another host's one-file change at most 15 (the record's read, about
    four for the file's open, check and read, its copy by staging, and the
    generation). Returns {case: (lookups, ms)}."""
    unchanged, edit = 2, 15
    return {"unchanged": (unchanged, unchanged * lookup_ms), "edit": (edit, edit * lookup_ms)}


def med(v):
    return statistics.median(v) if v else float("nan")


def measure(local, shared, other, other_mount_dir, code, path, expect, rounds, gen=None,
            behind=True, probe=None):
    """Interleaved rounds; returns {case: [ms...]}. gen (may be None): a
    server on the shared folder with the shared walk off, timed beside.
    probe (may be None): a function timing lstat through the mount, run in
    every round (the proposed target's lookup, at the load of the calls)."""
    s = {k: [] for k in ("local", "shared", "local_edit", "shared_edit", "shared_behind",
                         "behind_seen", "gen", "gen_edit", "lookup")}
    for _ in range(3):
        local.call(code)
        shared.call(code)
        if gen:
            gen.call(code)
    for i in range(rounds):
        if probe:
            s["lookup"] += probe(20)
        s["local"].append(local.call(code)[0])
        time.sleep(0.05)
        s["shared"].append(shared.call(code)[0])
        time.sleep(0.05)
        if gen:
            s["gen"].append(gen.call(code)[0])
            time.sleep(0.05)
        text = expect(f"local {i}")
        local.write(path, text)
        dt, out = local.call(code)
        assert text.split("\n")[1] in out or out == text, (out, text)
        s["local_edit"].append(dt)
        time.sleep(0.05)
        text = expect(f"other {i}")
        other.write(path, text)
        dt, out = shared.call(code)
        assert text.split("\n")[1] in out or out == text, ("shared call saw", out, text)
        s["shared_edit"].append(dt)
        time.sleep(0.05)
        if gen:
            text = expect(f"other-gen {i}")
            other.write(path, text)
            dt, out = gen.call(code)
            assert text.split("\n")[1] in out or out == text, ("gen call saw", out, text)
            s["gen_edit"].append(dt)
            time.sleep(0.05)
        if not behind:
            continue
        # Seen once the background walk found it (design.md, "Shared
        # storage"): the calls go on, 50 ms apart, until one sees it; the
        # time of that call, and how long after the write it began.
        text = expect(f"behind {i}")
        with open(os.path.join(other_mount_dir, path), "w") as f:
            f.write(text)
        written = time.monotonic()
        for _ in range(2000):
            began = time.monotonic()
            dt, out = shared.call(code)
            if text.split("\n")[1] in out or out == text:
                break
            time.sleep(0.05)
        assert text.split("\n")[1] in out or out == text, ("shared call saw", out, text)
        s["shared_behind"].append(dt)
        s["behind_seen"].append((began - written) * 1000)
        time.sleep(0.05)
    return s


def lstat_times(mount, n):
    """n lstat calls of one file through the mount, each in ms: what each
    entry of a walk costs there (the kernel asks the FUSE daemon every
    time, with the timeouts 0)."""
    path = os.path.join(mount, "lookup-probe")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("x")
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        os.lstat(path)
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def lookup_cost(mount):
    """The median of 200 lstat calls through the mount."""
    return med(lstat_times(mount, 200))


# The shared server's environment: --safety-walk=S sets its safety walk's
# period (AIRLOCK_SAFETY_WALK_S), so that the 10,000-file tenant's call
# after a change is measured apart from the full walk that the safety
# period makes at the first call 10 s after the last one (a walk of that
# tree over FUSE takes longer than the period).
SHARED_ENV = {}


def run(build, quick, sizes=("small", "big")):
    why = gluster.missing()
    if why:
        return {"skipped": why}
    exe = os.path.abspath(os.path.join(build, "airlock"))
    base = tempfile.mkdtemp(prefix="bench-shared.", dir=os.environ.get("TMPDIR", "/tmp"))
    out = {}
    procs = []
    try:
        with gluster.Volume(os.path.join(base, "vol"), mounts=2) as vol:
            out["lookup_ms"] = lookup_cost(vol.mounts[0])
            for size, rounds in (("small", 10 if quick else 30), ("big", 2 if quick else 5)):
                if size not in sizes:
                    continue
                tenant = f"bench{size}"
                loc_dir = os.path.join(base, "local")
                sh_dirs = [os.path.join(m, "tenants") for m in vol.mounts]
                make = small_tenant if size == "small" else big_tenant
                make(os.path.join(loc_dir, tenant))
                make(os.path.join(sh_dirs[0], tenant))
                tmps = [os.path.join(base, f"tmp-{size}-{k}") for k in range(4)]
                for t in tmps:
                    os.makedirs(t)
                local = Mcp(exe, loc_dir, tenant, tmps[0])
                shared = Mcp(exe, sh_dirs[0], tenant, tmps[1], **SHARED_ENV)
                other = Mcp(exe, sh_dirs[1], tenant, tmps[2])
                gen = (Mcp(exe, sh_dirs[0], tenant, tmps[3], AIRLOCK_SHARED_WALK_MAX="0")
                       if size == "small" else None)
                procs += [local, shared, other] + ([gen] if gen else [])
                if size == "small":
                    code, path = READ_SMALL, "f00.csv"
                    expect = lambda tag: f"tenant,v\n{tag}\n{PAD}"  # noqa: E731
                else:
                    code, path = READ_BIG, "d042/f04200.txt"
                    expect = lambda tag: f"edit\n{tag}\n"  # noqa: E731
                out[size] = measure(local, shared, other, os.path.join(sh_dirs[1], tenant), code,
                                    path, expect, rounds, gen, behind=size == "small",
                                    probe=lambda n: lstat_times(vol.mounts[0], n))
                out[size + "_rounds"] = rounds
                for m in [local, shared, other] + ([gen] if gen else []):
                    m.close()
                    procs.remove(m)
    finally:
        for m in procs:
            m.p.kill()
        shutil.rmtree(base, ignore_errors=True)
    return out


def _mount_syscalls(log, mount_fds, mount, apart=()):
    """{syscall: count} of the calls in strace log that reach the mount:
    on an fd of it (mount_fds at the start, then every fd opened or
    duplicated from one), or a path through it. The calls of the threads
    apart (the background walker) count under "background: NAME"."""
    fds = dict.fromkeys(mount_fds, True)
    counts = {}
    pending = {}
    rx = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
    for line in log.splitlines():
        m = rx.match(line)
        if not m:
            continue
        if m.group(2):
            name, args = m.group(2), pending.pop(m.group(1), "") + m.group(3)
        elif m.group(5).endswith("<unfinished ...>"):
            pending[m.group(1)] = m.group(5)[:-len("<unfinished ...>")]
            continue
        else:
            name, args = m.group(4), m.group(5)
        first = re.match(r"\s*([\w-]*)", args).group(1)
        ret = args.rsplit("= ", 1)[-1].split()[0] if "= " in args else ""
        if first == "AT_FDCWD":
            path = args.split(",")[1].strip().strip('"')
            on = path.startswith(mount) or any(path.startswith(f"/proc/self/fd/{f}/")
                                               for f, v in fds.items() if v)
        elif first.isdigit():
            on = fds.get(int(first), False)
        else:
            continue
        if name in ("openat", "openat2", "open") or (name == "fcntl" and "DUPFD" in args):
            if ret.isdigit():
                fds[int(ret)] = on
        if name == "close":
            fds.pop(int(first), None)
        if on and name not in ("fcntl", "inotify_add_watch"):
            key = name + (" (by fd)" if name == "newfstatat" and '""' in args else "")
            if int(m.group(1)) in apart:
                key = "background: " + key
            counts[key] = counts.get(key, 0) + 1
    return counts


def syscalls(build, calls=4):
    """Counts, per call, the system calls on the mount of the 20-file
    tenant's unchanged calls and calls after another host's write."""
    why = gluster.missing() or (None if shutil.which("strace") else "strace is missing")
    if why:
        return {"skipped": why}
    exe = os.path.abspath(os.path.join(build, "airlock"))
    base = tempfile.mkdtemp(prefix="bench-shared.", dir=os.environ.get("TMPDIR", "/tmp"))
    out = {}
    procs = []
    try:
        with gluster.Volume(os.path.join(base, "vol"), mounts=2) as vol:
            sh = [os.path.join(m, "tenants") for m in vol.mounts]
            small_tenant(os.path.join(sh[0], "t"))
            tmps = [os.path.join(base, f"tmp{k}") for k in range(2)]
            for t in tmps:
                os.makedirs(t)
            m = Mcp(exe, sh[0], "t", tmps[0])
            other = Mcp(exe, sh[1], "t", tmps[1])
            procs += [m, other]
            for _ in range(3):
                m.call(READ_SMALL)
            fd_dir = f"/proc/{m.p.pid}/fd"
            mount_fds = [int(f) for f in os.listdir(fd_dir)
                         if os.readlink(os.path.join(fd_dir, f)).startswith(vol.mounts[0])]
            apart = walker_tids(m.p.pid)
            for case in ("unchanged", "after another host's write"):
                log = os.path.join(base, "strace.log")
                st = subprocess.Popen(["strace", "-f", "-qq", "-o", log, "-e",
                                       "trace=%file,%desc,getdents64", "-p", str(m.p.pid)],
                                      stderr=subprocess.DEVNULL)
                time.sleep(1)  # strace attaches (it says nothing when it has)
                for i in range(calls):
                    if case != "unchanged":
                        other.write("f00.csv", f"tenant,v\nsyscalls {i}\n{PAD}")
                    m.call(READ_SMALL)
                time.sleep(0.3)
                st.terminate()
                st.wait(timeout=60)
                with open(log) as f:
                    counts = _mount_syscalls(f.read(), mount_fds, vol.mounts[0], apart)
                out[case] = {k: v / calls for k, v in counts.items()}
            for x in procs:
                x.close()
            procs = []
    finally:
        for x in procs:
            x.p.kill()
        shutil.rmtree(base, ignore_errors=True)
    return out


def walker_tids(pid):
    """The threads of pid that walk trees in the background (named
    airlock-walk), whose system calls are no call's."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == "airlock-walk":
                    out.add(int(tid))
        except OSError:
            pass
    return out


def syscall_lines(res):
    if "skipped" in res:
        return [f"not counted: {res['skipped']}"]
    goal = proposed("small", 0)
    lines = ["## shared tenants folder: system calls on the mount, a call (20-file tenant)", ""]
    for case, counts in res.items():
        total = sum(v for k, v in counts.items() if not k.startswith("background: "))
        lookups = goal["unchanged" if case == "unchanged" else "edit"][0]
        lines.append(f"- {case}: {total:.1f} (proposed target: {lookups} lookups): " +
                     ", ".join(f"{k} {v:.1f}" for k, v in sorted(counts.items(),
                                                                 key=lambda kv: -kv[1])))
    return lines


def report_lines(res):
    if "skipped" in res:
        return ["## shared tenants folder", "", f"not measured: {res['skipped']}"]
    lines = ["## shared tenants folder (GlusterFS over FUSE against a local disk)", "",
             "| tenant | call | local | shared | difference | issue's target | proposed target "
             "(lookups × lstat) |", "|---|---|---:|---:|---:|---|---|"]
    if "lookup_ms" in res:
        lines.append(f"| - | one lstat through the mount (median of 200) | | "
                     f"{res['lookup_ms']:.2f} ms | | | |")
    for size, label in (("small", "20 files"), ("big", "10,000 files")):
        if size not in res:
            continue
        s = res[size]
        n = res[size + "_rounds"]
        # The lookup at the load of these rounds (20 lstat calls in each).
        lookup = med(s["lookup"]) if s.get("lookup") else res.get("lookup_ms", float("nan"))
        lines.append(f"| {label} | one lstat through the mount, during its rounds | | "
                     f"{lookup:.2f} ms | | | |")
        goal = proposed(size, lookup)
        rows = [("unchanged", "local", "shared", 1.0 if size == "small" else None,
                 goal["unchanged"]),
                ("after a one-file change (other host's workspace_write)", "local_edit",
                 "shared_edit", 5.0 if size == "small" else None, goal["edit"]),
                ("after a one-file change behind airlock's back (the first call that sees it)",
                 "local_edit", "shared_behind", None, goal["edit"])]
        if s.get("gen"):
            rows += [("unchanged, shared walk off (AIRLOCK_SHARED_WALK_MAX=0)", "local", "gen",
                      None, None),
                     ("after another host's change, shared walk off", "local_edit", "gen_edit",
                      None, None)]
        for what, lk, sk, target, goal_row in rows:
            if not s[sk]:
                continue
            lm, sm = med(s[lk]), med(s[sk])
            diff = sm - lm
            issue = "(report)" if target is None else \
                f"<= +{target:g} ms: {'met' if diff <= target else 'not met'}"
            mine = "" if goal_row is None else \
                f"<= +{goal_row[1]:.1f} ms ({goal_row[0]} lookups): " \
                f"{'met' if diff <= goal_row[1] else 'not met'}"
            lines.append(f"| {label} ({n} rounds) | {what} | {lm:.1f} ms | {sm:.1f} ms | "
                         f"{diff:+.1f} ms | {issue} | {mine} |")
        if s.get("behind_seen"):
            lines.append(f"| {label} ({n} rounds) | a change behind airlock's back: from the "
                         f"write to the start of the first call that sees it (median, max) | | "
                         f"{med(s['behind_seen']):.0f} ms, {max(s['behind_seen']):.0f} ms | | "
                         f"(report) | |")
    return lines


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--syscalls" in sys.argv:
        print("\n".join(syscall_lines(syscalls(args[0] if args else "build"))))
        return
    sizes = [a[len("--only="):] for a in sys.argv if a.startswith("--only=")] or ["small", "big"]
    for a in sys.argv:
        if a.startswith("--safety-walk="):
            SHARED_ENV["AIRLOCK_SAFETY_WALK_S"] = a[len("--safety-walk="):]
    res = run(args[0] if args else "build", "--quick" in sys.argv, sizes)
    if "--json" in sys.argv:
        print(json.dumps(res))
    else:
        print("\n".join(report_lines(res)))


if __name__ == "__main__":
    main()
