"""The LLM judge against a real model server: llama.cpp's OpenAI-compatible server running
SmolLM2-135M-Instruct (tests/llm_server.py), the worker on the real broker and Redis.

Form, not opinion: a 135M model is no judge anyone would run, so these tests check that real
requests go out in each output mode, real answers come back and are parsed, and evaluations
carry them, never what the tiny model thinks of the traces.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import WorkerProcess, grouped, produce_events, worker_env
from tests.llm_server import MODEL_ALIAS, start_llm_server
from tests.realservices import Service

pytestmark = pytest.mark.integration
TRACES = 2


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    server = start_llm_server(tmp_path_factory.mktemp("llm") / "llama-server.log")
    yield server
    server.stop()


def short_tau_traces(path: Path, run: str, count: int) -> list[list[dict[str, Any]]]:
    """The `count` shortest tau-bench runs (up to their final response), with fresh ids."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        event = json.loads(line)
        rid = event["request_id"]
        if not runs[rid] or runs[rid][-1]["type"] != "final_response":
            runs[rid].append(event)
    chosen = sorted(runs.values(), key=lambda events: len(json.dumps(events)))[:count]
    return [
        [{**event, "request_id": f"real-llm-{run}-{i}"} for event in events]
        for i, events in enumerate(chosen)
    ]


Services = tuple[str, str, Path, Service, Path]  # Kafka, Redis, work dir, model server, tau data


async def judged(services: Services, name: str, **llm: Any) -> list[dict[str, Any]]:
    kafka, redis, tmp, server, tau = services
    run = uuid.uuid4().hex[:6]
    traces = short_tau_traces(tau, run, TRACES)
    settings: dict[str, Any] = {
        "llm_judge_enabled": "true",
        "llm_base_url": server.address,
        "llm_model": MODEL_ALIAS,
        "llm_timeout_s": 300,
        "llm_max_attempts": 1,
        "llm_concurrency": 1,
        # one call at a time, each of them minutes on a loaded CI machine: the second trace's
        # call must not time out queued behind the first (the default wait is 120 s)
        "llm_queue_wait_s": 900,
        "llm_max_input_chars": 6000,
        # the schema bounds every string and list: an answer always fits in this many tokens,
        # even one token per character
        "llm_max_tokens": 2560,
    }
    env = worker_env(kafka, redis, tmp, name, **{**settings, **llm})
    worker = WorkerProcess(env, tmp / f"{name}.log").start()
    try:
        await produce_events(kafka, worker.topic("events"), [e for t in traces for e in t])
        rids = {t[0]["request_id"] for t in traces}
        found = await grouped(
            worker, "evaluations", rids, wait_for_all=True, timeout_s=600, settle_s=1
        )
    finally:
        worker.stop()
    evaluations = [evs[0] for evs in found.values()]
    assert len(evaluations) == TRACES, found
    return evaluations


async def test_json_schema_mode_gets_parsed_verdicts_from_a_real_server(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, llm_server: Service, tau_events: Path
) -> None:
    evaluations = await judged(
        (kafka_bootstrap, redis_url, tmp_path, llm_server, tau_events),
        "real-json-schema",
        llm_output_mode="json_schema",
        llm_schema_strict="false",  # llama.cpp compiles maxLength into its grammar
    )
    for evaluation in evaluations:
        assert (evaluation["judge_status"], evaluation["judge_error"]) == ("ok", None), evaluation
        assert f"{MODEL_ALIAS}" in evaluation["evaluator_version"]
        assert isinstance(evaluation["success"], bool)
        assert isinstance(evaluation["incomplete"], bool)
        assert 0 <= evaluation["overall_score"] <= 100


async def test_tools_mode_against_a_server_that_ignores_tools(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, llm_server: Service, tau_events: Path
) -> None:
    # SmolLM2's chat template has no tool calls: llama.cpp ignores `tools` and the model
    # answers in prose. The content-JSON path takes a JSON answer; prose becomes a rule
    # verdict with judge_error invalid_output (or truncated, when the prose runs to the token
    # limit twice) - never a crash, a hang or a made-up verdict.
    evaluations = await judged(
        (kafka_bootstrap, redis_url, tmp_path, llm_server, tau_events),
        "real-tools",
        llm_output_mode="tools",
        llm_tool_choice="auto",
        llm_max_tokens=300,  # prose runs to the limit: keep it short
    )
    for evaluation in evaluations:
        assert (evaluation["judge_status"], evaluation["judge_error"]) in (
            ("ok", None),
            ("fallback", "invalid_output"),
            ("fallback", "truncated"),
        ), evaluation
        if evaluation["judge_status"] == "fallback":
            assert evaluation["overall_score"] == evaluation["rule_score"]


# The online-evaluation design's answer: three scores and reasons, no verdict.
ONLINE_EVALUATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{
            name: {"type": "integer", "minimum": 0, "maximum": 100}
            for name in ("correctness", "relevance", "actionability")
        },
        "reasons": {
            "type": "array",
            "items": {"type": "string", "maxLength": 80},
            "maxItems": 2,
        },
    },
    "required": ["correctness", "relevance", "actionability", "reasons"],
    "additionalProperties": False,
}


