#!/usr/bin/env bash
# ops-plot.sh makes docs/ops-demo.svg (and .csv), the chart in the README's
# operations section: it runs the real engine through `cdcapply demo` with
# its metrics endpoint on, scrapes /metrics every second with
# deploy/opsplot until the demo ends, and draws lag, freshness, throughput
# and the Delta version. Arguments are passed to the demo (defaults below:
# a feed faster than this machine applies, so a backlog builds and drains,
# then an idle minute without heartbeats, so freshness ages).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
addr=${OPSPLOT_ADDR:-127.0.0.1:19464}
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
	args=(-events 60000 -keys 10000 -rate 3000 -linger 60s)
fi
mkdir -p docs .cache/opsplot
go build -o .cache/opsplot/cdcapply ./cmd/cdcapply
go build -o .cache/opsplot/opsplot ./deploy/opsplot
.cache/opsplot/cdcapply demo -dir .cache/opsplot/demo -metrics-address "$addr" "${args[@]}" >.cache/opsplot/demo.log 2>&1 &
demo=$!
trap 'kill "$demo" 2>/dev/null || true' EXIT
.cache/opsplot/opsplot -url "http://$addr/metrics" -out docs/ops-demo.svg -csv docs/ops-demo.csv \
	-title "cdcapply demo: the series an SRE watches, scraped from /metrics every 1s" \
	-caption "made by: scripts/ops-plot.sh ${args[*]}
= cdcapply demo -metrics-address $addr ${args[*]}
(the real engine; in-process Kafka, 3 partitions; scraped every 1s by deploy/opsplot)"
wait "$demo"
trap - EXIT
cat .cache/opsplot/demo.log
