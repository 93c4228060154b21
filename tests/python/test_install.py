"""`pip install --no-build-isolation ./python` into a virtualenv that sees
Debian's packages, without network, then the package used from outside
the tree."""
import os
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
