"""airlock serve with tenants (--tokens FILE naming tenants, --tenants-dir
DIR): each tenant's workspace is DIR/TENANT, its runs' and sessions'
/input, filled through the workspace tools. Driven over raw HTTP on
loopback: two tenants cannot see or guess each other's files, sessions,
results or resources; one tenant at its quotas leaves the other untouched;
hostile upload paths are refused and change nothing; uploads reach the next
run and new sessions, not open ones, and survive a restart; the tokens
file's forms, overrides and reload; many tenants leave nothing behind."""
import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import threading
import time

from harness import AIRLOCK, environ, run, tmpdir
from test_serve import MODERN, Serve, result_of

TOK_A = "tok-acme-0123456789abcdef"
TOK_A2 = "tok-acme-second-0123456789"
TOK_B = "tok-beta-fedcba9876543210"


class One(Serve):
    """One local `airlock serve`: the server these checks run against here.
    Beside Serve's post/get/metrics/lines it has what a check needs to say
    the same of several hosts (tests/multihost/test_cluster_tenants.py runs
    every check again against three hosts on one shared volume behind a
    round-robin balancer, with a class of the same methods):

    pin() is a server that is always the same host (what is per host by
    contract: sessions' and runs' quotas, run slots, upstream server
    processes, the store of runs' files; design.md "Shared storage"),
    every() each host, signal(sig) sends sig to every host, pids() their
    process ids, mark() and since(mark) each host's log lines since a mark,
    wait_said(text) waits until every host has logged text, exited_ok()
    says each host exited 0. tmp= is the TMPDIR the server stages into;
    operator=False starts it without the operator's --metrics-token."""

    def __init__(self, *args, tmp=None, operator=True):
        old = os.environ.get("TMPDIR")
        if tmp:
            os.environ["TMPDIR"] = tmp
        try:
            super().__init__(*args, operator=operator)
        finally:
            if tmp and old is None:
                del os.environ["TMPDIR"]
            elif tmp:
                os.environ["TMPDIR"] = old

    def pin(self):
        return self

    def every(self):
        return [self]

    def signal(self, sig):
        self.p.send_signal(sig)

    def pids(self):
        return [self.p.pid]

    def mark(self):
        return [len(self.lines)]

    def since(self, mark):
        return [self.lines[mark[0]:]]

    def wait_said(self, text, timeout=60):
        """Waits (a bound against a hang, not a measure) until the log has a
        line with text; returns whether it came."""
        deadline = time.monotonic() + timeout
        while not any(text in l for l in self.lines):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.025)
        return True

    def exited_ok(self):
        return self.p.returncode == 0


def start_server(*args, **kw):
    """Starts "the server" of these checks with airlock serve's args (and
    One's tmp=, operator=); tests/multihost/test_cluster_tenants.py
    replaces it with three hosts behind a balancer."""
    return One(*args, **kw)


@contextlib.contextmanager
def serve(*args, **kw):
    s = start_server(*args, **kw)
    try:
        yield s
    finally:
        s.stop()
    # Every server drains and exits 0 on SIGTERM (and a sanitizer's
    # report would make it fail).
    assert s.exited_ok(), "".join(str(l) for l in s.lines)[-3000:]



def tenant_folders(tdir):
    """The tenants' folders of a --tenants-dir: every entry but .airlock,
    the server's (each tenant's lock and generation, design.md "Shared
    storage"), which no tenant name can be."""
    return [n for n in os.listdir(tdir) if n != ".airlock"]

def auth(tok):
    return {"Authorization": "Bearer " + tok}


def tool(s, tok, name, args, rid=1):
    """A tools/call of tool name; returns the result (or the error)."""
    status, _, body = s.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                              "params": {"name": name, "arguments": args, "_meta": MODERN}},
                             auth(tok))
    assert status == 200, (status, body)
    m = json.loads(body)
    return m.get("result", m)


def text(r):
    return "\n".join(c.get("text", "") for c in r.get("content", []) if c.get("type") == "text")


def code(s, tok, src, **args):
    r = tool(s, tok, "execute_code", dict(code=src, **args))
    assert not r.get("isError"), r
    return text(r)


def write(s, tok, files):
    return tool(s, tok, "workspace_write", {"files": files})


def tokens_file(d, lines):
    p = os.path.join(d, "tokens")
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    return p


