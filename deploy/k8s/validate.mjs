// Checks every manifest in this folder against the Kubernetes API schemas of
// the kubernetes-models npm package (no cluster needed): unknown fields,
// wrong types and missing required fields fail.
//   cd deploy/k8s && npm install --no-save kubernetes-models yaml && node validate.mjs
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const groups = {
  v1: "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "autoscaling/v2": "kubernetes-models/autoscaling/v2",
  "policy/v1": "kubernetes-models/policy/v1",
};
let bad = 0, good = 0;
for (const file of readdirSync(here).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const doc of parseAllDocuments(readFileSync(join(here, file), "utf8"))) {
    const obj = doc.toJS();
    if (!obj || obj.kind === "Kustomization") continue;
    const mod = groups[obj.apiVersion];
    try {
      if (!mod) throw new Error(`no schema for apiVersion ${obj.apiVersion}`);
      const Model = (await import(mod))[obj.kind];
      if (!Model) throw new Error(`no schema for kind ${obj.kind}`);
      new Model(obj).validate();
      good++;
      console.log(`ok   ${file}: ${obj.kind} ${obj.metadata.name}`);
    } catch (e) {
      bad++;
      console.log(`FAIL ${file}: ${obj.kind} ${obj.metadata?.name}: ${e.message}`);
    }
  }
}
console.log(`validate: ${good} passed, ${bad} failed`);
process.exit(bad ? 1 : 0);
