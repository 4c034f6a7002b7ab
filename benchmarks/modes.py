"""Failure modes announced on the stream, on the shared sets with failures injected part way.

The three labelled sets (tau_airline, swe_java, who_when_ag2: three agents) are streamed through
the worker's own handlers (rules only, as `replay` does) at a steady rate, each run's events on
a clock of their own (`GAP_S` between runs, passes over the sets in a new order each), so the
modes agent sees the times a live stream would give. From `INJECT_AT_S`, one run of each of four
injected failures every `INJECT_EVERY_S` for `INJECT_FOR_S`:
- `tool_503`: customer service runs whose get_reservation_details starts answering HTTP 503;
- `validation`: update_reservation_flights refused with a validation error, ids varying;
- `loop`: coding runs that start calling search_dir with the same arguments again and again;
- `no_confirmation`: a reservation cancelled without the user's go-ahead.
Each is built from a real run of its set (its start kept, the failure put in, the answer an
apology or a confirmation). Measured, per injected kind: the announcement of its mode against
its fifth run (on the verdicts' clock, and the wall time the handler took), the share of the
runs its mode grouped in the window that are that kind (purity), the share of its runs that
went to that mode; and every announcement before the injection (there should be none). Then
the cost: CPU per event of the same stream with modes off and on, side by side.

    python -m benchmarks.modes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from benchmarks.data import SHARED_DATA, require

SETS = {"tau_airline": "airline-support", "swe_java": "java-coder", "who_when_ag2": "ag2-team"}
GAP_S = 1.5  # between two runs' starts: 40 runs a minute across the three agents
PASSES = 3
INJECT_AT_S = 1500.0  # 25 minutes in: past the 10 minutes an agent is first watched
INJECT_EVERY_S = 30.0
INJECT_FOR_S = 600.0
STEP_S = 0.05
KINDS = ("tool_503", "validation", "loop", "no_confirmation")
START = 1_800_000_000.0
SEED = 67


def runs_of(path: Path) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            event = json.loads(line)
            runs[event["request_id"]].append(event)
    return dict(runs)


def _as(events: list[dict[str, Any]], rid: str, agent: str) -> list[dict[str, Any]]:
    return [{**e, "request_id": rid, "agent_name": agent, "session_key": ""} for e in events]


def _cut(events: list[dict[str, Any]], tool: str) -> tuple[list[dict[str, Any]], int] | None:
    """The run up to its first call of `tool` (that call excluded)."""
    for n, e in enumerate(events):
        if e["type"] == "tool_call" and e.get("tool") == tool:
            return [x for x in events[:n] if x["type"] != "final_response"], n
    return None


def _call(rid: str, at: int, tool: str, args: str, ok: bool, error: str = "") -> dict[str, Any]:
    return {"type": "tool_call", "request_id": rid, "step_index": at, "tool": tool,
            "args_summary": args, "success": ok, "error": error,
            "result_preview": "" if not ok else "ok"}  # fmt: skip


def _final(rid: str, at: int, text: str) -> dict[str, Any]:
    return {"type": "final_response", "request_id": rid, "step_index": at, "output": text}


def _failing(
    base: list[dict[str, Any]], rid: str, tool: str, args: dict[str, str], error: str, sorry: str
) -> list[dict[str, Any]] | None:
    """The run up to its first call of `tool`, that call failing with `error`, then an apology."""
    cut = _cut(base, tool)
    if cut is None:
        return None
    events, n = cut
    failed = _call(rid, n, tool, json.dumps(args), False, error)
    return [*events, failed, _final(rid, n + 1, sorry)]


def injected(
    kind: str, base: list[dict[str, Any]], rid: str, rng: random.Random
) -> list[dict[str, Any]] | None:
    """A run of an injected failure, from a real run of its set (None: the run does not fit)."""
    ident = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
    hexid = "".join(rng.choice("0123456789abcdef") for _ in range(12))
    if kind == "tool_503":
        error = f"HTTP 503 Service Unavailable: reservations-api (trace {hexid})"
        sorry = "I'm sorry, I cannot reach our reservation system right now. Try again later."
        return _failing(base, rid, "get_reservation_details", {"reservation_id": ident},
                        error, sorry)  # fmt: skip
    if kind == "validation":
        flight = f"HAT{rng.randint(100, 999)}"
        error = (f"ValidationError: reservation {ident} cannot change to flight {flight} on "
                 f"2024-05-{rng.randint(10, 28)}: fare class basic_economy_{rng.randint(1, 9)} "
                 "is not modifiable")  # fmt: skip
        return _failing(base, rid, "update_reservation_flights",
                        {"reservation_id": ident, "flight": flight}, error,
                        "Sorry, I was not able to change your flights.")  # fmt: skip
    if kind == "loop":
        head = [e for e in base if e["type"] != "final_response"][:6]
        n = len(head)
        args = json.dumps({"term": "TimeZoneHandler", "dir": "src/main/java"})
        calls = [_call(rid, n + k, "search_dir", args, True) for k in range(8)]
        return [*head, *calls, _final(rid, n + 8, "")]
    if kind == "no_confirmation":
        cut = _cut(base, "cancel_reservation")
        if cut is None:
            return None
        events, n = cut
        asked = [k for k, e in enumerate(events) if e["type"] == "user_message"]
        if len(asked) < 2:
            return None
        # the user's last words before the cancellation become a question, not a yes
        question = {**events[asked[-1]], "text": f"Before anything else: is reservation {ident} "
                                                 "refundable if I cancel it?"}  # fmt: skip
        events = [*events[: asked[-1]], question, *events[asked[-1] + 1 :]]
        return [*events, _call(rid, n, "cancel_reservation",
                               json.dumps({"reservation_id": ident}), True),
                _final(rid, n + 1, f"Your reservation {ident} has been cancelled.")]  # fmt: skip
    raise ValueError(kind)


def schedule(
    sets: dict[str, dict[str, list[dict[str, Any]]]], seed: int = SEED
) -> list[tuple[float, str, str, list[dict[str, Any]]]]:
    """(start time, kind, request id, events) in time order: the baseline passes and the
    injected runs ("" kind: baseline)."""
    rng = random.Random(seed)
    plan: list[tuple[float, str, str, list[dict[str, Any]]]] = []
    everything = [(name, rid) for name, runs in sets.items() for rid in runs]
    t = START
    for p in range(PASSES):
        rng.shuffle(everything)
        for name, rid in everything:
            qid = f"{rid}#p{p}"
            plan.append((t, "", qid, _as(sets[name][rid], qid, SETS[name])))
            t += GAP_S
    bases = {
        "tool_503": ("tau_airline", "get_reservation_details"),
        "validation": ("tau_airline", "update_reservation_flights"),
        "loop": ("swe_java", None),
        "no_confirmation": ("tau_airline", "cancel_reservation"),
    }
    for k, kind in enumerate(KINDS):
        name, tool = bases[kind]
        pool = [r for r, ev in sets[name].items()
                if tool is None or any(e.get("tool") == tool for e in ev)]  # fmt: skip
        n, at = 0, START + INJECT_AT_S + k * (INJECT_EVERY_S / len(KINDS))
        while at < START + INJECT_AT_S + INJECT_FOR_S:
            qid = f"injected:{kind}:{n}"
            events = injected(kind, sets[name][rng.choice(pool)], qid, rng)
            if events is not None:
                plan.append((at, kind, qid, _as(events, qid, SETS[name])))
                n += 1
                at += INJECT_EVERY_S
    plan.sort(key=lambda p: p[0])
    return plan


async def stream(
    plan: list[tuple[float, str, str, list[dict[str, Any]]]], modes_on: bool
) -> dict[str, Any]:
    from tracejudge.models import names
    from tracejudge.models.modes import ModeTick
    from tracejudge.settings import Settings
    from tracejudge.streams.kafka.records import InRecord
    from tracejudge.streams.replay.engine import CollectingChannel, MemoryLookup, _channels, _stop
    from tracejudge.streams.worker.context import Tables, WorkerContext

    now = [START]
    settings = Settings.model_validate(
        {"redis_url": "", "modes_enabled": modes_on, "sessions_enabled": False}
    )
    channels = _channels()
    ctx = WorkerContext.build(settings, channels, Tables({}, {}, {}), None,
                              lookup=MemoryLookup(), clock=lambda: now[0], exit=_stop)  # fmt: skip
    ctx.partitions.observe({p: 0 for p in range(settings.partitions)}, {})
    topic, runs_topic = settings.topic(names.EVENTS), settings.topic(names.MODE_RUNS)
    runs_sent = channels.mode_runs
    done, count, handler_s, next_tick = 0, 0, 0.0, START
    cpu = time.process_time()
    for at, _kind, rid, events in plan:
        for n, event in enumerate(events):
            now[0] = at + n * STEP_S
            count += 1
            value = json.dumps({**event, "ts": now[0]}).encode()
            await ctx.errors.run(InRecord(topic, 0, count, rid.encode(), value, {}), ctx.events)
        if rid in ctx.store.open:  # no answer: closed as the idle timeout would
            await ctx.events.closer.close(rid, "idle_timeout")
        await asyncio.sleep(0)  # the acknowledged sends' callbacks
        handler = ctx.modes
        if handler is None or not isinstance(runs_sent, CollectingChannel):
            continue
        began = time.perf_counter()
        while done < len(runs_sent.sent):
            agent_key, run = runs_sent.sent[done]
            done += 1
            await ctx.errors.run(InRecord(runs_topic, 0, done, agent_key, run, {}), handler)
        if now[0] >= next_tick:  # the timer's tick, every 15 s
            next_tick = now[0] + 15.0
            for agent in handler.due(now[0]):
                tick = ModeTick(agent_name=agent or None, at=now[0]).model_dump_json().encode()
                await handler(InRecord(runs_topic, 0, 0, agent.encode(), tick, {}))
        handler_s += time.perf_counter() - began
    cpu = time.process_time() - cpu
    assert isinstance(channels.evaluations, CollectingChannel)
    assert isinstance(channels.modes, CollectingChannel)
    evaluations, alerts = channels.evaluations.values(), channels.modes.values()
    return {"events": count, "cpu_s": cpu, "handler_s": handler_s, "runs": done,
            "evaluations": evaluations, "alerts": alerts}  # fmt: skip


def report(
    plan: list[tuple[float, str, str, list[dict[str, Any]]]], result: dict[str, Any]
) -> bool:
    kind_of = {rid: kind for _, kind, rid, _ in plan}
    final = {e["request_id"]: e for e in result["evaluations"] if e.get("final")}
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(final.values(), key=lambda e: e["ts"]):
        by_kind[kind_of[e["request_id"]]].append(e)
    alerts = result["alerts"]
    before = [a for a in alerts if a["ts"] < START + INJECT_AT_S and a["kind"] != "quiet"]
    ok = not before
    print(f"streamed {len(plan)} runs ({result['events']} events) over "
          f"{(plan[-1][0] - START) / 60:.0f} min of the verdicts' clock; "
          f"{len(alerts)} announcements")  # fmt: skip
    print(f"announced before the injection (unchanged traffic): {len(before)}")
    for a in before:
        print(f"   at {(a['ts'] - START) / 60:.1f} min {a['kind']}: {a['message'][:150]}")
    injected_modes = set()
    for kind in KINDS:
        runs = by_kind[kind]
        keys = Counter(e["mode"]["key"] for e in runs if e.get("mode"))
        if not keys:
            print(f"{kind:16s} no mode")
            ok = False
            continue
        key, grouped = keys.most_common(1)[0]
        injected_modes.add(key)
        mine = [e for e in runs if (e.get("mode") or {}).get("key") == key]
        fifth = mine[min(4, len(mine) - 1)]["ts"]
        said = [a for a in alerts if a["mode"]["key"] == key and a["kind"] != "quiet"]
        quiet = [a for a in alerts if a["mode"]["key"] == key and a["kind"] == "quiet"]
        first = said[0] if said else None
        # purity: of the runs its mode held in the window it was announced in, this kind's
        start = 0.0 if first is None else first["ts"] - first["window_s"]
        end = 0.0 if first is None else first["ts"]
        held = [e for e in final.values() if (e.get("mode") or {}).get("key") == key]
        window = [e for e in held if start < e["ts"] <= end]
        pure = sum(kind_of[e["request_id"]] == kind for e in window) / max(1, len(window))
        # and over the injection: the mode's runs while the failure was being injected
        began = START + INJECT_AT_S
        during = [e for e in held if began <= e["ts"] < began + INJECT_FOR_S]
        over = sum(kind_of[e["request_id"]] == kind for e in during) / max(1, len(during))
        others = Counter(kind_of[e["request_id"]] or "unchanged traffic" for e in window
                         if kind_of[e["request_id"]] != kind)  # fmt: skip
        lag = None if first is None else first["ts"] - fifth
        # the runs it groups: those of the mode while the failure was injected (in the window
        # it was announced in, a run of the unchanged traffic that had the same failure
        # weighs one in six; both are printed)
        good = first is not None and lag is not None and lag <= 60 and over >= 0.9
        ok = ok and good
        print(f"{kind:16s} {'ok ' if good else 'BAD'} announced "
              f"{'never' if first is None else first['kind']} "
              f"{'' if lag is None else f'{lag:.1f} s after its fifth run'}; purity "
              f"{pure:.0%} of {len(window)} in the window ({over:.0%} of {len(during)} over the "
              f"injection); {grouped}/{len(runs)} of its runs in the mode; "
              f"quiet {'announced' if quiet else 'not announced'}")  # fmt: skip
        if others:
            print(f"{'':16s} also in the window: {dict(others)}")
        print(f'{"":16s} "{(first or {"mode": {"name": "-"}})["mode"]["name"][:110]}"')
    after = [a for a in alerts if a["ts"] >= START + INJECT_AT_S and a["kind"] != "quiet"
             and a["mode"]["key"] not in injected_modes]  # fmt: skip
    print(f"other announcements after the injection began: {len(after)}")
    for a in after[:5]:
        print(f"   {a['kind']}: {a['message'][:150]}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED, help="the order of the passes")
    parser.add_argument("--no-cost", action="store_true", help="skip the CPU comparison")
    args = parser.parse_args()
    sets = {name: runs_of(require(SHARED_DATA / name / "events.jsonl", "no data")) for name in SETS}
    plan = schedule(sets, args.seed)
    on = asyncio.run(stream(plan, True))
    ok = report(plan, on)
    if args.no_cost:
        return 0 if ok else 1
    off = asyncio.run(stream(plan, False))
    again = asyncio.run(stream(plan, True))
    per = {name: 1e6 * min(r["cpu_s"] for r in rs) / rs[0]["events"]
           for name, rs in (("off", [off]), ("on", [on, again]))}  # fmt: skip
    off2 = asyncio.run(stream(plan, False))
    per["off"] = min(per["off"], 1e6 * off2["cpu_s"] / off2["events"])
    handler = 1e6 * min(on["handler_s"], again["handler_s"]) / max(1, on["runs"])
    print(f"CPU per event, the whole stream (lowest of two each): modes off {per['off']:.1f} µs, "
          f"on {per['on']:.1f} µs; the modes agent {handler:.0f} µs per verdict "
          f"({on['runs']} verdicts, {on['events']} events)")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