def snapshot(root):
    """Every entry below root (links not followed): path -> (kind, size, bytes)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            data = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    data = f.read()
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, data)
    return out


def test_tenants_cannot_see_each_other():
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_B} beta"])
    tdir = os.path.join(d, "tenants")
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        r = write(s, TOK_A, [{"path": "secret/plan.txt", "text": "acme-secret-42"}])
        assert not r["isError"], r
        assert r["structuredContent"]["written"] == [{"path": "secret/plan.txt", "size": 14}], r
        # A's run sees its file; B's sees an empty /input and nothing of A's
        # anywhere it can look.
        assert code(s, TOK_A, "print(open('/input/secret/plan.txt').read())") == "acme-secret-42\n"
        out = code(s, TOK_B, "import os\nprint(sorted(os.listdir('/input')))\n"
                             "print('acme' in open('/proc/self/mountinfo').read())")
        assert out == "[]\nFalse\n", out
        r = tool(s, TOK_B, "workspace_list", {})
        assert r["structuredContent"]["files"] == [] and r["structuredContent"]["bytes"] == 0, r
        # B cannot name A's files: its paths are its own workspace's.
        r = tool(s, TOK_B, "workspace_remove", {"paths": ["secret/plan.txt"]})
        assert r["isError"] and "not in your workspace" in text(r), r
        assert "acme" not in json.dumps(r), r
        r = write(s, TOK_B, [{"path": "../acme/secret/plan.txt", "text": "x"}])
        assert r["isError"] and "'..'" in text(r), r
        with open(os.path.join(tdir, "acme", "secret", "plan.txt")) as f:
            assert f.read() == "acme-secret-42"
        # A's session and its run's resources: to B, a handle never opened
        # and a URI never held, byte for byte.
        r = tool(s, TOK_A, "session_open", {})
        handle = r["_meta"]["dev.airlock/session"]
        tool(s, TOK_A, "execute_code", {"code": "x = 1", "session": handle})
        fake = handle[:-6] + "aaaaaa"
        for name, args in (("execute_code", {"code": "print(x)"}), ("session_fork", {}),
                           ("session_close", {})):
            mine = tool(s, TOK_B, name, dict(args, session=handle))
            never = tool(s, TOK_B, name, dict(args, session=fake))
            assert mine["isError"] and text(mine) == text(never).replace(fake, handle), (mine, never)
        # A run's files answer to its tenant alone, through every host (a
        # read that lands on another host of a cluster goes to the one that
        # holds the run: design.md, serve, Across instances); B lists none.
        r = tool(s, TOK_A, "execute_code",
                 {"code": "open('/output/r.txt','w').write('acme-result')"})
        uri = [c["resource"]["uri"] for c in r["content"] if c.get("type") == "resource"][0]
        for one in s.every():
            status, _, body = one.post({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                        "params": {"uri": uri, "_meta": MODERN}}, auth(TOK_A))
            got = json.loads(body)
            assert got["result"]["contents"][0]["text"] == "acme-result", got
            status, _, body = one.post({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                        "params": {"uri": uri, "_meta": MODERN}}, auth(TOK_B))
            err = json.loads(body)["error"]
            assert err["code"] == -32002 and "acme" not in err["message"], err
            status, _, body = one.post({"jsonrpc": "2.0", "id": 4, "method": "resources/list",
                                        "params": {"_meta": MODERN}}, auth(TOK_B))
            assert uri not in body.decode(), body
        # Metrics carry no tenant name and nothing per tenant (read by the
        # operator: a tenant's token does not read them), on every host.
        for h in s.every():
            _, _, m = h.get("/metrics", s.operator)
            assert b"acme" not in m and b"beta" not in m and b"tenant" not in m, m
        # Tenant folders are the operator's, 0700.
        assert os.stat(os.path.join(tdir, "acme")).st_mode & 0o777 == 0o700


def test_one_tenant_at_its_quotas_leaves_the_other_untouched():
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme max-sessions=1 max-files=3 max-bytes=100",
                          f"{TOK_B} beta"])
    with serve("--tokens", tok, "--tenants-dir", os.path.join(d, "t"), "--max-sessions", "8") as s:
        # Sessions: acme's own quota (1, from the file), not the option's;
        # sessions are each host's, and so is their quota.
        one = s.pin()
        assert not tool(one, TOK_A, "session_open", {}).get("isError")
        r = tool(one, TOK_A, "session_open", {})
        assert r["isError"] and "you have 1 open, your limit (max-sessions of your tenant 1)" \
            in text(r), r
        for _ in range(3):
            r = tool(one, TOK_B, "session_open", {})
            assert not r.get("isError"), r
        # Bytes: 100 fit, one more does not, and nothing of the refused call
        # is written; beta writes ten times that.
        r = write(s, TOK_A, [{"path": "a.bin", "base64": "QUFB" * 33 + "QQ=="}])  # 100 bytes
        assert not r["isError"] and r["structuredContent"]["bytes"] == 100, r
        r = write(s, TOK_A, [{"path": "b.txt", "text": "y"}])
        assert r["isError"] and "would hold 101 bytes, more than your limit of 100 " \
            "(max-bytes of your tenant)" in text(r), r
        r = tool(s, TOK_A, "workspace_list", {})
        assert [f["path"] for f in r["structuredContent"]["files"]] == ["a.bin"], r
        r = write(s, TOK_B, [{"path": "big.txt", "text": "z" * 1000}])
        assert not r["isError"], r
        # Files and folders: 3 (a.bin, then d and d/e) fit, a fourth does not.
        tool(s, TOK_A, "workspace_remove", {"paths": ["a.bin"]})
        r = write(s, TOK_A, [{"path": "d/e", "text": ""}, {"path": "f", "text": ""}])
        assert not r["isError"] and r["structuredContent"]["entries"] == 3, r
        r = write(s, TOK_A, [{"path": "g", "text": ""}])
        assert r["isError"] and "4 files and folders, more than your limit of 3" in text(r), r
        assert "beta" not in text(r)
        r = write(s, TOK_B, [{"path": f"n{i}", "text": ""} for i in range(20)])
        assert not r["isError"], r


# How long a write, removal or listing waits for its tenant's lock that
# another process or host holds (WS_LOCK_WAIT_S in src/mcp/tenant_workspace.c).
LOCK_WAIT_S = 30


def test_a_lock_held_elsewhere_fails_one_tenants_write_in_time_and_no_one_elses():
    """A host that hangs holding a tenant's lock (here the test's own
    process, holding the POSIX record lock on DIR/.airlock/acme as a frozen
    host's process would) makes that tenant's write wait at most
    LOCK_WAIT_S and fail naming the wait, with nothing written; a tenant
    whose lock shares the server's stripe with it (beta222: the same hash
    modulo 64) and another tenant write at once meanwhile. Before, the write
    waited for the lock for ever holding the stripe, and the neighbour's
    write waited for ever behind it."""
    import fcntl
    d = tmpdir()
    tdir = os.path.join(d, "t")
    tok_n = "tok-beta222-0123456789abcdef"
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_B} beta", f"{tok_n} beta222"])
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        assert not write(s, TOK_A, [{"path": "a.txt", "text": "a"}])["isError"]
        fd = os.open(os.path.join(tdir, ".airlock", "acme"), os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            got = {}

            def bg(name, t, path):
                got[name] = write(s, t, [{"path": path, "text": "x"}])
            held = threading.Thread(target=bg, args=("acme", TOK_A, "b.txt"))
            held.start()
            # The neighbour's and beta's writes are not held behind it.
            for name, t in (("beta222", tok_n), ("beta", TOK_B)):
                th = threading.Thread(target=bg, args=(name, t, "c.txt"))
                th.start()
                th.join(LOCK_WAIT_S * 3)  # a bound against a hang, not a measure
                assert not th.is_alive(), f"{name}'s write hangs behind acme's lock"
                assert not got[name]["isError"], got[name]
            held.join(LOCK_WAIT_S * 3)
            assert not held.is_alive(), "acme's write waits for its lock for ever"
        finally:
            os.close(fd)
        r = got["acme"]
        assert r["isError"] and f"{LOCK_WAIT_S} s" in text(r) and "nothing was written" in text(r), r
        # Let go, the lock is taken again at once; b.txt was never written.
        r = tool(s, TOK_A, "workspace_list", {})
        assert [f["path"] for f in r["structuredContent"]["files"]] == ["a.txt"], r
        assert not write(s, TOK_A, [{"path": "b.txt", "text": "b"}])["isError"]


# An LD_PRELOAD shim for test_a_state_files_check_never_lets_a_process_lock_go:
# fcntl refuses open file description locks (EINVAL, as a file system that
# takes none), so the server falls back to process-associated ones; and
# once a write lock is taken while the FIFO $AIRLOCK_TEST_GATE exists, it
# makes $AIRLOCK_TEST_GATE.held and waits until the gate is opened and
# closed: the writing thread holds the tenant's lock until the test says.
NO_OFD_SHIM = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int shim(int fd, int cmd, void *arg)
{
        if (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK) {
                errno = EINVAL;
                return -1;
        }
        long r = syscall(SYS_fcntl, fd, cmd, arg);
        const char *gate = getenv("AIRLOCK_TEST_GATE");
        struct stat st;
        if (r == 0 && (cmd == F_SETLK || cmd == F_SETLKW) &&
            ((struct flock *)arg)->l_type == F_WRLCK && gate && stat(gate, &st) == 0 &&
            S_ISFIFO(st.st_mode)) {
                char held[4096];
                snprintf(held, sizeof(held), "%s.held", gate);
                close(open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
                int g = open(gate, O_RDONLY | O_CLOEXEC);
                char c;
                while (g >= 0 && read(g, &c, 1) > 0)
                        ;
                close(g);
        }
        return (int)r;
}

int fcntl(int fd, int cmd, ...)
{
        va_list ap;
        va_start(ap, cmd);
        void *arg = va_arg(ap, void *);
        va_end(ap);
        return shim(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
        va_list ap;
        va_start(ap, cmd);
        void *arg = va_arg(ap, void *);
        va_end(ap);
        return shim(fd, cmd, arg);
}
"""


