#!/usr/bin/env bash
# postgres.sh start|stop|status|psql [args]|wipe: a PostgreSQL server from
# Debian's packages, set up for logical decoding (wal_level=logical) so
# Debezium's pgoutput plugin can stream from it. Listens on 127.0.0.1 only,
# trust authentication for local tests. The data directory is
# $CDC_STATE/pg-data; the server runs as the `postgres` system user because
# PostgreSQL refuses to run as root.
# Env: PG_PORT (15432), CDC_CACHE, CDC_STATE.
set -euo pipefail
CDC_SCRIPT=postgres
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

PG_DATA="$CDC_STATE/pg-data"
PG_SOCK="$CDC_STATE/pg-sock"
PG_PID="$CDC_RUN/postgres.pid"
PG_LOG="$CDC_RUN/postgres.log"

pg_bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [[ -n "$d" && -x "$d/postgres" ]] || return 1
  printf '%s' "$d"
}

pg_install() {
  if ! pg_bindir >/dev/null; then
    log "installing postgresql from Debian packages"
    if [[ "$(id -u)" != 0 ]]; then die "postgresql is not installed and we are not root"; fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  id postgres >/dev/null 2>&1 || die "no postgres system user after install"
}

# as_pg runs a command as the postgres user when we are root.
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
  if pid_alive "$PG_PID"; then
    log "already running (pid $(cat "$PG_PID")) on 127.0.0.1:$PG_PORT"
    return 0
  fi
  port_open "$PG_PORT" && die "port $PG_PORT is taken by another process"
  pg_install
  local bin; bin="$(pg_bindir)"
  mkdir -p "$PG_SOCK"
  [[ "$(id -u)" == 0 ]] && chown postgres "$PG_SOCK"
  # The postgres user must be able to reach the state directory.
  [[ "$(id -u)" == 0 ]] && chmod o+x "$CDC_CACHE" "$CDC_STATE"
  if [[ ! -f "$PG_DATA/PG_VERSION" ]]; then
    log "initdb into $PG_DATA"
    rm -rf "$PG_DATA"
    mkdir -p "$PG_DATA"
    [[ "$(id -u)" == 0 ]] && chown postgres "$PG_DATA"
    as_pg "$bin/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >>"$PG_LOG" 2>&1 \
      || die "initdb (see $PG_LOG)"
    cat >>"$PG_DATA/postgresql.conf" <<CONF
# cdcapply test settings (scripts/postgres.sh)
listen_addresses = '127.0.0.1'
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
wal_sender_timeout = 0
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 128MB
log_min_messages = warning
CONF
    cat >"$PG_DATA/pg_hba.conf" <<CONF
local all all trust
host all all 127.0.0.1/32 trust
local replication all trust
host replication all 127.0.0.1/32 trust
CONF
  fi
  # The port and socket directory are passed at each start so PG_PORT can
  # change between runs without rewriting the configuration.
  log "starting on 127.0.0.1:$PG_PORT (log $PG_LOG)"
  touch "$PG_LOG"; [[ "$(id -u)" == 0 ]] && chown postgres "$PG_LOG"
  as_pg "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "${PG_START_TIMEOUT:-60}" \
    -o "-p $PG_PORT -k $PG_SOCK" start >/dev/null || { tail -20 "$PG_LOG" >&2; die "start postgres"; }
  head -1 "$PG_DATA/postmaster.pid" >"$PG_PID"
  wait_until 30 "postgres on port $PG_PORT" pg_ready || die "postgres not ready"
  log "ready on 127.0.0.1:$PG_PORT"
}

pg_ready() {
  "$(pg_bindir)/pg_isready" -h 127.0.0.1 -p "$PG_PORT" -q
}

pg_stop() {
  if ! pid_alive "$PG_PID"; then
    log "postgres not running"; rm -f "$PG_PID"; return 0
  fi
  local pid; pid="$(cat "$PG_PID")"
  # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions,
  # checkpoint, exit. stop_pid's SIGTERM would be "smart" and wait for clients.
  kill -INT "$pid" 2>/dev/null || true
  stop_pid postgres "$PG_PID" 60
}

case "${1:-}" in
  start) pg_start ;;
  stop) pg_stop ;;
  restart) pg_stop; pg_start ;;
  status)
    if pid_alive "$PG_PID"; then echo "postgres running (pid $(cat "$PG_PID")) on 127.0.0.1:$PG_PORT"; else echo "postgres stopped"; exit 1; fi ;;
  psql) shift; exec psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 "$@" ;;
  wipe) pg_stop; rm -rf "$PG_DATA"; log "wiped $PG_DATA" ;;
  *) echo "usage: $0 start|stop|restart|status|psql [args]|wipe" >&2; exit 2 ;;
esac
