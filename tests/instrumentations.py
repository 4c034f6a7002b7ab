"""Real instrumentations' spans through `tracejudge otel`'s mapping and the worker's handlers.

The scripted agents in tests/instrumented/<family>/ run under the real packages, each family
in its own environment (`scripts/instrumented.sh` makes them, `.venv-instrumented/<family>`),
and write what their OTLP exporter would send (tests/instrumented/capture.py). Here those
bytes are read as the receiver reads them, mapped batch by batch with one `BatchMapper` (as
one receiver would), and judged by `replay`: the worker's own handlers, without Kafka.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracejudge.settings import Settings
from tracejudge.streams.receiver.receiver import BatchMapper, spans_of
from tracejudge.streams.replay.engine import replay

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "tests" / "instrumented"
VENVS = ROOT / ".venv-instrumented"


def batches(path: Path) -> list[bytes]:
    """A capture file's export batches, the protobuf bytes an OTLP/HTTP exporter posts (a
    `.gz` file: the same, gzipped)."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [base64.b64decode(line) for line in raw.decode("ascii").split()]


def events(raw: list[bytes], capture_content: bool = True) -> list[dict[str, Any]]:
    settings = Settings(redis_url="", otel_capture_content=capture_content)
    mapper = BatchMapper(settings)
    found: list[dict[str, Any]] = []
    for data in raw:
        request = ExportTraceServiceRequest()
        request.ParseFromString(data)
        for event in mapper.events_of(spans_of(request)):
            found.append({k: v for k, v in event.items() if v is not None})
    return found


@dataclass
class Judged:
    events: list[dict[str, Any]]
    evaluations: dict[str, dict[str, Any]]  # request id -> its evaluation

    @property
    def only(self) -> dict[str, Any]:
        assert len(self.evaluations) == 1, sorted(self.evaluations)
        return next(iter(self.evaluations.values()))

    def steps(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def judged(raw: list[bytes], capture_content: bool = True) -> Judged:
    found = events(raw, capture_content)
    records = [(e["request_id"].encode(), json.dumps(e).encode()) for e in found]
    result = asyncio.run(replay(Settings(redis_url=""), records))
    return Judged(found, result.evaluations)


def run_agent(family: str, scenario: str, out: Path, script: str = "agent.py", **env: str) -> Path:
    """Run a family's scripted agent for one scenario, in the family's environment."""
    python = VENVS / family / "bin" / "python"
    path = FOLDER / family / script
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [str(python), str(path), scenario, str(out)],
        env={**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        raise AssertionError(f"{family} {scenario}: rc {done.returncode}\n{done.stderr[-3000:]}")
    return out


def summary(judged_: Judged) -> str:
    lines = []
    for rid, e in judged_.evaluations.items():
        lines.append(
            f"{rid[-8:]} agent={e.get('agent_name')} score={e['overall_score']} "
            f"passed={e['passed']} success={e['success']} incomplete={e['incomplete']} "
            f"closed={e.get('closed_by')}"
        )
        lines.append(f"   findings={[f['rule'] for f in e.get('findings', [])]}")
        lines.append(f"   blame={e.get('blame')}")
        lines.append(f"   failed={e.get('failed_steps')}")
    for ev in judged_.events:
        text = {k: v for k, v in ev.items() if k not in ("request_id", "ts", "event_id")}
        lines.append("   ev " + json.dumps(text)[:260])
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tests.instrumentations CAPTURE_FILE...
    for name in sys.argv[1:]:
        print("#####", name)
        print(summary(judged(batches(Path(name)))))
