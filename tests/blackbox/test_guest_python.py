"""Black-box tests of the guest as a real Python, against Debian's own
numpy, pandas, matplotlib, scipy and PIL: the stack imports and computes,
the guest's /etc holds what the libraries need and nothing of the host's
identity, preloaded copies keep BLAS working (netlib and OpenBLAS) and
reseed numpy, a run ends as `python3 script.py` does, and matplotlib
figures come back as PNG files.

Several tests switch the machine's BLAS alternative (as root, when both
Debian's netlib BLAS and libopenblas0-pthread are installed) and restore
it afterwards, whatever happens, holding the machine lock exclusively
(harness.machine_lock): tests of other checkouts that rely on the
machine's OpenBLAS hold it shared, and wait."""
import base64
import contextlib
import io
import json
import os
import subprocess
import time

from harness import (AIRLOCK, airlock, machine_lock, mcp, mcp_call_params, mcp_result_json, run,
                     run_json, tmpdir)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HERE = os.path.dirname(os.path.abspath(__file__))
SALES = os.path.join(HERE, "..", "..", "examples", "sales")


def ok(r):
    assert r["status"] == "ok" and r["exit_code"] == 0, (r["status"], r["stderr"][-3000:])
    return r


def file_data(r, path):
    for f in r["files"]:
        if f["path"] == path:
            return base64.b64decode(f["data_base64"])
    raise AssertionError(f"{path} not returned: {[f['path'] for f in r['files']]}")


# ---- the BLAS configurations ---------------------------------------------

ALT = {"libblas.so.3-x86_64-linux-gnu": {
           "netlib": "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3",
           "openblas": "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"},
       "liblapack.so.3-x86_64-linux-gnu": {
           "netlib": "/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3",
           "openblas": "/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so.3"}}


def alternative_state(name):
    q = subprocess.run(["update-alternatives", "--query", name], capture_output=True, text=True)
    status = value = None
    for line in q.stdout.splitlines():
        if line.startswith("Status:"):
            status = line.split(":", 1)[1].strip()
        elif line.startswith("Value:"):
            value = line.split(":", 1)[1].strip()
    return status, value


def blas_configurations():
    """Yields "netlib" and "openblas" with the machine switched to each,
    where it can be; else the machine's configuration as it is. The
    machine lock (harness.machine_lock) is held exclusively throughout."""
    with machine_lock(exclusive=True):
        yield from _blas_configurations()


def _blas_configurations():
    can_switch = (os.geteuid() == 0 and all(os.path.exists(p) for a in ALT.values()
                                            for p in a.values()))
    if not can_switch:
        print("  (BLAS: cannot switch alternatives here: testing the current one only)")
        yield "current"
        return
    saved = {name: alternative_state(name) for name in ALT}
    try:
        for kind in ("netlib", "openblas"):
            for name, paths in ALT.items():
                subprocess.run(["update-alternatives", "--set", name, paths[kind]], check=True,
                               capture_output=True)
            yield kind
    finally:
        for name, (status, value) in saved.items():
            if status == "auto":
                subprocess.run(["update-alternatives", "--auto", name], capture_output=True)
            elif value:
                subprocess.run(["update-alternatives", "--set", name, value],
                               capture_output=True)


def expected_product():
    """c = a @ a.T for a = arange(90000).reshape(300, 300) / 1000, exactly:
    c[0, 0] and the sum of c (the sum over k of the k-th column sum,
    squared), in integers scaled by 1e6."""
    c00 = sum(k * k for k in range(300))
    total = sum(sum(300 * i + k for i in range(300)) ** 2 for k in range(300))
    return c00 / 1e6, total / 1e6


BLAS_CODE = r'''
import numpy as np, scipy.linalg
a = np.arange(90000, dtype=float).reshape(300, 300) / 1000
c = a @ a.T
x = scipy.linalg.solve(np.array([[3.0, 1.0], [1.0, 2.0]]), np.array([9.0, 8.0]))
maps = open("/proc/self/maps").read()
threads = int(open("/proc/self/status").read().split("Threads:")[1].split()[0])
print(repr(float(c[0, 0])), repr(float(c.sum())), ",".join(map(str, x)),
      "openblas" if "openblas" in maps else "netlib", threads, repr(float(np.random.rand())))
'''


