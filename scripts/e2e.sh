#!/usr/bin/env bash
# e2e.sh [VARIANT...]: the end-to-end comparison (issue 8). A real
# PostgreSQL, Debezium's PostgreSQL connector on Kafka Connect, a real Kafka
# broker (KRaft) and `cdcapply run` in between; then every source table,
# read with psql, is compared row by row and value by value with the Delta
# table's current view read by Python deltalake (scripts/infra/e2e/compare.py).
#
# Variants (default: all of them, in this order):
#   plain            no fault
#   kill-cdcapply    cdcapply killed with SIGKILL mid-workload, restarted
#   restart-connect  the Kafka Connect worker killed with SIGKILL
#                    mid-workload and started again: Debezium resumes from
#                    its last committed source offset and re-sends what it
#                    had sent after it
#   restart-kafka    the Kafka broker stopped and started mid-workload
#   avro             no fault; Avro in the Confluent wire format through the
#                    local schema registry (registry.sh), `format: avro`
#
# One stack serves every variant: PostgreSQL, Kafka, Connect (and the
# registry for avro) start once on their own ports under $CDC_CACHE/e2e, so
# they never meet the broker .ci/run starts for the Go tests (19092) or
# record-fixtures.sh's stack. Each variant gets a fresh database, connector,
# topic prefix, consumer group, pipeline id and table directory. Everything
# started here is stopped on exit by its process id.
#
# Per variant: create the schema (snapshot rows), register the connector,
# wait for its snapshot on every topic, start cdcapply, run the workload
# (scripts/infra/e2e/workload.sql) and inject the fault after its phase 2
# starts, insert an end marker, wait until Debezium has emitted it (one
# task emits in commit order, so everything before it is on the topics)
# and until every table's Kafka position reached its topic's high
# watermark (`cdcapply status --json`), stop cdcapply (it must exit 0 with
# nothing quarantined), compare. With E2E_FIXTURES=on the JSON plain run
# and the avro run keep their topics as decoder fixtures in
# debezium/testdata/real/postgres-e2e-{json,avro}/ (off by default, so a
# test run does not rewrite the repository).
#
# Env: E2E_PG_PORT (35432), E2E_KAFKA_PORT (39092), E2E_KAFKA_CONTROLLER_PORT
# (39093), E2E_CONNECT_PORT (38083), E2E_REGISTRY_PORT (38081),
# E2E_BIN (a prebuilt cdcapply binary instead of building ./cmd/cdcapply),
# E2E_TIMEOUT (convergence timeout per variant, 300 s), E2E_FIXTURES
# (on|off, default off), CDCAPPLY_PYTHON (python with deltalake; default
# scripts/python-env.sh), KEEP_STACK=1 leaves the stack up for inspection.
set -euo pipefail
CDC_SCRIPT=e2e
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CDC_CACHE="${CDC_CACHE:-$(dirname "$SCRIPTS")/.cache}"
export CDC_CACHE CDC_STATE="$CDC_CACHE/e2e"
source "$SCRIPTS/lib-services.sh"
export KAFKA_PORT="${E2E_KAFKA_PORT:-39092}"
export KAFKA_CONTROLLER_PORT="${E2E_KAFKA_CONTROLLER_PORT:-39093}"
export PG_PORT="${E2E_PG_PORT:-35432}"
export CONNECT_PORT="${E2E_CONNECT_PORT:-38083}"
export REGISTRY_PORT="${E2E_REGISTRY_PORT:-38081}"
export CONNECT_GROUP=e2e-connect
# Room for a loaded 2-core machine: a slow start must not fail the run.
export KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-300}"
export CONNECTOR_TIMEOUT="${CONNECTOR_TIMEOUT:-180}"
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
E2E="$CDC_INFRA/e2e"
BIN="${E2E_BIN:-$CDC_CACHE/e2e-bin/cdcapply}"
DUMP="$CDC_CACHE/e2e-bin/dump"
TIMEOUT="${E2E_TIMEOUT:-300}"
FIXTURES_DIR="$CDC_REPO/debezium/testdata/real"
TABLES=(customers order_lines documents counters sessions markers)

