#!/usr/bin/env bash
# usage: deploy/bench/sessions.sh N
# Holds N idle lease sessions on one gateway process and samples that
# process: resident memory, OS threads, open files and CPU over SAMPLE
# seconds (default 30) while the sessions only renew (every TTL/3; TTL
# default 30s). Each session sends one one-record batch after its acquire,
# then none, so the gateway parks it after --park-after (PARK_AFTER,
# default 30s; PARK_AFTER=0 measures live producers).
#
# `fencegate loadtest --embedded --separate-processes` runs the broker
# (kfake), the gateway (`serve`) and the materializer as child processes;
# the harness process holds the N workers. The gateway keeps serve's
# in-flight caps (MAX_INFLIGHT 1024, PER_CLIENT 256 per client), and the
# workers are spread over CLIENTS API clients (bearer tokens), as an estate
# of N workers is many clients. A worker has one request in flight at a
# time, so a client of N/CLIENTS workers never meets its cap when N/CLIENTS
# <= PER_CLIENT; the default CLIENTS keeps it at half the cap:
# ceil(N / (PER_CLIENT/2)), 8 clients for 1,000 and 40 for 5,000.
#
# The sample starts once all N sessions are held and parked (or PARK_WAIT
# seconds, default 120, after all were held; HOLD_WAIT, default 900, bounds
# the wait for N held: on two shared cores 1,000 took 48 s and 5,000 about
# 11 minutes). It prints one line: the peak and sampled sessions held and
# parked, the gateway's CPU (% of one core), RSS, threads, open files,
# handovers and requests answered 429 (by request), from /proc and the
# gateway's /metrics, and the harness's last progress line. LT_ARGS adds
# harness flags (word-split: --separate-brokers 127.0.0.1:9192 for Apache
# Kafka); SPLIT splits the gateway's CPU by thread after the sample
# (deploy/bench/threads.sh, default 10 s); KEEP keeps the sessions that many seconds
# after the sample (to profile them). Needs `make build` (or
# FG=path/to/fencegate) and the throwaway Postgres (deploy/dev/pg.sh
# start). Writes /tmp/lt-N.out and /tmp/lt-N.err (the harness's output and
# progress).
set -u
N=$1
cd "$(dirname "$0")/../.."
FG=${FG:-bin/fencegate}
PER_CLIENT=${PER_CLIENT:-256}
MAX_INFLIGHT=${MAX_INFLIGHT:-1024}
CLIENTS=${CLIENTS:-$(( (N + PER_CLIENT/2 - 1) / (PER_CLIENT/2) ))}
TTL=${TTL:-30s}
HOLD_WAIT=${HOLD_WAIT:-900}
PARK_WAIT=${PARK_WAIT:-120}
SAMPLE=${SAMPLE:-30}
# The harness runs until the sample is taken (it is stopped then).
DURATION=${DURATION:-$(( 2 * (HOLD_WAIT + PARK_WAIT + SAMPLE) + 600 ))s}
DB=${DATABASE_URL:-$(deploy/dev/pg.sh url)}
cmd=("$FG" loadtest --embedded --separate-processes --database-url "$DB" --clients "$CLIENTS"
  --gateway-max-inflight "$MAX_INFLIGHT" --gateway-max-inflight-per-client "$PER_CLIENT"
  --gateway-arg=--park-after="${PARK_AFTER:-30s}" --bare-producers 0
  --leases "$N" --workers-per-lease 1 --rate 0.001 --duration "$DURATION" --ttl "$TTL"
  --freeze-every 0 --churn-every 0 --direct=false --naive=false --batch-size 1 --record-size 100)
# e.g. LT_ARGS=--gateway-arg=--debug-listen=127.0.0.1:6060
# shellcheck disable=SC2206
cmd+=(${LT_ARGS:-})
echo "${cmd[*]}" >&2
"${cmd[@]}" >/tmp/lt-$N.out 2>/tmp/lt-$N.err &
LT=$!
trap 'kill $LT 2>/dev/null; wait $LT 2>/dev/null' EXIT
# The gateway child: the harness's child running `serve`; its API address
# is its --listen.
GW=
for _ in $(seq 1 120); do
  for p in $(pgrep -P $LT); do
    if tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q '^[^ ]* serve '; then GW=$p; fi
  done
  [ -n "$GW" ] && break
  sleep 0.5
