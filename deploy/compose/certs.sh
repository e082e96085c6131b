#!/usr/bin/env bash
# TLS material for the broker's SASL_SSL listeners in compose.yaml.
#
#   ./certs.sh            # once; again with FORCE=1 to replace (docs/RUNBOOK.md)
#
# Writes, beside this script:
#   secrets/ca/ca.key, ca.crt    the compose CA (the key never leaves ca/;
#                                 nothing mounts that folder)
#   secrets/kafka/ca.crt          what clients and the broker itself trust
#   secrets/kafka/kafka.p12       the broker's key and certificate (SAN:
#                                 kafka, localhost, 127.0.0.1) in a PKCS12
#                                 keystore
#   .env                          KAFKA_KEYSTORE_PASSWORD (added if missing)
#
# Settings (environment): CERT_DAYS (default 397) for the broker's
# certificate, CA_DAYS (default 3650), FORCE=1 to replace what exists.
# Only openssl is needed. The folders are for one Docker host: secrets/ is
# 0700; secrets/kafka/ is 0755 with 0644 files because the broker runs as
# its image's user, not as yours (a bind mount keeps host modes).
set -euo pipefail
cd "$(dirname "$0")"
cert_days="${CERT_DAYS:-397}"
ca_days="${CA_DAYS:-3650}"
ca=secrets/ca
kd=secrets/kafka

if [ -e "$kd/kafka.p12" ] && [ -z "${FORCE:-}" ]; then
  echo "certs.sh: $kd/kafka.p12 exists; FORCE=1 replaces it" >&2
  exit 0
fi
umask 077
mkdir -p secrets "$ca" "$kd"
chmod 700 secrets "$ca"
chmod 755 "$kd"

# env_get KEY: the value of KEY in .env, empty when absent.
env_get() { if [ -f .env ]; then sed -n "s/^$1=//p" .env | tail -n1; fi; }
pass="$(env_get KAFKA_KEYSTORE_PASSWORD)"
if [ -z "$pass" ]; then
  pass="$(openssl rand -hex 24)"
  echo "KAFKA_KEYSTORE_PASSWORD=$pass" >> .env
  chmod 600 .env
fi

if [ ! -e "$ca/ca.key" ] || [ -n "${FORCE_CA:-}" ]; then
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$ca/ca.key" -out "$ca/ca.crt" -days "$ca_days" -sha256 \
    -subj "/CN=fencegate compose CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$tmp/kafka.key" -out "$tmp/kafka.csr" -subj "/CN=kafka" 2>/dev/null
cat > "$tmp/ext.cnf" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:kafka,DNS:localhost,IP:127.0.0.1
EXT
openssl x509 -req -in "$tmp/kafka.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" \
  -CAcreateserial -CAserial "$ca/ca.srl" -days "$cert_days" -sha256 \
  -extfile "$tmp/ext.cnf" -out "$tmp/kafka.crt" 2>/dev/null
openssl verify -CAfile "$ca/ca.crt" "$tmp/kafka.crt" >/dev/null
KEYSTORE_PASS="$pass" openssl pkcs12 -export -name kafka \
  -in "$tmp/kafka.crt" -inkey "$tmp/kafka.key" -certfile "$ca/ca.crt" \
  -out "$kd/kafka.p12" -passout env:KEYSTORE_PASS
cp "$ca/ca.crt" "$kd/ca.crt"
chmod 644 "$kd/kafka.p12" "$kd/ca.crt"
echo "certs.sh: $kd/kafka.p12 (valid $cert_days days), trust $kd/ca.crt" >&2
