"""Three `airlock serve` instances behind HAProxy, started from
deploy/haproxy.cfg with loopback ports of their own, as an operator runs them:
bounded load from several keep-alive clients that share one token, one
instance killed with SIGKILL in the middle. The other calls keep succeeding, a
client that retries a failed stateless call succeeds, session calls reach the
instance their handle names, a handle of the killed instance gets a tool error
naming it, nothing waits longer than a few seconds, and the instances'
/metrics count what the clients saw. Everything started here is killed at the
end, and a watchdog ends the module if anything hangs."""
import faulthandler
import http.client
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from harness import AIRLOCK, run, tmpdir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HAPROXY_CFG = os.path.join(ROOT, "deploy", "haproxy.cfg")
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TOKEN = "multi-instance-test-token-" + os.urandom(8).hex()
# The operator's token, the one /metrics takes (--metrics-token).
OPERATOR = "multi-instance-operator-" + os.urandom(8).hex()
MODERN = "2026-07-28"
RUN = "dev.airlock/run"
INSTANCES = ("a1", "a2", "a3")
CLIENTS, CALLS = 4, 30
# The whole module, teardown included, ends within this (run.sh allows more).
faulthandler.dump_traceback_later(420, exit=True)



def die_with_parent():
    """For Popen's preexec_fn: the child gets SIGKILL when this process ends,
    however it ends (a watchdog's exit, a crash), so nothing outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def envelope():
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "multi-instance-test", "version": "1"}}


class Client:
    """One keep-alive HTTP/1.1 connection speaking MCP 2026-07-28 to /mcp.
    Every answer an instance gave (it names itself in Airlock-Instance) is
    counted in Client.answered, to hold against the instances' metrics."""
    answered = {}
    lock = threading.Lock()

    def __init__(self, port, timeout=30):
        self.port, self.timeout, self.conn, self.n = port, timeout, None, 0

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None

    def post(self, method, params, headers=None):
        """One JSON-RPC request. Returns (HTTP status, response headers
        (lowercase names), the JSON-RPC message or None); raises OSError or
        http.client.HTTPException when the connection fails."""
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                           "params": {**params, "_meta": {**params.get("_meta", {}),
                                                          **envelope()}}}).encode()
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": "Bearer " + TOKEN, "MCP-Protocol-Version": MODERN}
        h.update(headers or {})
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            self.conn.request("POST", "/mcp", body, h)
            r = self.conn.getresponse()
            data = r.read()
        except Exception:
            self.close()
            raise
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        inst = hdrs.get("airlock-instance")
        if inst:
            with Client.lock:
                Client.answered[inst] = Client.answered.get(inst, 0) + 1
        if r.getheader("connection", "").lower() == "close":
            self.close()
        msg = None
        if hdrs.get("content-type", "").startswith("application/json"):
            msg = json.loads(data)
        elif hdrs.get("content-type", "").startswith("text/event-stream"):
            for line in data.decode().splitlines():
                if line.startswith("data:"):
                    m = json.loads(line[5:])
                    if m.get("id") == self.n:
                        msg = m
        return r.status, hdrs, msg

    def tool(self, name, args, headers=None):
        """tools/call: (status, headers, CallToolResult or None)."""
        st, h, m = self.post("tools/call", {"name": name, "arguments": args, "_meta": {RUN: True}},
                             headers)
        return st, h, (m or {}).get("result")


def text_of(result):
    return "".join(c.get("text", "") for c in result["content"] if c["type"] == "text")


