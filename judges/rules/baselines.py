"""A group's baseline: streaming quantiles of its recent runs' measures.

DDSketch (Datadog's `ddsketch`) keeps each measure: its quantiles are within 2 % of the true
value, whatever the distribution, in a few hundred bytes, and two sketches merge exactly (bucket
counts add up). That last property is why it was chosen over a t-digest, whose merge is only
approximate: a worker's baseline is the merge of the sketches of the partitions it owns, and
the merge of all of them is exactly the sketch one process would have built from every run, so
`tracejudge replay` reproduces a worker however the partitions are spread.

"Recent" is two epochs of `epoch_runs` runs each: when the current epoch is full, it becomes
the previous one and the one before it is dropped. The quantiles are over both, so the baseline
follows a deliberate change of the agent within two epochs (at once under a new agent_name).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from ddsketch import DDSketch
from ddsketch.pb.ddsketch_pb2 import DDSketch as SketchMessage
from ddsketch.pb.proto import DDSketchProto

from tracejudge.judges.rules.agent_norms import MEASURES, Norm, Norms, RunStats

RELATIVE_ACCURACY = 0.02
DEFAULT_MIN_RUNS = 50  # runs before a group's quantiles are trusted
DEFAULT_EPOCH_RUNS = 500
FORMAT = 1


def _sketch() -> DDSketch:
    return DDSketch(relative_accuracy=RELATIVE_ACCURACY)


def _encode(sketch: DDSketch) -> str:
    message = DDSketchProto.to_proto(sketch)  # type: ignore[no-untyped-call]
    return base64.b64encode(message.SerializeToString()).decode()


def _decode(text: str) -> DDSketch:
    message = SketchMessage()
    message.ParseFromString(base64.b64decode(text))
    sketch: DDSketch = DDSketchProto.from_proto(message)  # type: ignore[no-untyped-call]
    return sketch


def _merged(*parts: dict[str, DDSketch]) -> dict[str, DDSketch]:
    out: dict[str, DDSketch] = {}
    for part in parts:
        for measure, sketch in part.items():
            into = out.get(measure)
            if into is None:  # not setdefault: it would build a sketch on every call
                into = out[measure] = _sketch()
            into.merge(sketch)
    return out


@dataclass
class Epoch:
    runs: int = 0
    sketches: dict[str, DDSketch] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        self.runs += 1
        for measure, value in values.items():
            sketch = self.sketches.get(measure)
            if sketch is None:  # not setdefault: it would build a sketch on every run
                sketch = self.sketches[measure] = _sketch()
            sketch.add(max(0.0, value))

    def encode(self) -> dict[str, object]:
        return {"runs": self.runs, "sketches": {m: _encode(s) for m, s in self.sketches.items()}}

    @classmethod
    def decode(cls, data: dict[str, object]) -> Epoch:
        sketches = data.get("sketches")
        runs = data.get("runs")
        return cls(
            runs=int(runs) if isinstance(runs, int) else 0,
            sketches={
                str(m): _decode(str(s))
                for m, s in (sketches.items() if isinstance(sketches, dict) else ())
            },
        )


@dataclass
class Baseline:
    """One group's recent runs (in one partition, or merged over several)."""

    epoch_runs: int
    current: Epoch = field(default_factory=Epoch)
    previous: Epoch = field(default_factory=Epoch)

    @property
    def runs(self) -> int:
        return self.current.runs + self.previous.runs

    def observe(self, stats: RunStats) -> bool:
        """Learn a closed run; whether the epochs turned (the oldest runs were forgotten)."""
        turned = self.current.runs >= self.epoch_runs
        if turned:
            self.previous, self.current = self.current, Epoch()
        self.current.add(stats.measures())
        return turned

    def absorb(self, other: Baseline) -> None:
        """Add another partition's runs (for the merged view: both epochs count alike)."""
        self.current.runs += other.runs
        self.current.sketches = _merged(
            self.current.sketches, other.current.sketches, other.previous.sketches
        )

    def add_run(self, stats: RunStats) -> None:
        """Add one run to a merged view (which never turns: it is rebuilt when a part does)."""
        self.current.add(stats.measures())

    def norms(self, group: str, min_runs: int) -> Norms:
        sketches = _merged(self.previous.sketches, self.current.sketches)
        measures = {}
        for measure in MEASURES:
            sketch = sketches.get(measure)
            if sketch is None or sketch.count == 0:
                continue
            p50, p75, p90, p95 = (
                sketch.get_quantile_value(q) or 0.0 for q in (0.5, 0.75, 0.9, 0.95)
            )
            measures[measure] = Norm(p50=p50, p75=p75, p90=p90, p95=p95)
        return Norms(group=group, runs=self.runs, min_runs=min_runs, measures=measures)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "epoch_runs": self.epoch_runs,
                "current": self.current.encode(),
                "previous": self.previous.encode(),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes, epoch_runs: int) -> Baseline:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return cls(epoch_runs)  # unknown format: start again rather than misread it
        return cls(
            epoch_runs=epoch_runs,
            current=Epoch.decode(data.get("current") or {}),
            previous=Epoch.decode(data.get("previous") or {}),
        )
