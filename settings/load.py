"""Every setting in one frozen object, read from TRACEJUDGE_* variables or a file."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable
from typing import Any

from dotenv import dotenv_values
from pydantic import (
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from tracejudge.judges.agreement.calibration import CalibrationBook, CalibrationRule
from tracejudge.judges.checks.book import CheckBook
from tracejudge.judges.inflight.budgets import BudgetBook
from tracejudge.judges.inflight.early_stop import EarlyStopPolicy
from tracejudge.judges.inflight.loops import LoopRules
from tracejudge.judges.llm.criteria import CriteriaBook
from tracejudge.judges.masking.redact import mask

# Defaults of the judges' own settings are theirs: written there once, read here.
from tracejudge.judges.verdict.conclude import Policy
from tracejudge.settings.judge import JudgeSettings
from tracejudge.settings.kafka import KafkaSettings
from tracejudge.settings.operation import OperationSettings
from tracejudge.settings.problems import (
    CONFIG_FILE_ENV,
    NOT_SETTINGS,
    PREFIX,
    RENAMED,
    SettingProblem,
    SettingsError,
)
from tracejudge.settings.redis import RedisSettings
from tracejudge.settings.rules import RuleSettings


class Settings(
    BaseSettings, JudgeSettings, RuleSettings, RedisSettings, KafkaSettings, OperationSettings
):
    """Every setting, from TRACEJUDGE_* variables or a file; the groups above say what each is
    about, the variable names are the fields' (TRACEJUDGE_ + name). The groups are listed in
    reverse: pydantic takes the last base's fields first, so --help reads operation first."""

    model_config = SettingsConfigDict(env_prefix="TRACEJUDGE_", frozen=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _judge_on_when_configured(cls, values: Any) -> Any:
        # the design judges with the LLM by default; one cannot without an endpoint, so a
        # configured endpoint switches it on unless the setting says otherwise
        if isinstance(values, dict) and values.get("llm_judge_enabled") in (None, ""):
            configured = any(
                str(values.get(name) or "").strip() for name in ("llm_base_url", "llm_api_key")
            )
            values = {**values, "llm_judge_enabled": configured}
        return values

    def verdict_policy(self, calibrations: CalibrationBook | None = None) -> Policy:
        """`calibrations`: the book a calibration refresher fills (one per process, shared
        by every policy it builds); None, or the calibration off: the fixed threshold."""
        return Policy(
            warn_threshold=self.warn_threshold,
            reflection_enabled=self.reflection_enabled,
            max_reflection_rounds=self.max_reflection_rounds,
            rule_weight=self.rule_weight,
            max_iterations=self.max_iterations,
            calibrations=calibrations if self.calibration_enabled else None,
            criteria=self._criteria_book,
        )

    def calibration_rule(self) -> CalibrationRule:
        return CalibrationRule(
            self.calibration_target,
            self.calibration_min_ok_runs,
            self.calibration_min_failed_runs,
        )

    def loop_rules(self) -> LoopRules:
        return LoopRules(
            self.loop_repeat, self.loop_cycles, self.loop_same_failure, self.loop_no_new_result
        )

    def budget_book(self) -> BudgetBook:
        """The budgets file as read and checked at start (BudgetsError named what was wrong)."""
        return self._budget_book

    def criteria_book(self) -> CriteriaBook:
        """The teams' criteria for the LLM judge, as read and checked at start."""
        return self._criteria_book

    def check_book(self) -> CheckBook:
        """The team's checks as read and checked at start."""
        return self._check_book

    def early_stop_policy(self) -> EarlyStopPolicy:
        return EarlyStopPolicy(
            self.min_iterations, self.early_stop_consecutive, self.max_iterations
        )

    def topic(self, name: str) -> str:
        """Full name of a topic from its suffix in `names.py`."""
        return f"{self.topic_prefix}{name}"

    def masked(self) -> dict[str, Any]:
        """Settings as a dict, secrets masked (secret settings, and passwords or tokens inside
        any other value, such as a Redis URL): safe to log."""
        return {
            k: (
                "***"
                if isinstance(v, SecretStr) and v.get_secret_value()
                else mask(v)
                if isinstance(v, str)
                else v
            )
            for k, v in ((k, getattr(self, k)) for k in type(self).model_fields)
        }


def changed_settings(settings: Settings, width: int = 80) -> str:
    """The settings that differ from their defaults, masked, each value clipped to `width`:
    what a start logs. Every setting, masked, made a 3,000-character first line that hid the
    few that mattered; `tracejudge status` still shows them all."""
    parts = []
    for name, value in settings.masked().items():
        default = type(settings).model_fields[name].get_default(call_default_factory=True)
        given = getattr(settings, name)
        # a None default means "decided from other settings" (the judge is off when no
        # endpoint is configured): a false value there is that decision, not a change
        if given == default or (default is None and not given):
            continue
        shown = repr(value)
        parts.append(f"{name}={shown[: width - 1] + '…' if len(shown) > width else shown}")
    return ", ".join(parts) or "(all defaults)"


def load_settings(config_file: str | None = None) -> Settings:
    """Environment wins over the file (dotenv syntax), which wins over defaults. An unknown
    TRACEJUDGE_ variable or file key, or a bad value, is a SettingsError naming it."""
    path = config_file or os.environ.get(CONFIG_FILE_ENV)
    problems = unknown_names(k for k in os.environ if k.upper().startswith(PREFIX))
    if path:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"config file not found: {path}")
        problems += [f"{path}: {p}" for p in unknown_names(dotenv_values(path))]
    if problems:
        raise SettingsError(problems)
    renamed = _renamed(path)
    try:
        if path:
            return Settings(_env_file=path, **renamed)  # type: ignore[call-arg]
        return Settings(**renamed)
    except ValidationError as exc:
        raise SettingsError([_bad_value(error) for error in exc.errors()]) from None