def check_blas_runs(m, kind, pids, runs=3):
    c00, total = expected_product()
    randoms = []
    for _ in range(runs):
        r = ok(m.run(BLAS_CODE))
        got00, gotsum, x, loaded, threads, rnd = r["stdout"].split(" ", 5)
        assert abs(float(got00) - c00) <= 1e-9 * c00, (got00, c00)
        assert abs(float(gotsum) - total) <= 1e-9 * total, (gotsum, total)
        assert [float(v) for v in x.split(",")] == [2.0, 3.0], r["stdout"]
        if kind != "current":
            assert loaded == kind, (loaded, kind)
        assert int(threads) <= pids, (threads, pids)
        randoms.append(float(rnd.split()[-1]))
    assert len(set(randoms)) == runs, randoms


def test_blas_in_preloaded_copies():
    """numpy and scipy preloaded into the template: in every copy a 300x300
    product is right, does not hang (a hang ends as a timeout and fails),
    keeps within --pids, and np.random differs from run to run; with
    Debian's netlib BLAS and with OpenBLAS's thread pool."""
    for kind in blas_configurations():
        with mcp("--preload", "numpy,scipy.linalg", "--timeout", "60", "--pids", "16") as m:
            check_blas_runs(m, kind, 16)
        # One thread at most: BLAS then runs on the calling thread alone.
        with mcp("--preload", "numpy", "--timeout", "60", "--pids", "1") as m:
            check_blas_runs(m, kind, 1, runs=2)
        # Not preloaded: each copy loads BLAS itself.
        with mcp("--timeout", "60") as m:
            check_blas_runs(m, kind, 64, runs=2)


def test_numpy_reseeded_in_every_copy():
    # Every stream a copy draws from is its own: numpy's legacy global
    # state (uniform, integer and the Gaussian, which the legacy state
    # caches in pairs), a Generator made there, and the random module.
    # Copies prepared back to back and copies a call waited for alike.
    with mcp("--preload", "numpy,pandas,matplotlib.pyplot") as m:
        code = ("import numpy as np, random\n"
                "print(np.random.rand(), np.random.randint(1 << 30), np.random.randn(),"
                " np.random.default_rng().random(), random.random())")
        outs = [ok(m.run(code))["stdout"] for _ in range(6)]
    columns = list(zip(*(o.split() for o in outs)))
    assert len(columns) == 5, outs
    for column in columns:
        assert len(set(column)) == len(column), outs


# ---- the stack ----------------------------------------------------------

def test_scientific_stack_computes():
    code = r'''
import numpy as np, pandas as pd, scipy, scipy.integrate, scipy.optimize, scipy.stats
import PIL, PIL.Image
import matplotlib
import matplotlib.pyplot as plt

df = pd.read_csv("/input/sales.csv")
df["revenue"] = df.units * df.unit_price
by = df.groupby("region").revenue.sum().round(2)
print("pandas", by.to_dict())
q, _ = scipy.integrate.quad(lambda t: t * t, 0, 3)
root = scipy.optimize.brentq(lambda t: t * t - 2, 0, 2)
print("scipy", round(q, 9), round(root, 9), round(float(scipy.stats.norm.cdf(0)), 9))
img = PIL.Image.new("RGB", (8, 4), (10, 20, 30))
img.save("/output/img.png")
back = PIL.Image.open("/output/img.png")
print("pil", back.size, back.getpixel((3, 2)))
fig, ax = plt.subplots()
ax.set_title("Revenue by region")
ax.bar(by.index, by.values)
fig.canvas.draw()
print("mpl", matplotlib.get_backend() in ("agg", "module://_airlock_figures"),
      fig.canvas.get_renderer() is not None)
fig.savefig("/output/chart.png")
print("eig", sorted(np.round(np.linalg.eigvalsh(np.array([[2.0, 1.0], [1.0, 2.0]])), 9)))
'''
    rc, r = run_json(code, "-w", SALES, "--timeout", "120")
    assert rc == 0, r["stderr"][-3000:]
    out = r["stdout"]
    assert "pandas {'east': 165.3, 'north': 231.6, 'south': 135.2, 'west': 272.6}" in out, out
    assert "scipy 9.0 1.414213562 0.5" in out, out
    assert "pil (8, 4) (10, 20, 30)" in out, out
    assert "mpl True True" in out, out
    assert "eig [1.0, 3.0]" in out, out
    assert file_data(r, "/output/chart.png").startswith(PNG_MAGIC)
    # Nothing of the stack complained on its way (fonts, caches, BLAS).
    assert r["stderr"] == "", r["stderr"]


