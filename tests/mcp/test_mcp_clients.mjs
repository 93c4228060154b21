// What each MCP client that agent developers use hands its model from
// `airlock mcp`: not the raw JSON-RPC, but the tool output after the
// client's own conversion. The clients: the official TypeScript SDK (whose
// result a host gives its model as is), the Vercel AI SDK (@ai-sdk/mcp 2:
// tool.toModelOutput), LangChain (@langchain/mcp-adapters: the ToolMessage,
// or the ToolException an agent turns into one), Mastra (@mastra/mcp 2 in a
// @mastra/core Agent: the tool-result output in the prompt its model gets)
// and the MCP Inspector 2 CLI (what it prints).
//
// Each client must hand its model stdout as text, an error, an image written
// to /output as an image, a CSV as text (never base64), a visible line when
// stdout was cut, and each payload once (a 1 MiB image or 100 KB of stdout
// costs at most 1.05 times its size plus 2 KB).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AIRLOCK, ROOT, RawPeer, assert, assertEqual, assertIncludes, runTests } from './lib.mjs';

const here = path.join(ROOT, 'tests', 'mcp');

// A client missing from node_modules is a failure, not a skip: the test run
// installs them (tests/mcp/package.json).
async function need(name) {
  try {
    return await import(name);
  } catch (e) {
    throw new Error(`${name} is not installed (cd tests/mcp && npm install): ${e.message}`);
  }
}

// ---- the runs ------------------------------------------------------------

// A 4x3 RGB PNG written with zlib alone, and a CSV, in one run.
const PNG_CSV_CODE = `
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\\x00" + bytes([200, 30, 30] * 4) for _ in range(3))
png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
open("/output/chart.png", "wb").write(png)
open("/output/table.csv", "w").write("city,temp\\nOslo,4\\nLima,19\\n")
print("wrote", len(png), "bytes")
`;
const CSV_TEXT = 'city,temp\nOslo,4\nLima,19\n';
const STDOUT_CODE = 'print("hello from airlock", 6 * 7)';
const ERROR_CODE = 'print("before")\nraise ValueError("boom 7")';
const TRUNC_CODE = 'import sys\nsys.stdout.write("x" * (1100 << 10))';
const BIG_PNG_CODE = 'import os\nopen("/output/big.png", "wb").write(b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom((1 << 20) - 8))';
const BIG_STDOUT_CODE = 'import sys\nsys.stdout.write("0123456789" * 10240)';
const BIG_PNG_B64 = Math.ceil((1 << 20) / 3) * 4;
const BIG_STDOUT = 102400;
const bound = (n) => 1.05 * n + 2048;

// ---- each client's view, as a list of what the model gets ------------------
//
// Items: {kind: 'text', text}, {kind: 'image', data, mime}, {kind: 'file',
// text | blob, mime, uri}; error: the text the model gets for a failed run;
// size: the length of the model's input as JSON.

function fromMcpContent(content) {
  return content.map((c) => {
    if (c.type === 'text') return { kind: 'text', text: c.text };
    if (c.type === 'image') return { kind: 'image', data: c.data, mime: c.mimeType };
    if (c.type === 'resource') return { kind: 'file', ...c.resource, mime: c.resource.mimeType };
    return { kind: c.type };
  });
}

