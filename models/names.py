"""Every name tracejudge puts on the wire: topics, tables, changelogs, Redis keys, headers.

Topic names here are suffixes: the full name is `Settings.topic_prefix` + suffix (see
`Settings.topic`). Nothing else in the code writes one of these names as a literal.
"""

from __future__ import annotations

# Inputs: what agents publish.
EVENTS = "events"
RESPONSES = "responses"
INPUTS = (EVENTS, RESPONSES)

# Outputs: what tracejudge publishes.
EVALUATIONS = "evaluations"
REFLECTIONS = "reflections"
ALERTS = "alerts"
RETRIES = "retries"
CONTROL = "control"
DLQ = "dlq"
SESSIONS = "sessions"  # session verdicts, one record per revision (models/sessions.py)
MODES = "modes"  # failure modes announced: new, jump, quiet (models/modes.py)
OUTPUTS = (EVALUATIONS, REFLECTIONS, ALERTS, RETRIES, CONTROL, DLQ, SESSIONS, MODES)

# Internal: closed requests waiting for the LLM judge, consumed by the judge stage; the turns
# of sessions (and their ends), keyed by session, consumed by the worker's session agent; each
# final verdict's failure mode, keyed by agent, consumed by the worker's modes agent.
JUDGE_REQUESTS = "judge-requests"
SESSION_TURNS = "session-turns"
MODE_RUNS = "mode-runs"
INTERNAL = (JUDGE_REQUESTS, SESSION_TURNS, MODE_RUNS)

# Faust tables; their changelog topics are created at start like every other topic.
WINDOW_META = "window-meta"
WINDOW_STEPS = "window-steps"
RETRY_STATE = "retry-state"
BASELINES = "baselines"  # each agent's normal, per partition (worker/baselines.py)
SESSION_STATE = "session-state"  # each open or recent session's turns (streams/sessions/)
MODE_STATE = "mode-state"  # each agent's failure modes over the last hour (streams/modes/)
TABLES = (WINDOW_META, WINDOW_STEPS, RETRY_STATE, BASELINES, SESSION_STATE, MODE_STATE)

# Consumer group of the judge stage: `{app_id}` + this suffix.
JUDGE_GROUP_SUFFIX = "-judge"


def changelog_topic(app_id: str, table: str) -> str:
    """Faust's own naming, so that the worker finds the changelog topics created at start."""
    return f"{app_id}-{table}-changelog"


# Redis keys.
REDIS_EVALUATION_KEY = "tracejudge:evaluation:{request_id}"
REDIS_CONTROL_KEY = "tracejudge:control:{request_id}"
REDIS_TIMELINE_KEY = "tracejudge:timeline:{request_id}"  # masked steps, beside the evaluation
# a session's verdicts: each revision under its number (never overwritten), and the latest
REDIS_SESSION_KEY = "tracejudge:session:{session}"
REDIS_SESSION_REVISION_KEY = "tracejudge:session:{session}:{revision}"
REDIS_LLM_PREFIX = "tracejudge:llm"  # rate limit counters, worker heartbeats, budgets

# Headers.
MARKER_HEADER = "tracejudge-marker"  # on idle-close and purge markers in the events topic
DLQ_ERROR_CLASS = "tracejudge-error-class"
DLQ_ERROR = "tracejudge-error"
DLQ_ORIGINAL_TOPIC = "tracejudge-original-topic"
DLQ_ORIGINAL_PARTITION = "tracejudge-original-partition"
DLQ_ORIGINAL_OFFSET = "tracejudge-original-offset"
DLQ_ORIGINAL_SIZE = "tracejudge-original-size"  # bytes of the original value
DLQ_STUB = "tracejudge-stub"  # "true": the value is a description, the original was too large
DLQ_ORIGINAL_SHA256 = "tracejudge-original-sha256"  # hex digest of the original value
DLQ_PAYLOAD = "tracejudge-payload"  # keep | mask | drop: what the value is (TRACEJUDGE_DLQ_PAYLOAD)