def test_matplotlib_finds_its_fonts():
    code = r'''
import matplotlib.font_manager as fm, subprocess
path = fm.findfont("DejaVu Sans", fallback_to_default=False)
print(path, open(path, "rb").read(4) == b"\x00\x01\x00\x00")
print(subprocess.run(["fc-match", "sans-serif"], capture_output=True, text=True).stdout)
'''
    rc, r = run_json(code, "--timeout", "120")
    assert rc == 0, r["stderr"]
    assert "DejaVuSans.ttf True" in r["stdout"], r["stdout"]
    # fontconfig reads the guest's /etc/fonts and its links into /usr.
    assert "DejaVu" in r["stdout"].splitlines()[1], r["stdout"]
    assert "Fontconfig" not in r["stderr"] and "warn" not in r["stderr"].lower(), r["stderr"]


def test_font_list_built_once_in_the_template():
    """The template builds matplotlib's font list once, in a read-only
    cache; a run that imports matplotlib copies it in and never rebuilds
    it (matplotlib logs "generated new fontManager" when it does)."""
    with mcp("--timeout", "120") as m:
        probe = ("import os\nd = '/cache/matplotlib'\n"
                 "print(any(n.startswith('fontlist-') for n in os.listdir(d)) "
                 "if os.path.isdir(d) else False)")
        for _ in range(240):
            r = ok(m.run(probe))
            if r["stdout"] == "True\n":
                break
            time.sleep(0.5)
        assert r["stdout"] == "True\n", "the template never built the font list"
        code = r'''
import logging, os
logging.basicConfig(level=logging.INFO)
import matplotlib.font_manager
print(sorted(os.listdir(matplotlib.get_cachedir())))
try:
    open("/cache/matplotlib/x", "w")
    print("cache writable")
except OSError as e:
    print("cache read-only", e.errno)
'''
        r = ok(m.run(code))
        assert "generated new fontManager" not in r["stderr"], r["stderr"]
        assert "fontlist-v" in r["stdout"], r["stdout"]
        assert "cache read-only 30" in r["stdout"], r["stdout"]  # EROFS


# ---- what the guest sees of /etc -----------------------------------------

ETC_CODE = r'''
import os, json
seen = {}
for top, dirs, files in os.walk("/etc"):
    for n in dirs + files:
        p = os.path.join(top, n)
        if os.path.islink(p):
            seen[p] = [os.readlink(p), os.path.realpath(p), os.path.exists(p)]
print(json.dumps({"top": sorted(os.listdir("/etc")), "links": seen,
                  "alternatives": sorted(os.listdir("/etc/alternatives")),
                  "passwd": open("/etc/passwd").read(), "hostname": open("/etc/hostname").read()}))
'''

EXPOSED_ETC = {"alternatives", "fonts", "group", "hostname", "hosts", "ld.so.cache", "localtime",
               "matplotlibrc", "mime.types", "nsswitch.conf", "passwd"}
SECRETS = {"shadow", "gshadow", "ssh", "machine-id", "resolv.conf", "sudoers", "subuid",
           "subgid", "ssl", "environment", "crontab", "hostid", "adjtime", "apt", "docker"}


