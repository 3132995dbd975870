#!/usr/bin/env bash
# record-fixtures.sh [RUN...]: records what real Debezium emits into
# debezium/testdata/real/<source>-<converter>/<topic>.jsonl, for the
# decoder's tests (issue 3, "fixtures recorded from real Debezium").
#
# It starts a private stack (PostgreSQL, Kafka in KRaft mode, Kafka Connect
# with Debezium 3.6.1.Final and, for Avro, the schema registry) under
# $CDC_CACHE/fixtures on its own ports, so it never touches the stack that
# other tests run on the default ports. It creates the schema in
# infra/fixtures/schema.sql (snapshot rows), registers one connector per
# converter run on the same database, waits until each has finished its
# snapshot, runs infra/fixtures/workload.sql once (so every converter sees
# the same changes), waits until the workload's last row (the end marker)
# is on every run's topic, dumps each run's topics (data, heartbeat, transaction
# metadata) with infra/dump, and stops the stack.
#
# Runs (default: all available): postgres-json (JsonConverter, schemas
# enabled), postgres-jsonnoschema (schemas disabled), postgres-jsonmodes
# (schemas enabled; decimal.handling.mode=string, binary.handling.mode=hex,
# time.precision.mode=connect, interval.handling.mode=string,
# hstore.handling.mode=map), postgres-flat
# (ExtractNewRecordState with op, lsn and source.ts_ms added, deletes
# rewritten), postgres-avro (Avro in the Confluent wire format through the
# registry, see registry.sh), mariadb-json and mariadb-avro (MariaDB from
# Debian read by Debezium's MySQL connector, infra/fixtures/mariadb-*.sql,
# with schema-change events and a binary log rotation).
# Env: FIXTURES_OUT (debezium/testdata/real), KEEP_STACK=1 leaves the stack
# up, FIXTURES_POSTGIS=off skips PostGIS, FIXTURES_MESSAGES=on adds logical
# decoding messages (pg_logical_emit_message, topic <prefix>.message, op "m").
set -euo pipefail
CDC_SCRIPT=record-fixtures
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CDC_CACHE="${CDC_CACHE:-$(dirname "$SCRIPTS")/.cache}"
export CDC_CACHE CDC_STATE="$CDC_CACHE/fixtures"
source "$SCRIPTS/lib-services.sh"
export KAFKA_PORT="${FIXTURE_KAFKA_PORT:-29092}"
export KAFKA_CONTROLLER_PORT="${FIXTURE_KAFKA_CONTROLLER_PORT:-29093}"
export PG_PORT="${FIXTURE_PG_PORT:-25432}"
export CONNECT_PORT="${FIXTURE_CONNECT_PORT:-28083}"
export REGISTRY_PORT="${FIXTURE_REGISTRY_PORT:-28081}"
export MARIADB_PORT="${FIXTURE_MARIADB_PORT:-23306}"
# See mariadb.sh: keeps Debezium's MySQL connector on SHOW MASTER STATUS.
export MARIADB_REPORT_VERSION="${MARIADB_REPORT_VERSION:-5.5.5-10.11-MariaDB}"
export CONNECT_GROUP=fixtures-connect
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
OUT="${FIXTURES_OUT:-$CDC_REPO/debezium/testdata/real}"
DB=cdcfix

