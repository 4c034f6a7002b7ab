#!/usr/bin/env bash
# The test command. On a fresh machine it installs everything it needs (.venv, redis-server,
# the pinned Apache Kafka jars), then checks formatting, lint, types and import rules, and runs
# every test: unit tests, and integration tests against a real Kafka broker and Redis that the
# tests start on loopback (or reuse, when TRACEJUDGE_KAFKA_BOOTSTRAP / TRACEJUDGE_REDIS_URL
# point at them).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/test_rules.py -k filler
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev,demo
scripts/ensure-services.sh >/dev/null
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
PYTHONPATH=build/typecheck .venv/bin/lint-imports --no-cache >/dev/null || {
  PYTHONPATH=build/typecheck .venv/bin/lint-imports --no-cache
  exit 1
}
exec .venv/bin/pytest "$@"
