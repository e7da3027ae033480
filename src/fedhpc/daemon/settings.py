"""Where the daemon keeps its socket, store and log, and how often it refreshes."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedhpc.profiles.loader import fedhpc_home
from fedhpc.settings import daemon_values, invalid

__all__ = ["DaemonSettings"]


class DaemonSettings(BaseModel):
    """Daemon settings; `from_env` takes the home and the tunables from `fedhpc.settings`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path
    refresh_s: float = Field(default=60.0, gt=0, description="collector refresh interval")
    probe_timeout_s: float = Field(default=30.0, gt=0)
    history_keep: int = Field(default=1440, ge=1, description="snapshots kept per site")
    grace_s: float = Field(default=10.0, ge=0, description="SIGTERM grace before cancelling")
    cycle_s: float = Field(default=10.0, gt=0, description="orchestrator control cycle")
    bridge_poll_s: float = Field(default=1.0, gt=0, description="resume bridge poll")
    bridge_attempts: int = Field(default=4, ge=1, description="resumes tried before dead")
    bridge_backoff_s: float = Field(default=5.0, gt=0, description="first retry delay, doubling")
    resume_timeout_s: float = Field(
        default=1800.0, gt=0, description="a resumed turn is killed after this long"
    )
    resume_warm_mcp: bool = Field(
        default=True, description="Claude resumes use one warm HTTP MCP server (else stdio)"
    )
    resume_start_timeout_s: float = Field(
        default=120.0, gt=0, description="...or when the model has not answered it by then"
    )
    intent_grace_s: float = Field(
        default=45.0, ge=1, description="after a crash, resubmit an unseen intent this late"
    )
    site_lost_s: float = Field(
        default=300.0, ge=0, description="offline this long: stuck work wakes the agent"
    )
    estimate_timeout_s: float = Field(
        default=2.0, gt=0, le=60,
        description="placement waits this long for a site's sbatch --test-only answer",
    )  # fmt: skip
    submits_per_cycle: int = Field(
        default=100, ge=1, le=10_000,
        description="new jobs sent to one site per control cycle at most (good citizenship)",
    )  # fmt: skip
    events_keep_days: float = Field(
        default=30.0, ge=0, le=3650,
        description="delivered events older than this move to <home>/archive (0: never)",
    )  # fmt: skip
    retry_window_s: float = Field(
        default=120.0, ge=0, le=86400,
        description="the same request from the same caller this soon is a retry (same task)",
    )  # fmt: skip

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
        env = daemon_values()
        given = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls.model_validate({"home": fedhpc_home(), **env, **given})
        except ValidationError as exc:
            typed = invalid(exc, {k: v for k, v in env.items() if k not in given})
            if typed is None:
                raise
            raise typed from None
