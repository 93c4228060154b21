// Code mode (upstream MCP servers as Python in the sandbox), three figures:
//
// 1. Calls: 100 calls of server-everything's `echo` made by the code of one
//    execute_code run (timed inside the guest, and the whole execute_code
//    call as the client sees it), against the same 100 calls made directly
//    by the official TypeScript SDK client over stdio. Rounds alternate.
// 2. Stubs: the size of the stubs of a server of 100 tools (their time at
//    sandbox build is bench_stubs.c's, without the sandbox's own start).
// 3. Context: the bytes that reach the model for the two tasks (read
//    a 200-entity memory graph, filter and aggregate; find which of 300 files
//    in the filesystem server's folder mention a word, and their lines), with
//    direct MCP tool calls (the tool definitions, each call's arguments and
//    each result) and with one execute_code call (its tool definition, the
//    code, its output), side by side.
//
// Uses the SDK and the servers installed in tests/mcp (npm install there).
// Usage: node bench/bench_servers.mjs BUILD_DIR [ROUNDS]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const build = path.resolve(process.argv[2] || 'build');
const rounds = Number(process.argv[3] || 10);
const airlock = path.join(build, 'airlock');
const require = createRequire(path.join(root, 'tests', 'mcp', 'package.json'));
const { Client } = await import(require.resolve('@modelcontextprotocol/sdk/client/index.js'));
const { StdioClientTransport } = await import(require.resolve('@modelcontextprotocol/sdk/client/stdio.js'));
const entry = (pkg) => path.join(path.dirname(require.resolve(`${pkg}/package.json`)), 'dist', 'index.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'airlock-bench-servers-'));
const everything = { command: process.execPath, args: [entry('@modelcontextprotocol/server-everything'), 'stdio'] };
const memory = (file) => ({ command: process.execPath, args: [entry('@modelcontextprotocol/server-memory')], env: { MEMORY_FILE_PATH: file } });
const writeServers = (name, servers) => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, JSON.stringify({ mcpServers: servers }));
  return f;
};
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function connect(command, args, env) {
  const t = new StdioClientTransport({ command, args, env: env ? { ...process.env, ...env } : undefined, stderr: 'ignore' });
  const c = new Client({ name: 'airlock-bench', version: '1' });
  await c.connect(t);
  return c;
}

const CALL = { timeout: 300000 };
const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// 1. 100 echo calls.
const direct = await connect(everything.command, everything.args);
const viaAirlock = await connect(airlock, ['mcp', '--servers', writeServers('e.json', { everything })]);
const CODE = `
import time
from servers import everything
t0 = time.perf_counter()
for i in range(100):
    everything.echo(message=f"m{i}")
print(round((time.perf_counter() - t0) * 1000, 2))
`;
await viaAirlock.callTool({ name: 'execute_code', arguments: { code: 'from servers import everything' } }, undefined, CALL);
const sdkMs = [], guestMs = [], callMs = [];
for (let r = 0; r < rounds; r++) {
  let t0 = process.hrtime.bigint();
  for (let i = 0; i < 100; i++) await direct.callTool({ name: 'echo', arguments: { message: `m${i}` } });
  sdkMs.push(ms(t0));
  t0 = process.hrtime.bigint();
  const res = await viaAirlock.callTool({ name: 'execute_code', arguments: { code: CODE } }, undefined, CALL);
  callMs.push(ms(t0));
  guestMs.push(Number(text(res).trim()));
}
await direct.close();
await viaAirlock.close();

// 2. The stubs of a server of 100 tools.
const gen = path.join(here, 'mcp_many_tools.py');
const many = writeServers('many.json', { many: { command: '/usr/bin/python3', args: [gen, '100'] } });
const stubBytes = Number(execFileSync(airlock, ['run', '--servers', many, '-c',
  'import os, servers; d = os.path.dirname(servers.__file__); print(sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)))']).toString().trim());

