"""The verdict process: `make_verdict` on a core of its own, fed through two pipes; in the
worker it also sends the verdicts it makes.

The worker writes each closed window to the child's stdin and reads the answers back from its
stdout, on the event loop. No thread sits in between: the standard process pool moved every call
through a feeder and a manager thread, and each of those hand-offs waited for the busy agent to
let go of the GIL (up to the 5 ms switch interval), which under load was much of a verdict's
latency.

Given the worker's settings, the child sends each verdict's evaluation, reflection and alerts
with a producer of its own, writes the evaluation to Redis once the broker has them all, and
then answers; the worker acknowledges the window's input records, as when it sends them itself
(at-least-once is unchanged: a crash in between publishes again, same evaluation_id). Those
sends were the window agent's costliest per-verdict work under steady load: at 4,944 events/s
its wait before reaching a request's final response went from 23-43 ms (p50 per 2,000 verdicts)
to 13-17 ms with them in another process; the Redis writes were the next cost on the window
agent's thread (BENCHMARKS.md). A request the LLM judge samples comes back as a job, which the
worker sends to the judge stage.

Frames as in `child.py`. The first frame to the child is `(Judging, Settings | None)`; it answers
`None` once its judges (and producer) are ready, then `(id, ok, Made | exception)` per
`(id, Closing)`, in the order the answers are ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
from typing import IO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from tracejudge.judges.rules import RuleJudge
from tracejudge.models import names
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.logs import setup_logging
from tracejudge.streams.settings import Settings
from tracejudge.streams.worker.child import (
    CallingChild,
    ChildDied,
    child_pipes,
    frame,
    frame_reader,
    frame_writer,
    portable,
    read_answer,
)
from tracejudge.streams.worker.outputs import RedisSink, redis_client
from tracejudge.streams.worker.verdict_making import Closing, Judging, Made, make_verdict

# As long as the worker's own (Faust's) producer waits for an acknowledgement
# (`producer_request_timeout`): a broker outage holds verdicts back, it does not fail them.
REQUEST_TIMEOUT_MS = 1_200_000


class VerdictProcessDied(ChildDied):
    """The verdict process exited; the verdicts it owed are not made (their records come again
    once the worker restarts)."""


class ProcessMaker(CallingChild):
    """Verdicts made in one child process; with `publishing` (the worker's settings), sent by it
    too (`Made.published`) and written to Redis if Redis is on (`Made.stored`). A child that
    dies makes every call waiting on it raise `VerdictProcessDied`."""

    serve = "tracejudge.streams.worker.verdict_process:serve"
    name = "the verdict process"
    died = VerdictProcessDied

    def __init__(self, judging: Judging, publishing: Settings | None = None) -> None:
        super().__init__((judging, publishing))

    async def __call__(self, closing: Closing) -> Made:
        made: Made = await self._call(closing)
        return made


class Sender:
    """The child's producer: a verdict's records, sent and acknowledged."""

    def __init__(self, settings: Settings) -> None:
        self.evaluations = settings.topic(names.EVALUATIONS)
        self.reflections = settings.topic(names.REFLECTIONS)
        self.alerts = settings.topic(names.ALERTS)
        self.settings = settings
        self.producer = self._producer()

    def _producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **client_options(self.settings),
            acks="all",
            max_request_size=self.settings.kafka_max_request_bytes,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )

    async def start(self, attempts: int = 30) -> None:
        """Connected, or KafkaConnectionError after `attempts` seconds (the worker then exits
        70, like for a child that does not start)."""
        for attempt in range(1, attempts + 1):
            try:
                await self.producer.start()
                return
            except KafkaConnectionError:
                if attempt == attempts:
                    raise
                await asyncio.sleep(1.0)
                self.producer = self._producer()  # a failed start leaves its client closed

    async def send(self, made: Made) -> None:
        key = made.request_id.encode("utf-8")
        send = self.producer.send
        pending = [await send(self.evaluations, made.evaluation, key=key)]
        if made.reflection is not None:
            pending.append(await send(self.reflections, made.reflection, key=key))
        for alert in made.alerts:
            pending.append(await send(self.alerts, alert, key=key))
        await asyncio.gather(*pending)


def serve() -> None:
    """The child: one verdict per closed window read, until stdin closes (the worker stopped or
    died: the pipe closes either way, so the child never outlives it)."""
    stdin, stdout = child_pipes()
    asyncio.run(_serve(stdin, stdout))


async def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    reader = await frame_reader(stdin)
    try:
        judging, publishing = await read_answer(reader)
    except asyncio.IncompleteReadError:
        return
    rules = RuleJudge(tool_call_budget=judging.tool_call_budget)
    sender, store = None, RedisSink(None, ttl_s=1)  # no client: disabled, writes nothing
    if publishing is not None:
        setup_logging(publishing.log_level, publishing.log_format)
        sender = Sender(publishing)
        store = RedisSink(redis_client(publishing.redis_url), publishing.evaluation_ttl_s)
        await sender.start()
    _settle()

    answer = frame_writer(stdout)

    async def publish(call: int, made: Made) -> None:
        assert sender is not None
        try:
            await sender.send(made)
        except Exception as exc:  # the worker exits: the records come again
            answer(frame((call, False, portable(exc))))
            return
        stored = None
        if store.enabled:  # best effort, as in the worker: a failure is counted, not raised
            key = names.REDIS_EVALUATION_KEY.format(request_id=made.request_id)
            assert made.evaluation is not None
            stored = await store.put_encoded(key, made.evaluation)
        answer(frame((call, True, dataclasses.replace(made, published=True, stored=stored))))

    answer(frame(None))
    sending: set[asyncio.Task[None]] = set()
    first = True
    try:
        while True:
            try:
                call, closing = await read_answer(reader)
            except asyncio.IncompleteReadError:  # the worker is gone
                return
            try:
                made = make_verdict(judging, closing, rules)
            except Exception as exc:  # the caller decides what a failed verdict means
                answer(frame((call, False, portable(exc))))
                continue
            if sender is None or made.job is not None:
                answer(frame((call, True, made)))
            else:
                task = asyncio.create_task(publish(call, made))
                sending.add(task)
                task.add_done_callback(sending.discard)
            if first:  # what the first verdict loaded (detectors load lazily)
                _settle()
                first = False
    finally:
        for task in sending:
            task.cancel()
        if sender is not None:
            with contextlib.suppress(Exception):
                await sender.producer.stop()
        with contextlib.suppress(Exception):
            await store.aclose()


def _settle() -> None:
    """What is loaded by now (modules, patterns, schemas: ~100,000 objects) lives as long as the
    process: frozen, the collector stops walking it again and again, in pauses of 15-60 ms that
    went straight into verdict latency."""
    gc.collect()
    gc.freeze()