def lock_held(path):
    """Whether another process holds a write lock on any of path (F_GETLK
    from this one: on a local disk the kernel's table, on a network or FUSE
    file system its server's, which sees every client's)."""
    import fcntl
    import struct
    fd = os.open(path, os.O_RDWR)
    try:
        fl = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        got = fcntl.fcntl(fd, fcntl.F_GETLK, fl)
        return struct.unpack("hhqqi", got)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def test_a_state_files_check_never_lets_a_process_lock_go():
    """Where the file system refuses open file description locks, the
    tenant's lock is a process-associated one, which any close of a
    descriptor of the file lets go, whichever thread closes it. A call's
    generation check opens and closes the state file when its times moved:
    it must not do so while another thread of the server holds the lock (a
    write in progress), or another host could take the lock and write at
    once. Here the write is held (the shim) with its lock taken, the state
    file's times moved, and a call of the same tenant made: the lock must
    still be held after the call's check, until the write goes on. Before,
    the call's close of the state file let the write's lock go."""
    d = tmpdir()
    shim_c, shim_so = os.path.join(d, "no_ofd.c"), os.path.join(d, "no_ofd.so")
    with open(shim_c, "w") as f:
        f.write(NO_OFD_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim_so, shim_c], check=True)
    gate = os.path.join(d, "gate")
    tdir = os.path.join(d, "t")
    state = os.path.join(tdir, ".airlock", "acme")
    tok = tokens_file(d, [f"{TOK_A} acme"])
    env = {"LD_PRELOAD": shim_so, "AIRLOCK_TEST_GATE": gate}
    with environ(env):
        s = start_server("--tokens", tok, "--tenants-dir", tdir)
    try:
        one = s.pin()  # the write and the call on one host (tests/multihost reruns this)
        assert not write(one, TOK_A, [{"path": "a.txt", "text": "a"}])["isError"]
        assert code(one, TOK_A, "print(open('/input/a.txt').read())") == "a\n"
        assert not lock_held(state)
        os.mkfifo(gate, 0o600)
        got = {}

        def bg(name, fn):
            got[name] = fn()
        w = threading.Thread(target=bg, args=("write", lambda: write(
            one, TOK_A, [{"path": "b.txt", "text": "b"}])))
        w.start()
        for _ in range(6000):  # until the write holds its lock (a bound, not a measure)
            if os.path.exists(gate + ".held"):
                break
            time.sleep(0.01)
        assert os.path.exists(gate + ".held"), "the write never took its lock"
        assert lock_held(state), "the write holds no lock"
        # The state file's times move (as another host's write would move
        # them): the call's check reads the record, an open and a close.
        os.utime(state, ns=(time.time_ns(), time.time_ns()))
        c = threading.Thread(target=bg, args=("call", lambda: tool(
            one, TOK_A, "execute_code", {"code": "print(open('/input/a.txt').read())"})))
        c.start()
        # Old code: the call ends at once, its close having let the lock go.
        # Now: its close waits for the write (a bound, not a measure).
        c.join(5)
        assert lock_held(state), "a call's check of the state file let another thread's lock go"
        g = os.open(gate, os.O_WRONLY)
        os.unlink(gate)
        os.close(g)
        w.join(120)
        c.join(120)
        assert not w.is_alive() and not c.is_alive()
        assert not got["write"]["isError"], got["write"]
        assert text(got["call"]) == "a\n", got["call"]
        assert code(one, TOK_A, "print(open('/input/b.txt').read())") == "b\n"
    finally:
        if os.path.exists(gate):
            g = os.open(gate, os.O_RDWR)
            os.unlink(gate)
            os.close(g)
        s.stop()


