"""airlock kernel, the Jupyter kernel (docs/jupyter.md), driven by Jupyter's own
clients from Debian: the conformance suite (jupyter_kernel_test), nbclient and
`jupyter nbconvert --execute` running a real notebook through the installed
kernelspec, and raw ZeroMQ sockets sending hostile messages."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from harness import AIRLOCK, run

# Jupyter's folders, the test's own: the kernelspec is installed there, and
# nothing of the machine's Jupyter is read or written.
HOME = tempfile.mkdtemp(prefix="airlock-kernel-test-")
os.environ["JUPYTER_DATA_DIR"] = os.path.join(HOME, "data")
os.environ["JUPYTER_CONFIG_DIR"] = os.path.join(HOME, "config")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(HOME, "runtime")
os.environ["JUPYTER_PATH"] = ""
os.environ["JUPYTER_PLATFORM_DIRS"] = "1"
WS = os.path.join(HOME, "ws")
os.makedirs(WS)
with open(os.path.join(WS, "data.csv"), "w") as f:
    f.write("x,y\n1,10\n2,20\n3,15\n")

import jupyter_client  # noqa: E402
import zmq  # noqa: E402
from jupyter_client.manager import KernelManager, start_new_kernel  # noqa: E402
from jupyter_client.session import Session  # noqa: E402

KERNEL = "airlock-test"


def install(*args, name=KERNEL):
    p = subprocess.run([AIRLOCK, "kernel", "install", "--user", "--name", name, *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p


install("--display-name", "Python (airlock test)", "-w", WS)


def start(stderr_path=None, name=KERNEL):
    km = KernelManager(kernel_name=name)
    kw = {}
    if stderr_path:
        kw["stderr"] = open(stderr_path, "w")
    km.start_kernel(**kw)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


def stop(km, kc):
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def execute(kc, code, timeout=120, **kw):
    """Runs code; returns (reply content, [(msg_type, content)] of iopub).
    Without a stdin_hook, the execute_request says allow_stdin false: the
    client's default hook would read the test's own terminal."""
    out = []
    if "stdin_hook" not in kw:
        kw.setdefault("allow_stdin", False)
    reply = kc.execute_interactive(code, timeout=timeout,
                                   output_hook=lambda m: out.append((m["msg_type"], m["content"])),
                                   **kw)
    return reply["content"], out


def shell_reply(kc, msg_id, timeout=120):
    """The reply to msg_id: wait_for_ready may leave a kernel_info_reply of
    its retries on the shell channel."""
    while True:
        r = kc.get_shell_msg(timeout=timeout)
        if r["parent_header"].get("msg_id") == msg_id:
            return r


def stdout_of(out):
    return "".join(c["text"] for t, c in out if t == "stream" and c["name"] == "stdout")


# ---- installation --------------------------------------------------------------

def test_install_writes_a_kernelspec_jupyter_lists():
    install("--display-name", "Other", "--timeout", "20", "-w", WS, name="airlock-other")
    p = subprocess.run(["jupyter", "kernelspec", "list", "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    specs = json.loads(p.stdout)["kernelspecs"]
    assert KERNEL in specs and "airlock-other" in specs, specs.keys()
    spec = specs["airlock-other"]["spec"]
    assert spec["display_name"] == "Other" and spec["language"] == "python", spec
    assert spec["interrupt_mode"] == "message", spec
    argv = spec["argv"]
    assert argv[:4] == [os.path.realpath(AIRLOCK), "kernel", "-f", "{connection_file}"], argv
    assert argv[4:] == ["--timeout", "20", "-w", WS], argv
    # A bad sandbox option is refused at install, naming it.
    p = subprocess.run([AIRLOCK, "kernel", "install", "--user", "--no-such"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--no-such" in p.stderr, p.stderr
    p = subprocess.run([AIRLOCK, "kernel", "install", "--user", "--name", "a/b"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--name" in p.stderr, p.stderr


# ---- the conformance suite ----------------------------------------------------------

import jupyter_kernel_test  # noqa: E402


class AirlockKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "str.capitaliz", "matches": {"str.capitalize"}},
    ]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    # No pager: the kernel has no `?` syntax nor page payloads; help()
    # prints its text as a stream (code_page_something stays empty).
    code_generate_error = "raise ValueError('boom')"
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
        {"code": "class H:\n def _repr_html_(self): return '<b>h</b>'\nH()",
         "mime": "text/html", "result": "<b>h</b>"},
    ]
    code_display_data = [
        {"code": "import airlock\nclass P:\n def _repr_png_(self): return b'\\x89PNG\\r\\n'\n"
                 "airlock.display(P())", "mime": "image/png"},
        {"code": "import airlock, pandas\nairlock.display(pandas.DataFrame({'a': [1, 2]}))",
         "mime": "text/html"},
        {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
         "mime": "image/png"},
    ]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "zip"
    code_clear_output = "import airlock; airlock.clear_output()"


def test_conformance_suite():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(AirlockKernelTests)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    assert result.wasSuccessful(), (result.failures, result.errors)
    skipped = {t.id().rsplit(".", 1)[1] for t, _ in result.skipped}
    # The pager only (see code_page_something).
    assert skipped <= {"test_pager"}, skipped


# ---- a real notebook -------------------------------------------------------------------

def notebook():
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (airlock test)",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("import pandas as pd\ndf = pd.read_csv('/input/data.csv')\ndf"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot(df.x, df.y)\n"
                                  "plt.title('from /input')\nplt.show()"),
        nbformat.v4.new_code_cell("df = None\nraise RuntimeError('this cell fails')"),
        nbformat.v4.new_code_cell("print(type(df).__name__, len(df), int(df.y.sum()))"),
    ]
    return nb


def check_executed(nb):
    c0, c1, c2, c3 = nb.cells
    html = [o for o in c0.outputs if o.output_type == "execute_result"]
    assert html and "<table" in html[0].data["text/html"], c0.outputs
    assert "text/plain" in html[0].data
    pngs = [o for o in c1.outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(pngs) == 1, c1.outputs
    import base64
    assert base64.b64decode(pngs[0].data["image/png"]).startswith(b"\x89PNG"), pngs
    errs = [o for o in c2.outputs if o.output_type == "error"]
    assert len(errs) == 1 and errs[0].ename == "RuntimeError", c2.outputs
    tb = "\n".join(errs[0].traceback)
    assert "raise RuntimeError('this cell fails')" in tb, tb  # the source line
    assert "rolled back" in tb, tb
    # The cell after the failing one sees the state from before it.
    text = "".join(o.get("text", "") for o in c3.outputs)
    assert text == "DataFrame 3 45\n", c3.outputs
    assert [c.execution_count for c in nb.cells] == [1, 2, 3, 4]


def test_nbclient_runs_a_notebook_through_the_kernelspec():
    from nbclient import NotebookClient
    nb = notebook()
    NotebookClient(nb, kernel_name=KERNEL, allow_errors=True, timeout=300).execute()
    check_executed(nb)


def test_nbconvert_execute_from_the_command_line():
    import nbformat
    path = os.path.join(HOME, "nb.ipynb")
    nbformat.write(notebook(), path)
    p = subprocess.run(["jupyter", "nbconvert", "--execute", "--to", "notebook", "--allow-errors",
                        f"--ExecutePreprocessor.kernel_name={KERNEL}",
                        "--ExecutePreprocessor.timeout=300", "--output", "nb.out.ipynb", path],
                       capture_output=True, text=True, timeout=600, cwd=HOME)
    assert p.returncode == 0, p.stderr
    check_executed(nbformat.read(os.path.join(HOME, "nb.out.ipynb"), as_version=4))


# ---- cells: live output, interrupt, limits, input ------------------------------------

def test_interrupt_cancels_the_running_cell_which_rolls_back():
    km, kc = start()
    try:
        reply, _ = execute(kc, "x = 1")
        assert reply["status"] == "ok", reply
        # The cell prints, then never ends: its output must reach the
        # notebook while it runs (live streams), and only an interrupt
        # ends it.
        msg_id = kc.execute("x = 2\nprint('started', flush=True)\nwhile True: pass")
        seen = ""
        while "started" not in seen:
            m = kc.get_iopub_msg(timeout=120)
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
                seen += m["content"]["text"]
        # A request queued behind the running cell is aborted when the
        # cell fails (stop_on_error), as ipykernel does.
        queued = kc.execute("x = 3")
        # Shell requests are read in order, and kernel_info is answered at
        # once: its reply means the kernel holds the queued request.
        shell_reply(kc, kc.kernel_info())
        km.interrupt_kernel()
        replies = {}
        while len(replies) < 2:
            r = kc.get_shell_msg(timeout=120)
            replies[r["parent_header"].get("msg_id")] = r
        assert replies[queued]["content"]["status"] == "aborted", replies[queued]
        r = replies[msg_id]
        c = r["content"]
        assert c["status"] == "error" and c["ename"] == "KeyboardInterrupt", c
        assert any("rolled back" in line for line in c["traceback"]), c
        reply, out = execute(kc, "x")
        assert reply["status"] == "ok", reply
        res = [c for t, c in out if t == "execute_result"]
        assert res and res[0]["data"]["text/plain"] == "1", out
    finally:
        stop(km, kc)


# ---- the pre-copy of a session's pages ------------------------------------------

PAGES = 2048


def active_process(km, kc):
    """The host pid of the session's active process: the process under the
    kernel whose pid in its own namespace is the one a cell reports."""
    reply, out = execute(kc, "import os; print(os.getpid())")
    assert reply["status"] == "ok", reply
    ns = stdout_of(out).strip()
    children = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    found, todo = [], list(children.get(km.provisioner.process.pid, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                ids = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
        except (OSError, IndexError):
            continue
        if ids[-1] == ns:
            found.append((len(ids), pid))
    # The session's own PID namespace is the innermost.
    deepest = [pid for depth, pid in found if depth == max(found)[0]]
    assert len(deepest) == 1, (ns, found)
    return deepest[0]


def minflt(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def wait_precopied(pid, end, pages):
    """Waits until the active process pid has made at least pages private
    copies since a cell ended with end minor faults (its own count, which
    /proc counts alike; MADV_POPULATE_WRITE counts as one each): the
    pre-copy after a cell, which runs when no frame of the host is waiting.
    Without one it never comes, and the test fails."""
    deadline = time.monotonic() + 60
    while minflt(pid) - end < pages:
        assert time.monotonic() < deadline, f"no pre-copy: {minflt(pid) - end} of {pages} pages"
        time.sleep(0.01)


# The end of a cell that waits for the pre-copy after it: its minor faults
# so far.
ENDING = "\nprint(__import__('resource').getrusage(0).ru_minflt)"


def writes(kc, value, first=False):
    """Runs a cell that writes one byte in each page of buf (made first when
    first); returns (faults while it wrote, its minor faults at its end)."""
    reply, out = execute(kc, "import resource\n"
                             + (f"buf = bytearray({PAGES} * 4096)\n" if first else "")
                             + "r0 = resource.getrusage(0).ru_minflt\n"
                             f"buf[::4096] = bytes([{value}]) * {PAGES}\n"
                             "print(resource.getrusage(0).ru_minflt - r0)" + ENDING)
    assert reply["status"] == "ok", reply
    faults, end = stdout_of(out).split()
    return int(faults), int(end)


def test_a_session_copies_the_pages_its_last_cell_wrote_and_rolls_back_as_before():
    km, kc = start()
    try:
        # The first cell writes every page of buf: the active process holds
        # them alone until the next cell base is forked, and then copies
        # them again at once (tpl_prefault.c, the session's pre-copy).
        pid = active_process(km, kc)
        _, end = writes(kc, 1, first=True)
        wait_precopied(pid, end, PAGES)
        # So the next cell writes them without a fault each (without the
        # pre-copy: one copy-on-write fault a page).
        faults, end = writes(kc, 3)
        assert faults < PAGES // 4, faults
        # A cell that writes the pages the pre-copy copied, then fails, is
        # rolled back: the state is the one before it, byte for byte.
        wait_precopied(pid, end, PAGES)
        reply, _ = execute(kc, f"buf[::4096] = bytes([4]) * {PAGES}\nlost = 1\n"
                               "raise ValueError('after the writes')")
        assert reply["status"] == "error" and reply["evalue"] == "after the writes", reply
        reply, out = execute(kc, f"print(bytes(buf[::4096]) == bytes([3]) * {PAGES}, "
                                 f"buf.count(0) == len(buf) - {PAGES}, 'lost' in dir())")
        assert reply["status"] == "ok", reply
        assert stdout_of(out).split() == ["True", "True", "False"], out
        # The rollback's new active process learns from a page map of its
        # own memory: its next cells are pre-copied too.
        pid = active_process(km, kc)
        _, end = writes(kc, 5)
        wait_precopied(pid, end, PAGES)
        faults, _ = writes(kc, 6)
        assert faults < PAGES // 4, faults
        reply, out = execute(kc, f"print(bytes(buf[::4096]) == bytes([6]) * {PAGES})")
        assert stdout_of(out).split() == ["True"], out
    finally:
        stop(km, kc)


def test_a_cell_past_a_limit_errs_naming_it_and_the_kernel_lives_on():
    km, kc = start()
    try:
        execute(kc, "keep = 'kept'")
        reply, out = execute(kc, "keep = None\nb = bytearray(4 << 30)")
        assert reply["status"] == "error", reply
        text = (reply["ename"] + " " + reply["evalue"]).lower()
        assert "memory" in text, reply
        assert any("rolled back" in line for line in reply["traceback"]), reply
        reply, out = execute(kc, "print(keep)")
        assert reply["status"] == "ok" and stdout_of(out) == "kept\n", (reply, out)
        # A cell the library refuses (its code past the 16 MiB cap, once the
        # kernel has wrapped it) is that cell's error; the kernel goes on.
        reply, out = execute(kc, "big = '" + "a" * (13 << 20) + "'")
        assert reply["status"] == "error", reply
        assert "MiB" in reply["evalue"], reply
        reply, out = execute(kc, "print(keep)")
        assert reply["status"] == "ok" and stdout_of(out) == "kept\n", (reply, out)
    finally:
        stop(km, kc)


def test_a_cell_sent_after_a_failed_cells_reply_runs():
    # stop_on_error aborts the requests queued behind a failed cell, not
    # one the front-end sends once it has the failed cell's reply: that is
    # how a notebook's "run all" and a test client go on after an error.
    km, kc = start()
    try:
        for i in range(20):
            reply, _ = execute(kc, "1/0")
            assert reply["status"] == "error" and reply["ename"] == "ZeroDivisionError", reply
            reply, out = execute(kc, f"print({i})")
            assert reply["status"] == "ok", (i, reply)
            assert stdout_of(out) == f"{i}\n", (i, out)
    finally:
        stop(km, kc)


def test_input_asks_the_front_end_through_the_stdin_channel():
    km, kc = start()
    try:
        asked = []

        def answer(msg):
            asked.append(msg["content"])
            kc.input("s3cret" if msg["content"]["password"] else "Ada Lovelace")

        reply, out = execute(kc, "print('before', flush=True)\nname = input('name? ')\n"
                                 "import getpass\npw = getpass.getpass('pw: ')\n"
                                 "print(name, len(pw))", allow_stdin=True, stdin_hook=answer)
        assert reply["status"] == "ok", reply
        assert asked == [{"prompt": "name? ", "password": False},
                         {"prompt": "pw: ", "password": True}], asked
        assert stdout_of(out) == "before\nAda Lovelace 6\n", out
        # ipykernel's end of file: the reply "\x04" is EOFError.
        reply, out = execute(kc, "try:\n    input()\nexcept EOFError:\n    print('eof')",
                             allow_stdin=True, stdin_hook=lambda m: kc.input("\x04"))
        assert stdout_of(out) == "eof\n", (reply, out)
        # The value stays the session's, as any variable.
        reply, out = execute(kc, "print(name)")
        assert stdout_of(out) == "Ada Lovelace\n", out
        # An interrupt while the cell waits for its answer cancels the
        # cell, which rolls back: the front-end never answers.
        reply, out = execute(kc, "name = None\ninput('never answered: ')", allow_stdin=True,
                             stdin_hook=lambda m: km.interrupt_kernel())
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
        assert any("rolled back" in line for line in reply["traceback"]), reply
        reply, out = execute(kc, "print(name)")
        assert stdout_of(out) == "Ada Lovelace\n", out
        # A front-end without stdin: input() and getpass raise at once what
        # ipykernel raises, never a hang.
        for code, fn in (("input('name? ')", "raw_input"), ("__import__('getpass').getpass()",
                                                            "getpass")):
            reply, out = execute(kc, code, allow_stdin=False)
            assert reply["status"] == "error", reply
            assert reply["ename"] == "StdinNotImplementedError", reply
            assert reply["evalue"] == (f"{fn} was called, but this frontend does not support "
                                       "input requests."), reply
    finally:
        stop(km, kc)


def test_shutdown_with_restart_gives_a_fresh_session():
    km, kc = start()
    try:
        execute(kc, "y = 41")
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
        reply, out = execute(kc, "print('y' in globals())")
        assert stdout_of(out) == "False\n", out
    finally:
        stop(km, kc)


# ---- hostile messages -----------------------------------------------------------------

def test_hostile_messages_are_dropped_and_the_kernel_lives():
    log = os.path.join(HOME, "hostile.log")
    km, kc = start(stderr_path=log)
    try:
        execute(kc, "hits = 0")
        info = km.get_connection_info()
        ctx = zmq.Context.instance()
        sess = Session(key=info["key"], signature_scheme="hmac-sha256")
        url = f"tcp://{info['ip']}:{info['shell_port']}"

        def sock():
            s = ctx.socket(zmq.DEALER)
            s.linger = 0
            s.connect(url)
            return s

        def request(code):
            return sess.msg("execute_request", {"code": code, "silent": False,
                                                "store_history": False, "user_expressions": {},
                                                "allow_stdin": False, "stop_on_error": False})

        s = sock()
        # Unsigned and wrongly signed: never run.
        msg = request("hits += 100")
        parts = sess.serialize(msg)  # [DELIM, sig, header, parent, metadata, content]
        s.send_multipart([parts[0], b""] + parts[2:])
        s.send_multipart([parts[0], b"0" * 64] + parts[2:])
        flipped = parts[1][:-1] + (b"1" if parts[1].endswith(b"0") else b"0")
        s.send_multipart([parts[0], flipped] + parts[2:])
        # A signed one once, then replayed: runs once.
        msg = request("hits += 1")
        parts = sess.serialize(msg)
        s.send_multipart(parts)
        s.send_multipart(parts)
        # Truncated: without the delimiter, without parts, a lone frame.
        s.send_multipart(parts[2:])
        s.send_multipart(parts[:3])
        s.send_multipart([b"x"])
        # Signed, but not JSON objects, or without a msg_type.
        for header in (b"[]", b"{not json", json.dumps({"msg_id": "h1"}).encode()):
            body = [header, b"{}", b"{}", b"{}"]
            s.send_multipart([b"<IDS|MSG>", sess.sign(body)] + body)
        # An unknown message type, signed: ignored.
        m = sess.msg("no_such_request", {})
        s.send_multipart(sess.serialize(m))
        # Too many frames.
        s.send_multipart([b"a"] * 100)
        # An oversized frame: libzmq drops the connection of its sender.
        big = sock()
        big.send_multipart([b"<IDS|MSG>", b"0" * 64, b"{" + b" " * (40 << 20) + b"}",
                            b"{}", b"{}", b"{}"])
        # The kernel still answers, on the same channels.
        reply, out = execute(kc, "print(hits)")
        assert reply["status"] == "ok" and stdout_of(out) == "1\n", (reply, out)
        r = shell_reply(kc, kc.kernel_info())
        assert r["msg_type"] == "kernel_info_reply", r
        # The shell answers the signed request (once) on the raw socket too.
        replies = []
        while s.poll(2000):
            replies.append(sess.deserialize(sess.feed_identities(s.recv_multipart())[1]))
        types = [r["msg_type"] for r in replies]
        assert types.count("execute_reply") == 1, types
        s.close()
        big.close()
    finally:
        stop(km, kc)
    with open(log) as f:
        lines = [line for line in f.read().splitlines() if "airlock kernel:" in line]
    dropped = [line for line in lines if "dropped" in line]
    # One line each: 3 signatures, 1 replay, 3 truncated, 3 malformed, 1 too many frames.
    assert len(dropped) == 11, lines
    assert sum("without a signature" in line or "wrong signature" in line
               for line in dropped) == 3, dropped
    assert sum("replayed" in line for line in dropped) == 1, dropped
    assert any("no_such_request" in line for line in lines), lines


def test_completion_and_inspection_never_change_the_session():
    """rlcompleter reads every attribute of what it completes, a property's
    getter included: the helpers run in a fork of the session, closed after
    them, so the getter's side effect never reaches the session."""
    km, kc = start()
    try:
        reply, _ = execute(kc, "class C:\n    n = 0\n    @property\n    def p(self):\n"
                               "        C.n += 1\n        return 1\nc = C()")
        assert reply["status"] == "ok", reply
        r = shell_reply(kc, kc.complete("c.", 2))
        assert "c.p" in r["content"]["matches"], r["content"]
        r = shell_reply(kc, kc.inspect("c.p", 3, 1))
        assert r["content"]["found"], r["content"]
        reply, out = execute(kc, "print(C.n)")
        assert stdout_of(out) == "0\n", out
    finally:
        stop(km, kc)


