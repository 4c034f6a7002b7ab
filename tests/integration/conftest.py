from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.harness import WorkerProcess, worker_env
from tests.kafkacluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def pipeline_worker(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One worker for the behaviour tests: short idle timeout, small step limit."""
    workdir = tmp_path_factory.mktemp("pipeline-worker")
    # the loop example's agent is stopped at its loop's first crossing, as its team chose
    # (examples/langgraph_loop_stop.py); every other agent has the default: steer first
    budgets = workdir / "budgets.toml"
    budgets.write_text('[agents."langgraph-looping-bot"]\nloop_action = "stop"\n')
    env = worker_env(
        kafka_bootstrap,
        redis_url,
        workdir,
        "pipe",
        idle_timeout_s=2,
        max_trace_steps=8,
        budgets_file=str(budgets),
    )
    worker = WorkerProcess(env, workdir / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three Kafka nodes for the broker fault and scaling tests; started only for the tests that
    ask. A test that kills, pauses or restarts a node leaves all three running and in the
    metadata."""
    cluster = start_cluster(tmp_path_factory.mktemp("kafka-cluster"))
    yield cluster
    cluster.stop()
