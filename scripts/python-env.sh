#!/usr/bin/env bash
# python-env.sh creates the Python virtual environment the interop tests use
# to read our tables with an independent Delta reader (delta-rs's Python
# package `deltalake`) and to write tables for us to read. It is idempotent:
# a stamp file records the pinned set, so a second run with the same pins
# does nothing. It prints the venv's python path on stdout (and only that),
# so callers can do PY=$(scripts/python-env.sh).
#
# Environment:
#   CDCAPPLY_VENV   venv directory (default: <repo>/.venv)
#   PYTHON          interpreter to build the venv from (default: python3)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${CDCAPPLY_VENV:-$repo/.venv}
python=${PYTHON:-python3}

# Pinned so that every machine reads tables with the same delta-rs release;
# raise them together and rerun the interop tests.
pins=(
	"deltalake==1.6.6"
	"pyarrow==26.0.1"
	"pandas==3.1.1"
)

stamp="$venv/.cdcapply-pins"
want=$(printf '%s\n' "${pins[@]}")

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	echo "$venv/bin/python"
	exit 0
fi

log() { echo "python-env: $*" >&2; }

# has_pins reports whether the venv already holds exactly the pinned
# versions (a venv built by hand or by an older copy of this script).
has_pins() {
	[[ -x "$venv/bin/python" ]] || return 1
	"$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}

if has_pins; then
	echo "$want" >"$stamp"
	echo "$venv/bin/python"
	exit 0
fi

if ! command -v "$python" >/dev/null 2>&1; then
	log "no $python found; installing python3 and venv from Debian packages"
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip >&2
	else
		log "cannot install python3: not root or no apt-get"
		exit 1
	fi
fi

# The pins need Python 3.10 or newer (deltalake 1.x and pandas 3.x).
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
	log "$python is $("$python" --version 2>&1); need 3.10 or newer"
	exit 1
fi

# A venv that exists but lacks the stamp may be half-built: start it over.
if [[ -d "$venv" ]]; then
	log "rebuilding $venv (pins changed or an earlier build did not finish)"
	rm -rf "$venv"
fi

log "creating $venv with $("$python" --version 2>&1)"
if ! "$python" -m venv "$venv" >&2; then
	# Debian splits venv support out of python3.
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$ver-venv" >&2 ||
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
		rm -rf "$venv"
		"$python" -m venv "$venv" >&2
	else
		exit 1
	fi
fi

"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
"$venv/bin/python" -c 'import deltalake, pyarrow, pandas' >&2
echo "$want" >"$stamp"
log "ready: deltalake $("$venv/bin/python" -c 'import deltalake; print(deltalake.__version__)')"
echo "$venv/bin/python"
