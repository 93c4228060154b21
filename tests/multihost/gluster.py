"""A GlusterFS replicated volume of a test's own, FUSE-mounted N times: each
mount stands in for one host's mount of a shared tenants folder.

glusterd runs in a network namespace of its own (a private port space, so
that its port 24007 never meets another test's or the machine's), with its
state, sockets and logs in the test's temporary folder; the bricks are
folders there too (`force`: they sit on the root file system). The client
processes join that namespace with nsenter (not `ip netns exec`, which
would mount the FUSE file system in a private mount namespace), so the
mounts are seen by the whole machine. Everything is stopped and removed by
stop(), which is safe to call on a half-started volume, and by the context
manager even when the test fails.

kill_brick() and start_brick() lose one brick (its process killed with
SIGKILL, as a host that dies takes its brick with it) and bring it back
healed (test_brick.py); every step waits on an event, bounded.

The volume options and the client options are those docs/serving.md
("Shared storage") names: every client cache off, and the kernel's entry,
attribute and negative timeouts 0, so that one mount's change is seen by
the next call on another.
"""
import glob
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "blackbox"))
from harness import Mcp, Skip, environ, run  # noqa: E402

FUSE_SUPER_MAGIC = 0x65735546
GLUSTERD = shutil.which("glusterd") or "/usr/sbin/glusterd"
GLUSTER = shutil.which("gluster") or "/usr/sbin/gluster"
GLUSTERFS = shutil.which("glusterfs") or "/usr/sbin/glusterfs"
# The heal reporter `gluster volume heal VOL info` runs (a private program).
GLFSHEAL = next(iter(sorted(glob.glob("/usr/lib/*/glusterfs/glfsheal") +
                            glob.glob("/usr/libexec/glusterfs/glfsheal"))), "glfsheal")

# Volume options: the client-side translators that cache metadata or data,
# or delay writes, all off (docs/serving.md, "Shared storage").
VOLUME_OPTIONS = {
    "performance.stat-prefetch": "off",
    "performance.quick-read": "off",
    "performance.io-cache": "off",
    "performance.read-ahead": "off",
    "performance.readdir-ahead": "off",
    "performance.write-behind": "off",
    "performance.flush-behind": "off",
    "performance.open-behind": "off",
    "performance.nl-cache": "off",
}
# The FUSE client's options: the kernel asks again at every lookup.
CLIENT_OPTIONS = ["--attribute-timeout=0", "--entry-timeout=0", "--negative-timeout=0",
                  # Its help says false by default; without it, a file another mount
                  # rewrote still reads as it was here (the kernel keeps its pages).
                  "--fopen-keep-cache=off"]


def missing():
    """Why a volume cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (glusterd, FUSE mounts, network namespaces)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (modprobe fuse)"
    for p in (GLUSTERD, GLUSTER, GLUSTERFS):
        if not os.access(p, os.X_OK):
            return f"{p} is missing: install glusterfs-server (scripts/deps.sh check)"
    for p in ("ip", "nsenter"):
        if not shutil.which(p):
            return f"{p} is missing: install iproute2 and util-linux"
    r = subprocess.run(["ip", "netns", "add", "airlock-probe-" + secrets.token_hex(3)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"no network namespaces here: ip netns add: {r.stderr.strip()}"
    name = r.args[3]
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def require():
    """Skip with a one-line hint where a volume cannot be made; as root,
    where CI runs and everything needed is installed by scripts/deps.sh,
    that is a failure instead."""
    why = missing()
    if why is None:
        return
    if os.geteuid() == 0:
        raise AssertionError(f"multihost: {why} (as root, CI's case, a skip counts as a failure)")
    raise Skip(f"multihost: {why}")


def _wait(pred, what, timeout=60):
    """Waits for pred() (polled: glusterd and FUSE give no event to wait on),
    failing with what after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() > end:
            raise AssertionError(f"gluster: timed out waiting for {what}")
        time.sleep(0.05)


