"""Redis: where verdicts, timelines and the agreement store are kept."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    Field,
)

# Defaults of the judges' own settings are theirs: written there once, read here.


class RedisSettings(BaseModel):
    """Redis, where agents look verdicts and early-stop decisions up."""

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis URL for verdict look-ups; empty disables Redis.",
    )
    evaluation_ttl_s: int = Field(86400, ge=1, description="TTL of evaluations kept in Redis.")
    agreement_retention_s: int = Field(
        7 * 86400,
        ge=3600,
        description="How long Redis keeps what a final verdict leaves for its outcome (about "
        "150 bytes a request), the outcomes, and the agreement tally they make: an outcome "
        "arriving later than this after its verdict is counted unmatched, and the live "
        "agreement figures cover this period.",
    )
    action_followup_window_s: int = Field(
        3600,
        ge=1,
        description="A follow-up of a reflection request whose verdict comes later than this "
        "after its origin's counts as late in the action figures (tracejudge_action_*), not "
        "as followed up. The origin's verdict is kept for the agreement retention: later "
        "follow-ups are not joined at all.",
    )
    timelines: Literal["all", "flagged", "off"] = Field(
        "flagged",
        description="Which requests keep their steps (clipped to 300 characters and masked) in "
        "Redis beside the evaluation, with the same TTL, for `tracejudge show`: all, flagged "
        "(not passed, not success, or incomplete; every judged one; and every one a team's "
        "check found something in or tracejudge steered or stopped) or off. Masking them "
        "costs about as much as the rules.",
    )
