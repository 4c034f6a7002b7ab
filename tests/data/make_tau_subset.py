"""Writes `tau_airline/events.jsonl` and `tau_airline/labels.json`: 40 whole tau-bench runs.

    python tests/data/make_tau_subset.py SOURCE

SOURCE is the team's flattened copy of the 200 runs (a folder holding `events.jsonl` and
`labels.json`; its README says how they were flattened). The tests read only the subset
written here, so a clone runs them without that folder.

The choice is deterministic and balanced by reward: for each reward (1.0 and 0.0), the runs
sorted by (task, trial), every k-th from the first, k = that reward's count // 20, the first
20 so taken. That spreads both halves over the 50 tasks. Events keep their source order and
are copied unchanged, including those after a run's final response.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).with_name("tau_airline")
PER_REWARD = 20
RUN_ID = re.compile(r":task(\d+):trial(\d+)$")


def task_and_trial(request_id: str) -> tuple[int, int]:
    found = RUN_ID.search(request_id)
    if found is None:
        raise ValueError(f"not a tau-bench run id: {request_id!r}")
    return int(found[1]), int(found[2])


def choose(labels: dict[str, dict[str, object]]) -> set[str]:
    chosen: set[str] = set()
    for reward in (1.0, 0.0):
        runs = sorted(
            (r for r, lab in labels.items() if lab["reward"] == reward), key=task_and_trial
        )
        step = len(runs) // PER_REWARD
        if step == 0:
            raise ValueError(f"only {len(runs)} runs with reward {reward}; {PER_REWARD} needed")
        chosen.update(runs[::step][:PER_REWARD])
    return chosen


def main(source: Path) -> None:
    labels = json.loads((source / "labels.json").read_text())
    chosen = choose(labels)
    lines = (source / "events.jsonl").read_text().splitlines()
    kept = [line for line in lines if line and json.loads(line)["request_id"] in chosen]
    OUT.mkdir(exist_ok=True)
    (OUT / "events.jsonl").write_text("\n".join(kept) + "\n")
    subset = {rid: lab for rid, lab in labels.items() if rid in chosen}  # source order
    (OUT / "labels.json").write_text(json.dumps(subset, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(subset)} runs, {len(kept)} events written to {OUT}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
