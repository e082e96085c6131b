#!/usr/bin/env bash
# ACLs for fencegate on the compose broker (DESIGN.md section 9, FM16):
# only the gateway principal writes the lease topics and uses their
# transactional ids; only the materializer reads them; workers get nothing.
set -euo pipefail
prefix="${FENCEGATE_TXN_PREFIX:-dev}"   # transactional_id_prefix of the gateway config
topic="${FENCEGATE_TOPIC:-shard-output}"
k() { docker compose exec -T kafka /opt/kafka/bin/"$@" --bootstrap-server 127.0.0.1:9092 --command-config /dev/stdin < admin.properties; }
k kafka-topics.sh --create --if-not-exists --topic "$topic" --partitions 16 --replication-factor 1
k kafka-acls.sh --add --allow-principal User:gateway --operation Write --operation Describe --topic "$topic"
k kafka-acls.sh --add --allow-principal User:gateway --operation Write --operation Describe \
  --transactional-id "fencegate/$prefix/" --resource-pattern-type prefixed
k kafka-acls.sh --add --allow-principal User:materializer --operation Read --operation Describe --topic "$topic"
k kafka-acls.sh --add --allow-principal User:materializer --operation Read --group fencegate-materializer
k kafka-acls.sh --list
