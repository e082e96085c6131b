#!/usr/bin/env bash
# usage: deploy/bench/ab.sh OUTDIR FG_A FG_B [ROUNDS]
# Two builds of fencegate side by side on Apache Kafka, alternating A, B
# for ROUNDS rounds (default 2): each the headline run of apache.sh
# (LEASES leases, one worker each, BATCH records of RECORD_SIZE bytes a
# transaction, open loop, no materializer) with the stamped direct
# producer after the gateway, on the run's fresh topics, so that each
# build's gateway / direct ratio is inside its own run and the builds
# alternate through the machine's load. Prints each run's CPU per record
# line with the load average and the harness's verdict. BROKERS (default 127.0.0.1:9192), needs
# deploy/dev/pg.sh start and Java (Kafka's topic tool).
set -euo pipefail
out=${1:?usage: ab.sh OUTDIR FG_A FG_B [ROUNDS]}
a=$(readlink -f "${2:?FG_A}")
b=$(readlink -f "${3:?FG_B}")
rounds=${4:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
brokers=${BROKERS:-127.0.0.1:9192}
db=${FENCEGATE_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}
lib=${FENCEGATE_KAFKA_HOME:-/tmp/fencegate-kafka-lib}/lib
mkdir -p "$out"
out=$(readlink -f "$out")
topics() { java -Xmx256m -cp "$lib/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "$brokers" "$@"; }
fresh_topics() { # delete the run's topics and wait until they are gone
  topics --delete --if-exists --topic 'shard-output|naive-output|direct-output' >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do
    topics --list | grep -qxE 'shard-output|naive-output|direct-output' || return 0
    sleep 1
  done
  return 1
}
for i in $(seq 1 "$rounds"); do
  for side in A B; do
    fg=$a
    [ "$side" = B ] && fg=$b
    d="$out/$side-$i"
    mkdir -p "$d"
    fresh_topics
    l0=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$d" && "$fg" loadtest --embedded --separate-processes --separate-brokers "$brokers" \
      --database-url "$db" --leases "${LEASES:-64}" --workers-per-lease 1 --freeze-every 0 --churn-every 0 \
      --naive=false --materializer=false --duration "${DURATION:-30s}" --batch-size "${BATCH:-100}" \
      --record-size "${RECORD_SIZE:-1024}" --bare-producers 0 --json r.json >out.txt 2>&1) || true
    # A run the harness failed (worker errors under load, say) still
    # measured its CPU; its verdict is printed beside the figures.
    grep -q '^CPU per record' "$d/out.txt" || { tail -20 "$d/out.txt" >&2; exit 1; }
    echo "$side round $i (load $l0 -> $(cut -d' ' -f1 /proc/loadavg)): $(grep '^CPU per record' "$d/out.txt");" \
      "$(grep -m1 -E '^## fencegate loadtest' "$d/out.txt"); $(grep -m1 -E '^- FAIL' "$d/out.txt" || true)"
  done
done
