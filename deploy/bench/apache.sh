#!/usr/bin/env bash
# usage: deploy/bench/apache.sh OUTDIR [RUNS]
# The headline table on Apache Kafka (issue 42, items 1 and 2): RUNS runs
# (default 2), each with every contender one after the other on the same
# broker (deploy/dev/kafka.sh start, 127.0.0.1:9192, left running) and the
# same records (BATCH records of RECORD_SIZE bytes per transaction):
#   fencegate    the gateway child, LEASES leases, one worker each, open
#                loop, no materializer (`fencegate loadtest
#                --separate-processes --separate-brokers`);
#   direct       the stamped direct librdkafka transactional producer, one
#                per lease (the harness's like-for-like yardstick), and
#                direct-plain (no headers);
#   bare         8 librdkafka producers committing without delivery
#                reports, stamped and plain;
#   handover     the bare InitTransactions loop (HANDOVER_LOOPS at once)
#                beside the gateway's cold start of LEASES leases;
#   java         Kafka's own ProducerPerformance (the Java client), one
#                transactional producer on a one-partition topic, records
#                without headers, JAVA_RECORDS records open loop, twice:
#                transactions of --transaction-duration-ms JAVA_TXN_MS
#                (small: a commit as soon as the last one ended) and
#                JAVA_LARGE_MS; its CPU by /usr/bin/time, its transactions
#                counted as the commit markers at the end of the partition;
#                the CPU per transaction is the difference of the two runs'
#                CPU over the difference of their transactions; a third
#                run of 1,000 records gives the JVM's start, taken off
#                the CPU per record.
#   bridge       an HTTP produce proxy without fencing in the Strimzi
#                Kafka Bridge's shape (deploy/bench/bridge: the bridge's
#                Java producer, acks=all, no transactions; Maven Central
#                does not serve io.strimzi:kafka-bridge), driven by
#                deploy/bench/bridgeload with LEASES clients, one batch
#                of BATCH records in flight each, 10 s of warm-up, then
#                BRIDGE_DURATION measured; its CPU from /proc.
# Each run's topics are deleted first, so the harness's checks read only
# that run's records. Prints the load average before and after each
# contender. Needs FG (default bin/fencegate, `make build`), deploy/dev/pg.sh
# start, Java.
set -euo pipefail
out=${1:?usage: apache.sh OUTDIR [RUNS]}
runs=${2:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
fg=$(readlink -f "${FG:-bin/fencegate}")
kafka="$root/deploy/dev/kafka.sh"
brokers=${BROKERS:-127.0.0.1:9192}
leases=${LEASES:-64}
duration=${DURATION:-30s}
batch=${BATCH:-100}
rsize=${RECORD_SIZE:-1024}
loops=${HANDOVER_LOOPS:-16}
java_txn_ms=${JAVA_TXN_MS:-5}
java_large_ms=${JAVA_LARGE_MS:-2000}
bridge_duration=${BRIDGE_DURATION:-20s}
bridge_port=${BRIDGE_PORT:-18742}
java_records=${JAVA_RECORDS:-300000}
lib=${FENCEGATE_KAFKA_HOME:-/tmp/fencegate-kafka-lib}/lib
db=${FENCEGATE_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}
bpid=$("$kafka" pids | awk 'NR == 1 {print $2}')
[ -n "$bpid" ] || { echo "no broker: deploy/dev/kafka.sh start" >&2; exit 1; }
mkdir -p "$out"
out=$(readlink -f "$out")
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%TZ): $*"; }

