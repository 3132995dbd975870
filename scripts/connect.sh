#!/usr/bin/env bash
# connect.sh start|stop|status|register FILE|delete NAME|wait NAME: Kafka
# Connect in distributed mode (one worker) with the Debezium PostgreSQL
# connector, the Debezium MySQL connector (used against MariaDB) and an Avro
# converter that writes the Confluent wire format
# (io.cdcapply.infra.converter.ConfluentWireAvroConverter, built from
# infra/confluent-wire-converter) on its plugin path. REST on 127.0.0.1.
#
# `register FILE` takes {"name": ..., "config": {...}} (the body of
# POST /connectors), creates or updates the connector idempotently with
# PUT /connectors/NAME/config and waits until the connector and all its
# tasks are RUNNING.
# Env: CONNECT_PORT (18083), KAFKA_PORT, CONNECT_GROUP (cdcapply-connect).
set -euo pipefail
CDC_SCRIPT=connect
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

KAFKA_LIBS="$CDC_CACHE/kafka-$KAFKA_VERSION/libs"
PLUGINS="$CDC_CACHE/connect-plugins"
CONNECT_PID="$CDC_RUN/connect.pid"
CONNECT_LOG="$CDC_RUN/connect.log"
CONNECT_CONF="$CDC_RUN/connect-distributed.properties"
CONNECT_URL="http://127.0.0.1:$CONNECT_PORT"
CONNECT_GROUP="${CONNECT_GROUP:-cdcapply-connect}"

connect_install() {
  "$CDC_REPO/scripts/kafka.sh" install
  # Kafka's and SLF4J's own classes come from the worker's classpath; copies
  # inside a plugin directory would only shadow them.
  copy_deps "$CDC_INFRA/debezium" "$PLUGINS/debezium-connector-postgres" \
    -Ddebezium.version="$DEBEZIUM_VERSION" -DexcludeGroupIds=org.apache.kafka,org.slf4j
  copy_deps "$CDC_INFRA/debezium-mysql" "$PLUGINS/debezium-connector-mysql" \
    -Ddebezium.version="$DEBEZIUM_VERSION" -DexcludeGroupIds=org.apache.kafka,org.slf4j
  build_wire_converter
}

