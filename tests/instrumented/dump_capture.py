"""Print the spans of a capture file, to see what an instrumentation writes:

.venv/bin/python tests/instrumented/dump_capture.py FILE [--full]
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tracejudge.streams.receiver.receiver import value_of


def main(path: str, full: bool) -> None:
    def short(value: Any) -> str:
        text = json.dumps(value, default=str)
        return text if full or len(text) < 300 else text[:300] + "..."

    with open(path, encoding="ascii") as lines:
        for n, line in enumerate(lines):
            request = ExportTraceServiceRequest()
            request.ParseFromString(base64.b64decode(line))
            print(f"=== batch {n}")
            for rs in request.resource_spans:
                print(
                    "resource:", short({a.key: value_of(a.value) for a in rs.resource.attributes})
                )
                for ss in rs.scope_spans:
                    print(" scope:", ss.scope.name, ss.scope.version)
                    for s in ss.spans:
                        took = (s.end_time_unix_nano - s.start_time_unix_nano) / 1e6
                        print(
                            f"  span {s.name!r} id={s.span_id.hex()[:6]} "
                            f"parent={s.parent_span_id.hex()[:6] or '-'} kind={s.kind} "
                            f"status={s.status.code}:{s.status.message!r} ms={took:.1f}"
                        )
                        for a in s.attributes:
                            print(f"     {a.key} = {short(value_of(a.value))}")
                        for e in s.events:
                            said = {a.key: value_of(a.value) for a in e.attributes}
                            print(f"     EVENT {e.name}: {short(said)}")


if __name__ == "__main__":
    main(sys.argv[1], "--full" in sys.argv)