def test_comms_are_closed_as_by_a_kernel_without_comms():
    km, kc = start()
    try:
        msg = kc.session.msg("comm_info_request", {})
        kc.shell_channel.send(msg)
        r = shell_reply(kc, msg["header"]["msg_id"])
        assert r["msg_type"] == "comm_info_reply" and r["content"]["comms"] == {}, r
        opened = kc.session.msg("comm_open", {"comm_id": "c1", "target_name": "t", "data": {}})
        kc.shell_channel.send(opened)
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "comm_close":
                assert m["content"]["comm_id"] == "c1", m
                break
    finally:
        stop(km, kc)


def test_a_crash_of_the_sandbox_ends_the_kernel_with_a_message():
    log = os.path.join(HOME, "crash.log")
    km, kc = start(stderr_path=log)
    try:
        execute(kc, "a = 1")
        pid = km.provisioner.process.pid
        # Every process below the kernel: the sandbox's template, its copy,
        # the session's interpreter.
        table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True,
                               text=True).stdout.split()
        children = {}
        for child, parent in zip(table[::2], table[1::2]):
            children.setdefault(int(parent), []).append(int(child))
        todo, below = [pid], []
        while todo:
            for c in children.get(todo.pop(), []):
                below.append(c)
                todo.append(c)
        assert below, "no sandbox processes under the kernel"
        for p in below:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        reply, out = execute(kc, "print(a)")
        assert reply["status"] == "error", reply
        assert any("restart the kernel" in line for line in reply["traceback"]), reply
        km.provisioner.process.wait(timeout=60)
        assert km.provisioner.process.returncode == 3
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    with open(log) as f:
        text = f.read()
    assert "the sandbox's session ended" in text and "restart it" in text, text


