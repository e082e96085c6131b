#!/usr/bin/env bash
# usage: deploy/bench/peak.sh OUTDIR [LEASES...]
# The realistic peak over three gateway replicas on this machine: for each
# LEASES (default 250 500 1000 2000) one run of that many leases, one
# worker each, each sending one batch of BATCH (default 100) records of
# RECORD bytes (default 256: kfake keeps every record in its heap, and the
# checks after the run read the whole log into the harness; at 1 KiB a
# saturated run of 2,000 would hold some 15 GB between them) every EVERY
# (default 2s), TTL 30 s (renewals
# every 10 s), every component a child process (kfake broker, REPLICAS
# gateways, default 3; no materializer: the ledger is not what is measured
# and would take a share of the cores), serve's in-flight caps, the workers
# spread over ceil(LEASES / 128) API clients. Each run lasts until every
# lease has been granted once (the cold start) plus STEADY seconds (default
# 75; DURATION overrides the whole length). Then, unless COLD=0, a cold
# start of COLD_LEASES (default: the largest LEASES) alone: all acquire at
# once and the run ends when every lease has had its first batch
# acknowledged (COLD_DURATION bounds it, default 120s: a saturated run
# of 2,000 for 300 s held 11 GiB in the broker and was killed for memory
# while the harness read the log back). RAMP=0 runs only the cold start;
# RUN=0 only prints the summary of the runs in OUTDIR.
#
# Prints one row per run: the machine's busy cores over the run (from
# /proc/stat: other work on the machine included) beside the cores of the
# processes the harness measured, the gateway replicas' steady cores (each
# and summed), the broker's and the harness's, batches/s achieved against
# the target, batch / renew / handover p50 and p99 (ms, steady state),
# peak RSS per replica, worker errors; then the least-squares line of the
# replicas' summed steady cores against the leases over the runs that were
# not saturated (95% of their target batches/s or more; the slope is the
# CPU of one live lease at this pacing) and the cost per batch and per
# handover. Writes
# OUTDIR/ramp-N.json (and .html, .txt) and OUTDIR/cold-N.json. Needs `make
# build` (or FG=path/to/fencegate) and deploy/dev/pg.sh start.
#
# On Apache Kafka: LT_ARGS adds harness flags (word-split), e.g.
# "--separate-brokers $(FENCEGATE_KAFKA_MODE=cluster deploy/dev/kafka.sh url)"
# for the three-node cluster, and BROKER_PIDS (the nodes' pids, `kafka.sh
# pids`) adds each run's summed broker CPU in cores over the run
# (OUTDIR/NAME.brokers; delete the run's topics between runs).
set -euo pipefail
out=${1:?usage: peak.sh OUTDIR [LEASES...]}
shift
leases=("$@")
[ ${#leases[@]} -gt 0 ] || leases=(250 500 1000 2000)
cd "$(dirname "$0")/../.."
fg=$(readlink -f "${FG:-bin/fencegate}")
db=${DATABASE_URL:-$(deploy/dev/pg.sh url)}
mkdir -p "$out"
every=${EVERY:-2s}
common=(loadtest --embedded --separate-processes --replicas "${REPLICAS:-3}" --materializer=false
  --database-url "$db" --workers-per-lease 1 --batch-every "$every" --batch-size "${BATCH:-100}"
  --record-size "${RECORD:-256}" --ttl 30s --freeze-every 0 --churn-every 0 --direct=false --naive=false
  --bare-producers 0 --gateway-max-inflight 1024 --gateway-max-inflight-per-client 256)

# busy: the machine's busy and total jiffies from /proc/stat.
busy() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }

# brokers_cpu: the CPU ticks (user and system) of BROKER_PIDS so far.
brokers_cpu() {
  local p s=0
  for p in ${BROKER_PIDS:-}; do s=$(( s + $(awk '{ print $14 + $15 }' "/proc/$p/stat") )); done
  echo "$s"
}

# run NAME N FLAGS...: one harness run, its report in OUTDIR/NAME.*, and
# the machine's busy cores over it in OUTDIR/NAME.machine.
run() {
  local name=$1 n=$2 b0 b1
  shift 2
  local k0 k1 t0 t1
  read -r -a b0 < <(busy)
  k0=$(brokers_cpu) t0=$(date +%s%N)
  # shellcheck disable=SC2086
  "$fg" "${common[@]}" --leases "$n" --clients $(( (n + 127) / 128 )) --json "$out/$name.json" \
    --html "$out/$name.html" ${LT_ARGS:-} "$@" >"$out/$name.txt" 2>"$out/$name.err" || true
  read -r -a b1 < <(busy)
  k1=$(brokers_cpu) t1=$(date +%s%N)
  [ -n "${BROKER_PIDS:-}" ] && awk -v k="$(( k1 - k0 ))" -v t="$(( t1 - t0 ))" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.2f\n", k / hz / (t / 1e9) }' >"$out/$name.brokers"
  awk -v b="$(( b1[0] - b0[0] ))" -v t="$(( b1[1] - b0[1] ))" -v c="$(nproc)" \
    'BEGIN { printf "%.2f\n", c * b / t }' >"$out/$name.machine"
  [ -s "$out/$name.json" ] || { tail -20 "$out/$name.err" >&2; return 1; }
}

for n in "${leases[@]}"; do
  if [ "${RUN:-1}" = 0 ] || [ "${RAMP:-1}" = 0 ]; then break; fi
  # About 25 handovers a second per replica on two shared cores (the
  # cold starts in BENCHMARKS-history.md), with room for a slower one.
  d=${DURATION:-$(( ${STEADY:-75} + 20 + n / 25 ))s}
  run "ramp-$n" "$n" --duration "$d"
done
cold=${COLD_LEASES:-${leases[-1]}}
if [ "${COLD:-1}" != 0 ] && [ "${RUN:-1}" != 0 ]; then
  run "cold-$cold" "$cold" --cold-start --duration "${COLD_DURATION:-120s}"
fi

printf '%-6s %-14s %-28s %-6s %-6s %-6s %-15s %-13s %-13s %-15s %-15s %-6s\n' leases \
  machine/ours gateways-steady-cores sum broker harn batches/s-target batch-p50/99 renew-p50/99 handover-p50/99 rss-MiB errors
for n in "${leases[@]}"; do
  f=$out/ramp-$n.json
  [ -s "$f" ] || continue
  jq -r --arg m "$(cat "$out/ramp-$n.machine")" '
    def r(x): (x * 100 | round) / 100;
    def ms(q): "\(q.p50 | round)/\(q.p99 | round)";
    (.cpu.phases.gateway) as $p |
    "\(.scenario.leases) \($m)/\(r([$p.cpu_seconds[]] | add / $p.seconds)) \([.fleet.replicas[].steady_cores | r(.)] | join(","))" +
    " \(r(.fleet.gateways.steady_cores)) \(r(.fleet.broker.steady_cores)) \(r(($p.cpu_seconds.harness // 0) / $p.seconds))" +
    " \(.fleet.steady.batches_per_s | round)/\(.scenario.leases * .scenario.rate | round)" +
    " \(ms(.steady.latency_ms.produce)) \(ms(.steady.latency_ms.renew)) \(ms(.latency_ms.handover))" +
    " \([.fleet.replicas[].peak_rss_mib | round] | join(",")) \(.gateway.errors)"' "$f" |
    awk '{ printf "%-6s %-14s %-28s %-6s %-6s %-6s %-15s %-13s %-13s %-15s %-15s %-6s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
done
echo
# The line through (leases, summed steady cores): the slope is the cores of
# one live lease at this pacing; over its batches it is the CPU per batch.
for n in "${leases[@]}"; do
  [ -s "$out/ramp-$n.json" ] || continue
  jq -r '"\(.scenario.leases) \(.fleet.gateways.steady_cores) \(.fleet.broker.steady_cores) \(.fleet.steady.batches_per_s) \(.fleet.cold_start.net_cpu_ms_per_handover) \(.scenario.rate)"' "$out/ramp-$n.json"
done | awk '
  $2 == 0 { printf "%d leases: no steady state (not every lease was granted within the run): left out of the line\n", $1; next }
  $4 < 0.95 * $1 * $6 { printf "%d leases: saturated (%.0f batches/s of %.0f): left out of the line; net replica CPU per handover in its cold start %.1f ms\n", $1, $4, $1 * $6, $5; next }
  { n++; x[n] = $1; y[n] = $2; z[n] = $3; rate = $6; h[n] = $5 }
  END {
    if (n < 2) { print "one point: no slope"; exit }
    for (i = 1; i <= n; i++) { sx += x[i]; sy += y[i]; sz += z[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i]; sxz += x[i] * z[i] }
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx); a = (sy - b * sx) / n
    bz = (n * sxz - sx * sz) / (n * sxx - sx * sx)
    perlease = rate
    printf "replicas (summed) steady cores = %.3f + %.6f x leases over %d runs\n", a, b, n
    printf "per live lease: %.3f ms of replica CPU per second; per batch (at %.2f batches/s per lease): %.2f ms; broker %.2f ms per batch\n", 1000 * b, perlease, 1000 * b / perlease, 1000 * bz / perlease
    for (i = 1; i <= n; i++) printf "  %d leases: net replica CPU per handover in its cold start %.1f ms\n", x[i], h[i]
  }'
if [ "${COLD:-1}" != 0 ]; then
  jq -r --arg m "$(cat "$out/cold-$cold.machine")" '
    "cold start of \(.scenario.leases): every lease wrote after \(.cold_start.first_batch_seconds * 10 | round / 10) s" +
    " (\(.cold_start.handovers_to_first_batch) handovers, \(.cold_start.handovers_per_s * 10 | round / 10)/s; worker errors \(.gateway.errors)," +
    " handover p50/p99 \(.cold_start.handover_ms.p50 | round)/\(.cold_start.handover_ms.p99 | round) ms, 429s retried \(.gateway.acquires_deferred));" +
    " replica CPU s \([.fleet.replicas[].cold_start_cpu_seconds * 10 | round / 10] | join(",")), broker \(.fleet.broker.cold_start_cpu_seconds * 10 | round / 10) s," +
    " \(.fleet.cold_start.gateway_cpu_ms_per_handover * 10 | round / 10) ms of replica CPU per handover; peak RSS \([.fleet.replicas[].peak_rss_mib | round] | join(",")) MiB; machine busy \($m) cores"' "$out/cold-$cold.json"
fi
