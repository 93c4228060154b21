"""Leak check: many runs with a tool call each, no fd growth, RSS growth
under 1 MiB after warm-up. AIRLOCK_PY_LEAK_RUNS sets the count (make check
runs 1000; make soak 10000)."""
import os
import resource
import time

import airlock

RUNS = int(os.environ.get("AIRLOCK_PY_LEAK_RUNS", "1000"))


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds():
    return len(os.listdir("/proc/self/fd"))


def fds_within(most, seconds=10):
    """The open fds once they are at most `most`, or after `seconds`: the
    sandbox's closer thread closes the last run's copy's fds off the
    caller's path, just after run() returns (docs/design.md), so a count
    taken at once may still hold them."""
    deadline = time.monotonic() + seconds
    n = fds()
    while n > most and time.monotonic() < deadline:
        time.sleep(0.01)
        n = fds()
    return n


def echo(x: int) -> int:
    return x


def test_no_leak():
    sb = airlock.Sandbox(tools=[echo])
    code = "print(call_tool('echo', x=1))\nopen('/output/f.txt','w').write('x'*100)"
    for _ in range(max(200, RUNS // 10)):  # warm-up: caches, allocator arenas
        r = sb.run(code)
        assert r.stdout == "1\n"
        r.contents
    time.sleep(0.5)  # the warm-up's last copy put away
    fd0, rss0 = fds(), rss_kib()
    for _ in range(RUNS):
        r = sb.run(code)
        assert r.success
        r.contents
    fd1, rss1 = fds_within(fd0), rss_kib()
    sb.close()
    print(f"leak: {RUNS} runs, fds {fd0} -> {fd1}, RSS {rss0} -> {rss1} KiB")
    assert fd1 <= fd0
    assert rss1 - rss0 < 1024, (rss0, rss1)
