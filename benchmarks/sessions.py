"""Conversations judged as conversations, on tau_airline split into sessions: each run becomes a
session of requests, one per user turn (the user's message is the request's goal, the agent's
work its steps, its reply the request's answer; the run's reward the session's outcome). The
requests are replayed through the worker (rules only) and their verdicts aggregated per session
(min, last, mean of the scores), against the session verdicts the worker's session agent made
(judges/sessions/judge.py). AUC of each against the reward; the replay's CPU per event with
sessions off and on, side by side.

    python -m benchmarks.sessions
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.data import TAU_AIRLINE, require

AGENT = "tau-airline-agent"


def split(rid: str, events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One request per user turn: from the user's message to the agent's reply to it."""
    turns: list[list[dict[str, Any]]] = []
    common = {"agent_name": AGENT, "session_key": rid}

    def final(turn: list[dict[str, Any]], output: str) -> dict[str, Any]:
        return {**common, "type": "final_response", "request_id": turn[0]["request_id"],
                "step_index": len(turn), "output": output}  # fmt: skip

    for e in events:
        kind = e["type"]
        if kind == "user_message":
            if turns and turns[-1][-1]["type"] != "final_response":
                turns[-1].append(final(turns[-1], ""))  # the user spoke again unanswered
            qid = f"{rid}#t{len(turns) + 1}"
            turns.append([{**common, "type": "task_started", "request_id": qid,
                           "step_index": 0, "goal": e.get("text") or ""}])  # fmt: skip
        elif not turns or kind == "task_started":
            continue
        elif kind == "final_response" or (
            kind == "reasoning_step" and e.get("action") == "respond"
        ):
            reply(turns[-1])  # a second reply in the turn: the first was a step of it
            text = e.get("output") if kind == "final_response" else e.get("intent_summary")
            turns[-1].append(final(turns[-1], text or ""))
        else:
            reply(turns[-1])  # the agent works on after replying: the same turn goes on
            step = {k: v for k, v in e.items() if k not in ("agent_name", "session_key", "task_id")}
            turns[-1].append({**common, **step, "request_id": turns[-1][0]["request_id"],
                              "step_index": len(turns[-1])})  # fmt: skip
    # the user's last words often get no answer ("Thank you! ###STOP###"): still a turn, a
    # request the worker closes when it goes quiet, as a chat's would be
    return turns


def reply(turn: list[dict[str, Any]]) -> None:
    """The turn's answer so far, made one of its steps (the agent went on after it)."""
    if turn[-1]["type"] == "final_response":
        said = turn.pop()
        turn.append({"agent_name": AGENT, "session_key": said["session_key"],
                     "type": "reasoning_step", "request_id": said["request_id"],
                     "step_index": len(turn), "phase": "synthesis",
                     "intent_summary": said["output"], "action": "respond"})  # fmt: skip


def main() -> int:
    from tracejudge.judges.agreement.tally import auc
    from tracejudge.settings import Settings
    from tracejudge.streams.replay.engine import replay

    data = require(TAU_AIRLINE, "this benchmark needs the shared tau_airline set")
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in (data / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        runs[event["request_id"]].append(event)
    labels = json.loads((data / "labels.json").read_text())
    ok = {rid: float(labels[rid]["reward"]) >= 0.5 for rid in runs}
    sessions = {rid: split(rid, events) for rid, events in runs.items()}
    records = [
        (e["request_id"].encode(), json.dumps(e).encode())
        for turns in sessions.values() for turn in turns for e in turn
    ]  # fmt: skip
    took: dict[bool, float] = {}
    results = {}
    for on in (False, True, False, True):  # side by side, twice: the second of each counts
        settings = Settings.model_validate({"redis_url": "", "sessions_enabled": on})
        started = time.process_time()
        results[on] = asyncio.run(replay(settings, records))
        took[on] = time.process_time() - started
    result = results[True]
    verdicts = result.evaluations
    scores: dict[str, dict[str, float]] = {"min": {}, "last": {}, "mean": {}, "session verdict": {}}
    final = 0
    for rid, turns in sessions.items():
        per = [verdicts[t[0]["request_id"]]["overall_score"] for t in turns]
        scores["min"][rid], scores["last"][rid] = min(per), per[-1]
        scores["mean"][rid] = sum(per) / len(per)
        verdict = result.sessions[(AGENT, rid)]
        final += verdict["final"]
        scores["session verdict"][rid] = verdict["overall_exact"]
    revisions = len(result.session_verdicts)
    print(f"{len(sessions)} sessions, {len(records)} events in {len(verdicts)} requests")
    print(f"{final} of {len(sessions)} sessions final; {revisions} session verdict revisions")
    print("| session score | AUC against the reward |\n|---|---|")
    for name, by_session in scores.items():
        print(f"| {name} | {auc(by_session, ok):.3f} |")
    per_event = {on: took[on] / len(records) * 1e6 for on in took}
    print(
        f"replay CPU per event: sessions off {per_event[False]:.1f} µs, "
        f"on {per_event[True]:.1f} µs (+{per_event[True] - per_event[False]:.1f} µs; "
        f"{(took[True] - took[False]) / len(verdicts) * 1e3:.2f} ms per request of a session)"
    )
    return 0 if final == len(sessions) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
