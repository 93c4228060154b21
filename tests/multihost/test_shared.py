"""A tenants folder on shared storage: three `airlock mcp --tenants-dir`
servers, each on its own FUSE mount of one GlusterFS replicated volume
(tests/multihost/gluster.py), stand in for three hosts. What one host (or
anyone, behind airlock's back) changes is seen by a run on another at its
next call; the caps on files and bytes hold across hosts; a write is
atomic (a reader never sees half a file). docs/design.md, "Shared
storage", is the contract.
"""
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
sys.path.insert(0, HERE)
import gluster  # noqa: E402

HOSTS = 3
_cluster = gluster.Hosts(mounts=HOSTS)
volume, tenants_dir, host = _cluster.volume, _cluster.tenants_dir, _cluster.host
tool, write = gluster.tool, gluster.write


def read_in_run(m, path):
    r = m.run(f"print(open('/input/{path}').read(), end='')")
    assert r["success"], r
    return r["stdout"]


def test_a_write_through_one_host_is_seen_by_the_next_call_on_another():
    a, b = host(0, "seen"), host(1, "seen")
    assert not write(a, {"notes.txt": "version 0"})["isError"]
    # B has a sandbox, a staged copy and a watch of the tree from here on.
    assert read_in_run(b, "notes.txt") == "version 0"
    for k in range(1, 6):
        # At every pace: B's very next call, with nothing in between.
        assert not write(a, {"notes.txt": f"version {k}"})["isError"]
        assert read_in_run(b, "notes.txt") == f"version {k}"
    # A file that a host adds in a new folder, and one it removes.
    assert not write(a, {"sub/deeper/more.txt": "more"})["isError"]
    assert read_in_run(b, "sub/deeper/more.txt") == "more"
    assert not tool(a, "workspace_remove", {"paths": ["sub"]})["isError"]
    r = b.run("import os\nprint(sorted(os.listdir('/input')))")
    assert r["stdout"] == "['notes.txt']\n", r


def test_the_generation_alone_carries_another_hosts_write():
    # With the shared walk off (a tenant over the cap is so), the tenant's
    # generation, which every host's workspace tools bump, is what tells B.
    a, b = host(0, "gen"), host(1, "gen", env={"AIRLOCK_SHARED_WALK_MAX": "0"})
    assert not write(a, {"g.txt": "g0"})["isError"]
    assert read_in_run(b, "g.txt") == "g0"
    for k in range(1, 4):
        assert not write(a, {"g.txt": f"g{k}"})["isError"]
        assert read_in_run(b, "g.txt") == f"g{k}"
    assert not tool(a, "workspace_remove", {"paths": ["g.txt"]})["isError"]
    r = b.run("import os\nprint(os.listdir('/input'))")
    assert r["stdout"] == "[]\n", r


def until_seen(m, path, want, deadline_s=600):
    """Calls of m until a run reads want at path, and what the last read:
    a change behind airlock's back is seen once the background walk has
    found it (its period plus a walk, seconds here). The deadline only
    ends a test that would never pass; it asserts no speed."""
    end = time.monotonic() + deadline_s
    code = (f"import os\np = '/input/{path}'\n"
            "print(open(p).read() if os.path.exists(p) else '(missing)', end='')")
    while True:
        r = m.run(code)
        assert r["success"], r
        if r["stdout"] == want or time.monotonic() > end:
            return r["stdout"]


def test_a_change_behind_airlocks_back_is_seen_within_the_walk_period():
    # Before the background walk, the next call saw it (every call walked
    # the tree's metadata); now a call answers from the last background
    # walk, and a later call sees it (design.md, "Shared storage").
    b = host(1, "behind")
    tdir = os.path.join(tenants_dir(2), "behind")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, "data.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    assert read_in_run(b, "data.csv") == "a,b\n1,2\n"
    for k in range(3, 8):
        # The same size, rewritten in place through another mount: no
        # generation moves, no event reaches B.
        with open(os.path.join(tdir, "data.csv"), "r+") as f:
            f.write(f"a,b\n{k},2\n")
        assert until_seen(b, "data.csv", f"a,b\n{k},2\n") == f"a,b\n{k},2\n"
    with open(os.path.join(tdir, "new.txt"), "w") as f:
        f.write("new")
    r = b.run("import os\nprint(sorted(os.listdir('/input')))")
    assert r["stdout"] in ("['data.csv']\n", "['data.csv', 'new.txt']\n"), r
    assert until_seen(b, "new.txt", "new") == "new"


# A tenant over the shared walk cap (0: every tenant is), whose other
# hosts' changes only the generation and its record tell; the safety walk
# an hour apart, so that which folders a call reads again does not depend
# on how long the machine takes between two calls.
OVER_CAP = {"AIRLOCK_SHARED_WALK_MAX": "0", "AIRLOCK_SAFETY_WALK_S": "3600"}
# A tenant under the cap (walked at every call), with the safety walk an
# hour apart: a loaded machine's calls more than 10 s apart would
# otherwise walk in full at the period, whatever the record tells.
NO_SAFETY_WALK = {"AIRLOCK_SAFETY_WALK_S": "3600"}


def settled(m, path, want):
    """Two calls of m that read path (want): the first walks the tree and
    finds it on shared storage, the second walks it again with the shared
    walk's metadata digest taken first, which later calls compare with."""
    for _ in range(2):
        assert read_in_run(m, path) == want


