#!/usr/bin/env bash
# Apache Kafka (KRaft) for development, tests and CI, in the manner of pg.sh.
#
#   deploy/dev/kafka.sh install|start|cluster|stop|reset|status|url|log|pids|tool
#
# install  fetches the pinned broker and tools jars with Maven
#          (deploy/dev/kafka/pom.xml; Maven checks their checksums and
#          caches them in ~/.m2, so a second install downloads nothing)
#          into $FENCEGATE_KAFKA_HOME/lib.
# start    one combined broker-controller on 127.0.0.1:$FENCEGATE_KAFKA_PORT
#          (controller on PORT+1), formatted with transaction version 2,
#          run as a non-root user with a bounded heap; waits until it
#          serves. A running one is left alone.
# cluster  three combined nodes (ids 1-3) on PORT+100..PORT+102 (the
#          controllers on PORT+200..PORT+202), one cluster id, replication
#          factor 3 and min.insync.replicas 2 for topics and
#          __transaction_state.
# stop     stops what start or cluster started (by its own pids), for the
#          mode given in FENCEGATE_KAFKA_MODE (single|cluster|all; default all).
# reset    stops the mode's nodes as stop does and deletes their data (the
#          jars stay): the shared test broker's topics pile up (8,472
#          partitions after a day of make test, 2m41s to load at start).
# status   exit 0 when the mode's nodes all run, 1 otherwise.
# url      prints the bootstrap servers of the mode (single by default).
# log      prints the path of the mode's (first) node's server log.
# pids     prints "node-id pid" for each running node of the mode.
# tool     runs one of Kafka's own command-line tools by class or short
#          name: console-consumer, transactions, producer-perf, topics,
#          configs, acls, metadata-quorum (kafka.sh tool transactions
#          --bootstrap-server ... list).
#
# Settings (environment):
#   FENCEGATE_KAFKA_PORT     single broker's port on 127.0.0.1 (default 9192)
#   FENCEGATE_KAFKA_DIR      data, logs and pids (default /tmp/fencegate-kafka-$PORT)
#   FENCEGATE_KAFKA_HOME     where install puts the jars (default /tmp/fencegate-kafka-lib)
#   FENCEGATE_KAFKA_USER     OS user that runs the brokers when run as root
#                            (default fencegate-kafka; created if missing)
#   FENCEGATE_KAFKA_HEAP     the JVM's heap (default 512m)
#   FENCEGATE_KAFKA_CONFIG   extra server.properties lines (key=value,
#                            newline separated), written last so they win:
#                            a test's broker with unsafe or short settings
#   FENCEGATE_KAFKA_NODE_CONFIG_<N>  more lines for node N alone, written
#                            after FENCEGATE_KAFKA_CONFIG (a test's per-node
#                            listeners: each node's own path to the others)
#   FENCEGATE_KAFKA_ADVERTISED  host:port each node advertises to clients and
#                            to the other brokers, comma-separated in node order
#                            (a test's fault proxies in front of the nodes)
#   FENCEGATE_KAFKA_VOTERS   controller.quorum.voters instead of the nodes' own
#                            controller ports (the proxies in front of them)
#   FENCEGATE_KAFKA_WATCH_PID  stop the broker when this process ends (a
#                            test's broker must not outlive its test binary)
#   FENCEGATE_KAFKA_MODE     single|cluster|all for stop, status, url, pids
#   FENCEGATE_KAFKA_START_TIMEOUT  seconds a node may take to start (default 180: a
#                            broker loads every partition of its data first, 2m41s
#                            for the 8,472 a day of make test left in the shared one)
#   FENCEGATE_KAFKA_SECURE   1: the single broker is secured (below)
#   FENCEGATE_KAFKA_OAUTH_JWKS_URL  with SECURE=1: the JWKS document of
#                            the identity provider whose tokens the broker
#                            accepts with OAUTHBEARER (none: SCRAM only)
#   FENCEGATE_KAFKA_OAUTH_ISSUER  the issuer (iss) those tokens must name
#                            (required with the JWKS URL: Kafka 4.4 asks it)
#   FENCEGATE_KAFKA_OAUTH_AUDIENCE  the audience those tokens must name
#                            (default fencegate-kafka)
#
# Secured (FENCEGATE_KAFKA_SECURE=1, single mode): no listener without TLS
# and authentication, and the StandardAuthorizer denying what no ACL
# grants. $DIR/secure holds a CA made with openssl (ca.pem) and, per
# principal (admin, gateway, materializer, worker), a SCRAM-SHA-512
# password (NAME.password, added at format time) and a client
# certificate (NAME.pem, NAME-key.pem, CN=NAME), plus admin.properties
# for Kafka's tools (kafka.sh tool acls --command-config ...).
#   PORT     SASL_SSL: SCRAM-SHA-512, and OAUTHBEARER when a JWKS URL is set
#            (url prints it)
#   PORT+2   SSL with a required client certificate: the principal is the
#            certificate's CN; also the inter-broker listener
#   PORT+1   the controller, SSL with the broker's own certificate
# Super users: User:broker (the broker's certificate) and User:admin. No
# ACL is made: a test or an operator grants them (docs/security.md).
#
# The first install downloads about 60 MB from Maven Central (a minute on
# a fast link); the first start formats storage and takes 5-20 s on two
# cores. Failure to start (port taken, no Java, download refused, disk
# full, a broker that dies) ends within a minute with the cause and the
# log file's last lines.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
port="${FENCEGATE_KAFKA_PORT:-9192}"
dir="${FENCEGATE_KAFKA_DIR:-/tmp/fencegate-kafka-$port}"
home="${FENCEGATE_KAFKA_HOME:-/tmp/fencegate-kafka-lib}"
osuser="${FENCEGATE_KAFKA_USER:-fencegate-kafka}"
heap="${FENCEGATE_KAFKA_HEAP:-512m}"
start_timeout="${FENCEGATE_KAFKA_START_TIMEOUT:-180}"