def opened(path):
    """An inotify watch of path for IN_OPEN, and a function that says
    whether anyone on this machine opened it since (a device node's open is
    an event as a file's is)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    ifd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert ifd >= 0 and libc.inotify_add_watch(ifd, path.encode(), 0x20) >= 0  # IN_OPEN

    def since():
        try:
            return len(os.read(ifd, 4096)) > 0
        except BlockingIOError:
            return False
    return since


def test_a_state_file_that_is_not_a_regular_file_is_never_opened():
    """DIR/.airlock/TENANT is the server's own, but on shared storage any
    host of the volume (or anyone with access to it) may put something else
    there: a FIFO, or a device node, which on a volume mounted without
    nodev opens this host's own device. Never opened: the tenant's calls go
    on, reading its tree in full (the record is only a hint), and its
    writes are refused, nothing written, naming the state file. Before, a
    FIFO there held every call of the tenant for ever (the record's read
    waited in open for a writer, outside any call's bound), and a device
    there was opened read-write at the tenant's next write and the record
    written to it: with a block device and a server running as root, this
    host's own disk."""
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_B} beta"])
    tdir = os.path.join(d, "t")
    state = os.path.join(tdir, ".airlock", "acme")
    ls = "import os\nprint(sorted(os.listdir('/input')))"
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        assert not write(s, TOK_A, [{"path": "a.txt", "text": "a"}])["isError"]
        os.unlink(state)
        os.mkfifo(state, 0o600)
        was_opened = opened(state)
        got = {}

        def call():
            got["r"] = tool(s, TOK_A, "execute_code", {"code": ls})
        th = threading.Thread(target=call)
        th.start()
        th.join(60)  # a bound against a hang, not a measure
        if th.is_alive():
            os.close(os.open(state, os.O_RDWR))  # lets the held open go
            th.join(60)
            assert False, "a FIFO as the state file holds the tenant's call for ever"
        assert not got["r"]["isError"] and text(got["r"]) == "['a.txt']\n", got["r"]
        assert not was_opened(), "the FIFO was opened"
        r = write(s, TOK_A, [{"path": "b.txt", "text": "b"}])
        assert r["isError"] and "not a regular file" in text(r), r
        assert not was_opened(), "the FIFO was opened"
        # A device node: /dev/full's numbers, harmless to open here.
        os.unlink(state)
        os.mknod(state, 0o600 | stat.S_IFCHR, os.makedev(1, 7))
        was_opened = opened(state)
        assert code(s, TOK_A, ls) == "['a.txt']\n"
        r = write(s, TOK_A, [{"path": "b.txt", "text": "b"}])
        assert r["isError"] and "not a regular file" in text(r) and \
            "nothing was written" in text(r), r
        assert not was_opened(), "the device was opened"
        assert sorted(os.listdir(os.path.join(tdir, "acme"))) == ["a.txt"]
        # Another tenant is not concerned; the operator's fix (the node
        # removed) gives the tenant its writes back.
        assert not write(s, TOK_B, [{"path": "b.txt", "text": "b"}])["isError"]
        os.unlink(state)
        assert not write(s, TOK_A, [{"path": "b.txt", "text": "b"}])["isError"]
        assert code(s, TOK_A, ls) == "['a.txt', 'b.txt']\n"


def test_hostile_upload_paths_are_refused_and_change_nothing():
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme"])
    tdir = os.path.join(d, "t")
    outside = os.path.join(d, "outside")
    os.mkdir(outside)
    with open(os.path.join(outside, "keep.txt"), "w") as f:
        f.write("outside")
    with serve("--tokens", tok, "--tenants-dir", tdir, "--workspace-max-bytes", "4096",
               "--workspace-max-files", "50") as s:
        assert not write(s, TOK_A, [{"path": "ok.txt", "text": "ok"}])["isError"]
        # Links planted on the server's disk, in the tenant's folder.
        os.symlink(outside, os.path.join(tdir, "acme", "evil"))
        os.symlink(os.path.join(outside, "keep.txt"), os.path.join(tdir, "acme", "file-link"))
        before = snapshot(tdir)
        outside_before = snapshot(outside)
        cases = [
            ("../x", "'..'"), ("a/../../x", "'..'"), ("/etc/passwd", "absolute"),
            ("a\u0000b", "NUL"), ("x" * 2000, "longer than 1024 bytes"),
            ("a/" + "y" * 300, "longer than 255"), ("a//b", "empty part"), ("a/", "empty part"),
            (".", "'.'"), ("a/./b", "'.'"), ("", "empty path"), ("a\nb", "control"),
            ("/".join(["d"] * 40), "deep"), ("evil/x", "symbolic link"),
            ("evil", "symbolic link"), ("file-link", "symbolic link"),
            ("ok.txt/inner", "not a folder"), (".airlock-upload-x", "server's"),
        ]
        for path, why in cases:
            # Each bad path beside a good one: the good one is not written either.
            r = write(s, TOK_A, [{"path": "new-good.txt", "text": "g"}, {"path": path, "text": "x"}])
            assert r["isError"] and why in text(r) and "nothing was written" in text(r), (path, r)
        for files, why in (
                ([{"path": f"m{i}", "text": ""} for i in range(1001)], "at most 1000"),
                ([{"path": f"m{i}", "text": ""} for i in range(60)], "more than your limit of 50"),
                ([{"path": "big", "text": "x" * 5000}], "more than your limit of 4096"),
                ([{"path": "two", "text": "1"}, {"path": "two", "text": "2"}], "given twice"),
                ([{"path": "p", "text": "1"}, {"path": "p/q", "text": "2"}], "a file and a folder"),
                ([{"path": "b64", "base64": "!!!"}], "not valid base64"),
                ([{"path": "both", "text": "1", "base64": "MQ=="}], "must be"),
        ):
            r = write(s, TOK_A, files)
            assert r["isError"] and why in text(r), (why, r)
        for paths, why in ((["../x"], "'..'"), (["ok.txt", "missing"], "not in your workspace"),
                           (["evil/keep.txt"], "symbolic link")):
            r = tool(s, TOK_A, "workspace_remove", {"paths": paths})
            assert r["isError"] and why in text(r) and "nothing was removed" in text(r), r
        assert snapshot(tdir) == before and snapshot(outside) == outside_before
        # The listing names the links as skipped, never follows them.
        r = tool(s, TOK_A, "workspace_list", {})
        st = r["structuredContent"]
        assert [f["path"] for f in st["files"]] == ["ok.txt"], st
        assert sorted(x["path"] for x in st["skipped"]) == ["evil", "file-link"], st
        # Removing a link removes the link, not what it points at.
        r = tool(s, TOK_A, "workspace_remove", {"paths": ["evil", "file-link"]})
        assert not r["isError"], r
        assert snapshot(outside) == outside_before
        assert not os.path.lexists(os.path.join(tdir, "acme", "evil"))


