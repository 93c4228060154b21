// Code mode over MCP: `airlock mcp --servers FILE` driven by the official
// MCP TypeScript SDK client, with two official servers as upstreams
// (@modelcontextprotocol/server-everything and server-memory, installed
// here by npm). The servers' tools are not MCP tools of airlock: the
// execute_code description names the servers, the code calls their tools
// as Python functions, and the memory server keeps its state from one
// call to the next.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { AIRLOCK, assert, assertEqual, assertIncludes, rmrf, runTests, tmpdir } from './lib.mjs';

const require = createRequire(import.meta.url);
const entry = (pkg) => path.join(path.dirname(require.resolve(`${pkg}/package.json`)), 'dist', 'index.js');

const dir = tmpdir('airlock-servers-');
const serversFile = path.join(dir, 'servers.json');
fs.writeFileSync(serversFile, JSON.stringify({
  mcpServers: {
    everything: { command: process.execPath, args: [entry('@modelcontextprotocol/server-everything'), 'stdio'] },
    memory: {
      command: process.execPath,
      args: [entry('@modelcontextprotocol/server-memory')],
      env: { MEMORY_FILE_PATH: path.join(dir, 'memory.jsonl') },
    },
  },
}));

const CALL_OPTS = { timeout: 120000 };
let client;
let transport;
let stderr = '';

function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function run(code) {
  return client.callTool({ name: 'execute_code', arguments: { code } }, undefined, CALL_OPTS);
}

await runTests('test_mcp_servers', Object.entries({
  async 'the servers are no tools of their own; execute_code names them'() {
    transport = new StdioClientTransport({ command: AIRLOCK, args: ['mcp', '--servers', serversFile], stderr: 'pipe' });
    client = new Client({ name: 'airlock-servers-test', version: '1.0.0' });
    await client.connect(transport);
    if (transport.stderr) transport.stderr.on('data', (d) => { stderr += d; });
    const { tools } = await client.listTools();
    assert(tools.every((t) => t.name === 'execute_code' || t.name.startsWith('session_')), 'tools');
    const exec = tools.find((t) => t.name === 'execute_code');
    assertIncludes(exec.description, 'everything (13 tools)', 'description');
    assertIncludes(exec.description, 'memory (9 tools)', 'description');
    assert(!exec.description.includes('create_entities'), 'no tool of a server is listed');
  },

  async 'one execute_code call uses both servers'() {
    const r = await run(`
from servers import everything, memory
print(everything.echo(message="from the sandbox"))
memory.create_entities(entities=[{"name": "sdk", "entityType": "test", "observations": ["made over MCP"]}])
print(everything.get_sum(a=20, b=22))
`);
    assert(!r.isError, `failed: ${text(r)} ${stderr}`);
    assertIncludes(text(r), 'Echo: from the sandbox', 'output');
    assertIncludes(text(r), 'is 42', 'output');
  },

  async 'the memory server keeps its state for the next call'() {
    const r = await run(`
from servers import memory
print([e["name"] for e in memory.read_graph()["entities"]])
`);
    assert(!r.isError, `failed: ${text(r)}`);
    assertIncludes(text(r), "['sdk']", 'output');
  },

  async 'a destructive tool needs approval nobody can give here'() {
    const r = await run(`
import servers
try:
    servers.memory.delete_entities(entityNames=["sdk"])
except servers.ApprovalRequired as e:
    print("refused:", e)
`);
    assertIncludes(text(r), 'refused: memory.delete_entities', 'output');
    assertIncludes(text(r), '"approval": "never"', 'output');
  },
}), {
  async teardown() {
    if (client) await client.close();
    rmrf(dir);
  },
});
