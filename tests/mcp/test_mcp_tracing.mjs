// Traces with the official MCP TypeScript SDK client (docs/tracing.md): a
// tools/call that carries _meta.traceparent, as the SDK sends a request's
// _meta, comes back to the test's own OTLP receiver as the parent of
// airlock's server span, with the run's span under that.
import http from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AIRLOCK, assert, assertEqual, runTests } from './lib.mjs';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';

// The receiver: every span of every OTLP JSON body POSTed to /v1/traces.
function receiver() {
  const spans = [];
  const waiters = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      for (const rs of JSON.parse(body).resourceSpans) {
        for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
      for (const w of waiters.splice(0)) w();
    });
  });
  const until = (pred) => new Promise((resolve) => {
    const check = () => (pred(spans) ? resolve() : waiters.push(check));
    check();
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, spans, until, port: server.address().port }));
  });
}

const tests = [
  ['a traceparent in _meta is the parent of the server span', async () => {
    const rcv = await receiver();
    const env = {
      ...process.env,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${rcv.port}`,
      OTEL_BSP_SCHEDULE_DELAY: '50',
    };
    const t = new StdioClientTransport({ command: AIRLOCK, args: ['mcp'], env, stderr: 'pipe' });
    const c = new Client({ name: 'airlock-trace-test', version: '1.0.0' });
    await c.connect(t);
    try {
      const r = await c.callTool({
        name: 'execute_code',
        arguments: { code: 'print(6 * 7)' },
        _meta: { traceparent: `00-${TRACE_ID}-${PARENT_ID}-01` },
      }, undefined, { timeout: 120000 });
      assertEqual(r.isError, false, 'isError');
      await rcv.until((s) => s.some((x) => x.name === 'airlock.run' && x.traceId === TRACE_ID));
      const server = rcv.spans.find((x) => x.name === 'tools/call execute_code');
      assert(server, 'the server span');
      assertEqual(server.traceId, TRACE_ID, 'trace id');
      assertEqual(server.parentSpanId, PARENT_ID, 'parent span id');
      assertEqual(server.kind, 2, 'kind SERVER');
      const run = rcv.spans.find((x) => x.name === 'airlock.run' && x.traceId === TRACE_ID);
      assertEqual(run.parentSpanId, server.spanId, "the run's parent");
    } finally {
      await c.close();
      rcv.server.close();
    }
  }],
];

runTests('test_mcp_tracing', tests);
