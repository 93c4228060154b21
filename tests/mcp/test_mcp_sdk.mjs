// `airlock mcp` driven by the official MCP TypeScript SDK client, the way an
// agent framework uses it: connect, list the tool, run code that reads
// /input, calls a host tool and writes a PNG and a CSV to /output, and check
// every content item, the run record sent on request in _meta, and reading
// a run's files back as resources.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AIRLOCK, TOOLS_FILE, assert, assertEqual, assertIncludes, makeWorkspace, rmrf, runTests, SERVER_TOOLS } from './lib.mjs';

const ws = makeWorkspace();
let client;
let transport;
let stderr = '';

// Generous: the first call waits for the sandbox to be built.
const CALL_OPTS = { timeout: 120000 };
// The run record a program asks for with the call.
const RECORD = { 'dev.airlock/run': true };

async function connect(args) {
  const t = new StdioClientTransport({ command: AIRLOCK, args: ['mcp', ...args], stderr: 'pipe' });
  const c = new Client({ name: 'airlock-sdk-test', version: '1.0.0' });
  await c.connect(t);
  if (t.stderr) t.stderr.on('data', (d) => { stderr += d; });
  return [c, t];
}

function textItems(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text);
}

// The guest builds a small valid PNG with zlib and struct, a CSV from the
// workspace, and calls the host tool.
const MAIN_CODE = String.raw`
import csv, hashlib, struct, zlib

with open("/input/data.csv", newline="") as f:
    rows = list(csv.DictReader(f))
total = sum(int(r["value"]) for r in rows)
print("rows", len(rows), "total", total)

res = call_tool("compute", operation="mul", a=total, b=2)
print("tool result", res["result"])

def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))

w, h = 4, 3
raw = b"".join(b"\x00" + bytes([255, 0, 0]) * w for _ in range(h))
png = (b"\x89PNG\r\n\x1a\n"
       + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw))
       + chunk(b"IEND", b""))
with open("/output/chart.png", "wb") as f:
    f.write(png)
print("png", hashlib.sha256(png).hexdigest())

with open("/output/summary.csv", "w", newline="") as f:
    out = csv.writer(f, lineterminator="\n")
    out.writerow(["name", "doubled"])
    for r in rows:
        out.writerow([r["name"], int(r["value"]) * 2])
`;