def test_the_banner_names_airlock():
    km, kc = start()
    try:
        r = shell_reply(kc, kc.kernel_info())
        c = r["content"]
        assert "airlock" in c["banner"] and c["language_info"]["name"] == "python", c
        assert c["protocol_version"] == "5.3", c
        # The heartbeat echoes.
        info = km.get_connection_info()
        hb = zmq.Context.instance().socket(zmq.REQ)
        hb.linger = 0
        hb.connect(f"tcp://{info['ip']}:{info['hb_port']}")
        hb.send(b"ping")
        assert hb.poll(60000) and hb.recv() == b"ping"
        hb.close()
    finally:
        stop(km, kc)


# ---- a real browser ----------------------------------------------------------------------

@contextlib.contextmanager
def browser_on(nb, name):
    """The Notebook server on loopback with a temporary token, serving a
    folder of its own that holds nb as NAME, and headless Chromium driven by
    Selenium on that notebook, its kernel connected. Yields (driver, the
    notebook's folder)."""
    import secrets
    import socket
    import urllib.request

    import nbformat
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    nbdir = os.path.join(HOME, "browser-" + name.split(".")[0])
    os.makedirs(nbdir)
    nbformat.write(nb, os.path.join(nbdir, name))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    log = os.path.join(HOME, "notebook-" + name + ".log")
    server = subprocess.Popen(
        ["jupyter", "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", "--port-retries=0", f"--NotebookApp.token={token}",
         f"--notebook-dir={nbdir}"],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    driver = None
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                assert server.poll() is None, open(log).read()
                time.sleep(0.2)
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                  "--window-size=1200,900"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"),
                                  options=opts)
        driver.get(f"{base}/notebooks/{name}?token={token}")
        WebDriverWait(driver, 180).until(lambda d: d.execute_script(
            "return window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && "
            "Jupyter.notebook.kernel.is_connected()"))
        yield driver, nbdir
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def test_a_browser_runs_a_notebook_that_draws_a_figure():
    """A cell that draws a figure shows it as an <img> in a real browser.
    The screenshot is kept as BUILD/kernel-notebook.png."""
    import nbformat
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (airlock test)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.title('airlock')\nplt.show()")]
    with browser_on(nb, "figure.ipynb") as (driver, _):
        wait = WebDriverWait(driver, 180)
        driver.execute_script("Jupyter.notebook.clear_all_output(); "
                              "Jupyter.notebook.execute_all_cells();")
        img = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".output_area img"))
        src = img[0].get_attribute("src")
        assert src.startswith("data:image/png;base64,"), src[:80]
        assert img[0].size["width"] > 100, img[0].size
        shot = os.path.join(os.environ.get("AIRLOCK_BUILD", "build"), "kernel-notebook.png")
        driver.save_screenshot(shot)
        assert os.path.getsize(shot) > 1000


