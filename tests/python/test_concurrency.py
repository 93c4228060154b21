"""Many runs at once, from threads and from asyncio; the GIL is released."""
import asyncio
import threading
import time

import airlock


def test_threads_run_in_parallel(sb):
    # Four runs that each sleep 1 s take far less than 4 s together: the
    # GIL is released while they run.
    sb.run("pass")
    t0 = time.monotonic()
    out = {}

    def w(i):
        out[i] = sb.run(f"import time; time.sleep(1); print({i})").stdout

    ts = [threading.Thread(target=w, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert out == {i: f"{i}\n" for i in range(4)}
    assert time.monotonic() - t0 < 3.5


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

    sb = airlock.Sandbox(tools=[airlock.Tool(v1, name="v")])
    res = []

    def w():
        res.append(sb.run("import time; time.sleep(0.5); print(call_tool('v'))").stdout)

    t = threading.Thread(target=w)
    t.start()
    time.sleep(0.2)
    sb.add_tools(airlock.Tool(v2, name="v"))
    assert sb.run("print(call_tool('v'))").stdout == "2\n"
    t.join(30)
    assert res == ["1\n"]  # the run kept the configuration it started with
    sb.close()


def test_asyncio_many(sb):
    async def main():
        t0 = time.monotonic()
        rs = await asyncio.gather(*(sb.arun(f"import time; time.sleep(0.5); print({i})")
                                    for i in range(4)))
        return [r.stdout for r in rs], time.monotonic() - t0
    outs, took = asyncio.run(main())
    assert outs == [f"{i}\n" for i in range(4)]
    assert took < 2
