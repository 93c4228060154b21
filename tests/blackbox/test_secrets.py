"""Secrets at the egress, end to end: the built binary with --secret, the
guest's airlock.secret(), and a real HTTP server on loopback
(tests/helpers/httpd.py) whose /mirror route tells what it received as a
digest and echoes it back in every common encoding.

What must hold: the value reaches the server only on requests to the
secret's targets; everywhere else the placeholder goes out unchanged; no
response, error message, result, description or byte of the guest's (or the
copy's) memory ever holds the value."""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from harness import AIRLOCK, airlock, rendezvous, run, tmpdir  # noqa: E402

HTTPD = os.path.join(os.path.dirname(__file__), "..", "helpers", "httpd.py")
# Every character class a server's encoders treat differently: '/', '+'
# and '=' for base64, '"' and '\\' for JSON, '%'-worthy ones, non-ASCII.
VALUE = 'sk-live/Zq+81"kP\\w=9%é~tail'
VALUE_B = VALUE.encode()
SHA = hashlib.sha256(VALUE_B).hexdigest()


def start_server():
    p = subprocess.Popen([sys.executable, HTTPD, "127.0.0.1"], stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def forms(v):
    """The encodings a leak could take (as /mirror writes them), each the
    part that depends on the value alone."""
    out = {
        "raw": v,
        "b64": base64.b64encode(v),
        "b64url": base64.urlsafe_b64encode(v).rstrip(b"="),
        "pct": urllib.parse.quote(v, safe="").encode(),
        "pct-all": "".join("%%%02X" % c for c in v).encode(),
        "form": urllib.parse.quote_plus(v).encode(),
        "json": json.dumps(v.decode())[1:-1].encode(),
        "json-slash": json.dumps(v.decode())[1:-1].replace("/", "\\/").encode(),
        # A server that reads header bytes as Latin-1 and echoes them as JSON.
        "json-latin1": json.dumps(v.decode("latin-1"))[1:-1].encode(),
    }
    for k in (1, 2):
        enc = base64.b64encode(b"x" * k + v + b"y")
        out[f"b64-{k}"] = enc[4:-4]  # inside the characters shared with x and y
    return out


def assert_no_value(text, where):
    data = text.encode() if isinstance(text, str) else text
    for name, f in forms(VALUE_B).items():
        assert f not in data, f"{where}: the value leaked as {name}: {data[:300]!r}"
    # Python's repr of a dict (print(r['headers'])) escapes '\\' as '\\\\'.
    assert repr(VALUE)[1:-1].encode() not in data, f"{where}: leaked as a repr"


def env():
    e = dict(os.environ)
    e["S19_TOKEN"] = VALUE
    return e


def run_guest(code, *args, timeout=120):
    p = airlock("run", "--json", "-c", code, *args, timeout=timeout, env=env())
    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc {p.returncode}): {p.stdout[:500]!r} {p.stderr[:500]!r}")
    assert_no_value(p.stdout, "the result")
    assert_no_value(p.stderr, "stderr")
    return p.returncode, r


GUEST_HELPERS = """
import airlock, hashlib, json
PH = airlock.secret('TOKEN')
def digest(url, method='GET', **kw):
    r = http_request(method, url, headers={'Authorization': 'Bearer ' + PH}, **kw)
    line = r['body'].splitlines()[0] if r['status'] == 200 else ''
    return line.removeprefix('sha256=')
PH_SHA = hashlib.sha256(PH.encode()).hexdigest()
"""