# Each way a cell's code could hand the notebook page a script: a
# representation of each kind that can hold one (_repr_html_ with <script>
# and an event attribute, _repr_javascript_, _repr_svg_, _repr_markdown_
# with raw HTML and a javascript: link, a _repr_mimebundle_ naming any
# type), through the final expression, airlock.display() and a record
# forged on stdout. Each sets a flag of its own on the page, and one saves
# a file through the Notebook server's API, outside the sandbox.
SCRIPT_CELLS = [
    "import airlock\n"
    "J = \"window.__al_{0} = 1; Jupyter.notebook.contents.save('escaped-{0}.txt', "
    "{{type: 'file', format: 'text', content: 'written by the sandbox'}})\"\n"
    "class Html:\n"
    "    def __init__(self, tag): self.tag = tag\n"
    "    def _repr_html_(self):\n"
    "        return ('<b>bold</b><img src=x onerror=\"' + J.format('img' + self.tag) + '\">'\n"
    "                '<script>' + J.format('script' + self.tag) + '</script>'\n"
    "                '<a href=\"javascript:' + J.format('href' + self.tag) + '\">link</a>'\n"
    "                '<iframe srcdoc=\"&lt;script&gt;parent.' + J.format('srcdoc' + self.tag)\n"
    "                + '&lt;/script&gt;\"></iframe>'\n"
    "                '<svg><animate onbegin=\"' + J.format('anim' + self.tag) + '\" '\n"
    "                'attributeName=x dur=1s></animate></svg>'\n"
    "                '<details open ontoggle=\"' + J.format('toggle' + self.tag) + '\">d</details>')\n"
    "class Js:\n"
    "    def _repr_javascript_(self): return J.format('js')\n"
    "class Svg:\n"
    "    def _repr_svg_(self):\n"
    "        return ('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"' + J.format('svg')\n"
    "                + '\"><script>' + J.format('svgscript') + '</script></svg>')\n"
    "class Md:\n"
    "    def _repr_markdown_(self):\n"
    "        return ('md <img src=x onerror=\"' + J.format('md') + '\"> '\n"
    "                '<script>' + J.format('mdscript') + '</script>')\n"
    "class Bundle:\n"
    "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
    "        return {'text/html': '<img src=x onerror=\"' + J.format('bundle') + '\">',\n"
    "                'application/javascript': J.format('bundlejs')}\n"
    "airlock.display(Html('display'))\n"
    "for o in (Js(), Svg(), Md(), Bundle()):\n"
    "    airlock.display(o)\n"
    "import json\n"
    "print('\\x1eairlock-kernel:' + json.dumps({'type': 'display', 'data': {\n"
    "    'text/html': '<img src=x onerror=\"' + J.format('forged') + '\">'}}))\n",
    "Html('result')",
]


