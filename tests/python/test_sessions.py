"""Sessions: state across cells, rollback of failing cells, tools in cells."""
import asyncio

import pytest

import airlock


def test_session_keeps_and_rolls_back(sb):
    with sb.session() as s:
        r = s.run("x = 41")
        assert r.cell_state == "kept"
        r = s.run("x += 1; raise ValueError('no')")
        assert r.cell_state == "rolled_back" and "ValueError" in r.stderr
        r = s.run("print(x)")
        assert r.stdout == "41\n" and r.cell_state == "kept"
        assert s.alive
        assert s.memory() > 0
        assert r.to_dict()["state"] == "kept"
    with pytest.raises(ValueError, match="closed"):
        s.run("print(1)")


def test_session_tools_and_arun():
    def inc(n: int) -> int:
        return n + 1

    sb = airlock.Sandbox(tools=[inc])

    async def main():
        with sb.session() as s:
            await s.arun("v = call_tool('inc', n=1)")
            return (await s.arun("print(v)")).stdout
    assert asyncio.run(main()) == "2\n"
    sb.close()


def test_sessions_are_separate(sb):
    with sb.session() as a, sb.session() as b:
        a.run("v = 'a'")
        b.run("v = 'b'")
        assert a.run("print(v)").stdout == "a\n"
        assert b.run("print(v)").stdout == "b\n"
    # A plain run sees no session state.
    assert "NameError" in sb.run("print(v)").stderr


def test_a_thread_calling_tools_between_cells_keeps_the_session():
    # Issue 27: a heartbeat thread's tool calls between cells landed inside
    # the session's control frames: Session.run raised "the session broke
    # the protocol" by the second or third cell. They wait for the next cell.
    def ping() -> int:
        return 1

    sb = airlock.Sandbox(tools=[ping])
    try:
        with sb.session() as s:
            r = s.run("import threading\nbeats = [0]\n"
                      "def beat():\n"
                      "    while True:\n"
                      "        beats[0] += call_tool('ping')\n"
                      "threading.Thread(target=beat, daemon=True).start()\n")
            assert r.cell_state == "kept", r.stderr
            for i in range(8):
                r = s.run(f"import time\nb = beats[0]\n"
                          "while beats[0] == b:\n    time.sleep(0.001)\n"
                          f"print({i})")
                assert r.cell_state == "kept" and r.stdout == f"{i}\n", r.stderr
            assert s.alive
    finally:
        sb.close()
