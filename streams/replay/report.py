"""What `tracejudge replay` prints: a summary of one run, two runs side by side, agreement
with ground-truth labels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, TypeVar

from tracejudge.judges.agreement.tally import auc, label_ok
from tracejudge.settings import Settings
from tracejudge.streams.agreement.actions import steer_lines, steers_json
from tracejudge.streams.agreement.report import agreement_json, agreement_lines
from tracejudge.streams.replay.engine import ReplayResult
from tracejudge.streams.shared.metrics import quadrant

K = TypeVar("K", str, tuple[str, str])  # what `_moved` counts: a rule, or (agent, mode)

BANDS = ((0, 19), (20, 39), (40, 59), (60, 79), (80, 100))
QUADRANTS = ("success_complete", "success_incomplete", "failure_complete", "failure_incomplete")


def _quadrant(e: Mapping[str, Any]) -> str:
    return quadrant(bool(e["success"]), bool(e["incomplete"]))


def describe(name: str, result: ReplayResult) -> str:
    s = result.settings
    judge = f"LLM judge {s.llm_model}" if s.llm_judge_enabled else "rules only"
    return (
        f"{name}: {judge}, warn threshold {s.warn_threshold}, rule weight {s.rule_weight}, "
        + checks_in(s)
    )


def checks_in(settings: Settings) -> str:
    """The team's checks a replay ran with, in words: where they came from, how many."""
    book = settings.check_book()
    if book.empty:
        return "no team checks"
    named = [
        f"{len(book.common)} in code" if book.common else "",
        f"checks file {settings.checks_file}" if settings.checks_file else "",
    ]
    return "team checks: " + ", ".join(n for n in named if n)


def summary(result: ReplayResult) -> list[str]:
    evs = list(result.evaluations.values())
    scores = [e["overall_score"] for e in evs]
    bands = "  ".join(f"{lo}-{hi}: {sum(1 for x in scores if lo <= x <= hi)}" for lo, hi in BANDS)
    quads = Counter(_quadrant(e) for e in evs)
    alerts = Counter(a["kind"] for a in result.alerts)
    passed = sum(1 for e in evs if e["passed"])
    mean = sum(scores) / len(scores) if scores else float("nan")
    return [
        f"{len(evs)} requests from {result.events} events ({result.dead_letters} dead-lettered)",
        f"scores    {bands}   (mean {mean:.1f})",
        "quadrants " + "  ".join(f"{q} {quads.get(q, 0)}" for q in QUADRANTS),
        f"passed    {passed}/{len(evs)}   reflections {len(result.reflections)}   "
        f"early stops {len(result.early_stops)}   interventions {len(result.interventions)}",
        "alerts    " + ("  ".join(f"{k} {n}" for k, n in sorted(alerts.items())) or "none"),
        *steer_report(result),
        *outcome_lines(result),
        *session_lines(result),
        *mode_lines(result),
    ]


def _modes(evaluations: Mapping[str, Any]) -> Counter[tuple[str, str]]:
    """(agent, mode name) -> runs: each verdict's failure mode (docs/modes.md)."""
    return Counter(
        (str(e.get("agent_name") or "(none)"), str(e["mode"]["name"]))
        for e in evaluations.values()
        if e.get("mode")
    )


def mode_lines(result: ReplayResult, top: int = 8) -> list[str]:
    """The failure modes the verdicts fell in, the largest first, and those announced (on the
    verdicts' own clock: a replay of a recording announces what its times say)."""
    modes = _modes(result.evaluations)
    if not modes:
        return []
    lines = [f"modes     {len(modes)} failure modes over {sum(modes.values())} runs; largest:"]
    lines += [
        f"  {n:>5}  {agent[:24]}: {name[:100]}" for (agent, name), n in modes.most_common(top)
    ]
    said = Counter(a["kind"] for a in result.mode_alerts)
    if said:
        lines.append("announced " + "  ".join(f"{k} {n}" for k, n in sorted(said.items())))
    return lines