const tests = [
  ['connect: server info, capabilities and instructions', async () => {
    [client, transport] = await connect(['--workspace', ws, '--tools', TOOLS_FILE]);
    const info = client.getServerVersion();
    assertEqual(info.name, 'airlock', 'server name');
    assert(typeof info.version === 'string' && info.version.length > 0, 'server version');
    const caps = client.getServerCapabilities();
    assert(caps.tools, 'tools capability');
    assert(caps.resources, 'resources capability');
    const instr = client.getInstructions();
    assertIncludes(instr, 'execute_code', 'instructions');
    assertIncludes(instr, 'compute', 'instructions name the tool');
    assertIncludes(instr, 'reachable only', 'instructions say tools are inside execute_code');
    assertIncludes(instr, 'Without a session, nothing survives', 'instructions true with sessions too');
  }],

  ['tools/list: execute_code with the generated description, and the session tools', async () => {
    const { tools } = await client.listTools();
    assertEqual(tools.map((t) => t.name), SERVER_TOOLS, 'tool names');
    const t = tools[0];
    assertIncludes(t.description, 'compute', 'description');
    assertIncludes(t.description, 'operation (string, required)', 'description');
    assertIncludes(t.description, '/input/data.csv', 'description names the workspace file');
    assertIncludes(t.description, '/output', 'description');
    assertIncludes(t.description, 'Network: none', 'description');
    assertIncludes(t.description, 'A call without a session starts from a fresh interpreter', 'description true with sessions too');
    assertEqual(t.inputSchema.type, 'object', 'inputSchema.type');
    assertEqual(t.inputSchema.required, ['code'], 'inputSchema.required');
    assertEqual(t.inputSchema.properties.code.type, 'string', 'code type');
    assertEqual(t.annotations.readOnlyHint, false, 'readOnlyHint');
    assertEqual(t.annotations.destructiveHint, false, 'destructiveHint');
    assertEqual(t.annotations.idempotentHint, false, 'idempotentHint');
    assertEqual(t.annotations.openWorldHint, false, 'openWorldHint without an allow-list');
    assert(typeof t.annotations.title === 'string', 'annotations.title');
    assertEqual(t._meta['dev.airlock/approval_mode'], 'never_require', 'approval mode');
    // No outputSchema: a client that sees one hands its model the structured
    // result instead of the content (Mastra), and images would not reach it.
    assertEqual(t.outputSchema, undefined, 'outputSchema');
  }],

  ['tools/call: stdout, tool call, image and text resource items, each once', async () => {
    const r = await client.callTool({ name: 'execute_code', arguments: { code: MAIN_CODE }, _meta: RECORD }, undefined, CALL_OPTS);
    assertEqual(r.isError, false, `isError (content: ${JSON.stringify(r.content).slice(0, 1500)})`);
    // stdout, then one item per file (sorted by path).
    assertEqual(r.content.map((c) => c.type), ['text', 'image', 'resource'], 'content types');
    const out = r.content[0].text;
    assertIncludes(out, 'rows 3 total 42', 'stdout');
    assertIncludes(out, 'tool result 84', 'stdout shows the tool result');
    const pngHash = /png ([0-9a-f]{64})/.exec(out)[1];

    const img = r.content[1];
    assertEqual(img.mimeType, 'image/png', 'image mimeType');
    const png = Buffer.from(img.data, 'base64');
    assertEqual(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'PNG signature');
    assertEqual(png.readUInt32BE(16), 4, 'PNG width');
    assertEqual(png.readUInt32BE(20), 3, 'PNG height');
    assertEqual(crypto.createHash('sha256').update(png).digest('hex'), pngHash, 'PNG bytes');

    const res = r.content[2].resource;
    assert(/^airlock:\/\/run\/[0-9a-f]{32}\/output\/summary\.csv$/.test(res.uri), `resource uri ${res.uri}`);
    assertEqual(res.mimeType, 'text/csv', 'resource mimeType');
    assertEqual(res.text, 'name,doubled\nalpha,2\nbeta,4\ngamma,78\n', 'CSV as text');
    assertEqual(res.blob, undefined, 'no base64 of a text file');

    assertEqual(r.structuredContent, undefined, 'no structuredContent');
    const s = r._meta['dev.airlock/run'];
    assertEqual(s.status, 'ok', 'status');
    assertEqual(s.exit_code, 0, 'exit_code');
    assert(/^[0-9a-f]{32}$/.test(s.id), 'run id');
    assertEqual(s.files.map((f) => f.path), ['/output/chart.png', '/output/summary.csv'], 'files sorted by path');
    assertEqual(s.files[0].media_type, 'image/png', 'file media type');
    assertEqual(s.files[0].size, png.length, 'file size');
    assertEqual(s.files[1].uri, res.uri, 'the record names the resource URI');
    assertEqual(s.refused, [], 'refused');
    assertEqual(s.parts, ['stdout', 'file', 'file'], 'the kind of each content item');
    assert(typeof s.duration_ms === 'number' && s.duration_ms >= 0, 'duration_ms');
    // The record holds no payload: every byte of the files went once.
    assert(!JSON.stringify(s).includes(img.data.slice(0, 40)), 'no image data in the record');

    // The files can be read back by the URIs, and listed.
    const back = await client.readResource({ uri: s.files[0].uri });
    assertEqual(back.contents[0].blob, img.data, 'the image read back');
    assertEqual(back.contents[0].mimeType, 'image/png', 'its media type');
    const csv = await client.readResource({ uri: res.uri });
    assertEqual(csv.contents[0].text, res.text, 'the CSV read back as text');
    const { resources } = await client.listResources();
    for (const f of s.files) assert(resources.some((x) => x.uri === f.uri), `${f.uri} listed`);
  }],

  ['tools/call: without the request, no run record', async () => {
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'print(1)' } }, undefined, CALL_OPTS);
    assertEqual(r.content, [{ type: 'text', text: '1\n' }], 'content');
    assertEqual(r._meta, undefined, 'no _meta');
  }],

  ['resources/read: a URI this server does not hold is a clear error', async () => {
    for (const uri of [`airlock://run/${'0'.repeat(32)}/output/x.csv`, 'file:///etc/passwd']) {
      let error;
      try {
        await client.readResource({ uri });
      } catch (e) {
        error = e;
      }
      assert(error, `reading ${uri} must fail`);
      assertEqual(error.code, -32002, `error code (${error.message})`);
      assertIncludes(error.message, 'resource not found', 'message');
    }
  }],

  ['tools/call: a failing snippet is isError with the traceback', async () => {
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'print("before")\nraise ValueError("boom 42")' } }, undefined, CALL_OPTS);
    assertEqual(r.isError, true, 'isError');
    const texts = textItems(r).join('\n');
    assertIncludes(texts, 'before', 'stdout before the error');
    assertIncludes(texts, 'ValueError', 'error text');
    assertIncludes(texts, 'boom 42', 'error text');
    // The error is told once, without a doubled "Error: error:".
    assertEqual(texts.split('exited with status 1').length, 2, `status line once: ${texts}`);
    assert(!texts.includes('Error: error'), `no doubled prefix: ${texts}`);
  }],

  ['tools/call: a failing host tool raises RuntimeError in the guest', async () => {
    const code = 'try:\n    call_tool("compute", operation="div", a=1, b=0)\nexcept RuntimeError as e:\n    print("caught", e)\n';
    const r = await client.callTool({ name: 'execute_code', arguments: { code } }, undefined, CALL_OPTS);
    assertEqual(r.isError, false, 'isError');
    assertIncludes(r.content[0].text, 'caught', 'stdout');
    assertIncludes(r.content[0].text, 'division by zero', 'tool message');
  }],

  ['tools/call: no output at all still gives one text item', async () => {
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'x = 1' } }, undefined, CALL_OPTS);
    assertEqual(r.isError, false, 'isError');
    assertEqual(r.content.length, 1, 'one item');
    assertEqual(r.content[0].type, 'text', 'text item');
  }],

  ['runs do not share state', async () => {
    await client.callTool({ name: 'execute_code', arguments: { code: 'import builtins\nbuiltins.leak = 1\nopen("/tmp/leak", "w").write("x")' } }, undefined, CALL_OPTS);
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'import builtins, os\nprint(hasattr(builtins, "leak"), os.path.exists("/tmp/leak"), os.listdir("/output"))' } }, undefined, CALL_OPTS);
    assertIncludes(r.content[0].text, 'False False []', 'fresh state');
  }],

  ['a workspace edit is seen at the next call', async () => {
    fs.writeFileSync(path.join(ws, 'later.txt'), 'added after start\n');
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'print(open("/input/later.txt").read().strip())' } }, undefined, CALL_OPTS);
    assertEqual(r.isError, false, `isError: ${JSON.stringify(r.content)}`);
    assertIncludes(r.content[0].text, 'added after start', 'new file visible');
  }],

  ['file names are percent-encoded in resource URIs; larger files arrive whole', async () => {
    const code = [
      'import os, hashlib',
      'os.makedirs("/output/sub dir", exist_ok=True)',
      'open("/output/sub dir/a b#\u00fc.txt", "w").write("hello\\n")',
      'data = bytes(range(256)) * 8192',
      'open("/output/big.bin", "wb").write(data)',
      'print(hashlib.sha256(data).hexdigest())',
    ].join('\n');
    const r = await client.callTool({ name: 'execute_code', arguments: { code }, _meta: RECORD }, undefined, CALL_OPTS);
    assertEqual(r.isError, false, `isError: ${JSON.stringify(r.content).slice(0, 500)}`);
    const resources = r.content.filter((c) => c.type === 'resource').map((c) => c.resource);
    const id = r._meta['dev.airlock/run'].id;
    assertEqual(resources.map((x) => x.uri), [`airlock://run/${id}/output/big.bin`, `airlock://run/${id}/output/sub%20dir/a%20b%23%C3%BC.txt`], 'uris');
    assertEqual(decodeURIComponent(new URL(resources[1].uri).pathname), `/${id}/output/sub dir/a b#\u00fc.txt`, 'decoded path');
    assertEqual(resources[1].mimeType, 'text/plain', 'text file media type');
    assertEqual(resources[1].text, 'hello\n', 'text file as text');
    const back = await client.readResource({ uri: resources[1].uri });
    assertEqual(back.contents[0].text, 'hello\n', 'read back by its encoded URI');
    const big = Buffer.from(resources[0].blob, 'base64');
    assertEqual(big.length, 256 * 8192, 'big file size');
    assertEqual(crypto.createHash('sha256').update(big).digest('hex'), r.content[0].text.trim(), 'big file bytes');
    assertEqual(r._meta['dev.airlock/run'].files[1].path, '/output/sub dir/a b#\u00fc.txt', 'path in the record');
  }],

  ['ping', async () => {
    const r = await client.ping();
    assertEqual(r, {}, 'ping result');
  }],

  ['unknown tool name is a -32602 protocol error', async () => {
    let error;
    try {
      await client.callTool({ name: 'compute', arguments: { operation: 'add', a: 1, b: 2 } });
    } catch (e) {
      error = e;
    }
    assert(error, 'callTool with an unknown name must fail');
    assertEqual(error.code, -32602, `error code (${error.message})`);
  }],

  ['cancelling a call stops it and the server keeps serving', async () => {
    const ac = new AbortController();
    // The call is cancelled once its code runs: its first progress
    // notification carries the line it printed.
    let running;
    const started = new Promise((r) => { running = r; });
    const p = client.callTool({ name: 'execute_code', arguments: { code: 'import time\nprint("started", flush=True)\ntime.sleep(60)' } }, undefined,
      { signal: ac.signal, timeout: 120000, onprogress: (n) => { if ((n.message || '').includes('started')) running(); } });
    await started;
    ac.abort('test cancels');
    let error;
    try {
      await p;
    } catch (e) {
      error = e;
    }
    assert(error, 'the aborted call must reject');
    const r = await client.callTool({ name: 'execute_code', arguments: { code: 'print("after cancel")' } }, undefined, CALL_OPTS);
    assertIncludes(r.content[0].text, 'after cancel', 'served after a cancel');
  }],

  ['parallel calls return their own results', async () => {
    const calls = [];
    for (let i = 0; i < 6; i++) {
      calls.push(client.callTool({ name: 'execute_code', arguments: { code: `print("call-${i}")\nopen("/output/f${i}.txt", "w").write("${i}")` }, _meta: RECORD }, undefined, CALL_OPTS));
    }
    const results = await Promise.all(calls);
    results.forEach((r, i) => {
      assertEqual(r.content[0].text.trim(), `call-${i}`, `stdout of call ${i}`);
      assertEqual(r._meta['dev.airlock/run'].files.map((f) => f.path), [`/output/f${i}.txt`], `files of call ${i}`);
      assertEqual(r.content[1].resource.text, `${i}`, `file of call ${i}`);
    });
  }],

  ['session_fork: a copy of a session, whose calls and the original\'s may run at once', async () => {
    // The handle is structuredContent too, which the SDK checks against
    // the tools' outputSchema (from tools/list).
    const { tools } = await client.listTools();
    for (const name of ['session_open', 'session_fork']) {
      const t = tools.find((x) => x.name === name);
      assertEqual(t.outputSchema.required, ['session'], `${name}'s outputSchema`);
    }
    const open = await client.callTool({ name: 'session_open', arguments: {} }, undefined, CALL_OPTS);
    const h = open._meta['dev.airlock/session'];
    assertEqual(open.structuredContent, { session: h }, 'session_open\'s structuredContent');
    await client.callTool({ name: 'execute_code', arguments: { code: 'x = [1]', session: h } }, undefined, CALL_OPTS);
    const fk = await client.callTool({ name: 'session_fork', arguments: { session: h } }, undefined, CALL_OPTS);
    assertEqual(fk.isError, false, `fork (${JSON.stringify(fk.content)})`);
    const f = fk._meta['dev.airlock/session'];
    assertEqual(fk.structuredContent, { session: f }, 'session_fork\'s structuredContent');
    assert(/^sess_[a-z2-7]{26}$/.test(f) && f !== h, `fork handle ${f}`);
    assertIncludes(fk.content[0].text, f, 'the text names the new handle');
    // Both at once: the server runs them one after the other in the copy
    // they share, each in its own state.
    const [a, b] = await Promise.all([
      client.callTool({ name: 'execute_code', arguments: { code: 'x.append("a")\nprint(x)', session: h } }, undefined, CALL_OPTS),
      client.callTool({ name: 'execute_code', arguments: { code: 'x.append("f")\nprint(x)', session: f } }, undefined, CALL_OPTS),
    ]);
    assertEqual(a.content[0].text.trim(), "[1, 'a']", 'the original');
    assertEqual(b.content[0].text.trim(), "[1, 'f']", 'the fork');
    for (const s of [h, f]) await client.callTool({ name: 'session_close', arguments: { session: s } }, undefined, CALL_OPTS);
  }],

  ['close: the server exits when the client closes', async () => {
    const pid = transport.pid;
    await client.close();
    // The SDK closes stdin and waits; the process must be gone.
    let alive = true;
    for (let i = 0; i < 100 && alive; i++) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        alive = false;
      }
    }
    assert(!alive, 'airlock mcp still running after close');
  }],

  ['allow-list and approval show in the tool entry', async () => {
    const [c] = await connect(['--allow-domain', 'api.example.com=GET', '--approval', 'always']);
    try {
      const { tools } = await c.listTools();
      const t = tools[0];
      assertEqual(t.annotations.openWorldHint, true, 'openWorldHint with an allow-list');
      assertEqual(t._meta['dev.airlock/approval_mode'], 'always_require', 'approval mode');
      assertIncludes(t.description, 'api.example.com', 'description');
      assertIncludes(t.description, 'There is no /input', 'description without workspace');
    } finally {
      await c.close();
    }
  }],
];

runTests('test_mcp_sdk', tests, {
  teardown: async () => {
    if (stderr.trim()) console.log(`server stderr:\n${stderr.slice(0, 2000)}`);
    rmrf(ws);
  },
});
