"""The Python package takes the caller's trace context (docs/tracing.md):
a run's span comes back under the traceparent given to Sandbox.run and
Session.run. The tracer reads OTEL_* once per process, so the runs happen in
a child interpreter with them set, and the test's own OTLP receiver reads
the spans."""
import http.server
import json
import os
import socketserver
import subprocess
import sys
import threading

from conftest import ROOT

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"

CHILD = f'''
import airlock
with airlock.Sandbox() as sb:
    assert sb.run("print(1)", traceparent="00-{TRACE_ID}-{PARENT_ID}-01").success
    s = sb.session()
    assert s.run("x = 1", traceparent="00-{TRACE_ID}-{PARENT_ID}-01").success
    s.close()
'''


def test_run_and_cell_spans_join_the_given_trace():
    spans = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            for rs in body["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    spans.extend(ss["spans"])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
               OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{srv.server_address[1]}")
    try:
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    finally:
        srv.shutdown()
    # The library's exit handler sent what was queued before the process
    # ended.
    names = {s["name"]: s for s in spans if s["traceId"] == TRACE_ID}
    assert names["airlock.run"]["parentSpanId"] == PARENT_ID, spans
    assert names["airlock.cell"]["parentSpanId"] == PARENT_ID, spans
