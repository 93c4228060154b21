"""Attacks on the sandbox through the built airlock binary: guest code that
tries to leak host files through /output, to hang or exhaust the host, to
escape, to abuse the gateways, and hostile workspaces. Each scenario has one
exact expected outcome and then checks that the next run still works."""
import base64
import json
import os
import socket
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from harness import AIRLOCK, airlock, run, run_json  # noqa: E402
from harness import Skip, mcp, mcp_result_json, next_run_works, tmpdir  # noqa: E402

MiB = 1 << 20


def host_marker():
    """A host file in /tmp with unique content; returns (path, content)."""
    content = f"HOST-SECRET-{uuid.uuid4().hex}"
    path = os.path.join(tmpdir(), "secret.txt")
    with open(path, "w") as f:
        f.write(content)
    return path, content


def all_data(r):
    """Every captured byte, stdout and stderr: where a leak would show."""
    parts = [r.get("stdout", ""), r.get("stderr", "")]
    for f in r.get("files", []):
        parts.append(base64.b64decode(f.get("data_base64", "")).decode("latin-1"))
    return "\n".join(parts)


def refused(r):
    return {x["path"]: x["reason"] for x in r.get("refused", [])}


def no_leak(r, *secrets):
    text = all_data(r)
    for s in secrets:
        assert s not in text, f"host data {s[:40]!r} leaked: {r}"
    with open("/etc/passwd") as f:
        host_root = next((ln for ln in f.read().splitlines() if ln.startswith("root:")), None)
    if host_root and host_root != "root:x:0:0:sandbox:/tmp:/bin/sh":
        for f in r.get("files", []):
            data = base64.b64decode(f.get("data_base64", "")).decode("latin-1")
            assert host_root not in data, f"host /etc/passwd leaked in {f['path']}"


# ---- leaking host files through /output -----------------------------------

def test_output_symlink_to_host_file():
    path, secret = host_marker()
    rc, r = run_json(f"import os\nos.symlink({path!r}, '/output/secret')\n"
                     "os.symlink('/etc/passwd', '/output/passwd')")
    assert rc == 0, r
    assert r["files"] == [], r["files"]
    assert refused(r) == {"/output/secret": "symlink", "/output/passwd": "symlink"}, r["refused"]
    no_leak(r, secret)
    next_run_works()


def test_output_symlinked_directory():
    path, secret = host_marker()
    rc, r = run_json(f"import os\nos.symlink({os.path.dirname(path)!r}, '/output/dir')\n"
                     "os.symlink('/etc', '/output/etc')\n"
                     "os.mkdir('/output/real')\nos.symlink('/', '/output/real/root')")
    assert rc == 0, r
    assert r["files"] == [], r["files"]
    assert refused(r) == {"/output/dir": "symlink", "/output/etc": "symlink",
                          "/output/real/root": "symlink"}, r["refused"]
    no_leak(r, secret)
    next_run_works()


def test_output_hard_link_to_other_filesystem_fails():
    path, secret = host_marker()
    code = f"""
import errno, os
for src in ({path!r}, '/etc/passwd', '/usr/bin/env', '/proc/self/environ'):
    try:
        os.link(src, '/output/h')
        print('linked', src)
    except OSError as e:
        print(src, errno.errorcode[e.errno])
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert lines[0] == f"{path} ENOENT", lines  # the host file is not even visible
    assert all(not ln.startswith("linked") for ln in lines), lines
    assert r["files"] == [], r
    no_leak(r, secret)
    next_run_works()


def test_output_magic_links_refused():
    rc, r = run_json("import os\nos.symlink('/proc/self/root', '/output/root')\n"
                     "os.symlink('/proc/1/cwd', '/output/cwd')\n"
                     "os.symlink('/proc/self/fd/0', '/output/fd0')")
    assert rc == 0, r
    assert r["files"] == [], r
    assert refused(r) == {"/output/root": "symlink", "/output/cwd": "symlink",
                          "/output/fd0": "symlink"}, r["refused"]
    next_run_works()


def test_output_swapped_for_links_in_background():
    """A child keeps swapping a file and its parent directory for links to a
    host file while the run ends; whatever the timing, no host data."""
    path, secret = host_marker()
    hostdir = os.path.dirname(path)
    for delay in (0, 0.02, 0.2):
        code = f"""
