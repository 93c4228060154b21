"""Every check of tests/blackbox/test_serve_tenants.py, run again against a
cluster instead of one local `airlock serve` (issue 42: "Two tenants stay
isolated across hosts. Every check of the tenants tests holds through the
balancer"): three hosts, each in a network namespace of its own
(tests/multihost/cluster.py), each with its own FUSE mount of one GlusterFS
replicated volume (tests/multihost/gluster.py) as its --tenants-dir, behind
HAProxy in TCP mode round robin, which reads no request, so consecutive
calls land on different hosts.

The checks are not copied: test_serve_tenants's server is a function,
start_server(*args), and this file puts Hosts in its place, with the same
methods as its One. Each check starts "a server" with the same arguments
and gets three hosts: the test's --tenants-dir becomes a folder of the
volume (the test's own path a link to it through the first mount, so that
what the check plants in or reads from the folder is on the volume),
--tokens and every other option go to every host, and the cluster's own
options (--listen, --peer-listen, --peers, --instance, the cluster secret)
are added. Calls go through the balancer. What design.md ("Shared storage")
makes each host's own, sessions' and runs' quotas, run slots, upstream
server processes and the store of runs' files (its caps, its list), a check
asks of one host (pin()); what holds across hosts (the workspace and its
caps, a session or a read of a run's file forwarded to its holder, reloads, metrics summed over the hosts, each
host's log) it asks of the cluster or of every host (every()).

test_airlock_mcp_has_one_tenant is not run here: it drives `airlock mcp` on
stdio, no server of this fixture."""
import faulthandler
import http.client
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
sys.path.insert(0, HERE)
import cluster as cl  # noqa: E402
import gluster  # noqa: E402
import test_serve_tenants as tenants  # noqa: E402
from harness import run  # noqa: E402
from test_serve import Serve  # noqa: E402

faulthandler.dump_traceback_later(1500, exit=True)
NOT_HERE = {"test_airlock_mcp_has_one_tenant": "airlock mcp on stdio, no server"}
STOP_S = 60  # a host's drain on SIGTERM, at most

_vol = None


def requirement():
    """Why this file cannot run here, or None."""
    return gluster.missing() or cl.netns_available()


def volume():
    """The volume of the whole file (three mounts, one per host), made at
    first use and stopped by teardown()."""
    global _vol
    if _vol is None:
        v = gluster.Volume(tempfile.mkdtemp(prefix="airlock-multihost-"), mounts=3)
        v.__enter__()
        _vol = v
    return _vol


class Http:
    """A place to send requests to (the balancer, or one host), with
    Serve's post, get and metrics."""

    def __init__(self, addr, operator):
        self.addr, self.operator = addr, operator

    def conn(self, timeout=120):
        return http.client.HTTPConnection(*self.addr, timeout=timeout)

    post = Serve.post
    get = Serve.get
    metrics = Serve.metrics


class TenantsCluster(cl.Cluster):
    """A Cluster whose hosts get the check's arguments (its --tokens and
    every other option) instead of the cluster's own tokens, and the
    check's TMPDIR when it gives one (every host stages into it)."""

    def __init__(self, args, dirs, tmp):
        super().__init__(tenants_dirs=dirs or [None] * 3)
        self.args, self.shared_tmp = list(args), tmp

    def _files(self):
        with open(os.path.join(self.dir, "secret"), "wb") as f:
            f.write(self.secret + b"\n")
        with open(os.path.join(self.dir, "peers"), "w") as f:
            for h in self.hosts:
                f.write(f"{h.name} {h.addr}:{cl.PEER_PORT}\n")

    def host_args(self, h):
        tdir = self.tenants_dirs[h.name]
        return [cl.AIRLOCK, "serve", "--listen", f"{h.addr}:{cl.HTTP_PORT}", "--peer-listen",
                f"{h.addr}:{cl.PEER_PORT}", "--peers", os.path.join(self.dir, "peers"),
                "--instance", h.name,
                "--secret", f"CLUSTER=file:{os.path.join(self.dir, 'secret')}@peer",
                *(["--tenants-dir", tdir] if tdir else []), *self.args]

    def start_host(self, h):
        if self.shared_tmp:
            h.tmp = self.shared_tmp
        super().start_host(h)


