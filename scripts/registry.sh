#!/usr/bin/env bash
# registry.sh start|stop|status|converter-config [URL]: a schema registry
# speaking the Confluent Schema Registry REST API on 127.0.0.1
# (scripts/infra/schemaregistry, built with `go build`), with its state in
# $CDC_STATE/registry-state.json so ids survive a restart.
#
# `converter-config [URL]` prints the Kafka Connect converter settings (JSON
# object members, for a connector config) that write Avro in the Confluent
# wire format through this registry.
# Env: REGISTRY_PORT (18081), CDC_CACHE, CDC_STATE.
set -euo pipefail
CDC_SCRIPT=registry
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

REGISTRY_BIN="$CDC_CACHE/bin/schemaregistry"
REGISTRY_PID="$CDC_RUN/registry.pid"
REGISTRY_LOG="$CDC_RUN/registry.log"
REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT"

registry_install() {
  (cd "$CDC_REPO" && go build -o "$REGISTRY_BIN" ./scripts/infra/schemaregistry) || die "build schemaregistry"
}

registry_ready() {
  pid_alive "$REGISTRY_PID" && curl -fsS "$REGISTRY_URL/subjects" >/dev/null
}

registry_start() {
  if pid_alive "$REGISTRY_PID"; then
    log "already running (pid $(cat "$REGISTRY_PID")) on $REGISTRY_URL"
    return 0
  fi
  port_open "$REGISTRY_PORT" && die "port $REGISTRY_PORT is taken by another process"
  registry_install
  log "starting schema registry on $REGISTRY_URL (log $REGISTRY_LOG)"
  nohup "$REGISTRY_BIN" -listen "127.0.0.1:$REGISTRY_PORT" -state "$CDC_STATE/registry-state.json" \
    >>"$REGISTRY_LOG" 2>&1 </dev/null &
  echo $! >"$REGISTRY_PID"
  wait_until 30 "registry on $REGISTRY_URL" registry_ready || { tail -20 "$REGISTRY_LOG" >&2; die "registry not ready"; }
  log "ready on $REGISTRY_URL"
}

converter_config() {
  local url="${1:-$REGISTRY_URL}"
  cat <<JSON
"key.converter": "io.cdcapply.infra.converter.ConfluentWireAvroConverter",
"key.converter.schema.registry.url": "$url",
"value.converter": "io.cdcapply.infra.converter.ConfluentWireAvroConverter",
"value.converter.schema.registry.url": "$url",
JSON
}

case "${1:-}" in
  start) registry_start ;;
  stop) stop_pid registry "$REGISTRY_PID" 10 ;;
  restart) stop_pid registry "$REGISTRY_PID" 10; registry_start ;;
  status)
    if pid_alive "$REGISTRY_PID"; then echo "registry running (pid $(cat "$REGISTRY_PID")) on $REGISTRY_URL"; else echo "registry stopped"; exit 1; fi ;;
  install) registry_install ;;
  converter-config) converter_config "${2:-}" ;;
  wipe) stop_pid registry "$REGISTRY_PID" 10; rm -f "$CDC_STATE/registry-state.json"; log "wiped registry state" ;;
  *) echo "usage: $0 start|stop|restart|status|install|converter-config [URL]|wipe" >&2; exit 2 ;;
esac
