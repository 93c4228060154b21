"""A GlusterFS brick lost under a shared tenants folder: three `airlock mcp
--tenants-dir` servers, each on its own FUSE mount of one replicated volume
(tests/multihost/gluster.py), stand in for three hosts, and one brick's
process (glusterfsd) is killed with SIGKILL, as a host that dies takes its
brick with it. What is checked: the files written before the loss are read
by a run on every host after it; writes, removals and listings through the
workspace tools go on (the tenant's record lock and generation record with
them), each seen by another host at its next call; the caps on files and
bytes hold across hosts; a brick lost in the middle of a large write leaves
no torn file under the file's own name; and when the brick comes back
(`gluster volume start VOL force`, then the self-heal, waited for on
`gluster volume heal VOL info`), every brick holds the same files, those
written during the loss. With two bricks of three lost (no quorum), a
workspace tool answers a clear tool error at once, and the last good write
stays.

The volume is replica 3 with cluster.quorum-type auto (GlusterFS's default
for replica 3, set here all the same): a write needs two bricks of three,
so the one brick lost can never have taken writes the others missed, and
GlusterFS has a majority to heal it from; docs/serving.md ("Many hosts",
"A brick lost") says why replica 2 without an arbiter is not enough.

network.ping-timeout is left at its default (42 s): a killed brick
process's sockets are closed by the kernel, and each client logs its
disconnection at once; Volume.kill_brick waits for that line at most 30 s,
below the timeout, so a client that waited for its ping timeout fails the
test instead of slowing it. Every wait is on an event, bounded; every
process is stopped by teardown, and each test brings its brick back (and
waits for the heal) even when it fails, so the next starts whole.
"""
import contextlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
sys.path.insert(0, HERE)
import gluster  # noqa: E402

HOSTS = 3
BRICKS = 3
OPTIONS = {"cluster.quorum-type": "auto"}
# A tenant whose other hosts' changes only its generation and its record
# tell (test_shared.py's OVER_CAP): the record's path through a lost brick.
OVER_CAP = {"AIRLOCK_SHARED_WALK_MAX": "0", "AIRLOCK_SAFETY_WALK_S": "3600"}
_cluster = gluster.Hosts(mounts=HOSTS, bricks=BRICKS, options=OPTIONS)
volume, tenants_dir, host = _cluster.volume, _cluster.tenants_dir, _cluster.host
tool = gluster.tool


def write(m, files):
    r = gluster.write(m, files)
    assert not r["isError"], r
    return r


def read_files_in_run(m, paths):
    """{path: text} of paths as a run on m reads them in /input."""
    code = ("import json\nprint(json.dumps({p: open('/input/' + p).read() for p in "
            f"{paths!r}}}))")
    r = m.run(code)
    assert r["success"], r
    return json.loads(r["stdout"])


def shape_in_run(m, path):
    """(length, the set of its characters) of path as a run on m reads it:
    a large file's shape, for a run's output is capped."""
    r = m.run(f"t = open('/input/{path}').read()\nprint(len(t), ''.join(sorted(set(t))))")
    assert r["success"], r
    n, chars = r["stdout"].split()
    return int(n), chars


def listing_in_run(m):
    """Every file of m's /input, as a run sees it."""
    r = m.run("import os\nprint(sorted(os.path.relpath(os.path.join(d, f), '/input')\n"
              "    for d, _, fs in os.walk('/input') for f in fs))")
    assert r["success"], r
    return r["stdout"]


@contextlib.contextmanager
def brick_lost(i):
    """Brick i killed for the block, then back and healed, even when the
    block fails (so that the next test starts with a whole volume)."""
    vol = volume()
    vol.kill_brick(i)
    try:
        yield vol
    finally:
        vol.start_brick(i)


def tenant_on_brick(i, tenant):
    """{path: bytes} of tenant's regular files, read on brick i directly."""
    return {p: v for p, v in volume().brick_files(i, os.path.join("tenants", tenant)).items()
            if v != "dir"}


