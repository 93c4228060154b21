#!/usr/bin/python3
"""The scientific stack preloaded: airlock against the peers that
must import it at every run.

  a. a fresh run of `import pandas as pd; print(pd.DataFrame(...).a.sum())`
     through `airlock mcp --preload ...` against `bwrap ... python3` and
     python3 alone running the same code in a new process;
  b. a data workload: read a 10 MB CSV with pandas, group it, plot a PNG to
     /output, which must come back;
  c. the PSS of one idle, ready sandbox with numpy, pandas and
     matplotlib.pyplot preloaded (the template and its ready copy) against
     one python3 process that imported the same modules.

Samples of the systems are interleaved, round after round, calls 10 ms
apart. Called by bench.py (`make bench`); alone:
    /usr/bin/python3 bench/bench_packages.py BUILD [--quick]
prints its results as JSON. Standard library only.
"""
import base64
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
PRELOAD = "numpy,pandas,matplotlib.pyplot"
# bwrap as bench.py runs it, plus what Debian's numpy and matplotlib read
# from /etc (BLAS through /etc/alternatives, the system matplotlibrc).
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
         "--ro-bind", "/etc/alternatives", "/etc/alternatives",
         "--ro-bind-try", "/etc/matplotlibrc", "/etc/matplotlibrc",
         "--ro-bind-try", "/etc/fonts", "/etc/fonts", "--setenv", "MPLCONFIGDIR", "/tmp"]

PANDAS_CODE = "import pandas as pd; print(pd.DataFrame({'a': [1, 2, 3]}).a.sum())"
PANDAS_WANT = "6\n"

DATA_CODE = """import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import pandas as pd
df = pd.read_csv('{inp}/data.csv')
g = df.groupby('label')['value'].sum().sort_values(ascending=False)
ax = g.head(20).plot.bar(figsize=(8, 4))
ax.figure.tight_layout()
ax.figure.savefig('{out}/plot.png')
print(len(g), int(g.sum()))
"""

IMPORT_CODE = ("import sys, numpy, pandas, matplotlib; matplotlib.use('Agg'); "
               "import matplotlib.pyplot; print('ready', flush=True); sys.stdin.read()")


# The same percentiles and summaries as the rest of make bench (bench.py,
# whose module level only defines; its main() runs as a script only).
from bench import pct, summary  # noqa: E402
from mcp_stdio import McpStdio  # noqa: E402


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid):
    todo, out = [pid], []
    while todo:
        p = todo.pop()
        kids = children_of(p)
        out += kids
        todo += kids
    return out


class Mcp(McpStdio):
    """`airlock mcp` with its own arguments, initialised."""

    def __init__(self, exe, *args):
        super().__init__([exe, "mcp", *args], client="bench_packages")

    def call(self, code):
        t = time.perf_counter()
        r = self.rpc("tools/call", {"name": "execute_code", "arguments": {"code": code}})
        return (time.perf_counter() - t) * 1e3, r


def time_cmd(argv, want):
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300)
    ms = (time.perf_counter() - t) * 1e3
    if p.returncode != 0 or p.stdout.decode() != want:
        raise RuntimeError(f"{argv[0]} exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).decode(errors='replace').strip()[-300:]}")
    return ms