def _renamed(path: str | None) -> dict[str, Any]:
    """Values given under an old name, as the new name's: the environment's before the file's,
    and none when the new name is given anywhere (the new name wins)."""

    def full(key: str) -> str:
        return key.upper() if key.upper().startswith(PREFIX) else PREFIX + key.upper()

    sources = [("environment", {k.upper(): v for k, v in os.environ.items()})]
    if path:
        sources.append((path, {full(k): v or "" for k, v in dotenv_values(path).items()}))
    values: dict[str, Any] = {}
    for old, new in RENAMED.items():
        old_name, new_name = full(old), full(new)
        for where, given in sources:
            if old_name not in given:
                continue
            sys.stderr.write(f"tracejudge: {old_name} ({where}) is deprecated: use {new_name}\n")
            if not any(new_name in g for _, g in sources):
                values.setdefault(new, given[old_name])
    return values


def unknown_names(keys: Iterable[str]) -> list[str]:
    """ "unknown setting TRACEJUDGE_WARN_TRESHOLD (did you mean TRACEJUDGE_WARN_THRESHOLD?)"."""
    known = [PREFIX + name.upper() for name in Settings.model_fields]
    problems = []
    for key in keys:
        name = key.upper() if key.upper().startswith(PREFIX) else PREFIX + key.upper()
        if name in known or name in NOT_SETTINGS or name[len(PREFIX) :].lower() in RENAMED:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"unknown setting {key}{hint}")
    return problems


def _bad_value(error: Any) -> str:
    """One problem in one line, beginning with the setting it is about (and its value), or
    with "settings:" when it is about several: a check across settings (a model validator)
    has no field of its own, and names its settings in a `SettingProblem`."""
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, SettingProblem):
        names, said = list(cause.names), cause.message
    else:
        loc = "_".join(str(part) for part in error.get("loc", ()))
        names, said = [loc] if loc else [], str(error.get("msg", "invalid value"))
    if len(names) != 1:
        return f"settings: {said.removeprefix('Value error, ')}"
    value = error.get("input")
    # a check across settings is given them all (a dict): its message says the values
    plain = not isinstance(cause, SettingProblem) and not isinstance(value, dict)
    shown = f"={str(value)[:80]!r}" if plain else ""
    return f"{PREFIX}{names[0].upper()}{shown}: {said}"


def describe_settings() -> str:
    """One line per setting, for --help."""
    lines = []
    for name, info in Settings.model_fields.items():
        default = (
            info.default.get_secret_value()
            if isinstance(info.default, SecretStr)
            else (info.default)
        )
        shown = repr(default) if default is not None else "unset"
        shown = "(secret)" if name.endswith("api_key") else shown
        lines.append(f"  TRACEJUDGE_{name.upper():<28} {info.description} Default: {shown}")
    return "\n".join(lines)
