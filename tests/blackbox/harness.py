"""A small harness for black-box tests that drive the built airlock binary.

Each test module defines functions named test_*; run() calls each in order,
prints one line per test and a closing line "NAME: N passed, N failed".
"""
import atexit
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

AIRLOCK = os.environ.get("AIRLOCK") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "airlock")


def airlock(*args, input=None, timeout=120, env=None):
    """Runs the airlock binary; returns CompletedProcess with text output."""
    return subprocess.run([AIRLOCK, *args], input=input, capture_output=True,
                          timeout=timeout, text=True, env=env)


def run_json(code, *args, timeout=120):
    """airlock run --json -c CODE ARGS...; returns (exit status, result dict)."""
    p = airlock("run", "--json", "-c", code, *args, timeout=timeout)
    try:
        return p.returncode, json.loads(p.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc {p.returncode}): {p.stdout[:500]!r} {p.stderr[:500]!r}")


# A tools/call asks for the run record in the result's _meta this way (see
# README, "What the client sees").
MCP_RUN = "dev.airlock/run"


def mcp_call_params(code):
    """The params of a tools/call of execute_code(code) with the run record."""
    return {"name": "execute_code", "arguments": {"code": code}, "_meta": {MCP_RUN: True}}


def mcp_result_json(result):
    """The result JSON of `airlock run --json`, as far as a CallToolResult
    asked for with mcp_call_params carries it: its content items told apart
    by the record's "parts". stdout and stderr are the model's text (CRLF as
    LF); on failure stderr is the error item (stderr and how the run ended)."""
    rec = result["_meta"][MCP_RUN]
    out = {"success": not result["isError"], "status": rec["status"],
           "exit_code": rec["exit_code"], "stdout": "", "stderr": "",
           "stdout_truncated": rec["stdout_truncated"],
           "stderr_truncated": rec["stderr_truncated"], "files": [],
           "refused": rec["refused"], "duration_ms": rec["duration_ms"]}
    files = iter(rec["files"])
    for kind, item in zip(rec["parts"], result["content"]):
        if kind == "stdout":
            out["stdout"] = item["text"]
        elif kind in ("stderr", "error"):
            out["stderr"] = item["text"]
        elif kind == "file":
            f = dict(next(files))
            if item["type"] == "image":
                f["data_base64"] = item["data"]
            elif "blob" in item["resource"]:
                f["data_base64"] = item["resource"]["blob"]
            else:
                f["data_base64"] = base64.b64encode(item["resource"]["text"].encode()).decode()
            out["files"].append(f)
    return out


_made = []
atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _made])


def tmpdir():
    """A temporary folder, removed when the test module ends."""
    d = tempfile.mkdtemp(prefix="airlock-test-")
    _made.append(d)
    return d


def next_run_works():
    """After a hostile scenario, a plain run must still succeed."""
    rc, r = run_json("print(6 * 7)")
    assert rc == 0 and r["status"] == "ok" and r["stdout"] == "42\n", (rc, r)


def run(name=None):
    name = name or os.path.splitext(os.path.basename(sys.modules["__main__"].__file__))[0]
    tests = [(n, f) for n, f in vars(sys.modules["__main__"]).items()
             if n.startswith("test_") and callable(f)]
    only = os.environ.get("ONLY")
    passed = failed = 0
    for n, f in tests:
        if only and only not in n:
            continue
        try:
            f()
            passed += 1
            print(f"ok {n}", flush=True)
        except Exception:
            failed += 1
            print(f"not ok {n}", flush=True)
            traceback.print_exc()
    print(f"{name}: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
