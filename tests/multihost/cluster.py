"""Three `airlock serve` hosts for the multihost tier.

Each instance runs in a network namespace of its own (ip netns), joined to
the test's namespace by a veth pair on a bridge of the test's own, with its
own address, its own TMPDIR and the same tenants folder (the caller's: one
plain folder for all, or a shared file system's mount per host). Each takes peers'
calls on --peer-listen and finds the others in a peers file. HAProxy in TCP
mode, round robin, is the balancer in front: it reads no request, so a call
lands on any host.

Everything is started and stopped here: Cluster.start() undoes what it did
when a step fails, Cluster.stop() (also at exit) kills every process it
started, by its pid, and removes the namespaces, the bridge and the folders.
Counts and times are bounded: 3 hosts, each waited for at most READY_S.

Where network namespaces cannot be made (not root, no `ip`, a container
without the capability), start() raises Skip with a one-line hint; as root
on this project's CI machines they are there, and a skip is a failure."""
import atexit
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

AIRLOCK = os.environ.get("AIRLOCK") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "airlock")
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
IP = shutil.which("ip") or "/usr/sbin/ip"
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
READY_S = 120          # a host's start, warm-up included, at most
HTTP_PORT, PEER_PORT = 8080, 8081


class Skip(Exception):
    """The tier cannot run here; the message says why and what it needs."""


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _sh(*args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def netns_available():
    """None when this process can make network namespaces, else the hint."""
    if os.geteuid() != 0:
        return "the multihost tier needs root (ip netns, veth pairs, a bridge): run it as root"
    if not os.access(IP, os.X_OK):
        return "the multihost tier needs iproute2's ip (apt-get install iproute2)"
    if not os.access(HAPROXY, os.X_OK):
        return "the multihost tier needs HAProxy (apt-get install haproxy)"
    name = "alprobe" + secrets.token_hex(3)
    p = subprocess.run([IP, "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return f"ip netns add fails here ({p.stderr.strip()}): the tier needs network namespaces"
    subprocess.run([IP, "netns", "del", name], capture_output=True)
    return None


class Host:
    """One instance: its name, namespace, address, process and log lines."""

    def __init__(self, name, ns, addr, tmp):
        self.name, self.ns, self.addr, self.tmp = name, ns, addr, tmp
        self.proc = None
        self.lines = []
        self.cond = threading.Condition()
        self.url = f"http://{addr}:{HTTP_PORT}/mcp"
        self.peer = (addr, PEER_PORT)

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # the end of its log: the process is gone
            self.cond.notify_all()

    def wait_line(self, pred, timeout=READY_S, start=0):
        """The first log line from index start for which pred holds, waiting
        for it (at most timeout, a bound against a hang, not a measure)."""
        deadline = time.monotonic() + timeout
        i = start
        with self.cond:
            while True:
                while i < len(self.lines):
                    line = self.lines[i]
                    if line is None:
                        raise AssertionError(f"{self.name} ended:\n" + "\n".join(
                            l for l in self.lines if l))
                    if pred(line):
                        return line
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name}: no such line in {timeout} s:\n" +
                                         "\n".join(self.lines[-20:]))
                self.cond.wait(left)

    def mark(self):
        with self.cond:
            return len(self.lines)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """Cluster(tenants_dir).start(); .hosts (a, b, c), .lb (host, port) of
    HAProxy, .tokens {tenant: token}, .secret (the cluster secret's bytes),
    .metrics(host) (read with the operator's token, .metrics_token);
    .stop(). tenants_dirs=[...] instead gives each host its own tenants
    folder, in the order of names (a shared file system's mount per host:
    each host joins only a network namespace and shares this process's
    mounts, so a mount made here is seen there).
    extra_args go to every instance; fake_peers maps more instance names to
    ADDR:PORT in the peers file (a test's fake peer; "{bridge}" stands for
    the test namespace's address on the hosts' bridge); env adds variables
    to every instance's environment ("{bridge}" as well: an OTLP receiver of
    the test's, say)."""

    def __init__(self, tenants_dir=None, names=("a", "b", "c"), extra_args=(), fake_peers=None,
                 tenants=("acme", "globex"), env=None, tenants_dirs=None):
        if (tenants_dir is None) == (tenants_dirs is None):
            raise ValueError("Cluster: give tenants_dir or tenants_dirs, one of them")
        if tenants_dirs is not None and len(tenants_dirs) != len(names):
            raise ValueError(f"Cluster: {len(tenants_dirs)} tenants_dirs for {len(names)} hosts")
        self.tenants_dirs = dict(zip(names, tenants_dirs or [tenants_dir] * len(names)))
        self.names = names
        self.extra_args = list(extra_args)
        self.fake_peers = dict(fake_peers or {})
        self.env = dict(env or {})
        self.tag = secrets.token_hex(2)
        self.net = None
        self.bridge = "albr" + self.tag
        self.hosts = []
        self.haproxy = None
        self.lb = None
        self.dir = None
        self.tokens = {t: f"{t}-token-{secrets.token_hex(12)}" for t in tenants}
        self.secret = secrets.token_hex(24).encode()
        self.metrics_token = "operator-" + secrets.token_hex(12)
        self._made_ns = []
        self._made_bridge = False

    # ---- the network ----------------------------------------------------

    def _subnet(self):
        used = _sh(IP, "-4", "-o", "addr")
        for _ in range(50):
            third = secrets.randbelow(200) + 20
            if f" 10.231.{third}." not in used:
                return f"10.231.{third}"
        raise RuntimeError("no free 10.231.x.0/24 subnet")

    def _network(self):
        self.net = self._subnet()
        _sh(IP, "link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _sh(IP, "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        _sh(IP, "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            ns = f"al{self.tag}{name}"
            _sh(IP, "netns", "add", ns)
            self._made_ns.append(ns)
            outer, inner = f"alv{self.tag}{name}", f"alw{self.tag}{name}"
            _sh(IP, "link", "add", outer, "type", "veth", "peer", "name", inner)
            _sh(IP, "link", "set", inner, "netns", ns)
            _sh(IP, "link", "set", outer, "master", self.bridge)
            _sh(IP, "link", "set", outer, "up")
            addr = f"{self.net}.{10 + i}"
            _sh(IP, "-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
            _sh(IP, "-n", ns, "link", "set", inner, "up")
            _sh(IP, "-n", ns, "link", "set", "lo", "up")
            tmp = os.path.join(self.dir, f"tmp-{name}")
            os.mkdir(tmp, 0o700)
            self.hosts.append(Host(name, ns, addr, tmp))

    # ---- the processes --------------------------------------------------

    def _files(self):
        with open(os.path.join(self.dir, "tokens"), "w") as f:
            for tenant, tok in self.tokens.items():
                f.write(f"{tok} {tenant}\n")
        with open(os.path.join(self.dir, "metrics-token"), "w") as f:
            f.write(self.metrics_token + "\n")
        with open(os.path.join(self.dir, "secret"), "wb") as f:
            f.write(self.secret + b"\n")
        with open(os.path.join(self.dir, "peers"), "w") as f:
            for h in self.hosts:
                f.write(f"{h.name} {h.addr}:{PEER_PORT}\n")
            for name, addr in self.fake_peers.items():
                f.write(f"{name} {addr.replace('{bridge}', self.net + '.1')}\n")

    def host_args(self, h):
        d = self.dir
        return [AIRLOCK, "serve", "--listen", f"{h.addr}:{HTTP_PORT}", "--peer-listen",
                f"{h.addr}:{PEER_PORT}", "--peers", os.path.join(d, "peers"), "--instance",
                h.name, "--tokens", os.path.join(d, "tokens"), "--metrics-token",
                os.path.join(d, "metrics-token"), "--tenants-dir",
                self.tenants_dirs[h.name], "--secret", f"CLUSTER=file:{os.path.join(d, 'secret')}@peer",
                *self.extra_args]

    def start_host(self, h):
        env = dict(os.environ, TMPDIR=h.tmp)
        env.update({k: v.replace("{bridge}", self.net + ".1") for k, v in self.env.items()})
        h.lines = []
        # nsenter joins the network namespace alone: `ip netns exec` would
        # also give the host a mount namespace with a /sys of its own, where
        # no cgroup file system is mounted, and its runs would go without
        # cgroups (test_cluster_tenants's many-tenants check saw none).
        # The process is airlock itself either way (neither forks).
        h.proc = subprocess.Popen([NSENTER, f"--net=/run/netns/{h.ns}", *self.host_args(h)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=env, preexec_fn=_die_with_parent)
        threading.Thread(target=h._read, daemon=True).start()

    def _haproxy(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n    maxconn 256\n"
                    "defaults\n    mode tcp\n    timeout connect 2s\n"
                    "    timeout client 120s\n    timeout server 120s\n"
                    "    retries 2\n    option redispatch\n"
                    f"frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n"
                    "backend be\n    balance roundrobin\n")
            for h in self.hosts:
                f.write(f"    server {h.name} {h.addr}:{HTTP_PORT} check inter 500ms "
                        "fall 1 rise 1\n")
        self.haproxy = subprocess.Popen([HAPROXY, "-f", cfg, "-db"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 30
        while True:  # HAProxy says nothing when it listens: its socket is the event
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.haproxy.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not start: " +
                                       self.haproxy.stderr.read().decode())
                time.sleep(0.05)
        self.lb = ("127.0.0.1", port)

    def start(self):
        hint = netns_available()
        if hint:
            raise Skip(hint)
        self.dir = tempfile.mkdtemp(prefix="airlock-multihost-")
        atexit.register(self.stop)
        try:
            self._network()
            self._files()
            for h in self.hosts:
                self.start_host(h)
            for h in self.hosts:
                h.wait_line(lambda l: l == "airlock serve: ready")
            self._haproxy()
        except BaseException:
            self.stop()
            raise
        return self

    def metrics(self, h):
        """h's /metrics as {line's name and labels: value}."""
        import http.client
        conn = http.client.HTTPConnection(h.addr, HTTP_PORT, timeout=30)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": "Bearer " +
                                                     self.metrics_token})
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1])
                for l in text.splitlines() if l and not l.startswith("#")}

    def host(self, name):
        return next(h for h in self.hosts if h.name == name)

    def stop(self):
        procs = [h.proc for h in self.hosts if h.proc] + ([self.haproxy] if self.haproxy else [])
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.haproxy = None
        for h in self.hosts:
            h.proc = None
        for ns in self._made_ns:
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
        self._made_ns = []
        if self._made_bridge:
            subprocess.run([IP, "link", "del", self.bridge], capture_output=True)
            self._made_bridge = False
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