import os, time
os.makedirs('/output/d')
if os.fork() == 0:
    while True:
        try:
            # The directory becomes a link to the host folder and back ...
            os.rename('/output/d', '/output/d.old')
            os.symlink({hostdir!r}, '/output/d')
            os.rename('/output/d.old', '/output/d2')
            os.unlink('/output/d')
            os.rename('/output/d2', '/output/d')
            # ... and the file inside a regular file, then a link.
            with open('/output/d/.t', 'w') as f:
                f.write('safe')
            os.rename('/output/d/.t', '/output/d/f')
            os.symlink({path!r}, '/output/d/.l')
            os.rename('/output/d/.l', '/output/d/f')
        except OSError:
            pass
time.sleep({delay})
"""
        rc, r = run_json(code, "--timeout", "10")
        assert r["status"] == "ok", r
        no_leak(r, secret)
        # A file the child had created but not yet written when it was
        # killed comes back empty; anything else must be its own data.
        for f in r["files"]:
            assert base64.b64decode(f["data_base64"]) in (b"", b"safe"), f
        for p, why in refused(r).items():
            assert why in ("symlink", "changed while reading", "not a regular file"), (p, why)
    next_run_works()


# ---- things that could hang or exhaust the host -------------------------------

def test_output_fifo_socket_device_refused_without_hanging():
    code = """
import errno, os, socket
os.mkfifo('/output/fifo')
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind('/output/sock')
s.listen(1)
try:
    os.mknod('/output/null', 0o600 | 0o20000, os.makedev(1, 3))
    print('mknod worked')
except OSError as e:
    print('mknod', errno.errorcode[e.errno])
with open('/output/ok.txt', 'w') as f:
    f.write('fine')
"""
    rc, r = run_json(code, timeout=60)
    assert rc == 0, r
    assert r["stdout"] == "mknod EPERM\n", r["stdout"]
    assert [f["path"] for f in r["files"]] == ["/output/ok.txt"], r["files"]
    assert refused(r) == {"/output/fifo": "not a regular file",
                          "/output/sock": "not a regular file"}, r["refused"]
    next_run_works()


def test_output_very_deep_tree():
    code = """
import os
os.chdir('/output')
n = 0
try:
    for i in range(10000):
        os.mkdir('d')
        os.chdir('d')
        n += 1
except OSError as e:
    print('stopped', e.errno)
try:
    open('leaf.txt', 'w').write('x')
except OSError as e:
    print('no leaf', e.errno)
print(n)
"""
    rc, r = run_json(code, timeout=120)
    assert r["status"] == "ok", r
    depth = int(r["stdout"].split()[-1])
    assert depth > 64, r["stdout"]
    assert r["files"] == [], [f["path"] for f in r["files"]]
    reasons = set(refused(r).values())
    assert reasons == {"too deep"}, r["refused"]
    next_run_works()


def test_output_too_many_files():
    code = """
import os
n = 0
try:
    for i in range(100000):
        open(f'/output/f{i:06d}', 'w').close()
        n += 1
except OSError as e:
    print('stopped', e.errno)
print(n)
"""
    rc, r = run_json(code, timeout=120)
    assert r["status"] == "ok", r
    made = int(r["stdout"].split()[-1])
    assert made > 1000, r["stdout"]
    assert len(r["files"]) <= 1000, len(r["files"])
    assert "too many files" in set(refused(r).values()), r["refused"][:3]
    # The refusal list is capped too: 100 entries plus one summary.
    assert len(r["refused"]) <= 101, len(r["refused"])
    assert len(json.dumps(r)) < 4 * MiB
    next_run_works()


def test_output_sparse_huge_file():
    """100 GB is over the file size limit (EFBIG); 60 MiB of holes fits it
    but is over the per-file cap, so it is refused without being read."""
    code = """
import errno
try:
    with open('/output/huge', 'wb') as f:
        f.truncate(100 << 30)
    print('truncated')
except OSError as e:
    print('failed', errno.errorcode[e.errno])
with open('/output/sparse', 'wb') as f:
    f.truncate(60 << 20)
"""
    rc, r = run_json(code, timeout=60)
    assert rc == 0, r
    assert r["stdout"] == "failed EFBIG\n", r["stdout"]
    assert [(f["path"], f["size"]) for f in r["files"]] == [("/output/huge", 0)], r["files"]
    assert refused(r) == {"/output/sparse": "too large"}, r["refused"]
    next_run_works()


def test_output_file_growing_forever():
    code = """
import threading, time
def grow():
    with open('/output/grow', 'wb') as f:
        while True:
            f.write(b'x' * 65536)
threading.Thread(target=grow, daemon=True).start()
while True:
    time.sleep(1)