def _fs_type(path):
    """The file system magic of path (statfs's f_type), or None."""
    r = subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True)
    try:
        return int(r.stdout.strip(), 16)
    except ValueError:
        return None


class Volume:
    """A replicated volume (replica `bricks`) in folder `base`, mounted
    `mounts` times: self.mounts[i] is the i-th mount's path."""

    def __init__(self, base, mounts=2, bricks=2, options=None):
        self.base = base
        self.options = dict(VOLUME_OPTIONS, **(options or {}))
        self.n_mounts = mounts
        self.n_bricks = bricks
        tag = secrets.token_hex(3)
        self.ns = f"airlock-gl-{tag}"
        self.name = f"airlock{tag}"
        self.addr = f"10.{0x40 + secrets.randbelow(64)}.{secrets.randbelow(256)}.1"
        self.state = os.path.join(base, "glusterd")
        self.run_dir = os.path.join(base, "run")
        self.log_dir = os.path.join(base, "log")
        self.bricks = [os.path.join(base, f"brick{i}") for i in range(bricks)]
        self.mounts = [os.path.join(base, f"mnt{i}") for i in range(mounts)]
        self.ns_made = False
        self.glusterd_pid = None
        self.client_pids = []
        self.started = False

    # -- life ---------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _in_ns(self, *argv):
        return ["nsenter", f"--net=/run/netns/{self.ns}", *argv]

    def gluster(self, *args, check=True):
        r = subprocess.run(self._in_ns(GLUSTER, f"--glusterd-sock={self.sock}", "--mode=script",
                                       *args), capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"gluster {' '.join(args)}: {r.stdout}{r.stderr}"
                                 f"\n{self.log_tail()}")
        return r

    @property
    def sock(self):
        return os.path.join(self.run_dir, "glusterd.socket")

    def start(self):
        for d in (self.state, self.run_dir, self.log_dir, *self.bricks, *self.mounts):
            os.makedirs(d, exist_ok=True)
        subprocess.run(["ip", "netns", "add", self.ns], check=True, capture_output=True)
        self.ns_made = True
        # glusterd refuses loopback addresses for bricks: the namespace's
        # loopback device gets an address of the 10/8 block besides.
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", self.ns, "addr", "add", f"{self.addr}/32", "dev", "lo"],
                       check=True)
        vol = os.path.join(self.base, "glusterd.vol")
        with open(vol, "w") as f:
            f.write("volume management\n"
                    "    type mgmt/glusterd\n"
                    f"    option working-directory {self.state}\n"
                    "    option transport-type socket\n"
                    "    option transport.socket.listen-port 24007\n"
                    f"    option glusterd-sockfile {self.sock}\n"
                    "    option ping-timeout 0\n"
                    "    option event-threads 1\n"
                    "end-volume\n")
        pidfile = os.path.join(self.run_dir, "glusterd.pid")
        subprocess.run(self._in_ns(GLUSTERD, "-f", vol, "-p", pidfile, "-l",
                                   os.path.join(self.log_dir, "glusterd.log")),
                       check=True, capture_output=True, timeout=60)
        _wait(lambda: os.path.exists(pidfile) and os.path.getsize(pidfile) > 0, "glusterd's pid")
        self.glusterd_pid = int(open(pidfile).read().strip())
        _wait(lambda: self.gluster("volume", "list", check=False).returncode == 0,
              "glusterd to answer")
        self.gluster("volume", "create", self.name, "replica", str(self.n_bricks),
                     *[f"{self.addr}:{b}" for b in self.bricks], "force")
        for k, v in self.options.items():
            self.gluster("volume", "set", self.name, k, v)
        self.gluster("volume", "start", self.name)
        self.started = True
        for i, m in enumerate(self.mounts):
            pid = os.path.join(self.run_dir, f"client{i}.pid")
            subprocess.run(self._in_ns(GLUSTERFS, f"--volfile-server={self.addr}",
                                       f"--volfile-id={self.name}", *CLIENT_OPTIONS,
                                       f"--log-file={os.path.join(self.log_dir, f'client{i}.log')}",
                                       f"--pid-file={pid}", m),
                           check=True, capture_output=True, timeout=60)
            _wait(lambda: os.path.exists(pid) and os.path.getsize(pid) > 0, f"mount {i}'s pid")
            self.client_pids.append(int(open(pid).read().strip()))
            _wait(lambda: _fs_type(m) == FUSE_SUPER_MAGIC, f"mount {m}")
        return self

    def _brick_pids(self):
        """The brick and self-heal processes glusterd started for the
        volume, from the pid files it keeps under /var/run/gluster."""
        pids = []
        for d in (f"/var/run/gluster/vols/{self.name}", f"/var/run/gluster/shd/{self.name}"):
            if not os.path.isdir(d):
                continue
            for f in os.listdir(d):
                if f.endswith(".pid"):
                    try:
                        pids.append(int(open(os.path.join(d, f)).read().strip()))
                    except (OSError, ValueError):
                        pass
        return pids

    # -- a brick lost and back ------------------------------------------------

    def brick_pid(self, i):
        """The pid of brick i's process (glusterfsd), from the pid file
        glusterd keeps for it, or None while the brick is down. (glusterd's
        own `volume status` is no event here: after `start force` it went
        on reporting a restarted brick offline that every client had
        reconnected to.)"""
        tail = f"{self.addr}-{self.bricks[i].strip('/').replace('/', '-')}.pid"
        try:
            with open(f"/var/run/gluster/vols/{self.name}/{tail}") as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def glusterd_online(self, i):
        """Whether glusterd holds brick i online (`volume status`)."""
        r = self.gluster("volume", "status", self.name, f"{self.addr}:{self.bricks[i]}", "--xml",
                         check=False)
        try:
            node = ET.fromstring(r.stdout).find(".//node")
        except ET.ParseError:
            return None
        return node is not None and node.findtext("status") == "1"

    def client_log(self, i):
        """Mount i's client log, as text so far."""
        with open(os.path.join(self.log_dir, f"client{i}.log"), errors="replace") as f:
            return f.read()

    def _wait_clients(self, marks, what, timeout):
        """Waits until every mount's client log, past its length in marks,
        has a line for which what(line) holds."""
        def seen(i):
            return any(what(l) for l in self.client_log(i)[marks[i]:].splitlines())
        _wait(lambda: all(seen(i) for i in range(len(self.mounts))),
              "every client to log the brick's change", timeout)

    def kill_brick(self, i, notice_s=30):
        """Kills brick i's process with SIGKILL, as a host that dies takes
        its brick with it, and waits until it is gone and until every
        mount's client has logged its disconnection from it. The bound
        notice_s is below network.ping-timeout (42 s): a killed process's
        sockets are closed by the kernel, so a client learns of it at once
        rather than at its ping timeout; a client that waited for the
        timeout fails here."""
        pid = self.brick_pid(i)
        assert pid, f"brick {i} has no process to kill\n{self.log_tail()}"
        marks = [len(self.client_log(k)) for k in range(len(self.mounts))]
        os.kill(pid, signal.SIGKILL)
        # Gone, not a zombie only: glusterd takes a pid that /proc still
        # lists for a running brick, and `start force` would start nothing.
        _wait(lambda: not os.path.exists(f"/proc/{pid}"), f"brick {i}'s process {pid} to end")
        sub = f"{self.name}-client-{i}"
        self._wait_clients(marks, lambda l: sub in l and "disconnected from" in l, notice_s)
        # glusterd too, or a `start force` now would find the brick running
        # and start nothing.
        _wait(lambda: self.glusterd_online(i) is False, f"glusterd to see brick {i} down")
        return pid

    def start_brick(self, i, heal_s=300):
        """Brings a killed brick back (`gluster volume start VOL force`),
        waits until every client has connected to it again, then starts a
        heal and waits, within heal_s, until `gluster volume heal VOL info`
        shows every brick connected and no entry to heal."""
        marks = [len(self.client_log(k)) for k in range(len(self.mounts))]
        self.gluster("volume", "start", self.name, "force")
        _wait(lambda: self.brick_pid(i) is not None, f"brick {i} to be back")
        # The brick is back for the volume once each client has connected.
        sub = f"{self.name}-client-{i}"
        self._wait_clients(marks, lambda l: sub in l and "Connected, attached" in l, 60)
        self.wait_healed(heal_s)

    def heal_info(self):
        """[(brick, status, entries)] from `gluster volume heal VOL info`."""
        # `gluster volume heal VOL info` runs glfsheal, which asks glusterd
        # for the volume at its default socket, not at this one's: the
        # same program, run here with the socket named.
        r = subprocess.run(self._in_ns(GLFSHEAL, self.name, "glusterd-sock", self.sock),
                           capture_output=True, text=True, timeout=120)
        out = r.stdout
        rows, cur = [], {}
        for line in out.splitlines():
            if line.startswith("Brick "):
                cur = {"brick": line[6:].strip()}
            elif line.startswith("Status:"):
                cur["status"] = line.split(":", 1)[1].strip()
            elif line.startswith("Number of entries:"):
                n = line.split(":", 1)[1].strip()
                rows.append((cur.get("brick"), cur.get("status"), int(n) if n.isdigit() else -1))
        return rows

    def wait_healed(self, timeout=300):
        """Waits (a heal started at each look, so that no timer of the
        self-heal daemon is waited for) until every brick is connected with
        no entry left to heal."""
        def healed():
            self.gluster("volume", "heal", self.name, check=False)
            rows = self.heal_info()
            return (len(rows) == self.n_bricks and
                    all(s == "Connected" and n == 0 for _, s, n in rows))
        try:
            _wait(healed, "the heal to finish", timeout)
        except AssertionError:
            raise AssertionError(f"heal not done in {timeout} s: {self.heal_info()}\n"
                                 f"{self.log_tail()}")

    def brick_files(self, i, under=""):
        """Brick i's tree below under, read directly on the brick (its
        .glusterfs folder, and GlusterFS's other folders at its root, left
        out): {relative path: bytes, or "dir"}."""
        top = os.path.normpath(os.path.join(self.bricks[i], under))
        out = {}
        for d, dirs, files in os.walk(top):
            if d == os.path.normpath(self.bricks[i]):
                dirs[:] = [x for x in dirs if not x.startswith(".glusterfs")]
            for x in dirs:
                out[os.path.relpath(os.path.join(d, x), top)] = "dir"
            for x in files:
                with open(os.path.join(d, x), "rb") as f:
                    out[os.path.relpath(os.path.join(d, x), top)] = f.read()
        return out

    def stop(self):
        """Unmounts, stops and deletes the volume, ends every process it
        started (by pid) and removes the namespace. Safe to call twice."""
        for m in self.mounts:
            if os.path.ismount(m):
                subprocess.run(["umount", "-l", m], capture_output=True)
        for pid in self.client_pids:
            _kill(pid)
        self.client_pids = []
        bricks = self._brick_pids()
        if self.started and self.glusterd_pid:
            self.gluster("volume", "stop", self.name, "force", check=False)
            self.gluster("volume", "delete", self.name, check=False)
            self.started = False
        for pid in bricks:
            _kill(pid)
        if self.glusterd_pid:
            _kill(self.glusterd_pid)
            self.glusterd_pid = None
        if self.ns_made:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            self.ns_made = False
        # What glusterd left of the volume under /var/run/gluster.
        for d in (f"/var/run/gluster/vols/{self.name}", f"/var/run/gluster/shd/{self.name}"):
            shutil.rmtree(d, ignore_errors=True)

    def log_tail(self, n=20):
        out = []
        for f in sorted(os.listdir(self.log_dir)) if os.path.isdir(self.log_dir) else []:
            with open(os.path.join(self.log_dir, f), errors="replace") as fh:
                lines = [l for l in fh if " E " in l or " W " in l]
            out.append(f"--- {f}\n" + "".join(lines[-n:]))
        return "\n".join(out)


