"""Sessions through `airlock mcp`, side by side in one run: a session cell of
`x += 1; print(x)` against a fresh `print(1)` run, both as execute_code
calls 10 ms apart on one server, and a local notebook kernel's execute round
trip of the same cell (python3-ipykernel with jupyter_client, when
installed). Rounds alternate between the three, so that a busy moment of the
machine falls on all of them. Then forks (session_fork) of a session that
holds a 100 MB pandas DataFrame, side by side with fresh session_open
calls, alternating: the time until the call returns (the new handle can run
a cell), the time with its first cell, and the PSS the new session adds to
the server's whole process tree before either side writes (the sum of
every process's Pss, before and after). Prints one table and one JSON line.

Usage: bench_session.py BUILD_DIR [ROUNDS]"""
import json
import os
import statistics
import sys
import time

import jupyter_kernels as jk
from mcp_stdio import McpStdio

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
GAP_S = 0.010


class Mcp(McpStdio):
    def __init__(self):
        # The server's stderr stays the bench's.
        super().__init__([os.path.join(build, "airlock"), "mcp"], client="bench", stderr=None)

    def call(self, args):
        return self.rpc("tools/call", {"name": "execute_code", "arguments": args,
                                       "_meta": {RUN: True}})

    def close(self):
        super().close(timeout=None)


# The run record of a call, asked for with each call (README, "What the client sees").
RUN = "dev.airlock/run"

def kernel():
    """A local ipykernel (Debian's, jupyter_kernels.py): (run, stop), or
    (None, None) without jupyter_client."""
    if not jk.available():
        return None, None
    jk.install_ipykernel()
    km, kc, _ = jk.start(jk.IPYKERNEL)
    return (lambda code: jk.round_trip(kc, code)), (lambda: jk.stop(km, kc))


def median_ms(xs):
    return statistics.median(xs) * 1000 if xs else -1


tree_pss_kib = jk.tree_pss_kib


FORK_ROUNDS = 20
# About 100 MB of float64 (13 million), as the target names.
DATAFRAME = ("import numpy as np, pandas as pd\n"
             "df = pd.DataFrame(np.random.rand(13_000_000, 1))\n"
             "print(df.memory_usage(deep=True).sum() >> 20)")


def bench_fork(m):
    """Fork against open: medians of the call, of the call and a first cell
    (sent 50 ms later, and sent at once), and the PSS added (KiB), over
    FORK_ROUNDS alternating rounds."""
    h = m.rpc("tools/call", {"name": "session_open",
                                 "arguments": {}})["_meta"]["dev.airlock/session"]
    r = m.call({"code": DATAFRAME, "session": h})
    mib = int(r["content"][0]["text"])
    m.call({"code": "df.shape", "session": h})  # its cell base is settled
    res = {"fork": [], "fork_cell": [], "fork_pss": [], "open": [], "open_cell": [],
           "open_pss": [], "fork_now": [], "cell": []}
    for i in range(FORK_ROUNDS):
        for kind in ("fork", "open"):
            time.sleep(0.05)
            pss0 = tree_pss_kib(m.p.pid)
            t = time.perf_counter()
            if kind == "fork":
                r = m.rpc("tools/call", {"name": "session_fork", "arguments": {"session": h}})
            else:
                r = m.rpc("tools/call", {"name": "session_open", "arguments": {}})
            t_call = time.perf_counter() - t
            n = r["_meta"]["dev.airlock/session"]
            # The new session's processes (its cell base included, taken
            # at once) are there; nothing has written yet.
            time.sleep(0.05)
            res[kind + "_pss"].append(tree_pss_kib(m.p.pid) - pss0)
            t = time.perf_counter()
            r = m.call({"code": "print(1)", "session": n})
            t_cell = time.perf_counter() - t
            assert r["content"][0]["text"] == "1\n", r
            res[kind].append(t_call)
            res[kind + "_cell"].append(t_call + t_cell)
            if kind == "fork" and i == 0:
                r = m.call({"code": "df.shape", "session": n})
                assert r["content"][0]["text"] == "(13000000, 1)\n", r
            m.rpc("tools/call", {"name": "session_close", "arguments": {"session": n}})
        # A cell sent the moment the fork's call returns waits for the
        # fork's own rollback copy; against the same cell in the session.
        time.sleep(0.05)
        t = time.perf_counter()
        r = m.rpc("tools/call", {"name": "session_fork", "arguments": {"session": h}})
        n = r["_meta"]["dev.airlock/session"]
        r = m.call({"code": "print(1)", "session": n})
        res["fork_now"].append(time.perf_counter() - t)
        assert r["content"][0]["text"] == "1\n", r
        m.rpc("tools/call", {"name": "session_close", "arguments": {"session": n}})
        time.sleep(0.05)
        t = time.perf_counter()
        r = m.call({"code": "print(1)", "session": h})
        res["cell"].append(time.perf_counter() - t)
    m.rpc("tools/call", {"name": "session_close", "arguments": {"session": h}})
    out = {"dataframe_mib": mib, "fork_min_ms": min(res["fork"]) * 1000,
           "open_min_ms": min(res["open"]) * 1000}
    for k, v in res.items():
        out[k + ("_median_kib" if k.endswith("pss") else "_median_ms")] = (
            statistics.median(v) if k.endswith("pss") else median_ms(v))
    return out