def test_placeholder_stable_distinct_and_unknown_names():
    code = ("import airlock\n"
            "a, b = airlock.secret('TOKEN'), airlock.secret('OTHER')\n"
            "print(a); print(b); print(a == airlock.secret('TOKEN'))\n"
            "try:\n    airlock.secret('NOPE')\nexcept ValueError as e:\n    print('ValueError', e)\n"
            "import os; print(sorted(os.environ))\n")
    args = ("-a", "localhost:9", "--secret", "TOKEN=env:S19_TOKEN@http://localhost:9",
            "--secret", "OTHER=env:S19_TOKEN@http://localhost:9/x=GET")
    rc, r = run_guest(code, *args)
    assert rc == 0, r
    a, b, same, unknown, envs = r["stdout"].splitlines()
    assert re.fullmatch(r"airlock-secret-TOKEN-[0-9a-f]{32}", a), a
    assert a != b and same == "True", r["stdout"]
    assert unknown.startswith("ValueError") and "NOPE" in unknown and "TOKEN" in unknown, unknown
    # The empty-environment contract holds: no secret arrives as a variable.
    assert "S19_TOKEN" not in envs, envs


def test_substituted_on_the_target_only():
    srv, port = start_server()
    try:
        L, N = f"http://localhost:{port}", f"http://127.0.0.1:{port}"
        code = GUEST_HELPERS + f"""
print(digest('{L}/mirror'))                 # the target: the value
print(digest('{L}/mirror', method='POST'))  # a method the target does not name
print(digest('{N}/mirror'))                 # another host, allowed
print(digest('{L}/mirror-other'))           # a path outside the prefix
r = http_get('{L}/echo', headers={{'X-K': PH}})
print(json.loads(r['body'])['headers']['x-k'] == PH)
print(PH_SHA)
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "-a", f"127.0.0.1:{port}",
                          "--secret", f"TOKEN=env:S19_TOKEN@{L}/mirror=GET")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        ph_sha = lines[-1]
        assert lines[0] == SHA, lines
        assert lines[1:3] == [ph_sha, ph_sha], lines
        # /mirror-other is not under /mirror: 404, no digest, no value sent.
        assert lines[3] == "", lines
        assert lines[4] == "True", lines
    finally:
        srv.kill()
        srv.wait()


def test_a_secret_allows_nothing_by_itself():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
try:
    digest('{L}/mirror')
    print('allowed')
except PermissionError as e:
    print('refused', PH in str(e))
"""
        rc, r = run_guest(code, "--secret", f"TOKEN=env:S19_TOKEN@{L}/mirror")
        assert r["stdout"].split()[0] == "refused", r
    finally:
        srv.kill()
        srv.wait()


def test_redirects_do_not_carry_the_value():
    srv, port = start_server()
    try:
        L, N = f"http://localhost:{port}", f"http://127.0.0.1:{port}"
        code = GUEST_HELPERS + f"""
import urllib.parse
def follow(url):
    h = {{'Authorization': 'Bearer ' + PH}}
    for _ in range(5):
        r = http_get(url, headers=h)
        if r['status'] not in (301, 302, 303, 307, 308):
            break
        url = urllib.parse.urljoin(url, r['headers']['location'])
    return r['body'].splitlines()[0].removeprefix('sha256=') if r['status'] == 200 else r['status']
print(follow('{L}/redirect?to=' + urllib.parse.quote('{N}/mirror')))   # to another host
print(follow('{L}/redirect?to=/mirror'))                               # to the target itself
print(follow('{L}/mirror/../redirect?to=/mirror') if False else 'skip')
print(PH_SHA)
"""
        # The redirecting path is a target too: only the last hop decides.
        rc, r = run_guest(code, "-a", f"localhost:{port}", "-a", f"127.0.0.1:{port}",
                          "--secret", f"TOKEN=env:S19_TOKEN@{L}/redirect@{L}/mirror=GET")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        assert lines[0] == lines[-1], lines  # the other host got the placeholder
        assert lines[1] == SHA, lines        # the target got the value
    finally:
        srv.kill()
        srv.wait()


