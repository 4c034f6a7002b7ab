"""Gauge families from per-(agent, second label) figures: how the agreement and the action
figures are both served on /metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

F = TypeVar("F")
Series = Sequence[tuple[str, str, Callable[[Any], float | None]]]


def gauge_families(
    prefix: str,
    scope: str,
    label: str,
    series: Series,
    figures: Mapping[tuple[str, str], F],
) -> list[Metric]:
    """One family per series, `prefix` + its name, labels agent and `label`; `scope` ends each
    family's help. A figure with no value (a mean of nothing, no AUC without both kinds of
    outcome) gets no sample rather than a made-up zero."""
    made: list[Metric] = []
    for name, doc, value_of in series:
        family = GaugeMetricFamily(f"{prefix}{name}", f"{doc} {scope}", labels=["agent", label])
        for (agent, second), f in sorted(figures.items()):
            value = value_of(f)
            if value is not None:
                family.add_metric([agent, second], value)
        made.append(family)
    return made
