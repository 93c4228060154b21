#!/usr/bin/python3
"""CPU-bound pure Python in the guest against /usr/bin/python3 on the host,
side by side in one run: the same script, alternately in `airlock run` and in
python3, each timing its own work (the best of its inner rounds), so that
start-up costs are left out. The time is the thread's CPU time, not the wall
clock: on a shared machine a run's wall time is mostly the other processes'
(a round of 14 ms of CPU took 14 to 55 ms here), whatever the interpreter.

Called by bench.py (`make bench`); alone: bench/bench_cpu.py BUILD [--quick].
Standard library only.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"

# Pure Python the interpreter itself runs (no C library does the work):
# calls, integer and float arithmetic, dicts, lists, strings and generators,
# and statistics' exact (Fraction-based) variance.
WORK = r'''
import statistics, time
from fractions import Fraction

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def words(n):
    counts = {}
    for i in range(n):
        w = "w%d" % (i * 7919 % 1000)
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]

def primes(n):
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, int(k ** 0.5) + 1)))

def work():
    fib(20)
    words(30000)
    primes(8000)
    statistics.variance([Fraction(i % 97, 7) for i in range(1500)])

work()
best = float("inf")
for _ in range(ROUNDS):
    t = time.thread_time()
    work()
    best = min(best, time.thread_time() - t)
print(f"{best * 1000:.3f}")
'''


# The host's libpython3.11.so embedded by a program of a dozen lines, without
# any sandbox: what the guest runs is this library, where /usr/bin/python3 has
# the interpreter linked into its executable.
EMBED_C = r'''
#include <Python.h>
int main(int argc, char **argv)
{
        PyConfig c;
        PyConfig_InitIsolatedConfig(&c);
        PyStatus st = Py_InitializeFromConfig(&c);
        if (PyStatus_Exception(st) || argc < 3)
                return 2;
        int r = PyRun_SimpleString(argv[2]);
        Py_Finalize();
        return r ? 1 : 0;
}
'''


def build_embedder(tmp):
    """Compiles EMBED_C against Debian's python3-embed; returns its path, or
    raises with the compiler's complaint."""
    src, exe = os.path.join(tmp, "embed.c"), os.path.join(tmp, "embed")
    with open(src, "w") as f:
        f.write(EMBED_C)
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "python3-embed"],
                        capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-O2", "-o", exe, src, *pc], capture_output=True, text=True,
                   check=True)
    return exe


def one(argv, code):
    p = subprocess.run([*argv, code], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {p.stderr[-300:]}")
    return float(p.stdout.strip().splitlines()[-1])


def run(build, quick, log=print):
    """The medians of the best-of-rounds times (ms) in the guest and on the
    host, and their ratio, over alternated runs."""
    airlock = os.path.join(build, "airlock")
    pairs = 3 if quick else 9  # rounds of one run each
    code = WORK.replace("ROUNDS", "3" if quick else "5")
    log(f"- CPU-bound pure Python, guest vs host python3 ({pairs} alternated rounds)")
    samples = {"guest": [], "host": [], "embedded": []}
    argvs = {"guest": [airlock, "run", "--timeout", "120", "-c"], "host": [PY, "-c"]}
    with tempfile.TemporaryDirectory(prefix="airlock-bench-cpu.") as tmp:
        try:
            argvs["embedded"] = [build_embedder(tmp), "-c"]
        except (OSError, subprocess.CalledProcessError) as e:
            log(f"  no embedding program: {e}")
        for i in range(pairs):
            # Alternated, each round in another order.
            names = list(argvs)
            names = names[i % len(names):] + names[:i % len(names)]
            for name in names:
                samples[name].append(one(argvs[name], code))
    g, h = statistics.median(samples["guest"]), statistics.median(samples["host"])
    res = {"guest_ms": g, "host_ms": h, "ratio": g / h, "pairs": pairs,
           "guest_samples_ms": samples["guest"], "host_samples_ms": samples["host"]}
    if samples["embedded"]:
        e = statistics.median(samples["embedded"])
        res.update(embedded_ms=e, embedded_ratio=e / h, guest_vs_embedded=g / e,
                   embedded_samples_ms=samples["embedded"])
    return res


def report_lines(res):
    if "skipped" in res:
        return ["## 9. CPU-bound pure Python, guest vs host", "", f"not measured: {res['skipped']}"]
    return ["## 9. CPU-bound pure Python, guest vs host", "",
            "The same script (recursive calls, dict and string work, trial division, "
            "statistics.variance of Fractions) timed by itself (CPU time of its thread, best "
            "of its rounds), in "
            f"`airlock run`, in {PY} and in a program embedding the host's libpython, "
            f"alternated, {res['pairs']} rounds; medians.", "",
            "| where | median ms |", "|---|---:|",
            f"| guest (`airlock run`) | {res['guest_ms']:.1f} |",
            f"| host python3 | {res['host_ms']:.1f} |"] + (
            [f"| host, libpython3.11.so embedded, no sandbox | {res['embedded_ms']:.1f} |"]
            if "embedded_ms" in res else []) + [
            "", f"Ratio guest / host python3: **{res['ratio']:.2f}**" + (
                f"; embedded libpython / host python3: {res['embedded_ratio']:.2f}; "
                f"guest / embedded libpython: {res['guest_vs_embedded']:.2f} (what the "
                "sandbox itself costs)." if "embedded_ms" in res else "."), ""]


if __name__ == "__main__":
    res = run(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build"),
              "--quick" in sys.argv, log=lambda m: print(m, file=sys.stderr))
    print("\n".join(report_lines(res)))
    print(json.dumps(res), file=sys.stderr)
