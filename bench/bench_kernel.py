"""airlock kernel against Debian's ipykernel, side by side in one run, both
through jupyter_client (docs/jupyter.md): the time from starting a kernel
until its kernel_info_reply; the execute round trip of `1+1`, and of a
pandas cell with pandas preloaded (airlock: --preload pandas; ipykernel:
pandas imported by a first cell); and the PSS of an idle kernel's whole
process tree without preloads (the sum of every process's Pss). Starts and
rounds alternate between the two, so that a busy moment of the machine falls
on both. Prints one table and one JSON line.

Usage: bench_kernel.py BUILD_DIR [ROUNDS]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
AIRLOCK = os.path.abspath(os.path.join(build, "airlock"))

HOME = tempfile.mkdtemp(prefix="airlock-bench-kernel-")
os.environ["JUPYTER_DATA_DIR"] = os.path.join(HOME, "data")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(HOME, "runtime")
os.environ["JUPYTER_CONFIG_DIR"] = os.path.join(HOME, "config")
os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"

from jupyter_client.manager import KernelManager  # noqa: E402

CELL_PANDAS = "df = pd.DataFrame({'a': range(1000)})\nint(df.a.sum())"


def install():
    for name, extra in (("bench-airlock", []), ("bench-airlock-pandas", ["--preload", "pandas"])):
        subprocess.run([AIRLOCK, "kernel", "install", "--user", "--name", name, *extra],
                       check=True, capture_output=True)
    # Debian's ipykernel, by Debian's Python (not whatever python3 is first on PATH).
    d = os.path.join(HOME, "data", "kernels", "bench-ipykernel")
    os.makedirs(d)
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
                            "{connection_file}"], "display_name": "ipykernel",
                   "language": "python"}, f)


def start(name):
    t = time.perf_counter()
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)  # kernel_info_reply
    return km, kc, (time.perf_counter() - t) * 1000


def stop(km, kc):
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def round_trip(kc, code):
    t = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: None)
    ms = (time.perf_counter() - t) * 1000
    assert reply["content"]["status"] == "ok", reply["content"]
    return ms


def tree_pss_kib(pid):
    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True,
                           text=True).stdout.split()
    children = {}
    for c, p in zip(table[::2], table[1::2]):
        children.setdefault(int(p), []).append(int(c))
    todo, tree = [pid], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            tree.append(c)
            todo.append(c)
    total = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def main():
    install()
    starts = {"airlock": [], "ipykernel": []}
    for _ in range(5):
        for label, name in (("airlock", "bench-airlock"), ("ipykernel", "bench-ipykernel")):
            km, kc, ms = start(name)
            starts[label].append(ms)
            stop(km, kc)
    kernels = {}
    for label, name in (("airlock", "bench-airlock"), ("ipykernel", "bench-ipykernel"),
                        ("airlock+pandas", "bench-airlock-pandas"),
                        ("ipykernel+pandas", "bench-ipykernel")):
        kernels[label] = start(name)[:2]
    round_trip(kernels["ipykernel+pandas"][1], "import pandas as pd")
    round_trip(kernels["airlock+pandas"][1], "import pandas as pd")
    trips = {k: [] for k in kernels}
    for _ in range(rounds):
        for label, (km, kc) in kernels.items():
            trips[label].append(round_trip(kc, CELL_PANDAS if "pandas" in label else "1+1"))
    # Idle, without preloads: a moment after the last reply.
    time.sleep(1)
    pss = {label: tree_pss_kib(kernels[label][0].provisioner.process.pid)
           for label in ("airlock", "ipykernel")}
    for km, kc in kernels.values():
        stop(km, kc)
    med = statistics.median
    print(f"{'':34} {'airlock kernel':>16} {'ipykernel':>12}")
    print(f"{'start to kernel_info_reply, ms':34} {med(starts['airlock']):16.1f} "
          f"{med(starts['ipykernel']):12.1f}")
    print(f"{'execute 1+1 round trip, ms':34} {med(trips['airlock']):16.2f} "
          f"{med(trips['ipykernel']):12.2f}")
    print(f"{'execute pandas cell, ms':34} {med(trips['airlock+pandas']):16.2f} "
          f"{med(trips['ipykernel+pandas']):12.2f}")
    print(f"{'idle PSS of the process tree, MiB':34} {pss['airlock'] / 1024:16.1f} "
          f"{pss['ipykernel'] / 1024:12.1f}")
    print(json.dumps({"bench": "kernel", "rounds": rounds,
                      "start_ms": {k: med(v) for k, v in starts.items()},
                      "execute_ms": {k: med(v) for k, v in trips.items()},
                      "idle_pss_kib": pss}))


if __name__ == "__main__":
    try:
        main()
    finally:
        import shutil
        shutil.rmtree(HOME, ignore_errors=True)
