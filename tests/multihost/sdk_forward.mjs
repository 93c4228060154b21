// The official MCP SDK's client against a host that does not hold the
// session (test_peers.py, test_official_sdk_through_another_host): argv is
// the URL of that host's /mcp, a bearer token and a session handle opened on
// another host. It runs a cell that prints, with progress, and prints one
// JSON line: the result's text and the progress notifications it saw.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, session] = process.argv.slice(2);
const c = new Client({ name: 'airlock-multihost-test', version: '1' });
await c.connect(new StreamableHTTPClientTransport(new URL(url),
  { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
const seen = [];
const code = 'import time\nfor i in range(3):\n    print("step", i, flush=True)\n    time.sleep(0.6)\nprint(n)';
const r = await c.callTool({ name: 'execute_code', arguments: { session, code } }, undefined,
  { timeout: 120000, onprogress: (p) => seen.push(p) });
console.log(JSON.stringify({ text: r.content.map((x) => x.text || '').join(''), isError: !!r.isError, seen }));
await c.close();
