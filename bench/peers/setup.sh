#!/usr/bin/env bash
# Builds what the peers of `cdcapply bench -peers` need (bench/peers/README.md):
#   - a venv with the pinned deltalake, pyarrow, orjson, pyspark and
#     delta-spark (default <repo>/.cache/peers-venv, CDCAPPLY_PEERS_VENV overrides);
#   - the Delta Lake jars for Spark, resolved from Maven Central with Maven
#     into <repo>/.cache/peers-jars (CDCAPPLY_PEERS_JARS overrides).
# Idempotent: stamp files record what was built, so a second run with the
# same pins does nothing. Prints only the venv's python path on stdout
# (bench/peers/CONTRACT.md); everything else goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${CDCAPPLY_PEERS_VENV:-$repo/.cache/peers-venv}
jars=${CDCAPPLY_PEERS_JARS:-$repo/.cache/peers-jars}
python=${PYTHON:-python3}

log() { printf '%s [peers-setup] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# deltalake/pyarrow as scripts/python-env.sh pins them (the reader side of
# the interop tests). delta-spark 4.4.1 is the newest on PyPI but its jars
# are not on Maven Central yet (4.4.0 is the newest there), and the Python
# API and the jars must be one release: 4.4.0. delta-spark 4.4.x requires
# pyspark <= 4.2.0, so pyspark is 4.2.0 (Scala 2.13), and the Delta artifact
# is the one built for Spark 4.2: io.delta:delta-spark_4.2_2.13.
delta_version=4.4.0
pins=(
	"deltalake==1.6.6"
	"pyarrow==26.0.1"
	"orjson==3.13.0"
	"pyspark==4.2.0"
	"delta-spark==$delta_version"
)

# --- venv -------------------------------------------------------------------
stamp="$venv/.cdcapply-peers-pins"
want=$(printf '%s\n' "${pins[@]}")
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	:
else
	if ! command -v "$python" >/dev/null 2>&1; then
		log "no $python; installing python3 and venv from Debian packages"
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip >&2
	fi
	if [[ -d "$venv" ]]; then
		log "rebuilding $venv (pins changed or an earlier build did not finish)"
		rm -rf "$venv"
	fi
	log "creating $venv with $("$python" --version 2>&1) (pyspark is a ~450 MB download)"
	mkdir -p "$(dirname "$venv")"
	"$python" -m venv "$venv" >&2
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
	"$venv/bin/python" -c 'import deltalake, pyarrow, orjson, pyspark, delta' >&2
	echo "$want" >"$stamp"
	log "venv ready: $(printf '%s ' "${pins[@]}")"
fi

# --- Java (Spark 4.2 runs on Java 17 or 21) ---------------------------------
if ! command -v java >/dev/null 2>&1; then
	log "no java; installing a JRE 17 from Debian packages"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >&2
fi

# --- Delta jars ---------------------------------------------------------------
# Maven resolves io.delta:delta-spark_4.2_2.13 and io.delta:delta-storage
# from Maven Central (scripts/infra/maven-settings.xml keeps every other
# repository out). Only these two: delta-spark's other compile-scope
# dependencies (delta-kernel-*, Unity Catalog client, an older Jackson and
# Parquet) serve the kernel and Unity Catalog paths the peer does not use,
# and they would put a second Jackson/Parquet beside Spark's own.
jstamp="$jars/.cdcapply-peers-jars"
artifacts=("io.delta:delta-spark_4.2_2.13:$delta_version" "io.delta:delta-storage:$delta_version")
jwant=$(printf '%s\n' "${artifacts[@]}")
if [[ -f "$jstamp" && "$(cat "$jstamp")" == "$jwant" ]]; then
	:
else
	if ! command -v mvn >/dev/null 2>&1; then
		log "no mvn; installing Maven from Debian packages"
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2
	fi
	log "fetching ${artifacts[*]} into $jars"
	rm -rf "$jars.tmp"
	mkdir -p "$jars.tmp"
	for a in "${artifacts[@]}"; do
		if ! mvn -s "$repo/scripts/infra/maven-settings.xml" -B -q -Dstyle.color=never \
			dependency:copy -Dartifact="$a" -DoutputDirectory="$jars.tmp" >&2; then
			log "could not fetch $a from Maven Central"
			exit 1
		fi
	done
	rm -rf "$jars"
	mv "$jars.tmp" "$jars"
	echo "$jwant" >"$jstamp"
fi

echo "$venv/bin/python"