def traced(m, fn, flags=(), trace="openat,open,openat2"):
    """fn() while strace (with flags) follows m's server's system calls
    of trace (its open calls by default), every thread and those it
    starts but the background walker, whose reads are no call's: (fn's
    value, strace's lines)."""
    apart = walker_tids(m)
    log = os.path.join(volume().base, f"strace-{m.p.pid}.log")
    st = subprocess.Popen(["strace", "-f", *flags, "-o", log, "-e", f"trace={trace}",
                           "-p", str(m.p.pid)], stderr=subprocess.PIPE, text=True)
    try:
        # strace says when it holds the process (an event, not a sleep).
        for line in st.stderr:
            if "attached" in line:
                break
        value = fn()
    finally:
        st.terminate()
        st.wait(timeout=60)
    with open(log) as f:
        lines = [ln for ln in f if not (ln.split(" ", 1)[0].isdigit() and
                                        int(ln.split(" ", 1)[0]) in apart)]
    os.unlink(log)
    return value, lines


def traced_opens(m, fn):
    """fn() while strace follows m's server: (fn's value, the file names
    its open calls named)."""
    value, lines = traced(m, fn)
    return value, [ln.split('"')[1] for ln in lines if "open" in ln and '"' in ln]


def read_files_in_run(m, paths):
    code = ("import json\nprint(json.dumps({p: open('/input/' + p).read() for p in "
            f"{paths!r}}}))")
    r = m.run(code)
    assert r["success"], r
    import json
    return json.loads(r["stdout"])


def test_another_hosts_write_rereads_only_the_folders_it_touched():
    # Fails without the generation record: B read the whole tree again
    # (every file of the untouched folders opened) after any write of A.
    a, b = host(0, "narrow"), host(1, "narrow", env=OVER_CAP)
    files = {f"keep{d}/sub/untouched-{d}-{k}.txt": "x" for d in range(3) for k in range(4)}
    files["deep/one/two/three/notes.txt"] = "v0"
    files["deep/one/two/three/other.txt"] = "o"
    assert not write(a, files)["isError"]
    assert read_in_run(b, "deep/one/two/three/notes.txt") == "v0"
    for k in range(1, 4):
        assert not write(a, {"deep/one/two/three/notes.txt": f"v{k}"})["isError"]
        out, names = traced_opens(b, lambda: read_in_run(b, "deep/one/two/three/notes.txt"))
        assert out == f"v{k}", out
        untouched = [n for n in names if "untouched" in n]
        assert not untouched, untouched
        # The record names the file: the changed folder's other file is
        # not read again (before the record named files, it was).
        assert "notes.txt" in names and "other.txt" not in names, names
    # A write that makes a folder names everything: B walks in full.
    assert not write(a, {"keep1/sub/new/made.txt": "made"})["isError"]
    out, names = traced_opens(b, lambda: read_in_run(b, "keep1/sub/new/made.txt"))
    assert out == "made" and any("untouched" in n for n in names), (out, names[:20])
    # A removal of a file: its folder alone.
    assert not tool(a, "workspace_remove", {"paths": ["deep/one/two/three/other.txt"]})["isError"]
    r, names = traced_opens(b, lambda: b.run("import os\nprint(sorted(os.listdir("
                                             "'/input/deep/one/two/three')))"))
    assert r["stdout"] == "['notes.txt']\n", r
    assert not [n for n in names if "untouched" in n], names


OPEN_AT = re.compile(r'openat2?\(\d+<([^>]*)>, "([^"]*)"')


def traced_mount_opens(m, mount, fn):
    """fn() while strace follows m's server: (fn's value, the names of the
    files it opened in a folder of mount: the dirfd's path, as strace -y
    shows it, under the mount)."""
    value, lines = traced(m, fn, ("-y",))
    names = []
    for ln in lines:
        # openat(5</mount/tenants/t/w>, "f05.txt", ...) = 7</...>
        hit = OPEN_AT.search(ln)
        if hit and hit.group(1).startswith(mount + "/"):
            names.append(hit.group(2))
    return value, names


def test_staging_reads_no_unchanged_file_of_a_changed_folder():
    # Failed before the record named folders and staging took the
    # signature's hashes: staging read every small file of the changed
    # folder a second time from the volume, to compare it with its copy.
    # Since the record names the files, neither the signature nor staging
    # opens the folder's unchanged files at all.
    a, b = host(0, "once"), host(1, "once", env=NO_SAFETY_WALK)
    files = {f"w/f{k:02d}.txt": f"file {k}\n" for k in range(10)}
    assert not write(a, files)["isError"]
    settled(b, "w/f05.txt", "file 5\n")
    for k in range(1, 3):
        assert not write(a, {"w/f00.txt": f"edit {k}\n"})["isError"]
        out, names = traced_mount_opens(b, volume().mounts[1],
                                        lambda: read_files_in_run(b, ["w/f00.txt", "w/f05.txt"]))
        assert out == {"w/f00.txt": f"edit {k}\n", "w/f05.txt": "file 5\n"}, out
        # The unchanged files: not opened.
        counts = {f"f{j:02d}.txt": names.count(f"f{j:02d}.txt") for j in range(1, 10)}
        assert set(counts.values()) == {0}, (counts, names)