def mode_outcomes(result: ReplayResult, ok: Mapping[str, bool], top: int = 8) -> list[str]:
    """Per failure mode, the share of its labelled runs that truly failed: a mode that is
    mostly false alarms shows as such."""
    runs: dict[tuple[str, str], list[bool]] = {}
    for rid, good in ok.items():
        mode = result.evaluations[rid].get("mode")
        if mode:
            agent = str(result.evaluations[rid].get("agent_name") or "(none)")
            runs.setdefault((agent, str(mode["name"])), []).append(good)
    if not runs:
        return []
    ranked = sorted(runs.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]
    lines = ["modes     truly failed, per mode (labelled runs)"]
    for (agent, name), oks in ranked:
        failed = sum(not g for g in oks)
        lines.append(
            f"  {failed:>4}/{len(oks):<4} ({failed / len(oks):>4.0%})  {agent[:24]}: {name[:90]}"
        )
    return lines


def session_lines(result: ReplayResult) -> list[str]:
    """The sessions' final verdicts, where the requests named sessions (none: no line)."""
    finals = list(result.sessions.values())
    if not finals:
        return []
    passed = sum(1 for v in finals if v["passed"])
    incomplete = sum(1 for v in finals if v["incomplete"])
    return [
        f"sessions  {len(finals)} ({len(result.session_verdicts)} revisions)   "
        f"passed {passed}/{len(finals)}   incomplete {incomplete}"
    ]


def steer_report(result: ReplayResult) -> list[str]:
    """What each steer did, per agent and loop rule (the figures the live worker serves);
    nothing when no loop was steered."""
    steers = {} if result.actions is None else steers_json(result.actions)
    if not steers:
        return []
    return ["steers    what each did, per agent and loop rule", *steer_lines(steers)]


def outcome_lines(result: ReplayResult) -> list[str]:
    """The agreement of the file's outcome events with the replayed verdicts, per agent (the
    figures the live worker serves)."""
    if result.agreement is None:
        return []
    by_agent = agreement_json(result.agreement)
    if not by_agent:
        return ["outcomes  none joined to a replayed verdict"]
    return ["outcomes  agreement per agent (the file's outcome events)", *agreement_lines(by_agent)]


def agreement(result: ReplayResult, labels: Mapping[str, Any]) -> list[str]:
    ok = {rid: v for rid, raw in labels.items() if (v := label_ok(raw)) is not None}
    ok = {rid: v for rid, v in ok.items() if rid in result.evaluations}
    if not ok:
        return ["labels: none of the replayed requests is labelled"]
    evs = result.evaluations
    flagged = {
        r: (not evs[r]["passed"]) or (not evs[r]["success"]) or evs[r]["incomplete"] for r in ok
    }
    bad = [r for r in ok if not ok[r]]
    good = [r for r in ok if ok[r]]

    def share(rs: list[str]) -> str:
        hit = sum(flagged[r] for r in rs)
        return f"{hit}/{len(rs)}" + (f" ({hit / len(rs):.0%})" if rs else "")

    score = auc({r: float(evs[r]["overall_score"]) for r in ok}, ok)
    return [
        f"labels    {len(ok)} labelled ({len(good)} ok, {len(bad)} failed)   AUC {score:.3f}",
        f"flagged   failed runs {share(bad)}   ok runs {share(good)}"
        "   (flagged: not passed, not success or incomplete)",
        *_dimension_lines(evs, ok),
        *mode_outcomes(result, ok),
    ]


def _dimension_lines(evs: Mapping[str, Any], ok: Mapping[str, bool]) -> list[str]:
    """A line per team dimension the judge scored on labelled runs: its own AUC."""
    scored: dict[str, dict[str, float]] = {}
    for rid in ok:
        criteria = (evs[rid].get("dimension_scores") or {}).get("criteria") or {}
        for name, value in criteria.items():
            scored.setdefault(name, {})[rid] = float(value)
    lines = []
    for name, scores in sorted(scored.items()):
        found = auc(scores, {r: ok[r] for r in scores})
        shown = "-" if found != found else f"{found:.3f}"  # NaN: ok and failed runs needed
        lines.append(f"dimension:{name}   {len(scores)} scored   AUC {shown}")
    return lines


