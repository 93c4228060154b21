// Long runs: notifications/progress while a tools/call that carries
// _meta.progressToken runs (so that a client's 60 s request timeout, reset by
// progress, never fires), and runs cancelled when the client goes away.
import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AIRLOCK, RawPeer, alive, assert, assertEqual, assertIncludes, descendants, runTests } from './lib.mjs';

const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': {},
};

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

// Polls until cond() holds, up to ms; returns whether it did.
async function within(ms, cond) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await cond()) return true;
    await sleep(100);
  }
  return cond();
}

// Starts a run that would last 600 s and waits until its guest is up: the
// sandbox's processes below the server, the run's copy among them.
async function startLongRun(p, meta = {}) {
  const before = descendants(p.child.pid).length;
  await p.send({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\nprint("started", flush=True)\ntime.sleep(600)' }, _meta: { ...meta, progressToken: 'lp' } } });
  // The run's first output comes back as progress once the copy runs it.
  await p.waitFor((m) => m.method === 'notifications/progress' && m.params.message === 'started', 60000);
  const procs = descendants(p.child.pid);
  assert(procs.length > before || procs.length > 0, 'the server has sandbox processes');
  return procs;
}

async function expectGone(p, procs, what) {
  const exited = await within(30000, () => p.child.exitCode !== null || p.child.signalCode !== null);
  if (!exited) p.child.kill('SIGKILL');
  assert(exited, `${what}: the server was still running 30 s later; stderr: ${p.stderr}`);
  const gone = await within(10000, () => !procs.some(alive));
  assert(gone, `${what}: sandbox processes left: ${procs.filter(alive)}`);
  assertIncludes(p.stderr, 'cancelled; the run ended as killed', `${what}: the log`);
}

const tests = [
  ['progress while a call runs: increasing, with the latest output line, none after the response', async () => {
    const p = new RawPeer(['--timeout', '60']);
    try {
      const code = 'import sys, time\nfor i in range(3):\n    print("step", i, flush=True)\n    time.sleep(1)\nprint("partial", end="", flush=True)\ntime.sleep(4.5)\nprint(" done")';
      await p.send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'execute_code', arguments: { code }, _meta: { ...MODERN_META, progressToken: 'tok' } } });
      assert(await within(120000, () => p.messages.some((m) => m.id === 1)), 'a response');
      await sleep(1000); // nothing may follow the response
      const at = p.messages.findIndex((m) => m.id === 1);
      const r = p.messages[at];
      assertIncludes(r.result.content[0].text, 'step 2\npartial done', 'output');
      assertEqual(p.messages.slice(at + 1), [], 'messages after the response');
      const notes = p.messages.filter((m) => m.method === 'notifications/progress');
      assert(notes.length >= 5, `progress notifications: ${JSON.stringify(notes)}`);
      assert(notes.every((n) => n.params.progressToken === 'tok'), 'the token');
      for (let i = 1; i < notes.length; i++) assert(notes[i].params.progress > notes[i - 1].params.progress, `progress increases: ${JSON.stringify(notes)}`);
      const messages = notes.map((n) => n.params.message);
      for (const line of ['step 0', 'step 1', 'step 2', 'partial']) assert(messages.includes(line), `message ${line} in ${JSON.stringify(messages)}`);
      // At least one every few seconds during the quiet 4.5 s at the end.
      const quiet = notes.filter((n) => n.params.message === 'partial');
      assert(quiet.length >= 2, `progress during a quiet stretch: ${JSON.stringify(messages)}`);
    } finally {
      await p.close();
    }
  }],

  ['progress: a short status before any output, nothing without a token, nothing after a cancel', async () => {
    const p = new RawPeer(['--timeout', '60']);
    try {
      await p.initialize('2025-11-25');
      await p.send({ jsonrpc: '2.0', id: 'quiet', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\ntime.sleep(3)' }, _meta: { progressToken: 7 } } });
      await p.send({ jsonrpc: '2.0', id: 'none', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\ntime.sleep(3)' } } });
      await p.waitFor((m) => m.id === 'quiet', 120000);
      await p.waitFor((m) => m.id === 'none', 120000);
      const notes = p.messages.filter((m) => m.method === 'notifications/progress');
      assert(notes.length >= 1, 'a notification during 3 s of silence');
      assert(notes.every((n) => n.params.progressToken === 7), `only the call with a token: ${JSON.stringify(notes)}`);
      assertIncludes(notes[0].params.message, 'running for', 'status');
      p.messages.length = 0;
      await p.send({ jsonrpc: '2.0', id: 'c', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\nwhile True:\n    print("tick", flush=True)\n    time.sleep(0.1)' }, _meta: { progressToken: 'c' } } });
      await p.waitFor((m) => m.method === 'notifications/progress' && m.params.progressToken === 'c', 60000);
      await p.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'c' } });
      const ping = await p.request('ping', {}, 'after');
      assertEqual(ping.result, {}, 'ping');
      p.messages.length = 0;
      await sleep(3000);
      assertEqual(p.messages, [], 'no message for a cancelled request');
    } finally {
      await p.close();
    }
  }],

  ['the client dies: runs in progress are cancelled, the sandbox goes', async () => {
    const p = new RawPeer(['--timeout', '600']);
    await p.initialize('2025-11-25');
    const procs = await startLongRun(p);
    // Both pipes close at once, as when the client's process ends.
    p.child.stdin.destroy();
    p.child.stdout.destroy();
    await expectGone(p, procs, 'both pipes closed');
  }],

  ['input closed, then output a moment later: runs in progress are cancelled, the sandbox goes', async () => {
    // A client that closes its two ends one after the other: the end of
    // input alone lets the calls finish (a client may still read their
    // answers); the loss of standard output after it must stop them, on
    // whichever thread the call runs (the reading thread runs a call that
    // comes alone, and hands the reading on to another, which then sees the
    // end of input). Which one it is depends on timing: a few rounds.
    for (let round = 0; round < 4; round++) {
      const p = new RawPeer(['--timeout', '600']);
      await p.initialize('2025-11-25');
      const procs = await startLongRun(p);
      p.child.stdin.destroy();
      await sleep(500);
      assert(p.child.exitCode === null && p.child.signalCode === null, 'the call still runs after the end of input');
      p.child.stdout.destroy();
      await expectGone(p, procs, `round ${round}: input, then output closed`);
    }
  }],

  ['standard output closed: runs in progress are cancelled, the sandbox goes', async () => {
    const p = new RawPeer(['--timeout', '600']);
    const procs = await startLongRun(p, MODERN_META);
    p.child.stdout.destroy();
    await expectGone(p, procs, 'standard output closed');
    p.child.stdin.destroy();
  }],

  ['the official SDK closes during a long run: the server and its sandbox are gone soon after', async () => {
    const t = new StdioClientTransport({ command: AIRLOCK, args: ['mcp', '--timeout', '600'], stderr: 'pipe' });
    const c = new Client({ name: 'airlock-progress-test', version: '1.0.0' });
    await c.connect(t);
    const pid = t.pid;
    const started = new Promise((resolve) => {
      c.callTool({ name: 'execute_code', arguments: { code: 'import time\nprint("started", flush=True)\ntime.sleep(600)' } }, undefined,
        { timeout: 700000, onprogress: (n) => { if (n.message === 'started') resolve(); } }).catch(() => {});
    });
    await Promise.race([started, sleep(60000)]);
    const procs = descendants(pid);
    assert(procs.length > 0, 'sandbox processes');
    const t0 = Date.now();
    await c.close();
    const gone = await within(30000, () => !alive(pid) && !procs.some(alive));
    assert(gone, `still there ${Date.now() - t0} ms after close: ${[pid, ...procs].filter(alive)}`);
  }],

  ['a 70 s run through the official SDK: progress resets its 60 s timeout', async () => {
    const t = new StdioClientTransport({ command: AIRLOCK, args: ['mcp', '--timeout', '100'], stderr: 'pipe' });
    const c = new Client({ name: 'airlock-progress-test', version: '1.0.0' });
    await c.connect(t);
    try {
      let notes = 0;
      const t0 = Date.now();
      // The SDK's default request timeout (60 s) stays; progress resets it.
      const r = await c.callTool({ name: 'execute_code', arguments: { code: 'import time\ntime.sleep(70)\nprint("done after 70 s")' } }, undefined,
        { resetTimeoutOnProgress: true, onprogress: () => { notes++; } });
      const took = Date.now() - t0;
      assert(took >= 70000, `the run took ${took} ms`);
      assertEqual(r.isError, false, 'isError');
      assertIncludes(r.content[0].text, 'done after 70 s', 'output');
      assert(notes >= 20, `progress notifications: ${notes}`);
    } finally {
      await c.close();
    }
  }],
];

runTests('test_mcp_progress', tests);
