// Both eras of the protocol: revision 2026-07-28 (no handshake; each request
// names its version in _meta; server/discover) and the initialize handshake
// of 2025-11-25 and earlier. First raw, at the JSON-RPC level, then through
// the four third-party clients agent developers use, in every era each one
// speaks: the MCP Inspector CLI (--protocol-era legacy, modern and auto), the
// Vercel AI SDK's @ai-sdk/mcp (discovery on and off), Mastra's @mastra/mcp
// (probing, pinned to 2026-07-28, pinned to legacy) and LangChain's
// @langchain/mcp-adapters (the official SDK 1.x underneath: legacy only).
// Each client connects over stdio, lists the tools and calls execute_code
// with print(...). What each adapter hands its model is for the result tests;
// these are about the protocol: a log of what each client sent shows which
// era it spoke.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { AIRLOCK, ROOT, RawPeer, assert, assertEqual, assertIncludes, rmrf, runTests, tmpdir, withPeer, SERVER_TOOLS } from './lib.mjs';

const MODERN = '2026-07-28';
const PV = 'io.modelcontextprotocol/protocolVersion';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const INFO = 'io.modelcontextprotocol/clientInfo';
const SERVER_INFO = 'io.modelcontextprotocol/serverInfo';
const NM = path.join(ROOT, 'tests', 'mcp', 'node_modules');
const work = tmpdir('airlock-mcp-eras-');

function envelope(extra = {}) {
  return { [PV]: MODERN, [CAPS]: {}, [INFO]: { name: 'raw-test', version: '1' }, ...extra };
}

// A server whose input is copied to a log on its way in: what the client
// sent, one JSON message per line. The copy stops at the client's end of
// input, and so does the server.
let nlog = 0;
function loggedServer() {
  const log = path.join(work, `sent-${++nlog}.jsonl`);
  fs.writeFileSync(log, '');
  const script = 'tee -a "$0" | exec "$1" mcp';
  return { command: '/bin/sh', args: ['-c', script, log, AIRLOCK], log };
}

