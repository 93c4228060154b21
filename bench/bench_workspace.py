#!/usr/bin/env python3
"""Workspaces the size of real repositories, side by side in one run:

  1. `tools/call` of print(1) through `airlock mcp` with an unchanged
     workspace of 10,000 files of 1 KB in 100 folders, against the same call
     with a one-file workspace (target: within 1.5x);
  2. the next call after editing one file of the large workspace (it must see
     the edit) against the whole-command cold start `airlock run -c
     'print(1)'` with a one-file workspace (target: under 3x).

The two servers' calls are interleaved round after round, 10 ms apart, so
load that comes and goes hits both alike. Prints a Markdown table, and the
raw samples as JSON with --json.

    bench/bench_workspace.py [BUILD_DIR] [--quick] [--json]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from mcp_stdio import McpStdio


class Mcp(McpStdio):
    """airlock mcp -w WS on stdio, one request at a time (bench_ws_edit.py
    uses it too)."""

    def __init__(self, exe, ws, client="bench_workspace"):
        super().__init__([exe, "mcp", "-w", ws], client=client)

    def close(self):
        super().close(timeout=300)


def make_tree(root, files=10000, per_dir=100, size=1024):
    data = b"x" * (size - 1) + b"\n"
    for i in range(files):
        d = os.path.join(root, f"d{i // per_dir:03d}")
        if i % per_dir == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:05d}.txt"), "wb") as f:
            f.write(data)


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    build = args[0] if args else "build"
    exe = os.path.abspath(os.path.join(build, "airlock"))
    base = tempfile.mkdtemp(prefix="bench-ws.", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        big, one = os.path.join(base, "big"), os.path.join(base, "one")
        os.makedirs(one)
        with open(os.path.join(one, "a.txt"), "w") as f:
            f.write("a\n")
        make_tree(big)
        t = time.perf_counter()
        m_big = Mcp(exe, big)  # the server builds its sandbox at start-up
        first_big_ms = (time.perf_counter() - t) * 1e3
        m_one = Mcp(exe, one)
        rounds = 100 if quick else 400
        s_big, s_one = [], []
        for i in range(rounds + 10):
            order = [(m_big, s_big), (m_one, s_one)]
            if i % 2:
                order.reverse()
            for m, s in order:
                dt, _ = m.call("print(1)")
                if i >= 10:  # the first rounds warm up
                    s.append(dt)
                time.sleep(0.01)
        edits = 5 if quick else 9
        s_edit, s_cold = [], []
        target = os.path.join(big, "d042", "f04200.txt")
        for i in range(edits):
            # The cold start, interleaved with the edits.
            t = time.perf_counter()
            p = subprocess.run([exe, "run", "-w", one, "-c", "print(1)"], capture_output=True)
            s_cold.append((time.perf_counter() - t) * 1e3)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.decode(errors="replace"))
            with open(target, "w") as f:
                f.write(f"edit {i}\n")
            dt, out = m_big.call("print(open('/input/d042/f04200.txt').read(), end='')")
            if out != f"edit {i}\n":
                raise RuntimeError(f"the call after an edit saw {out!r}")
            s_edit.append(dt)
            time.sleep(0.2)
        m_big.close()
        m_one.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    res = {
        "call_10k_ms": med(s_big), "call_1_ms": med(s_one),
        "edit_call_10k_ms": med(s_edit), "cold_run_1_ms": med(s_cold),
        "server_start_10k_ms": first_big_ms,
        "samples": {"call_10k": s_big, "call_1": s_one, "edit_call_10k": s_edit,
                    "cold_run_1": s_cold},
    }
    if "--json" in sys.argv:
        print(json.dumps(res))
        return
    r1 = res["call_10k_ms"] / res["call_1_ms"]
    r2 = res["edit_call_10k_ms"] / res["cold_run_1_ms"]
    print(f"| workspace (medians; {len(s_big)} calls each, {edits} edits) | 10,000 files | "
          f"reference | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(f"| `tools/call` print(1), unchanged workspace vs one-file workspace | "
          f"{res['call_10k_ms']:.2f} ms | {res['call_1_ms']:.2f} ms | {r1:.2f} | <= 1.5 |")
    print(f"| next call after editing one file vs cold `airlock run -c 'print(1)'` (one file) | "
          f"{res['edit_call_10k_ms']:.1f} ms | {res['cold_run_1_ms']:.1f} ms | {r2:.2f} | < 3 |")
    print(f"\nServer start-up with the 10,000-file workspace (stage + template + describe): "
          f"{first_big_ms:.0f} ms. Data under {os.environ.get('TMPDIR', '/tmp')}.")


if __name__ == "__main__":
    main()