def test_echoes_in_every_encoding_are_scrubbed():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
r = http_get('{L}/mirror', headers={{'Authorization': 'Bearer ' + PH}})
print(r['body'])
print(json.dumps(r['headers'], ensure_ascii=False))
print(r['headers'])
r = http_get('{L}/echo', headers={{'Authorization': 'Bearer ' + PH}})
print(r['body'])
import base64
r = http_post('{L}/echo?k=' + PH, body=PH, content_type='text/plain')
print(json.loads(r['body'])['body_base64'])
print(json.loads(r['body'])['path'])
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN+query+body=env:S19_TOKEN@{L}/mirror=GET@{L}/echo")
        assert rc == 0, r
        out = r["stdout"]
        assert f"sha256={SHA}" in out, out   # the server got the value...
        assert "airlock-secret-TOKEN-" in out  # ...and the guest the placeholder back
        assert_no_value(out, "the guest's view")
        # /echo got the value in its header, query and body (all scrubbed
        # on the way back): the lines are the placeholder again.
        lines = out.splitlines()
        assert "airlock-secret-TOKEN-" in lines[-1] and "airlock-secret-TOKEN-" in lines[-2], lines
    finally:
        srv.kill()
        srv.wait()


def test_compressed_responses_cannot_hide_the_value():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
H = {{'Authorization': 'Bearer ' + PH, 'Accept-Encoding': 'gzip'}}
print(json.loads(http_get('{L}/echo', headers=H)['body'])['headers'].get('accept-encoding'))
try:
    r = http_get('{L}/gzip', headers=H)
    import gzip
    print('passed on', gzip.decompress(r['body'] if isinstance(r['body'], bytes) else r['body'].encode('latin-1')))
except OSError as e:
    print(type(e).__name__, e)
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN=env:S19_TOKEN@{L}")
        lines = r["stdout"].splitlines()
        assert lines[0] == "identity", r
        assert "Content-Encoding: gzip" in lines[1] and "passed on" not in lines[1], r
    finally:
        srv.kill()
        srv.wait()


def test_error_messages_hold_no_value():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        # Port 9 (discard) on loopback: nothing listens, curl fails to connect.
        code = GUEST_HELPERS + f"""
H = {{'Authorization': 'Bearer ' + PH}}
for url, h in [('http://localhost:9/x?k=' + PH, H),          # curl cannot connect
               ('{L}/nope?k=' + PH, H),                      # a 404
               ('{L}/echo?k=' + PH, dict(H, X='y' * 9000)),  # refused by the gateway
               ('http://localhost:8/x?k=' + PH, H)]:         # not allowed
    try:
        r = http_get(url, headers=h)
        print('ok', r['status'])
    except Exception as e:
        print(type(e).__name__, e)
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "-a", "localhost:9", "--secret",
                          f"TOKEN+query=env:S19_TOKEN@http://localhost:9@{L}")
        out = r["stdout"]
        assert "ConnectionRefusedError" in out or "ConnectionError" in out, out
        assert_no_value(out, "error messages")
    finally:
        srv.kill()
        srv.wait()


def test_value_only_from_env_or_file():
    p = airlock("run", "--secret", "T=sk-inline-value-123@http://localhost:9", "-c", "1")
    assert p.returncode == 2 and "env:VAR or file:PATH" in p.stderr, p.stderr
    assert "sk-inline-value-123" not in p.stderr
    p = airlock("run", "--secret", "T=env:S19_UNSET_VAR@http://localhost:9", "-c", "1")
    assert p.returncode == 2 and "S19_UNSET_VAR" in p.stderr, p.stderr
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write(VALUE + "\n")
    try:
        code = "import airlock; print(airlock.secret('F'))"
        p = airlock("run", "-a", "localhost:9", "--secret", f"F=file:{f.name}@http://localhost:9",
                    "-c", code, env=env())
        assert p.returncode == 0 and p.stdout.startswith("airlock-secret-F-"), p.stderr
        p = airlock("run", "--secret", "T=env:S19_TOKEN@ftp://x", "-c", "1", env=env())
        assert p.returncode == 2, p.stderr
        assert_no_value(p.stderr, "a configuration error")
    finally:
        os.unlink(f.name)


def test_describe_names_no_value():
    p = airlock("describe", "--json", "-a", "localhost:9", "--secret",
                "TOKEN=env:S19_TOKEN@http://localhost:9/v1=GET", env=env())
    assert p.returncode == 0, p.stderr
    assert_no_value(p.stdout, "describe")
    d = json.loads(p.stdout)
    assert "- TOKEN: http://localhost:9/v1" in d["description"], d["description"]
    assert "airlock-secret-" not in p.stdout


# The guest looks for the value in every readable mapping of its own memory
# without holding it: it knows only its digest, length and first bytes (not
# enough to guess it), and hashes each window that starts with them.
MEMORY_SCAN = """
import ctypes, hashlib, re
def read(lo, n):
    # /proc/self/mem and process_vm_readv are closed to the guest: read
    # the mapping directly. Only anonymous mappings (the heap, stacks,
    # malloc's arenas: where bytes from the host land) are read, since a
    # file mapping past its file's end would fault.
    return ctypes.string_at(lo, n)
