"""Continuations: who to wake, how, and for which events; and what a hook reports."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_WAKE_EVENTS",
    "ContinuationSpec",
    "ContinuationView",
    "DeliveryView",
    "Runtime",
    "SessionReport",
]

# Results and unresolved exceptions: what a waiting agent must hear about.
DEFAULT_WAKE_EVENTS: tuple[str, ...] = (
    "task.terminal",
    "task.retry_exhausted",
    "task.unschedulable",
    "task.stage_in_failed",
    "task.site_lost",
    "group.round_terminal",
    "group.stalled_child",
    "transfer.failed",
)

# Lengths go in max_length, never in the pattern: pydantic-core compiles a bounded repeat of a
# large character class ("[^\s]{1,2000}") into a DFA of ~9 MB per model, measured.
_SESSION = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_PATH = r"^/[^\x00-\x1f]*$"


class Runtime(StrEnum):
    """How a waiting agent is woken."""

    CLAUDE_CODE = "claude-code"  # claude -p --resume SESSION "<payload>" in the session's cwd
    CODEX = "codex"  # codex exec resume SESSION "<payload>"
    COMMAND = "command"  # any program; the payload on stdin
    WEBHOOK = "webhook"  # POST the payload as JSON
    INBOX = "inbox"  # a file that a UserPromptSubmit hook injects into an interactive session


class ContinuationSpec(BaseModel):
    """Carried by a task or group: wake this agent session when one of `events` happens."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    runtime: Runtime
    session_id: str | None = Field(
        default=None, max_length=128, pattern=_SESSION,
        description="Claude session id / Codex thread id; claude-code: default = the session "
        "the SessionStart hook last reported for cwd",
    )  # fmt: skip
    cwd: str | None = Field(
        default=None, max_length=1024, pattern=_PATH, description="the session's folder"
    )
    command: tuple[str, ...] = Field(default=(), max_length=64, description="runtime command")
    url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://\S+$")
    inbox: str | None = Field(
        default=None, max_length=128, pattern=_SESSION, description="inbox name"
    )
    events: tuple[str, ...] = Field(default=DEFAULT_WAKE_EVENTS, max_length=32)

    @model_validator(mode="after")
    def _complete(self) -> Self:
        need: dict[Runtime, tuple[str, object]] = {
            Runtime.COMMAND: ("command", self.command),
            Runtime.WEBHOOK: ("url", self.url),
            Runtime.CODEX: ("session_id", self.session_id),
        }
        if self.runtime in need and not need[self.runtime][1]:
            raise ValueError(f"runtime {self.runtime.value} needs {need[self.runtime][0]}")
        if self.runtime is Runtime.CLAUDE_CODE and not (self.session_id or self.cwd):
            raise ValueError("runtime claude-code needs session_id or cwd")
        for i, arg in enumerate(self.command):
            if "\x00" in arg:
                raise ValueError(f"command[{i}] contains NUL")
        return self


class ContinuationView(BaseModel):
    """A registered continuation (the session id resolved)."""

    model_config = ConfigDict(frozen=True)

    id: str
    subject: str
    spec: ContinuationSpec
    created_at: datetime


class DeliveryView(BaseModel):
    """One event's delivery to one continuation; `dead` after the retry budget."""

    model_config = ConfigDict(frozen=True)

    id: str
    event_id: str
    continuation_id: str
    runtime: Runtime
    state: Literal["pending", "started", "delivered", "dead"]
    attempts: int
    last_error: str | None
    updated_at: datetime
    payload_bytes: int


class SessionReport(BaseModel):
    """What Claude Code's SessionStart hook sends (its stdin JSON, unknown keys ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    session_id: str = Field(max_length=128, pattern=_SESSION)
    cwd: str = Field(max_length=1024, pattern=_PATH)
    transcript_path: str | None = None
    source: str | None = None
    runtime: Runtime = Runtime.CLAUDE_CODE
