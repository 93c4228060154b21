"""airlock describe: the execute_code description and agent instructions, as
text and as JSON, follow the options; errors exit 2 with one line; the texts
are the ones `airlock mcp` serves."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import AIRLOCK, airlock, run, tmpdir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "mcp", "fixtures", "tools.json")


def workspace():
    d = tmpdir()
    with open(os.path.join(d, "data.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    os.mkdir(os.path.join(d, "reports"))
    return d


def describe_json(*args):
    p = airlock("describe", "--json", *args)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def test_text_has_both_sections():
    p = airlock("describe")
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    out = p.stdout
    assert "# Tool: execute_code" in out
    assert "# Agent instructions" in out
    assert out.index("# Tool: execute_code") < out.index("# Agent instructions")
    assert "There is no /input" in out
    assert "Network: none" in out
    assert "print()" in out
    assert "30 s wall clock" in out and "512 MiB of memory" in out


def test_json_shape():
    d = describe_json()
    assert set(d) >= {"name", "description", "input_schema", "instructions", "approval_mode"}, d.keys()
    assert d["name"] == "execute_code"
    assert d["approval_mode"] == "never_require"
    s = d["input_schema"]
    assert s["type"] == "object"
    assert s["required"] == ["code"]
    assert s["properties"]["code"]["type"] == "string"
    assert s["properties"]["code"]["description"]


def test_configuration_shows():
    ws = workspace()
    d = describe_json("--workspace", ws, "--tools", TOOLS, "--allow-domain", "api.example.com=GET,POST",
                      "--allow-domain", "https://data.example.org/v1", "--mount", f"{TOOLS}:cfg/tools.json",
                      "--timeout", "5", "--memory", "256")
    desc = d["description"]
    for needle in ["compute", "operation (string, required)", "a (number, required)",
                   "/input/data.csv", "/input/reports/", "/input/cfg/tools.json",
                   "api.example.com (http and https, any path): GET, POST",
                   "https://data.example.org/v1", "http_get(url, headers=None)",
                   "5 s wall clock", "256 MiB of memory", "call_tool(name, **kwargs)"]:
        assert needle in desc, (needle, desc)
    assert "Network: none" not in desc
    instr = d["instructions"]
    assert "compute" in instr and "call_tool" in instr and "/output" in instr, instr


def test_approval_mode():
    assert describe_json("--approval", "always")["approval_mode"] == "always_require"
    assert describe_json("--approval", "never")["approval_mode"] == "never_require"


def test_errors_exit_2_with_one_line():
    cases = [
        ("--workspace", "/nonexistent/airlock-describe-ws"),
        ("--tools", "/nonexistent/tools.json"),
        ("--bogus-option",),
        ("--output-dir", "/tmp/x"),
        ("--timeout", "abc"),
        ("extra-argument",),
    ]
    for args in cases:
        p = airlock("describe", *args)
        assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
        assert p.stdout == "", (args, p.stdout)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, (args, p.stderr)
    p = airlock("describe", "--workspace", "/nonexistent/airlock-describe-ws")
    assert "/nonexistent/airlock-describe-ws" in p.stderr, p.stderr


def test_help():
    p = airlock("describe", "--help")
    assert p.returncode == 0
    assert "describe" in p.stdout


def test_same_texts_as_mcp():
    ws = workspace()
    args = ["--workspace", ws, "--tools", TOOLS]
    d = describe_json(*args)
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    inp = "".join(json.dumps(m) + "\n" for m in msgs)
    p = subprocess.run([AIRLOCK, "mcp", *args], input=inp, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    init = next(m for m in out if m.get("id") == 1)["result"]
    tools = next(m for m in out if m.get("id") == 2)["result"]["tools"]
    assert init["instructions"] == d["instructions"]
    assert tools[0]["description"] == d["description"]
    # The server adds the optional "session" argument (a handle from session_open).
    schema = json.loads(json.dumps(tools[0]["inputSchema"]))
    assert schema["properties"].pop("session")["type"] == "string"
    assert schema == d["input_schema"]


if __name__ == "__main__":
    run()
