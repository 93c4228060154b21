"""--python-path: host folders of Python packages in the guest.

Importing from a folder, that it is read-only and shows no host path, that
links in it reach no host file, the exit status 2 (naming the folder) for a
missing, unreadable or wrong-version folder, .pth entries outside the folder
reported and not followed, the packages describe names (found inside the
guest), and the rebuild of a cached sandbox when a folder changes.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import AIRLOCK, Mcp, airlock, mcp_call_params, mcp_result_json, run, run_json, tmpdir  # noqa: E402

PYVER = "3.11"  # Debian 12's python3, the guest's libpython


def make_folder(packages=None, mode=0o700):
    """A folder of packages: {relative path: file text}."""
    d = tmpdir()
    for rel, text in (packages or {"mypkg/__init__.py": "X = 42\n"}).items():
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    os.chmod(d, mode)
    return d


def dist_info(name, version, top):
    return {f"{name}-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{name}-{version}.dist-info/top_level.txt": f"{top}\n",
            f"{name}-{version}.dist-info/RECORD": ""}


def test_imports_from_a_folder_at_a_fixed_guest_path():
    d = make_folder()  # 0700, owned by whoever runs the tests
    rc, r = run_json(
        "import mypkg, os, sys\n"
        "print(mypkg.X, mypkg.__file__)\n"
        f"print(os.path.exists({d!r}), any({d!r} in p for p in sys.path))\n",
        "--python-path", d)
    assert rc == 0, r
    assert r["stdout"] == "42 /opt/airlock/pythonpath/0/mypkg/__init__.py\nFalse False\n", r


def test_folders_are_repeatable_and_come_first_in_order():
    a = make_folder({"pa/__init__.py": "N = 'a'\n", "both/__init__.py": "N = 'a'\n"})
    b = make_folder({"pb/__init__.py": "N = 'b'\n", "both/__init__.py": "N = 'b'\n"})
    rc, r = run_json("import pa, pb, both\nprint(pa.N, pb.N, both.N, pb.__file__)",
                     "--python-path", a, "--python-path", b)
    assert rc == 0, r
    assert r["stdout"] == "a b a /opt/airlock/pythonpath/1/pb/__init__.py\n", r


MOUNT_TABLES = ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/1/mountinfo")


def host_paths_in_mount_tables(forbidden):
    """Guest code that prints each mount table line holding one of the
    forbidden strings, then the lines of the --python-path mounts."""
    return (f"bad = {sorted(forbidden)!r}\n"
            f"for p in {MOUNT_TABLES!r}:\n"
            "    for ln in open(p).read().splitlines():\n"
            "        if any(b in ln for b in bad):\n"
            "            print('VISIBLE', p, ln)\n"
            "print(sum('/opt/airlock/pythonpath/' in ln\n"
            "          for ln in open('/proc/self/mountinfo').read().splitlines()))\n")


def test_no_host_path_of_a_folder_in_the_mount_tables():
    """The guest's mountinfo and mounts name neither a folder's host path
    nor any part of it (a bind mount would show the folder's path within
    its file system as the mount's root)."""
    a, b = make_folder(), make_folder({"pb/__init__.py": "N = 'b'\n"})
    forbidden = set()
    for d in (a, b):
        forbidden |= {d, os.path.realpath(d), os.path.basename(d)}
    forbidden.add("airlock-test-")
    rc, r = run_json("import mypkg, pb\n" + host_paths_in_mount_tables(forbidden),
                     "--python-path", a, "--python-path", b)
    assert rc == 0, r
    assert r["stdout"] == "2\n", r["stdout"]


def test_folder_is_read_only():
    d = make_folder()
    code = ("import os\n"
            "for f in (lambda: open('/opt/airlock/pythonpath/0/mypkg/__init__.py', 'w'),\n"
            "          lambda: open('/opt/airlock/pythonpath/0/new.py', 'w'),\n"
            "          lambda: os.chmod('/opt/airlock/pythonpath/0/mypkg', 0o777),\n"
            "          lambda: os.unlink('/opt/airlock/pythonpath/0/mypkg/__init__.py')):\n"
            "    try:\n"
            "        f()\n"
            "        print('written')\n"
            "    except OSError as e:\n"
            "        print(e.errno)\n")
    rc, r = run_json(code, "--python-path", d)
    assert rc == 0, r
    assert r["stdout"] == "30\n30\n30\n30\n", r  # EROFS every time
    with open(os.path.join(d, "mypkg", "__init__.py")) as f:
        assert f.read() == "X = 42\n"
    assert sorted(os.listdir(d)) == ["mypkg"]


def test_links_in_a_folder_reach_no_host_file():
    outside = tmpdir()
    with open(os.path.join(outside, "secret.txt"), "w") as f:
        f.write("host secret\n")
    d = make_folder()
    links = {
        "shadow": "/etc/shadow",
        "passwd": "/etc/passwd",
        "abs_secret": os.path.join(outside, "secret.txt"),
        "rel_secret": os.path.relpath(os.path.join(outside, "secret.txt"), d),
        "up": "../../../../../../../..",
        "work": "/work",
        "root": "/root",
        "sitepkgs": "/usr/lib/python3/dist-packages",
    }
    for name, target in links.items():
        os.symlink(target, os.path.join(d, name))
    code = ("import os\n"
            "base = '/opt/airlock/pythonpath/0/'\n"
            "for name in " + repr(sorted(links)) + ":\n"
            "    try:\n"
            "        with open(base + name) as f:\n"
            "            print(name, 'read', f.read()[:200].replace(chr(10), '|'))\n"
            "    except IsADirectoryError:\n"
            "        print(name, 'dir', sorted(os.listdir(base + name))[:50])\n"
            "    except OSError as e:\n"
            "        print(name, 'error', e.errno)\n")
    rc, r = run_json(code, "--python-path", d)
    assert rc == 0, r
    out = dict(line.split(" ", 1) for line in r["stdout"].splitlines())
    assert "host secret" not in r["stdout"], r["stdout"]
    # Absolute links resolve in the guest's root, which holds no /etc/shadow,
    # no /work, no /root and no host temporary folder.
    for name in ("shadow", "abs_secret", "rel_secret", "work", "root"):
        assert out[name].startswith("error 2"), (name, out[name])
    # The guest's own minimal /etc, not the host's.
    host_passwd = open("/etc/passwd").read()
    assert out["passwd"].startswith("read "), out["passwd"]
    assert out["passwd"][5:] != host_passwd[:200].replace("\n", "|") or \
        host_passwd.count("\n") <= 2, out["passwd"]
    # ../.. stops at the guest's root: its entries, not the host's.
    up = eval(out["up"][4:])
    assert "opt" in up and "input" in up and "work" not in up and "root" not in up, up
    # A link into /usr gives the guest's /usr, which is the system's anyway.
    assert out["sitepkgs"].startswith("dir "), out["sitepkgs"]


def test_missing_folder_exits_2_naming_it():
    missing = os.path.join(tmpdir(), "no", "such", "site-packages")
    f = os.path.join(tmpdir(), "a-file")
    open(f, "w").close()
    for cmd in ("run", "describe", "mcp"):
        for path in (missing, f):
            extra = ["-c", "print(1)"] if cmd == "run" else []
            p = airlock(cmd, "--python-path", path, *extra, input="")
            assert p.returncode == 2, (cmd, path, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and path in lines[0], (cmd, p.stderr)


def test_folder_the_guest_cannot_read_exits_2_naming_it():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("skipped: needs root and setpriv to run airlock as an unprivileged user")
        return
    # Run by an unprivileged user, the guest is that user: a folder it may
    # search but not read, and one it may not enter at all.
    for mode in (0o711, 0o700):
        d = make_folder(mode=mode)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            AIRLOCK, "run", "--python-path", d, "-c", "import mypkg"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (mode, p.returncode, p.stderr)
        assert d in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # As root the guest runs as nobody, and a folder only its owner may read
    # is still readable in the guest (an idmapped mount), and still read-only.
    d = make_folder(mode=0o700)
    os.chmod(os.path.join(d, "mypkg", "__init__.py"), 0o600)
    rc, r = run_json("import os, mypkg\nprint(mypkg.X, os.getuid())", "--python-path", d)
    assert rc == 0 and r["stdout"] == "42 0\n", r


def test_another_python_version_is_one_clear_error():
    base = tmpdir()
    d312 = os.path.join(base, "venv", "lib", "python3.12", "site-packages")
    os.makedirs(os.path.join(d312, "mypkg"))
    open(os.path.join(d312, "mypkg", "__init__.py"), "w").close()
    p = airlock("run", "--python-path", d312, "-c", "import mypkg")
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and d312 in lines[0] and "3.12" in lines[0] and PYVER in lines[0], \
        p.stderr
    # A folder whose path says nothing, holding an extension built for 3.12.
    d = make_folder({"fast/__init__.py": "from ._speed import go\n",
                     "fast/_speed.cpython-312-x86_64-linux-gnu.so": ""})
    for cmd in ("run", "describe"):
        extra = ["-c", "import fast"] if cmd == "run" else []
        p = airlock(cmd, "--python-path", d, *extra)
        assert p.returncode == 2, (cmd, p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert d in lines[0] and "3.12" in lines[0] and PYVER in lines[0], lines[0]
        assert "_speed.cpython-312" in lines[0], lines[0]
    # Extensions for this version, or for the stable ABI, are fine.
    ok = make_folder({"m/__init__.py": "",
                      f"m/_a.cpython-{PYVER.replace('.', '')}-x86_64-linux-gnu.so": "",
                      "m/_b.abi3.so": ""})
    rc, r = run_json("print('ok')", "--python-path", ok)
    assert rc == 0, r


def test_pth_entries_outside_the_folder_are_reported_not_followed():
    outside = tmpdir()
    os.makedirs(os.path.join(outside, "src", "editable_pkg"))
    with open(os.path.join(outside, "src", "editable_pkg", "__init__.py"), "w") as f:
        f.write("X = 'outside'\n")
    d = make_folder({
        "mypkg/__init__.py": "X = 42\n",
        "vendored/inner_pkg/__init__.py": "X = 'inner'\n",
        "__editable__.editable_pkg-1.0.pth": os.path.join(outside, "src") + "\n",
        "relative.pth": "# a comment\n../" + os.path.basename(outside) + "/src\n",
        "inside.pth": "vendored\nimport os; print('pth code ran')\n",
    })
    code = ("import sys\n"
            "import inner_pkg\n"
            "print(inner_pkg.X, inner_pkg.__file__)\n"
            "try:\n"
            "    import editable_pkg\n"
            "    print('followed')\n"
            "except ImportError:\n"
            "    print('not followed')\n")
    p = airlock("run", "--python-path", d, "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("inner /opt/airlock/pythonpath/0/vendored/inner_pkg/__init__.py\n"
                        "not followed\n"), p.stdout
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2, p.stderr
    assert any("__editable__.editable_pkg-1.0.pth" in w and os.path.join(outside, "src") in w
               for w in warnings), warnings
    assert any("relative.pth" in w for w in warnings), warnings
    assert all(d in w and "not followed" in w for w in warnings), warnings
    p = airlock("describe", "--json", "--python-path", d)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["warnings"]) == 2, p.stdout


def host_version(dist):
    """The version Debian's own python3 reports (the guest's interpreter)."""
    p = subprocess.run(["/usr/bin/python3", "-c",
                        f"import importlib.metadata as m; print(m.version({dist!r}))"],
                       capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def test_describe_names_packages_found_inside_the_guest():
    # A notable package only the folder provides, with its own version, and
    # a package of the folder with a distribution of another name.
    d = make_folder({"networkx/__init__.py": "", **dist_info("networkx", "9.9.9", "networkx"),
                     "fancy/__init__.py": "", **dist_info("fancy_dist", "1.2.3", "fancy"),
                     "plainmod.py": ""})
    p = airlock("describe", "--json", "--python-path", d)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    pkgs = {x["name"]: x for x in j["packages"]}
    assert pkgs["networkx"]["version"] == "9.9.9", pkgs  # the guest's, not the host's
    for dist, imp in (("numpy", "numpy"), ("pandas", "pandas"), ("matplotlib", "matplotlib"),
                      ("scipy", "scipy"), ("Pillow", "PIL"), ("sympy", "sympy")):
        v = host_version(dist)
        if v:
            assert pkgs[dist]["version"] == v and pkgs[dist]["import"] == imp, (dist, pkgs)
    assert j["python_path"][0]["path"] == os.path.realpath(d), j["python_path"]
    assert j["python_path"][0]["guest_path"] == "/opt/airlock/pythonpath/0"
    folder = {x["import"]: x for x in j["python_path"][0]["packages"]}
    assert set(folder) == {"networkx", "fancy", "plainmod"}, folder
    assert folder["fancy"]["version"] == "1.2.3" and folder["fancy"]["name"] == "fancy_dist"
    desc = j["description"]
    assert "networkx 9.9.9" in desc, desc
    assert "fancy_dist 1.2.3 (import fancy)" in desc and "plainmod" in desc, desc
    if host_version("numpy"):
        assert f"numpy {host_version('numpy')}" in desc, desc
    if host_version("Pillow"):
        assert "(import PIL)" in desc, desc
    # The text form and the MCP server's tools/list say the same.
    p = airlock("describe", "--python-path", d)
    assert "networkx 9.9.9" in p.stdout and "fancy_dist 1.2.3" in p.stdout, p.stdout
    msgs = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    p = airlock("mcp", "--python-path", d, input="".join(json.dumps(m) + "\n" for m in msgs))
    tools = json.loads(p.stdout.splitlines()[1])["result"]["tools"]
    assert tools[0]["description"] == desc, (tools[0]["description"], desc)


def replace_file(path, text):
    """As pip and dpkg do: a new file renamed over the old one."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def test_a_changed_folder_rebuilds_the_sandbox():
    d = make_folder({"mypkg/__init__.py": "X = 42\n"})
    m = Mcp("--python-path", d, "--preload", "mypkg")
    try:
        code = "import mypkg, os\nprint(mypkg.X, os.getppid())"
        first = m.run(code)
        assert first["stdout"].startswith("42 "), first
        # A preloaded module rewritten (pip install --upgrade): the next run
        # must not get the template's old copy of it.
        replace_file(os.path.join(d, "mypkg", "__init__.py"), "X = 43\n")
        second = m.run(code)
        assert second["stdout"].startswith("43 "), second
        # A new package installed next to it, with its dist-info.
        os.makedirs(os.path.join(d, "newpkg"))
        for rel, text in {"newpkg/__init__.py": "Y = 7\n",
                          **dist_info("newpkg", "0.1", "newpkg")}.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        third = m.run("import newpkg, importlib.metadata as md\n"
                      "print(newpkg.Y, md.version('newpkg'))")
        assert third["stdout"] == "7 0.1\n", third
        # Unchanged: the same sandbox serves again (no rebuild, same answer).
        assert m.run(code)["stdout"].startswith("43 ")
    finally:
        m.close()


if __name__ == "__main__":
    run()
