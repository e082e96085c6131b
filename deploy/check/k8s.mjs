// Offline validation of the Helm chart's rendered manifests
// (deploy/helm/rendered/*.yaml, made by deploy/check/render-helm.sh with
// the real helm): every object against the Kubernetes OpenAPI schemas
// compiled into kubernetes-models (types, required fields, enums,
// formats), plus the references between objects that the API server would
// not check at apply time but a rollout depends on. No cluster is
// contacted. Unknown fields are not caught here: the OpenAPI schemas allow
// additional properties. The custom resources (cert-manager's Certificate,
// the Prometheus Operator's ServiceMonitor) have no schema here; their
// references are checked below.
//
//   node deploy/check/k8s.mjs deploy/helm/secret.example.yaml deploy/helm/rendered/default.yaml
//
// The first file holds the example Secrets (never applied); each further
// file is one rendering, checked on its own against them.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const [secretFile, ...renderings] = process.argv.slice(2);
let failures = 0;
const fail = (where, msg) => { failures++; console.error(`FAIL ${where}: ${msg}`); };

function load(file) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { version: "1.1" });
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
const customKinds = new Set(["cert-manager.io/v1 Certificate", "monitoring.coreos.com/v1 ServiceMonitor"]);

async function validate(file, obj) {
  const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
  if (customKinds.has(`${obj.apiVersion} ${obj.kind}`)) {
    console.log(`ok   ${where} (${obj.apiVersion}, custom resource: references checked below)`);
    return;
  }
  let Model;
  try {
    Model = (await import(modelPath(obj.apiVersion, obj.kind)))[obj.kind];
  } catch {
    fail(where, `unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`);
    return;
  }
  try {
    new Model(obj).validate();
    console.log(`ok   ${where} (${obj.apiVersion})`);
  } catch (e) {
    fail(where, e.message);
  }
}

const exampleSecrets = load(secretFile);
for (const o of exampleSecrets) {
  if (o.kind !== "Secret") fail(secretFile, `${o.kind}/${o.metadata?.name} is not a Secret`);
  await validate(secretFile, o);
}
let objectCount = 0, fileRefs = 0;
for (const file of renderings) {
  const objects = load(file);
  for (const obj of objects) {
    if (obj.kind === "Secret") fail(file, `Secret/${obj.metadata.name}: the chart must not make a Secret (a placeholder would reach the pods)`);
    await validate(file, obj);
  }
  objectCount += objects.length;
  checkRendering(file, objects);
}