def test_uploads_reach_runs_and_new_sessions_and_survive_a_restart():
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme"])
    tdir = os.path.join(d, "t")
    read = "print(open('/input/data/v.txt').read())"
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        assert not write(s, TOK_A, [{"path": "data/v.txt", "text": "one"}])["isError"]
        assert code(s, TOK_A, read) == "one\n"
        old = tool(s, TOK_A, "session_open", {})["_meta"]["dev.airlock/session"]
        assert code(s, TOK_A, read, session=old) == "'one'\n" or \
            code(s, TOK_A, read, session=old).startswith("one")
        r = write(s, TOK_A, [{"path": "data/v.txt", "text": "two"},
                             {"path": "img.png", "base64": "iVBORw0KGgo="}])
        assert not r["isError"], r
        assert code(s, TOK_A, read) == "two\n"
        assert code(s, TOK_A, read, session=old).startswith("one")
        new = tool(s, TOK_A, "session_open", {})["_meta"]["dev.airlock/session"]
        assert code(s, TOK_A, read, session=new).startswith("two")
        assert code(s, TOK_A, "print(open('/input/img.png','rb').read())") == \
            "b'\\x89PNG\\r\\n\\x1a\\n'\n"
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        assert code(s, TOK_A, read) == "two\n"
        r = tool(s, TOK_A, "workspace_list", {})
        files = {f["path"]: f for f in r["structuredContent"]["files"]}
        assert files["data/v.txt"]["size"] == 3 and files["img.png"]["media_type"] == "image/png", r
        r = tool(s, TOK_A, "workspace_remove", {"paths": ["data"]})
        assert not r["isError"], r
        assert code(s, TOK_A, "import os\nprint(os.listdir('/input'))") == "['img.png']\n"


def until(fn, done, deadline_s=600):
    """fn() until done(its value), and that value: on shared storage (the
    multihost tier runs these checks there) a change behind airlock's back
    is seen once the background walk found it, within its period plus a
    walk; on a local disk at the next call. The deadline only ends a test
    that would never pass."""
    end = time.monotonic() + deadline_s
    while True:
        v = fn()
        if done(v) or time.monotonic() > end:
            return v


def test_the_tenants_folder_is_checked_at_every_call():
    """Each call looks at the tenant's folder on a local disk (one lookup,
    design.md "Shared storage"; on shared storage at most once a second,
    and the background walk looks too): removed by the operator, a call
    makes it again, empty; replaced by a link, the call is refused and
    nothing is followed. Before the background walk, the next call saw
    both on shared storage too; now a call within the walk's period may
    answer from the last walk (following nothing)."""
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme"])
    tdir = os.path.join(d, "t")
    outside = os.path.join(d, "outside")
    os.mkdir(outside)
    with open(os.path.join(outside, "keep.txt"), "w") as f:
        f.write("outside")
    ls = "import os\nprint(sorted(os.listdir('/input')))"
    with serve("--tokens", tok, "--tenants-dir", tdir) as s:
        assert not write(s, TOK_A, [{"path": "a.txt", "text": "a"}])["isError"]
        for h in s.every():
            assert code(h, TOK_A, ls) == "['a.txt']\n"
        shutil.rmtree(os.path.join(tdir, "acme"))
        for h in s.every():
            assert until(lambda: code(h, TOK_A, ls), lambda v: v == "[]\n") == "[]\n"
        assert os.stat(os.path.join(tdir, "acme")).st_mode & 0o777 == 0o700
        os.rmdir(os.path.join(tdir, "acme"))
        os.symlink(outside, os.path.join(tdir, "acme"))
        for h in s.every():
            r = until(lambda: tool(h, TOK_A, "execute_code", {"code": ls}),
                      lambda v: v["isError"] or "outside" in json.dumps(v))
            assert r["isError"] and "is not a folder" in text(r) and "outside" not in text(r), r
            r = tool(h, TOK_A, "workspace_list", {})
            assert r["isError"] and "keep.txt" not in json.dumps(r), r
        assert os.listdir(outside) == ["keep.txt"]


def derived_of(token):
    return "t" + hashlib.sha256(b"airlock tenant\0" + token.encode()).hexdigest()[:16]


