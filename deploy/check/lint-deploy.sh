#!/usr/bin/env bash
# Packaging checks that need neither a container engine nor a cluster
# (`make lint-deploy`; part of `make lint`). Installs what it needs from
# Debian's packages and npm when missing (needs root for apt-get).
#
#   compose   certs.sh and secrets.sh run in a scratch copy; the certificate
#             chain, keystore and KRaft cluster id they make are checked;
#             `docker-compose config` renders compose.yaml with that .env
#             (and refuses it without one); every bind mount exists; every
#             file a fencegate service names (config, Kafka CA, barrier key
#             and SASL password files) is mounted, present and readable by
#             the image's user; no secret in a fencegate environment; the
#             password files match the broker's JAAS users.
#   prometheus  `promtool check config` on the compose Prometheus config
#             with the alert rules it mounts.
#   systemd   `systemd-analyze verify` (any warning fails) and
#             `systemd-analyze security --offline` (exposure <= 2.0) on the
#             units, with ExecStart pointed at a stub: the binary's own
#             flags are TestDeploy's business.
#   k8s       the Helm chart: `helm lint` and `helm template` with the
#             real helm (deploy/check/render-helm.sh check: the defaults and
#             TLS+ServiceMonitor+NetworkPolicy values, equal to the committed
#             renderings in deploy/helm/rendered/), then those renderings
#             against the Kubernetes OpenAPI schemas (deploy/check/k8s.mjs,
#             offline): every file a FENCEGATE_* variable names is in a
#             mounted volume, from a key the example Secrets or a ConfigMap
#             hold, readable by the pod's user; every pod non-root,
#             read-only root, no capabilities, with requests; the gateways
#             under a PDB and spread over nodes; the replicas' headless
#             Service, advertised names, certificate names, ServiceMonitors
#             and NetworkPolicies fit together.
#   shell     shellcheck on the deploy scripts.
#   go        go test ./cmd/fencegate -run TestDeploy (flags and FENCEGATE_*
#             variables, CLUSTER_ID, shipped configs, SASL only over TLS,
#             secrets as files, credentials of the units, stop grace
#             periods above the drain; on the chart's renderings).
# Not run here: docker build, docker compose up, kubectl apply, systemctl
# start. See docs/deployment.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
log() { echo "lint-deploy: $*" >&2; }

