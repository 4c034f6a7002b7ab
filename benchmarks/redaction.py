"""Masking quality on the labelled corpus: recall per kind of secret, false positives on
look-alikes.

    python -m benchmarks.redaction

Corpus: `tests/data/redaction_corpus.jsonl` (written by `tests/data/make_redaction_corpus.py`).
A secret is caught when none of its raw value survives `mask`; a look-alike is a false
positive when `mask` changes it at all. Bars: recall >= 0.99 on secrets, >= 0.95
per kind of personal data, false positives <= 1%.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tracejudge.judges.masking.redact import mask

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "redaction_corpus.jsonl"
PII = frozenset({"email", "phone", "cn_mobile", "card_number", "us_ssn", "iban", "cn_resident_id"})


@dataclass
class Tally:
    total: int = 0
    hits: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 1.0


@dataclass
class Report:
    kinds: dict[str, Tally]
    lookalikes: dict[str, Tally]  # hits = changed (false positives)
    seconds: float
    chars: int

    def recall(self, pii: bool) -> float:
        tallies = [t for k, t in self.kinds.items() if (k in PII) == pii]
        return sum(t.hits for t in tallies) / max(1, sum(t.total for t in tallies))

    @property
    def false_positive_rate(self) -> float:
        return sum(t.hits for t in self.lookalikes.values()) / max(
            1, sum(t.total for t in self.lookalikes.values())
        )


def evaluate(path: Path = CORPUS) -> Report:
    kinds: dict[str, Tally] = defaultdict(Tally)
    lookalikes: dict[str, Tally] = defaultdict(Tally)
    seconds, chars = 0.0, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        text, kind = item["text"], item["kind"]
        started = time.perf_counter()
        masked = mask(text)
        seconds += time.perf_counter() - started
        chars += len(text)
        if kind.startswith("lookalike:"):
            tally = lookalikes[kind.removeprefix("lookalike:")]
            tally.total += 1
            if masked != text:
                tally.hits += 1
                tally.misses.append(f"{text!r} -> {masked!r}")
        else:
            tally = kinds[kind]
            tally.total += 1
            if all(secret not in masked for secret in item["secrets"]):
                tally.hits += 1
            else:
                tally.misses.append(f"{text!r} -> {masked!r}")
    return Report(dict(kinds), dict(lookalikes), seconds, chars)


def main() -> None:
    report = evaluate()
    print(f"corpus: {CORPUS.name}")
    print(f"{'kind':<22} {'n':>4} {'recall':>7}")
    for kind, tally in sorted(report.kinds.items()):
        label = f"{kind} (PII)" if kind in PII else kind
        print(f"{label:<22} {tally.total:>4} {tally.rate:7.3f}")
    print(f"{'look-alike':<22} {'n':>4} {'FP rate':>7}")
    for kind, tally in sorted(report.lookalikes.items()):
        print(f"{kind:<22} {tally.total:>4} {tally.rate:7.3f}")
    print(
        f"secrets recall {report.recall(pii=False):.3f} | personal data recall "
        f"{report.recall(pii=True):.3f} | false positives {report.false_positive_rate:.3%} | "
        f"{report.chars / report.seconds / 1e6:.2f} M chars/s"
    )
    for kind, tally in sorted({**report.kinds, **report.lookalikes}.items()):
        for miss in tally.misses:
            print(f"  miss [{kind}] {miss}")


if __name__ == "__main__":
    main()
