"""Where one copy's CPU goes, phase by phase, from `perf record` (part of
bench_runcost.py, "cost of a run").

perf samples every CPU (cpu-clock, one sample each PERIOD_NS of CPU, with
kernel call chains) while a library driver (bench_runcost) makes calls
GAP_S apart, and records four system calls of every process as markers
(mount, seccomp's end, sendmsg, exit_group) and the forks,
from which the driver's process tree is known (the template, and its copies,
which are the driver's children through CLONE_PARENT). Each sample of that
tree is then given to one phase:

  - by its kernel call chain where that names the phase: fork, the
    namespaces, the mounts, the cgroup, the seccomp filter's loading,
    Landlock, the populate (madvise), exit and reap, and the namespaces'
    and mounts' teardown (also in kernel workers, outside the tree);
  - else (user space, page faults, other system calls) by when it fell in
    its copy's life, between the markers: before the first mount (the
    populate's own samples aside), the runtime's after-fork work (the guest runtime's
    Python and C, its signal set-up); after the seccomp filter and until
    the copy's "ready" message, the warming; after "ready", the run
    itself, until the copy's exit_group (its channel and pipe system calls
    counted apart as "the result").

User space has no call chains here (libpython and the template are built
without frame pointers), so the markers split it. Each phase is printed
as ms of CPU per call (its samples times PERIOD_NS, over the calls) and
its share of the tree's samples. Needs root and perf.
"""
import os
import re
import signal
import subprocess
import tempfile
import time

PERIOD_NS = 250_000
# Without call chains: the populate alone makes hundreds of madvise calls,
# and a marker with a call chain on each cost more than the call.
MARKERS = ["syscalls:sys_enter_mount", "syscalls:sys_exit_seccomp", "syscalls:sys_enter_sendmsg",
           "syscalls:sys_enter_exit_group"]

# (phase, kernel symbols): the first phase any of whose symbols is in a
# sample's kernel call chain takes it. Order matters: a namespace made by
# clone3 is the namespaces', not the fork's.
KERNEL_RULES = [
    ("seccomp: loading the filter", ["__x64_sys_seccomp", "do_seccomp",
                                     "seccomp_set_mode_filter"]),
    ("seccomp: filters run at each system call", ["__seccomp_filter", "seccomp_run_filters",
                                                  "__secure_computing"]),
    ("Landlock", ["__x64_sys_landlock_create_ruleset", "__x64_sys_landlock_restrict_self"]),
    ("namespaces and mounts: teardown", ["exit_task_namespaces", "free_nsproxy", "put_mnt_ns",
                                         "cleanup_net", "put_ipc_ns", "free_ipcs",
                                         "cleanup_mnt", "__cleanup_mnt", "delayed_mntput",
                                         "zap_pid_ns_processes", "free_pid_ns",
                                         "delayed_free_pidns", "net_cleanup_work"]),
    ("cgroup", ["cgroup_mkdir", "cgroup_rmdir", "cgroup_procs_write", "cgroup1_procs_write",
                "__cgroup1_procs_write", "cgroup_attach_task", "cgroup_file_write",
                "kernfs_iop_mkdir", "kernfs_iop_rmdir", "cgroup_post_fork", "cgroup_can_fork",
                "cgroup_exit", "cgroup_release", "css_release_work_fn", "css_free_rwork_fn",
                "css_killed_work_fn", "copy_cgroup_ns"]),
    ("namespaces: making them", ["copy_namespaces", "create_new_namespaces", "copy_net_ns",
                                 "create_user_ns", "copy_ipcs", "copy_pid_ns",
                                 "proc_uid_map_write", "proc_gid_map_write",
                                 "proc_setgroups_write", "proc_sys_call_handler",
                                 "__x64_sys_unshare", "ksys_unshare"]),
    ("mounts: making them", ["__x64_sys_mount", "__x64_sys_fsopen", "__x64_sys_fsconfig",
                             "__x64_sys_fsmount", "__x64_sys_move_mount", "__x64_sys_open_tree",
                             "__x64_sys_mount_setattr", "__x64_sys_umount"]),
    ("populate (madvise)", ["__x64_sys_madvise", "do_madvise", "madvise_populate", "__madvise",
                            "__x64_sys_process_madvise", "vector_madvise"]),
    ("fork (clone3)", ["kernel_clone", "copy_process", "__do_sys_clone3", "__x64_sys_clone3",
                       "__x64_sys_clone", "dup_mm", "copy_page_range", "schedule_tail",
                       "ret_from_fork"]),
    ("exit and reap", ["do_exit", "do_group_exit", "__x64_sys_exit_group", "exit_mmap",
                       "__x64_sys_wait4", "__x64_sys_waitid", "do_wait", "release_task",
                       "wait_task_zombie", "mmput"]),
]
CHANNEL_CALLS = {"__x64_sys_sendmsg", "__x64_sys_recvmsg", "__x64_sys_write", "__x64_sys_read",
                 "__x64_sys_sendto", "__x64_sys_recvfrom", "__x64_sys_writev", "__x64_sys_readv",
                 "__x64_sys_poll", "__x64_sys_ppoll", "__x64_sys_epoll_wait",
                 "__x64_sys_epoll_pwait", "__x64_sys_close"}
