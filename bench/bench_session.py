"""Sessions through `airlock mcp`, side by side in one run: a session cell of
`x += 1; print(x)` against a fresh `print(1)` run, both as execute_code
calls 10 ms apart on one server, and a local notebook kernel's execute round
trip of the same cell (python3-ipykernel with jupyter_client, when
installed). Rounds alternate between the three, so that a busy moment of the
machine falls on all of them. Prints one table and one JSON line.

Usage: bench_session.py BUILD_DIR [ROUNDS]"""
import json
import os
import statistics
import subprocess
import sys
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
GAP_S = 0.010


class Mcp:
    def __init__(self):
        self.p = subprocess.Popen([os.path.join(build, "airlock"), "mcp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.n = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})

    def request(self, method, params):
        self.n += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                       "params": params}) + "\n")
        self.p.stdin.flush()
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.n:
                return m["result"]

    def call(self, args):
        return self.request("tools/call", {"name": "execute_code", "arguments": args,
                                           "_meta": {RUN: True}})

    def close(self):
        self.p.stdin.close()
        self.p.wait()


# The run record of a call, asked for with each call (README, "What the client sees").
RUN = "dev.airlock/run"

def kernel():
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return None, None
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)

    def run(code):
        msg_id = kc.execute(code)
        while True:
            m = kc.get_iopub_msg(timeout=30)
            if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"):
                break
        kc.get_shell_msg(timeout=30)
    return run, lambda: (kc.stop_channels(), km.shutdown_kernel(now=True))


def median_ms(xs):
    return statistics.median(xs) * 1000 if xs else -1


def main():
    m = Mcp()
    h = m.request("tools/call", {"name": "session_open",
                                 "arguments": {}})["_meta"]["dev.airlock/session"]
    m.call({"code": "x = 0", "session": h})
    krun, kstop = kernel()
    if krun:
        krun("x = 0")
    fresh, cell, kern = [], [], []
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
        if krun:
            time.sleep(GAP_S)
            t = time.perf_counter()
            krun("x += 1; print(x)")
            kern.append(time.perf_counter() - t)
    m.close()
    if kstop:
        kstop()
    out = {"rounds": rounds, "fresh_print_median_ms": median_ms(fresh),
           "session_cell_median_ms": median_ms(cell),
           "kernel_execute_median_ms": median_ms(kern),
           "fork_ms": None}
    print(f"Sessions through airlock mcp, {rounds} rounds, calls {GAP_S * 1000:.0f} ms apart:")
    print(f"  fresh run of print(1)              median {out['fresh_print_median_ms']:.2f} ms")
    print(f"  session cell x += 1; print(x)      median {out['session_cell_median_ms']:.2f} ms"
          f"  ({out['session_cell_median_ms'] / out['fresh_print_median_ms']:.2f}x the fresh run)")
    if kern:
        print(f"  ipykernel execute round trip       median {out['kernel_execute_median_ms']:.2f} ms"
              f"  ({out['kernel_execute_median_ms'] / out['session_cell_median_ms']:.2f}x the cell)")
    else:
        print("  ipykernel: not installed (python3-ipykernel, python3-jupyter-client): skipped")
    print("  fork of a session: not implemented yet")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