async def test_a_real_answer_in_the_online_evaluation_designs_shape_keeps_its_scores(
    llm_server: Service, tau_events: Path
) -> None:
    # the project's own client (request building, the call, parsing) against the real server,
    # asked in json_schema mode for the design's shape instead of final_judge's
    from tracejudge.judges.llm.breaker import CircuitBreaker
    from tracejudge.judges.llm.client import LLMClient, LLMConfig
    from tracejudge.judges.llm.prompt import build_input
    from tracejudge.judges.rules.judge import RuleJudge
    from tracejudge.judges.verdict.conclude import JudgeOutcome, Policy, WindowFacts, conclude
    from tracejudge.models.events import parse_event
    from tracejudge.models.window import assemble_window
    from tracejudge.prompts import JudgePrompt

    (events,) = short_tau_traces(tau_events, uuid.uuid4().hex[:6], 1)
    window = assemble_window(
        events[0]["request_id"],
        [parse_event(json.dumps(e).encode()) for e in events],
        closed_by="final_response",
        step_count=len(events),
        steps_dropped=0,
    )
    prompt = JudgePrompt(
        system="Score the agent run in the data block from 0 to 100 for correctness, "
        "relevance and actionability, with at most two short reasons. Answer in JSON.",
        schema=ONLINE_EVALUATION_SCHEMA,
        version="online-evaluation-shape",
    )
    config = LLMConfig(
        base_url=llm_server.address,
        model=MODEL_ALIAS,
        timeout_s=300,
        max_attempts=1,
        output_mode="json_schema",
        schema_strict=False,
        max_tokens=400,
    )
    client = LLMClient(config, prompt, breaker=CircuitBreaker(3, 30.0))
    try:
        answer = await client.judge(build_input(window, 4000).content)
    finally:
        await client.aclose()
    # the grammar held the model to the design's shape: three scores, no verdict
    scores = (answer.correctness, answer.relevance, answer.actionability)
    assert not answer.has_verdict and None not in scores, answer
    llm_score = answer.llm_score
    assert llm_score is not None and llm_score == round(sum(s or 0 for s in scores) / 3)
    rules = RuleJudge().judge(window)
    e = conclude(
        WindowFacts.of(window), rules, JudgeOutcome("ok", answer=answer), Policy(), "v", 0.0
    ).evaluation
    assert (e.judge_status, e.judge_error, e.llm_score) == ("ok", None, llm_score)
    dims = e.dimension_scores
    assert (dims.correctness, dims.relevance, dims.actionability) == scores  # kept as given
    assert e.overall_score == round(0.6 * rules.rule_score + 0.4 * llm_score)
    assert (e.success, e.incomplete) == (rules.success, rules.incomplete)  # the rules' verdict
    assert [(s.index, s.tool) for s in e.failed_steps] == [
        (s.index, s.tool) for s in rules.failed_steps
    ]
    assert any("no verdict" in reason for reason in e.reasons)


def test_the_docs_recipe_tries_a_teams_criteria_on_a_local_model_server(
    llm_server: Service, tau_events: Path, tmp_path: Path
) -> None:
    """docs/checks.md, "Trying criteria against a local model": its judge.env, pointed at the
    llama.cpp server, its two commands. Form, not opinion: the prompt names the team's
    criteria, and the replay's judged verdicts carry the team's dimension, scored by the real
    server under the schema's grammar, with a row for it in the agreement block."""
    import re
    import subprocess
    import sys

    from tests.realservices import ROOT

    docs = (ROOT / "docs" / "checks.md").read_text()
    recipe = re.search(r"cat > judge\.env <<'ENV'\n(.*?)ENV\n(.*?)```", docs, re.S)
    assert recipe is not None
    settings, commands = recipe.group(1), recipe.group(2)
    settings = settings.replace("http://127.0.0.1:8080/v1", llm_server.address)
    settings = settings.replace("TRACEJUDGE_LLM_MODEL=local", f"TRACEJUDGE_LLM_MODEL={MODEL_ALIAS}")
    # what a 135M model on two cores needs: time, and the room its context has
    settings += "TRACEJUDGE_LLM_TIMEOUT_S=300\nTRACEJUDGE_LLM_MAX_ATTEMPTS=1\n"
    settings += "TRACEJUDGE_LLM_MAX_INPUT_CHARS=6000\nTRACEJUDGE_LLM_MAX_TOKENS=2560\n"
    (tmp_path / "judge.env").write_text(settings)
    (tmp_path / "criteria.toml").write_text(
        '[default]\nversion = "r1"\ncriteria = "Never promise a delivery date."\n'
        '[default.dimensions]\npolicy_compliance = "Does the run follow the airline policy?"\n'
    )
    (events,) = short_tau_traces(tau_events, uuid.uuid4().hex[:6], 1)
    (tmp_path / "recorded.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "labels.json").write_text(json.dumps({events[0]["request_id"]: True}))
    env = {"PATH": "/usr/bin:/bin", "TRACEJUDGE_REDIS_URL": ""}
    ran = []
    for line in commands.strip().splitlines():
        words = line.split("#")[0].split()
        assert words[0] == "tracejudge", line
        command = [sys.executable, "-m", "tracejudge.streams.cli", *words[1:]]
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        ran.append(done)
    prompt, replayed = ran
    assert prompt.returncode == 0, prompt.stderr
    assert (
        "Never promise a delivery date." in prompt.stdout and "policy_compliance" in prompt.stdout
    )
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    (judged,) = [
        json.loads(line)
        for line in (tmp_path / "replayed" / "evaluations-B.jsonl").read_text().splitlines()
    ]
    assert judged["judge_status"] == "ok", judged
    score = judged["dimension_scores"]["criteria"]["policy_compliance"]
    assert isinstance(score, int) and 0 <= score <= 100
    assert "dimension:policy_compliance" in replayed.stdout