const clients = {
  async sdk() {
    const c = new Client({ name: 'airlock-clients-test', version: '1' });
    await c.connect(new StdioClientTransport({ command: AIRLOCK, args: ['mcp'], stderr: 'ignore' }));
    return {
      async call(code) {
        const r = await c.callTool({ name: 'execute_code', arguments: { code } }, undefined, { timeout: 120000 });
        return { items: fromMcpContent(r.content), isError: r.isError, size: JSON.stringify(r).length,
          error: r.isError ? r.content.map((x) => x.text || '').join('\n') : undefined };
      },
      close: () => c.close(),
    };
  },

  async aisdk() {
    const { createMCPClient } = await need('@ai-sdk/mcp');
    const { Experimental_StdioMCPTransport } = await need('@ai-sdk/mcp/mcp-stdio');
    const c = await createMCPClient({ transport: new Experimental_StdioMCPTransport({ command: AIRLOCK, args: ['mcp'] }) });
    const tool = (await c.tools()).execute_code;
    return {
      async call(code) {
        const output = await tool.execute({ code }, { toolCallId: 't1', messages: [] });
        const model = await tool.toModelOutput({ toolCallId: 't1', input: { code }, output });
        assertEqual(model.type, 'content', 'AI SDK model output type');
        // @ai-sdk/mcp 2.0 hands an image item to the model as a file part
        // (LanguageModelV4's one media part: a provider sends a part whose
        // mediaType is image/* as an image) and an embedded resource as its
        // JSON text.
        const items = model.value.map((v) => {
          if (v.type === 'file' && v.data && v.data.type === 'data' && /^image\//.test(v.mediaType)) {
            return { kind: 'image', data: v.data.data, mime: v.mediaType };
          }
          if (v.type === 'file') return { kind: 'file-part', mime: v.mediaType };
          if (v.type === 'text' && v.text.startsWith('{"type":"resource"')) {
            const r = JSON.parse(v.text).resource;
            return { kind: 'file', ...r, mime: r.mimeType };
          }
          return { kind: v.type, text: v.text };
        });
        return { items, isError: output.isError, size: JSON.stringify(model).length,
          error: output.isError ? model.value.map((x) => x.text || '').join('\n') : undefined };
      },
      close: () => c.close(),
    };
  },

  async langchain(options = {}) {
    const { MultiServerMCPClient } = await need('@langchain/mcp-adapters');
    const c = new MultiServerMCPClient({ mcpServers: { airlock: { transport: 'stdio', command: AIRLOCK, args: ['mcp'] } }, ...options });
    const tool = (await c.getTools()).find((t) => t.name === 'execute_code');
    assert(tool, 'LangChain lists execute_code');
    return {
      async call(code) {
        let msg;
        try {
          msg = await tool.invoke({ type: 'tool_call', id: 't1', name: tool.name, args: { code } });
        } catch (e) {
          // An agent's tool node turns the exception into the ToolMessage.
          assertEqual(e.name, 'ToolException', `LangChain error ${e}`);
          return { items: [], isError: true, error: e.message, size: e.message.length };
        }
        const content = typeof msg.content === 'string' ? [{ type: 'text', text: msg.content }] : msg.content;
        const items = content.map((b) => {
          if (b.type === 'text') return { kind: 'text', text: b.text };
          if (b.type === 'image_url') {
            const m = /^data:([^;]+);base64,(.*)$/s.exec(b.image_url.url);
            return { kind: 'image', mime: m[1], data: m[2] };
          }
          if (b.type === 'file') return { kind: 'file', text: b.text, blob: b.data, mime: b.mime_type, uri: b.metadata && b.metadata.uri };
          return { kind: b.type };
        });
        return { items, isError: false, artifact: msg.artifact, size: JSON.stringify(msg.content).length };
      },
      close: () => c.close(),
    };
  },

  async mastra() {
    // What Mastra hands its model is read where the model gets it: an Agent
    // whose model records its prompt calls execute_code, and the second
    // prompt's tool-result output is the model's view. Mastra (core 1.71)
    // sends a result whose content holds an image as content parts (text,
    // image-data, any other item as its JSON text), any other result as the
    // JSON of the whole result, and a failed run (isError) as error-text.
    const { MCPClient } = await need('@mastra/mcp');
    const { Agent } = await need('@mastra/core/agent');
    const c = new MCPClient({ id: `airlock-test-${process.pid}`, servers: { airlock: { command: AIRLOCK, args: ['mcp'] } } });
    const tools = await c.listTools();
    assert(tools.airlock_execute_code, `Mastra lists airlock_execute_code: ${Object.keys(tools)}`);
    const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
    return {
      async call(code) {
        const prompts = [];
        const model = {
          specificationVersion: 'v2', provider: 'airlock-test', modelId: 'recorder', supportedUrls: {},
          async doGenerate(options) {
            prompts.push(options.prompt);
            const content = prompts.length === 1
              ? [{ type: 'tool-call', toolCallId: 't1', toolName: 'airlock_execute_code', input: JSON.stringify({ code }) }]
              : [{ type: 'text', text: 'done' }];
            return { content, finishReason: prompts.length === 1 ? 'tool-calls' : 'stop', usage, warnings: [] };
          },
          async doStream() {
            throw new Error('the recorder only generates');
          },
        };
        const agent = new Agent({ id: 'airlock-test', name: 'airlock-test', instructions: 'Run the code.', model, tools });
        await agent.generate('Run the code.', { maxSteps: 2 });
        assertEqual(prompts.length, 2, 'Mastra calls its model again with the tool result');
        const result = prompts[1].flatMap((m) => (m.role === 'tool' ? m.content : [])).find((p) => p.type === 'tool-result');
        assert(result, `Mastra hands its model the tool result: ${JSON.stringify(prompts[1]).slice(0, 300)}`);
        const out = result.output;
        const size = JSON.stringify(out.value).length;
        if (out.type === 'error-text') return { items: [], isError: true, error: out.value, size };
        if (out.type === 'json') {
          // The JSON of the whole CallToolResult: stdout and a text file are
          // strings in it the model reads, but an image there is base64 text,
          // not an image.
          assert(Array.isArray(out.value.content), `Mastra hands its model the content: ${JSON.stringify(out.value).slice(0, 300)}`);
          const items = fromMcpContent(out.value.content).map((i) => (i.kind === 'image' ? { kind: 'image-as-json', mime: i.mime } : i));
          return { items, isError: out.value.isError, size };
        }
        assertEqual(out.type, 'content', `Mastra model output type: ${JSON.stringify(out).slice(0, 300)}`);
        const items = out.value.map((v) => {
          if (v.type === 'image-data') return { kind: 'image', data: v.data, mime: v.mediaType };
          if (v.type === 'text' && v.text.startsWith('{"type":"resource"')) {
            const r = JSON.parse(v.text).resource;
            return { kind: 'file', ...r, mime: r.mimeType };
          }
          return { kind: v.type, text: v.text };
        });
        return { items, isError: false, size };
      },
      close: () => c.disconnect(),
    };
  },

  async inspector() {
    // Inspector 2's CLI is the launcher's --cli mode (the package's bin
    // "mcp-inspector"); it prints {"result": CallToolResult} with --format
    // json, and keeps its catalog under $HOME, so it gets a HOME of its own.
    const cli = path.join(here, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');
    if (!fs.existsSync(cli)) throw new Error('@modelcontextprotocol/inspector is not installed (cd tests/mcp && npm install)');
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'airlock-inspector-'));
    return {
      call(code) {
        return new Promise((resolve, reject) => {
          const p = spawn(process.execPath, [cli, '--cli', '--connect-timeout', '120000', '--format', 'json',
            '--method', 'tools/call', '--tool-name', 'execute_code', '--tool-args-json', JSON.stringify({ code }),
            '--', AIRLOCK, 'mcp'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HOME: home } });
          let out = '';
          let err = '';
          p.stdout.on('data', (d) => { out += d; });
          p.stderr.on('data', (d) => { err += d; });
          const t = setTimeout(() => p.kill('SIGKILL'), 120000);
          p.on('close', (rc) => {
            clearTimeout(t);
            try {
              const r = JSON.parse(out).result;
              resolve({ items: fromMcpContent(r.content), isError: r.isError, size: JSON.stringify(r).length,
                error: r.isError ? r.content.map((x) => x.text || '').join('\n') : undefined });
            } catch (e) {
              reject(new Error(`inspector CLI (exit ${rc}): ${out.slice(0, 500)} ${err.slice(0, 500)}`));
            }
          });
        });
      },
      close: async () => fs.rmSync(home, { recursive: true, force: true }),
    };
  },
};