def test_the_first_write_to_a_tenant_put_on_the_volume_directly_is_narrow_too():
    # A tenant whose files were put on the volume without airlock has no
    # state file until a first write through the tools: generation 0,
    # from which that write's record starts.
    b = host(1, "direct", env=OVER_CAP)
    tdir = os.path.join(tenants_dir(2), "direct")
    for d in range(3):
        os.makedirs(os.path.join(tdir, f"keep{d}"))
        with open(os.path.join(tdir, f"keep{d}", f"untouched-{d}.txt"), "w") as f:
            f.write("x")
    os.makedirs(os.path.join(tdir, "w"))
    with open(os.path.join(tdir, "w", "notes.txt"), "w") as f:
        f.write("v0")
    assert read_in_run(b, "w/notes.txt") == "v0"
    assert not write(host(0, "direct"), {"w/notes.txt": "v1"})["isError"]
    out, names = traced_opens(b, lambda: read_in_run(b, "w/notes.txt"))
    assert out == "v1", out
    assert not [n for n in names if "untouched" in n], names


def test_a_hosts_own_write_does_not_hide_another_hosts_earlier_one():
    # Fails before: B's own bump remembered the state file as B left it,
    # so A's write just before it (in a folder B's inotify does not see)
    # was seen only at the safety walk.
    a, b = host(0, "own"), host(1, "own", env=OVER_CAP)
    assert not write(a, {"x/a.txt": "a0", "y/b.txt": "b0"})["isError"]
    assert read_files_in_run(b, ["x/a.txt", "y/b.txt"]) == {"x/a.txt": "a0", "y/b.txt": "b0"}
    assert not write(a, {"x/a.txt": "a1"})["isError"]
    assert not write(b, {"y/b.txt": "b1"})["isError"]
    assert read_files_in_run(b, ["x/a.txt", "y/b.txt"]) == {"x/a.txt": "a1", "y/b.txt": "b1"}


def test_a_record_over_its_caps_or_corrupt_still_gives_the_right_files():
    # The record only narrows a walk: whatever it cannot tell is a full
    # walk (these pass on a build without the record too, which always
    # walks in full; they hold the fallback to the right files).
    a, b = host(0, "fallback"), host(1, "fallback", env=OVER_CAP)
    paths = [f"d{k:02d}/f.txt" for k in range(40)]
    assert not write(a, {p: "0" for p in paths})["isError"]
    assert read_files_in_run(b, paths) == {p: "0" for p in paths}
    # One change touching more folders than a change may name.
    assert not write(a, {p: "1" for p in paths})["isError"]
    assert read_files_in_run(b, paths) == {p: "1" for p in paths}
    # More changes than the record keeps, with no call of B between.
    want = {p: "1" for p in paths}
    for k in range(70):
        p = paths[k % 40]
        want[p] = f"2-{k}"
        assert not write(a, {p: want[p]})["isError"]
    assert read_files_in_run(b, paths) == want
    # A record corrupted by hand on the volume (another mount), then one
    # cut short: B cannot tell which folders changed, and walks in full.
    state = os.path.join(tenants_dir(2), ".airlock", "fallback")
    assert not write(a, {"d05/f.txt": "3"})["isError"]
    with open(state, "r+b") as f:
        f.seek(24)
        f.write(b"garbage!" * 4)
    out, names = traced_opens(b, lambda: read_files_in_run(b, paths))
    want["d05/f.txt"] = "3"
    # Every folder's file opened: the full walk.
    assert out == want and names.count("f.txt") >= 40, (out, names.count("f.txt"))
    assert not write(a, {"d06/f.txt": "4"})["isError"]
    os.truncate(state, 12)
    want["d06/f.txt"] = "4"
    assert read_files_in_run(b, paths) == want
    # And A writes a good record again from there.
    assert not write(a, {"d07/f.txt": "5"})["isError"]
    want["d07/f.txt"] = "5"
    assert read_files_in_run(b, paths) == want


def fnv64(data, h=0xcbf29ce484222325):
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_a_record_whose_changes_do_not_walk_still_takes_the_next_bump():
    # Anyone who writes the volume can write a record that passes its
    # check (an FNV over its bytes, not a secret) with changes that do not
    # walk. Before, every later bump read it, could not drop its oldest
    # change and gave up without writing: no other host saw any of the
    # tenant's later writes at its next call, silently, until the record
    # was fixed by hand (B read v0 after A wrote v1).
    import struct
    a, b = host(0, "poison"), host(1, "poison", env=OVER_CAP)
    assert not write(a, {"p.txt": "v0"})["isError"]
    assert read_in_run(b, "p.txt") == "v0"
    gen, n = 1000, 64
    # One change head whose 65,535 folders are not there.
    payload = struct.pack("<QBBHHH", gen - n + 1, 0, 0, 0xFFFF, 0, 0)
    head = struct.pack("<8sQQII", b"ALGEN2\0\0", gen, gen - n, len(payload), n)
    record = struct.pack("<Q", gen) + head + struct.pack("<Q", fnv64(head + payload)) + payload
    state = os.path.join(tenants_dir(2), ".airlock", "poison")
    with open(state, "r+b") as f:
        f.truncate(0)
        f.write(record)
    assert read_in_run(b, "p.txt") == "v0"
    assert not write(a, {"p.txt": "v1"})["isError"]
    seen = read_in_run(b, "p.txt")
    with open(state, "rb") as f:
        counter = struct.unpack("<Q", f.read(8))[0]
    assert (seen, counter) == ("v1", gen + 1), (seen, counter)


