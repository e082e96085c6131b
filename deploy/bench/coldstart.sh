#!/usr/bin/env bash
# usage: deploy/bench/coldstart.sh OUTDIR [N] [loadtest flags...]
# A cold start of N (default 1000) leases at once, one worker each, TTL
# 30 s, every component a process; each worker sends a one-record batch
# after its acquire and then only renews. Reads the gateway child's
# /metrics every second until it has finished N handovers (or the harness
# ends), and prints the mean time of each handover stage and of each
# lease-store call over those handovers, then the harness's cold-start
# line (all granted after, handover p50 / p99 with the queue, 429s).
# Flags after N are added to the harness's (e.g. --rate 0.05 --batch-size
# 10 for batches every 20 s, or --gateway-arg=--max-handovers=24). Needs
# `make build` (or FG=path/to/fencegate) and deploy/dev/pg.sh start.
# On an external broker (--separate-brokers) delete the run's topics
# first, as deploy/bench/apache.sh does: the harness keeps existing ones,
# and its history checks would read an earlier run's barriers.
set -euo pipefail
# shellcheck source=deploy/bench/lib.sh
. "$(dirname "$0")/lib.sh"
out=${1:?usage: coldstart.sh OUTDIR [N] [loadtest flags]}
n=${2:-1000}
shift $(( $# >= 2 ? 2 : 1 ))
fg=$(readlink -f "${FG:-bin/fencegate}")
mkdir -p "$out"
cd "$out"

"$fg" loadtest --embedded --separate-processes --leases "$n" --workers-per-lease 1 \
  --clients $(( (n + 127) / 128 )) --rate 0.001 --batch-size 1 --record-size 100 \
  --duration 75s --ttl 30s --freeze-every 0 --churn-every 0 --naive=false --direct=false \
  --bare-producers 0 --bare-handovers 16 --json r.json "$@" >out.txt 2>&1 &
lt=$!

port=$(wait_gateway_metrics "$fg" "$lt")
done_handovers() {
  awk '/^fencegate_handover_duration_seconds_count\{.*stage="total"/ { s += $2 } END { print s + 0 }' m.txt
}
while kill -0 "$lt" 2>/dev/null; do
  curl -s "http://127.0.0.1:$port/metrics" >m.tmp && mv m.tmp m.txt
  [ "$(done_handovers)" -ge "$n" ] && break
  sleep 1
done
wait "$lt" || true

# Mean per stage (handover) and per op (lease store) from sum / count.
awk '
  /^fencegate_(handover|store)_duration_seconds_(sum|count)\{/ {
    key = $1; sub(/_(sum|count)\{.*/, "", key); sub(/^fencegate_/, "", key)
    if (match($1, /(stage|op)="[^"]*"/)) key = key " " substr($1, RSTART, RLENGTH)
    if ($1 ~ /_sum\{/) sum[key] += $2; else cnt[key] += $2
  }
  END { for (k in cnt) if (cnt[k] > 0) printf "%-50s n=%-6d mean %6.1f ms\n", k, cnt[k], 1000 * sum[k] / cnt[k] }
' m.txt | sort
grep -m1 '^cold start:' out.txt || { tail -20 out.txt >&2; exit 1; }
