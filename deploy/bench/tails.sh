#!/usr/bin/env bash
# usage: deploy/bench/tails.sh OUTDIR [loadtest flags...]
# Splits renewal and handover latency between the gateway, Postgres and
# everything else. Runs the 80%-load scenario of BENCHMARKS-history.md (64 leases,
# 100 x 1 KiB, --rate 3.4, a forced handover a second, every component a
# process, the materializer paused), scrapes the gateway child's /metrics
# WINDOW seconds apart (default 20) from 15 s after it started, and prints
# per histogram series (request duration by route, lease-store time by op,
# handover by stage) the count in the window, the share <= 10 ms, and the
# buckets holding p50 and p99; then the machine's busy share over the window
# (/proc/stat) and the harness's own steady-state figures (OUTDIR/r.json).
# Flags after OUTDIR are added to the harness's (e.g. --rate 2.0). Needs
# `make build` (or FG=path/to/fencegate) and deploy/dev/pg.sh start.
set -euo pipefail
# shellcheck source=deploy/bench/lib.sh
. "$(dirname "$0")/lib.sh"
out=${1:?usage: tails.sh OUTDIR [loadtest flags]}
shift
fg=$(readlink -f "${FG:-bin/fencegate}")
window=${WINDOW:-20}
mkdir -p "$out"
cd "$out"

"$fg" loadtest --embedded --separate-processes --leases 64 --workers-per-lease 1 \
  --batch-size 100 --record-size 1024 --duration 40s --ttl 10s --freeze-every 0 \
  --churn-every 1s --naive=false --direct=false --bare-producers 0 --pause-materializer \
  --rate 3.4 --json r.json "$@" >out.txt 2>&1 &
lt=$!

port=$(wait_gateway_metrics "$fg" "$lt")
sleep 15
curl -s "http://127.0.0.1:$port/metrics" >m1.txt
head -1 /proc/stat >s1.txt
sleep "$window"
curl -s "http://127.0.0.1:$port/metrics" >m2.txt
head -1 /proc/stat >s2.txt
wait "$lt" || true

# One line per series: name{route|op|stage} count <=10ms p50<= p99<=.
summary() {
  awk '
    /^#/ || !/_bucket\{/ { next }
    {
      name = $1; sub(/\{.*/, "", name); sub(/_bucket$/, "", name)
      if (name !~ /store_duration|http_server_request_duration|handover_duration/) next
      key = name
      if (match($1, /(http_route|op|stage)="[^"]*"/)) key = key " " substr($1, RSTART, RLENGTH)
      if (match($1, /http_request_method="[^"]*"/)) key = key " " substr($1, RSTART, RLENGTH)
      match($1, /le="[^"]*"/); le = substr($1, RSTART + 4, RLENGTH - 5)
      v = $2 + 0
      if (FILENAME == ARGV[1]) before[key, le] += v
      else { after[key, le] += v; les[key] = les[key] " " le; keys[key] = 1 }
    }
    END {
      for (k in keys) {
        n = split(les[k], l, " ")
        total = after[k, "+Inf"] - before[k, "+Inf"]
        if (total <= 0) continue
        p50 = ""; p99 = ""
        for (i = 1; i <= n; i++) {
          c = after[k, l[i]] - before[k, l[i]]
          if (l[i] == "0.01") fast = c / total
          if (p50 == "" && c >= 0.5 * total) p50 = l[i]
          if (p99 == "" && c >= 0.99 * total) p99 = l[i]
        }
        printf "%-90s n=%-6d <=10ms %3.0f%%  p50<=%ss  p99<=%ss\n", k, total, 100 * fast, p50, p99
      }
    }' m1.txt m2.txt | sort
}
summary
read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ <s1.txt
read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ <s2.txt
tot=$(( (b1+b2+b3+b4+b5+b6+b7+b8) - (a1+a2+a3+a4+a5+a6+a7+a8) ))
idle=$(( (b4+b5) - (a4+a5) ))
echo "machine busy over the window: $(( 100 * (tot - idle) / tot ))% of all cores (system $(( 100 * (b3 - a3) / tot ))%)"
echo "harness, steady state (ms):"
sed -n '/^  "steady": {/,/^  }/p' r.json
