// Reads `docker-compose config` output on stdin and fails unless every bind
// mount's host path exists and no ${...} is left uninterpolated. Used by
// lint-deploy.sh after certs.sh and secrets.sh ran in a scratch copy.
//
// For the fencegate containers (image fencegate:*) also: every file a
// FENCEGATE_* variable names (--config, --kafka-ca-file, the *-file flags,
// the HTTPS files) lies under a bind mount, exists in its source, is not
// empty and is readable by the image's user (uid 65532 is not the host
// user, and a bind mount keeps host modes: the file must be readable by
// others, its folder searchable); and no secret is in the environment
// (FENCEGATE_BARRIER_KEY, FENCEGATE_KAFKA_SASL_PASSWORD: files instead).
import { readFileSync, existsSync, statSync } from "node:fs";
import { join, posix } from "node:path";
import { parse } from "yaml";

const text = readFileSync(0, "utf8");
const cfg = parse(text);
let bad = 0;
const fail = (msg) => { console.error(`FAIL compose: ${msg}`); bad++; };
if (text.includes("${")) fail("uninterpolated ${...} in the rendered config");

// Variables whose value is a path the binary opens.
const fileVar = (k) => /^FENCEGATE_(CONFIG|TLS_CERT|TLS_KEY|TLS_CLIENT_CA|KAFKA_CA_FILE|[A-Z_]+_FILE)$/.test(k);
const secretVars = ["FENCEGATE_BARRIER_KEY", "FENCEGATE_KAFKA_SASL_PASSWORD"];

let binds = 0, files = 0;
for (const [name, svc] of Object.entries(cfg.services)) {
  const mounts = [];
  for (const v of svc.volumes ?? []) {
    let src, dst;
    if (typeof v === "string") [src, dst] = v.split(":");
    else if (v.type === "bind") [src, dst] = [v.source, v.target];
    if (!src || !src.startsWith("/")) continue; // named volume
    binds++;
    if (!existsSync(src)) { fail(`${name} mounts ${src}, which does not exist`); continue; }
    mounts.push({ src, dst });
  }
  if (!String(svc.image ?? "").startsWith("fencegate:")) continue;
  const env = svc.environment ?? {};
  for (const k of secretVars) {
    if (k in env) fail(`${name} has ${k} in its environment; mount it as a file and set ${k}_FILE`);
  }
  for (const [k, val] of Object.entries(env)) {
    if (!fileVar(k) || val === "" || val == null) continue;
    files++;
    const path = String(val);
    // The longest mount target that is the path or one of its folders.
    const m = mounts.filter((m) => path === m.dst || path.startsWith(m.dst.replace(/\/$/, "") + "/"))
      .sort((a, b) => b.dst.length - a.dst.length)[0];
    if (!m) { fail(`${name}: ${k}=${path} is under no bind mount`); continue; }
    const host = path === m.dst ? m.src : join(m.src, posix.relative(m.dst, path));
    if (!existsSync(host)) { fail(`${name}: ${k}=${path} is ${host} on the host, which does not exist`); continue; }
    const st = statSync(host);
    if (!st.isFile()) { fail(`${name}: ${k}=${path} (${host}) is not a file`); continue; }
    if (st.size === 0) fail(`${name}: ${k}=${path} (${host}) is empty`);
    if (!(st.mode & 0o004)) fail(`${name}: ${k}=${path} (${host}, mode ${(st.mode & 0o777).toString(8)}) is not readable by the container's user`);
    if (host !== m.src && !(statSync(m.src).mode & 0o001))
      fail(`${name}: ${m.src} (mounted at ${m.dst}) is not searchable by the container's user`);
  }
}
console.log(bad ? `compose: ${bad} problem(s)` : `compose: ${Object.keys(cfg.services).length} services, ${binds} bind mounts present, ${files} files named by FENCEGATE_* variables mounted and readable`);
process.exit(bad ? 1 : 0);
