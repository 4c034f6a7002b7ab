.PHONY: help demo test fast soak check format bench schema

help:  ## list targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

demo:  ## run the demo on the embedded broker
	./scripts/demo.sh

test:  ## install what is needed, then lint, types, unit and integration tests (what CI runs)
	./scripts/test.sh

fast:  ## lint, types, import rules and the unit tests: no broker, Redis, browser or Java
	./scripts/test.sh --fast

soak:  ## each cluster fault, scaling variant and kill -9 loop 3 times; the judge under load
	./scripts/soak.sh 3

check:  ## formatting, lint, types and import rules only
	./scripts/bootstrap.sh dev,demo
	.venv/bin/ruff format --check . && .venv/bin/ruff check . && .venv/bin/mypy
	PYTHONPATH=build/typecheck .venv/bin/lint-imports

format:  ## format and fix what ruff can
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

schema:  ## regenerate the published JSON Schemas
	.venv/bin/tracejudge schema --out models/schemas

bench:  ## changelog growth and end-to-end latency on the real broker
	./scripts/bootstrap.sh dev,demo && ./scripts/ensure-services.sh >/dev/null
	.venv/bin/python -m benchmarks.pipeline