def test_a_change_behind_airlocks_back_beside_a_recorded_one():
    # Under the shared walk cap, a change behind airlock's back is seen
    # once the background walk finds it, whatever the record names; the
    # recorded change at the next call (before the background walk, the
    # walk at every call found both at the next call).
    a, b = host(0, "beside"), host(1, "beside")
    assert not write(a, {"x/a.txt": "a0", "y/z/b.txt": "b0"})["isError"]
    assert read_files_in_run(b, ["x/a.txt", "y/z/b.txt"]) == {"x/a.txt": "a0", "y/z/b.txt": "b0"}
    assert not write(a, {"x/a.txt": "a1"})["isError"]
    with open(os.path.join(tenants_dir(2), "beside", "y", "z", "b.txt"), "r+") as f:
        f.write("b1")
    end = time.monotonic() + 600
    while True:
        got = read_files_in_run(b, ["x/a.txt", "y/z/b.txt"])
        assert got["x/a.txt"] == "a1", got
        if got["y/z/b.txt"] == "b1" or time.monotonic() > end:
            break
    assert got["y/z/b.txt"] == "b1", got
    # Over the cap, such a change is seen by the safety walk (its period
    # here 1 s): the calls go on until one sees it, and each sees at least
    # the recorded change.
    c = host(1, "beside", env={"AIRLOCK_SHARED_WALK_MAX": "0", "AIRLOCK_SAFETY_WALK_S": "1"})
    assert read_in_run(c, "y/z/b.txt") == "b1"
    with open(os.path.join(tenants_dir(2), "beside", "y", "z", "b.txt"), "r+") as f:
        f.write("b2")
    assert not write(a, {"x/a.txt": "a2"})["isError"]
    for _ in range(10000):
        got = read_files_in_run(c, ["x/a.txt", "y/z/b.txt"])
        assert got["x/a.txt"] == "a2", got
        if got["y/z/b.txt"] == "b2":
            break
    assert got["y/z/b.txt"] == "b2", got


def traced_mount_calls(m, mount, fn):
    """fn() while strace -y follows m's server: (fn's value, the lines of
    the system calls that reach mount: on an fd of it, or a path through
    it). inotify_add_watch and fcntl are left out: they do not ask the
    file system's server anything."""
    value, lines = traced(m, fn, ("-y",), "%file,%desc,getdents64")
    hits = [ln for ln in lines if (f"<{mount}/" in ln or f'"{mount}/' in ln)
            and not re.match(r"^\d+\s+(inotify_add_watch|fcntl)\(", ln)]
    return value, hits


# At most this many system calls reach the mount at B's call after A's
# one-file write to a 20-file folder: the shared walk (a lookup per entry
# and the tenant folder's listing: 27), the generation's state file, and
# the changed file read and staged (about 20). Reading the folder's other
# files again, as before the record named files, costs about 4 each.
ONE_FILE_CALLS = 64


def edits_read_alone(writer, b, names):
    """Three edits of w/f00.txt through writer, each read by a run on host
    b (host 1) with w/f05.txt: of the files whose name matches names, b's
    call opens f00.txt alone, once (the signature's read; staging copies
    the bytes it kept), in at most ONE_FILE_CALLS system calls on the
    mount."""
    mount = volume().mounts[1]
    for k in range(1, 4):
        assert not write(writer, {"w/f00.txt": f"edit {k}\n"})["isError"]
        out, hits = traced_mount_calls(b, mount,
                                       lambda: read_files_in_run(b, ["w/f00.txt", "w/f05.txt"]))
        assert out == {"w/f00.txt": f"edit {k}\n", "w/f05.txt": "file 5\n"}, out
        opened = [ln for ln in hits if re.search(r"open(at2?)?\(.*" + names, ln)]
        assert opened and all('"f00.txt"' in ln for ln in opened), opened
        assert len(opened) == 1, opened
        assert len(hits) <= ONE_FILE_CALLS, (len(hits), hits)


def test_another_hosts_one_file_write_reads_that_file_alone():
    # Fails before: the record named the folder, and B signed it again
    # (every one of its 20 files opened and read) and staged it again
    # (each looked up): 156 system calls on the mount.
    a, b = host(0, "alone"), host(1, "alone", env=NO_SAFETY_WALK)
    files = {f"w/f{k:02d}.txt": f"file {k}\n" for k in range(20)}
    assert not write(a, files)["isError"]
    settled(b, "w/f05.txt", "file 5\n")
    edits_read_alone(a, b, r'"f\d\d\.txt"')
    # A removal through A: seen by B's next call, the folder's other files
    # still not opened.
    assert not tool(a, "workspace_remove", {"paths": ["w/f03.txt"]})["isError"]
    r, hits = traced_mount_calls(b, volume().mounts[1], lambda: b.run(
        "import os\nprint(len(os.listdir('/input/w')), os.path.exists('/input/w/f03.txt'))"))
    assert r["stdout"] == "19 False\n", r
    # (Staging's check that the removed file is gone is an open that fails.)
    opened = [ln for ln in hits if re.search(r'open(at2?)?\(.*"f\d\d\.txt"', ln)]
    assert all('"f03.txt"' in ln for ln in opened), opened
    assert len(hits) <= ONE_FILE_CALLS, (len(hits), hits)


