"""The two halves of the multihost tier joined: three `airlock serve` hosts,
each in a network namespace of its own (tests/multihost/cluster.py), behind
HAProxy in TCP mode (round robin, it reads no request, so a call lands on
any host), each with its own FUSE mount of one GlusterFS replicated volume
(tests/multihost/gluster.py) as its --tenants-dir.

What is checked, every call through the balancer: a file written with
workspace_write is read by execute_code on each of the three hosts at that
host's next call; another tenant never sees it through any host; host b
killed with SIGKILL, the tenant's calls succeed on a or c with all its files
and a session b held answers that its host is gone; host c killed in the
middle of a large write leaves the file whole, the tenant's lock free and
the caps counting right. Which host answered is
the Airlock-Instance header. docs/design.md ("Shared storage", and serve,
"Across instances") is the contract.

A client may retry a call once when its connection fails (HAProxy may place
a connection on b before its health check has seen b go; it retries and
redispatches itself, so that retry is seldom needed): a real client does
the same, and nothing else is retried."""
import faulthandler
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
sys.path.insert(0, HERE)
import cluster as cl  # noqa: E402
import gluster  # noqa: E402
from harness import run  # noqa: E402

faulthandler.dump_traceback_later(900, exit=True)
PEER_TIMEOUT = 20
# A forwarded call's bound: --queue-wait and --timeout (30 s each, the
# defaults) and --peer-timeout; a client's bound past it: reaching it is a
# hang, a failure.
CALL_TIMEOUT = 30 + 30 + PEER_TIMEOUT + 30
ROUNDS = 12  # calls through the balancer to reach every host: 3 do it in round robin

_vol = None
_cl = None
RETRIED = []  # the calls retried after a connection failure, for the report


def requirement():
    """Why this file cannot run here, or None."""
    return gluster.missing() or cl.netns_available()


def cluster():
    """The volume (3 mounts) and the cluster (one mount per host), made at
    first use and stopped by teardown()."""
    global _vol, _cl
    if _cl is None:
        base = tempfile.mkdtemp(prefix="airlock-multihost-")
        _vol = gluster.Volume(base, mounts=3)
        _vol.__enter__()
        os.makedirs(os.path.join(_vol.mounts[0], "tenants"), exist_ok=True)
        dirs = [os.path.join(m, "tenants") for m in _vol.mounts]
        for d in dirs:  # each mount sees the folder made through the first
            assert os.path.isdir(d), d
        c = cl.Cluster(tenants_dirs=dirs, extra_args=["--peer-timeout", str(PEER_TIMEOUT)])
        c.start()
        _cl = c
    return _cl


# ---- a client ----------------------------------------------------------------

def _post_once(addr, body, token):
    conn = http.client.HTTPConnection(*addr, timeout=CALL_TIMEOUT)
    try:
        conn.request("POST", "/mcp", body, {"Content-Type": "application/json",
                                            "Accept": "application/json",
                                            "Authorization": "Bearer " + token})
        r = conn.getresponse()
        data = r.read().decode()
        return r.status, r.getheader("Airlock-Instance"), data
    finally:
        conn.close()


def call(tool, args, tenant="acme", addr=None):
    """A tools/call through the balancer (or addr); returns (the answering
    instance, the CallToolResult). A connection that fails before an answer
    is retried once, as a client would."""
    c = cluster()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": args}}).encode()
    try:
        st, inst, data = _post_once(addr or c.lb, body, c.tokens[tenant])
    except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as e:
        RETRIED.append(f"{tool}: {e!r}")
        st, inst, data = _post_once(addr or c.lb, body, c.tokens[tenant])
    assert st == 200, (st, data)
    msg = json.loads(data)
    assert msg.get("id") == 1 and "result" in msg, msg
    return inst, msg["result"]


def text(result):
    return "".join(c.get("text", "") for c in result["content"])


def write(files, tenant="acme", addr=None):
    inst, r = call("workspace_write",
                   {"files": [{"path": p, "text": t} for p, t in files.items()]}, tenant, addr)
    assert not r.get("isError"), r
    return inst


