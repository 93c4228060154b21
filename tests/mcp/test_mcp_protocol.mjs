// The MCP server at the JSON-RPC level, spoken raw over its stdio: error
// codes for every kind of bad input, version negotiation, notifications that
// get no answer, a 100 MB line, and that the server keeps serving after each.
import fs from 'node:fs';
import { RawPeer, TOOLS_FILE, alive, assert, assertEqual, assertIncludes, children, descendants, makeWorkspace, rmrf, runTests, withPeer, SERVER_TOOLS } from './lib.mjs';

const ws = makeWorkspace();
const args = ['--workspace', ws, '--tools', TOOLS_FILE];


const tests = [
  ['request before initialize is refused, ping is answered', () => withPeer(args, async (p) => {
    const r = await p.request('tools/list', {}, 1);
    assertEqual(r.error && r.error.code, -32600, 'error code');
    assertIncludes(r.error.message, 'initialize');
    const ping = await p.request('ping', undefined, 2);
    assertEqual(ping.result, {}, 'ping result');
    const init = await p.initialize();
    assertEqual(init.result.protocolVersion, '2025-06-18', 'negotiated version');
    const list = await p.request('tools/list', {}, 3);
    assertEqual(list.result.tools.map((t) => t.name), SERVER_TOOLS, 'tools after initialize');
  })],

  ['initialize: result shape and version negotiation', async () => {
    for (const [asked, expected] of [['2025-06-18', '2025-06-18'], ['2025-03-26', '2025-03-26'],
      ['2024-11-05', '2024-11-05'], ['2025-11-25', '2025-11-25'], ['1999-01-01', null]]) {
      await withPeer(args, async (p) => {
        const r = await p.initialize(asked);
        const res = r.result;
        assert(res, `initialize ${asked}: ${JSON.stringify(r)}`);
        if (expected) assertEqual(res.protocolVersion, expected, `version for ${asked}`);
        else assert(['2025-11-25', '2025-06-18'].includes(res.protocolVersion), `unknown version answered with ${res.protocolVersion}`);
        assertEqual(res.serverInfo.name, 'airlock', 'serverInfo.name');
        assert(typeof res.serverInfo.version === 'string' && res.serverInfo.version.length > 0, 'serverInfo.version');
        assertEqual(res.capabilities.tools, { listChanged: false }, 'capabilities.tools');
        assertEqual(res.capabilities.resources, { subscribe: false, listChanged: false }, 'capabilities.resources');
        assertIncludes(res.instructions, 'execute_code', 'instructions');
        assertIncludes(res.instructions, 'call_tool', 'instructions');
      });
    }
  }],

  ['initialize without protocolVersion is invalid params; a second initialize is refused', () => withPeer(args, async (p) => {
    const bad = await p.request('initialize', { capabilities: {} }, 'a');
    assertEqual(bad.error && bad.error.code, -32602, 'missing protocolVersion');
    await p.initialize();
    const again = await p.request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } }, 'b');
    assertEqual(again.error && again.error.code, -32600, 'second initialize');
  })],

  ['malformed JSON, invalid requests, batches, unknown methods', () => withPeer(args, async (p) => {
    await p.initialize();
    const cases = [
      ['{"jsonrpc":"2.0","id":1,"method":"ping"', -32700],
      ['not json at all', -32700],
      ['[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600],
      ['[]', -32600],
      ['42', -32600],
      ['{"jsonrpc":"1.0","id":5,"method":"ping"}', -32600],
      ['{"id":6,"method":"ping"}', -32600],
      ['{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}', -32600],
      ['{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600],
      ['{"jsonrpc":"2.0","id":7,"method":12}', -32600],
      ['{"jsonrpc":"2.0","id":8}', -32600],
      ['{"jsonrpc":"2.0","id":9,"method":"ping","method":"ping"}', -32700],
    ];
    for (const [line, code] of cases) {
      await p.write(line + '\n');
      const m = await p.next();
      assertEqual(m.error && m.error.code, code, `answer to ${line}: ${JSON.stringify(m)}`);
      assert(typeof m.error.message === 'string' && m.error.message.length > 0, 'error message');
    }
    const unknown = await p.request('prompts/list', {}, 10);
    assertEqual(unknown.error && unknown.error.code, -32601, 'unknown method');
    const badParams = await p.request('tools/call', [1, 2], 11);
    assertEqual(badParams.error && badParams.error.code, -32602, 'params not an object');
    const noName = await p.request('tools/call', { arguments: { code: '1' } }, 12);
    assertEqual(noName.error && noName.error.code, -32602, 'tools/call without name');
    const badTool = await p.request('tools/call', { name: 'compute', arguments: {} }, 13);
    assertEqual(badTool.error && badTool.error.code, -32602, 'unknown tool');
    const ping = await p.request('ping', {}, 'still-alive');
    assertEqual(ping.result, {}, 'ping after errors');
  })],

  ['bad execute_code arguments are tool errors the model can read', () => withPeer(args, async (p) => {
    await p.initialize();
    for (const [i, a] of [[1, {}], [2, { code: 5 }], [3, { code: 'print(1)', extra: true }]].entries()) {
      const r = await p.request('tools/call', { name: 'execute_code', arguments: a[1] }, `t${i}`);
      assert(r.result, `result for ${JSON.stringify(a[1])}: ${JSON.stringify(r)}`);
      assertEqual(r.result.isError, true, 'isError');
      assertEqual(r.result.content[0].type, 'text', 'content type');
      assertIncludes(r.result.content[0].text, 'code');
    }
  })],

  ['notifications get no answer and ids keep their type', () => withPeer(args, async (p) => {
    await p.initialize();
    await p.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'nothing-running' } });
    await p.send({ jsonrpc: '2.0', method: 'notifications/whatever' });
    await p.send({ jsonrpc: '2.0', method: 'ping' }); // a notification, even with a request's name
    await p.send({ jsonrpc: '2.0', id: 'r', result: {} }); // a stray response
    const r = await p.request('ping', {}, 'str-id');
    assertEqual(r.id, 'str-id', 'string id echoed');
    const n = await p.request('ping', {}, 9007199254740991);
    assertEqual(n.id, 9007199254740991, 'large integer id echoed');
    assertEqual(p.messages.length, 0, 'nothing else was sent');
  })],

  ['a 100 MB line is discarded and the server keeps serving', () => withPeer(args, async (p) => {
    await p.initialize();
    const chunk = 'a'.repeat(1 << 20);
    await p.write('{"jsonrpc":"2.0","id":"big","method":"ping","params":{"x":"');
    for (let i = 0; i < 100; i++) await p.write(chunk);
    await p.write('"}}\n');
    const m = await p.next(120000);
    assert(m.error && (m.error.code === -32600 || m.error.code === -32700), `answer to the big line: ${JSON.stringify(m).slice(0, 300)}`);
    assertEqual(m.id, null, 'id of the answer to an unreadable line');
    const r = await p.request('tools/list', {}, 'after-big');
    assertEqual(r.result.tools[0].name, 'execute_code', 'served after the big line');
  })],

  ['CRLF line endings and blank lines are accepted', () => withPeer(args, async (p) => {
    await p.initialize();
    await p.write('\n\r\n{"jsonrpc":"2.0","id":"crlf","method":"ping"}\r\n');
    const m = await p.next();
    assertEqual(m.id, 'crlf', 'answer id');
    assertEqual(m.result, {}, 'answer');
  })],

  ['notifications/cancelled stops the run and its request gets no response', async () => {
    const p = new RawPeer(['--timeout', '900']);
    try {
      await p.initialize();
      await p.send({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\ntime.sleep(600)\nprint("not cancelled")' } } });
      // A call that finishes shows the sandbox is up, so the long one runs.
      const r = await p.request('tools/call', { name: 'execute_code', arguments: { code: 'print("ready")' } }, 'ready', 120000);
      assertIncludes(r.result.content[0].text, 'ready', 'second call');
      await p.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'long', reason: 'test' } });
      // The server logs how the cancelled run ended; it must be stopped, long
      // before its 600 s sleep would end.
      const deadline = Date.now() + 120000;
      while (!p.stderr.includes('request "long" cancelled') && Date.now() < deadline) {
        await new Promise((res) => setTimeout(res, 50));
      }
      assertIncludes(p.stderr, 'request "long" cancelled; the run ended as killed', 'server log');
      const after = await p.request('ping', {}, 'after');
      assertEqual(after.result, {}, 'ping after cancel');
      assert(!p.messages.some((m) => m.id === 'long'), 'no response to the cancelled request');
    } finally {
      const { code } = await p.close();
      assertEqual(code, 0, 'exit status');
    }
  }],

  ['a sandbox whose processes were killed is rebuilt at the next call', async () => {
    const p = new RawPeer([]);
    try {
      await p.initialize();
      const first = await p.request('tools/call', { name: 'execute_code', arguments: { code: 'print("first")' } }, 1, 120000);
      assertIncludes(first.result.content[0].text, 'first', 'first call');
      // The server's own children: the sandbox's template (its copies are
      // below it and go with it).
      const victims = children(p.child.pid);
      assert(victims.length > 0, 'the server has sandbox processes');
      for (const pid of victims) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      // The copy that was already started when the template was killed may
      // answer the first call with an error result (the sandbox cannot tell
      // a killed copy from a misbehaving guest); from then on the dead
      // template is noticed and the sandbox rebuilt without the caller seeing.
      for (let i = 0; i < 3; i++) {
        const r = await p.request('tools/call', { name: 'execute_code', arguments: { code: `print("again ${i}")` } }, `again${i}`, 120000);
        assert(r.result, JSON.stringify(r));
        if (i === 0 && r.result.isError) continue;
        assertEqual(r.result.isError, false, `call ${i} after the kill: ${JSON.stringify(r.result.content)}`);
        assertIncludes(r.result.content[0].text, `again ${i}`, 'output after the kill');
      }
    } finally {
      const { code } = await p.close();
      assertEqual(code, 0, 'exit status');
    }
  }],

  ['SIGTERM closes every sandbox and exits 0', async () => {
    for (const sig of ['SIGTERM', 'SIGINT']) {
      const p = new RawPeer([]);
      await p.initialize();
      const r = await p.request('tools/call', { name: 'execute_code', arguments: { code: 'print(1)' } }, 1, 120000);
      assertEqual(r.result.isError, false, 'call');
      const procs = descendants(p.child.pid);
      assert(procs.length > 0, 'the server has sandbox processes');
      p.child.kill(sig);
      const { code } = await p.exited;
      assertEqual(code, 0, `exit status after ${sig}`);
      // Killed processes may linger a moment as zombies before they are reaped.
      for (let i = 0; i < 100 && procs.some(alive); i++) await new Promise((res) => setTimeout(res, 100));
      assertEqual(procs.filter(alive), [], `sandbox processes left after ${sig}`);
    }
  }],

  ['a call that holds the reading thread hands it on for input and for SIGTERM', async () => {
    // The reader runs a call on its own thread and hands reading on only
    // when input comes: a ping and a stop signal must reach it all the same.
    const p = new RawPeer(['--timeout', '900']);
    await p.initialize();
    const r = await p.request('tools/call', { name: 'execute_code', arguments: { code: 'print(1)' } }, 1, 120000);
    assertEqual(r.result.isError, false, 'first call');
    // Once the next copy is ready, the call below waits for nothing and
    // keeps the reading thread.
    await new Promise((res) => setTimeout(res, 1000));
    await p.send({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\ntime.sleep(600)' } } });
    await new Promise((res) => setTimeout(res, 1500));
    const ping = await p.request('ping', {}, 'during', 10000);
    assertEqual(ping.result, {}, 'ping during the call');
    assert(!p.messages.some((m) => m.id === 'long'), 'the long call is still running');
    const procs = descendants(p.child.pid);
    p.child.kill('SIGTERM');
    const ended = await Promise.race([p.exited, new Promise((res) => setTimeout(res, 60000, null))]);
    if (!ended) p.child.kill('SIGKILL');
    assert(ended, 'the server was still running 60 s after SIGTERM');
    assertEqual(ended.code, 0, 'exit status');
    for (let i = 0; i < 100 && procs.some(alive); i++) await new Promise((res) => setTimeout(res, 100));
    assertEqual(procs.filter(alive), [], 'sandbox processes left');
  }],

  ['calls in progress at end of input are answered before the exit', async () => {
    const p = new RawPeer([]);
    await p.initialize();
    await p.send({ jsonrpc: '2.0', id: 'last', method: 'tools/call', params: { name: 'execute_code', arguments: { code: 'import time\ntime.sleep(0.5)\nprint("answered")' } } });
    const { code } = await p.close(120000);
    assertEqual(code, 0, 'exit status');
    const r = p.messages.find((m) => m.id === 'last');
    assert(r && r.result, `response to the last call: ${JSON.stringify(p.messages)}`);
    assertIncludes(r.result.content[0].text, 'answered', 'output');
  }],

  ['end of input without initialize exits 0', async () => {
    const p = new RawPeer(args);
    const { code } = await p.close();
    assertEqual(code, 0, 'exit status');
  }],

  ['configuration errors exit 2 with one line', async () => {
    const p = new RawPeer(['--workspace', '/nonexistent/airlock-ws']);
    const { code } = await p.close();
    assertEqual(code, 2, 'exit status');
    assertIncludes(p.stderr, '/nonexistent/airlock-ws', 'stderr');
    assertEqual(p.stderr.trim().split('\n').length, 1, 'one line on stderr');
  }],
];

runTests('test_mcp_protocol', tests, { teardown: () => rmrf(ws) });
