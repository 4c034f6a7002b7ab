"""The installed package's version: pyproject.toml is the one place it is written."""

from __future__ import annotations

from importlib import metadata


def _package_version() -> str:
    try:
        return metadata.version("tracejudge")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


PACKAGE_VERSION = _package_version()
