#!/usr/bin/env bash
# usage: deploy/bench/profile.sh OUTDIR [loadtest flags...]
# Where the gateway's CPU per record and per handover goes on Apache
# Kafka (issue 42, item 1's misses), next to the stamped direct producer's
# in the same run: the headline run of apache.sh (LEASES leases, one worker
# each, BATCH records of RECORD_SIZE bytes a transaction, open loop, no
# materializer) with the handover yardstick after it, and
#   - WARMUP (default 10) seconds into the gateway phase: a Go CPU profile
#     of the gateway child over SECONDS_PROFILED (default 15) seconds
#     (OUTDIR/gateway.pprof; pprof's top entries in gateway.top and
#     gateway.cum) and its threads split over the same seconds
#     (deploy/bench/threads.sh: librdkafka's threads apart from Go's);
#   - in the direct baseline's phase: the stamped direct child's threads
#     split alike;
#   - the harness's own report (OUTDIR/out.txt): CPU per record and per
#     handover of each process, which the splits divide.
# COLD=1 profiles the gateway's cold start of LEASES leases (its handovers)
# instead of its steady state, from its first second. BROKERS (default
# 127.0.0.1:9192) and BROKER_PID (kafka.sh pids); the run's topics must not
# exist (apache.sh deletes them). Needs FG (default bin/fencegate) and
# deploy/dev/pg.sh start. Flags after OUTDIR are added to the harness's
# (e.g. --cold-start with COLD=1).
set -euo pipefail
out=${1:?usage: profile.sh OUTDIR [loadtest flags]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
fg=$(readlink -f "${FG:-bin/fencegate}")
brokers=${BROKERS:-127.0.0.1:9192}
secs=${SECONDS_PROFILED:-15}
dbg=${DEBUG_LISTEN:-127.0.0.1:16061}
db=${FENCEGATE_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}
mkdir -p "$out"
out=$(readlink -f "$out")
cd "$out"
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%TZ): $*"; }
bpid=()
[ -n "${BROKER_PID:-}" ] && bpid=(--separate-broker-pid "$BROKER_PID")
load "start" | tee load.txt
"$fg" loadtest --embedded --separate-processes --separate-brokers "$brokers" "${bpid[@]}" \
  --database-url "$db" --leases "${LEASES:-64}" --workers-per-lease 1 --freeze-every 0 --churn-every 0 \
  --naive=false --materializer=false --duration "${DURATION:-40s}" --batch-size "${BATCH:-100}" \
  --record-size "${RECORD_SIZE:-1024}" --bare-producers 0 --bare-handovers "${HANDOVER_LOOPS:-16}" \
  --gateway-debug-listen "$dbg" --json r.json "$@" >out.txt 2>&1 &
lt=$!
trap 'kill $lt 2>/dev/null || true' EXIT
child() { # child PATTERN: the harness's child whose command line matches
  local p
  for p in $(pgrep -P "$lt"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE "$1" && { echo "$p"; return 0; }
  done
  return 1
}
wait_child() { # wait_child PATTERN: until it runs (or the harness ends)
  local p
  while kill -0 "$lt" 2>/dev/null; do
    p=$(child "$1") && { echo "$p"; return 0; }
    sleep 0.2
  done
  return 1
}
gw=$(wait_child ' serve ')
until curl -sf "http://$dbg/debug/pprof/" >/dev/null; do sleep 0.2; done
[ "${COLD:-0}" = 1 ] || sleep "${WARMUP:-10}"
load "gateway profiled" | tee -a load.txt
curl -sf -o gateway.pprof "http://$dbg/debug/pprof/profile?seconds=$secs" &
prof=$!
"$root/deploy/bench/threads.sh" "$gw" "$secs" | tee gateway.threads
wait "$prof"
go tool pprof -top -nodecount=40 gateway.pprof >gateway.top 2>/dev/null
go tool pprof -top -cum -nodecount=60 gateway.pprof >gateway.cum 2>/dev/null
if [ "${COLD:-0}" != 1 ]; then
  direct=$(wait_child 'loadtest-baseline --mode direct .*--plain=false') && {
    sleep 3
    load "direct profiled" | tee -a load.txt
    "$root/deploy/bench/threads.sh" "$direct" "$(( secs / 2 ))" | tee direct.threads
  }
fi
wait "$lt" || true
trap - EXIT
load "end" | tee -a load.txt
grep -E '^CPU per record|^steady state \(|^cold start|^handover yardstick' out.txt || tail -20 out.txt