"""
    rc, r = run_json(code, "--timeout", "2", timeout=60)
    assert r["status"] == "timeout", r
    for f in r["files"]:
        assert f["size"] <= 16 * MiB, (f["path"], f["size"])
    assert refused(r).get("/output/grow") == "too large", r["refused"]
    next_run_works()


def test_stdout_and_stderr_floods_are_bounded():
    code = """
import sys
for i in range(64):
    sys.stdout.write('o' * 262144)
    sys.stderr.write('e' * 262144)
"""
    p = airlock("run", "--json", "-c", code, timeout=120)
    # stdout and stderr appear twice each (the fields and "contents").
    assert len(p.stdout) < 5 * MiB, len(p.stdout)
    r = json.loads(p.stdout)
    assert r["stdout_truncated"] is True and r["stderr_truncated"] is True, r.keys()
    assert 0 < len(r["stdout"]) <= MiB and 0 < len(r["stderr"]) <= MiB
    assert set(r["stdout"]) == {"o"} and set(r["stderr"]) == {"e"}
    next_run_works()


def test_fork_bomb():
    code = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    rc, r = run_json(code, "--pids", "32", "--timeout", "3", timeout=60)
    assert r["status"] in ("timeout", "killed", "error"), r
    assert r["status"] != "ok"
    next_run_works()


def test_thread_bomb():
    code = """
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        n += 1
except RuntimeError:
    pass
print(n)
"""
    rc, r = run_json(code, "--pids", "32", "--timeout", "10", timeout=60)
    assert r["status"] == "ok", r
    n = int(r["stdout"])
    # With a per-run pids cgroup the main thread and 31 more make 32; where
    # the host cannot create one the fallback is RLIMIT_NPROC = pids + 4.
    assert 0 < n <= 32 + 4 - 1, n
    next_run_works()


def test_memory_bomb():
    rc, r = run_json("x = []\nwhile True:\n    x.append(bytearray(1 << 20))", "--memory", "64",
                     timeout=60)
    assert r["status"] == "memory", r
    next_run_works()


def test_endless_loop_times_out():
    rc, r = run_json("while True:\n    pass", "--timeout", "1", timeout=60)
    assert r["status"] == "timeout", r
    next_run_works()


def host_procs_with(marker):
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    n += 1
        except OSError:
            pass
    return n


def test_daemonised_children_do_not_outlive_the_run():
    marker = f"airlock-daemon-{uuid.uuid4().hex}"
    before = host_procs_with(marker)
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            # The marker in a host-visible argv: sh stays (a command follows).
            os.execv('/bin/sh', ['sh', '-c', 'sleep 300; :', {marker!r}])
        except OSError:
            time.sleep(300)
    os._exit(0)
if os.fork() == 0:
    time.sleep(300)
print('parent done')
"""
    rc, r = run_json(code, timeout=60)
    assert rc == 0 and r["stdout"] == "parent done\n", r
    assert host_procs_with(marker) == before == 0
    rc, r = run_json("import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))")
    assert r["stdout"] == "['1']\n", r


# ---- escapes ------------------------------------------------------------------

def test_privileged_syscalls_fail():
    code = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
print('ptrace', libc.ptrace(0, 0, 0, 0), errno.errorcode[ctypes.get_errno()])
for name, nr in [('mount', 165), ('unshare', 272), ('setns', 308), ('bpf', 321),
                 ('keyctl', 250), ('io_uring_setup', 425), ('init_module', 175),
                 ('kexec_load', 246), ('open_by_handle_at', 304), ('perf_event_open', 298),
                 ('userfaultfd', 323), ('fsopen', 430), ('move_mount', 429)]:
    ctypes.set_errno(0)
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, r, errno.errorcode.get(ctypes.get_errno()))
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert len(lines) == 14, lines
    for ln in lines:
        name, res, err = ln.split()
        assert res == "-1" and err in ("EPERM", "ENOSYS"), ln
    next_run_works()


def test_mount_api_queries_and_clones_are_refused():
    """statmount and listmount (which describe every mount of the
    namespace) and open_tree_attr (a clone of a mount, as open_tree) are
    refused with EPERM like the rest of the mount API, by number: Debian
    12's libseccomp does not know their names. Without the filter the
    NULL arguments below are EFAULT."""
    import platform
    if platform.machine() not in ("x86_64", "aarch64"):
        raise Skip("the numbers below are x86_64's and aarch64's")
    code = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in [('statmount', 457), ('listmount', 458), ('open_tree_attr', 467)]:
    ctypes.set_errno(0)
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, r, errno.errorcode.get(ctypes.get_errno()))
"""
    rc, r = run_json(code)
    assert rc == 0, r
    assert r["stdout"] == ("statmount -1 EPERM\nlistmount -1 EPERM\n"
                           "open_tree_attr -1 EPERM\n"), r["stdout"]


def test_network_sockets_refused():
    code = """