ALL_RUNS=(postgres-json postgres-jsonnoschema postgres-jsonmodes postgres-flat postgres-avro mariadb-json mariadb-avro)
RUNS=("$@")
((${#RUNS[@]})) || RUNS=("${ALL_RUNS[@]}")

stop_stack() {
  if [[ "${KEEP_STACK:-0}" == 1 ]]; then log "leaving the stack up under $CDC_STATE"; return; fi
  "$SCRIPTS/connect.sh" stop || true
  "$SCRIPTS/registry.sh" stop || true
  "$SCRIPTS/kafka.sh" stop || true
  "$SCRIPTS/postgres.sh" stop || true
  "$SCRIPTS/mariadb.sh" stop || true
}

# prefix RUN: the Debezium topic.prefix of a run; topics are
# <prefix>.<schema>.<table>, <prefix>.transaction and
# __debezium-heartbeat.<prefix>.
prefix() { printf '%s' "${1//-/_}"; }

uses_registry() { [[ " ${RUNS[*]} " == *"-avro "* ]]; }
# runs_of SOURCE: the selected runs of one source database.
runs_of() { local r; for r in "${RUNS[@]}"; do [[ "$r" == "$1"-* ]] && printf '%s\n' "$r"; done; true; }

# converters RUN: the key and value converter settings of a run.
converters() {
  case "$1" in
    postgres-json|postgres-flat|postgres-jsonmodes|mariadb-json)
      cat <<'JSON'
"key.converter": "org.apache.kafka.connect.json.JsonConverter",
"key.converter.schemas.enable": "true",
"value.converter": "org.apache.kafka.connect.json.JsonConverter",
"value.converter.schemas.enable": "true",
JSON
      ;;
    postgres-jsonnoschema)
      cat <<'JSON'
"key.converter": "org.apache.kafka.connect.json.JsonConverter",
"key.converter.schemas.enable": "false",
"value.converter": "org.apache.kafka.connect.json.JsonConverter",
"value.converter.schemas.enable": "false",
JSON
      ;;
    postgres-avro|mariadb-avro)
      local url="http://127.0.0.1:$REGISTRY_PORT"
      "$SCRIPTS/registry.sh" converter-config "$url"
      ;;
    *) die "unknown run $1" ;;
  esac
}

# modes RUN: the non-default value representations of the jsonmodes run.
modes() {
  if [[ "$1" == postgres-jsonmodes ]]; then
    cat <<'JSON'
"decimal.handling.mode": "string",
"binary.handling.mode": "hex",
"time.precision.mode": "connect",
"interval.handling.mode": "string",
"hstore.handling.mode": "map",
JSON
  fi
}

transforms() {
  if [[ "$1" == postgres-flat ]]; then
    cat <<'JSON'
"transforms": "unwrap",
"transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
"transforms.unwrap.add.fields": "op,lsn,source.ts_ms",
"transforms.unwrap.add.headers": "op",
"transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
JSON
  fi
}

connector_file() {
  local run="$1" p; p="$(prefix "$1")"
  local f="$CDC_RUN/connector-$run.json"
  if [[ "$run" == mariadb-* ]]; then
    mysql_connector "$run" "$p" >"$f"
  else
    postgres_connector "$run" "$p" >"$f"
  fi
  python3 -m json.tool "$f" >/dev/null || die "bad connector json $f"
  printf '%s' "$f"
}

# mysql_connector RUN PREFIX: Debezium's MySQL connector reading MariaDB's
# binary log (debezium-connector-mariadb 3.6.1.Final is not served here).
mysql_connector() {
  local run="$1" p="$2"
  # Each binlog client needs its own server id; derive a stable one per run.
  local SERVER_ID=$((5400 + $(printf "%s" "$run" | cksum | cut -d" " -f1) % 500))
  cat <<JSON
{
  "name": "fx-$run-$RUN_ID",
  "config": {
    "connector.class": "io.debezium.connector.mysql.MySqlConnector",
    "database.hostname": "127.0.0.1",
    "database.port": "$MARIADB_PORT",
    "database.user": "debezium",
    "database.password": "dbz",
    "database.server.id": "$SERVER_ID",
    "database.ssl.mode": "disabled",
    "topic.prefix": "$p",
    "database.include.list": "cdcfix",
    "schema.history.internal.kafka.bootstrap.servers": "$KAFKA_BOOTSTRAP",
    "schema.history.internal.kafka.topic": "_schemahistory.$p",
    "include.schema.changes": "true",
    "snapshot.mode": "initial",
    "snapshot.locking.mode": "minimal",
    "skipped.operations": "none",
    "tombstones.on.delete": "true",
    "provide.transaction.metadata": "true",
    "heartbeat.interval.ms": "10000",
    $(converters "$run")
    "tasks.max": "1"
  }
}
JSON
}

