"""Many runs at once, from threads and from asyncio; the GIL is released."""
import asyncio
import threading

import airlock


def barrier_sandbox(parties):
    """A sandbox whose tool `meet` returns only once `parties` calls are
    waiting in it at the same time: runs that all get past it were all in
    flight at once, whatever the machine's speed. A run that was not (the
    GIL held, runs queued one after another) leaves the barrier broken, and
    its call_tool raises."""
    gate = threading.Barrier(parties, timeout=60)

    def meet() -> int:
        return gate.wait()

    return airlock.Sandbox(tools=[airlock.Tool(meet, name="meet")], limits={"timeout": 90}), gate


def test_threads_run_in_parallel():
    # Four runs from four threads meet in the tool at once: the GIL is
    # released while they run, and the sandbox runs them side by side.
    sb, gate = barrier_sandbox(4)
    sb.run("pass")
    out = {}

    def w(i):
        out[i] = sb.run(f"call_tool('meet'); print({i})")

    ts = [threading.Thread(target=w, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    assert {i: r.stdout for i, r in out.items()} == {i: f"{i}\n" for i in range(4)}, \
        {i: r.stderr for i, r in out.items()}
    assert not gate.broken
    sb.close()


def test_python_threads_keep_running_during_a_run(sb):
    n = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            n[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    sb.run("import time; time.sleep(0.5)")
    stop.set()
    t.join()
    assert n[0] > 1000


def test_config_changes_while_runs_are_in_flight(tmp_path):
    def v1() -> int:
        return 1

    def v2() -> int:
        return 2

    started, go = threading.Event(), threading.Event()

    def hold() -> int:
        # The first run is in flight: the test changes the configuration,
        # then lets the run go on.
        started.set()
        go.wait(60)
        return 0

    sb = airlock.Sandbox(tools=[airlock.Tool(v1, name="v"), airlock.Tool(hold, name="hold")])
    res = []

    def w():
        res.append(sb.run("call_tool('hold'); print(call_tool('v'))").stdout)

    t = threading.Thread(target=w)
    t.start()
    assert started.wait(60)
    sb.add_tools(airlock.Tool(v2, name="v"))
    assert sb.run("print(call_tool('v'))").stdout == "2\n"
    go.set()
    t.join(30)
    assert res == ["1\n"]  # the run kept the configuration it started with
    sb.close()


def test_asyncio_many():
    # Four arun calls gathered on one event loop are in flight at once:
    # they meet in the tool together.
    sb, gate = barrier_sandbox(4)

    async def main():
        rs = await asyncio.gather(*(sb.arun(f"call_tool('meet'); print({i})")
                                    for i in range(4)))
        return [r.stdout for r in rs], [r.stderr for r in rs]
    outs, errs = asyncio.run(main())
    assert outs == [f"{i}\n" for i in range(4)], errs
    assert not gate.broken
    sb.close()