def comparison(a: ReplayResult, b: ReplayResult, top: int = 10) -> list[str]:
    both = sorted(set(a.evaluations) & set(b.evaluations))
    ea, eb = a.evaluations, b.evaluations
    rows = [
        ("passed", sum(ea[r]["passed"] for r in both), sum(eb[r]["passed"] for r in both)),
        ("success", sum(ea[r]["success"] for r in both), sum(eb[r]["success"] for r in both)),
        (
            "incomplete",
            sum(ea[r]["incomplete"] for r in both),
            sum(eb[r]["incomplete"] for r in both),
        ),
    ]
    lines = [f"{'':<12} {'A':>8} {'B':>8} {'changed':>8}"]
    for field, x, y in rows:
        flips = sum(1 for r in both if ea[r][field] != eb[r][field])
        lines.append(f"{field:<12} {x:>8} {y:>8} {flips:>8}")
    deltas = {r: eb[r]["overall_score"] - ea[r]["overall_score"] for r in both}
    moved = [d for d in deltas.values() if d]
    mean = sum(deltas.values()) / len(deltas) if deltas else 0.0
    lines.append(
        f"{'score':<12} mean delta {mean:+.1f}, {len(moved)} requests moved"
        + (f" (from {min(moved):+d} to {max(moved):+d})" if moved else "")
    )
    moved_rids = [
        r
        for r in both
        if deltas[r] or any(ea[r][f] != eb[r][f] for f in ("passed", "success", "incomplete"))
    ]
    moved_rids.sort(key=lambda r: (-abs(deltas[r]), r))
    if moved_rids:
        lines.append(f"most changed (of {len(moved_rids)}):")
        lines.append(f"  {'request':<44} {'score A→B':>10} {'passed':>12} {'quadrant A → B'}")
        for r in moved_rids[:top]:
            lines.append(
                f"  {r[:44]:<44} {ea[r]['overall_score']:>4}→{eb[r]['overall_score']:<5} "
                f"{ea[r]['passed']!s:>5}→{eb[r]['passed']!s:<6} "
                f"{_quadrant(ea[r])} → {_quadrant(eb[r])}"
            )
    lines += _findings_moved(a, b, both)
    lines += _modes_moved(a, b, both)
    only = len(set(a.evaluations) ^ set(b.evaluations))
    if only:
        lines.append(f"{only} requests were evaluated in one run only")
    return lines


def _findings_moved(a: ReplayResult, b: ReplayResult, both: list[str]) -> list[str]:
    """The rules and checks that fire on a different number of requests in B: what a check
    being tried (`--against` with it on) adds, by name."""

    def fired(evaluations: dict[str, Any]) -> Counter[str]:
        return Counter(
            rule for r in both for rule in {f["rule"] for f in evaluations[r]["findings"]}
        )

    in_a, in_b = fired(a.evaluations), fired(b.evaluations)
    title = "rules and checks firing on another number of requests:"
    return _moved(title, {rule: rule[:60] for rule in in_a.keys() | in_b.keys()}, in_a, in_b, 60)


def _modes_moved(a: ReplayResult, b: ReplayResult, both: list[str]) -> list[str]:
    """The failure modes B adds, removes or changes the size of: what a config change does to
    what an operator would be told."""
    in_a = _modes({r: a.evaluations[r] for r in both})
    in_b = _modes({r: b.evaluations[r] for r in both})
    shown = {m: f"{m[0][:20]}: {m[1]}"[:70] for m in in_a.keys() | in_b.keys()}
    title = "failure modes with another number of runs (0: added or removed):"
    return _moved(title, shown, in_a, in_b, 70)


def _moved(
    title: str, shown: dict[K, str], in_a: Counter[K], in_b: Counter[K], width: int
) -> list[str]:
    """The counts that differ between A and B, the largest change first (at most 10)."""
    moved = sorted(
        (k for k in shown if in_a[k] != in_b[k]),
        key=lambda k: (-abs(in_b[k] - in_a[k]), k),
    )
    if not moved:
        return []
    return [title] + [f"  {shown[k]:<{width}} {in_a[k]:>5} → {in_b[k]:<5}" for k in moved[:10]]