# java runs a Kafka tool class with the full JIT (kafka.sh tool stops at
# C1 to start fast, which would handicap the Java client here).
java_cmd=(java -Xmx512m -XX:+UseSerialGC -Dlog4j2.configurationFile="$lib/../tools/log4j2.xml" -cp "$lib/*")
java_tool() { "${java_cmd[@]}" "$@"; }
topics() { java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$brokers" "$@"; }

fresh_topics() { # delete the run's topics and wait until they are gone
  topics --delete --if-exists --topic 'shard-output|naive-output|direct-output|java-perf|bridge-output' >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do
    topics --list | grep -qxE 'shard-output|naive-output|direct-output|java-perf|bridge-output' || return 0
    sleep 1
  done
  echo "the run's topics are still listed after 60 s" >&2
  return 1
}

java_perf() { # java_perf RUNDIR NAME TXN_MS RECORDS: ProducerPerformance, its CPU and transactions
  local d=$1 name=$2 txn_ms=$3 n=$4 end
  topics --create --topic java-perf --partitions 1 >/dev/null
  /usr/bin/time -f '%U %S %e' -o "$d/$name.time" "${java_cmd[@]}" org.apache.kafka.tools.ProducerPerformance \
    --topic java-perf --num-records "$n" --record-size "$rsize" --throughput -1 \
    --transactional-id "fg-bench-java-$name-$(date +%s)" --transaction-duration-ms "$txn_ms" \
    --producer-props bootstrap.servers="$brokers" acks=all >"$d/$name.txt" 2>&1
  end=$(java_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$brokers" --topic java-perf | awk -F: '{print $3}')
  topics --delete --topic java-perf >/dev/null 2>&1
  while topics --list | grep -qx java-perf; do sleep 1; done
  read -r user sys wall <"$d/$name.time"
  awk -v name="$name" -v u="$user" -v s="$sys" -v w="$wall" -v n="$n" -v e="$end" 'BEGIN {
    t = e - n; printf "%s: %d records in %d transactions (%.0f a transaction), %.1f s wall, CPU %.2f s (JVM start included): %.2f us/record\n",
      name, n, t, n / t, w, u + s, (u + s) * 1e6 / n; printf "%s %d %d %.3f\n", name, n, t, u + s > "/dev/stderr" }' 2>>"$d/java.model"
  grep 'records sent' "$d/$name.txt" | tail -1
}

# java_model RUNDIR: the Java client's costs from its three runs: per
# transaction, the extra CPU of the small-transaction run over the large
# one's, over its extra transactions; per record, the large run's CPU
# over the start run's (the JVM's start and a few records), over the
# extra records.
java_model() {
  awk '{ n[NR] = $2; t[NR] = $3; c[NR] = $4 } END {
    b = (c[1] - c[2]) / (t[1] - t[2]); a = (c[2] - c[3]) / (n[2] - n[3])
    printf "java model: %.0f us per transaction, %.2f us per record, %.2f s to start\n", b * 1e6, a * 1e6, c[3] }' "$1/java.model"
}

bridge() { # bridge RUNDIR: the proxy, warmed up, then measured
  local d=$1 pid
  topics --create --topic bridge-output --partitions 16 >/dev/null
  "${java_cmd[@]}" "$root/deploy/bench/bridge/HttpProduceProxy.java" "$bridge_port" "$brokers" >"$d/bridge-proxy.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do grep -q '^ready' "$d/bridge-proxy.txt" && break; sleep 0.5; done
  "$load" -url "http://127.0.0.1:$bridge_port" -clients "$leases" -batch-size "$batch" -record-size "$rsize" \
    -duration 10s -pid "$pid" >"$d/bridge-warmup.json"
  "$load" -url "http://127.0.0.1:$bridge_port" -clients "$leases" -batch-size "$batch" -record-size "$rsize" \
    -duration "$bridge_duration" -pid "$pid" | tee "$d/bridge.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

load=$out/bridgeload
(cd "$root" && go build -o "$load" ./deploy/bench/bridgeload/)
for i in $(seq 1 "$runs"); do
  d="$out/run-$i"
  mkdir -p "$d"
  fresh_topics
  load "run $i: fencegate, direct, bare, handover" | tee "$d/load.txt"
  (cd "$d" && "$fg" loadtest --embedded --separate-processes --separate-brokers "$brokers" --separate-broker-pid "$bpid" \
    --database-url "$db" --leases "$leases" --workers-per-lease 1 --freeze-every 0 --churn-every 0 \
    --naive=false --materializer=false --duration "$duration" --batch-size "$batch" --record-size "$rsize" \
    --bare-producers 8 --bare-handovers "$loops" --json r.json >out.txt 2>&1) || { tail -20 "$d/out.txt" >&2; exit 1; }
  grep -E '^CPU per record|^bare-producer|^handover yardstick|^steady state \(|^cold start' "$d/out.txt"
  load "run $i: java" | tee -a "$d/load.txt"
  : >"$d/java.model"
  java_perf "$d" java-small "$java_txn_ms" "$java_records"
  java_perf "$d" java-large "$java_large_ms" "$java_records"
  java_perf "$d" java-start "$java_large_ms" 1000
  java_model "$d" | tee "$d/java.sum"
  load "run $i: bridge" | tee -a "$d/load.txt"
  bridge "$d"
  load "run $i: end" | tee -a "$d/load.txt"
done
