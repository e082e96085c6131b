// Reads `docker-compose config` output on stdin and fails unless every bind
// mount's host path exists and no ${...} is left uninterpolated. Used by
// lint-deploy.sh after certs.sh and secrets.sh ran in a scratch copy.
import { readFileSync, existsSync } from "node:fs";
import { parse } from "yaml";

const text = readFileSync(0, "utf8");
const cfg = parse(text);
let bad = 0;
if (text.includes("${")) { console.error("FAIL compose: uninterpolated ${...} in the rendered config"); bad++; }
let binds = 0;
for (const [name, svc] of Object.entries(cfg.services)) {
  for (const v of svc.volumes ?? []) {
    const src = typeof v === "string" ? v.split(":")[0] : v.type === "bind" ? v.source : null;
    if (!src || !src.startsWith("/")) continue; // named volume
    binds++;
    if (!existsSync(src)) { console.error(`FAIL compose: ${name} mounts ${src}, which does not exist`); bad++; }
  }
}
console.log(bad ? `compose: ${bad} problem(s)` : `compose: ${Object.keys(cfg.services).length} services, ${binds} bind mounts present`);
process.exit(bad ? 1 : 0);
