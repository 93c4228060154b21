"""An MCP server over stdio that misbehaves on request, for the code-mode
tests (tests/blackbox/test_servers.py). It lists its tools in pages of 4. Each tool shows one way an upstream
can fail airlock:

  ok        answers "ok ID" (ID: a number of this start of the process, to tell
            a restart; not its PID, which is 1 in the PID namespace airlock
            starts each server in)
  crash     writes a line to stderr and exits in the middle of the call
  hang      never answers (records the notifications/cancelled it gets)
  garbage   answers with a line that is not JSON-RPC
  flood     answers with one line of 8 MiB
  fail      answers with isError and a message
  env       answers with its environment (to look for secrets)

  leak      has the value of $TOKEN in its description

With $MISBEHAVE_META set it lists "meta" too, which answers with the _meta of
its request (the trace context a traced caller passes on).

With $MISBEHAVE_EXTRA set it lists four more (the bounds of code mode's
calls in flight, tests/blackbox/test_servers.py):

  big       answers with about 1 MiB of small JSON values (half a million 0s)
  bigstr    answers with 1 MiB less 4 KiB in one string (cheap to parse)
  note      records its argument s (and logs "note S")
  seen      answers whether note was called with s

With $MISBEHAVE_FAIL_START set it writes $TOKEN to stderr and exits at once.
With $MISBEHAVE_PEEK set, "env" answers instead with what a hostile server
learns of its siblings: {"self": PID, "read": [[PID, SHA-256 of its $TOKEN or
""], ...]} for every other process whose /proc/PID/environ it could read.
With $MISBEHAVE_GATE set (the path of a Unix socket a test listens on), it
connects there and waits for a line or the end of the connection before it
reads anything: the test holds the server's start, and so the build of the
sandbox that starts it, until it lets go.

With $MISBEHAVE_TOOLS set (names separated by commas) it lists only tools of
those names, each with an optional integer argument "size" and an optional
list of integers "ids": "sized" answers with a text of "size" bytes, "counter"
with how many times it was called in this process (its state), any other with
"NAME PID". With $MISBEHAVE_PAGES set to "PAGES:BYTES" its tools/list has
PAGES pages, each of one tool whose description is BYTES bytes long (a hostile
list); with $MISBEHAVE_MANY set to N, one page of N tools; with
$MISBEHAVE_ZEROS set to N, one tool whose schema holds N zeros.

plus tools whose names are not Python identifiers (get-file, get_file,
class, 2fa) and one with a parameter called "from". The file named by
$MISBEHAVE_LOG gets one line per start ("start ID"), per call ("call NAME ID")
and per cancellation ("cancelled ID")."""
import json
import os
import socket
import sys
import time

LOG = os.environ.get("MISBEHAVE_LOG")


def log(line):
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def text(t, error=False):
    r = {"content": [{"type": "text", "text": t}]}
    if error:
        r["isError"] = True
    return r


