"""Failure modes on the stream: the records that group failed runs by what failed them.

Every verdict that is not a clean pass names its **failure mode** (`FailureMode`, on the
evaluation): a signature made from what the verdict already knows (the failing tool and its
error's template, the intervention that ended it, the team's check, the rule that fired, the
judge's reason), without a model call, with an id stable per agent and a name a person reads.
The publisher sends each final verdict's mode as a `ModeRun` to the internal mode-runs topic,
keyed by agent; the modes agent counts each agent's modes over sliding windows and publishes a
`ModeAlert` on `tracejudge.modes` when one appears, jumps against its own recent past, or goes
quiet again.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tracejudge.models.ids import stable_id

ModeKind = Literal["tool_error", "intervention", "check", "rule", "judge", "other"]
AlertKind = Literal["new", "jump", "quiet"]
NAME_CHARS = 240


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FailureMode(_Record):
    """What a verdict that is not a clean pass failed of (docs/modes.md)."""

    key: str = Field(description="Stable per agent and signature: the same failure, the same key.")
    name: str = Field(
        description='In words: "refund_order fails with HTTP 503 after lookup_order".'
    )
    kind: ModeKind
    tool: str | None = Field(
        default=None, description="The failing tool, or the step's actor or tool the blame names."
    )
    error: str | None = Field(
        default=None, description="The error (or the judge's reason) as a template: ids folded."
    )
    after: str | None = Field(
        default=None, description="The tool called before the failing one (not in the key)."
    )
    rule: str | None = Field(
        default=None, description="The rule, the team's check, or the intervention that named it."
    )


class ModeRun(_Record):
    """One final verdict's mode, as the modes agent counts it (internal, keyed by agent)."""

    type: Literal["mode_run"] = "mode_run"
    agent_name: str | None = None
    agent_version: str | None = None
    request_id: str
    at: float = Field(
        ge=0, allow_inf_nan=False, description="When the verdict was made (the worker's clock)."
    )
    mode: FailureMode | None = Field(
        default=None, description="None: a clean pass, counted in the agent's verdicts."
    )


class ModeTick(_Record):
    """The timer's mark, keyed like an agent's runs: modes gone quiet are found in-stream."""

    type: Literal["mode_tick"] = "mode_tick"
    agent_name: str | None = None
    at: float = Field(ge=0, allow_inf_nan=False)


class ModeAlert(_Record):
    """A failure mode announced on `tracejudge.modes`: it appeared, its rate jumped against its
    own recent past, or it went quiet again. Once per mode and window."""

    type: Literal["mode_alert"] = "mode_alert"
    alert_id: str = Field(description="Deterministic: the agent, mode, kind and window.")
    kind: AlertKind = Field(
        description="new: no run of it in the history before the window; jump: its runs in the "
        "window are TRACEJUDGE_MODES_JUMP times a window's average before; quiet: announced, "
        "and no run of it for a whole window."
    )
    agent_name: str | None = None
    mode: FailureMode
    runs: int = Field(ge=0, description="Its runs in the window ending at `ts`.")
    before: float = Field(ge=0, description="A window's runs on average in the history before it.")
    window_s: float
    first_seen: float
    examples: list[str] = Field(default_factory=list, description="Recent request ids.")
    versions: dict[str, int] = Field(
        default_factory=dict, description="The agent versions of its runs in the window."
    )
    new_in_version: str | None = Field(
        default=None,
        description="The window's runs are all of this agent_version, none before it was: a "
        "mode a deploy brought.",
    )
    version: str | None = Field(
        default=None,
        description="A jump within one agent_version (a canary failing where the rest of the "
        "fleet does not): that version. None: the agent as a whole.",
    )
    after: dict[str, int] = Field(
        default_factory=dict, description="A failing tool's: the tools called before it."
    )
    message: str
    ts: float

    @classmethod
    def id_of(cls, agent: str | None, key: str, kind: str, window: int) -> str:
        return stable_id("mode-alert", agent or "", key, kind, str(window))
