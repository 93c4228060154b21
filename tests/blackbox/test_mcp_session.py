"""airlock mcp sessions: handles from session_open, execute_code with a
"session" argument, transactional cells, the caps, and errors that name the
handle. What the descriptions say survives a cell is what these tests show."""
import os
import time

from harness import MCP_RUN, mcp, mcp_result_json, run, tmpdir


def tool(m, name, args):
    r = m.request("tools/call", {"name": name, "arguments": args})
    assert "result" in r, r
    return r["result"]


def text(r):
    return "".join(c.get("text", "") for c in r["content"] if c["type"] == "text")


def open_session(m):
    r = tool(m, "session_open", {})
    assert not r["isError"], r
    h = r["_meta"]["dev.airlock/session"]
    assert h.startswith("sess_") and len(h) == 31, h
    return h


def cell(m, h, code):
    r = m.request("tools/call", {"name": "execute_code", "arguments": {"code": code, "session": h},
                                 "_meta": {MCP_RUN: True}})
    assert "result" in r, r
    return r["result"]


def test_state_survives_calls_and_failures_roll_back():
    with mcp("--timeout", "3") as m:
        h = open_session(m)
        r = cell(m, h, "x = 41\nimport json")
        assert mcp_result_json(r)["state"] == "kept" and "state kept" in text(r), r
        r = cell(m, h, "x += 1\nx")
        assert mcp_result_json(r)["stdout"] == "42\n", r
        r = cell(m, h, "x = 0\nimport decimal\nraise ValueError('no')")
        assert r["isError"] and mcp_result_json(r)["state"] == "rolled_back", r
        assert "state rolled back" in text(r), r
        r = cell(m, h, "import time\nx = -1\ntime.sleep(60)")
        assert mcp_result_json(r)["status"] == "timeout", r
        assert mcp_result_json(r)["state"] == "rolled_back", r
        r = cell(m, h, "import sys\n(x, 'decimal' in sys.modules, 'json' in sys.modules)")
        assert mcp_result_json(r)["stdout"] == "(42, False, True)\n", r
        # A call without a handle is a fresh script, as before: no state,
        # and a final expression shows nothing.
        r = m.call("print('x' in globals())\n6 * 7")
        assert mcp_result_json(r)["stdout"] == "False\n", r
        assert "state" not in mcp_result_json(r) and "session" not in mcp_result_json(r)


def test_what_survives_a_cell():
    with mcp() as m:
        h = open_session(m)
        r = cell(m, h, "import os, threading, time, subprocess\n"
                       "open('/tmp/kept.txt', 'w').write('t')\n"
                       "f = open('/tmp/open.txt', 'w+')\n"
                       "ev = threading.Event()\n"
                       "th = threading.Thread(target=ev.wait, daemon=True); th.start()\n"
                       "child = subprocess.Popen(['sleep', '60'])\n"
                       "open('/output/o.txt', 'w').write('o')\n")
        assert mcp_result_json(r)["success"], r
        r = cell(m, h, "(open('/tmp/kept.txt').read(), f.closed, th.is_alive(), "
                       "child.poll(), os.listdir('/output'))")
        assert mcp_result_json(r)["stdout"] == "('t', False, True, None, [])\n", r
        # A failed cell: /tmp files stay, the variables roll back, and the
        # threads and children of earlier cells end.
        r = cell(m, h, "open('/tmp/during.txt', 'w').write('d')\ny = 1\nraise KeyError")
        assert mcp_result_json(r)["state"] == "rolled_back", r
        r = cell(m, h, "import os\n(os.path.exists('/tmp/during.txt'), 'y' in globals(), "
                       "th.is_alive(), child.poll() is None)")
        assert mcp_result_json(r)["stdout"] == "(True, False, False, False)\n", r


