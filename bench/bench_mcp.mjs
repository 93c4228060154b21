// Round-trip latency of `airlock mcp` tools/call with print(1), measured the
// way agents call: one call at a time, 10 ms between the end of one and the
// start of the next. Speaks raw JSON-RPC over the server's stdio (no SDK), so
// the figure is the server's and the pipe's, not a client library's.
// Prints one JSON object: {"bench":"mcp","calls","median_ms","p90_ms",...}.
//
// usage: node bench/bench_mcp.mjs [CALLS]   (AIRLOCK=path/to/airlock)
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const AIRLOCK = process.env.AIRLOCK || path.join(here, '..', 'build', 'airlock');
const CALLS = Number(process.argv[2] || 1000);
const GAP_MS = 10;

const child = spawn(AIRLOCK, ['mcp'], { stdio: ['pipe', 'pipe', 'inherit'] });
let buffer = '';
const pending = new Map();
child.stdout.setEncoding('utf8');
child.stdout.on('data', (d) => {
  buffer += d;
  let nl;
  while ((nl = buffer.indexOf('\n')) >= 0) {
    const msg = JSON.parse(buffer.slice(0, nl));
    buffer = buffer.slice(nl + 1);
    const resolve = pending.get(msg.id);
    if (resolve) {
      pending.delete(msg.id);
      resolve(msg);
    }
  }
});

let nextId = 1;
function request(method, params) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer to ${method} within 120 s`)), 120000);
    pending.set(id, (m) => { clearTimeout(t); resolve(m); });
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const call = { name: 'execute_code', arguments: { code: 'print(1)' } };

await request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } });
child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');

// Warm-up: the first call may wait for the sandbox to be built.
const tFirst = performance.now();
const first = await request('tools/call', call);
const firstMs = performance.now() - tFirst;
if (!first.result || first.result.isError) {
  console.error(`bench_mcp: the first call failed: ${JSON.stringify(first).slice(0, 500)}`);
  process.exit(3);
}
for (let i = 0; i < 20; i++) {
  await request('tools/call', call);
  await sleep(GAP_MS);
}

const times = [];
let failures = 0;
for (let i = 0; i < CALLS; i++) {
  const t0 = performance.now();
  const r = await request('tools/call', call);
  times.push(performance.now() - t0);
  if (!r.result || r.result.isError || r.result.content[0].text !== '1\n') failures++;
  await sleep(GAP_MS);
}
child.stdin.end();
await new Promise((r) => child.on('exit', r));

times.sort((a, b) => a - b);
const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
console.log(JSON.stringify({
  bench: 'mcp',
  calls: CALLS,
  gap_ms: GAP_MS,
  first_call_ms: Number(firstMs.toFixed(2)),
  median_ms: Number(q(0.5).toFixed(3)),
  p90_ms: Number(q(0.9).toFixed(3)),
  max_ms: Number(times[times.length - 1].toFixed(3)),
  failures,
}));
process.exit(failures ? 1 : 0);