def test_etc_holds_what_libraries_need_and_no_host_identity():
    # The machine's /etc/alternatives as configured, without the links
    # another checkout's test_etc_links_that_leave_the_exposed_set_are_dropped
    # plants there for a while (a dangling one among them).
    with machine_lock():
        rc, r = run_json(ETC_CODE)
    assert rc == 0, r["stderr"]
    v = json.loads(r["stdout"])
    top = set(v["top"])
    assert top == EXPOSED_ETC, top ^ EXPOSED_ETC
    assert not top & SECRETS
    # airlock's own account files and host name, not the host's.
    assert v["passwd"].startswith("root:x:0:0:sandbox:") and v["passwd"].count("\n") == 2
    assert v["hostname"] == "airlock\n"
    # The BLAS and LAPACK alternatives, and only shared libraries.
    assert "libblas.so.3-x86_64-linux-gnu" in v["alternatives"], v["alternatives"]
    assert "liblapack.so.3-x86_64-linux-gnu" in v["alternatives"], v["alternatives"]
    assert all(".so" in n for n in v["alternatives"]), v["alternatives"]
    # Every link resolves, and into the exposed set.
    assert v["links"], "no links in the guest's /etc"
    for path, (target, real, exists) in v["links"].items():
        assert exists, (path, target)
        assert real.startswith(("/usr/", "/etc/")), (path, target, real)


def test_etc_links_that_leave_the_exposed_set_are_dropped():
    """Links planted in the host's /etc/alternatives: one into /usr is
    copied, those into a host path the guest cannot see (absolute, relative
    or through the host's /proc) are not."""
    if os.geteuid() != 0:
        print("  (not root: cannot plant links in /etc/alternatives)")
        return
    tag = f"airlock-test-{os.getpid()}"
    secret = f"/root/.{tag}-secret"
    planted = {f"lib{tag}-ok.so.1": "/usr/lib/os-release",
               f"lib{tag}-abs.so.1": secret,
               f"lib{tag}-rel.so.1": f"../../root/.{tag}-secret",
               f"lib{tag}-proc.so.1": "/proc/self/environ",
               f"lib{tag}-chain.so.1": f"lib{tag}-abs.so.1",
               f"lib{tag}-dangling.so.1": "/usr/lib/airlock-no-such-file"}
    with open(secret, "w") as f:
        f.write("host secret\n")
    try:
        with machine_lock(exclusive=True):
            for name, target in planted.items():
                os.symlink(target, os.path.join("/etc/alternatives", name))
            code = ("import os\nfor n in sorted(os.listdir('/etc/alternatives')):\n"
                    f"    if {tag!r} in n: print(n, open('/etc/alternatives/' + n).read()[:4])")
            rc, r = run_json(code)
        assert rc == 0, r["stderr"]
        assert r["stdout"].splitlines() == [f"lib{tag}-ok.so.1 PRET"], r["stdout"]
        assert "host secret" not in r["stdout"]
    finally:
        for name in planted:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join("/etc/alternatives", name))
        os.unlink(secret)


# ---- how a run ends --------------------------------------------------------

def test_unclosed_files_come_back_whole():
    code = r'''
import gzip, zipfile
f = open("/output/unclosed.txt", "w"); f.write("line\n" * 3)
b = open("/output/unclosed.bin", "wb"); b.write(b"\x00" * 10)
z = zipfile.ZipFile("/output/a.zip", "w"); z.writestr("x.txt", "zipped")
g = gzip.open("/output/b.gz", "wt"); g.write("gzipped")
class Holder: pass
h = Holder(); h.f = open("/output/held.txt", "w"); h.f.write("held")
'''
    rc, r = run_json(code)
    assert rc == 0, r["stderr"]
    assert file_data(r, "/output/unclosed.txt") == b"line\n" * 3
    assert file_data(r, "/output/unclosed.bin") == b"\x00" * 10
    assert file_data(r, "/output/held.txt") == b"held"
    import gzip
    import zipfile
    assert zipfile.ZipFile(io.BytesIO(file_data(r, "/output/a.zip"))).read("x.txt") == b"zipped"
    assert gzip.decompress(file_data(r, "/output/b.gz")) == b"gzipped"