def test_a_cells_output_cannot_run_a_script_in_the_notebook_page():
    """The notebook page is the Notebook server's origin: a script there
    reaches the server's whole API (its contents, terminals and other
    kernels), outside the sandbox. What a cell shows is what its untrusted
    code chose, so the kernel hands the page no representation that can run
    a script: no javascript, no SVG or markdown, and HTML only as rewritten
    from an allow-list of tags and attributes (a table, text and images
    stay). The flags and the saved files stay unset; the HTML's bold text
    and the link's text still show."""
    import nbformat
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (airlock test)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in SCRIPT_CELLS]
    with browser_on(nb, "scripts.ipynb") as (driver, nbdir):
        wait = WebDriverWait(driver, 180)
        driver.execute_script("Jupyter.notebook.clear_all_output(); "
                              "Jupyter.notebook.execute_all_cells();")
        # Both cells answered: the last one's result is on the page.
        wait.until(lambda d: d.execute_script(
            "var c = Jupyter.notebook.get_cells(); return c[c.length - 1].output_area"
            ".outputs.length > 0 && !Jupyter.notebook.kernel_busy"))
        # An image error of the test's own, after every output: its handler
        # runs after theirs would have.
        driver.execute_script(
            "var i = document.createElement('img'); i.onerror = function () "
            "{ window.__al_barrier = 1; }; i.src = 'x-barrier'; document.body.appendChild(i);")
        wait.until(lambda d: d.execute_script("return window.__al_barrier === 1"))
        flags = driver.execute_script(
            "return Object.keys(window).filter(function (k) { return k.indexOf('__al_') === 0 "
            "&& k !== '__al_barrier'; })")
        areas = driver.find_elements(By.CSS_SELECTOR, ".output_area")
        html = "".join(a.get_attribute("innerHTML") for a in areas)
        bold = [b.text for b in driver.find_elements(By.CSS_SELECTOR, ".output_area b")]
    escaped = [n for n in os.listdir(nbdir) if n.startswith("escaped-")]
    assert flags == [] and escaped == [], (flags, escaped)
    for bad in ("onerror", "onload", "onbegin", "ontoggle", "<script", "javascript:", "srcdoc",
                "<iframe", "<svg"):
        assert bad not in html.lower(), (bad, html)
    assert bold == ["bold", "bold"], (bold, html)
    assert "link" in html, html


