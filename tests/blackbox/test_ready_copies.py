#!/usr/bin/python3
"""Black-box tests: the copies an `airlock mcp` server keeps ready.

A copy is prepared at the caller's own priority, never at idle priority,
where any other work on the machine would starve it and the next call would
wait for it; and a burst of calls keeps more than one copy ready, up to
--ready-copies, while a pause takes the server back to one.

The server's copies are its children (the template starts them as the
host's) that are pid 1 of their own PID namespace; the template is the
child that is not. Each wait below polls for a state the server reaches by
itself, within a generous bound, and asserts nothing about time.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import mcp, run  # noqa: E402


def children(pid):
    """The children of pid that hold their memory (a copy that is exiting
    has let it go, or is a zombie): [(pid, is_copy)]."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                st = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        except OSError:
            continue
        if (int(st.get("PPid", "0")) != pid or st.get("State", "").startswith(("Z", "X"))
                or "VmRSS" not in st):
            continue
        ns = st.get("NSpid", "").split()
        out.append((int(d), len(ns) > 1 and ns[-1] == "1"))
    return out


def copies(pid):
    return [c for c, is_copy in children(pid) if is_copy]


def until(what, cond, limit=60):
    """Polls cond() until it holds; fails with what after limit seconds."""
    end = time.monotonic() + limit
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < end, what
        time.sleep(0.05)


def test_no_process_of_a_sandbox_prepares_at_idle_priority():
    # Before, where SCHED_IDLE could be left again (root with CAP_SYS_NICE),
    # the template and every copy it prepared sat at SCHED_IDLE until a
    # call reached the copy, and any other work on the machine starved the
    # next copy. Now they prepare with the caller's weight: its own policy,
    # or SCHED_BATCH for a caller at SCHED_OTHER (the same weight, no
    # preemption on waking), and its nice value.
    with mcp() as m:
        r = m.call("print(1)")
        assert r["content"][0]["text"] == "1\n", r
        until("the next copy was never started", lambda: copies(m.p.pid))
        policy, nice = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)
        allowed = {policy, os.SCHED_BATCH} if policy == os.SCHED_OTHER else {policy}
        procs = children(m.p.pid)
        assert any(not is_copy for _, is_copy in procs), procs  # the template
        for pid, is_copy in procs:
            try:
                got = (os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid))
            except ProcessLookupError:
                continue
            what = "copy" if is_copy else "template"
            assert got[0] in allowed and got[0] != os.SCHED_IDLE, (what, pid, got, policy)
            assert got[1] == nice, (what, pid, got, nice)


def test_a_burst_keeps_more_copies_ready_up_to_the_option_then_one():
    with mcp("--ready-copies", "3") as m:
        most = 0
        # Calls back to back come faster than one copy is prepared (its
        # preparation starts when the last run's copy has exited), so a
        # burst finds copies not ready and keeps more coming: after it, up
        # to three copies, and a copy that ran may not have exited yet.
        # A few bursts, in case a busy machine ran this client slower than
        # the copies; after each, a moment for the copies to come (less
        # than the pause that ends a burst).
        for _ in range(10):
            for _ in range(20):
                r = m.call("print(2)")
                assert r["content"][0]["text"] == "2\n", r
                most = max(most, len(copies(m.p.pid)))
            end = time.monotonic() + 0.3
            while most < 3 and time.monotonic() < end:
                most = max(most, len(copies(m.p.pid)))
                time.sleep(0.01)
            if most >= 3:
                break
        assert 3 <= most <= 4, most
        # A pause ends the copies over one, without another call.
        until("the ready copies of a burst were never ended",
              lambda: len(copies(m.p.pid)) == 1)
        r = m.call("print(3)")
        assert r["content"][0]["text"] == "3\n", r


def test_one_ready_copy_with_ready_copies_1():
    with mcp("--ready-copies", "1") as m:
        for _ in range(30):
            r = m.call("print(4)")
            assert r["content"][0]["text"] == "4\n", r
            # The copy that ran may still be exiting; one more is ready.
            assert len(copies(m.p.pid)) <= 2, copies(m.p.pid)


if __name__ == "__main__":
    run()
