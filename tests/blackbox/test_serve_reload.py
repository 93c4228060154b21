"""airlock serve reloads its configuration on SIGHUP: a secret read from
file: is read again and the next call substitutes the new value under the
same placeholder, a configuration that does not load keeps the old one (one
stderr line, never the value), a call in flight finishes with the
configuration it started with, tools/list follows a changed tools file, and
calls in a loop while SIGHUPs arrive all succeed. Driven over raw HTTP on
loopback against the real echo server of tests/helpers/httpd.py."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

from harness import run, tmpdir
from test_serve import serve, tools_list, result_of

HTTPD = os.path.join(os.path.dirname(__file__), "..", "helpers", "httpd.py")
OLD = "sk-old-value/0123456789"
NEW = "sk-new-value/9876543210"

# Prints the digest of what /mirror received as the bearer token, then the
# placeholder; with a pause before (pause_s > 0) and a second digest after.
GUEST = """
import airlock, time
PH = airlock.secret('TOKEN')
def digest():
    r = http_request('GET', '{url}', headers={{'Authorization': 'Bearer ' + PH}})
    return r['body'].splitlines()[0].removeprefix('sha256=') if r['status'] == 200 else ''
print(digest())
if {pause_s}:
    time.sleep({pause_s})
    print(digest())
print(PH)
"""


def sha(v):
    return hashlib.sha256(v.encode()).hexdigest()


def start_httpd():
    p = subprocess.Popen([sys.executable, HTTPD, "127.0.0.1"], stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def write(path, text):
    """Replaces the file whole, as an operator rotating a secret does."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def guest_call(s, url, pause_s=0, rid=1):
    status, _, body = s.call(GUEST.format(url=url, pause_s=pause_s), rid=rid)
    assert status == 200, (status, body)
    r = result_of(body)
    assert r["isError"] is False, r
    text = "".join(c.get("text", "") for c in r["content"] if c.get("type") == "text")
    assert OLD not in text and NEW not in text, text
    return text.split()


def sighup(s, expect):
    """Sends SIGHUP and waits for the line starting with expect that it
    causes; returns that line."""
    before = len(s.lines)
    s.p.send_signal(signal.SIGHUP)
    for _ in range(1200):
        new = [l for l in list(s.lines)[before:] if l.startswith(expect)]
        if new:
            return new[0]
        time.sleep(0.05)
    raise AssertionError("no line %r after SIGHUP: %s" % (expect, "".join(s.lines[before:])))


RELOADED = "airlock serve: SIGHUP: configuration reloaded"
KEPT = "airlock serve: SIGHUP: keeping the old configuration: "


def secret_server(secret_file, port, *extra):
    url = f"http://localhost:{port}/mirror"
    return url, serve("-a", f"localhost:{port}", "--secret",
                      f"TOKEN=file:{secret_file}@{url}=GET", *extra)


def test_file_secret_rotates_on_sighup_under_the_same_placeholder():
    httpd, port = start_httpd()
    d = tmpdir()
    f = os.path.join(d, "token")
    write(f, OLD + "\n")
    try:
        url, ctx = secret_server(f, port)
        with ctx as s:
            got, ph = guest_call(s, url)
            assert got == sha(OLD), got
            write(f, NEW + "\n")
            sighup(s, RELOADED)
            got, ph2 = guest_call(s, url)
            assert got == sha(NEW), got
            assert ph2 == ph, (ph, ph2)
            # A value that the library refuses (shorter than 8 bytes), then
            # a file that is gone: the old configuration stays, and each
            # SIGHUP says why in one line that holds no value.
            write(f, "short\n")
            line = sighup(s, KEPT)
            assert "TOKEN" in line and "short" not in line, line
            assert guest_call(s, url)[0] == sha(NEW)
            os.unlink(f)
            line = sighup(s, KEPT)
            assert f in line, line
            assert guest_call(s, url) == [sha(NEW), ph]
            log = "".join(s.lines)
            assert OLD not in log and NEW not in log, log
            assert log.count(KEPT) == 2, log
    finally:
        httpd.kill()
        httpd.wait()


def test_a_call_in_flight_finishes_with_its_configuration():
    httpd, port = start_httpd()
    d = tmpdir()
    f = os.path.join(d, "token")
    write(f, OLD + "\n")
    try:
        url, ctx = secret_server(f, port)
        with ctx as s:
            out = {}

            def slow():
                out["r"] = guest_call(s, url, pause_s=3, rid=7)

            t = threading.Thread(target=slow)
            t.start()
            # The call is running (it holds a run slot) before the SIGHUP.
            for _ in range(1200):
                if s.metrics().get("airlock_runs_in_flight", 0) >= 1:
                    break
                time.sleep(0.025)
            write(f, NEW + "\n")
            sighup(s, RELOADED)
            t.join(120)
            first, second, ph = out["r"]
            assert first == second == sha(OLD), out
            assert guest_call(s, url) == [sha(NEW), ph]
    finally:
        httpd.kill()
        httpd.wait()


