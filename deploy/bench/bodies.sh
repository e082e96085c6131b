#!/usr/bin/env bash
# usage: deploy/bench/bodies.sh [N] [SIZE]
# The security review's memory run (FM39): N (default 24) concurrent JSON
# produce bodies of about SIZE bytes (default 16,000,000: records of 1 MB,
# base64 BINARY values under --max-record-bytes) for a lease with no
# session, sent at once to one `fencegate dev` process (gateway,
# materializer and development broker in one process). Each body is
# decoded whole before its answer (409 not_holder), or refused 429 beyond
# the body budget (--max-body-bytes-in-flight). Prints the process's
# resident memory before (VmRSS) and its peak after (VmHWM, from
# /proc/PID/status), and the answers by status.
#
# DEV_ARGS adds flags to `fencegate dev` (word-split), e.g.
# DEV_ARGS="--max-body-bytes-in-flight 1073741824" to lift the budget and
# see what each body costs. Needs `make build` (or FG=path/to/fencegate)
# and the throwaway Postgres (deploy/dev/pg.sh start); uses a database of
# its own (DB, default fencegate_bench_bodies), dropped at each run and
# created by `dev`.
set -eu
N=${1:-24}
SIZE=${2:-16000000}
cd "$(dirname "$0")/../.."
FG=${FG:-bin/fencegate}
PORT=${PORT:-18480}
DB=${DB:-fencegate_bench_bodies}
pgurl=$(deploy/dev/pg.sh url)
# dev refuses a database it did not create (FM45): start from none.
psql "$pgurl" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null
url="${pgurl%/*}/$DB?${pgurl#*\?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One record: a 720,000-byte value, 960,000 bytes of base64.
rec=$(printf '{"value":{"type":"BINARY","data":"%s"}}' "$(head -c 720000 /dev/zero | base64 -w0)")
records=$(( SIZE / 960100 ))
{
  printf '{"owner_id":"w","token":1,"batch_id":"b","records":['
  for i in $(seq 1 "$records"); do
    [ "$i" -gt 1 ] && printf ','
    printf '%s' "$rec"
  done
  printf ']}'
} >"$work/body.json"

# shellcheck disable=SC2086
"$FG" dev --database-url "$url" --listen "127.0.0.1:$PORT" --kafka-listen "127.0.0.1:$((PORT + 1))" \
  --materializer-listen "127.0.0.1:$((PORT + 2))" ${DEV_ARGS:-} >"$work/dev.log" 2>&1 &
dev=$!
trap 'kill "$dev" 2>/dev/null; wait "$dev" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break
  kill -0 "$dev" 2>/dev/null || { cat "$work/dev.log" >&2; exit 1; }
  sleep 0.1
done
status() { awk -v k="$1:" '$1 == k {print int($2 / 1024)}' "/proc/$dev/status"; }
before=$(status VmRSS)
hwm_before=$(status VmHWM)
for _ in $(seq 1 "$N"); do
  curl -s -o /dev/null -w '%{http_code}\n' -H 'Authorization: Bearer dev-token' \
    -H 'Content-Type: application/json' --data-binary @"$work/body.json" \
    "http://127.0.0.1:$PORT/v1/leases/shard:1/records" >>"$work/codes" &
done
# shellcheck disable=SC2046 # one pid a word
wait $(jobs -p | grep -v "^$dev\$")
after=$(status VmRSS)
peak=$(status VmHWM)
echo "bodies=$N bytes=$(stat -c %s "$work/body.json") rss_before=${before}MiB hwm_before=${hwm_before}MiB" \
  "peak=${peak}MiB rss_after=${after}MiB per_body=$(( (peak - before) / N ))MiB answers: $(sort "$work/codes" | uniq -c | awk '{printf "%s x%s ", $2, $1}')"