def test_unknown_closed_and_foreign_handles_are_named():
    with mcp() as m:
        h = open_session(m)
        r = tool(m, "session_close", {"session": h})
        assert not r["isError"], r
        r = cell(m, h, "1")
        assert r["isError"] and h in text(r) and "closed" in text(r), r
        r = cell(m, h + "x", "1")
        assert r["isError"] and "unknown session" in text(r), r
        r = tool(m, "session_close", {"session": "sess_nothere"})
        assert r["isError"] and "sess_nothere" in text(r), r
    # A handle of another server process is unknown here.
    with mcp() as m2:
        r = cell(m2, h, "1")
        assert r["isError"] and "unknown session" in text(r) and h in text(r), r


def test_caps_on_sessions_and_idle_time():
    with mcp("--max-sessions", "2", "--session-idle", "1") as m:
        a, b = open_session(m), open_session(m)
        r = tool(m, "session_open", {})
        assert r["isError"] and "--max-sessions" in text(r), r
        cell(m, a, "v = 1")
        time.sleep(3)
        r = cell(m, a, "v")
        assert r["isError"] and "expired" in text(r) and a in text(r), r
        # What happened, then the cap: "unused for 2.04 s, more than
        # --session-idle 1 s" (it said "unused for 1 s" whenever it came).
        words = text(r).split("unused for ")[1].split()
        assert float(words[0]) > 1 and words[1] == "s,", r
        assert "more than --session-idle 1 s" in text(r), r
        # Expired sessions free their places.
        open_session(m)


def test_memory_cap_between_cells():
    with mcp("--session-memory", "64") as m:
        h = open_session(m)
        r = cell(m, h, "small = 1")
        r = cell(m, h, "small")
        assert mcp_result_json(r)["stdout"] == "1\n", r
        r = cell(m, h, "big = bytearray(100 << 20)\nfor i in range(0, len(big), 4096): "
                 "big[i] = 1\nprint('filled')")
        # The cell's own answer says the session is closed (it said "state
        # kept", and only the next call learnt it).
        assert mcp_result_json(r)["stdout"] == "filled\n", r
        assert r["isError"] and h in text(r) and "--session-memory" in text(r), r
        assert "closed" in text(r) and "MiB" in text(r), r
        r = cell(m, h, "1")
        assert r["isError"] and h in text(r) and "--session-memory" in text(r), r


def test_a_session_keeps_its_workspace():
    d = tmpdir()
    with open(os.path.join(d, "a.txt"), "w") as f:
        f.write("one")
    with mcp("--workspace", d) as m:
        h = open_session(m)
        with open(os.path.join(d, "a.txt"), "w") as f:
            f.write("two")
        r = cell(m, h, "open('/input/a.txt').read()")
        assert mcp_result_json(r)["stdout"] == "'one'\n", r
        r = cell(m, open_session(m), "open('/input/a.txt').read()")
        assert mcp_result_json(r)["stdout"] == "'two'\n", r


def test_a_cancelled_call_rolls_back_and_the_session_goes_on():
    with mcp() as m:
        h = open_session(m)
        cell(m, h, "x = 'before'")

        def start_long_cell_and_cancel_it():
            i = m.start("tools/call", {"name": "execute_code", "arguments": {
                "code": "x = 'during'\nimport time\ntime.sleep(600)", "session": h}})
            # Requests are taken in order: this one finds the long cell
            # running, so the cancel below reaches a call in progress.
            r = cell(m, h, "1")
            assert r["isError"] and "running another call" in text(r), r
            m.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": i}})

        # A cancelled request gets no response; the next call waits for its
        # cell to roll back instead of being refused as "running another
        # call" (for the tenth of a second the rollback takes).
        start_long_cell_and_cancel_it()
        r = cell(m, h, "x")
        assert not r["isError"], r
        assert mcp_result_json(r)["stdout"] == "'before'\n", r
        # The same for a fork.
        start_long_cell_and_cancel_it()
        f = fork(m, h)
        r = cell(m, f, "x")
        assert mcp_result_json(r)["stdout"] == "'before'\n", r


def test_no_call_after_the_lifetime():
    # A call sent after --session-lifetime is refused, whenever the sweeper's
    # second falls (it let calls through until its next round).
    with mcp("--session-lifetime", "2") as m:
        for _ in range(3):
            h = open_session(m)
            time.sleep(2.05)  # measured from after the server opened it
            r = cell(m, h, "1")
            assert r["isError"] and "expired" in text(r) and h in text(r), r
            assert "more than --session-lifetime 2 s" in text(r), r