def test_files_before_a_brick_lost_are_read_and_changes_go_on_on_every_host():
    hs = [host(i, "lost") for i in range(HOSTS)]
    gen = host(1, "lost", env=OVER_CAP)
    readers = hs + [gen]
    files = {f"d{k}/f{k}.txt": f"before {k}" for k in range(5)}
    write(hs[0], files)
    for m in readers:  # each host has its staged copy before the loss
        assert read_files_in_run(m, list(files)) == files
    # Brick 0: the first, which replica 2's quorum "auto" would need.
    with brick_lost(0):
        for m in readers:
            assert read_files_in_run(m, list(files)) == files
        want = dict(files)
        for k, writer in enumerate(hs):
            change = {"d0/f0.txt": f"during {k}", f"new{k}/n.txt": f"new {k}"}
            write(writer, change)
            want.update(change)
            for m in readers:  # the next call of every host, the writer's too
                assert read_files_in_run(m, list(want)) == want, (k, m.p.pid)
        r = tool(hs[2], "workspace_remove", {"paths": ["d1"]})
        assert not r["isError"], r
        del want["d1/f1.txt"]
        r = tool(hs[0], "workspace_list", {})
        assert not r["isError"], r
        listed = sorted(f["path"] for f in r["structuredContent"]["files"])
        assert listed == sorted(want), listed
        for m in readers:
            assert listing_in_run(m) == f"{sorted(want)}\n", m.p.pid
        # The surviving bricks hold the tenant's files and its state file
        # (lock, generation and record) alike.
        assert tenant_on_brick(1, "lost") == tenant_on_brick(2, "lost")
        state = [volume().brick_files(b, "tenants/.airlock").get("lost") for b in (1, 2)]
        assert state[0] and state[0] == state[1], state


def test_caps_on_files_and_bytes_hold_across_hosts_while_a_brick_is_lost():
    files = [host(i, "capf", "--workspace-max-files", "10") for i in range(HOSTS)]
    size = [host(i, "capb", "--workspace-max-bytes", "1000") for i in range(HOSTS)]
    with brick_lost(2):
        results = gluster.race_writes(
            files, [[{"files": [{"path": f"h{k}-{j}.txt", "text": "x"}]} for j in range(6)]
                    for k in range(HOSTS)])
        ok = [r for r in results if not r["isError"]]
        n, _ = gluster.tree_usage(os.path.join(tenants_dir(0), "capf"))
        assert len(ok) == 10 and n == 10, (len(ok), n)
        refused = [r["content"][0]["text"] for r in results if r["isError"]]
        assert all("more than your limit of 10" in t for t in refused), refused[:2]
        results = gluster.race_writes(
            size, [[{"files": [{"path": f"h{k}-{j}.bin", "text": "y" * 100}]} for j in range(6)]
                   for k in range(HOSTS)])
        ok = [r for r in results if not r["isError"]]
        _, used = gluster.tree_usage(os.path.join(tenants_dir(1), "capb"))
        assert len(ok) == 10 and used == 1000, (len(ok), used)
    # Healed: the lost brick holds what the caps let in, no more.
    assert len(tenant_on_brick(2, "capf")) == 10
    assert sum(len(v) for v in tenant_on_brick(2, "capb").values()) == 1000


def test_a_brick_back_is_healed_to_the_files_written_while_it_was_lost():
    hs = [host(i, "heal") for i in range(HOSTS)]
    write(hs[0], {"keep.txt": "k", "old/gone.txt": "g", "edit.txt": "v0"})
    assert read_files_in_run(hs[1], ["edit.txt"]) == {"edit.txt": "v0"}
    vol = volume()
    want = {"keep.txt": b"k", "edit.txt": b"v0"}
    with brick_lost(1):
        write(hs[0], {"edit.txt": "v1"})
        write(hs[2], {"new/made.txt": "made", "big.txt": "b" * (256 << 10)})
        assert not tool(hs[2], "workspace_remove", {"paths": ["old"]})["isError"]
        want.update({"edit.txt": b"v1", "new/made.txt": b"made", "big.txt": b"b" * (256 << 10)})
        # The lost brick still has the files as they were.
        assert tenant_on_brick(1, "heal").get("edit.txt") == b"v0"
    # Back and healed (brick_lost waited for no entry left to heal): the
    # three bricks hold the same tree, the tenant's files those written
    # during the loss, its state file the last write's.
    trees = [vol.brick_files(b, "tenants") for b in range(BRICKS)]
    for b in (1, 2):
        diff = sorted(p for p in set(trees[0]) | set(trees[b])
                      if trees[0].get(p) != trees[b].get(p))
        assert not diff, (b, diff)
    assert tenant_on_brick(1, "heal") == want, sorted(tenant_on_brick(1, "heal"))
    for m in hs:
        assert read_files_in_run(m, list(want)) == {p: v.decode() for p, v in want.items()}