class Hosts(Http):
    """Three hosts as "the server" of test_serve_tenants (its One's methods);
    requests go through the balancer."""

    def __init__(self, *args, tmp=None, operator=True):
        args = list(args)
        dirs = None
        if "--tenants-dir" in args:
            i = args.index("--tenants-dir")
            dirs = self._shared_folder(args[i + 1])
            del args[i:i + 2]
        op = None
        if operator and "--tokens" in args and "--metrics-token" not in args:
            path = os.path.join(tenants.tmpdir(), "metrics-token")
            with open(path, "w") as f:
                f.write(secrets.token_hex(16) + "\n")
            with open(path) as f:
                op = {"Authorization": "Bearer " + f.read().strip()}
            args += ["--metrics-token", path]
        self.c = TenantsCluster(args, dirs, tmp)
        self.c.start()
        super().__init__(self.c.lb, op)
        self.returncodes = None
        self._next = 0

    @staticmethod
    def _shared_folder(tdir):
        """The volume's folder for the check's tenants folder tdir (the same
        at a restart on it): tdir becomes a link to it through the first
        mount; each host gets it through its own mount."""
        vol = volume()
        if not os.path.islink(tdir):
            name = "tenants-" + secrets.token_hex(4)
            os.mkdir(os.path.join(vol.mounts[0], name), 0o700)
            os.symlink(os.path.join(vol.mounts[0], name), tdir)
        name = os.path.basename(os.readlink(tdir))
        dirs = [os.path.join(m, name) for m in vol.mounts]
        for d in dirs:  # each mount sees the folder made through the first
            assert os.path.isdir(d), d
        return dirs

    def view(self, h):
        return Http((h.addr, cl.HTTP_PORT), self.operator)

    def pin(self):
        """One host, the next one at each pin(), so that the checks that
        are per host run on each of them."""
        h = self.c.hosts[self._next % len(self.c.hosts)]
        self._next += 1
        return self.view(h)

    def every(self):
        return [self.view(h) for h in self.c.hosts]

    def metrics(self, headers=None):
        """The sum over the hosts of each line of their /metrics."""
        out = {}
        for v in self.every():
            for k, x in v.metrics(headers).items():
                out[k] = out.get(k, 0) + x
        return out

    @property
    def lines(self):
        return [l for h in self.c.hosts for l in h.lines if l is not None]

    def signal(self, sig):
        for h in self.c.hosts:
            h.proc.send_signal(sig)

    def pids(self):
        return [h.proc.pid for h in self.c.hosts]

    def mark(self):
        return [h.mark() for h in self.c.hosts]

    def since(self, mark):
        return [[l for l in h.lines[m:] if l is not None] for h, m in zip(self.c.hosts, mark)]

    def wait_said(self, text, timeout=60):
        for h in self.c.hosts:
            h.wait_line(lambda l: text in l, timeout)
        return True

    def stop(self):
        """Each host drains on SIGTERM, as one server does; then the cluster
        is taken down (namespaces, bridge, balancer)."""
        procs = [h.proc for h in self.c.hosts if h.proc]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(STOP_S)
            except subprocess.TimeoutExpired:
                pass
        self.returncodes = [p.returncode for p in procs]
        self.c.stop()

    def exited_ok(self):
        return self.returncodes == [0] * len(self.c.names)


for _name, _f in vars(tenants).items():
    if _name.startswith("test_") and callable(_f) and _name not in NOT_HERE:
        globals()[_name] = _f


def teardown():
    if _vol is not None:
        _vol.stop()
        shutil.rmtree(_vol.base, ignore_errors=True)


if __name__ == "__main__":
    why = requirement()
    if why:
        # One line where the tier cannot run; as root (CI) a failure.
        if os.geteuid() == 0:
            print(f"not ok test_cluster_tenants: multihost: {why} (as root, CI's case, a skip "
                  "counts as a failure)")
            print("test_cluster_tenants: 0 passed, 1 failed")
            sys.exit(1)
        print(f"skip test_cluster_tenants: multihost: {why}")
        print("test_cluster_tenants: 0 passed, 0 failed, 1 skipped")
        sys.exit(0)
    tenants.start_server = Hosts
    for _name, _why in NOT_HERE.items():
        print(f"  {_name}: not run here ({_why})")
    try:
        run("test_cluster_tenants")
    finally:
        teardown()
