"""Which brokers of the cluster answer: the watchdog's view of a cluster with one broker down.

A probe that fails (a partition whose leader just died, a group coordinator moving) does not
mean the cluster is gone: with one broker of three down, the others take over its partitions
within seconds. Each broker is asked on its own for metadata, so /health can tell "degraded"
(some answer: keep the worker) from "unreachable" (none does: an outage its supervisor should
see). Before, with two brokers of three up, /health answered 503 and an orchestrator would
have restarted every healthy worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.client import AIOKafkaClient

from tracejudge.settings import Settings
from tracejudge.streams.kafka.security import client_options

# A broker gone from the metadata (fenced after its death) is still counted as missing for this
# long: "2 of 3 answering" while it is down, not "2 of 2". A broker removed for good stops being
# counted after it.
REMEMBER_S = 600.0


@dataclass(frozen=True)
class BrokerCount:
    answering: int
    known: int

    @property
    def state(self) -> str:
        if self.answering == 0:
            return "unreachable"
        return "ok" if self.answering >= self.known else "degraded"


class BrokerCensus:
    """Counts the brokers that answer, out of every broker the metadata listed lately."""

    def __init__(
        self, settings: Settings, timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self.clock = clock
        self.seen: dict[str, float] = {}  # "host:port" -> when the metadata last listed it
        for server in settings.kafka_bootstrap.split(","):
            if server.strip():
                self.seen[server.strip()] = clock()
        self.last: BrokerCount | None = None

    async def count(self) -> BrokerCount:
        now = self.clock()
        self.seen = {a: t for a, t in self.seen.items() if now - t < REMEMBER_S}
        answering: set[str] = set()
        asked: list[str] = []
        for _ in range(2):  # then the brokers the first answers named that were not asked
            fresh = [a for a in self.seen if a not in asked]
            answers = await asyncio.gather(*(self._ask(address) for address in fresh))
            asked += fresh
            answering |= {a for a, found in zip(fresh, answers, strict=True) if found is not None}
            for found in answers:
                for address in found or ():
                    self.seen[address] = now
        # each address counts as a broker: the metadata's, and bootstrap entries it does not
        # name (a bootstrap alias of a listed broker counts twice, and answers or not with it)
        self.last = BrokerCount(len(answering), len(self.seen))
        return self.last

    async def _ask(self, address: str) -> set[str] | None:
        """The brokers `address` lists in its metadata; None when it does not answer."""
        options = client_options(self.settings)
        options["bootstrap_servers"] = address
        client = AIOKafkaClient(**options, request_timeout_ms=int(self.timeout_s * 1000))
        try:
            await asyncio.wait_for(client.bootstrap(), self.timeout_s)
            return {f"{b.host}:{b.port}" for b in client.cluster.brokers()}
        except Exception:  # refused, timed out, TLS or SASL failure: it does not answer us
            return None
        finally:
            with contextlib.suppress(Exception):
                await client.close()
