"""Every documented example, run as a reader copies it.

The fenced blocks of README.md and docs/*.md that a reader would run are run
here, each in a folder of its own, and each must do what the text beside it
says: the output shown, an exit status of 0, a server that comes up. The
conventions (what each kind of block must do, the marks `<!-- example:
skip: REASON -->` and `<!-- example: server -->`, what the folder holds) are
in docs/testing.md, "The examples of the documents".

Usage: python3 tests/docs/test_examples.py [SUBSTRING]   (AIRLOCK=build/airlock)
"""
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
AIRLOCK = os.path.abspath(os.environ.get("AIRLOCK") or os.path.join(ROOT, "build", "airlock"))
BUILD = os.path.dirname(AIRLOCK)
# A hanging example (a client never closed) fails after this many seconds.
TIMEOUT = 180
# The documents whose C blocks tests/build/test_install.sh compiles and runs.
C_DOCS = ("README.md", "docs/c-api.md")

MARK = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")


class Skip(Exception):
    pass


def documents():
    docs = [os.path.join(ROOT, "README.md")]
    docs += sorted(os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                   if f.endswith(".md"))
    return docs


def blocks(path):
    """The fenced blocks of one document: (line, language, text, marks)."""
    out = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        marks, j = [], i - 1
        while j >= 0 and MARK.match(lines[j]):
            marks.insert(0, MARK.match(lines[j]).group(1))
            j -= 1
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        out.append((i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n", marks))
        i = end + 1
    return out


def kind(lang, text):
    """What a block is, by its fence's language (a language not named here
    fails, so that a new kind of example is not left out unseen)."""
    lang = {"bash": "sh", "shell": "sh", "console": "", "javascript": "js", "mjs": "js"}.get(lang, lang)
    if lang in ("sh", "python", "js", "json", "c", "text"):
        return lang
    if lang == "":
        return "session" if re.search(r"^\$ ", text, re.M) else "text"
    raise AssertionError(f"a block in {lang!r}, which this test does not know how to run: "
                         "teach it (docs/testing.md), or mark the block skipped")


def substitute(text, folder):
    """The reader's own paths, as this example's folder has them."""
    text = text.replace("/usr/local/bin/airlock", AIRLOCK)
    text = text.replace("/home/me/project", folder)
    return re.sub(r"/srv/([\w/.-]+)", lambda m: srv(folder, m.group(1)), text)


def srv(folder, path):
    """A folder of the reader's own under /srv, as an empty one of the example's."""
    d = os.path.join(folder, "srv", path)
    os.makedirs(d, exist_ok=True)
    return d


def make_folder():
    folder = tempfile.mkdtemp(prefix="airlock-doc-example-")
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(folder, "examples"))
    shutil.copytree(os.path.join(ROOT, "examples", "sales"), os.path.join(folder, "data"))
    for f in ("tools.json", "compute.py"):
        shutil.copy(os.path.join(ROOT, "examples", f), folder)
    # What the configuration example of python.md mounts besides data/.
    os.makedirs(os.path.join(folder, "reports"))
    shutil.copy(os.path.join(ROOT, "examples", "sales", "sales.csv"),
                os.path.join(folder, "reports", "q3.csv"))
    return folder


def env():
    e = dict(os.environ)
    e["PATH"] = BUILD + os.pathsep + e.get("PATH", "")
    # The package built in place, as `make python` leaves it (python.md).
    e["PYTHONPATH"] = os.path.join(ROOT, "python")
    return e


def sh(cmd, folder, timeout=TIMEOUT):
    return subprocess.run(["bash", "-c", cmd], cwd=folder, env=env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def failed(what, p):
    raise AssertionError(f"{what} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}"
                         f"--- stderr\n{p.stderr[-3000:]}")


def matches(expected, got):
    """Lines shown in a document against lines printed; `...` is any lines."""
    pattern = "".join(r"(?:.*\n)*?" if line.strip() == "..." else re.escape(line.rstrip()) + r"[ \t]*\n"
                      for line in expected)
    return re.fullmatch(pattern, "".join(line.rstrip() + "\n" for line in got)) is not None


def complete(cmd):
    """Whether a command's quotes are closed (a quoted argument may go on
    over several lines, as in a terminal)."""
    try:
        shlex.split(cmd, comments=True)
        return True
    except ValueError:
        return False


def session(text, folder):
    """`$ ` lines: commands, each followed by the stdout it prints."""
    steps, lines = [], text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"output before any command: {lines[i]!r}")
        cmd = lines[i][2:]
        while (cmd.endswith("\\") or not complete(cmd)) and i + 1 < len(lines):
            i += 1
            cmd += "\n" + lines[i]
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        steps.append((cmd, shown))
    # One shell for the whole session, as in a terminal (an `export` or a
    # `cd` holds for the commands after it); each command's output and
    # status go to files of their own, outside the folder the commands see.
    with tempfile.TemporaryDirectory(prefix="airlock-doc-session-") as d:
        script = []
        for n, (cmd, shown) in enumerate(steps):
            m = re.fullmatch(r"cat (\S+)", cmd.strip())
            if m and shown:
                script.append(f"cat >{shlex.quote(m.group(1))} <<'AIRLOCK_DOC_EXAMPLE'\n"
                              + "\n".join(shown) + "\nAIRLOCK_DOC_EXAMPLE")
                steps[n] = (cmd, None)
                continue
            script.append(f"{{ {substitute(cmd, folder)}\n}} >{d}/{n}.out 2>{d}/{n}.err </dev/null\n"
                          f"s=$?; echo $s >{d}/{n}.rc; [ $s -eq 0 ] || exit 0")
        p = sh("\n".join(script) + "\n", folder)
        if p.returncode != 0:
            failed("the session", p)
        for n, (cmd, shown) in enumerate(steps):
            if shown is None:
                continue
            with open(f"{d}/{n}.rc") as f:
                rc = int(f.read())
            with open(f"{d}/{n}.out") as f:
                out = f.read()
            with open(f"{d}/{n}.err") as f:
                err = f.read()
            if rc != 0:
                failed(f"$ {cmd}", subprocess.CompletedProcess(cmd, rc, out, err))
            if shown and not matches(shown, out.split("\n")[:-1] if out else []):
                raise AssertionError(f"$ {cmd}\nprinted:\n{out}the document shows:\n"
                                     + "\n".join(shown))


def prints(text, comment):
    """The TEXT of each trailing `# prints TEXT` comment."""
    return [m.group(1).strip() for m in re.finditer(rf"{re.escape(comment)} prints (.+)$", text, re.M)]


def program(text, folder, name, argv, comment):
    with open(os.path.join(folder, name), "w") as f:
        f.write(substitute(text, folder))
    p = subprocess.run(argv + [name], cwd=folder, env=env(), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        failed(" ".join(argv + [name]), p)
    for want in prints(text, comment):
        if want not in p.stdout:
            raise AssertionError(f"the document says it prints {want!r}; it printed:\n{p.stdout}"
                                 f"--- stderr\n{p.stderr[-2000:]}")


def mcp_config(doc, folder):
    """A client's configuration: each server started as the client would, its
    tools listed, and execute_code called once."""
    servers = doc["mcpServers"]
    assert servers, "no servers"
    for name, s in servers.items():
        argv = [substitute(s["command"], folder)] + [substitute(a, folder) for a in s.get("args", [])]
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "doc-example", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "execute_code", "arguments": {"code": "print(6 * 7)"}}}]
        p = subprocess.run(argv, cwd=folder, env=env(), capture_output=True, text=True,
                           input="".join(json.dumps(m) + "\n" for m in msgs), timeout=TIMEOUT)
        replies = {}
        for line in p.stdout.splitlines():
            msg = json.loads(line)
            if "id" in msg:
                replies[msg["id"]] = msg
        if p.returncode != 0 or set(replies) != {1, 2, 3}:
            failed(f"server {name!r}: {' '.join(argv)}", p)
        tools = [t["name"] for t in replies[2]["result"]["tools"]]
        assert "execute_code" in tools, tools
        res = replies[3]["result"]
        assert not res.get("isError") and "42" in json.dumps(res["content"]), res


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server(text, folder):
    """A block that ends by starting `airlock serve --listen ADDR`: it must
    come up (its /readyz answers 200); then it is stopped with SIGTERM. Its port is replaced by a free one, as two checkouts may
    run this at once."""
    m = re.search(r"--listen 127\.0\.0\.1:(\d+)", text)
    assert m, "a server block without --listen 127.0.0.1:PORT"
    port = free_port()
    text = text.replace(f"127.0.0.1:{m.group(1)}", f"127.0.0.1:{port}")
    with open(os.path.join(folder, "example.sh"), "w") as f:
        f.write("set -e\n" + substitute(text, folder))
    p = subprocess.Popen(["bash", "example.sh"], cwd=folder, env=env(), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError(f"the server ended (status {p.returncode}) before it was "
                                     f"ready\n--- stdout\n{out[-3000:]}--- stderr\n{err[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server was not ready in time"
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=TIMEOUT)
    # bash itself may die of the SIGTERM its child drains on.
    if p.returncode not in (0, 143, -signal.SIGTERM):
        failed("the server, stopped with SIGTERM,", subprocess.CompletedProcess(
            p.args, p.returncode, out, err))


def run_block(path, line, lang, text, marks):
    serves = False
    for m in marks:
        if m.startswith("skip:"):
            if lang == "python":
                # Left out, but still a program a reader may copy: it must
                # at least be Python.
                try:
                    compile(text, f"{os.path.relpath(path, ROOT)}:{line}", "exec")
                except SyntaxError as e:
                    raise AssertionError(f"left out ({m}), but not a Python program: {e}")
            raise Skip(m[len("skip:"):].strip())
        if m == "server" and lang == "sh":
            serves = True
            continue
        raise AssertionError(f"unknown mark <!-- example: {m} --> (docs/testing.md lists them)")
    k = kind(lang, text)
    if k == "c" and os.path.relpath(path, ROOT) not in C_DOCS:
        raise AssertionError("a C block that tests/build/test_install.sh does not compile: "
                             "add this document there, or mark the block skipped")
    if k in ("text", "c"):
        return k
    folder = make_folder()
    try:
        if k == "session":
            session(text, folder)
        elif k == "sh" and serves:
            server(text, folder)
        elif k == "sh":
            p = sh("set -e\n" + substitute(text, folder), folder)
            if p.returncode != 0:
                failed("the block", p)
        elif k == "python":
            program(text, folder, "example.py", ["/usr/bin/python3"], "#")
        elif k == "js":
            os.symlink(os.path.join(ROOT, "tests", "mcp", "node_modules"),
                       os.path.join(folder, "node_modules"))
            program(text, folder, "example.mjs", ["node"], "//")
        elif k == "json":
            doc = json.loads(text)
            if "mcpServers" in doc:
                mcp_config(doc, folder)
            elif "tools" in doc:
                # A tools file: airlock loads it (its commands beside it, as
                # compute.py is in the folder).
                with open(os.path.join(folder, "example-tools.json"), "w") as f:
                    f.write(text)
                p = sh("airlock describe --tools example-tools.json", folder)
                if p.returncode != 0:
                    failed("airlock describe --tools FILE with the block as FILE", p)
        return k
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ONLY")
    if not os.access(AIRLOCK, os.X_OK):
        print(f"docs: {AIRLOCK} is not built (make)")
        print("docs: 0 passed, 1 failed")
        sys.exit(1)
    if not any(f.startswith("_airlock") and f.endswith(".so")
               for f in os.listdir(os.path.join(ROOT, "python", "airlock"))):
        print("docs: the Python package is not built (make python)")
        print("docs: 0 passed, 1 failed")
        sys.exit(1)
    todo = []
    for path in documents():
        for line, lang, text, marks in blocks(path):
            name = f"{os.path.relpath(path, ROOT)}:{line}"
            if not only or only in name:
                todo.append((name, (path, line, lang, text, marks)))
    jobs = int(os.environ.get("AIRLOCK_DOC_JOBS", "3"))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [(name, pool.submit(run_block, *args)) for name, args in todo]
        passed = failed_n = skipped = elsewhere = 0
        for name, fut in futures:
            try:
                k = fut.result()
            except Skip as e:
                skipped += 1
                print(f"skip {name}: {e}", flush=True)
                continue
            except Exception as e:
                failed_n += 1
                print(f"not ok {name}", flush=True)
                if isinstance(e, AssertionError):
                    print(e)
                else:
                    traceback.print_exception(e)
                continue
            if k == "text":
                continue
            if k == "c":
                elsewhere += 1
                print(f"ok {name} (C: compiled and run by tests/build/test_install.sh)", flush=True)
                continue
            passed += 1
            print(f"ok {name} ({k})", flush=True)
    print(f"docs: {passed} passed, {failed_n} failed, {skipped} skipped"
          f" ({elsewhere} C blocks run by test_install)")
    sys.exit(1 if failed_n else 0)


if __name__ == "__main__":
    main()
