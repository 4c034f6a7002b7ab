"""The `tracejudge` command line (the package's only entry point).

`main` is imported on first use, not here: importing the package (which `tracejudge`'s console
script, streams/cli/entry.py, does first) must not need the worker extra's modules, or the
client-only install's command fails before entry.py can say what to install."""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from tracejudge.streams.cli.main import main

        return main
    raise AttributeError(name)