def test_the_tokens_file_names_tenants_and_reloads():
    d = tmpdir()
    tdir = os.path.join(d, "t")
    # Bad lines: exit 2 with one message naming the file and the line.
    t1, t2 = "tok-0123456789abcdef", "tok2-0123456789abcdef"
    for line, why in ((f"{t1} x/y", "is not a tenant name"),
                      (f"{t1} acme max-nope=1", "unknown setting"),
                      (f"{t1} acme max-runs=0", "from 1 to 32"),
                      (f"{t1} acme\n{t1} beta", "a token names one tenant"),
                      (f"{t1} acme max-files=1\n{t2} acme max-files=2", "give it one value"),
                      # A name a token alone could derive (its workspace would be shared).
                      (f"{t1} t2073c6a81939a955", "has the form of the name of a token given alone"),
                      (f"{t1} {derived_of(t2)}", "give the tenant another name"),
                      # A token that can be guessed, or an example's placeholder.
                      ("tok acme", "a token of 3 bytes is too short to be a secret"),
                      ("REPLACE-WITH-A-RANDOM-TOKEN", "is the placeholder of an example")):
        p = tokens_file(d, ["# tenants", line])
        out = subprocess.run([AIRLOCK, "serve", "--listen", "127.0.0.1:0", "--tokens", p],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and f"{p}:" in out.stderr and why in out.stderr, out.stderr
    r = subprocess.run([AIRLOCK, "serve", "--listen", "127.0.0.1:0", "--tenants-dir", tdir,
                        "--workspace", d], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tenants-dir and --workspace" in r.stderr, r.stderr
    # A comment may end a line, as serving.md's example has one.
    tok = tokens_file(d, [f"{TOK_A} acme  # the acme team", f"{TOK_A2} acme", TOK_B + "\t# beta"])
    with serve("--tokens", tok, "--tenants-dir", tdir, "--max-runs", "2",
               "--max-runs-per-token", "1") as s:
        # Two tokens, one tenant: one workspace, one set of sessions.
        write(s, TOK_A, [{"path": "f.txt", "text": "shared"}])
        assert code(s, TOK_A2, "print(open('/input/f.txt').read())") == "shared\n"
        h = tool(s, TOK_A, "session_open", {})["_meta"]["dev.airlock/session"]
        code(s, TOK_A2, "y = 5", session=h)
        # A token without a tenant: its own, named by a digest of the token.
        write(s, TOK_B, [{"path": "b.txt", "text": "b"}])
        derived = "t" + hashlib.sha256(b"airlock tenant\0" + TOK_B.encode()).hexdigest()[:16]
        assert sorted(tenant_folders(tdir)) == sorted(["acme", derived]), os.listdir(tdir)
        hb = tool(s, TOK_B, "session_open", {})["_meta"]["dev.airlock/session"]
        sessions = s.metrics()["airlock_sessions_open"]
        # A SIGHUP with a bad file keeps the old table.
        with open(tok, "w") as f:
            f.write(f"{TOK_A} bad/name\n")
        before = s.mark()
        s.signal(signal.SIGHUP)
        s.wait_said("keeping the old tokens")
        for lines in s.since(before):
            assert "is not a tenant name" in "".join(lines), lines
            # One line tells the whole reload: the configuration, then the tokens.
            told = [l for l in lines if "SIGHUP" in l]
            assert len(told) == 1 and told[0].startswith(
                "airlock serve: SIGHUP: configuration reloaded; keeping the old tokens: "), told
        assert not tool(s, TOK_B, "workspace_list", {}).get("isError")
        # B removed while a call of its runs and another waits: the waiting
        # one is refused, the running one cancelled, its session closed; the
        # workspace folder stays. Run slots are each host's: both calls go
        # to one.
        results = {}
        one = s.pin()

        def slow(key, src):
            results[key] = one.post({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                   "params": {"name": "execute_code", "arguments": {"code": src},
                                              "_meta": MODERN}}, auth(TOK_B))

        t1 = threading.Thread(target=slow, args=("running", "import time\ntime.sleep(60)"))
        t1.start()
        # Waited for, not assumed: a deadline only ends a test that would
        # never pass.
        end = time.monotonic() + 120
        while one.metrics()["airlock_runs_in_flight"] < 1:
            assert time.monotonic() < end, "the running call never took its slot"
            time.sleep(0.025)
        t2 = threading.Thread(target=slow, args=("queued", "print('never')"))
        t2.start()
        end = time.monotonic() + 120
        while one.metrics()["airlock_queue_depth"] < 1:
            assert time.monotonic() < end, "the second call never queued"
            time.sleep(0.025)
        with open(tok, "w") as f:
            f.write(f"{TOK_A} acme\n{TOK_A2} acme\n")
        s.signal(signal.SIGHUP)
        t1.join(120)
        t2.join(120)
        assert results["queued"][0] == 401, results
        assert results["running"][0] == 200 and b"cancelled" in results["running"][2], results
        # The reload's closing line comes after the removal it reports,
        # which the checks of the calls above may see first: waited for
        # before asking any other host.
        assert s.wait_said("1 tenant removed", 20), s.lines[-5:]
        for host in s.every():
            status, _, _ = host.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                   "params": {"_meta": MODERN}}, auth(TOK_B))
            assert status == 401
        assert s.metrics()["airlock_sessions_open"] == sessions - 1
        assert os.path.isfile(os.path.join(tdir, derived, "b.txt"))
        # acme is untouched: its session still holds its state.
        assert code(s, TOK_A, "print(y)", session=h).startswith("5")


def descendants(pid):
    kids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rindex(")") + 2:].split()[1]) == pid:
            kids.append(int(p))
    return kids + [g for k in kids for g in descendants(k)]


def cgroups(pid):
    """The cgroups a server of this pid made (airlock-PID-...), as root."""
    out = set()
    for dirpath, dirs, _ in os.walk("/sys/fs/cgroup"):
        out.update(os.path.join(dirpath, x) for x in dirs if x.startswith(f"airlock-{pid}-"))
    return out


def test_many_tenants_created_used_and_removed_leave_nothing_behind():
    n = int(os.environ.get("TENANTS", "40"))
    d = tmpdir()
    tdir = os.path.join(d, "t")
    tmp = os.path.join(d, "tmp")
    os.mkdir(tmp)
    toks = [f"tok-many-{i:04d}-{os.urandom(8).hex()}" for i in range(n)]
    tok = tokens_file(d, ["tok-keeper-0123456789 keeper"] + [f"{t} tn{i}" for i, t in enumerate(toks)])
    mounts_before = open("/proc/self/mounts").read().count(tmp)
    # The server stages into its own TMPDIR, which must be empty at the end.
    s = start_server("--tokens", tok, "--tenants-dir", tdir, "--max-sessions", "1024",
                     "--max-sessions-per-token", "4", tmp=tmp)
    try:
        peak = 0
        for i, t in enumerate(toks):
            assert not write(s, t, [{"path": "me.txt", "text": f"tn{i}"}])["isError"]
            assert code(s, t, "print(open('/input/me.txt').read())") == f"tn{i}\n"
            if i % 2 == 0:
                h = tool(s, t, "session_open", {})["_meta"]["dev.airlock/session"]
                assert code(s, t, "print(open('/input/me.txt').read())", session=h).startswith(
                    f"tn{i}")
            peak = max(peak, sum(len(descendants(pid)) for pid in s.pids()))
            if i == n // 2:
                assert any(cgroups(pid) for pid in s.pids()), \
                    "as root, runs have cgroups (the check below means it)" \
                    if os.geteuid() == 0 else True
        assert len(tenant_folders(tdir)) == n
        with open(tok, "w") as f:
            f.write("tok-keeper-0123456789 keeper\n")
        s.signal(signal.SIGHUP)
        assert s.wait_said(f"{n} tenants removed", 20)
        assert s.metrics()["airlock_sessions_open"] == 0
        # A removed tenant's token is refused (by every host); its folder stays.
        for h in s.every():
            status, _, _ = h.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                   "params": {"_meta": MODERN}}, auth(toks[0]))
            assert status == 401
        assert open(os.path.join(tdir, "tn0", "me.txt")).read() == "tn0"
        print(f"  {n} tenants: at most {peak} processes below the server while in use")
    finally:
        pids = s.pids()
        s.stop()
    assert s.exited_ok(), "".join(str(l) for l in s.lines)[-3000:]
    leftover = [p for pid in pids for p in descendants(pid)]
    assert not leftover, leftover
    assert open("/proc/self/mounts").read().count(tmp) == mounts_before == 0
    assert all(cgroups(pid) == set() for pid in pids), [cgroups(pid) for pid in pids]
    assert os.listdir(tmp) == [], os.listdir(tmp)
    # Only the tenants' own files are left in their folders (no temporary
    # upload names).
    for root, _, files in os.walk(tdir):
        assert all(not f.startswith(".airlock-upload-") for f in files), files


