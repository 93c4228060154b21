// `airlock serve` (MCP over Streamable HTTP) driven by real clients: the
// official TypeScript SDK's StreamableHTTPClientTransport, the Vercel AI SDK
// (@ai-sdk/mcp, its 'http' transport) and LangChain (@langchain/mcp-adapters,
// transport 'http'), through the scenarios of the stdio tests: list, call,
// a figure, progress, an error and a session; plus a bearer token the
// clients send and a request without it that fails.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { assert, startServe, assertEqual, assertIncludes, rmrf, runTests, tmpdir, SERVER_TOOLS } from './lib.mjs';

const TOKEN = `tok-${crypto.randomBytes(12).toString('hex')}`;
const AUTH = { Authorization: `Bearer ${TOKEN}` };
const CALL_OPTS = { timeout: 120000 };

const FIGURE_CODE = `
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\\x00" + bytes([200, 30, 30] * 4) for _ in range(3))
png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
open("/output/chart.png", "wb").write(png)
print("figure written")
`;
const PROGRESS_CODE = 'import time\nfor i in range(4):\n    print("step", i, flush=True)\n    time.sleep(0.6)\nprint("done")';
const ERROR_CODE = 'print("before")\nraise ValueError("boom 7")';

let server;
let dir;
let url;

async function sdkClient(headers = AUTH) {
  const c = new Client({ name: 'airlock-http-test', version: '1' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return c;
}

const textOf = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

const tests = [
  ['start airlock serve with a tokens file', async () => {
    dir = tmpdir('airlock-serve-');
    fs.writeFileSync(path.join(dir, 'tokens'), `${TOKEN}\n`);
    server = await startServe(['--instance', 'node-a', '--tokens', path.join(dir, 'tokens')]);
    url = `http://127.0.0.1:${server.port}/mcp`;
  }],

  ['official SDK: without the token, connecting fails with 401', async () => {
    let error;
    try {
      await sdkClient({});
    } catch (e) {
      error = e;
    }
    assert(error, 'connect without a token must fail');
    assertEqual(error.code, 401, `HTTP status of ${error.message}`);
    assertIncludes(error.message, 'authorization required', 'error message');
  }],

  ['official SDK: list, call, figure, error over HTTP', async () => {
    const c = await sdkClient();
    try {
      assertEqual(c.getServerVersion().name, 'airlock', 'server name');
      const { tools } = await c.listTools();
      assertEqual(tools.map((t) => t.name), SERVER_TOOLS, 'tool names');
      let r = await c.callTool({ name: 'execute_code', arguments: { code: 'print(6 * 7)' } }, undefined, CALL_OPTS);
      assertEqual(r.content, [{ type: 'text', text: '42\n' }], 'stdout');
      r = await c.callTool({ name: 'execute_code', arguments: { code: FIGURE_CODE } }, undefined, CALL_OPTS);
      assertEqual(r.content.map((x) => x.type), ['text', 'image'], 'content types');
      assertEqual(r.content[1].mimeType, 'image/png', 'image type');
      const png = Buffer.from(r.content[1].data, 'base64');
      assertEqual(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'PNG signature');
      r = await c.callTool({ name: 'execute_code', arguments: { code: ERROR_CODE } }, undefined, CALL_OPTS);
      assertEqual(r.isError, true, 'isError');
      assertIncludes(textOf(r), 'boom 7', 'error text');
      assertIncludes(textOf(r), 'before', 'stdout before the error');
    } finally {
      await c.close();
    }
  }],

  ['official SDK: progress notifications stream over SSE before the result', async () => {
    const c = await sdkClient();
    try {
      const seen = [];
      const r = await c.callTool({ name: 'execute_code', arguments: { code: PROGRESS_CODE } }, undefined,
        { ...CALL_OPTS, onprogress: (p) => seen.push(p) });
      assertIncludes(textOf(r), 'done', 'result');
      assert(seen.length >= 2, `progress notifications: ${JSON.stringify(seen)}`);
      for (let i = 1; i < seen.length; i++) assert(seen[i].progress > seen[i - 1].progress, 'progress grows');
      assert(seen.some((p) => /step \d/.test(p.message || '')), `a message names the output: ${JSON.stringify(seen)}`);
    } finally {
      await c.close();
    }
  }],

  ['official SDK: a session keeps state across calls and names this instance', async () => {
    const c = await sdkClient();
    try {
      const o = await c.callTool({ name: 'session_open', arguments: {} }, undefined, CALL_OPTS);
      const h = o._meta['dev.airlock/session'];
      assert(/^sess_node-a_[a-z2-7]{26}$/.test(h), `handle ${h}`);
      await c.callTool({ name: 'execute_code', arguments: { code: 'x = 41', session: h } }, undefined, CALL_OPTS);
      const r = await c.callTool({ name: 'execute_code', arguments: { code: 'print(x + 1)', session: h } }, undefined, CALL_OPTS);
      assertIncludes(textOf(r), '42', 'state kept');
      // A fork over HTTP: its handle names the same instance, it has the
      // state, and what it changes stays on its side.
      const f = await c.callTool({ name: 'session_fork', arguments: { session: h } }, undefined, CALL_OPTS);
      const fh = f._meta['dev.airlock/session'];
      assert(/^sess_node-a_[a-z2-7]{26}$/.test(fh) && fh !== h, `fork handle ${fh}`);
      await c.callTool({ name: 'execute_code', arguments: { code: 'x = 100', session: fh } }, undefined, CALL_OPTS);
      const fr = await c.callTool({ name: 'execute_code', arguments: { code: 'print(x)', session: fh } }, undefined, CALL_OPTS);
      assertIncludes(textOf(fr), '100', 'fork state');
      const pr = await c.callTool({ name: 'execute_code', arguments: { code: 'print(x)', session: h } }, undefined, CALL_OPTS);
      assertIncludes(textOf(pr), '41', 'original unchanged by its fork');
      await c.callTool({ name: 'session_close', arguments: { session: fh } }, undefined, CALL_OPTS);
      const other = await c.callTool({ name: 'execute_code', arguments: { code: '1', session: `sess_node-b_${'a'.repeat(26)}` } }, undefined, CALL_OPTS);
      assertEqual(other.isError, true, 'another instance\'s handle is a tool error');
      assertIncludes(textOf(other), 'belongs to instance node-b; this is node-a', 'error names both');
      const closed = await c.callTool({ name: 'session_close', arguments: { session: h } }, undefined, CALL_OPTS);
      assertEqual(closed.isError, false, 'session_close');
    } finally {
      await c.close();
    }
  }],

  ['Vercel AI SDK (@ai-sdk/mcp, http transport): tools, call, error, session', async () => {
    const { createMCPClient } = await import('@ai-sdk/mcp');
    const c = await createMCPClient({ transport: { type: 'http', url, headers: AUTH } });
    try {
      const tools = await c.tools();
      assert(tools.execute_code && tools.session_open, `tools: ${Object.keys(tools)}`);
      const opts = { toolCallId: 't1', messages: [] };
      let out = await tools.execute_code.execute({ code: 'print("hi from http")' }, opts);
      assertEqual(out.isError, false, 'isError');
      assertIncludes(out.content[0].text, 'hi from http', 'stdout');
      out = await tools.execute_code.execute({ code: ERROR_CODE }, opts);
      assertEqual(out.isError, true, 'error isError');
      assertIncludes(out.content.map((x) => x.text || '').join('\n'), 'ValueError', 'error text');
      out = await tools.execute_code.execute({ code: FIGURE_CODE }, opts);
      assert(out.content.some((x) => x.type === 'image' && x.mimeType === 'image/png'), 'figure as image');
      const o = await tools.session_open.execute({}, opts);
      const h = o._meta['dev.airlock/session'];
      await tools.execute_code.execute({ code: 'y = 7', session: h }, opts);
      out = await tools.execute_code.execute({ code: 'print(y * 6)', session: h }, opts);
      assertIncludes(out.content[0].text, '42', 'session state');
      await tools.session_close.execute({ session: h }, opts);
    } finally {
      await c.close();
    }
  }],

  ['LangChain (@langchain/mcp-adapters, http transport): call, error, session', async () => {
    const { MultiServerMCPClient } = await import('@langchain/mcp-adapters');
    const c = new MultiServerMCPClient({ mcpServers: { airlock: { transport: 'http', url, headers: AUTH, automaticSSEFallback: false } } });
    try {
      const tools = await c.getTools();
      const exec = tools.find((t) => t.name === 'execute_code');
      const open = tools.find((t) => t.name === 'session_open');
      assert(exec && open, `tools: ${tools.map((t) => t.name)}`);
      const msg = await exec.invoke({ type: 'tool_call', id: 't1', name: exec.name, args: { code: 'print(2 ** 10)' } });
      const text = typeof msg.content === 'string' ? msg.content : msg.content.map((b) => b.text || '').join('');
      assertIncludes(text, '1024', 'stdout');
      let error;
      try {
        await exec.invoke({ type: 'tool_call', id: 't2', name: exec.name, args: { code: ERROR_CODE } });
      } catch (e) {
        error = e;
      }
      assert(error && /boom 7/.test(error.message), `error: ${error && error.message}`);
      const o = await open.invoke({ type: 'tool_call', id: 't3', name: open.name, args: {} });
      const otext = typeof o.content === 'string' ? o.content : o.content.map((b) => b.text || '').join('');
      const h = /sess_node-a_[a-z2-7]{26}/.exec(otext)[0];
      await exec.invoke({ type: 'tool_call', id: 't4', name: exec.name, args: { code: 'z = 5', session: h } });
      const r = await exec.invoke({ type: 'tool_call', id: 't5', name: exec.name, args: { code: 'print(z * 3)', session: h } });
      const rtext = typeof r.content === 'string' ? r.content : r.content.map((b) => b.text || '').join('');
      assertIncludes(rtext, '15', 'session state');
    } finally {
      await c.close();
    }
  }],

  ['the server logged one line per call and no secret', async () => {
    const lines = server.log().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const calls = lines.filter((l) => l.method === 'tools/call');
    assert(calls.length >= 15, `log lines of calls: ${calls.length}`);
    assert(!server.log().includes(TOKEN), 'the token is never logged');
    assert(!server.log().includes('boom 7'), 'no code or output in the log');
  }],
];

await runTests('test_mcp_http', tests, {
  teardown: async () => {
    if (server) {
      const exited = new Promise((resolve) => server.child.on('exit', (code) => resolve(code)));
      server.child.kill('SIGTERM');
      const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 60000))]);
      assertEqual(code, 0, 'exit status after SIGTERM');
    }
    if (dir) rmrf(dir);
  },
});
