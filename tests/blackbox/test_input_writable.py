"""A writable /input per run (issue 21, "Writing back"): with --input-writable
a run may create, modify, delete and rename files under /input, the result
lists exactly those changes with the new contents, the host's workspace is
never written, the next run sees the staged /input again, links and special
files are refused (never followed), and the /output caps hold. Without the
option /input stays read-only."""
import base64
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import mcp, run, run_json, tmpdir  # noqa: E402


def workspace():
    """A small workspace: files at the top, in a folder, and a folder to delete."""
    d = tmpdir()
    os.makedirs(os.path.join(d, "src", "deep"))
    os.makedirs(os.path.join(d, "old"))
    files = {"a.txt": b"alpha\n", "b.txt": b"bravo\n", "same.txt": b"same\n",
             "src/main.py": b"print('hi')\n", "src/deep/x.bin": bytes(range(256)),
             "old/one.txt": b"1\n", "old/two.txt": b"2\n"}
    for rel, data in files.items():
        with open(os.path.join(d, rel), "wb") as f:
            f.write(data)
    return d


def tree_state(d):
    """Every entry below d with its type, mode, size, mtime and a hash of its
    bytes: equal states mean the tree was not written."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in sorted(dirs + files):
            p = os.path.join(root, name)
            st = os.lstat(p)
            h = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, d)] = (st.st_mode, st.st_size, st.st_mtime_ns, h)
    return out


def changes(r):
    return [(c["path"], c["change"]) for c in r.get("input_changes", [])]


def data(r, path):
    for c in r["input_changes"]:
        if c["path"] == path:
            return base64.b64decode(c["data_base64"])
    raise AssertionError(f"{path} not in {changes(r)}")


def test_read_only_without_the_option():
    d = workspace()
    rc, r = run_json("""
import errno, os
for f in (lambda: open('/input/new.txt', 'w'), lambda: open('/input/a.txt', 'a'),
          lambda: os.remove('/input/b.txt'), lambda: os.rename('/input/a.txt', '/input/c')):
    try:
        f()
        print('wrote')
    except OSError as e:
        print(errno.errorcode[e.errno])
""", "-w", d)
    assert rc == 0, r
    assert r["stdout"] == "EROFS\n" * 4, r["stdout"]
    assert "input_changes" not in r, r


def test_changes_are_listed_with_contents():
    d = workspace()
    before = tree_state(d)
    rc, r = run_json("""
import os, shutil
open('/input/a.txt', 'a').write('more\\n')           # modified
open('/input/new.txt', 'w').write('fresh\\n')        # created
os.makedirs('/input/made/sub')
open('/input/made/sub/n.csv', 'w').write('x,y\\n')   # created in new folders
os.remove('/input/b.txt')                           # deleted
os.rename('/input/src/main.py', '/input/src/app.py')  # renamed: deleted + created
open('/input/same.txt', 'w').write('same\\n')        # rewritten as it was: no change
shutil.rmtree('/input/old')                         # a whole folder deleted
with open('/input/src/deep/x.bin', 'r+b') as f:     # same-size edit
    f.write(b'\\xff')
print(sorted(os.listdir('/input')))
""", "-w", d, "--input-writable")
    assert rc == 0, r
    assert r["stdout"] == "['a.txt', 'made', 'new.txt', 'same.txt', 'src']\n", r["stdout"]
    assert changes(r) == [
        ("/input/a.txt", "modified"),
        ("/input/b.txt", "deleted"),
        ("/input/made/sub/n.csv", "created"),
        ("/input/new.txt", "created"),
        ("/input/old", "deleted"),
        ("/input/src/app.py", "created"),
        ("/input/src/deep/x.bin", "modified"),
        ("/input/src/main.py", "deleted"),
    ], changes(r)
    assert data(r, "/input/a.txt") == b"alpha\nmore\n"
    assert data(r, "/input/new.txt") == b"fresh\n"
    assert data(r, "/input/made/sub/n.csv") == b"x,y\n"
    assert data(r, "/input/src/app.py") == b"print('hi')\n"
    assert data(r, "/input/src/deep/x.bin") == b"\xff" + bytes(range(1, 256))
    for c in r["input_changes"]:
        if c["change"] == "deleted":
            assert set(c) == {"path", "change"}, c
        else:
            assert c["size"] == len(base64.b64decode(c["data_base64"])), c
    new = next(c for c in r["input_changes"] if c["path"] == "/input/new.txt")
    assert new["media_type"] == "text/plain", new
    assert r["refused"] == [] and r["files"] == [], r
    # The changes are also in the contents an agent framework hands on.
    texts = [c["text"] for c in r["contents"] if c["type"] == "text"]
    assert any("deleted /input/b.txt" in t for t in texts), r["contents"]
    assert tree_state(d) == before, "the host workspace was written"


def test_folder_replaced_and_file_replaced_by_folder():
    d = workspace()
    rc, r = run_json("""
