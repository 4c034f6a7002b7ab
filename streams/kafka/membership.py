"""The consumer's membership of its group, kept through a commit refused after a rebalance.

It uses aiokafka's private state, like `internals.py` (whose `RELIANCES` list it, so that the
worker's start-up check names them if a release moves them), but it lives apart: the judge
stage uses it too, and never imports faust, which `internals.py` does.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

# the generation and member id a commit in flight was sent with (each commit is its own task)
_commit_sent_as: ContextVar[tuple[int, str] | None] = ContextVar("tracejudge_commit", default=None)


def stale_commits_keep_membership(consumer: Any) -> None:
    """A commit sent in one generation of the group and answered after the next one formed is
    refused (IllegalGeneration), and aiokafka then resets the member id and the generation,
    although the member is already in the new generation. It joins again as a new member, and
    the coordinator waits for the old one, now a ghost, until its session times out: the whole
    group stops consuming for a session timeout (seen when workers scaled out while faust's
    commit timer ran into the rebalance). Kafka's Java client resets only when the generation
    is still the one the commit was sent with; so does this, on the consumer's group
    coordinator. The commit still fails, as it must. `consumer`: an AIOKafkaConsumer, or
    faust's consumer around one; once it started, once per consumer."""
    thread = getattr(consumer, "_thread", None)  # faust's consumer: aiokafka's is inside
    aio = getattr(thread, "_consumer", None) or consumer
    coordinator: Any = getattr(aio, "_coordinator", None)
    if not hasattr(coordinator, "_do_commit_offsets") or getattr(
        coordinator, "_tracejudge_stale_commits", False
    ):
        return
    do_commit = coordinator._do_commit_offsets
    reset = coordinator.reset_generation

    async def commit_as_sent(assignment: Any, offsets: Any) -> Any:
        # the request is built from these before the first await of `do_commit`
        token = _commit_sent_as.set((coordinator.generation, coordinator.member_id))
        try:
            return await do_commit(assignment, offsets)
        finally:
            _commit_sent_as.reset(token)

    def reset_unless_moved_on() -> None:
        sent_as = _commit_sent_as.get()
        now = (coordinator.generation, coordinator.member_id)
        if sent_as is not None and sent_as != now:
            log.info(
                "a commit sent in generation %d was refused after generation %d formed: "
                "the group membership is kept",
                sent_as[0],
                now[0],
            )
            return
        reset()

    coordinator._do_commit_offsets = commit_as_sent
    coordinator.reset_generation = reset_unless_moved_on
    coordinator._tracejudge_stale_commits = True
