#!/usr/bin/env bash
# test.sh runs every test of cdcapply: the gofmt check, go vet, the whole
# Go test suite under the race detector, and a short smoke run of every fuzz
# target. It is the README's test command and what .ci/run ends with.
#
# With CI=true, tests that need an outside dependency (the Python deltalake
# reader, a Kafka broker, PostgreSQL) fail when it is missing instead of
# skipping, so a CI run cannot pass by testing less. Set CI=true locally to
# get the same strictness.
#
# Environment:
#   FUZZTIME         -fuzztime per target (default 3000x: a count, since a
#                    duration ends with a spurious "context deadline
#                    exceeded" failure now and then; 0 skips the fuzz smoke)
#   CDCAPPLY_PYTHON  python with deltalake (default: the venv that
#                    scripts/python-env.sh builds or finds at <repo>/.venv)
#   GOTESTFLAGS      extra flags for go test (e.g. "-run TestInterop")
#   CDCAPPLY_E2E     1 runs scripts/e2e.sh after the Go tests (the end-to-end
#                    comparison against real PostgreSQL, Debezium and Kafka)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

fuzztime=${FUZZTIME:-3000x}
logdir="$repo/.cache/test"
mkdir -p "$logdir"

step() { printf '\n=== %s\n' "$*"; }

# The interop tests read and write tables with delta-rs: make sure its venv
# exists (python-env.sh is a no-op when it is already built). Off CI a
# machine without Python still runs every other test.
if [[ -z "${CDCAPPLY_PYTHON:-}" ]]; then
	if py=$("$repo/scripts/python-env.sh"); then
		export CDCAPPLY_PYTHON="$py"
	elif [[ "${CI:-}" == "true" ]]; then
		echo "test.sh: could not build the Python venv (scripts/python-env.sh)" >&2
		exit 1
	else
		echo "test.sh: no Python venv; the interop tests will skip" >&2
	fi
fi
echo "test.sh: CI=${CI:-} CDCAPPLY_PYTHON=${CDCAPPLY_PYTHON:-<none>} FUZZTIME=$fuzztime"

mapfile -t pkgdirs < <(go list -f '{{.Dir}}' ./...)

step "gofmt -l"
unformatted=$(gofmt -l "${pkgdirs[@]}")
if [[ -n "$unformatted" ]]; then
	echo "these files need gofmt:"
	echo "$unformatted"
	exit 1
fi

step "go vet ./..."
go vet ./...

step "go test -race -count=1 ./..."
# -v gives per-test PASS/FAIL/SKIP lines to count; the full log is kept in
# .cache/test/go-test.log and the screen shows it without the RUN noise.
testlog="$logdir/go-test.log"
set +e
# shellcheck disable=SC2086 # GOTESTFLAGS is a list of flags
go test -race -count=1 -timeout 40m -v ${GOTESTFLAGS:-} ./... 2>&1 | tee "$testlog" |
	grep -v -E '^[[:space:]]*(=== (RUN|PAUSE|CONT|NAME)|--- PASS:)'
gotest=${PIPESTATUS[0]}
set -e
passed=$(grep -c -E '^[[:space:]]*--- PASS:' "$testlog" || true)
failed=$(grep -c -E '^[[:space:]]*--- FAIL:' "$testlog" || true)
skipped=$(grep -c -E '^[[:space:]]*--- SKIP:' "$testlog" || true)
if [[ $gotest -ne 0 && $failed -eq 0 ]]; then
	# A build failure or a panic outside a test fails no named test; count it.
	failed=1
fi

fuzzfailed=0
if [[ $gotest -eq 0 && "$fuzztime" != "0" ]]; then
	step "fuzz smoke ($fuzztime per target)"
	# Every Fuzz function in a _test.go file, run alone for a short while:
	# long enough to catch a decoder that panics on simple mutations.
	# Minimizing a new-coverage input is bounded by count: with the default
	# (60s) a minimization still running when -fuzztime ends stalls the
	# workers and the run fails with "context deadline exceeded" without
	# any input having failed (seen in CI on FuzzDecodeJSON, whose real
	# Debezium seeds are several KB). A crashing input is still minimized.
	while IFS=: read -r file name; do
		dir=$(dirname "$file")
		echo "--- fuzz $name ./$dir"
		if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 20x "./$dir" >"$logdir/fuzz-$name.log" 2>&1; then
			cat "$logdir/fuzz-$name.log"
			echo "--- FAIL: fuzz $name"
			fuzzfailed=$((fuzzfailed + 1))
		fi
	done < <(git ls-files -co --exclude-standard '*_test.go' |
		xargs -r grep -H -o -E '^func (Fuzz[A-Za-z0-9_]*)\(' |
		sed -E 's/^([^:]*):func (Fuzz[A-Za-z0-9_]*)\(/\1:\2/' | sort -u)
fi

# The end-to-end comparison against real PostgreSQL, Debezium and Kafka
# (scripts/e2e.sh starts and stops its own stack). Minutes, so only when
# asked: CDCAPPLY_E2E=1 (.ci/run sets it). It runs even when a Go test
# failed, so a CI run always reports it.
e2efailed=0
if [[ "${CDCAPPLY_E2E:-0}" == "1" ]]; then
	step "end-to-end: scripts/e2e.sh (PostgreSQL -> Debezium -> Kafka -> cdcapply -> deltalake)"
	if ! "$repo/scripts/e2e.sh" 2>&1 | tee "$logdir/e2e.log"; then
		echo "--- FAIL: end-to-end (log .cache/test/e2e.log, services' logs .cache/e2e/run/)"
		e2efailed=1
	fi
fi

failed=$((failed + fuzzfailed + e2efailed))
echo
echo "test.sh: $passed passed, $failed failed, $skipped skipped"
if [[ $gotest -ne 0 || $fuzzfailed -ne 0 || $e2efailed -ne 0 ]]; then
	exit 1
fi
