// Package deploy holds the operations files of cdcapply: the Grafana
// dashboard (grafana/), the Prometheus alert rules and their promtool unit
// tests (prometheus/), the Kubernetes manifests (kubernetes/) and the
// systemd unit (systemd/). The package has no code of its own; its tests
// check those files against the metrics the engine really registers and
// run the validators (promtool, kubernetes-validate, the ServiceMonitor
// CRD schema, systemd-analyze). design/deploy.md is the record.
package deploy
