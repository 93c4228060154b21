"""Black-box tests of `airlock run`: exit status, result JSON, isolation,
limits and bad input, all through the built binary and a real sandbox."""
import json
import os
import subprocess
import tempfile

import harness
from harness import AIRLOCK, airlock, run, run_json, tmpdir


def test_print_and_json_shape():
    rc, r = run_json("print('hello')")
    assert rc == 0, r
    for key in ("success", "status", "exit_code", "stdout", "stderr", "stdout_truncated",
                "stderr_truncated", "files", "refused", "contents", "duration_ms"):
        assert key in r, key
    assert r["success"] is True and r["status"] == "ok" and r["exit_code"] == 0
    assert r["stdout"] == "hello\n"
    assert r["contents"] == [{"type": "text", "text": "hello\n"}]


def test_no_output_item():
    rc, r = run_json("x = 1")
    assert rc == 0
    assert len(r["contents"]) == 1 and r["contents"][0]["type"] == "text"
    assert "without output" in r["contents"][0]["text"]


def test_exception_is_failure_with_traceback():
    rc, r = run_json("def f():\n    raise ValueError('boom')\nf()")
    assert rc == 1
    assert r["success"] is False and r["status"] == "error" and r["exit_code"] == 1
    assert "ValueError: boom" in r["stderr"] and "Traceback" in r["stderr"]
    err = r["contents"][-1]
    assert err["type"] == "error" and "ValueError: boom" in err["details"]


def test_sys_exit_codes():
    rc, r = run_json("import sys; sys.exit(0)")
    assert rc == 0 and r["success"]
    rc, r = run_json("import sys; sys.exit(7)")
    assert rc == 1 and r["exit_code"] == 7 and r["status"] == "error"


def test_crlf_in_contents():
    rc, r = run_json("import sys; sys.stdout.write('a\\r\\nb\\r\\n')")
    assert r["stdout"] == "a\r\nb\r\n"
    assert r["contents"][0]["text"] == "a\nb\n"


def test_stderr_on_success_is_a_text_item():
    rc, r = run_json("import sys; print('out'); print('warn', file=sys.stderr)")
    assert rc == 0
    assert [c["type"] for c in r["contents"]] == ["text", "text"]
    assert r["contents"][1]["text"] == "warn\n"


def test_files_sorted_with_media_types():
    code = ("import os\nos.makedirs('/output/d')\n"
            "open('/output/b.csv','w').write('x\\n')\n"
            "open('/output/a.json','w').write('{}')\n"
            "open('/output/d/z.bin','wb').write(b'\\0\\1')\n"
            "open('/output/noext','w').write('?')\n")
    rc, r = run_json(code)
    assert rc == 0, r
    paths = [f["path"] for f in r["files"]]
    assert paths == sorted(paths) == ["/output/a.json", "/output/b.csv", "/output/d/z.bin",
                                      "/output/noext"]
    types = {f["path"]: f["media_type"] for f in r["files"]}
    assert types["/output/a.json"] == "application/json"
    assert types["/output/b.csv"] == "text/csv"
    assert types["/output/noext"] == "application/octet-stream"
    data = [c for c in r["contents"] if c["type"] == "data"]
    assert [d["path"] for d in data] == paths


def test_refused_entries():
    code = ("import os\nos.symlink('/etc/passwd','/output/link')\n"
            "os.mkfifo('/output/fifo')\n"
            "open('/output/ok.txt','w').write('ok')\n")
    rc, r = run_json(code)
    assert rc == 0, r
    reasons = {x["path"]: x["reason"] for x in r["refused"]}
    assert reasons == {"/output/fifo": "not a regular file", "/output/link": "symlink"}
    assert [f["path"] for f in r["files"]] == ["/output/ok.txt"]