def fork(m, h):
    r = tool(m, "session_fork", {"session": h})
    assert not r["isError"], r
    f = r["_meta"]["dev.airlock/session"]
    assert f.startswith("sess_") and len(f) == 31 and f != h, f
    assert f in text(r) and h in text(r), r
    return f


def test_texts_are_true_with_and_without_a_session():
    # Sessions are offered: no text may say that nothing ever survives a
    # call, or that a final expression is never shown.
    with mcp() as m:
        instr = m.init["instructions"]
        desc = m.request("tools/list", {})["result"]["tools"][0]["description"]
    for t in (instr, desc):
        assert "Every call starts from a fresh interpreter" not in t, t
        assert "Nothing survives from one call to the next" not in t, t
        assert "without a session" in t.lower(), t
    assert "A call without a session starts from a fresh interpreter" in desc, desc
    assert "Without a session, nothing survives from one call to the next." in instr, instr


def test_session_fork_copies_state_over_mcp():
    with mcp() as m:
        tools = {t["name"]: t for t in m.request("tools/list", {})["result"]["tools"]}
        assert "session_fork" in tools, tools.keys()
        assert tools["session_fork"]["inputSchema"]["required"] == ["session"]
        assert "session_fork" in tools["session_open"]["description"]
        h = open_session(m)
        cell(m, h, "x = 41\n_ = open('/tmp/shared.txt', 'w').write('p')")
        f = fork(m, h)
        r = cell(m, f, "x += 1\n(x, open('/tmp/shared.txt').read())")
        assert mcp_result_json(r)["stdout"] == "(42, 'p')\n", r
        assert mcp_result_json(r)["session"] == f, r
        r = cell(m, h, "x")
        assert mcp_result_json(r)["stdout"] == "41\n", r
        # A failure in the fork rolls back the fork only.
        r = cell(m, f, "x = 0\nraise KeyError")
        assert mcp_result_json(r)["state"] == "rolled_back", r
        r = cell(m, f, "x")
        assert mcp_result_json(r)["stdout"] == "42\n", r
        # Closing the original leaves the fork open, and a fork forks.
        assert not tool(m, "session_close", {"session": h})["isError"]
        g = fork(m, f)
        r = cell(m, g, "x * 2")
        assert mcp_result_json(r)["stdout"] == "84\n", r
        r = cell(m, f, "x")
        assert mcp_result_json(r)["stdout"] == "42\n", r


def test_session_fork_errors_name_the_handle():
    with mcp() as m:
        h = open_session(m)
        assert not tool(m, "session_close", {"session": h})["isError"]
        r = tool(m, "session_fork", {"session": h})
        assert r["isError"] and h in text(r) and "closed" in text(r), r
        r = tool(m, "session_fork", {"session": "sess_nothere"})
        assert r["isError"] and "unknown session" in text(r) and "sess_nothere" in text(r), r
        r = tool(m, "session_fork", {})
        assert r["isError"] and "\"session\"" in text(r), r
        r = tool(m, "session_fork", {"session": h, "extra": 1})
        assert r["isError"] and "extra" in text(r), r


def test_session_fork_counts_against_the_caps():
    with mcp("--max-sessions", "2", "--session-lifetime", "4") as m:
        h = open_session(m)
        time.sleep(2)
        f = fork(m, h)
        r = tool(m, "session_fork", {"session": h})
        assert r["isError"] and "--max-sessions" in text(r), r
        r = tool(m, "session_open", {})
        assert r["isError"] and "--max-sessions" in text(r), r
        # The fork's lifetime runs from its original's opening: both
        # have expired (by 4 s, swept within a second), although the fork
        # is 3.5 s old.
        time.sleep(3.5)
        for x in (h, f):
            r = cell(m, x, "1")
            assert r["isError"] and "expired" in text(r) and "--session-lifetime" in text(r), r


if __name__ == "__main__":
    run()