import errno, socket
for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM),
                 (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW),
                 (socket.AF_NETLINK, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ)
        print('opened', fam)
    except OSError as e:
        print(errno.errorcode[e.errno])
"""
    rc, r = run_json(code)
    assert rc == 0, r
    assert r["stdout"].split() == ["EAFNOSUPPORT"] * 5, r["stdout"]
    next_run_works()


def test_host_files_invisible_and_input_read_only():
    path, secret = host_marker()
    code = f"""
import errno, os
def probe(p):
    try:
        if os.path.isdir(p):
            return 'dir ' + ','.join(sorted(os.listdir(p)))
        with open(p) as f:
            return 'read ' + f.read(100)
    except OSError as e:
        return errno.errorcode[e.errno]
for p in ('/etc/shadow', '/root', '/home', '/work', {path!r}, {os.path.dirname(path)!r}):
    print(p, probe(p))
print('/tmp', sorted(os.listdir('/tmp')))
try:
    open('/input/x', 'w')
    print('input writable')
except OSError as e:
    print('input', errno.errorcode[e.errno])
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert lines[:6] == ["/etc/shadow ENOENT", "/root ENOENT", "/home ENOENT", "/work ENOENT",
                         f"{path} ENOENT", f"{os.path.dirname(path)} ENOENT"], lines
    assert lines[6] == "/tmp []", lines
    assert lines[7] == "input EROFS", lines
    no_leak(r, secret)
    next_run_works()


def test_no_host_path_visible_through_proc():
    """The guest's /proc names no host path: not the program's (exe, maps),
    not the staging folder (mountinfo), not the caller's environment or
    command line, and the program's bytes carry none either. A file that
    cannot be read shows nothing."""
    ws = tmpdir()
    with open(os.path.join(ws, "a.txt"), "w") as f:
        f.write("a")
    binary = os.path.realpath(AIRLOCK)
    here = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    forbidden = sorted({binary, os.path.dirname(binary), here, os.path.realpath(ws), ws,
                        "/tmp/airlock-stage", "airlock-stage", "/root", "/work", "/home"})
    code = f"""
import os
bad = {forbidden!r}
texts = {{'exe link': os.readlink('/proc/self/exe').encode()}}
for p in ('/proc/self/exe', '/proc/self/maps', '/proc/self/mountinfo', '/proc/self/environ',
          '/proc/1/cmdline', '/proc/1/environ', '/proc/self/cmdline', '/proc/1/maps',
          '/proc/1/mountinfo', '/proc/self/mounts'):
    try:
        texts[p] = open(p, 'rb').read()
    except OSError as e:
        texts[p] = type(e).__name__.encode()
for k, t in texts.items():
    for b in bad:
        # The program's bytes hold the name pattern of staging folders, but
        # no folder of the host.
        if k == '/proc/self/exe' and 'airlock-stage' in b:
            continue
        if b.encode() in t:
            i = t.index(b.encode())
            print('VISIBLE', repr(b), 'in', k, repr(t[max(0, i - 80):i + 80]))
print(texts['exe link'].decode())
print([ln for ln in texts['/proc/self/mountinfo'].decode().splitlines() if '/input' in ln])
"""
    rc, r = run_json(code, "-w", ws)
    assert rc == 0, r
    assert "VISIBLE" not in r["stdout"], r["stdout"]
    assert "/input" in r["stdout"], r["stdout"]
    next_run_works()


def test_signalling_host_processes():
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = """
import os, signal
os.kill(1, 0)
print(sorted(p for p in os.listdir('/proc') if p.isdigit()))
for pid in (victim, 2, 100, 300000):
    try:
        os.kill(pid, signal.SIGKILL)
        print(pid, 'killed')
    except OSError as e:
        print(pid, e.strerror)
if os.fork() == 0:
    os.setsid()
    signal.pause()
os.kill(-1, signal.SIGKILL)
print('still here', os.waitpid(-1, 0)[1] == signal.SIGKILL)
""".replace("victim", str(victim.pid))
        rc, r = run_json(code)
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        assert lines[0] == "['1']", lines
        assert all(ln.endswith("No such process") for ln in lines[1:5]), lines
        assert lines[5] == "still here True", lines
        assert victim.poll() is None, "a host process was killed"
    finally:
        victim.kill()
        victim.wait()
    next_run_works()