TOK_G = "tok-globex-0123456789abcdef"


def test_tenants_never_share_upstream_servers_silently():
    """Upstream servers are the sandbox's: without --tenants-dir every
    tenant runs in one sandbox, so acme's memory server would answer
    globex. The start is refused unless the operator says they may share
    (--shared-servers); with --tenants-dir each tenant has its own server
    processes."""
    from test_servers import memory, misbehave, servers_file
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_G} globex"])
    mem = servers_file({"mem": memory(os.path.join(d, "memory.jsonl"))})
    p = subprocess.run([AIRLOCK, "serve", "--listen", "127.0.0.1:0", "--tokens", tok,
                        "--servers", mem], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--shared-servers" in p.stderr and "--tenants-dir" in p.stderr, p.stderr
    assert "share" in p.stderr, p.stderr
    # Which process answers each tenant: "ok PID" of the misbehaving
    # helper's tool, a process of the server's own.
    os.mkdir(os.path.join(d, "ok"))
    ok = servers_file({"m": misbehave()}, os.path.join(d, "ok"))
    # Upstream server processes are each host's: asked of one host.
    pid = "from servers import m\nprint(m.ok())"
    with serve("--tokens", tok, "--servers", ok, "--tenants-dir", os.path.join(d, "t")) as s:
        one = s.pin()
        a, g = code(one, TOK_A, pid), code(one, TOK_G, pid)
        assert a.startswith("ok ") and g.startswith("ok ") and a != g, (a, g)
        assert code(one, TOK_A, pid) == a
    # Said, the sharing is allowed: one process answers both.
    with serve("--tokens", tok, "--servers", ok, "--shared-servers") as s:
        one = s.pin()
        a, g = code(one, TOK_A, pid), code(one, TOK_G, pid)
        assert a.startswith("ok ") and a == g, (a, g)


def test_the_description_tells_of_the_tenants_workspace():
    """With --tenants-dir every tenant's runs have its workspace as /input:
    execute_code's description must not say there is none."""
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme"])

    def check(desc):
        assert "There is no /input" not in desc, desc
        assert "/input holds your workspace" in desc and "workspace_write" in desc, desc
        assert "acme" not in desc and d not in desc, desc

    with serve("--tokens", tok, "--tenants-dir", os.path.join(d, "t")) as s:
        status, _, body = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                  "params": {"_meta": MODERN}}, auth(TOK_A))
        tools = {t["name"]: t for t in json.loads(body)["result"]["tools"]}
        check(tools["execute_code"]["description"])
        # And it is true: the file written is at /input.
        assert not write(s, TOK_A, [{"path": "a.txt", "text": "here"}])["isError"]
        assert code(s, TOK_A, "print(open('/input/a.txt').read())") == "here\n"
    out = subprocess.run([AIRLOCK, "mcp", "--tenants-dir", os.path.join(d, "m"), "--tenant", "solo"],
                         input=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                           "params": {"_meta": MODERN}}) + "\n",
                         capture_output=True, text=True, timeout=120)
    tools = {t["name"]: t for t in json.loads(out.stdout)["result"]["tools"]}
    check(tools["execute_code"]["description"])
    # Without --tenants-dir there is still no /input, and it says so.
    out = subprocess.run([AIRLOCK, "mcp"], input=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN}}) + "\n",
        capture_output=True, text=True, timeout=120)
    assert "There is no /input" in out.stdout, out.stdout


def staged(tmp):
    return sorted(n for n in os.listdir(tmp) if n.startswith("airlock-stage-"))


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_removed_tenants_staged_copies_go():
    """Each tenant's runs stage a copy of its workspace under $TMPDIR
    (airlock-stage-*). Removing 49 of 50 tenants by SIGHUP removes their
    copies (and closes the files they held), not only at the server's stop."""
    n = int(os.environ.get("TENANTS", "50"))
    d = tmpdir()
    tdir = os.path.join(d, "t")
    tmp = os.path.join(d, "tmp")
    os.mkdir(tmp)
    toks = [f"tok-stage-{i:04d}-{os.urandom(8).hex()}" for i in range(n)]
    tok = tokens_file(d, [f"{t} ts{i}" for i, t in enumerate(toks)])
    s = start_server("--tokens", tok, "--tenants-dir", tdir, tmp=tmp)
    try:
        base = len(staged(tmp))
        for i, t in enumerate(toks):
            assert not write(s, t, [{"path": "me.txt", "text": f"ts{i}" * 100}])["isError"]
            assert code(s, t, "print(open('/input/me.txt').read()[:4])").startswith(f"ts{i}")
        before, fds_before = len(staged(tmp)), [open_fds(pid) for pid in s.pids()]
        assert before - base >= n, (base, before)
        with open(tok, "w") as f:
            f.write(f"{toks[0]} ts0\n")
        s.signal(signal.SIGHUP)
        assert s.wait_said(f"{n - 1} tenants removed", 60)
        after = before
        for _ in range(2400):
            after = len(staged(tmp))
            if after - base <= 1:
                break
            time.sleep(0.025)
        fds_after = [open_fds(pid) for pid in s.pids()]
        print(f"  {n} tenants: {before} staging folders, {after} after removing {n - 1}; "
              f"{sum(fds_before)} open files before, {sum(fds_after)} after")
        assert after - base <= 1, (base, before, after)
        # Each host that staged copies closes the files they held.
        assert sum(fds_after) < sum(fds_before), (fds_before, fds_after)
        # The tenant kept still runs on its copy; the removed ones' folders
        # stay (the operator's data).
        assert code(s, toks[0], "print(open('/input/me.txt').read()[:3])") == "ts0\n"
        assert os.path.exists(os.path.join(tdir, "ts7", "me.txt"))
    finally:
        s.stop()
    assert s.exited_ok(), "".join(str(l) for l in s.lines)[-3000:]
    assert staged(tmp) == [], staged(tmp)