def test_a_hosts_own_one_file_write_reads_that_file_alone():
    # Fails before: B's own write reached its cache as inotify events only,
    # and B's next call signed the written file's folder again (every one
    # of its 20 files opened and read): 125 system calls on the mount. Now
    # B tells its own cache the files it wrote, as the record tells
    # another host's.
    b = host(1, "ownwrite", env=NO_SAFETY_WALK)
    files = {f"w/f{k:02d}.txt": f"file {k}\n" for k in range(20)}
    files.update({f"keep/u{k}.txt": "u" for k in range(5)})
    assert not write(b, files)["isError"]
    settled(b, "w/f05.txt", "file 5\n")
    edits_read_alone(b, b, r'"(f\d\d|u\d)\.txt"')
    # A removal and a write in one folder, then a change behind airlock's
    # back in it beside B's own (the same size): seen, the first at the
    # next call, the other once the background walk found it.
    assert not tool(b, "workspace_remove", {"paths": ["w/f03.txt"]})["isError"]
    r = b.run("import os\nprint(len(os.listdir('/input/w')), os.path.exists('/input/w/f03.txt'))")
    assert r["stdout"] == "19 False\n", r
    assert not write(b, {"w/f01.txt": "own 1\n"})["isError"]
    with open(os.path.join(tenants_dir(2), "ownwrite", "w", "f02.txt"), "r+") as f:
        f.write("FILE")
    assert read_files_in_run(b, ["w/f01.txt"]) == {"w/f01.txt": "own 1\n"}
    assert until_seen(b, "w/f02.txt", "FILE 2\n") == "FILE 2\n"
    assert read_files_in_run(b, ["w/f00.txt", "w/f01.txt"]) == {"w/f00.txt": "edit 3\n",
                                                                "w/f01.txt": "own 1\n"}


def test_a_write_behind_airlocks_back_right_after_a_recorded_one():
    # The record says what A wrote; a write through another mount right
    # after it changes the bytes (the same size), or another file of the
    # same folder. B's check of the file against the recorded hash finds
    # the first at once, and B reads the folder again: the right bytes; the
    # background walk's check of the metadata against the record finds the
    # second.
    for name, env in (("backhash", None), ("backhash-over", OVER_CAP)):
        a, b = host(0, name), host(1, name, env=env)
        assert not write(a, {"w/a.txt": "a0", "w/b.txt": "b0", "w/c.txt": "c0"})["isError"]
        paths = ["w/a.txt", "w/b.txt", "w/c.txt"]
        assert read_files_in_run(b, paths) == {"w/a.txt": "a0", "w/b.txt": "b0", "w/c.txt": "c0"}
        tdir = os.path.join(tenants_dir(2), name, "w")
        assert not write(a, {"w/a.txt": "a1"})["isError"]
        with open(os.path.join(tdir, "a.txt"), "r+") as f:
            f.write("A9")
        assert read_files_in_run(b, paths) == {"w/a.txt": "A9", "w/b.txt": "b0", "w/c.txt": "c0"}
        if env:
            continue  # over the cap, another file's change waits for the safety walk
        # Another file of the folder changed behind airlock's back beside a
        # recorded change: the recorded one is seen at the next call, the
        # other once the background walk has found that the metadata moved
        # more than the record says (design.md, "Shared storage").
        assert not write(a, {"w/a.txt": "a2"})["isError"]
        with open(os.path.join(tdir, "b.txt"), "r+") as f:
            f.write("B9")
        assert read_files_in_run(b, ["w/a.txt"]) == {"w/a.txt": "a2"}
        assert until_seen(b, "w/b.txt", "B9") == "B9"
        assert read_files_in_run(b, paths) == {"w/a.txt": "a2", "w/b.txt": "B9", "w/c.txt": "c0"}


def test_a_write_of_more_files_than_a_change_names_gives_the_right_files():
    # More files than a change may name (TENANT_GEN_FILES_MAX, 32): the
    # change names their folders, which B reads again whole.
    a, b = host(0, "manyfiles"), host(1, "manyfiles", env=OVER_CAP)
    paths = [f"w/f{k:02d}.txt" for k in range(40)] + ["x/one.txt"]
    assert not write(a, {p: "0" for p in paths})["isError"]
    assert read_files_in_run(b, paths) == {p: "0" for p in paths}
    assert not write(a, {p: "1" for p in paths[:39]})["isError"]
    want = {p: ("1" if i < 39 else "0") for i, p in enumerate(paths)}
    out, names = traced_opens(b, lambda: read_files_in_run(b, paths))
    assert out == want, out
    assert "one.txt" not in names, names  # x was not named: not read
    # And a file written twice in a row before B's next call: the last
    # word counts.
    assert not write(a, {"w/f00.txt": "2"})["isError"]
    assert not write(a, {"w/f00.txt": "3"})["isError"]
    want["w/f00.txt"] = "3"
    assert read_files_in_run(b, paths) == want