def test_guest_cannot_read_host_stdin_or_fds():
    """airlock's own stdin (the MCP request stream, in mcp mode) is not the
    guest's: what an MCP client sends the server never reaches the code.
    `airlock run -c` gives the code the command's standard input, as
    `python3 -c` does (design.md, the command line), and nothing more. In
    both, the guest holds only stdio, the channel, and the files of its
    own /proc that it writes (on a tmpfs of its own, mounted below its
    procfs on /proc)."""
    code = """
import os, sys
print(repr(sys.stdin.read()))
own = ('/proc/meminfo', '/proc/stat', '/proc/uptime')
def link(fd):
    try:
        return os.readlink(f'/proc/self/fd/{fd}')
    except FileNotFoundError:
        return None  # the listing's own fd, closed once listed
print(sorted(int(fd) for fd in os.listdir('/proc/self/fd') if link(fd) not in own + (None,)))
"""
    p = airlock("run", "--json", "-c", code, input="GIVEN-TO-THE-CODE\n", timeout=60)
    r = json.loads(p.stdout)
    assert p.returncode == 0, r
    lines = r["stdout"].splitlines()
    assert lines[0] == repr("GIVEN-TO-THE-CODE\n"), lines
    assert lines[1] == "[0, 1, 2, 3]", lines
    with mcp() as m:
        # The request stream is the server's stdin; a request written
        # after the call must not be what the code reads.
        i = m.start_call(code)
        m.send({"jsonrpc": "2.0", "method": "notifications/HOST-STDIN-SECRET"})
        out = mcp_result_json(m.result(i))
        lines = out["stdout"].splitlines()
        assert lines[0] == "''", lines
        assert lines[1] == "[0, 1, 2, 3]", lines
    next_run_works()


def test_rlimits_cannot_be_raised():
    code = """
import resource
for name in ('RLIMIT_NOFILE', 'RLIMIT_NPROC', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_CPU'):
    res = getattr(resource, name)
    soft, hard = resource.getrlimit(res)
    if hard == resource.RLIM_INFINITY:
        print(name, 'unlimited')
        continue
    try:
        resource.setrlimit(res, (hard + 1, hard + 1))
        print(name, 'raised')
    except (ValueError, OSError):
        print(name, 'refused')
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert len(lines) == 5 and not any(ln.endswith("raised") for ln in lines), lines
    assert "RLIMIT_FSIZE refused" in lines and "RLIMIT_NPROC refused" in lines, lines
    next_run_works()


def test_setuid_binaries_do_not_help():
    code = """
import os, subprocess
for argv in (['su', '-c', 'id'], ['mount', '-t', 'tmpfs', 'x', '/tmp'], ['sudo', 'id']):
    try:
        p = subprocess.run(argv, capture_output=True, timeout=10)
        print(argv[0], 'rc', p.returncode)
    except OSError as e:
        print(argv[0], 'oserror')
print(os.getresuid())
print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    for ln in lines[:3]:
        assert ln.endswith("oserror") or (ln.split()[-2] == "rc" and ln.split()[-1] != "0"), ln
    assert int(lines[4], 16) == 0, f"effective capabilities: {lines[4]}"
    next_run_works()


# ---- gateways -----------------------------------------------------------------

def test_http_without_allow_list_is_permission_error():
    code = """
for m, u in [('GET', 'http://127.0.0.1:9/secret'), ('POST', 'https://example.com/x?q=1')]:
    try:
        http_request(m, u)
        print('sent')
    except PermissionError as e:
        print(str(e))
"""
    rc, r = run_json(code)
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert len(lines) == 2, lines
    assert "GET" in lines[0] and "http://127.0.0.1:9/secret" in lines[0], lines
    assert "POST" in lines[1] and "https://example.com/x" in lines[1], lines
    next_run_works()


def test_http_bad_headers_are_errors_not_host_crashes():
    """Headers the gateway refuses (control characters, reserved names, bad
    names) must raise ValueError in the guest, not crash the host."""
    code = """
for h in ({'X': 'a\\nb'}, {'Host': 'x'}, {'bad name': 'x'}, {'X': 'a\\x00b'}):
    try:
        http_get('http://127.0.0.1:9/', headers=h)
        print('sent')
    except Exception as e:
        print(type(e).__name__)
"""
    rc, r = run_json(code, "--allow-domain", "127.0.0.1:9")
    assert rc == 0, r
    assert r["stdout"] == "ValueError\n" * 4, r["stdout"]
    next_run_works()