BIG = 1 << 20
SMALL_FILES = 400


def test_a_brick_lost_mid_write_leaves_no_torn_file():
    writer, reader = host(0, "mid"), host(1, "mid")
    old, new = "o" * BIG, "n" * BIG
    write(writer, {"crash/big.txt": old})
    assert shape_in_run(reader, "crash/big.txt") == (BIG, "o")
    files = [{"path": "crash/big.txt", "text": new}]
    files += [{"path": f"crash/many/f{i:03}.txt", "text": "x" * 1000} for i in range(SMALL_FILES)]
    d = os.path.join(tenants_dir(2), "mid")
    vol = volume()
    with contextlib.ExitStack() as stack:
        i = writer.start("tools/call", {"name": "workspace_write", "arguments": {"files": files}})
        # The write is under way once its first temporary file is on the
        # volume (a bounded number of looks through a third mount).
        for _ in range(20000):
            if any(f.startswith(".airlock-upload-") for _, _, fs in os.walk(d) for f in fs):
                break
        else:
            raise AssertionError("no temporary file of the write was ever seen")
        stack.enter_context(brick_lost(0))
        with writer.cv:
            assert i not in writer.replies, "the write was over before the brick was lost"
        r = writer.wait(i)
        assert "result" in r, r
        # Two bricks of three are a quorum: the write goes on and succeeds.
        assert not r["result"]["isError"], r
        with open(os.path.join(d, "crash", "big.txt")) as f:
            got = f.read()
        assert got == new, f"crash/big.txt: {len(got)} bytes, {got[:1]!r}..{got[-1:]!r}"
        for b in (1, 2):
            on = tenant_on_brick(b, "mid")
            assert on["crash/big.txt"] == new.encode(), (b, len(on["crash/big.txt"]))
            assert not [p for p in on if ".airlock-upload-" in p], (b, sorted(on)[:5])
        assert shape_in_run(reader, "crash/big.txt") == (BIG, "n")
    # Healed: every brick holds the new file whole, and the 400 others.
    for b in range(BRICKS):
        on = tenant_on_brick(b, "mid")
        assert on["crash/big.txt"] == new.encode(), (b, len(on["crash/big.txt"]))
        assert len([p for p in on if p.startswith("crash/many/")]) == SMALL_FILES, b
        assert not [p for p in on if ".airlock-upload-" in p], (b, sorted(on)[:5])


def test_quorum_lost_a_write_is_a_clear_error_and_the_last_good_write_stays():
    # Two bricks of three lost: no quorum, and GlusterFS refuses every
    # access (ENOTCONN). A workspace write answers a tool error at once,
    # never a hang; once the bricks are back, the files are those of the
    # last write that succeeded.
    hs = [host(i, "quorum") for i in range(2)]
    write(hs[0], {"q.txt": "good"})
    vol = volume()
    try:
        vol.kill_brick(1)
        vol.kill_brick(2)
        r = tool(hs[1], "workspace_write", {"files": [{"path": "q.txt", "text": "lost"}]})
        assert r["isError"], r
        msg = r["content"][0]["text"]
        assert "not connected" in msg.lower(), msg
        r = tool(hs[0], "workspace_list", {})
        assert r["isError"] and "not connected" in r["content"][0]["text"].lower(), r
    finally:
        vol.start_brick(1)  # `start force` brings back both; the heal waits for both
    assert read_files_in_run(hs[1], ["q.txt"]) == {"q.txt": "good"}
    for b in range(BRICKS):
        on = tenant_on_brick(b, "quorum")
        assert on == {"q.txt": b"good"}, (b, sorted(on))


if __name__ == "__main__":
    gluster.main("test_brick", _cluster)
