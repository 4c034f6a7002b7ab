"""The worker's pages on a real worker: a Host it does not serve gets 421 (DNS rebinding reads
no counts), the ones it serves get their answer, each with the security headers."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.integration.harness import WorkerProcess

pytestmark = pytest.mark.integration


def get(worker: WorkerProcess, path: str, host: str) -> tuple[int, dict[str, str]]:
    url = f"http://127.0.0.1:{worker.settings.web_port}{path}"
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers)


def test_the_worker_pages_answer_only_names_they_serve(pipeline_worker: WorkerProcess) -> None:
    port = pipeline_worker.settings.web_port
    for path in ("/health", "/metrics"):
        status, headers = get(pipeline_worker, path, "attacker.example")
        assert status == 421 and headers["X-Content-Type-Options"] == "nosniff", (path, status)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "10.0.0.7:6066"):
            status, headers = get(pipeline_worker, path, host)
            assert status == 200, (path, host, status)
            assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