# HTML a cell shows -> what the page gets (ksafe.c): allowed tags and
# attributes re-serialised, everything else dropped or escaped.
HTML_CASES = [
    ("<b>h</b>", "<b>h</b>"),
    ("<TABLE border=1 class='dataframe'><TR style='text-align: right;'><TD colspan=2>x</td>"
     "</tr></table>",
     '<table border="1" class="dataframe"><tr style="text-align: right"><td colspan="2">x</td>'
     "</tr></table>"),
    ('<img src="x" onerror="alert(1)">', "<img>"),
    ("<IMG SRC=javascript:alert(1)>", "<img>"),
    ('<img src="data:image/png;base64,iVBORw0KGgo=">',
     '<img src="data:image/png;base64,iVBORw0KGgo=">'),
    ('<a href="javascript:alert(1)">x</a>', "x"),
    ('<div style="background:url(javascript:alert(1)); color: red">d</div>',
     '<div style="color: red">d</div>'),
    ("<td title='a\" onmouseover=\"alert(1)'>t</td>",
     '<td title="a&quot; onmouseover=&quot;alert(1)">t</td>'),
    ("<div/onmouseover=alert(1)>d</div>", "<div>d</div>"),
    ("<scr<script>ipt>alert(1)</script>", "ipt&gt;alert(1)"),
    ("<svg><g><svg></svg><script>alert(1)</script></g></svg>after", "after"),
    ("<style>body{display:none}</style><p>p</p>", "<p>p</p>"),
    ("<!--<img src=x onerror=alert(1)>-->c", "c"),
    ("<math><mi xlink:href='javascript:alert(1)'>m</mi></math>", ""),
    ("&lt;script&gt; a < b && c > d &amp; &#60; &#x3c;",
     "&lt;script&gt; a &lt; b &amp;&amp; c &gt; d &amp; &#60; &#x3c;"),
    ("<iframe srcdoc='<script>alert(1)</script>'></iframe>i", "i"),
    ("<details open ontoggle=alert(1)>d</details>", "d"),
    ("<p>unclosed <img src=x onerror=alert(1)", "<p>unclosed "),
    ('<div title="x>never closed', ""),
]