// 3. Context bytes for the two tasks over the real servers, each
// done by a client that calls the tools directly (the model reads the tool
// definitions, every call's arguments and every result's content) and by
// one execute_code call (its tool definition, the code, its output). A
// result counts its content (its structuredContent only when it has no
// content: clients hand the model one of them).
const resultBytes = (r) => JSON.stringify(r.content?.length ? r.content : r.structuredContent ?? null).length;
// (a) A memory graph of 200 entities (written as server-memory stores it):
// which types have entities with an "urgent" observation, and how many.
const TYPES = ['person', 'project', 'issue', 'meeting', 'document'];
const graph = Array.from({ length: 200 }, (_, i) => JSON.stringify({
  type: 'entity', name: `entity-${i}`, entityType: TYPES[i % 5],
  observations: [`created on day ${i % 31}`, i % 7 === 0 ? 'marked urgent by the owner' : 'routine', `owner ${i % 13}`],
})).join('\n');
const graphFile = (name) => { const f = path.join(dir, name); fs.writeFileSync(f, graph + '\n'); return f; };
const memDirect = await connect(memory('').command, memory('').args, { MEMORY_FILE_PATH: graphFile('gd.jsonl') });
let memDirectBytes = JSON.stringify((await memDirect.listTools()).tools).length;
const rg = await memDirect.callTool({ name: 'read_graph', arguments: {} });
memDirectBytes += JSON.stringify({}).length + resultBytes(rg);
await memDirect.close();
// (b) 300 files of 20 to 40 lines in the filesystem server's folder: which
// mention "airlock", and their lines. Directly: list the folder, then read
// every file in one read_multiple_files call (the cheapest way there is).
const tree = fs.mkdtempSync(path.join(dir, 'files-'));
for (let i = 0; i < 300; i++) {
  const lines = Array.from({ length: 20 + (i % 21) }, (_, k) => `line ${k} of file ${i}: ${k === 3 && i % 10 === 0 ? 'airlock' : 'lorem ipsum dolor'} sit amet`);
  fs.writeFileSync(path.join(tree, `f${String(i).padStart(3, '0')}.txt`), lines.join('\n') + '\n');
}
const fsServer = { command: process.execPath, args: [entry('@modelcontextprotocol/server-filesystem'), tree] };
const fsDirect = await connect(fsServer.command, fsServer.args);
let fsDirectBytes = JSON.stringify((await fsDirect.listTools()).tools).length;
const la = { path: tree };
const ld = await fsDirect.callTool({ name: 'list_directory', arguments: la });
fsDirectBytes += JSON.stringify(la).length + resultBytes(ld);
const names = text(ld).split('\n').filter((l) => l.startsWith('[FILE]')).map((l) => l.slice(7));
const ra = { paths: names.map((n) => path.join(tree, n)) };
const rm = await fsDirect.callTool({ name: 'read_multiple_files', arguments: ra });
fsDirectBytes += JSON.stringify(ra).length + resultBytes(rm);
await fsDirect.close();
const memCode = `from collections import Counter
from servers import memory
g = memory.read_graph()
print(dict(Counter(e["entityType"] for e in g["entities"]
                   if any("urgent" in o for o in e["observations"]))))
`;
const fsCode = `from servers import fs
d = ${JSON.stringify(tree)}
names = [l[7:] for l in fs.list_directory(path=d)["content"].splitlines() if l.startswith("[FILE]")]
hits = {}
for n in names:
    text = fs.read_text_file(path=f"{d}/{n}")["content"]
    if "airlock" in text:
        hits[n] = text.count("\\n")
print(len(hits), "files mention it:", hits)
`;
const both = writeServers('both.json', { memory: memory(graphFile('ga.jsonl')), fs: fsServer });
const c2 = await connect(airlock, ['mcp', '--servers', both]);
const exec = (await c2.listTools()).tools.find((t) => t.name === 'execute_code');
const rMem = await c2.callTool({ name: 'execute_code', arguments: { code: memCode } }, undefined, CALL);
const rFs = await c2.callTool({ name: 'execute_code', arguments: { code: fsCode } }, undefined, CALL);
const memCodeBytes = JSON.stringify(exec).length + memCode.length + JSON.stringify(rMem.content).length;
const fsCodeBytes = JSON.stringify(exec).length + fsCode.length + JSON.stringify(rFs.content).length;
await c2.close();
fs.rmSync(dir, { recursive: true, force: true });

const out = {
  rounds,
  echo100_sdk_direct_ms: median(sdkMs),
  echo100_in_guest_ms: median(guestMs),
  echo100_execute_code_call_ms: median(callMs),
  echo100_ratio_guest_to_sdk: Number((median(guestMs) / median(sdkMs)).toFixed(3)),
  stubs_bytes_100_tools: stubBytes,
  memory200_bytes_direct: memDirectBytes,
  memory200_bytes_execute_code: memCodeBytes,
  memory200_ratio: Number((memDirectBytes / memCodeBytes).toFixed(1)),
  memory200_answer: text(rMem).trim(),
  files300_bytes_direct: fsDirectBytes,
  files300_bytes_execute_code: fsCodeBytes,
  files300_ratio: Number((fsDirectBytes / fsCodeBytes).toFixed(1)),
  files300_answer_head: text(rFs).trim().slice(0, 60),
};
console.log(`100 echo calls, SDK client direct:        ${out.echo100_sdk_direct_ms.toFixed(1)} ms (median of ${rounds})`);
console.log(`100 echo calls, from the guest:           ${out.echo100_in_guest_ms.toFixed(1)} ms (${out.echo100_ratio_guest_to_sdk}x)`);
console.log(`  the whole execute_code call:            ${out.echo100_execute_code_call_ms.toFixed(1)} ms`);
console.log(`stubs of a server of 100 tools:           ${out.stubs_bytes_100_tools} bytes`);
console.log(`context bytes, 200-entity memory graph:   direct ${out.memory200_bytes_direct} / execute_code ${out.memory200_bytes_execute_code} (${out.memory200_ratio}x fewer)`);
console.log(`context bytes, 300 files, word and lines: direct ${out.files300_bytes_direct} / execute_code ${out.files300_bytes_execute_code} (${out.files300_ratio}x fewer)`);
console.log(JSON.stringify(out));
