#!/usr/bin/python3
"""A small HTTP server for the gateway tests, on a loopback address and an
ephemeral port. It prints the port on its first line of stdout, then serves
until it is terminated.

Routes (any method):
  /echo...            200, JSON {"method", "path", "headers", "body_base64"}
                      with two "X-Multi" headers
  /mirror-escapes     the Authorization value (after "Bearer ") as more
                      servers write it, one form per line of the body:
                      urllib.parse.quote (keeps '/'), JSON with HTML-safe
                      escapes (Go, Gson), JSON with every character
                      escaped, HTML character references, MIME base64
                      (76 columns) at several offsets
  /encoded-label?k=K  a body labelled "Content-Encoding: " + (40 - K) x's
                      + the Authorization value: a refusal quoting the
                      label's first 40 characters quotes K bytes of it
  /bigheader?n=N      one response header N bytes long
  /redirect?to=URL    302 to URL
  /gzip               the Authorization header gzipped, whatever was asked
  /gzip-spaced        the same, labelled "Content-Encoding : gzip"
  /mirror-more        the Authorization value (after "Bearer ") upper- and
                      lower-cased, in hex (both cases), in UTF-16 LE and BE
  /mirror             200; the Authorization header it received (after
                      "Bearer "), in every common encoding, in response
                      headers and in the body: what a server echoing a
                      secret back does
  /big?n=N&cl=1       N bytes of "a"; with cl=0 no Content-Length (body ends
                      when the connection closes)
  /slow?s=S           waits S seconds, then 200
  /status?code=N      status N, empty body
  /manyheaders?n=N    N response headers
  any path that a lenient server resolves to /admin (decoding escapes up
  to eight times, reading '\\' as '/', dropping ";" path parameters before
  dot segments, as Tomcat, Jetty and IIS variously do): 200 "ADMIN AREA",
  the page a smuggled path must never reach
Usage: httpd.py [BIND_ADDRESS]
"""
import base64
import gzip
import hashlib
import json
import re
import socket
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def lenient_path(path):
    """The path as the most lenient common server would resolve it."""
    for _ in range(8):
        path = urllib.parse.unquote(path)
    path = path.replace("\\", "/")
    out = []
    for seg in path.split("/"):
        seg = seg.split(";", 1)[0]
        if seg == "..":
            if out:
                out.pop()
        elif seg not in (".", ""):
            out.append(seg)
    return "/" + "/".join(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def __getattr__(self, name):
        # Every method, including ones the standard handler does not know.
        if name.startswith("do_"):
            return self.handle_any
        raise AttributeError(name)

    def send(self, code, body=b"", headers=(), length=True):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if lenient_path(url.path) == "/admin":
            self.send(200, b"ADMIN AREA")
        elif url.path.startswith("/echo"):
            out = json.dumps({
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_base64": base64.b64encode(body).decode(),
            }).encode()
            self.send(200, out, [("Content-Type", "application/json"),
                                 ("X-Multi", "a"), ("X-Multi", "b")])
        elif url.path == "/mirror":
            # Header text is latin-1 here: that gives back the bytes sent.
            v = self.headers.get("Authorization", "").removeprefix("Bearer ").encode("latin-1")
            forms = {
                "raw": v,
                "b64": base64.b64encode(v),
                "b64url": base64.urlsafe_b64encode(v).rstrip(b"="),
                "b64-1": base64.b64encode(b"x" + v + b"y"),
                "b64-2": base64.b64encode(b"xy" + v),
                "pct": urllib.parse.quote(v, safe="").encode(),
                "pct-lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(),
                                    urllib.parse.quote(v, safe="")).encode(),
                "pct-all": "".join("%%%02X" % c for c in v).encode(),
                "form": urllib.parse.quote_plus(v).encode(),
                "json": json.dumps(v.decode("utf-8", "replace")).encode(),
                "json-slash": json.dumps(v.decode("utf-8", "replace")).replace("/", "\\/").encode(),
                "json-utf8": json.dumps(v.decode("utf-8", "replace"), ensure_ascii=False).encode(),
            }
            # What the server received, as a digest the test can compare.
            body = b"sha256=" + hashlib.sha256(v).hexdigest().encode() + b"\n"
            body += b"\n".join(k.encode() + b"=" + f for k, f in forms.items())
            hdrs = [("X-" + k, f.decode("latin-1")) for k, f in forms.items()]
            self.send(200, body, hdrs + [("Location", "/x?token=" + forms["pct"].decode())])
        elif url.path == "/gzip":
            # Compressed whatever the client asked for, as some servers do.
            v = self.headers.get("Authorization", "").encode("latin-1")
            self.send(200, gzip.compress(v), [("Content-Encoding", "gzip")])
        elif url.path == "/gzip-spaced":
            # The same, under a field name with a space before its colon,
            # which a strict parser refuses and a lax one may trim.
            v = self.headers.get("Authorization", "").encode("latin-1")
            self.send(200, gzip.compress(v), [("Content-Encoding ", "gzip")])
        elif url.path == "/mirror-more":
            # Reflections beyond /mirror's, in the body only: ASCII case
            # changes, hex, UTF-16 (the UTF-8 value read and written again).
            v = self.headers.get("Authorization", "").removeprefix("Bearer ").encode("latin-1")
            t = v.decode("utf-8", "replace")
            forms = [v.upper(), v.lower(), v.hex().encode(),
                     v.hex().upper().encode(), t.encode("utf-16-le"), t.encode("utf-16-be")]
            self.send(200, b"\n".join(forms))
        elif url.path == "/mirror-escapes":
            v = self.headers.get("Authorization", "").removeprefix("Bearer ").encode("latin-1")
            t = v.decode("utf-8", "replace")
            js = json.dumps(t)[1:-1]
            forms = [
                urllib.parse.quote(v).encode(),
                "".join("\\u%04x" % ord(c) if c in "<>&='" else c for c in js).encode(),
                "".join("\\u%04X" % ord(c) for c in t).encode(),
                "".join("&#%d;" % ord(c) if c in "=/" else "&#x%x;" % ord(c) if c == "%"
                        else {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
                              "'": "&#39;"}.get(c, c) for c in t).encode("utf-8"),
            ]
            for k in range(6):
                forms.append(base64.encodebytes(b"x" * k + v + b"tail" * 20))
                forms.append(base64.encodebytes(b"y" * (k * 13) + v).replace(b"\n", b"\r\n"))
            self.send(200, b"\n".join(forms))
        elif url.path == "/encoded-label":
            v = self.headers.get("Authorization", "").removeprefix("Bearer ")
            k = int(q.get("k", "8"))
            self.send(200, b"?", [("Content-Encoding", "x" * (40 - k) + v)])
        elif url.path == "/bigheader":
            self.send(200, b"ok", [("X-Big", "b" * int(q.get("n", "1")))])
        elif url.path == "/redirect":
            self.send(302, b"", [("Location", q.get("to", "/"))])
        elif url.path == "/big":
            size = int(q.get("n", "0"))
            self.send(200, b"a" * size, length=q.get("cl", "1") == "1")
        elif url.path == "/slow":
            time.sleep(float(q.get("s", "5")))
            self.send(200, b"late")
        elif url.path == "/status":
            self.send(int(q.get("code", "200")))
        elif url.path == "/manyheaders":
            self.send(200, b"", [("X-H%d" % i, "v" * 100) for i in range(int(q.get("n", "1")))])
        else:
            self.send(404, b"no such route")


def main():
    bind = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    if ":" in bind:
        ThreadingHTTPServer.address_family = socket.AF_INET6
    server = ThreadingHTTPServer((bind, 0), Handler)
    server.daemon_threads = True
    # Clients that give up early (caps, timeouts) are part of the tests.
    server.handle_error = lambda request, address: None
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
