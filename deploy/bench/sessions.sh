#!/usr/bin/env bash
# usage: deploy/bench/sessions.sh N
# Holds N lease sessions on one gateway process (fencegate serve, against
# the development broker of a separate `fencegate dev` process) and samples
# that process: resident memory, OS threads, open files and CPU over 10 s
# while the sessions only renew. The sample is taken PARK_WAIT seconds
# (default 40) after the last session was held, so that with the default
# --park-after (30 s) it measures parked sessions; PARK_AFTER=0 measures
# live producers. Needs `make build` and the throwaway Postgres
# (deploy/dev/pg.sh start). Ports 8080, 8090, 8091 and 9092 must be free.
# Writes /tmp/lt-N.out (the harness's summary).
set -u
N=$1
cd "$(dirname "$0")/../.."
${FG:-bin/fencegate} dev --listen 127.0.0.1:8090 --materializer-listen 127.0.0.1:8091 >/tmp/fencegate-bench-dev.log 2>&1 &
DEV=$!
sleep 3
FENCEGATE_BARRIER_KEY=fencegate-development-barrier-key ${FG:-bin/fencegate} serve --config deploy/dev/fencegate.yaml --listen 127.0.0.1:8080 --kafka-brokers 127.0.0.1:9092 --replica bench --max-ttl 10m --park-after ${PARK_AFTER:-30s} >/tmp/fencegate-bench-serve.log 2>&1 &
GW=$!
sleep 2
base_rss=$(awk '/VmRSS/{print $2}' /proc/$GW/status); base_thr=$(awk '/Threads/{print $2}' /proc/$GW/status)
${FG:-bin/fencegate} loadtest --gateway http://127.0.0.1:8080 --kafka-brokers 127.0.0.1:9092 --leases $N --workers-per-lease 1 --rate 0.001 \
  --duration ${DURATION:-420s} --ttl 30s --freeze-every 0 --churn-every 0 --direct=false --naive=false --batch-size 1 --record-size 100 >/tmp/lt-$N.out 2>/tmp/lt-$N.err &
LT=$!
# wait until all sessions are held
for i in $(seq 1 ${HOLD_WAIT:-300}); do
  n=$(curl -s localhost:8080/metrics | awk '/^fencegate_sessions_active/{print $2}')
  [ "${n:-0}" = "$N" ] && break
  sleep 1
done
sleep ${PARK_WAIT:-40}
parked=$(curl -s localhost:8080/metrics | awk '/^fencegate_sessions_parked/{print $2}')
t0=$(awk '{print $14+$15}' /proc/$GW/stat); sleep 10; t1=$(awk '{print $14+$15}' /proc/$GW/stat)
rss=$(awk '/VmRSS/{print $2}' /proc/$GW/status); thr=$(awk '/Threads/{print $2}' /proc/$GW/status); fds=$(ls /proc/$GW/fd | wc -l)
echo "N=$N sessions=$n parked=${parked:-?} rss_kib=$rss (baseline $base_rss) threads=$thr (baseline $base_thr) fds=$fds idle_cpu_ticks_per_10s=$(( t1-t0 )) (100 ticks = 10% of one core)"
kill $LT; wait $LT 2>/dev/null
kill $GW; wait $GW 2>/dev/null; kill $DEV; wait $DEV 2>/dev/null