def main():
    m = Mcp()
    h = m.rpc("tools/call", {"name": "session_open",
                                 "arguments": {}})["_meta"]["dev.airlock/session"]
    m.call({"code": "x = 0", "session": h})
    krun, kstop = kernel()
    if krun:
        krun("x = 0")
    fresh, cell, failed, kern = [], [], [], []
    for i in range(10):  # warm-up
        m.call({"code": "print(1)"})
        m.call({"code": "x += 1; print(x)", "session": h})
    for i in range(rounds):
        time.sleep(GAP_S)
        t = time.perf_counter()
        r = m.call({"code": "print(1)"})
        fresh.append(time.perf_counter() - t)
        assert r["content"][0]["text"] == "1\n", r
        time.sleep(GAP_S)
        t = time.perf_counter()
        r = m.call({"code": "x += 1; print(x)", "session": h})
        cell.append(time.perf_counter() - t)
        assert r["_meta"][RUN]["state"] == "kept", r
        time.sleep(GAP_S)
        t = time.perf_counter()
        r = m.call({"code": "raise ValueError('no')", "session": h})
        failed.append(time.perf_counter() - t)
        assert r["_meta"][RUN]["state"] == "rolled_back", r
        if krun:
            time.sleep(GAP_S)
            t = time.perf_counter()
            krun("x += 1; print(x)")
            kern.append(time.perf_counter() - t)
    if kstop:
        kstop()
    fork = bench_fork(m)
    m.close()
    out = {"rounds": rounds, "fresh_print_median_ms": median_ms(fresh),
           "session_cell_median_ms": median_ms(cell),
           "failed_cell_median_ms": median_ms(failed),
           "kernel_execute_median_ms": median_ms(kern), "fork": fork}
    print(f"Sessions through airlock mcp, {rounds} rounds, calls {GAP_S * 1000:.0f} ms apart:")
    print(f"  fresh run of print(1)              median {out['fresh_print_median_ms']:.2f} ms")
    print(f"  session cell x += 1; print(x)      median {out['session_cell_median_ms']:.2f} ms"
          f"  ({out['session_cell_median_ms'] / out['fresh_print_median_ms']:.2f}x the fresh run)")
    print(f"  session cell that fails (rolled back) median {out['failed_cell_median_ms']:.2f} ms")
    if kern:
        print(f"  ipykernel execute round trip       median {out['kernel_execute_median_ms']:.2f} ms"
              f"  ({out['kernel_execute_median_ms'] / out['session_cell_median_ms']:.2f}x the cell)")
    else:
        print("  ipykernel: not installed (python3-ipykernel, python3-jupyter-client): skipped")
    print(f"Fork of a session holding a {fork['dataframe_mib']} MiB DataFrame, against a fresh "
          f"session_open, {FORK_ROUNDS} rounds each:")
    print(f"  session_fork call                  median {fork['fork_median_ms']:.2f} ms"
          f" (min {fork['fork_min_ms']:.2f})"
          f"   with its first cell {fork['fork_cell_median_ms']:.2f} ms"
          f"   PSS added {fork['fork_pss_median_kib'] / 1024:.2f} MiB")
    print(f"  session_fork, then a cell at once  median {fork['fork_now_median_ms']:.2f} ms"
          f"   (the same cell in the session {fork['cell_median_ms']:.2f} ms)")
    print(f"  session_open call                  median {fork['open_median_ms']:.2f} ms"
          f" (min {fork['open_min_ms']:.2f})"
          f"   with its first cell {fork['open_cell_median_ms']:.2f} ms"
          f"   PSS added {fork['open_pss_median_kib'] / 1024:.2f} MiB")
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    finally:
        jk.cleanup()
