#!/usr/bin/env bash
# Secrets of the compose stack, generated once and kept in .env and secrets/.
#
#   ./secrets.sh          # fills what is missing; never overwrites a value
#
# Writes, beside this script:
#   .env                          passwords, the barrier key and a KRaft
#                                 cluster id, read by `docker compose`
#   secrets/kafka/kafka_server_jaas.conf   broker users (SASL/PLAIN)
#   secrets/kafka/admin.properties         admin client settings (SASL_SSL)
#   secrets/fencegate.yaml        fencegate.yaml.in with the worker token hash
#   secrets/worker-token          the bearer token of client "indexer" (0600)
#   secrets/gateway/              what the gateways read as files, mounted
#   secrets/materializer/         read-only at /run/secrets/fencegate of each:
#       barrier-key               the barrier key(s), one a line, the
#                                 signing key first (--barrier-key-file)
#       kafka-password            its own SASL password
#                                 (--kafka-sasl-password-file)
#                                 Each component sees only its folder.
#
# .env stays the source of every value: the files above are written from it
# at every run. BARRIER_KEY may be a comma-separated list (the first key
# signs); BARRIER_KEY_VERIFY, optional, lists keys only the materializer
# accepts besides (a rotation: docs/RUNBOOK.md, "Barrier key rotation").
# Rotation of a value: delete its line from .env (or the file) and run again,
# then follow docs/RUNBOOK.md (the barrier key has its own procedure).
set -euo pipefail
cd "$(dirname "$0")"
umask 077
mkdir -p secrets secrets/kafka secrets/gateway secrets/materializer
chmod 700 secrets
chmod 755 secrets/kafka secrets/gateway secrets/materializer
touch .env
chmod 600 .env

env_get() { sed -n "s/^$1=//p" .env | tail -n1; }
# ensure KEY GENERATOR...: keep KEY's value, or generate and append it.
ensure() {
  local key="$1"; shift
  if [ -z "$(env_get "$key")" ]; then
    echo "$key=$("$@")" >> .env
  fi
}
# URL- and properties-safe random strings (hex).
hex() { openssl rand -hex "$1"; }
# A KRaft cluster id: a random 16-byte UUID in unpadded base64url (22 chars).
cluster_id() { openssl rand 16 | openssl base64 -A | tr '+/' '-_' | tr -d '='; }

ensure POSTGRES_PASSWORD hex 24
ensure DB_OWNER_PASSWORD hex 24
ensure DB_APP_PASSWORD hex 24
ensure DB_MATERIALIZER_PASSWORD hex 24
# HMAC-SHA256 key of generation barriers, shared by gateways and the
# materializer: 32 random bytes.
ensure BARRIER_KEY hex 32
ensure KAFKA_ADMIN_PASSWORD hex 24
ensure KAFKA_GATEWAY_PASSWORD hex 24
ensure KAFKA_MATERIALIZER_PASSWORD hex 24
ensure GRAFANA_ADMIN_PASSWORD hex 16
ensure KAFKA_CLUSTER_ID cluster_id

admin="$(env_get KAFKA_ADMIN_PASSWORD)"
# The broker reads this file as its image's user: 0644 inside secrets/kafka
# (secrets/ itself is 0700).
cat > secrets/kafka/kafka_server_jaas.conf <<JAAS
KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required
  username="admin"
  password="$admin"
  user_admin="$admin"
  user_gateway="$(env_get KAFKA_GATEWAY_PASSWORD)"
  user_materializer="$(env_get KAFKA_MATERIALIZER_PASSWORD)";
};
JAAS
cat > secrets/kafka/admin.properties <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.crt
PROPS
chmod 644 secrets/kafka/kafka_server_jaas.conf secrets/kafka/admin.properties

# Secrets of fencegate as files. The containers run as uid 65532, not as
# you, and a bind mount keeps host modes: 0644 files in 0755 folders, which
# only you can reach on the host (secrets/ is 0700).
# lines LIST: a comma-separated list, one item a line.
lines() { tr ',' '\n' <<<"$1" | sed '/^$/d'; }
verify_only="$(env_get BARRIER_KEY_VERIFY)"
write() { # write FILE: stdin to FILE, readable by the container user
  cat > "$1.tmp" && chmod 644 "$1.tmp" && mv -f "$1.tmp" "$1"
}
lines "$(env_get BARRIER_KEY)" | write secrets/gateway/barrier-key
{ lines "$(env_get BARRIER_KEY)"; lines "$verify_only"; } | write secrets/materializer/barrier-key
env_get KAFKA_GATEWAY_PASSWORD | write secrets/gateway/kafka-password
env_get KAFKA_MATERIALIZER_PASSWORD | write secrets/materializer/kafka-password

if [ ! -s secrets/worker-token ]; then
  hex 32 > secrets/worker-token
fi
hash="$(tr -d '\n' < secrets/worker-token | openssl dgst -sha256 -r | cut -d' ' -f1)"
sed "s/@WORKER_TOKEN_SHA256@/$hash/" fencegate.yaml.in > secrets/fencegate.yaml
# Read by the gateway's image user; holds a hash, not the token.
chmod 644 secrets/fencegate.yaml
echo "secrets.sh: .env and secrets/ ready; worker token in secrets/worker-token" >&2
