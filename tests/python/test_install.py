"""`pip install --no-build-isolation ./python` into a virtualenv that sees
Debian's packages, without network, then the package used from outside
the tree."""
import ast
import os
import shutil
import subprocess
import sys

from conftest import ROOT


def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
                        os.path.join(ROOT, "python")], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    code = ("import airlock, sys; assert 'site-packages' in airlock.__file__, airlock.__file__\n"
            "print(airlock.Sandbox().run('print(6 * 7)').stdout, end='')")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "42\n"


def _dynamic(path):
    """readelf -d of a file: {tag: [values]} for RUNPATH, RPATH and NEEDED."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True,
                         check=True).stdout
    tags = {}
    for line in out.splitlines():
        for tag in ("RUNPATH", "RPATH", "NEEDED"):
            if f"({tag})" in line:
                tags.setdefault(tag, []).append(line.split("[", 1)[1].rsplit("]", 1)[0])
    return tags


def test_pip_install_after_make_install_uses_the_installed_library(tmp_path):
    """pip install ./python after `make install`: the module is built against
    pkg-config's library (its libdir as the run path, its bin/airlock as the
    template), even where python/build holds a module built before against
    the checkout's library, which setuptools would have reused."""
    build = os.path.abspath(os.environ.get("AIRLOCK_BUILD", os.path.join(ROOT, "build")))
    src = tmp_path / "python"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("*.so", "*.egg-info", "build", "__pycache__"))
    # The stale build: what `make python` leaves in python/build.
    env = dict(os.environ, AIRLOCK_BUILD=build)
    env.pop("PYTHONPATH", None)
    subprocess.run(["/usr/bin/python3", "-W", "ignore", "setup.py", "-q", "build_ext"],
                   cwd=src, env=env, check=True, capture_output=True, timeout=600)
    stale = list((src / "build").glob("lib.*/airlock/_airlock*.so"))
    assert stale and build in _dynamic(stale[0]).get("RUNPATH", [""])[0], stale

    prefix = tmp_path / "prefix"
    r = subprocess.run(["make", "--no-print-directory", "-s", "-C", ROOT, "install",
                        f"BUILD={os.path.relpath(build, ROOT)}", f"PREFIX={prefix}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr

    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    for k in ("PYTHONPATH", "AIRLOCK_BUILD", "AIRLOCK_TEMPLATE_PROGRAM", "LD_LIBRARY_PATH"):
        env.pop(k, None)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
                        str(src)], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    mods = list(venv.glob("lib/python3*/site-packages/airlock/_airlock*.so"))
    assert len(mods) == 1, mods
    tags = _dynamic(mods[0])
    assert "libairlock.so.0" in tags.get("NEEDED", []), tags
    assert tags.get("RUNPATH") == [str(prefix / "lib")], tags
    blob = mods[0].read_bytes()
    assert build.encode() not in blob, "the installed module names the checkout's build"
    assert str(prefix / "bin" / "airlock").encode() in blob, "not the installed template program"
    # The installed library is the one loaded, and it runs code.
    code = ("import airlock\n"
            "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'libairlock' in l}\n"
            "print(sorted(libs))\n"
            "print(airlock.Sandbox().run('print(6 * 7)').stdout, end='')")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    libs, out = r.stdout.split("\n", 1)
    libs = ast.literal_eval(libs)
    assert libs and all(p.startswith(f"{prefix / 'lib'}/libairlock.so.") for p in libs), libs
    assert out == "42\n"
