#!/usr/bin/env bash
# s3.sh start|stop|restart|status|install|wipe: an S3-compatible object
# store on 127.0.0.1 for the tests of tables on s3:// (moto's S3 server
# from PyPI, pinned, in its own venv under $CDC_CACHE; see
# scripts/infra/s3/server.py for why its requests are serialized).
# Its objects live in memory: a restart empties it.
# Env: S3_PORT (19090), CDC_CACHE, CDC_STATE, PYTHON.
set -euo pipefail
CDC_SCRIPT=s3
source "$(dirname "${BASH_SOURCE[0]}")/lib-services.sh"

S3_URL="http://127.0.0.1:$S3_PORT"
S3_VENV="$CDC_CACHE/s3-venv"
S3_PIN="moto[server]==5.2.5"
S3_PID="$CDC_RUN/s3.pid"
S3_LOG="$CDC_RUN/s3.log"

s3_install() {
  if [[ -x "$S3_VENV/bin/python" && "$(cat "$S3_VENV/.pin" 2>/dev/null)" == "$S3_PIN" ]]; then
    return 0
  fi
  local python="${PYTHON:-python3}"
  if ! "$python" -m venv --help >/dev/null 2>&1; then
    log "installing python3-venv from Debian packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv || die "install python3-venv"
  fi
  log "installing $S3_PIN into $S3_VENV"
  rm -rf "$S3_VENV"
  "$python" -m venv "$S3_VENV" || die "create $S3_VENV"
  "$S3_VENV/bin/pip" install -q --disable-pip-version-check "$S3_PIN" || die "pip install $S3_PIN"
  printf '%s' "$S3_PIN" >"$S3_VENV/.pin"
}

s3_ready() {
  pid_alive "$S3_PID" && curl -fsS -o /dev/null "$S3_URL/moto-api/"
}

s3_start() {
  if pid_alive "$S3_PID"; then
    log "already running (pid $(cat "$S3_PID")) on $S3_URL"
    return 0
  fi
  port_open "$S3_PORT" && die "port $S3_PORT is taken by another process"
  s3_install
  log "starting the S3 server on $S3_URL (log $S3_LOG)"
  nohup "$S3_VENV/bin/python" "$CDC_INFRA/s3/server.py" 127.0.0.1 "$S3_PORT" \
    >>"$S3_LOG" 2>&1 </dev/null &
  echo $! >"$S3_PID"
  wait_until 60 "S3 server on $S3_URL" s3_ready || { tail -20 "$S3_LOG" >&2; die "S3 server not ready"; }
  log "ready on $S3_URL (CDCAPPLY_S3_ENDPOINT=$S3_URL)"
}

case "${1:-}" in
  start) s3_start ;;
  stop) stop_pid s3 "$S3_PID" 10 ;;
  restart) stop_pid s3 "$S3_PID" 10; s3_start ;;
  status)
    if pid_alive "$S3_PID"; then echo "s3 running (pid $(cat "$S3_PID")) on $S3_URL"; else echo "s3 stopped"; exit 1; fi ;;
  install) s3_install ;;
  wipe) stop_pid s3 "$S3_PID" 10; log "the S3 server keeps nothing on disk" ;;
  *) echo "usage: $0 start|stop|restart|status|install|wipe" >&2; exit 2 ;;
esac
