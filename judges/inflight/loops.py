"""Loops while a run runs: rules over a request's tool calls as they arrive, each
found on the call that completes its pattern, so an intervention can go out before the next
step. Pure; the state per request is small (digests, not texts) and bounded.

The rules hold for agents in general: each is a run that is no longer learning anything from
its calls. None is "many calls" (long chains are normal for coding agents) nor "a call that
failed" (failing, then fixing, is how agents work).

- `repeated_call`: the same call (tool and arguments) with the same result `repeat` times in a
  row: the agent got the same answer and asked again, twice.
- `alternating_calls`: two calls taking turns, each with the same result every time, for
  `cycles` full turns (A B A B A B): the agent goes back and forth between two states.
- `repeated_failure`: the same call failing with the same error `same_failure` times in the
  run, in a row or not: retrying what cannot work.
- `no_new_result`: `no_new_result` calls in a row whose result (tool and what came back) the
  run had already seen, one of them at least a failure or a call repeated with its answer:
  whatever it does, it learns nothing new. Calls that each do something new and answer alike
  ("ok" to each update of a batch) are progress, not a loop.

Texts are compared as written, with whitespace runs folded: a result that carries a clock or a
counter is new each time, so the rules err on the side of not firing.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

KINDS = ("repeated_call", "alternating_calls", "repeated_failure", "no_new_result")
SEEN_MAX = 4096  # results (and failures) remembered per request; past it, no more are added
RECENT = 64  # the most calls the in-a-row rules may look back over (2 x the largest threshold)


@dataclass(frozen=True)
class LoopRules:
    """The thresholds (settings); 0 turns a rule off."""

    repeat: int = 3
    cycles: int = 3
    same_failure: int = 3
    no_new_result: int = 8

    def __post_init__(self) -> None:
        for name in ("repeat", "cycles", "same_failure", "no_new_result"):
            value = getattr(self, name)
            if value < 0 or value == 1 or value > RECENT // 2:
                raise ValueError(f"loop rule {name}={value}: 0 (off), or from 2 to {RECENT // 2}")


@dataclass(frozen=True)
class LoopFound:
    kind: str  # one of KINDS
    call: int  # the call that completed the pattern, 1 for the run's first call
    tool: str
    evidence: str  # what was repeated, in words (texts clipped; masked by whoever sends it)


def _fold(text: str | None) -> str:
    return " ".join(text.split()) if text else ""


def _digest(*parts: object) -> int:
    # Python's own 64-bit hash: the digests live in one process's memory and are only compared
    # there (never stored or sent), so its per-process seed does no harm, and it costs a third
    # of a cryptographic digest on the path of every tool call
    return hash(parts)


@dataclass
class LoopWatch:
    """One request's calls so far, as the rules need them."""

    rules: LoopRules = field(default_factory=LoopRules)
    calls: int = 0
    fired: set[str] = field(default_factory=set)
    # the last calls, as many as the in-a-row rules read (6 at the defaults, not RECENT)
    _recent: deque[tuple[int, int]] = field(init=False)
    _failures: Counter[int] = field(default_factory=Counter)
    _seen: set[int] = field(default_factory=set)
    _stale: int = 0
    _stuck: bool = False

    def __post_init__(self) -> None:
        r = self.rules
        self._recent = deque(maxlen=max(2, r.repeat, 2 * r.cycles))

    def observe(
        self,
        tool: str,
        args: str | None,
        success: bool,
        result: str | None = None,
        error: str | None = None,
    ) -> list[LoopFound]:
        """The rules this call completes (each kind at most once per request)."""
        self.calls += 1
        folded_args = _fold(args)
        call = _digest(tool, folded_args)
        outcome = _digest(success, _fold(result), _fold(error))
        seen = _digest(tool, outcome)
        again = _digest(call, outcome)  # this very call gave this before
        self._recent.append((call, outcome))
        if seen in self._seen:
            self._stale += 1
            # calls that each do something new and answer alike ("ok" to each of a batch of
            # updates) are progress: a streak counts once one of its calls failed or repeated
            self._stuck = self._stuck or not success or again in self._seen
        else:
            self._stale, self._stuck = 0, False
        for digest in (seen, again):
            if len(self._seen) < SEEN_MAX:
                self._seen.add(digest)
        found: list[LoopFound] = []

        def fire(kind: str, evidence: Callable[[str], str]) -> None:
            # the words are made only when a rule fires: clipping a long text on every call
            # would cost more than the rules
            if kind not in self.fired:
                self.fired.add(kind)
                named = f"{tool}({_clip(args)})" if args else tool
                found.append(LoopFound(kind, self.calls, tool, evidence(named)))

        r = self.rules
        if r.repeat and self._same_in_a_row(r.repeat):
            fire(
                "repeated_call",
                lambda named: f"{named} {r.repeat} times in a row, the same result each time",
            )
        if r.cycles and self._alternating(r.cycles):
            fire(
                "alternating_calls",
                lambda named: f"two calls taking turns {r.cycles} times, ending {named}",
            )
        if not success:
            failure = _digest(tool, folded_args, _fold(error or result))
            if failure in self._failures or len(self._failures) < SEEN_MAX:
                self._failures[failure] += 1
            if r.same_failure and self._failures[failure] >= r.same_failure:
                shown = error or result
                fire(
                    "repeated_failure",
                    lambda named: (
                        f"{named} failed {r.same_failure} times with {_clip(shown) or 'an error'}"
                    ),
                )
        if r.no_new_result and self._stale >= r.no_new_result and self._stuck:
            fire(
                "no_new_result",
                lambda _: f"{r.no_new_result} calls in a row with no result not seen before",
            )
        return found

    def rearm(self, kind: str) -> None:
        """Watch for `kind` again, from a fresh pattern: after a steer, the loop has to form
        anew (the calls before it no longer count towards it), while what the run has seen
        stays known (a result seen before the steer is not new after it)."""
        self.fired.discard(kind)
        self._recent.clear()
        if kind == "repeated_failure":
            self._failures = Counter({f: 0 for f in self._failures})
        if kind == "no_new_result":
            self._stale, self._stuck = 0, False

    def _same_in_a_row(self, n: int) -> bool:
        if len(self._recent) < n:
            return False
        last = list(self._recent)[-n:]
        return all(x == last[0] for x in last)

    def _alternating(self, cycles: int) -> bool:
        n = 2 * cycles
        if len(self._recent) < n:
            return False
        last = list(self._recent)[-n:]
        a, b = last[0], last[1]
        return a[0] != b[0] and all(x == (a if i % 2 == 0 else b) for i, x in enumerate(last))


def _clip(text: str | None, limit: int = 80) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
