"""The client's control tallies as an OpenTelemetry metric, for an agent that exports metrics.

`tracejudge.client.control` (a counter, attribute `outcome`: `delivered`, `unverified`,
`unreadable`, `refused_<why>`) is what the agent's interventions reader did with the control
records it read: an agent refusing them (`refused_unknown_key`: its keys are not the worker's)
or obeying them unchecked (`unverified`) shows on the agent's own dashboards. Registered only
where the OpenTelemetry API is installed; it reads the reader's counts when the agent's metric
reader collects, and costs nothing between. Without a meter provider the API's default does
nothing.
"""

from __future__ import annotations

import importlib.util
import weakref
from collections.abc import Callable, Iterable
from typing import Any

METRIC = "tracejudge.client.control"

_registered = False
_sources: weakref.WeakSet[Any] = weakref.WeakSet()


def export_counts(reader: Any) -> None:
    """Count `reader` (anything with `counts() -> dict[str, int]`) in the metric, registered
    on the first call; a no-op without the OpenTelemetry API."""
    global _registered
    _sources.add(reader)
    if _registered:
        return
    if importlib.util.find_spec("opentelemetry") is None:
        return
    try:
        from opentelemetry import metrics
    except ImportError:
        return
    meter = metrics.get_meter("tracejudge.client")
    meter.create_observable_counter(
        METRIC,
        callbacks=[_observe(metrics.Observation)],
        unit="{record}",
        description="Control records the agent's tracejudge client read, by what it did",
    )
    _registered = True


def _observe(observation: Callable[..., Any]) -> Callable[[Any], Iterable[Any]]:
    def observe(_options: Any) -> Iterable[Any]:
        totals: dict[str, int] = {}
        for reader in list(_sources):
            for outcome, n in reader.counts().items():
                totals[outcome] = totals.get(outcome, 0) + n
        return [observation(n, {"outcome": outcome}) for outcome, n in sorted(totals.items())]

    return observe
