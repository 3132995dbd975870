#!/usr/bin/env bash
# tools.sh installs the validators the deploy/ tests run, pinned, into the
# repository's .cache (idempotent: a tool already at its pinned version is
# not touched):
#
#   .cache/bin/promtool             promtool check/test rules (Go module proxy)
#   .cache/bin/kubernetes-validate  Kubernetes manifests against the JSON
#                                   schemas bundled in the PyPI package
#                                   (offline: no schema download at run time)
#   .cache/tools/servicemonitors-crd.json
#                                   the ServiceMonitor CRD of prometheus-
#                                   operator (Go module proxy), whose
#                                   openAPIV3Schema deploy/k8s_test.go uses
#
# .ci/run calls it before scripts/test.sh; run it once locally to get the
# same checks (without the tools those tests skip, except with CI=true).
# Prints one timing line per installed tool on stderr.
#
# Environment: PYTHON (default python3) builds the kubernetes-validate venv.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$repo/.cache/bin"
tools="$repo/.cache/tools"
mkdir -p "$bin" "$tools"

PROMTOOL_VERSION=v0.316.0                 # github.com/prometheus/prometheus
KUBERNETES_VALIDATE_VERSION=1.37.0        # PyPI kubernetes-validate
PROMETHEUS_OPERATOR_VERSION=v0.85.0       # github.com/prometheus-operator/prometheus-operator

log() { echo "tools.sh: $*" >&2; }

# Go commands run outside this module, so they never touch go.mod/go.sum.
outside=$(mktemp -d)
trap 'rm -rf "$outside"' EXIT

# stamped NAME VERSION: the tool was installed at VERSION by this script.
stamped() { [[ -f "$tools/$1.version" && "$(cat "$tools/$1.version")" == "$2" ]]; }
stamp() { echo "$2" >"$tools/$1.version"; }

# promtool: compiled from the Prometheus module. -tags remove_all_sd leaves
# out every service-discovery plugin (cloud SDKs: most of the compile
# time); check/test rules need none of them.
if stamped promtool "$PROMTOOL_VERSION" && [[ -x "$bin/promtool" ]]; then
	log "promtool $PROMTOOL_VERSION present"
else
	start=$SECONDS
	(cd "$outside" && GOBIN="$bin" go install -tags remove_all_sd "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION")
	stamp promtool "$PROMTOOL_VERSION"
	log "promtool $PROMTOOL_VERSION installed in $((SECONDS - start))s"
fi
"$bin/promtool" --version 2>&1 | head -1 >&2

# kubernetes-validate in its own venv.
kv="$tools/kubernetes-validate-venv"
if stamped kubernetes-validate "$KUBERNETES_VALIDATE_VERSION" && [[ -x "$kv/bin/kubernetes-validate" ]]; then
	log "kubernetes-validate $KUBERNETES_VALIDATE_VERSION present"
else
	start=$SECONDS
	rm -rf "$kv"
	"${PYTHON:-python3}" -m venv "$kv"
	"$kv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
	stamp kubernetes-validate "$KUBERNETES_VALIDATE_VERSION"
	log "kubernetes-validate $KUBERNETES_VALIDATE_VERSION installed in $((SECONDS - start))s"
fi
ln -sf "$kv/bin/kubernetes-validate" "$bin/kubernetes-validate"

# The ServiceMonitor CRD, from the prometheus-operator module's source.
crd="$tools/servicemonitors-crd.json"
if stamped servicemonitor-crd "$PROMETHEUS_OPERATOR_VERSION" && [[ -f "$crd" ]]; then
	log "ServiceMonitor CRD $PROMETHEUS_OPERATOR_VERSION present"
else
	start=$SECONDS
	dir=$(cd "$outside" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [[ -z "$dir" || ! -f "$dir/jsonnet/prometheus-operator/servicemonitors-crd.json" ]]; then
		log "no servicemonitors-crd.json in prometheus-operator $PROMETHEUS_OPERATOR_VERSION ($dir)"
		exit 1
	fi
	install -m 0644 "$dir/jsonnet/prometheus-operator/servicemonitors-crd.json" "$crd"
	stamp servicemonitor-crd "$PROMETHEUS_OPERATOR_VERSION"
	log "ServiceMonitor CRD $PROMETHEUS_OPERATOR_VERSION copied in $((SECONDS - start))s"
fi
