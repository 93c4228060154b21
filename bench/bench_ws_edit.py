#!/usr/bin/env python3
"""A call after a one-file edit of a 10,000-file workspace, against an
unchanged call, through `airlock mcp --workspace`, side by side in one run.

Target (issue 40): the call after the edit costs at most 20 ms more than an
unchanged call (medians). Two cases, each in its own server:

  - "unheld": nothing holds the previous version when the edit comes (one
    agent, one call at a time): it is updated where it stands;
  - "held": an open session holds the version it began with, so the new
    version must leave it whole (before issue 40: a tree of 10,000 hard
    links; now an upper layer with the changed file over it).

Rounds alternate an unchanged call and an edit followed by its call, 50 ms
apart, so that load that comes and goes hits both alike. Prints a Markdown
table; --json prints the raw samples.

    bench/bench_ws_edit.py [BUILD_DIR] [--quick] [--json]
"""
import json
import os
import shutil
import sys
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_workspace import Mcp, make_tree, med  # noqa: E402


READ = "print(open('/input/d042/f04200.txt').read(), end='')"


def measure(exe, ws, rounds, held):
    m = Mcp(exe, ws, "bench_ws_edit")
    session = None
    try:
        if held:
            res = m.tool("session_open", {})
            session = res["_meta"]["dev.airlock/session"]
        target = os.path.join(ws, "d042", "f04200.txt")
        for _ in range(3):  # warm up
            m.call("print(1)")
        same, edit = [], []
        for i in range(rounds):
            dt, out = m.call(READ)
            same.append(dt)
            time.sleep(0.05)
            with open(target, "w") as f:
                f.write(f"edit {i} {held}\n")
            dt, out = m.call(READ)
            if out != f"edit {i} {held}\n":
                raise RuntimeError(f"the call after an edit saw {out!r}")
            edit.append(dt)
            time.sleep(0.05)
        if session:
            # The session still sees the version it began with.
            r = m.tool("execute_code", {"code": READ, "session": session})
            text = "".join(c.get("text", "") for c in r["content"] if c["type"] == "text")
            if not text.startswith("x" * 10):
                raise RuntimeError(f"the session saw {text[:40]!r}")
            m.tool("session_close", {"session": session})
    finally:
        m.close()
    return same, edit


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    build = args[0] if args else "build"
    exe = os.path.abspath(os.path.join(build, "airlock"))
    base = tempfile.mkdtemp(prefix="bench-wsedit.", dir=os.environ.get("TMPDIR", "/tmp"))
    rounds = 10 if quick else 30
    res = {}
    try:
        for held in (False, True):
            ws = os.path.join(base, "held" if held else "unheld")
            make_tree(ws)
            res["held" if held else "unheld"] = measure(exe, ws, rounds, held)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if "--json" in sys.argv:
        print(json.dumps(res))
        return
    print(f"| 10,000-file workspace, `airlock mcp -w` (medians of {rounds}) | unchanged call | "
          "call after a one-file edit | difference | target |")
    print("|---|---:|---:|---:|---|")
    for k, label in (("unheld", "previous version unheld"),
                     ("held", "previous version held by an open session")):
        s, e = res[k]
        print(f"| {label} | {med(s):.1f} ms | {med(e):.1f} ms | {med(e) - med(s):+.1f} ms | "
              "<= +20 ms |")


if __name__ == "__main__":
    main()
