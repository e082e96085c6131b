#!/usr/bin/env bash
# usage: deploy/bench/idle.sh N [PARK_AFTER...]
# Idle sessions side by side in one run (issue 42, item 3): N sessions
# held by one gateway, sampled once all are held (deploy/bench/sessions.sh),
# once for each PARK_AFTER given (default: 0, every producer kept open, the
# unparked sessions; then 30s, serve's default, sampled once all are
# parked), one after the other, with the load average before and after
# each. The environment reaches sessions.sh (TTL, SAMPLE, SPLIT, LT_ARGS:
# --separate-brokers 127.0.0.1:9192 --separate-broker-pid PID for Apache
# Kafka).
set -u
n=${1:?usage: idle.sh N [PARK_AFTER...]}
shift
cd "$(dirname "$0")/../.." || exit 1
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%TZ): $*"; }
[ $# -gt 0 ] || set -- 0 30s
for pa in "$@"; do
  load "park-after $pa"
  # Unparked sessions never all park: sample as soon as all are held.
  wait=${PARK_WAIT:-120}
  [ "$pa" = 0 ] && wait=0
  PARK_AFTER=$pa PARK_WAIT=$wait deploy/bench/sessions.sh "$n"
done
load "end"