import os, shutil
shutil.rmtree('/input/old'); os.mkdir('/input/old'); open('/input/old/one.txt', 'w').write('new')
os.remove('/input/a.txt'); os.mkdir('/input/a.txt'); open('/input/a.txt/in', 'w').write('i')
""", "-w", d, "--input-writable")
    assert rc == 0, r
    assert changes(r) == [("/input/a.txt", "deleted"), ("/input/a.txt/in", "created"),
                          ("/input/old", "deleted"), ("/input/old/one.txt", "created")], changes(r)
    assert data(r, "/input/old/one.txt") == b"new"


def test_each_run_sees_the_staged_input_again():
    d = workspace()
    before = tree_state(d)
    with mcp("-w", d, "--input-writable") as m:
        r = m.call("open('/input/a.txt', 'w').write('changed'); import os; os.remove('/input/b.txt')")
        assert not r["isError"], r
        rec = r["_meta"]["dev.airlock/run"]
        assert [(c["path"], c["change"]) for c in rec["input_changes"]] == [
            ("/input/a.txt", "modified"), ("/input/b.txt", "deleted")], rec
        # A short text item lists the changes, then the changed file comes
        # back as an /output file does.
        assert rec["refused"] == [], rec
        parts = dict(zip(rec["parts"], r["content"]))
        assert "modified /input/a.txt" in parts["input_changes"]["text"], r["content"]
        assert parts["input_file"]["resource"]["text"] == "changed", r["content"]
        # Its URI is served like an /output file's.
        uri = parts["input_file"]["resource"]["uri"]
        assert "/input/a.txt" in uri, uri
        got = m.request("resources/read", {"uri": uri})
        assert got["result"]["contents"][0]["text"] == "changed", got
        for _ in range(2):
            r = m.call("import os; print(open('/input/a.txt').read(), os.path.exists('/input/b.txt'))")
            rec = r["_meta"]["dev.airlock/run"]
            assert r["content"][0]["text"] == "alpha\n True\n", r
            assert "input_changes" not in rec, rec
    assert tree_state(d) == before, "the host workspace was written"


def test_a_session_lists_the_changes_since_it_began():
    d = workspace()
    before = tree_state(d)

    def cell(m, h, code):
        r = m.request("tools/call", {"name": "execute_code",
                                     "arguments": {"code": code, "session": h},
                                     "_meta": {"dev.airlock/run": True}})
        assert "result" in r, r
        rec = r["result"]["_meta"]["dev.airlock/run"]
        return [(c["path"], c["change"]) for c in rec.get("input_changes", [])]

    with mcp("-w", d, "--input-writable") as m:
        r = m.request("tools/call", {"name": "session_open", "arguments": {}})
        h = r["result"]["_meta"]["dev.airlock/session"]
        assert cell(m, h, "open('/input/new.txt', 'w').write('1')") == [
            ("/input/new.txt", "created")]
        assert cell(m, h, "import os; os.remove('/input/a.txt')") == [
            ("/input/a.txt", "deleted"), ("/input/new.txt", "created")]
        # A single run beside the session sees the staged copy.
        r = m.call("import os; print(sorted(os.listdir('/input')))")
        assert r["content"][0]["text"] == "['a.txt', 'b.txt', 'old', 'same.txt', 'src']\n", r
    assert tree_state(d) == before


def test_links_and_special_files_are_refused():
    d = workspace()
    rc, r = run_json("""
import os, socket
os.symlink('/etc/passwd', '/input/link')
os.symlink('a.txt', '/input/rel')
os.mkfifo('/input/fifo')
s = socket.socket(socket.AF_UNIX); s.bind('/input/sock')
os.remove('/input/a.txt'); os.symlink('/etc/hostname', '/input/a.txt')
open('/input/ok.txt', 'w').write('ok')
""", "-w", d, "--input-writable")
    assert rc == 0, r
    assert changes(r) == [("/input/a.txt", "deleted"), ("/input/ok.txt", "created")], changes(r)
    refused = {x["path"]: x["reason"] for x in r["refused"]}
    assert refused == {"/input/link": "symlink", "/input/rel": "symlink",
                       "/input/a.txt": "symlink", "/input/fifo": "not a regular file",
                       "/input/sock": "not a regular file"}, refused


def test_caps_hold():
    d = workspace()
    with open(os.path.join(d, "big.bin"), "wb") as f:
        f.write(b"\0" * (3 << 20))
    before = tree_state(d)
    rc, r = run_json("""
open('/input/big.bin', 'ab').write(b'!')           # copied up: 3 MiB + 1, past the file cap
open('/input/small.txt', 'w').write('s')
try:
    with open('/input/huge.bin', 'wb') as f:       # past the tmpfs cap of /input
        f.write(b'x' * (64 << 20))
    print('wrote')
except OSError as e:
    import errno; print(errno.errorcode[e.errno])
""", "-w", d, "--input-writable", "--max-output-file", "2", "--max-output-total", "4")
    assert rc == 0, r
    assert r["stdout"] == "ENOSPC\n", r["stdout"]
    refused = {x["path"]: x["reason"] for x in r["refused"]}
    assert refused.get("/input/big.bin") == "too large", r["refused"]
    assert ("/input/small.txt", "created") in changes(r), changes(r)
    assert "/input/big.bin" not in dict(changes(r)), changes(r)
    assert tree_state(d) == before


def test_without_a_workspace():
    rc, r = run_json("open('/input/n.txt', 'w').write('n')", "--input-writable")
    assert rc == 0, r
    assert changes(r) == [("/input/n.txt", "created")] and data(r, "/input/n.txt") == b"n", r


if __name__ == "__main__":
    run()
