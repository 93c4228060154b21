// Shared helpers of the MCP tests: a tiny test runner that ends with the line
// "NAME: N passed, N failed" (tests/run.sh reads it), the airlock binary, a
// temporary workspace, and a raw JSON-RPC peer over a child's stdio.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(here, '..', '..');
export const AIRLOCK = process.env.AIRLOCK || path.join(ROOT, 'build', 'airlock');
export const FIXTURES = path.join(here, 'fixtures');
export const TOOLS_FILE = path.join(FIXTURES, 'tools.json');
// The server's own tools, in tools/list's order: test_mcp_core checks this
// fixture against the server's tool table (src/mcp/tools.c).
export const ALL_SERVER_TOOLS = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'server-tools.json'), 'utf8'));
// Without --tenants-dir the workspace tools are not listed.
export const WORKSPACE_TOOLS = ALL_SERVER_TOOLS.filter((n) => n.startsWith('workspace_'));
export const SERVER_TOOLS = ALL_SERVER_TOOLS.filter((n) => !n.startsWith('workspace_'));

// The processes below pid, found through /proc: its children, and every
// process below it.
export function children(pid) {
  const kids = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) kids.push(Number(d));
    } catch {
      // gone already
    }
  }
  return kids;
}

export function descendants(pid) {
  return children(pid).flatMap((k) => [k, ...descendants(k)]);
}

export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Runs fn with a RawPeer of `airlock mcp ARGS`, which must exit 0 once its
// input ends.
export async function withPeer(args, fn) {
  const peer = new RawPeer(args);
  try {
    await fn(peer);
  } finally {
    const { code } = await peer.close();
    assertEqual(code, 0, 'exit status after end of input');
  }
}

export class AssertionError extends Error {}

export function assert(cond, message) {
  if (!cond) throw new AssertionError(message || 'assertion failed');
}

export function assertEqual(actual, expected, what = 'value') {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new AssertionError(`${what}: expected ${e}, got ${a}`);
}

export function assertIncludes(text, needle, what = 'text') {
  if (typeof text !== 'string' || !text.includes(needle)) {
    const shown = typeof text === 'string' ? text.slice(0, 2000) : JSON.stringify(text);
    throw new AssertionError(`${what}: ${JSON.stringify(needle)} not found in ${shown}`);
  }
}

// Runs the tests in order (each may be async), prints one line per test and
// the closing tally, and exits non-zero when any failed.
export async function runTests(name, tests, { teardown } = {}) {
  let passed = 0;
  let failed = 0;
  const only = process.env.ONLY;
  for (const [testName, fn] of tests) {
    if (only && !testName.includes(only)) continue;
    try {
      await fn();
      passed++;
      console.log(`ok ${testName}`);
    } catch (e) {
      failed++;
      console.log(`not ok ${testName}`);
      console.log(`  ${(e && e.stack) || e}`.split('\n').join('\n  '));
    }
  }
  if (teardown) {
    try {
      await teardown();
    } catch (e) {
      console.log(`teardown failed: ${e}`);
      failed++;
    }
  }
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

export function tmpdir(prefix = 'airlock-mcp-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function rmrf(dir) {
  fs.rmSync(dir, { recursive: true, force: true });
}

// A workspace with a small CSV in it.
export function makeWorkspace() {
  const dir = tmpdir('airlock-mcp-ws-');
  fs.writeFileSync(path.join(dir, 'data.csv'), 'name,value\nalpha,1\nbeta,2\ngamma,39\n');
  return dir;
}

// A raw JSON-RPC peer: spawns `airlock mcp ARGS`, writes lines, and reads the
// server's messages one per line. Every wait is bounded, so a hung server
// fails the test instead of hanging it.
export class RawPeer {
  constructor(args = [], { env } = {}) {
    this.child = spawn(AIRLOCK, ['mcp', ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: env || process.env });
    this.messages = [];
    this.waiters = [];
    this.stderr = '';
    this.buffer = '';
    this.exited = new Promise((resolve) => {
      // 'close' comes after the child's output has all been read.
      this.child.on('close', (code, signal) => resolve({ code, signal }));
    });
    this.child.stdin.on('error', () => {});
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (d) => { this.stderr += d; });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (d) => {
      this.buffer += d;
      let nl;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        let msg;
        try {
          msg = JSON.parse(line);
        } catch {
          msg = { unparsable: line };
        }
        this.messages.push(msg);
        this.wake();
      }
    });
  }

  wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const fn of w) fn();
  }

  // Writes text as is (the caller adds the newline); honours back pressure.
  write(text) {
    return new Promise((resolve, reject) => {
      const ok = this.child.stdin.write(text, (err) => (err ? reject(err) : undefined));
      if (ok) resolve();
      else this.child.stdin.once('drain', resolve);
    });
  }

  send(obj) {
    return this.write(JSON.stringify(obj) + '\n');
  }

  // The next message the server sent (in order), within timeoutMs.
  async next(timeoutMs = 60000) {
    const deadline = Date.now() + timeoutMs;
    while (this.messages.length === 0) {
      const left = deadline - Date.now();
      if (left <= 0) throw new AssertionError(`no message from the server within ${timeoutMs} ms; stderr: ${this.stderr}`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
    return this.messages.shift();
  }

  // Sends a request and returns the response with its id; other messages
  // that arrive first are kept for later.
  async request(method, params, id, timeoutMs = 60000) {
    const msg = { jsonrpc: '2.0', id, method };
    if (params !== undefined) msg.params = params;
    await this.send(msg);
    return this.waitFor((m) => m.id === id, timeoutMs);
  }

  async waitFor(pred, timeoutMs = 60000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.messages.findIndex(pred);
      if (i >= 0) return this.messages.splice(i, 1)[0];
      const left = deadline - Date.now();
      if (left <= 0) throw new AssertionError(`expected message not received within ${timeoutMs} ms; have ${JSON.stringify(this.messages).slice(0, 500)}; stderr: ${this.stderr}`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
  }

  async initialize(version = '2025-06-18') {
    const r = await this.request('initialize', {
      protocolVersion: version,
      capabilities: {},
      clientInfo: { name: 'raw-test', version: '1' },
    }, 'init');
    await this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }

  // Closes stdin and waits for the exit (kills after timeoutMs).
  async close(timeoutMs = 60000) {
    this.child.stdin.end();
    const t = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    const r = await this.exited;
    clearTimeout(t);
    return r;
  }
}