def httpd():
    """Starts tests/helpers/httpd.py on loopback; returns (process, port)."""
    here = os.path.dirname(os.path.abspath(__file__))
    srv = subprocess.Popen([sys.executable, os.path.join(here, "..", "helpers", "httpd.py")],
                           stdout=subprocess.PIPE, text=True)
    return srv, int(srv.stdout.readline())


def test_http_a_header_past_the_cap_is_a_value_error_naming_it():
    """A response header longer than the one-header cap (libcurl's, which
    it reports as out of memory) is a ValueError naming the cap, like the
    other caps of a response: a MemoryError would read as the run's own
    memory."""
    srv, port = httpd()
    try:
        code = f"""
for n in (1000, 150000, 250000):
    try:
        r = http_get('http://127.0.0.1:{port}/bigheader?n=%d' % n)
        print('ok', len(r['headers']['x-big']))
    except Exception as e:
        print(type(e).__name__, e)
"""
        rc, r = run_json(code, "--allow-domain", f"127.0.0.1:{port}")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        assert lines[0] == "ok 1000", lines
        for line in lines[1:]:
            assert line.startswith("ValueError") and "102400 bytes" in line, lines
    finally:
        srv.kill()
        srv.wait()
    next_run_works()


SMUGGLED = ["/echo/..;/admin", "/echo/..;x=1/admin", "/echo/.;/../admin", "/echo/%2e%2e/admin",
            "/echo/.%2E/admin", "/echo/..%2fadmin", "/echo%2f..%2fadmin", "/echo/..%5cadmin",
            "/echo/..\\admin", "/echo/..%3b/admin", "/echo/%252e%252e/admin",
            "/echo/..%252fadmin", "/echo/..%255cadmin", "/echo/%25252e%25252e/admin"]


def test_http_path_smuggling_refused():
    """With only /echo allowed, no spelling of a path that a lenient server
    resolves to /admin gets out: each is a PermissionError naming the URL and
    why. Escapes that move nothing (%20, %25, ;params on a name) still pass."""
    srv, port = httpd()
    try:
        base = f"http://127.0.0.1:{port}"
        code = ("import json\nfor p in json.loads(%r):\n"
                "    try:\n        r = http_get(%r + p)\n        print('SENT', r['status'], r['body'])\n"
                "    except PermissionError as e:\n        print('denied', str(e))\n"
                "r = http_get(%r + '/echo/a%%20b;v=1/100%%25?q=..%%2f')\n"
                "print(r['status'], json.loads(r['body'])['path'])\n"
                % (json.dumps(SMUGGLED), base, base))
        rc, r = run_json(code, "-a", f"{base}/echo=GET")
    finally:
        srv.terminate()
        srv.wait()
    assert rc == 0, r
    lines = r["stdout"].splitlines()
    assert "ADMIN AREA" not in r["stdout"], lines
    assert len(lines) == len(SMUGGLED) + 1, lines
    for p, line in zip(SMUGGLED, lines):
        assert line.startswith(f"denied GET URL '{base + p}'"), (p, line)
        assert "which" in line, (p, line)  # the reason, not only the URL
    assert lines[-1] == "200 /echo/a%20b;v=1/100%25?q=..%2f", lines[-1]
    next_run_works()


def test_host_error_kinds_become_the_promised_exceptions():
    """The host names the exception for each refusal (gateway.h's table); the
    guest raises exactly that built-in, MemoryError for ENOMEM included, and
    RuntimeError for a name that is no exception class."""
    code = """
import sys
rt = sys.modules['_airlock_runtime']
for k in ('MemoryError', 'PermissionError', 'ConnectionRefusedError', 'print', 'nope', None):
    print(rt._host_exception(k).__name__)
try:
    http_get('http://127.0.0.1:1/x')
except ConnectionRefusedError:
    print('refused')
"""
    rc, r = run_json(code, "-a", "127.0.0.1:1")
    assert rc == 0, r
    assert r["stdout"] == ("MemoryError\nPermissionError\nConnectionRefusedError\n"
                           "RuntimeError\nRuntimeError\nRuntimeError\nrefused\n"), r
    next_run_works()


def test_tool_calls_without_tools():
    code = """
try:
    call_tool('no_such_tool', a=1)
except Exception as e:
    print(type(e).__name__, 'no_such_tool' in str(e))
try:
    call_tool('no_such_tool', 1)
except TypeError as e:
    print('TypeError')
"""
    rc, r = run_json(code)
    assert rc == 0, r
    assert r["stdout"] == "ValueError True\nTypeError\n", r["stdout"]
    next_run_works()