postgres_connector() {
  local run="$1" p="$2"
  cat <<JSON
{
  "name": "fx-$run-$RUN_ID",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "plugin.name": "pgoutput",
    "database.hostname": "127.0.0.1",
    "database.port": "$PG_PORT",
    "database.user": "postgres",
    "database.password": "postgres",
    "database.dbname": "$DB",
    "topic.prefix": "$p",
    "schema.include.list": "cdc",
    "slot.name": "fx_$p",
    "slot.drop.on.stop": "true",
    "publication.name": "fx_pub_$p",
    "publication.autocreate.mode": "filtered",
    "snapshot.mode": "initial",
    "skipped.operations": "none",
    "tombstones.on.delete": "true",
    "provide.transaction.metadata": "true",
    "heartbeat.interval.ms": "10000",
    "include.unknown.datatypes": "true",
    $(converters "$run")
    $(modes "$run")
    $(transforms "$run")
    "tasks.max": "1"
  }
}
JSON
}

psql_db() { "$SCRIPTS/postgres.sh" psql -d "$DB" -qAt "$@"; }

# streaming_started NAME COUNT: Debezium logs this once a connector's
# snapshot is done and it streams from its slot.
streaming_count() {
  tail -c "+$CONNECT_LOG_START" "$CDC_RUN/connect.log" | grep -c "Starting streaming" || true
}

main() {
  local t0=$SECONDS
  RUN_ID="$(date -u +%Y%m%d%H%M%S)"
  local pg_runs my_runs
  pg_runs="$(runs_of postgres | wc -l)"
  my_runs="$(runs_of mariadb | wc -l)"
  trap stop_stack EXIT
  # A clean slate every time: fixtures must not carry records of older runs.
  "$SCRIPTS/connect.sh" stop || true
  "$SCRIPTS/registry.sh" wipe
  "$SCRIPTS/kafka.sh" wipe
  "$SCRIPTS/mariadb.sh" wipe
  "$SCRIPTS/postgres.sh" stop
  (cd "$CDC_REPO" && go build -o "$CDC_CACHE/bin/dump" ./scripts/infra/dump) || die "build dump"
  if ((pg_runs)); then "$SCRIPTS/postgres.sh" start; fi
  if ((my_runs)); then "$SCRIPTS/mariadb.sh" start; fi
  "$SCRIPTS/kafka.sh" start
  if uses_registry; then "$SCRIPTS/registry.sh" start; fi
  "$SCRIPTS/connect.sh" start

  local postgis=off
  if ((pg_runs)); then
    if [[ "${FIXTURES_POSTGIS:-auto}" != off ]]; then
      local bin; bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
      local major; major="$(basename "$(dirname "$bin")")"
      if [[ ! -f "/usr/share/postgresql/$major/extension/postgis.control" ]]; then
        log "installing postgresql-$major-postgis-3 (optional)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$major-postgis-3" >/dev/null 2>&1 \
          || log "postgis not installable; recording without geometry columns"
      fi
      [[ -f "/usr/share/postgresql/$major/extension/postgis.control" ]] && postgis=on
    fi
    log "PostGIS: $postgis"
    "$SCRIPTS/postgres.sh" psql -qAt -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
    psql_db -v postgis="$postgis" -f "$CDC_INFRA/fixtures/schema.sql" >/dev/null
  fi
  if ((my_runs)); then
    "$SCRIPTS/mariadb.sh" sql <"$CDC_INFRA/fixtures/mariadb-schema.sql" || die "create mariadb schema"
  fi

  CONNECT_LOG_START=$(($(stat -c %s "$CDC_RUN/connect.log") + 1))
  local run
  for run in "${RUNS[@]}"; do
    "$SCRIPTS/connect.sh" register "$(connector_file "$run")"
  done
  wait_until 180 "all snapshots to finish" bash -c "(( \$(tail -c +$CONNECT_LOG_START '$CDC_RUN/connect.log' | grep -c 'Starting streaming') >= ${#RUNS[@]} ))" \
    || die "snapshots did not finish (see $CDC_RUN/connect.log)"
  log "snapshots done; running the workload"
  if ((pg_runs)); then
    psql_db -v postgis="$postgis" -v messages="${FIXTURES_MESSAGES:-off}" \
      -f "$CDC_INFRA/fixtures/workload.sql" >/dev/null
    log "postgres workload done; waiting for its end marker on every run's topics"
    for run in $(runs_of postgres); do
      wait_until 300 "$run end marker" marker_seen "$(prefix "$run").cdc.scratch" \
        || die "$run: end marker not seen (see $CDC_RUN/connect.log)"
    done
  fi
  if ((my_runs)); then
    "$SCRIPTS/mariadb.sh" sql <"$CDC_INFRA/fixtures/mariadb-workload.sql" || die "mariadb workload"
    log "mariadb workload done; waiting for its end marker on every run's topics"
    for run in $(runs_of mariadb); do
      wait_until 300 "$run end marker" marker_seen "$(prefix "$run").cdcfix.scratch" \
        || die "$run: end marker not seen (see $CDC_RUN/connect.log)"
    done
  fi
  # Let a couple more heartbeats through so the heartbeat topics show the
  # steady state after the workload too.
  sleep 5

  for run in "${RUNS[@]}"; do
    local p; p="$(prefix "$run")"
    local dir="$OUT/$run"
    rm -rf "$dir"
    local reg=()
    if [[ "$run" == *-avro ]]; then reg=(-registry "http://127.0.0.1:$REGISTRY_PORT"); fi
    # Data topics, the transaction topic, the heartbeat topic and, for the
    # MySQL connector, the schema-change topic named after the prefix.
    "$CDC_CACHE/bin/dump" -brokers "$KAFKA_BOOTSTRAP" -out "$dir" -exclude '^$' \
      -topics "^($p|$p\\..*|__debezium-heartbeat\\.$p)\$" "${reg[@]}"
    write_manifest "$run" "$dir" "$postgis"
  done
  for run in "${RUNS[@]}"; do
    "$SCRIPTS/connect.sh" delete "fx-$run-$RUN_ID"
  done
  log "recorded ${RUNS[*]} into $OUT in $((SECONDS - t0))s"
}

