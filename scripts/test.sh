#!/usr/bin/env bash
# The test command, in two tiers (the soak runs are scripts/soak.sh):
#   scripts/test.sh          the full tier, what CI runs: on a fresh machine it installs what it
#                            needs (.venv, redis-server, Chromium, the pinned Apache Kafka jars),
#                            checks formatting, lint, types and import rules, and runs every test,
#                            unit and integration, against a real Kafka broker, a three-node
#                            cluster and Redis that the tests start on loopback (or reuse, when
#                            TRACEJUDGE_KAFKA_BOOTSTRAP / TRACEJUDGE_REDIS_URL point at them);
#   scripts/test.sh --fast   the same checks and the unit tests only: no broker, no Redis, no
#                            browser, no Java.
# Tests run in parallel processes (pytest-xdist); the 30 slowest are listed at the end, then
# what the suite had to start twice. Extra arguments go to pytest, e.g.
#   scripts/test.sh --fast tests/test_rules.py -k filler      (-n 0: one process)
set -euo pipefail
cd "$(dirname "$0")/.."
tier=full
if [ "${1:-}" = "--fast" ]; then
  tier=fast
  shift
fi
scripts/bootstrap.sh dev,demo
if [ "$tier" = full ]; then
  scripts/ensure-services.sh >/dev/null
fi
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
PYTHONPATH=build/typecheck .venv/bin/lint-imports --no-cache >/dev/null || {
  PYTHONPATH=build/typecheck .venv/bin/lint-imports --no-cache
  exit 1
}
if [ "$tier" = fast ]; then
  # tests/retried.py: a unit test that starts a service fails, naming where it belongs
  TEST_TIER=fast exec .venv/bin/pytest -n 2 -m "not integration" "$@"
fi
# Three processes on two cores: integration tests spend most of their time waiting on brokers,
# workers and timeouts (two processes kept the cores 58 % busy, 17 min; three, 12 min).
# loadgroup: an integration module stays in one process (tests/conftest.py).
exec .venv/bin/pytest -n 3 --dist loadgroup "$@"
