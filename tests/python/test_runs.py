"""Runs: the result object, files, refusals, contents, failures, asyncio."""
import asyncio
import json
import os
import subprocess
import time

import pytest

import airlock
from conftest import AIRLOCK


def test_result_fields(sb):
    r = sb.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
               "open('/output/a.txt','w').write('hi')\nopen('/output/p.png','wb').write(b'\\x89PNG')")
    assert r.success and r.status == "ok" and r.exit_code == 0
    assert r.stdout == "out\n" and r.stderr == "err\n"
    assert r.files == [airlock.File("/output/a.txt", "text/plain", b"hi"),
                       airlock.File("/output/p.png", "image/png", b"\x89PNG")]
    assert r.files[0].size == 2
    assert r.duration_ms > 0 and r.duration == r.duration_ms / 1000
    assert r.cell_state is None
    assert [c["type"] for c in r.contents] == ["text", "data", "data", "text"]
    assert r.contents[1] == {"type": "data", "media_type": "text/plain", "path": "/output/a.txt",
                             "data": b"hi"}


def test_contents_match_the_c_library(sb, tmp_path):
    # The same code through `airlock run --json`: the same contents.
    code = ("import sys\nprint('a\\r\\nb')\nopen('/output/x.csv','w').write('1,2')\n"
            "print('warn', file=sys.stderr)\nraise SystemExit(3)")
    r = sb.run(code)
    cli = json.loads(subprocess.run([AIRLOCK, "run", "--json", "-c", code], capture_output=True,
                                    text=True).stdout)
    mine = r.to_dict()
    for k in ("success", "status", "exit_code", "stdout", "stderr", "files", "refused"):
        assert mine[k] == cli[k], k
    assert mine["contents"] == cli["contents"]
    ok = sb.run("pass").to_dict()
    cli_ok = json.loads(subprocess.run([AIRLOCK, "run", "--json", "-c", "pass"],
                                       capture_output=True, text=True).stdout)
    assert ok["contents"] == cli_ok["contents"]


def test_to_dict_is_the_library_result_json(tmp_path):
    # usage, and with a writable /input its changes and their header line,
    # exactly as `airlock run --json` prints them.
    (tmp_path / "a.txt").write_text("old")
    code = "open('/input/a.txt','w').write('new')\nprint('x')"
    with airlock.Sandbox(workspace=tmp_path, input_writable=True) as s:
        r = s.run(code)
    cli = json.loads(subprocess.run([AIRLOCK, "run", "--json", "--workspace", str(tmp_path),
                                     "--input-writable", "-c", code],
                                    capture_output=True, text=True).stdout)
    d = r.to_dict()
    assert set(d) == set(cli), (sorted(d), sorted(cli))
    assert d["input_changes"] == cli["input_changes"]
    assert d["contents"] == cli["contents"]
    assert d["usage"] == r.usage and set(r.usage) == set(cli["usage"])
    assert r.usage["wall_ms"] > 0 and r.usage["cpu_source"] in ("cgroup", "proc", "schedstat")
    assert [c["type"] for c in r.contents] == [c["type"] for c in cli["contents"]]


def test_refusals(sb):
    r = sb.run("import os\nos.symlink('/etc/passwd', '/output/link')\nos.mkfifo('/output/f')")
    assert r.success
    assert r.files == []
    assert sorted(r.refused) == [airlock.Refusal("/output/f", "not a regular file"),
                                 airlock.Refusal("/output/link", "symlink")]


def test_failures(sb):
    r = sb.run("1/0")
    assert not r.success and r.status == "error" and r.exit_code == 1
    assert "ZeroDivisionError" in r.stderr
    assert r.contents[-1]["type"] == "error"
    r = sb.run("import os; os._exit(7)")
    assert r.status == "error" and r.exit_code == 7
    with pytest.raises(airlock.InputError) as e:
        sb.run("print('\\0')".replace("\\0", "\0"))
    assert e.value.errno == 22


def test_bytes_kept(sb):
    r = sb.run("import sys; sys.stdout.buffer.write(b'a\\x00b\\xff')")
    assert r.stdout_bytes == b"a\x00b\xff"
    assert r.stdout == "a\x00b\ufffd"


def test_workspace(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "f.txt").write_text("v1")
    sb = airlock.Sandbox(workspace=tmp_path / "w")
    assert sb.workspace == tmp_path / "w"
    assert sb.run("print(open('/input/f.txt').read())").stdout == "v1\n"
    (tmp_path / "w" / "f.txt").write_text("v2!")
    # The cache sees the changed workspace and stages it again.
    assert sb.run("print(open('/input/f.txt').read())").stdout == "v2!\n"
    sb.close()


def test_arun(sb):
    async def main():
        rs = await asyncio.gather(*(sb.arun(f"print({i})") for i in range(4)))
        return [r.stdout for r in rs]
    assert asyncio.run(main()) == ["0\n", "1\n", "2\n", "3\n"]


def test_arun_cancel(sb):
    async def main():
        t = asyncio.create_task(sb.arun("import time; time.sleep(30)"))
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return time.monotonic() - t0
    assert asyncio.run(main()) < 5
    # The sandbox goes on.
    assert sb.run("print(2)").stdout == "2\n"


def test_close():
    s = airlock.Sandbox()
    assert s.run("print(1)").stdout == "1\n"
    with s.session():
        with pytest.raises(RuntimeError, match="open session"):
            s.close()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.run("print(1)")


def test_exceptions_hierarchy():
    assert issubclass(airlock.InputError, airlock.Error)
    assert issubclass(airlock.InputError, ValueError)
    assert issubclass(airlock.SandboxError, RuntimeError)
    assert issubclass(airlock.RunError, airlock.Error)
