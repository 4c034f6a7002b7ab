"""The one root exception of tracejudge and its data-carrying children."""

from __future__ import annotations


class TracejudgeError(Exception):
    """Root of every error tracejudge raises on purpose."""


class InvalidEvent(TracejudgeError):
    """A message that cannot be decoded or validated against the event contract."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class ConfigurationError(TracejudgeError):
    """Settings or broker state that the worker cannot run with."""


class DependencyUnreachable(ConfigurationError):
    """A service a command needs (Kafka) does not answer: nothing listens, or it times out.
    A refusal (credentials, an untrusted certificate) stays a ConfigurationError: the settings
    are what to fix."""