def test_runs_are_isolated_from_each_other():
    # Two separate runs of the CLI: nothing of the first is seen by the second.
    rc, r1 = run_json("import random; open('/tmp/x','w').write('1'); print(random.random())")
    rc, r2 = run_json("import os, random; print(os.path.exists('/tmp/x')); print(random.random())")
    assert r2["stdout"].splitlines()[0] == "False"
    assert r1["stdout"].strip() != r2["stdout"].splitlines()[1]


def test_guest_view_of_filesystem():
    code = ("import os\n"
            "for p in ['/root','/home','/work','/sys','/etc/shadow','/var']:\n"
            "    print(p, os.path.exists(p))\n"
            "print(sorted(os.listdir('/dev')))\n"
            "print(os.listdir('/proc'))\n")
    rc, r = run_json(code)
    lines = r["stdout"].splitlines()
    assert all(l.endswith("False") for l in lines[:6]), lines
    assert eval(lines[6]) == ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr",
                              "stdin", "stdout", "tty", "urandom", "zero"], lines[6]
    assert "1" in eval(lines[7])


def test_guest_has_no_capabilities_and_no_new_privs():
    code = ("for l in open('/proc/self/status'):\n"
            "    if l.startswith(('Cap', 'NoNewPrivs', 'Seccomp:')):\n"
            "        print(l.split()[0], l.split()[1])\n")
    rc, r = run_json(code)
    got = dict(line.split() for line in r["stdout"].splitlines())
    for k in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        assert got[k] == "0000000000000000", (k, got)
    assert got["NoNewPrivs:"] == "1" and got["Seccomp:"] == "2", got


def test_guest_environment_is_fixed():
    env = dict(os.environ, AIRLOCK_TEST_SECRET="do-not-leak")
    p = subprocess.run([AIRLOCK, "run", "--json", "-c", "import os; print(sorted(os.environ))"],
                       capture_output=True, text=True, timeout=120, env=env)
    r = json.loads(p.stdout)
    # Besides HOME, LANG and PATH, the variables libraries read when they
    # load: thread pool sizes and matplotlib's backend (guest.c).
    assert r["stdout"] == ("['HOME', 'LANG', 'MKL_NUM_THREADS', 'MPLBACKEND', "
                           "'NUMEXPR_MAX_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', "
                           "'PATH']\n"), r


