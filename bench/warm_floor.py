#!/usr/bin/python3
"""A warm call's floor: an MCP server on stdio, with no isolation, that runs
each `execute_code` in a child of the same interpreter forked ahead and
warmed, as a ready copy is (docs/performance.md, "A warm call's floor").

    /usr/bin/python3 bench/warm_floor.py [--preload MODULES] [--warm CODE]

What it keeps of a warm call through `airlock mcp`: the client's request
and response over pipes as JSON lines, one server process between the
client and the code, a child forked ahead by a process other than the
server (a server that forks takes a copy-on-write fault on each page it
writes after the fork, on the answer's path), the child warmed by two
passes of CODE (`print(0)` unless given) with its output captured, and the
next child asked for once the response is written. What it leaves out is
everything a sandbox adds: namespaces, mounts, cgroups and their
accounting, capabilities, Landlock, seccomp, the run's input and /output,
the end of a run as a script ends, and the result's contract. Its server is
Python, whose JSON and dispatch cost more than airlock's C: the floor errs
high, in airlock's favour.

Answers `initialize` and `tools/call` (the code in arguments.code; its
output as one text item); ignores notifications.
"""
import argparse
import gc
import io
import json
import os
import signal
import socket
import sys


def child_main(sock, code_r, out_w, warm):
    """A ready child: warmed, then the code of one call, its output sent."""
    sock.close()
    buf = io.StringIO()
    sys.stdout = buf
    for _ in range(2):
        exec(compile(warm, "<code>", "exec", dont_inherit=True), {"__name__": "__main__"})
    buf.seek(0)
    buf.truncate()
    chunks = []
    while True:
        b = os.read(code_r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    exec(compile(b"".join(chunks).decode(), "<code>", "exec", dont_inherit=True),
         {"__name__": "__main__"})
    os.write(out_w, buf.getvalue().encode())
    # The end, before the exit: the server reads to the end of the pipe,
    # and the exit (its memory unmapped) is off the answer's path, as a
    # copy's is.
    os.close(out_w)
    os._exit(0)


def zygote_main(sock, warm):
    """Forks a child per byte received and hands the server its two pipe
    ends (the code's writing end, the output's reading end)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    while sock.recv(1):
        code_r, code_w = os.pipe()
        out_r, out_w = os.pipe()
        if os.fork() == 0:
            os.close(code_w)
            os.close(out_r)
            try:
                child_main(sock, code_r, out_w, warm)
            finally:
                os._exit(0)  # never back into the zygote's loop
        socket.send_fds(sock, [b"c"], [code_w, out_r])
        for fd in (code_r, code_w, out_r, out_w):
            os.close(fd)
    os._exit(0)


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", default="")
    ap.add_argument("--warm", default="print(0)")
    args = ap.parse_args()
    for m in filter(None, args.preload.split(",")):
        __import__(m)
    gc.freeze()
    srv, zyg = socket.socketpair()
    if os.fork() == 0:
        srv.close()
        zygote_main(zyg, args.warm)
    zyg.close()
    srv.send(b"n")
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        call = msg.get("method") == "tools/call"
        if call:
            _, (code_w, out_r), _, _ = socket.recv_fds(srv, 1, 2)
            os.write(code_w, msg["params"]["arguments"]["code"].encode())
            os.close(code_w)
            text = read_all(out_r).decode()
            os.close(out_r)
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            result = {"protocolVersion": msg.get("params", {}).get("protocolVersion", ""),
                      "capabilities": {"tools": {}},
                      "serverInfo": {"name": "warm-floor", "version": "1"}}
        out.write((json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) +
                   "\n").encode())
        out.flush()
        if call:
            srv.send(b"n")


if __name__ == "__main__":
    main()