def http_get(port, path, token=OPERATOR):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + token} if token else {})
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def metric_sum(text, name, **labels):
    """The sum of a Prometheus metric's samples whose labels include these."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


class Cluster:
    """Three instances and HAProxy in front, in a temporary folder."""

    def __init__(self):
        self.dir = tmpdir()
        self.tokens = os.path.join(self.dir, "tokens")
        with open(self.tokens, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.tokens, 0o600)
        self.operator = os.path.join(self.dir, "operator")
        with open(self.operator, "w") as f:
            f.write(OPERATOR + "\n")
        os.chmod(self.operator, 0o600)
        ports = free_ports(len(INSTANCES) + 2)
        self.ports = dict(zip(INSTANCES, ports))
        self.lb, self.lb_stats = ports[-2], ports[-1]
        self.procs = {}
        self.logs = {}

    def start(self):
        for name, port in self.ports.items():
            log = open(os.path.join(self.dir, name + ".log"), "w")
            self.logs[name] = log
            self.procs[name] = subprocess.Popen(
                [AIRLOCK, "serve", "--listen", f"127.0.0.1:{port}", "--instance", name,
                 "--tokens", self.tokens, "--metrics-token", self.operator, "--timeout", "20"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent)
        env = dict(os.environ, AIRLOCK_LB_BIND=f"127.0.0.1:{self.lb}",
                   AIRLOCK_LB_STATS=f"127.0.0.1:{self.lb_stats}",
                   **{f"AIRLOCK_{n.upper()}": f"127.0.0.1:{p}" for n, p in self.ports.items()})
        log = open(os.path.join(self.dir, "haproxy.log"), "w")
        self.logs["haproxy"] = log
        self.haproxy = subprocess.Popen([HAPROXY, "-db", "-f", HAPROXY_CFG], env=env,
                                        stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 60
        for name, port in self.ports.items():
            while True:
                assert self.procs[name].poll() is None, f"{name} exited: {self.log(name)}"
                try:
                    if http_get(port, "/readyz", token=False)[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, f"{name} not ready: {self.log(name)}"
                time.sleep(0.1)
        # HAProxy sees each instance up (two good checks) once a call has
        # come back from all three.
        seen = set()
        c = Client(self.lb, timeout=10)
        while seen != set(INSTANCES):
            assert self.haproxy.poll() is None, f"haproxy exited: {self.log('haproxy')}"
            assert time.monotonic() < deadline, f"HAProxy reached only {seen}"
            try:
                st, h, _ = c.post("tools/list", {})
                if st == 200:
                    seen.add(h.get("airlock-instance"))
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        c.close()
        return self

    def log(self, name):
        self.logs[name].flush()
        with open(self.logs[name].name) as f:
            return f.read()[-3000:]

    def kill(self, name):
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def stop(self):
        live = [p for p in [*self.procs.values(), getattr(self, "haproxy", None)]
                if p and p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for log in self.logs.values():
            log.close()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


def open_sessions(lb):
    """One session on each instance, opened through the load balancer:
    {instance: handle}. Round robin spreads session_open calls."""
    c = Client(lb)
    handles = {}
    for _ in range(30):
        st, h, r = c.tool("session_open", {})
        assert st == 200 and r and not r["isError"], (st, r)
        handle = r["_meta"]["dev.airlock/session"]
        inst = h.get("airlock-instance")
        assert handle.startswith(f"sess_{inst}_"), (handle, inst)
        if inst in handles:
            st, _, r = c.tool("session_close", {"session": handle})
            assert st == 200 and not r["isError"], r
        else:
            handles[inst] = handle
        if len(handles) == len(INSTANCES):
            break
    c.close()
    assert set(handles) == set(INSTANCES), handles
    return handles


def cell(client, handle, code, header=False):
    """A session cell through the load balancer: (instance, CallToolResult)."""
    st, h, r = client.tool("execute_code", {"code": code, "session": handle},
                           {"Airlock-Session": handle} if header else None)
    assert st == 200 and r is not None, (st, h, r)
    return h.get("airlock-instance"), r


def call_with_retry(client, code, attempts=4):
    """A stateless call, retried on a fresh connection when the connection
    fails or the answer is a 5xx without a result, as a client library
    would. Returns (result, instance, how each failed attempt failed)."""
    failures = []
    for i in range(attempts):
        try:
            st, h, r = client.tool("execute_code", {"code": code})
        except (OSError, http.client.HTTPException) as e:
            failures.append(repr(e))
            client.close()
            continue
        if st == 200 and r is not None:
            return r, h.get("airlock-instance"), failures
        failures.append(f"HTTP {st}")
        client.close()
        time.sleep(0.2 * (i + 1))
    raise AssertionError(f"{code!r}: every attempt failed ({failures})")


def test_three_instances_one_killed_under_load():
    with Cluster() as cl:
        handles = open_sessions(cl.lb)
        # Cells: each handle reaches its own instance, from the body and from
        # the request header alike, and the state is kept there.
        sc = Client(cl.lb)
        for inst, handle in handles.items():
            got, r = cell(sc, handle, "x = 1")
            assert got == inst and not r["isError"], (inst, got, r)
            got, r = cell(sc, handle, "x += 1\nprint(x)", header=True)
            assert got == inst and r["_meta"][RUN]["state"] == "kept", (inst, got, r)
            assert r["content"][0]["text"] == "2\n", r
        # A long cell (600 kB of code, the handle last in the body) is
        # routed by its body too: it fits HAProxy's buffer.
        inst, handle = "a3", handles["a3"]
        got, r = cell(sc, handle, "y = 0\n" + "y += 1\n" * 100_000 + "print(y)")
        assert got == inst and r["content"][0]["text"] == "100000\n", (got, r)
        victim = "a2"

        # Three slow stateless calls in a row go to the three instances
        # (round robin): the one on the victim is in flight when it dies.
        slow = {}

        def slow_call(i):
            c = Client(cl.lb)
            slow[i] = call_with_retry(c, f"import time\ntime.sleep(6)\nprint('slow {i}')")
            c.close()
        slow_threads = [threading.Thread(target=slow_call, args=(i,)) for i in range(3)]
        # And a session cell on the victim, in flight too.
        victim_cell = {}

        def victim_call():
            c = Client(cl.lb)
            try:
                st, h, r = c.tool("execute_code", {"code": "import time\ntime.sleep(8)",
                                                   "session": handles[victim]})
                victim_cell["answer"] = (st, h.get("airlock-instance"), r)
            except (OSError, http.client.HTTPException) as e:
                victim_cell["answer"] = ("error", None, repr(e))
            c.close()
        vt = threading.Thread(target=victim_call)
        vt.start()
        for t in slow_threads:
            t.start()
            time.sleep(0.05)

        results = {}
        errors = []
        done = [0]

        def load(k):
            c = Client(cl.lb)
            try:
                for i in range(CALLS):
                    r, inst, failures = call_with_retry(c, f"print({k} * 1000 + {i})")
                    assert not r["isError"] and r["content"][0]["text"] == f"{k * 1000 + i}\n", r
                    results[(k, i)] = (inst, failures)
                    with Client.lock:
                        done[0] += 1
            except Exception as e:
                errors.append(repr(e))
            finally:
                c.close()
        threads = [threading.Thread(target=load, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        # The kill: a third into the load, or a second and a half after the
        # slow calls began, whichever comes first: they still sleep.
        deadline = time.monotonic() + 1.5
        while done[0] < CLIENTS * CALLS // 3 and time.monotonic() < deadline and not errors:
            time.sleep(0.01)
        cl.kill(victim)
        # The victim's handle gets the tool error from another instance (the
        # refused connection is retried there), not a hang: the client's
        # socket timeout fails the test otherwise.
        vc = Client(cl.lb)
        got, r = cell(vc, handles[victim], "print(x)")
        assert got != victim and r["isError"], (got, r)
        assert f"instance {victim}" in text_of(r), r
        vc.close()
        for t in threads + slow_threads + [vt]:
            t.join(timeout=120)
            assert not t.is_alive(), "a client is stuck"
        assert not errors, errors

        # Every stateless call succeeded in the end, and some that went to
        # the victim before it died needed a retry: the slow one on it did.
        assert len(results) == CLIENTS * CALLS, len(results)
        after = [inst for inst, _ in results.values()]
        assert set(after) <= set(INSTANCES), set(after)
        for i, (r, inst, failures) in slow.items():
            assert r["content"][0]["text"] == f"slow {i}\n", r
        retried = [(inst, f) for _, inst, f in slow.values() if f]
        assert len(retried) == 1 and retried[0][0] != victim, slow
        # The failure was the connection's end, not a hang that the
        # client's socket timeout cut.
        assert not any("timed out" in f for _, fs in retried for f in fs), retried
        # The victim's cell in flight failed too, without a result (a hang
        # would have ended in the client's socket timeout instead).
        st, inst, r = victim_cell["answer"]
        assert st != 200 or (r and r["isError"]), victim_cell
        assert not (st == "error" and "timed out" in r), victim_cell

        # After the kill: the other sessions go on where they were.
        for inst, handle in handles.items():
            if inst == victim:
                continue
            got, r = cell(sc, handle, "x += 1\nprint(x)")
            assert got == inst and r["content"][0]["text"] == "3\n", (inst, got, r)
        # The victim's handle: a tool error that names it and its instance,
        # from another instance, at once, from the body and the header.
        for header in (False, True):
            got, r = cell(sc, handles[victim], "print(x)", header=header)
            assert got in INSTANCES and got != victim, got
            assert r["isError"], r
            msg = text_of(r)
            assert handles[victim] in msg and f"instance {victim}" in msg, msg
        sc.close()

        # Metrics add up: each live instance counted exactly the MCP
        # requests the clients saw it answer.
        for inst in INSTANCES:
            if inst == victim:
                continue
            # An instance counts a call before its answer is queued, so the
            # count is whole once the clients have their answers.
            st, text = http_get(cl.ports[inst], "/metrics")
            assert st == 200, (st, text)
            counted = metric_sum(text, "airlock_calls_total")
            assert counted == Client.answered[inst], (inst, counted, Client.answered)
            assert metric_sum(text, "airlock_calls_total", status="ok") > CALLS // 2, text
        spread = {i: after.count(i) for i in INSTANCES}
        print(f"  {len(results)} calls from {CLIENTS} clients, by instance {spread}; "
              f"answers counted {dict(sorted(Client.answered.items()))}; "
              f"retried after the kill: {retried}; victim's cell: {victim_cell}", flush=True)
        # HAProxy's own view: the victim is down, the others up.
        st, text = http_get(cl.lb_stats, "/metrics", token=False)
        assert st == 200
        for inst in INSTANCES:
            up = metric_sum(text, "haproxy_server_status", proxy="airlock", server=inst,
                            state="UP")
            assert up == (0 if inst == victim else 1), (inst, up)


def test_deploy_files_are_valid():
    """HAProxy accepts deploy/haproxy.cfg; the Kubernetes manifests parse and
    keep what the pod needs (deploy/k8s/README.md), and their probes name
    airlock serve's endpoints."""
    p = subprocess.run([HAPROXY, "-c", "-f", HAPROXY_CFG], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and "WARNING" not in p.stdout + p.stderr, p.stdout + p.stderr
    # Debian's base has no YAML parser and the project adds none: the
    # manifests are read as text, comments dropped, and each setting the pod
    # needs is looked for as the line kubectl would read.
    k8s = os.path.join(ROOT, "deploy", "k8s")
    texts = {}
    for name in sorted(os.listdir(k8s)):
        if name.endswith(".yaml"):
            with open(os.path.join(k8s, name)) as f:
                texts[name] = "\n".join(re.sub(r"(^|\s)#.*$", "", l).rstrip()
                                        for l in f.read().splitlines())
    kinds = set(re.findall(r"(?m)^kind: (\w+)$", "\n".join(texts.values())))
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret",
            "PersistentVolumeClaim", "Kustomization"} <= kinds, kinds
    # The kustomization never applies the example Secret's placeholders
    # over the real tokens.
    assert "secret.yaml" not in texts["kustomization.yaml"], texts["kustomization.yaml"]
    # The systemd unit of one host is one systemd accepts, for the built
    # program in place of the installed one.
    with open(os.path.join(ROOT, "deploy", "airlock.service")) as f:
        unit = f.read()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit and "KillSignal=SIGTERM" in unit, unit
    folder = tempfile.mkdtemp(prefix="airlock-unit-")
    try:
        path = os.path.join(folder, "airlock.service")
        with open(path, "w") as f:
            f.write(unit.replace("/usr/local/bin/airlock", AIRLOCK))
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and not p.stderr.strip(), p.stdout + p.stderr
    finally:
        shutil.rmtree(folder)
    # The variant that hashes tenants (each token to one instance, for warm
    # caches) is one HAProxy accepts too, and reads no body to route.
    tenants_cfg = os.path.join(ROOT, "deploy", "haproxy-tenants.cfg")
    p = subprocess.run([HAPROXY, "-c", "-f", tenants_cfg], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and "WARNING" not in p.stdout + p.stderr, p.stdout + p.stderr
    with open(tenants_cfg) as f:
        tcfg = f.read()
    assert re.search(r"(?m)^\s+balance hdr\(Authorization\)$", tcfg), tcfg
    assert re.search(r"(?m)^\s+hash-type consistent$", tcfg), tcfg
    assert "use-server" not in tcfg
    dep = texts["deployment.yaml"]
    # Peers: the peer port, DNS, the cluster secret from its own Secret, and
    # the tenants folder on a ReadWriteMany claim.
    for want in (r"^\s+- --peer-listen\n\s+- \$\(POD_IP\):8081$", r"^\s+- --peer-dns$",
                 r"^\s+- CLUSTER=file:/etc/airlock-cluster/cluster@peer$",
                 r"^\s+- --tenants-dir\n\s+- /srv/airlock/tenants$",
                 r"^\s+secretName: airlock-cluster$", r"^\s+claimName: airlock-tenants$",
                 r"^\s+- name: peer\n\s+containerPort: 8081$"):
        assert re.search(want, dep, re.M), want
    assert re.search(r"(?m)^\s+accessModes: \[\"ReadWriteMany\"\]$", texts["pvc.yaml"])
    assert re.search(r"(?m)^\s+- name: peer\n\s+port: 8081$", texts["service.yaml"])
    assert re.search(r"(?m)^  name: airlock-cluster$", texts["secret.yaml"])
    for want in (r"^\s+hostUsers: false$", r"^\s+runAsNonRoot: true$",
                 r"^\s+runAsUser: [1-9]\d*$", r"^\s+procMount: Unmasked$",
                 r"^\s+seccompProfile:\n\s+type: Unconfined$",
                 r"^\s+allowPrivilegeEscalation: false$", r'^\s+drop: \["ALL"\]$',
                 r"^\s+readinessProbe:\n\s+httpGet:\n\s+path: /readyz$",
                 r"^\s+livenessProbe:\n\s+httpGet:\n\s+path: /healthz$"):
        assert re.search(want, dep, re.M), want
    args = re.search(r"(?ms)^\s+args:\n((?:\s+- .*\n)+)", dep)
    assert args, dep
    args = re.findall(r"- \"?([^\"\n]+)\"?", args.group(1))
    assert args[0] == "serve" and "--instance" in " ".join(args) and "--tokens" in " ".join(args)
    # The grace the pod gets covers airlock serve's own drain (--grace 30).
    grace = int(re.search(r"(?m)^\s+terminationGracePeriodSeconds: (\d+)$", dep).group(1))
    assert grace > 30 + 5
    hpa = texts["hpa.yaml"]
    assert re.search(r"(?m)^\s+name: airlock$", hpa)
    assert int(re.search(r"(?m)^\s+minReplicas: (\d+)$", hpa).group(1)) >= 2
    res = re.search(r"(?ms)^resources:\n((?:\s+- .*\n?)+)", texts["kustomization.yaml"])
    # Every manifest but the example Secret is a resource of it.
    assert res and sorted(re.findall(r"- (\S+)", res.group(1))) == \
        sorted(n for n in texts if n not in ("kustomization.yaml", "secret.yaml")), \
        texts["kustomization.yaml"]

if __name__ == "__main__":
    run()
