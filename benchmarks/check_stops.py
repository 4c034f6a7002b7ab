"""A team's check that stops a run, on the shared sets: is a run judged incomplete (and sent to a
reflection) for a stop whose call already went through?

For each set with its shipped example checks made to stop (`examples/checks/airline.toml` with
`on_step = "stop"` for tau_airline; `examples/checks/coding.py`, whose per-step check already
stops, for swe_java), the recorded runs are replayed once to find where each check would have
stopped them; each such run is then cut where the client would have cut it (its events up to
the crossing step, then the final response the client sends for a stop: "stopped: ...",
`stopped_by` the intervention) and judged with the same checks. Counted per set: the runs a
check stopped, those judged incomplete, those whose verdict says the stop left the goal
unreached (the stop's "before its answer: the goal was not reached", or "finish the user's
request" pending with the stop as its why), and those sent to a reflection.

    python -m benchmarks.check_stops            # this tree
    cd OTHER_TREE && .venv/bin/python /path/to/this/benchmarks/check_stops.py

It uses nothing newer than the replay engine, so a checkout of an older main runs it too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path.cwd()  # the tree whose tracejudge runs it (its examples/ are the checks)
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
CODING = "examples.checks.coding:no_edits_outside_the_repository"
STOPPED_FOR_GOAL = ("before its answer: the goal was not reached",)


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def encoded(events: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    return [(e["request_id"].encode(), json.dumps(e).encode()) for e in events]


async def judged(settings: Any, events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from tracejudge.streams.replay.engine import replay

    result = await replay(settings, encoded(events))
    return dict(result.evaluations)


def cut(events: list[dict[str, Any]], rid: str, at: int, iid: str, check: str) -> list[Any]:
    """The run as the client sends it when told to stop at step `at`."""
    kept = [
        e
        for e in events
        if e["request_id"] == rid
        and e.get("type") != "final_response"
        and (e.get("step_index") is None or e["step_index"] <= at)
    ]
    stop = f"stopped: This team's check {check} failed on this run: stop."
    final = {"type": "final_response", "request_id": rid, "step_index": at + 1,
             "output": stop, "stopped_by": iid}  # fmt: skip
    return [*kept, final]


def said_unreached(e: dict[str, Any]) -> bool:
    reasons = " ".join(e.get("reasons") or [])
    pending = [
        r for r in e.get("remaining") or []
        if r.get("step") == "finish the user's request" and "stopped by" in (r.get("why") or "")
    ]  # fmt: skip
    return any(s in reasons for s in STOPPED_FOR_GOAL) or bool(pending)


async def measure(name: str, checks: dict[str, str]) -> dict[str, Any]:
    from tracejudge.settings import Settings

    events = events_of(SHARED / name / "events.jsonl")
    settings = Settings.model_validate({"redis_url": "", **checks})
    full = await judged(settings, events)
    stops = [
        (rid, m)
        for rid, e in full.items()
        for m in e.get("interventions") or []
        if m.get("kind") == "check" and m.get("action") == "stop"
    ]
    runs: list[dict[str, Any]] = []
    for rid, m in stops:
        runs += cut(events, rid, int(m["at_step"]), m["intervention_id"], m["crossed"])
    after = await judged(settings, runs) if runs else {}
    stopped = [e for e in after.values() if any(
        m.get("kind") == "check" and m.get("stopped_after") for m in e.get("interventions") or []
    )]  # fmt: skip
    return {
        "set": name,
        "runs": len(full),
        "runs a check stopped": len({rid for rid, _ in stops}),
        "stopped runs judged": len(stopped),
        "incomplete": sum(bool(e["incomplete"]) for e in stopped),
        "incomplete for the stop": sum(said_unreached(e) for e in stopped),
        "reflection asked": sum(e.get("chain_final") is False for e in stopped),
        "passed": sum(bool(e["passed"]) for e in stopped),
    }


def main() -> int:
    if not SHARED.exists():
        sys.exit(f"{SHARED} not found: this benchmark reads the team's shared data sets")
    sys.path.insert(0, str(ROOT))  # examples.checks, as the worker imports them
    folder = Path(tempfile.mkdtemp(prefix="check-stops-"))
    airline = folder / "airline-stop.toml"
    text = (ROOT / "examples" / "checks" / "airline.toml").read_text()
    airline.write_text(text.replace("[default]\n", '[default]\non_step = "stop"\n', 1))
    rows = [
        asyncio.run(measure("tau_airline", {"checks_file": str(airline)})),
        asyncio.run(measure("swe_java", {"checks": CODING})),
    ]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