// Cross-references within one rendering: selectors select a pod template;
// secret and config map keys that pods read exist in the example Secrets
// and the ConfigMap; the replicas' names, certificate, ServiceMonitors and
// NetworkPolicies fit together.
function checkRendering(file, objects) {
  const at = (w) => `${file}: ${w}`;
  const byKind = (k) => objects.filter((o) => o.kind === k);
  const deployments = byKind("Deployment");
  const templates = deployments.map((d) => d.spec.template);
  for (const d of deployments) {
    if (!matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels))
      fail(at(`Deployment/${d.metadata.name}`), "selector does not match its pod template labels");
  }
  const services = byKind("Service");
  for (const s of services) {
    if (!templates.some((t) => matches(s.spec.selector, t.metadata.labels)))
      fail(at(`Service/${s.metadata.name}`), "selects no pod template");
  }
  for (const p of byKind("PodDisruptionBudget")) {
    if (!templates.some((t) => matches(p.spec.selector.matchLabels, t.metadata.labels)))
      fail(at(`PodDisruptionBudget/${p.metadata.name}`), "selects no pod template");
  }
  const secrets = new Map(exampleSecrets.map((x) => [x.metadata.name, new Set(Object.keys({ ...x.data, ...x.stringData }))]));
  const configMaps = new Map(byKind("ConfigMap").map((c) => [c.metadata.name, c]));
  const ctx = { at, secrets, configMaps };
  for (const t of templates) {
    for (const c of [...(t.spec.initContainers ?? []), ...t.spec.containers]) {
      const where = at(`container ${c.name}`);
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref && !secrets.get(ref.name)?.has(ref.key))
          fail(where, `env ${e.name} reads secret ${ref.name} key ${ref.key}, not in ${secretFile}`);
      }
      for (const ef of c.envFrom ?? []) {
        if (ef.configMapRef && !configMaps.has(ef.configMapRef.name))
          fail(where, `envFrom config map ${ef.configMapRef.name} is not in the manifests`);
      }
      for (const p of ["livenessProbe", "readinessProbe", "startupProbe"]) {
        const get = c[p]?.httpGet;
        const port = get?.port;
        const cp = (c.ports ?? []).find((x) => x.name === port);
        if (typeof port === "string" && !cp) fail(where, `${p} names port ${port}, which the container does not declare`);
        if (get && envOf(c, configMaps).FENCEGATE_TLS_CERT && get.scheme !== "HTTPS")
          fail(where, `${p} probes over ${get.scheme ?? "HTTP"} a container that serves HTTPS`);
      }
      checkEnvRefs(where, c);
      checkFiles(ctx, t, c);
    }
    for (const v of t.spec.volumes ?? []) {
      for (const it of v.secret?.items ?? []) {
        if (!secrets.get(v.secret.secretName)?.has(it.key))
          fail(at(`volume ${v.name}`), `secret ${v.secret.secretName} key ${it.key} not in ${secretFile}`);
      }
      for (const it of v.configMap?.items ?? []) {
        if (!(it.key in (configMaps.get(v.configMap.name)?.data ?? {})))
          fail(at(`volume ${v.name}`), `config map ${v.configMap.name} key ${it.key} not in the manifests`);
      }
    }
  }
  for (const d of deployments) checkHardening(at(`Deployment/${d.metadata.name}`), d);
  const gateways = deployments.filter((d) => d.spec.template.spec.containers.some((c) => c.args?.[0] === "serve"));
  for (const d of gateways) {
    const where = at(`Deployment/${d.metadata.name}`);
    const labels = d.spec.template.metadata.labels;
    if (!byKind("PodDisruptionBudget").some((p) => matches(p.spec.selector.matchLabels, labels)))
      fail(where, "no PodDisruptionBudget selects the gateways: a node drain may take them all at once");
    if (!(d.spec.template.spec.topologySpreadConstraints ?? []).some((c) => c.topologyKey === "kubernetes.io/hostname" && matches(c.labelSelector?.matchLabels, labels)))
      fail(where, "no topology spread over nodes for its own pods");
  }
  checkReplicas(ctx, deployments, services, byKind("Certificate"));
  checkServiceMonitors(ctx, services, byKind("ServiceMonitor"));
  checkNetworkPolicies(ctx, templates, byKind("NetworkPolicy"));
}

// checkHardening: what every pod of the chart keeps: a non-root user with
// the runtime's seccomp profile, no service account token, and in every
// container (init containers too) no privilege escalation, no
// capabilities, a read-only root filesystem and resource requests.
function checkHardening(where, d) {
  const spec = d.spec.template.spec;
  const sc = spec.securityContext ?? {};
  if (sc.runAsNonRoot !== true || !(sc.runAsUser > 0)) fail(where, "pod does not run as a non-root user");
  if (sc.seccompProfile?.type !== "RuntimeDefault") fail(where, "pod has no RuntimeDefault seccomp profile");
  if (spec.automountServiceAccountToken !== false) fail(where, "pod mounts a service account token it never uses");
  if (spec.enableServiceLinks !== false) fail(where, "enableServiceLinks: the Services' *_SERVICE_HOST/_PORT variables would be injected (a Service named fencegate gives FENCEGATE_PORT...)");
  for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
    const csc = c.securityContext ?? {};
    if (csc.allowPrivilegeEscalation !== false) fail(where, `container ${c.name} may escalate privileges`);
    if (csc.readOnlyRootFilesystem !== true) fail(where, `container ${c.name} has a writable root filesystem`);
    if (!(csc.capabilities?.drop ?? []).includes("ALL")) fail(where, `container ${c.name} keeps capabilities`);
    if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory) fail(where, `container ${c.name} has no cpu and memory requests`);
  }
}

