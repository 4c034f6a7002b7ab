"""The `tracejudge` command's entry point: an install without the worker's dependencies (the bare
`pip install tracejudge` an agent uses) gets a line saying what to install, not a traceback."""

from __future__ import annotations

import sys

USAGE_OR_CONFIGURATION = 2
# not on a package index: installed from a clone (or a git URL) with the extra
WORKER_EXTRA = "pip install '/path/to/tracejudge[worker]' (the worker extra)"
# top-level modules of the `worker` extra (pyproject.toml): missing one means the extra is
WORKER_MODULES = frozenset(
    {
        "aiohttp",
        "aiokafka",
        "cramjam",
        "ddsketch",
        "detect_secrets",
        "dotenv",
        "faust",
        "google",
        "grpc",
        "httpx",
        "jinja2",
        "mode",
        "opencc",
        "opentelemetry",
        "orjson",
        "phonenumbers",
        "prometheus_client",
        "re2",
        "pydantic_core",
        "pydantic_settings",
        "redis",
        "rocksdict",
        "stdnum",
    }
)


def main() -> int:
    try:
        from tracejudge.streams.cli.main import main as run

        return run()
    except BrokenPipeError:
        # the reader went away (`tracejudge judge --print-prompt | head`): nothing to say it to
        sys.stderr.close()
        return 0
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in WORKER_MODULES:
            raise
        sys.stderr.write(
            f"tracejudge: the command needs the worker's dependencies ({exc.name} is not "
            f"installed): {WORKER_EXTRA}\n"
        )
        return USAGE_OR_CONFIGURATION