def test_garbage_on_the_channel():
    code = """
import os
for fd in (3, 4):
    try:
        os.write(fd, b'\\xff\\xff\\xff\\xff' + os.urandom(4096))
        os.write(fd, b'\\x00\\x00\\x00\\x05[1,2]' + b'\\x00\\x00\\x00\\x03abc')
    except OSError:
        pass
try:
    call_tool('x', a=1)
except Exception as e:
    print(type(e).__name__)
time.sleep(0.2)
"""
    rc, r = run_json(code, "--timeout", "10", timeout=60)
    # The host stops a guest that breaks the protocol.
    assert r["success"] is False and r["status"] == "error" and "protocol" in r["contents"][-1]["message"], r
    next_run_works()


def test_malformed_requests_through_the_native_channel():
    """Requests that skip the runtime's checks: deep nesting, bad UTF-8, not
    an object, too large. The host answers or stops the run; it never dies."""
    for payload in ("b'[' * 200000 + b']' * 200000",
                    "b'{\"op\":\"tool\",\"name\":\"x\",\"args\":' + b'[' * 100000 + b']' * 100000 + b'}'",
                    "b'\\xff\\xfe'", "b'[1, 2]'", "b'{\"op\": 7}'", "b'x' * (30 << 20)"):
        rc, r = run_json(f"import _airlock\nprint(_airlock.call({payload})[:100])", timeout=60)
        assert r["status"] in ("ok", "error", "killed"), (payload, r)
        next_run_works()


def test_state_does_not_survive_into_the_next_run():
    code = """
import builtins, os, sys
print(sorted(os.listdir('/tmp')), sorted(os.listdir('/output')), hasattr(builtins, 'planted'))
open('/tmp/planted', 'w').write('x')
os.mkdir('/output/planted')
builtins.planted = True
sys.modules['os'].planted = True
"""
    for _ in range(3):
        rc, r = run_json(code)
        assert rc == 0 and r["stdout"] == "[] [] False\n", r


# ---- hostile workspaces -------------------------------------------------------

def test_workspace_with_symlink_refused():
    ws = tmpdir()
    with open(os.path.join(ws, "ok.txt"), "w") as f:
        f.write("ok")
    os.mkdir(os.path.join(ws, "sub"))
    os.symlink("/etc/passwd", os.path.join(ws, "sub", "link"))
    p = airlock("run", "-w", ws, "-c", "print(1)")
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and os.path.join(ws, "sub", "link") in lines[0], p.stderr
    assert p.stdout == "", p.stdout
    next_run_works()


def test_workspace_with_fifo_skipped():
    ws = tmpdir()
    with open(os.path.join(ws, "ok.txt"), "w") as f:
        f.write("ok")
    os.mkfifo(os.path.join(ws, "fifo"))
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(ws, "sock"))
    try:
        rc, r = run_json("import os\nprint(sorted(os.listdir('/input')))", "-w", ws, timeout=60)
    finally:
        s.close()
    assert rc == 0 and r["stdout"] == "['ok.txt']\n", r
    next_run_works()


def test_workspace_with_non_utf8_names():
    ws = tmpdir()
    with open(os.path.join(os.fsencode(ws), b"caf\xe9.txt"), "w") as f:
        f.write("latin-1 name")
    with open(os.path.join(ws, "ok.txt"), "w") as f:
        f.write("ok")
    p = airlock("run", "--json", "-w", ws, "-c",
                "import os\nprint(sorted(os.listdir(b'/input')))", timeout=60)
    if p.returncode == 2:
        # Refused up front: one line naming the file.
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "caf" in lines[0], p.stderr
    else:
        r = json.loads(p.stdout)
        assert p.returncode == 0 and r["status"] == "ok", r
        assert r["stdout"] == "[b'caf\\xe9.txt', b'ok.txt']\n", r["stdout"]
    next_run_works()


def test_output_non_utf8_name_refused():
    rc, r = run_json("open(b'/output/caf\\xe9.txt', 'w').write('x')\n"
                     "open('/output/ok.txt', 'w').write('y')")
    assert rc == 0, r
    assert [f["path"] for f in r["files"]] == ["/output/ok.txt"], r["files"]
    assert refused(r) == {"/output/caf\ufffd.txt": "name not UTF-8"}, r["refused"]
    next_run_works()


# ---- output the guest writes ------------------------------------------------

NUL_CODE = ("import os\nos.write(1, b'a\\x00b\\r\\n')\nos.write(2, b'c\\x00d')\n"
            "raise SystemExit(3)")