def test_atexit_handlers_run_in_order_and_keep_the_exit_status():
    code = r'''
import atexit, sys
atexit.register(lambda: print("registered first, runs last"))
atexit.register(lambda: open("/output/atexit.txt", "w").write("ran"))
def broken():
    raise ValueError("broken handler")
atexit.register(broken)
print("body")
sys.exit(3)
'''
    rc, r = run_json(code)
    assert rc == 1 and r["exit_code"] == 3 and r["status"] == "error", r
    assert r["stdout"] == "body\nregistered first, runs last\n", r["stdout"]
    assert file_data(r, "/output/atexit.txt") == b"ran"
    # As CPython prints it, and the status stays the code's own.
    assert "Exception ignored in atexit callback" in r["stderr"], r["stderr"]
    assert "ValueError: broken handler" in r["stderr"], r["stderr"]
    rc, r = run_json("import atexit\natexit.register(lambda: 1 / 0)\nprint('fine')")
    assert rc == 0 and r["status"] == "ok", r
    assert "ZeroDivisionError" in r["stderr"], r["stderr"]


def test_atexit_that_never_returns_is_a_timeout():
    code = ("import atexit\nopen('/output/before.txt', 'w').write('x')\n"
            "def forever():\n    while True: pass\natexit.register(forever)\nprint('body')")
    rc, r = run_json(code, "--timeout", "2")
    assert rc == 1 and r["status"] == "timeout", r
    # What the code printed is flushed before the handlers run.
    assert r["stdout"] == "body\n", r["stdout"]


def test_atexit_runs_in_preloaded_copies():
    with mcp("--preload", "numpy,pandas,matplotlib.pyplot") as m:
        for i in range(2):
            r = ok(m.run(f"import atexit\natexit.register(lambda: print('bye {i}'))\n"
                         f"f = open('/output/n.txt', 'w'); f.write('{i}')"))
            assert r["stdout"] == f"bye {i}\n", r
            assert file_data(r, "/output/n.txt") == str(i).encode()


# ---- figures ------------------------------------------------------------

def test_figure_shown_comes_back_once_without_warning():
    code = ("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
            "print(len(plt.get_fignums()))")
    rc, r = run_json(code, "--timeout", "120")
    assert rc == 0, r["stderr"]
    assert r["stdout"] == "0\n", r["stdout"]  # show() closed it, as a script's does
    assert [f["path"] for f in r["files"]] == ["/output/figure-1.png"], r["files"]
    assert r["files"][0]["media_type"] == "image/png"
    assert file_data(r, "/output/figure-1.png").startswith(PNG_MAGIC)
    assert r["stderr"] == "", r["stderr"]  # no "cannot show the figure" warning


def test_open_figures_come_back_and_saved_ones_are_not_repeated():
    code = r'''
import matplotlib.pyplot as plt
plt.figure(); plt.plot([1, 2]); plt.savefig("/output/mine.png")   # saved by the code
plt.figure(); plt.plot([2, 1])                                     # left open
fig = plt.figure(); plt.bar([1, 2], [3, 4])                        # left open
open("/output/figure-1.png", "w").write("the code's own file")
'''
    rc, r = run_json(code, "--timeout", "120")
    assert rc == 0, r["stderr"]
    paths = [f["path"] for f in r["files"]]
    assert paths == ["/output/figure-1.png", "/output/figure-2.png", "/output/figure-3.png",
                     "/output/mine.png"], paths
    assert file_data(r, "/output/figure-1.png") == b"the code's own file"
    for p in ("/output/figure-2.png", "/output/figure-3.png", "/output/mine.png"):
        assert file_data(r, p).startswith(PNG_MAGIC), p


def test_relative_paths_land_in_output_and_unsaved_figures_still_come_back():
    # The working directory is /output: a file written by a relative name
    # comes back. A savefig into a buffer (or outside /output) returns
    # nothing, so that figure still comes back by itself.
    code = r'''
import io
import matplotlib.pyplot as plt
import pandas as pd
plt.figure(); plt.plot([1, 2]); plt.savefig("chart.png")
pd.DataFrame({"a": [1, 2]}).to_csv("result.csv", index=False)
plt.figure(); plt.plot([2, 1]); plt.savefig(io.BytesIO(), format="png")
plt.figure(); plt.plot([3, 1]); plt.savefig("/tmp/elsewhere.png")
'''
    rc, r = run_json(code, "--timeout", "120")
    assert rc == 0, r["stderr"]
    paths = [f["path"] for f in r["files"]]
    assert paths == ["/output/chart.png", "/output/figure-1.png", "/output/figure-2.png",
                     "/output/result.csv"], paths
    assert file_data(r, "/output/result.csv") == b"a\n1\n2\n"
    for p in ("/output/chart.png", "/output/figure-1.png", "/output/figure-2.png"):
        assert file_data(r, p).startswith(PNG_MAGIC), p


