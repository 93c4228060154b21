// Tenants of one `airlock serve`, each driven by the official TypeScript
// SDK's StreamableHTTPClientTransport with its own bearer token: files put
// into a workspace with the workspace tools, runs that see only their own
// tenant's files, results, resources and sessions that another tenant can
// neither read nor tell from ones that never existed, and one template
// shared by all of them (a fork cannot change the str hash secret, so copies
// of one template print the same hash("x")).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { assert, startServe, assertEqual, assertIncludes, rmrf, runTests, tmpdir, WORKSPACE_TOOLS } from './lib.mjs';

const TOK = {
  acme: `tok-${crypto.randomBytes(12).toString('hex')}`,
  beta: `tok-${crypto.randomBytes(12).toString('hex')}`,
};
const CALL_OPTS = { timeout: 120000 };
const LIST = "import os\nfor p in sorted(os.listdir('/input')):\n    print(p, open('/input/' + p).read())";

const OPERATOR = 'operator-token-of-the-metrics-0123';
let server;
let dir;
let url;
const clients = {};

async function client(tenant) {
  const c = new Client({ name: `airlock-tenant-${tenant}`, version: '1' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${TOK[tenant]}` } } }));
  return c;
}

const textOf = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const call = (tenant, name, args) => clients[tenant].callTool({ name, arguments: args }, undefined, CALL_OPTS);
const run = async (tenant, code, extra = {}) => textOf(await call(tenant, 'execute_code', { code, ...extra }));

const tests = [
  ['start airlock serve with two tenants and a folder for their workspaces', async () => {
    dir = tmpdir('airlock-tenants-');
    fs.writeFileSync(path.join(dir, 'tokens'), `${TOK.acme} acme\n${TOK.beta} beta max-files=3\n`);
    fs.writeFileSync(path.join(dir, 'operator'), `${OPERATOR}\n`);
    server = await startServe(['--tokens', path.join(dir, 'tokens'), '--tenants-dir', path.join(dir, 't'),
      '--metrics-token', path.join(dir, 'operator')]);
    url = `http://127.0.0.1:${server.port}/mcp`;
    clients.acme = await client('acme');
    clients.beta = await client('beta');
    const { tools } = await clients.acme.listTools();
    for (const t of WORKSPACE_TOOLS) assert(tools.some((x) => x.name === t), `${t} listed`);
  }],

  ['each tenant writes its files and its runs see only them', async () => {
    let r = await call('acme', 'workspace_write', { files: [{ path: 'a.txt', text: 'A' }, { path: 'sub/deep.txt', text: 'D' }] });
    assertEqual(r.isError || false, false, `write: ${textOf(r)}`);
    assertEqual(r.structuredContent.written.map((w) => w.path).sort(), ['a.txt', 'sub/deep.txt'], 'written');
    r = await call('beta', 'workspace_write', { files: [{ path: 'b.txt', base64: Buffer.from('B').toString('base64') }] });
    assertEqual(r.isError || false, false, `write: ${textOf(r)}`);
    assertEqual(await run('acme', LIST.replace("os.listdir('/input')", "[p for p in os.listdir('/input') if p != 'sub']")), 'a.txt A\n', 'acme sees its own');
    assertEqual(await run('beta', LIST), 'b.txt B\n', 'beta sees its own');
    const la = await call('acme', 'workspace_list', {});
    const lb = await call('beta', 'workspace_list', {});
    assertEqual(la.structuredContent.files.map((f) => f.path).sort(), ['a.txt', 'sub/deep.txt'], 'acme list');
    assertEqual(lb.structuredContent.files.map((f) => f.path), ['b.txt'], 'beta list');
    // Another tenant's path is just a path of one's own, which is missing.
    r = await call('beta', 'workspace_remove', { paths: ['a.txt'] });
    assertEqual(await run('acme', "print(open('/input/a.txt').read())"), 'A\n', 'acme keeps a.txt');
  }],

  ['one template serves both tenants', async () => {
    const ha = await run('acme', "print(hash('airlock-tenants'))");
    const hb = await run('beta', "print(hash('airlock-tenants'))");
    assertEqual(ha, hb, 'the same template (the same str hash secret)');
  }],

  ["another tenant's resources and sessions look never opened", async () => {
    const r = await call('acme', 'execute_code', { code: 'open("/output/secret.txt", "w").write("acme only")' });
    const uri = r.content.filter((c) => c.type === 'resource' || c.type === 'resource_link')
      .map((c) => (c.resource ? c.resource.uri : c.uri))[0];
    assert(uri && uri.startsWith('airlock://'), `a resource URI: ${JSON.stringify(r.content)}`);
    const mine = await clients.acme.readResource({ uri });
    assertEqual(mine.contents[0].text, 'acme only', 'acme reads its file');
    const fake = uri.replace(/run\/[a-z0-9]+\//, `run/${'b'.repeat(uri.match(/run\/([a-z0-9]+)\//)[1].length)}/`);
    const errs = [];
    for (const u of [uri, fake]) {
      try {
        await clients.beta.readResource({ uri: u });
        errs.push('read');
      } catch (e) {
        // The answer names the run asked for: that part aside, byte for byte.
        const id = u.match(/run\/([a-z0-9]+)\//)[1];
        errs.push(e.message.split(u).join('URI').split(id).join('ID'));
      }
    }
    assertEqual(errs[0], errs[1], "acme's URI answers beta as a URI that never existed");
    const s = await call('acme', 'session_open', {});
    const h = s._meta['dev.airlock/session'];
    await run('acme', 'x = 41', { session: h });
    const never = h.replace(/.$/, (ch) => (ch === 'a' ? 'b' : 'a'));
    const theirs = textOf(await call('beta', 'execute_code', { code: 'print(x)', session: h }));
    const absent = textOf(await call('beta', 'execute_code', { code: 'print(x)', session: never }));
    assertEqual(theirs.replace(h, 'H'), absent.replace(never, 'H'), "acme's handle answers beta as one never opened");
    assert((await run('acme', 'print(x + 1)', { session: h })).startsWith('42\n'), 'acme keeps its session');
  }],

  ['hostile uploads are refused, change nothing, and one tenant at its cap leaves the other alone', async () => {
    for (const p of ['../escape.txt', '/abs.txt', 'a/../../b', 'x'.repeat(5000), 'nul\u0000.txt']) {
      const r = await call('beta', 'workspace_write', { files: [{ path: p, text: 'evil' }] });
      assertEqual(r.isError, true, `refused: ${p}`);
    }
    // .airlock is the server's (each tenant's lock and generation, design.md "Shared storage").
    assertEqual(fs.readdirSync(path.join(dir, 't')).filter((n) => n !== '.airlock').sort(), ['acme', 'beta'], 'nothing new beside the workspaces');
    assertEqual(fs.readdirSync(path.join(dir, 't', 'beta')), ['b.txt'], 'beta unchanged');
    // beta may hold 3 files: a write of 3 more is refused whole.
    const r = await call('beta', 'workspace_write', { files: ['1', '2', '3'].map((n) => ({ path: `${n}.txt`, text: n })) });
    assertEqual(r.isError, true, 'over max-files');
    assertIncludes(textOf(r), 'files', 'the message names the cap');
    assertEqual(fs.readdirSync(path.join(dir, 't', 'beta')), ['b.txt'], 'all or nothing');
    const ok = await call('acme', 'workspace_write', { files: ['1', '2', '3'].map((n) => ({ path: `${n}.txt`, text: n })) });
    assertEqual(ok.isError || false, false, 'acme is not held by beta\'s cap');
  }],

  ['metrics are the operator\'s and name no tenant', async () => {
    const mine = await fetch(`http://127.0.0.1:${server.port}/metrics`, { headers: { Authorization: `Bearer ${TOK.beta}` } });
    assertEqual(mine.status, 403, 'a tenant\'s token on /metrics');
    const res = await fetch(`http://127.0.0.1:${server.port}/metrics`, { headers: { Authorization: `Bearer ${OPERATOR}` } });
    const text = await res.text();
    assertEqual(res.status, 200, 'metrics status');
    assert(!text.includes('acme') && !text.includes('beta'), 'no tenant name in /metrics');
  }],
];

await runTests('test_mcp_tenants', tests, {
  teardown: async () => {
    for (const c of Object.values(clients)) await c.close().catch(() => {});
    if (server) {
      const exited = new Promise((resolve) => server.child.on('exit', (code) => resolve(code)));
      server.child.kill('SIGTERM');
      const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 60000))]);
      assertEqual(code, 0, 'exit status after SIGTERM');
    }
    if (dir) rmrf(dir);
  },
});
