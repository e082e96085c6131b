#!/usr/bin/env bash
# Lease topic and ACLs of the compose broker, run once as admin by the
# kafka-init service of compose.yaml (apache/kafka image), after every
# `docker compose up` (each step is idempotent).
#
# Only the gateway principal writes the lease topic and uses the
# transactional ids under fencegate/<prefix>/; only the materializer reads
# the topic; every other principal (a worker's direct producer) is refused.
# These are the grants gateway/acl_test.go (FM16) checks against the
# embedded broker.
#
# Environment: BOOTSTRAP, ADMIN_CONFIG (client properties of admin),
# LEASE_TOPIC, LEASE_PARTITIONS, TXN_PREFIX (transactional_id_prefix of the
# gateway config), GROUP (default fencegate-materializer).
set -euo pipefail
: "${BOOTSTRAP:?}" "${ADMIN_CONFIG:?}" "${LEASE_TOPIC:?}" "${LEASE_PARTITIONS:?}" "${TXN_PREFIX:?}"
group="${GROUP:-fencegate-materializer}"
bin=/opt/kafka/bin
k() { "$bin/$1" --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" "${@:2}"; }

k kafka-topics.sh --create --if-not-exists --topic "$LEASE_TOPIC" \
  --partitions "$LEASE_PARTITIONS" --replication-factor 1
# gateway: produce to the lease topic, own the lease transactional ids
# (InitTransactions, AddPartitionsToTxn, EndTxn; Describe for the epoch
# read-back after each handover).
k kafka-acls.sh --add --allow-principal User:gateway \
  --operation Write --operation Describe --topic "$LEASE_TOPIC"
k kafka-acls.sh --add --allow-principal User:gateway \
  --operation Write --operation Describe \
  --transactional-id "fencegate/$TXN_PREFIX/" --resource-pattern-type prefixed
# materializer: read the lease topic read_committed in its group.
k kafka-acls.sh --add --allow-principal User:materializer \
  --operation Read --operation Describe --topic "$LEASE_TOPIC"
k kafka-acls.sh --add --allow-principal User:materializer \
  --operation Read --operation Describe --group "$group"
k kafka-acls.sh --list
