// Code mode (upstream MCP servers as Python in the sandbox), three figures:
//
// 1. Calls: 100 calls of server-everything's `echo` made by the code of one
//    execute_code run (timed inside the guest, and the whole execute_code
//    call as the client sees it), against the same 100 calls made directly
//    by the official TypeScript SDK client over stdio. Rounds alternate.
// 2. Stubs: the size of the stubs of a server of 100 tools (their time at
//    sandbox build is bench_stubs.c's, without the sandbox's own start).
// 3. Context: the bytes that reach the model for one task (store 10 facts in
//    server-memory, then report which mention "beta"), done with direct MCP
//    tool calls (the tool list, each call's arguments and each result) and
//    with one execute_code call (its description, the code, its output).
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

// 3. Context bytes for one task.
const facts = Array.from({ length: 10 }, (_, i) => ({ name: `item${i}`, entityType: 'fact', observations: [i % 3 ? `alpha ${i}` : `beta ${i}`] }));
const direct2 = await connect(memory(path.join(dir, 'd.jsonl')).command, memory('').args, { MEMORY_FILE_PATH: path.join(dir, 'd.jsonl') });
let directBytes = JSON.stringify((await direct2.listTools()).tools).length;
for (const f of facts) {
  const args = { entities: [f] };
  const r = await direct2.callTool({ name: 'create_entities', arguments: args });
  directBytes += JSON.stringify(args).length + JSON.stringify(r.content).length + JSON.stringify(r.structuredContent ?? null).length;
}
const sargs = { query: 'beta' };
const sr = await direct2.callTool({ name: 'search_nodes', arguments: sargs });
directBytes += JSON.stringify(sargs).length + JSON.stringify(sr.content).length + JSON.stringify(sr.structuredContent ?? null).length;
await direct2.close();
const code2 = `from servers import memory
facts = ${JSON.stringify(facts)}
for f in facts:
    memory.create_entities(entities=[f])
print(sorted(e["name"] for e in memory.search_nodes(query="beta")["entities"]))
`;
const c2 = await connect(airlock, ['mcp', '--servers', writeServers('m.json', { memory: memory(path.join(dir, 'a.jsonl')) })]);
const exec = (await c2.listTools()).tools.find((t) => t.name === 'execute_code');
const r2 = await c2.callTool({ name: 'execute_code', arguments: { code: code2 } }, undefined, CALL);
const codeBytes = JSON.stringify(exec).length + code2.length + JSON.stringify(r2.content).length;
await c2.close();
fs.rmSync(dir, { recursive: true, force: true });

const out = {
  rounds,
  echo100_sdk_direct_ms: median(sdkMs),
  echo100_in_guest_ms: median(guestMs),
  echo100_execute_code_call_ms: median(callMs),
  stubs_bytes_100_tools: stubBytes,
  context_bytes_direct_calls: directBytes,
  context_bytes_execute_code: codeBytes,
  context_result_airlock: text(r2).trim(),
};
console.log(`100 echo calls, SDK client direct:        ${out.echo100_sdk_direct_ms.toFixed(1)} ms (median of ${rounds})`);
console.log(`100 echo calls, from the guest:           ${out.echo100_in_guest_ms.toFixed(1)} ms`);
console.log(`  the whole execute_code call:            ${out.echo100_execute_code_call_ms.toFixed(1)} ms`);
console.log(`stubs of a server of 100 tools:           ${out.stubs_bytes_100_tools} bytes`);
console.log(`context bytes, direct MCP tool calls:     ${out.context_bytes_direct_calls}`);
console.log(`context bytes, one execute_code call:     ${out.context_bytes_execute_code}`);
console.log(JSON.stringify(out));