def scan(prefix, length, sha):
    hits = readable = 0
    with open('/proc/self/maps') as m:
        lines = m.readlines()
    for line in lines:
        f = line.split()
        path = f[5] if len(f) > 5 else ''
        if 'r' not in f[1] or path.startswith('[vvar') or path in ('[vsyscall]', '[vdso]') or \
                (path and not path.startswith('[')):
            continue
        lo, hi = (int(x, 16) for x in f[0].split('-'))
        try:
            data = read(lo, hi - lo)
        except OSError:
            continue
        readable += len(data)
        for mo in re.finditer(re.escape(prefix), data):
            if hashlib.sha256(data[mo.start():mo.start() + length]).hexdigest() == sha:
                hits += 1
        del data
    assert readable > 1 << 20, readable
    return hits
"""


def test_guest_memory_holds_no_copy():
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        prefix = VALUE_B[:4]
        code = GUEST_HELPERS + MEMORY_SCAN + f"""
for _ in range(3):
    assert digest('{L}/mirror') == {SHA!r}
    http_get('{L}/echo', headers={{'Authorization': 'Bearer ' + PH}})
print('hits', scan({prefix!r}, {len(VALUE_B)}, {SHA!r}))
# The scan itself works: a copy made here on purpose is found.
probe = bytes(reversed({VALUE_B[::-1]!r}))
print('probe', scan({prefix!r}, {len(VALUE_B)}, {SHA!r}) > 0)
"""
        # The probe line builds the value in the guest on purpose, from its
        # reverse, so the check of the scan is not a copy from the host.
        rc, r = run_guest_allowing_probe(code, "-a", f"localhost:{port}", "--secret",
                                         f"TOKEN=env:S19_TOKEN@{L}/mirror=GET")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        assert lines[0] == "hits 0", lines
        assert lines[1] == "probe True", lines
    finally:
        srv.kill()
        srv.wait()


def run_guest_allowing_probe(code, *args):
    p = airlock("run", "--json", "-c", code, *args, env=env())
    return p.returncode, json.loads(p.stdout)


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def memory_hits(pid, needle):
    """Occurrences of needle in pid's readable memory, or None when the
    kernel does not let us read it."""
    hits = 0
    try:
        with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in m:
                f = line.split()
                if "r" not in f[1] or (len(f) > 5 and (f[5].startswith("[vvar") or f[5] == "[vsyscall]")):
                    continue
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                try:
                    mem.seek(lo)
                    hits += mem.read(hi - lo).count(needle)
                except (OSError, ValueError, OverflowError):
                    continue
    except PermissionError:
        return None
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return hits


def test_copy_memory_from_the_host_side():
    srv, port = start_server()
    meet, ready, go = rendezvous()
    try:
        L = f"http://localhost:{port}"
        R = f"http://127.0.0.1:{meet.server_address[1]}"
        code = GUEST_HELPERS + f"""
for _ in range(3):
    assert digest('{L}/mirror') == {SHA!r}
