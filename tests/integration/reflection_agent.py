"""An agent process running a reflection worker, for the kill -9 test:

    python -m tests.integration.reflection_agent BOOTSTRAP PREFIX CALLS_LOG

Each callback appends the reflection id to CALLS_LOG (one line, flushed, before the work, so
a call interrupted by the kill is counted too), records the remaining steps as tool calls and
answers. Runs until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from tracejudge.client.events import Recorder
from tracejudge.client.reflections import Reflection, ReflectionWorker

AGENT = "reflecting-agent"


def main(bootstrap: str, prefix: str, calls_log: Path) -> None:
    def finish(reflection: Reflection, run: Recorder) -> str:
        with calls_log.open("a") as log:
            log.write(f"{reflection.reflection_id} {os.getpid()}\n")
        for left in reflection.remaining:
            time.sleep(0.15)  # slow enough that a kill lands inside some callback, and
            # that the requests outlast the group's rebalance when the second process joins
            run.tool_call(left.step, success=True, result="done")
        return f"finished {len(reflection.remaining)} remaining step(s)"

    worker = ReflectionWorker(
        bootstrap,
        finish,
        agents=[AGENT],
        topic_prefix=prefix,
        session_timeout_s=6.0,  # the broker's minimum: the survivor takes over soon
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
