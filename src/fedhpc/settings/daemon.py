"""The daemon's home and tunables, validated together: `DaemonSettings.from_env()` takes them from
the registry in `fedhpc.settings` (kept apart so the registry imports no pydantic: the
local-process scheduler's every command reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedhpc.errors import FieldIssue, ValidationFailed
from fedhpc.settings import (
    BRIDGE_ATTEMPTS,
    BRIDGE_BACKOFF_S,
    BRIDGE_POLL_S,
    COMMAND_TIMEOUT_S,
    CYCLE_S,
    ESTIMATE_TIMEOUT_S,
    EVENTS_KEEP_DAYS,
    GRACE_S,
    HISTORY_KEEP,
    INTENT_GRACE_S,
    LEASE_S,
    LOOP_WATCH_S,
    PING_TIMEOUT_S,
    PLACE_WAIT_S,
    PROBE_TIMEOUT_S,
    REFRESH_S,
    RESUME_DAEMON_WAIT_S,
    RESUME_START_TIMEOUT_S,
    RESUME_TIMEOUT_S,
    RESUME_WARM_MCP,
    RETRY_WINDOW_S,
    SETTINGS,
    SITE_LOST_S,
    STALL_S,
    SUBMITS_PER_CYCLE,
    Bounds,
    Setting,
    daemon_values,
    fedhpc_home,
)

__all__ = ["DaemonSettings"]


def _tunable(setting: Setting) -> Any:
    """The DaemonSettings field of a tunable: its default, bounds and meaning."""
    bounds = setting.bounds or Bounds()
    return Field(
        default=setting.default,
        gt=bounds.gt,
        ge=bounds.ge,
        le=bounds.le,
        description=setting.meaning,
    )


class DaemonSettings(BaseModel):
    """Where the daemon keeps its socket, store and log (under `home`), and its tunables;
    `from_env` takes them from the environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path
    refresh_s: float = _tunable(REFRESH_S)
    probe_timeout_s: float = _tunable(PROBE_TIMEOUT_S)
    history_keep: int = _tunable(HISTORY_KEEP)
    grace_s: float = _tunable(GRACE_S)
    cycle_s: float = _tunable(CYCLE_S)
    stall_s: float = _tunable(STALL_S)
    bridge_poll_s: float = _tunable(BRIDGE_POLL_S)
    bridge_attempts: int = _tunable(BRIDGE_ATTEMPTS)
    bridge_backoff_s: float = _tunable(BRIDGE_BACKOFF_S)
    resume_timeout_s: float = _tunable(RESUME_TIMEOUT_S)
    resume_warm_mcp: bool = _tunable(RESUME_WARM_MCP)
    resume_daemon_wait_s: float = _tunable(RESUME_DAEMON_WAIT_S)
    resume_start_timeout_s: float = _tunable(RESUME_START_TIMEOUT_S)
    intent_grace_s: float = _tunable(INTENT_GRACE_S)
    site_lost_s: float = _tunable(SITE_LOST_S)
    estimate_timeout_s: float = _tunable(ESTIMATE_TIMEOUT_S)
    command_timeout_s: float = _tunable(COMMAND_TIMEOUT_S)
    ping_timeout_s: float = _tunable(PING_TIMEOUT_S)
    submits_per_cycle: int = _tunable(SUBMITS_PER_CYCLE)
    events_keep_days: float = _tunable(EVENTS_KEEP_DAYS)
    retry_window_s: float = _tunable(RETRY_WINDOW_S)
    place_wait_s: float = _tunable(PLACE_WAIT_S)
    loop_watch_s: float = _tunable(LOOP_WATCH_S)
    lease_s: float = _tunable(LEASE_S)

    @property
    def socket_path(self) -> Path:
        return self.home / "daemon.sock"

    @property
    def db_path(self) -> Path:
        return self.home / "fedhpc.db"

    @property
    def archive_path(self) -> Path:
        return self.home / "archive"

    @property
    def lock_path(self) -> Path:
        return self.home / "daemon.lock"

    @property
    def log_path(self) -> Path:
        return self.home / "daemon.log"

    @classmethod
    def from_env(cls, **overrides: object) -> DaemonSettings:
        """The home and tunables in the environment now; `overrides` (not None) win. A bad
        value from the environment is a ValidationFailed naming its variable."""
        env = daemon_values()
        given = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls.model_validate({"home": fedhpc_home(), **env, **given})
        except ValidationError as exc:
            typed = _invalid(exc, {k: v for k, v in env.items() if k not in given})
            if typed is None:
                raise
            raise typed from None


def _invalid(exc: ValidationError, values: Mapping[str, str]) -> ValidationFailed | None:
    """A typed error naming each variable whose value (in `values`, from `daemon_values`) failed
    `exc`; None when the failure is not about one of them (the caller re-raises `exc`)."""
    by_field = {s.field: s for s in SETTINGS if s.field in values}
    issues = []
    for err in exc.errors():
        if (setting := by_field.get(str(err["loc"][0]) if err["loc"] else "")) is not None:
            expected = setting.type + str(setting.bounds or "")
            reason = f"{values[setting.field or '']!r}: {err['msg']} (expected {expected})"
            issues.append(FieldIssue(setting.name, reason))
    if not issues:
        return None
    names = ", ".join(i.field for i in issues)
    return ValidationFailed(issues, hint=f"Fix or unset {names} (docs/settings.md).")
