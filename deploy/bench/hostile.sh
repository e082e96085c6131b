#!/usr/bin/env bash
# usage: deploy/bench/hostile.sh [SCENARIO...]
# The security review's scenarios of issue 21 (FM39-FM47) re-run against
# one `fencegate dev` process each (gateway, materializer and development
# broker in one process), on a database of its own: headers (60,000
# headers in one record; another client's renewals during eight such
# senders), methods (invented and 60 KB methods against the metric
# labels and /metrics), leases (one client acquiring N leases: answers,
# threads, RSS, lease names on /metrics), leases-opt-in (the same with
# --lease-metrics --lease-metrics-limit 100, N=300), listing (two
# tenants; ?prefix=%00), readyz (64 connections of /readyz, then of
# /healthz: database transactions/s and another client's renewals).
# Default: all of them. The bodies scenario is deploy/bench/bodies.sh.
#
# Two tenants: a (token tenant-a-token, allowed a:* and shard:*), the
# hostile client, and b (tenant-b-token, b:*), the other client. Needs `make build` (or
# FG=path/to/fencegate) and the throwaway Postgres (deploy/dev/pg.sh
# start). PORT (default 18600) and the next two ports are used; N
# (default 1200) is the number of leases of leases and listing.
set -eu
cd "$(dirname "$0")/../.."
FG=${FG:-bin/fencegate}
PORT=${PORT:-18600}
N=${N:-1200}
pgurl=$(deploy/dev/pg.sh url)
url="${pgurl%/*}/fencegate_bench_hostile?${pgurl#*\?}"
work=$(mktemp -d)
dev=
trap '[ -n "$dev" ] && kill "$dev" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/hostile" ./deploy/bench/hostile
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$work/config.yaml" <<YAML
transactional_id_prefix: bench
routes:
  - {pattern: "shard:*", topic: shard-output, partitions: 16, partition_rule: number}
  - {pattern: "a:*", topic: shard-output, partitions: 16, partition_rule: murmur2}
  - {pattern: "b:*", topic: shard-output, partitions: 16, partition_rule: murmur2}
clients:
  - {name: tenant-a, token_sha256: $(sha tenant-a-token), allow: ["a:*", "shard:*"]}
  - {name: tenant-b, token_sha256: $(sha tenant-b-token), allow: ["b:*"]}
YAML

# start_dev ARGS...: a fresh `fencegate dev` on a new database (dev clears
# the ledger of its own database at each start, not the lease store);
# sets dev to its pid.
start_dev() {
  psql "$pgurl" -qc "DROP DATABASE IF EXISTS fencegate_bench_hostile" >/dev/null
  "$FG" dev --config "$work/config.yaml" --database-url "$url" --listen "127.0.0.1:$PORT" \
    --kafka-listen "127.0.0.1:$((PORT + 1))" --materializer-listen "127.0.0.1:$((PORT + 2))" "$@" >"$work/dev.log" 2>&1 &
  dev=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && return 0
    kill -0 "$dev" 2>/dev/null || { cat "$work/dev.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "dev not ready" >&2
  exit 1
}

stop_dev() {
  kill "$dev"
  wait "$dev" 2>/dev/null || true
  dev=
}

# run SCENARIO [DEV ARGS...]: one scenario against its own dev process.
run() {
  local scenario=$1
  shift
  start_dev "$@"
  echo "== $scenario${*:+ (dev $*)}"
  "$work/hostile" -url "http://127.0.0.1:$PORT" -pid "$dev" -token tenant-a-token -token-b tenant-b-token \
    -pg "$url" -n "$N" "$scenario"
  stop_dev
}

for s in "${@:-headers methods leases leases-opt-in listing readyz}"; do
  for one in $s; do
    case $one in
      leases-opt-in) N=300 run leases --lease-metrics --lease-metrics-limit 100 ;;
      *) run "$one" ;;
    esac
  done
done
