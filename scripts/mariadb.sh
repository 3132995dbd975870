#!/usr/bin/env bash
# mariadb.sh start|stop|restart|status|sql [args]|wipe: a MariaDB server from
# Debian's packages (Debian ships MariaDB, not MySQL) with the row-based
# binary log Debezium's MySQL connector reads (log_bin, binlog_format=ROW,
# binlog_row_image=FULL). Listens on 127.0.0.1 only. The `debezium` user
# (password `dbz`) has the replication grants Debezium needs; `sql` runs
# the mariadb client as the database root over the server's socket.
# Env: MARIADB_PORT (13306), CDC_CACHE, CDC_STATE, MARIADB_REPORT_VERSION
# (a version string the server reports instead of its own). Debezium's MySQL
# connector 3.6 sends MySQL 8.4's `SHOW BINARY LOG STATUS` to any server whose
# version reads as 8.4 or newer, as MariaDB's 10.11 does, and MySQL
# Connector/J asks servers reporting 5.7.20 to 8.0 for `transaction_isolation`,
# which MariaDB 10.11 calls `tx_isolation`. Reporting MariaDB's own
# replication-compatible form, 5.5.5-10.11.x-MariaDB, keeps both on
# statements MariaDB knows.
set -euo pipefail
CDC_SCRIPT=mariadb
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

MARIADB_PORT="${MARIADB_PORT:-13306}"
MY_DATA="$CDC_STATE/mariadb-data"
MY_SOCK_DIR="$CDC_STATE/mariadb-sock"
MY_SOCK="$MY_SOCK_DIR/mysqld.sock"
MY_PID="$CDC_RUN/mariadb.pid"
MY_LOG="$CDC_RUN/mariadb.log"

my_install() {
  if ! command -v mariadbd >/dev/null && [[ ! -x /usr/sbin/mariadbd ]]; then
    [[ "$(id -u)" == 0 ]] || die "mariadb-server is not installed and we are not root"
    log "installing mariadb-server from Debian packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
  fi
  id mysql >/dev/null 2>&1 || die "no mysql system user after install"
}

my_sql() { mariadb --socket="$MY_SOCK" -u root "$@"; }

my_ready() {
  pid_alive "$MY_PID" && mariadb-admin --socket="$MY_SOCK" -u root ping >/dev/null 2>&1
}

my_start() {
  if pid_alive "$MY_PID"; then
    log "already running (pid $(cat "$MY_PID")) on 127.0.0.1:$MARIADB_PORT"
    return 0
  fi
  port_open "$MARIADB_PORT" && die "port $MARIADB_PORT is taken by another process"
  my_install
  mkdir -p "$MY_SOCK_DIR"
  chmod o+x "$CDC_CACHE" "$CDC_STATE"
  chown mysql "$MY_SOCK_DIR"
  touch "$MY_LOG"; chown mysql "$MY_LOG"
  local fresh=0
  if [[ ! -d "$MY_DATA/mysql" ]]; then
    log "initializing $MY_DATA"
    rm -rf "$MY_DATA"; mkdir -p "$MY_DATA"; chown mysql "$MY_DATA"
    mariadb-install-db --user=mysql --datadir="$MY_DATA" --skip-test-db >>"$MY_LOG" 2>&1 \
      || die "mariadb-install-db (see $MY_LOG)"
    fresh=1
  fi
  log "starting on 127.0.0.1:$MARIADB_PORT (log $MY_LOG)"
  local extra=()
  [[ -n "${MARIADB_REPORT_VERSION:-}" ]] && extra+=("--version=$MARIADB_REPORT_VERSION")
  nohup /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$MY_DATA" "${extra[@]}" \
    --port="$MARIADB_PORT" --bind-address=127.0.0.1 --socket="$MY_SOCK" \
    --pid-file="$MY_DATA/mariadbd.pid" --log-error="$MY_LOG" --skip-name-resolve \
    --server-id=1 --log-bin=binlog --binlog-format=ROW --binlog-row-image=FULL \
    --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=2 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --default-time-zone=+00:00 >>"$MY_LOG" 2>&1 </dev/null &
  echo $! >"$MY_PID"
  wait_until "${MARIADB_START_TIMEOUT:-60}" "mariadb on port $MARIADB_PORT" my_ready \
    || { tail -20 "$MY_LOG" >&2; die "mariadb did not become ready"; }
  if [[ $fresh == 1 ]]; then
    my_sql -e "CREATE USER 'debezium'@'%' IDENTIFIED BY 'dbz';
      GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, LOCK TABLES ON *.* TO 'debezium'@'%';
      FLUSH PRIVILEGES;" || die "create debezium user"
  fi
  log "ready on 127.0.0.1:$MARIADB_PORT"
}

case "${1:-}" in
  start) my_start ;;
  stop) stop_pid mariadb "$MY_PID" 60 ;;
  restart) stop_pid mariadb "$MY_PID" 60; my_start ;;
  status)
    if pid_alive "$MY_PID"; then echo "mariadb running (pid $(cat "$MY_PID")) on 127.0.0.1:$MARIADB_PORT"; else echo "mariadb stopped"; exit 1; fi ;;
  sql) shift; my_sql "$@" ;;
  wipe) stop_pid mariadb "$MY_PID" 60; rm -rf "$MY_DATA"; log "wiped $MY_DATA" ;;
  *) echo "usage: $0 start|stop|restart|status|sql [args]|wipe" >&2; exit 2 ;;
esac