S = {"type": "object", "properties": {}}
TOOLS = [
    {"name": n, "description": d, "inputSchema": S, "annotations": {"readOnlyHint": True}}
    for n, d in [("ok", "Answers ok and its pid."), ("crash", "Exits during the call."),
                 ("hang", "Never answers."), ("garbage", "Answers with garbage."),
                 ("flood", "Answers with 8 MiB on one line."), ("fail", "Fails."),
                 ("env", "Its environment."), ("get-file", "Dash."), ("get_file", "Underscore."),
                 ("class", "A keyword."), ("2fa", "A leading digit.")]
] + [
    {"name": "copy", "description": "Copies from to to.\"\"\" and a quote \\ backslash",
     "inputSchema": {"type": "object",
                     "properties": {"from": {"type": "string"}, "to-path": {"type": "string"}},
                     "required": ["from"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "wipe", "description": "Destructive by its annotations.", "inputSchema": S,
     "annotations": {"readOnlyHint": False, "destructiveHint": True}},
    # A description whose first 300 bytes end inside a character (the
    # search index keeps 300).
    {"name": "unicode", "description": "x" + "\u20ac" * 150 + " end", "inputSchema": S,
     "annotations": {"readOnlyHint": True}},
    # A server that puts its environment into its tool list: the secret in
    # it must not reach the stubs.
    {"name": "leak", "description": "Token " + os.environ.get("TOKEN", ""), "inputSchema": S,
     "annotations": {"readOnlyHint": True}},
]

if os.environ.get("MISBEHAVE_TOOLS"):
    TOOLS = [{"name": n, "description": f"The tool {n}.",
              "inputSchema": {"type": "object", "properties": {
                  "size": {"type": "integer"},
                  "ids": {"type": "array", "items": {"type": "integer"}}}},
              "annotations": {"readOnlyHint": True}}
             for n in os.environ["MISBEHAVE_TOOLS"].split(",")]
if os.environ.get("MISBEHAVE_META"):
    # A traced server's view: the _meta of the request (the trace context
    # airlock passes on, tests/blackbox/test_tracing.py).
    TOOLS.append({"name": "meta", "description": "Answers with the request's _meta.",
                  "inputSchema": S, "annotations": {"readOnlyHint": True}})
PAGES = os.environ.get("MISBEHAVE_PAGES")
MANY = int(os.environ.get("MISBEHAVE_MANY") or 0)
ZEROS = int(os.environ.get("MISBEHAVE_ZEROS") or 0)
COUNTER = [0]


def big_page(mid, at):
    """Sends page at of the hostile list: one tool with a description of
    BYTES, written a piece at a time so that this process stays small (the
    test measures airlock's memory, not this one's)."""
    pages, size = (int(x) for x in PAGES.split(":"))
    more = f', "nextCursor": "{at + 1}"' if at + 1 < pages else ""
    out = sys.stdout
    try:
        out.write('{"jsonrpc": "2.0", "id": %d, "result": {"tools": [{"name": "t%d", '
                  '"inputSchema": {"type": "object"}, "description": "' % (mid, at))
        piece = "d" * 65536
        for _ in range(size // len(piece)):
            out.write(piece)
        out.write("d" * (size % len(piece)) + '"}]%s}}\n' % more)
        out.flush()
    except BrokenPipeError:
        os._exit(0)


if os.environ.get("MISBEHAVE_EXTRA"):
    S1 = {"type": "object", "properties": {"s": {"type": "string"}}}
    TOOLS += [
        {"name": "big", "description": "About 1 MiB of small values.", "inputSchema": S,
         "annotations": {"readOnlyHint": True}},
        {"name": "bigstr", "description": "1 MiB in one string.", "inputSchema": S,
         "annotations": {"readOnlyHint": True}},
        {"name": "note", "description": "Records s.", "inputSchema": S1,
         "annotations": {"readOnlyHint": True}},
        {"name": "seen", "description": "Whether s was noted.", "inputSchema": S1,
         "annotations": {"readOnlyHint": True}},
    ]
NOTES = set()
BIG = None

# A number of this start: the host's clock, as the PID is 1 each time.
START = time.time_ns()
log(f"start {START}")
if os.environ.get("MISBEHAVE_FAIL_START"):
    sys.stderr.write(f"cannot start: my token is {os.environ.get('TOKEN')}\n")
    sys.exit(4)
if os.environ.get("MISBEHAVE_GATE"):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gate:
        gate.connect(os.environ["MISBEHAVE_GATE"])
        got = b""
        while b"\n" not in got:
            chunk = gate.recv(64)
            if not chunk:
                break
            got += chunk
    log("released")
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "misbehave", "version": "1"}}})
    elif method == "notifications/cancelled":
        log(f"cancelled {msg['params']['requestId']}")
    elif method == "tools/list":
        # In pages of 4, so that every test of airlock lists them page by page.
        at = int((msg.get("params") or {}).get("cursor") or 0)
        if PAGES:
            big_page(mid, at)
            continue
        if ZEROS:
            # One tool whose schema is an enum of ZEROS zeros: small as
            # bytes, twenty times as large parsed.
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"tools": [{"name": "z", '
                             '"inputSchema": {"type": "object", "properties": {"a": {"enum": '
                             '[%s]}}}}]}}\n' % (mid, ",".join(["0"] * ZEROS)))
            sys.stdout.flush()
            continue
        if MANY:
            page = {"tools": [{"name": f"t{i}", "inputSchema": S} for i in range(MANY)]}
        else:
            page = {"tools": TOOLS[at:at + 4]}
            if at + 4 < len(TOOLS):
                page["nextCursor"] = str(at + 4)
        send({"jsonrpc": "2.0", "id": mid, "result": page})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments", {})
        log(f"call {name} {mid}")
        if name == "crash":
            sys.stderr.write("misbehave: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        elif name == "hang":
            continue
        elif name == "garbage":
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
        elif name == "flood":
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"content": [{"type": '
                             '"text", "text": "%s"}]}}\n' % (mid, "x" * (8 << 20)))
            sys.stdout.flush()
        elif name == "fail":
            send({"jsonrpc": "2.0", "id": mid, "result": text("it did not work", True)})
        elif name == "env" and os.environ.get("MISBEHAVE_PEEK"):
            import hashlib
            read = []
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = f.read().split(b"\0")
                except OSError:
                    continue
                token = [e[6:] for e in env if e.startswith(b"TOKEN=")]
                read.append([int(pid), hashlib.sha256(token[0]).hexdigest() if token else ""])
            send({"jsonrpc": "2.0", "id": mid,
                  "result": text(json.dumps({"self": os.getpid(), "read": read}))})
        elif name == "env":
            send({"jsonrpc": "2.0", "id": mid, "result": text(json.dumps(dict(os.environ)))})
        elif name == "sized":
            send({"jsonrpc": "2.0", "id": mid, "result": text("s" * args.get("size", 0))})
        elif name == "counter":
            COUNTER[0] += 1
            send({"jsonrpc": "2.0", "id": mid, "result": text(f"count {COUNTER[0]}")})
        elif name == "bigstr":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "bigstr"}],
                "structuredContent": {"v": "x" * ((1 << 20) - 4096)}}})
        elif name == "big":
            if BIG is None:
                BIG = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {
                    "content": [{"type": "text", "text": "big"}],
                    "structuredContent": {"v": [0] * 500000}}}, separators=(",", ":"))
            sys.stdout.write(BIG.replace('"id":0', '"id":%d' % mid, 1) + "\n")
            sys.stdout.flush()
        elif name == "note":
            NOTES.add(args.get("s"))
            log(f"note {args.get('s')}")
            send({"jsonrpc": "2.0", "id": mid, "result": text("noted")})
        elif name == "seen":
            send({"jsonrpc": "2.0", "id": mid, "result": text(str(args.get("s") in NOTES))})
        elif name == "meta":
            send({"jsonrpc": "2.0", "id": mid,
                  "result": text(json.dumps(msg["params"].get("_meta") or {}))})
        elif name == "copy":
            send({"jsonrpc": "2.0", "id": mid, "result": text(json.dumps(args, sort_keys=True))})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": text(f"{name} {START}")})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
