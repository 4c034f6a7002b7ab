"""One frozen settings object, read from TRACEJUDGE_* environment variables or a file."""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

CONFIG_FILE_ENV = "TRACEJUDGE_CONFIG_FILE"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRACEJUDGE_", frozen=True, extra="ignore")

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis URL for verdict look-ups; empty disables Redis.",
    )
    topic_prefix: str = Field("tracejudge.", description="Prefix of every topic name.")
    partitions: int = Field(4, ge=1, description="Partitions of every topic the worker creates.")
    replication_factor: int = Field(1, ge=1, description="Replication factor of created topics.")
    app_id: str = Field("tracejudge", description="Consumer group and changelog topic prefix.")
    data_dir: str = Field(".tracejudge-data", description="Worker's local state directory.")
    web_host: str = Field("127.0.0.1", description="Address of the worker's web server.")
    web_port: int = Field(6066, description="Port of the worker's web server (GET /health).")
    idle_timeout_s: float = Field(300.0, gt=0, description="Close a window after this idle time.")
    idle_check_interval_s: float = Field(
        5.0, gt=0, description="How often idle windows are looked for."
    )
    closed_retention_s: float = Field(
        3600.0, ge=0, description="How long a closed request is remembered to drop late events."
    )
    max_trace_steps: int = Field(50, ge=1, description="Steps kept in detail per request.")
    warn_threshold: int = Field(60, ge=0, le=100, description="Scores below it raise an alert.")
    enable_reflection: bool = Field(True, description="Emit reflection requests.")
    max_reflection_rounds: int = Field(2, ge=0, description="Reflection rounds before giving up.")
    evaluation_ttl_s: int = Field(86400, ge=1, description="TTL of evaluations kept in Redis.")
    tool_call_budget: int = Field(25, ge=1, description="Tool calls before efficiency drops.")
    embedded_broker_timing: bool = Field(
        False, description="Short group timeouts for the embedded demo broker (Tansu) only."
    )
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def masked(self) -> dict[str, Any]:
        """Settings as a dict, secrets masked: safe to log."""
        return {
            k: ("***" if isinstance(v, SecretStr) and v.get_secret_value() else v)
            for k, v in ((k, getattr(self, k)) for k in type(self).model_fields)
        }


def load_settings(config_file: str | None = None) -> Settings:
    """Environment wins over the file (dotenv syntax), which wins over defaults."""
    path = config_file or os.environ.get(CONFIG_FILE_ENV)
    if path:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"config file not found: {path}")
        return Settings(_env_file=path)  # type: ignore[call-arg]
    return Settings()


def describe_settings() -> str:
    """One line per setting, for --help."""
    lines = []
    for name, info in Settings.model_fields.items():
        default = (
            info.default.get_secret_value()
            if isinstance(info.default, SecretStr)
            else (info.default)
        )
        shown = "(secret)" if name.endswith("api_key") else repr(default)
        lines.append(f"  TRACEJUDGE_{name.upper():<28} {info.description} Default: {shown}")
    return "\n".join(lines)