def test_a_large_shared_trees_safety_walk_is_spaced_by_its_cost():
    # Fails before: with the safety period at its floor (0: due at every
    # call), every call of a tenant over the cap walked its whole tree
    # again, however long the last walk took (87 s a call for 10,000 files
    # over GlusterFS). Now the period of a tree on shared storage is at
    # least ten times its last full walk: of calls back to back, at most
    # the first walks (whether it does depends on how long the first
    # call's staging took). Changes through airlock's tools are still seen
    # at the next call.
    a = host(0, "spaced")
    b = host(1, "spaced", env={"AIRLOCK_SHARED_WALK_MAX": "0", "AIRLOCK_SAFETY_WALK_S": "0"})
    assert not write(a, {"w/notes.txt": "v0"})["isError"]
    tdir = os.path.join(tenants_dir(0), "spaced")
    for d in range(20):
        os.makedirs(os.path.join(tdir, f"bulk{d}"))
        for k in range(50):
            with open(os.path.join(tdir, f"bulk{d}", f"bulk-{d}-{k}.txt"), "w") as f:
                f.write("x")
    assert read_in_run(b, "w/notes.txt") == "v0"
    _, names = traced_opens(b, lambda: [read_in_run(b, "w/notes.txt") for _ in range(3)])
    walks = names.count("bulk-7-7.txt")
    assert walks <= 1, walks
    # Another host's write, through the tools: seen at the next call,
    # with no walk of the untouched folders.
    assert not write(a, {"w/notes.txt": "v1"})["isError"]
    out, names = traced_opens(b, lambda: read_in_run(b, "w/notes.txt"))
    assert out == "v1" and not [n for n in names if "bulk" in n], (out, names[:20])


def walker_tids(m):
    """The threads of m's server that walk trees in the background (named
    airlock-walk)."""
    out = set()
    for tid in os.listdir(f"/proc/{m.p.pid}/task"):
        try:
            with open(f"/proc/{m.p.pid}/task/{tid}/comm") as f:
                if f.read().strip() == "airlock-walk":
                    out.add(int(tid))
        except OSError:
            pass
    return out


def call_mount_syscalls(m, mount, fn):
    """fn() while strace -f -y follows m's server: (fn's value, the lines
    of the system calls of its threads but the background walker that
    reach mount: on an fd of it (strace -y names the fd's file) or a path
    through it, itself or through /proc/self/fd of a folder of it)."""
    fd_dir = f"/proc/{m.p.pid}/fd"
    mount_fds = set()
    for f in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, f)).startswith(mount + "/"):
                mount_fds.add(f)
        except OSError:
            pass
    apart = walker_tids(m)
    value, lines = traced(m, fn, ("-y",), "%file,%desc,getdents64")
    hits = []
    for ln in lines:
        tid, _, rest = ln.partition(" ")
        if not tid.isdigit() or int(tid) in apart or "resumed>" in rest:
            continue
        name = rest.split("(", 1)[0]
        args = rest.rsplit(") = ", 1)[0]
        if name in ("fcntl", "inotify_add_watch"):
            continue
        if ("<" + mount + "/" in args or '"' + mount + "/" in args or
                any(f'"/proc/self/fd/{fd}/' in args for fd in mount_fds)):
            hits.append(ln.strip())
    return value, hits


def test_an_unchanged_call_reaches_the_mount_about_once():
    # Fails before: an unchanged call of a 20-file tenant made 27 system
    # calls on the mount (its folder's lookup, the generation, and the
    # shared walk: a lookup per entry, the folder's open and listing),
    # each a round trip to the FUSE daemon. Now the generation, and at
    # most once a second the tenant's folder; the background walker (a
    # thread of its own, left out here) looks for changes behind
    # airlock's back.
    b = host(1, "quiet")
    tdir = os.path.join(tenants_dir(2), "quiet")
    os.makedirs(tdir, exist_ok=True)
    for k in range(20):
        with open(os.path.join(tdir, f"f{k:02d}.csv"), "w") as f:
            f.write(f"k,v\n{k},1\n")
    assert read_in_run(b, "f05.csv") == "k,v\n5,1\n"
    assert read_in_run(b, "f05.csv") == "k,v\n5,1\n"
    calls = 10
    span = []

    def timed_calls():
        start = time.monotonic()
        outs = [read_in_run(b, "f05.csv") for _ in range(calls)]
        span.append(time.monotonic() - start)
        return outs

    outs, hits = call_mount_syscalls(b, volume().mounts[1], timed_calls)
    assert outs == ["k,v\n5,1\n"] * calls, outs
    assert len(hits) <= 2 * calls, (len(hits), hits[:40])
    assert walker_tids(b), "no background walker thread"
    # The generation: an fstat of the state file kept open (one round trip
    # to the FUSE daemon, where a lookup by name is two), its name looked
    # up again at most once a second. Fails before: a lookup of the name
    # at every call. (The calls' span only bounds the count of lookups
    # allowed; nothing here asserts a speed.)
    lookups = [h for h in hits if re.search(r'\.airlock>, "quiet"', h)]
    assert len(lookups) <= int(span[0]) + 2, (len(lookups), span, lookups)
    fstats = [h for h in hits if re.search(r'\.airlock/quiet>, ""', h) or
              re.match(r"\d+ fstat\(\d+<[^>]*\.airlock/quiet>", h)]
    assert len(fstats) >= calls - len(lookups), (len(fstats), hits[:40])