def on_every_host(code, check, tenant="acme", hosts=None):
    """Calls execute_code(code) through the balancer until each of hosts
    (every host's name by default) has answered one call; check(text) holds
    for every answer. Returns the names of the hosts that answered."""
    want = set(hosts or (h.name for h in cluster().hosts))
    seen = set()
    for _ in range(ROUNDS):
        inst, r = call("execute_code", {"code": code}, tenant)
        assert not r.get("isError"), (inst, r)
        assert check(text(r)), (inst, text(r))
        seen.add(inst)
        if want <= seen:
            return seen
    raise AssertionError(f"{ROUNDS} calls through the balancer reached only {sorted(seen)}")


# ---- the tests ---------------------------------------------------------------

def test_a_write_through_any_host_is_read_on_every_host_at_its_next_call():
    cluster()
    for k in range(3):
        writer = write({"notes.txt": f"version {k}"})
        # Each host's next call after the write, whichever host wrote.
        on_every_host("print(open('/input/notes.txt').read(), end='')",
                      lambda t, k=k: t == f"version {k}")
        assert writer in {h.name for h in cluster().hosts}, writer
    write({"sub/deeper/more.txt": "more"})
    on_every_host("print(open('/input/sub/deeper/more.txt').read(), end='')",
                  lambda t: t == "more")
    _, r = call("workspace_remove", {"paths": ["sub"]})
    assert not r.get("isError"), r
    on_every_host("import os\nprint(sorted(os.listdir('/input')))",
                  lambda t: t == "['notes.txt']\n")


def test_another_tenant_never_sees_them_through_any_host():
    cluster()
    write({"secret-plan.txt": "acme only"})
    write({"mine.txt": "globex's"}, tenant="globex")
    code = ("import os\nfiles = sorted(os.path.relpath(os.path.join(d, f), '/input')\n"
            "    for d, _, fs in os.walk('/input') for f in fs)\nprint(files)\n"
            "print(os.path.exists('/input/secret-plan.txt'))")
    on_every_host(code, lambda t: t == "['mine.txt']\nFalse\n", tenant="globex")
    for _ in range(len(cluster().hosts)):
        inst, r = call("workspace_list", {}, tenant="globex")
        assert not r.get("isError") and "secret-plan" not in json.dumps(r), (inst, r)
    # And acme still has it, on every host.
    on_every_host("print(open('/input/secret-plan.txt').read(), end='')",
                  lambda t: t == "acme only")


def test_host_b_killed_its_tenants_go_on_with_their_files():
    c = cluster()
    b = c.host("b")
    files = {f"f{i}.txt": f"file {i} of acme" for i in range(6)}
    for p, t in files.items():  # each through whichever host the balancer picks
        write({p: t})
    # A session held by b, opened at b itself.
    inst, r = call("session_open", {}, addr=(b.addr, cl.HTTP_PORT))
    assert inst == "b" and not r.get("isError"), (inst, r)
    handle = r["_meta"]["dev.airlock/session"]
    b.proc.kill()
    b.proc.wait(timeout=30)
    check = ("import os\nfor n in sorted(os.listdir('/input')):\n"
             "    if n.startswith('f'): print(n, open('/input/' + n).read())")
    want = "".join(f"{p} {t}\n" for p, t in sorted(files.items()))
    seen = set()
    for _ in range(6):
        inst, r = call("execute_code", {"code": check})
        assert not r.get("isError") and text(r) == want, (inst, r)
        seen.add(inst)
    assert seen == {"a", "c"}, seen
    # A write after b is gone is seen on both hosts that are left.
    write({"after.txt": "after b"})
    on_every_host("print(open('/input/after.txt').read(), end='')",
                  lambda t: t == "after b", hosts={"a", "c"})
    # b's session, through whichever of a and c: the clear error, at once.
    answered = set()
    for _ in range(4):
        inst, r = call("execute_code", {"session": handle, "code": "print(1)"})
        assert inst in {"a", "c"}, inst
        assert r.get("isError") and "instance b, is gone" in text(r) and "lost" in text(r), r
        answered.add(inst)
    assert answered == {"a", "c"}, answered


BIG = 1 << 20  # bytes of the large file of the write killed midway
SMALL_FILES = 400  # files written with it, so that the write lasts


