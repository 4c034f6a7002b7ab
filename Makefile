.PHONY: help demo test check format bench schema

help:  ## list targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

demo:  ## run the demo on the embedded broker
	./scripts/demo.sh

test:  ## install what is needed, then lint, types, unit and integration tests
	./scripts/test.sh

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
