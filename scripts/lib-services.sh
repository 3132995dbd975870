#!/usr/bin/env bash
# Shared helpers for the local infrastructure scripts (kafka.sh, postgres.sh,
# connect.sh, registry.sh, record-fixtures.sh). Sourced, not run.
#
# Every service binds to 127.0.0.1 only, keeps its state, logs and pid file
# under $CDC_CACHE (default <repo>/.cache, gitignored), and is stopped by the
# process id it recorded, never by name, because several checkouts and
# helpers may run services on the same machine.

CDC_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CDC_CACHE="${CDC_CACHE:-$CDC_REPO/.cache}"
CDC_INFRA="$CDC_REPO/scripts/infra"
# Downloads live in $CDC_CACHE; service state (data, logs, pid files) in
# $CDC_STATE, so record-fixtures.sh can run a private stack beside the one
# the end-to-end tests use without sharing data or ports.
CDC_STATE="${CDC_STATE:-$CDC_CACHE}"
CDC_RUN="$CDC_STATE/run"
mkdir -p "$CDC_CACHE" "$CDC_STATE" "$CDC_RUN"

# Versions are pinned here so every script and CI agree.
KAFKA_VERSION="${KAFKA_VERSION:-4.3.0}"
DEBEZIUM_VERSION="${DEBEZIUM_VERSION:-3.6.1.Final}"
APICURIO_VERSION="${APICURIO_VERSION:-2.6.13.Final}"

# Ports, all overridable from the environment.
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
PG_PORT="${PG_PORT:-15432}"
CONNECT_PORT="${CONNECT_PORT:-18083}"
REGISTRY_PORT="${REGISTRY_PORT:-18081}"
S3_PORT="${S3_PORT:-19090}"
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

log() { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "${CDC_SCRIPT:-infra}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# mvn_infra runs Maven with the repo's settings (see infra/maven-settings.xml)
# in batch mode.
mvn_infra() {
  local mlog="$CDC_CACHE/mvn.log"
  if ! mvn -s "$CDC_INFRA/maven-settings.xml" -B -q -Dstyle.color=never "$@" >>"$mlog" 2>&1; then
    tail -20 "$mlog" >&2
    return 1
  fi
}

# copy_deps POM_DIR OUT_DIR [extra mvn args...]: resolves the runtime
# dependencies of a pom in scripts/infra into OUT_DIR once. A marker file
# holding the pom's hash makes the step idempotent and redoes it when the
# pom changes.
copy_deps() {
  local pom_dir="$1" out="$2"; shift 2
  local stamp="$out/.pom-sha"
  local sum; sum="$(cat "$pom_dir/pom.xml" <(printf '%s' "$*") | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then
    return 0
  fi
  log "resolving $(basename "$pom_dir") into $out"
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  (cd "$pom_dir" && mvn_infra dependency:copy-dependencies \
      -DoutputDirectory="$out.tmp" -DincludeScope=runtime "$@") \
    || die "resolve $(basename "$pom_dir") dependencies"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  printf '%s' "$sum" >"$stamp"
}

# pid_alive PIDFILE: true when the pid file names a live process.
pid_alive() {
  local f="$1"
  [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# stop_pid NAME PIDFILE [TIMEOUT]: SIGTERM the recorded process, wait for it
# to exit (services flush state on TERM), then SIGKILL if it does not.
stop_pid() {
  local name="$1" f="$2" timeout="${3:-30}"
  if ! pid_alive "$f"; then
    log "$name not running"
    rm -f "$f"
    return 0
  fi
  local pid; pid="$(cat "$f")"
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
    sleep 0.1
  done
  log "$name did not stop in ${timeout}s; killing pid $pid"
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

# wait_until TIMEOUT_SECONDS DESCRIPTION COMMAND...: polls COMMAND until it
# succeeds; fails with the description after the timeout.
wait_until() {
  local timeout="$1" what="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}

# port_open PORT: true when something listens on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# java_bin: Java 17+ is needed by Kafka 4 and Debezium 3.
java_bin() {
  if [[ -n "${JAVA_HOME:-}" ]]; then printf '%s/bin/java' "$JAVA_HOME"; else command -v java; fi
}

# topics_contain DUMP_BIN BOOTSTRAP TOPIC_REGEX TEXT: true when a record of
# the matching topics holds TEXT in its value (plain UTF-8 in both JSON and
# Avro encodings). DUMP_BIN is scripts/infra/dump built by the caller; it
# reads each topic from its start to the end offsets seen when it starts.
topics_contain() {
  local dump="$1" brokers="$2" re="$3" text="$4" tmp rc=0
  tmp="$(mktemp -d "$CDC_RUN/probe.XXXXXX")"
  "$dump" -brokers "$brokers" -out "$tmp" -exclude '^$' -topics "$re" -timeout 20s >/dev/null 2>&1 || rc=1
  if ((rc == 0)); then
    python3 - "$tmp" "$text" <<'PY' || rc=1
import base64, glob, json, sys
want = sys.argv[2].encode()
for f in glob.glob(sys.argv[1] + "/*.jsonl"):
    for line in open(f):
        v = json.loads(line)["value_b64"]
        if v and want in base64.b64decode(v):
            sys.exit(0)
sys.exit(1)
PY
  fi
  rm -rf "$tmp"
  return "$rc"
}
