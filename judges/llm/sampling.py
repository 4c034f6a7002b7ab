"""Deterministic sampling: the same request id is always in, or always out.

Every rate is tested against one number per request, a hash of its id: a worker that sees the
request again (a redelivery, a replay, a restart) selects it the same way, and raising a rate
only adds requests to those already selected.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from fnmatch import fnmatchcase


def bucket(request_id: str) -> float:
    """Where the request falls in [0, 1): it is in every sample whose rate is above this."""
    digest = hashlib.sha256(request_id.encode("utf-8")).digest()[:8]
    return int.from_bytes(digest, "big") / 2**64


def sampled(request_id: str, rate: float) -> bool:
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return bucket(request_id) < rate


@dataclass(frozen=True)
class RateRule:
    """`agent=rate` or `agent@version=rate`; both sides are glob patterns (`*`, `?`, `[ab]`)."""

    agent: str
    version: str | None
    rate: float

    @property
    def key(self) -> str:
        return self.agent if self.version is None else f"{self.agent}@{self.version}"

    def matches(self, agent: str | None, version: str | None) -> bool:
        if agent is None or not fnmatchcase(agent, self.agent):
            return False
        # an entry with a version is about requests that say theirs
        return self.version is None or (version is not None and fnmatchcase(version, self.version))


def parse_rates(text: str) -> tuple[RateRule, ...]:
    """`planner=0.5,planner@2.*=1,research-*=0.05`: a ValueError names the first bad entry."""
    rules: list[RateRule] = []
    seen: set[str] = set()
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue  # a trailing comma, or an empty setting
        key, eq, value = entry.rpartition("=")
        agent, at, version = key.strip().partition("@")
        agent, version = agent.strip(), version.strip()
        if not eq or not agent or (at and not version):
            raise ValueError(
                f"entry {entry!r}: expected agent=rate or agent@version=rate "
                "(glob patterns, rate from 0 to 1)"
            )
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        if not 0.0 <= rate <= 1.0:  # NaN fails this too
            raise ValueError(f"entry {entry!r}: the rate must be a number from 0 to 1")
        rule = RateRule(agent, version if at else None, rate)
        if rule.key in seen:
            raise ValueError(f"entry {entry!r}: {rule.key} is given twice")
        seen.add(rule.key)
        rules.append(rule)
    return tuple(rules)


def rate_for(
    rules: tuple[RateRule, ...], default: float, agent: str | None, version: str | None
) -> tuple[float, RateRule | None]:
    """The rate of a request's agent and version, and the entry that gave it (None: the
    default). Entries with a version come first, then the others, each in the order given:
    the first that matches decides."""
    ordered = [r for r in rules if r.version is not None] + [r for r in rules if r.version is None]
    rule = next((r for r in ordered if r.matches(agent, version)), None)
    return (default, None) if rule is None else (rule.rate, rule)


@dataclass(frozen=True)
class Selection:
    """Which closed requests the LLM judge reads: every flagged one (when `flagged` is on), and
    of the rest the share its agent's rate says."""

    rate: float = 1.0
    rates: tuple[RateRule, ...] = ()
    flagged: bool = True

    def in_sample(self, request_id: str, agent: str | None, version: str | None) -> bool:
        rate, _ = rate_for(self.rates, self.rate, agent, version)
        return sampled(request_id, rate)

    def why_not(
        self, request_id: str, agent: str | None, version: str | None, flagged: bool
    ) -> str | None:
        """None when the request is selected; else why not, in a line for its reasons."""
        rate, rule = rate_for(self.rates, self.rate, agent, version)
        if sampled(request_id, rate) or (flagged and self.flagged):
            return None
        whom = "" if rule is None else f" for {rule.key}"
        where = f"sample rate 0{whom}" if rate <= 0 else f"outside the {rate * 100:g}% sample{whom}"
        if flagged:  # and flagged requests are sampled like the rest
            return f"LLM judge: not selected ({where}; flagged ones are sampled too)"
        return f"LLM judge: not selected (passed the rules; {where})"