def test_html_a_cell_shows_is_rewritten_from_an_allow_list():
    """Each case's HTML as display_data and as a final expression gives the
    rewritten text; a representation that can only be a script (javascript,
    SVG, markdown) is dropped, and a bundle left empty says so."""
    km, kc = start()
    try:
        code = ("import airlock, json\nclass H:\n    def __init__(self, h): self.h = h\n"
                "    def _repr_html_(self): return self.h\n"
                f"for h in json.loads({json.dumps(json.dumps([c for c, _ in HTML_CASES]))}):\n"
                "    airlock.display(H(h))\n"
                "class J:\n    def _repr_javascript_(self): return 'alert(1)'\n"
                "    def _repr_svg_(self): return '<svg onload=alert(1)></svg>'\n"
                "airlock.display(J())\n"
                "airlock.display({'application/javascript': 'alert(1)', 'image/svg+xml': '<svg/>'},"
                " raw=True)\n"
                "H('<b>r</b><script>alert(1)</script>')")
        reply, out = execute(kc, code)
        assert reply["status"] == "ok", reply
        shown = [c["data"] for t, c in out if t == "display_data"]
        got = [d.get("text/html") for d in shown[:len(HTML_CASES)]]
        assert got == [want for _, want in HTML_CASES], list(zip(got, HTML_CASES))
        plain, note = shown[len(HTML_CASES):]
        assert list(plain) == ["text/plain"] and "J object" in plain["text/plain"], plain
        assert list(note) == ["text/plain"] and "application/javascript" in note["text/plain"] \
            and "image/svg+xml" in note["text/plain"], note
        result = [c["data"] for t, c in out if t == "execute_result"]
        assert result and result[0]["text/html"] == "<b>r</b>", result
    finally:
        stop(km, kc)


def test_the_history_a_cell_fills_is_capped_with_its_outputs():
    """A cell's code chooses its final expression's text, and a record it
    forges on stdout may carry 60 MiB of it: the history the kernel keeps
    (inputs and outputs, for history_request with output) stays within its
    64 MiB in all, its oldest cells going first; before, only the inputs
    counted, and each cell added its output to the kernel's memory, outside
    the sandbox's limits."""
    km, kc = start()
    try:
        cell = ("import json\nprint('\\x1eairlock-kernel:' + json.dumps({'type': 'result', "
                "'data': {'text/plain': 'x' * (8 << 20)}}))")
        for _ in range(9):
            reply, _ = execute(kc, cell)
            assert reply["status"] == "ok", reply
        msg_id = kc.history(hist_access_type="tail", n=100, output=True)
        hist = shell_reply(kc, msg_id)["content"]["history"]
        outputs = [h[2][1] for h in hist if h[2][1]]
        assert outputs and sum(len(o) for o in outputs) <= 64 << 20, \
            (len(outputs), sum(len(o) for o in outputs))
    finally:
        stop(km, kc)


