#!/usr/bin/env bash
# kafka.sh start|stop|status|restart|topics: a single-node Apache Kafka
# broker in KRaft mode (combined broker and controller) on 127.0.0.1, built
# from the Maven Central jars named in scripts/infra/kafka/pom.xml.
#
# Data lives in $CDC_STATE/kafka-data and survives stop/start, so tests can
# restart the broker mid-stream; `kafka.sh wipe` deletes it.
# Env: KAFKA_PORT (19092), KAFKA_CONTROLLER_PORT (19093), CDC_CACHE, CDC_STATE.
set -euo pipefail
CDC_SCRIPT=kafka
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

KAFKA_LIBS="$CDC_CACHE/kafka-$KAFKA_VERSION/libs"
KAFKA_DATA="$CDC_STATE/kafka-data"
KAFKA_PID="$CDC_RUN/kafka.pid"
KAFKA_LOG="$CDC_RUN/kafka.log"
KAFKA_CONF="$CDC_RUN/kafka-server.properties"

kafka_install() {
  copy_deps "$CDC_INFRA/kafka" "$KAFKA_LIBS" -Dkafka.version="$KAFKA_VERSION" \
    -DexcludeArtifactIds=slf4j-reload4j
}

# kafka_java MAIN ARGS...: runs a Kafka tool class on the broker classpath.
kafka_java() {
  "$(java_bin)" -Xmx256m -cp "$KAFKA_LIBS/*" \
    -Dlog4j2.configurationFile="$CDC_INFRA/log4j2.properties" "$@"
}

kafka_config() {
  cat >"$KAFKA_CONF" <<CONF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DATA
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests join and leave consumer groups constantly: skip the initial delay.
group.initial.rebalance.delay.ms=0
# Small segments so retention and restarts stay cheap on a laptop-sized disk.
log.segment.bytes=16777216
log.retention.hours=-1
# The log cleaner looks for compactable logs every 0.5 s (15 s by default):
# compaction tests wait for it.
log.cleaner.backoff.ms=500
CONF
}

kafka_start() {
  if pid_alive "$KAFKA_PID"; then
    log "already running (pid $(cat "$KAFKA_PID")) on $KAFKA_BOOTSTRAP"
    return 0
  fi
  port_open "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by another process"
  kafka_install
  kafka_config
  if [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(kafka_java kafka.tools.StorageTool random-uuid | tail -1)"
    log "formatting $KAFKA_DATA with cluster id $cluster_id"
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_CONF" >>"$KAFKA_LOG" 2>&1 \
      || die "format kafka storage (see $KAFKA_LOG)"
  fi
  log "starting broker on $KAFKA_BOOTSTRAP (log $KAFKA_LOG)"
  # Readiness is judged only from what this run appends to the log.
  KAFKA_LOG_START=$(($(stat -c %s "$KAFKA_LOG" 2>/dev/null || echo 0) + 1))
  nohup "$(java_bin)" -Xms256m -Xmx1g -XX:+UseG1GC -cp "$KAFKA_LIBS/*" \
    -Dlog4j2.configurationFile="$CDC_INFRA/log4j2.properties" \
    kafka.Kafka "$KAFKA_CONF" >>"$KAFKA_LOG" 2>&1 </dev/null &
  echo $! >"$KAFKA_PID"
  if ! wait_until "${KAFKA_START_TIMEOUT:-90}" "kafka on $KAFKA_BOOTSTRAP" kafka_ready; then
    tail -20 "$KAFKA_LOG" >&2
    die "kafka did not become ready"
  fi
  log "ready on $KAFKA_BOOTSTRAP"
}

kafka_ready() {
  pid_alive "$KAFKA_PID" || return 1
  port_open "$KAFKA_PORT" || return 1
  # The listener opens before the broker has caught up with the metadata log;
  # the controller reports the broker registered once it can serve requests.
  tail -c "+${KAFKA_LOG_START:-1}" "$KAFKA_LOG" | grep -q "Kafka Server started"
}

case "${1:-}" in
  start) kafka_start ;;
  stop) stop_pid kafka "$KAFKA_PID" 60 ;;
  restart) stop_pid kafka "$KAFKA_PID" 60; kafka_start ;;
  status)
    if pid_alive "$KAFKA_PID"; then echo "kafka running (pid $(cat "$KAFKA_PID")) on $KAFKA_BOOTSTRAP"; else echo "kafka stopped"; exit 1; fi ;;
  install) kafka_install ;;
  wipe) stop_pid kafka "$KAFKA_PID" 60; rm -rf "$KAFKA_DATA"; log "wiped $KAFKA_DATA" ;;
  topics) kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BOOTSTRAP" "${@:2}" ;;
  *) echo "usage: $0 start|stop|restart|status|install|wipe|topics [args]" >&2; exit 2 ;;
esac
