"""Many workspaces, one template: a Sandbox's calls with workspace=."""
import asyncio

import pytest

import airlock

LIST = ("import os\nprint(sorted(os.listdir('/input')), "
        "[open('/input/' + f).read() for f in sorted(os.listdir('/input'))])")
# What a fork cannot change is the template's: the same str hash in every
# copy of one template, another in the copies of another.
HASH = "print(hash('airlock'))"


def folder(tmp_path, name, files):
    d = tmp_path / name
    d.mkdir()
    for k, v in files.items():
        (d / k).write_text(v)
    return d


def test_each_call_sees_its_own_workspace_on_one_template(tmp_path):
    a = folder(tmp_path, "a", {"a.txt": "A"})
    b = folder(tmp_path, "b", {"b.txt": "B", "c.txt": "C"})
    with airlock.Sandbox(workspace=folder(tmp_path, "own", {"own.txt": "O"})) as sb:
        assert sb.run(LIST).stdout == "['own.txt'] ['O']\n"
        assert sb.run(LIST, workspace=a).stdout == "['a.txt'] ['A']\n"
        assert sb.run(LIST, workspace=b).stdout == "['b.txt', 'c.txt'] ['B', 'C']\n"
        assert asyncio.run(sb.arun(LIST, workspace=str(a))).stdout == "['a.txt'] ['A']\n"
        hashes = {sb.run(HASH, workspace=w).stdout for w in (None, a, b)}
        assert len(hashes) == 1, hashes
    with airlock.Sandbox() as other:
        assert other.run(HASH, workspace=a).stdout not in hashes


def test_an_edit_is_seen_at_the_next_call_and_a_session_keeps_its_version(tmp_path):
    a = folder(tmp_path, "a", {"a.txt": "v1"})
    with airlock.Sandbox() as sb:
        with sb.session(workspace=a) as s:
            assert s.run(LIST).stdout == "['a.txt'] ['v1']\n"
            (a / "a.txt").write_text("v2")
            (a / "new.txt").write_text("n")
            assert sb.run(LIST, workspace=a).stdout == "['a.txt', 'new.txt'] ['v2', 'n']\n"
            assert s.run(LIST).stdout == "['a.txt'] ['v1']\n"
        with sb.session(workspace=a) as s:
            assert s.run(LIST).stdout == "['a.txt', 'new.txt'] ['v2', 'n']\n"


def test_a_bad_workspace_is_one_clear_error(tmp_path):
    with airlock.Sandbox() as sb:
        with pytest.raises(FileNotFoundError, match="missing"):
            sb.run("pass", workspace=tmp_path / "missing")
        link = tmp_path / "ws"
        link.mkdir()
        (link / "l").symlink_to("/etc/passwd")
        r = None
        with pytest.raises(airlock.Error, match="l"):
            r = sb.run("pass", workspace=link)
        assert r is None
        assert sb.run("print(1)").stdout == "1\n"


def test_settings_changed_apply_to_every_workspace(tmp_path):
    a = folder(tmp_path, "a", {"a.txt": "A"})
    with airlock.Sandbox() as sb:
        assert sb.run("import time; time.sleep(2)", workspace=a).success
        sb.set_limits({"timeout": 1})
        r = sb.run("import time; time.sleep(5)", workspace=a)
        assert r.status == "timeout", r.status
