"""Precision and recall of "retry" on the labelled generic-answer pairs, and the early-stop
scenarios, each on its tuning half and on its frozen half.

python -m benchmarks.generic_precision [--show-errors]

The pairs were split once, by a hash of prompt and response, into tests/data/
generic_labelled.jsonl (tuning) and generic_frozen.jsonl (frozen: measured, never tuned on);
the early-stop scenarios by a hash of their name. --show-errors lists the tuning half's only.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from tracejudge.judges.answers.generic import assess_answer

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
LABELLED = DATA / "generic_labelled.jsonl"
FROZEN = DATA / "generic_frozen.jsonl"


@dataclass(frozen=True)
class Score:
    total: int
    tp: int
    fp: int
    fn: int
    errors: list[str]

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def score(path: Path = LABELLED) -> Score:
    tp = fp = fn = 0
    errors = []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for row in rows:
        assessment = assess_answer(row["prompt"], row["response"])
        if assessment.retry and row["retry"]:
            tp += 1
        elif assessment.retry:
            fp += 1
        elif row["retry"]:
            fn += 1
        if assessment.retry != row["retry"]:
            errors.append(
                f"{'FP' if assessment.retry else 'FN'} {row['prompt']!r} -> "
                f"{row['response'][:60]!r} ({assessment.classification.response_type})"
            )
    return Score(len(rows), tp, fp, fn, errors)


def early_stop_agreement(path: Path) -> tuple[int, list[str]]:
    from tests.test_early_stop import replay  # the same replay the unit tests use

    scenarios = json.loads(path.read_text(encoding="utf-8"))
    wrong = [s["name"] for s in scenarios if replay(s) != s["expected"]]
    return len(scenarios), wrong


def main(show_errors: bool) -> None:
    for name, path in (("tuning", LABELLED), ("frozen", FROZEN)):
        result = score(path)
        print(
            f"generic answers, {name} half: {result.total} pairs, {result.tp + result.fn} "
            f"should retry; retry precision {result.precision:.3f}  recall {result.recall:.3f}  "
            f"(tp={result.tp} fp={result.fp} fn={result.fn})"
        )
        if show_errors and name == "tuning":
            print("\n".join("  " + e for e in result.errors))
    for name, file in (
        ("tuning", "early_stop_scenarios.json"),
        ("frozen", "early_stop_frozen.json"),
    ):
        total, wrong = early_stop_agreement(DATA / file)
        print(
            f"early stop, {name} half: {total - len(wrong)}/{total} scenarios decided as labelled"
        )
        if show_errors and name == "tuning":
            print("\n".join("  " + w for w in wrong))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--show-errors", action="store_true", help="the tuning half's errors")
    main(parser.parse_args().show_errors)
