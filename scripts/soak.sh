#!/usr/bin/env bash
# The soak command: what the full tier runs once, repeated, for a change to the consume or commit
# path. ./scripts/soak.sh [N] (default 3) runs, each on services of its own:
#   - every broker fault on the three-node cluster and both scaling variants, N times in a row;
#   - the kill -9 loops on the single broker (a worker killed and restarted under traffic, and
#     killed mid-replay), N times;
#   - the LLM judge under load against a server that allows fewer calls than it is sent, with its
#     goals checked (`benchmarks.judge_load --check`);
#   - the worker's CPU per event against bare Faust's, failing on a rise of more than 10 % over
#     the recorded baseline (`benchmarks.cpu_per_event --check`, benchmarks/cpu_per_event.json).
# Each part's figures are printed and kept under build/soak/ (one log per part, summary.txt);
# docs/delivery.md records the last results. Exits non-zero when any part failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
case "$runs" in
'' | *[!0-9]* | 0)
  echo "usage: scripts/soak.sh [N]  (N: runs of each fault, a whole number >= 1)" >&2
  exit 2
  ;;
esac
scripts/bootstrap.sh dev,demo
scripts/ensure-services.sh >/dev/null
out=build/soak
rm -rf "$out" && mkdir -p "$out"
export SOAK_RUNS="$runs"
failed=0
# one pytest per part: each starts its own broker or cluster, so a long soak never piles every
# run's topics onto one small-heap cluster
parts=(
  "cluster-faults tests/integration/test_cluster_faults.py"
  "cluster-scaling tests/integration/test_cluster_scaling.py"
  "kill-9-loops tests/integration/test_rebalance_gaps.py tests/integration/test_crash_recovery.py"
)
for part in "${parts[@]}"; do
  read -r name paths <<<"$part"
  echo "== $name: $paths ($runs runs)"
  # -s: the figures each run prints (time to verdict, gaps, duplicates) go to the log
  # shellcheck disable=SC2086
  .venv/bin/pytest -s $paths 2>&1 | tee "$out/$name.log" | grep -E "^(scale|fault|kill)|passed|failed" ||
    true
  if ! grep -qE "^=+ .*passed" "$out/$name.log" || grep -qE "^=+ .*(failed|error)" "$out/$name.log"; then
    failed=1
    echo "!! $name failed: see $out/$name.log"
  fi
done
echo "== judge-load: python -m benchmarks.judge_load --check"
if ! .venv/bin/python -m benchmarks.judge_load --check 2>&1 | tee "$out/judge-load.log"; then
  failed=1
  echo "!! judge-load failed: see $out/judge-load.log"
fi
echo "== cpu-per-event: python -m benchmarks.cpu_per_event --check"
if ! .venv/bin/python -m benchmarks.cpu_per_event --check 2>&1 | tee "$out/cpu-per-event.log"; then
  failed=1
  echo "!! cpu-per-event failed: see $out/cpu-per-event.log"
fi
{
  echo "soak of $(git rev-parse --short HEAD) on $(date -u '+%Y-%m-%d %H:%M UTC'), $runs runs"
  grep -hE "^=+ .*(passed|failed)" "$out"/*.log || true
  grep -hE "^(scale|fault|kill)" "$out"/*.log || true
  grep -hE "^(lowest CPU|baseline)" "$out/cpu-per-event.log" || true
} >"$out/summary.txt"
cat "$out/summary.txt"
exit "$failed"
