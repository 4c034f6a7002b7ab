"""`tracejudge otel`: an OTLP trace receiver (gRPC and HTTP) that publishes contract events.

Built on the official `opentelemetry-proto` messages (and grpcio's server; aiohttp for OTLP/HTTP,
binary protobuf or JSON). A span batch is answered only after its events were acknowledged by
Kafka, so an exporter's retry covers a failure in between: at-least-once, and the event ids make
a resend a duplicate the worker recognises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from typing import Any

import grpc
from aiohttp import web
from aiokafka import AIOKafkaProducer
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from tracejudge.client.otel_conventions import convention_of
from tracejudge.client.otel_mapping import SpanInfo, TraceNotes, events_of
from tracejudge.models import names
from tracejudge.settings import Settings
from tracejudge.streams.kafka.security import client_options
from tracejudge.streams.shared.web_guard import (
    PLAIN_HEADERS,
    check_token,
    guard_middleware,
    host_names,
    tokens_match,
)

log = logging.getLogger(__name__)
Request = trace_service_pb2.ExportTraceServiceRequest
Response = trace_service_pb2.ExportTraceServiceResponse


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


# OTLP span flags: bit 8 says the SDK knows whether the parent is remote, bit 9 that it is
REMOTE_KNOWN_AND_SET = (
    trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    | trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)


def span_count(request: Any) -> int:
    return sum(len(scope.spans) for r in request.resource_spans for scope in r.scope_spans)


def spans_of(request: Any, limit: int | None = None) -> list[SpanInfo]:
    """The batch's spans, the first `limit` of them (None: all)."""
    found: list[SpanInfo] = []
    for resource in request.resource_spans:
        described = {a.key: value_of(a.value) for a in resource.resource.attributes}
        for scope in resource.scope_spans:
            for span in scope.spans:
                if limit is not None and len(found) >= limit:
                    return found
                found.append(
                    SpanInfo(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: value_of(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        parent_remote=span.flags & REMOTE_KNOWN_AND_SET == REMOTE_KNOWN_AND_SET,
                        events=tuple(
                            (e.name, {a.key: value_of(a.value) for a in e.attributes})
                            for e in span.events
                            if e.name == "exception"  # the only event read: a failure's text
                        ),
                        resource=described,
                        scope=scope.scope.name,
                    )
                )
    return found


class BatchMapper:
    """Export batches to contract events, with what each open trace said so far kept across
    batches (client/otel_mapping.py): one per receiver."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.notes = TraceNotes()
        self.sources: set[tuple[str, str, str]] = set()  # instrumentations logged once

    def events_of(self, spans: list[SpanInfo]) -> list[dict[str, Any]]:
        """The events of a batch: its spans noted first (a step's actor is found among them),
        the spans that end a request mapped last (a collector may have reordered them)."""
        self.notes.note_all(spans)
        ending = self.settings.otel_request_end
        found: list[dict[str, Any]] = []
        for span in sorted(spans, key=lambda s: s.ends_request(ending)):
            self._recognise(span)
            found.extend(events_of(span, self.settings.otel_capture_content, ending, self.notes))
        return found

    def _recognise(self, span: SpanInfo) -> None:
        """Log once per instrumentation what sent it and which conventions are read."""
        sdk = " ".join(
            str(span.resource.get(key, ""))
            for key in ("telemetry.sdk.name", "telemetry.sdk.version")
        )
        source = (span.scope, sdk.strip(), convention_of(span.attributes) or "none")
        if source in self.sources or len(self.sources) >= 1000:
            return
        self.sources.add(source)
        log.info(
            "spans from %s (sdk %s): conventions read: %s%s",
            source[0] or "an unnamed instrumentation",
            source[1],
            source[2],
            ""
            if self.settings.otel_capture_content
            else "; content not read (TRACEJUDGE_OTEL_CAPTURE_CONTENT=false)",
        )


class Receiver:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(names.EVENTS)
        self.producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            max_request_size=settings.kafka_max_request_bytes,
        )
        self.token = settings.otel_token.get_secret_value()
        self.spans = 0
        self.events = 0
        self.rejected_spans = 0  # past the cap on spans per batch: refused, the exporter told
        self.mapper = BatchMapper(settings)

    async def accept(self, request: Any) -> int:
        """Publish the events of the batch's spans, up to the cap on spans per batch, and wait
        for the broker; how many spans past the cap were refused (OTLP's partial success)."""
        pending = []
        cap = self.settings.otel_max_spans_per_batch
        spans = spans_of(request, cap)
        rejected = span_count(request) - len(spans) if len(spans) >= cap else 0
        if rejected:
            self.rejected_spans += rejected
            log.warning(
                "a span batch of %d spans: the %d past TRACEJUDGE_OTEL_MAX_SPANS_PER_BATCH=%d "
                "refused (the exporter is told: OTLP partial success)",
                len(spans) + rejected,
                rejected,
                cap,
            )
        self.spans += len(spans)
        for event in self.mapper.events_of(spans):
            clean = {k: v for k, v in event.items() if v is not None}
            pending.append(
                await self.producer.send(
                    self.topic,
                    json.dumps(clean).encode(),
                    key=clean["request_id"].encode(),
                )
            )
        await asyncio.gather(*pending)
        self.events += len(pending)
        return rejected


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def Export(self, request: Any, context: Any) -> Any:
        if self.receiver.token:
            given = dict(context.invocation_metadata() or ()).get("authorization", "")
            if not _token_matches(str(given), self.receiver.token):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "give TRACEJUDGE_OTEL_TOKEN")
        try:
            rejected = await self.receiver.accept(request)
        except Exception as exc:  # the exporter retries UNAVAILABLE
            log.warning("cannot publish a span batch: %r", exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "cannot publish to Kafka")
        return answer(rejected, self.receiver.settings.otel_max_spans_per_batch)


def answer(rejected: int, cap: int) -> Any:
    """The export's answer: OTLP's partial success when spans past the cap were refused."""
    said = Response()
    if rejected:
        said.partial_success.rejected_spans = rejected
        said.partial_success.error_message = (
            f"{rejected} spans past the cap of {cap} spans per batch were refused: send smaller "
            "batches (the batch span processor's max_export_batch_size)"
        )
    return said


# OTLP/HTTP's two encodings; anything else (a browser's `text/plain` form post among them) is 415
CONTENT_TYPES = ("application/x-protobuf", "application/json")


def _token_matches(header: str, token: str) -> bool:
    given = header.removeprefix("Bearer ").strip()
    return tokens_match(given, token)


def http_app(receiver: Receiver, settings: Settings | None = None) -> web.Application:
    """`settings`: the Host names, browser origins and token it takes (the receiver's own
    settings when not given)."""
    settings = settings or receiver.settings
    origins = {o.strip().rstrip("/") for o in settings.otel_allowed_origins.split(",") if o.strip()}

    async def traces(request: web.Request) -> web.Response:
        if request.content_type not in CONTENT_TYPES:
            return web.Response(
                status=415, text="OTLP/HTTP takes application/x-protobuf or application/json"
            )
        origin = request.headers.get("Origin")
        if origin is not None and origin.rstrip("/") not in origins:
            # a web page's request: no page the operator opens may post traces
            return web.Response(status=403, text="this Origin may not send traces")
        if receiver.token and not _token_matches(
            request.headers.get("Authorization", ""), receiver.token
        ):
            return web.Response(
                status=401,
                text="give TRACEJUDGE_OTEL_TOKEN as `Authorization: Bearer TOKEN`",
                headers={"WWW-Authenticate": "Bearer"},
            )
        body = await request.read()
        as_json = request.content_type == "application/json"
        message = Request()
        try:
            if as_json:
                json_format.Parse(body, message)
            else:
                message.ParseFromString(body)
        except Exception:
            return web.Response(status=400, text="not an OTLP ExportTraceServiceRequest")
        try:
            rejected = await receiver.accept(message)
        except Exception as exc:
            log.warning("cannot publish a span batch: %r", exc)
            return web.Response(status=503, text="cannot publish to Kafka")
        said = answer(rejected, settings.otel_max_spans_per_batch)
        if as_json:
            return web.Response(
                text=json_format.MessageToJson(said), content_type="application/json"
            )
        return web.Response(body=said.SerializeToString(), content_type="application/x-protobuf")

    app = web.Application(
        client_max_size=16 * 1024 * 1024,
        middlewares=[guard_middleware(host_names(settings.allowed_hosts), PLAIN_HEADERS)],
    )
    app.router.add_post("/v1/traces", traces)
    return app


def check_exposure(settings: Settings) -> None:
    """Anyone who reaches the receiver can make verdicts: off loopback only with a token."""
    token = settings.otel_token.get_secret_value()
    check_token("TRACEJUDGE_OTEL_TOKEN", token, "TRACEJUDGE_OTEL_HOST", settings.otel_host)


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Both receivers until `stop` is set (or SIGINT/SIGTERM)."""
    check_exposure(settings)
    receiver = Receiver(settings)
    await receiver.producer.start()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        _TraceService(receiver), server
    )
    host = settings.otel_host
    server.add_insecure_port(f"{host}:{settings.otel_grpc_port}")
    await server.start()
    runner = web.AppRunner(http_app(receiver))
    await runner.setup()
    await web.TCPSite(runner, host, settings.otel_http_port).start()
    log.info(
        "OTLP receiver on %s: gRPC :%d, HTTP :%d/v1/traces -> %s",
        host,
        settings.otel_grpc_port,
        settings.otel_http_port,
        receiver.topic,
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop(grace=5)
        await runner.cleanup()
        await receiver.producer.stop()
