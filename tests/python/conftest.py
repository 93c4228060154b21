"""pytest setup for the Python package: the package built in place by
`make python` (python/airlock/_airlock*.so), imported from python/."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
BUILD = os.environ.get("AIRLOCK_BUILD", os.path.join(ROOT, "build"))
AIRLOCK = os.environ.get("AIRLOCK", os.path.join(BUILD, "airlock"))

import airlock  # noqa: E402


@pytest.fixture(scope="module")
def sb():
    s = airlock.Sandbox(limits={"timeout": 20})
    yield s
    s.close()


def pytest_terminal_summary(terminalreporter):
    # The closing line tests/run.sh counts ("NAME: N passed, N failed").
    st = terminalreporter.stats
    passed = len(st.get("passed", []))
    failed = len(st.get("failed", [])) + len(st.get("error", []))
    terminalreporter.write_line(f"python: {passed} passed, {failed} failed")