apt_need() { # apt_need COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2 (Debian) for $1"
  if [ "$(id -u)" -ne 0 ]; then log "$1 missing and not root: apt-get install $2"; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }
}
apt_need docker-compose docker-compose
apt_need shellcheck shellcheck
apt_need systemd-analyze systemd
apt_need openssl openssl
apt_need node nodejs
apt_need npm npm
if [ ! -d deploy/check/node_modules/kubernetes-models ]; then
  (cd deploy/check && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# --- shell
shellcheck deploy/compose/*.sh deploy/check/lint-deploy.sh deploy/check/vulncheck.sh deploy/check/render-helm.sh
log "shell: shellcheck clean"

# --- compose
mkdir -p "$scratch/repo/deploy"
cp -r deploy/compose deploy/prometheus deploy/grafana "$scratch/repo/deploy/"
cp Dockerfile "$scratch/repo/"
rm -rf "$scratch/repo/deploy/compose/.env" "$scratch/repo/deploy/compose/secrets"
cd "$scratch/repo/deploy/compose"
if docker-compose -f compose.yaml config -q >/dev/null 2>&1; then
  log "FAIL compose: config rendered without .env (secrets must be required)"; exit 1
fi
./certs.sh 2>/dev/null && ./secrets.sh 2>/dev/null
openssl verify -CAfile secrets/ca/ca.crt secrets/kafka/ca.crt >/dev/null
pass="$(sed -n 's/^KAFKA_KEYSTORE_PASSWORD=//p' .env)"
openssl pkcs12 -in secrets/kafka/kafka.p12 -passin "pass:$pass" -nokeys 2>/dev/null |
  openssl verify -CAfile secrets/ca/ca.crt >/dev/null
openssl pkcs12 -in secrets/kafka/kafka.p12 -passin "pass:$pass" -nokeys 2>/dev/null |
  openssl x509 -noout -ext subjectAltName | grep -q 'DNS:kafka, DNS:localhost, IP Address:127.0.0.1'
id="$(sed -n 's/^KAFKA_CLUSTER_ID=//p' .env)"
pad="$(printf '%*s' $(( (4 - ${#id} % 4) % 4 )) '' | tr ' ' '=')"
n="$(printf '%s%s' "$id" "$pad" | tr -- '-_' '+/' | openssl base64 -d -A | wc -c)"
if [ "${#id}" -ne 22 ] || [ "$n" -ne 16 ]; then
  log "FAIL compose: generated cluster id $id is $n bytes"; exit 1
fi
for u in admin gateway materializer; do grep -q "user_$u=" secrets/kafka/kafka_server_jaas.conf; done
# What fencegate reads as files matches what the broker and .env hold: each
# component's SASL password is its JAAS user's, the barrier key is .env's.
for u in gateway materializer; do
  want="$(sed -n "s/^  user_$u=\"\(.*\)\"[;]*$/\1/p" secrets/kafka/kafka_server_jaas.conf)"
  if [ -z "$want" ] || [ "$(cat "secrets/$u/kafka-password")" != "$want" ]; then
    log "FAIL compose: secrets/$u/kafka-password is not the broker's password of user $u"; exit 1
  fi
  key="$(sed -n 's/^BARRIER_KEY=//p' .env)"
  if [ "$(head -n1 "secrets/$u/barrier-key")" != "${key%%,*}" ]; then
    log "FAIL compose: secrets/$u/barrier-key does not start with .env's BARRIER_KEY"; exit 1
  fi
done
docker-compose -f compose.yaml config -q
docker-compose -f compose.yaml config 2>/dev/null | node "$root/deploy/check/compose-binds.mjs"
log "compose: scripts made a CA-signed broker keystore (SAN kafka, localhost, 127.0.0.1), a 16-byte cluster id ($id), secret files matching the broker's users; docker-compose config renders"
cd "$root"

# --- prometheus
deploy/dev/prom.sh install
sed "s#/etc/prometheus/alerts.yaml#$root/deploy/prometheus/alerts.yaml#" deploy/compose/prometheus.yml > "$scratch/prometheus.yml"
"$(deploy/dev/prom.sh bin)/promtool" check config "$scratch/prometheus.yml" >/dev/null
log "prometheus: promtool check config (with deploy/prometheus/alerts.yaml) passes"

# --- systemd
mkdir -p "$scratch/systemd"
printf '#!/bin/sh\nexit 0\n' > "$scratch/systemd/fencegate"
chmod +x "$scratch/systemd/fencegate"
for u in deploy/systemd/*.service; do
  sed "s#/usr/local/bin/fencegate#$scratch/systemd/fencegate#" "$u" > "$scratch/systemd/$(basename "$u")"
done
(
  cd "$scratch/systemd"
  out="$(systemd-analyze verify --man=no ./*.service 2>&1)" || { echo "$out"; exit 1; }
  if [ -n "$out" ]; then echo "$out"; log "FAIL systemd: verify warned"; exit 1; fi
  for u in ./*.service; do
    systemd-analyze security --offline=yes --threshold=20 --no-pager "$u" >"$scratch/sec.txt" 2>&1 ||
      { tail -1 "$scratch/sec.txt"; log "FAIL systemd: $u exposure above 2.0"; exit 1; }
    log "systemd: $(tail -1 "$scratch/sec.txt" | sed 's/^→ //')"
  done
)
log "systemd: systemd-analyze verify clean"

# --- k8s
deploy/check/render-helm.sh check
k8s=(deploy/helm/secret.example.yaml deploy/helm/rendered/*.yaml)
node deploy/check/k8s.mjs "${k8s[@]}" >/dev/null
log "k8s: $(node deploy/check/k8s.mjs "${k8s[@]}" | tail -1)"

# --- go
go test -count=1 ./cmd/fencegate -run TestDeploy
log "all packaging checks passed"