log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# The java binary: JAVA_HOME's when set, else the PATH's.
java_bin() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    echo "$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    command -v java
  else
    return 1
  fi
}

install() {
  local jar="$home/lib/kafka_2.13-4.4.0.jar" out
  [ -f "$jar" ] && [ -f "$home/lib/.complete" ] && return 0
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) not found: install the 'maven' package (Debian) to fetch Apache Kafka"
  java_bin >/dev/null || die "Java not found: install OpenJDK 17 or newer (Debian: openjdk-17-jre-headless)"
  mkdir -p "$home"
  log "fetching Apache Kafka 4.4.0 with Maven into $home/lib (first time: about 60 MB)"
  rm -rf "$home/lib.new"
  if ! out="$(mvn -q -B -f "$here/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/lib.new" -DincludeScope=runtime 2>&1)"; then
    echo "$out" | tail -n 20 >&2
    die "Maven could not fetch Apache Kafka (the registry's answer is above)"
  fi
  touch "$home/lib.new/.complete"
  rm -rf "$home/lib"
  mv "$home/lib.new" "$home/lib"
  chmod -R a+rX "$home"
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$osuser" -- "$@"
  else
    "$@"
  fi
}

ensure_osuser() {
  [ "$(id -u)" -eq 0 ] || return 0
  id "$osuser" >/dev/null 2>&1 && return 0
  useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$osuser"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# node_dir N: the directory of node N of the mode ($1).
node_dir() {
  if [ "$1" = single ]; then echo "$dir/single"; else echo "$dir/cluster/node-$2"; fi
}

broker_port() { if [ "$1" = single ]; then echo "$port"; else echo $((port + 99 + $2)); fi; }
ctl_port() { if [ "$1" = single ]; then echo $((port + 1)); else echo $((port + 199 + $2)); fi; }
nodes_of() { if [ "$1" = single ]; then echo 1; else echo 1 2 3; fi; }

url_of() {
  local mode="$1" n out=""
  for n in $(nodes_of "$mode"); do out="$out${out:+,}127.0.0.1:$(broker_port "$mode" "$n")"; done
  echo "$out"
}

voters_of() {
  local mode="$1" n out=""
  for n in $(nodes_of "$mode"); do out="$out${out:+,}$n@127.0.0.1:$(ctl_port "$mode" "$n")"; done
  echo "$out"
}

running_pid() {
  local f="$1/kafka.pid" pid
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

write_log4j() {
  cat >"$1/log4j2.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="$1/server.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
XML
}

# write_config MODE N DIR: the node's server.properties.
write_config() {
  local mode="$1" n="$2" d="$3" rf=1 isr=1
  [ "$mode" = cluster ] && rf=3 isr=2
  local advertised="127.0.0.1:$(broker_port "$mode" "$n")" voters
  voters="${FENCEGATE_KAFKA_VOTERS:-$(voters_of "$mode")}"
  if [ -n "${FENCEGATE_KAFKA_ADVERTISED:-}" ]; then
    advertised="$(echo "$FENCEGATE_KAFKA_ADVERTISED" | cut -d, -f"$n")"
  fi
  cat >"$d/server.properties" <<PROPS
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(broker_port "$mode" "$n"),CONTROLLER://127.0.0.1:$(ctl_port "$mode" "$n")
advertised.listeners=PLAINTEXT://$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$d/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  secure && write_secure_config "$n" "$d"
  if [ -n "${FENCEGATE_KAFKA_CONFIG:-}" ]; then
    printf '# FENCEGATE_KAFKA_CONFIG\n%s\n' "$FENCEGATE_KAFKA_CONFIG" >>"$d/server.properties"
  fi
  local own="FENCEGATE_KAFKA_NODE_CONFIG_$n"
  if [ -n "${!own:-}" ]; then
    printf '# %s\n%s\n' "$own" "${!own}" >>"$d/server.properties"
  fi
}

secure() { [ "${FENCEGATE_KAFKA_SECURE:-0}" = 1 ]; }
secure_dir() { echo "$dir/secure"; }
principals="admin gateway materializer worker"

# make_secrets: the CA, the broker's certificate, and each principal's
# password and client certificate, once per $dir.
make_secrets() {
  local s; s="$(secure_dir)"
  [ -f "$s/.complete" ] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found: the secured broker's CA is made with it"
  mkdir -p "$s"
  (
    cd "$s"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj "/CN=fencegate-dev-kafka-ca" -keyout ca-key.pem -out ca.pem 2>/dev/null
    issue broker "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
    local p
    for p in $principals; do
      issue "$p" "extendedKeyUsage=clientAuth"
      head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$p.password"
    done
    printf 'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\nssl.truststore.location=%s/ca.pem\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="%s";\n' \
      "$s" "$(cat admin.password)" >admin.properties
    chmod 600 ./*key.pem ./*.password admin.properties
  ) || die "making the secured broker's CA and credentials in $s failed"
  touch "$s/.complete"
}

# issue NAME EXT: a certificate CN=NAME signed by the CA (cwd), its key
# unencrypted PKCS#8 (what Kafka's PEM key store reads).
issue() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 \
    -extfile <(echo "$2") -out "$1.pem" 2>/dev/null
  rm -f "$1.csr"
}

# scram_args: kafka-storage format's --add-scram for every principal.
scram_args() {
  local p
  for p in $principals; do
    printf '%s\n' --add-scram "SCRAM-SHA-512=[name=$p,password=$(cat "$(secure_dir)/$p.password")]"
  done
}

# write_secure_config N D: the listeners, TLS stores, SASL and authorizer
# of the secured single broker; lines written later win.
write_secure_config() {
  local n="$1" d="$2" s bp cp mp jwks
  s="$(secure_dir)"; bp="$(broker_port single "$n")"; cp="$(ctl_port single "$n")"; mp=$((port + 2))
  jwks="${FENCEGATE_KAFKA_OAUTH_JWKS_URL:-}"
  local mechs=SCRAM-SHA-512
  [ -n "$jwks" ] && mechs=SCRAM-SHA-512,OAUTHBEARER
  cat >>"$d/server.properties" <<PROPS
# FENCEGATE_KAFKA_SECURE
listeners=SASL://127.0.0.1:$bp,MTLS://127.0.0.1:$mp,CONTROLLER://127.0.0.1:$cp
advertised.listeners=SASL://127.0.0.1:$bp,MTLS://127.0.0.1:$mp
listener.security.protocol.map=SASL:SASL_SSL,MTLS:SSL,CONTROLLER:SSL
inter.broker.listener.name=MTLS
ssl.keystore.type=PEM
ssl.keystore.location=$s/broker-bundle.pem
ssl.truststore.type=PEM
ssl.truststore.location=$s/ca.pem
ssl.endpoint.identification.algorithm=https
listener.name.mtls.ssl.client.auth=required
listener.name.controller.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
sasl.enabled.mechanisms=$mechs
listener.name.sasl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:broker;User:admin
PROPS
  if [ -n "$jwks" ]; then
    cat >>"$d/server.properties" <<PROPS
listener.name.sasl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$jwks
sasl.oauthbearer.expected.issuer=$FENCEGATE_KAFKA_OAUTH_ISSUER
sasl.oauthbearer.expected.audience=${FENCEGATE_KAFKA_OAUTH_AUDIENCE:-fencegate-kafka}
PROPS
  fi
  cat "$s/broker-key.pem" "$s/broker.pem" >"$s/broker-bundle.pem"
  chmod 600 "$s/broker-bundle.pem"
}

# jvm_props: the JVM system properties of the secured broker: Kafka 4
# fetches no OAUTHBEARER URL that is not allowed by name.
jvm_props() {
  if secure && [ -n "${FENCEGATE_KAFKA_OAUTH_JWKS_URL:-}" ]; then
    echo "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$FENCEGATE_KAFKA_OAUTH_JWKS_URL"
  fi
}

run_java() {
  local d="$1"; shift
  as_owner "$(java_bin)" "-Xmx$heap" "-Xms$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$d/log4j2.xml" \
    -cp "$home/lib/*" "$@"
}

format_node() {
  local d="$1" id="$2" out
  [ -f "$d/data/meta.properties" ] && return 0
  local extra=()
  secure && mapfile -t extra < <(scram_args)
  if ! out="$(run_java "$d" kafka.tools.StorageTool format "--cluster-id=$id" -c "$d/server.properties" \
    --feature transaction.version=2 "${extra[@]}" 2>&1)"; then
    echo "$out" | tail -n 20 >&2
    die "formatting $d/data failed (above)"
  fi
}

check_disk() {
  local free
  free="$(df -Pk "$(dirname "$dir")" | awk 'NR==2 {print $4}')"
  [ "${free:-0}" -ge 524288 ] || die "less than 512 MiB free on $(dirname "$dir") (df): the broker needs room for its logs"
}

# launch D: starts the node of directory D in the background, its pid in D/kafka.pid.
launch() {
  local d="$1" jb
  jb="$(java_bin)"
  : >"$d/server.log"
  rm -f "$d/kafka.pid" # a killed node's stale pid would pass for the new one's
  [ "$(id -u)" -eq 0 ] && chown -R "$osuser" "$d"
  # exec keeps the shell's pid, so the pid file names the JVM itself.
  local runner=()
  # setpriv execs (runuser stays the JVM's parent), so the pid is the JVM's.
  [ "$(id -u)" -eq 0 ] && runner=(setpriv "--reuid=$osuser" "--regid=$osuser" --init-groups --reset-env)
  local props=()
  mapfile -t props < <(jvm_props)
  setsid bash -c 'echo $$ >"$1/kafka.pid"; shift; exec "$@"' _ "$d" "${runner[@]}" \
    "$jb" "-Xmx$heap" "-Xms$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "${props[@]}" \
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$d/log4j2.xml" \
    -cp "$home/lib/*" kafka.Kafka "$d/server.properties" >"$d/stdout.log" 2>&1 </dev/null &
  local i
  for i in $(seq 1 50); do [ -s "$d/kafka.pid" ] && break; sleep 0.1; done
  if [ -n "${FENCEGATE_KAFKA_WATCH_PID:-}" ]; then
    watch_parent "$FENCEGATE_KAFKA_WATCH_PID" "$(cat "$d/kafka.pid")" &
  fi
}

# watch_parent P K: kills K once P has ended (a test binary that died
# without its cleanup leaves no broker behind).
watch_parent() {
  local parent="$1" pid="$2"
  exec >/dev/null 2>&1 </dev/null
  while kill -0 "$parent" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do
    sleep 1
  done
  kill -9 "$pid" 2>/dev/null || true
}

# wait_up D PORT: until the node logs that it started and its port accepts.
wait_up() {
  local d="$1" p="$2" deadline=$((SECONDS + start_timeout)) pid
  pid="$(cat "$d/kafka.pid" 2>/dev/null || true)"
  while [ $SECONDS -lt $deadline ]; do
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$d/server.log" "$d/stdout.log" >&2 2>/dev/null || true
      die "the broker in $d died while starting (logs: $d/server.log, $d/stdout.log)"
    fi
    if grep -q "Kafka Server started" "$d/server.log" 2>/dev/null && port_open "$p"; then
      return 0
    fi
    sleep 0.2
  done
  tail -n 30 "$d/server.log" >&2 || true
  die "the broker in $d did not start within ${start_timeout}s (log: $d/server.log)"
}

start_mode() {
  local mode="$1" n d id="" all_up=1
  for n in $(nodes_of "$mode"); do
    running_pid "$(node_dir "$mode" "$n")" >/dev/null || all_up=0
  done
  if [ $all_up = 1 ]; then
    log "$mode already running on $(url_of "$mode")"
    return 0
  fi
  java_bin >/dev/null || die "Java not found: install OpenJDK 17 or newer (Debian: openjdk-17-jre-headless)"
  if secure && [ "$mode" != single ]; then die "FENCEGATE_KAFKA_SECURE=1 secures the single broker only"; fi
  if secure && [ -n "${FENCEGATE_KAFKA_OAUTH_JWKS_URL:-}" ] && [ -z "${FENCEGATE_KAFKA_OAUTH_ISSUER:-}" ]; then
    die "FENCEGATE_KAFKA_OAUTH_JWKS_URL needs FENCEGATE_KAFKA_OAUTH_ISSUER (the tokens' iss)"
  fi
  install
  ensure_osuser
  mkdir -p "$dir"
  check_disk
  secure && make_secrets
  for n in $(nodes_of "$mode"); do
    d="$(node_dir "$mode" "$n")"
    running_pid "$d" >/dev/null && continue
    for p in $(broker_port "$mode" "$n") $(ctl_port "$mode" "$n") $(secure && echo $((port + 2))); do
      port_open "$p" && die "port 127.0.0.1:$p is taken by another process (ss -ltnp 'sport = :$p'); set FENCEGATE_KAFKA_PORT"
    done
  done
  [ -f "$dir/$mode.cluster-id" ] || head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$dir/$mode.cluster-id"
  id="$(cat "$dir/$mode.cluster-id")"
  for n in $(nodes_of "$mode"); do
    d="$(node_dir "$mode" "$n")"
    running_pid "$d" >/dev/null && continue
    mkdir -p "$d/data"
    write_config "$mode" "$n" "$d"
    write_log4j "$d"
    [ "$(id -u)" -eq 0 ] && chown -R "$osuser" "$dir"
    format_node "$d" "$id"
    launch "$d"
  done
  for n in $(nodes_of "$mode"); do
    wait_up "$(node_dir "$mode" "$n")" "$(broker_port "$mode" "$n")"
  done
  log "$mode running on $(url_of "$mode") (data and logs in $dir)"
}

stop_mode() {
  local mode="$1" n d pid i
  for n in $(nodes_of "$mode"); do
    d="$(node_dir "$mode" "$n")"
    pid="$(running_pid "$d")" || continue
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    rm -f "$d/kafka.pid"
  done
}

# reset_mode M: stop mode M's nodes and delete their data.
reset_mode() {
  stop_mode "$1"
  if [ "$1" = single ]; then rm -rf "$dir/single"; else rm -rf "$dir/cluster"; fi
  rm -f "$dir/$1.cluster-id"
  log "$1: stopped, data deleted"
}

modes() {
  case "${FENCEGATE_KAFKA_MODE:-$1}" in
    single) echo single ;;
    cluster) echo cluster ;;
    all) echo single cluster ;;
    *) die "FENCEGATE_KAFKA_MODE: single, cluster or all" ;;
  esac
}

tool() {
  local name="${1:-}" cls
  [ -n "$name" ] || die "usage: kafka.sh tool NAME ARGS... (console-consumer, transactions, producer-perf, topics, configs, acls, metadata-quorum, or a class)"
  shift
  case "$name" in
    console-consumer) cls=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    transactions) cls=org.apache.kafka.tools.TransactionsCommand ;;
    producer-perf) cls=org.apache.kafka.tools.ProducerPerformance ;;
    topics) cls=org.apache.kafka.tools.TopicCommand ;;
    configs) cls=org.apache.kafka.tools.ConfigCommand ;;
    acls) cls=org.apache.kafka.tools.AclCommand ;;
    metadata-quorum) cls=org.apache.kafka.tools.MetadataQuorumCommand ;;
    *) cls="$name" ;;
  esac
  install
  mkdir -p "$home/tools"
  [ -f "$home/tools/log4j2.xml" ] || cat >"$home/tools/log4j2.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="err" target="SYSTEM_ERR"><PatternLayout pattern="%p %m%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
XML
  exec "$(java_bin)" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$home/tools/log4j2.xml" -cp "$home/lib/*" "$cls" "$@"
}

case "${1:-}" in
  install) install ;;
  start) start_mode single ;;
  cluster) start_mode cluster ;;
  stop) for m in $(modes all); do stop_mode "$m"; done ;;
  reset) for m in $(modes all); do reset_mode "$m"; done ;;
  status)
    for m in $(modes single); do
      for n in $(nodes_of "$m"); do running_pid "$(node_dir "$m" "$n")" >/dev/null || { echo "not running"; exit 1; }; done
      echo "running: $(url_of "$m")"
    done ;;
  url) for m in $(modes single); do url_of "$m"; done ;;
  log) for m in $(modes single); do echo "$(node_dir "$m" 1)/server.log"; done ;;
  pids)
    for m in $(modes single); do
      for n in $(nodes_of "$m"); do
        pid="$(running_pid "$(node_dir "$m" "$n")")" && echo "$n $pid"
      done
    done ;;
  tool) shift; tool "$@" ;;
  *) echo "usage: $0 install|start|cluster|stop|reset|status|url|log|pids|tool" >&2; exit 2 ;;
esac