def test_metrics_are_the_operators():
    """/metrics tells every tenant's load (with two tenants, the totals less
    one's own are the other's): a tenant's token is refused there, the
    operator's --metrics-token reads it."""
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_B} beta"])
    op = os.path.join(d, "op")
    with open(op, "w") as f:
        f.write("  the-operators-token-42  \n")
    with serve("--tokens", tok, "--metrics-token", op) as s:
        code(s, TOK_A, "print(1)")
        for t in (TOK_A, TOK_B):
            status, _, body = s.get("/metrics", auth(t))
            assert status == 403 and b"--metrics-token" in body, (status, body)
            assert b"airlock_calls_total" not in body, body
        assert s.get("/metrics")[0] == 401
        assert s.get("/metrics", auth("the-operators-token-4"))[0] == 401
        m = s.metrics(auth("the-operators-token-42"))
        assert m['airlock_calls_total{status="ok"}'] >= 1, m
        # The operator's token is no tenant's: it cannot call tools.
        status, _, _ = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                               "params": {"_meta": MODERN}}, auth("the-operators-token-42"))
        assert status == 401
        # A reload that would give a tenant the operator's token keeps the
        # old tokens.
        with open(tok, "w") as f:
            f.write(f"{TOK_A} acme\nthe-operators-token-42 beta\n")
        mark = s.mark()
        s.signal(signal.SIGHUP)
        assert s.wait_said("keeping the old tokens")
        for lines in s.since(mark):
            assert any("token of --metrics-token" in l for l in lines), lines[-5:]
        for h in s.every():
            assert h.get("/metrics", auth("the-operators-token-42"))[0] == 200
    # With --tokens and no --metrics-token, no token reads /metrics.
    with open(tok, "w") as f:
        f.write(f"{TOK_A} acme\n")
    with serve("--tokens", tok, operator=False) as s:
        for h in s.every():
            assert h.get("/metrics", auth(TOK_A))[0] == 403
    # An operator's token that is also a tenant's is refused at start.
    with open(op, "w") as f:
        f.write(TOK_A + "\n")
    r = subprocess.run([AIRLOCK, "serve", "--listen", "127.0.0.1:0", "--tokens", tok,
                        "--metrics-token", op], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "also a tenant's" in r.stderr, r.stderr


def test_one_tenants_runs_do_not_evict_anothers_files():
    """The resource store holds 32 runs per tenant: a tenant making many
    runs drops its own oldest files, never another tenant's."""
    d = tmpdir()
    tok = tokens_file(d, [f"{TOK_A} acme", f"{TOK_G} globex"])

    def run_with_file(s, t, text_):
        r = tool(s, t, "execute_code", {"code": f"open('/output/f.txt','w').write({text_!r})"})
        assert not r.get("isError"), r
        return [c["resource"]["uri"] for c in r["content"] if c.get("type") == "resource"][0]

    def read(s, t, uri):
        _, _, body = s.post({"jsonrpc": "2.0", "id": 5, "method": "resources/read",
                             "params": {"uri": uri, "_meta": MODERN}}, auth(t))
        return json.loads(body)

    # The store of runs' files is each host's (design.md, serve): one host's.
    with serve("--tokens", tok) as ss:
        s = ss.pin()
        mine = run_with_file(s, TOK_G, "globex-file")
        first = run_with_file(s, TOK_A, "acme-0")
        for i in range(1, 33):
            run_with_file(s, TOK_A, f"acme-{i}")
        r = read(s, TOK_G, mine)
        assert r.get("result", {}).get("contents", [{}])[0].get("text") == "globex-file", r
        # Past its own 32 runs, acme's oldest went.
        r = read(s, TOK_A, first)
        assert r.get("error", {}).get("code") == -32002, r


def test_airlock_mcp_has_one_tenant():
    d = tmpdir()
    tdir = os.path.join(d, "t")
    p = subprocess.Popen([AIRLOCK, "mcp", "--tenants-dir", tdir, "--tenant", "solo"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(i, method, params):
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                  "params": dict(params, _meta=MODERN)}) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())["result"]

    names = [t["name"] for t in ask(1, "tools/list", {})["tools"]]
    assert names[-3:] == ["workspace_write", "workspace_remove", "workspace_list"], names
    r = ask(2, "tools/call", {"name": "workspace_write",
                              "arguments": {"files": [{"path": "x.txt", "text": "solo"}]}})
    assert not r["isError"], r
    r = ask(3, "tools/call", {"name": "execute_code",
                              "arguments": {"code": "print(open('/input/x.txt').read())"}})
    assert r["content"][0]["text"] == "solo\n", r
    p.stdin.close()
    assert p.wait(60) == 0
    assert tenant_folders(tdir) == ["solo"]
    # Without --tenants-dir the workspace tools are not there.
    out = subprocess.run([AIRLOCK, "mcp"], input=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "workspace_list", "arguments": {}, "_meta": MODERN}}) + "\n",
        capture_output=True, text=True, timeout=60)
    assert "Unknown tool: workspace_list" in out.stdout and "workspace_write" not in out.stdout, \
        out.stdout


if __name__ == "__main__":
    run()
