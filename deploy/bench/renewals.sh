#!/usr/bin/env bash
# usage: deploy/bench/renewals.sh [COUNT]
# Renewals coalesced (issue 42, item 5): BenchmarkRenewFleet, each renewal
# its own statement (batch=1) and coalesced (batch=256), interleaved in one
# run, COUNT times (default 2), on a Postgres cluster of its own
# (deploy/dev/pg.sh on FENCEGATE_PG_PORT, default 54742), so that its WAL
# and Postgres CPU figures are this benchmark's alone. Fleet size from
# FENCEGATE_BENCH_LEASES (5000), FENCEGATE_BENCH_TTL (10s),
# FENCEGATE_BENCH_SECONDS (20). Prints the load average before and after.
set -euo pipefail
count=${1:-2}
export FENCEGATE_PG_PORT=${FENCEGATE_PG_PORT:-54742}
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/deploy/dev/pg.sh" start >/dev/null
FENCEGATE_TEST_DATABASE_URL=$("$root/deploy/dev/pg.sh" url)
export FENCEGATE_TEST_DATABASE_URL
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  $(date -u +%FT%TZ)"
(cd "$root" && go test -run '^$' -bench 'BenchmarkRenewFleet' -benchtime=1x -count="$count" -timeout 30m ./leasestore/)
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)  $(date -u +%FT%TZ)"