def test_nul_bytes_in_output_are_kept():
    """A NUL the guest writes is a byte like any other: the JSON result, the
    MCP result and plain output keep everything after it."""
    rc, r = run_json(NUL_CODE)
    assert rc == 1, r
    assert r["stdout"] == "a\x00b\r\n" and r["stderr"] == "c\x00d", r
    assert not r["stdout_truncated"] and not r["stderr_truncated"], r
    assert r["contents"][0] == {"type": "text", "text": "a\x00b\n"}, r["contents"]
    assert r["contents"][-1]["details"] == "c\x00d", r["contents"]
    p = subprocess.run([AIRLOCK, "run", "-c", NUL_CODE], capture_output=True, timeout=120)
    assert p.returncode == 1 and p.stdout == b"a\x00b\r\n", p
    assert p.stderr.startswith(b"c\x00d"), p.stderr
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "execute_code", "arguments": {"code": NUL_CODE}}}]
    p = airlock("mcp", input="".join(json.dumps(m) + "\n" for m in msgs), timeout=120)
    assert p.returncode == 0, p.stderr
    res = [json.loads(ln) for ln in p.stdout.splitlines()][-1]["result"]
    texts = [c["text"] for c in res["content"] if c["type"] == "text"]
    assert texts == ["a\x00b\n", "c\x00d\nError: the code exited with status 3"], texts
    assert "structuredContent" not in res, res
    next_run_works()


# ---- collisions in /input ---------------------------------------------------

def test_mount_collisions_are_errors():
    """Two sources at one /input path never hide one another: exit 2, one
    line naming the /input path, nothing runs."""
    d = tmpdir()
    for rel, text in (("A/x.txt", "a"), ("B/y.txt", "b"), ("ws/data/x.txt", "w"),
                      ("D/z", "d")):
        os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)
    a, b, ws, dd = (os.path.join(d, n) for n in ("A/x.txt", "B/y.txt", "ws", "D"))
    cases = [
        (["-m", f"{a}:data/x.txt", "-m", f"{b}:data/x.txt"], "/input/data/x.txt"),
        (["-m", f"{a}:data", "-m", f"{b}:data/y.txt"], "/input/data"),
        (["-m", f"{b}:data/y.txt", "-m", f"{a}:data"], "/input/data,"),
        (["-w", ws, "-m", f"{b}:data/x.txt"], "/input/data/x.txt"),
        (["-w", ws, "-m", f"{dd}:data"], "/input/data"),
        (["-m", f"{dd}:data", "-m", f"{a}:data/z"], "/input/data/z"),
    ]
    for args, where in cases:
        p = airlock("run", *args, "-c", "open('/output/ran', 'w')\nprint('ran')", timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and p.stdout == "", (args, p)
        assert len(lines) == 1 and "collision" in lines[0] and where in lines[0], (args, lines)
    # The same mount given twice is one mount, and a file into a mounted
    # directory is no collision.
    rc, r = run_json("import os\nprint(open('/input/data/x.txt').read(), "
                     "sorted(os.listdir('/input/d')))",
                     "-m", f"{a}:data/x.txt", "-m", f"{a}:data/x.txt", "-m", f"{dd}:d",
                     "-m", f"{b}:d/y.txt")
    assert rc == 0 and r["stdout"] == "a ['y.txt', 'z']\n", r
    next_run_works()


# ---- several tools files ------------------------------------------------------

def test_tools_files_add_up_and_collide_by_name():
    """Each --tools file adds its tools; a name that two files declare stops
    the run (exit 2) with one line naming the tool and both files."""
    d = tmpdir()
    def tools_file(sub, names):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        path = os.path.join(d, sub, "tools.json")
        with open(path, "w") as f:
            json.dump({"tools": [{"name": n, "command": [sys.executable, "-c",
                       f"import sys; sys.stdin.read(); print('\"{n}\"')"]} for n in names]}, f)
        return path
    a, b, c = tools_file("a", ["one"]), tools_file("b", ["two"]), tools_file("c", ["one"])
    rc, r = run_json("print(call_tool('one'), call_tool('two'))", "-t", a, "-t", b)
    assert rc == 0 and r["stdout"] == "one two\n", r
    p = airlock("run", "-t", a, "-t", c, "-c", "print('ran')", timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and p.stdout == "", p
    assert len(lines) == 1 and "'one'" in lines[0] and a in lines[0] and c in lines[0], lines
    next_run_works()


if __name__ == "__main__":
    run()
