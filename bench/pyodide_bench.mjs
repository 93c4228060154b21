// Measures Pyodide (CPython compiled to WebAssembly) under Node for
// bench/bench.py: load once, then print(1) per run with calls spaced 10 ms
// apart, the PSS of this process once loaded, and the CSV workload with the
// input copied into Pyodide's in-memory file system once and the output read
// back per run. Pyodide has no OS isolation of its own: it runs inside this
// process. Prints one JSON object.
//
// usage: node pyodide_bench.mjs RUNS CSV_RUNS CSV_DIR CODE_FILE
import { readFileSync } from "node:fs";
import { loadPyodide } from "pyodide";

const [runs, csvRuns] = [Number(process.argv[2]), Number(process.argv[3])];
const csvDir = process.argv[4];
const csvCode = readFileSync(process.argv[5], "utf8");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pssKib() {
  const m = /^Pss:\s+(\d+)/m.exec(readFileSync("/proc/self/smaps_rollup", "utf8"));
  return m ? Number(m[1]) : -1;
}

let out = "";
const t0 = performance.now();
const py = await loadPyodide({ stdout: (s) => { out += s + "\n"; } });
py.runPython("print(1)");
const coldMs = performance.now() - t0;
if (out !== "1\n") throw new Error(`print(1) wrote ${JSON.stringify(out)}`);

const samples = [];
for (let i = 0; i < runs; i++) {
  await sleep(10);
  out = "";
  const s = performance.now();
  py.runPython("print(1)");
  samples.push(performance.now() - s);
  if (out !== "1\n") throw new Error(`print(1) wrote ${JSON.stringify(out)}`);
}
await sleep(50);
const pss = pssKib();

const st = performance.now();
py.FS.mkdirTree("/input");
py.FS.mkdirTree("/output");
py.FS.writeFile("/input/data.csv", readFileSync(`${csvDir}/data.csv`));
const stageMs = performance.now() - st;
const csvSamples = [];
let csvStdout = "";
for (let i = 0; i < csvRuns; i++) {
  await sleep(10);
  out = "";
  const s = performance.now();
  py.runPython(csvCode);
  const back = py.FS.readFile("/output/out.bin");
  py.FS.unlink("/output/out.bin");
  csvSamples.push(performance.now() - s);
  if (back.length < 1048576) throw new Error(`only ${back.length} bytes came back`);
  csvStdout = out;
}

console.log(JSON.stringify({
  version: py.version, cold_ms: coldMs, samples_ms: samples, pss_kib: pss,
  csv_stage_ms: stageMs, csv_samples_ms: csvSamples, csv_stdout: csvStdout,
}));
process.exit(0);
