"""Agreement figures in words, per agent: what `tracejudge status` and `tracejudge replay`'s
report print (and their --json forms)."""

from __future__ import annotations

from typing import Any

from tracejudge.judges.agreement.tally import DIMENSION_PREFIX, Tally, views_of

SOURCES = ("rules", "judge", "blend")


def _share(s: dict[str, Any]) -> str:
    if s["value"] is None:
        return "-"
    return f"{100 * s['value']:.0f}% ({s['hits']}/{s['count']})"


def _auc(f: dict[str, Any]) -> str:
    if f["auc"] is None:
        return "AUC - (needs ok and failed runs)"
    low, high = f["auc_interval"]
    return f"AUC {f['auc']:.3f} [{low:.3f}, {high:.3f}]"


def _counted(runs: int | None, labels: int) -> str:
    """Runs with outcomes, and the outcome labels when there are more (a run labelled by two
    sources counts once as a run, twice as labels: the figures count labels)."""
    said = f"{labels} outcome label{'' if labels == 1 else 's'}"
    if not runs:  # a tally counted before runs were: its labels only
        return said
    return f"{runs} run{'' if runs == 1 else 's'} with outcomes" + (
        f", {said}" if labels != runs else ""
    )


def agreement_lines(by_agent: dict[str, Any]) -> list[str]:
    """From `agreement_json`: a line per agent (its final verdicts against the outcomes),
    and, where the LLM judge read some of its runs, rules vs judge vs blend on those runs."""
    lines = []
    for agent, entry in by_agent.items():
        f = entry["final"]
        lines.append(
            f"  {agent}: {_counted(entry.get('runs'), f['runs'])} ({f['ok_runs']} ok, "
            f"{f['failed_runs']} failed)  {_auc(f)}  ok alerted {_share(f['ok_alerted'])}  "
            f"failed flagged {_share(f['failed_flagged'])}"
        )
        judged = entry.get("judged")
        if judged:
            sides = ", ".join(
                f"{v} AUC {'-' if g['auc'] is None else format(g['auc'], '.3f')} "
                f"(failed flagged {_share(g['failed_flagged'])})"
                for v, g in judged.items()
            )
            runs, labels = entry.get("judged_runs"), judged["blend"]["runs"]
            counted = f"{runs}" if runs == labels else _counted(runs, labels)
            lines.append(f"    judged runs ({counted}): {sides}")
        for name, d in entry.get("dimensions", {}).items():
            lines.append(
                f"    the team's dimension {name}: {_auc(d)}  ok alerted "
                f"{_share(d['ok_alerted'])}  failed flagged {_share(d['failed_flagged'])}"
            )
        for check in entry.get("checks", []):
            lines.append(
                f"    {check['rule']}: failed {_share(check['on_ok'])} of ok runs, "
                f"{_share(check['on_failed'])} of failed runs; precision "
                f"{_share(check['precision'])}"
            )
    return lines


def agreement_json(tally: Tally) -> dict[str, Any]:
    """agent -> {"runs": requests with outcomes, "final": figures, "judged_runs": runs the
    judge read, "judged": {rules, judge, blend: figures}, "checks": [each team check's rates],
    "dimensions": {each team dimension: figures}}
    (judged: only where the judge read some of its runs; checks: only where one failed a run
    with an outcome). The figures count outcome labels: `runs` there is labels, a run
    labelled by two sources counted twice."""
    found: dict[str, Any] = {}
    for agent in tally.agents():
        final = tally.figures("final", agent=agent)
        if not final.runs:
            continue
        entry: dict[str, Any] = {"runs": tally.runs(agent=agent), "final": final.as_dict()}
        if tally.figures("blend", agent=agent, judged=True).runs:
            entry["judged_runs"] = tally.runs(agent=agent, judged=True)
            entry["judged"] = {
                v: tally.figures(v, agent=agent, judged=True).as_dict() for v in SOURCES
            }
        checks = tally.check_rates(agent)
        if checks:  # a team's checks, against the same outcomes
            entry["checks"] = [r.as_dict() for r in checks]
        dimensions = {  # a team's own dimensions, each a score against the same outcomes
            view[len(DIMENSION_PREFIX) :]: figures.as_dict()
            for view in views_of(tally)
            if (figures := tally.figures(view, agent=agent)).runs
        }
        if dimensions:
            entry["dimensions"] = dimensions
        found[agent] = entry
    return found