// ---- what every client must hand its model --------------------------------

function texts(v) {
  return v.items.filter((i) => i.kind === 'text').map((i) => i.text).join('\n');
}

const checks = [
  ['stdout as text', STDOUT_CODE, (v) => {
    assertEqual(v.isError, false, 'isError');
    assertEqual(v.items, [{ kind: 'text', text: 'hello from airlock 42\n' }], 'the model gets stdout alone');
  }],
  ['an error, told once', ERROR_CODE, (v) => {
    assertEqual(v.isError, true, 'isError');
    assertIncludes(v.error, 'before', 'stdout before the error');
    assertIncludes(v.error, 'ValueError: boom 7', 'the traceback');
    assertEqual(v.error.split('exited with status 1').length, 2, `how the run ended, once: ${v.error}`);
    assert(!/error: error/i.test(v.error), `no doubled prefix: ${v.error}`);
  }],
  ['an image in /output is an image; a CSV is text', PNG_CSV_CODE, (v, name) => {
    assertEqual(v.isError, false, 'isError');
    const img = v.items.find((i) => i.kind === 'image');
    assert(img, `${name} hands its model the image: ${JSON.stringify(v.items).slice(0, 400)}`);
    assertEqual(img.mime, 'image/png', 'image media type');
    assertEqual(Buffer.from(img.data, 'base64').subarray(1, 4).toString(), 'PNG', 'PNG bytes');
    const csv = v.items.find((i) => i.kind === 'file');
    if (name === 'langchain') {
      // LangChain keeps embedded resources out of the model's message by
      // default (outputHandling resource: "artifact"); the CSV is the
      // artifact's text, and the next test has the model get it.
      assertEqual(csv, undefined, 'LangChain: no resource in the content by default');
      const a = v.artifact.find((x) => x.type === 'resource');
      assertEqual(a.resource.text, CSV_TEXT, 'the CSV as text in the artifact');
      return;
    }
    assert(csv, `${name} hands its model the CSV`);
    assertEqual(csv.mime, 'text/csv', 'CSV media type');
    assertEqual(csv.text, CSV_TEXT, 'the CSV as text');
    assertEqual(csv.blob, undefined, 'no base64 of the CSV');
    assert(/^airlock:\/\/run\/[0-9a-f]{32}\/output\/table\.csv$/.test(csv.uri), `the CSV's URI ${csv.uri}`);
  }],
  ['a cut stdout says so', TRUNC_CODE, (v) => {
    assertEqual(v.isError, false, 'isError');
    assertIncludes(texts(v), '[stdout truncated: a run keeps only its first 1 MiB', 'the truncation line');
  }],
  ['a 1 MiB image goes once', BIG_PNG_CODE, (v) => {
    assertEqual(v.items.filter((i) => i.kind === 'image').length, 1, 'one image');
    assert(v.size <= bound(BIG_PNG_B64), `the model's input is ${v.size} bytes for ${BIG_PNG_B64} bytes of base64`);
  }],
  ['100 KB of stdout goes once', BIG_STDOUT_CODE, (v) => {
    assertEqual(texts(v).length, BIG_STDOUT, 'stdout whole');
    assert(v.size <= bound(BIG_STDOUT), `the model's input is ${v.size} bytes for ${BIG_STDOUT} bytes of stdout`);
  }],
];