ALL_VARIANTS=(plain kill-cdcapply restart-connect restart-kafka avro)
VARIANTS=("$@")
((${#VARIANTS[@]})) || VARIANTS=("${ALL_VARIANTS[@]}")
for v in "${VARIANTS[@]}"; do
  [[ " ${ALL_VARIANTS[*]} " == *" $v "* ]] || die "unknown variant $v (want: ${ALL_VARIANTS[*]})"
done

# --- timings -----------------------------------------------------------------
TIMINGS=()
PHASE_NAME="" PHASE_T0=0
phase() {
  phase_end
  PHASE_NAME="$1" PHASE_T0=$SECONDS
  log "--- $1"
}
phase_end() {
  if [[ -n "$PHASE_NAME" ]]; then TIMINGS+=("$(printf '%5ds  %s' $((SECONDS - PHASE_T0)) "$PHASE_NAME")"); fi
  PHASE_NAME=""
}
print_timings() {
  phase_end
  log "timings (total $((SECONDS - T_START))s):"
  local t; for t in "${TIMINGS[@]}"; do printf '  %s\n' "$t" >&2; done
}

# --- the stack ---------------------------------------------------------------
CDCAPPLY_PID="$CDC_RUN/cdcapply.pid"
WORKLOAD_PID=""
STACK=()
cleanup() {
  local rc=$?
  if [[ -n "$WORKLOAD_PID" ]] && kill -0 "$WORKLOAD_PID" 2>/dev/null; then kill "$WORKLOAD_PID" 2>/dev/null || true; fi
  stop_pid cdcapply "$CDCAPPLY_PID" 30 || true
  if [[ "${KEEP_STACK:-0}" == 1 ]]; then
    log "leaving the stack up under $CDC_STATE (stop: CDC_STATE=$CDC_STATE PG_PORT=$PG_PORT ... scripts/<svc>.sh stop)"
  else
    local i
    for ((i = ${#STACK[@]} - 1; i >= 0; i--)); do "$SCRIPTS/${STACK[i]}.sh" stop || true; done
  fi
  print_timings
  if ((rc == 0)); then log "PASS: ${VARIANTS[*]}"; else log "FAIL (exit $rc); logs in $CDC_RUN"; fi
  exit "$rc"
}

start_service() {
  # Registered before starting: a start that fails half-way may leave its
  # process running; stop of a stopped service is a no-op.
  STACK+=("$1")
  "$SCRIPTS/$1.sh" start
}

uses_avro() { [[ " ${VARIANTS[*]} " == *" avro "* ]]; }

psql_e2e() { "$SCRIPTS/postgres.sh" psql -qAt "$@"; }

# --- per variant -------------------------------------------------------------
name_of() { printf 'e2e_%s' "${1//-/_}"; }  # database, topic prefix, slot

connector_json() {
  local v="$1" n; n="$(name_of "$v")"
  local conv
  if [[ "$v" == avro ]]; then
    conv="$("$SCRIPTS/registry.sh" converter-config "http://127.0.0.1:$REGISTRY_PORT")"
  else
    conv='"key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "true",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "true",'
  fi
  cat <<JSON
{
  "name": "$n",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "plugin.name": "pgoutput",
    "database.hostname": "127.0.0.1",
    "database.port": "$PG_PORT",
    "database.user": "postgres",
    "database.password": "postgres",
    "database.dbname": "$n",
    "topic.prefix": "$n",
    "schema.include.list": "app",
    "slot.name": "$n",
    "slot.drop.on.stop": "false",
    "publication.name": "${n}_pub",
    "publication.autocreate.mode": "filtered",
    "snapshot.mode": "initial",
    "skipped.operations": "none",
    "tombstones.on.delete": "true",
    "provide.transaction.metadata": "true",
    "heartbeat.interval.ms": "5000",
    $conv
    "tasks.max": "1"
  }
}
JSON
}

pipeline_yaml() {
  local v="$1" n; n="$(name_of "$v")"
  local format=json reg=""
  if [[ "$v" == avro ]]; then
    format=avro
    reg="schema_registry:
  url: http://127.0.0.1:$REGISTRY_PORT"
  fi
  cat <<YAML
# Generated by scripts/e2e.sh for variant $v.
pipeline:
  id: $n
kafka:
  brokers: [$KAFKA_BOOTSTRAP]
  group: $n
$reg
defaults:
  format: $format
  connector: postgresql
  # Small batches: many commits, so faults land between and inside them.
  flush: {max_records: 2000, max_bytes: 8388608, max_latency: 300ms}
  schema_policy: additive
  truncate_policy: tombstone
tables:
YAML
  local t
  for t in "${TABLES[@]}"; do
    printf '  - name: %s\n    topic: %s.app.%s\n    location: %s\n' "$t" "$n" "$t" "$CDC_STATE/tables/$v/$t"
  done
}

start_cdcapply() {
  local v="$1"
  log "starting cdcapply run for $v (log $CDC_RUN/cdcapply-$v.log)"
  nohup "$BIN" run -c "$CDC_RUN/pipeline-$v.yaml" >>"$CDC_RUN/cdcapply-$v.log" 2>&1 </dev/null &
  echo $! >"$CDCAPPLY_PID"
}

# topic_has TOPIC TEXT: the topic holds a record whose value contains TEXT
# (plain UTF-8 in JSON and in Avro strings).
topic_has() { topics_contain "$DUMP" "$KAFKA_BOOTSTRAP" "^$1\$" "$2"; }

# topic_count_at_least TOPIC N: the topic holds at least N records.
topic_count_at_least() {
  local tmp="$CDC_RUN/count-probe"
  rm -rf "$tmp"
  "$DUMP" -brokers "$KAFKA_BOOTSTRAP" -out "$tmp" -exclude '^$' -topics "^$1\$" -timeout 20s >/dev/null 2>&1 || return 1
  (($(wc -l <"$tmp/$1.jsonl") >= $2))
}

# all_topics_exist PREFIX: every table's topic holds at least its snapshot.
all_topics_exist() {
  local tmp="$CDC_RUN/topics-probe" t
  rm -rf "$tmp"
  "$DUMP" -brokers "$KAFKA_BOOTSTRAP" -out "$tmp" -exclude '^$' -topics "^$1\\.app\\." -timeout 20s >/dev/null 2>&1 || return 1
  for t in "${TABLES[@]}"; do [[ -s "$tmp/$1.app.$t.jsonl" ]] || return 1; done
}

# converged V: every table's position reached its topic's high watermark
# and no table is halted (cdcapply status --json, lag read from the broker).
converged() {
  "$BIN" status --config "$CDC_RUN/pipeline-$1.yaml" --json >"$CDC_RUN/status-$1.json" 2>"$CDC_RUN/status-$1.err" || return 1
  "$PY" - "$CDC_RUN/status-$1.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = bool(r["tables"])
for t in r["tables"]:
    parts = t.get("partitions") or []
    if t.get("halt") or t.get("error") or not t.get("lag_known") or t.get("total_lag") != 0 or not parts:
        ok = False
    for p in parts:
        if not p.get("has_position") or p.get("lag") != 0:
            ok = False
sys.exit(0 if ok else 1)
PY
}

status_summary() {
  "$PY" - "$CDC_RUN/status-$1.json" <<'PY' >&2 || true
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["tables"]:
    parts = ", ".join(f'{p["topic"]}[{p["partition"]}] next={p["next_offset"]} hw={p.get("high_watermark")}' for p in t.get("partitions") or [])
    print(f'  {t["name"]}: state={t.get("state")} version={t.get("version")} lag={t.get("total_lag")} rows live={t["rows"]["live"]} tombstones={t["rows"]["tombstones"]} {parts} {t.get("error","")}')
PY
}

inject_fault() {
  local v="$1"
  case "$v" in
    plain|avro) return 0 ;;
    kill-cdcapply)
      # Wait for a commit made after the fault point, so the kill lands
      # while the stream is being applied.
      local before; before="$(grep -c '"msg":"committed"' "$CDC_RUN/cdcapply-$v.log" || true)"
      wait_until 60 "a cdcapply commit" bash -c "(( \$(grep -c '\"msg\":\"committed\"' '$CDC_RUN/cdcapply-$v.log') > $before ))" \
        || die "$v: cdcapply made no commit during the workload"
      local pid; pid="$(cat "$CDCAPPLY_PID")"
      log "FAULT: kill -9 cdcapply (pid $pid)"
      kill -9 "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      rm -f "$CDCAPPLY_PID"
      sleep 2
      start_cdcapply "$v"
      ;;
    restart-connect)
      # Kill while Debezium streams the hot key, so events it has sent but
      # not yet committed (offsets flush every second) are sent again.
      wait_until 120 "Debezium streaming the hot key" topic_count_at_least "$(name_of "$v").app.counters" 300 \
        || die "$v: Debezium did not stream the hot key's updates"
      local pid; pid="$(cat "$CDC_RUN/connect.pid")"
      log "FAULT: kill -9 Kafka Connect (pid $pid), then start it again"
      kill -9 "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      "$SCRIPTS/connect.sh" start
      "$SCRIPTS/connect.sh" wait "$(name_of "$v")"
      ;;
    restart-kafka)
      log "FAULT: restart the Kafka broker"
      "$SCRIPTS/kafka.sh" restart
      ;;
  esac
}

run_variant() {
  local v="$1" n; n="$(name_of "$v")"
  local tables="$CDC_STATE/tables/$v"
  phase "$v: database and connector"
  rm -rf "$tables"
  mkdir -p "$tables"
  psql_e2e -c "DROP DATABASE IF EXISTS $n WITH (FORCE)" -c "CREATE DATABASE $n" >/dev/null
  psql_e2e -d "$n" -f "$E2E/schema.sql" >/dev/null
  connector_json "$v" >"$CDC_RUN/connector-$v.json"
  python3 -m json.tool "$CDC_RUN/connector-$v.json" >/dev/null || die "bad connector json"
  pipeline_yaml "$v" >"$CDC_RUN/pipeline-$v.yaml"
  "$BIN" config validate "$CDC_RUN/pipeline-$v.yaml" >&2
  "$SCRIPTS/connect.sh" register "$CDC_RUN/connector-$v.json"
  wait_until 180 "$v snapshot on every topic" all_topics_exist "$n" || die "$v: snapshot not on every topic (see $CDC_RUN/connect.log)"

  phase "$v: workload"
  : >"$CDC_RUN/cdcapply-$v.log"
  start_cdcapply "$v"
  psql_e2e -d "$n" -f "$E2E/workload.sql" >"$CDC_RUN/workload-$v.log" 2>&1 &
  WORKLOAD_PID=$!
  wait_until 120 "$v workload phase 2" grep -q '^phase 2' "$CDC_RUN/workload-$v.log" \
    || die "$v: workload did not reach phase 2 (see $CDC_RUN/workload-$v.log)"
  inject_fault "$v"
  if ! wait "$WORKLOAD_PID"; then
    WORKLOAD_PID=""
    tail -20 "$CDC_RUN/workload-$v.log" >&2
    die "$v: workload failed"
  fi
  WORKLOAD_PID=""
  grep -q '^workload done' "$CDC_RUN/workload-$v.log" || die "$v: workload did not finish"
  local token="end-$v-$RANDOM$RANDOM"
  psql_e2e -d "$n" -c "INSERT INTO app.markers VALUES (1, '$token')" >/dev/null

  phase "$v: convergence"
  wait_until "$TIMEOUT" "$v end marker on $n.app.markers" topic_has "$n.app.markers" "$token" \
    || die "$v: Debezium did not emit the end marker in ${TIMEOUT}s (see $CDC_RUN/connect.log)"
  pid_alive "$CDCAPPLY_PID" || { tail -20 "$CDC_RUN/cdcapply-$v.log" >&2; die "$v: cdcapply is not running"; }
  if ! wait_until "$TIMEOUT" "$v tables at their topics' high watermarks" converged "$v"; then
    status_summary "$v"
    die "$v: cdcapply did not converge in ${TIMEOUT}s (see $CDC_RUN/cdcapply-$v.log)"
  fi
  status_summary "$v"
  local pid; pid="$(cat "$CDCAPPLY_PID")"
  stop_pid cdcapply "$CDCAPPLY_PID" 30
  wait "$pid" 2>/dev/null && true
  if grep -q '"msg":"record quarantined"' "$CDC_RUN/cdcapply-$v.log"; then
    grep '"msg":"record quarantined"' "$CDC_RUN/cdcapply-$v.log" | head -5 >&2
    die "$v: cdcapply quarantined records"
  fi
  if grep -q '"level":"ERROR"' "$CDC_RUN/cdcapply-$v.log"; then
    grep '"level":"ERROR"' "$CDC_RUN/cdcapply-$v.log" | head -5 >&2
    log "$v: cdcapply logged errors (above); the comparison decides"
  fi

  phase "$v: compare"
  local args=() t
  for t in "${TABLES[@]}"; do args+=(--table "app.$t=$tables/$t"); done
  if [[ "$v" != avro ]]; then args+=(--resent "$CDC_RUN/topics-$v"); fi
  rm -rf "$CDC_RUN/topics-$v"
  local reg=()
  [[ "$v" == avro ]] && reg=(-registry "http://127.0.0.1:$REGISTRY_PORT")
  "$DUMP" -brokers "$KAFKA_BOOTSTRAP" -out "$CDC_RUN/topics-$v" -exclude '^$' \
    -topics "^($n\\..*|__debezium-heartbeat\\.$n)\$" "${reg[@]}" >&2
  "$PY" "$E2E/compare.py" --variant "$v" \
    --psql "psql -h 127.0.0.1 -p $PG_PORT -U postgres -d $n" "${args[@]}"

  if [[ "${E2E_FIXTURES:-off}" == on && ( "$v" == plain || "$v" == avro ) ]]; then
    phase "$v: fixtures"
    local fx="$FIXTURES_DIR/postgres-e2e-json"
    [[ "$v" == avro ]] && fx="$FIXTURES_DIR/postgres-e2e-avro"
    write_fixtures "$v" "$CDC_RUN/topics-$v" "$fx"
  fi
  if [[ "$v" == plain ]]; then
    phase "$v: the comparison can fail"
    comparison_can_fail "$v" "${args[@]}"
  fi
  "$SCRIPTS/connect.sh" delete "$n"
  psql_e2e -c "SELECT pg_drop_replication_slot('$n')" >/dev/null 2>&1 || true
}

# comparison_can_fail V COMPARE-ARGS...: with cdcapply stopped, change one
# value, delete one row and insert one in the source; the comparison must
# now fail and name exactly those three.
comparison_can_fail() {
  local v="$1" n; n="$(name_of "$1")"; shift
  psql_e2e -d "$n" -c "UPDATE app.customers SET c_text = 'changed behind cdcapply' WHERE id = 1" \
    -c "DELETE FROM app.order_lines WHERE order_id = 1 AND line_no = 1" \
    -c "INSERT INTO app.markers VALUES (2, 'not applied')" >/dev/null
  local out="$CDC_RUN/compare-must-fail-$v.txt"
  if "$PY" "$E2E/compare.py" --variant "$v (source changed behind cdcapply)" \
      --psql "psql -h 127.0.0.1 -p $PG_PORT -U postgres -d $n" "$@" >"$out" 2>&1; then
    cat "$out" >&2
    die "$v: the comparison passed although the source was changed behind cdcapply"
  fi
  grep -F "key (1,) column c_text (text): source 'changed behind cdcapply'" "$out" >&2 &&
    grep -F "key (1, 1): live in the table, not in the source" "$out" >&2 &&
    grep -F "key (2,): in the source, not live in the table" "$out" >&2 &&
    grep -F "3 differences" "$out" >&2 ||
    { cat "$out" >&2; die "$v: the failing comparison did not name exactly the three changes"; }
  log "$v: the comparison fails as it must when the source changes behind cdcapply"
}

# write_fixtures V DUMPDIR OUT: keeps what Debezium emitted in a run as
# decoder fixtures, each topic gzipped (debezium's loadRealRuns reads
# *.jsonl.gz), with the connector config and a README.
write_fixtures() {
  local v="$1" src="$2" out="$3"
  rm -rf "$out"
  mkdir -p "$out"
  local f
  for f in "$src"/*.jsonl; do gzip -9 -n -c "$f" >"$out/$(basename "$f").gz"; done
  [[ -f "$src/schemas.json" ]] && cp "$src/schemas.json" "$out/"
  python3 - "$CDC_RUN/connector-$v.json" "$out/connector.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["config"]["database.password"] = "(local test password, see scripts/)"
json.dump(c, open(sys.argv[2], "w"), indent=2, sort_keys=True)
open(sys.argv[2], "a").write("\n")
PY
  cat >"$out/README.md" <<MD
Recorded by scripts/e2e.sh (variant $v) from a real PostgreSQL
$(psql_e2e -c "SHOW server_version" | cut -d' ' -f1) (Debian package, pgoutput) through Debezium's PostgreSQL connector
$DEBEZIUM_VERSION on Apache Kafka Connect $KAFKA_VERSION (KRaft broker $KAFKA_VERSION).
Schema and snapshot rows: scripts/infra/e2e/schema.sql; changes:
scripts/infra/e2e/workload.sql (then one end-marker row). Connector
configuration: connector.json.
One gzipped file per topic, one Kafka record per line, keys, values and
header values base64-encoded exactly as they were on the topic, nothing
trimmed (the hot key's thousands of updates included). Do not edit by hand;
re-record with E2E_FIXTURES=on scripts/e2e.sh plain avro.
MD
  log "fixtures: $(du -sh "$out" | cut -f1) in $out"
}

main() {
  T_START=$SECONDS
  trap cleanup EXIT
  phase "build"
  mkdir -p "$(dirname "$BIN")"
  if [[ -z "${E2E_BIN:-}" ]]; then
    (cd "$CDC_REPO" && go build -o "$BIN" ./cmd/cdcapply) || die "build cdcapply"
  fi
  (cd "$CDC_REPO" && go build -o "$DUMP" ./scripts/infra/dump) || die "build dump"
  PY="${CDCAPPLY_PYTHON:-$("$SCRIPTS/python-env.sh")}"
  "$PY" -c 'import deltalake' || die "no deltalake in $PY"

  phase "stack"
  # A clean slate: no topics, offsets or databases of an earlier run.
  "$SCRIPTS/connect.sh" stop || true
  "$SCRIPTS/kafka.sh" wipe
  "$SCRIPTS/registry.sh" wipe
  "$SCRIPTS/postgres.sh" wipe
  rm -rf "$CDC_STATE/tables"
  start_service postgres
  start_service kafka
  if uses_avro; then start_service registry; fi
  start_service connect

  local v
  for v in "${VARIANTS[@]}"; do run_variant "$v"; done
  phase_end
}

main
