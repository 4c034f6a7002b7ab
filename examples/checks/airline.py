"""A check in code from the airline policy: "Each reservation can have at most five passengers." """

from __future__ import annotations

import json

from tracejudge.judges.checks import Failure, Run


def at_most_five_passengers(run: Run) -> Failure | None:
    for step in run.calls("book_reservation"):
        try:
            args = json.loads(step.args or "{}")
        except ValueError:
            continue  # arguments clipped or not JSON: nothing to count
        passengers = args.get("passengers") if isinstance(args, dict) else None
        if isinstance(passengers, list) and len(passengers) > 5:
            return Failure(f"a booking for {len(passengers)} passengers (at most 5)", step.index)
    return None