def session_call(s, rid, name, args):
    status, _, body = s.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                              "params": {"name": name, "arguments": args,
                                         "_meta": {"io.modelcontextprotocol/protocolVersion":
                                                   "2026-07-28",
                                                   "io.modelcontextprotocol/clientCapabilities":
                                                   {}}}})
    assert status == 200, (status, body)
    r = result_of(body)
    assert r["isError"] is False, r
    return r


def test_an_open_session_keeps_its_configuration():
    httpd, port = start_httpd()
    d = tmpdir()
    f = os.path.join(d, "token")
    write(f, OLD + "\n")
    try:
        url, ctx = secret_server(f, port)
        with ctx as s:
            before = session_call(s, 1, "session_open", {})["_meta"]["dev.airlock/session"]
            write(f, NEW + "\n")
            sighup(s, RELOADED)
            after = session_call(s, 2, "session_open", {})["_meta"]["dev.airlock/session"]
            code = GUEST.format(url=url, pause_s=0)
            r = session_call(s, 3, "execute_code", {"code": code, "session": before})
            assert r["content"][0]["text"].split()[0] == sha(OLD), r
            r = session_call(s, 4, "execute_code", {"code": code, "session": after})
            assert r["content"][0]["text"].split()[0] == sha(NEW), r
            assert guest_call(s, url)[0] == sha(NEW)
    finally:
        httpd.kill()
        httpd.wait()


def test_tools_list_follows_a_changed_tools_file():
    d = tmpdir()
    tools = os.path.join(d, "tools.json")

    def tools_file(name):
        write(tools, json.dumps({"tools": [{
            "name": name, "description": "A tool named " + name + ".",
            "parameters": {"type": "object", "properties": {}},
            "command": ["true"]}]}))

    def description(s):
        status, _, body = tools_list(s)
        assert status == 200, (status, body)
        tl = result_of(body)["tools"]
        return next(t for t in tl if t["name"] == "execute_code")["description"]

    tools_file("first_tool")
    with serve("--tools", tools) as s:
        assert "first_tool" in description(s)
        tools_file("second_tool")
        sighup(s, RELOADED)
        desc = description(s)
        assert "second_tool" in desc and "first_tool" not in desc, desc
        # A tools file that is not JSON keeps the tools in force.
        write(tools, "{not json")
        sighup(s, KEPT)
        assert "second_tool" in description(s)


def test_calls_in_a_loop_while_sighups_arrive():
    httpd, port = start_httpd()
    d = tmpdir()
    f = os.path.join(d, "token")
    write(f, OLD + "\n")
    tokens = os.path.join(d, "tokens")
    write(tokens, "tok-a-0123456789abcdef\n")
    try:
        url, ctx = secret_server(f, port, "--tokens", tokens)
        with ctx as s:
            auth = {"Authorization": "Bearer tok-a-0123456789abcdef"}
            stop = threading.Event()
            seen, errors = [], []

            def loop(k):
                rid = k * 100000
                while not stop.is_set():
                    rid += 1
                    try:
                        status, _, body = s.call(GUEST.format(url=url, pause_s=0), auth, rid=rid)
                        r = result_of(body)
                        assert status == 200 and r["isError"] is False, (status, r)
                        seen.append(r["content"][0]["text"].split()[0])
                    except Exception as e:  # noqa: BLE001 (reported below)
                        errors.append(repr(e))
                        return

            threads = [threading.Thread(target=loop, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            # AIRLOCK_RELOAD_HUPS=200 for a longer run by hand.
            hups = int(os.environ.get("AIRLOCK_RELOAD_HUPS", "12"))
            for i in range(hups):
                write(f, (NEW if i % 2 == 0 else OLD) + "\n")
                sighup(s, RELOADED)
                time.sleep(0.1 if i % 3 else 0)
            stop.set()
            for t in threads:
                t.join(120)
            assert not errors, errors
            assert seen and set(seen) <= {sha(OLD), sha(NEW)}, set(seen)
            print(f"  {len(seen)} calls during {hups} SIGHUPs", file=sys.stderr)
            # The tokens still reload with the configuration.
            write(tokens, "tok-b-0123456789abcdef\n")
            sighup(s, RELOADED)
            assert tools_list(s, {"Authorization": "Bearer tok-b-0123456789abcdef"})[0] == 200
            assert tools_list(s, auth)[0] == 401
    finally:
        httpd.kill()
        httpd.wait()


if __name__ == "__main__":
    run()
