"""tracejudge for agent authors: record what an agent does, have it judged, read the verdict.

    from tracejudge.client import Tracer

No Faust and nothing of the worker: librdkafka (confluent-kafka) for events, verdicts and the
reflection worker, and interventions read back while a run runs (and Redis, when given, for
verdicts and early-stop decisions).
"""

from tracejudge.client.early_stop import AsyncEarlyStopClient, EarlyStopClient
from tracejudge.client.events import Recorder
from tracejudge.client.interventions import InterventionReader, InterventionStop, steer_text
from tracejudge.client.reflections import Reflection, ReflectionWorker
from tracejudge.client.tracer import AsyncTracer, Tracer

__all__ = [
    "AsyncEarlyStopClient",
    "AsyncTracer",
    "EarlyStopClient",
    "InterventionReader",
    "InterventionStop",
    "Recorder",
    "Reflection",
    "ReflectionWorker",
    "Tracer",
    "steer_text",
]
