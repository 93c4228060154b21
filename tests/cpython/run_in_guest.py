"""CPython's own tests (Debian's libpython3.11-testsuite), run inside the guest
with `python -m test`'s own machinery (test.libregrtest), one `airlock run` per
test module, so that the guest's interpreter is held to the standard library's
own expectations of a Python on Linux.

MODULES lists the modules run and, for a few, the tests of them that are run
(`-m` patterns). SKIPPED lists each test left out inside the guest, with the
isolation that requires it; the guest's documented differences from python3
are in docs/design.md ("Inside the sandbox"). A test is never skipped because
it is slow or flaky here: the list is what isolation takes away.

Usage: AIRLOCK=build/airlock /usr/bin/python3 tests/cpython/run_in_guest.py [MODULE...|--list]
(tests/run.sh runs each module as a job of its own.)
Prints one line per module and "cpython: N passed, N failed" (tests/run.sh).
"""
import json
import os
import subprocess
import sys
import time

AIRLOCK = os.environ.get("AIRLOCK") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "airlock")

# Why a test cannot pass in the guest, by the isolation that takes it away.
NO_INET = "no AF_INET/AF_INET6 socket in the guest (seccomp: HTTP goes through the host)"
NO_EXEC_TMP = "/tmp is mounted noexec in the guest: nothing the code writes can be executed"
NO_IDS = ("the guest's user namespace maps one uid and gid (0), without capabilities: no "
          "switch to another user or group")
NO_SYMFOLLOW = ("/tmp is mounted nosymfollow in the guest: a link made there is never "
                "followed (ELOOP)")
STDLIB_FIRST = ("the guest's sys.path starts with the standard library (read-only), not the "
                "working directory: the test writes modules into sys.path[0]")
# (module, patterns of the tests to run (-m), or None for all of them)
MODULES = [
    ("test_json", None),
    ("test_csv", None),
    ("test_decimal", None),
    ("test_locale", None),
    ("test_signal", None),
    ("test_traceback", None),
    ("test_inspect", None),
    ("test_linecache", None),
    # The thread pools, the module's own machinery, and the process pools
    # of the three start methods (on the run's /dev/shm).
    ("test_concurrent_futures", ["*ThreadPool*", "*FutureTests*", "*WaitTests*",
                                 "*ProcessPoolFork[A-Z]*", "*ProcessPoolSpawn*",
                                 "*ProcessPoolForkserver*"]),
    ("test_subprocess", None),
    ("test_threading", None),
    ("test_time", None),
    ("test_sys", None),
    ("test_statistics", None),
    ("test_pickle", None),
    ("test_re", None),
    ("test_zipfile", None),
    ("test_tempfile", None),
    ("test_tarfile", None),
    ("test_pty", None),
    ("test_openpty", None),
]
# Not run: test_os, test_shutil and test_pathlib follow links they make in
# /tmp (NO_SYMFOLLOW) in dozens of tests, and shutil.which's tests run
# files they write there (NO_EXEC_TMP).

# Test ids (fnmatch patterns, as regrtest's -i takes them) left out, and why.
SKIPPED = {
    "test.test_signal.WakeupFDTests.test_invalid_socket": NO_INET,
    "test.test_signal.WakeupFDTests.test_set_wakeup_fd_socket_result": NO_INET,
    "test.test_pickle.*.test_unpickle_module_race": STDLIB_FIRST,
    "test.test_tempfile.TestTemporaryDirectory.test_cleanup_with_symlink_modes": NO_SYMFOLLOW,
    "test.test_tarfile.*.test_extract_hardlink": NO_SYMFOLLOW,
    "test.test_subprocess.POSIXProcessTestCase.test_args_string": NO_EXEC_TMP,
    "test.test_subprocess.POSIXProcessTestCase.test_call_string": NO_EXEC_TMP,
    "test.test_subprocess.POSIXProcessTestCase.test_user": NO_IDS,
    "test.test_subprocess.POSIXProcessTestCase.test_group": NO_IDS,
}

# Generous limits: the suites start processes and threads, and some write
# large temporary files in /tmp (the working directory).
LIMITS = ["--timeout", "600", "--memory", "2048", "--pids", "256", "--max-stdout", "4096"]


def guest_code(module, match):
    argv = ["-W", "--timeout", "300"]
    for pattern in match or ():
        argv += ["-m", pattern]
    for pattern in SKIPPED:
        if pattern.startswith(f"test.{module}."):
            argv += ["-i", pattern]
    argv.append(module)
    # Guarded, as `python -m test` is: the children of the spawn and
    # forkserver start methods run the main script again (as __mp_main__).
    return ("import sys\n"
            "if __name__ == '__main__':\n"
            f"    sys.argv = ['python -m test'] + {argv!r}\n"
            "    from test.libregrtest.main import main\n"
            "    main()\n")


def run_module(module, match):
    t = time.monotonic()
    p = subprocess.run([AIRLOCK, "run", "--json", *LIMITS, "-c", guest_code(module, match)],
                       capture_output=True, text=True, timeout=900)
    took = time.monotonic() - t
    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        return False, took, f"not JSON (rc {p.returncode}): {p.stdout[-500:]!r} {p.stderr[-500:]!r}"
    out = r["stdout"] + r["stderr"]
    passed = r["status"] == "ok" and "Tests result: SUCCESS" in out
    return passed, took, out


def main():
    wanted = sys.argv[1:]
    if wanted == ["--list"]:
        print("\n".join(m for m, _ in MODULES))
        return 0
    n_ok = n_bad = 0
    for module, match in MODULES:
        if wanted and module not in wanted:
            continue
        passed, took, out = run_module(module, match)
        if passed:
            n_ok += 1
            print(f"ok {module} ({took:.0f} s)", flush=True)
        else:
            n_bad += 1
            print(f"not ok {module} ({took:.0f} s)\n{out[-6000:]}", flush=True)
    print(f"cpython: {n_ok} passed, {n_bad} failed")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