def make_csv(d):
    rows, size, i = ["id,value,label"], 0, 0
    while size < 10 * 1024 * 1024:
        line = f"{i},{(i * 7919) % 100003},item-{i % 977}-abcdefghijklmnop"
        rows.append(line)
        size += len(line) + 1
        i += 1
    with open(os.path.join(d, "data.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    # The expected answer, from the same rows.
    total = sum((k * 7919) % 100003 for k in range(i))
    return f"{977} {total}\n", i


def interleave(fns, rounds, log):
    """fns: name -> (callable returning ms, period in rounds)."""
    samples = {n: [] for n in fns}
    order = random.Random(14)
    for r in range(rounds):
        names = list(fns)
        order.shuffle(names)
        for name in names:
            fn, period = fns[name]
            if r % period:
                continue
            time.sleep(0.01)
            samples[name].append(fn())
        if r % 10 == 0:
            log(f"    round {r + 1}/{rounds}")
    return samples


def run(build, quick, log=lambda m: print(m, file=sys.stderr, flush=True)):
    exe = os.path.join(build, "airlock")
    res = {"pandas": {}, "data": {}, "memory": {}, "not_measured": {}}
    have_bwrap = bool(shutil.which("bwrap"))
    if not have_bwrap:
        res["not_measured"]["bwrap"] = "bwrap is not installed (Debian package bubblewrap)"
    tmp = tempfile.mkdtemp(prefix="airlock-bench-pkgs.")
    try:
        inp, out = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.makedirs(inp)
        os.makedirs(out)
        os.chmod(out, 0o777)
        want_data, rows = make_csv(inp)
        res["data_rows"] = rows
        host_code = os.path.join(tmp, "data_host.py")
        box_code = os.path.join(tmp, "data_box.py")
        with open(host_code, "w") as f:
            f.write(DATA_CODE.format(inp=inp, out=out))
        with open(box_code, "w") as f:
            f.write(DATA_CODE.format(inp="/input", out="/output"))

        log("- preloaded packages: starting airlock mcp --preload " + PRELOAD)
        t0 = time.perf_counter()
        mcp = Mcp(exe, "--preload", PRELOAD, "-w", inp, "--memory", "2048")
        res["mcp_start_ms"] = (time.perf_counter() - t0) * 1e3
        try:
            def airlock_pandas():
                ms, r = mcp.call(PANDAS_CODE)
                if r.get("isError") or r["content"][0].get("text") != PANDAS_WANT:
                    raise RuntimeError(f"airlock mcp: {str(r)[:300]}")
                return ms

            def airlock_data():
                ms, r = mcp.call(DATA_CODE.format(inp="/input", out="/output"))
                # stdout, then the files: plot.png is the one image item.
                png = [c["data"] for c in r["content"] if c["type"] == "image"]
                if r.get("isError") or r["content"][0].get("text") != want_data or not png or \
                        not base64.b64decode(png[0]).startswith(b"\x89PNG"):
                    raise RuntimeError(f"airlock mcp: {str(r)[:300]}")
                return ms

            def clear_out():
                for f in os.listdir(out):
                    os.unlink(os.path.join(out, f))

            def data_cmd(argv):
                def fn():
                    clear_out()
                    ms = time_cmd(argv, want_data)
                    with open(os.path.join(out, "plot.png"), "rb") as f:
                        if not f.read(4) == b"\x89PNG":
                            raise RuntimeError("no PNG came back")
                    return ms
                return fn

            pandas = {"airlock-mcp": (airlock_pandas, 1),
                      "python3": (lambda: time_cmd([PY, "-c", PANDAS_CODE], PANDAS_WANT), 3)}
            data = {"airlock-mcp": (airlock_data, 1),
                    "python3": (data_cmd([PY, host_code]), 1)}
            if have_bwrap:
                pandas["bwrap"] = (lambda: time_cmd(BWRAP + [PY, "-c", PANDAS_CODE],
                                                    PANDAS_WANT), 3)
                data["bwrap"] = (data_cmd(BWRAP + ["--ro-bind", inp, "/input", "--bind", out,
                                                   "/output", "--ro-bind", box_code,
                                                   "/code.py", PY, "/code.py"]), 1)
            # Untimed warm-ups: page cache, and the first copies.
            for fns in (pandas, data):
                for fn, _ in fns.values():
                    fn()
            log("  a. fresh pandas run, interleaved")
            for name, s in interleave(pandas, 30 if quick else 90, log).items():
                res["pandas"][name] = summary(s)
            log("  b. 10 MB CSV with pandas, group, plot a PNG, interleaved")
            for name, s in interleave(data, 4 if quick else 12, log).items():
                res["data"][name] = summary(s)
        finally:
            # c. the idle, ready sandbox: every process below the server
            # (the template and its ready copy; the copies are the server's
            # children, CLONE_PARENT), after its last run has settled.
            try:
                time.sleep(0.5)
                procs = descendants(mcp.p.pid)
                res["memory"]["airlock"] = {
                    "pss_kib": sum(pss_kib(p) for p in procs), "processes": len(procs),
                    "note": "template + ready copy, " + PRELOAD + " preloaded"}
            finally:
                mcp.close()
        p = subprocess.Popen([PY, "-c", IMPORT_CODE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
        try:
            p.stdout.readline()
            time.sleep(0.5)
            res["memory"]["python3"] = {"pss_kib": pss_kib(p.pid),
                                        "note": "one python3 that imported the same modules"}
        finally:
            p.stdin.close()
            p.wait(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def ratio(v, base):
    return f"{v / base:.0f}x" if v and base and v / base >= 10 else \
        f"{v / base:.2f}x" if v and base else "-"


def report_lines(res):
    """The benchmark's section 7 of latest.md."""
    L = ["## 7. the scientific stack preloaded (`--preload " + PRELOAD + "`)", "",
         "airlock through `airlock mcp --preload " + PRELOAD + "` (a fresh copy per call); the "
         "others start a new python3 per run, which imports pandas each time.", ""]
    titles = {"pandas": "a. fresh run of `" + PANDAS_CODE + "`",
              "data": f"b. read a 10 MB CSV ({res.get('data_rows', 0)} rows) with pandas, "
                      "group, plot a PNG to /output (the file comes back)"}
    names = {"airlock-mcp": "airlock mcp (round trip)", "bwrap": "bubblewrap + python3",
             "python3": "python3, no isolation"}
    for w in ("pandas", "data"):
        rows = res.get(w) or {}
        base = (rows.get("airlock-mcp") or {}).get("median_ms")
        L += [f"### {titles[w]}", "", "| system | median ms | p90 ms | n | vs airlock |",
              "|---|---:|---:|---:|---:|"]
        for n in ("airlock-mcp", "bwrap", "python3"):
            r = rows.get(n)
            if r:
                L.append(f"| {names[n]} | {r['median_ms']:.2f} | {r['p90_ms']:.2f} | {r['n']} | "
                         f"{ratio(r['median_ms'], base)} |")
        L.append("")
    mem = res.get("memory") or {}
    if mem:
        base = (mem.get("airlock") or {}).get("pss_kib")
        L += ["### c. PSS of one idle, ready sandbox with them preloaded", "",
              "| system | PSS MiB | vs airlock | note |", "|---|---:|---:|---|"]
        for n in ("airlock", "python3"):
            r = mem.get(n)
            if r:
                L.append(f"| {n} | {r['pss_kib'] / 1024:.1f} | {ratio(r['pss_kib'], base)} | "
                         f"{r['note']} |")
        L.append("")
    for n, why in (res.get("not_measured") or {}).items():
        L.append(f"- {n} not measured: {why}")
    return L


def targets(res):
    out = []
    a = (res.get("pandas") or {}).get("airlock-mcp", {}).get("median_ms")
    b = (res.get("pandas") or {}).get("bwrap", {}).get("median_ms")
    if a and b:
        out.append({"what": "fresh pandas run (preloaded) >= 100x faster than bwrap + python3 "
                            "(200x stretch)",
                    "figure": f"{a:.2f} ms vs {b:.1f} ms ({b / a:.0f}x)",
                    "verdict": "met" if b / a >= 100 else "missed"})
    m = res.get("memory") or {}
    pa, pp = (m.get("airlock") or {}).get("pss_kib"), (m.get("python3") or {}).get("pss_kib")
    if pa and pp:
        out.append({"what": "idle sandbox with numpy, pandas, matplotlib preloaded within 1.25x "
                            "the PSS of one python3 that imported them",
                    "figure": f"{pa / 1024:.1f} MiB vs {pp / 1024:.1f} MiB ({pa / pp:.2f}x)",
                    "verdict": "met" if pa <= 1.25 * pp else "missed"})
    return out


if __name__ == "__main__":
    r = run(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build"),
            "--quick" in sys.argv)
    print("\n".join(report_lines(r)))
    for t in targets(r):
        print(f"- {t['what']}: {t['figure']} ({t['verdict']})")
    print(json.dumps({k: v for k, v in r.items()}, default=str)[:2000], file=sys.stderr)