def test_a_state_file_replaced_behind_airlocks_back_is_followed_at_once():
    # B checks its tenant's state file with an fstat of the file it keeps
    # open, and looks the name up again at most once a second. A state
    # file replaced behind airlock's back (a copy renamed over it) leaves
    # B's open file without a name (st_nlink 0): B looks the name up at
    # that very call, so A's write through the new file, right after, is
    # seen at B's next call, not a second later.
    a, b = host(0, "replaced"), host(1, "replaced")
    assert not write(a, {"f.txt": "0"})["isError"]
    assert read_in_run(b, "f.txt") == "0"
    state = os.path.join(tenants_dir(2), ".airlock", "replaced")
    for k in range(1, 4):
        with open(state, "rb") as f:
            data = f.read()
        with open(state + ".new", "wb") as f:
            f.write(data)
        os.replace(state + ".new", state)
        assert not write(a, {"f.txt": str(k)})["isError"]
        assert read_in_run(b, "f.txt") == str(k)


def walker_idle(pid, tid):
    """(in a wait between walks, its voluntary context switches so far)
    of the walker thread tid: waiting is the futex system call (202 on
    x86-64) of its timed wait."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            waiting = f.read().split()[0] == "202"
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            switches = [ln for ln in f if ln.startswith("voluntary_ctxt_switches")][0]
    except OSError:
        return (False, None)
    return (waiting, switches)


def test_a_call_is_not_held_by_a_walk_in_progress():
    # A tree of 600 files: its background walk (the metadata of every
    # entry, then, as it changed behind airlock's back, a full walk) takes
    # seconds over FUSE. A call made while a walk that began after a
    # change runs answers at once from the last walked state, without the
    # change; a later call sees it. Fails before: there was no walk apart
    # from the calls (and no thread that made it).
    b = host(1, "busy")
    tdir = os.path.join(tenants_dir(2), "busy")
    for d in range(6):
        os.makedirs(os.path.join(tdir, f"bulk{d}"))
        for k in range(100):
            with open(os.path.join(tdir, f"bulk{d}", f"b{k}.txt"), "w") as f:
                f.write("x")
    os.makedirs(os.path.join(tdir, "w"))
    with open(os.path.join(tdir, "w", "notes.txt"), "w") as f:
        f.write("v0")
    assert read_in_run(b, "w/notes.txt") == "v0"
    tids = walker_tids(b)
    assert len(tids) == 1, tids
    tid = tids.pop()
    for k in range(1, 50):
        # The change is made while the walker waits between two walks
        # (the same wait before and after it), so that no walk in flight
        # can have read it: the state has the last content.
        before = walker_idle(b.p.pid, tid)
        while not before[0]:
            time.sleep(0.01)  # polls the walker's state; asserts nothing
            before = walker_idle(b.p.pid, tid)
        with open(os.path.join(tdir, "w", "notes.txt"), "w") as f:
            f.write(f"v{k}")
        if walker_idle(b.p.pid, tid) == before:
            break
        assert until_seen(b, "w/notes.txt", f"v{k}") == f"v{k}"
    # The walker's next walk begins after the change: it opens the root.
    st = subprocess.Popen(["strace", "-e", "trace=open,openat,openat2", "-p", str(tid)],
                          stderr=subprocess.PIPE, text=True)
    try:
        for line in st.stderr:
            if "/proc/self/fd/" in line and '/busy"' in line:
                break
        # That walk runs (a lookup for each of 600 entries, then every
        # file read, under strace): this call must not wait for it.
        assert read_in_run(b, "w/notes.txt") == f"v{k - 1}"
    finally:
        st.terminate()
        st.wait(timeout=60)
    assert until_seen(b, "w/notes.txt", f"v{k}") == f"v{k}"


def test_the_first_background_walk_reads_no_file():
    # The first call walks the tree in full (it does not yet know the tree
    # is on shared storage); the background walker's first metadata walk
    # compares with the digest of that walk's state. Fails before: with no
    # digest to compare with, the walker's first cycle walked the tree in
    # full once more (every file opened).
    tenant = "firstcycle"
    tdir = os.path.join(tenants_dir(2), tenant)
    os.makedirs(os.path.join(tdir, "w", "sub"))
    for k in range(20):
        with open(os.path.join(tdir, "w" if k % 2 else "w/sub", f"c{k:02d}.txt"), "w") as f:
            f.write(f"file {k}\n")
    b = host(1, tenant)
    log = os.path.join(volume().base, f"strace-first-{b.p.pid}.log")
    st = subprocess.Popen(["strace", "-f", "-o", log, "-e", "trace=openat,openat2",
                           "-p", str(b.p.pid)], stderr=subprocess.PIPE, text=True)
    try:
        for line in st.stderr:
            if "attached" in line:
                break
        assert read_in_run(b, "w/c01.txt") == "file 1\n"
        (tid,) = walker_tids(b)
        # Each cycle of the walker opens the tenant's folder (its metadata
        # walk; a full walk opens it too): three opens, and the first
        # cycle is over.
        root = re.compile(rf'^{tid}\s+open\w*\(.*/{tenant}"')
        while True:
            with open(log) as f:
                lines = [ln for ln in f if ln.startswith(f"{tid} ")]
            if sum(1 for ln in lines if root.search(ln)) >= 3:
                break
            time.sleep(0.05)  # polls the log for that event; asserts nothing
    finally:
        st.terminate()
        st.wait(timeout=60)
    os.unlink(log)
    files = [ln for ln in lines if re.search(r'"c\d\d\.txt"', ln)]
    assert not files, files[:5]
    # And the walker still finds a change behind airlock's back.
    with open(os.path.join(tdir, "w", "c01.txt"), "w") as f:
        f.write("changed\n")
    assert until_seen(b, "w/c01.txt", "changed\n") == "changed\n"


def test_a_close_does_not_wait_for_a_full_walk_in_progress():
    # Closing the server closes its cache, which stops the background
    # walker. Fails before: a full walk already begun ran to its end first
    # (seconds for 10,000 files over GlusterFS), so the server exited
    # only once the walker had read every file of the tree. Here each
    # open of the walker is held back 0.2 s by strace (600 files: two
    # minutes), and the server must exit with most of them unread: the
    # walk gives up at its next entry.
    tenant = "closing"
    tdir = os.path.join(tenants_dir(2), tenant)
    for d in range(6):
        os.makedirs(os.path.join(tdir, f"bulk{d}"))
        for k in range(100):
            with open(os.path.join(tdir, f"bulk{d}", f"b{k}.txt"), "w") as f:
                f.write("x")
    with open(os.path.join(tdir, "notes.txt"), "w") as f:
        f.write("v0")
    b = host(1, tenant)
    _cluster.release(b)  # closed here
    assert read_in_run(b, "notes.txt") == "v0"
    (tid,) = walker_tids(b)
    log = os.path.join(volume().base, f"strace-walk-{tid}.log")
    st = subprocess.Popen(["strace", "-o", log, "-e", "trace=openat,openat2",
                           "-e", "inject=openat,openat2:delay_exit=200000", "-p", str(tid)],
                          stderr=subprocess.PIPE, text=True)
    try:
        for line in st.stderr:
            if "attached" in line:
                break
        # Behind airlock's back (another size), once every open of the
        # walker is logged: its next metadata walk differs from the last,
        # and a full walk (every file opened) follows.
        with open(os.path.join(tdir, "notes.txt"), "w") as f:
            f.write("v1 longer")
        # The full walk has begun once the walker opens a file of bulk.
        while True:
            with open(log) as f:
                if re.search(r'"b\d+\.txt"', f.read()):
                    break
            time.sleep(0.05)  # polls the log for that event; asserts nothing
        b.p.stdin.close()
        status = b.p.wait(timeout=300)
    finally:
        st.terminate()
        st.wait(timeout=60)
        if b.p.poll() is None:
            b.p.kill()
            b.p.wait()
    with open(log) as f:
        opened = len(re.findall(r'"b\d+\.txt"', f.read()))
    os.unlink(log)
    assert status == 0, status
    assert opened < 600 // 2, opened


def test_the_file_cap_holds_across_hosts():
    hosts = [host(i, "capfiles", "--workspace-max-files", "10") for i in range(2)]
    reqs = [[{"files": [{"path": f"h{k}-{j}.txt", "text": "x"}]} for j in range(10)]
            for k in range(2)]
    results = gluster.race_writes(hosts, reqs)
    ok = [r for r in results if not r["isError"]]
    n, _ = gluster.tree_usage(os.path.join(tenants_dir(0), "capfiles"))
    assert len(ok) == 10 and n == 10, (len(ok), n)
    refused = [r["content"][0]["text"] for r in results if r["isError"]]
    assert all("more than your limit of 10" in t for t in refused), refused[:2]


def test_the_byte_cap_holds_across_hosts():
    hosts = [host(i, "capbytes", "--workspace-max-bytes", "1000") for i in range(2)]
    reqs = [[{"files": [{"path": f"h{k}-{j}.bin", "text": "y" * 100}]} for j in range(10)]
            for k in range(2)]
    results = gluster.race_writes(hosts, reqs)
    ok = [r for r in results if not r["isError"]]
    _, size = gluster.tree_usage(os.path.join(tenants_dir(1), "capbytes"))
    assert len(ok) == 10 and size == 1000, (len(ok), size)


def test_a_write_is_atomic_for_readers_on_other_hosts():
    a, b = host(0, "atomic"), host(1, "atomic")
    size = 1 << 20
    assert not write(a, {"big.bin": "a" * size})["isError"]
    done = threading.Event()
    errors = []

    def writer():
        try:
            for c in "bcdef":
                r = write(a, {"big.bin": c * size})
                if r["isError"]:
                    errors.append(r)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    path = os.path.join(tenants_dir(2), "atomic", "big.bin")
    seen = set()
    check = ("import hashlib\nb = open('/input/big.bin', 'rb').read()\n"
             "print(len(b), len(set(b)), b[:1].decode())")
    while not done.is_set():
        # Through another mount, directly, and through a run on B.
        with open(path, "rb") as f:
            data = f.read()
        assert len(data) == size and len(set(data)) == 1, (len(data), set(data))
        seen.add(data[:1])
        r = b.run(check)
        assert r["success"], r
        n, kinds, first = r["stdout"].split()
        assert (int(n), int(kinds)) == (size, 1), r["stdout"]
    t.join()
    assert not errors, errors
    assert read_in_run(b, "big.bin")[:1] == "f"


if __name__ == "__main__":
    gluster.main("test_shared", _cluster)
