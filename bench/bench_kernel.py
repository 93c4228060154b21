"""airlock kernel against Debian's ipykernel, side by side in one run, both
through jupyter_client (docs/jupyter.md): the time from starting a kernel
until its kernel_info_reply; the execute round trip of `1+1`, and of a
pandas cell with pandas preloaded (airlock: --preload pandas; ipykernel:
pandas imported by a first cell), the pandas cells in a row on one kernel
(as nbclient sends a notebook's cells; the rounds alternate the kernels, so
there a kernel's next cell comes after three other round trips), and the
pandas cell again 100 ms after
the last answer, as a person at a notebook runs cells; and the PSS of an idle kernel's whole
process tree without preloads (the sum of every process's Pss). For the
airlock kernels also the minor faults of the session's active process per
cell (during the round trip) and between cells (the pre-copy of the pages
the last cell wrote, docs/sessions.md, and the next cell base's fork), from
its /proc/PID/stat. Starts and
rounds alternate between the two, so that a busy moment of the machine falls
on both. Prints one table and one JSON line. The client side is
jupyter_kernels.py's, which bench_session.py shares.

Usage: bench_kernel.py BUILD_DIR [ROUNDS]"""
import json
import os
import statistics
import sys
import time

import jupyter_kernels as jk

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
AIRLOCK = os.path.abspath(os.path.join(build, "airlock"))

CELL_PANDAS = "df = pd.DataFrame({'a': range(1000)})\nint(df.a.sum())"


def install():
    jk.install_airlock(AIRLOCK, "bench-airlock")
    jk.install_airlock(AIRLOCK, "bench-airlock-pandas", "--preload", "pandas")
    jk.install_ipykernel()


def main():
    install()
    starts = {"airlock": [], "ipykernel": []}
    for _ in range(5):
        for label, name in (("airlock", "bench-airlock"), ("ipykernel", jk.IPYKERNEL)):
            km, kc, ms = jk.start(name)
            starts[label].append(ms)
            jk.stop(km, kc)
    kernels = {}
    for label, name in (("airlock", "bench-airlock"), ("ipykernel", jk.IPYKERNEL),
                        ("airlock+pandas", "bench-airlock-pandas"),
                        ("ipykernel+pandas", jk.IPYKERNEL)):
        kernels[label] = jk.start(name)[:2]
    jk.round_trip(kernels["ipykernel+pandas"][1], "import pandas as pd")
    jk.round_trip(kernels["airlock+pandas"][1], "import pandas as pd")
    trips = {k: [] for k in kernels}
    active = {k: jk.active_pid(km, kc) for k, (km, kc) in kernels.items() if "airlock" in k}
    faults = {k: ([], []) for k in active}
    last = {}
    for _ in range(rounds):
        for label, (km, kc) in kernels.items():
            before = jk.minflt(active[label]) if label in active else 0
            if label in last:
                faults[label][1].append(before - last[label])
            trips[label].append(jk.round_trip(kc, CELL_PANDAS if "pandas" in label else "1+1"))
            if label in active:
                last[label] = jk.minflt(active[label])
                faults[label][0].append(last[label] - before)
    # The rounds above alternate the four kernels, so a kernel's next cell
    # comes after three other round trips. nbclient and papermill send a
    # notebook's next cell as soon as the last one is answered: blocks of
    # pandas cells in a row on one kernel, the kernels alternating by block.
    in_row = {k: [] for k in ("airlock+pandas", "ipykernel+pandas")}
    for _ in range(4):
        for label in in_row:
            for _ in range(max(10, rounds // 4)):
                in_row[label].append(jk.round_trip(kernels[label][1], CELL_PANDAS))
    # A notebook's cells come seconds apart, not back to back: the pandas
    # cell again, each 100 ms after the kernel's last answer, so that what a
    # kernel does between cells (airlock's rollback copy and its pre-copy)
    # is done before the next one, as it is for a person at a notebook.
    paced = {k: [] for k in ("airlock+pandas", "ipykernel+pandas")}
    for _ in range(max(10, rounds // 5)):
        for label in paced:
            time.sleep(0.1)
            paced[label].append(jk.round_trip(kernels[label][1], CELL_PANDAS))
    # Idle, without preloads: a moment after the last reply.
    time.sleep(1)
    pss = {label: jk.tree_pss_kib(kernels[label][0].provisioner.process.pid)
           for label in ("airlock", "ipykernel")}
    for km, kc in kernels.values():
        jk.stop(km, kc)
    med = statistics.median
    print(f"{'':34} {'airlock kernel':>16} {'ipykernel':>12}")
    print(f"{'start to kernel_info_reply, ms':34} {med(starts['airlock']):16.1f} "
          f"{med(starts['ipykernel']):12.1f}")
    print(f"{'execute 1+1 round trip, ms':34} {med(trips['airlock']):16.2f} "
          f"{med(trips['ipykernel']):12.2f}")
    print(f"{'execute pandas cell, ms':34} {med(trips['airlock+pandas']):16.2f} "
          f"{med(trips['ipykernel+pandas']):12.2f}")
    print(f"{'pandas cells in a row, one kernel':34} {med(in_row['airlock+pandas']):16.2f} "
          f"{med(in_row['ipykernel+pandas']):12.2f}")
    print(f"{'pandas cell 100 ms after the last':34} {med(paced['airlock+pandas']):16.2f} "
          f"{med(paced['ipykernel+pandas']):12.2f}")
    print(f"{'idle PSS of the process tree, MiB':34} {pss['airlock'] / 1024:16.1f} "
          f"{pss['ipykernel'] / 1024:12.1f}")
    for label, (during, between) in faults.items():
        print(f"{label + ' faults per cell, between':34} {med(during):16.0f} {med(between):12.0f}")
    print(json.dumps({"bench": "kernel", "rounds": rounds,
                      "faults": {k: {"during": med(d), "between": med(b)}
                                 for k, (d, b) in faults.items()},
                      "start_ms": {k: med(v) for k, v in starts.items()},
                      "execute_ms": {k: med(v) for k, v in trips.items()},
                      "in_row_pandas_ms": {k: med(v) for k, v in in_row.items()},
                      "paced_pandas_ms": {k: med(v) for k, v in paced.items()},
                      "idle_pss_kib": pss}))


if __name__ == "__main__":
    try:
        main()
    finally:
        jk.cleanup()
