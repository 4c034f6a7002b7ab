"""Evaluations back to where the agent's team looks: each one an OpenTelemetry
`gen_ai.evaluation.result` event (an OTLP log record with that event name), linked to the
request's trace and span when the request came with them, sent to an OTLP/HTTP logs endpoint.

Attributes follow the GenAI semantic conventions: `gen_ai.evaluation.name` ("tracejudge"),
`gen_ai.evaluation.score.value` (the overall score, 0-100), `gen_ai.evaluation.score.label`
("pass" or "fail" against the warn threshold) and `gen_ai.evaluation.explanation` (the masked
summary); tracejudge's own verdicts ride along as `tracejudge.*`.

The worker hands each published evaluation over and goes on: a bounded queue, sent in batches
(up to BATCH records or INTERVAL_S), dropped and counted when the queue is full or the endpoint
refuses, warned at most once a minute. Evaluations on Kafka and Redis do not depend on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from tracejudge.models.version import PACKAGE_VERSION
from tracejudge.settings import Settings
from tracejudge.streams.shared.metrics import Metrics, quadrant

log = logging.getLogger(__name__)

EVENT_NAME = "gen_ai.evaluation.result"
SEVERITY_INFO = 9  # opentelemetry.proto.logs.v1.SeverityNumber.SEVERITY_NUMBER_INFO
BATCH = 200
INTERVAL_S = 1.0
QUEUE = 10_000
WARN_EVERY_S = 60.0
ATTEMPTS = 3
BACKOFF_S = 1.0
RETRYABLE = frozenset({429, 502, 503, 504})


def headers_of(text: str) -> dict[str, str]:
    """`name=value,name2=value2`, as OTEL_EXPORTER_OTLP_HEADERS writes them."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {name.strip(): value.strip() for name, value in pairs}


def _value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def record_of(evaluation: dict[str, Any]) -> LogRecord:
    """One evaluation (its published JSON) as a `gen_ai.evaluation.result` log record."""
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": "tracejudge",
        "gen_ai.evaluation.score.value": float(evaluation["overall_score"]),
        "gen_ai.evaluation.score.label": "pass" if evaluation["passed"] else "fail",
        "gen_ai.evaluation.explanation": evaluation.get("summary") or "",
        "tracejudge.request_id": evaluation["request_id"],
        "tracejudge.evaluation_id": evaluation["evaluation_id"],
        "tracejudge.success": bool(evaluation["success"]),
        "tracejudge.incomplete": bool(evaluation["incomplete"]),
        "tracejudge.quadrant": quadrant(evaluation["success"], evaluation["incomplete"]),
        "tracejudge.judge_status": evaluation["judge_status"],
    }
    if evaluation.get("agent_name"):
        attributes["gen_ai.agent.name"] = evaluation["agent_name"]
    blame = evaluation.get("blame") or {}
    if blame:  # where it went wrong, for a backend that shows it beside the trace
        attributes["tracejudge.blame.reason"] = blame.get("reason") or ""
        for key in ("step_index", "actor", "confidence", "source", "abstain"):
            if blame.get(key) is not None:
                attributes[f"tracejudge.blame.{key}"] = blame[key]
    if evaluation.get("remaining_steps"):
        attributes["tracejudge.remaining_steps"] = "\n".join(evaluation["remaining_steps"])
    trace_id, span_id = evaluation.get("trace_id"), evaluation.get("span_id")
    return LogRecord(
        time_unix_nano=int(float(evaluation["ts"]) * 1e9),
        observed_time_unix_nano=time.time_ns(),
        severity_number=SEVERITY_INFO,  # type: ignore[arg-type]
        severity_text="INFO",
        event_name=EVENT_NAME,
        trace_id=bytes.fromhex(trace_id) if trace_id else b"",
        span_id=bytes.fromhex(span_id) if trace_id and span_id else b"",
        attributes=[KeyValue(key=k, value=_value(v)) for k, v in attributes.items()],
    )


class EvaluationExporter:
    def __init__(
        self, endpoint: str, headers: dict[str, str], metrics: Metrics, timeout_s: float = 5.0
    ) -> None:
        self.endpoint = endpoint
        self.metrics = metrics
        self._queue: asyncio.Queue[LogRecord] = asyncio.Queue(QUEUE)
        self._http = httpx.AsyncClient(
            timeout=timeout_s, headers={**headers, "Content-Type": "application/x-protobuf"}
        )
        self._task: asyncio.Task[None] | None = None
        self._warned_at = -WARN_EVERY_S
        self._scope = InstrumentationScope(name="tracejudge", version=PACKAGE_VERSION)
        self._resource = Resource(
            attributes=[KeyValue(key="service.name", value=_value("tracejudge"))]
        )

    def offer(self, evaluation: dict[str, Any]) -> None:
        """Queue one evaluation for export; never waits."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            self._queue.put_nowait(record_of(evaluation))
        except asyncio.QueueFull:
            self._failed(1, "the export queue is full")
        except (KeyError, ValueError) as exc:  # not an evaluation of this contract
            self._failed(1, f"not exportable: {exc}")

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (within `timeout_s`), then stop."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout_s)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            deadline = time.monotonic() + INTERVAL_S
            while len(batch) < BATCH and (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except TimeoutError:
                    break
            try:
                await self._send(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _send(self, batch: list[LogRecord]) -> None:
        request = ExportLogsServiceRequest(
            resource_logs=[
                ResourceLogs(
                    resource=self._resource,
                    scope_logs=[ScopeLogs(scope=self._scope, log_records=batch)],
                )
            ]
        )
        body, problem = request.SerializeToString(), ""
        for attempt in range(ATTEMPTS):  # OTLP: retry what may pass later, with a backoff
            if attempt:
                await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                response = await self._http.post(self.endpoint, content=body)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code < 300:
                self.metrics.counts["otel_evaluations_exported"] += len(batch)
                return
            problem = f"HTTP {response.status_code}"
            if response.status_code not in RETRYABLE:
                break
        self._failed(len(batch), problem)

    def _failed(self, count: int, reason: str) -> None:
        self.metrics.counts["otel_evaluations_failed"] += count
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "evaluations to OpenTelemetry at %s: %d not exported (%s); %d in all",
                self.endpoint,
                count,
                reason,
                self.metrics.counts["otel_evaluations_failed"],
            )


def evaluation_exporter(settings: Settings, metrics: Metrics) -> EvaluationExporter | None:
    """The exporter the settings ask for (TRACEJUDGE_OTEL_EVALUATIONS_ENDPOINT), or None."""
    if not settings.otel_evaluations_endpoint:
        return None
    headers = headers_of(settings.otel_evaluations_headers.get_secret_value())
    return EvaluationExporter(settings.otel_evaluations_endpoint, headers, metrics)