const tests = [];
for (const name of Object.keys(clients)) {
  tests.push([`${name}: what the model gets`, async () => {
    const client = await clients[name]();
    try {
      for (const [what, code, check] of checks) {
        const v = await client.call(code);
        try {
          check(v, name);
        } catch (e) {
          e.message = `${name}, ${what}: ${e.message}`;
          throw e;
        }
      }
    } finally {
      await client.close();
    }
  }]);
}

tests.push(['langchain: with resources in the content, the model gets the CSV as text', async () => {
  const client = await clients.langchain({ outputHandling: { resource: 'content' } });
  try {
    const v = await client.call(PNG_CSV_CODE);
    const csv = v.items.find((i) => i.kind === 'file');
    assert(csv, `the CSV in the content: ${JSON.stringify(v.items).slice(0, 400)}`);
    assertEqual(csv.text, CSV_TEXT, 'the CSV as text');
    assertEqual(csv.mime, 'text/csv', 'its media type');
  } finally {
    await client.close();
  }
}]);

tests.push(['the raw response: each payload once on the wire', async () => {
  const p = new RawPeer();
  try {
    await p.initialize();
    const sizes = {};
    for (const [what, code, base] of [['png', BIG_PNG_CODE, BIG_PNG_B64], ['stdout', BIG_STDOUT_CODE, BIG_STDOUT]]) {
      await p.send({ jsonrpc: '2.0', id: what, method: 'tools/call', params: { name: 'execute_code', arguments: { code } } });
      const r = await p.waitFor((m) => m.id === what, 120000);
      sizes[what] = JSON.stringify(r).length;
      assert(sizes[what] <= bound(base), `${what}: ${sizes[what]} bytes on the wire for ${base}`);
    }
  } finally {
    await p.close();
  }
}]);

tests.push(['the published schemas pass Ajv in strict mode (no type unions)', async () => {
  const { default: Ajv } = await need('ajv');
  const p = new RawPeer();
  try {
    await p.initialize();
    const r = await p.request('tools/list', {}, 'list');
    for (const t of r.result.tools) {
      for (const key of ['inputSchema', 'outputSchema']) {
        if (!t[key]) continue;
        const ajv = new Ajv({ strict: true, allowUnionTypes: false });
        ajv.compile(t[key]);
        const walk = (s) => {
          if (s && typeof s === 'object') {
            assert(!Array.isArray(s.type), `${t.name}.${key}: a type union ${JSON.stringify(s.type)}`);
            Object.values(s).forEach(walk);
          }
        };
        walk(t[key]);
      }
    }
  } finally {
    await p.close();
  }
}]);

runTests('test_mcp_clients', tests);
