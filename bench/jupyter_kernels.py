"""The Jupyter client side that bench_kernel.py and bench_session.py share:
Jupyter folders of the benchmark's own (nothing of the machine's Jupyter is
read or written), kernelspecs for airlock's kernel and for Debian's
ipykernel run by Debian's Python, a kernel started until its
kernel_info_reply, one execute round trip through jupyter_client, and the
PSS of a process tree.

Importing this module sets JUPYTER_*_DIR to a temporary folder; home()
names it, cleanup() removes it."""
import json
import os
import shutil
import subprocess
import tempfile
import time

_HOME = tempfile.mkdtemp(prefix="airlock-bench-jupyter-")
os.environ["JUPYTER_DATA_DIR"] = os.path.join(_HOME, "data")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(_HOME, "runtime")
os.environ["JUPYTER_CONFIG_DIR"] = os.path.join(_HOME, "config")
os.environ["JUPYTER_PATH"] = ""
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

# The kernelspec of Debian's ipykernel that install_ipykernel() writes.
IPYKERNEL = "bench-ipykernel"


def home():
    return _HOME


def cleanup():
    shutil.rmtree(_HOME, ignore_errors=True)


def available():
    """Whether jupyter_client (python3-jupyter-client) can be imported."""
    try:
        import jupyter_client  # noqa: F401
        return True
    except ImportError:
        return False


def install_airlock(airlock, name, *options):
    """`airlock kernel install --user --name NAME OPTIONS...` into the
    benchmark's folders."""
    subprocess.run([airlock, "kernel", "install", "--user", "--name", name, *options],
                   check=True, capture_output=True)


def install_ipykernel():
    """Debian's ipykernel, by Debian's Python (not whatever python3 is first
    on PATH), as kernelspec IPYKERNEL."""
    d = os.path.join(_HOME, "data", "kernels", IPYKERNEL)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
                            "{connection_file}"], "display_name": "ipykernel",
                   "language": "python"}, f)


def start(name):
    """Starts kernelspec name; returns (manager, client, ms until its
    kernel_info_reply)."""
    from jupyter_client.manager import KernelManager
    t = time.perf_counter()
    km = KernelManager(kernel_name=name)
    km.start_kernel(stderr=subprocess.DEVNULL)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)  # kernel_info_reply
    return km, kc, (time.perf_counter() - t) * 1000


def stop(km, kc):
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def round_trip(kc, code):
    """One execute_request until its reply and the kernel's idle status, as
    a notebook waits for a cell (allow_stdin true, as a notebook's): in
    milliseconds. The cell must succeed and must not read its input."""
    t = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: None)
    ms = (time.perf_counter() - t) * 1000
    assert reply["content"]["status"] == "ok", reply["content"]
    return ms


def tree(root):
    """root and every process under it."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def active_pid(km, kc):
    """The host pid of an airlock kernel's session interpreter: the process
    under the kernel whose pid in its own namespace a cell prints."""
    out = []
    kc.execute_interactive("import os; print(os.getpid())", timeout=120,
                           output_hook=lambda m: out.append(m["content"].get("text", ""))
                           if m["msg_type"] == "stream" else None)
    ns = "".join(out).strip()
    found = []
    for pid in tree(km.provisioner.process.pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                ids = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
        except (OSError, IndexError):
            continue
        if ids[-1] == ns:
            found.append((len(ids), pid))
    if not found:
        raise RuntimeError(f"no process with pid {ns} under the kernel")
    # The session's own PID namespace is the innermost.
    return max(found)[1]


def minflt(pid):
    """The minor faults of pid so far (MADV_POPULATE_WRITE counts one a
    page)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def tree_pss_kib(root):
    """The sum of the Pss of root and every process under it, in KiB."""
    total = 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total