def _alive(pid):
    """Whether process pid is there and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill(pid):
    """Ends process pid (one this helper started) and waits until it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def race_writes(hosts, requests):
    """Sends every workspace_write of requests[k] to hosts[k] at once (each
    host's in flight together, the hosts side by side); the results, all
    of them."""
    results = []
    lock = threading.Lock()
    start = threading.Barrier(len(hosts))

    def one(m, reqs):
        start.wait()
        ids = [m.start("tools/call", {"name": "workspace_write", "arguments": r}) for r in reqs]
        got = [m.wait(i) for i in ids]
        with lock:
            results.extend(got)

    ts = [threading.Thread(target=one, args=(m, requests[k])) for k, m in enumerate(hosts)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [r["result"] for r in results]


def tree_usage(path):
    """The entries below path and the bytes of its files, as a tenant's
    caps count them."""
    n = size = 0
    for d, dirs, files in os.walk(path):
        n += len(dirs) + len(files)
        size += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return n, size


class Hosts:
    """`airlock mcp` servers that stand in for hosts: one per mount of a
    volume (made at first use, about 20 s, with Volume's mounts, bricks and
    options) and tenant, each with the mount's tenants folder and a TMPDIR
    of its own. close() stops them and the volume."""

    def __init__(self, **volume_args):
        self._args = volume_args
        self._vol = None
        self._hosts = {}

    def volume(self):
        if self._vol is None:
            require()
            base = tempfile.mkdtemp(prefix="airlock-multihost-")
            self._vol = Volume(base, **self._args)
            self._vol.__enter__()
        return self._vol

    def tenants_dir(self, i):
        return os.path.join(self.volume().mounts[i], "tenants")

    def host(self, i, tenant, *extra, env=None):
        """`airlock mcp` for tenant on host i, with env added to its
        environment."""
        env = dict(env or {})
        key = (i, tenant, extra, tuple(sorted(env.items())))
        if key not in self._hosts:
            env["TMPDIR"] = os.path.join(self.volume().base, f"tmp{i}")
            os.makedirs(env["TMPDIR"], exist_ok=True)
            with environ(env):
                self._hosts[key] = Mcp("--tenants-dir", self.tenants_dir(i), "--tenant", tenant,
                                       *extra)
        return self._hosts[key]

    def release(self, m):
        """Leaves server m to its caller, who closes it: close() will not."""
        del self._hosts[next(k for k, v in self._hosts.items() if v is m)]

    def close(self):
        for m in self._hosts.values():
            try:
                m.close()
            except Exception:  # noqa: BLE001 - a server that hung is killed, its test reports it
                m.p.kill()
                m.p.wait(timeout=30)
        if self._vol is not None:
            self._vol.stop()
            shutil.rmtree(self._vol.base, ignore_errors=True)


def tool(m, name, args):
    r = m.request("tools/call", {"name": name, "arguments": args})
    assert "result" in r, r
    return r["result"]


def write(m, files):
    """workspace_write of {path: text}; the CallToolResult."""
    return tool(m, "workspace_write",
                {"files": [{"path": p, "text": t} for p, t in files.items()]})


def main(name, hosts):
    """Runs the test file name's tests, then stops hosts. One line where the
    tier cannot run: a skip, or as root (CI's case) a failure."""
    why = missing()
    if why:
        if os.geteuid() == 0:
            print(f"not ok {name}: multihost: {why} (as root, CI's case, a skip counts as "
                  "a failure)")
            print(f"{name}: 0 passed, 1 failed")
            sys.exit(1)
        print(f"skip {name}: multihost: {why}")
        print(f"{name}: 0 passed, 0 failed, 1 skipped")
        sys.exit(0)
    try:
        run(name)
    finally:
        hosts.close()