function sentMessages(log) {
  return fs.readFileSync(log, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

// The era a client spoke, from what it sent: the tools/call it made and
// whether it ever sent initialize.
function spokenEra(log) {
  const sent = sentMessages(log);
  const call = sent.find((m) => m.method === 'tools/call');
  assert(call, `no tools/call among ${JSON.stringify(sent.map((m) => m.method))}`);
  const version = call.params && call.params._meta && call.params._meta[PV];
  const initialized = sent.some((m) => m.method === 'initialize');
  if (version === MODERN && !initialized) return 'modern';
  if (version === undefined && initialized) return 'legacy';
  return `mixed (${version}, initialize ${initialized})`;
}

function methodsSent(log) {
  return sentMessages(log).map((m) => m.method).filter(Boolean);
}

const PRINT_CODE = 'print("hello from", 6 * 7)';
const EXPECTED = 'hello from 42';

// ---- the MCP Inspector CLI ----------------------------------------------

const INSPECTOR = path.join(NM, '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');

function inspector(era, method, extra, server) {
  const home = path.join(work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const argv = [INSPECTOR, '--cli', '--protocol-era', era, '--connect-timeout', '120000', '--format', 'json', '--method', method, ...extra,
    '--', server.command, ...server.args];
  return new Promise((resolve) => {
    execFile(process.execPath, argv, { env: { ...process.env, HOME: home }, timeout: 180000, maxBuffer: 64 << 20 },
      (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}

function parseInspector(r, what) {
  assertEqual(r.code, 0, `${what}: exit status (stderr: ${r.stderr.slice(0, 1000)}; stdout: ${r.stdout.slice(0, 1000)})`);
  return JSON.parse(r.stdout);
}

async function inspectorRound(era, expectEra) {
  const s1 = loggedServer();
  const list = parseInspector(await inspector(era, 'tools/list', [], s1), `${era} tools/list`);
  const tools = list.tools || (list.result && list.result.tools);
  assertEqual(tools.map((t) => t.name), SERVER_TOOLS, `${era}: tools`);
  const s2 = loggedServer();
  const call = parseInspector(await inspector(era, 'tools/call',
    ['--tool-name', 'execute_code', '--tool-args-json', JSON.stringify({ code: PRINT_CODE })], s2), `${era} tools/call`);
  const result = call.result || call;
  assertEqual(result.isError, false, `${era}: isError`);
  assertIncludes(result.content.map((c) => c.text || '').join('\n'), EXPECTED, `${era}: content`);
  assertEqual(spokenEra(s2.log), expectEra, `${era}: the era spoken`);
  if (expectEra === 'modern') {
    assertEqual(methodsSent(s2.log)[0], 'server/discover', `${era}: first request`);
    assertEqual(result._meta && result._meta[SERVER_INFO] && result._meta[SERVER_INFO].name, 'airlock', `${era}: serverInfo`);
  }
}

// ---- the Vercel AI SDK --------------------------------------------------

// Over stdio it waits only 1 s for the answer to server/discover before it
// falls back to initialize. airlock answers it without waiting for its
// sandbox, whose build takes longer than that on a busy machine (the raw
// tests below hold the build to show it). A fallback shows here as the era
// "legacy".

async function aiSdkRound(discovery, expectEra) {
  const { createMCPClient } = await import('@ai-sdk/mcp');
  const { Experimental_StdioMCPTransport } = await import('@ai-sdk/mcp/mcp-stdio');
  const server = loggedServer();
  const client = await createMCPClient({
    transport: new Experimental_StdioMCPTransport({ command: server.command, args: server.args }),
    protocolVersionDiscovery: discovery,
  });
  try {
    const tools = await client.tools();
    assertEqual(Object.keys(tools), SERVER_TOOLS, 'tools');
    const out = await tools.execute_code.execute({ code: PRINT_CODE }, { toolCallId: 'c1', messages: [] });
    assertEqual(out.isError, false, 'isError');
    assertIncludes(out.content.map((c) => c.text || '').join('\n'), EXPECTED, 'content');
  } finally {
    await client.close();
  }
  assertEqual(spokenEra(server.log), expectEra, 'the era spoken');
  if (expectEra === 'modern') assertEqual(methodsSent(server.log)[0], 'server/discover', 'first request');
}

// ---- Mastra -------------------------------------------------------------

async function mastraRound(protocolVersion, expectEra) {
  const { MCPClient } = await import('@mastra/mcp');
  const server = loggedServer();
  const def = { command: server.command, args: server.args, timeout: 120000 };
  if (protocolVersion) def.protocolVersion = protocolVersion;
  const mcp = new MCPClient({ id: `eras-${nlog}`, servers: { airlock: def }, timeout: 120000 });
  try {
    const tools = await mcp.listTools();
    assertEqual(Object.keys(tools), SERVER_TOOLS.map((n) => `airlock_${n}`), 'tools');
    const versions = mcp.getServerProtocolVersions();
    if (expectEra === 'modern') assertEqual(versions.airlock, MODERN, 'negotiated version');
    else assert(versions.airlock && versions.airlock < MODERN, `negotiated version ${versions.airlock}`);
    const out = await tools.airlock_execute_code.execute({ code: PRINT_CODE }, {});
    const text = JSON.stringify(out);
    assertIncludes(text, EXPECTED, 'result');
  } finally {
    await mcp.disconnect();
  }
  assertEqual(spokenEra(server.log), expectEra, 'the era spoken');
}

// ---- LangChain ----------------------------------------------------------

async function langchainRound() {
  const { MultiServerMCPClient } = await import('@langchain/mcp-adapters');
  const server = loggedServer();
  const client = new MultiServerMCPClient({
    mcpServers: { airlock: { transport: 'stdio', command: server.command, args: server.args } },
    throwOnLoadError: true,
  });
  try {
    const tools = await client.getTools();
    assertEqual(tools.map((t) => t.name), SERVER_TOOLS, 'tools');
    const out = await tools[0].invoke({ code: PRINT_CODE });
    assertIncludes(JSON.stringify(out), EXPECTED, 'result');
  } finally {
    await client.close();
  }
  assertEqual(spokenEra(server.log), 'legacy', 'the era spoken');
}

// ---- raw ------------------------------------------------------------------

// An upstream MCP server whose start the test holds: airlock mcp starts it
// while it builds its sandbox (each process builds its own), and it answers
// nothing before release() (tests/helpers/mcp_misbehave.py, MISBEHAVE_GATE).
// So the build cannot end before release(), which the test calls only once
// it has seen what it wanted: no timing is involved. Without release() the
// build would end after airlock's own 30 s bound on a server's start, without
// the server, whose tools the description would then not count.
const MISBEHAVE = path.join(ROOT, 'tests', 'helpers', 'mcp_misbehave.py');
let ngates = 0;

async function withGate(fn) {
  const dir = path.join(work, `gate-${++ngates}`);
  fs.mkdirSync(dir);
  const sock = path.join(dir, 'gate.sock');
  const conns = [];
  let released = false;
  let onConnect;
  const connected = new Promise((resolve) => { onConnect = resolve; });
  const server = net.createServer((c) => {
    conns.push(c);
    c.on('error', () => {});
    if (released) c.end('go\n');
    onConnect();
  });
  await new Promise((resolve, reject) => server.listen(sock, resolve).on('error', reject));
  const file = path.join(dir, 'servers.json');
  fs.writeFileSync(file, JSON.stringify({ mcpServers: { gate: {
    command: 'python3', args: [MISBEHAVE], env: { MISBEHAVE_GATE: sock },
  } } }));
  const gate = {
    file,
    // Resolves once the build has started the server, which then holds it.
    async started(timeoutMs = 120000) {
      let t;
      const late = new Promise((_, reject) => {
        t = setTimeout(() => reject(new Error('the gated server was never started')), timeoutMs);
      });
      try {
        await Promise.race([connected, late]);
      } finally {
        clearTimeout(t);
      }
    },
    release() {
      released = true;
      for (const c of conns) c.end('go\n');
    },
  };
  try {
    await fn(gate);
  } finally {
    gate.release();
    await new Promise((resolve) => server.close(resolve));
  }
}

// Runs fn with a RawPeer of `airlock mcp ARGS` whose exit the test checks
// itself; the server is killed if the test ends before it does.
async function withRawPeer(args, fn) {
  const p = new RawPeer(args);
  try {
    await fn(p);
  } finally {
    if (p.child.exitCode === null && p.child.signalCode === null) {
      p.child.kill('SIGKILL');
      await p.exited;
    }
  }
}

// Waits for the child's exit, killing it after timeoutMs (a hang fails the
// test instead of hanging it).
async function exitOf(p, timeoutMs = 120000) {
  const t = setTimeout(() => p.child.kill('SIGKILL'), timeoutMs);
  const r = await p.exited;
  clearTimeout(t);
  return r;
}


const tests = [
  ['raw: server/discover without initialize', () => withPeer([], async (p) => {
    const r = await p.request('server/discover', { _meta: envelope() }, 'd1');
    const res = r.result;
    assert(res, `discover result: ${JSON.stringify(r)}`);
    assertEqual(res.resultType, 'complete', 'resultType');
    assertEqual(res.supportedVersions, [MODERN], 'supportedVersions');
    assertEqual(res.capabilities.tools, { listChanged: false }, 'capabilities.tools');
    assertEqual(res._meta[SERVER_INFO].name, 'airlock', 'serverInfo');
    assert(typeof res._meta[SERVER_INFO].version === 'string', 'serverInfo.version');
    assertIncludes(res.instructions, 'execute_code', 'instructions');
    assertEqual([res.ttlMs, res.cacheScope], [0, 'private'], 'cache hints');
  })],

  // The Vercel AI SDK waits 1 s for the answer to server/discover before it
  // falls back to initialize: the answer must not wait for the sandbox.
  ['raw: ping and server/discover are answered while the sandbox is built; the rest waits for it', () => withGate(async (gate) => {
    await withPeer(['--servers', gate.file], async (p) => {
      await gate.started();
      const d = await p.request('server/discover', { _meta: envelope() }, 'd1');
      assertEqual(d.result && d.result.supportedVersions, [MODERN], `discover during the build: ${JSON.stringify(d)}`);
      assertIncludes(d.result.instructions, 'execute_code', 'instructions');
      const ping = await p.request('ping', {}, 'p1');
      assertEqual(ping.result, {}, 'ping during the build');
      const mping = await p.request('ping', { _meta: envelope() }, 'p2');
      assertEqual(mping.result && mping.result.resultType, 'complete', 'ping of 2026-07-28 during the build');
      // Sent before the release, answered after it, with the description
      // of the sandbox the gated server is part of.
      await p.send({ jsonrpc: '2.0', id: 'l1', method: 'tools/list', params: { _meta: envelope() } });
      await p.send({ jsonrpc: '2.0', id: 'd2', method: 'server/discover', params: { _meta: envelope() } });
      gate.release();
      const list = await p.next(120000);
      assertEqual(list.id, 'l1', 'the first answer after the release');
      const desc = list.result.tools.find((t) => t.name === 'execute_code').description;
      assert(/\bgate \(\d+ tools\)/.test(desc), `the description counts the gated server's tools: ${desc.slice(0, 2000)}`);
      const d2 = await p.next();
      assertEqual(d2.id, 'd2', 'answers in order');
      assertEqual(d2.result, d.result, 'server/discover says the same before and after the build');
    });
  })],

  ['raw: end of input during the build: what was sent is answered, then the server exits 0', () => withGate((gate) => withRawPeer(['--servers', gate.file], async (p) => {
    await gate.started();
    const d = await p.request('server/discover', { _meta: envelope() }, 'd1');
    assertEqual(d.result && d.result.supportedVersions, [MODERN], 'discover during the build');
    await p.send({ jsonrpc: '2.0', id: 'i1', method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw-test', version: '1' } } });
    await p.send({ jsonrpc: '2.0', id: 'l1', method: 'tools/list', params: {} });
    p.child.stdin.end();
    gate.release();
    const { code } = await exitOf(p);
    assertEqual(code, 0, `exit status; stderr: ${p.stderr}`);
    assertEqual(p.messages.map((m) => m.id), ['i1', 'l1'], 'the answers, in order');
    assertEqual(p.messages[0].result.instructions, d.result.instructions, 'the same instructions');
    assert(p.messages[1].result.tools.length > 0, 'tools');
  }))],

  ['raw: a configured path the build finds at fault still ends the server with status 2, unanswered', () => withGate(async (gate) => {
    const folder = path.join(work, 'pypath-gone');
    fs.mkdirSync(folder);
    await withRawPeer(['--servers', gate.file, '--python-path', folder], async (p) => {
      await gate.started();
      const d = await p.request('server/discover', { _meta: envelope() }, 'd1');
      assertEqual(d.result && d.result.supportedVersions, [MODERN], 'discover during the build');
      await p.send({ jsonrpc: '2.0', id: 'l1', method: 'tools/list', params: { _meta: envelope() } });
      // The folder goes away while the build waits for the server, which it
      // starts before it checks the folders.
      fs.rmdirSync(folder);
      gate.release();
      const { code } = await exitOf(p);
      assertEqual(code, 2, `exit status; stderr: ${p.stderr}`);
      const lines = p.stderr.trim().split('\n');
      assert(lines.length === 1 && lines[0].startsWith('airlock mcp: ') && lines[0].includes(folder),
        `one line naming the folder: ${p.stderr}`);
      assertEqual(p.messages.map((m) => m.id), [], 'no answer to what waited for the build');
    });
  })],

  ['raw: requests of 2026-07-28 need no handshake and carry its fields', () => withPeer([], async (p) => {
    const list = await p.request('tools/list', { _meta: envelope() }, 'l1');
    assertEqual(list.result.tools.map((t) => t.name), SERVER_TOOLS, 'tools');
    assertEqual([list.result.resultType, list.result.ttlMs, list.result.cacheScope], ['complete', 0, 'private'], 'list fields');
    assertEqual(list.result.tools[0]._meta, { 'dev.airlock/approval_mode': 'never_require' }, 'the tool\'s reverse-DNS _meta');
    const call = await p.request('tools/call', { name: 'execute_code', arguments: { code: PRINT_CODE }, _meta: envelope() }, 'c1', 120000);
    assertEqual(call.result.resultType, 'complete', 'call resultType');
    assertEqual(call.result._meta[SERVER_INFO].name, 'airlock', 'call serverInfo');
    assertIncludes(call.result.content[0].text, EXPECTED, 'output');
    const bad = await p.request('tools/call', { name: 'execute_code', arguments: {}, _meta: envelope() }, 'c2');
    assertEqual([bad.result.isError, bad.result.resultType], [true, 'complete'], 'a tool error in the modern form');
    const ping = await p.request('ping', { _meta: envelope() }, 'p1');
    assertEqual(ping.result.resultType, 'complete', 'ping');
    // A handshake-era request on the same connection still needs initialize.
    const legacy = await p.request('tools/list', {}, 'l2');
    assertEqual(legacy.error && legacy.error.code, -32600, 'legacy request before initialize');
    assertIncludes(legacy.error.message, MODERN, 'the message names both ways in');
  })],

  ['raw: bad envelopes and unknown revisions', () => withPeer([], async (p) => {
    const old = await p.request('tools/list', { _meta: { ...envelope(), [PV]: '1900-01-01' } }, 'v1');
    assertEqual(old.error && old.error.code, -32022, 'unsupported version');
    assertEqual(old.error.data, { supported: [MODERN], requested: '1900-01-01' }, 'error data');
    const noCaps = await p.request('tools/list', { _meta: { [PV]: MODERN } }, 'v2');
    assertEqual(noCaps.error && noCaps.error.code, -32602, 'missing clientCapabilities');
    assertEqual(noCaps.error.data.envelope, { key: CAPS, problem: 'missing' }, 'the key at fault');
    const badVersion = await p.request('server/discover', { _meta: { [PV]: 2026, [CAPS]: {} } }, 'v3');
    assertEqual(badVersion.error && badVersion.error.code, -32602, 'a version that is not a string');
    const badToken = await p.request('tools/call', { name: 'execute_code', arguments: { code: '1' }, _meta: envelope({ progressToken: 1.5 }) }, 'v4');
    assertEqual(badToken.error && badToken.error.code, -32602, 'a progress token that is neither string nor integer');
    const bare = await p.request('server/discover', {}, 'v5');
    assertEqual(bare.error && bare.error.code, -32602, 'server/discover without the envelope');
    const init = await p.request('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' }, _meta: envelope() }, 'v6');
    assertEqual(init.error && init.error.code, -32601, 'initialize is no method of 2026-07-28');
    const listen = await p.request('subscriptions/listen', { _meta: envelope(), notifications: { toolsListChanged: true } }, 'sub1');
    assertEqual(listen.result, { _meta: { 'io.modelcontextprotocol/subscriptionId': 'sub1', [SERVER_INFO]: listen.result._meta[SERVER_INFO] }, resultType: 'complete' }, 'listen closes gracefully');
    const ack = p.messages.find((m) => m.method === 'notifications/subscriptions/acknowledged');
    assert(ack, `an acknowledgment: ${JSON.stringify(p.messages)}`);
    assertEqual(ack.params, { _meta: { 'io.modelcontextprotocol/subscriptionId': 'sub1' }, notifications: {} }, 'nothing honoured');
  })],

  ['raw: the handshake era is unchanged', () => withPeer([], async (p) => {
    const init = await p.initialize('2025-11-25');
    assertEqual(init.result.protocolVersion, '2025-11-25', 'negotiated');
    assertEqual(init.result.resultType, undefined, 'no resultType in the handshake era');
    const list = await p.request('tools/list', {}, 'l1');
    assertEqual([list.result.resultType, list.result.ttlMs, list.result._meta], [undefined, undefined, undefined], 'no 2026 fields');
    // Modern requests are served on the same connection all the same.
    const d = await p.request('server/discover', { _meta: envelope() }, 'd1');
    assertEqual(d.result.supportedVersions, [MODERN], 'discover after initialize');
  })],

  ['Inspector CLI --protocol-era modern', () => inspectorRound('modern', 'modern')],
  ['Inspector CLI --protocol-era auto', () => inspectorRound('auto', 'modern')],
  ['Inspector CLI --protocol-era legacy', () => inspectorRound('legacy', 'legacy')],
  ['@ai-sdk/mcp with discovery (2026-07-28)', () => aiSdkRound(true, 'modern')],
  ['@ai-sdk/mcp without discovery (initialize)', () => aiSdkRound(false, 'legacy')],
  ['@mastra/mcp probing (2026-07-28)', () => mastraRound(undefined, 'modern')],
  ['@mastra/mcp pinned to 2026-07-28', () => mastraRound(MODERN, 'modern')],
  ['@mastra/mcp pinned to legacy', () => mastraRound('legacy', 'legacy')],
  ['@langchain/mcp-adapters (initialize)', () => langchainRound()],
];

runTests('test_mcp_eras', tests, { teardown: () => rmrf(work) });