http_get('{R}/ready')
http_get('{R}/go')
"""
        p = subprocess.Popen([AIRLOCK, "run", "--json", "--timeout", "120", "-c", code,
                              "-a", f"localhost:{port}", "-a", R,
                              "--secret", f"TOKEN=env:S19_TOKEN@{L}/mirror=GET"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
        # The copy has made its requests and waits in /go while the test
        # reads the memory of every process.
        assert ready.wait(120), "the guest never reached /ready"
        scanned = 0
        for pid in descendants(p.pid):
            h = memory_hits(pid, VALUE_B)
            if h is None:
                continue
            scanned += 1
            assert h == 0, f"process {pid} (a descendant of airlock) holds the value"
        go.set()
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, (out, err)
        # Without a readable process the test would prove nothing.
        assert scanned > 0, "no sandbox process could be read"
        # And the host process, which holds the value, is found by the
        # same scan: the scan works.
    finally:
        go.set()
        meet.shutdown()
        srv.kill()
        srv.wait()


def test_tool_results_and_errors_hold_no_value():
    """A host tool runs with the host's environment, where an env:VAR
    secret sits, or may come by the value some other way (its own copy of
    the same key, an API's error text quoting it): what it returns, or the
    stderr of its failure, goes to the guest, so it is scrubbed like a
    response, in the JSON of the result too."""
    from harness import tools_file
    # The tool has its own copy of the key (the environment variable the
    # secret came from is gone from its environment: the test below).
    copy = os.path.join(tmpdir(), "key-copy")
    with open(copy, "wb") as f:
        f.write(VALUE_B)
    script = ("import json, os, sys\n"
              "a = json.load(sys.stdin)\n"
              f"v = open({copy!r}, encoding='utf-8').read()\n"
              "if a['op'] == 'fail':\n"
              "    sys.stderr.write('upstream said: bad key ' + v + '\\n'); sys.exit(1)\n"
              "print(json.dumps({'key': v, 'nested': [{'k': v}], v: 1}))\n")
    tools = tools_file("leaky", "Returns what it has.", {"op": {"type": "string"}}, ["op"],
                       script, 10)
    code = ("import airlock\n"
            "r = call_tool('leaky', op='ok')\n"
            "print(json.dumps(r)); print(repr(r))\n"
            "try:\n    call_tool('leaky', op='fail')\n"
            "except RuntimeError as e:\n    print('RuntimeError', e)\n"
            "print('PH' if r['key'] == airlock.secret('TOKEN') else 'other')\n")
    rc, r = run_guest("import json\n" + code, "-t", tools,
                      "--secret", "TOKEN=env:S19_TOKEN@http://localhost:9")
    assert rc == 0, r
    assert "RuntimeError upstream said: bad key airlock-secret-TOKEN-" in r["stdout"], r
    assert r["stdout"].rstrip().endswith("PH"), r


def assert_no_part(text, where, at_least=4):
    """No run of at_least bytes of the value, raw, at the start or the end
    of the value (what a cut leaves)."""
    data = text.encode() if isinstance(text, str) else text
    for k in range(at_least, len(VALUE_B) + 1):
        assert VALUE_B[:k] not in data, f"{where}: the value's first {k} bytes: {data[-300:]!r}"
        assert VALUE_B[-k:] not in data, f"{where}: the value's last {k} bytes: {data[-300:]!r}"


def test_a_tool_message_cut_inside_the_value_passes_on_no_part():
    """A failing tool's message quotes the last 4,000 bytes of its stderr,
    the first 80 of a stdout that is not JSON, and jansson's text quotes
    up to 160 bytes near the error. The guest chooses how much the tool
    echoes around the value, so it can place each cut inside the value:
    the scrub runs before the cut, and what the tool wrote past the
    stderr cap counts as cut."""
    from harness import tools_file
    copy = os.path.join(tmpdir(), "key-copy")
    with open(copy, "wb") as f:
        f.write(VALUE_B)
    script = ("import json, os, sys\n"
              "a = json.load(sys.stdin)\n"
              f"v = open({copy!r}, 'rb').read()\n"
              "k, out = a['k'], sys.stdout.buffer\n"
              "if a['op'] == 'stderr':\n"
              "    sys.stderr.buffer.write(b'bad key ' + v + b'y' * (4000 - k)); sys.exit(1)\n"
              "if a['op'] == 'stderr-cap':\n"
              "    sys.stderr.buffer.write(b'y' * (65536 - k) + v); sys.exit(1)\n"
              "if a['op'] == 'stdout':\n"
              "    out.write(b'x' * (80 - k) + v + b' is not JSON'); sys.exit(0)\n"
              "if a['op'] == 'near':\n"
              "    out.write(b'\"' + b'a' * (150 - k) + v + b'\\x01\"'); sys.exit(0)\n")
    tools = tools_file("leaky", "Echoes.", {"op": {"type": "string"}, "k": {"type": "integer"}},
                       ["op", "k"], script, 10)
    code = ("for op in ('stderr', 'stderr-cap', 'stdout', 'near'):\n"
            "    for k in (4, 7, 12, 19, 24):\n"
            "        try:\n"
            "            call_tool('leaky', op=op, k=k)\n"
            "        except RuntimeError as e:\n"
            "            print(op, k, str(e)[-300:])\n")
    rc, r = run_guest(code, "-t", tools, "--secret", "TOKEN=env:S19_TOKEN@http://localhost:9")
    assert rc == 0, r
    out = r["stdout"]
    assert out.count("\n") == 20, out
    assert_no_part(out, "a tool's failure message")


def base64_leaks(body):
    """Whether any base64 run in body (line breaks removed) decodes, at
    some alignment, to 8 bytes of the value or more."""
    flat = re.sub(rb"\r?\n", b"", body)
    for run_ in re.findall(rb"[A-Za-z0-9+/_-]{8,}", flat):
        run_ = run_.replace(b"-", b"+").replace(b"_", b"/")
        for a in range(4):
            chunk = run_[a:]
            chunk = chunk[:len(chunk) // 4 * 4]
            try:
                dec = base64.b64decode(chunk)
            except ValueError:
                continue
            for i in range(len(VALUE_B) - 7):
                if VALUE_B[i:i + 8] in dec:
                    return True
    return False


def test_more_echo_forms_are_scrubbed_and_the_length_is_the_bodys():
    """Forms real servers write that a list of fixed forms missed:
    urllib.parse.quote (which keeps '/'), JSON with HTML-safe escapes (Go's
    encoding/json, Gson), JSON with every character escaped, HTML character
    references, MIME base64 wrapped at 76 columns. And the Content-Length
    the guest reads is the scrubbed body's, not one that tells the value's
    length."""
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
r = http_get('{L}/mirror-escapes', headers={{'Authorization': 'Bearer ' + PH}})
b = r['body'] if isinstance(r['body'], bytes) else r['body'].encode('utf-8')
print(b.count(PH.encode()), r['headers'].get('content-length'), len(b))
print(b.hex())
r = http_get('{L}/mirror', headers={{'Authorization': 'Bearer ' + PH}})
b = r['body'] if isinstance(r['body'], bytes) else r['body'].encode('utf-8')
print(r['headers'].get('content-length'), len(b))
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN=env:S19_TOKEN@{L}")
        assert rc == 0, r
        lines = r["stdout"].splitlines()
        count, length, real = lines[0].split()
        body = bytes.fromhex(lines[1])
        assert_no_value(body, "the body")
        assert not base64_leaks(body), body
        t = VALUE
        for name, f in {
                "quote": urllib.parse.quote(VALUE_B).encode(),
                "go": "".join("\\u%04x" % ord(c) if c in "<>&='" else c
                              for c in json.dumps(t)[1:-1]).encode(),
                "all": "".join("\\u%04X" % ord(c) for c in t).encode(),
                "html": "&#61;9&#x25;".encode()}.items():
            assert f not in body, (name, body)
        assert_no_part(body, "the body", at_least=8)
        # Four text forms and twelve base64 ones, each now a placeholder.
        assert int(count) == 16, (count, body)
        assert length == real, lines[0]
        length, real = lines[2].split()
        assert length == real, lines[2]
    finally:
        srv.kill()
        srv.wait()


def test_an_encoding_refusal_quotes_no_part_of_the_value():
    """The refusal of an encoded body quotes the Content-Encoding header
    up to 40 characters; the server chose the header, and so, through the
    length of what comes before, where a value in it is cut."""
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
for k in (4, 8, 13, 20, 26):
    try:
        http_get('{L}/encoded-label?k=%d' % k, headers={{'Authorization': 'Bearer ' + PH}})
        print('passed on')
    except OSError as e:
        print(type(e).__name__, e)
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN=env:S19_TOKEN@{L}")
        out = r["stdout"]
        assert out.count("Content-Encoding: xxxx") == 5 and "passed on" not in out, r
        assert_no_part(out, "the refusal")
    finally:
        srv.kill()
        srv.wait()


def test_the_environment_variable_is_gone_from_airlock_and_its_tools():
    """An env:VAR secret is taken out of airlock's environment when it is
    read: a command tool (which starts with that environment) does not see
    it, and /proc/PID/environ of the airlock process no longer holds the
    value (its bytes are zeroed; the name may stay there)."""
    from harness import tools_file
    script = ("import json, os, sys\n"
              "json.load(sys.stdin)\n"
              "env = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
              "print(json.dumps({'tool': 'S19_TOKEN' in os.environ,\n"
              f"                  'value': {VALUE_B!r} in env}}))\n")
    tools = tools_file("env_probe", "Looks at environments.", {}, [], script, 10)
    rc, r = run_guest("print(call_tool('env_probe'))", "-t", tools,
                      "--secret", "TOKEN=env:S19_TOKEN@http://localhost:9")
    assert rc == 0, r
    assert r["stdout"].strip() == "{'tool': False, 'value': False}", r


def test_a_content_encoding_with_a_space_before_its_colon_is_seen():
    """'Content-Encoding : gzip' is the same field to a lax client (the
    guest's own gzip.decompress does not care what it was labelled): it
    must not slip a compressed body past the check."""
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
try:
    r = http_get('{L}/gzip-spaced', headers={{'Authorization': 'Bearer ' + PH}})
    import gzip
    print('passed on', gzip.decompress(r['body'] if isinstance(r['body'], bytes) else r['body'].encode('latin-1')))
except OSError as e:
    print(type(e).__name__, e)
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN=env:S19_TOKEN@{L}")
        out = r["stdout"]
        assert "Content-Encoding: gzip" in out and "passed on" not in out, r
    finally:
        srv.kill()
        srv.wait()


def test_case_hex_and_utf16_reflections_are_scrubbed():
    """An honest server that reflects a key upper- or lower-cased (an error
    text, a case-folding store), as hex (a debug dump) or in UTF-16 (a
    Windows service) gives the guest the value all the same."""
    srv, port = start_server()
    try:
        L = f"http://localhost:{port}"
        code = GUEST_HELPERS + f"""
r = http_get('{L}/mirror-more', headers={{'Authorization': 'Bearer ' + PH}})
b = r['body'] if isinstance(r['body'], bytes) else r['body'].encode('latin-1')
print(b.count(PH.encode()), b.count(PH.encode('utf-16-le')), b.count(PH.encode('utf-16-be')))
print(b.hex())
"""
        rc, r = run_guest(code, "-a", f"localhost:{port}", "--secret",
                          f"TOKEN=env:S19_TOKEN@{L}")
        assert rc == 0, r
        out = r["stdout"]
        body = bytes.fromhex(out.splitlines()[1])
        t = VALUE
        for name, f in {"upper": VALUE_B.upper(), "lower": VALUE_B.lower(),
                        "hex": VALUE_B.hex().encode(), "HEX": VALUE_B.hex().upper().encode(),
                        "utf-16-le": t.encode("utf-16-le"),
                        "utf-16-be": t.encode("utf-16-be")}.items():
            assert f not in body, (name, body)
        assert out.splitlines()[0] == "4 1 1", out
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    run()