# marker_seen TOPIC: the topic holds a record whose value contains the
# workload's end marker (plain UTF-8 in both JSON and Avro encodings).
marker_seen() { topics_contain "$CDC_CACHE/bin/dump" "$KAFKA_BOOTSTRAP" "^$1\$" "workload done"; }

# write_manifest RUN DIR POSTGIS: what produced the fixtures, so a reader
# knows the versions and the exact connector configuration.
write_manifest() {
  local run="$1" dir="$2" postgis="$3"
  python3 - "$CDC_RUN/connector-$run.json" "$dir/connector.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["config"]["database.password"] = "(local test password, see scripts/)"
json.dump(c, open(sys.argv[2], "w"), indent=2, sort_keys=True)
open(sys.argv[2], "a").write("\n")
PY
  local source_desc files
  if [[ "$run" == mariadb-* ]]; then
    source_desc="MariaDB $("$SCRIPTS/mariadb.sh" sql -N -e 'SELECT VERSION()') (Debian package, row-based
binary log) through Debezium's MySQL connector"
    files="scripts/infra/fixtures/mariadb-schema.sql (snapshot rows);
changes: scripts/infra/fixtures/mariadb-workload.sql"
  else
    source_desc="PostgreSQL $(psql_db -c "SHOW server_version" | cut -d' ' -f1) (Debian package,
pgoutput; PostGIS: $postgis) through Debezium's PostgreSQL connector"
    files="scripts/infra/fixtures/schema.sql (snapshot rows);
changes: scripts/infra/fixtures/workload.sql"
  fi
  cat >"$dir/README.md" <<MD
Recorded by scripts/record-fixtures.sh from a real $source_desc
$DEBEZIUM_VERSION on Apache Kafka Connect $KAFKA_VERSION (KRaft broker $KAFKA_VERSION).
Schema: $files. Connector configuration: connector.json.
One file per topic, one Kafka record per line, keys, values and header values
base64-encoded exactly as they were on the topic. Do not edit by hand; re-record.
MD
}

main
