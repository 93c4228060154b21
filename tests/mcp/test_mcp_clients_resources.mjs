// The resources of `airlock mcp`: the files recent runs returned, read back
// by the URIs their results named. Each URI is unique to its run; the store
// keeps the last 32 runs (bounded in bytes and age too), and a URI this
// process does not hold is a clear error, not another file.
import { RawPeer, assert, assertEqual, assertIncludes, runTests } from './lib.mjs';

const RECORD = { 'dev.airlock/run': true };
let peer;
let nextId = 1;

async function call(code) {
  const id = nextId++;
  const r = await peer.request('tools/call', { name: 'execute_code', arguments: { code }, _meta: RECORD }, id, 120000);
  assert(r.result && !r.result.isError, `call ${id}: ${JSON.stringify(r).slice(0, 500)}`);
  return r.result;
}

async function read(uri) {
  return peer.request('resources/read', { uri }, nextId++);
}

const tests = [
  ['start', async () => {
    peer = new RawPeer();
    const init = await peer.initialize();
    assertEqual(init.result.capabilities.resources, { subscribe: false, listChanged: false }, 'resources capability');
  }],

  ['the same file name in two runs: two URIs, each its own bytes', async () => {
    const a = await call('open("/output/same.txt", "w").write("first")');
    const b = await call('open("/output/same.txt", "w").write("second")');
    const ua = a._meta['dev.airlock/run'].files[0].uri;
    const ub = b._meta['dev.airlock/run'].files[0].uri;
    assert(ua !== ub, 'URIs differ');
    assertEqual((await read(ua)).result.contents[0].text, 'first', 'first run');
    assertEqual((await read(ub)).result.contents[0].text, 'second', 'second run');
    // A URI is the run's id and the path: another path in that run is not there.
    const other = await read(ua.replace('same.txt', 'other.txt'));
    assertEqual(other.error && other.error.code, -32002, 'no such file');
    assertIncludes(other.error.message, 'no such file', 'message');
  }],

  ['text files by media type and bytes: text resources; the rest blobs, unaltered', async () => {
    const code = [
      'open("/output/a.json", "w").write("{\\"k\\": 1}")',
      'open("/output/b.svg", "w").write("<svg/>")',
      'open("/output/c.csv", "wb").write(b"x,\\xff\\n")',
      'open("/output/d", "w").write("plain words\\n")',
      'open("/output/e.py", "w").write("print(1)\\n")',
      'open("/output/f.dat", "wb").write(b"a\\x00b")',
    ].join('\n');
    const r = await call(code);
    const got = r.content.map((c) => c.resource).map((x) => [x.uri.replace(/.*\/output\//, ''), x.mimeType, 'text' in x ? x.text : `blob:${x.blob}`]);
    assertEqual(got, [
      ['a.json', 'application/json', '{"k": 1}'],
      ['b.svg', 'image/svg+xml', '<svg/>'],
      // Not UTF-8: the bytes as they are, in base64.
      ['c.csv', 'text/csv', `blob:${Buffer.from('x,\xff\n', 'latin1').toString('base64')}`],
      // No known type, but UTF-8 text.
      ['d', 'text/plain', 'plain words\n'],
      ['e.py', 'text/x-python', 'print(1)\n'],
      ['f.dat', 'application/octet-stream', `blob:${Buffer.from('a\0b').toString('base64')}`],
    ], 'the items');
  }],

  ['URIs that are not this server\'s are clear errors', async () => {
    for (const [uri, why] of [
      [`airlock://run/${'a'.repeat(32)}/output/x`, 'another airlock mcp process'],
      ['airlock://run/short/output/x', 'not a URI this server makes'],
      [`airlock://run/${'a'.repeat(32)}/output/%zz`, 'percent-encoding'],
      ['file:///etc/passwd', 'serves only'],
    ]) {
      const r = await read(uri);
      assertEqual(r.error && r.error.code, -32002, `${uri}: ${JSON.stringify(r)}`);
      assertIncludes(r.error.message, why, uri);
    }
    const r = await peer.request('resources/read', {}, nextId++);
    assertEqual(r.error && r.error.code, -32602, 'no uri');
  }],

  ['the store keeps the last 32 runs; resources/list pages through them', async () => {
    const code = 'for i in range(16):\n    open(f"/output/f{i:02}.txt", "w").write(str(i))';
    const first = await call(code);
    for (let i = 0; i < 32; i++) await call(code);
    const gone = await read(first._meta['dev.airlock/run'].files[0].uri);
    assertEqual(gone.error && gone.error.code, -32002, 'the 33rd run back is dropped');
    assertIncludes(gone.error.message, 'last 32 runs', 'the message names the cap');
    const page1 = (await peer.request('resources/list', {}, nextId++)).result;
    assertEqual(page1.resources.length, 500, 'a page');
    assert(typeof page1.nextCursor === 'string', 'a cursor');
    const page2 = (await peer.request('resources/list', { cursor: page1.nextCursor }, nextId++)).result;
    assertEqual(page1.resources.length + page2.resources.length, 32 * 16, 'every file of the 32 runs');
    assertEqual(page2.nextCursor, undefined, 'the last page');
    const bad = await peer.request('resources/list', { cursor: 'x' }, nextId++);
    assertEqual(bad.error && bad.error.code, -32602, 'a bad cursor');
  }],

  ['close', async () => {
    const r = await peer.close();
    assertEqual(r.code, 0, 'exit status');
  }],
];

runTests('test_mcp_clients_resources', tests);