def tenant_usage(d):
    """The files and folders, and the bytes, of tenant folder d, the write's
    temporary files left out; and those temporary files."""
    entries = size = 0
    temps = []
    for top, dirs, files in os.walk(d):
        entries += len(dirs)
        for f in files:
            if f.startswith(".airlock-upload-"):
                temps.append(os.path.join(top, f))
                continue
            entries += 1
            size += os.lstat(os.path.join(top, f)).st_size
    return entries, size, temps


def test_host_killed_mid_write_leaves_no_torn_file_no_lock_and_right_caps():
    """Host c killed with SIGKILL while it writes a large workspace_write (a
    1 MiB file over an old one, and 400 more) to the shared folder: the file
    is whole, old or new (a write is temporary files, then renames); the
    tenant's lock on the volume went with the process, so the next write
    through a succeeds; and the caps count right: what that write reports
    the workspace holds is what is on the volume, the temporary files c left
    removed under the lock (before, they counted against the caps for ever)."""
    c = cluster()
    a, cc = c.host("a"), c.host("c")
    d = os.path.join(_vol.mounts[0], "tenants", "acme")
    old = "o" * BIG
    write({"crash/big.txt": old}, addr=(a.addr, cl.HTTP_PORT))
    new = "n" * BIG
    files = [{"path": "crash/big.txt", "text": new}]
    files += [{"path": f"crash/many/f{i:03}.txt", "text": "x" * 1000} for i in range(SMALL_FILES)]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "workspace_write", "arguments": {"files": files}}})
    s = socket.create_connection((cc.addr, cl.HTTP_PORT), timeout=CALL_TIMEOUT)
    s.sendall(f"POST /mcp HTTP/1.1\r\nHost: c\r\nContent-Type: application/json\r\n"
              f"Accept: application/json\r\nAuthorization: Bearer {c.tokens['acme']}\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    # The write is in progress once its first temporary file is on the
    # volume (a bounded number of looks through the test's own mount).
    for _ in range(20000):
        if tenant_usage(d)[2]:
            break
    else:
        raise AssertionError("no temporary file of c's write was ever seen")
    cc.proc.kill()
    cc.proc.wait(timeout=30)
    s.close()
    with open(os.path.join(d, "crash", "big.txt")) as f:
        got = f.read()
    # Old (killed while writing its temporary files, the likely case) or
    # new (killed among its renames), never a mix nor a part.
    assert got in (old, new), \
        f"crash/big.txt is torn: {len(got)} bytes, {got[:1]!r}..{got[-1:]!r}"
    assert tenant_usage(d)[2], "c's write was over before it was killed: nothing was tested"
    # The lock went with c: a write through a is not held up (the client's
    # bound is CALL_TIMEOUT; a lock left held would block it for ever).
    inst, r = call("workspace_write", {"files": [{"path": "crash/after.txt", "text": "a"}]},
                   addr=(a.addr, cl.HTTP_PORT))
    assert inst == "a" and not r.get("isError"), r
    entries, size, temps = tenant_usage(d)
    assert not temps, f"c's temporary files are still there: {temps[:3]}"
    st = r["structuredContent"]
    assert (st["entries"], st["bytes"]) == (entries, size), (st, entries, size)
    # A run on a sees the same file, whole.
    inst, r = call("execute_code", {"code": "t = open('/input/crash/big.txt').read()\n"
                                    "print(len(t), len(set(t)))"}, addr=(a.addr, cl.HTTP_PORT))
    assert not r.get("isError") and text(r).startswith(f"{BIG} 1\n"), r


def teardown():
    if _cl is not None:
        _cl.stop()
    if _vol is not None:
        _vol.stop()
        shutil.rmtree(_vol.base, ignore_errors=True)
    if RETRIED:
        print(f"test_cluster_shared: {len(RETRIED)} call(s) retried once after a connection "
              "failure: " + "; ".join(RETRIED))


if __name__ == "__main__":
    why = requirement()
    if why:
        # One line where the tier cannot run; as root (CI) a failure.
        if os.geteuid() == 0:
            print(f"not ok test_cluster_shared: multihost: {why} (as root, CI's case, a skip "
                  "counts as a failure)")
            print("test_cluster_shared: 0 passed, 1 failed")
            sys.exit(1)
        print(f"skip test_cluster_shared: multihost: {why}")
        print("test_cluster_shared: 0 passed, 0 failed, 1 skipped")
        sys.exit(0)
    try:
        run("test_cluster_shared")
    finally:
        teardown()