# build_wire_converter compiles scripts/infra/confluent-wire-converter (our
# converter that writes the Confluent wire format) into its own plugin dir.
build_wire_converter() {
  local src="$CDC_INFRA/confluent-wire-converter" out="$PLUGINS/confluent-wire-converter"
  local sum; sum="$(find "$src" -type f \( -name '*.java' -o -name pom.xml \) -print0 | sort -z | xargs -0 cat | sha256sum | cut -d' ' -f1)"
  if [[ -f "$out/.src-sha" && "$(cat "$out/.src-sha")" == "$sum" ]]; then return 0; fi
  log "building confluent-wire-converter"
  local build="$CDC_CACHE/build/confluent-wire-converter"
  rm -rf "$build" "$out"; mkdir -p "$build" "$out"
  (cd "$src" && mvn_infra package -DskipTests -Dapicurio.version="$APICURIO_VERSION" \
      -DbuildDirectory="$build") || die "build confluent-wire-converter"
  cp "$build"/*.jar "$out/"
  (cd "$src" && mvn_infra dependency:copy-dependencies -DoutputDirectory="$out" -DincludeScope=runtime \
      -Dapicurio.version="$APICURIO_VERSION" -DexcludeGroupIds=org.apache.kafka,org.slf4j) \
    || die "resolve confluent-wire-converter dependencies"
  printf '%s' "$sum" >"$out/.src-sha"
}

connect_config() {
  cat >"$CONNECT_CONF" <<CONF
bootstrap.servers=$KAFKA_BOOTSTRAP
group.id=$CONNECT_GROUP
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
config.storage.topic=_${CONNECT_GROUP}-configs
offset.storage.topic=_${CONNECT_GROUP}-offsets
status.storage.topic=_${CONNECT_GROUP}-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=1
status.storage.partitions=1
# Commit source offsets often so a restarted worker re-sends little.
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$CONNECT_PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$CONNECT_PORT
plugin.path=$PLUGINS
# Find plugins through their ServiceLoader manifests only (Debezium's jars
# and our converter have them); the default also scans every class
# reflectively, which takes minutes on a busy 2-core machine.
plugin.discovery=service_load
# One worker: rebalance without waiting for departed members.
scheduled.rebalance.max.delay.ms=0
CONF
}

connect_ready() {
  pid_alive "$CONNECT_PID" && curl -fsS "$CONNECT_URL/connector-plugins" >/dev/null
}

connect_start() {
  if pid_alive "$CONNECT_PID"; then
    log "already running (pid $(cat "$CONNECT_PID")) on $CONNECT_URL"
    return 0
  fi
  port_open "$CONNECT_PORT" && die "port $CONNECT_PORT is taken by another process"
  port_open "$KAFKA_PORT" || die "kafka is not running on $KAFKA_BOOTSTRAP (scripts/kafka.sh start)"
  connect_install
  connect_config
  log "starting Kafka Connect on $CONNECT_URL (log $CONNECT_LOG)"
  nohup "$(java_bin)" -Xms256m -Xmx1g -XX:+UseG1GC -cp "$KAFKA_LIBS/*" \
    -Dlog4j2.configurationFile="$CDC_INFRA/log4j2.properties" \
    org.apache.kafka.connect.cli.ConnectDistributed "$CONNECT_CONF" >>"$CONNECT_LOG" 2>&1 </dev/null &
  echo $! >"$CONNECT_PID"
  if ! wait_until "${CONNECT_START_TIMEOUT:-300}" "connect REST on $CONNECT_URL" connect_ready; then
    tail -30 "$CONNECT_LOG" >&2
    die "kafka connect did not become ready"
  fi
  log "ready on $CONNECT_URL"
}

# connector_running NAME: the connector and every task report RUNNING.
connector_running() {
  curl -fsS "$CONNECT_URL/connectors/$1/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
states = [s["connector"]["state"]] + [t["state"] for t in s.get("tasks", [])]
failed = [t for t in s.get("tasks", []) if t["state"] == "FAILED"]
if failed or s["connector"]["state"] == "FAILED":
    sys.stderr.write(json.dumps(s, indent=1)[:4000] + "\n")
    sys.exit(3)
sys.exit(0 if len(states) > 1 and all(x == "RUNNING" for x in states) else 1)'
}

connector_wait() {
  local name="$1" deadline=$((SECONDS + ${CONNECTOR_TIMEOUT:-90})) rc
  while true; do
    rc=0; connector_running "$name" 2>"$CDC_RUN/connector-$name.status" || rc=$?
    [[ $rc == 0 ]] && { log "connector $name RUNNING"; return 0; }
    if [[ $rc == 3 ]]; then cat "$CDC_RUN/connector-$name.status" >&2; die "connector $name FAILED"; fi
    ((SECONDS < deadline)) || die "connector $name not RUNNING after ${CONNECTOR_TIMEOUT:-90}s"
    sleep 1
  done
}

connector_register() {
  local file="$1" name config
  [[ -f "$file" ]] || die "no connector file $file"
  name="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$file")"
  config="$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["config"]))' "$file")"
  log "registering connector $name"
  curl -fsS -X PUT -H 'Content-Type: application/json' --data "$config" \
    "$CONNECT_URL/connectors/$name/config" >"$CDC_RUN/connector-$name.put.json" \
    || die "register connector $name (see $CONNECT_LOG)"
  connector_wait "$name"
}

connector_delete() {
  curl -fsS -X DELETE "$CONNECT_URL/connectors/$1" >/dev/null || true
  log "deleted connector $1"
}

case "${1:-}" in
  start) connect_start ;;
  stop) stop_pid connect "$CONNECT_PID" 60 ;;
  restart) stop_pid connect "$CONNECT_PID" 60; connect_start ;;
  status)
    if pid_alive "$CONNECT_PID"; then echo "connect running (pid $(cat "$CONNECT_PID")) on $CONNECT_URL"; else echo "connect stopped"; exit 1; fi ;;
  install) connect_install ;;
  register) connector_register "${2:?connector json file}" ;;
  wait) connector_wait "${2:?connector name}" ;;
  delete) connector_delete "${2:?connector name}" ;;
  *) echo "usage: $0 start|stop|restart|status|install|register FILE|wait NAME|delete NAME" >&2; exit 2 ;;
esac