// matches: a label selector's matchLabels (or a Service's selector) selects labels.
function matches(sel, labels) {
  return Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);
}

// envOf: a container's variables, from its config maps and env (a value
// from a secret or field is {from}).
function envOf(c, configMaps) {
  const env = {};
  for (const ef of c.envFrom ?? []) Object.assign(env, configMaps.get(ef.configMapRef?.name)?.data ?? {});
  for (const e of c.env ?? []) env[e.name] = e.value ?? (e.valueFrom ? { from: e.valueFrom } : "");
  return env;
}

// checkEnvRefs: the kubelet expands $(NAME) only from variables defined
// above in the same list, and leaves any other reference as it is: a
// replica would advertise the literal "$(POD_NAME)".
function checkEnvRefs(where, c) {
  const seen = new Set();
  for (const e of c.env ?? []) {
    for (const m of (e.value ?? "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!seen.has(m[1])) fail(where, `env ${e.name} names $(${m[1]}), which no entry above it defines`);
    }
    seen.add(e.name);
  }
}

// checkReplicas: each gateway advertises <pod>.<subdomain>.<namespace>.svc
// over the scheme it serves; the subdomain is a headless Service that
// selects the gateway pods and publishes only ready ones; the worker-facing
// Service and the headless wildcard are in the Certificate of the TLS
// Secret the pods mount.
function checkReplicas({ at }, deployments, services, certificates) {
  for (const d of deployments) {
    const t = d.spec.template;
    for (const c of t.spec.containers) {
      const adv = (c.env ?? []).find((e) => e.name === "FENCEGATE_ADVERTISE_URL")?.value;
      if (adv === undefined) continue;
      const where = at(`Deployment/${d.metadata.name} container ${c.name}`);
      const sub = t.spec.subdomain;
      const headless = services.find((s) => s.metadata.name === sub);
      if (!headless) { fail(where, `pod subdomain ${sub} is no Service of the chart: the advertised name does not resolve`); continue; }
      if (headless.spec.clusterIP !== "None") fail(at(`Service/${sub}`), "the replicas' Service is not headless");
      if (headless.spec.publishNotReadyAddresses !== false) fail(at(`Service/${sub}`), "publishNotReadyAddresses is not false: replicas would forward to pods that are not ready");
      if (!matches(headless.spec.selector, t.metadata.labels)) fail(at(`Service/${sub}`), `does not select the pods of ${d.metadata.name}`);
      const tls = (c.env ?? []).some((e) => e.name === "FENCEGATE_TLS_CERT");
      const port = c.ports?.[0]?.containerPort;
      const want = `${tls ? "https" : "http"}://$(POD_NAME).${sub}.$(NAMESPACE).svc:${port}`;
      if (adv !== want) fail(where, `advertises ${adv}, want ${want}`);
      if (!tls) continue;
      const tlsVol = (t.spec.volumes ?? []).find((v) => v.name === "tls")?.secret?.secretName;
      const ns = d.metadata.namespace;
      for (const cert of certificates.filter((x) => x.spec.secretName === tlsVol)) {
        const names = new Set(cert.spec.dnsNames);
        const front = services.filter((s) => s.spec.clusterIP !== "None" && matches(s.spec.selector, t.metadata.labels));
        for (const n of [...front.map((s) => `${s.metadata.name}.${ns}.svc`), `*.${sub}.${ns}.svc`]) {
          if (!names.has(n)) fail(at(`Certificate/${cert.metadata.name}`), `does not name ${n}`);
        }
      }
    }
  }
}
// checkServiceMonitors: each selects one Service of the chart (the API
// Service, not the headless one: one scrape per pod) by a port it has,
// names the job as deploy/prometheus/prometheus.yml does, and copies the
// pod labels the replica-down alert selects by.
function checkServiceMonitors({ at }, services, monitors) {
  for (const m of monitors) {
    const where = at(`ServiceMonitor/${m.metadata.name}`);
    const sel = services.filter((s) => matches(m.spec.selector.matchLabels, s.metadata.labels));
    if (sel.length !== 1) { fail(where, `selects ${sel.length} Services (${sel.map((s) => s.metadata.name)}), want 1`); continue; }
    for (const e of m.spec.endpoints) {
      if (!sel[0].spec.ports.some((p) => p.name === e.port)) fail(where, `endpoint port ${e.port} is not a port of Service/${sel[0].metadata.name}`);
    }
    const job = sel[0].metadata.labels?.[m.spec.jobLabel];
    const component = sel[0].metadata.labels?.["app.kubernetes.io/component"];
    if (job !== `fencegate-${component}`)
      fail(where, `job would be ${job ?? "the Service's name " + sel[0].metadata.name}, not fencegate-${component} (jobLabel ${m.spec.jobLabel}): the rules and the dashboard select on that job`);
    for (const l of ["app.kubernetes.io/part-of", "app.kubernetes.io/component"]) {
      if (!(m.spec.podTargetLabels ?? []).includes(l)) fail(where, `podTargetLabels lacks ${l} (FencegateReplicaDown selects by it)`);
    }
  }
}

// checkNetworkPolicies: each selects a pod template and admits its
// container ports; every policy limits egress (and so lists DNS).
function checkNetworkPolicies({ at }, templates, policies) {
  for (const p of policies) {
    const where = at(`NetworkPolicy/${p.metadata.name}`);
    const t = templates.find((x) => matches(p.spec.podSelector.matchLabels, x.metadata.labels));
    if (!t) { fail(where, "selects no pod template"); continue; }
    const open = new Set((p.spec.ingress ?? []).flatMap((r) => (r.ports ?? []).map((x) => x.port)));
    for (const c of t.spec.containers) for (const cp of c.ports ?? []) {
      if (!open.has(cp.containerPort)) fail(where, `admits nothing on port ${cp.containerPort} of container ${c.name}`);
    }
    if (!(p.spec.policyTypes ?? []).includes("Egress")) fail(where, "no Egress policy type");
    if (!(p.spec.egress ?? []).some((r) => (r.ports ?? []).some((x) => x.port === 53 && x.protocol === "UDP")))
      fail(where, "egress admits no DNS (UDP 53)");
  }
}

// Files the binary opens: every FENCEGATE_* variable naming a path
// (--config, --kafka-ca-file, the *-file flags, the HTTPS files), set in
// env or through envFrom, lies under a read-only volume mount of the
// container whose volume (a Secret or ConfigMap) has that key, readable by
// the pod's non-root user (the files are root's: others or, with fsGroup,
// the group must read). The secrets themselves (barrier key, SASL password)
// are files, never variables.
function checkFiles({ at, secrets, configMaps }, t, c) {
  const where = at(`container ${c.name}`);
  const fileVar = (k) => /^FENCEGATE_(CONFIG|TLS_CERT|TLS_KEY|TLS_CLIENT_CA|KAFKA_CA_FILE|[A-Z_]+_FILE)$/.test(k);
  const env = envOf(c, configMaps);
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
    const keys = v.secret ? (secrets.get(v.secret.secretName) ?? new Set())
      : new Set(Object.keys(configMaps.get(v.configMap.name)?.data ?? {}));
    let key = rel, mode = src.defaultMode ?? 0o644;
    if (src.items) {
      const it = src.items.find((i) => i.path === rel);
      if (!it) { fail(where, `${k}=${path}: volume ${v.name} projects no item at ${rel}`); continue; }
      key = it.key;
      mode = it.mode ?? mode;
    }
    if (!keys.has(key)) { fail(where, `${k}=${path}: key ${key} is not in ${v.secret ? `secret ${v.secret.secretName} of ${secretFile}` : "config map " + v.configMap.name}`); continue; }
    if (!(mode & 0o004) && !(fsGroup != null && mode & 0o040))
      fail(where, `${k}=${path}: mode ${mode.toString(8)} is not readable by the pod's user (files are root's${fsGroup == null ? ", no fsGroup" : ""})`);
  }
}

console.log(failures ? `k8s: ${failures} problem(s)` : `k8s: ${renderings.length} renderings, ${objectCount} objects valid, ${fileRefs} files named by FENCEGATE_* variables mounted from their keys`);
process.exit(failures ? 1 : 0);
