#!/usr/bin/python3
"""The sessions half of the soak (tests/soak.sh): N sessions opened and
closed through one `airlock mcp` process, each with a kept cell, a failed
cell that rolls back and a check of the state; every 20th failed cell is a
timeout, rolled back too. Each session is forked once (session_fork), the
fork's cell and failed cell checked too; the fork is closed before its
original in odd sessions (and then the original checks that no process of
the fork is left in the copy it shares), after it in even ones. Fails on a
wrong result, on growth of the server's resident memory beyond
SOAK_RSS_SLACK_KIB (default 1024), of its open descriptors or of its mounts
between the warm-up sessions and the end, on processes of the server left
between sessions, and on a non-zero exit.

Usage: soak_sessions.py AIRLOCK_BINARY SESSIONS [WARMUP]"""
import json
import os
import subprocess
import sys

airlock = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 100
slack = int(os.environ.get("SOAK_RSS_SLACK_KIB", "1024"))
failures = 0


def fail(msg):
    global failures
    failures += 1
    if failures <= 10:
        print(f"soak-sessions: FAILED: {msg}", file=sys.stderr, flush=True)


p = subprocess.Popen([airlock, "mcp", "--timeout", "2"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True, bufsize=1)
next_id = 0


def request(method, params):
    global next_id
    next_id += 1
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method,
                              "params": params}) + "\n")
    p.stdin.flush()
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("soak-sessions: the server ended")
        m = json.loads(line)
        if m.get("id") == next_id:
            return m.get("result")


RUN = "dev.airlock/run"


def tool(name, args):
    """The result of a tools/call, with the run record asked for."""
    return request("tools/call", {"name": name, "arguments": args, "_meta": {RUN: True}})


def record(r):
    """The run record of an execute_code result, with stdout (the first text item)."""
    rec = dict(r["_meta"][RUN])
    rec["stdout"] = r["content"][0].get("text", "") if rec["parts"][:1] == ["stdout"] else ""
    return rec


def status():
    rss = fds = 0
    with open(f"/proc/{p.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{p.pid}/fd"))
    with open(f"/proc/{p.pid}/mountinfo") as f:
        mounts = len(f.readlines())
    return rss, fds, mounts


def children():
    """Processes whose parent is the server, its sandboxes' included."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == p.pid:
                        n += 1
            except (OSError, IndexError, ValueError):
                pass
    return n


NPROC = "import os\nlen([d for d in os.listdir('/proc') if d.isdigit()])"

request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "soak", "version": "1"}})
base = None
for i in range(n):
    if i == warmup:
        base = status()
        base_children = children()
    r = tool("session_open", {})
    h = r["_meta"]["dev.airlock/session"]
    r = tool("execute_code", {"code": f"x = {i}", "session": h})
    if record(r)["state"] != "kept":
        fail(f"session {i}: {r}")
    bad = "x = -1\nwhile True: pass" if i % 20 == 0 else "x = -1\nraise ValueError"
    r = tool("execute_code", {"code": bad, "session": h})
    if record(r).get("state") != "rolled_back":
        fail(f"session {i}: not rolled back: {r}")
    r = tool("execute_code", {"code": "x", "session": h})
    if record(r)["stdout"] != f"{i}\n":
        fail(f"session {i}: {r}")
    r = tool("execute_code", {"code": NPROC, "session": h})
    nproc = record(r)["stdout"]
    r = tool("session_fork", {"session": h})
    if r.get("isError"):
        fail(f"session {i}: fork: {r}")
        continue
    f = r["_meta"]["dev.airlock/session"]
    r = tool("execute_code", {"code": "x += 1\nimport subprocess\n"
                              "c = subprocess.Popen(['sleep', '60'])\nx", "session": f})
    if record(r)["stdout"] != f"{i + 1}\n":
        fail(f"session {i}: fork: {r}")
    r = tool("execute_code", {"code": "x = -1\nraise ValueError", "session": f})
    if record(r).get("state") != "rolled_back":
        fail(f"session {i}: fork not rolled back: {r}")
    order = (f, h) if i % 2 else (h, f)
    r = tool("session_close", {"session": order[0]})
    if r.get("isError"):
        fail(f"session {i}: close: {r}")
    r = tool("execute_code", {"code": "x", "session": order[1]})
    if record(r)["stdout"] != (f"{i}\n" if i % 2 else f"{i + 1}\n"):
        fail(f"session {i}: after the first close: {r}")
    if i % 2:
        r = tool("execute_code", {"code": NPROC, "session": h})
        if record(r)["stdout"] != nproc:
            fail(f"session {i}: processes in the copy {nproc!r} -> {record(r)['stdout']!r}")
    r = tool("session_close", {"session": order[1]})
    if r.get("isError"):
        fail(f"session {i}: close: {r}")
end = status()
end_children = children()
print(f"soak-sessions: {n} sessions; server RSS {base[0]} -> {end[0]} KiB, fds {base[1]} -> "
      f"{end[1]}, mounts {base[2]} -> {end[2]}, child processes {base_children} -> "
      f"{end_children}", flush=True)
if end[0] - base[0] > slack:
    fail(f"resident memory grew by {end[0] - base[0]} KiB (slack {slack})")
if end[1] > base[1]:
    fail(f"open descriptors grew from {base[1]} to {end[1]}")
if end[2] > base[2]:
    fail(f"mounts grew from {base[2]} to {end[2]}")
if end_children > base_children:
    fail(f"processes grew from {base_children} to {end_children}")
p.stdin.close()
rc = p.wait(timeout=120)
if rc != 0:
    fail(f"the server exited with {rc}")
print(f"soak-sessions: {'passed' if not failures else f'{failures} failures'}")
sys.exit(1 if failures else 0)