done
[ -n "$GW" ] || { echo "no gateway child of the harness (see /tmp/lt-$N.err)" >&2; exit 1; }
ADDR=$(tr '\0' '\n' </proc/$GW/cmdline | grep -A1 '^--listen$' | tail -1)
# A gauge of the gateway's /metrics (its labels aside).
metric() { curl -s "http://$ADDR/metrics" | awk -v m="$1" 'index($1, m "{") == 1 || $1 == m {print $2}'; }
# Requests answered 429 so far, by route, and handovers (the gateway's own
# metrics).
refused() { curl -s "http://$ADDR/metrics" | awk '/^http_server_request_duration_seconds_count/ && /status_code="429"/ {
  match($0, /http_request_method="[A-Z]+"/); m = substr($0, RSTART + 21, RLENGTH - 22)
  match($0, /http_route="[^"]*"/); m = m substr($0, RSTART + 12, RLENGTH - 13); n[m] += $2; t += $2 }
  END {printf "%d", t; for (m in n) printf " %s:%d", m, n[m]}'; }
handovers() { curl -s "http://$ADDR/metrics" | awk '/^fencegate_handover_duration_seconds_count/ && /stage="total"/ {n += $2} END {print n+0}'; }
start=$(date +%s)
peak=0
while [ $(( $(date +%s) - start )) -lt "$HOLD_WAIT" ]; do
  n=$(metric fencegate_sessions_active)
  [ "${n:-0}" -gt "$peak" ] && peak=$n
  [ "${n:-0}" = "$N" ] && break
  sleep 1
done
held_after=$(( $(date +%s) - start ))
parked_start=$(date +%s)
while [ $(( $(date +%s) - parked_start )) -lt "$PARK_WAIT" ]; do
  parked=$(metric fencegate_sessions_parked)
  [ "${parked:-0}" = "$N" ] && break
  sleep 1
done
h0=$(handovers); r0=$(refused); n0=$(metric fencegate_sessions_active); p0=$(metric fencegate_sessions_parked)
t0=$(awk '{print $14+$15}' /proc/$GW/stat); sleep "$SAMPLE"; t1=$(awk '{print $14+$15}' /proc/$GW/stat)
h1=$(handovers); r1=$(refused); n1=$(metric fencegate_sessions_active); p1=$(metric fencegate_sessions_parked)
rss=$(awk '/VmRSS/{print $2}' /proc/$GW/status); thr=$(awk '/Threads/{print $2}' /proc/$GW/status); fds=$(ls /proc/$GW/fd | wc -l)
progress=$(tail -1 /tmp/lt-$N.err)
echo "N=$N clients=$CLIENTS ttl=$TTL held_after_s=$held_after (peak held $peak) sessions=${n0:-?}->${n1:-?} parked=${p0:-?}->${p1:-?}" \
  "cpu_pct_of_one_core=$(awk -v d=$((t1 - t0)) -v s="$SAMPLE" 'BEGIN {printf "%.1f", d / s}') (over ${SAMPLE}s)" \
  "rss_mib=$((rss / 1024)) threads=$thr fds=$fds handovers_total=$h1 (in the sample $((h1 - h0)))" \
  "http_429=$r1 (total, by request; before the sample: $r0)"
echo "harness at the sample's end: $progress"
# Where the idle CPU goes: librdkafka's threads apart from Go's (SPLIT
# seconds, default 10; 0: not measured).
[ "${SPLIT:-10}" -gt 0 ] && deploy/bench/threads.sh "$GW" "${SPLIT:-10}"
# KEEP: seconds to keep the sessions after the sample (to profile them).
sleep "${KEEP:-0}"