FAULT = {"asm_exc_page_fault", "exc_page_fault", "handle_mm_fault"}
# The rows, in the order of a copy's life.
ORDER = ["fork (clone3)", "cgroup", "namespaces: making them", "populate (madvise)",
         "runtime after-fork (user space, faults, signal set-up)", "mounts: making them",
         "copy setup: other (rlimits, capabilities, fds)", "Landlock",
         "seccomp: loading the filter", "warming and ready",
         "the run (user space, faults, its system calls)",
         "seccomp: filters run at each system call", "the result (channel and pipes)",
         "exit and reap", "namespaces and mounts: teardown", "the template's own work",
         "the host's own work (the driver)"]

# The phases that are the run itself, what floor (a) also pays.
THE_RUN = {"the run (user space, faults, its system calls)",
           "seccomp: filters run at each system call", "the result (channel and pipes)"}

HEAD = re.compile(r"^\s*(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(?:\d+\s+)?([\w:-]+):(.*)$")


def parse(path):
    """perf script's samples: (comm, pid, tid, t, event, trace, kernel symbols)."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "comm,pid,tid,time,event,trace,ip,sym"],
                         capture_output=True, text=True, errors="replace").stdout
    samples, cur = [], None
    for line in out.splitlines():
        m = HEAD.match(line)
        if m:
            cur = [m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)),
                   m.group(5), m.group(6), []]
            samples.append(cur)
        elif cur is not None and line.strip():
            parts = line.split()
            if len(parts) >= 2:
                cur[6].append(parts[1])
    return samples


def kernel_phase(syms):
    for phase, names in KERNEL_RULES:
        for s in syms:
            if s in names:
                return phase
    return None


def children(driver):
    """The driver's children now: {pid: is a copy (pid 1 of a PID
    namespace of its own)}; the others are the template."""
    out = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/status") as f:
                st = f.read()
        except OSError:
            continue
        if int(st.split("PPid:")[1].split()[0]) == driver:
            out[int(d)] = st.split("NSpid:")[1].split("\n")[0].split()[-1] == "1"
    return out


def classify(samples, driver, before):
    """{phase: samples} for the driver's tree, the count of other
    processes' samples, the kernel workers' teardown samples and the
    copies seen. before: the driver's children when perf started
    (children()); its copies were ready then."""
    tree = {driver} | set(before)
    copies = {p for p, is_copy in before.items() if is_copy}
    ready_before = set(copies)
    marks = {}  # pid -> {marker: [t]}
    for comm, pid, tid, t, ev, trace, syms in samples:
        if ev == "sched:sched_process_fork" or ev.endswith("sched_process_fork"):
            m = re.search(r"pid=(\d+) child_comm=.* child_pid=(\d+)", trace)
            if m and int(m.group(1)) in tree:
                parent, child = int(m.group(1)), int(m.group(2))
                tree.add(child)
                if parent != driver:
                    copies.add(child)
        elif ev.startswith("syscalls:"):
            marks.setdefault(pid, {}).setdefault(ev.split(":")[1], []).append(t)
    counts, other, kworker_teardown = {}, 0, 0
    for comm, pid, tid, t, ev, trace, syms in samples:
        if ev != "cpu-clock":
            continue
        if pid not in tree:
            ph = kernel_phase(syms)
            if ph == "namespaces and mounts: teardown":
                counts[ph] = counts.get(ph, 0) + 1
                kworker_teardown += 1
            else:
                other += 1
            continue
        ph = kernel_phase(syms)
        if pid == driver:
            ph = ph if ph in ("exit and reap", "cgroup") else "the host's own work (the driver)"
        elif pid in copies:
            ph = copy_phase(ph, syms, t, marks.get(pid, {}), pid in ready_before)
        elif ph is None or ph in ("populate (madvise)",):
            ph = "the template's own work"
        counts[ph] = counts.get(ph, 0) + 1
    return counts, other, kworker_teardown, len(copies)


def copy_phase(ph, syms, t, mk, was_ready):
    """A copy's sample: by its kernel call chain, else by its markers
    (was_ready: the copy was ready before perf started)."""
    def last(name, before=None):
        ts = [x for x in mk.get(name, []) if before is None or x <= before]
        return max(ts) if ts else None
    seccomp = last("sys_exit_seccomp")
    ready = min([x for x in mk.get("sys_enter_sendmsg", []) if seccomp and x > seccomp] or
                [None]) if seccomp else None
    first_mount = min(mk.get("sys_enter_mount", []) or [None]) if mk.get("sys_enter_mount") \
        else None
    exit_t = min(mk.get("sys_enter_exit_group", []) or [None]) \
        if mk.get("sys_enter_exit_group") else None
    if ph is not None and ph != "seccomp: filters run at each system call":
        return ph
    if exit_t is not None and t >= exit_t:
        return "exit and reap"
    if was_ready or (ready is not None and t >= ready):
        if ph:
            return ph
        if any(s in CHANNEL_CALLS for s in syms) and not any(s in FAULT for s in syms):
            return "the result (channel and pipes)"
        return "the run (user space, faults, its system calls)"
    if seccomp is not None and t >= seccomp:
        return "warming and ready"
    if first_mount is None or t < first_mount:
        return "runtime after-fork (user space, faults, signal set-up)"
    return ph or "copy setup: other (rlimits, capabilities, fds)"


def measure(lib_cls, cgroup_cls, build, code, preload, n, gap_s):
    """Records n calls of code (gap_s apart) of a library driver under perf
    and returns the phase table: {"calls", "rows": [(phase, ms per call,
    share)], "tree_ms", "cgroup_ms", "other_ms"}; or {"skipped": why}."""
    if subprocess.run(["sh", "-c", "command -v perf"], stdout=subprocess.DEVNULL).returncode:
        return {"skipped": "perf is not installed (Debian: linux-perf; scripts/deps.sh)"}
    cg = cgroup_cls()
    t = None
    tmp = tempfile.mkdtemp(prefix="airlock-runcost-perf-")
    data = os.path.join(tmp, "perf.data")
    try:
        t = lib_cls(build, code, preload, cg)
        for _ in range(5):
            t.call()
        time.sleep(1.0)
        argv = ["perf", "record", "-a", "-q", "-o", data, "-e", "cpu-clock", "-c",
                str(PERIOD_NS), "-g", "-e", "sched:sched_process_fork"]
        for m in MARKERS:
            argv += ["-e", m + "/call-graph=no/"]
        rec = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # perf's own start, before the first timed call
        before = children(t.p.pid)
        u0 = cg.usage_ms()
        for _ in range(n):
            time.sleep(gap_s)
            t.call()
        time.sleep(gap_s)
        used = cg.usage_ms() - u0
        rec.send_signal(signal.SIGINT)
        err = rec.communicate(timeout=120)[1]
        if rec.returncode not in (0, -signal.SIGINT):
            return {"skipped": f"perf record failed: {err.decode(errors='replace')[-300:]}"}
        counts, other, kw, n_copies = classify(parse(data), t.p.pid, before)
        total = sum(counts.values())
        per = PERIOD_NS / 1e6 / n
        rows = [(ph, counts.get(ph, 0) * per, counts.get(ph, 0) / total if total else 0)
                for ph in ORDER + sorted(set(counts) - set(ORDER))]
        return {"calls": n, "copies": n_copies, "rows": rows, "tree_ms": total * per,
                "cgroup_ms": used / n, "other_ms": other * per, "kworker_ms": kw * per}
    finally:
        if t:
            t.close()
        cg.close()
        subprocess.run(["rm", "-rf", tmp])
