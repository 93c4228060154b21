"""Where a loaded call sleeps in RCU grace periods (docs/performance.md,
"Where a loaded call waits"): the uninterruptible sleep of an `airlock mcp`
server's whole tree in synchronize_rcu*, per call, by the caller on the stack
(a copy's exit, umount2, the close of a detached mount, cgroup.procs, cgroup
mkdir/rmdir), over 30 print(1) calls 10 ms apart beside one busy loop per
core. Needs perf and root (perf record -a of sched_switch with call chains).

    /usr/bin/python3 bench/rcu_waits.py BUILD
"""
import os, re, signal, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loaded import Mcp, Load
build = sys.argv[1]
out = f"/tmp/airlock-rcu-waits-{os.getpid()}.data"
N = 30
with Load():
    m = Mcp(build, preload=None)
    for _ in range(3):
        m.call("print1")
    seed = {m.p.pid}
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == m.p.pid:
                seed.add(int(d))
        except OSError:
            pass
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-a", "-o", out, "-e", "sched:sched_switch",
                             "-e", "sched:sched_process_fork"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    lat = []
    for _ in range(N):
        time.sleep(0.01)
        lat.append(m.call("print1"))
    time.sleep(0.3)
    perf.send_signal(signal.SIGINT); perf.wait()
    try:
        m.close()
    except Exception:
        m.p.kill()
txt = subprocess.run(["perf", "script", "-i", out, "-F", "tid,time,event,trace,ip,sym"], capture_output=True, text=True).stdout
os.unlink(out)
pids = set(seed)
blocks = txt.split("\n\n")
sleeping = {}  # tid -> (t, kind)
tot = {}
def kind_of(stack):
    if "synchronize_rcu" not in stack:
        return None
    for k, pat in (("exit", "do_exit"), ("umount", "path_umount"), ("close/fput", "__fput"), ("cgroup.procs", "cgroup_procs_write"),
                   ("cgroup.procs", "__cgroup_procs_write"), ("cgroup mkdir/rmdir", "cgroup_mkdir"), ("cgroup mkdir/rmdir", "cgroup_rmdir")):
        if pat in stack:
            return k
    return "other"
for b in blocks:
    lines = b.strip().splitlines()
    if not lines:
        continue
    head = lines[0]
    mt = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", head)
    if not mt:
        continue
    tid, t, ev, tr = int(mt[1]), float(mt[2]), mt[3], mt[4]
    if ev.endswith("sched_process_fork"):
        pp = re.search(r"(?:^| )pid=(\d+)", tr); cp = re.search(r"child_pid=(\d+)", tr)
        if pp and cp and int(pp[1]) in pids:
            pids.add(int(cp[1]))
        continue
    pm = re.search(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)", tr)
    if not pm:
        continue
    prev, st, nxt = int(pm[1]), pm[2], int(pm[3])
    if nxt in sleeping:
        t0, k = sleeping.pop(nxt)
        tot[k] = tot.get(k, 0) + (t - t0)
    if prev in pids and st.startswith("D"):
        k = kind_of("\n".join(lines[1:]))
        if k:
            sleeping[prev] = (t, k)
lat.sort()
print(build, "load", open("/proc/loadavg").read().split()[0], "median call ms %.2f" % lat[N // 2],
      "rcu ms/call:", {k: round(v * 1e3 / N, 2) for k, v in sorted(tot.items())}, "total %.2f" % (sum(tot.values()) * 1e3 / N))
