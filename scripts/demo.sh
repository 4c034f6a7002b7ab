#!/usr/bin/env bash
# The demo command. Installs tracejudge into .venv (with the embedded broker), then runs
# `tracejudge demo`: broker, worker, five sample traces, a table of verdicts. Nothing else to
# start; set TRACEJUDGE_KAFKA_BOOTSTRAP to use your own Kafka instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh demo
exec .venv/bin/tracejudge demo "$@"