def kernel_peak_rss(km):
    """The kernel process's peak resident memory, in bytes (VmHWM)."""
    with open(f"/proc/{km.provisioner.process.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_record_costs_the_kernel_no_more_than_its_cap_to_parse():
    """A record a cell forges on stdout is parsed by the kernel, outside the
    sandbox: 16 MiB of [0,0,... (within the 64 MiB cap on a record's text)
    is 8 million JSON values, which jansson would hold in about 500 MB. Its
    cost is measured before it is parsed, and one past the cap is dropped
    with a line naming it, as a record too long is; the kernel's peak
    memory stays far below what parsing it takes."""
    km, kc = start()
    try:
        before = kernel_peak_rss(km)
        cell = ("import sys\nsys.stdout.write('\\x1eairlock-kernel:{\"type\": \"display\", "
                "\"data\": {\"application/json\": [' + '0,' * (8 << 20) + '0]}}\\n')\n"
                "sys.stdout.flush()")
        reply, out = execute(kc, cell)
        assert reply["status"] == "ok", reply
        grew = kernel_peak_rss(km) - before
        assert grew < 256 << 20, f"the kernel's peak memory grew by {grew >> 20} MiB"
        assert not [c for t, c in out if t == "display_data"], "parsed and shown"
        err = "".join(c["text"] for t, c in out if t == "stream" and c["name"] == "stderr")
        assert "was not shown" in err and "MiB" in err, err
    finally:
        stop(km, kc)


def test_what_a_cell_shows_the_page_is_capped_until_its_output_is_cleared():
    """A cell's code chooses how much it prints and displays, and the page
    (and the notebook saved with it) holds all of it, outside the sandbox's
    limits: its stdout and stderr reach the page at most --max-stdout each
    (1 MiB by default, as `airlock run` cuts them), its displays at most
    64 MiB, each cut with one line on stderr naming the cap, until its
    output is cleared (clear_output), which empties the page's copy. Before,
    every byte went on: a cell printing 4 MiB sent the page 4 MiB."""
    km, kc = start()
    try:
        cell = ("import sys, airlock\n"
                "for s in (sys.stdout, sys.stderr):\n"
                "    for i in range(64):\n"
                "        s.write('x' * 65535 + '\\n')\n"
                "    s.flush()\n"
                "for i in range(80):\n"
                "    airlock.display({'text/plain': 'd' * (1 << 20)}, raw=True)\n"
                "airlock.clear_output()\n"
                "print('after the clear', flush=True)\n"
                "airlock.display({'text/plain': 'shown again'}, raw=True)\n")
        reply, out = execute(kc, cell)
        assert reply["status"] == "ok", reply
        cleared = [i for i, (t, _) in enumerate(out) if t == "clear_output"]
        assert len(cleared) == 1, [t for t, _ in out]
        before, after = out[:cleared[0]], out[cleared[0] + 1:]

        def stream(msgs, name):
            return "".join(c["text"] for t, c in msgs if t == "stream" and c["name"] == name)
        assert len(stream(before, "stdout")) == 1 << 20, len(stream(before, "stdout"))
        err = stream(before, "stderr")
        assert err.count("passed --max-stdout (1024 KiB)") == 2, err[-600:]
        assert "stdout" in err and len(err) < (1 << 20) + 600, len(err)
        shown = [c for t, c in before if t == "display_data"]
        assert 0 < len(shown) < 80 and sum(len(c["data"]["text/plain"]) for c in shown) \
            <= 64 << 20, len(shown)
        assert err.count("displays passed 64 MiB") == 1, err[-600:]
        assert stream(after, "stdout") == "after the clear\n", after
        assert [c["data"]["text/plain"] for t, c in after if t == "display_data"] \
            == ["shown again"], after
    finally:
        stop(km, kc)


def test_a_cells_error_counts_in_what_it_shows_the_page():
    """A cell chooses its error's message as it chooses its displays, and
    the page shows it and the notebook saves it, on iopub and again in the
    reply: a cell that had shown its 64 MiB of displays then raised with a
    message of 24 MiB sent the page 48 MiB more of it (its evalue and its
    traceback's last line), twice. Now the error counts with the displays:
    past the cap the page gets its name and one line naming the cap."""
    km, kc = start()
    try:
        cell = ("import airlock\n"
                "for i in range(70):\n"
                "    airlock.display({'text/plain': 'd' * (1 << 20)}, raw=True)\n"
                "raise ValueError('v' * (24 << 20))\n")
        reply, out = execute(kc, cell)
        assert reply["status"] == "error" and reply["ename"] == "ValueError", reply["ename"]
        errors = [c for t, c in out if t == "error"]
        assert len(errors) == 1
        for e in (errors[0], reply):
            size = len(e["evalue"]) + sum(len(line) for line in e["traceback"])
            assert size < 4096, size
            assert any("KSHOW_MAX" in line for line in e["traceback"]), e["traceback"][:3]
        # A cell within the cap keeps its error whole.
        reply, out = execute(kc, "raise ValueError('v' * 1000)")
        assert reply["evalue"] == "v" * 1000, reply["evalue"][:80]
    finally:
        stop(km, kc)


def test_displays_are_capped_at_what_the_page_gets_not_what_the_cell_wrote():
    """The displays' cap (64 MiB) counted the text the cell wrote, but the
    page gets the bundle made safe, where a "<" of HTML text is "&lt;":
    a cell displaying 2 MiB of "<" ten times (20 MiB written) sent the page
    80 MiB of HTML. Now the cap counts what is sent."""
    km, kc = start()
    try:
        cell = ("import airlock\n"
                "for i in range(10):\n"
                "    airlock.display({'text/html': '<' * (2 << 20)}, raw=True)\n")
        reply, out = execute(kc, cell)
        assert reply["status"] == "ok", reply
        html = [c["data"].get("text/html", "") for t, c in out if t == "display_data"]
        assert html and set(html[0]) == {"&", "l", "t", ";"}, html[0][:40]
        assert sum(len(h) for h in html) <= 64 << 20, sum(len(h) for h in html)
        err = "".join(c["text"] for t, c in out if t == "stream" and c["name"] == "stderr")
        assert err.count("displays passed 64 MiB") == 1, err[-400:]
    finally:
        stop(km, kc)


def test_execute_request_is_a_span_with_the_cells_run_under_it():
    # docs/tracing.md: the request's metadata.traceparent is the parent.
    from test_tracing import PARENT_ID, TRACE_ID, TRACEPARENT, Receiver, attrs, otel_env
    rcv = Receiver()
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in otel_env(rcv.port).items()
                       if k.startswith("OTEL_")})
    try:
        km, kc = start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        msg = kc.session.msg("execute_request", {"code": "x = 6 * 7", "silent": False},
                             metadata={"traceparent": TRACEPARENT})
        kc.shell_channel.send(msg)
        assert shell_reply(kc, msg["header"]["msg_id"])["content"]["status"] == "ok"
    finally:
        stop(km, kc)
    try:
        rcv.wait(lambda r: any(s["name"] == "airlock.cell" and s["traceId"] == TRACE_ID
                               for s in r.spans))
        ex = [s for s in rcv.spans if s["name"] == "execute_request"][0]
        assert ex["traceId"] == TRACE_ID and ex["parentSpanId"] == PARENT_ID, ex
        assert attrs(ex)["jupyter.msg_type"] == "execute_request", ex
        cell = [s for s in rcv.spans
                if s["name"] == "airlock.cell" and s["traceId"] == TRACE_ID][0]
        assert cell["parentSpanId"] == ex["spanId"], cell
    finally:
        rcv.close()


if __name__ == "__main__":
    try:
        run()
    finally:
        shutil.rmtree(HOME, ignore_errors=True)
