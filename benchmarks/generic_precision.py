"""Precision and recall of "retry" on the labelled generic-answer set.

python -m benchmarks.generic_precision [--show-errors]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from tracejudge.judges.generic import assess_answer

LABELLED = Path(__file__).resolve().parent.parent / "tests" / "data" / "generic_labelled.jsonl"


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--show-errors", action="store_true")
    result = score()
    print(f"{result.total} labelled pairs, {result.tp + result.fn} should retry")
    print(
        f"retry precision {result.precision:.3f}  recall {result.recall:.3f}  "
        f"(tp={result.tp} fp={result.fp} fn={result.fn})"
    )
    if parser.parse_args().show_errors:
        print("\n".join(result.errors))