def test_figures_come_back_over_mcp_as_images_from_preloaded_copies():
    with mcp("--preload", "numpy,pandas,matplotlib.pyplot", "--timeout", "120") as m:
        for _ in range(2):
            res = m.call("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
                         "plt.plot([3, 1])")
            images = [c for c in res["content"] if c["type"] == "image"]
            assert len(images) == 2, res["content"]
            assert all(c["mimeType"] == "image/png" for c in images)
            assert base64.b64decode(images[0]["data"]).startswith(PNG_MAGIC)


def test_figures_after_an_exception_still_come_back():
    rc, r = run_json("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nraise KeyError('k')",
                     "--timeout", "120")
    assert rc == 1 and "KeyError" in r["stderr"]
    assert [f["path"] for f in r["files"]] == ["/output/figure-1.png"], r["files"]


def test_no_auto_figures():
    code = ("import matplotlib, matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
            "plt.figure(); plt.plot([2, 1])\nprint(matplotlib.get_backend())")
    rc, r = run_json(code, "--no-auto-figures", "--timeout", "120")
    assert rc == 0, r["stderr"]
    assert r["stdout"] == "agg\n", r["stdout"]
    assert r["files"] == [], r["files"]


def test_matplotlib_is_not_imported_by_runs_that_do_not_use_it():
    rc, r = run_json("import sys, os\nprint('matplotlib' in sys.modules, os.environ['MPLBACKEND'])")
    assert rc == 0, r["stderr"]
    assert r["stdout"] == "False module://_airlock_figures\n", r["stdout"]


def test_description_tells_the_model_about_figures():
    on = airlock("describe")
    off = airlock("describe", "--no-auto-figures")
    assert on.returncode == 0 and off.returncode == 0, (on.stderr, off.stderr)
    assert "plt.show()" in on.stdout and "PNG" in on.stdout, on.stdout
    assert "plt.show()" not in off.stdout, off.stdout


def test_the_guest_process_holds_no_http_server_library():
    """The template is the airlock program executed again, and every
    library the program is linked with is loaded (and relocated) in it
    before a sandbox can start. libmicrohttpd, which only `airlock serve`
    needs, is opened by that command alone (src/mcp/http/mhd.c): neither it nor
    the TLS libraries it brings are in a run's process."""
    rc, r = run_json("print(open('/proc/self/maps').read())")
    assert rc == 0, r["stderr"]
    for lib in ("libmicrohttpd", "libgnutls", "libp11-kit"):
        assert lib not in r["stdout"], (lib, r["stdout"][-2000:])
    # The libraries the guest does need are still there.
    assert "libpython3" in r["stdout"], r["stdout"][-2000:]


def test_only_the_template_loads_libpython():
    """The command never runs Python: neither it nor libairlock.so links
    libpython. The template loads it with the guest module, which the
    program carries and the template opens from a memfd (guest_load.c), so
    that the guest's maps name no host path of it."""
    build = os.path.dirname(os.path.realpath(AIRLOCK))
    for f in (AIRLOCK, os.path.join(build, "libairlock.so")):
        d = subprocess.run(["readelf", "-d", f], stdout=subprocess.PIPE, text=True, check=True)
        assert "NEEDED" in d.stdout and "libpython" not in d.stdout, (f, d.stdout)
    rc, r = run_json("print(open('/proc/self/maps').read())")
    assert rc == 0, r["stderr"]
    assert "/memfd:airlock-guest (deleted)" in r["stdout"], r["stdout"][-2000:]
    assert "airlock-guest.so" not in r["stdout"], r["stdout"][-2000:]


if __name__ == "__main__":
    run()
