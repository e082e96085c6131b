// Offline validation of deploy/k8s: every object of every manifest against
// the Kubernetes OpenAPI schemas compiled into kubernetes-models (types,
// required fields, enums, formats), plus the references between objects
// that the API server would not check at apply time but a rollout depends
// on. No cluster is contacted. Unknown fields are not caught here: the
// OpenAPI schemas allow additional properties.
//
//   node deploy/check/k8s.mjs deploy/k8s
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const dir = process.argv[2] ?? "deploy/k8s";
let failures = 0;
const fail = (where, msg) => { failures++; console.error(`FAIL ${where}: ${msg}`); };

function load(file) {
  const docs = parseAllDocuments(readFileSync(join(dir, file), "utf8"), { version: "1.1" });
  return docs.map((d, i) => {
    if (d.errors.length) fail(`${file}#${i}`, d.errors.map((e) => e.message).join("; "));
    return d.toJS();
  }).filter((o) => o);
}

// Module of a kind: core objects live under v1/, others under <group>/<version>/.
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  return group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
}

const kust = load("kustomization.yaml")[0];
const files = [...kust.resources, "secret.example.yaml"];
for (const f of kust.resources) {
  if (!existsSync(join(dir, f))) fail("kustomization.yaml", `resource ${f} does not exist`);
  if (/secret/i.test(f)) fail("kustomization.yaml", `${f}: the example Secret must not be applied`);
}

const objects = [];
for (const file of files) {
  for (const obj of load(file)) {
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    let Model;
    try {
      Model = (await import(modelPath(obj.apiVersion, obj.kind)))[obj.kind];
    } catch {
      fail(where, `unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`);
      continue;
    }
    try {
      new Model(obj).validate();
      console.log(`ok   ${where} (${obj.apiVersion})`);
    } catch (e) {
      fail(where, e.message);
    }
    objects.push({ file, obj });
  }
}

// Cross-references: selectors select a pod template; secret and config map
// keys that pods read exist in the Secret example and the ConfigMap.
const byKind = (k) => objects.filter((o) => o.obj.kind === k).map((o) => o.obj);
const templates = [...byKind("Deployment"), ...byKind("Job")].map((d) => d.spec.template);
const matches = (sel, labels) => Object.entries(sel).every(([k, v]) => labels?.[k] === v);
for (const d of byKind("Deployment")) {
  if (!matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels))
    fail(`Deployment/${d.metadata.name}`, "selector does not match its pod template labels");
}
for (const s of byKind("Service")) {
  if (!templates.some((t) => matches(s.spec.selector, t.metadata.labels)))
    fail(`Service/${s.metadata.name}`, "selects no pod template");
}
for (const p of byKind("PodDisruptionBudget")) {
  if (!templates.some((t) => matches(p.spec.selector.matchLabels, t.metadata.labels)))
    fail(`PodDisruptionBudget/${p.metadata.name}`, "selects no pod template");
}
const secret = byKind("Secret")[0];
const secretKeys = new Set(Object.keys({ ...secret?.data, ...secret?.stringData }));
const configMaps = new Map(byKind("ConfigMap").map((c) => [c.metadata.name, c]));
for (const t of templates) {
  for (const c of t.spec.containers) {
    const where = `container ${c.name}`;
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref && (ref.name !== secret.metadata.name || !secretKeys.has(ref.key)))
        fail(where, `env ${e.name} reads secret ${ref.name} key ${ref.key}, not in secret.example.yaml`);
    }
    for (const ef of c.envFrom ?? []) {
      if (ef.configMapRef && !configMaps.has(ef.configMapRef.name))
        fail(where, `envFrom config map ${ef.configMapRef.name} is not in the manifests`);
    }
    for (const p of ["livenessProbe", "readinessProbe", "startupProbe"]) {
      const port = c[p]?.httpGet?.port;
      if (typeof port === "string" && !(c.ports ?? []).some((cp) => cp.name === port))
        fail(where, `${p} names port ${port}, which the container does not declare`);
    }
  }
  for (const v of t.spec.volumes ?? []) {
    for (const it of v.secret?.items ?? []) {
      if (v.secret.secretName !== secret.metadata.name || !secretKeys.has(it.key))
        fail(`volume ${v.name}`, `secret key ${it.key} not in secret.example.yaml`);
    }
  }
}

console.log(failures ? `k8s: ${failures} problem(s)` : `k8s: ${objects.length} objects valid`);
process.exit(failures ? 1 : 0);
