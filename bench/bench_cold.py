#!/usr/bin/python3
"""A sandbox's cold start, side by side with bwrap: the whole
`airlock run -c 'print(1)'` command (the command's own start, the template's
start, the first copy and its run, the sandbox's close, the exit) against
`bwrap ... python3 -c 'print(1)'` and python3 alone, and, where
bench/run.sh built it, the library's cold start (`bench_workloads cold`: a
new sandbox and its first run, timed inside the process). Round after
round, one sample of each in a new random order, 10 ms apart, so that load
that comes and goes on a shared machine hits each alike; medians, p90 and
the ratio of each median to bwrap's.

Called by bench.py (`bench.py BUILD --only cold`); alone:
    /usr/bin/python3 bench/bench_cold.py BUILD [--quick] [--against OTHER_BUILD]
--against adds the same command of another build (say, main's) to the same
rounds. Standard library only.
"""
import json
import os
import random
import subprocess
import sys
import time

PY = "/usr/bin/python3"
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))] if s else None


def summary(samples):
    return {"median_ms": pct(samples, 0.5), "p90_ms": pct(samples, 0.9),
            "min_ms": min(samples), "n": len(samples), "samples_ms": samples}


def timed(argv, want=b"1\n"):
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=120)
    ms = (time.perf_counter() - t) * 1e3
    if p.returncode != 0 or p.stdout != want:
        raise RuntimeError(f"{argv[0]} exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).decode(errors='replace')[:300]}")
    return ms


def library_cold(build):
    p = subprocess.run([os.path.join(build, "bench_workloads"), "cold", "1"],
                       stdout=subprocess.PIPE, timeout=120, check=True)
    return json.loads(p.stdout)["samples_ms"][0]


def run(build, quick, log=lambda m: None, against=None):
    rounds = 15 if quick else 40
    systems = {"airlock-run": lambda: timed([os.path.join(build, "airlock"), "run", "-c",
                                             "print(1)"])}
    if against:
        systems["airlock-run-against"] = lambda: timed(
            [os.path.join(against, "airlock"), "run", "-c", "print(1)"])
    if os.access(os.path.join(build, "bench_workloads"), os.X_OK):
        systems["airlock-library"] = lambda: library_cold(build)
    systems["bwrap"] = lambda: timed(BWRAP + [PY, "-c", "print(1)"])
    systems["python3"] = lambda: timed([PY, "-c", "print(1)"])
    log(f"- cold start: {rounds} rounds of {', '.join(systems)}")
    for fn in systems.values():
        fn()  # untimed: warms the page cache
    samples = {k: [] for k in systems}
    order = random.Random(3)
    names = list(systems)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            time.sleep(0.01)
            samples[name].append(systems[name]())
    res = {k: summary(v) for k, v in samples.items()}
    res["against"] = against
    res["loadavg"] = os.getloadavg()
    return res


LABELS = {"airlock-run": "`airlock run -c 'print(1)'` (whole command)",
          "airlock-run-against": "the same, build given with --against",
          "airlock-library": "library: new sandbox + first run (bench_workloads cold)",
          "bwrap": "`bwrap ... python3 -c 'print(1)'`",
          "python3": "`python3 -c 'print(1)'`, no isolation"}


def report_lines(res):
    b = res["bwrap"]["median_ms"]
    L = ["## cold start: a new sandbox and its first run, side by side", "",
         "| | median ms | p90 ms | / bwrap |", "|---|---:|---:|---:|"]
    for k in ("airlock-run", "airlock-run-against", "airlock-library", "bwrap", "python3"):
        if k in res:
            r = res[k]
            L.append(f"| {LABELS[k]} | {r['median_ms']:.1f} | {r['p90_ms']:.1f} | "
                     f"{r['median_ms'] / b:.2f}x |")
    if res.get("against"):
        L += ["", f"--against: {res['against']}"]
    L += ["", f"{res['bwrap']['n']} rounds, load average at the end "
              f"{' '.join(f'{x:.2f}' for x in res['loadavg'])}"]
    return L


def targets(res):
    c, b = res["airlock-run"]["median_ms"], res["bwrap"]["median_ms"]
    return [{"what": "cold start (`airlock run -c 'print(1)'`, whole command) <= 2x one "
                     "bwrap+python3 run",
             "figure": f"{c:.1f} ms vs 2 x {b:.1f} ms ({c / b:.2f}x)",
             "verdict": "met" if c <= 2 * b else "missed"}]


if __name__ == "__main__":
    args = sys.argv[1:]
    against = None
    if "--against" in args:
        i = args.index("--against")
        against = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    r = run(os.path.abspath(args[0]), "--quick" in args,
            lambda m: print(m, file=sys.stderr), against)
    print("\n".join(report_lines(r)) + "\n")
    print("\n".join(f"- {t['what']}: {t['figure']} -- **{t['verdict']}**" for t in targets(r)))
