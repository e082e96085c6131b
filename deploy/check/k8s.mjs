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
let fileRefs = 0;
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
    for (const it of v.configMap?.items ?? []) {
      if (!(it.key in (configMaps.get(v.configMap.name)?.data ?? {})))
        fail(`volume ${v.name}`, `config map ${v.configMap.name} key ${it.key} not in the manifests`);
    }
  }
  for (const c of t.spec.containers) checkFiles(t, c);
}

// Files the binary opens: every FENCEGATE_* variable naming a path
// (--config, --kafka-ca-file, the *-file flags, the HTTPS files), set in
// env or through envFrom, lies under a read-only volume mount of the
// container whose volume (a Secret or ConfigMap) has that key, readable by
// the pod's non-root user (the files are root's: others or, with fsGroup,
// the group must read). The secrets themselves (barrier key, SASL password)
// are files, never variables.
function checkFiles(t, c) {
  const where = `container ${c.name}`;
  const fileVar = (k) => /^FENCEGATE_(CONFIG|TLS_CERT|TLS_KEY|TLS_CLIENT_CA|KAFKA_CA_FILE|[A-Z_]+_FILE)$/.test(k);
  const env = {};
  for (const ef of c.envFrom ?? []) Object.assign(env, configMaps.get(ef.configMapRef?.name)?.data ?? {});
  for (const e of c.env ?? []) env[e.name] = e.value ?? (e.valueFrom ? { from: e.valueFrom } : "");
  for (const k of ["FENCEGATE_BARRIER_KEY", "FENCEGATE_KAFKA_SASL_PASSWORD"]) {
    if (k in env) fail(where, `${k} is an environment variable; mount the secret as a file and set ${k}_FILE`);
  }
  const volumes = new Map((t.spec.volumes ?? []).map((v) => [v.name, v]));
  const fsGroup = t.spec.securityContext?.fsGroup;
  for (const [k, path] of Object.entries(env)) {
    if (!fileVar(k) || typeof path !== "string" || path === "") continue;
    fileRefs++;
    const mounts = (c.volumeMounts ?? []).filter((m) => path === m.mountPath || path.startsWith(m.mountPath.replace(/\/$/, "") + "/"))
      .sort((a, b) => b.mountPath.length - a.mountPath.length);
    const m = mounts[0];
    if (!m) { fail(where, `${k}=${path} is under no volume mount`); continue; }
    if (!m.readOnly) fail(where, `volume mount ${m.mountPath} (holds ${k}) is not readOnly`);
    const v = volumes.get(m.name);
    if (!v) { fail(where, `volume mount ${m.mountPath} names volume ${m.name}, which the pod does not have`); continue; }
    const src = v.secret ?? v.configMap;
    if (!src) { fail(where, `${k}=${path}: volume ${v.name} is neither a Secret nor a ConfigMap`); continue; }
    const rel = m.subPath ? (path === m.mountPath ? m.subPath : null) : path.slice(m.mountPath.replace(/\/$/, "").length + 1);
    if (!rel) { fail(where, `${k}=${path} is inside a subPath mount`); continue; }
    const keys = v.secret ? (v.secret.secretName === secret.metadata.name ? secretKeys : new Set())
      : new Set(Object.keys(configMaps.get(v.configMap.name)?.data ?? {}));
    let key = rel, mode = src.defaultMode ?? 0o644;
    if (src.items) {
      const it = src.items.find((i) => i.path === rel);
      if (!it) { fail(where, `${k}=${path}: volume ${v.name} projects no item at ${rel}`); continue; }
      key = it.key;
      mode = it.mode ?? mode;
    }
    if (!keys.has(key)) { fail(where, `${k}=${path}: key ${key} is not in ${v.secret ? "secret.example.yaml" : "config map " + v.configMap.name}`); continue; }
    if (!(mode & 0o004) && !(fsGroup != null && mode & 0o040))
      fail(where, `${k}=${path}: mode ${mode.toString(8)} is not readable by the pod's user (files are root's${fsGroup == null ? ", no fsGroup" : ""})`);
  }
}

console.log(failures ? `k8s: ${failures} problem(s)` : `k8s: ${objects.length} objects valid, ${fileRefs} files named by FENCEGATE_* variables mounted from their keys`);
process.exit(failures ? 1 : 0);
