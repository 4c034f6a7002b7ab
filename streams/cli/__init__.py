"""The `tracejudge` command line (the package's only entry point)."""

from tracejudge.streams.cli.main import main

__all__ = ["main"]
