#!/usr/bin/env bash
# One environment per instrumentation family the tests run for real (tests/instrumented/):
# .venv-instrumented/<family>, installed with uv from the family's lock
# (tests/instrumented/<family>/requirements.txt), on the interpreter of .venv. Idempotent: a
# family is installed again only when its lock changed. Families as arguments, default all.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
base="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
if [ "$#" -eq 0 ]; then
  set -- $(cd tests/instrumented && ls -d */ | tr -d / | while read -r f; do
    [ -f "tests/instrumented/$f/requirements.txt" ] && echo "$f"; done)
fi
for family in "$@"; do
  lock="tests/instrumented/$family/requirements.txt"
  venv=".venv-instrumented/$family"
  stamp="$venv/.installed-$(sha256sum "$lock" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    "$uv" venv -q --python "$base" "$venv"
    "$uv" pip install -q --python "$venv/bin/python" -r "$lock"
    touch "$stamp"
  fi
done
