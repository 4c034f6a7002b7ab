from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.harness import WorkerProcess, worker_env


@pytest.fixture(scope="module")
def pipeline_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One worker for the behaviour tests: short idle timeout, small step limit."""
    workdir = tmp_path_factory.mktemp("pipeline-worker")
    env = worker_env(
        kafka_bootstrap, redis_url, workdir, "pipe", idle_timeout_s=2, max_trace_steps=8
    )
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()