def test_workspace_is_read_only_input():
    ws = tmpdir()
    with open(os.path.join(ws, "data.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    os.mkdir(os.path.join(ws, "sub"))
    with open(os.path.join(ws, "sub", "n.txt"), "w") as f:
        f.write("nested")
    code = ("print(open('/input/data.csv').read(), end='')\n"
            "print(open('/input/sub/n.txt').read())\n"
            "try:\n    open('/input/new','w')\nexcept OSError as e:\n    print(e.errno)\n")
    rc, r = run_json(code, "-w", ws)
    assert rc == 0, r
    assert r["stdout"] == "a,b\n1,2\nnested\n30\n"


def test_mount_paths():
    ws = tmpdir()
    f = os.path.join(ws, "x.txt")
    with open(f, "w") as fh:
        fh.write("X")
    rc, r = run_json("print(open('/input/data/y.txt').read())", "-m", f + ":input/data/y.txt")
    assert rc == 0, r
    assert r["stdout"] == "X\n"
    p = airlock("run", "-m", f + ":../etc", "-c", "pass")
    assert p.returncode == 2 and ".." in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_symlink_in_workspace_fails_closed():
    ws = tmpdir()
    os.symlink("/etc/passwd", os.path.join(ws, "evil"))
    p = airlock("run", "-w", ws, "-c", "print(1)")
    assert p.returncode == 2, p
    assert "evil" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stdout == ""


def test_bad_input_errors():
    p = airlock("run", "-w", "/nonexistent/dir", "-c", "pass")
    assert p.returncode == 2 and "/nonexistent/dir" in p.stderr
    p = airlock("run", "/nonexistent/code.py")
    assert p.returncode == 2 and "/nonexistent/code.py" in p.stderr
    p = subprocess.run([AIRLOCK, "run", "-"], input=b"print('\xff')", capture_output=True)
    assert p.returncode == 2 and b"UTF-8" in p.stderr
    p = airlock("run", "--timeout", "abc", "-c", "pass")
    assert p.returncode == 2 and "abc" in p.stderr
    p = airlock("run", "--bogus")
    assert p.returncode == 2


def test_huge_code_is_refused():
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("#" * (100 << 20))
    try:
        p = airlock("run", f.name)
        assert p.returncode == 2 and "cap" in p.stderr, p.stderr
    finally:
        os.unlink(f.name)


def test_stdin_code():
    p = airlock("run", input="print(6*7)")
    assert p.returncode == 0 and p.stdout == "42\n"


def test_timeout_status_and_next_run():
    rc, r = run_json("while True: pass", "--timeout", "1")
    assert rc == 1 and r["status"] == "timeout" and not r["success"]
    assert "1 s" in r["contents"][-1]["details"]
    rc, r = run_json("print('next')")
    assert rc == 0 and r["stdout"] == "next\n"


def test_memory_limit():
    rc, r = run_json("x = bytearray(300 << 20)", "--memory", "64")
    assert rc == 1 and r["status"] == "memory", r
    assert "64 MiB" in r["contents"][-1]["details"]


def test_stdout_cap():
    rc, r = run_json("print('x' * 5000)", "--max-stdout", "1")
    assert r["stdout_truncated"] is True and len(r["stdout"]) == 1024


def test_fork_bomb_is_contained():
    code = ("import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
            "            import time; time.sleep(60)\n        n += 1\n"
            "except OSError:\n    print('limited', n)\n")
    rc, r = run_json(code, "--pids", "16", "--timeout", "10")
    assert rc == 0 and r["stdout"].startswith("limited"), r
    assert int(r["stdout"].split()[1]) <= 20


def test_background_process_does_not_outlive_run():
    code = ("import os, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\nprint('parent')")
    rc, r = run_json(code)
    assert rc == 0
    rc, r = run_json("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r["stdout"] == "[1]\n", r


def test_threads_finish_before_the_run_ends():
    # As at the end of a Python program, threads that are not daemons
    # finish their work; a daemon thread is stopped with the run.
    code = ("import threading, time\n"
            "def work():\n    time.sleep(0.3)\n    open('/output/t.txt', 'w').write('T')\n"
            "    print('thread done')\n"
            "def late():\n    time.sleep(30)\n    open('/output/late.txt', 'w').write('L')\n"
            "threading.Thread(target=work).start()\n"
            "threading.Thread(target=late, daemon=True).start()\n"
            "print('main done')\n")
    # Also with threading imported before the snapshot: the warm-up runs
    # of the template and the copy must not count as the program's end.
    for extra in ([], ["--preload", "threading"]):
        rc, r = run_json(code, "--timeout", "20", *extra)
        assert rc == 0, r
        assert r["stdout"] == "main done\nthread done\n", (extra, r)
        assert [f["path"] for f in r["files"]] == ["/output/t.txt"], (extra, r["files"])


def test_background_writer_is_gone_before_capture():
    # A child that writes after the code has returned must not reach the
    # capture: the run's processes are ended first.
    code = ("import os, time\n"
            "if os.fork() == 0:\n    time.sleep(0.5)\n"
            "    open('/output/late.txt', 'w').write('L')\n    os._exit(0)\n"
            "open('/output/main.txt', 'w').write('M')\n")
    rc, r = run_json(code)
    assert rc == 0, r
    assert [f["path"] for f in r["files"]] == ["/output/main.txt"], r["files"]


def test_code_runs_at_normal_priority():
    # Copies are prepared at idle priority; the code itself must not be: it
    # runs at the caller's own priority (nice 0 unless the tests themselves
    # run under nice, as `nice make check` does).
    rc, r = run_json("import os; print(os.sched_getscheduler(0) == os.SCHED_OTHER, os.nice(0))")
    assert rc == 0 and r["stdout"] == f"True {os.nice(0)}\n", r


def test_no_network_sockets():
    code = ("import socket\n"
            "for fam in (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET):\n"
            "    try:\n        socket.socket(fam, socket.SOCK_STREAM if fam != socket.AF_PACKET else socket.SOCK_RAW)\n"
            "        print('open')\n"
            "    except OSError as e:\n        print(e.errno)\n")
    rc, r = run_json(code)
    assert r["stdout"].split() == ["97", "97", "97"], r


def test_output_dir():
    out = os.path.join(tmpdir(), "out")
    p = airlock("run", "--output-dir", out, "-c",
                "import os; os.makedirs('/output/a'); open('/output/a/b.txt','w').write('B')")
    assert p.returncode == 0, p.stderr
    assert open(os.path.join(out, "a", "b.txt")).read() == "B"
    # The line of each file names where it landed on the host.
    assert f"airlock: file /output/a/b.txt (text/plain, 1 bytes) written to {out}/a/b.txt" \
        in p.stderr, p.stderr


def test_output_dir_second_run_replaces_its_files_and_keeps_the_others():
    # A second run into the same folder (the README's example, run again)
    # replaces the files it writes again and keeps the others; a link of
    # that name is replaced, not followed.
    out = os.path.join(tmpdir(), "out")
    os.makedirs(out)
    with open(os.path.join(out, "mine.txt"), "w") as f:
        f.write("the user's")
    target = os.path.join(tmpdir(), "target.txt")
    with open(target, "w") as f:
        f.write("untouched")
    os.symlink(target, os.path.join(out, "link.txt"))
    for text in ("first", "second"):
        p = airlock("run", "--output-dir", out, "-c",
                    f"open('r.txt', 'w').write('{text}'); open('link.txt', 'w').write('{text}')")
        assert p.returncode == 0, p.stderr
    assert open(os.path.join(out, "r.txt")).read() == "second"
    assert open(os.path.join(out, "mine.txt")).read() == "the user's"
    assert not os.path.islink(os.path.join(out, "link.txt"))
    assert open(os.path.join(out, "link.txt")).read() == "second"
    assert open(target).read() == "untouched"
    assert sorted(os.listdir(out)) == ["link.txt", "mine.txt", "r.txt"], os.listdir(out)
    # The rule is in --help (and so in options.md and the man page).
    h = airlock("run", "--help")
    assert "a file of the same name is replaced, other files are kept" in h.stdout, h.stdout


def test_files_without_output_dir_say_how_to_keep_them():
    p = airlock("run", "-c", "open('/output/x.csv', 'w').write('a')")
    assert p.returncode == 0, p.stderr
    assert ("airlock: file /output/x.csv (text/csv, 1 bytes), not kept: --output-dir DIR "
            "writes the files to DIR") in p.stderr, p.stderr


def test_output_is_live():
    # Each line reaches our pipe while the code still runs: the code waits
    # for a file that the test creates only after it has read the line.
    # Without live output the line comes at the end, after the run's
    # timeout, and the run fails.
    d = tmpdir()
    go = os.path.join(d, "go")
    tools = os.path.join(d, "tools.json")
    with open(tools, "w") as f:
        json.dump({"tools": [{"name": "wait_go", "description": "wait for the test",
                              "command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done;"
                                          " echo '{}'"],
                              "parameters": {"type": "object"}, "timeout": 60}]}, f)
    code = ("import sys\nprint('first', flush=True)\ncall_tool('wait_go')\n"
            "print('on stderr', file=sys.stderr)\nprint('second')\n")
    p = subprocess.Popen([AIRLOCK, "run", "--tools", tools, "--timeout", "60", "-c", code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        running = p.poll() is None
        open(go, "w").close()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert line == "first\n" and running, (line, running)
    assert p.returncode == 0, err
    assert out == "second\n" and err == "on stderr\n", (out, err)


def stdin_file(text):
    path = os.path.join(tmpdir(), "stdin")
    with open(path, "w") as f:
        f.write(text)
    return open(path)


def test_arguments_after_the_script_are_sys_argv_and_stdin_is_the_codes():
    script = os.path.join(tmpdir(), "s.py")
    with open(script, "w") as f:
        f.write("import sys\nprint(sys.argv)\nprint(repr(sys.stdin.read()))\n")

    def run_with(stdin, *args):
        with stdin:
            return subprocess.run([AIRLOCK, *args], stdin=stdin, capture_output=True, text=True,
                                  timeout=120)
    p = run_with(stdin_file("data\nin"), "run", script, "foo", "bar baz")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{[script, 'foo', 'bar baz']}\n'data\\nin'\n", p.stdout
    p = run_with(stdin_file("line\n"), "run", "-c", "import sys; print(sys.argv, input())", "x")
    assert p.returncode == 0 and p.stdout == "['-c', 'x'] line\n", (p.stdout, p.stderr)
    # Without FILE or -c, standard input is still the code.
    p = airlock("run", input="import sys; print(sys.argv)")
    assert p.returncode == 0 and p.stdout == "['']\n", (p.stdout, p.stderr)
    # Past the cap, one line names it.
    p = run_with(stdin_file("x" * ((8 << 20) + 1)), "run", "-c", "pass")
    assert p.returncode == 2, p.stderr
    assert "standard input is larger than the cap of 8 MiB" in p.stderr, p.stderr
    assert "AIRLOCK_RUN_STDIN_MAX" in p.stderr, p.stderr


def test_code_and_stdin_each_under_their_cap_but_too_large_together():
    """14 MiB of code (under the 16 MiB cap) and 8 MiB of standard input
    (at its cap) pass the run frame's 24 MiB once the input is in base64:
    a clear error on the caller's input (exit 2) naming the cap, not a
    sandbox that cannot be used (exit 3, "Message too long")."""
    d = tmpdir()
    script = os.path.join(d, "big.py")
    with open(script, "w") as f:
        f.write("import sys\nprint(len(sys.stdin.buffer.read()))\n")
        f.write(("#" + "a" * 1000 + "\n") * 14500)
    with stdin_file("x" * (8 << 20)) as stdin:
        p = subprocess.run([AIRLOCK, "run", script], stdin=stdin, capture_output=True,
                           text=True, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "CHANNEL_MAX_FRAME" in p.stderr and "--workspace" in p.stderr, p.stderr


def test_a_pipe_its_caller_keeps_open_never_holds_the_run():
    """A framework that spawns the command with a pipe on its stdin and never
    closes it (Node's exec, an MCP server's own stdin) gets its run: the
    pipe is read only when the code reads, so code that never reads ends
    at once, and code that reads a line gets that line and goes on."""
    for code, want in (("print('never reads')", "never reads\n"),
                       ("print(repr(input()))", "'meant for the code'\n")):
        p = subprocess.Popen([AIRLOCK, "run", "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.stdin.write("meant for the code\nand more, never read\n")
        p.stdin.flush()
        try:
            # The pipe stays open until the command has ended: no EOF is
            # ever given, so a command that read it to its end would never
            # end.
            rc = p.wait(timeout=120)
            out = p.stdout.read()
            assert rc == 0, p.stderr.read()
            assert out == want, out
        finally:
            p.stdin.close()
            p.kill()


def test_a_pipe_is_streamed_to_the_code_as_it_reads():
    """`producer | airlock run script.py`: the code reads its standard input
    while the producer still writes (a line goes in only once the code
    printed the last one out), input() writes its prompt to stdout as
    python3 does, and the producer's end is the code's end of file."""
    script = os.path.join(tmpdir(), "echo.py")
    with open(script, "w") as f:
        f.write("import sys\n"
                "name = input('name? ')\n"
                "print('hello', name, flush=True)\n"
                "for line in sys.stdin:\n"
                "    print('got', line.strip(), flush=True)\n"
                "print('end of input')\n")
    p = subprocess.Popen([AIRLOCK, "run", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write("Ada\n")
        p.stdin.flush()
        assert p.stdout.readline() == "name? hello Ada\n"
        for i in range(3):
            p.stdin.write(f"{i}\n")
            p.stdin.flush()
            assert p.stdout.readline() == f"got {i}\n"
        p.stdin.close()
        assert p.stdout.read() == "end of input\n"
        assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        p.kill()
    # The same from a shell, as a user types it.
    sh = subprocess.run(f"seq 1 5 | {AIRLOCK} run -c "
                        "'import sys; print(sum(int(x) for x in sys.stdin))'",
                        shell=True, capture_output=True, text=True, timeout=120)
    assert sh.returncode == 0 and sh.stdout == "15\n", (sh.stdout, sh.stderr)


def test_a_streamed_standard_input_stops_at_its_cap():
    """A run reads at most 64 MiB of a pipe (AIRLOCK_RUN_STDIN_STREAM_MAX):
    the read past it raises OSError naming the cap; what came before is
    the code's."""
    code = ("import sys\nn = 0\ntry:\n"
            "    while (b := sys.stdin.buffer.read(1 << 20)):\n        n += len(b)\n"
            "except OSError as e:\n    print(n, e)\n")
    p = subprocess.run(f"head -c {(64 << 20) + 100} /dev/zero | {AIRLOCK} run -c \"{code}\"",
                       shell=True, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    n, _, msg = p.stdout.partition(" ")
    assert int(n) == 64 << 20, p.stdout
    assert "AIRLOCK_RUN_STDIN_STREAM_MAX" in msg and "64 MiB" in msg, msg


def test_limit_messages_name_their_option():
    p = airlock("run", "--timeout", "1", "-c", "while True: pass")
    assert p.returncode == 1, p.stderr
    assert "time limit of 1 s (raise it with --timeout)" in p.stderr, p.stderr
    p = airlock("run", "--memory", "99999999999999999999", "-c", "pass")
    assert p.returncode == 2, p.stderr
    assert ("--memory: '99999999999999999999' is out of range: a whole number from 16 to "
            "1048576") in p.stderr, p.stderr


def test_workspace_errors_say_what_and_the_way_out():
    p = airlock("run", "-w", "/nonexistent-airlock-ws", "-c", "pass")
    assert p.returncode == 2, p.stderr
    assert ("-w/--workspace /nonexistent-airlock-ws: No such file or directory (the workspace "
            "is a folder, staged under /input)") in p.stderr, p.stderr
    ws = os.path.join(tmpdir(), "ws")
    os.makedirs(ws)
    os.symlink("/etc/hostname", os.path.join(ws, "link"))
    p = airlock("run", "-w", ws, "-c", "pass")
    assert p.returncode == 2, p.stderr
    assert "staging refuses symbolic links (to stage what it points at, mount that: " \
        "-m TARGET:NAME)" in p.stderr, p.stderr


def test_json_output_stays_one_document():
    p = airlock("run", "--json", "-c", "import sys\nprint('a', flush=True)\n"
                "print('b', file=sys.stderr)")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["stdout"] == "a\n" and r["stderr"] == "b\n", r


def test_preload():
    rc, r = run_json("import sys; print('decimal' in sys.modules)", "--preload", "decimal")
    assert r["stdout"] == "True\n"
    p = airlock("run", "--preload", "no_such_module_xyz", "-c", "pass")
    assert p.returncode == 2 and "no_such_module_xyz" in p.stderr


def test_approval_needs_yes():
    p = airlock("run", "--approval", "always", "-c", "print(1)")
    assert p.returncode == 2 and "approval" in p.stderr and p.stdout == ""
    p = airlock("run", "--approval", "always", "--yes", "-c", "print(1)")
    assert p.returncode == 0 and p.stdout == "1\n"


def test_approval_prompt_shows_what_hides_text_escaped():
    """The approval prompt writes the code to the terminal: a raw ESC
    sequence could erase the line that does the harm (\033[2K\033[1G), a CR
    return over it, U+202E reorder it. Those characters (C0 but tab and
    newline, DEL, C1, bidirectional marks, overrides and isolates) are
    shown escaped; the reviewer reads the prompt on a real terminal here."""
    import pty
    import select
    code = ("print('hello')\n"
            "wire_money()\033[2K\033[1G# a comment\r# over it\x7f\x9b\n"
            "s = 'abc\u202edcba'  # \u2066isolated\u2069 \u200f\u200e\u061c\n")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execv(AIRLOCK, [AIRLOCK, "run", "--approval", "always", "-c", code])
        finally:
            os._exit(127)
    out = b""
    answered = False
    while True:
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, out
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"Run it? [y/N]" in out:
            os.write(fd, b"n\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert answered, out
    prompt = out.split(b"Run it?")[0].decode()
    assert "wire_money()<U+001B>[2K<U+001B>[1G# a comment<U+000D># over it<U+007F><U+009B>" \
        in prompt, prompt
    assert "'abc<U+202E>dcba'  # <U+2066>isolated<U+2069> <U+200F><U+200E><U+061C>" in prompt, \
        prompt
    for ch in "\033\x7f\x9b\u202e\u2066\u2069\u200f\u200e\u061c":
        assert ch not in prompt, (ch, prompt)
    # The terminal's own CR LF aside, no CR of the code's.
    assert "\r#" not in prompt, prompt
    assert os.WEXITSTATUS(status) == 2, status



def test_guest_ids_are_unprivileged_on_host():
    rc, r = run_json("import os; open('/output/f','w').write('x'); print(os.getuid())")
    assert r["stdout"] == "0\n"


def test_missing_kernel_feature_exits_3_naming_it():
    # tests/helpers/deny_syscall makes the named calls fail with EPERM, as a
    # host policy would; airlock must exit 3 with one line naming the feature.
    deny = harness.built_helper("deny_syscall")
    cases = {"unshare": "user namespaces", "mount": "mount namespace",
             "pivot_root": "pivot_root", "clone3": "copy"}
    for call, feature in cases.items():
        p = subprocess.run([deny, call, AIRLOCK, "run", "-c", "print(1)"],
                           capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 3, (call, p.returncode, p.stderr)
        assert len(lines) == 1 and feature in lines[0], (call, lines)
        assert p.stdout == ""


def test_works_as_an_unprivileged_user():
    # As root (CI), run the binary as nobody through setpriv: the user
    # namespace must come up without privileges, staging and capture too.
    import shutil
    if os.geteuid() != 0:
        rc, r = run_json("print('ok')")
        assert rc == 0 and r["stdout"] == "ok\n"
        return
    d = tmpdir()
    os.chmod(d, 0o755)
    exe = os.path.join(d, "airlock")
    shutil.copy(AIRLOCK, exe)
    os.chmod(exe, 0o755)
    ws = os.path.join(d, "ws")
    os.mkdir(ws)
    with open(os.path.join(ws, "in.txt"), "w") as f:
        f.write("data")
    os.chmod(ws, 0o755)
    os.chmod(os.path.join(ws, "in.txt"), 0o644)
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe,
                        "run", "--json", "-w", ws, "-c",
                        "import os; print(open('/input/in.txt').read(), os.getuid())\n"
                        "open('/output/o.txt', 'w').write('x')"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["stdout"] == "data 0\n" and [f["path"] for f in r["files"]] == ["/output/o.txt"]


if __name__ == "__main__":
    run()
